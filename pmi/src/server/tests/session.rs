//! A whole PMI-1 job through the server: the three-rank scripted session,
//! appnums of a spawn, and barriers across detach and groups.

use super::*;

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
