//! Published names: forwarded to the launcher, and shared with PMIx under
//! the publisher-only unpublish rule.

use super::*;

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
