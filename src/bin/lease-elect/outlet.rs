//! Lines to stderr or stdout that never hold up the caller.
//!
//! A stream nobody drains (a stalled container-log pipe, `2>&1 | less`
//! paused, Ctrl-S on a terminal) blocks every write(2) to it. A line
//! written while a term ends would then decide how long the term lasts: the
//! elector thread blocked in a log call, the main loop before it signals
//! COMMAND, the supervisor before it kills. So no thread but one writer per
//! stream ever writes to it: callers queue lines on a bounded queue and
//! move on; when the queue is full the line is dropped and counted, and the
//! count is reported once the stream has drained (the queue is empty
//! again).
//!
//! The stream's descriptor stays blocking: its open file description is
//! shared with COMMAND and with whoever started `lease-elect`, and
//! `O_NONBLOCK` on it would change their writes too. The writer owns a
//! duplicate of the descriptor (`F_DUPFD_CLOEXEC`), so it never takes std's
//! lock on `Stderr`/`Stdout` either.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// What to say once the stream drains after `n` lines were dropped: a line
/// for the stream itself, or `None` when it is said elsewhere.
pub type Report = Box<dyn Fn(u64) -> Option<String> + Send>;

enum Item {
    Line(String),
    /// Answered once every line queued before it has been written.
    Flush(mpsc::Sender<()>),
}

/// The sending side of one stream's writer thread. Cheap to clone.
#[derive(Clone)]
pub struct Outlet {
    /// `None` when the writer could not be started: lines are dropped.
    tx: Option<SyncSender<Item>>,
    dropped: Arc<AtomicU64>,
}

impl Outlet {
    /// A writer for this process's stderr, holding at most `capacity` lines.
    pub fn stderr(capacity: usize, report: Report) -> Outlet {
        let fd = std::io::stderr().as_fd().try_clone_to_owned();
        Outlet::start("lease-elect/stderr", fd.map(File::from), capacity, report)
    }

    /// A writer for this process's stdout, holding at most `capacity` lines.
    pub fn stdout(capacity: usize, report: Report) -> Outlet {
        let fd = std::io::stdout().as_fd().try_clone_to_owned();
        Outlet::start("lease-elect/stdout", fd.map(File::from), capacity, report)
    }

    fn start(name: &str, stream: std::io::Result<File>, capacity: usize, report: Report) -> Outlet {
        let dropped = Arc::new(AtomicU64::new(0));
        // A closed stream (no descriptor to duplicate): nothing can be said.
        let Ok(stream) = stream else {
            return Outlet { tx: None, dropped };
        };
        let (tx, rx) = mpsc::sync_channel(capacity);
        let counter = dropped.clone();
        let started = thread::Builder::new()
            .name(name.into())
            .spawn(move || write_lines(stream, &rx, &counter, &*report));
        Outlet {
            tx: started.ok().map(|_| tx),
            dropped,
        }
    }

    /// Queue `line` (without its newline); drop it if the queue is full.
    pub fn send(&self, line: String) {
        let Some(tx) = &self.tx else { return };
        match tx.try_send(Item::Line(line)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            // The writer ended (a panic): nothing more can be said.
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// Wait at most `within` for every line queued so far to be written;
    /// false when they were not (the stream is stuck, or the queue full).
    pub fn flush(&self, within: Duration) -> bool {
        let Some(tx) = &self.tx else { return true };
        let (ack, done) = mpsc::channel();
        tx.try_send(Item::Flush(ack)).is_ok() && done.recv_timeout(within).is_ok()
    }
}

/// The writer thread: write each line as it comes, blocking as long as the
/// stream does; report what was dropped whenever the queue runs empty.
fn write_lines(
    mut stream: File,
    rx: &Receiver<Item>,
    dropped: &AtomicU64,
    report: &dyn Fn(u64) -> Option<String>,
) {
    loop {
        let item = match rx.try_recv() {
            Ok(item) => item,
            Err(TryRecvError::Empty) => {
                let n = dropped.swap(0, Ordering::Relaxed);
                if n > 0 {
                    if let Some(line) = report(n) {
                        let _ = write_line(&mut stream, line);
                    }
                }
                match rx.recv() {
                    Ok(item) => item,
                    Err(_) => return,
                }
            }
            Err(TryRecvError::Disconnected) => return,
        };
        match item {
            // A closed pipe (EPIPE) or a full disk: the line is lost, as
            // with any write to a stream nobody reads.
            Item::Line(line) => {
                let _ = write_line(&mut stream, line);
            }
            Item::Flush(ack) => {
                let _ = ack.send(());
            }
        }
    }
}

/// One write(2) per line where the stream takes it whole: lines from
/// several processes sharing a pipe do not interleave (up to `PIPE_BUF`).
fn write_line(stream: &mut File, mut line: String) -> std::io::Result<()> {
    line.push('\n');
    stream.write_all(line.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    /// An outlet over one end of a socket pair, the other end returned.
    fn over_socket(capacity: usize) -> (Outlet, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let file = File::from(std::os::fd::OwnedFd::from(ours));
        let report: Report = Box::new(|n| Some(format!("{n} dropped")));
        (Outlet::start("test", Ok(file), capacity, report), theirs)
    }

    #[test]
    fn lines_arrive_in_order_and_a_flush_waits_for_them() {
        let (out, mut theirs) = over_socket(8);
        out.send("one".into());
        out.send("two".into());
        assert!(out.flush(Duration::from_secs(10)));
        let mut buf = [0u8; 8];
        theirs.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"one\ntwo\n");
    }

    #[test]
    fn a_stream_nobody_reads_never_blocks_the_sender_and_the_drops_are_counted() {
        let (out, mut theirs) = over_socket(4);
        // Far more than the socket buffer and the queue hold together.
        let line = "x".repeat(1000);
        for _ in 0..10_000 {
            out.send(line.clone());
        }
        assert!(
            !out.flush(Duration::from_millis(50)),
            "stuck, so not flushed"
        );
        assert!(out.dropped.load(Ordering::Relaxed) > 0);
        // Drain: every line is either written or counted in a report.
        theirs
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut text = Vec::new();
        let mut buf = [0u8; 65536];
        // Complete lines only: a read may end inside one.
        let accounted = |text: &str| -> usize {
            text[..text.rfind('\n').map_or(0, |i| i + 1)]
                .lines()
                .map(|l| match l.strip_suffix(" dropped") {
                    Some(n) => n.parse().unwrap(),
                    None if l == line => 1,
                    None => panic!("unexpected line {l:?}"),
                })
                .sum()
        };
        while accounted(&String::from_utf8_lossy(&text)) < 10_000 {
            let n = theirs.read(&mut buf).unwrap();
            assert!(n > 0);
            text.extend_from_slice(&buf[..n]);
        }
        assert_eq!(accounted(&String::from_utf8(text).unwrap()), 10_000);
    }
}
