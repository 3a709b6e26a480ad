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
//! The node's PMIx server's upcalls wake this loop too; their whole-job
//! fences ride the same tree barrier (`super::pmix`), fences over some
//! ranks and groups go to rivetrun (`super::pmix_subset`). With `--pmi-port` the ranks
//! connect to a TCP port of the proxy's instead (`port.rs`: who is admitted,
//! and when the port closes); admitted, they are served alike.
//!
//! `handle.rs` is what other threads send the loop.
//!
//! Connection ids: rank R's `PMI_FD` is R + 1, port connections count from
//! 2^30 (`port.rs`), spawned processes' from 2^31 (`super::spawn`).

use std::collections::HashMap;
use std::io::{self, ErrorKind, Read};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};

use mio::net::UnixStream;
use mio::{Events, Poll, Token, Waker};

use rivet_pmi::server::{ConnId, NsId, Output, Server};
use rivet_pmi::wire::Message;

mod handle;
mod port;
pub use handle::{Asker, Cmd, Handle, Said, SpawnAsk};
pub use port::open as open_port;

use super::tree::Tree;
use super::upstream::Upstream;
use crate::nonblocking::{interest, write_unsent, PmiStream};
use crate::remote::commands as cmd;
use crate::remote::wire;

const WAKER: Token = Token(0);

struct Conn {
    stream: PmiStream,
    /// None: a port connection not yet admitted.
    rank: Option<u32>,
    unsent: Vec<u8>,
    said: Option<Arc<Said>>,
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
    /// `--pmi-port`: the port and the ranks admitted on it.
    port: Option<port::Port>,
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
        port: None,
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
            // Woken in time to fail a collective that waited too long for
            // a spawn's news, or a fence whose PMIX_TIMEOUT passed.
            let timeout = (self.pmix.next_deadline())
                .map(|t| t.saturating_duration_since(std::time::Instant::now()));
            if let Err(e) = self.poll.poll(&mut events, timeout) {
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
                if token == port::LISTENER {
                    self.accept();
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
            self.pmix.expire(std::time::Instant::now(), &self.rivetrun);
        }
    }

    /// Serve what the node's PMIx server's upcalls queued.
    fn pmix_events(&mut self) {
        for ev in crate::pmix_host::take_queued() {
            match self.pmix.event(ev, &self.rivetrun) {
                super::pmix::Step::Nothing => {}
                super::pmix::Step::Barrier(puts) => {
                    let mut out = Vec::new();
                    self.tree.node_in(puts);
                    self.try_send_up(&mut out);
                    self.apply(out);
                }
                // Started by the main thread, as a PMI-1 spawn is.
                super::pmix::Step::Spawn(call) => {
                    let ask = SpawnAsk {
                        kvs: call.nspace.clone(),
                        rank: call.rank,
                        request: call.request.clone(),
                        asker: Asker::Pmix(call),
                    };
                    if let Err(mpsc::SendError(super::Event::Spawn(ask))) =
                        self.spawns.send(super::Event::Spawn(ask))
                    {
                        if let Asker::Pmix(call) = ask.asker {
                            call.finish(Err(rivet_pmi::pmix_ffi::PMIX_ERR_UNREACH));
                        }
                    }
                }
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
                self.read(self.conn_of(rank));
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
                // Spawned here: wholly on this node, for PMIx fences too.
                self.pmix.spawned_here(&name, &self.rivetrun);
                if let Err(e) = self.server.create_namespace(spec) {
                    eprintln!("rivetrun: proxy: namespace {name}: {e}");
                }
            }
            Cmd::SpawnDone(conn, result) => self.server.spawn_done(conn, result, &mut out),
            Cmd::NameDone(conn, result) => self.server.name_done(conn, result, &mut out),
            Cmd::Out(conn, bytes) => self.queue(conn, &bytes),
            Cmd::Pmix(msg) => self.pmix.message(msg, &self.rivetrun),
            Cmd::Port {
                opened,
                saids,
                host,
            } => {
                // The gate first: nothing is accepted before it stands.
                self.server.require_port_auth(self.ns, opened.auth);
                match port::Port::new(opened.listener, saids, host) {
                    Ok(p) => self.open_port(p),
                    Err(e) => eprintln!("rivetrun: proxy: the PMI port: {e}"),
                }
            }
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
                self.close_port();
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
        let mut stream = PmiStream::Unix(UnixStream::from_std(conn));
        if self
            .poll
            .registry()
            .register(stream.source(), Token(id as usize), interest(false))
            .is_err()
        {
            return;
        }
        self.server.attach(id, ns, rank);
        self.conns.insert(
            id,
            Conn {
                stream,
                rank: Some(rank),
                unsent: Vec::new(),
                said: Some(said),
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
                        cmd::PMI.as_bytes().to_vec(),
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
        let _ = self.rivetrun.send(&[cmd::ORPHANED]);
        self.tree.held = None;
        self.tree.in_flight = false;
        self.barriers_failed("parent_proxy_ended", out);
    }

    /// A barrier under way needs a child proxy that ended: rivetrun fails
    /// the job naming the child's host (told first, as for `orphaned`),
    /// the waiters get an error.
    fn stranded(&mut self, child: u32, out: &mut Vec<Output>) {
        let _ = self.rivetrun.send(&[cmd::STRANDED, &child.to_string()]);
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
        let words = wire::with_pairs(cmd::BARRIER, puts);
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
                        if let Some(said) = &c.said {
                            said.spoke.store(true, Ordering::Relaxed);
                        }
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
        // Known before the answer goes out (the rank may exit right after).
        self.identify(conn);
        self.apply(out);
        self.forward_groups();
        if closed {
            self.drop_conn(conn);
        }
    }

    fn drop_conn(&mut self, conn: ConnId) {
        if let Some(mut c) = self.conns.remove(&conn) {
            let _ = self.poll.registry().deregister(c.stream.source());
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
        let _ = self.poll.registry().reregister(
            c.stream.source(),
            Token(conn as usize),
            interest(wants),
        );
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
            if let Output::Finalized { ns, rank } = o {
                let c = (*ns == self.ns).then(|| self.conns.get(&self.conn_of(*rank)));
                if let Some(said) = c.flatten().and_then(|c| c.said.as_ref()) {
                    said.finalized.store(true, Ordering::Relaxed);
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
                    match self.conns.get(&conn).map(|c| c.rank) {
                        Some(Some(rank)) => eprintln!(
                            "rivetrun: proxy: closing the PMI connection of rank {rank}: {reason}"
                        ),
                        Some(None) => {
                            eprintln!("rivetrun: proxy on {}: {reason}", self.port_host())
                        }
                        None => {}
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
                        cmd::ABORT.as_bytes().to_vec(),
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
                        asker: Asker::Pmi(conn),
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
                            cmd::NAME.as_bytes().to_vec(),
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
mod tests;
