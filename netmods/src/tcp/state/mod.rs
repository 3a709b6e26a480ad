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

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::jobs::Jobs;
use crate::{peer_id, split_peer, PeerId, Sink, TEMP_GROUP};

use super::conn::Rx;
use super::outq::Outq;
use super::sys::{self, SockAddr};
use super::wire::{self, Hello, Verdict, HELLO_MAX, KIND_PORT, KIND_RANK, VERDICT_LEN};
use crate::auth::{self, JobKey};

mod failure;
mod handshake;
mod peers;
#[cfg(test)]
mod tests;

pub(crate) use peers::PeerMap;

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
    /// io_uring: frames still to receive without the multishot RECV
    /// since bulk data came (in `Defer` mode also, for one frame, since
    /// the connection stopped spinning, `spin.rs`): by single-shot RECVs
    /// into the parser, or in `Defer` mode by direct reads under a
    /// readiness watch.
    pub single_rx: u32,
    /// io_uring: the peer is on another host (zero-copy sends pay off);
    /// `None` until looked up.
    pub remote: Option<bool>,
    /// io_uring: the result of the zero-copy SEND in flight, whose buffer
    /// stays frozen until the kernel's notification completion.
    pub zc_res: Option<i32>,
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
    #[inline]
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

    /// One past the highest slot number (slots may be empty).
    pub(crate) fn slot_count(&self) -> u32 {
        self.slots.len() as u32
    }

    /// A socket and the peer table at once (disjoint borrows).
    pub(crate) fn sock_and_peers(&mut self, slot: u32) -> Option<(&mut Sock, &mut PeerMap)> {
        let s = self.slots.get_mut(slot as usize)?.sock.as_mut()?;
        Some((s, &mut self.peers))
    }

    #[inline]
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
            remote: None,
            zc_res: None,
        });
        self.live += 1;
        self.mark_dirty(slot);
        slot
    }

    /// `n` bytes arrived at `rx.target()` of `slot`: deliver whole frames.
    /// A detached socket's input is dropped. Inline into the backends'
    /// reads (one call less a read with data).
    #[inline]
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

    /// Reports accepted port connections to `sink`.
    #[cold]
    #[inline(never)]
    fn report_ports(&mut self, sink: &mut dyn Sink) {
        for (peer, tag) in self.ports.drain(..) {
            sink.port_connection(peer, tag);
        }
    }

    /// Nothing for a poll to do but read: no socket to arm, redial or
    /// close, nothing to report, no event counted (io_uring's quiet
    /// poll, `uring/spin.rs`). One test of the lengths or'ed together.
    #[inline(always)]
    pub(crate) fn quiet(&self) -> bool {
        (self.dirty.len()
            | self.closing.len()
            | self.redial.len()
            | self.failures.len()
            | self.ports.len()
            | self.events)
            == 0
    }

    /// Reports port connections, then failures, to `sink`; returns the
    /// number of failures.
    #[inline]
    pub(crate) fn report(&mut self, sink: &mut dyn Sink) -> usize {
        if self.failures.is_empty() && self.ports.is_empty() {
            // Every poll asks: inline and no call when there is nothing
            // (a call cost some 25 instructions a poll, callgrind).
            return 0;
        }
        self.report_some(sink)
    }

    #[inline(never)]
    fn report_some(&mut self, sink: &mut dyn Sink) -> usize {
        if !self.ports.is_empty() {
            self.report_ports(sink);
        }
        let n = self.failures.len();
        for (peer, why) in self.failures.drain(..) {
            sink.peer_failed(peer, &why);
        }
        n
    }
}
