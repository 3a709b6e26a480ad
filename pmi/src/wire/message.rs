//! The PMI-1 message vocabulary: one enum for both directions.
//!
//! Queries go client → server, responses server → client. Every response
//! carries `rc` (0 = success; a missing `rc` parses as 0, as MPICH's client
//! does) and an optional `msg`. When `rc` is nonzero the payload fields of a
//! response are optional on the wire and parse to their defaults.
//!
//! The `group_*` commands are Rivet's extension (group connect, PMIx
//! RFC0003), and so are `resource_*` (seed 002's resource registration,
//! `crate::resource`); MPICH and Hydra do not know them.

use crate::group::{GroupEvent, GroupFlags, ProcName};
use crate::resource::Resource;

/// One command of a spawn request (`MPI_Comm_spawn_multiple` has several).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpawnCommand {
    /// Executable to start.
    pub execname: String,
    /// How many processes to start.
    pub nprocs: u32,
    /// Arguments, without argv\[0\] (`arg1..argN` on the wire).
    pub args: Vec<String>,
    /// MPI_Info pairs for this command (`info_key_i`/`info_val_i`).
    pub info: Vec<(String, String)>,
}

/// A spawn request: the commands plus pairs pre-put into the children's KVS.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpawnRequest {
    /// One entry per command, in order.
    pub commands: Vec<SpawnCommand>,
    /// Pairs the children find in their KVS (e.g. `PARENT_ROOT_PORT_NAME`).
    pub preput: Vec<(String, String)>,
}

impl SpawnRequest {
    /// Total processes requested over all commands (saturating).
    pub fn total_procs(&self) -> u64 {
        self.commands.iter().map(|c| u64::from(c.nprocs)).sum()
    }
}

/// A PMI-1 message, query or response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    // ---- queries (client → server) ----
    /// `cmd=init pmi_version=1 pmi_subversion=1`
    Init { version: i32, subversion: i32 },
    /// `cmd=get_maxes`
    GetMaxes,
    /// `cmd=get_appnum`
    GetAppnum,
    /// `cmd=get_my_kvsname`
    GetMyKvsname,
    /// `cmd=get_universe_size`
    GetUniverseSize,
    /// `cmd=put kvsname=K key=k value=v`
    Put {
        kvsname: String,
        key: String,
        value: String,
    },
    /// `cmd=get [kvsname=K] key=k` (kvsname is optional in PMI-1.1/1.2)
    Get {
        kvsname: Option<String>,
        key: String,
    },
    /// `cmd=barrier_in [group=G]` — PMI-1.2 groups are `WORLD`, `NODE` or
    /// `r1,r2,...`, each optionally followed by `:tag`.
    BarrierIn { group: Option<String> },
    /// `cmd=finalize`
    Finalize,
    /// `cmd=abort exitcode=N [message=S]` (no reply; exitcode defaults to 1)
    Abort {
        exitcode: i32,
        message: Option<String>,
    },
    /// `cmd=publish_name service=S port=P`
    PublishName { service: String, port: String },
    /// `cmd=unpublish_name service=S`
    UnpublishName { service: String },
    /// `cmd=lookup_name service=S`
    LookupName { service: String },
    /// The multi-line `mcmd=spawn ... endcmd` block.
    Spawn(SpawnRequest),
    /// `cmd=initack pmiid=N [secret=S]` (PMI_PORT mode only, first line
    /// sent). `secret` is Rivet's: the job secret rivetrun put in the
    /// rank's environment (`RIVET_PMI_SECRET`); MPICH sends none.
    InitAck { pmiid: i32, secret: Option<String> },
    /// `cmd=group_connect procs=p1,p2,... [id=I] [flags=f1,f2] ctx=N card=C`
    /// (Rivet). `card` is `""` when the wire says `-` (no card).
    GroupConnect {
        procs: Vec<ProcName>,
        id: Option<String>,
        flags: GroupFlags,
        ctx: u32,
        card: String,
    },
    /// `cmd=group_ready op=N` (Rivet)
    GroupReady { op: u64 },
    /// `cmd=group_disconnect group=G` (Rivet)
    GroupDisconnect { group: String },
    /// `cmd=resource_register kind=K name=N` (Rivet): free it if I die.
    ResourceRegister(Resource),
    /// `cmd=resource_release kind=K name=N` (Rivet): I freed it myself.
    ResourceRelease(Resource),
    /// `cmd=group_job nspace=X size=N [cluster=C]` (Rivet, rivetrun → name
    /// server): a job whose processes may join groups with other jobs'.
    GroupJob {
        nspace: String,
        size: u32,
        cluster: Option<String>,
    },
    /// `cmd=group_relay nspace=X rank=R lines=K` (Rivet, rivetrun ↔ name
    /// server): the next `lines` lines are to or from process `X:R`.
    GroupRelay {
        nspace: String,
        rank: u32,
        lines: u32,
    },
    /// `cmd=group_ended nspace=X rank=R` (Rivet, rivetrun → name server):
    /// that process ended.
    GroupEnded { nspace: String, rank: u32 },

    // ---- responses (server → client) ----
    /// `cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=2`
    InitResponse {
        rc: i32,
        version: i32,
        subversion: i32,
        msg: Option<String>,
    },
    /// `cmd=maxes kvsname_max=N keylen_max=N vallen_max=N`
    Maxes {
        rc: i32,
        kvsname_max: u32,
        keylen_max: u32,
        vallen_max: u32,
        msg: Option<String>,
    },
    /// `cmd=appnum appnum=N`
    Appnum {
        rc: i32,
        appnum: i32,
        msg: Option<String>,
    },
    /// `cmd=my_kvsname kvsname=K`
    MyKvsname {
        rc: i32,
        kvsname: String,
        msg: Option<String>,
    },
    /// `cmd=universe_size size=N` (Hydra sends -1 for "unlimited/unknown")
    UniverseSize {
        rc: i32,
        size: i32,
        msg: Option<String>,
    },
    /// `cmd=put_result rc=0`
    PutResult { rc: i32, msg: Option<String> },
    /// `cmd=get_result rc=0 value=V`; `value` is `None` on a miss (also when
    /// the server says `found=FALSE`).
    GetResult {
        rc: i32,
        value: Option<String>,
        msg: Option<String>,
    },
    /// `cmd=barrier_out [tag=N]`
    BarrierOut {
        rc: i32,
        tag: Option<i32>,
        msg: Option<String>,
    },
    /// `cmd=finalize_ack`
    FinalizeAck { rc: i32, msg: Option<String> },
    /// `cmd=publish_result rc=0`
    PublishResult { rc: i32, msg: Option<String> },
    /// `cmd=unpublish_result rc=0`
    UnpublishResult { rc: i32, msg: Option<String> },
    /// `cmd=lookup_result rc=0 port=P`
    LookupResult {
        rc: i32,
        port: Option<String>,
        msg: Option<String>,
    },
    /// `cmd=spawn_result rc=0 [errcodes=a,b,...]`
    SpawnResult {
        rc: i32,
        errcodes: Vec<i32>,
        msg: Option<String>,
    },
    /// `cmd=initack` (followed by three `Set` lines)
    InitAckResponse { rc: i32, msg: Option<String> },
    /// `cmd=set size=N` / `rank=N` / `debug=N` after an initack.
    Set { key: String, value: String },
    /// `cmd=error rc=N msg=M`: the answer to a line whose command is unknown.
    Error { rc: i32, msg: Option<String> },
    /// `cmd=group_connect_result rc=0 op=N ctx=C size=S [group=G rank=R]`,
    /// followed on success by `size` [`Message::GroupMember`] lines.
    /// `group`/`rank` are absent for an `xchg_only` connect.
    GroupConnectResult {
        rc: i32,
        op: u64,
        ctx: u32,
        size: u32,
        group: Option<String>,
        rank: Option<u32>,
        msg: Option<String>,
    },
    /// `cmd=group_member proc=ns:r pgsize=N card=C` (`card` `""` ⇔ `-`).
    GroupMember {
        proc: ProcName,
        pg_size: u32,
        card: String,
    },
    /// `cmd=group_ready_result rc=0`
    GroupReadyResult { rc: i32, msg: Option<String> },
    /// `cmd=group_disconnect_result rc=0`
    GroupDisconnectResult { rc: i32, msg: Option<String> },
    /// `cmd=resource_register_result rc=0`
    ResourceRegisterResult { rc: i32, msg: Option<String> },
    /// `cmd=resource_release_result rc=0`
    ResourceReleaseResult { rc: i32, msg: Option<String> },
    /// `cmd=group_event group=G event=terminated|disconnected proc=ns:r`,
    /// sent unasked to group members.
    GroupEvent(GroupEvent),
    /// `cmd=group_job_result rc=0`
    GroupJobResult { rc: i32, msg: Option<String> },
    /// `cmd=group_lost nspace=X rank=R group=G` (Rivet, name server →
    /// rivetrun): `X:R` ended still connected to `G`, made without
    /// `early_term`; its job fails.
    GroupLost {
        nspace: String,
        rank: u32,
        group: String,
    },
}

/// The command table: every query and the response that answers it (a
/// query without an answer, `abort`, is not listed). A new command is
/// declared here once; `response_name`, `query_name` and the error
/// answers read it.
const COMMANDS: [(&str, &str); 20] = [
    ("init", "response_to_init"),
    ("get_maxes", "maxes"),
    ("get_appnum", "appnum"),
    ("get_my_kvsname", "my_kvsname"),
    ("get_universe_size", "universe_size"),
    ("put", "put_result"),
    ("get", "get_result"),
    ("barrier_in", "barrier_out"),
    ("finalize", "finalize_ack"),
    ("publish_name", "publish_result"),
    ("unpublish_name", "unpublish_result"),
    ("lookup_name", "lookup_result"),
    ("spawn", "spawn_result"),
    ("initack", "initack"),
    ("group_connect", "group_connect_result"),
    ("group_ready", "group_ready_result"),
    ("group_disconnect", "group_disconnect_result"),
    ("resource_register", "resource_register_result"),
    ("resource_release", "resource_release_result"),
    ("group_job", "group_job_result"),
];

/// Query command name → its response command name.
///
/// Used to answer a bad line with the response the client is waiting for.
pub fn response_name(query_cmd: &str) -> Option<&'static str> {
    COMMANDS
        .iter()
        .find(|(q, _)| *q == query_cmd)
        .map(|(_, r)| *r)
}

/// Response command name → the query it answers (inverse of [`response_name`]).
pub fn query_name(response_cmd: &str) -> Option<&'static str> {
    COMMANDS
        .iter()
        .find(|(_, r)| *r == response_cmd)
        .map(|(q, _)| *q)
}

impl Message {
    /// The `cmd=` (or `mcmd=`) name of this message on the wire.
    pub fn cmd(&self) -> &'static str {
        use Message::*;
        match self {
            Init { .. } => "init",
            GetMaxes => "get_maxes",
            GetAppnum => "get_appnum",
            GetMyKvsname => "get_my_kvsname",
            GetUniverseSize => "get_universe_size",
            Put { .. } => "put",
            Get { .. } => "get",
            BarrierIn { .. } => "barrier_in",
            Finalize => "finalize",
            Abort { .. } => "abort",
            PublishName { .. } => "publish_name",
            UnpublishName { .. } => "unpublish_name",
            LookupName { .. } => "lookup_name",
            Spawn(_) => "spawn",
            InitAck { .. } => "initack",
            GroupConnect { .. } => "group_connect",
            GroupReady { .. } => "group_ready",
            GroupDisconnect { .. } => "group_disconnect",
            ResourceRegister(_) => "resource_register",
            ResourceRelease(_) => "resource_release",
            GroupJob { .. } => "group_job",
            GroupRelay { .. } => "group_relay",
            GroupEnded { .. } => "group_ended",
            InitResponse { .. } => "response_to_init",
            Maxes { .. } => "maxes",
            Appnum { .. } => "appnum",
            MyKvsname { .. } => "my_kvsname",
            UniverseSize { .. } => "universe_size",
            PutResult { .. } => "put_result",
            GetResult { .. } => "get_result",
            BarrierOut { .. } => "barrier_out",
            FinalizeAck { .. } => "finalize_ack",
            PublishResult { .. } => "publish_result",
            UnpublishResult { .. } => "unpublish_result",
            LookupResult { .. } => "lookup_result",
            SpawnResult { .. } => "spawn_result",
            InitAckResponse { .. } => "initack",
            Set { .. } => "set",
            Error { .. } => "error",
            GroupConnectResult { .. } => "group_connect_result",
            GroupMember { .. } => "group_member",
            GroupReadyResult { .. } => "group_ready_result",
            GroupDisconnectResult { .. } => "group_disconnect_result",
            ResourceRegisterResult { .. } => "resource_register_result",
            ResourceReleaseResult { .. } => "resource_release_result",
            GroupEvent(_) => "group_event",
            GroupJobResult { .. } => "group_job_result",
            GroupLost { .. } => "group_lost",
        }
    }

    /// True for client → server messages.
    pub fn is_query(&self) -> bool {
        use Message::*;
        matches!(
            self,
            Init { .. }
                | GetMaxes
                | GetAppnum
                | GetMyKvsname
                | GetUniverseSize
                | Put { .. }
                | Get { .. }
                | BarrierIn { .. }
                | Finalize
                | Abort { .. }
                | PublishName { .. }
                | UnpublishName { .. }
                | LookupName { .. }
                | Spawn(_)
                | InitAck { .. }
                | GroupConnect { .. }
                | GroupReady { .. }
                | GroupDisconnect { .. }
                | ResourceRegister(_)
                | ResourceRelease(_)
                | GroupJob { .. }
                | GroupRelay { .. }
                | GroupEnded { .. }
        )
    }

    /// `(rc, msg)` of a response; `None` for queries, `Set`, `GroupMember`
    /// and `GroupEvent`.
    pub fn status(&self) -> Option<(i32, Option<&str>)> {
        use Message::*;
        match self {
            InitResponse { rc, msg, .. }
            | Maxes { rc, msg, .. }
            | Appnum { rc, msg, .. }
            | MyKvsname { rc, msg, .. }
            | UniverseSize { rc, msg, .. }
            | PutResult { rc, msg }
            | GetResult { rc, msg, .. }
            | BarrierOut { rc, msg, .. }
            | FinalizeAck { rc, msg }
            | PublishResult { rc, msg }
            | UnpublishResult { rc, msg }
            | LookupResult { rc, msg, .. }
            | SpawnResult { rc, msg, .. }
            | InitAckResponse { rc, msg }
            | GroupConnectResult { rc, msg, .. }
            | GroupReadyResult { rc, msg }
            | GroupDisconnectResult { rc, msg }
            | ResourceRegisterResult { rc, msg }
            | ResourceReleaseResult { rc, msg }
            | GroupJobResult { rc, msg }
            | Error { rc, msg } => Some((*rc, msg.as_deref())),
            _ => None,
        }
    }

    /// The failure answer to query `query_cmd`: the matching response with
    /// `rc` and `msg` and no payload, or `cmd=error` when the query is unknown
    /// (or has no response, like `abort`).
    pub fn error_reply(query_cmd: Option<&str>, rc: i32, msg: impl Into<String>) -> Message {
        use Message::*;
        let msg = Some(msg.into());
        match query_cmd.and_then(response_name) {
            Some("response_to_init") => InitResponse {
                rc,
                version: 1,
                subversion: 2,
                msg,
            },
            Some("maxes") => Maxes {
                rc,
                kvsname_max: 0,
                keylen_max: 0,
                vallen_max: 0,
                msg,
            },
            Some("appnum") => Appnum { rc, appnum: 0, msg },
            Some("my_kvsname") => MyKvsname {
                rc,
                kvsname: String::new(),
                msg,
            },
            Some("universe_size") => UniverseSize { rc, size: 0, msg },
            Some("put_result") => PutResult { rc, msg },
            Some("get_result") => GetResult {
                rc,
                value: None,
                msg,
            },
            Some("barrier_out") => BarrierOut { rc, tag: None, msg },
            Some("finalize_ack") => FinalizeAck { rc, msg },
            Some("publish_result") => PublishResult { rc, msg },
            Some("unpublish_result") => UnpublishResult { rc, msg },
            Some("lookup_result") => LookupResult {
                rc,
                port: None,
                msg,
            },
            Some("spawn_result") => SpawnResult {
                rc,
                errcodes: Vec::new(),
                msg,
            },
            Some("initack") => InitAckResponse { rc, msg },
            Some("group_connect_result") => GroupConnectResult {
                rc,
                op: 0,
                ctx: 0,
                size: 0,
                group: None,
                rank: None,
                msg,
            },
            Some("group_ready_result") => GroupReadyResult { rc, msg },
            Some("group_disconnect_result") => GroupDisconnectResult { rc, msg },
            Some("resource_register_result") => ResourceRegisterResult { rc, msg },
            Some("resource_release_result") => ResourceReleaseResult { rc, msg },
            Some("group_job_result") => GroupJobResult { rc, msg },
            _ => Error { rc, msg },
        }
    }
}
