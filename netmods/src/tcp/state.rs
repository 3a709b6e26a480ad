//! The connection table both backends drive: peers (per-peer send queue
//! and connection), sockets (handshake state, receive side), and the rules
//! that decide which connection a pair keeps and when a peer has failed.
//! Backends do the I/O and call in here with what happened; nothing here
//! makes a system call except creating and closing sockets.
//!
//! Tie-break of a simultaneous connect: the connection initiated by the
//! lower rank wins. An acceptor of a HELLO from rank Q accepts unless it
//! has initiated a connection to Q itself (pending or accepted) and Q is
//! the higher rank. A rejected connector closes its socket and waits for
//! the peer's connection, which it will accept. Messages wait in the
//! peer's queue until the peer has an accepted connection, so nothing but
//! the HELLO is ever written to a losing socket.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;

use crate::{FxBuildHasher, PeerId, Sink};

use super::conn::{Outq, Rx};
use super::sys::{self, SockAddr};
use super::wire::{self, Hello, Verdict, HELLO_MAX, KIND_RANK, VERDICT_LEN};

pub(crate) type PeerMap = HashMap<PeerId, Peer, FxBuildHasher>;

/// A socket slot plus the generation it had when an id was handed out:
/// completions for a reused slot are recognised as stale.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct SockId {
    pub slot: u32,
    pub gen: u32,
}

#[derive(Default)]
pub(crate) struct Peer {
    /// From the card given to `connect`; empty if the peer connected to us.
    pub addrs: Vec<SocketAddr>,
    /// The connect was started (lazily, by the first message).
    pub started: bool,
    /// The connection we initiated, while pending or accepted.
    pub mine: Option<SockId>,
    /// The accepted connection (ours or theirs): frames go here.
    pub conn: Option<SockId>,
    /// `conn`'s handshake is fully written: frames may follow.
    pub open: bool,
    pub failed: Option<String>,
    pub out: Outq,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Connector: connect in progress to `addrs[addr]`.
    Connecting {
        addr: usize,
    },
    /// Connector: HELLO going out, verdict awaited.
    Hello {
        addr: usize,
    },
    /// Acceptor: HELLO awaited.
    AwaitHello,
    /// Acceptor: verdict going out; then open (accept) or closed.
    Verdict {
        accept: bool,
    },
    Open,
    /// Being torn down; released once no io_uring operation uses it.
    Closing,
}

/// Fixed buffers for the handshake, boxed so io_uring can point at them.
pub(crate) struct Handshake {
    pub out: [u8; HELLO_MAX],
    pub out_len: usize,
    pub out_pos: usize,
    pub inb: [u8; HELLO_MAX],
    pub in_len: usize,
}

pub(crate) struct Sock {
    pub fd: OwnedFd,
    pub gen: u32,
    pub phase: Phase,
    /// Connector: the target. Acceptor: set once the HELLO is accepted.
    pub peer: Option<PeerId>,
    pub hs: Box<Handshake>,
    /// Receive side, from acceptance on.
    pub rx: Option<Rx>,
    /// Connect target, boxed: io_uring reads it while CONNECT is in flight.
    pub addr: Box<SockAddr>,
    /// io_uring operations in flight (backend-defined bits); 0 for poll.
    pub io: u8,
    /// The SEND in flight reads `hs.out` (else the peer's queue).
    pub send_hs: bool,
    /// In the state's `dirty` list.
    pub dirty: bool,
    /// `shutdown` done (io_uring teardown).
    pub shut: bool,
    /// A peer failure to report once the socket is released.
    report: Option<(PeerId, String)>,
}

impl Sock {
    pub(crate) fn id(&self, slot: u32) -> SockId {
        SockId {
            slot,
            gen: self.gen,
        }
    }

    /// Handshake bytes still to write.
    pub(crate) fn hs_pending(&self) -> &[u8] {
        &self.hs.out[self.hs.out_pos..self.hs.out_len]
    }

    /// Where to receive next, if anything is expected: the handshake
    /// buffer (exactly the verdict's bytes for a connector, so frames that
    /// follow stay in the socket), else the frame parser's target.
    pub(crate) fn recv_target(&mut self) -> Option<(*mut u8, usize)> {
        let end = match self.phase {
            Phase::Hello { .. } => VERDICT_LEN,
            Phase::AwaitHello => HELLO_MAX,
            Phase::Verdict { accept: true } | Phase::Open => {
                return self.rx.as_mut().map(|rx| rx.target())
            }
            _ => return None,
        };
        let hs = &mut *self.hs;
        (hs.in_len < end).then(|| (hs.inb[hs.in_len..end].as_mut_ptr(), end - hs.in_len))
    }
}

struct Slot {
    gen: u32,
    sock: Option<Sock>,
}

pub(crate) struct State {
    pub me: PeerId,
    pub job: Vec<u8>,
    pub peers: PeerMap,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Sockets not closing.
    pub live: usize,
    /// Slots in phase `Open`, in no particular order.
    pub open: Vec<u32>,
    /// Slots whose I/O needs the backend's attention.
    pub dirty: Vec<u32>,
    /// Slots in phase `Closing`.
    pub closing: Vec<u32>,
    /// Peer failures ready to be reported.
    pub failures: Vec<(PeerId, String)>,
    /// Connections accepted so far, ours and theirs.
    pub made: u64,
    /// Messages delivered and connections made since the backend last
    /// took this count.
    pub events: usize,
}

impl State {
    pub(crate) fn new(me: PeerId, job: &[u8]) -> State {
        State {
            me,
            job: job.to_vec(),
            peers: PeerMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            open: Vec::new(),
            dirty: Vec::new(),
            closing: Vec::new(),
            failures: Vec::new(),
            made: 0,
            events: 0,
        }
    }

    pub(crate) fn sock(&mut self, slot: u32) -> Option<&mut Sock> {
        self.slots.get_mut(slot as usize)?.sock.as_mut()
    }

    /// The socket `id` names, if it still exists (same generation).
    pub(crate) fn sock_at(&mut self, id: SockId) -> Option<&mut Sock> {
        self.sock(id.slot).filter(|s| s.gen == id.gen)
    }

    /// One past the highest slot number (slots may be empty).
    /// Marks every accepted socket still waiting for its HELLO dirty, so
    /// the backend tries it again; their number.
    pub(crate) fn wake_awaiting_hello(&mut self) -> usize {
        let mut n = 0;
        for slot in 0..self.slots.len() as u32 {
            if self
                .sock(slot)
                .is_some_and(|s| s.phase == Phase::AwaitHello)
            {
                self.mark_dirty(slot);
                n += 1;
            }
        }
        n
    }

    pub(crate) fn slot_count(&self) -> u32 {
        self.slots.len() as u32
    }

    /// A socket and the peer table at once (disjoint borrows).
    pub(crate) fn sock_and_peers(&mut self, slot: u32) -> Option<(&mut Sock, &mut PeerMap)> {
        let s = self.slots.get_mut(slot as usize)?.sock.as_mut()?;
        Some((s, &mut self.peers))
    }

    pub(crate) fn mark_dirty(&mut self, slot: u32) {
        if let Some(s) = self.sock(slot) {
            if !s.dirty {
                s.dirty = true;
                self.dirty.push(slot);
            }
        }
    }

    fn insert(&mut self, fd: OwnedFd, phase: Phase, peer: Option<PeerId>, addr: SockAddr) -> u32 {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(Slot { gen: 0, sock: None });
            self.slots.len() as u32 - 1
        });
        let s = &mut self.slots[slot as usize];
        s.gen = s.gen.wrapping_add(1);
        s.sock = Some(Sock {
            fd,
            gen: s.gen,
            phase,
            peer,
            hs: Box::new(Handshake {
                out: [0; HELLO_MAX],
                out_len: 0,
                out_pos: 0,
                inb: [0; HELLO_MAX],
                in_len: 0,
            }),
            rx: None,
            addr: Box::new(addr),
            io: 0,
            send_hs: false,
            dirty: false,
            shut: false,
            report: None,
        });
        self.live += 1;
        self.mark_dirty(slot);
        slot
    }

    /// A socket accepted on the listener: its HELLO is awaited.
    pub(crate) fn add_acceptor(&mut self, fd: OwnedFd) -> u32 {
        let any: SocketAddr = ([0, 0, 0, 0], 0).into();
        self.insert(fd, Phase::AwaitHello, None, SockAddr::new(any))
    }

    /// Creates the socket for `peer`'s connect to `addrs[from]` (or the
    /// next address a socket can be made for) in phase `Connecting`; the
    /// backend starts the connect. `None`: no address left, the peer failed.
    pub(crate) fn add_connector(
        &mut self,
        peer: PeerId,
        from: usize,
        nonblocking: bool,
        last: Option<String>,
    ) -> Option<u32> {
        let addrs = self
            .peers
            .get(&peer)
            .map(|p| p.addrs.clone())
            .unwrap_or_default();
        let mut why = last;
        for (i, a) in addrs.iter().enumerate().skip(from) {
            match sys::tcp_socket(a, nonblocking) {
                Ok(fd) => {
                    let slot = self.insert(
                        fd,
                        Phase::Connecting { addr: i },
                        Some(peer),
                        SockAddr::new(*a),
                    );
                    let id = self.slots[slot as usize].sock.as_ref().map(|s| s.id(slot));
                    if let Some(p) = self.peers.get_mut(&peer) {
                        p.mine = id;
                    }
                    return Some(slot);
                }
                Err(e) => why = Some(format!("socket for {a}: {e}")),
            }
        }
        let list: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
        let why = format!(
            "cannot connect to {} ({})",
            list.join(","),
            why.unwrap_or_else(|| "no address".into())
        );
        self.fail_peer(peer, why);
        None
    }

    /// The connect of `slot` succeeded: send the HELLO.
    pub(crate) fn connected(&mut self, slot: u32) {
        let (me, job) = (self.me, std::mem::take(&mut self.job));
        if let Some(s) = self.sock(slot) {
            if let Phase::Connecting { addr } = s.phase {
                s.phase = Phase::Hello { addr };
                s.hs.out_len = wire::encode_hello(&mut s.hs.out, me, &job);
                s.hs.out_pos = 0;
            }
        }
        self.job = job;
        self.mark_dirty(slot);
    }

    /// The connect of `slot` failed: drop the socket and try the peer's
    /// next address. `Some(slot)` of the new socket, `None` if the peer failed.
    pub(crate) fn connect_failed(
        &mut self,
        slot: u32,
        err: &std::io::Error,
        nonblocking: bool,
    ) -> Option<u32> {
        let s = self.sock(slot)?;
        let (Phase::Connecting { addr }, Some(peer)) = (s.phase, s.peer) else {
            return None;
        };
        self.close(slot, None);
        self.add_connector(peer, addr + 1, nonblocking, Some(err.to_string()))
    }

    /// `n` more handshake bytes were written from `hs.out`.
    pub(crate) fn hs_sent(&mut self, slot: u32, n: usize) {
        let Some(s) = self.sock(slot) else { return };
        s.hs.out_pos += n;
        if s.hs.out_pos < s.hs.out_len {
            self.mark_dirty(slot);
            return;
        }
        match s.phase {
            Phase::Verdict { accept: true } => {
                s.phase = Phase::Open;
                let peer = s.peer;
                self.open.push(slot);
                if let Some(p) = peer.and_then(|q| self.peers.get_mut(&q)) {
                    p.open = true;
                }
                self.events += 1;
                self.mark_dirty(slot);
            }
            Phase::Verdict { accept: false } => self.close(slot, None),
            _ => self.mark_dirty(slot),
        }
    }

    /// `n` more handshake bytes arrived in `hs.inb`.
    pub(crate) fn hs_received(&mut self, slot: u32, n: usize) {
        let Some(s) = self.sock(slot) else { return };
        s.hs.in_len += n;
        match s.phase {
            Phase::Hello { .. } if s.hs.in_len == VERDICT_LEN => {
                let v = wire::parse_verdict(&s.hs.inb[..VERDICT_LEN]);
                self.verdict(slot, v);
            }
            Phase::AwaitHello => self.hello(slot),
            _ => self.mark_dirty(slot),
        }
    }

    /// Connector: the acceptor answered.
    fn verdict(&mut self, slot: u32, v: Result<Verdict, &'static str>) {
        let Some(s) = self.sock(slot) else { return };
        let id = s.id(slot);
        let Some(peer) = s.peer else { return };
        match v {
            Ok(Verdict::Accept) => {
                let p = self.peers.entry(peer).or_default();
                if p.conn.is_some() || p.failed.is_some() {
                    // Cannot happen with a peer that follows the rules.
                    self.close(slot, None);
                    return;
                }
                p.conn = Some(id);
                p.open = true;
                if let Some(s) = self.sock(slot) {
                    s.phase = Phase::Open;
                    s.rx = Some(Rx::new());
                }
                self.open.push(slot);
                self.made += 1;
                self.events += 1;
                self.mark_dirty(slot);
            }
            // Lost the tie-break: the peer's own connection will come.
            Ok(Verdict::Duplicate) => self.close(slot, None),
            Ok(Verdict::OtherJob) => self.fail_peer(
                peer,
                "connection rejected: the peer is in another job".into(),
            ),
            Ok(Verdict::Unsupported) => {
                self.fail_peer(peer, "connection rejected by the peer".into())
            }
            Err(e) => self.sock_failed(slot, e.into()),
        }
    }

    /// Acceptor: parse the HELLO so far; answer once it is whole.
    fn hello(&mut self, slot: u32) {
        let me = self.me;
        let Some(s) = self
            .slots
            .get_mut(slot as usize)
            .and_then(|x| x.sock.as_mut())
        else {
            return;
        };
        let id = s.id(slot);
        let (peer, verdict) = match wire::parse_hello(&s.hs.inb[..s.hs.in_len]) {
            Hello::Partial => return self.mark_dirty(slot),
            Hello::Bad(_) => return self.close(slot, None),
            Hello::LongJob => (None, Verdict::OtherJob),
            Hello::Done { kind, .. } if kind != KIND_RANK => (None, Verdict::Unsupported),
            Hello::Done { job, .. } if job != self.job.as_slice() => (None, Verdict::OtherJob),
            Hello::Done { rank, .. } if rank == me => (None, Verdict::Unsupported),
            Hello::Done { rank, .. } => {
                let p = self.peers.entry(rank).or_default();
                let v = if p.failed.is_some() || p.conn.is_some() || (p.mine.is_some() && rank > me)
                {
                    Verdict::Duplicate
                } else {
                    p.conn = Some(id);
                    Verdict::Accept
                };
                (Some(rank), v)
            }
        };
        let accept = verdict == Verdict::Accept;
        if accept {
            self.made += 1;
        }
        let Some(s) = self.sock(slot) else { return };
        if accept {
            s.peer = peer;
            s.rx = Some(Rx::new());
        }
        s.phase = Phase::Verdict { accept };
        let v = wire::encode_verdict(verdict);
        s.hs.out[..v.len()].copy_from_slice(&v);
        s.hs.out_len = v.len();
        s.hs.out_pos = 0;
        self.mark_dirty(slot);
    }

    /// `n` bytes arrived at `rx.target()` of `slot`: deliver whole frames.
    pub(crate) fn rx_data(&mut self, slot: u32, n: usize, sink: &mut dyn Sink) -> usize {
        let Some(s) = self.sock(slot) else { return 0 };
        let (Some(rx), Some(peer)) = (s.rx.as_mut(), s.peer) else {
            return 0;
        };
        rx.received(n);
        match rx.parse(peer, sink) {
            Ok(k) => {
                self.events += k;
                k
            }
            Err(e) => {
                self.sock_failed(slot, e.into());
                0
            }
        }
    }

    /// `slot` hit an error or end of stream. A failure of an accepted
    /// connection (or of our own before the verdict, when the peer has no
    /// other) fails the peer; any other socket just goes.
    pub(crate) fn sock_failed(&mut self, slot: u32, why: String) {
        let Some(s) = self.sock(slot) else { return };
        let (peer, phase) = (s.peer, s.phase);
        let fails_peer = match phase {
            Phase::Verdict { accept: true } | Phase::Open => true,
            Phase::Connecting { .. } | Phase::Hello { .. } => peer
                .and_then(|q| self.peers.get(&q))
                .is_some_and(|p| p.conn.is_none()),
            Phase::AwaitHello | Phase::Verdict { accept: false } | Phase::Closing => false,
        };
        match peer {
            Some(q) if fails_peer => self.fail_peer(q, why),
            _ => self.close(slot, None),
        }
    }

    /// `peer` is gone: drop its queue, close its sockets, and report it
    /// once the socket that may hold a placement pointer is released.
    pub(crate) fn fail_peer(&mut self, peer: PeerId, why: String) {
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        if p.failed.is_some() {
            return;
        }
        p.failed = Some(why.clone());
        p.out.clear();
        p.open = false;
        let (conn, mine) = (p.conn.take(), p.mine.take());
        let mut report = Some((peer, why));
        for id in [conn, mine].into_iter().flatten() {
            if self.sock_at(id).is_some_and(|s| s.phase != Phase::Closing) {
                self.close(id.slot, report.take());
            }
        }
        if let Some(r) = report {
            self.failures.push(r);
        }
    }

    /// Starts tearing `slot` down; the backend releases it when safe.
    pub(crate) fn close(&mut self, slot: u32, report: Option<(PeerId, String)>) {
        let Some(s) = self.sock(slot) else { return };
        if s.phase == Phase::Closing {
            return;
        }
        let (id, peer) = (s.id(slot), s.peer);
        s.phase = Phase::Closing;
        s.report = report;
        self.live -= 1;
        self.closing.push(slot);
        if let Some(p) = peer.and_then(|q| self.peers.get_mut(&q)) {
            if p.mine == Some(id) {
                p.mine = None;
            }
            if p.conn == Some(id) {
                p.conn = None;
                p.open = false;
            }
        }
    }

    /// Frees a closing socket (closing its descriptor); its failure report,
    /// if any, becomes reportable. Only once no operation uses its memory.
    pub(crate) fn release(&mut self, slot: u32) -> Option<Sock> {
        let s = self.slots.get_mut(slot as usize)?.sock.take()?;
        self.free.push(slot);
        if let Some(i) = self.open.iter().position(|&o| o == slot) {
            self.open.swap_remove(i);
        }
        if let Some(i) = self.dirty.iter().position(|&o| o == slot) {
            self.dirty.swap_remove(i);
        }
        Some(s)
    }

    /// Moves a released socket's report to `failures` and drops it.
    pub(crate) fn finish(&mut self, mut s: Sock) {
        if let Some(r) = s.report.take() {
            self.failures.push(r);
        }
    }

    /// Forgets every socket and peer without freeing them: their memory may
    /// still be in use by io_uring operations that did not finish.
    pub(crate) fn leak(&mut self) {
        for s in &mut self.slots {
            if let Some(sock) = s.sock.take() {
                std::mem::forget(sock);
            }
        }
        std::mem::forget(std::mem::take(&mut self.peers));
    }

    /// Reports failures to `sink`; returns how many.
    pub(crate) fn report(&mut self, sink: &mut dyn Sink) -> usize {
        let n = self.failures.len();
        for (peer, why) in self.failures.drain(..) {
            sink.peer_failed(peer, &why);
        }
        n
    }

    /// Whether peer `peer`'s connect should start now (first message).
    pub(crate) fn needs_start(&mut self, peer: PeerId) -> bool {
        match self.peers.get_mut(&peer) {
            Some(p) if !p.started && p.conn.is_none() && p.mine.is_none() && p.failed.is_none() => {
                p.started = true;
                true
            }
            _ => false,
        }
    }

    /// The open connection of `peer`, if frames may be written to it.
    pub(crate) fn open_conn(&self, peer: PeerId) -> Option<SockId> {
        self.peers
            .get(&peer)
            .filter(|p| p.open)
            .and_then(|p| p.conn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sock_pair() -> (OwnedFd, OwnedFd) {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        (a.into(), b.into())
    }

    /// Feeds a HELLO from `rank` of `job` to a fresh acceptor socket.
    fn hello_from(st: &mut State, rank: u64, job: &[u8]) -> (u32, Verdict) {
        let (fd, _other) = sock_pair();
        let slot = st.add_acceptor(fd);
        let mut b = [0u8; HELLO_MAX];
        let n = wire::encode_hello(&mut b, rank, job);
        let s = st.sock(slot).unwrap();
        s.hs.inb[..n].copy_from_slice(&b[..n]);
        st.hs_received(slot, n);
        let s = st.sock(slot).unwrap();
        let v = wire::parse_verdict(s.hs_pending()).unwrap();
        (slot, v)
    }

    #[test]
    fn tie_break_lower_rank_wins() {
        // Rank 1 has a pending connection to 0 and to 2.
        let mut st = State::new(1, b"job");
        for q in [0, 2] {
            st.peers.insert(
                q,
                Peer {
                    addrs: vec!["127.0.0.1:9".parse().unwrap()],
                    ..Peer::default()
                },
            );
            assert!(st.needs_start(q));
            st.add_connector(q, 0, true, None).unwrap();
        }
        // 0 < 1: its connection wins; 2 > 1: ours wins, reject.
        assert_eq!(hello_from(&mut st, 0, b"job").1, Verdict::Accept);
        assert_eq!(hello_from(&mut st, 2, b"job").1, Verdict::Duplicate);
        // Another connection from 0 is a duplicate; other jobs and self are refused.
        assert_eq!(hello_from(&mut st, 0, b"job").1, Verdict::Duplicate);
        assert_eq!(hello_from(&mut st, 5, b"other").1, Verdict::OtherJob);
        assert_eq!(hello_from(&mut st, 1, b"job").1, Verdict::Unsupported);
        // A stranger with no connection of ours is accepted.
        assert_eq!(hello_from(&mut st, 9, b"job").1, Verdict::Accept);
        assert!(st.failures.is_empty());
    }

    #[test]
    fn failure_reported_once_after_release() {
        let mut st = State::new(0, b"j");
        let (slot, v) = hello_from(&mut st, 3, b"j");
        assert_eq!(v, Verdict::Accept);
        let n = st.sock(slot).unwrap().hs_pending().len();
        st.hs_sent(slot, n);
        assert_eq!(st.open, [slot]);
        st.sock_failed(slot, "reset".into());
        st.sock_failed(slot, "again".into());
        assert!(st.failures.is_empty(), "not before release");
        let s = st.release(slot).unwrap();
        st.finish(s);
        assert_eq!(st.failures, [(3, "reset".to_string())]);
        assert!(st.open.is_empty());
        assert!(st.peers[&3].failed.is_some());
    }
}
