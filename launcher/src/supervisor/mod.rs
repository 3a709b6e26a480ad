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
//! never blocking the loop; group connects naming other jobs go to its
//! group hub over one link (`group_link.rs`). When a process is reaped the server hears of it
//! (`Server::process_ended`): group connects waiting for it fail or go on,
//! members of its groups get `group_event`s, and a member that ended still
//! connected to a group made without `early_term` fails the job
//! (`Failure::GroupLeft`). The loop ends when every process has been reaped
//! and its output drained; the first failure decides the exit code.

mod failure;
mod names;
mod output;
mod pmi;
mod setup;
mod spawns;
mod teardown;

use std::collections::HashMap;
use std::io::ErrorKind;
use std::process::ExitStatus;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use mio::unix::pipe::Receiver;
use mio::{Events, Poll, Token, Waker};
use rivet_pmi::server::{ConnId, NameRequest, NsId, Server, MAX_STRANGERS};
use rivet_pmi::wire::Message;
use signal_hook::consts::SIGCHLD;
use signal_hook_mio::v1_0::Signals;

use crate::group_link::GroupLink;
use crate::launch::Priority;
use crate::nonblocking::PmiStream;
use crate::outfiles::{Files, OutFiles};
use crate::output::LineBuffer;
use crate::pmix_host::{NameCall, PmixHost};
use crate::spawn::SpawnBase;
use crate::stdout_queue::StdoutQueue;

pub use failure::{signal_name, Failure, Who};

const SIGNALS: Token = Token(0);
const LISTENER: Token = Token(1);
const WAKER: Token = Token(2);
const FIRST_DYNAMIC: usize = 3;

/// How long output is still drained after the last rank exited, in case a
/// grandchild keeps a pipe open.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    Stdout,
    Stderr,
}

enum Source {
    Pmi(ConnId),
    Output { proc: usize, stream: Stream },
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
    /// The link to the name server's group hub (`--nameserver`).
    group_link: Option<GroupLink>,
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
                    self.on_group_link();
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
                    let identified = self.conns.values().filter(|c| c.proc.is_some()).count();
                    let unidentified = self.conns.len() - identified;
                    let cap = MAX_STRANGERS + self.procs.len().saturating_sub(identified);
                    if unidentified >= cap {
                        eprintln!(
                            "rivetrun: {cap} PMI_PORT connections wait unidentified already; \
                             closing another"
                        );
                        continue; // dropped: closed
                    }
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
}
