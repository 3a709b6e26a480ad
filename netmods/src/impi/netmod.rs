//! The `impi` netmod: ranks of other IMPI clients over chapter 3's
//! packets, ranks of this client over the netmod it would use anyway.
//!
//! Peers of group 0 are global ranks (the index in the concatenated proc
//! arrays). Those of this client go to `inner` (tcp or ofi, as without
//! IMPI) under their rank within the client; the others each get a direct
//! [`Channel`]: every proc listens on a socket its launcher bound before
//! the startup exchange (so every address is known, and connectable,
//! before any rank starts) and connects to each lower-ranked proc of other
//! clients at open, sending an 8-byte hello (`RIVI`, its global rank).
//! Groups besides 0 (dynamic processes) go to `inner` unchanged.
//!
//! Where the seed leaves the choice to the implementation (3.1: "the
//! protocol does not specify the interaction between processes and their
//! agent"), Rivet makes each proc its own agent for data, so traffic does
//! not pass through rivetrun; the per-proc ports travel in Rivet's own
//! COLL label `RIVET_P_PORT`. A client that does not send it (another
//! implementation) cannot be reached yet: that needs the funnel through
//! the host link, which is not written.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use super::channel::{split_message, Channel, Event};
use super::config::ImpiConfig;
use crate::{peer_id, split_peer, Limits, Netmod, NetmodError, PeerId, Sink};

/// The hello a connecting proc sends: magic, then its global rank.
const HELLO_MAGIC: &[u8; 4] = b"RIVI";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long dropping the netmod waits for each peer's `IMPI_PK_FINI`.
const FINI_TIMEOUT: Duration = Duration::from_secs(10);
/// Limits without an inner netmod.
const DEFAULT_LIMITS: Limits = Limits {
    max_payload: 1 << 20,
    eager_max: 64 * 1024,
};

pub struct ImpiNetmod {
    inner: Option<Box<dyn Netmod>>,
    cfg: ImpiConfig,
    card: String,
    listener: TcpListener,
    /// Accepted connections still owing their hello.
    accepting: Vec<(TcpStream, Vec<u8>)>,
    chans: HashMap<u32, Channel>,
    /// Channels that failed, with why, to report at the next poll.
    failures: Vec<(u32, String)>,
    /// Channels reported failed (sends to them fail).
    dead: HashMap<u32, String>,
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
        // SAFETY: the launcher made `listen_fd` for this rank and handed it
        // down (IMPI_LISTEN_FDS); nothing else in this process owns it.
        let listener = unsafe { TcpListener::from_raw_fd(cfg.listen_fd) };
        for &fd in &cfg.other_fds {
            // SAFETY: the other ranks' sockets, inherited, unused here.
            unsafe { libc::close(fd) };
        }
        // SAFETY: fcntl on our own descriptor, no pointers.
        unsafe { libc::fcntl(listener.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
        listener
            .set_nonblocking(true)
            .map_err(io_err("IMPI: the inherited listening socket"))?;
        let limits = inner.as_ref().map_or(DEFAULT_LIMITS, |n| n.limits());
        let card = inner
            .as_ref()
            .map_or_else(|| "impi".to_string(), |n| n.business_card().to_string());
        let mut nm = ImpiNetmod {
            inner,
            card,
            listener,
            accepting: Vec::new(),
            chans: HashMap::new(),
            failures: Vec::new(),
            dead: HashMap::new(),
            limits,
            syscalls: 0,
            cfg,
        };
        for g in 0..nm.cfg.size() {
            if g < nm.cfg.rank && !nm.cfg.is_own(g) {
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

    /// Connect to lower-ranked `g` (its listener exists since before we started).
    fn dial(&mut self, g: u32) -> Result<(), NetmodError> {
        let p = &self.cfg.procs[g as usize];
        if p.addr.port() == 0 {
            return Err(NetmodError::Peer {
                peer: g.into(),
                what: format!(
                    "world rank {g} runs under a client that published no direct-channel port \
                     (RIVET_P_PORT: not a Rivet client?); reaching it through its host agent is \
                     not implemented"
                ),
            });
        }
        let addr = p.addr;
        let result = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).and_then(|mut s| {
            let mut hello = HELLO_MAGIC.to_vec();
            hello.extend_from_slice(&self.cfg.rank.to_be_bytes());
            s.write_all(&hello)?;
            s.set_nodelay(true)?;
            s.set_nonblocking(true)?;
            Ok(s)
        });
        match result {
            Ok(s) => self.channel(g).sock = Some(s),
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
        loop {
            self.syscalls += 1;
            match self.listener.accept() {
                Ok((s, _)) => {
                    if s.set_nonblocking(true).is_ok() {
                        let _ = s.set_nodelay(true);
                        self.accepting.push((s, Vec::new()));
                    }
                }
                Err(_) => break,
            }
        }
        let mut i = 0;
        while i < self.accepting.len() {
            let (s, got) = &mut self.accepting[i];
            let mut b = [0u8; 8];
            let want = 8 - got.len();
            match s.read(&mut b[..want]) {
                Ok(0) => {
                    self.accepting.swap_remove(i);
                    continue;
                }
                Ok(n) => got.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    self.accepting.swap_remove(i);
                    continue;
                }
            }
            if got.len() < 8 {
                i += 1;
                continue;
            }
            let (s, got) = self.accepting.swap_remove(i);
            let g = u32::from_be_bytes([got[4], got[5], got[6], got[7]]);
            let valid = &got[..4] == HELLO_MAGIC
                && g > self.cfg.rank
                && g < self.cfg.size()
                && !self.cfg.is_own(g)
                && self.chans.get(&g).is_none_or(|c| c.sock.is_none());
            if valid {
                let c = self.channel(g);
                c.sock = Some(s);
                c.pump();
                if let Err(e) = c.flush() {
                    self.failures
                        .push((g, format!("IMPI: writing to world rank {g}: {e}")));
                }
            }
            // Anything else is dropped (closed).
        }
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
        if let Some(c) = self.chans.get_mut(&g) {
            c.sock = None;
        }
        self.failures.push((g, why));
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
                if let Some(mut c) = self.chans.remove(&split_peer(peer).1) {
                    c.send_fini();
                    let _ = c.flush();
                }
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
        match c.take(header, payload) {
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
        // One poll(2) over every socket says which to read.
        let mut fds = Vec::with_capacity(self.chans.len() + self.accepting.len() + 1);
        fds.push(libc::pollfd {
            fd: self.listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        for (s, _) in &self.accepting {
            fds.push(libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let mut order = Vec::with_capacity(self.chans.len());
        for (&g, c) in &self.chans {
            if let Some(s) = &c.sock {
                let mut ev = libc::POLLIN;
                if c.wants_write() {
                    ev |= libc::POLLOUT;
                }
                fds.push(libc::pollfd {
                    fd: s.as_raw_fd(),
                    events: ev,
                    revents: 0,
                });
                order.push(g);
            }
        }
        self.syscalls += 1;
        // SAFETY: `fds` is a live array of `fds.len()` pollfds.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
        if n > 0 {
            let first_chan = 1 + self.accepting.len();
            if fds[..first_chan].iter().any(|f| f.revents != 0) {
                self.accept();
            }
            let mut got = Vec::new();
            for (i, &g) in order.iter().enumerate() {
                let re = fds[first_chan + i].revents;
                if re == 0 {
                    continue;
                }
                let Some(c) = self.chans.get_mut(&g) else {
                    continue;
                };
                got.clear();
                let r = c.read(&mut got);
                let fini = c.fini_got;
                self.syscalls += std::mem::take(&mut c.syscalls);
                for e in got.drain(..) {
                    match e {
                        Event::Message(buf) => {
                            match split_message(&buf) {
                                Some((h, p)) => {
                                    sink.deliver(peer_id(0, g), h, p);
                                    events += 1;
                                }
                                None => {
                                    self.fail(g, format!("IMPI: world rank {g} sent a message without its header"));
                                    break;
                                }
                            }
                        }
                        Event::Fini => {}
                    }
                }
                match r {
                    Ok(true) => {}
                    Ok(false) if fini => {
                        // Finished in order (3.8): nothing more comes.
                        if let Some(c) = self.chans.get_mut(&g) {
                            c.sock = None;
                        }
                    }
                    Ok(false) => self.fail(
                        g,
                        format!(
                            "IMPI: world rank {g} closed its channel without IMPI_PK_FINI: its \
                             process or its client failed"
                        ),
                    ),
                    Err(e) => self.fail(g, format!("IMPI: channel to world rank {g}: {e}")),
                }
            }
        } else {
            // Nothing readable: still push out what credit now allows.
            for (&g, c) in self.chans.iter_mut() {
                if c.wants_write() {
                    if let Err(e) = c.flush() {
                        self.failures
                            .push((g, format!("IMPI: writing to world rank {g}: {e}")));
                    }
                }
            }
        }
        for (g, why) in std::mem::take(&mut self.failures) {
            if self.dead.contains_key(&g) {
                continue;
            }
            if let Some(c) = self.chans.get_mut(&g) {
                c.sock = None;
            }
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
                .all(|(g, c)| c.idle() || self.dead.contains_key(g))
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
                     channel per peer of another client (dialled to lower ranks at init)",
                    self.cfg.rank,
                    self.cfg.size(),
                    self.cfg.offset,
                    self.cfg.offset + self.cfg.client_size,
                    self.cfg.maxdatalen,
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
    /// comes until the peer's FINI, within a bound.
    fn drop(&mut self) {
        for (g, c) in self.chans.iter_mut() {
            if c.sock.is_none() || self.dead.contains_key(g) {
                continue;
            }
            c.send_fini();
        }
        let deadline = Instant::now() + FINI_TIMEOUT;
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
                let mut ev = Vec::new();
                match c.read(&mut ev) {
                    Ok(true) => open += 1,
                    _ => c.sock = None,
                }
            }
            if open == 0 || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}
