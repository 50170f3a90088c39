//! Connection accounting: the connections being served, what each is
//! doing, and which to close when a new one needs room (see the
//! [module docs](super) for the policy).

use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// How many connections may be open at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// In all.
    pub(crate) total: usize,
    /// From one peer address.
    pub(crate) per_peer: usize,
}

impl Limits {
    /// No limit: every connection is admitted.
    #[cfg(test)]
    pub(crate) const NONE: Limits = Limits {
        total: usize::MAX,
        per_peer: usize::MAX,
    };
}

const WAITING: u8 = 0;
const BUSY: u8 = 1;
const ANSWERED: u8 = 2;

/// What a connection is doing, set by its thread and read by the
/// accepting thread when it needs room. Starts as waiting.
#[derive(Debug, Clone, Default)]
pub(crate) struct Phase(Arc<AtomicU8>);

impl Phase {
    /// Waiting for (the rest of) a request head: may be closed for room.
    pub(crate) fn waiting(&self) {
        self.0.store(WAITING, Ordering::SeqCst);
    }

    /// A complete head arrived; the request is being served.
    pub(crate) fn busy(&self) {
        self.0.store(BUSY, Ordering::SeqCst);
    }

    /// The answer is written; only a lingering close is left.
    pub(crate) fn answered(&self) {
        self.0.store(ANSWERED, Ordering::SeqCst);
    }

    fn get(&self) -> u8 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A connection being served: its peer, a handle on its socket (to cut it
/// off), its thread and what it is doing.
#[derive(Debug)]
struct Entry {
    peer: IpAddr,
    socket: TcpStream,
    thread: JoinHandle<()>,
    phase: Phase,
}

/// Whether a new connection may be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    Admit,
    /// Every connection in the way is busy: refuse this one.
    Busy,
}

/// The connections of one server, oldest first, and the threads of the
/// ones closed to make room (joined once they end).
#[derive(Debug)]
pub(crate) struct Connections {
    limits: Limits,
    open: Vec<Entry>,
    closing: Vec<JoinHandle<()>>,
}

/// One peer: IPv4-mapped IPv6 addresses are the IPv4 peer they stand for.
fn peer_key(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

impl Connections {
    pub(crate) fn new(limits: Limits) -> Self {
        Connections {
            limits,
            open: Vec::new(),
            closing: Vec::new(),
        }
    }

    /// Make room for a new connection from `peer`: forget the connections
    /// whose thread ended, then close, oldest first, the connections over
    /// the peer's share and over the total that can be closed (see the
    /// [module docs](super)).
    pub(crate) fn admit(&mut self, peer: IpAddr) -> Admission {
        self.reap();
        let peer = peer_key(peer);
        loop {
            let state: Vec<(IpAddr, u8)> =
                self.open.iter().map(|e| (e.peer, e.phase.get())).collect();
            match victim(&state, peer, self.limits) {
                Room::Free => return Admission::Admit,
                Room::Full => return Admission::Busy,
                Room::Close(i) => {
                    let e = self.open.remove(i);
                    log::debug!("closing a connection from {} to make room", e.peer);
                    // Unblocks its thread's read; the thread then ends.
                    let _ = e.socket.shutdown(Shutdown::Both);
                    self.closing.push(e.thread);
                }
            }
        }
    }

    /// Count a connection admitted by [`admit`](Self::admit).
    pub(crate) fn insert(
        &mut self,
        peer: IpAddr,
        socket: TcpStream,
        thread: JoinHandle<()>,
        phase: Phase,
    ) {
        self.open.push(Entry {
            peer: peer_key(peer),
            socket,
            thread,
            phase,
        });
    }

    /// How many connections are being served.
    #[cfg(test)]
    pub(crate) fn open_count(&mut self) -> usize {
        self.reap();
        self.open.len()
    }

    /// Join the threads that ended.
    fn reap(&mut self) {
        let (done, live): (Vec<_>, Vec<_>) =
            self.open.drain(..).partition(|e| e.thread.is_finished());
        self.open = live;
        let (closed, closing): (Vec<_>, Vec<_>) =
            self.closing.drain(..).partition(JoinHandle::is_finished);
        self.closing = closing;
        for thread in done.into_iter().map(|e| e.thread).chain(closed) {
            let _ = thread.join();
        }
    }

    /// Cut every connection off and join every thread.
    pub(crate) fn close_all(&mut self) {
        for e in &self.open {
            // Unblocks the thread's read or write; it then ends.
            let _ = e.socket.shutdown(Shutdown::Both);
        }
        let threads = self.open.drain(..).map(|e| e.thread);
        for thread in threads.chain(self.closing.drain(..)).collect::<Vec<_>>() {
            let _ = thread.join();
        }
    }
}

/// What making room for a connection from `peer` takes, given the open
/// connections (peer, phase), oldest first.
#[derive(Debug, PartialEq, Eq)]
enum Room {
    Free,
    /// Close the connection at this index, then look again.
    Close(usize),
    Full,
}

fn victim(open: &[(IpAddr, u8)], peer: IpAddr, limits: Limits) -> Room {
    let closable = |only: Option<IpAddr>| {
        [WAITING, ANSWERED].into_iter().find_map(|phase| {
            open.iter()
                .position(|&(p, ph)| ph == phase && only.is_none_or(|o| o == p))
        })
    };
    let mine = open.iter().filter(|(p, _)| *p == peer).count();
    if mine >= limits.per_peer {
        // A peer over its share makes room among its own connections only.
        return closable(Some(peer)).map_or(Room::Full, Room::Close);
    }
    if open.len() >= limits.total {
        return closable(None).map_or(Room::Full, Room::Close);
    }
    Room::Free
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    const SMALL: Limits = Limits {
        total: 4,
        per_peer: 2,
    };

    #[test]
    fn within_the_limits_nothing_is_closed() {
        assert_eq!(victim(&[], ip(1), SMALL), Room::Free);
        let open = [(ip(1), WAITING), (ip(2), BUSY), (ip(3), WAITING)];
        assert_eq!(victim(&open, ip(1), SMALL), Room::Free);
        assert_eq!(victim(&open, ip(1), Limits::NONE), Room::Free);
    }

    #[test]
    fn when_full_the_oldest_connection_without_a_request_goes_first() {
        let open = [
            (ip(1), BUSY),
            (ip(2), ANSWERED),
            (ip(3), WAITING),
            (ip(4), WAITING),
        ];
        assert_eq!(victim(&open, ip(5), SMALL), Room::Close(2));
        // Then one whose answer is already written.
        let open = [
            (ip(1), BUSY),
            (ip(2), ANSWERED),
            (ip(3), BUSY),
            (ip(4), BUSY),
        ];
        assert_eq!(victim(&open, ip(5), SMALL), Room::Close(1));
        // Never one being served.
        let open = [(ip(1), BUSY); 4];
        assert_eq!(victim(&open, ip(5), SMALL), Room::Full);
    }

    #[test]
    fn a_peer_over_its_share_only_closes_its_own() {
        let open = [(ip(2), WAITING), (ip(1), BUSY), (ip(1), WAITING)];
        assert_eq!(victim(&open, ip(1), SMALL), Room::Close(2));
        let open = [(ip(2), WAITING), (ip(1), BUSY), (ip(1), BUSY)];
        assert_eq!(victim(&open, ip(1), SMALL), Room::Full);
    }

    #[test]
    fn an_ipv4_mapped_address_is_the_ipv4_peer() {
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(peer_key(mapped), ip(1));
    }
}
