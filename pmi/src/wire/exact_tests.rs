//! The byte-exact wire table: every message as this crate writes it,
//! checked against MPICH's client and Hydra's replies, and round-tripped
//! through the parser and the framer.

use super::*;
use crate::group::{GroupEvent, GroupEventKind, GroupFlags, ProcName};

fn s(x: &str) -> String {
    x.to_string()
}

/// Every message with its exact wire form as this crate writes it. The
/// query forms are MPICH's client's; the response forms are Hydra's,
/// with `rc` first.
fn exact_table() -> Vec<(Message, &'static str)> {
    use Message as M;
    vec![
        (
            M::Init {
                version: 1,
                subversion: 1,
            },
            "cmd=init pmi_version=1 pmi_subversion=1\n",
        ),
        (M::GetMaxes, "cmd=get_maxes\n"),
        (M::GetAppnum, "cmd=get_appnum\n"),
        (M::GetMyKvsname, "cmd=get_my_kvsname\n"),
        (M::GetUniverseSize, "cmd=get_universe_size\n"),
        (
            M::Put {
                kvsname: s("kvs_1_0"),
                key: s("-bcast-1-0"),
                value: s("2F6465"),
            },
            "cmd=put kvsname=kvs_1_0 key=-bcast-1-0 value=2F6465\n",
        ),
        (
            M::Get {
                kvsname: Some(s("kvs_1_0")),
                key: s("PMI_process_mapping"),
            },
            "cmd=get kvsname=kvs_1_0 key=PMI_process_mapping\n",
        ),
        (
            M::Get {
                kvsname: None,
                key: s("k"),
            },
            "cmd=get key=k\n",
        ),
        (M::BarrierIn { group: None }, "cmd=barrier_in\n"),
        (
            M::BarrierIn {
                group: Some(s("WORLD:0")),
            },
            "cmd=barrier_in group=WORLD:0\n",
        ),
        (M::Finalize, "cmd=finalize\n"),
        (
            M::Abort {
                exitcode: 7,
                message: None,
            },
            "cmd=abort exitcode=7\n",
        ),
        (
            M::Abort {
                exitcode: 3,
                message: Some(s("out of memory")),
            },
            "cmd=abort exitcode=3 message=out\\ of\\ memory\n",
        ),
        (
            M::PublishName {
                service: s("svc"),
                port: s("tag#0$"),
            },
            "cmd=publish_name service=svc port=tag#0$\n",
        ),
        (
            M::UnpublishName { service: s("svc") },
            "cmd=unpublish_name service=svc\n",
        ),
        (
            M::LookupName { service: s("svc") },
            "cmd=lookup_name service=svc\n",
        ),
        (
            M::InitAck {
                pmiid: 3,
                secret: None,
            },
            "cmd=initack pmiid=3\n",
        ),
        (
            M::InitAck {
                pmiid: 7,
                secret: Some("0af3".into()),
            },
            "cmd=initack pmiid=7 secret=0af3\n",
        ),
        (
            M::InitResponse {
                rc: 0,
                version: 1,
                subversion: 2,
                msg: None,
            },
            "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=2\n",
        ),
        (
            M::InitResponse {
                rc: -1,
                version: 1,
                subversion: 2,
                msg: Some(s("unsupported")),
            },
            "cmd=response_to_init rc=-1 pmi_version=1 pmi_subversion=2 msg=unsupported\n",
        ),
        (
            M::Maxes {
                rc: 0,
                kvsname_max: 256,
                keylen_max: 64,
                vallen_max: 1024,
                msg: None,
            },
            "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n",
        ),
        (
            M::Appnum {
                rc: 0,
                appnum: 0,
                msg: None,
            },
            "cmd=appnum appnum=0\n",
        ),
        (
            M::MyKvsname {
                rc: 0,
                kvsname: s("kvs_4382_0"),
                msg: None,
            },
            "cmd=my_kvsname kvsname=kvs_4382_0\n",
        ),
        (
            M::UniverseSize {
                rc: 0,
                size: -1,
                msg: None,
            },
            "cmd=universe_size size=-1\n",
        ),
        (M::PutResult { rc: 0, msg: None }, "cmd=put_result rc=0\n"),
        (
            M::PutResult {
                rc: 1,
                msg: Some(s("key_reserved")),
            },
            "cmd=put_result rc=1 msg=key_reserved\n",
        ),
        (
            M::GetResult {
                rc: 0,
                value: Some(s("(vector,(0,1,1))")),
                msg: None,
            },
            "cmd=get_result rc=0 value=(vector,(0,1,1))\n",
        ),
        (
            M::GetResult {
                rc: 1,
                value: None,
                msg: Some(s("key_not_found")),
            },
            "cmd=get_result rc=1 msg=key_not_found\n",
        ),
        (
            M::BarrierOut {
                rc: 0,
                tag: None,
                msg: None,
            },
            "cmd=barrier_out\n",
        ),
        (
            M::BarrierOut {
                rc: 0,
                tag: Some(5),
                msg: None,
            },
            "cmd=barrier_out tag=5\n",
        ),
        (
            M::BarrierOut {
                rc: 1,
                tag: None,
                msg: Some(s("twice")),
            },
            "cmd=barrier_out rc=1 msg=twice\n",
        ),
        (M::FinalizeAck { rc: 0, msg: None }, "cmd=finalize_ack\n"),
        (
            M::PublishResult { rc: 0, msg: None },
            "cmd=publish_result rc=0\n",
        ),
        (
            M::PublishResult {
                rc: 1,
                msg: Some(s("key_already_present")),
            },
            "cmd=publish_result rc=1 msg=key_already_present\n",
        ),
        (
            M::UnpublishResult { rc: 0, msg: None },
            "cmd=unpublish_result rc=0\n",
        ),
        (
            M::LookupResult {
                rc: 0,
                port: Some(s("p1")),
                msg: None,
            },
            "cmd=lookup_result rc=0 port=p1\n",
        ),
        (
            M::LookupResult {
                rc: 1,
                port: None,
                msg: Some(s("service_not_found")),
            },
            "cmd=lookup_result rc=1 msg=service_not_found\n",
        ),
        (
            M::SpawnResult {
                rc: 0,
                errcodes: vec![],
                msg: None,
            },
            "cmd=spawn_result rc=0\n",
        ),
        (
            M::SpawnResult {
                rc: 0,
                errcodes: vec![0, 0, -3],
                msg: None,
            },
            "cmd=spawn_result rc=0 errcodes=0,0,-3\n",
        ),
        (
            M::SpawnResult {
                rc: -1,
                errcodes: vec![],
                msg: Some(s("no such file")),
            },
            "cmd=spawn_result rc=-1 msg=no\\ such\\ file\n",
        ),
        (M::InitAckResponse { rc: 0, msg: None }, "cmd=initack\n"),
        (
            M::Set {
                key: s("size"),
                value: s("2"),
            },
            "cmd=set size=2\n",
        ),
        (
            M::Error {
                rc: -1,
                msg: Some(s("unknown_command")),
            },
            "cmd=error rc=-1 msg=unknown_command\n",
        ),
        (
            M::GroupConnect {
                procs: vec![
                    ProcName::wildcard("rivet_9_0"),
                    ProcName::new("rivet_9_0_s1", 1).on_cluster("nodeA"),
                ],
                id: Some(s("my connect")),
                flags: GroupFlags {
                    optional: true,
                    notify_each: true,
                    ..GroupFlags::default()
                },
                ctx: 12,
                card: s("tcp:10.0.0.1:5000"),
            },
            "cmd=group_connect procs=rivet_9_0:*,nodeA:rivet_9_0_s1:1 id=my\\ connect \
             flags=optional,notify_each ctx=12 card=tcp:10.0.0.1:5000\n",
        ),
        (
            M::GroupConnect {
                procs: vec![ProcName::new("ns", 0)],
                id: None,
                flags: GroupFlags::default(),
                ctx: 0,
                card: String::new(),
            },
            "cmd=group_connect procs=ns:0 ctx=0 card=-\n",
        ),
        (M::GroupReady { op: 7 }, "cmd=group_ready op=7\n"),
        (
            M::GroupDisconnect {
                group: s("rivet_9_0_g1"),
            },
            "cmd=group_disconnect group=rivet_9_0_g1\n",
        ),
        (
            M::GroupConnectResult {
                rc: 0,
                op: 7,
                ctx: 12,
                size: 4,
                group: Some(s("rivet_9_0_g1")),
                rank: Some(2),
                msg: None,
            },
            "cmd=group_connect_result rc=0 op=7 ctx=12 size=4 group=rivet_9_0_g1 rank=2\n",
        ),
        (
            M::GroupConnectResult {
                rc: 0,
                op: 8,
                ctx: 3,
                size: 2,
                group: None,
                rank: None,
                msg: None,
            },
            "cmd=group_connect_result rc=0 op=8 ctx=3 size=2\n",
        ),
        (
            M::GroupConnectResult {
                rc: 1,
                op: 0,
                ctx: 0,
                size: 0,
                group: None,
                rank: None,
                msg: Some(s("unknown namespace x")),
            },
            "cmd=group_connect_result rc=1 msg=unknown\\ namespace\\ x\n",
        ),
        (
            M::GroupMember {
                proc: ProcName::new("rivet_9_0", 3),
                pg_size: 4,
                card: s("tcp:10.0.0.1:5003"),
            },
            "cmd=group_member proc=rivet_9_0:3 pgsize=4 card=tcp:10.0.0.1:5003\n",
        ),
        (
            M::GroupMember {
                proc: ProcName::new("rivet_9_0_s1", 0),
                pg_size: 2,
                card: String::new(),
            },
            "cmd=group_member proc=rivet_9_0_s1:0 pgsize=2 card=-\n",
        ),
        (
            M::GroupReadyResult { rc: 0, msg: None },
            "cmd=group_ready_result rc=0\n",
        ),
        (
            M::GroupDisconnectResult {
                rc: 1,
                msg: Some(s("unknown_group")),
            },
            "cmd=group_disconnect_result rc=1 msg=unknown_group\n",
        ),
        (
            M::ResourceRegister(crate::resource::Resource::shm("rivet-9-a").unwrap()),
            "cmd=resource_register kind=shm name=rivet-9-a\n",
        ),
        (
            M::ResourceRelease(crate::resource::Resource::file("/tmp/a b").unwrap()),
            "cmd=resource_release kind=file name=/tmp/a\\ b\n",
        ),
        (
            M::ResourceRegisterResult { rc: 0, msg: None },
            "cmd=resource_register_result rc=0\n",
        ),
        (
            M::ResourceReleaseResult {
                rc: 1,
                msg: Some(s("resource_not_registered")),
            },
            "cmd=resource_release_result rc=1 msg=resource_not_registered\n",
        ),
        (
            M::GroupEvent(GroupEvent {
                group: s("rivet_9_0_g1"),
                kind: GroupEventKind::Terminated,
                proc: ProcName::new("rivet_9_0", 2),
            }),
            "cmd=group_event group=rivet_9_0_g1 event=terminated proc=rivet_9_0:2\n",
        ),
        (
            M::GroupEvent(GroupEvent {
                group: s("g"),
                kind: GroupEventKind::Disconnected,
                proc: ProcName::new("ns", 0),
            }),
            "cmd=group_event group=g event=disconnected proc=ns:0\n",
        ),
        (
            M::GroupJob {
                nspace: s("rivet_9_0"),
                size: 4,
                cluster: Some(s("clA")),
            },
            "cmd=group_job nspace=rivet_9_0 size=4 cluster=clA\n",
        ),
        (
            M::GroupJobResult { rc: 0, msg: None },
            "cmd=group_job_result rc=0\n",
        ),
        (
            M::GroupRelay {
                nspace: s("rivet_9_0"),
                rank: 2,
                lines: 3,
            },
            "cmd=group_relay nspace=rivet_9_0 rank=2 lines=3\n",
        ),
        (
            M::GroupEnded {
                nspace: s("rivet_9_0"),
                rank: 1,
            },
            "cmd=group_ended nspace=rivet_9_0 rank=1\n",
        ),
        (
            M::GroupLost {
                nspace: s("rivet_9_0"),
                rank: 1,
                group: s("jobs~g1"),
            },
            "cmd=group_lost nspace=rivet_9_0 rank=1 group=jobs~g1\n",
        ),
        (
            M::Spawn(SpawnRequest {
                commands: vec![SpawnCommand {
                    execname: s("./child"),
                    nprocs: 4,
                    args: vec![s("foo"), s("bar")],
                    info: vec![(s("wdir"), s("/tmp"))],
                }],
                preput: vec![(s("PARENT_ROOT_PORT_NAME"), s("port"))],
            }),
            "mcmd=spawn\nnprocs=4\nexecname=./child\ntotspawns=1\nspawnssofar=1\nargcnt=2\n\
             arg1=foo\narg2=bar\npreput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\n\
             preput_val_0=port\ninfo_num=1\ninfo_key_0=wdir\ninfo_val_0=/tmp\nendcmd\n",
        ),
    ]
}

#[test]
fn every_message_writes_exact_bytes_and_round_trips() {
    for (msg, wire) in exact_table() {
        let bytes = msg.encode().unwrap_or_else(|e| panic!("{msg:?}: {e}"));
        assert_eq!(String::from_utf8(bytes).unwrap(), wire, "writing {msg:?}");
        let back = Message::parse(wire).unwrap_or_else(|e| panic!("{wire:?}: {e}"));
        assert_eq!(back, msg, "parsing {wire:?}");
        // And through the framer, byte by byte.
        let mut framer = Framer::new();
        let mut frames = Vec::new();
        for b in wire.as_bytes() {
            framer.feed(std::slice::from_ref(b), &mut frames).unwrap();
        }
        assert!(!framer.has_partial(), "{wire:?}");
        match frames.as_slice() {
            [Frame::Message(m)] => assert_eq!(m, &msg),
            other => panic!("framing {wire:?}: {other:?}"),
        }
    }
}

#[test]
fn every_variant_is_covered_by_the_exact_table() {
    let table = exact_table();
    let cmds: std::collections::HashSet<(&str, bool)> =
        table.iter().map(|(m, _)| (m.cmd(), m.is_query())).collect();
    for (cmd, q) in [
        ("init", true),
        ("get_maxes", true),
        ("get_appnum", true),
        ("get_my_kvsname", true),
        ("get_universe_size", true),
        ("put", true),
        ("get", true),
        ("barrier_in", true),
        ("finalize", true),
        ("abort", true),
        ("publish_name", true),
        ("unpublish_name", true),
        ("lookup_name", true),
        ("spawn", true),
        ("initack", true),
        ("group_connect", true),
        ("group_ready", true),
        ("group_disconnect", true),
        ("response_to_init", false),
        ("maxes", false),
        ("appnum", false),
        ("my_kvsname", false),
        ("universe_size", false),
        ("put_result", false),
        ("get_result", false),
        ("barrier_out", false),
        ("finalize_ack", false),
        ("publish_result", false),
        ("unpublish_result", false),
        ("lookup_result", false),
        ("spawn_result", false),
        ("initack", false),
        ("set", false),
        ("error", false),
        ("group_connect_result", false),
        ("group_member", false),
        ("group_ready_result", false),
        ("group_disconnect_result", false),
        ("group_event", false),
    ] {
        assert!(
            cmds.contains(&(cmd, q)),
            "{cmd} (query={q}) missing from table"
        );
    }
}
