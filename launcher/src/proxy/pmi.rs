//! The proxy's PMI service: one thread with a poll loop over its node's
//! ranks' `PMI_FD` connections, serving them with the same PMI server core
//! as single-host rivetrun (`rivet_pmi::server`, PMI-1 and PMI-2 alike),
//! its namespace served as one node of the job (`Server::delegate_barriers`):
//! answers that need nobody else at once, puts kept in the node's KVS,
//! a job-wide barrier sent upstream once, when the node's last rank and
//! every child proxy (`tree`) have arrived, with the subtree's puts (or
//! failed, with rivetrun told, when a child proxy it needs has ended).
//! `barrier_out` from upstream brings the job's puts; it is passed on to
//! the children, and the node's waiters are answered. What one node cannot
//! serve goes to rivetrun on the control connection: name requests (`name`,
//! answered by `name_done`) and group messages (`pmi`, whose answers come
//! back as `pmi_out`; see `remote::jobwide`). Spawn requests go to the
//! proxy's main thread (`super::spawn`), which starts the children here.
//! The node's PMIx server's upcalls wake this loop too; their fences ride
//! the same tree barrier (`super::pmix`).

use std::collections::HashMap;
use std::io::{self, ErrorKind, Read};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use mio::net::UnixStream;
use mio::{Events, Poll, Token, Waker};
use rivet_pmi::server::{ConnId, NamespaceSpec, NsId, Output, Server, SpawnFailure};
use rivet_pmi::wire::{Message, SpawnRequest};

use super::tree::Tree;
use super::upstream::Upstream;
use crate::nonblocking::{interest, write_unsent};
use crate::remote::wire;

const WAKER: Token = Token(0);

/// What a rank did over PMI, read when it exits: one that spoke PMI and
/// exits 0 without finalizing fails the job (others may wait for it).
#[derive(Default)]
pub struct Said {
    pub spoke: AtomicBool,
    pub finalized: AtomicBool,
}

/// What other threads tell the PMI loop.
pub enum Cmd {
    /// A rank started: serve its PMI connection.
    Rank {
        rank: u32,
        conn: StdUnixStream,
        said: Arc<Said>,
    },
    /// A rank ended: free what it registered and did not release (seed
    /// 002, as single-host rivetrun does), then say so on `done`.
    Ended {
        rank: u32,
        who: String,
        done: mpsc::Sender<()>,
    },
    /// Upstream's `barrier_out`: the job's puts since the last barrier.
    BarrierOut(Vec<(String, String)>),
    /// A child proxy's `barrier` (its subtree's puts).
    ChildBarrier(u32, Vec<(String, String)>),
    /// A child proxy's connection ended.
    ChildGone(u32),
    /// The connection to the parent proxy is up (its writing half).
    Parent(Upstream),
    /// A child proxy connected (the writing half of its connection).
    Child(u32, Upstream),
    /// The way upstream is gone: barriers fail.
    Lost,
    /// The parent proxy's connection ended (see `Tree::orphaned`).
    ParentGone,
    /// A namespace for children this proxy spawns (before their `Child`).
    Namespace(NamespaceSpec),
    /// A spawned process started: serve its PMI connection as `index` of `kvs`.
    Spawned {
        kvs: String,
        index: u32,
        id: ConnId,
        conn: StdUnixStream,
        said: Arc<Said>,
    },
    /// The answer to a spawn request from connection `ConnId`.
    SpawnDone(ConnId, Result<Vec<i32>, SpawnFailure>),
    /// rivetrun's answer to a name request.
    NameDone(ConnId, Result<Message, String>),
    /// Bytes rivetrun's job-wide server sends a connection (`pmi_out`).
    Out(ConnId, Vec<u8>),
    /// rivetrun's word on a PMIx direct modex.
    Pmix(super::pmix::Msg),
}

/// A rank's spawn request, for the proxy's main thread.
pub struct SpawnAsk {
    pub conn: ConnId,
    /// The namespace and rank of the process that asked.
    pub kvs: String,
    pub rank: u32,
    pub request: SpawnRequest,
}

/// How other threads reach the PMI loop.
#[derive(Clone)]
pub struct Handle {
    tx: mpsc::Sender<Cmd>,
    waker: Arc<Waker>,
}

impl Handle {
    pub fn send(&self, cmd: Cmd) {
        if self.tx.send(cmd).is_ok() {
            let _ = self.waker.wake();
        }
    }

    /// What wakes the loop (the PMIx server's upcalls use it too).
    pub fn waker(&self) -> Arc<Waker> {
        self.waker.clone()
    }
}

struct Conn {
    stream: UnixStream,
    rank: u32,
    unsent: Vec<u8>,
    said: Arc<Said>,
}

struct Loop {
    poll: Poll,
    server: Server,
    ns: NsId,
    conns: HashMap<ConnId, Conn>,
    /// rivetrun: aborts, and barriers when the tree has no parent for us.
    rivetrun: Upstream,
    tree: Tree,
    lost: bool,
    /// Where spawn requests go (the proxy's main thread).
    spawns: mpsc::Sender<super::Event>,
    /// The node's PMIx fences and direct modexes.
    pmix: super::pmix::State,
}

/// Start the PMI loop for namespace `ns` of `server`.
pub fn start(
    server: Server,
    ns: NsId,
    rivetrun: Upstream,
    tree: Tree,
    spawns: mpsc::Sender<super::Event>,
    pmix: super::pmix::State,
) -> io::Result<Handle> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let (tx, rx) = mpsc::channel();
    let mut l = Loop {
        poll,
        server,
        ns,
        conns: HashMap::new(),
        rivetrun,
        tree,
        lost: false,
        spawns,
        pmix,
    };
    std::thread::Builder::new()
        .name("proxy-pmi".into())
        .spawn(move || l.run(rx))?;
    Ok(Handle { tx, waker })
}

impl Loop {
    fn run(&mut self, rx: mpsc::Receiver<Cmd>) {
        let mut events = Events::with_capacity(256);
        loop {
            if let Err(e) = self.poll.poll(&mut events, None) {
                if e.kind() == ErrorKind::Interrupted {
                    continue;
                }
                eprintln!("rivetrun: proxy: poll: {e}");
                return;
            }
            for ev in events.iter() {
                let token = ev.token();
                if token == WAKER {
                    continue;
                }
                let conn = token.0 as ConnId;
                if ev.is_writable() {
                    self.flush(conn);
                }
                if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                    self.read(conn);
                }
            }
            loop {
                match rx.try_recv() {
                    Ok(cmd) => self.on_cmd(cmd),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => return,
                }
            }
            self.pmix_events();
        }
    }

    /// Serve what the node's PMIx server's upcalls queued.
    fn pmix_events(&mut self) {
        for ev in crate::pmix_host::take_queued() {
            if let super::pmix::Step::Barrier(puts) = self.pmix.event(ev, &self.rivetrun) {
                let mut out = Vec::new();
                self.tree.node_in(puts);
                self.try_send_up(&mut out);
                self.apply(out);
            }
        }
    }

    /// No barrier can complete: PMI waiters get `why`, PMIx fences fail.
    fn barriers_failed(&mut self, why: &str, out: &mut Vec<Output>) {
        self.server.barriers_failed(self.ns, why, out);
        self.pmix.fail_fences();
    }

    fn on_cmd(&mut self, cmd: Cmd) {
        let mut out = Vec::new();
        match cmd {
            Cmd::Rank { rank, conn, said } => {
                self.add_conn(ConnId::from(rank) + 1, self.ns, rank, conn, said);
            }
            Cmd::Ended { rank, who, done } => {
                // Its last PMI words (a registration) may still be unread.
                self.read(ConnId::from(rank) + 1);
                let left = self.server.take_resources(self.ns, rank);
                crate::resources::free_left(&who, left);
                let _ = done.send(());
            }
            Cmd::Spawned {
                kvs,
                index,
                id,
                conn,
                said,
            } => {
                if let Some(ns) = self.server.namespace_id(&kvs) {
                    self.add_conn(id, ns, index, conn, said);
                }
            }
            Cmd::Namespace(spec) => {
                let name = spec.name.clone();
                if let Err(e) = self.server.create_namespace(spec) {
                    eprintln!("rivetrun: proxy: namespace {name}: {e}");
                }
            }
            Cmd::SpawnDone(conn, result) => self.server.spawn_done(conn, result, &mut out),
            Cmd::NameDone(conn, result) => self.server.name_done(conn, result, &mut out),
            Cmd::Out(conn, bytes) => self.queue(conn, &bytes),
            Cmd::Pmix(msg) => self.pmix.message(msg, &self.rivetrun),
            Cmd::BarrierOut(puts) => {
                self.tree.barrier_out(&puts);
                if self.pmix.in_tree() {
                    // A PMIx fence's barrier: its blobs are the library's.
                    if let super::pmix::Step::Barrier(next) = self.pmix.barrier_out(&puts) {
                        self.tree.node_in(next);
                        self.try_send_up(&mut out);
                    }
                } else {
                    self.server.barrier_done(self.ns, puts, &mut out);
                }
            }
            Cmd::ChildBarrier(child, puts) => {
                self.tree.child_in(child, puts);
                self.try_send_up(&mut out);
            }
            Cmd::ChildGone(child) => {
                self.tree.child_gone(child);
                self.try_send_up(&mut out);
            }
            Cmd::Parent(up) => {
                if let Some(words) = self.tree.held.take() {
                    if up.send(&words).is_err() {
                        self.barriers_failed("parent_proxy_connection_lost", &mut out);
                    }
                }
                self.tree.parent = Some(up);
            }
            Cmd::Child(id, up) => self.tree.add_child(id, up),
            Cmd::ParentGone => {
                self.tree.parent = None;
                self.tree.orphaned = true;
                if self.tree.in_flight || self.tree.held.is_some() {
                    self.orphaned(&mut out);
                }
            }
            Cmd::Lost => {
                self.lost = true;
                self.barriers_failed("launcher_connection_lost", &mut out);
                self.pmix.lost();
            }
        }
        self.apply(out);
    }

    fn add_conn(&mut self, id: ConnId, ns: NsId, rank: u32, conn: StdUnixStream, said: Arc<Said>) {
        if conn.set_nonblocking(true).is_err() {
            return;
        }
        let mut stream = UnixStream::from_std(conn);
        if self
            .poll
            .registry()
            .register(&mut stream, Token(id as usize), interest(false))
            .is_err()
        {
            return;
        }
        self.server.attach(id, ns, rank);
        self.conns.insert(
            id,
            Conn {
                stream,
                rank,
                unsent: Vec::new(),
                said,
            },
        );
    }

    /// Hand group messages the server left to rivetrun (`pmi KVS RANK CONN LINE`).
    fn forward_groups(&mut self) {
        for f in self.server.take_forwarded() {
            let kvs = self.server.namespace_name(f.ns).to_string();
            let sent = f.msg.encode().map_err(|e| e.to_string()).and_then(|line| {
                self.rivetrun
                    .send(&[
                        b"pmi".to_vec(),
                        kvs.into_bytes(),
                        f.rank.to_string().into_bytes(),
                        f.conn.to_string().into_bytes(),
                        line,
                    ])
                    .map_err(|e| e.to_string())
            });
            if let Err(why) = sent {
                let reply = Message::error_reply(Some(f.msg.cmd()), -1, "launcher_connection_lost");
                eprintln!("rivetrun: proxy: cannot forward {}: {why}", f.msg.cmd());
                if let Ok(bytes) = reply.encode() {
                    self.queue(f.conn, &bytes);
                }
            }
        }
    }

    /// A barrier needs the parent proxy, which has ended: rivetrun fails
    /// the job naming the parent's host (told before the waiters fail, so
    /// their ranks' exits do not come first), the waiters get an error.
    fn orphaned(&mut self, out: &mut Vec<Output>) {
        let _ = self.rivetrun.send(&["orphaned"]);
        self.tree.held = None;
        self.tree.in_flight = false;
        self.barriers_failed("parent_proxy_ended", out);
    }

    /// A barrier under way needs a child proxy that ended: rivetrun fails
    /// the job naming the child's host (told first, as for `orphaned`),
    /// the waiters get an error.
    fn stranded(&mut self, child: u32, out: &mut Vec<Output>) {
        let _ = self.rivetrun.send(&["stranded", &child.to_string()]);
        self.tree.abandon();
        self.barriers_failed("child_proxy_ended", out);
    }

    /// Send the subtree's barrier upstream once it is complete.
    fn try_send_up(&mut self, out: &mut Vec<Output>) {
        if let Some(child) = self.tree.stranded() {
            return self.stranded(child, out);
        }
        let Some(puts) = self.tree.ready() else {
            return;
        };
        if self.tree.orphaned {
            return self.orphaned(out);
        }
        let words = wire::with_pairs("barrier", puts);
        self.tree.in_flight = self.tree.has_parent;
        let sent = match &self.tree.parent {
            Some(p) => p.send(&words),
            None if self.tree.has_parent => {
                self.tree.held = Some(words);
                return;
            }
            None => self.rivetrun.send(&words),
        };
        if sent.is_err() || self.lost {
            self.barriers_failed("launcher_connection_lost", out);
        }
    }

    fn read(&mut self, conn: ConnId) {
        let mut buf = [0u8; 16384];
        let mut out = Vec::new();
        let mut closed = false;
        {
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            loop {
                match c.stream.read(&mut buf) {
                    Ok(0) => {
                        closed = true;
                        break;
                    }
                    Ok(n) => {
                        c.said.spoke.store(true, Ordering::Relaxed);
                        self.server.receive(conn, &buf[..n], &mut out);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => {
                        closed = true;
                        break;
                    }
                }
            }
        }
        self.apply(out);
        self.forward_groups();
        if closed {
            self.drop_conn(conn);
        }
    }

    fn drop_conn(&mut self, conn: ConnId) {
        if let Some(mut c) = self.conns.remove(&conn) {
            let _ = self.poll.registry().deregister(&mut c.stream);
        }
        self.server.detach(conn);
    }

    fn flush(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if write_unsent(&mut c.stream, &mut c.unsent).is_err() {
            return self.drop_conn(conn);
        }
        let wants = !c.unsent.is_empty();
        let _ =
            self.poll
                .registry()
                .reregister(&mut c.stream, Token(conn as usize), interest(wants));
    }

    fn queue(&mut self, conn: ConnId, bytes: &[u8]) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.unsent.extend_from_slice(bytes);
            self.flush(conn);
        }
    }

    fn apply(&mut self, outputs: Vec<Output>) {
        // Marked before the answer goes out: the rank exits only after it.
        for o in &outputs {
            if let Output::Finalized { rank, .. } = o {
                if let Some(c) = self.conns.get(&(ConnId::from(*rank) + 1)) {
                    c.said.finalized.store(true, Ordering::Relaxed);
                }
            }
        }
        for o in outputs {
            match o {
                Output::Send { conn, bytes } => self.queue(conn, &bytes),
                Output::SendAll { conns, bytes } => {
                    for conn in conns {
                        self.queue(conn, &bytes);
                    }
                }
                Output::Close { conn, reason } => {
                    if let Some(c) = self.conns.get(&conn) {
                        eprintln!(
                            "rivetrun: proxy: closing the PMI connection of rank {}: {reason}",
                            c.rank
                        );
                    }
                    self.drop_conn(conn);
                }
                Output::Abort {
                    rank,
                    exit_code,
                    message,
                    ..
                } => {
                    let rank = rank.map_or("?".to_string(), |r| r.to_string());
                    let _ = self.rivetrun.send(&[
                        b"abort".to_vec(),
                        rank.into_bytes(),
                        exit_code.to_string().into_bytes(),
                        message.unwrap_or_default().into_bytes(),
                    ]);
                }
                Output::Finalized { .. } => {}
                Output::Barrier { puts, .. } => {
                    self.tree.node_in(puts);
                    let mut more = Vec::new();
                    self.try_send_up(&mut more);
                    self.apply(more);
                }
                Output::Spawn {
                    conn,
                    ns,
                    rank,
                    request,
                } => {
                    let ask = SpawnAsk {
                        conn,
                        kvs: self.server.namespace_name(ns).to_string(),
                        rank,
                        request,
                    };
                    if self.spawns.send(super::Event::Spawn(ask)).is_err() {
                        let mut more = Vec::new();
                        let why = "the proxy is ending".to_string();
                        self.server.spawn_done(conn, Err(why.into()), &mut more);
                        self.apply(more);
                    }
                }
                Output::Name {
                    conn,
                    ns,
                    rank,
                    request,
                } => {
                    let line = request.to_message().encode();
                    let sent = match (rank, line) {
                        (Some(rank), Ok(line)) => self.rivetrun.send(&[
                            b"name".to_vec(),
                            self.server.namespace_name(ns).as_bytes().to_vec(),
                            rank.to_string().into_bytes(),
                            conn.to_string().into_bytes(),
                            line,
                        ]),
                        _ => Err(io::Error::other("initack_required_before_names")),
                    };
                    if let Err(e) = sent {
                        let mut more = Vec::new();
                        self.server.name_done(conn, Err(e.to_string()), &mut more);
                        self.apply(more);
                    }
                }
                // Groups are served by rivetrun (`forward_groups`); a node's
                // server never forwards to other jobs' hub.
                Output::GroupMemberLost { .. } | Output::GroupForward { .. } => {}
            }
        }
    }
}

#[cfg(test)]
#[path = "pmi_tests.rs"]
mod tests;
