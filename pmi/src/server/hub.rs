//! The name server's group hub: group connect across separately started
//! jobs (seed 004: `jobA:*` and `jobB:0` in one group), sans I/O.
//!
//! A rivetrun with `--nameserver` keeps one connection (a *link*) to the
//! name server. On it, it registers each of its namespaces
//! (`cmd=group_job nspace=X size=N cluster=C`), relays the group requests
//! of its ranks that name other jobs (`cmd=group_relay nspace=X rank=R
//! lines=1`, then the rank's line), and reports each of its processes that
//! ends (`cmd=group_ended`). The hub is a [`Server`] like a job's own, in
//! hub mode: every registered namespace is one of its namespaces, and every
//! relayed process gets a connection of its own inside it, so matching,
//! the `group_ready` phase, disconnects, `optional`, events and
//! `early_term` are the very code that serves groups inside one job. Its
//! answers and events go back over the owner's link, each behind a
//! `group_relay` header giving the process and the number of lines; a
//! member that ends still connected without `early_term` becomes
//! `cmd=group_lost` to its own job's link. A link that closes ends every
//! process of its namespaces.
//!
//! A link speaks only for the namespaces it registered, and only the three
//! group queries are relayed; anything else is the link's error.

use std::collections::{HashMap, VecDeque};

use crate::group::check_cluster_name;
use crate::server::{ConnId, NsId, Output, Server};
use crate::wire::Message;

/// Most processes one registered namespace may have (bounds the hub's
/// per-namespace tables against a bad link).
pub const MAX_HUB_NAMESPACE: u32 = 1 << 20;

/// Most namespaces the hub keeps for open links.
pub const MAX_HUB_NAMESPACES: usize = 4096;

/// Most namespaces of closed links the hub remembers as ended (a few
/// hundred bytes each: a closed namespace keeps no per-rank table).
pub const MAX_HUB_CLOSED: usize = 4096;

/// The group state shared by every job that uses one name server.
#[derive(Debug)]
pub struct GroupHub {
    server: Server,
    /// The namespaces each link registered.
    links: HashMap<ConnId, Vec<NsId>>,
    /// The link that registered each namespace (gone once it closed).
    owner: HashMap<NsId, ConnId>,
    /// The hub-internal connection of each relayed process, and back.
    conn_of: HashMap<(NsId, u32), ConnId>,
    proc_of: HashMap<ConnId, (NsId, u32)>,
    next_conn: ConnId,
    /// Namespaces of closed links, oldest first. Each stays known as
    /// ended (a connect naming it fails, or skips it with `optional`)
    /// until [`MAX_HUB_CLOSED`] newer ones closed; then it is retired
    /// unless group state still names it.
    closed: VecDeque<NsId>,
}

impl Default for GroupHub {
    fn default() -> Self {
        GroupHub::new()
    }
}

impl GroupHub {
    /// A hub with no job registered.
    pub fn new() -> GroupHub {
        let mut server = Server::new();
        server.groups.hub = true;
        GroupHub {
            server,
            links: HashMap::new(),
            owner: HashMap::new(),
            conn_of: HashMap::new(),
            proc_of: HashMap::new(),
            next_conn: 1,
            closed: VecDeque::new(),
        }
    }

    /// `cmd=group_job` from `link`: the answer.
    pub fn register(
        &mut self,
        link: ConnId,
        nspace: &str,
        size: u32,
        cluster: Option<&str>,
    ) -> Message {
        let refuse = |msg: String| Message::GroupJobResult {
            rc: 1,
            msg: Some(msg),
        };
        if size == 0 || size > MAX_HUB_NAMESPACE {
            return refuse(format!(
                "namespace {nspace} of {size} processes (1 to {MAX_HUB_NAMESPACE})"
            ));
        }
        if self.owner.len() >= MAX_HUB_NAMESPACES {
            return refuse(format!(
                "the name server holds {MAX_HUB_NAMESPACES} jobs' namespaces already"
            ));
        }
        if let Some(c) = cluster {
            if let Err(e) = check_cluster_name(c) {
                return refuse(e.to_string());
            }
        }
        let ns = match self.server.create_group_namespace(nspace, size) {
            Ok(ns) => ns,
            Err(e) => return refuse(e.to_string()),
        };
        if let Some(c) = cluster {
            self.server.groups.ns_cluster.insert(ns, c.to_string());
        }
        self.owner.insert(ns, link);
        self.links.entry(link).or_default().push(ns);
        Message::GroupJobResult { rc: 0, msg: None }
    }

    /// The namespace `nspace` if `link` registered it.
    fn owned(&self, link: ConnId, nspace: &str) -> Result<NsId, String> {
        match self.server.namespace_id(nspace) {
            Some(ns) if self.owner.get(&ns) == Some(&link) => Ok(ns),
            Some(_) => Err(format!(
                "namespace {nspace} was registered by another job's rivetrun"
            )),
            None => Err(format!(
                "namespace {nspace} was never registered (cmd=group_job)"
            )),
        }
    }

    /// The process `nspace:rank` of `link`'s namespaces sent `msg`. `Err`
    /// when the link may not send it (the name server closes the link).
    pub fn relay(
        &mut self,
        link: ConnId,
        nspace: &str,
        rank: u32,
        msg: &Message,
        out: &mut Vec<Output>,
    ) -> Result<(), String> {
        let ns = self.owned(link, nspace)?;
        let size = self.server.namespaces[ns as usize].size;
        if rank >= size {
            return Err(format!(
                "{nspace}:{rank}: the namespace has {size} processes"
            ));
        }
        if !matches!(
            msg,
            Message::GroupConnect { .. }
                | Message::GroupReady { .. }
                | Message::GroupDisconnect { .. }
        ) {
            return Err(format!("cmd={} is not a group request", msg.cmd()));
        }
        let bytes = msg
            .encode()
            .map_err(|e| format!("cmd={} from {nspace}:{rank}: {e}", msg.cmd()))?;
        let conn = match self.conn_of.get(&(ns, rank)) {
            Some(&c) => c,
            None => {
                let c = self.next_conn;
                self.next_conn += 1;
                self.server.attach(c, ns, rank);
                self.conn_of.insert((ns, rank), c);
                self.proc_of.insert(c, (ns, rank));
                c
            }
        };
        let mut inner = Vec::new();
        self.server.receive(conn, &bytes, &mut inner);
        self.translate(inner, out);
        Ok(())
    }

    /// `cmd=group_ended` from `link`.
    pub fn ended(
        &mut self,
        link: ConnId,
        nspace: &str,
        rank: u32,
        out: &mut Vec<Output>,
    ) -> Result<(), String> {
        let ns = self.owned(link, nspace)?;
        let mut inner = Vec::new();
        self.server.process_ended(ns, rank, &mut inner);
        self.translate(inner, out);
        Ok(())
    }

    /// `link` closed: every process of its namespaces has ended (those
    /// already reported are skipped).
    pub fn link_closed(&mut self, link: ConnId, out: &mut Vec<Output>) {
        let Some(namespaces) = self.links.remove(&link) else {
            return;
        };
        let mut inner = Vec::new();
        for &ns in &namespaces {
            self.owner.remove(&ns);
            self.server.namespace_ended(ns, &mut inner);
        }
        // One pass over the processes' connections, not one per rank: a
        // namespace may have 2^20 ranks that never said a word.
        let conns: Vec<ConnId> = self
            .conn_of
            .iter()
            .filter(|((ns, _), _)| namespaces.contains(ns))
            .map(|(_, &c)| c)
            .collect();
        for c in conns {
            if let Some(p) = self.proc_of.remove(&c) {
                self.conn_of.remove(&p);
            }
            self.server.detach(c);
        }
        self.translate(inner, out);
        self.closed.extend(namespaces);
        self.retire_closed();
    }

    /// Retire the oldest closed namespaces beyond [`MAX_HUB_CLOSED`] that
    /// no group state names (group state is bounded, so are the rest).
    fn retire_closed(&mut self) {
        if self.closed.len() <= MAX_HUB_CLOSED {
            return;
        }
        let named = self.server.namespaces_in_group_state();
        let mut excess = self.closed.len() - MAX_HUB_CLOSED;
        let server = &mut self.server;
        self.closed.retain(|&ns| {
            if excess == 0 || named.contains(&ns) {
                return true;
            }
            server.retire_namespace(ns);
            excess -= 1;
            false
        });
    }

    /// Namespaces the hub keeps: of open links, and of closed ones
    /// remembered as ended (for tests and diagnostics).
    pub fn namespaces_kept(&self) -> (usize, usize) {
        (self.owner.len(), self.closed.len())
    }

    /// Namespace slots of the hub's server, retired ones included: what
    /// its memory grows with.
    pub fn namespace_slots(&self) -> usize {
        self.server.namespaces.len()
    }

    /// The inner server's outputs as lines on the owners' links.
    fn translate(&self, inner: Vec<Output>, out: &mut Vec<Output>) {
        for o in inner {
            match o {
                Output::Send { conn, bytes } => self.to_proc(conn, &bytes, out),
                Output::SendAll { conns, bytes } => {
                    for c in conns {
                        self.to_proc(c, &bytes, out);
                    }
                }
                Output::GroupMemberLost { ns, rank, group } => {
                    if let Some(&link) = self.owner.get(&ns) {
                        let lost = Message::GroupLost {
                            nspace: self.server.namespace_name(ns).to_string(),
                            rank,
                            group,
                        };
                        if let Ok(bytes) = lost.encode() {
                            out.push(Output::Send { conn: link, bytes });
                        }
                    }
                }
                // Nothing else follows from the three group queries.
                _ => {}
            }
        }
    }

    /// Lines for the process behind hub connection `conn`, behind a header.
    fn to_proc(&self, conn: ConnId, bytes: &[u8], out: &mut Vec<Output>) {
        let Some(&(ns, rank)) = self.proc_of.get(&conn) else {
            return;
        };
        let Some(&link) = self.owner.get(&ns) else {
            return;
        };
        let lines = bytes.iter().filter(|&&b| b == b'\n').count() as u32;
        let header = Message::GroupRelay {
            nspace: self.server.namespace_name(ns).to_string(),
            rank,
            lines,
        };
        let Ok(mut all) = header.encode() else {
            return;
        };
        all.extend_from_slice(bytes);
        out.push(Output::Send {
            conn: link,
            bytes: all,
        });
    }

    /// Groups the hub keeps (for tests and diagnostics).
    pub fn group_count(&self) -> usize {
        self.server.group_count()
    }
}
