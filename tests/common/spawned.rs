//! A tool under test as a process: its stdout read line by line, its
//! stderr collected (or held unread), signalled with kill(1), and killed
//! with anything it left stopped when the test ends.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::procs::kill;

/// Longest wait for a line or an exit; only reached on failure.
pub const WAIT: Duration = Duration::from_secs(30);

pub struct Spawned {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    stderr: Arc<Mutex<String>>,
    /// A stderr held open and never read (a stuck stream).
    _unread: Option<ChildStderr>,
}

impl Spawned {
    /// Spawn `cmd` with stdout and stderr piped; stderr is collected, or
    /// with `read_stderr` false held open and never read.
    pub fn start(cmd: &mut Command, read_stderr: bool) -> Spawned {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel();
        let out = BufReader::new(child.stdout.take().unwrap());
        thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let err = child.stderr.take().unwrap();
        let unread = if read_stderr {
            let log = stderr.clone();
            thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    let mut log = log.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
            });
            None
        } else {
            Some(err)
        };
        Spawned {
            child,
            lines,
            stderr,
            _unread: unread,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it wrote on stderr so far (nothing when it is not read).
    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Skip `NEW_LEADER` lines on stdout up to `line`.
    pub fn expect(&self, line: &str) {
        loop {
            let got = self
                .lines
                .recv_timeout(WAIT)
                .unwrap_or_else(|e| panic!("waiting for {line:?}: {e}; stderr: {}", self.log()));
            if got == line {
                return;
            }
            assert!(
                got.starts_with("NEW_LEADER "),
                "{got:?} before {line:?}; stderr: {}",
                self.log()
            );
        }
    }

    /// Wait at most `limit` for the stdout line `line`, skipping others;
    /// false when it did not come.
    pub fn wait_for(&self, line: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(got) if got == line => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    }

    /// The stdout lines printed so far and not yet expected.
    pub fn printed(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }

    /// `kill SIG PID`.
    pub fn signal(&self, sig: &str) {
        kill(&[sig, &self.pid().to_string()]);
    }

    /// Its exit code once it exits (within [`WAIT`]).
    pub fn exit_code(&mut self) -> Option<i32> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "process {} did not exit; stderr: {}",
                self.pid(),
                self.log()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Spawned {
    /// A failed test leaves it neither stopped nor running.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-CONT", &self.pid().to_string()])
                .stderr(Stdio::null())
                .status();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
