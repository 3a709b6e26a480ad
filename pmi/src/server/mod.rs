//! The PMI-1 server core a launcher embeds: pure state, no I/O.
//!
//! The launcher owns sockets and the event loop. It creates a namespace per
//! job, attaches each rank's connection, hands every byte it reads to
//! [`Server::receive`] and performs the [`Output`]s it gets back (send bytes,
//! close a connection, tear a job down, start a spawn and later report it
//! with [`Server::spawn_done`], and, with [`Server::forward_names`], carry a
//! name request to an outside name server and report the answer with
//! [`Server::name_done`]). It also tells the server when it reaps a process
//! ([`Server::process_ended`]).
//!
//! Behaviour worth knowing:
//! * Every query gets an answer; a well-framed bad line gets the matching
//!   response with a nonzero `rc` (or `cmd=error rc=-1` when the command is
//!   unknown); a stream that is not PMI text yields [`Output::Close`].
//! * Commands sent before `cmd=init` are answered anyway (tolerance; MPICH
//!   always inits first). Commands that need the caller's rank (barrier,
//!   spawn) fail on a `PMI_PORT` connection that has not sent `initack`.
//!   With [`Server::require_port_auth`] (rivetrun always sets it) such a
//!   connection is served nothing but `initack`, which must authenticate
//!   (`auth.rs`); anything else closes it.
//! * A connection has at most one request out with the launcher (a spawn or
//!   a forwarded name request); another one meanwhile is refused, so
//!   answers never overtake each other.
//! * Replies follow Hydra's shapes (see `wire/write.rs`); the server reports
//!   PMI-1.2 and supports 1.2 group barriers.
//! * Rivet's group connect (`group_connect`, `group_ready`,
//!   `group_disconnect`; PMIx RFC0003) spans every namespace of the server.
//!   The launcher reports each reaped process with
//!   [`Server::process_ended`]; members then get `cmd=group_event` lines
//!   unasked, and a member that ends still connected to a group made
//!   without `early_term` yields [`Output::GroupMemberLost`]. Process names
//!   qualified with a cluster are accepted for [`Server::set_cluster`]'s only.
//!
//! Files: `output.rs` (what the launcher is asked to do), `spawn_result.rs`
//! (the answer to a spawn), `auth.rs` (`PMI_PORT` authentication),
//! `kvs.rs` (a namespace), `barrier.rs`, `names.rs` (name service, and the
//! standalone [`NameServer`] core), `mapping.rs` (`PMI_process_mapping`),
//! `groups/` (group connect), `handle.rs` (one function per command),
//! `node.rs` (one node of a multi-host job), `group_forward.rs` (group
//! requests naming other jobs, handed to the launcher) and `hub.rs` (the
//! name server's side of those).

mod auth;
mod barrier;
mod group_forward;
mod groups;
mod handle;
mod hub;
mod kvs;
pub mod mapping;
pub mod names;
mod node;
mod output;
mod resources;
mod spawn_result;
mod v2;

#[cfg(test)]
mod group_tests;
#[cfg(test)]
mod hub_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod v2_tests;

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::wire::{Framer, Message};

pub use handle::SERVER_VERSION;
pub use kvs::{max_entries, MAX_REPLY_VALUE, PROCESS_MAPPING_KEY, RESERVED_PREFIX};
pub use mapping::{parse_process_mapping, process_mapping, process_mapping_within};

pub use auth::{random_bytes, PortAuth, MAX_STRANGERS, PORT_SECRET_ENV};
pub use group_forward::{HUB_GROUP_PREFIX, HUB_OP_BASE};
pub use groups::{MAX_GROUP_STATE, MAX_PENDING_GROUP_OPS};
pub use hub::{GroupHub, MAX_HUB_NAMESPACE, MAX_HUB_NAMESPACES};
use kvs::Namespace;
pub use names::{NameRequest, NameServer, NameService};
use output::reply_to;
pub use output::{Forwarded, Output, SpawnFailure, Spawned};
use spawn_result::shorten_to_fit;

/// Launcher-chosen id of one connection.
pub type ConnId = u64;

/// Id of a namespace within one [`Server`].
pub type NsId = u32;

/// What the launcher knows about a job when it creates its namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceSpec {
    /// kvsname, e.g. "rivet_1234_0" (≤256 bytes, no spaces).
    pub name: String,
    pub size: u32,
    pub appnum: u32,
    /// appnum of each rank when the ranks come from several commands (a
    /// spawn of several commands); empty: every rank has `appnum`.
    pub appnum_of_rank: Vec<u32>,
    pub universe_size: u32,
    /// node index of each rank (len == size); used to build PMI_process_mapping.
    pub node_of_rank: Vec<u32>,
    /// extra keys answered by the server (e.g. PMI_hwloc_xmlfile, topology keys); never stored in the user KVS.
    pub attributes: Vec<(String, String)>,
    /// pre-put pairs visible in the KVS (spawn preput)
    pub preput: Vec<(String, String)>,
}

/// Per-connection state.
#[derive(Debug)]
struct Conn {
    ns: NsId,
    /// Known from `attach`, or learned from `initack`.
    rank: Option<u32>,
    /// Attached by `attach_unidentified` (a `PMI_PORT` connection).
    port: bool,
    framer: Framer,
    /// Processes requested by the spawn awaiting `spawn_done`.
    spawn_pending: Option<u64>,
    /// The name request awaiting `name_done`.
    name_pending: Option<NameRequest>,
    /// Nothing but spaces received yet: PMI-1 or PMI-2 is still open
    /// (`v2.rs`); the spaces are kept here.
    fresh: Option<Vec<u8>>,
    /// Set once the connection speaks PMI-2.
    v2: Option<v2::V2Conn>,
}

/// The server core. See the module docs.
#[derive(Debug, Default)]
pub struct Server {
    namespaces: Vec<Namespace>,
    by_name: HashMap<String, NsId>,
    /// Ids of retired namespaces (`retire_namespace`), reused first.
    free_ids: Vec<NsId>,
    conns: HashMap<ConnId, Conn>,
    names: NameService,
    /// Name requests go to the launcher (`Output::Name`), not to `names`.
    forward_names: bool,
    /// Group connects, groups and processes known to have ended.
    groups: groups::Groups,
    /// This process manager's cluster id (`set_cluster`).
    cluster: Option<String>,
    /// Namespaces whose `PMI_PORT` connections must authenticate.
    port_gates: HashMap<NsId, auth::PortGate>,
    /// PMI-2 node attributes (`info-putnodeattr`).
    node_attrs: v2::NodeAttrs,
    /// Registered resources, once `serve_resources` was called.
    resources: Option<resources::Registry>,
    /// With [`Server::forward_groups`]: group messages for the launcher.
    forwarded: Option<Vec<Forwarded>>,
}

impl Server {
    pub fn new() -> Server {
        Server::default()
    }

    /// Add a job. Fails on a duplicate or invalid name, `node_of_rank` of
    /// the wrong length, or attributes/preput that cannot be sent back in
    /// one line.
    pub fn create_namespace(&mut self, spec: NamespaceSpec) -> Result<NsId, Error> {
        if self.by_name.contains_key(&spec.name) {
            return Err(Error::InvalidNamespace {
                name: spec.name,
                reason: "a namespace with this name already exists".to_string(),
            });
        }
        let ns = Namespace::from_spec(spec)?;
        self.add_namespace(ns)
    }

    /// Add a namespace known only for group connect
    /// ([`Namespace::for_groups`]): the name server's hub.
    pub(crate) fn create_group_namespace(&mut self, name: &str, size: u32) -> Result<NsId, Error> {
        if self.by_name.contains_key(name) {
            return Err(Error::InvalidNamespace {
                name: name.to_string(),
                reason: "a namespace with this name already exists".to_string(),
            });
        }
        self.add_namespace(Namespace::for_groups(name.to_string(), size))
    }

    /// Keep `ns` under a free id (a retired one first).
    fn add_namespace(&mut self, ns: Namespace) -> Result<NsId, Error> {
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.namespaces[id as usize] = ns;
                id
            }
            None => {
                let id =
                    NsId::try_from(self.namespaces.len()).map_err(|_| Error::InvalidNamespace {
                        name: ns.name.clone(),
                        reason: "too many namespaces".to_string(),
                    })?;
                self.namespaces.push(ns);
                id
            }
        };
        self.by_name
            .insert(self.namespaces[id as usize].name.clone(), id);
        Ok(id)
    }

    /// Forget namespace `ns` entirely and let a later namespace reuse its
    /// id. Only for a namespace nothing refers to any more: no connection,
    /// and no group state naming its processes (the hub checks with
    /// [`Server::namespaces_in_group_state`]).
    pub(crate) fn retire_namespace(&mut self, ns: NsId) {
        let Some(slot) = self.namespaces.get_mut(ns as usize) else {
            return;
        };
        if slot.size == 0 {
            return; // Retired already.
        }
        let old = std::mem::replace(slot, Namespace::for_groups(String::new(), 0));
        self.by_name.remove(&old.name);
        self.port_gates.remove(&ns);
        self.groups.forget_namespace(ns);
        self.free_ids.push(ns);
    }

    /// The kvsname of `ns` (`""` for an unknown id).
    pub fn namespace_name(&self, ns: NsId) -> &str {
        self.namespaces
            .get(ns as usize)
            .map_or("", |n| n.name.as_str())
    }

    /// The namespace called `name`.
    pub fn namespace_id(&self, name: &str) -> Option<NsId> {
        self.by_name.get(name).copied()
    }

    /// Set a server-answered attribute. An unknown `ns` is ignored; a value
    /// that cannot be sent in one line is refused (use
    /// [`Server::try_set_attribute`] to see why).
    pub fn set_attribute(&mut self, ns: NsId, key: &str, value: &str) {
        let _ = self.try_set_attribute(ns, key, value);
    }

    /// [`Server::set_attribute`] that reports failure.
    pub fn try_set_attribute(&mut self, ns: NsId, key: &str, value: &str) -> Result<()> {
        match self.namespaces.get_mut(ns as usize) {
            Some(n) => n.set_attribute(key, value),
            None => Err(Error::InvalidNamespace {
                name: format!("#{ns}"),
                reason: "no such namespace".to_string(),
            }),
        }
    }

    /// PMI_FD mode: the connection's rank is known when it is created.
    ///
    /// Re-attaching a known connection starts it afresh. A rank outside the
    /// namespace leaves the connection without a rank.
    pub fn attach(&mut self, conn: ConnId, ns: NsId, rank: u32) {
        self.detach(conn);
        let mut rank_known = None;
        if let Some(n) = self.namespaces.get_mut(ns as usize) {
            if n.set_conn(rank, conn) {
                rank_known = Some(rank);
            }
        }
        self.conns.insert(conn, Conn::new(ns, rank_known));
    }

    /// PMI_PORT mode: the rank is learned from `cmd=initack pmiid=N` (the launcher's PMI_ID; use rank = pmiid within ns).
    pub fn attach_unidentified(&mut self, conn: ConnId, ns: NsId) {
        self.detach(conn);
        let mut c = Conn::new(ns, None);
        c.port = true;
        self.conns.insert(conn, c);
    }

    /// `PMI_PORT` connections to `ns` must authenticate (`auth.rs`):
    /// before an `initack` with an id of `auth` (unused so far) and, if it
    /// carries one, the right secret, any line closes the connection.
    pub fn require_port_auth(&mut self, ns: NsId, auth: PortAuth) {
        self.port_gates.insert(ns, auth::PortGate::new(auth));
    }

    /// A `PMI_PORT` connection that has yet to authenticate.
    fn unauthenticated(&self, conn: ConnId) -> bool {
        self.conns
            .get(&conn)
            .is_some_and(|c| c.port && c.rank.is_none() && self.port_gates.contains_key(&c.ns))
    }

    /// Refuse connection `conn`: forget it, and have the launcher close it.
    fn refuse(&mut self, conn: ConnId, reason: String, out: &mut Vec<Output>) {
        self.detach(conn);
        out.push(Output::Close { conn, reason });
    }

    /// Bytes read from a connection; any split points. A connection speaks
    /// PMI-1 or, from its first bytes or `cmd=init pmi_version=2` on, PMI-2.
    pub fn receive(&mut self, conn: ConnId, bytes: &[u8], out: &mut Vec<Output>) {
        let start = out.len();
        let Some(c) = self.conns.get_mut(&conn) else {
            out.push(Output::Close {
                conn,
                reason: "PMI bytes from a connection that was never attached".to_string(),
            });
            return;
        };
        let joined: Vec<u8>;
        let bytes = match c.fresh.take() {
            Some(mut head) => {
                head.extend_from_slice(bytes);
                match v2::looks_like_v2(&head) {
                    None => {
                        c.fresh = Some(head);
                        return;
                    }
                    Some(is_v2) => {
                        if is_v2 {
                            c.v2 = Some(v2::V2Conn::default());
                        }
                        joined = head;
                        &joined[..]
                    }
                }
            }
            None => bytes,
        };
        if c.v2.is_some() {
            self.receive_v2(conn, bytes, out);
        } else {
            let mut frames = Vec::new();
            let fed = c.framer.feed(bytes, &mut frames);
            for frame in frames {
                self.handle_frame(conn, frame, out);
            }
            if let (Err(e), true) = (fed, self.conns.contains_key(&conn)) {
                out.push(Output::Close {
                    conn,
                    reason: e.to_string(),
                });
            }
        }
        self.translate_v2(start, out);
    }

    /// The connection closed (EOF or error). Forget it; a pending barrier stays pending.
    pub fn detach(&mut self, conn: ConnId) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        if let Some(n) = self.namespaces.get_mut(c.ns as usize) {
            if let Some(r) = c.rank {
                n.clear_conn(r, conn);
            }
            n.barriers.forget_conn(conn);
        }
        self.groups.forget_conn(conn);
    }

    /// Send name requests (`publish_name`, `lookup_name`, `unpublish_name`)
    /// to the launcher as [`Output::Name`] instead of answering them from
    /// this server's own table (a job that uses an outside name server).
    pub fn forward_names(&mut self, on: bool) {
        self.forward_names = on;
    }

    /// Leave group messages of every namespace to the launcher
    /// ([`Server::take_forwarded`]) instead of serving them here: one node
    /// of a multi-host job does not see every member.
    pub fn forward_groups(&mut self) {
        self.forwarded.get_or_insert_with(Vec::new);
    }

    /// The group messages left since the last call (see [`Forwarded`]).
    pub fn take_forwarded(&mut self) -> Vec<Forwarded> {
        self.forwarded
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Answer a forwarded name request: `Ok(reply)` is the name server's
    /// answer, passed on if it answers the request (else the rank gets
    /// `rc=-1`); `Err(message)` → `rc=1 msg=message` (the name server could
    /// not be asked). A connection without a pending name request is ignored.
    pub fn name_done(
        &mut self,
        conn: ConnId,
        result: Result<Message, String>,
        out: &mut Vec<Output>,
    ) {
        let Some(request) = self
            .conns
            .get_mut(&conn)
            .and_then(|c| c.name_pending.take())
        else {
            return;
        };
        let query = Some(request.query());
        let reply = match result {
            Ok(reply) if request.accepts(&reply) => reply,
            Ok(_) => Message::error_reply(query, -1, "name_server_sent_an_unexpected_answer"),
            Err(message) => Message::error_reply(query, 1, message),
        };
        let start = out.len();
        reply_to(out, conn, &reply);
        self.translate_v2(start, out);
    }

    /// Answer `request` from rank `rank` of `ns` from this server's name
    /// table, for a request that did not come over PMI-1 (rivetrun's PMIx
    /// server): the same table, and the same rule that only the publisher
    /// may unpublish.
    pub fn answer_name(&mut self, ns: NsId, rank: u32, request: &NameRequest) -> Message {
        self.names.answer_for(request, Some(&caller_id(ns, rank)))
    }

    /// The `(namespace, rank)` that published `service` in this server's
    /// table, if a known process did.
    pub fn name_publisher(&self, service: &str) -> Option<(String, u32)> {
        let (ns, rank) = self.names.publisher(service)?.split_once(':')?;
        let ns = self.namespaces.get(ns.parse::<usize>().ok()?)?;
        Some((ns.name.clone(), rank.parse().ok()?))
    }

    /// Remove every name rank `rank` of `ns` published; how many.
    pub fn unpublish_names_of(&mut self, ns: NsId, rank: u32) -> usize {
        self.names.unpublish_all_by(&caller_id(ns, rank))
    }

    pub fn is_finalized(&self, ns: NsId, rank: u32) -> bool {
        self.namespaces
            .get(ns as usize)
            .is_some_and(|n| n.is_finalized(rank))
    }

    /// The `(namespace, rank)` a connection speaks for, once known.
    pub fn conn_rank(&self, conn: ConnId) -> Option<(NsId, u32)> {
        self.conns
            .get(&conn)
            .and_then(|c| c.rank.map(|r| (c.ns, r)))
    }
}

impl Conn {
    fn new(ns: NsId, rank: Option<u32>) -> Conn {
        Conn {
            ns,
            rank,
            port: false,
            framer: Framer::new(),
            spawn_pending: None,
            name_pending: None,
            fresh: Some(Vec::new()),
            v2: None,
        }
    }
}

/// How the name table records a process as publisher.
fn caller_id(ns: NsId, rank: u32) -> String {
    format!("{ns}:{rank}")
}
