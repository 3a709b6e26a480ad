//! Port-mode connections: the initack, and nothing served before a
//! connection authenticates.

use super::*;

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
