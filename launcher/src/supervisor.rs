//! The supervisor: one event loop that serves PMI, forwards output and
//! signals, reaps ranks and tears the job down when one of them fails.
//!
//! Everything the job does arrives as a readiness event on one `mio::Poll`:
//! PMI connections (fed to the sans-IO `rivet_pmi::server::Server`), the
//! ranks' stdout/stderr pipes, the PMI_PORT listener and signals (SIGCHLD,
//! SIGINT, SIGTERM, SIGHUP). The loop ends when every rank has been reaped
//! and its output drained; the first failure decides the exit code.

use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{ChildStdin, ExitStatus};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream, UnixStream};
use mio::unix::pipe::Receiver;
use mio::{Events, Interest, Poll, Token};
use rivet_pmi::server::{ConnId, NsId, Output, Server};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;

use crate::launch::Started;
use crate::output::LineBuffer;

const SIGNALS: Token = Token(0);
const LISTENER: Token = Token(1);
const FIRST_DYNAMIC: usize = 2;

/// How long output is still drained after the last rank exited, in case a
/// grandchild keeps a pipe open.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

/// Why the job failed: the first of these decides rivetrun's exit code.
#[derive(Debug, Clone)]
pub enum Failure {
    Exited {
        rank: u32,
        code: i32,
    },
    Signaled {
        rank: u32,
        signal: i32,
    },
    Aborted {
        rank: u32,
        code: i32,
        message: Option<String>,
    },
    NoFinalize {
        rank: u32,
    },
    Interrupted {
        signal: i32,
    },
    Internal(String),
}

impl Failure {
    pub fn exit_code(&self) -> i32 {
        match self {
            Failure::Exited { code, .. } => *code,
            Failure::Signaled { signal, .. } | Failure::Interrupted { signal } => 128 + signal,
            Failure::Aborted { code, .. } => {
                if *code == 0 {
                    1
                } else {
                    *code
                }
            }
            Failure::NoFinalize { .. } | Failure::Internal(_) => 1,
        }
    }

    fn describe(&self) -> String {
        match self {
            Failure::Exited { rank, code } => format!("rank {rank} exited with code {code}"),
            Failure::Signaled { rank, signal } => {
                format!("rank {rank} was killed by signal {signal} ({})", signal_name(*signal))
            }
            Failure::Aborted { rank, code, message } => match message {
                Some(m) => format!("rank {rank} called abort (exit code {code}): {m}"),
                None => format!("rank {rank} called abort (exit code {code})"),
            },
            Failure::NoFinalize { rank } => format!(
                "rank {rank} exited with code 0 without finalizing PMI; the other ranks could wait for it forever"
            ),
            Failure::Interrupted { signal } => format!("rivetrun received {}", signal_name(*signal)),
            Failure::Internal(m) => m.clone(),
        }
    }
}

pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        _ => "unknown signal",
    }
}

#[derive(Clone, Copy, Debug)]
enum Stream {
    Stdout,
    Stderr,
}

enum Source {
    Pmi(ConnId),
    Output { rank: u32, stream: Stream },
}

enum PmiStream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl PmiStream {
    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            PmiStream::Unix(s) => s,
            PmiStream::Tcp(s) => s,
        }
    }
}

impl Read for PmiStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            PmiStream::Unix(s) => s.read(buf),
            PmiStream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for PmiStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            PmiStream::Unix(s) => s.write(buf),
            PmiStream::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct PmiConn {
    stream: PmiStream,
    token: Token,
    /// Replies not yet accepted by the socket.
    unsent: Vec<u8>,
    wants_write: bool,
    /// The rank this connection belongs to, once known.
    rank: Option<u32>,
}

struct RankState {
    pid: u32,
    status: Option<ExitStatus>,
    stdout: Option<(Receiver, LineBuffer)>,
    stderr: Option<(Receiver, LineBuffer)>,
    spoke_pmi: bool,
}

enum Phase {
    Running,
    /// SIGTERM sent; SIGKILL at the deadline.
    TearingDown {
        kill_at: Instant,
    },
    Killed,
}

pub struct Supervisor {
    poll: Poll,
    signals: Signals,
    listener: Option<TcpListener>,
    sources: HashMap<Token, Source>,
    next_token: usize,
    server: Server,
    ns: NsId,
    conns: HashMap<ConnId, PmiConn>,
    next_conn: ConnId,
    ranks: Vec<RankState>,
    label: bool,
    grace: Duration,
    phase: Phase,
    failure: Option<Failure>,
    all_exited_at: Option<Instant>,
    /// A SIGCHLD arrived (or a rank was added): `reap` has work.
    child_exited: bool,
    /// A failed rank does not stop the others (`--disable-auto-cleanup`).
    keep_going: bool,
    /// Scratch space for reads, allocated once (zeroing a fresh buffer per
    /// event was a measurable share of serving PMI).
    read_buf: Box<[u8]>,
}

impl Supervisor {
    /// Set up polling and signal handling; call before the first rank starts so no SIGCHLD is missed.
    pub fn new(server: Server, ns: NsId, label: bool, grace: Duration) -> io::Result<Supervisor> {
        let poll = Poll::new()?;
        let mut signals = Signals::new([SIGCHLD, SIGINT, SIGTERM, SIGHUP])?;
        poll.registry()
            .register(&mut signals, SIGNALS, Interest::READABLE)?;
        Ok(Supervisor {
            poll,
            signals,
            listener: None,
            sources: HashMap::new(),
            next_token: FIRST_DYNAMIC,
            server,
            ns,
            conns: HashMap::new(),
            next_conn: 1,
            ranks: Vec::new(),
            label,
            grace,
            phase: Phase::Running,
            failure: None,
            all_exited_at: None,
            child_exited: true,
            keep_going: false,
            read_buf: vec![0u8; 65536].into_boxed_slice(),
        })
    }

    /// Listen for PMI_PORT connections; returns the `host:port` to hand to the ranks.
    pub fn listen_tcp(&mut self) -> io::Result<String> {
        let mut listener = TcpListener::bind("127.0.0.1:0".parse().expect("literal address"))?;
        let addr = listener.local_addr()?;
        self.poll
            .registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        self.listener = Some(listener);
        Ok(format!("127.0.0.1:{}", addr.port()))
    }

    fn token(&mut self) -> Token {
        let t = Token(self.next_token);
        self.next_token += 1;
        t
    }

    /// Take over a started rank. Ranks must be added in rank order.
    pub fn add_rank(&mut self, started: Started) -> io::Result<Option<ChildStdin>> {
        let rank = self.ranks.len() as u32;
        let Started {
            child,
            pmi,
            stdin,
            stdout,
            stderr,
        } = started;
        let mut out = Receiver::from(stdout);
        let mut err = Receiver::from(stderr);
        out.set_nonblocking(true)?;
        err.set_nonblocking(true)?;
        for (rx, stream) in [(&mut out, Stream::Stdout), (&mut err, Stream::Stderr)] {
            let token = self.token();
            self.poll
                .registry()
                .register(rx, token, Interest::READABLE)?;
            self.sources.insert(token, Source::Output { rank, stream });
        }
        if let Some(pmi) = pmi {
            pmi.set_nonblocking(true)?;
            let conn = self.add_conn(PmiStream::Unix(UnixStream::from_std(pmi)), Some(rank))?;
            self.server.attach(conn, self.ns, rank);
        }
        self.ranks.push(RankState {
            pid: child.id(),
            status: None,
            stdout: Some((out, LineBuffer::default())),
            stderr: Some((err, LineBuffer::default())),
            spoke_pmi: false,
        });
        Ok(stdin)
    }

    fn add_conn(&mut self, mut stream: PmiStream, rank: Option<u32>) -> io::Result<ConnId> {
        let token = self.token();
        self.poll
            .registry()
            .register(stream.source(), token, Interest::READABLE)?;
        let conn = self.next_conn;
        self.next_conn += 1;
        self.sources.insert(token, Source::Pmi(conn));
        self.conns.insert(
            conn,
            PmiConn {
                stream,
                token,
                unsent: Vec::new(),
                wants_write: false,
                rank,
            },
        );
        Ok(conn)
    }

    /// Let the other ranks run on when one fails (`--disable-auto-cleanup`).
    pub fn keep_going(&mut self, on: bool) {
        self.keep_going = on;
    }

    /// A rank could not be started: record it as the failure and stop the others.
    pub fn fail(&mut self, failure: Failure) {
        self.begin_teardown(failure);
    }

    /// Run until every rank is reaped; returns the failure, if any.
    pub fn run(mut self) -> Option<Failure> {
        let mut events = Events::with_capacity(256);
        loop {
            self.reap();
            if self.finished() {
                break;
            }
            let timeout = self
                .next_deadline()
                .map(|d| d.saturating_duration_since(Instant::now()));
            if !self.turn(&mut events, timeout) {
                break;
            }
        }
        if self.failure.is_some() {
            // Whatever a failed job's ranks forked must not outlive it.
            self.kill_groups(libc::SIGKILL);
        }
        self.failure
    }

    /// One wait for events and their handling; false if the event loop broke.
    fn turn(&mut self, events: &mut Events, timeout: Option<Duration>) -> bool {
        if let Err(err) = self.poll.poll(events, timeout) {
            if err.kind() == ErrorKind::Interrupted {
                return true;
            }
            self.begin_teardown(Failure::Internal(format!("event loop failed: {err}")));
            self.kill_all(libc::SIGKILL);
            return false;
        }
        for event in events.iter() {
            match event.token() {
                SIGNALS => self.on_signals(),
                LISTENER => self.on_accept(),
                token => self.on_ready(
                    token,
                    event.is_readable() || event.is_read_closed(),
                    event.is_writable(),
                ),
            }
        }
        self.on_deadlines();
        true
    }

    fn finished(&self) -> bool {
        let exited = self.ranks.iter().all(|r| r.status.is_some());
        let drained = self
            .ranks
            .iter()
            .all(|r| r.stdout.is_none() && r.stderr.is_none());
        exited
            && (drained
                || self
                    .all_exited_at
                    .is_some_and(|t| t.elapsed() >= DRAIN_AFTER_EXIT))
    }

    fn next_deadline(&self) -> Option<Instant> {
        let kill = match self.phase {
            Phase::TearingDown { kill_at } => Some(kill_at),
            _ => None,
        };
        let drain = self.all_exited_at.map(|t| t + DRAIN_AFTER_EXIT);
        match (kill, drain) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn on_deadlines(&mut self) {
        if let Phase::TearingDown { kill_at } = self.phase {
            if Instant::now() >= kill_at {
                let alive = self.ranks.iter().filter(|r| r.status.is_none()).count();
                if alive > 0 {
                    eprintln!(
                        "rivetrun: {alive} rank(s) still running after {:?}; sending SIGKILL",
                        self.grace
                    );
                }
                self.kill_all(libc::SIGKILL);
                self.phase = Phase::Killed;
            }
        }
    }

    fn on_signals(&mut self) {
        let pending: Vec<i32> = self.signals.pending().collect();
        for signal in pending {
            if signal == SIGCHLD {
                self.child_exited = true; // reaped at the top of the loop
                continue;
            }
            if matches!(self.phase, Phase::Running) {
                eprintln!(
                    "rivetrun: received {}; forwarding it to the ranks",
                    signal_name(signal)
                );
                self.kill_all(signal);
                self.begin_teardown(Failure::Interrupted { signal });
            } else {
                // A second interrupt while tearing down: stop waiting.
                self.kill_all(libc::SIGKILL);
                self.phase = Phase::Killed;
            }
        }
    }

    fn on_accept(&mut self) {
        loop {
            let Some(listener) = self.listener.as_mut() else {
                return;
            };
            match listener.accept() {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    match self.add_conn(PmiStream::Tcp(stream), None) {
                        Ok(conn) => self.server.attach_unidentified(conn, self.ns),
                        Err(err) => eprintln!("rivetrun: cannot watch a PMI connection: {err}"),
                    }
                }
                Err(err) if err.kind() == ErrorKind::WouldBlock => return,
                Err(err) if err.kind() == ErrorKind::Interrupted => continue,
                Err(err) => {
                    eprintln!("rivetrun: accepting a PMI connection failed: {err}");
                    return;
                }
            }
        }
    }

    fn on_ready(&mut self, token: Token, readable: bool, writable: bool) {
        match self.sources.get(&token) {
            Some(Source::Pmi(conn)) => {
                let conn = *conn;
                if writable {
                    self.flush_conn(conn);
                }
                if readable {
                    self.read_conn(conn);
                }
            }
            Some(Source::Output { rank, stream }) => {
                let (rank, stream) = (*rank, *stream);
                self.read_output(rank, stream);
            }
            None => {}
        }
    }

    fn read_conn(&mut self, conn: ConnId) {
        let mut buf = std::mem::take(&mut self.read_buf);
        let mut outputs = Vec::new();
        let mut closed = false;
        while let Some(c) = self.conns.get_mut(&conn) {
            match c.stream.read(&mut buf) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => {
                    if let Some(rank) = c.rank {
                        self.ranks[rank as usize].spoke_pmi = true;
                    }
                    self.server.receive(conn, &buf[..n], &mut outputs);
                    if n < buf.len() {
                        break; // drained; edge-triggered readiness reports the next arrival
                    }
                }
                Err(err) if err.kind() == ErrorKind::WouldBlock => break,
                Err(err) if err.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    closed = true;
                    break;
                }
            }
        }
        self.read_buf = buf;
        self.learn_rank(conn);
        self.apply(outputs);
        if closed {
            self.drop_conn(conn);
        }
    }

    fn apply(&mut self, outputs: Vec<Output>) {
        for output in outputs {
            match output {
                Output::Send { conn, bytes } => {
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.unsent.extend_from_slice(&bytes);
                    }
                    self.flush_conn(conn);
                }
                Output::Close { conn, reason } => {
                    let who = self.conns.get(&conn).and_then(|c| c.rank);
                    match who {
                        Some(rank) => eprintln!(
                            "rivetrun: closing the PMI connection of rank {rank}: {reason}"
                        ),
                        None => eprintln!("rivetrun: closing a PMI connection: {reason}"),
                    }
                    self.drop_conn(conn);
                }
                Output::Abort {
                    rank,
                    exit_code,
                    message,
                    ..
                } => {
                    self.begin_teardown(Failure::Aborted {
                        rank,
                        code: exit_code,
                        message,
                    });
                }
                Output::Finalized { .. } => {}
                Output::Spawn { conn, .. } => {
                    let mut replies = Vec::new();
                    self.server.spawn_done(
                        conn,
                        Err("rivetrun cannot spawn processes yet (dynamic processes are not implemented)".into()),
                        &mut replies,
                    );
                    self.apply(replies);
                }
            }
        }
    }

    /// A PMI_PORT connection learns its rank from initack; remember it for
    /// diagnostics and for the exit-without-finalize check.
    fn learn_rank(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.rank.is_some() {
            return;
        }
        if let Some((ns, rank)) = self.server.conn_rank(conn) {
            if ns == self.ns && (rank as usize) < self.ranks.len() {
                c.rank = Some(rank);
                self.ranks[rank as usize].spoke_pmi = true;
            }
        }
    }

    fn flush_conn(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let mut failed = false;
        while !c.unsent.is_empty() {
            match c.stream.write(&c.unsent) {
                Ok(n) => {
                    c.unsent.drain(..n);
                }
                Err(err) if err.kind() == ErrorKind::WouldBlock => break,
                Err(err) if err.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        if failed {
            self.drop_conn(conn);
            return;
        }
        let wants_write = !c.unsent.is_empty();
        if wants_write != c.wants_write {
            let interest = if wants_write {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            let token = c.token;
            let _ = self
                .poll
                .registry()
                .reregister(c.stream.source(), token, interest);
            c.wants_write = wants_write;
        }
    }

    fn drop_conn(&mut self, conn: ConnId) {
        if let Some(mut c) = self.conns.remove(&conn) {
            let _ = self.poll.registry().deregister(c.stream.source());
            self.sources.remove(&c.token);
            self.server.detach(conn);
        }
    }

    fn read_output(&mut self, rank: u32, stream: Stream) {
        let label = self.label.then(|| format!("[{rank}] "));
        let mut buf = std::mem::take(&mut self.read_buf);
        let state = &mut self.ranks[rank as usize];
        let slot = match stream {
            Stream::Stdout => &mut state.stdout,
            Stream::Stderr => &mut state.stderr,
        };
        let Some((rx, lines)) = slot.as_mut() else {
            self.read_buf = buf;
            return;
        };
        let mut sink = Sink(stream);
        let mut closed = false;
        loop {
            match rx.read(&mut buf) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => {
                    let _ = lines.push(&buf[..n], label.as_deref(), &mut sink);
                }
                Err(err) if err.kind() == ErrorKind::WouldBlock => break,
                Err(err) if err.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    closed = true;
                    break;
                }
            }
        }
        if closed {
            let _ = lines.finish(label.as_deref(), &mut sink);
            if let Some((mut rx, _)) = slot.take() {
                let _ = self.poll.registry().deregister(&mut rx);
            }
        }
        self.read_buf = buf;
    }

    /// Collect exited ranks and judge how they ended. Runs only after a
    /// SIGCHLD: one `waitpid(-1)` per exited child, not one per rank per event.
    fn reap(&mut self) {
        if !std::mem::take(&mut self.child_exited) {
            return;
        }
        loop {
            let mut raw = 0;
            // SAFETY: waitpid writes the status into a local we own.
            let pid = unsafe { libc::waitpid(-1, &mut raw, libc::WNOHANG) };
            if pid <= 0 {
                break; // 0: none exited yet; -1: no children left (ECHILD) or EINTR, retried on the next SIGCHLD
            }
            let Some(rank) = self.ranks.iter().position(|r| r.pid == pid as u32) else {
                continue;
            };
            let status = ExitStatus::from_raw(raw);
            self.ranks[rank].status = Some(status);
            // Its last PMI words (finalize) may still be unread.
            let conns: Vec<ConnId> = self
                .conns
                .iter()
                .filter(|(_, c)| c.rank == Some(rank as u32))
                .map(|(id, _)| *id)
                .collect();
            for conn in conns {
                self.read_conn(conn);
            }
            self.judge_exit(rank as u32, status);
        }
        if self.all_exited_at.is_none() && self.ranks.iter().all(|r| r.status.is_some()) {
            self.all_exited_at = Some(Instant::now());
        }
    }

    fn judge_exit(&mut self, rank: u32, status: ExitStatus) {
        if !matches!(self.phase, Phase::Running) {
            return; // we are stopping the job; its ranks' ends are our doing
        }
        let failure = match (status.code(), status.signal()) {
            (Some(0), _) => {
                let state = &self.ranks[rank as usize];
                let others_running = self.ranks.iter().any(|r| r.status.is_none());
                if state.spoke_pmi && !self.server.is_finalized(self.ns, rank) && others_running {
                    Failure::NoFinalize { rank }
                } else {
                    return;
                }
            }
            (Some(code), _) => Failure::Exited { rank, code },
            (None, Some(signal)) => Failure::Signaled { rank, signal },
            (None, None) => Failure::Internal(format!("rank {rank} ended with status {status}")),
        };
        if self.keep_going {
            let alive = self.ranks.iter().filter(|r| r.status.is_none()).count();
            eprintln!(
                "rivetrun: {}; {alive} other rank(s) keep running (--disable-auto-cleanup)",
                failure.describe()
            );
            self.failure.get_or_insert(failure);
            return;
        }
        self.begin_teardown(failure);
    }

    fn begin_teardown(&mut self, failure: Failure) {
        if self.failure.is_none() {
            let alive = self.ranks.iter().filter(|r| r.status.is_none()).count();
            if alive > 0 {
                eprintln!(
                    "rivetrun: {}; terminating the other {alive} rank(s)",
                    failure.describe()
                );
            } else {
                eprintln!("rivetrun: {}", failure.describe());
            }
            self.failure = Some(failure);
        }
        if matches!(self.phase, Phase::Running) {
            self.kill_all(libc::SIGTERM);
            self.phase = Phase::TearingDown {
                kill_at: Instant::now() + self.grace,
            };
        }
    }

    /// Signal the process group of every rank still running.
    fn kill_all(&self, signal: i32) {
        for r in self.ranks.iter().filter(|r| r.status.is_none()) {
            // SAFETY: kill(2) takes no pointers; -pid names the rank's own process group.
            unsafe { libc::kill(-(r.pid as libc::pid_t), signal) };
        }
    }

    /// Signal every rank's process group, exited ranks included (their children may linger).
    fn kill_groups(&self, signal: i32) {
        for r in &self.ranks {
            // SAFETY: as in `kill_all`.
            unsafe { libc::kill(-(r.pid as libc::pid_t), signal) };
        }
    }
}

/// rivetrun's own stdout or stderr, written without Rust's extra buffering.
struct Sink(Stream);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.0 {
            Stream::Stdout => io::stdout().lock().write(buf),
            Stream::Stderr => io::stderr().lock().write(buf),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self.0 {
            Stream::Stdout => io::stdout().lock().write_all(buf),
            Stream::Stderr => io::stderr().lock().write_all(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self.0 {
            Stream::Stdout => io::stdout().flush(),
            Stream::Stderr => io::stderr().flush(),
        }
    }
}
