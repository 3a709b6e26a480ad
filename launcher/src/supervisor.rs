//! The supervisor: one event loop that serves PMI, forwards output and
//! signals, reaps the job's processes and tears the job down when one of
//! them fails.
//!
//! Everything the job does arrives as a readiness event on one `mio::Poll`:
//! PMI connections (fed to the sans-IO `rivet_pmi::server::Server`), the
//! processes' stdout/stderr pipes, the PMI_PORT listener, signals (SIGCHLD,
//! SIGINT, SIGTERM, SIGHUP) and a waker for answers from the name server.
//! The job's processes are its ranks and the processes they spawn
//! (`Output::Spawn`, started here after `spawn::plan` accepted the request,
//! all or none); both are supervised alike. Name requests go to an outside
//! name server on threads of their own (`nameserver::ask`, bounded waits),
//! never blocking the loop. When a process is reaped the server hears of it
//! (`Server::process_ended`): group connects waiting for it fail or go on,
//! members of its groups get `group_event`s, and a member that ended still
//! connected to a group made without `early_term` fails the job
//! (`Failure::GroupLeft`). The loop ends when every process has been reaped
//! and its output drained; the first failure decides the exit code.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{ChildStdin, ExitStatus};
use std::rc::Rc;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream, UnixStream};
use mio::unix::pipe::Receiver;
use mio::{Events, Interest, Poll, Token, Waker};
use rivet_pmi::server::{
    ConnId, NameRequest, NamespaceSpec, NsId, Output, PortAuth, Server, SpawnFailure,
};
use rivet_pmi::wire::{Message, SpawnRequest};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;

use crate::error::LaunchError;
use crate::launch::{self, JobSpec, PmiChannel, Priority, RankPlace, Started};
use crate::nameserver;
use crate::nonblocking::{interest, write_unsent};
use crate::outfiles::{Files, OutFiles};
use crate::output::LineBuffer;
use crate::pmix_host::{self, NameCall, PmixEvent, PmixHost};
use crate::spawn::{self, Plan, SpawnBase};
use crate::stdout_queue::StdoutQueue;
use rivet_pmi::pmix_ffi::{PMIX_ERROR, PMIX_ERR_BAD_PARAM};

const SIGNALS: Token = Token(0);
const LISTENER: Token = Token(1);
const WAKER: Token = Token(2);
const FIRST_DYNAMIC: usize = 3;

/// How long output is still drained after the last rank exited, in case a
/// grandchild keeps a pipe open.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

/// A process of the job: a rank, or a process a spawn started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    Rank(u32),
    /// Rank `index` of the spawned namespace `kvsname`.
    Spawned {
        kvsname: String,
        index: u32,
    },
    /// A `PMI_PORT` connection that never said which rank it is.
    Unidentified,
}

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Who::Rank(rank) => write!(f, "rank {rank}"),
            Who::Spawned { kvsname, index } => write!(f, "spawned process {index} of {kvsname}"),
            Who::Unidentified => write!(f, "an unidentified PMI connection"),
        }
    }
}

/// rivetrun's exit code when the job times out: mpiexec.hydra's (4.0.2
/// exits 255 after "APPLICATION TIMED OUT").
pub const TIMEOUT_EXIT_CODE: i32 = 255;

/// Why the job failed: the first of these decides rivetrun's exit code.
#[derive(Debug, Clone)]
pub enum Failure {
    Exited {
        who: Who,
        code: i32,
    },
    Signaled {
        who: Who,
        signal: i32,
    },
    Aborted {
        who: Who,
        code: i32,
        message: Option<String>,
    },
    NoFinalize {
        who: Who,
    },
    Interrupted {
        signal: i32,
    },
    /// The job ran past `--timeout` / `MPIEXEC_TIMEOUT`.
    TimedOut {
        limit: Duration,
    },
    /// It ended still connected to a group made without `early_term`.
    GroupLeft {
        who: Who,
        group: String,
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
            Failure::NoFinalize { .. } | Failure::GroupLeft { .. } | Failure::Internal(_) => 1,
            Failure::TimedOut { .. } => TIMEOUT_EXIT_CODE,
        }
    }

    /// The process that failed the job, if one did.
    fn who(&self) -> Option<&Who> {
        match self {
            Failure::Exited { who, .. }
            | Failure::Signaled { who, .. }
            | Failure::Aborted { who, .. }
            | Failure::NoFinalize { who }
            | Failure::GroupLeft { who, .. } => Some(who),
            Failure::Interrupted { .. } | Failure::TimedOut { .. } | Failure::Internal(_) => None,
        }
    }

    fn describe(&self) -> String {
        match self {
            Failure::Exited { who, code } => format!("{who} exited with code {code}"),
            Failure::Signaled { who, signal } => {
                format!("{who} was killed by signal {signal} ({})", signal_name(*signal))
            }
            Failure::Aborted { who, code, message } => match message {
                Some(m) => format!("{who} called abort (exit code {code}): {m}"),
                None => format!("{who} called abort (exit code {code})"),
            },
            Failure::NoFinalize { who } => format!(
                "{who} exited with code 0 without finalizing PMI; the other processes could wait for it forever"
            ),
            Failure::Interrupted { signal } => format!("rivetrun received {}", signal_name(*signal)),
            Failure::TimedOut { limit } => format!(
                "the job timed out: still running after {} s (--timeout / MPIEXEC_TIMEOUT)",
                limit.as_secs_f64()
            ),
            Failure::GroupLeft { who, group } => format!(
                "{who} ended while connected to group {group} (made without \
                 early_term_allowed: every member must disconnect first)"
            ),
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    Stdout,
    Stderr,
}

enum Source {
    Pmi(ConnId),
    Output { proc: usize, stream: Stream },
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
    /// The process (index into `procs`) this connection belongs to, once known.
    proc: Option<usize>,
}

/// One process of the job.
struct Proc {
    who: Who,
    /// Its namespace and rank there.
    ns: NsId,
    rank: u32,
    /// `[RANK] ` or `[sN:I] ` with `--label`.
    label: Option<String>,
    pid: u32,
    status: Option<ExitStatus>,
    stdout: Option<(Receiver, LineBuffer)>,
    stderr: Option<(Receiver, LineBuffer)>,
    spoke_pmi: bool,
    /// Where its stdout and stderr go instead of rivetrun's (`outfiles`).
    files: Files,
}

/// What spawning needs besides the request (see `Supervisor::enable_spawn`).
struct Spawner {
    base: SpawnBase,
    priority: Priority,
    /// Spawns started so far; the next is `_s<count+1>`.
    count: u32,
}

/// An answer from the name server, delivered by a forwarding thread.
struct NameAnswer {
    conn: ConnId,
    who: String,
    request: NameRequest,
    result: Result<Message, String>,
}

/// The outside name server the job's name requests go to.
struct NameClient {
    addr: String,
    waker: Arc<Waker>,
    tx: mpsc::Sender<NameAnswer>,
    rx: mpsc::Receiver<NameAnswer>,
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
    /// Wakes the event loop for answers from other threads (name server,
    /// the PMIx server's upcalls).
    waker: Arc<Waker>,
    /// rivetrun's PMIx server, when the job is served PMIx too.
    pmix: Option<PmixHost>,
    /// PMIx lookups waiting for names (`PMIX_WAIT`), tried again at
    /// `pmix_retry_at`.
    pmix_waiting: Vec<NameCall>,
    pmix_retry_at: Option<Instant>,
    signals: Signals,
    listener: Option<TcpListener>,
    sources: HashMap<Token, Source>,
    next_token: usize,
    server: Server,
    ns: NsId,
    conns: HashMap<ConnId, PmiConn>,
    next_conn: ConnId,
    /// The ranks (first, in rank order) and the spawned processes.
    procs: Vec<Proc>,
    by_rank: HashMap<(NsId, u32), usize>,
    spawner: Option<Spawner>,
    names: Option<NameClient>,
    label: bool,
    grace: Duration,
    phase: Phase,
    failure: Option<Failure>,
    all_exited_at: Option<Instant>,
    /// When the job times out (`--timeout`), and the limit.
    timeout: Option<(Instant, Duration)>,
    /// `-outfile-pattern` / `-errfile-pattern`.
    outfiles: Option<OutFiles>,
    /// A SIGCHLD arrived (or a process was added): `reap` has work.
    child_exited: bool,
    /// A failed rank does not stop the others (`--disable-auto-cleanup`).
    keep_going: bool,
    /// Scratch space for reads, allocated once (zeroing a fresh buffer per
    /// event was a measurable share of serving PMI).
    read_buf: Box<[u8]>,
    /// rivetrun's stdout, written by a thread (`stdout_queue.rs`).
    stdout_q: StdoutQueue,
    /// Output streams with bytes left unread: the queue was full, or one
    /// turn's reads were used up. Read again at the next turn.
    deferred: Vec<(usize, Stream)>,
}

/// Answers a PMI connection may leave unread before it is closed (far
/// above any answer, a group connect's member lines included).
const MAX_PMI_UNSENT: usize = 64 << 20;

/// Reads of one output stream per turn (64 KiB each): a rank printing
/// without pause cannot keep the loop from PMI serving.
const READS_PER_TURN: usize = 8;
/// How long the loop waits before trying a stream deferred by a full queue.
const FULL_QUEUE_RETRY: Duration = Duration::from_millis(20);

impl Supervisor {
    /// Set up polling and signal handling; call before the first rank starts so no SIGCHLD is missed.
    pub fn new(server: Server, ns: NsId, label: bool, grace: Duration) -> io::Result<Supervisor> {
        let poll = Poll::new()?;
        let mut signals = Signals::new([SIGCHLD, SIGINT, SIGTERM, SIGHUP])?;
        poll.registry()
            .register(&mut signals, SIGNALS, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        Ok(Supervisor {
            poll,
            waker,
            pmix: None,
            pmix_waiting: Vec::new(),
            pmix_retry_at: None,
            signals,
            listener: None,
            sources: HashMap::new(),
            next_token: FIRST_DYNAMIC,
            server,
            ns,
            conns: HashMap::new(),
            next_conn: 1,
            procs: Vec::new(),
            by_rank: HashMap::new(),
            spawner: None,
            names: None,
            label,
            grace,
            phase: Phase::Running,
            failure: None,
            timeout: None,
            outfiles: None,
            all_exited_at: None,
            child_exited: true,
            keep_going: false,
            read_buf: vec![0u8; 65536].into_boxed_slice(),
            stdout_q: StdoutQueue::start(io::stdout())?,
            deferred: Vec::new(),
        })
    }

    /// Listen for PMI_PORT connections of the job's `size` ranks; returns
    /// the `host:port` and the ids and secret to hand to the ranks, without
    /// which a connection is served nothing (`rivet_pmi::server::PortAuth`).
    pub fn listen_tcp(&mut self, size: u32) -> io::Result<(String, PortAuth)> {
        let auth = PortAuth::generate(size)?;
        self.server.require_port_auth(self.ns, auth.clone());
        let mut listener = TcpListener::bind("127.0.0.1:0".parse().expect("literal address"))?;
        let addr = listener.local_addr()?;
        self.poll
            .registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        self.listener = Some(listener);
        Ok((format!("127.0.0.1:{}", addr.port()), auth))
    }

    fn token(&mut self) -> Token {
        let t = Token(self.next_token);
        self.next_token += 1;
        t
    }

    /// Take over a started rank. Ranks must be added in rank order, before
    /// any spawn.
    pub fn add_rank(&mut self, started: Started) -> io::Result<Option<ChildStdin>> {
        let rank = self.procs.len() as u32;
        let label = self.label.then(|| format!("[{rank}] "));
        self.add_proc(started, Who::Rank(rank), (self.ns, 0), rank, label)
    }

    /// Take over a started process: watch its output and PMI connection.
    /// `(ns, pgid)`: its namespace, and its process group for
    /// `-outfile-pattern` (0 for ranks, N for spawn N).
    fn add_proc(
        &mut self,
        started: Started,
        who: Who,
        (ns, pgid): (NsId, u32),
        rank: u32,
        label: Option<String>,
    ) -> io::Result<Option<ChildStdin>> {
        let index = self.procs.len();
        let files = match self.outfiles.as_mut().map(|o| o.files_for(pgid, rank)) {
            None => (None, None),
            Some(Ok(files)) => files,
            Some(Err(e)) => {
                eprintln!("rivetrun: {e}; {who}'s output is forwarded instead");
                (None, None)
            }
        };
        let Started {
            child,
            pmi,
            stdin,
            stdout,
            stderr,
        } = started;
        // From here on the process is ours to reap, whatever fails below.
        self.procs.push(Proc {
            who,
            ns,
            rank,
            label,
            pid: child.id(),
            status: None,
            stdout: None,
            stderr: None,
            spoke_pmi: false,
            files,
        });
        self.by_rank.insert((ns, rank), index);
        self.child_exited = true;
        let mut out = Receiver::from(stdout);
        let mut err = Receiver::from(stderr);
        out.set_nonblocking(true)?;
        err.set_nonblocking(true)?;
        for (rx, stream) in [(&mut out, Stream::Stdout), (&mut err, Stream::Stderr)] {
            let token = self.token();
            self.poll
                .registry()
                .register(rx, token, Interest::READABLE)?;
            self.sources.insert(
                token,
                Source::Output {
                    proc: index,
                    stream,
                },
            );
        }
        self.procs[index].stdout = Some((out, LineBuffer::default()));
        self.procs[index].stderr = Some((err, LineBuffer::default()));
        if let Some(pmi) = pmi {
            pmi.set_nonblocking(true)?;
            let conn = self.add_conn(PmiStream::Unix(UnixStream::from_std(pmi)), Some(index))?;
            self.server.attach(conn, ns, rank);
        }
        Ok(stdin)
    }

    /// Serve spawn requests: children get what `base` says; `priority`
    /// gives them the nice value rivetrun was started with.
    pub fn enable_spawn(&mut self, base: SpawnBase, priority: Priority) {
        self.spawner = Some(Spawner {
            base,
            priority,
            count: 0,
        });
    }

    /// Send the job's name requests to the name server at `addr` (HOST:PORT).
    pub fn use_name_server(&mut self, addr: String) -> io::Result<()> {
        let waker = Arc::clone(&self.waker);
        let (tx, rx) = mpsc::channel();
        self.names = Some(NameClient {
            addr,
            waker,
            tx,
            rx,
        });
        self.server.forward_names(true);
        Ok(())
    }

    /// What wakes the event loop from another thread.
    pub fn waker(&self) -> Arc<Waker> {
        Arc::clone(&self.waker)
    }

    /// Serve the job PMIx too (its upcalls arrive through the waker).
    pub fn serve_pmix(&mut self, host: PmixHost) {
        self.pmix = Some(host);
    }

    fn on_pmix_events(&mut self) {
        let Some(host) = &self.pmix else {
            return;
        };
        for event in host.take_events() {
            match event {
                PmixEvent::Aborted {
                    nspace,
                    rank,
                    code,
                    message,
                } => {
                    let who = match self.server.namespace_id(&nspace) {
                        Some(ns) => self.who(ns, rank),
                        None => Who::Rank(rank),
                    };
                    self.job_failed(Failure::Aborted {
                        who,
                        code,
                        message: (!message.is_empty()).then_some(message),
                    })
                }
                PmixEvent::Names(call) => self.pmix_names(call),
                PmixEvent::Spawn(call) => {
                    // The caller's own namespace: the job's, or a spawned one.
                    let Some(ns) = self.server.namespace_id(&call.nspace) else {
                        call.finish(Err(PMIX_ERR_BAD_PARAM));
                        continue;
                    };
                    let result = self.spawn(ns, call.rank, &call.request, &call.env);
                    call.finish(result.map(|(_, ns)| ns).map_err(|_| PMIX_ERROR));
                }
            }
        }
    }

    /// A PMIx publish, lookup or unpublish: from the job's name table (as
    /// PMI-1's), or its name server.
    fn pmix_names(&mut self, call: NameCall) {
        if let Some(names) = &self.names {
            return pmix_host::serve_from_name_server(call, names.addr.clone());
        }
        // The caller's namespace, as the table records publishers.
        let Some(ns) = self.server.namespace_id(&call.nspace) else {
            return call.refuse(PMIX_ERR_BAD_PARAM);
        };
        if let Some(call) = pmix_host::serve_from_job(call, &mut self.server, ns) {
            self.pmix_waiting.push(call);
            self.pmix_retry_at
                .get_or_insert_with(|| Instant::now() + pmix_host::NAME_RETRY);
        }
    }

    /// Try the waiting PMIx lookups again.
    fn retry_pmix_lookups(&mut self) {
        self.pmix_retry_at = None;
        for call in std::mem::take(&mut self.pmix_waiting) {
            self.pmix_names(call);
        }
    }

    fn add_conn(&mut self, mut stream: PmiStream, proc: Option<usize>) -> io::Result<ConnId> {
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
                proc,
            },
        );
        Ok(conn)
    }

    /// Let the other ranks run on when one fails (`--disable-auto-cleanup`).
    pub fn keep_going(&mut self, on: bool) {
        self.keep_going = on;
    }

    /// Send processes' output to the files `files` names (opened already
    /// for the ranks, so that a bad pattern fails before any rank starts).
    pub fn output_files(&mut self, files: OutFiles) {
        self.outfiles = Some(files);
    }

    /// Tear the job down if it still runs `limit` from now (`--timeout`).
    pub fn time_limit(&mut self, limit: Duration) {
        self.timeout = Instant::now().checked_add(limit).map(|at| (at, limit));
    }

    /// A process could not be started: record it as the failure and stop the others.
    pub fn fail(&mut self, failure: Failure) {
        self.begin_teardown(failure);
    }

    /// Run until every process is reaped; returns the failure, if any.
    pub fn run(mut self) -> Option<Failure> {
        let mut events = Events::with_capacity(256);
        loop {
            self.reap();
            if self.finished() {
                break;
            }
            let mut timeout = self
                .next_deadline()
                .map(|d| d.saturating_duration_since(Instant::now()));
            if !self.deferred.is_empty() {
                let wait = match self.stdout_q.has_room() {
                    true => Duration::ZERO,
                    false => FULL_QUEUE_RETRY,
                };
                timeout = Some(timeout.map_or(wait, |t| t.min(wait)));
            }
            if !self.turn(&mut events, timeout) {
                break;
            }
            for (proc, stream) in std::mem::take(&mut self.deferred) {
                self.read_output(proc, stream);
            }
        }
        self.stdout_q.finish();
        if self.failure.is_some() {
            // Whatever a failed job's processes forked must not outlive it.
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
                WAKER => {
                    self.on_name_answers();
                    self.on_pmix_events();
                }
                token => self.on_ready(
                    token,
                    event.is_readable() || event.is_read_closed(),
                    event.is_writable(),
                    event.is_read_closed(),
                ),
            }
        }
        self.on_deadlines();
        true
    }

    fn finished(&self) -> bool {
        let exited = self.procs.iter().all(|p| p.status.is_some());
        let drained = self
            .procs
            .iter()
            .all(|p| p.stdout.is_none() && p.stderr.is_none());
        exited
            && (drained
                || self
                    .all_exited_at
                    .is_some_and(|t| t.elapsed() >= DRAIN_AFTER_EXIT))
    }

    fn next_deadline(&self) -> Option<Instant> {
        let kill = match self.phase {
            Phase::TearingDown { kill_at } => Some(kill_at),
            Phase::Running => self.timeout.map(|(at, _)| at),
            Phase::Killed => None,
        };
        let drain = self.all_exited_at.map(|t| t + DRAIN_AFTER_EXIT);
        [kill, drain, self.pmix_retry_at]
            .into_iter()
            .flatten()
            .min()
    }

    fn on_deadlines(&mut self) {
        if self.pmix_retry_at.is_some_and(|t| Instant::now() >= t) {
            self.retry_pmix_lookups();
        }
        if let (Phase::Running, Some((at, limit))) = (&self.phase, self.timeout) {
            if Instant::now() >= at {
                // Whatever --disable-auto-cleanup says: the job is over.
                self.begin_teardown(Failure::TimedOut { limit });
            }
        }
        if let Phase::TearingDown { kill_at } = self.phase {
            if Instant::now() >= kill_at {
                if self.procs.iter().any(|p| p.status.is_none()) {
                    eprintln!(
                        "rivetrun: {} still running after {:?}; sending SIGKILL",
                        self.alive_text(false, None),
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
                    // PMI_PORT connections are the ranks' (spawned processes use PMI_FD).
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

    /// `closed`: the peer's end is shut, which may come with its last
    /// bytes in the same (edge-triggered) event: read on to the end.
    fn on_ready(&mut self, token: Token, readable: bool, writable: bool, closed: bool) {
        match self.sources.get(&token) {
            Some(Source::Pmi(conn)) => {
                let conn = *conn;
                if writable {
                    self.flush_conn(conn);
                }
                if readable {
                    self.read_conn(conn, closed);
                }
            }
            Some(Source::Output { proc, stream }) => {
                let (proc, stream) = (*proc, *stream);
                self.read_output(proc, stream);
            }
            None => {}
        }
    }

    /// Read what `conn` sent; `to_end`: until end of stream, which will
    /// be reported by no later event.
    fn read_conn(&mut self, conn: ConnId, to_end: bool) {
        let mut buf = std::mem::take(&mut self.read_buf);
        let mut outputs = Vec::new();
        let mut closed = false;
        while let Some(c) = self.conns.get_mut(&conn) {
            if c.unsent.len() > MAX_PMI_UNSENT {
                // A rank that asks without reading its answers: no more
                // of its requests are read, so its answers stop growing.
                outputs.push(Output::Close {
                    conn,
                    reason: format!("more than {MAX_PMI_UNSENT} bytes of answers unread"),
                });
                break;
            }
            match c.stream.read(&mut buf) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => {
                    if let Some(p) = c.proc {
                        self.procs[p].spoke_pmi = true;
                    }
                    self.server.receive(conn, &buf[..n], &mut outputs);
                    if n < buf.len() && !to_end {
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
                Output::SendAll { conns, bytes } => {
                    for conn in conns {
                        if let Some(c) = self.conns.get_mut(&conn) {
                            c.unsent.extend_from_slice(&bytes);
                        }
                        self.flush_conn(conn);
                    }
                }
                Output::Close { conn, reason } => {
                    let who = self.conns.get(&conn).and_then(|c| c.proc);
                    match who {
                        Some(p) => eprintln!(
                            "rivetrun: closing the PMI connection of {}: {reason}",
                            self.procs[p].who
                        ),
                        None => eprintln!("rivetrun: closing a PMI connection: {reason}"),
                    }
                    self.drop_conn(conn);
                }
                Output::Abort {
                    ns,
                    rank,
                    exit_code,
                    message,
                } => {
                    let who = match rank {
                        Some(rank) => self.who(ns, rank),
                        None => Who::Unidentified,
                    };
                    self.begin_teardown(Failure::Aborted {
                        who,
                        code: exit_code,
                        message,
                    });
                }
                // Only a server serving one node of a multi-host job (the proxy's).
                Output::Finalized { .. } | Output::Barrier { .. } => {}
                Output::Spawn {
                    conn,
                    ns,
                    rank,
                    request,
                } => {
                    let result = self.spawn(ns, rank, &request, &[]).map(|(codes, _)| codes);
                    let mut replies = Vec::new();
                    self.server.spawn_done(conn, result, &mut replies);
                    self.apply(replies);
                }
                Output::Name {
                    conn,
                    ns,
                    rank,
                    request,
                } => self.forward_name(conn, ns, rank, request),
                Output::GroupMemberLost { ns, rank, group } => {
                    // Once the job is going down, ends are our doing.
                    if matches!(self.phase, Phase::Running) {
                        let who = self.who(ns, rank);
                        self.job_failed(Failure::GroupLeft { who, group });
                    }
                }
            }
        }
    }

    /// The process that is rank `rank` of namespace `ns`.
    fn who(&self, ns: NsId, rank: u32) -> Who {
        match self.by_rank.get(&(ns, rank)) {
            Some(&p) => self.procs[p].who.clone(),
            None if ns == self.ns => Who::Rank(rank),
            None => Who::Spawned {
                kvsname: self.server.namespace_name(ns).to_string(),
                index: rank,
            },
        }
    }

    /// Carry out a spawn request of rank `rank` of `ns`: all of its
    /// processes start, or none does.
    fn spawn(
        &mut self,
        ns: NsId,
        rank: u32,
        request: &SpawnRequest,
        command_env: &[Vec<(String, String)>],
    ) -> Result<(Vec<i32>, String), SpawnFailure> {
        let parent = self.who(ns, rank);
        let refuse = |message: String, errcodes: Vec<i32>| {
            eprintln!("rivetrun: spawn requested by {parent} failed: {message}");
            Err(SpawnFailure { errcodes, message })
        };
        if !matches!(self.phase, Phase::Running) {
            return refuse("the job is being torn down".into(), Vec::new());
        }
        let Some(spawner) = self.spawner.as_mut() else {
            return refuse(
                "rivetrun is not ready to spawn processes".into(),
                Vec::new(),
            );
        };
        let mut warnings = Vec::new();
        let planned = spawn::plan(&spawner.base, request, &mut warnings);
        for warning in warnings {
            eprintln!("rivetrun: warning: {warning}");
        }
        let plan = match planned {
            Ok(plan) => plan,
            Err(refusal) => return refuse(refusal.message, refusal.errcodes),
        };
        spawner.count += 1;
        let number = spawner.count;
        let kvsname = format!("{}_s{number}", spawner.base.kvsname);
        let appnum_of_rank = if plan.commands.len() > 1 {
            plan.appnum_of_rank()
        } else {
            Vec::new()
        };
        let spec = NamespaceSpec {
            name: kvsname.clone(),
            size: plan.total,
            appnum: 0,
            appnum_of_rank,
            universe_size: spawner.base.universe_size.max(plan.total),
            node_of_rank: vec![0; plan.total as usize],
            attributes: spawner.base.attributes.clone(),
            preput: request.preput.clone(),
        };
        let child_ns = match self.server.create_namespace(spec) {
            Ok(id) => id,
            Err(e) => return refuse(e.to_string(), vec![1; plan.total as usize]),
        };
        // Served PMIx too, where the job is: registered before they start.
        let mut pmix_env: Vec<Vec<(String, String)>> = match &self.pmix {
            Some(host) => match host.register_spawned(
                &kvsname,
                plan.total,
                (self.server.namespace_name(ns), rank),
            ) {
                Ok(()) => (0..plan.total)
                    .map(|i| host.fork_env_in(&kvsname, i).unwrap_or_default())
                    .collect(),
                Err(why) => {
                    eprintln!("rivetrun: warning: {kvsname} gets no PMIx: {why}");
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        // Each command's own additions (PMIx apps' env), after PMIx's.
        if !command_env.is_empty() {
            pmix_env.resize(plan.total as usize, Vec::new());
            let mut index = 0;
            for (command, extra) in plan.commands.iter().zip(command_env) {
                for _ in 0..command.nprocs {
                    pmix_env[index].extend(extra.iter().cloned());
                    index += 1;
                }
            }
        }
        let started = match self.start_children(&plan, &kvsname, &pmix_env) {
            Ok(started) => started,
            Err((index, code, message)) => {
                // Its namespace stays, without processes: a group connect
                // naming them must not wait for them.
                let mut outputs = Vec::new();
                for r in 0..plan.total {
                    self.server.process_ended(child_ns, r, &mut outputs);
                }
                self.apply(outputs);
                let mut codes = vec![0; plan.total as usize];
                codes[index as usize] = code;
                return refuse(message, codes);
            }
        };
        for (index, s) in started.into_iter().enumerate() {
            let index = index as u32;
            let who = Who::Spawned {
                kvsname: kvsname.clone(),
                index,
            };
            let label = self.label.then(|| format!("[s{number}:{index}] "));
            if let Err(err) = self.add_proc(s, who.clone(), (child_ns, number), index, label) {
                // It runs but cannot be watched: the job cannot go on.
                self.begin_teardown(Failure::Internal(format!("cannot watch {who}: {err}")));
            }
        }
        Ok((vec![0; plan.total as usize], kvsname))
    }

    /// Start every process of `plan`; on the first that cannot start, kill
    /// and reap the ones already started and say which failed (its index,
    /// error code and why).
    fn start_children(
        &self,
        plan: &Plan,
        kvsname: &str,
        pmix_env: &[Vec<(String, String)>],
    ) -> Result<Vec<Started>, (u32, i32, String)> {
        let Some(spawner) = self.spawner.as_ref() else {
            return Err((0, 1, "spawning is not enabled".into()));
        };
        let mut started: Vec<Started> = Vec::with_capacity(plan.total as usize);
        let mut index = 0u32;
        for command in &plan.commands {
            let job = JobSpec {
                program: command.program.clone(),
                argv0: command.argv0.clone(),
                args: command.args.clone(),
                env: spawner.base.env.clone(),
                clear_env: spawner.base.clear_env,
                wdir: Some(command.wdir.clone()),
                size: plan.total,
                kvsname: kvsname.to_string(),
                channel: PmiChannel::Fd,
                default_affinity: None,
                spawned: true,
            };
            for _ in 0..command.nprocs {
                // Unbound: the supervisor thread has rivetrun's own CPU mask.
                let place = RankPlace {
                    local_rank: index,
                    local_size: plan.total,
                    affinity: None,
                };
                let env = pmix_env.get(index as usize).map_or(&[][..], Vec::as_slice);
                match launch::start_rank(&job, index, &place, env) {
                    Ok(s) => {
                        spawner.priority.reset_child(s.child.id());
                        started.push(s);
                    }
                    Err(err) => {
                        for mut s in started {
                            // SAFETY: kill(2) takes no pointers; the group is the child's own.
                            unsafe { libc::kill(-(s.child.id() as libc::pid_t), libc::SIGKILL) };
                            let _ = s.child.wait();
                        }
                        let code = err.exit_code();
                        let message = match err {
                            LaunchError::Spawn { program, err, .. } => format!(
                                "could not start spawned process {index} of {kvsname} \
                                 ({program}): {err}"
                            ),
                            other => other.to_string(),
                        };
                        return Err((index, code, message));
                    }
                }
                index += 1;
            }
        }
        Ok(started)
    }

    /// Hand a name request to a thread that asks the name server.
    fn forward_name(&mut self, conn: ConnId, ns: NsId, rank: Option<u32>, request: NameRequest) {
        let who = match rank {
            Some(r) => self.who(ns, r).to_string(),
            None => "a rank".to_string(),
        };
        let Some(names) = self.names.as_ref() else {
            let mut replies = Vec::new();
            self.server
                .name_done(conn, Err("no_name_server".into()), &mut replies);
            self.apply(replies);
            return;
        };
        let addr = names.addr.clone();
        let tx = names.tx.clone();
        let waker = Arc::clone(&names.waker);
        let spawned = std::thread::Builder::new()
            .name("rivetrun-names".into())
            .spawn(move || {
                let result = nameserver::ask(&addr, &request);
                let _ = tx.send(NameAnswer {
                    conn,
                    who,
                    request,
                    result,
                });
                let _ = waker.wake();
            });
        if let Err(err) = spawned {
            let mut replies = Vec::new();
            self.server.name_done(
                conn,
                Err(format!(
                    "name_server_error: rivetrun cannot start a thread: {err}"
                )),
                &mut replies,
            );
            self.apply(replies);
        }
    }

    /// Pass the name server's answers on to the ranks that asked.
    fn on_name_answers(&mut self) {
        let mut answers = Vec::new();
        if let Some(names) = self.names.as_ref() {
            while let Ok(answer) = names.rx.try_recv() {
                answers.push(answer);
            }
        }
        for answer in answers {
            let result = answer.result.map_err(|why| {
                eprintln!(
                    "rivetrun: {why}; {} of '{}' by {} fails",
                    answer.request.query(),
                    answer.request.service(),
                    answer.who
                );
                format!("name_server_error: {why}")
            });
            let mut replies = Vec::new();
            self.server.name_done(answer.conn, result, &mut replies);
            self.apply(replies);
        }
    }

    /// A PMI_PORT connection learns its rank from initack; remember it for
    /// diagnostics and for the exit-without-finalize check.
    fn learn_rank(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.proc.is_some() {
            return;
        }
        if let Some(key) = self.server.conn_rank(conn) {
            if let Some(&p) = self.by_rank.get(&key) {
                c.proc = Some(p);
                self.procs[p].spoke_pmi = true;
            }
        }
    }

    fn flush_conn(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if write_unsent(&mut c.stream, &mut c.unsent).is_err() {
            self.drop_conn(conn);
            return;
        }
        let wants_write = !c.unsent.is_empty();
        if wants_write != c.wants_write {
            let interest = interest(wants_write);
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

    fn read_output(&mut self, proc: usize, stream: Stream) {
        let mut buf = std::mem::take(&mut self.read_buf);
        let state = &mut self.procs[proc];
        let label = state.label.clone();
        let slot = match stream {
            Stream::Stdout => &mut state.stdout,
            Stream::Stderr => &mut state.stderr,
        };
        let Some((rx, lines)) = slot.as_mut() else {
            self.read_buf = buf;
            return;
        };
        let file = match stream {
            Stream::Stdout => state.files.0.clone(),
            Stream::Stderr => state.files.1.clone(),
        };
        let mut sink = Sink {
            stream,
            file,
            queue: &self.stdout_q,
        };
        let mut closed = false;
        let mut reads = 0;
        loop {
            if reads == READS_PER_TURN || (stream == Stream::Stdout && !self.stdout_q.has_room()) {
                if !self.deferred.contains(&(proc, stream)) {
                    self.deferred.push((proc, stream));
                }
                break;
            }
            reads += 1;
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

    /// Collect exited processes and judge how they ended. Runs only after a
    /// SIGCHLD: one `waitpid(-1)` per exited child, not one per process per event.
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
            let Some(proc) = self.procs.iter().position(|p| p.pid == pid as u32) else {
                continue;
            };
            let status = ExitStatus::from_raw(raw);
            self.procs[proc].status = Some(status);
            remove_fabric_segments(pid as u32);
            // Its last PMI words (finalize) may still be unread.
            let conns: Vec<ConnId> = self
                .conns
                .iter()
                .filter(|(_, c)| c.proc == Some(proc))
                .map(|(id, _)| *id)
                .collect();
            for conn in conns {
                self.read_conn(conn, true);
            }
            // Its own end is judged first, so a crash is reported as the
            // crash rather than as leaving a group.
            self.judge_exit(proc, status);
            let (ns, rank) = (self.procs[proc].ns, self.procs[proc].rank);
            let mut outputs = Vec::new();
            self.server.process_ended(ns, rank, &mut outputs);
            self.apply(outputs);
            self.free_resources(proc);
        }
        if self.all_exited_at.is_none() && self.procs.iter().all(|p| p.status.is_some()) {
            self.all_exited_at = Some(Instant::now());
        }
    }

    /// What the process registered and did not release (seed 002): freed
    /// now that it ended, each one that was still there named on stderr.
    fn free_resources(&mut self, proc: usize) {
        let (ns, rank) = (self.procs[proc].ns, self.procs[proc].rank);
        for r in self.server.take_resources(ns, rank) {
            match crate::resources::free(&r) {
                Ok(true) => eprintln!(
                    "rivetrun: {} ended without freeing {r}: freed it",
                    self.procs[proc].who
                ),
                Ok(false) => {}
                Err(e) => eprintln!(
                    "rivetrun: cannot free {r} that {} registered: {e}",
                    self.procs[proc].who
                ),
            }
        }
    }

    fn judge_exit(&mut self, proc: usize, status: ExitStatus) {
        if !matches!(self.phase, Phase::Running) {
            return; // we are stopping the job; its processes' ends are our doing
        }
        let who = self.procs[proc].who.clone();
        let failure = match (status.code(), status.signal()) {
            (Some(0), _) => {
                let state = &self.procs[proc];
                let others_running = self.procs.iter().any(|p| p.status.is_none());
                if state.spoke_pmi
                    && !self.server.is_finalized(state.ns, state.rank)
                    && others_running
                {
                    Failure::NoFinalize { who }
                } else {
                    return;
                }
            }
            (Some(code), _) => Failure::Exited { who, code },
            (None, Some(signal)) => Failure::Signaled { who, signal },
            (None, None) => Failure::Internal(format!("{who} ended with status {status}")),
        };
        self.job_failed(failure);
    }

    /// A process failed the job: tear it down, or with
    /// `--disable-auto-cleanup` report it and let the others run on.
    fn job_failed(&mut self, failure: Failure) {
        if self.keep_going {
            eprintln!(
                "rivetrun: {}; {} keep running (--disable-auto-cleanup)",
                failure.describe(),
                self.alive_text(true, failure.who())
            );
            self.failure.get_or_insert(failure);
            return;
        }
        self.begin_teardown(failure);
    }

    /// "2 rank(s)", "1 rank(s) and 3 spawned process(es)", ... of the
    /// processes still running (`other`: "2 other rank(s)"), not counting
    /// `except` (the one that failed, which may still be running: an abort).
    fn alive_text(&self, other: bool, except: Option<&Who>) -> String {
        let running = |spawned: bool| {
            self.procs
                .iter()
                .filter(|p| {
                    p.status.is_none()
                        && Some(&p.who) != except
                        && matches!(p.who, Who::Spawned { .. }) == spawned
                })
                .count()
        };
        let (ranks, children) = (running(false), running(true));
        let other = if other { "other " } else { "" };
        match (ranks, children) {
            (r, 0) => format!("{r} {other}rank(s)"),
            (0, c) => format!("{c} {other}spawned process(es)"),
            (r, c) => format!("{r} {other}rank(s) and {c} spawned process(es)"),
        }
    }

    fn begin_teardown(&mut self, failure: Failure) {
        if self.failure.is_none() {
            if self.procs.iter().any(|p| p.status.is_none()) {
                let other = if failure.who().is_some() {
                    "other "
                } else {
                    ""
                };
                eprintln!(
                    "rivetrun: {}; terminating the {other}{}",
                    failure.describe(),
                    self.alive_text(false, failure.who())
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

    /// Signal the process group of every process still running (ranks and spawned).
    fn kill_all(&self, signal: i32) {
        for p in self.procs.iter().filter(|p| p.status.is_none()) {
            // SAFETY: kill(2) takes no pointers; -pid names the process's own group.
            unsafe { libc::kill(-(p.pid as libc::pid_t), signal) };
        }
    }

    /// Signal every process group of the job, exited processes included (their children may linger).
    fn kill_groups(&self, signal: i32) {
        for p in &self.procs {
            // SAFETY: as in `kill_all`.
            unsafe { libc::kill(-(p.pid as libc::pid_t), signal) };
        }
    }
}

/// The process's output file (`-outfile-pattern`), else rivetrun's own
/// stdout (through the queue, never blocking) or stderr (written at once,
/// without Rust's extra buffering).
struct Sink<'a> {
    stream: Stream,
    file: Option<Rc<File>>,
    queue: &'a StdoutQueue,
}

impl Write for Sink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if let Some(f) = &self.file {
            return (&**f).write_all(buf);
        }
        match self.stream {
            Stream::Stdout => {
                self.queue.push(buf);
                Ok(())
            }
            Stream::Stderr => io::stderr().lock().write_all(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self.stream {
            Stream::Stdout => Ok(()), // the queue and files have no buffer
            Stream::Stderr => io::stderr().flush(),
        }
    }
}

/// Removes what libfabric's shm provider left in /dev/shm for process
/// `pid` (`<pid>:<n>:<m>`: its endpoints' queues, unlinked only by a
/// process that closes them, so a killed rank leaves them behind).
fn remove_fabric_segments(pid: u32) {
    let prefix = format!("{pid}:");
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let numbered = |s: &str| {
            s.split(':')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        };
        if name.starts_with(&prefix) && numbered(&name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaving_a_group_by_ending_is_a_failure_that_says_why() {
        let f = Failure::GroupLeft {
            who: Who::Spawned {
                kvsname: "rivet_7_0_s1".into(),
                index: 2,
            },
            group: "rivet_7_0_g3".into(),
        };
        assert_eq!(f.exit_code(), 1);
        assert_eq!(
            f.describe(),
            "spawned process 2 of rivet_7_0_s1 ended while connected to group rivet_7_0_g3 \
             (made without early_term_allowed: every member must disconnect first)"
        );
    }
}
