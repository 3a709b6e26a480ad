//! `rivetrun --impi-client RANK HOST:PORT -n K PROGRAM`: this job as client
//! RANK of an IMPI job (seed 003, chapter 2).
//!
//! Before any rank starts, rivetrun (the client's one host agent) connects
//! to the server, authenticates (AUTH: what `IMPI_AUTH_KEY` /
//! `IMPI_AUTH_NONE` offer), joins (IMPI), sends every label of version 0.0
//! in ascending order, each answered by the server's broadcast, then DONE.
//! Then the host dance of 2.3.8: the host listening on the port it sent
//! accepts from every higher host and connects to every lower one, sending
//! its host rank as 4 bytes. The ranks learn the job from `IMPI_*`
//! variables. When every rank has exited 0 the hosts exchange the
//! end-of-connection packet (3.8) and the client sends FINI; otherwise it
//! just hangs up, which the server reports as a failure.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use rivet_pmi::impi::auth::{self, Available, ClientAuth, ServerAuth};
use rivet_pmi::impi::labels::{Broadcast, Coll};
use rivet_pmi::impi::world::{Mine, World, WorldBuilder};
use rivet_pmi::impi::{
    read_command, write_command, Command, CMD_AUTH, CMD_COLL, CMD_DONE, CMD_FINI, CMD_IMPI,
    DEFAULT_MAX_PAYLOAD,
};

use rivet_netmods::auth::JobKey;
use rivet_netmods::impi::config::ENV_CHANNEL_KEY;

use super::funnel::{self, Agent, Pairs, ENV_FUNNEL_FDS};
pub use super::hosts::channel_key;
use super::hosts::{dance, random16};
use crate::error::LaunchError;

/// How long connecting to the server or another host may take.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client waits for the others at any step of the startup.
pub(super) const STARTUP_TIMEOUT: Duration = Duration::from_secs(300);
/// Most user-data bytes per packet this client asks for (`C_DATALEN`):
/// room for the engine's largest netmod message (a 1 MiB piece, its
/// 40-byte header and the 4-byte length before it), so between Rivet
/// clients every engine message is a short IMPI message, sent without
/// waiting for a SYNCACK. The job uses the smallest of the clients'.
pub const DATALEN: u32 = (1 << 20) + 4096;
/// The highest tag this client uses between hosts (`C_TAGUB`).
pub const TAG_UB: i32 = i32::MAX;
/// Flow control this host asks for (`H_ACKMARK`, `H_HIWATER`; 3.9).
pub const ACKMARK: u32 = 16;
pub const HIWATER: u32 = 32;
/// Flow control this host asks of other Rivet hosts (`RIVET_H_ACKMARK`,
/// `RIVET_H_HIWATER`), for the direct channels between their procs: more
/// packets in flight and fewer ACKs. Nothing between two Rivet procs
/// buffers on the strength of it (the receiving engine bounds what it
/// buffers itself), so it only needs to keep the sender from stalling on
/// a stream of rendezvous pieces and their small control messages.
pub const RIVET_ACKMARK: u32 = 32;
pub const RIVET_HIWATER: u32 = 128;
/// Environment variables a user sets to choose the collective crossovers
/// (2.3.5 wants a way; unset sends -1, the version's default).
pub const ENV_COLL_XSIZE: &str = "IMPI_COLL_XSIZE";
pub const ENV_COLL_MAXLINEAR: &str = "IMPI_COLL_MAXLINEAR";

pub(super) fn fail(msg: impl Into<String>) -> LaunchError {
    LaunchError::Impi(msg.into())
}

fn usage(msg: impl Into<String>) -> LaunchError {
    LaunchError::Usage(format!("IMPI client: {}", msg.into()))
}

/// A joined client: its server connection, host links and the job.
pub struct Session {
    server: TcpStream,
    /// The host links until `watch` hands them to the agent's thread.
    links: Vec<(u32, TcpStream)>,
    nlinks: usize,
    /// Sockets of the procs without a direct channel to a peer (see `funnel`).
    pairs: Pairs,
    /// Wakes the agent's thread when `finishing` is set.
    wake: Option<UnixStream>,
    pub world: World,
    /// One listening socket per proc, bound before the labels went (their
    /// ports are `RIVET_P_PORT`), inherited by the ranks (`IMPI_LISTEN_FDS`):
    /// the `impi` netmod's direct channels are accepted on them.
    listeners: Vec<TcpListener>,
    /// Set once this client finishes: a host link closing is then
    /// reported to `finish`, not acted on.
    finishing: Arc<AtomicBool>,
    /// Per host link: `Ok(host)` for its `IMPI_PK_FINI`, `Err` for its end
    /// without one (from the watch threads).
    fini: Option<mpsc::Receiver<Result<u32, String>>>,
    /// What the ranks prove their direct-channel hellos with (see `channel_key`).
    channel_key: JobKey,
}

/// Environment variable naming the inherited listening sockets, by local rank.
pub const ENV_LISTEN_FDS: &str = "IMPI_LISTEN_FDS";
/// Environment variable describing every proc of the job (see `Session::env`).
pub const ENV_PROCS: &str = "IMPI_PROCS";

/// Parse `RANK` and `HOST:PORT` of `--impi-client`.
pub fn parse_args(args: &[String]) -> Result<(u32, String), LaunchError> {
    let [rank, addr] = args else {
        return Err(usage("--impi-client takes RANK and HOST:PORT"));
    };
    let rank: u32 = rank
        .parse()
        .ok()
        .filter(|&r| r < rivet_pmi::impi::MAX_CLIENTS)
        .ok_or_else(|| usage(format!("client rank {rank:?} is not a number from 0 to 31")))?;
    if addr
        .rsplit_once(':')
        .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
    {
        return Err(usage(format!(
            "server address {addr:?} is not HOST:PORT (what `rivetrun --impi-server` prints)"
        )));
    }
    Ok((rank, addr.clone()))
}

fn env_int(name: &str) -> Result<i32, LaunchError> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|&n| n >= 0)
            .ok_or_else(|| usage(format!("{name}={v:?} is not a number >= 0"))),
        Err(_) => Ok(-1),
    }
}

/// This host's address as `IMPI_H_IPV6` holds it (IPv4-mapped).
fn ipv6_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn connect(addr: &str) -> Result<TcpStream, LaunchError> {
    let targets: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| fail(format!("cannot resolve {addr}: {e}")))?
        .collect();
    let mut last = None;
    for t in targets {
        match TcpStream::connect_timeout(&t, CONNECT_TIMEOUT) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(fail(format!(
        "cannot connect to the IMPI server at {addr}: {}",
        last.map_or("no address".to_string(), |e| e.to_string())
    )))
}

/// The whole startup: AUTH, IMPI, every label, DONE, the host dance.
pub fn join(rank: u32, addr: &str, nprocs: u32) -> Result<Session, LaunchError> {
    let available = Available::from_env().map_err(usage)?;
    available
        .require_some()
        .map_err(|e| usage(format!("{e}; aborting")))?;
    let (xsize, maxlinear) = (env_int(ENV_COLL_XSIZE)?, env_int(ENV_COLL_MAXLINEAR)?);
    let mut server = connect(addr)?;
    let _ = server.set_nodelay(true);
    let _ = rivet_netmods::tcp::set_keepalive(&server, super::server::KEEPALIVE);
    server
        .set_read_timeout(Some(STARTUP_TIMEOUT))
        .map_err(LaunchError::Io)?;
    let local_ip = server.local_addr().map_err(LaunchError::Io)?.ip();
    let io = |e: io::Error| fail(format!("talking to the IMPI server at {addr}: {e}"));

    // AUTH (2.3.3).
    write_command(
        &mut server,
        &Command::new(
            CMD_AUTH,
            ClientAuth::offering(&available.methods()).encode(),
        ),
    )
    .map_err(io)?;
    let mut reply = [0u8; ServerAuth::LEN];
    read_or_gone(&mut server, &mut reply).map_err(|gone| {
        if gone {
            fail(format!(
                "the server at {addr} disconnected during authentication: no method in common \
                 (this client offers {:?}: {} set {}, {} {})",
                available.methods(),
                auth::ENV_KEY,
                if available.key.is_some() {
                    "is"
                } else {
                    "is not"
                },
                auth::ENV_NONE,
                if available.none {
                    "is set"
                } else {
                    "is not set"
                },
            ))
        } else {
            fail(format!("no AUTH reply from the server at {addr}"))
        }
    })?;
    let chosen = ServerAuth::decode(&reply).map_err(|e| fail(e.to_string()))?;
    match (chosen.which, available.key) {
        (w, _) if w == auth::AUTH_NONE as i32 && available.none => {}
        (w, Some(key)) if w == auth::AUTH_KEY as i32 => {
            server.write_all(&auth::encode_key(key)).map_err(io)?;
        }
        (w, _) => {
            return Err(fail(format!(
                "the server chose authentication method {w}, which this client did not offer"
            )))
        }
    }
    // NONE and KEY have no follow-on messages from the server (len 0).
    if chosen.len != 0 {
        return Err(fail(format!(
            "the server announced {} bytes of authentication messages; NONE and KEY have none",
            chosen.len
        )));
    }

    // IMPI (2.3.4).
    write_command(&mut server, &Command::impi(rank as i32)).map_err(io)?;
    let size = loop {
        let cmd = next_command(&mut server, addr, chosen.which)?;
        if cmd.cmd == CMD_IMPI {
            break cmd.impi_value().map_err(|e| fail(e.to_string()))?;
        }
    };
    if size < 1 || rank >= size as u32 {
        return Err(fail(format!(
            "this client's rank {rank} is not below the job's size {size}"
        )));
    }

    // The host's listening port for the dance, sent as IMPI_H_PORT.
    let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(LaunchError::Io)?;
    let port = listener.local_addr().map_err(LaunchError::Io)?.port();
    let pid = std::process::id() as i64;
    // One listener per proc for the direct channels, inheritable by the ranks.
    let mut listeners = Vec::with_capacity(nprocs as usize);
    let mut proc_ports = Vec::with_capacity(nprocs as usize);
    // RIVET_IMPI_DIRECT=0: no ports, as a client of another implementation.
    let direct = rivet_settings::var("RIVET_IMPI_DIRECT").is_none_or(|v| v.trim() != "0");
    for _ in 0..if direct { nprocs } else { 0 } {
        let l = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(LaunchError::Io)?;
        proc_ports.push(l.local_addr().map_err(LaunchError::Io)?.port() as u32);
        inheritable(&l)?;
        listeners.push(l);
    }
    let mine = Mine {
        versions: vec![(0, 0)],
        datalen: DATALEN,
        tag_ub: TAG_UB,
        coll_xsize: xsize,
        coll_maxlinear: maxlinear,
        host_ipv6: ipv6_of(local_ip),
        host_port: port as u32,
        ackmark: ACKMARK,
        hiwater: HIWATER,
        // Unique among procs of this address: rivetrun's pid, then the local rank.
        pids: (0..nprocs as i64).map(|r| (pid << 32) | r).collect(),
        proc_ports,
        nonce: Some(random16()),
        rivet_flow: Some((RIVET_ACKMARK, RIVET_HIWATER)),
    };

    // COLL (2.3.5): each label, then its broadcast (others' may come between).
    let mut builder = WorldBuilder::new(rank, size as u32);
    for (label, data) in mine.labels() {
        write_command(
            &mut server,
            &Command::new(CMD_COLL, Coll { label, data }.encode()),
        )
        .map_err(io)?;
        loop {
            let cmd = next_command(&mut server, addr, chosen.which)?;
            if cmd.cmd != CMD_COLL {
                continue;
            }
            let b = Broadcast::decode(&cmd.payload).map_err(|e| fail(e.to_string()))?;
            builder.take(&b).map_err(|e| fail(e.to_string()))?;
            if b.label == label {
                break;
            }
        }
    }
    // DONE (2.3.6): labels others send after ours still come before DONE.
    write_command(&mut server, &Command::empty(CMD_DONE)).map_err(io)?;
    loop {
        let cmd = next_command(&mut server, addr, chosen.which)?;
        match cmd.cmd {
            CMD_DONE => break,
            CMD_COLL => {
                let b = Broadcast::decode(&cmd.payload).map_err(|e| fail(e.to_string()))?;
                builder.take(&b).map_err(|e| fail(e.to_string()))?;
            }
            _ => {}
        }
    }
    let world = builder.finish().map_err(|e| fail(e.to_string()))?;
    let auth_key = available
        .key
        .filter(|_| chosen.which == auth::AUTH_KEY as i32);
    let channel_key = channel_key(&world.nonces, auth_key);
    let links = dance(&world, listener)?;
    let pairs = Pairs::new(&world)?;
    let _ = server.set_read_timeout(None);
    Ok(Session {
        server,
        nlinks: links.len(),
        links,
        pairs,
        wake: None,
        world,
        listeners,
        finishing: Arc::new(AtomicBool::new(false)),
        fini: None,
        channel_key,
    })
}

/// Let a rank inherit `l` across exec (ranks find it by `IMPI_LISTEN_FDS`
/// and close the others'; the launcher's copy closes when the session ends).
fn inheritable(l: &TcpListener) -> Result<(), LaunchError> {
    use std::os::fd::AsRawFd;
    inheritable_fd(l.as_raw_fd())
}

/// Let the ranks inherit `fd` across exec.
pub(super) fn inheritable_fd(fd: std::os::fd::RawFd) -> Result<(), LaunchError> {
    // SAFETY: fcntl on a descriptor we own, no pointers.
    let ok = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) == 0
    };
    if ok {
        Ok(())
    } else {
        Err(LaunchError::Io(io::Error::last_os_error()))
    }
}

/// `IP:PORT` with IPv4-mapped addresses in dot notation.
fn addr_text(ipv6: [u8; 16], port: u32) -> String {
    let ip = Ipv6Addr::from(ipv6);
    match ip.to_ipv4_mapped() {
        Some(v4) => format!("{v4}:{port}"),
        None => format!("[{ip}]:{port}"),
    }
}

/// Read exactly `buf`; `Err(true)` when the peer closed, `Err(false)` otherwise.
fn read_or_gone(s: &mut TcpStream, buf: &mut [u8]) -> Result<(), bool> {
    s.read_exact(buf).map_err(|e| {
        matches!(
            e.kind(),
            io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
        )
    })
}

/// The next command from the server; a hang-up is explained.
fn next_command(server: &mut TcpStream, addr: &str, which: i32) -> Result<Command, LaunchError> {
    match read_command(server, DEFAULT_MAX_PAYLOAD) {
        Ok(Some(c)) => Ok(c),
        Ok(None) => Err(fail(format!(
            "the server at {addr} disconnected{} (see its messages)",
            if which == auth::AUTH_KEY as i32 {
                " (wrong authentication key? the server and every client need the same IMPI_AUTH_KEY)"
            } else {
                ""
            }
        ))),
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Err(fail(format!(
            "the server at {addr} reset the connection{}",
            if which == auth::AUTH_KEY as i32 {
                " (wrong authentication key?)"
            } else {
                ""
            }
        ))),
        Err(e) => Err(fail(format!(
            "waiting for the IMPI server at {addr}: {e} (another client missing?)"
        ))),
    }
}

impl Session {
    /// What the ranks are told about the IMPI job.
    pub fn env(&self) -> Vec<(String, String)> {
        let w = &self.world;
        let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        let hosts: Vec<String> = w.hosts.iter().map(|h| addr_text(h.ipv6, h.port)).collect();
        // Per global rank: `IP:PORT/PID/ACKMARK/HIWATER[/RACKMARK/RHIWATER]`
        // (its direct channel's address, its IMPI_Proc pid, its host's flow
        // control, and its host's flow control for Rivet hosts if it sent one).
        let procs: Vec<String> = w
            .procs
            .iter()
            .enumerate()
            .map(|(g, p)| {
                let h = &w.hosts[p.host as usize];
                let rivet = h
                    .rivet_flow
                    .map_or(String::new(), |(a, hi)| format!("/{a}/{hi}"));
                format!(
                    "{}/{}/{}/{}{rivet}",
                    addr_text(p.ipv6, w.proc_ports.get(g).copied().unwrap_or(0)),
                    p.pid,
                    h.ackmark,
                    h.hiwater
                )
            })
            .collect();
        use std::os::fd::AsRawFd;
        let fds: Vec<String> = match self.listeners.is_empty() {
            false => self
                .listeners
                .iter()
                .map(|l| l.as_raw_fd().to_string())
                .collect(),
            // No direct channels (RIVET_IMPI_DIRECT=0): no listeners.
            true => vec!["-1".into(); w.nprocs[w.client as usize] as usize],
        };
        vec![
            ("IMPI_CLIENT_RANK".into(), w.client.to_string()),
            ("IMPI_CLIENT_SIZE".into(), w.nclients.to_string()),
            ("IMPI_CLIENT_NPROCS".into(), list(&w.nprocs)),
            ("IMPI_CLIENT_NHOSTS".into(), list(&w.nhosts)),
            ("IMPI_WORLD_SIZE".into(), w.procs.len().to_string()),
            (
                "IMPI_WORLD_OFFSET".into(),
                w.first_rank(w.client).to_string(),
            ),
            ("IMPI_HOSTS".into(), hosts.join(",")),
            (
                "IMPI_VERSION".into(),
                format!("{}.{}", w.version.0, w.version.1),
            ),
            ("IMPI_MAXDATALEN".into(), w.maxdatalen.to_string()),
            ("IMPI_TAG_UB".into(), w.tag_ub.to_string()),
            (ENV_PROCS.into(), procs.join(",")),
            (ENV_LISTEN_FDS.into(), fds.join(",")),
            (ENV_CHANNEL_KEY.into(), self.channel_key.to_hex()),
            (
                ENV_FUNNEL_FDS.into(),
                self.pairs.env(w.nprocs[w.client as usize]),
            ),
        ]
    }

    /// One line for stderr saying what this client joined.
    pub fn summary(&self) -> String {
        let w = &self.world;
        let first = w.first_rank(w.client);
        let mine = w.nprocs[w.client as usize];
        format!(
            "IMPI client {} of {}: world ranks {}..{} of {} (procs per client {:?}), version {}.{}, \
             maxdatalen {}, tag ub {}, {} host link(s), {} channel(s) through this agent",
            w.client,
            w.nclients,
            first,
            first + mine,
            w.procs.len(),
            w.nprocs,
            w.version.0,
            w.version.1,
            w.maxdatalen,
            w.tag_ub,
            self.nlinks,
            self.pairs.len()
        )
    }

    /// Start the agent's thread (`funnel`): it moves the packets of the
    /// procs without a direct channel and watches every host link while the
    /// ranks run: another client's link ending without `IMPI_PK_FINI` means
    /// that client failed, and this one ends its job (SIGTERM to itself:
    /// the supervisor tears down as for any signal) after saying so.
    /// `finish` learns of each FINI.
    pub fn watch(&mut self) -> Result<(), LaunchError> {
        let (tx, rx) = mpsc::channel();
        let (wake, wake_agent) = UnixStream::pair().map_err(LaunchError::Io)?;
        funnel::start(Agent {
            links: std::mem::take(&mut self.links),
            pairs: self.pairs.take_agent_ends(),
            world: self.world.clone(),
            finishing: self.finishing.clone(),
            wake: wake_agent,
            tx,
            fail_job: true,
        })?;
        self.wake = Some(wake);
        self.fini = Some(rx);
        Ok(())
    }

    /// Every rank exited 0: end each host link (3.8: the agent sends
    /// `IMPI_PK_FINI` once what it holds for the link went, and waits for
    /// the peer's, consuming what comes before it), then FINI.
    pub fn finish(mut self) -> Result<(), LaunchError> {
        self.finishing.store(true, Ordering::SeqCst);
        if let Some(w) = self.wake.as_mut() {
            let _ = w.write_all(&[1]);
        }
        if let Some(rx) = self.fini.take() {
            for _ in 0..self.nlinks {
                // A client whose ranks still run sends its FINI later: wait.
                match rx.recv() {
                    Ok(Ok(_)) => {}
                    Ok(Err(msg)) => return Err(fail(msg)),
                    Err(_) => return Err(fail("the host links' watch ended early")),
                }
            }
        }
        self.listeners.clear();
        write_command(&mut self.server, &Command::empty(CMD_FINI))
            .map_err(|e| fail(format!("sending FINI to the server: {e}")))?;
        let _ = self.server.shutdown(std::net::Shutdown::Write);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked() {
        assert_eq!(
            parse_args(&["1".into(), "10.0.0.1:5000".into()]).unwrap(),
            (1, "10.0.0.1:5000".into())
        );
        assert!(parse_args(&["32".into(), "h:1".into()]).is_err());
        assert!(parse_args(&["x".into(), "h:1".into()]).is_err());
        assert!(parse_args(&["0".into(), "h".into()]).is_err());
        assert!(parse_args(&["0".into(), ":1".into()]).is_err());
    }

    #[test]
    fn the_channel_key_depends_on_every_nonce_and_the_auth_key() {
        let n = [Some([1u8; 16]), Some([2u8; 16])];
        let k = channel_key(&n, None);
        assert_eq!(k, channel_key(&n, None), "every client derives the same");
        assert_ne!(k, channel_key(&n, Some(5678)));
        assert_ne!(channel_key(&n, Some(1)), channel_key(&n, Some(2)));
        assert_ne!(k, channel_key(&[Some([1u8; 16]), Some([3u8; 16])], None));
        assert_ne!(k, channel_key(&[Some([2u8; 16]), Some([1u8; 16])], None));
        assert_ne!(k, channel_key(&[Some([1u8; 16]), None], None));
        assert_ne!(random16(), random16());
    }
}
