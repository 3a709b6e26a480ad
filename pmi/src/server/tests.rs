//! Scripted multi-connection sessions through `Server::receive`.

use super::*;
use crate::wire::SpawnCommand;

fn spec(name: &str, nodes: &[u32]) -> NamespaceSpec {
    NamespaceSpec {
        name: name.to_string(),
        size: nodes.len() as u32,
        appnum: 0,
        appnum_of_rank: Vec::new(),
        universe_size: 8,
        node_of_rank: nodes.to_vec(),
        attributes: vec![("PMI_hwloc_xmlfile".into(), "/tmp/topo.xml".into())],
        preput: vec![("PARENT_ROOT_PORT_NAME".into(), "tag#0$port#99$".into())],
    }
}

/// A server plus helpers to talk to it.
struct Session {
    server: Server,
}

impl Session {
    /// Feed `text` from `conn`; return all outputs.
    fn io(&mut self, conn: ConnId, text: &str) -> Vec<Output> {
        let mut out = Vec::new();
        self.server.receive(conn, text.as_bytes(), &mut out);
        out
    }

    /// Feed `text` from `conn`; return what was sent back to `conn` only,
    /// asserting nothing else happened.
    fn ask(&mut self, conn: ConnId, text: &str) -> String {
        let out = self.io(conn, text);
        let mut reply = String::new();
        for o in out {
            match o {
                Output::Send { conn: c, bytes } if c == conn => {
                    reply.push_str(&String::from_utf8(bytes).unwrap())
                }
                other => panic!("unexpected output {other:?} for {text:?}"),
            }
        }
        reply
    }
}

fn sends(out: &[Output]) -> Vec<(ConnId, String)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send { conn, bytes } => {
                Some((*conn, String::from_utf8(bytes.clone()).unwrap()))
            }
            _ => None,
        })
        .collect()
}

fn three_rank_session() -> (Session, NsId) {
    let mut server = Server::new();
    let ns = server
        .create_namespace(spec("rivet_1_0", &[0, 0, 1]))
        .unwrap();
    for rank in 0..3 {
        server.attach(u64::from(rank) + 1, ns, rank);
    }
    (Session { server }, ns)
}

#[test]
fn scripted_session_three_ranks() {
    let (mut s, ns) = three_rank_session();
    assert_eq!(s.server.namespace_name(ns), "rivet_1_0");

    // Start-up sequence, byte for byte.
    for (q, a) in [
        (
            "cmd=init pmi_version=1 pmi_subversion=1\n",
            "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=2\n",
        ),
        (
            "cmd=get_maxes\n",
            "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n",
        ),
        ("cmd=get_appnum\n", "cmd=appnum appnum=0\n"),
        ("cmd=get_my_kvsname\n", "cmd=my_kvsname kvsname=rivet_1_0\n"),
        ("cmd=get_universe_size\n", "cmd=universe_size size=8\n"),
    ] {
        for conn in 1..=3 {
            assert_eq!(s.ask(conn, q), a, "{q}");
        }
    }

    // Puts, including reserved keys and a bad line on another connection.
    assert_eq!(
        s.ask(1, "cmd=put kvsname=rivet_1_0 key=card0 value=AB01\n"),
        "cmd=put_result rc=0\n"
    );
    assert_eq!(
        s.ask(1, "cmd=put kvsname=rivet_1_0 key=PMI_x value=1\n"),
        "cmd=put_result rc=1 msg=key_reserved_PMI_prefix\n"
    );
    assert_eq!(
        s.ask(2, "cmd=frobnicate a=b\n"),
        "cmd=error rc=-1 msg=unknown_command\n"
    );
    assert_eq!(
        s.ask(2, "hello there\n"),
        "cmd=error rc=-1 msg=missing_cmd\n"
    );
    assert_eq!(
        s.ask(2, "cmd=put kvsname=rivet_1_0 key=k\n"),
        "cmd=put_result rc=-1 msg=missing_field_value\n"
    );
    let long_key = format!("cmd=get key={}\n", "k".repeat(65));
    assert_eq!(
        s.ask(2, &long_key),
        "cmd=get_result rc=-1 msg=key_too_long\n"
    );
    // An over-long line is answered like any bad request; the connection goes on.
    let long_line = format!(
        "cmd=put kvsname=rivet_1_0 key=big value={}\n",
        "v".repeat(4000)
    );
    assert_eq!(
        s.ask(2, &long_line),
        "cmd=put_result rc=-1 msg=line_too_long_max_1024_bytes\n"
    );
    assert_eq!(
        s.ask(2, "cmd=get_maxes\n"),
        "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n"
    );
    assert_eq!(
        s.ask(3, "cmd=put kvsname=rivet_1_0 key=card2 value=CD\n"),
        "cmd=put_result rc=0\n"
    );
    // Last write wins.
    assert_eq!(
        s.ask(3, "cmd=put kvsname=rivet_1_0 key=card2 value=EF\n"),
        "cmd=put_result rc=0\n"
    );
    // Put into another job's KVS is refused.
    assert_eq!(
        s.ask(3, "cmd=put kvsname=other key=x value=1\n"),
        "cmd=put_result rc=1 msg=put_allowed_only_into_own_kvs\n"
    );

    // Barrier: completes only when all three are in; a double entry errors.
    assert!(s.io(1, "cmd=barrier_in\n").is_empty());
    assert!(s.io(2, "cmd=barrier_in\n").is_empty());
    assert_eq!(
        s.ask(1, "cmd=barrier_in\n"),
        "cmd=barrier_out rc=1 msg=barrier_in_twice_in_one_epoch\n"
    );
    let out = s.io(3, "cmd=barrier_in\n");
    let got = sends(&out);
    assert_eq!(got.len(), 3);
    for (i, (conn, text)) in got.iter().enumerate() {
        assert_eq!(*conn, i as u64 + 1);
        assert_eq!(text, "cmd=barrier_out\n");
    }

    // Gets: KVS, attributes, computed mapping, preput, misses.
    for (q, a) in [
        (
            "cmd=get kvsname=rivet_1_0 key=card0\n",
            "cmd=get_result rc=0 value=AB01\n",
        ),
        ("cmd=get key=card2\n", "cmd=get_result rc=0 value=EF\n"),
        (
            "cmd=get kvsname=rivet_1_0 key=PMI_process_mapping\n",
            "cmd=get_result rc=0 value=(vector,(0,1,2),(1,1,1))\n",
        ),
        (
            "cmd=get kvsname=rivet_1_0 key=PMI_hwloc_xmlfile\n",
            "cmd=get_result rc=0 value=/tmp/topo.xml\n",
        ),
        (
            "cmd=get kvsname=rivet_1_0 key=PARENT_ROOT_PORT_NAME\n",
            "cmd=get_result rc=0 value=tag#0$port#99$\n",
        ),
        (
            "cmd=get kvsname=rivet_1_0 key=nope\n",
            "cmd=get_result rc=1 msg=key_not_found\n",
        ),
        (
            "cmd=get kvsname=nokvs key=card0\n",
            "cmd=get_result rc=1 msg=unknown_kvsname\n",
        ),
    ] {
        assert_eq!(s.ask(2, q), a, "{q}");
    }

    // Name service.
    assert_eq!(
        s.ask(1, "cmd=publish_name service=svc port=p#1\n"),
        "cmd=publish_result rc=0\n"
    );
    assert_eq!(
        s.ask(2, "cmd=publish_name service=svc port=p#2\n"),
        "cmd=publish_result rc=1 msg=key_already_present\n"
    );
    assert_eq!(
        s.ask(3, "cmd=lookup_name service=svc\n"),
        "cmd=lookup_result rc=0 port=p#1\n"
    );
    // Only the publisher may take it away.
    assert_eq!(
        s.ask(3, "cmd=unpublish_name service=svc\n"),
        "cmd=unpublish_result rc=1 msg=not_the_publisher\n"
    );
    assert_eq!(
        s.ask(1, "cmd=unpublish_name service=svc\n"),
        "cmd=unpublish_result rc=0\n"
    );
    assert_eq!(
        s.ask(3, "cmd=unpublish_name service=svc\n"),
        "cmd=unpublish_result rc=1 msg=service_not_found\n"
    );
    assert_eq!(
        s.ask(3, "cmd=lookup_name service=svc\n"),
        "cmd=lookup_result rc=1 msg=service_not_found\n"
    );

    // Spawn, sent in pieces while another rank keeps working.
    let block = "mcmd=spawn\nnprocs=2\nexecname=./child\ntotspawns=1\nspawnssofar=1\nargcnt=1\n\
                 arg1=hello world\npreput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\n\
                 preput_val_0=tag#0$\ninfo_num=0\nendcmd\n";
    let (a, b) = block.split_at(40);
    assert!(s.io(1, a).is_empty());
    assert_eq!(
        s.ask(2, "cmd=get key=card0\n"),
        "cmd=get_result rc=0 value=AB01\n"
    );
    let out = s.io(1, b);
    let request = match out.as_slice() {
        [Output::Spawn {
            conn: 1,
            ns: n,
            rank: 0,
            request,
        }] if *n == ns => request.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        request.commands,
        vec![SpawnCommand {
            execname: "./child".into(),
            nprocs: 2,
            args: vec!["hello world".into()],
            info: vec![],
        }]
    );
    assert_eq!(
        request.preput,
        vec![("PARENT_ROOT_PORT_NAME".into(), "tag#0$".into())]
    );
    // A second spawn while one is pending is refused.
    assert_eq!(
        s.ask(1, block),
        "cmd=spawn_result rc=-1 msg=spawn_already_pending\n"
    );
    let mut out = Vec::new();
    s.server.spawn_done(1, Ok(spawned(vec![0, 0])), &mut out);
    assert_eq!(
        sends(&out),
        vec![(1, "cmd=spawn_result rc=0\n".to_string())]
    );
    // Nothing pending any more: a stray spawn_done is ignored.
    out.clear();
    s.server.spawn_done(1, Ok(spawned(vec![])), &mut out);
    assert!(out.is_empty());
    // A failed spawn and one with per-process codes.
    assert_eq!(s.io(1, block).len(), 1);
    s.server.spawn_done(1, Err("no such file".into()), &mut out);
    assert_eq!(
        sends(&out),
        vec![(
            1,
            "cmd=spawn_result rc=1 msg=no\\ such\\ file\n".to_string()
        )]
    );
    out.clear();
    // A failure with one code per process carries them; a wrong count does not.
    for (codes, line) in [
        (
            vec![0, 127],
            "cmd=spawn_result rc=1 errcodes=0,127 msg=not\\ found\n",
        ),
        (vec![127], "cmd=spawn_result rc=1 msg=not\\ found\n"),
    ] {
        assert_eq!(s.io(1, block).len(), 1);
        let failure = SpawnFailure {
            errcodes: codes,
            message: "not found".into(),
        };
        s.server.spawn_done(1, Err(failure), &mut out);
        assert_eq!(sends(&out), vec![(1, line.to_string())]);
        out.clear();
    }
    // A message too long for one line is shortened, the codes kept.
    assert_eq!(s.io(1, block).len(), 1);
    let failure = SpawnFailure {
        errcodes: vec![0, 127],
        message: "not found ".repeat(200),
    };
    s.server.spawn_done(1, Err(failure), &mut out);
    let (_, line) = &sends(&out)[0];
    assert!(
        line.starts_with("cmd=spawn_result rc=1 errcodes=0,127 msg=not\\ found")
            && line.ends_with("...\n")
            && line.len() <= crate::wire::limits::MAX_SEND_LINE,
        "{line}"
    );
    out.clear();
    assert_eq!(s.io(1, block).len(), 1);
    s.server.spawn_done(1, Ok(spawned(vec![0, -2])), &mut out);
    assert_eq!(
        sends(&out),
        vec![(1, "cmd=spawn_result rc=0 errcodes=0,-2\n".to_string())]
    );
    // A malformed block gets a spawn_result error.
    assert!(s
        .ask(2, "mcmd=spawn\nnprocs=1\nendcmd\n")
        .starts_with("cmd=spawn_result rc=-1 msg=malformed:\\ spawn:"));

    // Finalize and abort.
    let out = s.io(2, "cmd=finalize\n");
    assert_eq!(
        out,
        vec![
            Output::Send {
                conn: 2,
                bytes: b"cmd=finalize_ack\n".to_vec()
            },
            Output::Finalized { ns, rank: 1 },
        ]
    );
    assert!(s.server.is_finalized(ns, 1));
    assert!(!s.server.is_finalized(ns, 0));
    assert!(!s.server.is_finalized(99, 0));
    assert_eq!(
        s.io(3, "cmd=abort exitcode=4 message=bad\\ input\n"),
        vec![Output::Abort {
            ns,
            rank: Some(2),
            exit_code: 4,
            message: Some("bad input".into())
        }]
    );
    assert_eq!(
        s.io(3, "cmd=abort exitcode=x\n"),
        vec![Output::Abort {
            ns,
            rank: Some(2),
            exit_code: 1,
            message: Some(
                "garbled abort request: PMI command abort: field exitcode=\"x\" is not a valid number"
                    .into()
            )
        }]
    );

    // A garbage stream closes only that connection.
    let out = s.io(1, "cmd=get_maxes\n\u{1}\u{2}binary");
    assert_eq!(out.len(), 2);
    assert!(matches!(&out[0], Output::Send { conn: 1, .. }));
    assert!(matches!(&out[1], Output::Close { conn: 1, .. }));
    assert_eq!(
        s.ask(3, "cmd=get key=card0\n"),
        "cmd=get_result rc=0 value=AB01\n"
    );
}

/// With `forward_names`, name requests become `Output::Name` and the
/// launcher's answer (or failure) reaches the rank.
#[test]
fn forwarded_name_requests_wait_for_the_launcher() {
    let (mut s, ns) = three_rank_session();
    s.server.forward_names(true);
    let out = s.io(1, "cmd=publish_name service=svc port=p#1\n");
    assert_eq!(
        out,
        vec![Output::Name {
            conn: 1,
            ns,
            rank: Some(0),
            request: NameRequest::Publish {
                service: "svc".into(),
                port: "p#1".into()
            },
        }]
    );
    // One request out at a time per connection.
    assert_eq!(
        s.ask(1, "cmd=lookup_name service=svc\n"),
        "cmd=lookup_result rc=-1 msg=request_already_pending\n"
    );
    assert!(s
        .ask(1, "mcmd=spawn\nnprocs=1\nexecname=a\nendcmd\n")
        .contains("rc=-1 msg=name_request_pending"));
    let mut out = Vec::new();
    s.server
        .name_done(1, Ok(Message::PublishResult { rc: 0, msg: None }), &mut out);
    assert_eq!(sends(&out), vec![(1, "cmd=publish_result rc=0\n".into())]);
    // Nothing pending: ignored.
    out.clear();
    s.server
        .name_done(1, Ok(Message::PublishResult { rc: 0, msg: None }), &mut out);
    assert!(out.is_empty());
    // The name server's refusal is passed on as it is.
    assert_eq!(s.io(2, "cmd=lookup_name service=zz\n").len(), 1);
    let refusal = Message::error_reply(Some("lookup_name"), 1, "service_not_found");
    s.server.name_done(2, Ok(refusal), &mut out);
    assert_eq!(
        sends(&out),
        vec![(2, "cmd=lookup_result rc=1 msg=service_not_found\n".into())]
    );
    // A wrong answer from the name server, and an unreachable name server.
    for (result, line) in [
        (
            Ok(Message::PutResult { rc: 0, msg: None }),
            "cmd=unpublish_result rc=-1 msg=name_server_sent_an_unexpected_answer\n",
        ),
        (
            Err("name_server_unreachable".to_string()),
            "cmd=unpublish_result rc=1 msg=name_server_unreachable\n",
        ),
    ] {
        out.clear();
        assert_eq!(s.io(3, "cmd=unpublish_name service=svc\n").len(), 1);
        s.server.name_done(3, result, &mut out);
        assert_eq!(sends(&out), vec![(3, line.to_string())]);
    }
    // A successful lookup must carry a port.
    out.clear();
    assert_eq!(s.io(2, "cmd=lookup_name service=svc\n").len(), 1);
    let portless = Message::LookupResult {
        rc: 0,
        port: None,
        msg: None,
    };
    s.server.name_done(2, Ok(portless), &mut out);
    assert!(sends(&out)[0].1.starts_with("cmd=lookup_result rc=-1"));
    // A connection that goes away forgets its request.
    assert_eq!(s.io(2, "cmd=lookup_name service=svc\n").len(), 1);
    s.server.detach(2);
    out.clear();
    s.server.name_done(2, Err("late".to_string()), &mut out);
    assert!(out.is_empty());
    // Without forwarding, the server's own table answers again.
    s.server.forward_names(false);
    assert_eq!(
        s.ask(1, "cmd=lookup_name service=svc\n"),
        "cmd=lookup_result rc=1 msg=service_not_found\n"
    );
}

/// A spawn of several commands gives each rank its command's appnum.
#[test]
fn appnum_per_rank() {
    let mut server = Server::new();
    let mut sp = spec("spawned", &[0, 0, 0]);
    sp.appnum_of_rank = vec![0, 1, 1];
    let ns = server.create_namespace(sp).unwrap();
    let mut s = Session { server };
    for rank in 0..3u32 {
        s.server.attach(u64::from(rank) + 1, ns, rank);
        let want = if rank == 0 { 0 } else { 1 };
        assert_eq!(
            s.ask(u64::from(rank) + 1, "cmd=get_appnum\n"),
            format!("cmd=appnum appnum={want}\n")
        );
    }
    assert_eq!(
        s.ask(1, "cmd=get key=PMI_process_mapping\n"),
        "cmd=get_result rc=0 value=(vector,(0,1,3))\n"
    );
    let mut bad = spec("bad", &[0, 0]);
    bad.appnum_of_rank = vec![0];
    assert!(s.server.create_namespace(bad).is_err());
}

#[test]
fn barrier_survives_detach_and_reattach() {
    let (mut s, ns) = three_rank_session();
    assert!(s.io(1, "cmd=barrier_in\n").is_empty());
    s.server.detach(1);
    // Bytes from a detached connection close it.
    assert!(matches!(
        s.io(1, "cmd=get_maxes\n").as_slice(),
        [Output::Close { conn: 1, .. }]
    ));
    assert!(s.io(2, "cmd=barrier_in\n").is_empty());
    let out = s.io(3, "cmd=barrier_in\n");
    // Rank 0 stays counted but is no longer answered.
    assert_eq!(
        sends(&out),
        vec![
            (2, "cmd=barrier_out\n".into()),
            (3, "cmd=barrier_out\n".into())
        ]
    );
    s.server.attach(7, ns, 0);
    assert_eq!(s.server.conn_rank(7), Some((ns, 0)));
}

#[test]
fn group_barriers_and_version_checks() {
    let (mut s, _) = three_rank_session();
    // NODE barrier on node 0 (ranks 0 and 1) with a tag.
    assert!(s.io(1, "cmd=barrier_in group=NODE:5\n").is_empty());
    let out = s.io(2, "cmd=barrier_in group=NODE:5\n");
    assert_eq!(
        sends(&out),
        vec![
            (1, "cmd=barrier_out tag=5\n".into()),
            (2, "cmd=barrier_out tag=5\n".into())
        ]
    );
    // Rank 2 is alone on node 1.
    assert_eq!(
        s.ask(3, "cmd=barrier_in group=NODE:5\n"),
        "cmd=barrier_out tag=5\n"
    );
    assert_eq!(
        s.ask(3, "cmd=barrier_in group=0,1:1\n"),
        "cmd=barrier_out rc=1 msg=caller_not_in_barrier_group\n"
    );
    assert_eq!(
        s.ask(1, "cmd=init pmi_version=3 pmi_subversion=0\n"),
        "cmd=response_to_init rc=-1 pmi_version=1 pmi_subversion=2 \
         msg=unsupported_pmi_version_this_server_speaks_PMI-1_and_PMI-2\n"
    );
    // Responses sent by a client are answered with cmd=error.
    assert_eq!(
        s.ask(1, "cmd=barrier_out\n"),
        "cmd=error rc=-1 msg=unexpected_barrier_out_from_a_client\n"
    );
}

#[test]
fn port_mode_initack() {
    let mut server = Server::new();
    let ns = server.create_namespace(spec("job", &[0, 1])).unwrap();
    server.attach_unidentified(10, ns);
    server.attach_unidentified(11, ns);
    server.attach_unidentified(12, ns);
    let mut s = Session { server };
    // Rank-free commands work before initack, rank-bound ones do not.
    assert_eq!(
        s.ask(10, "cmd=get_maxes\n"),
        "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n"
    );
    assert_eq!(
        s.ask(10, "cmd=barrier_in\n"),
        "cmd=barrier_out rc=-1 msg=initack_required_before_barrier\n"
    );
    assert_eq!(
        s.ask(10, "cmd=initack pmiid=2\n"),
        "cmd=initack rc=-1 msg=pmiid_out_of_range\n"
    );
    assert_eq!(
        s.ask(10, "cmd=initack pmiid=-1\n"),
        "cmd=initack rc=-1 msg=pmiid_out_of_range\n"
    );
    assert_eq!(
        s.ask(10, "cmd=initack pmiid=1\n"),
        "cmd=initack\ncmd=set size=2\ncmd=set rank=1\ncmd=set debug=0\n"
    );
    assert_eq!(s.server.conn_rank(10), Some((ns, 1)));
    assert_eq!(
        s.ask(11, "cmd=initack pmiid=1\n"),
        "cmd=initack rc=-1 msg=pmiid_already_connected\n"
    );
    assert_eq!(
        s.ask(10, "cmd=initack pmiid=0\n"),
        "cmd=initack rc=-1 msg=pmiid_does_not_match_this_connection\n"
    );
    assert!(s
        .ask(11, "cmd=initack pmiid=0\n")
        .starts_with("cmd=initack\n"));
    // Abort before initack still reaches the launcher.
    assert_eq!(
        s.io(12, "cmd=abort exitcode=2\n"),
        vec![Output::Abort {
            ns,
            rank: None,
            exit_code: 2,
            message: None
        }]
    );
}

#[test]
fn port_connections_are_served_nothing_before_they_authenticate() {
    let mut server = Server::new();
    let ns = server.create_namespace(spec("rivet_9_0", &[0, 0])).unwrap();
    server.require_port_auth(
        ns,
        PortAuth {
            secret: "f00d".into(),
            ids: vec![1234567, 42],
        },
    );
    for conn in 20..=26 {
        server.attach_unidentified(conn, ns);
    }
    let mut s = Session { server };
    let closed = |out: &[Output], conn: ConnId| {
        out.iter()
            .any(|o| matches!(o, Output::Close { conn: c, .. } if *c == conn))
    };
    // A stranger's abort, query or garbage: the connection is closed, no
    // abort reaches the launcher, and nothing is answered.
    for (conn, line) in [
        (20, "cmd=abort exitcode=9\n"),
        (21, "cmd=get_maxes\n"),
        (22, "cmd=abort exitcode=x\n"),
    ] {
        let out = s.io(conn, line);
        assert!(closed(&out, conn), "{line}: {out:?}");
        assert!(sends(&out).is_empty(), "{line}: {out:?}");
        assert!(
            !out.iter().any(|o| matches!(o, Output::Abort { .. })),
            "{line}: {out:?}"
        );
        assert_eq!(s.server.conn_rank(conn), None);
        // Whatever it sends later only closes it again.
        let later = s.io(conn, "cmd=abort exitcode=3\n");
        assert!(
            later.iter().all(|o| matches!(o, Output::Close { .. })),
            "{later:?}"
        );
    }
    // Ranks as ids (the old PMI_ID), a wrong secret, an unknown id: refused.
    for (conn, line, why) in [
        (23, "cmd=initack pmiid=0\n", "unknown_pmiid"),
        (24, "cmd=initack pmiid=42 secret=beef\n", "wrong_secret"),
    ] {
        let out = s.io(conn, line);
        assert_eq!(
            sends(&out),
            [(conn, format!("cmd=initack rc=-1 msg={why}\n"))],
            "{line}"
        );
        assert!(closed(&out, conn), "{line}");
    }
    // The right id, with the secret (Rivet) or without it (MPICH), once.
    assert_eq!(
        s.ask(25, "cmd=initack pmiid=42 secret=f00d\n"),
        "cmd=initack\ncmd=set size=2\ncmd=set rank=1\ncmd=set debug=0\n"
    );
    assert_eq!(
        s.ask(25, "cmd=get_maxes\n"),
        "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n"
    );
    let out = s.io(26, "cmd=initack pmiid=42\n");
    assert_eq!(
        sends(&out),
        [(26, "cmd=initack rc=-1 msg=pmiid_already_used\n".to_string())]
    );
    s.server.attach_unidentified(27, ns);
    assert_eq!(
        s.ask(27, "cmd=initack pmiid=1234567\n"),
        "cmd=initack\ncmd=set size=2\ncmd=set rank=0\ncmd=set debug=0\n"
    );
    // An identified rank's abort names it.
    assert_eq!(
        s.io(27, "cmd=abort exitcode=2\n"),
        vec![Output::Abort {
            ns,
            rank: Some(0),
            exit_code: 2,
            message: None
        }]
    );
}

#[test]
fn namespaces_are_validated_and_shared_for_gets() {
    let mut server = Server::new();
    let parent = server.create_namespace(spec("parent", &[0])).unwrap();
    let child = server.create_namespace(spec("child", &[0, 0])).unwrap();
    assert_eq!(server.namespace_id("child"), Some(child));
    let bad = |f: &dyn Fn(&mut NamespaceSpec)| {
        let mut sp = spec("x", &[0, 0]);
        f(&mut sp);
        sp
    };
    for sp in [
        spec("parent", &[0]),
        spec("", &[0]),
        spec("has space", &[0]),
        bad(&|s| s.size = 3),
        bad(&|s| s.size = 0),
        bad(&|s| s.name = "n".repeat(257)),
        bad(&|s| s.attributes.push(("PMI_big".into(), "v".repeat(1000)))),
        bad(&|s| s.attributes.push(("PMI_nl".into(), "a\nb".into()))),
        bad(&|s| s.preput.push(("k".repeat(65), "v".into()))),
    ] {
        assert!(matches!(
            server.create_namespace(sp),
            Err(Error::InvalidNamespace { .. })
        ));
    }
    // Unknown namespace ids never panic.
    assert_eq!(server.namespace_name(42), "");
    server.set_attribute(42, "PMI_a", "b");
    assert!(server.try_set_attribute(42, "PMI_a", "b").is_err());
    assert!(server
        .try_set_attribute(child, "PMI_a", &"v".repeat(2000))
        .is_err());
    server.set_attribute(child, "PMI_topo_node", "3");
    let mut s = Session { server };
    s.server.attach(1, parent, 0);
    s.server.attach(2, child, 1);
    assert_eq!(
        s.ask(1, "cmd=put kvsname=parent key=port value=P\n"),
        "cmd=put_result rc=0\n"
    );
    assert_eq!(
        s.ask(2, "cmd=get kvsname=parent key=port\n"),
        "cmd=get_result rc=0 value=P\n"
    );
    assert_eq!(
        s.ask(2, "cmd=get key=PMI_topo_node\n"),
        "cmd=get_result rc=0 value=3\n"
    );
    assert_eq!(
        s.ask(2, "cmd=get key=PMI_process_mapping\n"),
        "cmd=get_result rc=0 value=(vector,(0,1,2))\n"
    );
    // Attaching to an unknown namespace: every query is answered with an error.
    s.server.attach(3, 77, 0);
    assert_eq!(
        s.ask(3, "cmd=get key=a\n"),
        "cmd=get_result rc=-1 msg=unknown_namespace\n"
    );
}

#[test]
fn unexpressible_mapping_is_a_miss_not_an_empty_value() {
    let nodes: Vec<u32> = (0..3000u32).map(|r| (r * r / 7) % 97).collect();
    let mut server = Server::new();
    let ns = server.create_namespace(spec("big", &nodes)).unwrap();
    server.attach(1, ns, 0);
    let mut s = Session { server };
    assert_eq!(
        s.ask(1, "cmd=get key=PMI_process_mapping\n"),
        "cmd=get_result rc=1 msg=key_not_found\n"
    );
}

#[test]
fn random_bytes_never_panic_the_server() {
    let (mut s, ns) = three_rank_session();
    s.server.attach_unidentified(9, ns);
    let mut x: u64 = 0xDEADBEEF;
    let pieces: [&[u8]; 19] = [
        b"cmd=",
        b"mcmd=spawn\n",
        b"endcmd\n",
        b"barrier_in",
        b"\n",
        b" key=",
        b"initack pmiid=1",
        b"put kvsname=rivet_1_0 value=",
        b"get",
        b"\xff",
        b"\x00",
        b"totspawns=2\nspawnssofar=",
        b"lookup_name service=s\n",
        b"publish_name service=s port=p\n",
        b"group_connect procs=rivet_1_0:* ctx=1 card=-\n",
        b"group_connect procs=rivet_1_0:0,rivet_1_0:2 flags=optional ctx=2 card=",
        b"group_ready op=1\n",
        b"group_disconnect group=rivet_1_0_g1\n",
        b"group_connect procs=rivet_1_0:1,x:y:z:1 ctx=9 card=c\n",
    ];
    for _ in 0..5000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let conn = 1 + x % 4;
        let conn = if conn == 4 { 9 } else { conn };
        let mut bytes = Vec::new();
        for i in 0..(x >> 50) % 6 {
            bytes.extend_from_slice(pieces[((x >> (i * 4)) % pieces.len() as u64) as usize]);
        }
        let mut out = Vec::new();
        s.server.receive(conn, &bytes, &mut out);
        if out.iter().any(|o| matches!(o, Output::Close { .. })) {
            if conn == 9 {
                s.server.attach_unidentified(9, ns);
            } else {
                s.server.attach(conn, ns, conn as u32 - 1);
            }
        }
        if x % 97 == 0 {
            s.server.spawn_done(conn, Ok(spawned(vec![1])), &mut out);
        }
        if x % 89 == 0 {
            s.server.forward_names(x % 2 == 0);
            s.server.name_done(conn, Err("x".into()), &mut out);
        }
        if x % 1013 == 0 {
            s.server.process_ended(ns, (x % 4) as u32, &mut out);
        }
    }
}

/// A rank putting keys in a loop fills its namespace's KVS up to the cap
/// and then gets a clear error answer; overwriting a key still works, the
/// connection goes on, and the other ranks read what is there.
#[test]
fn a_full_kvs_answers_an_error_and_the_job_goes_on() {
    let (mut s, ns) = three_rank_session();
    let cap = max_entries(3);
    // The preput pair is an entry too.
    let mut batch = String::new();
    for i in 0..cap - 1 {
        batch.push_str(&format!("cmd=put kvsname=rivet_1_0 key=k{i} value=v{i}\n"));
    }
    let answers = s.ask(1, &batch);
    assert_eq!(answers.matches("cmd=put_result rc=0\n").count(), cap - 1);
    assert_eq!(
        s.ask(1, "cmd=put kvsname=rivet_1_0 key=one_more value=x\n"),
        "cmd=put_result rc=1 msg=kvs_full\n"
    );
    assert_eq!(
        s.ask(2, "cmd=put kvsname=rivet_1_0 key=k7 value=again\n"),
        "cmd=put_result rc=0\n",
        "an overwrite is not a new entry"
    );
    assert_eq!(
        s.ask(3, "cmd=get kvsname=rivet_1_0 key=k7\n"),
        "cmd=get_result rc=0 value=again\n"
    );
    assert!(
        s.server.conn_rank(1).is_some(),
        "the putter stays connected"
    );
    let _ = ns;
}

/// Names asked for outside PMI-1 (rivetrun's PMIx server) share the PMI-1
/// table and its rule: only the publisher may unpublish.
#[test]
fn names_from_pmix_share_the_pmi1_table_and_its_owner_rule() {
    let (mut s, ns) = three_rank_session();
    let publish = |service: &str, port: &str| NameRequest::Publish {
        service: service.into(),
        port: port.into(),
    };
    let lookup = |service: &str| NameRequest::Lookup {
        service: service.into(),
    };
    let unpublish = |service: &str| NameRequest::Unpublish {
        service: service.into(),
    };
    // Rank 0 publishes over PMIx; rank 2 finds it over PMI-1.
    assert_eq!(
        s.server.answer_name(ns, 0, &publish("svc", "p#0")),
        Message::PublishResult { rc: 0, msg: None }
    );
    assert_eq!(
        s.ask(3, "cmd=lookup_name service=svc\n"),
        "cmd=lookup_result rc=0 port=p#0\n"
    );
    assert_eq!(
        s.server.name_publisher("svc"),
        Some(("rivet_1_0".to_string(), 0))
    );
    // Neither rank 1 over PMIx nor rank 2 over PMI-1 may take it away.
    assert_eq!(
        s.server.answer_name(ns, 1, &unpublish("svc")).status(),
        Some((1, Some("not_the_publisher")))
    );
    assert_eq!(
        s.ask(3, "cmd=unpublish_name service=svc\n"),
        "cmd=unpublish_result rc=1 msg=not_the_publisher\n"
    );
    // A name rank 1 publishes over PMI-1 is found over PMIx, and goes with
    // rank 1's unpublish-all.
    assert_eq!(
        s.ask(2, "cmd=publish_name service=other port=p#1\n"),
        "cmd=publish_result rc=0\n"
    );
    assert_eq!(
        s.server.answer_name(ns, 0, &lookup("other")),
        Message::LookupResult {
            rc: 0,
            port: Some("p#1".into()),
            msg: None
        }
    );
    assert_eq!(s.server.unpublish_names_of(ns, 1), 1);
    assert_eq!(s.server.name_publisher("other"), None);
    assert_eq!(
        s.server.answer_name(ns, 0, &unpublish("svc")),
        Message::UnpublishResult { rc: 0, msg: None }
    );
    assert_eq!(
        s.server.answer_name(ns, 2, &lookup("svc")).status(),
        Some((1, Some("service_not_found")))
    );
}

/// A spawn that started job `kids` with these codes.
fn spawned(errcodes: Vec<i32>) -> Spawned {
    Spawned {
        jobid: "kids".into(),
        errcodes,
    }
}
