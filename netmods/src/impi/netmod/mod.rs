//! The `impi` netmod: ranks of other IMPI clients over chapter 3's
//! packets, ranks of this client over the netmod it would use anyway.
//!
//! Peers of group 0 are global ranks (the index in the concatenated proc
//! arrays). Those of this client go to `inner` (tcp or ofi, as without
//! IMPI) under their rank within the client; the others each get a direct
//! [`Channel`]: every proc listens on a socket its launcher bound before
//! the startup exchange (so every address is known, and connectable,
//! before any rank starts) and connects to each lower-ranked proc of other
//! clients at open, sending a hello (`RIVI`, its global rank, the target's,
//! a nonce and their MAC keyed by the run's channel key, see [`super::hello`]).
//! A connection whose hello does not prove the key is closed unheard.
//! Groups besides 0 (dynamic processes) go to `inner` unchanged.
//!
//! Where the seed leaves the choice to the implementation (3.1: "the
//! protocol does not specify the interaction between processes and their
//! agent"), Rivet makes each proc its own agent for data, so traffic does
//! not pass through rivetrun; the per-proc ports travel in Rivet's own
//! COLL label `RIVET_P_PORT`. A pair where one side has no such port (its
//! client is another implementation, or ran with `RIVET_IMPI_DIRECT=0`)
//! goes through the agents: the launcher hands this rank one socket per
//! such peer (`IMPI_FUNNEL_FDS`), connected from the start, and moves its
//! packets over the host links; the channel on it is the same.
//!
//! A poll costs what tcp's poll backend costs: with one open channel (and
//! no connection still expected) its receive is the readiness check; with
//! more, one `epoll_wait` says which to read. Nothing is allocated per
//! poll or per short message.
//!
//! Shutdown (3.8): a channel whose peer sent `IMPI_PK_FINI` is answered
//! with ours at once (its engine said goodbye before, so nothing more goes
//! to it), so a dropped netmod waits for its peers' FINI only as long as
//! they take to poll; the wait is bounded by `FINI_TIMEOUT` for peers that
//! do not.
//!
//! By concept: the netmod's state and opening (here), opening channels
//! (dialling, accepting, hellos: `connect.rs`), the `Netmod` calls and the
//! poll (`api.rs`), the sinks arrivals go through (`sinks.rs`), FINI at the
//! end (`shutdown.rs`).

use std::collections::HashMap;
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use super::channel::Channel;
use super::config::ImpiConfig;
use crate::auth::JobKey;
use crate::tcp::sys::Epoll;
use crate::{peer_id, split_peer, FxBuildHasher, Limits, Netmod, NetmodError, PeerId};

mod api;
mod connect;
mod shutdown;
mod sinks;

use connect::Accepting;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an accepted connection may take to send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Accepted connections waiting for their hello at once, at most.
const ACCEPTING_MAX: usize = 64;
/// How long dropping the netmod waits for each peer's `IMPI_PK_FINI`.
const FINI_TIMEOUT: Duration = Duration::from_secs(10);
/// The listener's epoll token (channels carry their global rank).
const LISTENER: u64 = u64::MAX;
/// Limits without an inner netmod.
const DEFAULT_LIMITS: Limits = Limits {
    max_payload: 1 << 20,
    eager_max: 64 * 1024,
};

pub struct ImpiNetmod {
    inner: Option<Box<dyn Netmod>>,
    cfg: ImpiConfig,
    key: JobKey,
    card: String,
    /// Open while higher-ranked procs of other clients are yet to connect.
    listener: Option<TcpListener>,
    inbound_left: usize,
    accepting: Vec<Accepting>,
    chans: HashMap<u32, Channel, FxBuildHasher>,
    /// Channels with a socket, by global rank (each is in `epoll`).
    open: Vec<u32>,
    epoll: Epoll,
    /// Reused list of ready epoll tokens.
    ready: Vec<u64>,
    /// Channels to flush at the next poll (queued ACKs, coalesced sends).
    dirty: Vec<u32>,
    /// Channels that failed, with why, to report at the next poll.
    failures: Vec<(u32, String)>,
    /// Channels reported failed (sends to them fail).
    dead: HashMap<u32, String>,
    /// Hellos refused (wrong key, rank or magic), for `describe` and tests.
    refused: u64,
    limits: Limits,
    syscalls: u64,
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> NetmodError {
    move |source| NetmodError::Io {
        what: what.into(),
        source,
    }
}

impl ImpiNetmod {
    /// Open for the job `cfg` describes; `inner` reaches this client's
    /// other ranks (`None` when all of them are on this node).
    pub fn new(cfg: ImpiConfig, inner: Option<Box<dyn Netmod>>) -> Result<ImpiNetmod, NetmodError> {
        // SAFETY: the launcher made `listen_fd` (when it is one) and the
        // funnel sockets for this rank and handed them down
        // (IMPI_LISTEN_FDS, IMPI_FUNNEL_FDS); nothing else here owns them.
        let listener =
            (cfg.listen_fd >= 0).then(|| unsafe { TcpListener::from_raw_fd(cfg.listen_fd) });
        // SAFETY: as above.
        let funnel: Vec<(u32, OwnedFd)> = cfg
            .funnel
            .iter()
            .map(|&(g, fd)| (g, unsafe { OwnedFd::from_raw_fd(fd) }))
            .collect();
        for &fd in &cfg.other_fds {
            // SAFETY: the other ranks' sockets, inherited, unused here.
            unsafe { libc::close(fd) };
        }
        let owned = listener
            .iter()
            .map(AsRawFd::as_raw_fd)
            .chain(funnel.iter().map(|(_, fd)| fd.as_raw_fd()));
        for fd in owned {
            // SAFETY: fcntl on our own descriptor, no pointers.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
        let key = cfg.channel_key.ok_or_else(|| {
            NetmodError::Unavailable(
                "IMPI: no channel key (IMPI_CHANNEL_KEY, set by `rivetrun --impi-client`)".into(),
            )
        })?;
        let epoll = Epoll::new().map_err(io_err("IMPI: epoll_create1"))?;
        let limits = inner.as_ref().map_or(DEFAULT_LIMITS, |n| n.limits());
        let card = inner
            .as_ref()
            .map_or_else(|| "impi".to_string(), |n| n.business_card().to_string());
        let inbound_left = (cfg.rank + 1..cfg.size())
            .filter(|&g| !cfg.is_own(g) && cfg.funnel_fd(g).is_none())
            .count();
        let listener = match listener {
            Some(l) if inbound_left > 0 => {
                l.set_nonblocking(true)
                    .map_err(io_err("IMPI: the inherited listening socket"))?;
                epoll
                    .add(l.as_raw_fd(), LISTENER)
                    .map_err(io_err("IMPI: epoll_ctl"))?;
                Some(l)
            }
            None if inbound_left > 0 => {
                return Err(NetmodError::Unavailable(format!(
                    "IMPI: {inbound_left} higher world ranks would connect to this one, which has \
                     no listening socket (IMPI_LISTEN_FDS)"
                )))
            }
            _ => None,
        };
        let mut nm = ImpiNetmod {
            inner,
            card,
            key,
            listener,
            inbound_left,
            accepting: Vec::new(),
            chans: HashMap::default(),
            open: Vec::new(),
            epoll,
            ready: Vec::new(),
            dirty: Vec::new(),
            failures: Vec::new(),
            dead: HashMap::new(),
            refused: 0,
            limits,
            syscalls: 0,
            cfg,
        };
        for (g, fd) in funnel {
            set_nonblocking(&fd).map_err(io_err("IMPI: a funnel socket"))?;
            nm.attach(g, fd)
                .map_err(io_err("IMPI: watching a funnel socket"))?;
        }
        for g in 0..nm.cfg.size() {
            if g < nm.cfg.rank && !nm.cfg.is_own(g) && nm.cfg.funnel_fd(g).is_none() {
                nm.dial(g)?;
            }
        }
        Ok(nm)
    }

    fn channel(&mut self, g: u32) -> &mut Channel {
        let cfg = &self.cfg;
        let max_msg = self.limits.max_payload as u64 + 64 * 1024;
        self.chans.entry(g).or_insert_with(|| {
            let me = &cfg.procs[cfg.rank as usize];
            let them = &cfg.procs[g as usize];
            let direct = cfg.funnel_fd(g).is_none();
            Channel::new(
                me.proc,
                them.proc,
                cfg.maxdatalen,
                max_msg,
                them.flow_from(me, direct),
                me.flow_from(them, direct).0,
            )
        })
    }

    /// Give channel `g` its socket, watched from now on.
    fn attach(&mut self, g: u32, s: impl Into<OwnedFd>) -> io::Result<()> {
        let s: OwnedFd = s.into();
        self.epoll.add(s.as_raw_fd(), g as u64)?;
        self.syscalls += 1;
        self.channel(g).sock = Some(s);
        self.open.push(g);
        Ok(())
    }

    /// Close channel `g`'s socket (if open).
    fn close(&mut self, g: u32) {
        if let Some(s) = self.chans.get_mut(&g).and_then(|c| c.sock.take()) {
            self.epoll.del(s.as_raw_fd());
            self.syscalls += 1;
        }
        self.open.retain(|&x| x != g);
    }

    /// Hellos refused so far (wrong key, rank or magic; a replay).
    pub fn refused_hellos(&self) -> u64 {
        self.refused
    }

    /// Channel `g`: (socket open, our FINI sent, theirs received).
    #[cfg(test)]
    pub(crate) fn channel_state(&self, g: u32) -> Option<(bool, bool, bool)> {
        self.chans
            .get(&g)
            .map(|c| (c.sock.is_some(), c.fini_sent, c.fini_got))
    }

    /// `Some(local peer)` when `peer` goes to the inner netmod.
    fn inner_peer(&self, peer: PeerId) -> Option<PeerId> {
        let (group, rank) = split_peer(peer);
        if group != 0 {
            return Some(peer);
        }
        self.cfg
            .is_own(rank)
            .then(|| peer_id(0, rank - self.cfg.offset))
    }

    fn inner(&mut self) -> Result<&mut Box<dyn Netmod>, NetmodError> {
        self.inner.as_mut().ok_or_else(|| {
            NetmodError::Unavailable(
                "IMPI: no netmod for this client's own ranks (all are on this node)".into(),
            )
        })
    }

    fn fail(&mut self, g: u32, why: String) {
        self.close(g);
        self.failures.push((g, why));
    }
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own, no pointers.
    let ok = unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    };
    if ok {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
