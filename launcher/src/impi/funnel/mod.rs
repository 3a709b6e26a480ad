//! rivetrun as its procs' agent on the host links (seed 003, 3.1: "an
//! agent at the source determines the appropriate channel"): the funnel
//! for every pair of procs that has no direct channel, because one side's
//! client sent no `RIVET_P_PORT` (another implementation, or a Rivet client
//! run with `RIVET_IMPI_DIRECT=0`).
//!
//! Each such pair (local rank, remote world rank) gets a socket pair before
//! the ranks start; the rank's end is inherited (`IMPI_FUNNEL_FDS`) and the
//! `impi` netmod drives it as any channel, so per-pair flow control,
//! protocols and FINI stay in the procs (3.6's advice allows counters in
//! the processes). One thread here moves whole packets: from a pair to the
//! host link of the remote proc's host, and from a host link to the pair
//! its `pk_dest`/`pk_src` name. A pair's `IMPI_PK_FINI` is answered here
//! (it ends the rank's channel, not the host link, whose FINI is the
//! agents' own, 3.8). The thread also watches the links as before: a link
//! ending without its FINI ends this client's job.
//!
//! Nothing blocks: sockets are nonblocking, what a peer cannot take yet
//! waits in memory, and a packet naming no pair of this host is dropped
//! with one note. What waits is capped (`end.rs`) at twice what the pairs'
//! flow control allows (at most hiwater packets per pair in flight), never
//! above `end::MAX_QUEUED`: a host that stops reading its link while our
//! ranks go on sending (it acknowledges what it does not read), or that
//! sends a rank more than its flow control allows, has that link failed
//! with a message naming it, as a link ending without its FINI. A peer's bytes that are no packet end its
//! link (or pair) with a message, never a panic.

use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use rivet_netmods::impi::packet::{Kind, Packet, Proc};
use rivet_pmi::impi::world::World;

use crate::error::LaunchError;

mod end;
use end::{cap, End};

/// Environment variable: per local rank (comma-separated), its funnel
/// sockets as `G=FD` entries joined by `;` (G: the remote world rank).
pub const ENV_FUNNEL_FDS: &str = "IMPI_FUNNEL_FDS";

/// Bytes read from one socket per turn.
const READ_CHUNK: usize = 256 * 1024;

/// The pairs of this client's procs without a direct channel.
pub struct Pairs {
    /// (local rank, remote world rank, the rank's end): held until the
    /// session ends, so every rank started inherits its ends.
    rank_ends: Vec<(u32, u32, OwnedFd)>,
    /// (local rank, remote world rank, the agent's end), for the thread.
    agent_ends: Vec<(u32, u32, UnixStream)>,
}

/// Truth that world ranks `a` and `b` (of different clients) talk through
/// their hosts: one of them has no direct-channel port.
pub fn funnelled(world: &World, a: u32, b: u32) -> bool {
    let port = |g: u32| world.proc_ports.get(g as usize).copied().unwrap_or(0);
    port(a) == 0 || port(b) == 0
}

impl Pairs {
    /// A socket pair per funnelled pair of this client's procs.
    pub fn new(world: &World) -> Result<Pairs, LaunchError> {
        let first = world.first_rank(world.client);
        let mine = world.nprocs[world.client as usize];
        let mut pairs = Pairs {
            rank_ends: Vec::new(),
            agent_ends: Vec::new(),
        };
        for l in 0..mine {
            for (g, p) in world.procs.iter().enumerate() {
                let g = g as u32;
                if p.client != world.client && funnelled(world, first + l, g) {
                    let (rank_end, agent_end) = UnixStream::pair().map_err(LaunchError::Io)?;
                    let rank_end = OwnedFd::from(rank_end);
                    super::client::inheritable_fd(rank_end.as_raw_fd())?;
                    pairs.rank_ends.push((l, g, rank_end));
                    pairs.agent_ends.push((l, g, agent_end));
                }
            }
        }
        Ok(pairs)
    }

    pub fn len(&self) -> usize {
        self.rank_ends.len()
    }

    /// `IMPI_FUNNEL_FDS` for `nprocs` local ranks.
    pub fn env(&self, nprocs: u32) -> String {
        (0..nprocs)
            .map(|l| {
                self.rank_ends
                    .iter()
                    .filter(|p| p.0 == l)
                    .map(|(_, g, fd)| format!("{g}={}", fd.as_raw_fd()))
                    .collect::<Vec<_>>()
                    .join(";")
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The agent's ends, for [`Agent`] (once).
    pub fn take_agent_ends(&mut self) -> Vec<(u32, u32, UnixStream)> {
        std::mem::take(&mut self.agent_ends)
    }
}

/// A host link: its host rank and client, and whether its FINI came.
struct Link {
    host: u32,
    client: u32,
    end: End<TcpStream>,
    fini_got: bool,
    fini_sent: bool,
    reported: bool,
    /// Why this side ended the link (its cap was passed).
    failed: Option<String>,
}

impl Link {
    /// End the link for `why`: what waits for it goes, and the host
    /// sees the connection close (without our FINI).
    fn fail(&mut self, why: String) {
        let _ = self.end.sock.shutdown(Shutdown::Both);
        self.end.discard();
        self.failed.get_or_insert(why);
    }
}

/// What the thread is given.
pub struct Agent {
    pub links: Vec<(u32, TcpStream)>,
    /// (local rank, remote world rank, the agent's end of their pair).
    pub pairs: Vec<(u32, u32, UnixStream)>,
    pub world: World,
    pub finishing: Arc<AtomicBool>,
    /// Woken (one byte) when `finishing` is set.
    pub wake: UnixStream,
    /// Per link: `Ok(host)` for its FINI, `Err` for its end without one.
    pub tx: mpsc::Sender<Result<u32, String>>,
    /// A failed link ends this client's job (SIGTERM to rivetrun), unless
    /// the job is finishing; false only in tests.
    pub fail_job: bool,
}

impl Agent {
    /// Run the funnel and the links' watch until every link ended.
    pub fn run(self) {
        let Agent {
            links,
            pairs,
            world,
            finishing,
            mut wake,
            tx,
            fail_job,
        } = self;
        let maxdatalen = world.maxdatalen;
        let first = world.first_rank(world.client);
        let host_of = |g: u32| world.procs.get(g as usize).map(|p| p.host);
        let hiwater_of = |h: Option<u32>| {
            h.and_then(|h| world.hosts.get(h as usize))
                .map_or(1, |h| h.hiwater)
        };
        let mut links: Vec<Link> = links
            .into_iter()
            .filter_map(|(h, s)| {
                s.set_nonblocking(true).ok()?;
                s.set_read_timeout(None).ok()?;
                // Its pairs: our ranks with each proc of that host.
                let n = pairs.iter().filter(|p| host_of(p.1) == Some(h)).count();
                let cap = cap(n.max(1), hiwater_of(Some(h)), maxdatalen);
                Some(Link {
                    host: h,
                    client: world.hosts.get(h as usize).map_or(0, |x| x.client),
                    end: End::new(s, maxdatalen, cap),
                    fini_got: false,
                    fini_sent: false,
                    reported: false,
                    failed: None,
                })
            })
            .collect();
        // (local rank, remote rank) -> pair index, and each pair's link.
        let mut pair_of: HashMap<(u32, u32), usize> = HashMap::new();
        let mut ends: Vec<(u32, u32, End<UnixStream>)> = Vec::new();
        for (l, g, agent_end) in pairs {
            if agent_end.set_nonblocking(true).is_err() {
                continue;
            }
            pair_of.insert((l, g), ends.len());
            // What the remote proc sends our rank: our host's hiwater governs.
            let cap = cap(1, hiwater_of(host_of(first + l)), maxdatalen);
            ends.push((l, g, End::new(agent_end, maxdatalen, cap)));
        }
        let link_of_host: HashMap<u32, usize> =
            links.iter().enumerate().map(|(i, l)| (l.host, i)).collect();
        let rank_of: HashMap<Proc, u32> = world
            .procs
            .iter()
            .enumerate()
            .map(|(g, p)| {
                (
                    Proc {
                        hostid: p.ipv6,
                        pid: p.pid,
                    },
                    g as u32,
                )
            })
            .collect();
        let _ = wake.set_nonblocking(true);
        let mut buf = vec![0u8; READ_CHUNK];
        let mut stray = false;
        loop {
            // End of the job: once the pairs' last packets left, FINI on every link.
            if finishing.load(Ordering::SeqCst) && !links.iter().any(|l| l.end.pending()) {
                for l in links.iter_mut().filter(|l| l.end.open && !l.fini_sent) {
                    // Nothing waits, so a header fits any cap.
                    let _ = l.end.queue(&Packet::fini(), &[]);
                    l.fini_sent = true;
                }
            }
            for l in links.iter_mut().filter(|l| l.end.open) {
                if l.end.flush().is_err() {
                    l.end.open = false;
                }
            }
            for (_, _, e) in ends.iter_mut().filter(|e| e.2.open) {
                if e.flush().is_err() {
                    e.open = false;
                }
            }
            // A link is done once both FINIs went and ours is written.
            for l in links.iter_mut() {
                if l.fini_got && l.fini_sent && !l.end.pending() {
                    l.end.open = false;
                }
                if !l.end.open && !l.reported {
                    l.reported = true;
                    if l.fini_got && l.failed.is_none() {
                        let _ = tx.send(Ok(l.host));
                    } else {
                        let msg = l.failed.clone().unwrap_or_else(|| {
                            format!(
                                "host {} (client {}) closed before its IMPI_PK_FINI: it failed",
                                l.host, l.client
                            )
                        });
                        if fail_job && !finishing.load(Ordering::SeqCst) {
                            eprintln!("rivetrun: IMPI: {msg}; ending this client's job");
                            // SAFETY: kill and getpid take no pointers.
                            unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
                        }
                        let _ = tx.send(Err(msg));
                    }
                }
            }
            if links.iter().all(|l| !l.end.open) {
                return;
            }
            // Wait for any socket (and for room where output waits).
            let mut fds: Vec<libc::pollfd> = Vec::with_capacity(1 + links.len() + ends.len());
            let ev = |fd: i32, pending: bool| libc::pollfd {
                fd,
                events: libc::POLLIN | if pending { libc::POLLOUT } else { 0 },
                revents: 0,
            };
            fds.push(ev(wake.as_raw_fd(), false));
            for l in &links {
                let fd = if l.end.open {
                    l.end.sock.as_raw_fd()
                } else {
                    -1
                };
                fds.push(ev(fd, l.end.pending()));
            }
            for (_, _, e) in &ends {
                let fd = if e.open { e.sock.as_raw_fd() } else { -1 };
                fds.push(ev(fd, e.pending()));
            }
            // SAFETY: `fds` is a valid array of `fds.len()` pollfds.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
            if rc < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                eprintln!(
                    "rivetrun: IMPI: poll on the host links: {}",
                    io::Error::last_os_error()
                );
                return;
            }
            let readable =
                |i: usize| fds[i].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
            if readable(0) {
                let _ = wake.read(&mut buf);
            }
            // Host links: route each packet to its pair; FINI ends the link.
            let nlinks = links.len();
            for (i, link) in links.iter_mut().enumerate() {
                if !link.end.open || !readable(1 + i) {
                    continue;
                }
                let got = match link.end.read(&mut buf) {
                    Ok(Some(got)) => got,
                    Ok(None) => {
                        link.end.open = false;
                        continue;
                    }
                    // A host that fails with our bytes unread resets the
                    // link rather than closing it: the same failure.
                    Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                        link.end.open = false;
                        continue;
                    }
                    Err(e) => {
                        let why = format!(
                            "host {} (client {}) sent what is no IMPI packet ({e}); link failed",
                            link.host, link.client
                        );
                        link.fail(why);
                        continue;
                    }
                };
                for (p, data) in got {
                    if p.kind == Kind::Fini {
                        link.fini_got = true;
                        continue;
                    }
                    if !link.end.open {
                        break;
                    }
                    let to = rank_of
                        .get(&p.dest)
                        .filter(|&&g| g >= first)
                        .and_then(|&g| rank_of.get(&p.src).map(|&s| (g - first, s)))
                        .and_then(|k| pair_of.get(&k));
                    match to {
                        Some(&k) if ends[k].2.open => {
                            let (l, g, end) = &mut ends[k];
                            if let Err(n) = end.queue(&p, &data) {
                                link.fail(format!(
                                    "host {} (client {}) sent more than the pairs' flow control \
                                     allows: {n} bytes would wait for local rank {l} (from world \
                                     rank {g}), over the cap of {} (IMPI_H_HIWATER {}); link failed",
                                    link.host,
                                    link.client,
                                    end.cap,
                                    hiwater_of(host_of(first + *l))
                                ));
                            }
                        }
                        Some(_) => {}
                        None if !stray => {
                            stray = true;
                            eprintln!(
                                "rivetrun: IMPI: note: host {} sent a packet from {:?} to {:?}, \
                                 no pair of this host's funnel; dropped (and any more like it)",
                                link.host, p.src, p.dest
                            );
                        }
                        None => {}
                    }
                }
            }
            // Pairs: each packet to its remote proc's host link.
            for (k, (_, g, end)) in ends.iter_mut().enumerate() {
                if !end.open || !readable(1 + nlinks + k) {
                    continue;
                }
                let got = match end.read(&mut buf) {
                    Ok(Some(got)) => got,
                    Ok(None) | Err(_) => {
                        end.open = false;
                        continue;
                    }
                };
                let g = *g;
                for (p, data) in got {
                    if p.kind == Kind::Fini {
                        // 3.8 between the rank and us: answered here.
                        if end.queue(&Packet::fini(), &[]).is_err() {
                            // FINIs from a rank that reads nothing: end the pair.
                            let _ = end.sock.shutdown(Shutdown::Both);
                            end.discard();
                            break;
                        }
                        continue;
                    }
                    if let Some(&i) = host_of(g).and_then(|h| link_of_host.get(&h)) {
                        let link = &mut links[i];
                        if link.end.open && !link.fini_sent {
                            if let Err(n) = link.end.queue(&p, &data) {
                                let why = format!(
                                    "host {} (client {}) is not reading its host link: {n} bytes \
                                     would wait for it, over the cap of {} (twice what the pairs' \
                                     flow control allows); link failed",
                                    link.host, link.client, link.end.cap
                                );
                                link.fail(why);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Start the agent's thread.
pub fn start(agent: Agent) -> Result<(), LaunchError> {
    std::thread::Builder::new()
        .name("impi-agent".into())
        .spawn(move || agent.run())
        .map(|_| ())
        .map_err(LaunchError::Io)
}

#[cfg(test)]
mod tests;
