//! The connection table both backends drive: peers (per-peer send queue
//! and connection), sockets (handshake state, receive side), and the rules
//! that decide which connection a pair keeps and when a peer has failed.
//! Backends do the I/O and call in here with what happened; nothing here
//! makes a system call except creating, configuring (keepalive) and
//! closing sockets.
//!
//! # Strangers
//! An accepted socket that has not sent its whole HELLO within
//! `hs_timeout` is closed (`expire_handshakes`, `hello_overdue`): a
//! process that connects and never speaks holds nothing for long. A
//! connector whose handshake is cut before the verdict (it was that slow
//! itself: not polled for the whole deadline) connects again
//! (`redialed`, at most `MAX_REDIALS` times) rather than failing. Every
//! socket gets TCP keepalive (`keepalive`), so a peer host that vanishes
//! without a reset fails its connection instead of leaving it open.
//!
//! # Identities
//! A rank connection's HELLO names the connector as (job, rank). The
//! acceptor maps the job to a group slot (its own job: 0; a job given to
//! `add_group`: that group; any other: refused as another job) and knows
//! the connector as `peer_id(group, rank)`; the connector knows the
//! acceptor by the peer id it passed to `connect`.
//!
//! # Tie-break of a simultaneous connect
//! A pair keeps one rank connection: the one initiated by the process with
//! the lower identity, identities `(job id bytes, rank)` compared
//! lexicographically (within one job: the lower rank). An acceptor of a
//! HELLO from identity Q accepts unless it has initiated a connection to Q
//! itself (pending or accepted) and Q is the higher identity. Both sides
//! decide alike, since each acceptor compares the same two identities: its
//! own and the one in the HELLO. A rejected connector closes its socket and
//! waits for the peer's connection, which it will accept. Messages wait in
//! the peer's queue until the peer has an accepted connection, so nothing
//! but the HELLO is ever written to a losing socket.
//!
//! # Port connections
//! A HELLO of kind port (`connect_port`) skips the tie-break: the acceptor
//! takes every one as a new temporary peer `peer_id(TEMP_GROUP, n)`, `n`
//! from its own counter (the connector names its end from its own), and
//! queues a `port_connection` report, made before anything from that peer
//! is delivered.
//!
//! # Disconnect
//! The peer's entry goes at once. Its sockets are detached (no peer, so
//! they never fail one or deliver anything): the one carrying the peer's
//! connection (or, if none is accepted yet, our connect in progress) takes
//! the peer's send queue (`Sock::drain`), writes it, shuts its sending side
//! down, and discards input until the other side closes; the others close
//! at once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::jobs::Jobs;
use crate::{peer_id, split_peer, FxBuildHasher, PeerId, Sink, TEMP_GROUP};

use super::conn::{Outq, Rx};
use super::sys::{self, SockAddr};
use super::wire::{self, Hello, Verdict, HELLO_MAX, KIND_PORT, KIND_RANK, VERDICT_LEN};
use crate::auth::{self, JobKey};

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
    /// A temporary peer of ours (`connect_port`): the port's tag.
    pub port: Option<u64>,
    /// Connects made again after a handshake was cut (`State::redialed`).
    pub redials: u8,
}

/// Connects a peer gets again after its handshake was cut, before it fails.
const MAX_REDIALS: u8 = 3;

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
    /// When the socket was made or accepted (the handshake deadline's start).
    pub born: Instant,
    /// `shutdown` done (io_uring teardown).
    pub shut: bool,
    /// A peer failure to report once the socket is released.
    report: Option<(PeerId, String)>,
    /// Connector: the HELLO names this port tag (else our rank).
    pub port: Option<u64>,
    /// Connector: the target's addresses, `addr`'s index among them.
    pub addrs: Vec<SocketAddr>,
    /// Its peer was disconnected: writes `drain`, then half-closes
    /// (`wr_shut`) and discards input until the other side closes.
    pub detached: bool,
    /// A detached socket's send queue (the peer's, moved here).
    pub drain: Outq,
    /// Sending side shut down (detached, `drain` written).
    pub wr_shut: bool,
    /// The SEND in flight reads the peer's queue (io_uring): on disconnect
    /// the queue moves here, so its frozen buffer lives until completion.
    pub out_flight: bool,
    /// In the io_uring fixed-file table at the socket's slot.
    pub fixed: bool,
    /// io_uring: frames still to receive by single-shot RECVs into the
    /// parser (not multishot) since a large payload was placed.
    pub single_rx: u32,
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
    /// follow stay in the socket), else the frame parser's target (also for
    /// a detached socket, whose input is received there and dropped).
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

/// Accepted sockets that may be without their HELLO at once: a job's
/// ranks connecting to one rank at once stay far below (each sends its
/// HELLO as it connects); a stranger opening sockets in a loop holds no more.
pub(crate) const MAX_AWAITING_HELLO: usize = 512;

pub(crate) struct State {
    /// Our rank in our own job.
    pub me: PeerId,
    pub jobs: Jobs,
    /// Next temporary peer number (`peer_id(TEMP_GROUP, n)`).
    next_temp: u32,
    pub peers: PeerMap,
    /// Entries of `peers` that failed.
    failed_peers: usize,
    /// Port connections accepted and not yet reported: (peer, tag).
    ports: Vec<(PeerId, u64)>,
    /// Detached sockets not yet released.
    detached: usize,
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
    /// The job secret: rank HELLOs within our job carry and need its MAC.
    pub key: Option<JobKey>,
    /// An accepted socket's HELLO must be complete within this.
    pub hs_timeout: Duration,
    /// The largest frame a peer may send that the engine did not place
    /// (`TcpConfig::piece`): `Rx`'s receive budget.
    pub max_unplaced: usize,
    /// TCP keepalive for every socket (`sys::set_keepalive`), if any.
    pub keepalive: Option<Duration>,
    /// Accepted sockets closed because their HELLO was overdue.
    pub expired: u64,
    /// Accepted sockets that may wait for their HELLO at once
    /// ([`MAX_AWAITING_HELLO`]).
    pub max_awaiting: usize,
    /// Accepted sockets closed without their HELLO to make room.
    pub evicted: u64,
    /// Sockets are nonblocking (the poll backend).
    pub nonblocking: bool,
    /// Sockets made by a redial whose connect the backend must issue (the
    /// poll backend; io_uring's connects follow from `dirty`).
    pub redial: Vec<u32>,
    /// System calls the backend made for I/O (sends, receives, readiness,
    /// accepts, connects, `io_uring_enter`), for `TcpNetmod::syscalls`.
    pub calls: u64,
}

impl State {
    pub(crate) fn new(me: PeerId, job: &[u8]) -> State {
        State {
            me,
            jobs: Jobs::new(job),
            next_temp: 0,
            peers: PeerMap::default(),
            failed_peers: 0,
            ports: Vec::new(),
            detached: 0,
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            open: Vec::new(),
            dirty: Vec::new(),
            closing: Vec::new(),
            failures: Vec::new(),
            made: 0,
            events: 0,
            key: None,
            hs_timeout: super::config::DEFAULT_HANDSHAKE_TIMEOUT,
            max_unplaced: 1 << 20,
            keepalive: Some(super::config::DEFAULT_KEEPALIVE),
            expired: 0,
            max_awaiting: MAX_AWAITING_HELLO,
            evicted: 0,
            nonblocking: true,
            redial: Vec::new(),
            calls: 0,
        }
    }

    /// A temporary peer id not in use.
    fn new_temp(&mut self) -> PeerId {
        loop {
            let p = peer_id(TEMP_GROUP, self.next_temp);
            self.next_temp = self.next_temp.wrapping_add(1);
            if !self.peers.contains_key(&p) {
                return p;
            }
        }
    }

    /// A new temporary peer to connect to port `tag` at `addrs`
    /// (`connect_port`); the backend starts its connect.
    pub(crate) fn add_port_peer(&mut self, addrs: Vec<SocketAddr>, tag: u64) -> PeerId {
        let peer = self.new_temp();
        self.peers.insert(
            peer,
            Peer {
                addrs,
                started: true,
                port: Some(tag),
                ..Peer::default()
            },
        );
        peer
    }

    /// Peers known and not failed.
    pub(crate) fn peer_count(&self) -> usize {
        self.peers.len() - self.failed_peers
    }

    /// No detached socket has bytes left to write.
    pub(crate) fn drained(&self) -> bool {
        self.detached == 0
            || self
                .slots
                .iter()
                .filter_map(|s| s.sock.as_ref())
                .all(|s| s.drain.is_empty())
    }

    pub(crate) fn sock(&mut self, slot: u32) -> Option<&mut Sock> {
        self.slots.get_mut(slot as usize)?.sock.as_mut()
    }

    /// The socket `id` names, if it still exists (same generation).
    pub(crate) fn sock_at(&mut self, id: SockId) -> Option<&mut Sock> {
        self.sock(id.slot).filter(|s| s.gen == id.gen)
    }

    /// `slot` is an accepted socket still without its whole HELLO past
    /// the deadline: the backend found nothing more to read, so it closes.
    pub(crate) fn hello_overdue(&mut self, slot: u32) -> bool {
        let timeout = self.hs_timeout;
        let Some(s) = self.sock(slot) else {
            return false;
        };
        if s.phase != Phase::AwaitHello || s.born.elapsed() < timeout {
            return false;
        }
        self.expired += 1;
        self.close(slot, None);
        true
    }

    /// Closes every accepted socket whose HELLO is overdue (`hello_overdue`);
    /// for a backend whose receive is in flight, after reaping what arrived.
    pub(crate) fn expire_handshakes(&mut self) -> usize {
        let mut n = 0;
        for slot in 0..self.slots.len() as u32 {
            n += self.hello_overdue(slot) as usize;
        }
        n
    }

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

    /// One past the highest slot number (slots may be empty).
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
        if let Some(after) = self.keepalive {
            // Best effort: without it a dead host is found later, by the
            // kernel's retransmission limit or not at all while idle.
            let _ = sys::set_keepalive(fd.as_raw_fd(), after);
        }
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
            born: Instant::now(),
            shut: false,
            report: None,
            port: None,
            addrs: Vec::new(),
            detached: false,
            drain: Outq::default(),
            wr_shut: false,
            out_flight: false,
            fixed: false,
            single_rx: 0,
        });
        self.live += 1;
        self.mark_dirty(slot);
        slot
    }

    /// A socket accepted on the listener: its HELLO is awaited. At most
    /// `max_awaiting` sockets wait so: the oldest is closed to make room
    /// (a rank sends its HELLO as it connects, so only a stranger waits
    /// long; a rank cut so redials).
    pub(crate) fn add_acceptor(&mut self, fd: OwnedFd) -> u32 {
        let mut waiting: Vec<(Instant, u32)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, x)| x.sock.as_ref().map(|s| (s, i as u32)))
            .filter(|(s, _)| s.phase == Phase::AwaitHello)
            .map(|(s, i)| (s.born, i))
            .collect();
        if waiting.len() >= self.max_awaiting.max(1) {
            waiting.sort_unstable();
            let excess = waiting.len() + 1 - self.max_awaiting.max(1);
            for &(_, slot) in &waiting[..excess] {
                self.evicted += 1;
                self.close(slot, None);
            }
        }
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
        let (addrs, port) = self
            .peers
            .get(&peer)
            .map(|p| (p.addrs.clone(), p.port))
            .unwrap_or_default();
        self.dial(
            Some(peer),
            addrs,
            port,
            from,
            nonblocking,
            last,
            Outq::default(),
        )
    }

    /// `add_connector` for `peer`, or for a detached connect (`None`, with
    /// its queue `drain`), whose failure fails nothing.
    #[allow(clippy::too_many_arguments)]
    fn dial(
        &mut self,
        peer: Option<PeerId>,
        addrs: Vec<SocketAddr>,
        port: Option<u64>,
        from: usize,
        nonblocking: bool,
        last: Option<String>,
        drain: Outq,
    ) -> Option<u32> {
        let mut why = last;
        for (i, a) in addrs.iter().enumerate().skip(from) {
            match sys::tcp_socket(a, nonblocking) {
                Ok(fd) => {
                    let a = *a;
                    let slot =
                        self.insert(fd, Phase::Connecting { addr: i }, peer, SockAddr::new(a));
                    let s = self.slots[slot as usize].sock.as_mut()?;
                    let id = s.id(slot);
                    s.port = port;
                    s.addrs = addrs;
                    s.detached = peer.is_none();
                    s.drain = drain;
                    self.detached += peer.is_none() as usize;
                    if let Some(p) = peer.and_then(|q| self.peers.get_mut(&q)) {
                        p.mine = Some(id);
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
        if let Some(peer) = peer {
            self.fail_peer(peer, why);
        }
        None
    }

    /// The connect of `slot` succeeded: send the HELLO (our rank, or the
    /// port's tag).
    pub(crate) fn connected(&mut self, slot: u32) {
        let me = self.me;
        let Some(s) = self.slots.get(slot as usize).and_then(|x| x.sock.as_ref()) else {
            return;
        };
        if let Phase::Connecting { addr } = s.phase {
            let (kind, id) = match s.port {
                Some(tag) => (KIND_PORT, tag),
                None => (KIND_RANK, me),
            };
            // A rank of our own job checks the secret's MAC, a rank of an
            // added job our group key's (it got the key with our group's
            // description); a port's acceptor checks the tag.
            let (key, target) = match (s.port, s.peer.map(split_peer)) {
                (None, Some((0, rank))) => (self.key, Some((u64::from(rank), &self.jobs.own[..]))),
                (None, Some((g, rank))) => match self.jobs.added(g) {
                    Some((job, _)) => (
                        self.key.map(|k| k.group_key()),
                        Some((u64::from(rank), job)),
                    ),
                    None => (None, None),
                },
                _ => (None, None),
            };
            let auth = wire::hello_auth(key.as_ref(), kind, id, target, &self.jobs.own);
            let mut out = [0u8; HELLO_MAX];
            let len = wire::encode_hello(&mut out, kind, id, &self.jobs.own, &auth);
            if let Some(s) = self.sock(slot) {
                s.phase = Phase::Hello { addr };
                s.hs.out[..len].copy_from_slice(&out[..len]);
                s.hs.out_len = len;
                s.hs.out_pos = 0;
            }
        }
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
        let Phase::Connecting { addr } = s.phase else {
            return None;
        };
        let (peer, port) = (s.peer, s.port);
        if peer.is_none() && !s.detached {
            return None;
        }
        let addrs = std::mem::take(&mut s.addrs);
        let drain = std::mem::take(&mut s.drain);
        self.close(slot, None);
        let why = Some(err.to_string());
        self.dial(peer, addrs, port, addr + 1, nonblocking, why, drain)
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
                let (peer, detached) = (s.peer, s.detached);
                self.open.push(slot);
                if let Some(p) = peer.and_then(|q| self.peers.get_mut(&q)) {
                    p.open = true;
                }
                if !detached {
                    self.events += 1;
                }
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
        let budget = self.max_unplaced;
        let Some(s) = self.sock(slot) else { return };
        let id = s.id(slot);
        if s.detached {
            // Disconnected while connecting: if accepted, write the queue
            // and close; otherwise the queue goes with the socket.
            if v != Ok(Verdict::Accept) {
                return self.close(slot, None);
            }
            s.phase = Phase::Open;
            s.rx = Some(Rx::new(budget));
            self.open.push(slot);
            self.made += 1;
            return self.mark_dirty(slot);
        }
        let (Some(peer), port) = (s.peer, s.port.is_some()) else {
            return;
        };
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
                    s.rx = Some(Rx::new(budget));
                }
                self.open.push(slot);
                self.made += 1;
                self.events += 1;
                self.mark_dirty(slot);
            }
            // Lost the tie-break: the peer's own connection will come.
            Ok(Verdict::Duplicate) if !port => self.close(slot, None),
            Ok(Verdict::OtherJob) => self.fail_peer(
                peer,
                "connection rejected: the peer is in another job".into(),
            ),
            // A port connection is never a duplicate: refused.
            Ok(Verdict::Duplicate | Verdict::Unsupported) => {
                self.fail_peer(peer, "connection rejected by the peer".into())
            }
            Err(e) => self.sock_failed(slot, e.into()),
        }
    }

    /// Acceptor: parse the HELLO so far; answer once it is whole.
    fn hello(&mut self, slot: u32) {
        let me = self.me;
        let budget = self.max_unplaced;
        let Some(s) = self.slots.get(slot as usize).and_then(|x| x.sock.as_ref()) else {
            return;
        };
        let id = s.id(slot);
        let (peer, verdict) = match wire::parse_hello(&s.hs.inb[..s.hs.in_len]) {
            Hello::Partial => return self.mark_dirty(slot),
            Hello::Bad(_) => return self.close(slot, None),
            Hello::LongJob => (None, Verdict::OtherJob),
            Hello::Done {
                kind: KIND_PORT,
                id: tag,
                ..
            } => {
                // Every port connection is a new peer.
                let peer = self.new_temp();
                self.peers.insert(
                    peer,
                    Peer {
                        conn: Some(id),
                        ..Peer::default()
                    },
                );
                self.ports.push((peer, tag));
                (Some(peer), Verdict::Accept)
            }
            Hello::Done { kind, .. } if kind != KIND_RANK => (None, Verdict::Unsupported),
            Hello::Done {
                id: rank,
                job,
                nonce,
                mac,
                ..
            } => {
                // A rank of our own job proves it with the job secret, a
                // rank of an added job with that job's group key (if it
                // has one: a job started without a secret has none).
                let group = self.jobs.group_of(job);
                let key = match group {
                    Some(0) => self.key,
                    Some(g) => self.jobs.added(g).and_then(|(_, k)| k.copied()),
                    None => None,
                };
                let target = (me, &self.jobs.own[..]);
                let proven = key.is_none_or(|k| {
                    auth::same(
                        &wire::hello_mac(&k, KIND_RANK, rank, target, job, &nonce),
                        &mac,
                    )
                });
                match (group, u32::try_from(rank)) {
                    (None, _) => (None, Verdict::OtherJob),
                    (Some(_), Err(_)) => (None, Verdict::Unsupported),
                    (Some(0), Ok(_)) if rank == me => (None, Verdict::Unsupported),
                    (Some(_), Ok(_)) if !proven => (None, Verdict::Unsupported),
                    (Some(group), Ok(r)) => {
                        let peer = peer_id(group, r);
                        // The connection started by the lower identity wins.
                        let theirs_wins = (job, rank) < (self.jobs.own.as_slice(), me);
                        let p = self.peers.entry(peer).or_default();
                        let v = if p.failed.is_some()
                            || p.conn.is_some()
                            || (p.mine.is_some() && !theirs_wins)
                        {
                            Verdict::Duplicate
                        } else {
                            p.conn = Some(id);
                            Verdict::Accept
                        };
                        (Some(peer), v)
                    }
                }
            }
        };
        let accept = verdict == Verdict::Accept;
        if accept {
            self.made += 1;
        }
        let Some(s) = self.sock(slot) else { return };
        if accept {
            s.peer = peer;
            s.rx = Some(Rx::new(budget));
        }
        s.phase = Phase::Verdict { accept };
        let v = wire::encode_verdict(verdict);
        s.hs.out[..v.len()].copy_from_slice(&v);
        s.hs.out_len = v.len();
        s.hs.out_pos = 0;
        self.mark_dirty(slot);
    }

    /// `n` bytes arrived at `rx.target()` of `slot`: deliver whole frames.
    /// A detached socket's input is dropped.
    pub(crate) fn rx_data(&mut self, slot: u32, n: usize, sink: &mut dyn Sink) -> usize {
        if !self.ports.is_empty() {
            // Announce new port peers before anything they send.
            self.report_ports(sink);
        }
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

    /// `bytes` arrived on `slot` in a buffer of the backend's (io_uring's
    /// provided buffers): copied into the frame parser, whole frames
    /// delivered. A detached socket's input is dropped.
    pub(crate) fn rx_feed(&mut self, slot: u32, mut bytes: &[u8], sink: &mut dyn Sink) -> usize {
        if !self.ports.is_empty() {
            self.report_ports(sink);
        }
        let Some(s) = self.sock(slot) else { return 0 };
        let (Some(rx), Some(peer)) = (s.rx.as_mut(), s.peer) else {
            return 0;
        };
        let mut k = 0;
        let mut bad = None;
        while !bytes.is_empty() {
            let (ptr, room) = rx.target();
            let n = room.min(bytes.len());
            // SAFETY: `target` gives `room` writable bytes (the parser's
            // buffers or the engine's placement memory), which cannot
            // overlap the backend's buffer `bytes`.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr, n) };
            rx.received(n);
            bytes = &bytes[n..];
            match rx.parse(peer, sink) {
                Ok(c) => k += c,
                Err(e) => {
                    bad = Some(e);
                    break;
                }
            }
        }
        self.events += k;
        if let Some(e) = bad {
            self.sock_failed(slot, e.into());
        }
        k
    }

    /// `slot` hit an error or end of stream. A failure of an accepted
    /// connection (or of our own before the verdict, when the peer has no
    /// other) fails the peer; any other socket just goes.
    pub(crate) fn sock_failed(&mut self, slot: u32, why: String) {
        if self.redialed(slot, &why) {
            return;
        }
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

    /// Our connect's handshake was cut before the verdict (the acceptor
    /// closed it, e.g. because we were too slow to send the HELLO: its
    /// deadline): connect to the same address again, up to `MAX_REDIALS`
    /// times per peer, instead of failing the peer. True if it did.
    fn redialed(&mut self, slot: u32, why: &str) -> bool {
        let nonblocking = self.nonblocking;
        let Some((s, peers)) = self.sock_and_peers(slot) else {
            return false;
        };
        let (Phase::Hello { addr }, Some(peer), false) = (s.phase, s.peer, s.detached) else {
            return false;
        };
        let Some(p) = peers.get_mut(&peer) else {
            return false;
        };
        if p.conn.is_some() || p.failed.is_some() || p.redials >= MAX_REDIALS {
            return false;
        }
        p.redials += 1;
        let (addrs, port) = (std::mem::take(&mut s.addrs), s.port);
        self.close(slot, None);
        let why = Some(format!("handshake cut: {why}"));
        if let Some(new) = self.dial(
            Some(peer),
            addrs,
            port,
            addr,
            nonblocking,
            why,
            Outq::default(),
        ) {
            self.redial.push(new);
        }
        true
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
        self.failed_peers += 1;
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

    /// Forgets `peer` (`Netmod::disconnect`): detaches its sockets (see the
    /// module docs) and drops any failure or port report not yet made.
    pub(crate) fn disconnect(&mut self, peer: PeerId) {
        let Some(mut p) = self.peers.remove(&peer) else {
            return;
        };
        let alive = p.failed.is_none();
        if !alive {
            self.failed_peers -= 1;
        }
        self.failures.retain(|f| f.0 != peer);
        self.ports.retain(|f| f.0 != peer);
        let mut out = Some(std::mem::take(&mut p.out));
        for slot in 0..self.slot_count() {
            let Some(s) = self.sock(slot).filter(|s| s.peer == Some(peer)) else {
                continue;
            };
            let id = s.id(slot);
            s.peer = None;
            s.detached = true;
            s.report = None;
            let keep = alive
                && match s.phase {
                    Phase::Open | Phase::Verdict { accept: true } => p.conn == Some(id),
                    Phase::Connecting { .. } | Phase::Hello { .. } => {
                        p.conn.is_none()
                            && p.mine == Some(id)
                            && out.as_ref().is_some_and(|q| !q.is_empty())
                    }
                    _ => false,
                };
            // The queue goes where its buffer may be in flight, else to the
            // socket that will write it.
            if s.out_flight || keep {
                if let Some(q) = out.take() {
                    s.drain = q;
                }
            }
            if keep {
                if let Some(rx) = &mut s.rx {
                    rx.discard();
                }
            }
            self.detached += 1;
            if keep {
                self.mark_dirty(slot);
            } else {
                self.close(slot, None);
            }
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
        self.detached -= s.detached as usize;
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

    /// Reports accepted port connections to `sink`.
    fn report_ports(&mut self, sink: &mut dyn Sink) {
        for (peer, tag) in self.ports.drain(..) {
            sink.port_connection(peer, tag);
        }
    }

    /// Reports port connections, then failures, to `sink`; returns the
    /// number of failures.
    pub(crate) fn report(&mut self, sink: &mut dyn Sink) -> usize {
        if !self.ports.is_empty() {
            self.report_ports(sink);
        }
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

    /// A HELLO's target: (rank, job).
    type Target<'a> = (u64, &'a [u8]);

    fn sock_pair() -> (OwnedFd, OwnedFd) {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        (a.into(), b.into())
    }

    /// Feeds a HELLO from `rank` of `job` to a fresh acceptor socket.
    fn hello_from(st: &mut State, rank: u64, job: &[u8]) -> (u32, Verdict) {
        hello_kind(st, KIND_RANK, rank, job)
    }

    fn hello_kind(st: &mut State, kind: u8, id: u64, job: &[u8]) -> (u32, Verdict) {
        hello_auth(st, kind, id, job, &[0; wire::HELLO_AUTH])
    }

    fn hello_auth(
        st: &mut State,
        kind: u8,
        id: u64,
        job: &[u8],
        auth: &[u8; wire::HELLO_AUTH],
    ) -> (u32, Verdict) {
        let (fd, _other) = sock_pair();
        let slot = st.add_acceptor(fd);
        let mut b = [0u8; HELLO_MAX];
        let n = wire::encode_hello(&mut b, kind, id, job, auth);
        let s = st.sock(slot).unwrap();
        s.hs.inb[..n].copy_from_slice(&b[..n]);
        st.hs_received(slot, n);
        let s = st.sock(slot).unwrap();
        let v = wire::parse_verdict(s.hs_pending()).unwrap();
        (slot, v)
    }

    /// A stranger opening sockets and saying nothing holds at most
    /// `max_awaiting` of them: the oldest silent one goes; ranks that sent
    /// their HELLO are never touched.
    #[test]
    fn silent_sockets_are_capped_oldest_first() {
        let mut st = State::new(0, b"job");
        st.max_awaiting = 4;
        let (ranked, v) = hello_from(&mut st, 1, b"job");
        assert_eq!(v, Verdict::Accept);
        let mut keep = Vec::new();
        let mut silent = Vec::new();
        for _ in 0..10 {
            let (fd, other) = sock_pair();
            keep.push(other);
            silent.push(st.add_acceptor(fd));
        }
        let waiting = silent
            .iter()
            .filter(|&&s| st.sock(s).is_some_and(|s| s.phase == Phase::AwaitHello))
            .count();
        assert_eq!(waiting, 4);
        assert_eq!(st.evicted, 6);
        for &s in &silent[6..] {
            assert_eq!(
                st.sock(s).unwrap().phase,
                Phase::AwaitHello,
                "the newest stay"
            );
        }
        assert_ne!(st.sock(ranked).unwrap().phase, Phase::Closing);
        assert!(st.failures.is_empty());
    }

    #[test]
    fn a_silent_acceptor_closes_only_after_its_deadline() {
        let mut st = State::new(0, b"job");
        let (fd, _other) = sock_pair();
        let slot = st.add_acceptor(fd);
        assert!(!st.hello_overdue(slot), "a fresh socket has time left");
        assert_eq!(st.sock(slot).unwrap().phase, Phase::AwaitHello);
        st.hs_timeout = Duration::ZERO;
        // A socket that did send its HELLO is never expired.
        let (done, v) = hello_from(&mut st, 1, b"job");
        assert_eq!(v, Verdict::Accept);
        assert_eq!(st.expire_handshakes(), 1);
        assert_eq!(st.sock(slot).unwrap().phase, Phase::Closing);
        assert_ne!(st.sock(done).unwrap().phase, Phase::Closing);
        assert_eq!((st.expired, st.live), (1, 1));
        assert!(st.failures.is_empty(), "a stranger is no peer to fail");
    }

    #[test]
    fn a_cut_handshake_redials_then_fails() {
        let mut st = State::new(0, b"job");
        let addr: SocketAddr = ([127, 0, 0, 1], 9).into();
        let peer = 1;
        st.peers.insert(
            peer,
            Peer {
                addrs: vec![addr],
                ..Peer::default()
            },
        );
        let mut slot = st.add_connector(peer, 0, true, None).unwrap();
        for round in 0..=MAX_REDIALS {
            st.connected(slot);
            assert!(matches!(st.sock(slot).unwrap().phase, Phase::Hello { .. }));
            st.sock_failed(slot, "connection closed during the handshake".into());
            assert_eq!(st.sock(slot).unwrap().phase, Phase::Closing);
            if round == MAX_REDIALS {
                break;
            }
            assert!(st.peers[&peer].failed.is_none(), "round {round}");
            slot = st.redial.pop().expect("a new connect to issue");
            assert!(st.redial.is_empty());
            let s = st.sock(slot).unwrap();
            assert_eq!(
                (s.phase, s.peer),
                (Phase::Connecting { addr: 0 }, Some(peer))
            );
            let id = st.sock(slot).unwrap().id(slot);
            assert_eq!(st.peers[&peer].mine, Some(id));
        }
        let why = st.peers[&peer]
            .failed
            .clone()
            .expect("failed after the redials");
        assert!(why.contains("closed during the handshake"), "{why}");
        assert!(st.redial.is_empty());
    }

    #[test]
    fn sockets_get_keepalive_unless_turned_off() {
        let any: SocketAddr = ([127, 0, 0, 1], 0).into();
        let mut st = State::new(0, b"job");
        st.keepalive = Some(Duration::from_secs(20));
        let slot = st.add_acceptor(sys::tcp_socket(&any, true).unwrap());
        let fd = st.sock(slot).unwrap().fd.as_raw_fd();
        assert_eq!(sys::keepalive_of(fd).unwrap(), (true, 10));
        st.keepalive = None;
        let slot = st.add_acceptor(sys::tcp_socket(&any, true).unwrap());
        let fd = st.sock(slot).unwrap().fd.as_raw_fd();
        assert!(!sys::keepalive_of(fd).unwrap().0);
    }

    #[test]
    fn tie_break_lower_rank_wins() {
        // Within one job, exactly as before groups: ranks decide.
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
    fn with_a_job_secret_a_rank_hello_of_our_job_must_prove_it() {
        let key = JobKey::new([7; 16]);
        let mut st = State::new(1, b"job");
        st.key = Some(key);
        st.jobs.add(1, b"other").unwrap();
        // A stranger naming our job: no MAC, a MAC for another target,
        // another key, a MAC over another rank: all refused.
        let wrong_key = JobKey::new([8; 16]);
        let job = &b"job"[..];
        let cases: [(Option<&JobKey>, u64, Option<Target>); 5] = [
            (None, 0, None),
            (Some(&key), 0, Some((2, job))),
            (Some(&wrong_key), 0, Some((1, job))),
            (Some(&key), 3, Some((1, job))),
            (Some(&key), 0, Some((1, b"other"))),
        ];
        for (k, signer, target) in cases {
            let mut auth = wire::hello_auth(k, KIND_RANK, signer, target, b"job");
            if signer == 3 {
                // Signed as rank 3, sent as rank 0.
                auth = wire::hello_auth(k, KIND_RANK, 3, target, b"job");
            }
            assert_eq!(
                hello_auth(&mut st, KIND_RANK, 0, b"job", &auth).1,
                Verdict::Unsupported,
                "signer {signer} target {target:?}"
            );
        }
        assert!(st.peers.get(&0).is_none_or(|p| p.conn.is_none()));
        // The real rank 0, proving it to us (rank 1): accepted.
        let auth = wire::hello_auth(Some(&key), KIND_RANK, 0, Some((1, job)), b"job");
        assert_eq!(
            hello_auth(&mut st, KIND_RANK, 0, b"job", &auth).1,
            Verdict::Accept
        );
        // Another job without a group key (started without a secret):
        // nothing to check.
        assert_eq!(hello_from(&mut st, 4, b"other").1, Verdict::Accept);
        // Without a secret, as before: a rank HELLO without a MAC is taken.
        let mut plain = State::new(1, b"job");
        assert_eq!(hello_from(&mut plain, 0, b"job").1, Verdict::Accept);
    }

    /// Between jobs: once the group description gave us the other job's
    /// group key, its rank HELLOs must carry that key's MAC; its job
    /// secret, our own key, our group key or a MAC for another target do
    /// not do, so knowing the job's name (or having been connected to it
    /// once) does not let anyone pose as one of its ranks.
    #[test]
    fn a_rank_of_another_job_proves_its_group_key() {
        let ours = JobKey::new([7; 16]);
        let theirs = JobKey::new([9; 16]);
        let mut st = State::new(1, b"job");
        st.key = Some(ours);
        st.jobs.add(3, b"other").unwrap();
        st.jobs.set_key(3, theirs.group_key()).unwrap();
        let job = &b"job"[..];
        let forged: [(Option<JobKey>, Option<Target>); 6] = [
            (None, None),
            (Some(theirs), Some((1, job))),
            (Some(ours), Some((1, job))),
            (Some(ours.group_key()), Some((1, job))),
            (Some(theirs.group_key()), Some((2, job))),
            (Some(theirs.group_key()), Some((1, b"else"))),
        ];
        for (i, (k, target)) in forged.iter().enumerate() {
            let auth = wire::hello_auth(k.as_ref(), KIND_RANK, 0, *target, b"other");
            assert_eq!(
                hello_auth(&mut st, KIND_RANK, 0, b"other", &auth).1,
                Verdict::Unsupported,
                "case {i}"
            );
        }
        assert!(!st.peers.contains_key(&peer_id(3, 0)));
        let auth = wire::hello_auth(
            Some(&theirs.group_key()),
            KIND_RANK,
            0,
            Some((1, job)),
            b"other",
        );
        assert_eq!(
            hello_auth(&mut st, KIND_RANK, 0, b"other", &auth).1,
            Verdict::Accept
        );
        assert!(st.peers.contains_key(&peer_id(3, 0)));
    }

    /// Our HELLO to a rank of an added job carries our group key's MAC
    /// for that rank and job, which its acceptor (holding our group key)
    /// takes.
    #[test]
    fn our_hello_to_another_job_is_proven_with_our_group_key() {
        let ours = JobKey::new([7; 16]);
        let mut st = State::new(2, b"job");
        st.key = Some(ours);
        st.jobs.add(5, b"other").unwrap();
        let slot = connecting(&mut st, peer_id(5, 1));
        st.connected(slot);
        let s = st.sock(slot).unwrap();
        let sent = s.hs.out[..s.hs.out_len].to_vec();
        let mut acceptor = State::new(1, b"other");
        acceptor.key = Some(JobKey::new([9; 16]));
        acceptor.jobs.add(4, b"job").unwrap();
        // With another key the acceptor refuses; with ours it accepts.
        for (key, want) in [
            (JobKey::new([1; 16]), Verdict::Unsupported),
            (ours.group_key(), Verdict::Accept),
        ] {
            acceptor.jobs.set_key(4, key).unwrap();
            let (fd, _other) = sock_pair();
            let a2 = acceptor.add_acceptor(fd);
            let s = acceptor.sock(a2).unwrap();
            s.hs.inb[..sent.len()].copy_from_slice(&sent);
            acceptor.hs_received(a2, sent.len());
            let v = acceptor.sock(a2).unwrap().hs.out[8];
            assert_eq!(v, want as u8);
        }
    }

    /// A pending connection of ours to `peer`.
    fn connecting(st: &mut State, peer: PeerId) -> u32 {
        st.peers.insert(
            peer,
            Peer {
                addrs: vec!["127.0.0.1:9".parse().unwrap()],
                ..Peer::default()
            },
        );
        assert!(st.needs_start(peer));
        st.add_connector(peer, 0, true, None).unwrap()
    }

    /// The acceptor's verdict on `slot` is written.
    fn verdict_sent(st: &mut State, slot: u32) {
        let n = st.sock(slot).unwrap().hs_pending().len();
        st.hs_sent(slot, n);
    }

    #[test]
    fn tie_break_across_jobs_compares_job_then_rank() {
        // Rank 0 of "jobA" and rank 0 of "jobB" connect to each other:
        // "jobA" < "jobB", so A's connection wins on both sides.
        let mut a = State::new(0, b"jobA");
        a.jobs.add(1, b"jobB").unwrap();
        connecting(&mut a, peer_id(1, 0));
        let mut b = State::new(0, b"jobB");
        b.jobs.add(1, b"jobA").unwrap();
        connecting(&mut b, peer_id(1, 0));
        assert_eq!(hello_from(&mut a, 0, b"jobB").1, Verdict::Duplicate);
        let (slot, v) = hello_from(&mut b, 0, b"jobA");
        assert_eq!(v, Verdict::Accept);
        assert_eq!(b.sock(slot).unwrap().peer, Some(peer_id(1, 0)));
        // The job decides before the rank: rank 5 of "jobA" still beats
        // rank 0 of "jobB"; rank 0 of "jobC" loses to rank 3 of "jobB".
        let mut b = State::new(0, b"jobB");
        b.jobs.add(1, b"jobA").unwrap();
        b.jobs.add(2, b"jobC").unwrap();
        connecting(&mut b, peer_id(1, 5));
        connecting(&mut b, peer_id(2, 0));
        assert_eq!(hello_from(&mut b, 5, b"jobA").1, Verdict::Accept);
        assert_eq!(hello_from(&mut b, 0, b"jobC").1, Verdict::Duplicate);
        // Without a connection of ours, anyone of a known job is accepted;
        // a rank equal to ours is not a self-connection in another job.
        assert_eq!(hello_from(&mut b, 7, b"jobC").1, Verdict::Accept);
        assert!(b.peers[&peer_id(2, 7)].conn.is_some());
        assert_eq!(hello_from(&mut b, 1 << 32, b"jobC").1, Verdict::Unsupported);
        // Unknown and removed jobs are another job.
        assert_eq!(hello_from(&mut b, 0, b"jobD").1, Verdict::OtherJob);
        b.jobs.remove(2);
        assert_eq!(hello_from(&mut b, 9, b"jobC").1, Verdict::OtherJob);
        assert!(b.failures.is_empty());
    }

    #[derive(Default)]
    struct Events(Vec<String>);

    impl Sink for Events {
        fn deliver(&mut self, peer: PeerId, h: &[u8], _: &[u8]) {
            self.0.push(format!("deliver {peer:x} {h:?}"));
        }
        fn peer_failed(&mut self, peer: PeerId, _: &str) {
            self.0.push(format!("failed {peer:x}"));
        }
        fn port_connection(&mut self, peer: PeerId, tag: u64) {
            self.0.push(format!("port {peer:x} {tag}"));
        }
    }

    #[test]
    fn port_hellos_are_new_temporary_peers_announced_first() {
        let mut st = State::new(0, b"job");
        // Any job, any number of times, even with a rank connection to the
        // same process and an identical tag: always accepted, never a duplicate.
        connecting(&mut st, 1);
        let (s1, v1) = hello_kind(&mut st, KIND_PORT, 77, b"job");
        let (s2, v2) = hello_kind(&mut st, KIND_PORT, 77, b"other");
        assert_eq!((v1, v2), (Verdict::Accept, Verdict::Accept));
        let p1 = st.sock(s1).unwrap().peer.unwrap();
        let p2 = st.sock(s2).unwrap().peer.unwrap();
        assert_eq!(p1, peer_id(TEMP_GROUP, 0));
        assert_eq!(p2, peer_id(TEMP_GROUP, 1));
        assert_eq!(st.peer_count(), 3);
        assert_eq!(hello_kind(&mut st, 9, 0, b"job").1, Verdict::Unsupported);
        // A frame arriving with the HELLO's verdict still going out: the
        // announcements come first.
        let mut frame = wire::encode_prefix(1, 0).to_vec();
        frame.push(42);
        let (ptr, room) = st.sock(s2).unwrap().recv_target().unwrap();
        assert!(room >= frame.len());
        // SAFETY: recv_target gives `room` writable bytes.
        unsafe { std::ptr::copy_nonoverlapping(frame.as_ptr(), ptr, frame.len()) };
        let mut ev = Events::default();
        assert_eq!(st.rx_data(s2, frame.len(), &mut ev), 1);
        st.report(&mut ev);
        assert_eq!(
            ev.0,
            [
                format!("port {p1:x} 77"),
                format!("port {p2:x} 77"),
                format!("deliver {p2:x} [42]")
            ]
        );
        // Our own port connection sends a port HELLO with the tag.
        let me = st.add_port_peer(vec!["127.0.0.1:9".parse().unwrap()], 5);
        assert_eq!(me, peer_id(TEMP_GROUP, 2));
        let slot = st.add_connector(me, 0, true, None).unwrap();
        st.connected(slot);
        match wire::parse_hello(st.sock(slot).unwrap().hs_pending()) {
            Hello::Done { kind, id, job, .. } => {
                assert_eq!((kind, id, job), (KIND_PORT, 5, &b"job"[..]))
            }
            h => panic!("{h:?}"),
        }
        // Refused (never a duplicate for a port): the peer fails.
        let s = st.sock(slot).unwrap();
        s.hs.inb[..VERDICT_LEN].copy_from_slice(&wire::encode_verdict(Verdict::Duplicate));
        st.hs_received(slot, VERDICT_LEN);
        let s = st.release(slot).unwrap();
        st.finish(s);
        assert_eq!(st.failures.len(), 1);
        assert_eq!(st.failures[0].0, me);
    }

    #[test]
    fn disconnect_detaches_and_keeps_the_queue() {
        let mut st = State::new(0, b"j");
        let (slot, _) = hello_from(&mut st, 3, b"j");
        verdict_sent(&mut st, slot);
        st.peers.get_mut(&3).unwrap().out.push(b"h", b"data", 0);
        assert_eq!(st.peer_count(), 1);
        st.disconnect(3);
        assert!(!st.peers.contains_key(&3));
        assert_eq!(st.peer_count(), 0);
        let s = st.sock(slot).unwrap();
        assert!(s.detached && s.peer.is_none() && s.phase == Phase::Open);
        assert_eq!(s.drain.len(), wire::PREFIX + 5);
        assert!(!st.drained());
        // Input is dropped, and its end closes the socket without a report.
        let mut ev = Events::default();
        assert_eq!(st.rx_data(slot, 10, &mut ev), 0);
        st.sock_failed(slot, "connection closed by the peer".into());
        let s = st.release(slot).unwrap();
        st.finish(s);
        assert!(st.failures.is_empty() && ev.0.is_empty());
        st.disconnect(3); // unknown now: a no-op

        // A failed peer: its report is dropped, the count restored.
        let (slot, _) = hello_from(&mut st, 4, b"j");
        verdict_sent(&mut st, slot);
        st.sock_failed(slot, "reset".into());
        assert_eq!(st.peer_count(), 0);
        st.disconnect(4);
        let s = st.release(slot).unwrap();
        st.finish(s);
        assert!(st.failures.is_empty());
        assert_eq!(st.peer_count(), 0);
        assert!(st.peers.is_empty());

        // A pending connect with queued data goes on, detached; without
        // data it is just closed.
        let slot = connecting(&mut st, 5);
        st.peers.get_mut(&5).unwrap().out.push(b"h", b"", 0);
        st.disconnect(5);
        let s = st.sock(slot).unwrap();
        assert!(s.detached && matches!(s.phase, Phase::Connecting { .. }));
        st.connected(slot);
        let s = st.sock(slot).unwrap();
        s.hs.inb[..VERDICT_LEN].copy_from_slice(&wire::encode_verdict(Verdict::Accept));
        st.hs_received(slot, VERDICT_LEN);
        assert_eq!(st.sock(slot).unwrap().phase, Phase::Open);
        assert!(!st.peers.contains_key(&5));
        let slot = connecting(&mut st, 6);
        st.disconnect(6);
        assert_eq!(st.sock(slot).unwrap().phase, Phase::Closing);
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
