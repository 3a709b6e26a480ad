//! Building the supervisor before the loop runs: polling and signals, the
//! ranks and PMI connections it watches, and the options main sets
//! (spawning, the name server, PMIx, output files, time limit).

use std::collections::HashMap;
use std::io;
use std::process::ChildStdin;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, UnixStream};
use mio::unix::pipe::Receiver;
use mio::{Interest, Poll, Token, Waker};
use rivet_pmi::server::{ConnId, NsId, PortAuth, Server};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;

use super::{
    Failure, NameClient, Phase, PmiConn, Proc, Source, Spawner, Stream, Supervisor, Who,
    FIRST_DYNAMIC, LISTENER, SIGNALS, WAKER,
};
use crate::group_link::GroupLink;
use crate::launch::{Priority, Started};
use crate::nonblocking::PmiStream;
use crate::outfiles::OutFiles;
use crate::output::LineBuffer;
use crate::pmix_host::PmixHost;
use crate::spawn::SpawnBase;
use crate::stdout_queue::StdoutQueue;

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
            group_link: None,
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

    pub(super) fn token(&mut self) -> Token {
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
    pub(super) fn add_proc(
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
    /// It carries group connects that name other jobs too (`group_link.rs`).
    pub fn use_name_server(&mut self, addr: String) -> io::Result<()> {
        let waker = Arc::clone(&self.waker);
        self.group_link = GroupLink::open(&mut self.server, self.ns, &addr, Arc::clone(&waker));
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

    pub(super) fn add_conn(
        &mut self,
        mut stream: PmiStream,
        proc: Option<usize>,
    ) -> io::Result<ConnId> {
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
}
