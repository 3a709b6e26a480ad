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

use std::collections::HashMap;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use super::channel::{Arrivals, Channel};
use super::config::ImpiConfig;
use super::hello::{check_hello, hello, HELLO_LEN};
use crate::auth::{self, JobKey};
use crate::tcp::sys::Epoll;
use crate::{peer_id, split_peer, FxBuildHasher, Limits, Netmod, NetmodError, PeerId, Sink};

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

/// An accepted connection still owing its hello.
struct Accepting {
    sock: TcpStream,
    got: [u8; HELLO_LEN],
    len: usize,
    since: Instant,
}

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
            Channel::new(
                me.proc,
                them.proc,
                cfg.maxdatalen,
                max_msg,
                (them.ackmark, them.hiwater),
                me.ackmark,
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

    /// Connect to lower-ranked `g` (its listener exists since before we started).
    fn dial(&mut self, g: u32) -> Result<(), NetmodError> {
        let p = &self.cfg.procs[g as usize];
        if p.addr.port() == 0 {
            return Err(NetmodError::Peer {
                peer: g.into(),
                what: format!(
                    "world rank {g} has no direct-channel port (RIVET_P_PORT) and the launcher \
                     gave no funnel socket for it (IMPI_FUNNEL_FDS)"
                ),
            });
        }
        let addr = p.addr;
        let h = hello(&self.key, self.cfg.rank, g, auth::nonce());
        let result = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).and_then(|mut s| {
            use std::io::Write;
            s.write_all(&h)?;
            s.set_nodelay(true)?;
            s.set_nonblocking(true)?;
            Ok(s)
        });
        match result.and_then(|s| self.attach(g, s)) {
            Ok(()) => {}
            Err(e) => {
                self.channel(g);
                self.failures.push((
                    g,
                    format!("IMPI: cannot connect to world rank {g} at {addr}: {e}"),
                ));
            }
        }
        Ok(())
    }

    fn accept(&mut self) {
        let Some(l) = self.listener.as_ref() else {
            return;
        };
        loop {
            self.syscalls += 1;
            match l.accept() {
                Ok((s, _)) => {
                    if self.accepting.len() < ACCEPTING_MAX && s.set_nonblocking(true).is_ok() {
                        let _ = s.set_nodelay(true);
                        self.accepting.push(Accepting {
                            sock: s,
                            got: [0; HELLO_LEN],
                            len: 0,
                            since: Instant::now(),
                        });
                    }
                }
                Err(_) => break,
            }
        }
    }

    /// Read the hellos of accepted connections; adopt the proven ones.
    fn serve_hellos(&mut self) {
        let mut i = 0;
        while i < self.accepting.len() {
            let a = &mut self.accepting[i];
            self.syscalls += 1;
            let keep = match io::Read::read(&mut a.sock, &mut a.got[a.len..]) {
                Ok(0) => false,
                Ok(n) => {
                    a.len += n;
                    true
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    a.since.elapsed() < HELLO_TIMEOUT
                }
                Err(_) => false,
            };
            if keep && self.accepting[i].len < HELLO_LEN {
                i += 1;
                continue;
            }
            let a = self.accepting.swap_remove(i);
            if !keep {
                continue;
            }
            let me = self.cfg.rank;
            let proven = check_hello(&self.key, me, &a.got).filter(|&g| {
                g > me
                    && g < self.cfg.size()
                    && !self.cfg.is_own(g)
                    && self
                        .chans
                        .get(&g)
                        .is_none_or(|c| c.sock.is_none() && !c.fini_sent)
                    && !self.dead.contains_key(&g)
            });
            let Some(g) = proven else {
                // A stranger, a replay or a wrong key: closed unheard.
                self.refused += 1;
                continue;
            };
            if let Err(e) = self.attach(g, a.sock) {
                self.failures
                    .push((g, format!("IMPI: watching world rank {g}: {e}")));
                continue;
            }
            self.inbound_left -= 1;
            let c = self.channel(g);
            c.pump();
            if let Err(e) = c.flush() {
                self.failures
                    .push((g, format!("IMPI: writing to world rank {g}: {e}")));
            }
        }
        if self.inbound_left == 0 {
            if let Some(l) = self.listener.take() {
                self.epoll.del(l.as_raw_fd());
            }
        }
    }

    /// Read channel `g`, delivering to `sink`; returns the messages delivered.
    fn read(&mut self, g: u32, sink: &mut dyn Sink) -> usize {
        let Some(c) = self.chans.get_mut(&g) else {
            return 0;
        };
        let mut to = ToSink {
            sink,
            peer: peer_id(0, g),
            n: 0,
        };
        let r = c.read(&mut to);
        let n = to.n;
        self.syscalls += std::mem::take(&mut c.syscalls);
        match r {
            Ok(true) => {
                if c.fini_got && !c.fini_sent {
                    // 3.8: the peer finished with the channel (its engine
                    // said goodbye first): answer at once, so its drop
                    // need not wait for ours.
                    c.send_fini();
                    if let Err(e) = c.flush() {
                        self.failures
                            .push((g, format!("IMPI: writing to world rank {g}: {e}")));
                    }
                    self.syscalls += std::mem::take(&mut c.syscalls);
                }
                if c.wants_write() && self.dirty.last() != Some(&g) {
                    self.dirty.push(g);
                }
            }
            Ok(false) if c.fini_got => self.close(g),
            Ok(false) => self.fail(
                g,
                format!(
                    "IMPI: world rank {g} closed its channel without IMPI_PK_FINI: its \
                     process or its client failed"
                ),
            ),
            Err(e) => self.fail(g, format!("IMPI: channel to world rank {g}: {e}")),
        }
        n
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

/// A channel's arrivals, to the engine as from `peer`; `n` counts messages.
struct ToSink<'a> {
    sink: &'a mut dyn Sink,
    peer: PeerId,
    n: usize,
}

impl Arrivals for ToSink<'_> {
    fn deliver(&mut self, header: &[u8], payload: &[u8]) {
        self.sink.deliver(self.peer, header, payload);
        self.n += 1;
    }
    fn place(&mut self, header: &[u8], len: usize) -> Option<NonNull<u8>> {
        self.sink.place(self.peer, header, len)
    }
}

/// Hands the inner netmod's arrivals on under global ranks.
struct Shift<'a> {
    sink: &'a mut dyn Sink,
    offset: u32,
}

impl Shift<'_> {
    fn map(&self, peer: PeerId) -> PeerId {
        match split_peer(peer) {
            (0, r) => peer_id(0, r + self.offset),
            _ => peer,
        }
    }
}

impl Sink for Shift<'_> {
    fn deliver(&mut self, peer: PeerId, header: &[u8], payload: &[u8]) {
        let p = self.map(peer);
        self.sink.deliver(p, header, payload)
    }
    fn place(&mut self, peer: PeerId, header: &[u8], len: usize) -> Option<NonNull<u8>> {
        let p = self.map(peer);
        self.sink.place(p, header, len)
    }
    fn peer_failed(&mut self, peer: PeerId, why: &str) {
        let p = self.map(peer);
        self.sink.peer_failed(p, why)
    }
    fn port_connection(&mut self, peer: PeerId, tag: u64) {
        self.sink.port_connection(peer, tag)
    }
}

impl Netmod for ImpiNetmod {
    fn name(&self) -> &'static str {
        "impi"
    }

    fn business_card(&self) -> &str {
        &self.card
    }

    fn knows(&self, peer: PeerId) -> bool {
        match self.inner_peer(peer) {
            Some(p) => self.inner.as_ref().is_some_and(|n| n.knows(p)),
            None => self.chans.contains_key(&split_peer(peer).1),
        }
    }

    fn connect(&mut self, peer: PeerId, card: &str) -> Result<(), NetmodError> {
        match self.inner_peer(peer) {
            Some(p) => self.inner()?.connect(p, card),
            None => {
                let g = split_peer(peer).1;
                if g >= self.cfg.size() {
                    return Err(NetmodError::Peer {
                        peer,
                        what: format!("no world rank {g} (the job has {})", self.cfg.size()),
                    });
                }
                // Higher ranks connect to us; lower ones were dialled at open.
                self.channel(g);
                Ok(())
            }
        }
    }

    fn add_group(&mut self, group: u32, job: &str) -> Result<(), NetmodError> {
        self.inner()?.add_group(group, job)
    }

    fn remove_group(&mut self, group: u32) {
        if let Some(n) = self.inner.as_mut() {
            n.remove_group(group)
        }
    }

    fn connect_port(&mut self, card: &str, tag: u64) -> Result<PeerId, NetmodError> {
        self.inner()?.connect_port(card, tag)
    }

    fn disconnect(&mut self, peer: PeerId) {
        match self.inner_peer(peer) {
            Some(p) => {
                if let Some(n) = self.inner.as_mut() {
                    n.disconnect(p)
                }
            }
            None => {
                let g = split_peer(peer).1;
                if let Some(mut c) = self.chans.remove(&g) {
                    c.send_fini();
                    let _ = c.flush();
                    if let Some(s) = c.sock.take() {
                        self.epoll.del(s.as_raw_fd());
                    }
                }
                self.open.retain(|&x| x != g);
            }
        }
    }

    fn peer_count(&self) -> usize {
        self.inner.as_ref().map_or(0, |n| n.peer_count()) + self.chans.len()
    }

    fn try_send(
        &mut self,
        peer: PeerId,
        header: &[u8],
        payload: &[u8],
    ) -> Result<bool, NetmodError> {
        if let Some(p) = self.inner_peer(peer) {
            return self.inner()?.try_send(p, header, payload);
        }
        let g = split_peer(peer).1;
        if let Some(why) = self.dead.get(&g) {
            return Err(NetmodError::Peer {
                peer,
                what: why.clone(),
            });
        }
        let c = self.chans.get_mut(&g).ok_or_else(|| NetmodError::Peer {
            peer,
            what: "not connected".into(),
        })?;
        if c.fini_got {
            return Err(NetmodError::Peer {
                peer,
                what: format!(
                    "IMPI: world rank {g} has finalized (its IMPI_PK_FINI came): it takes no \
                     more messages"
                ),
            });
        }
        let r = c.take(header, payload);
        self.syscalls += std::mem::take(&mut c.syscalls);
        if c.wants_write() && self.dirty.last() != Some(&g) {
            self.dirty.push(g);
        }
        match r {
            Ok(took) => Ok(took),
            Err(e) => {
                let why = format!("IMPI: writing to world rank {g}: {e}");
                self.fail(g, why);
                Ok(true)
            }
        }
    }

    fn poll(&mut self, sink: &mut dyn Sink) -> Result<usize, NetmodError> {
        let mut events = 0;
        if let Some(n) = self.inner.as_mut() {
            events += n.poll(&mut Shift {
                sink,
                offset: self.cfg.offset,
            })?;
        }
        // What waited for this poll: queued ACKs, coalesced small sends.
        while let Some(g) = self.dirty.pop() {
            if let Some(c) = self.chans.get_mut(&g) {
                c.new_poll();
                c.pump();
                let r = c.flush();
                self.syscalls += std::mem::take(&mut c.syscalls);
                if let Err(e) = r {
                    self.fail(g, format!("IMPI: writing to world rank {g}: {e}"));
                }
            }
        }
        if !self.accepting.is_empty() {
            self.serve_hellos();
        }
        if self.open.len() == 1 && self.listener.is_none() {
            // One channel: its receive is the readiness check.
            events += self.read(self.open[0], sink);
        } else if !self.open.is_empty() || self.listener.is_some() {
            self.syscalls += 1;
            let ready = self.epoll.ready().map_err(io_err("IMPI: epoll_wait"))?;
            self.ready.clear();
            self.ready.extend(ready);
            for i in 0..self.ready.len() {
                match self.ready[i] {
                    LISTENER => {
                        self.accept();
                        self.serve_hellos();
                    }
                    g => events += self.read(g as u32, sink),
                }
            }
        }
        for (g, why) in std::mem::take(&mut self.failures) {
            if self.dead.contains_key(&g) {
                continue;
            }
            self.close(g);
            sink.peer_failed(peer_id(0, g), &why);
            self.dead.insert(g, why);
            events += 1;
        }
        Ok(events)
    }

    fn idle(&self) -> bool {
        self.inner.as_ref().is_none_or(|n| n.idle())
            && self
                .chans
                .iter()
                .all(|(g, c)| c.idle() || c.fini_got || self.dead.contains_key(g))
    }

    fn limits(&self) -> Limits {
        self.limits
    }

    fn syscalls(&self) -> Option<u64> {
        Some(self.syscalls + self.inner.as_ref().and_then(|n| n.syscalls()).unwrap_or(0))
    }

    fn describe(&self) -> Vec<(String, String)> {
        let mut out = vec![
            (
                "impi".to_string(),
                format!(
                    "world rank {} of {}, this client's ranks {}..{}, maxdatalen {}, one direct \
                     channel per peer of another client (dialled to lower ranks at init, hello \
                     MAC checked; {} refused), {} through the agent",
                    self.cfg.rank,
                    self.cfg.size(),
                    self.cfg.offset,
                    self.cfg.offset + self.cfg.client_size,
                    self.cfg.maxdatalen,
                    self.refused,
                    self.cfg.funnel.len(),
                ),
            ),
            (
                "impi_inner".to_string(),
                self.inner
                    .as_ref()
                    .map_or("none (this client's ranks share the node)".into(), |n| {
                        n.name().to_string()
                    }),
            ),
        ];
        if let Some(n) = &self.inner {
            out.extend(n.describe());
        }
        out
    }
}

impl Drop for ImpiNetmod {
    /// 3.8: FINI on every channel, then consume (and acknowledge) what
    /// comes until the peer's FINI. Peers answer as soon as they poll
    /// (see `read`), so this is short unless one stopped polling; it is
    /// bounded by `FINI_TIMEOUT` whatever they do.
    fn drop(&mut self) {
        for (g, c) in self.chans.iter_mut() {
            // Whatever the engine gave to receive into may be gone now.
            c.abandon_placing();
            if c.sock.is_some() && !self.dead.contains_key(g) {
                c.send_fini();
            }
        }
        let deadline = Instant::now() + FINI_TIMEOUT;
        let mut spins = 0u32;
        loop {
            let mut open = 0;
            for c in self.chans.values_mut() {
                if c.sock.is_none() {
                    continue;
                }
                if c.flush().is_err() {
                    c.sock = None;
                    continue;
                }
                if c.fini_got && !c.wants_write() {
                    c.sock = None;
                    continue;
                }
                match c.read(&mut |_: &[u8], _: &[u8]| {}) {
                    Ok(true) => open += 1,
                    _ => c.sock = None,
                }
            }
            if open == 0 || Instant::now() > deadline {
                break;
            }
            // Spin a little (the answer is usually a round trip away),
            // then sleep between looks.
            spins += 1;
            if spins < 100 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}
