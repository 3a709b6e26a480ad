//! The TCP network module: length-prefixed frames over one TCP connection
//! per pair of processes, made lazily on the first message, driven by
//! io_uring where the kernel allows it and by plain nonblocking system
//! calls otherwise. Both backends drive the same sans-IO state (`state`,
//! `conn`), so they behave identically on the wire.
//!
//! Every connection opens with a handshake (`wire`): the connector's HELLO
//! names it, the acceptor's VERDICT accepts or refuses it. A rank HELLO
//! says "rank R of job J": the acceptor takes it from its own job (peer
//! `R`) or from a job given to `add_group` (peer `peer_id(group, R)`), and
//! refuses other jobs. When two processes connect to each other at once,
//! the connection started by the lower identity (job id bytes, then rank,
//! compared lexicographically) is kept and the other refused as a
//! duplicate, so a pair keeps exactly one connection even across jobs. A
//! port HELLO (`connect_port`, for MPI_Comm_connect/accept) says "to port
//! T": always accepted, as a new temporary peer in `TEMP_GROUP` on each
//! side, announced by `Sink::port_connection`. `disconnect` forgets a peer
//! at once and closes its connection once its queue is written.
//!
//! | file | holds |
//! | --- | --- |
//! | `config.rs` | `TcpConfig`, `RIVET_TCP_*` parsing |
//! | `iface.rs`, `card.rs` | addresses to publish; the business card format |
//! | `wire.rs` | handshake and frame encoding |
//! | `frame.rs` | a frame written into memory (direct send's stack buffer, the queue) |
//! | `conn.rs`, `outq.rs` | receive parsing and placement (`Rx`); a peer's send queue (`Outq`) |
//! | `state/` | peers, sockets (`mod.rs`; the peer table `peers.rs`), handshake and tie-break, failure and teardown |
//! | `sys.rs`, `syscall.rs` | socket system calls; the two on every message's path made bare |
//! | `poll.rs`, `uring/` | the two backends |

pub(crate) mod card;
mod config;
pub(crate) mod conn;
mod frame;
mod iface;
mod outq;
mod poll;
mod state;
pub(crate) mod sys;
mod syscall;
mod uring;
pub(crate) mod wire;

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use crate::{Limits, Netmod, NetmodError, PeerId, Sink};

pub use config::{Backend, TcpConfig, ZeroCopy};
pub use uring::RxBytes;

/// Messages (prefix, header and payload) below this size may be coalesced:
/// one after another since the last poll are queued and leave together.
const COALESCE_BELOW: usize = 16 * 1024;

/// The IPv4 addresses of the named interfaces (`[]`: every up non-loopback
/// one, else `lo`), as the business card would publish them; rivetrun's
/// `--iface` uses it for the address proxies connect back to.
pub fn interface_addresses(names: &[String]) -> Result<Vec<Ipv4Addr>, NetmodError> {
    iface::select(names).map(|(addrs, _)| addrs)
}

use poll::PollIo;
use state::{Peer, State};
use uring::UringIo;

// One per process: the size of the larger variant does not matter, and a
// box would add an indirection to every send and poll.
#[allow(clippy::large_enum_variant)]
enum Io {
    Poll(PollIo),
    Uring(UringIo),
}

impl Io {
    /// Whether the backend wrote to a socket since its last poll (the
    /// coalescing rule of `try_send`).
    #[inline(always)]
    fn wrote_since_poll(&self) -> bool {
        match self {
            Io::Poll(io) => io.wrote_since_poll,
            Io::Uring(u) => u.wrote_since_poll,
        }
    }
}

/// TCP keepalive (as `TcpConfig::keepalive`) on a socket the
/// netmod does not own, such as rivetrun's IMPI server and host links, so a
/// vanished host fails them after about `after`.
pub fn set_keepalive(
    socket: &impl std::os::fd::AsRawFd,
    after: std::time::Duration,
) -> io::Result<()> {
    sys::set_keepalive(socket.as_raw_fd(), after)
}

pub struct TcpNetmod {
    st: State,
    io: Io,
    cfg: TcpConfig,
    card: String,
    /// Why this backend runs (for `describe`).
    why: String,
}

impl TcpNetmod {
    /// Opens the listener and picks the backend. `job` is the process
    /// group's id (the PMI KVS name): connections from other jobs are
    /// refused unless added with `add_group`. `my_rank` (below 2^32) is our
    /// rank in it, the PeerId other processes of the job know us by.
    pub fn new(config: TcpConfig, job: &str, my_rank: u64) -> Result<TcpNetmod, NetmodError> {
        config.validate()?;
        let invalid = |why: &str| NetmodError::Io {
            what: "tcp netmod".into(),
            source: io::Error::new(io::ErrorKind::InvalidInput, why.to_string()),
        };
        if job.len() > wire::MAX_JOB {
            return Err(invalid("job id longer than 256 bytes"));
        }
        if my_rank > u32::MAX as u64 {
            return Err(invalid("rank above 2^32 - 1"));
        }
        let (ips, one) = iface::select(&config.ifaces)?;
        let bind_ip = if one && ips.len() == 1 {
            ips[0]
        } else {
            Ipv4Addr::UNSPECIFIED
        };
        let bind = SocketAddr::new(IpAddr::V4(bind_ip), 0);
        let listen_err = |source| NetmodError::Io {
            what: format!("listen on {bind}"),
            source,
        };
        let uring = match config.backend {
            Backend::Poll => Err("RIVET_TCP_BACKEND=poll".to_string()),
            Backend::Uring | Backend::Auto => uring::setup(&config),
        };
        let (io, local, why) = match uring {
            Ok(setup) => {
                let (fd, local) = sys::listen(bind, false).map_err(listen_err)?;
                let u = UringIo::new(setup, fd);
                let how = match config.backend {
                    Backend::Auto => "auto",
                    _ => "RIVET_TCP_BACKEND=uring",
                };
                let why = format!("{how}: {}", u.features());
                (Io::Uring(u), local, why)
            }
            Err(why) if config.backend == Backend::Uring => {
                return Err(NetmodError::Io {
                    what: "RIVET_TCP_BACKEND=uring".into(),
                    source: io::Error::other(format!("io_uring unavailable: {why}")),
                })
            }
            Err(why) => {
                let (p, local) = PollIo::new(bind)?;
                let why = if config.backend == Backend::Poll {
                    why
                } else {
                    format!("io_uring unavailable: {why}")
                };
                (Io::Poll(p), local, why)
            }
        };
        let addrs: Vec<SocketAddr> = ips
            .iter()
            .map(|ip| SocketAddr::new(IpAddr::V4(*ip), local.port()))
            .collect();
        let mut st = State::new(my_rank, job.as_bytes());
        st.key = config.job_key;
        st.hs_timeout = config.handshake_timeout;
        st.max_unplaced = config.piece;
        st.keepalive = config.keepalive;
        st.nonblocking = matches!(io, Io::Poll(_));
        Ok(TcpNetmod {
            st,
            io,
            cfg: config,
            card: card::format(&addrs),
            why,
        })
    }

    /// The backend in use: `Uring` or `Poll`.
    pub fn backend(&self) -> Backend {
        match self.io {
            Io::Poll(_) => Backend::Poll,
            Io::Uring(_) => Backend::Uring,
        }
    }

    /// Connections accepted so far (either side's, rank and port
    /// connections alike), for tests and `--info`: a pair that connected
    /// simultaneously counts one on each side.
    pub fn connections_made(&self) -> u64 {
        self.st.made
    }

    /// Accepted connections closed because their HELLO did not arrive
    /// within `TcpConfig::handshake_timeout`.
    pub fn handshakes_expired(&self) -> u64 {
        self.st.expired
    }

    /// System calls made for I/O so far: on the poll backend every send,
    /// receive, `epoll_wait` (a park's too), accept and connect; on
    /// io_uring each `io_uring_enter` of a poll or a park (submitting SQEs
    /// does not count apart).
    pub fn syscalls(&self) -> u64 {
        match &self.io {
            Io::Poll(_) => self.st.calls,
            Io::Uring(u) => self.st.calls + u.calls(),
        }
    }

    /// io_uring only: queue flights sent zero-copy (SEND_ZC), and receive
    /// completions that filled a bundle of several buffers; `(0, 0)` on poll.
    pub fn uring_paths(&self) -> (u64, u64) {
        match &self.io {
            Io::Poll(_) => (0, 0),
            Io::Uring(u) => (u.zc_sends, u.bundles),
        }
    }

    /// io_uring only: plain `recv` calls that took bytes, on a poll that
    /// saw the kernel's task-work flag (instead of entering to run the
    /// multishot RECV) or on a spinning connection; 0 on poll and in modes
    /// other than DEFER_TASKRUN.
    pub fn uring_direct_reads(&self) -> u64 {
        match &self.io {
            Io::Poll(_) => 0,
            Io::Uring(u) => u.direct_reads,
        }
    }

    /// io_uring only: times a connection started spinning
    /// (read by plain `recv` every poll, its multishot RECV cancelled);
    /// 0 on poll and in modes other than DEFER_TASKRUN.
    pub fn uring_spins(&self) -> u64 {
        match &self.io {
            Io::Poll(_) => 0,
            Io::Uring(u) => u.spins,
        }
    }

    /// Waits `park` made (blocked in `io_uring_enter` or `epoll_wait`),
    /// and how many of them ended by their timeout rather than by
    /// something arriving.
    pub fn parks(&self) -> (u64, u64) {
        match &self.io {
            Io::Poll(p) => (p.parks, p.park_timeouts),
            Io::Uring(u) => (u.parks, u.park_timeouts),
        }
    }

    /// io_uring only: bytes of open connections received through
    /// provided buffers (one copy more) and straight into the parser's
    /// target (direct `recv`, single-shot RECVs); zeros on poll.
    pub fn uring_rx_bytes(&self) -> RxBytes {
        match &self.io {
            Io::Poll(_) => RxBytes::default(),
            Io::Uring(u) => u.rx,
        }
    }

    /// Peers with an open connection now.
    pub fn connected_peers(&self) -> usize {
        self.st.peers.values().filter(|p| p.open).count()
    }
}

impl TcpNetmod {
    /// `try_send` to a known peer, not failed, with room in its queue,
    /// whose connection is not open: the message is queued, and on the
    /// first one (nothing started from either side) the connect starts.
    #[cold]
    #[inline(never)]
    fn send_unopened(
        &mut self,
        peer: PeerId,
        header: &[u8],
        payload: &[u8],
    ) -> Result<bool, NetmodError> {
        let Some(p) = self.st.peers.get_mut(&peer) else {
            return Err(not_connected(peer));
        };
        if p.started || p.conn.is_some() || p.mine.is_some() {
            p.out.push(header, payload, 0);
            return Ok(true);
        }
        p.started = true;
        match &mut self.io {
            Io::Poll(p) => p.start(&mut self.st, peer),
            Io::Uring(u) => u.start(&mut self.st, peer),
        }
        let Some(p) = self.st.peers.get_mut(&peer) else {
            return Err(not_connected(peer));
        };
        if let Some(why) = &p.failed {
            return Err(peer_failed(peer, why));
        }
        p.out.push(header, payload, 0);
        Ok(true)
    }

    #[cold]
    #[inline(never)]
    fn too_large(&self, peer: PeerId, header: &[u8], payload: &[u8]) -> NetmodError {
        NetmodError::Peer {
            peer,
            what: format!(
                "message too large for tcp: header {} (max {}), payload {} (max {})",
                header.len(),
                wire::MAX_HEADER,
                payload.len(),
                self.cfg.piece
            ),
        }
    }
}

#[cold]
#[inline(never)]
fn not_connected(peer: PeerId) -> NetmodError {
    NetmodError::Peer {
        peer,
        what: "not connected (no connect call)".into(),
    }
}

#[cold]
#[inline(never)]
fn peer_failed(peer: PeerId, why: &str) -> NetmodError {
    NetmodError::Peer {
        peer,
        what: why.to_string(),
    }
}

impl Drop for TcpNetmod {
    fn drop(&mut self) {
        if self.cfg.stats {
            let rx = self.uring_rx_bytes();
            let (enters, spins) = match &self.io {
                Io::Poll(_) => (0, 0),
                Io::Uring(u) => (u.calls(), u.spins),
            };
            eprintln!(
                "rivet tcp stats: rank {} {:?}: syscalls {} (io_uring enters {enters}), \
                 rx bytes: provided buffers {}, direct recv {}, single-shot RECV {}; spins {spins}",
                self.st.me,
                self.backend(),
                self.syscalls(),
                rx.ring,
                rx.direct,
                rx.single,
            );
        }
        if let Io::Uring(u) = &mut self.io {
            u.teardown(&mut self.st);
        }
    }
}

impl Netmod for TcpNetmod {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn business_card(&self) -> &str {
        &self.card
    }

    fn knows(&self, peer: PeerId) -> bool {
        self.st.peers.contains_key(&peer)
    }

    fn connect(&mut self, peer: PeerId, card: &str) -> Result<(), NetmodError> {
        if self.knows(peer) {
            return Ok(());
        }
        self.st.jobs.check_connect(peer)?;
        let addrs = card::parse(card)?;
        self.st.peers.insert(
            peer,
            Peer {
                addrs,
                ..Peer::default()
            },
        );
        Ok(())
    }

    fn add_group(&mut self, group: u32, job: &str) -> Result<(), NetmodError> {
        self.st.jobs.add_group(group, job)
    }

    fn remove_group(&mut self, group: u32) {
        self.st.jobs.remove(group);
    }

    fn set_group_key(&mut self, group: u32, key: crate::auth::JobKey) -> Result<(), NetmodError> {
        self.st.jobs.set_key(group, key)
    }

    fn connect_port(&mut self, card: &str, tag: u64) -> Result<PeerId, NetmodError> {
        let addrs = card::parse(card)?;
        let peer = self.st.add_port_peer(addrs, tag);
        // Not lazy: a refusal is reported even if nothing is sent.
        match &mut self.io {
            Io::Poll(p) => p.start(&mut self.st, peer),
            Io::Uring(u) => u.start(&mut self.st, peer),
        }
        Ok(peer)
    }

    fn disconnect(&mut self, peer: PeerId) {
        if !self.knows(peer) {
            return;
        }
        if let Io::Uring(u) = &mut self.io {
            u.quiesce(&mut self.st, peer);
        }
        self.st.disconnect(peer);
    }

    fn peer_count(&self) -> usize {
        self.st.peer_count()
    }

    fn try_send(
        &mut self,
        peer: PeerId,
        header: &[u8],
        payload: &[u8],
    ) -> Result<bool, NetmodError> {
        if header.len() > wire::MAX_HEADER || payload.len() > self.cfg.piece {
            return Err(self.too_large(peer, header, payload));
        }
        let frame = wire::PREFIX + header.len() + payload.len();
        // One lookup of the peer on the usual paths, a compare when it is
        // the last one sent to (`PeerMap`).
        let Some(p) = self.st.peers.get_mut(&peer) else {
            return Err(not_connected(peer));
        };
        if let Some(why) = &p.failed {
            return Err(peer_failed(peer, why));
        }
        // The queue's length once: its room (`Outq::has_room`) and the
        // coalescing rule below both ask.
        let queued = p.out.len();
        if !outq::room(queued, frame) {
            return Ok(false);
        }
        // Written straight to the socket (the backend's plain `send`/`sendmsg`)
        // when nothing is queued and, for a small message, when it is the
        // first since the last poll: a lone message (ping-pong) leaves at
        // once, while a burst of small ones (a window of isends) is queued
        // and leaves in one send at the next poll. Not yet open: queued
        // (`send_unopened`).
        let Some(id) = p.conn.filter(|_| p.open) else {
            return self.send_unopened(peer, header, payload);
        };
        let small = frame < COALESCE_BELOW;
        // Something queued already (most of a window's messages): no need
        // to ask the backend whether it wrote since its poll.
        if queued > 0 || (small && self.io.wrote_since_poll()) {
            p.out.push(header, payload, 0);
            self.st.mark_dirty(id.slot);
            if let Io::Poll(io) = &mut self.io {
                // Enough waiting: written now rather than at the next poll.
                if small && queued + frame >= poll::COALESCE_FLUSH {
                    io.drive(&mut self.st, id.slot);
                }
            }
            return Ok(true);
        }
        let written = match &mut self.io {
            Io::Poll(io) => io.send_direct(&mut self.st, id, header, payload),
            Io::Uring(u) => u.send_direct(&mut self.st, id.slot, header, payload),
        };
        if written != Some(frame) {
            // What the socket did not take waits in the queue (unless the
            // send failed the peer).
            if let Some(p) = self.st.peers.get_mut(&peer).filter(|p| p.failed.is_none()) {
                p.out.push(header, payload, written.unwrap_or(0));
                self.st.mark_dirty(id.slot);
            }
        }
        Ok(true)
    }

    fn poll(&mut self, sink: &mut dyn Sink) -> Result<usize, NetmodError> {
        match &mut self.io {
            Io::Poll(p) => p.poll(&mut self.st, sink),
            Io::Uring(u) => u.poll(&mut self.st, sink),
        }
    }

    fn park(&mut self, timeout: std::time::Duration) -> bool {
        match &mut self.io {
            Io::Poll(p) => p.park(&mut self.st, timeout),
            Io::Uring(u) => u.park(&mut self.st, timeout),
        }
    }

    fn syscalls(&self) -> Option<u64> {
        Some(TcpNetmod::syscalls(self))
    }

    fn idle(&self) -> bool {
        self.st.peers.values().all(|p| p.out.is_empty()) && self.st.drained()
    }

    fn limits(&self) -> Limits {
        Limits {
            max_payload: self.cfg.piece,
            eager_max: self.cfg.eager_max,
        }
    }

    fn describe(&self) -> Vec<(String, String)> {
        let backend = match self.io {
            Io::Poll(_) => "poll",
            Io::Uring(_) => "uring",
        };
        vec![
            ("tcp.backend".into(), format!("{backend} ({})", self.why)),
            ("tcp.listen".into(), self.card.clone()),
            ("tcp.eager_max".into(), self.cfg.eager_max.to_string()),
            ("tcp.piece".into(), self.cfg.piece.to_string()),
            (
                "tcp.keepalive".into(),
                self.cfg
                    .keepalive
                    .map_or("off".into(), |d| format!("{} s", d.as_secs())),
            ),
            (
                "tcp.peers".into(),
                format!("{} connected", self.connected_peers()),
            ),
            (
                "tcp.parks".into(),
                format!("{} ({} timed out)", self.parks().0, self.parks().1),
            ),
        ]
    }
}
