//! The client side of Rivet's group connect (PMIx RFC0003's
//! connect/disconnect over PMI-1 lines; served by rivetrun only). Under a
//! PMIx server the same calls go to PMIx groups (`pmix_groups.rs`).
//!
//! A process manager that does not know the commands (Hydra answers
//! `cmd=error`) gives [`Error::GroupUnsupported`]; a refusal or failure
//! (`rc≠0`) gives [`Error::GroupFailed`] with the server's reason. Events
//! (`cmd=group_event`) may arrive at any time after a successful connect;
//! every blocking call puts them aside and [`Client::poll_events`] returns
//! them.
//!
//! A singleton may connect to itself alone (its own namespace, rank 0 or
//! `*`): that succeeds at once with one member, so code written for groups
//! runs unchanged as one process. Any other process needs a process
//! manager ([`Error::NoProcessManager`]).

use std::collections::HashSet;

use crate::client::conn::{describe, Conn};
use crate::client::{Client, Mode};
use crate::error::{Error, Result};
use crate::group::{GroupEvent, GroupFlags, ProcName};
use crate::wire::Message;

/// What one process asks for in a group connect. Every participant must
/// name the same set of processes (any spelling, any order), the same `id`
/// and the same flags.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupConnectRequest {
    /// The participants, the caller included; `rank: None` is every rank of
    /// the namespace.
    pub procs: Vec<ProcName>,
    /// Tells apart concurrent connects over the same processes.
    pub id: Option<String>,
    /// Processes that end without joining do not fail the connect.
    pub optional: bool,
    /// Exchange cards only: no group id, no new rank, nothing to disconnect.
    pub xchg_only: bool,
    /// Members may end without disconnecting (else rivetrun fails the job).
    pub early_term: bool,
    /// Members hear of every disconnect (`GroupEventKind::Disconnected`).
    pub notify_each: bool,
    /// This process's proposal for the group's context id; the largest wins.
    pub context: u32,
    /// This process's business card, handed to every member (`""`: none).
    pub card: String,
}

/// One member of a new group, in new-rank order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    /// Its namespace and rank there (rank always `Some`).
    pub proc: ProcName,
    /// Size of its namespace.
    pub pg_size: u32,
    /// Its business card (`""` when it gave none).
    pub card: String,
}

/// A completed group connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConnectReply {
    /// The new group's id (`None` with `xchg_only`).
    pub group: Option<String>,
    /// This process's rank in the group (`None` with `xchg_only`).
    pub rank: Option<u32>,
    /// The agreed context id: the largest proposal.
    pub context: u32,
    /// The operation number to pass to [`Client::group_ready`].
    pub op: u64,
    pub members: Vec<GroupMember>,
}

/// What a singleton keeps of its connects to itself.
#[derive(Debug, Default)]
pub(crate) struct LocalGroups {
    last_op: u64,
    ready: HashSet<u64>,
    groups: HashSet<String>,
}

impl LocalGroups {
    fn connect(&mut self, kvs: &str, req: &GroupConnectRequest) -> Result<GroupConnectReply> {
        let only_me = req
            .procs
            .iter()
            .all(|p| p.cluster.is_none() && p.nspace == kvs && matches!(p.rank, None | Some(0)));
        if !only_me {
            return Err(Error::NoProcessManager {
                op: "group connect with other processes",
            });
        }
        self.last_op += 1;
        let op = self.last_op;
        self.ready.insert(op);
        let group = (!req.xchg_only).then(|| format!("{kvs}_g{op}"));
        if let Some(g) = &group {
            self.groups.insert(g.clone());
        }
        Ok(GroupConnectReply {
            rank: group.as_ref().map(|_| 0),
            group,
            context: req.context,
            op,
            members: vec![GroupMember {
                proc: ProcName::new(kvs, 0),
                pg_size: 1,
                card: req.card.clone(),
            }],
        })
    }

    fn ready(&mut self, op: u64) -> Result<()> {
        if self.ready.remove(&op) {
            return Ok(());
        }
        Err(Error::GroupFailed {
            op: "group_ready",
            message: format!("unknown group_ready op {op}"),
        })
    }

    fn disconnect(&mut self, group: &str) -> Result<()> {
        if self.groups.remove(group) {
            return Ok(());
        }
        Err(Error::GroupFailed {
            op: "group_disconnect",
            message: format!("unknown group {group}"),
        })
    }
}

/// Send a `group_*` query and read its answer: a reply of another kind
/// means the server does not know the command; `rc≠0` is a failure.
fn group_request(conn: &mut Conn, msg: &Message, expected: &'static str) -> Result<Message> {
    let query = msg.cmd();
    conn.send(msg)?;
    let reply = match conn.recv(expected) {
        Ok(m) => m,
        Err(Error::UnexpectedReply { got, .. }) => {
            return Err(Error::GroupUnsupported { cmd: query, got })
        }
        Err(e) => return Err(e),
    };
    if reply.cmd() != expected || reply.is_query() {
        return Err(Error::GroupUnsupported {
            cmd: query,
            got: describe(&reply),
        });
    }
    match reply.status() {
        Some((rc, msg)) if rc != 0 => Err(Error::GroupFailed {
            op: query,
            message: msg
                .map(str::to_string)
                .unwrap_or_else(|| format!("the process manager answered rc={rc}")),
        }),
        _ => Ok(reply),
    }
}

fn odd_reply(got: impl Into<String>) -> Error {
    Error::UnexpectedReply {
        expected: "group_connect_result",
        got: got.into(),
    }
}

impl Client {
    /// Connect with the processes of `req` (PMIx RFC0003's `PMIx_Connect`):
    /// blocks until every participant joined (or, with `optional`, joined or
    /// ended). Then call [`Client::group_ready`] with the reply's `op` once
    /// this process can take traffic from the members.
    pub fn group_connect(&mut self, req: &GroupConnectRequest) -> Result<GroupConnectReply> {
        const OP: &str = "group_connect";
        if req.procs.is_empty() {
            return Err(Error::GroupFailed {
                op: OP,
                message: "no processes named".to_string(),
            });
        }
        if req.id.as_deref() == Some("") {
            return Err(Error::GroupFailed {
                op: OP,
                message: "an empty connect id (use None for no id)".to_string(),
            });
        }
        let msg = Message::GroupConnect {
            procs: req.procs.clone(),
            id: req.id.clone(),
            flags: GroupFlags {
                optional: req.optional,
                xchg_only: req.xchg_only,
                early_term: req.early_term,
                notify_each: req.notify_each,
            },
            ctx: req.context,
            card: req.card.clone(),
        };
        match msg.encode() {
            Err(Error::LineTooLong { len, max }) => {
                return Err(Error::GroupFailed {
                    op: OP,
                    message: format!(
                        "the request is {len} bytes, over the {max}-byte PMI line; name whole \
                         namespaces as ns:* or send a shorter card"
                    ),
                })
            }
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        let kvs = self.kvs_name.clone();
        let conn = match &mut self.mode {
            Mode::Singleton(local) => return local.groups.connect(&kvs, req),
            Mode::Pmix(p) => return p.group_connect(req),
            Mode::Pmi2(_) => {
                return Err(Error::Pmi2Unsupported {
                    op: "group connect",
                })
            }
            Mode::Remote(conn) => conn,
        };
        let Message::GroupConnectResult {
            op,
            ctx,
            size,
            group,
            rank,
            ..
        } = group_request(conn, &msg, "group_connect_result")?
        else {
            return Err(odd_reply("a different message"));
        };
        if group.is_none() != req.xchg_only {
            return Err(odd_reply(format!(
                "a result with group={group:?} for a connect with xchg_only={}",
                req.xchg_only
            )));
        }
        if rank.is_some_and(|r| r >= size) {
            return Err(odd_reply(format!(
                "rank={rank:?} in a group of size={size}"
            )));
        }
        let mut members = Vec::new();
        for _ in 0..size {
            match conn.expect("group_member")? {
                Message::GroupMember {
                    proc,
                    pg_size,
                    card,
                } => members.push(GroupMember {
                    proc,
                    pg_size,
                    card,
                }),
                _ => return Err(odd_reply("a different message among the members")),
            }
        }
        Ok(GroupConnectReply {
            group,
            rank,
            context: ctx,
            op,
            members,
        })
    }

    /// Wait until every member of connect `op` called `group_ready` (a
    /// member that ended first is skipped with `optional`, else this fails).
    pub fn group_ready(&mut self, op: u64) -> Result<()> {
        match &mut self.mode {
            Mode::Singleton(local) => local.groups.ready(op),
            Mode::Pmix(p) => p.group_ready(op),
            Mode::Pmi2(_) => Err(Error::Pmi2Unsupported {
                op: "group connect",
            }),
            Mode::Remote(conn) => {
                group_request(conn, &Message::GroupReady { op }, "group_ready_result").map(|_| ())
            }
        }
    }

    /// Leave `group` (PMIx RFC0003's `PMIx_Disconnect`). Not collective:
    /// returns at once. Every member must leave before it ends unless the
    /// group was made with `early_term`.
    pub fn group_disconnect(&mut self, group: &str) -> Result<()> {
        match &mut self.mode {
            Mode::Singleton(local) => local.groups.disconnect(group),
            Mode::Pmix(p) => p.group_disconnect(group),
            Mode::Pmi2(_) => Err(Error::Pmi2Unsupported {
                op: "group disconnect",
            }),
            Mode::Remote(conn) => {
                let msg = Message::GroupDisconnect {
                    group: group.to_string(),
                };
                group_request(conn, &msg, "group_disconnect_result").map(|_| ())
            }
        }
    }

    /// Group events that arrived so far: those put aside during other
    /// calls, then any readable now (under PMIx: those its event handler
    /// queued). Never blocks; empty for a singleton.
    pub fn poll_events(&mut self) -> Result<Vec<GroupEvent>> {
        match &mut self.mode {
            Mode::Singleton(_) | Mode::Pmi2(_) => Ok(Vec::new()),
            Mode::Pmix(p) => p.poll_events(),
            Mode::Remote(conn) => conn.poll_events(),
        }
    }
}
