//! Group connect on the client: scripted servers (rivetrun's replies with
//! events in between, Hydra's `cmd=error`, odd replies) and the singleton.

use std::sync::mpsc;
use std::time::Duration;

use super::tests::{connect, fake_server, HYDRA_STARTUP};
use super::*;

const KVS: &str = "kvs_4382_0_984152976_vm";

fn event(group: &str, kind: GroupEventKind, proc: ProcName) -> GroupEvent {
    GroupEvent {
        group: group.into(),
        kind,
        proc,
    }
}

fn request(procs: Vec<ProcName>) -> GroupConnectRequest {
    GroupConnectRequest {
        procs,
        context: 3,
        card: "me".into(),
        ..Default::default()
    }
}

#[test]
fn events_are_put_aside_while_waiting_for_replies() {
    let mut script = HYDRA_STARTUP.to_vec();
    script.extend([
        (
            "cmd=group_connect procs=kvs_4382_0_984152976_vm:*,other:1 id=c1 \
             flags=optional,notify_each ctx=3 card=me\n",
            Some(
                "cmd=group_event group=old_g1 event=terminated proc=other:0\n\
                 cmd=group_connect_result rc=0 op=4 ctx=8 size=2 group=kvs_g2 rank=1\n\
                 cmd=group_member proc=other:1 pgsize=3 card=-\n\
                 cmd=group_event group=old_g1 event=disconnected proc=other:2\n\
                 cmd=group_member proc=kvs_4382_0_984152976_vm:0 pgsize=1 card=me\n",
            ),
        ),
        (
            "cmd=group_ready op=4\n",
            Some("cmd=group_ready_result rc=0\n"),
        ),
        (
            "cmd=group_disconnect group=kvs_g2\n",
            Some(
                "cmd=group_event group=kvs_g2 event=terminated proc=other:1\n\
                 cmd=group_disconnect_result rc=0\n",
            ),
        ),
        (
            "cmd=group_disconnect group=kvs_g2\n",
            Some("cmd=group_disconnect_result rc=1 msg=not\\ connected\n"),
        ),
        (
            "cmd=group_ready op=9\n",
            Some("cmd=group_ready_result rc=1\n"),
        ),
        (
            "cmd=barrier_in\n",
            Some("cmd=group_event group=g event=terminated proc=x:0\ncmd=barrier_out\n"),
        ),
        ("cmd=finalize\n", Some("cmd=finalize_ack\n")),
    ]);
    let (stream, server) = fake_server(script);
    let mut c = connect(stream, 0, 1).unwrap();
    let mut req = request(vec![ProcName::wildcard(KVS), ProcName::new("other", 1)]);
    req.id = Some("c1".into());
    req.optional = true;
    req.notify_each = true;
    let reply = c.group_connect(&req).unwrap();
    assert_eq!(
        reply,
        GroupConnectReply {
            group: Some("kvs_g2".into()),
            rank: Some(1),
            context: 8,
            op: 4,
            members: vec![
                GroupMember {
                    proc: ProcName::new("other", 1),
                    pg_size: 3,
                    card: String::new(),
                },
                GroupMember {
                    proc: ProcName::new(KVS, 0),
                    pg_size: 1,
                    card: "me".into(),
                },
            ],
        }
    );
    c.group_ready(4).unwrap();
    c.group_disconnect("kvs_g2").unwrap();
    match c.group_disconnect("kvs_g2") {
        Err(Error::GroupFailed { op, message }) => {
            assert_eq!(
                (op, message.as_str()),
                ("group_disconnect", "not connected")
            )
        }
        other => panic!("{other:?}"),
    }
    match c.group_ready(9) {
        Err(Error::GroupFailed { op, message }) => {
            assert_eq!(op, "group_ready");
            assert!(message.contains("rc=1"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    c.barrier().unwrap();
    use GroupEventKind::{Disconnected, Terminated};
    assert_eq!(
        c.poll_events().unwrap(),
        vec![
            event("old_g1", Terminated, ProcName::new("other", 0)),
            event("old_g1", Disconnected, ProcName::new("other", 2)),
            event("kvs_g2", Terminated, ProcName::new("other", 1)),
            event("g", Terminated, ProcName::new("x", 0)),
        ]
    );
    // Nothing pending: returns at once although the server is still there.
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let events = c.poll_events();
        tx.send(()).unwrap();
        (c, events)
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("poll_events blocked");
    let (c, events) = waiter.join().unwrap();
    assert!(events.unwrap().is_empty());
    c.finalize().unwrap();
    server.join().unwrap();
}

#[test]
fn a_process_manager_without_group_connect_is_named_as_such() {
    let mut script = HYDRA_STARTUP.to_vec();
    script.extend([
        (
            "cmd=group_connect ",
            Some("cmd=error rc=-1 msg=unknown_command\n"),
        ),
        ("cmd=group_ready op=1\n", Some("cmd=put_result rc=0\n")),
        ("cmd=group_disconnect group=g\n", Some("what is this\n")),
    ]);
    let (stream, server) = fake_server(script);
    let mut c = connect(stream, 0, 1).unwrap();
    let unsupported = |r: Result<()>, cmd_want: &str| match r {
        Err(e @ Error::GroupUnsupported { .. }) => {
            let text = e.to_string();
            assert!(text.contains("does not support group connect"), "{text}");
            assert!(text.contains(&format!("cmd={cmd_want}")), "{text}");
        }
        other => panic!("{other:?}"),
    };
    unsupported(
        c.group_connect(&request(vec![ProcName::wildcard(KVS)]))
            .map(|_| ()),
        "group_connect",
    );
    unsupported(c.group_ready(1), "group_ready");
    unsupported(c.group_disconnect("g"), "group_disconnect");
    drop(c);
    server.join().unwrap();
}

#[test]
fn failures_and_odd_replies() {
    let mut script = HYDRA_STARTUP.to_vec();
    script.extend([
        (
            "cmd=group_connect ",
            Some("cmd=group_connect_result rc=1 msg=unknown\\ namespace\\ zz\n"),
        ),
        (
            "cmd=group_connect ",
            Some("cmd=group_connect_result rc=0 op=1 ctx=1 size=1\n"),
        ),
        (
            "cmd=group_connect ",
            Some("cmd=group_connect_result rc=0 op=1 ctx=1 size=1 group=g rank=1\n"),
        ),
        (
            "cmd=group_connect ",
            Some(
                "cmd=group_connect_result rc=0 op=1 ctx=1 size=2 group=g rank=1\ncmd=barrier_out\n",
            ),
        ),
    ]);
    let (stream, server) = fake_server(script);
    let mut c = connect(stream, 0, 1).unwrap();
    let req = request(vec![ProcName::wildcard(KVS), ProcName::wildcard("zz")]);
    match c.group_connect(&req) {
        Err(Error::GroupFailed { op, message }) => {
            assert_eq!(
                (op, message.as_str()),
                ("group_connect", "unknown namespace zz")
            )
        }
        other => panic!("{other:?}"),
    }
    // No group for a connect that wanted one; a rank outside the group; a
    // member line missing.
    for _ in 0..3 {
        assert!(matches!(
            c.group_connect(&req),
            Err(Error::UnexpectedReply { .. })
        ));
    }
    drop(c);
    server.join().unwrap();
}

#[test]
fn requests_are_checked_before_they_are_sent() {
    let mut c = Client::connect(ClientConfig::singleton()).unwrap();
    let mut req = request(vec![]);
    assert!(matches!(
        c.group_connect(&req),
        Err(Error::GroupFailed { .. })
    ));
    req.procs = vec![ProcName::wildcard("x")];
    req.id = Some(String::new());
    assert!(matches!(
        c.group_connect(&req),
        Err(Error::GroupFailed { .. })
    ));
    req.id = None;
    req.card = "c".repeat(1000);
    match c.group_connect(&req) {
        Err(Error::GroupFailed { message, .. }) => {
            assert!(message.contains("PMI line"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    req.card = "a\nb".into();
    assert!(matches!(
        c.group_connect(&req),
        Err(Error::Unencodable { .. })
    ));
}

#[test]
fn a_singleton_connects_to_itself_only() {
    let mut c = Client::connect(ClientConfig::singleton()).unwrap();
    let kvs = c.kvs_name().to_string();
    let reply = c
        .group_connect(&request(vec![ProcName::wildcard(kvs.as_str())]))
        .unwrap();
    assert_eq!(reply.group, Some(format!("{kvs}_g1")));
    assert_eq!((reply.rank, reply.context, reply.op), (Some(0), 3, 1));
    assert_eq!(
        reply.members,
        vec![GroupMember {
            proc: ProcName::new(kvs.as_str(), 0),
            pg_size: 1,
            card: "me".into(),
        }]
    );
    c.group_ready(1).unwrap();
    assert!(matches!(c.group_ready(1), Err(Error::GroupFailed { .. })));
    let group = reply.group.unwrap();
    c.group_disconnect(&group).unwrap();
    assert!(matches!(
        c.group_disconnect(&group),
        Err(Error::GroupFailed { .. })
    ));
    let mut req = request(vec![ProcName::new(kvs.as_str(), 0)]);
    req.xchg_only = true;
    let reply = c.group_connect(&req).unwrap();
    assert_eq!((reply.group, reply.rank, reply.op), (None, None, 2));
    for procs in [
        vec![ProcName::new(kvs.as_str(), 1)],
        vec![
            ProcName::wildcard(kvs.as_str()),
            ProcName::wildcard("other"),
        ],
        vec![ProcName::wildcard(kvs.as_str()).on_cluster("c")],
    ] {
        assert!(matches!(
            c.group_connect(&request(procs)),
            Err(Error::NoProcessManager { .. })
        ));
    }
    assert!(c.poll_events().unwrap().is_empty());
}
