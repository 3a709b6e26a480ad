//! What the server asks of the launcher: the [`Output`]s it performs, why
//! a spawn failed, and the group messages left to it.

use std::sync::Arc;

use super::{ConnId, NsId};
use crate::error::Error;
use crate::wire::{Message, SpawnRequest};

use super::names::NameRequest;

/// Something the launcher must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Send {
        conn: ConnId,
        bytes: Vec<u8>,
    },
    /// The same bytes to each of these connections, after anything queued
    /// for them before (a group connect's member lines: one copy, not one
    /// per member).
    SendAll {
        conns: Vec<ConnId>,
        bytes: Arc<[u8]>,
    },
    /// The stream from this connection is garbage: the launcher logs `reason` and closes it.
    Close {
        conn: ConnId,
        reason: String,
    },
    /// A rank called abort: the launcher tears the job down. `rank` is
    /// `None` if a `PMI_PORT` connection aborted before its `initack`
    /// (possible only without [`Server::require_port_auth`](super::Server::require_port_auth)).
    Abort {
        ns: NsId,
        rank: Option<u32>,
        exit_code: i32,
        message: Option<String>,
    },
    /// A rank finished PMI (finalize answered).
    Finalized {
        ns: NsId,
        rank: u32,
    },
    /// A rank asked to spawn; the launcher must answer with `Server::spawn_done`.
    Spawn {
        conn: ConnId,
        ns: NsId,
        rank: u32,
        request: SpawnRequest,
    },
    /// With [`Server::forward_names`](super::Server::forward_names): a name request the launcher carries to
    /// the name server, answering with `Server::name_done`. `rank` is `None`
    /// on a `PMI_PORT` connection before its `initack`.
    Name {
        conn: ConnId,
        ns: NsId,
        rank: Option<u32>,
        request: NameRequest,
    },
    /// With [`Server::delegate_barriers`](super::Server::delegate_barriers): this node's ranks are all in
    /// the job-wide barrier; the launcher carries it upstream with `puts`
    /// (the node's since the last one) and answers with
    /// [`Server::barrier_done`](super::Server::barrier_done).
    Barrier {
        ns: NsId,
        puts: Vec<(String, String)>,
    },
    /// Rank `rank` of `ns` ended while still connected to `group`, which was
    /// made without `early_term` (PMIx RFC0003: every member must
    /// disconnect before it ends). The launcher treats it as a job failure.
    GroupMemberLost {
        ns: NsId,
        rank: u32,
        group: String,
    },
    /// With [`Server::forward_other_jobs`](super::Server::forward_other_jobs): a group request of rank `rank` of
    /// `ns` that names other jobs; the launcher relays it to the name
    /// server's group hub and hands what comes back to
    /// [`Server::group_relayed`](super::Server::group_relayed).
    GroupForward {
        ns: NsId,
        rank: u32,
        message: Message,
    },
}

/// A spawn carried out, for [`Server::spawn_done`](super::Server::spawn_done).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Spawned {
    /// The new job's id (its KVS name): a PMI-2 client gets it as
    /// `spawn-response`'s `jobid` (MPICH's `PMI2_Job_Spawn` requires it
    /// when asked for the id); PMI-1's `spawn_result` has no such field.
    pub jobid: String,
    /// One code per requested process (0: it started).
    pub errcodes: Vec<i32>,
}

/// Why a spawn failed, for [`Server::spawn_done`](super::Server::spawn_done): sent as
/// `cmd=spawn_result rc=1 errcodes=... msg=...`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpawnFailure {
    /// One code per requested process (0: it would have started); sent only
    /// when there is exactly one per process.
    pub errcodes: Vec<i32>,
    /// Why, for the person who started the job.
    pub message: String,
}

impl From<String> for SpawnFailure {
    fn from(message: String) -> SpawnFailure {
        SpawnFailure {
            errcodes: Vec::new(),
            message,
        }
    }
}

impl From<&str> for SpawnFailure {
    fn from(message: &str) -> SpawnFailure {
        SpawnFailure::from(message.to_string())
    }
}

/// A group message (`group_connect`, `group_ready`, `group_disconnect`)
/// that a server with [`Server::forward_groups`](super::Server::forward_groups) left for the launcher to
/// serve job-wide (a multi-host job's proxy hands it to rivetrun, which
/// feeds it to its own server as if from `rank` of `ns` and sends the
/// answers back to `conn`).
#[derive(Debug, Clone, PartialEq)]
pub struct Forwarded {
    pub conn: ConnId,
    pub ns: NsId,
    pub rank: u32,
    pub msg: Message,
}

/// Queue `msg` for `conn`. A reply that cannot be encoded (a value too long
/// for one line) becomes an error answer of the same command.
pub(super) fn reply_to(out: &mut Vec<Output>, conn: ConnId, msg: &Message) {
    let bytes = msg.encode().or_else(|e| {
        let query = crate::wire::query_name(msg.cmd());
        let short = match e {
            Error::LineTooLong { .. } => "reply_too_long_for_one_line",
            _ => "reply_cannot_be_encoded",
        };
        Message::error_reply(query, -1, short).encode()
    });
    let bytes = bytes.unwrap_or_else(|_| b"cmd=error rc=-1\n".to_vec());
    out.push(Output::Send { conn, bytes });
}
