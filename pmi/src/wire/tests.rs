//! Table-driven tests of the codec: quirks real peers need, spawn blocks,
//! malformed input and limits.

use super::*;
use crate::error::Error;

/// A predicate on the expected error.
type Check = fn(&Error) -> bool;

fn s(x: &str) -> String {
    x.to_string()
}

fn spawn_example() -> SpawnRequest {
    SpawnRequest {
        commands: vec![
            SpawnCommand {
                execname: s("./child"),
                nprocs: 4,
                args: vec![s("foo"), s("bar baz")],
                info: vec![(s("wdir"), s("/tmp"))],
            },
            SpawnCommand {
                execname: s("/bin/other prog"),
                nprocs: 1,
                args: vec![],
                info: vec![],
            },
        ],
        preput: vec![(s("PARENT_ROOT_PORT_NAME"), s("tag#0$port#1$"))],
    }
}

#[test]
fn multi_segment_spawn_round_trips() {
    let req = spawn_example();
    let bytes = Message::Spawn(req.clone()).encode().unwrap();
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.contains("execname=/bin/other prog\n"));
    assert!(text.contains("arg2=bar baz\n"));
    assert_eq!(text.matches("mcmd=spawn\n").count(), 2);
    assert_eq!(text.matches("preput_num=").count(), 1);
    assert_eq!(Message::parse(&text).unwrap(), Message::Spawn(req));
}

/// What real peers send, and what it must parse to.
#[test]
fn tolerant_parsing_table() {
    use Message as M;
    let cases: Vec<(&str, Message)> = vec![
        // Hydra 4.0.2 puts rc last.
        (
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0",
            M::InitResponse {
                rc: 0,
                version: 1,
                subversion: 1,
                msg: None,
            },
        ),
        // Old Hydra replies with msg=success.
        (
            "cmd=get_result rc=0 msg=success value=(vector,(0,1,1))",
            M::GetResult {
                rc: 0,
                value: Some(s("(vector,(0,1,1))")),
                msg: Some(s("success")),
            },
        ),
        (
            "cmd=put_result rc=0 msg=success",
            M::PutResult {
                rc: 0,
                msg: Some(s("success")),
            },
        ),
        // Hydra 4.0.2's miss: value=unknown is not a value.
        (
            "cmd=get_result rc=-1 msg=key_x_not_found value=unknown",
            M::GetResult {
                rc: -1,
                value: None,
                msg: Some(s("key_x_not_found")),
            },
        ),
        // Hydra's publish/lookup replies carry info=ok and rc in the middle.
        (
            "cmd=lookup_result port=p1 info=ok rc=0 msg=success",
            M::LookupResult {
                rc: 0,
                port: Some(s("p1")),
                msg: Some(s("success")),
            },
        ),
        (
            "cmd=publish_result info=ok rc=1 msg=key_already_present",
            M::PublishResult {
                rc: 1,
                msg: Some(s("key_already_present")),
            },
        ),
        // Missing rc counts as 0; extra whitespace and unknown keys ignored.
        (
            "  cmd=get_result   value=v  foo=bar\r",
            M::GetResult {
                rc: 0,
                value: Some(s("v")),
                msg: None,
            },
        ),
        (
            "cmd=barrier_out",
            M::BarrierOut {
                rc: 0,
                tag: None,
                msg: None,
            },
        ),
        // found=FALSE means not found even with rc=0; TRUE keeps the value.
        (
            "cmd=get_result rc=0 found=FALSE",
            M::GetResult {
                rc: 0,
                value: None,
                msg: None,
            },
        ),
        (
            "cmd=get_result rc=0 found=TRUE value=x",
            M::GetResult {
                rc: 0,
                value: Some(s("x")),
                msg: None,
            },
        ),
        // Tuples in any order, cmd not first.
        (
            "key=a cmd=get",
            M::Get {
                kvsname: None,
                key: s("a"),
            },
        ),
        // Escapes are undone.
        (
            "cmd=put kvsname=k key=a value=x\\ y\\\\z",
            M::Put {
                kvsname: s("k"),
                key: s("a"),
                value: s("x y\\z"),
            },
        ),
        // Empty value.
        (
            "cmd=put kvsname=k key=a value=",
            M::Put {
                kvsname: s("k"),
                key: s("a"),
                value: s(""),
            },
        ),
        // v2-style errmsg is read as msg.
        (
            "cmd=put_result rc=2 errmsg=bad",
            M::PutResult {
                rc: 2,
                msg: Some(s("bad")),
            },
        ),
        // abort: exitcode defaults to 1, message optional.
        (
            "cmd=abort",
            M::Abort {
                exitcode: 1,
                message: None,
            },
        ),
        // Errors may leave out payload fields.
        (
            "cmd=maxes rc=-1 msg=no",
            M::Maxes {
                rc: -1,
                kvsname_max: 0,
                keylen_max: 0,
                vallen_max: 0,
                msg: Some(s("no")),
            },
        ),
        // Hydra's initack line may carry more fields in newer versions.
        (
            "cmd=initack rc=0 rank=1 size=2",
            M::InitAckResponse { rc: 0, msg: None },
        ),
        (
            "cmd=set rank=1",
            M::Set {
                key: s("rank"),
                value: s("1"),
            },
        ),
        (
            "cmd=spawn_result rc=0 errcodes=",
            M::SpawnResult {
                rc: 0,
                errcodes: vec![],
                msg: None,
            },
        ),
    ];
    for (line, want) in cases {
        assert_eq!(
            Message::parse(line).unwrap_or_else(|e| panic!("{line:?}: {e}")),
            want,
            "{line:?}"
        );
    }
}

#[test]
fn spawn_quirks_table() {
    let old_order = "mcmd=spawn\nnprocs=2\nexecname=./a\ntotspawns=1\nspawnssofar=1\n\
                     arg2=two words\narg1=one\nargcnt=2\npreput_num=0\ninfonum=1\n\
                     info_val_0=/tmp\ninfo_key_0=wdir\nunknown=x\nendcmd\n";
    let want = SpawnRequest {
        commands: vec![SpawnCommand {
            execname: s("./a"),
            nprocs: 2,
            args: vec![s("one"), s("two words")],
            info: vec![(s("wdir"), s("/tmp"))],
        }],
        preput: vec![],
    };
    assert_eq!(Message::parse(old_order).unwrap(), Message::Spawn(want));

    // No argcnt at all: args inferred; backslash unescaped; = kept in value.
    let no_argcnt = "mcmd=spawn\nnprocs=1\nexecname=x\narg1=a=b\narg2=c\\\\d\nendcmd\n";
    match Message::parse(no_argcnt).unwrap() {
        Message::Spawn(r) => assert_eq!(r.commands[0].args, vec![s("a=b"), s("c\\d")]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_lines_table() {
    let cases: Vec<(&str, Check)> = vec![
        ("garbage here", |e| matches!(e, Error::MissingCmd { .. })),
        ("cmd=", |e| matches!(e, Error::MissingCmd { .. })),
        ("cmd", |e| matches!(e, Error::MissingCmd { .. })),
        (
            "cmd=frobnicate x=1",
            |e| matches!(e, Error::UnknownCommand { cmd } if cmd == "frobnicate"),
        ),
        ("cmd=init pmi_version=x pmi_subversion=1", |e| {
            matches!(
                e,
                Error::BadNumber {
                    field: "pmi_version",
                    ..
                }
            )
        }),
        ("cmd=init pmi_version=1", |e| {
            matches!(
                e,
                Error::MissingField {
                    field: "pmi_subversion",
                    ..
                }
            )
        }),
        ("cmd=get kvsname=k", |e| {
            matches!(e, Error::MissingField { field: "key", .. })
        }),
        ("cmd=put kvsname=k key=a", |e| {
            matches!(e, Error::MissingField { field: "value", .. })
        }),
        ("cmd=put kvsname=k key= value=1", |e| {
            matches!(e, Error::Malformed { .. })
        }),
        ("cmd=abort exitcode=abc", |e| {
            matches!(
                e,
                Error::BadNumber {
                    field: "exitcode",
                    ..
                }
            )
        }),
        ("cmd=maxes kvsname_max=-1 keylen_max=1 vallen_max=1", |e| {
            matches!(
                e,
                Error::BadNumber {
                    field: "kvsname_max",
                    ..
                }
            )
        }),
        ("cmd=maxes", |e| matches!(e, Error::MissingField { .. })),
        ("cmd=spawn_result rc=0 errcodes=1,x", |e| {
            matches!(
                e,
                Error::BadNumber {
                    field: "errcodes",
                    ..
                }
            )
        }),
        ("cmd=put kvsname=k =v", |e| {
            matches!(e, Error::Malformed { .. })
        }),
        ("cmd=set", |e| matches!(e, Error::MissingField { .. })),
        // Group connect: every field checked.
        ("cmd=group_connect ctx=1 card=-", |e| {
            matches!(e, Error::MissingField { field: "procs", .. })
        }),
        ("cmd=group_connect procs= ctx=1 card=-", |e| {
            matches!(e, Error::Malformed { .. })
        }),
        ("cmd=group_connect procs=ns:0,,ns:1 ctx=1 card=-", |e| {
            matches!(e, Error::Malformed { .. })
        }),
        ("cmd=group_connect procs=a:b:c:0 ctx=1 card=-", |e| {
            matches!(e, Error::Malformed { .. })
        }),
        ("cmd=group_connect procs=ns:x ctx=1 card=-", |e| {
            matches!(e, Error::Malformed { .. })
        }),
        ("cmd=group_connect procs=ns:0 card=-", |e| {
            matches!(e, Error::MissingField { field: "ctx", .. })
        }),
        ("cmd=group_connect procs=ns:0 ctx=-1 card=-", |e| {
            matches!(e, Error::BadNumber { field: "ctx", .. })
        }),
        ("cmd=group_connect procs=ns:0 ctx=1", |e| {
            matches!(e, Error::MissingField { field: "card", .. })
        }),
        (
            "cmd=group_connect procs=ns:0 ctx=1 card=- flags=fast",
            |e| matches!(e, Error::Malformed { .. }),
        ),
        ("cmd=group_connect procs=ns:0 ctx=1 card=- id=", |e| {
            matches!(e, Error::Malformed { .. })
        }),
        ("cmd=group_ready", |e| {
            matches!(e, Error::MissingField { field: "op", .. })
        }),
        ("cmd=group_ready op=seven", |e| {
            matches!(e, Error::BadNumber { field: "op", .. })
        }),
        ("cmd=group_disconnect", |e| {
            matches!(e, Error::MissingField { field: "group", .. })
        }),
        ("cmd=group_connect_result rc=0 op=1 ctx=1", |e| {
            matches!(e, Error::MissingField { field: "size", .. })
        }),
        (
            "cmd=group_connect_result rc=0 op=1 ctx=1 size=2 group=g",
            |e| matches!(e, Error::Malformed { .. }),
        ),
        (
            "cmd=group_connect_result rc=0 op=1 ctx=1 size=2 rank=0",
            |e| matches!(e, Error::Malformed { .. }),
        ),
        ("cmd=group_member proc=ns:* pgsize=2 card=-", |e| {
            matches!(e, Error::Malformed { .. })
        }),
        ("cmd=group_member proc=ns:0 card=-", |e| {
            matches!(
                e,
                Error::MissingField {
                    field: "pgsize",
                    ..
                }
            )
        }),
        ("cmd=group_event group=g event=left proc=ns:0", |e| {
            matches!(e, Error::Malformed { .. })
        }),
        ("cmd=group_event group=g event=terminated", |e| {
            matches!(e, Error::MissingField { field: "proc", .. })
        }),
    ];
    for (line, check) in cases {
        match Message::parse(line) {
            Err(e) => assert!(check(&e), "{line:?} gave {e:?}"),
            Ok(m) => panic!("{line:?} parsed as {m:?}"),
        }
    }
}

#[test]
fn limits_are_enforced_on_parse() {
    let long = |n: usize| "k".repeat(n);
    let ok_key = format!("cmd=get key={}", long(limits::MAX_KEY));
    assert!(Message::parse(&ok_key).is_ok());
    let cases = [
        format!("cmd=get key={}", long(limits::MAX_KEY + 1)),
        format!(
            "cmd=put kvsname=k key=a value={}",
            long(limits::MAX_VALUE + 1)
        ),
        format!(
            "cmd=put kvsname={} key=a value=1",
            long(limits::MAX_KVSNAME + 1)
        ),
        format!("cmd=my_kvsname kvsname={}", long(limits::MAX_KVSNAME + 1)),
        format!("cmd=get_result rc=0 value={}", long(limits::MAX_VALUE + 1)),
    ];
    for line in &cases {
        assert!(
            matches!(Message::parse(line), Err(Error::TooLong { .. })),
            "{}",
            &line[..30]
        );
    }
}

#[test]
fn malformed_spawn_table() {
    let cases = [
        "mcmd=spawn\nnprocs=1\nexecname=x\n",         // unterminated
        "mcmd=spawn\nexecname=x\nendcmd\n",           // no nprocs
        "mcmd=spawn\nnprocs=1\nendcmd\n",             // no execname
        "mcmd=spawn\nnprocs=x\nexecname=x\nendcmd\n", // bad number
        "mcmd=spawn\nnprocs=1\nexecname=x\nargcnt=2\narg1=a\nendcmd\n", // missing arg2
        "mcmd=spawn\nnprocs=1\nexecname=x\narg0=a\nendcmd\n", // args are 1-based
        "mcmd=spawn\nnprocs=1\nexecname=x\narg1=a\narg1=b\nendcmd\n", // duplicate
        "mcmd=spawn\nnprocs=1\nexecname=x\ninfo_num=1\ninfo_key_0=a\nendcmd\n", // no info_val_0
        "mcmd=spawn\nnprocs=1\nexecname=x\npreput_num=1\npreput_val_0=a\nendcmd\n",
        "mcmd=spawn\nnprocs=1\nexecname=x\ntotspawns=2\nspawnssofar=1\nendcmd\n", // one of two
        "mcmd=spawn\nnprocs=1\nexecname=x\nspawnssofar=2\nendcmd\n",              // wrong index
        "mcmd=spawn\nmcmd=spawn\nnprocs=1\nexecname=x\nendcmd\n",                 // nested
        "mcmd=frob\nendcmd\n",
        "mcmd=spawn\nnprocs=1\nexecname=x\nargcnt=4000000000\nendcmd\n",
    ];
    for text in cases {
        match Message::parse(text) {
            Err(Error::Malformed { .. }) => {}
            other => panic!("{text:?} gave {other:?}"),
        }
    }
}

#[test]
fn unencodable_and_overlong_messages_are_refused_on_write() {
    let bad = Message::Put {
        kvsname: s("k"),
        key: s("a"),
        value: s("x\ny"),
    };
    assert!(matches!(bad.encode(), Err(Error::Unencodable { .. })));
    let long = Message::Put {
        kvsname: s("k"),
        key: s("a"),
        value: "v".repeat(1000),
    };
    assert!(matches!(long.encode(), Err(Error::LineTooLong { .. })));
    // A reply of exactly 1023 bytes goes out; 1024 would break MPICH 4.0.2.
    let fit = |n| Message::GetResult {
        rc: 0,
        value: Some("v".repeat(n)),
        msg: None,
    };
    let overhead = "cmd=get_result rc=0 value=\n".len();
    assert_eq!(
        fit(limits::MAX_SEND_LINE - overhead)
            .encode()
            .unwrap()
            .len(),
        1023
    );
    assert!(matches!(
        fit(limits::MAX_SEND_LINE - overhead + 1).encode(),
        Err(Error::LineTooLong { len: 1024, .. })
    ));
    let empty = Message::Spawn(SpawnRequest::default());
    assert!(matches!(empty.encode(), Err(Error::Malformed { .. })));
}

#[test]
fn error_reply_uses_the_matching_response() {
    for (query, want) in [
        ("put", "cmd=put_result rc=1 msg=m\n"),
        ("get", "cmd=get_result rc=1 msg=m\n"),
        ("barrier_in", "cmd=barrier_out rc=1 msg=m\n"),
        ("spawn", "cmd=spawn_result rc=1 msg=m\n"),
        (
            "init",
            "cmd=response_to_init rc=1 pmi_version=1 pmi_subversion=2 msg=m\n",
        ),
        ("get_maxes", "cmd=maxes rc=1 msg=m\n"),
        ("initack", "cmd=initack rc=1 msg=m\n"),
        ("group_connect", "cmd=group_connect_result rc=1 msg=m\n"),
        ("group_ready", "cmd=group_ready_result rc=1 msg=m\n"),
        (
            "group_disconnect",
            "cmd=group_disconnect_result rc=1 msg=m\n",
        ),
        ("abort", "cmd=error rc=1 msg=m\n"),
        ("frob", "cmd=error rc=1 msg=m\n"),
    ] {
        let m = Message::error_reply(Some(query), 1, "m");
        assert_eq!(
            String::from_utf8(m.encode().unwrap()).unwrap(),
            want,
            "{query}"
        );
    }
}

#[test]
fn group_commands_pair_up_and_tolerate_bare_errors() {
    for (q, r) in [
        ("group_connect", "group_connect_result"),
        ("group_ready", "group_ready_result"),
        ("group_disconnect", "group_disconnect_result"),
    ] {
        assert_eq!(response_name(q), Some(r));
        assert_eq!(query_name(r), Some(q));
    }
    // A failed connect needs no payload; a payload after rc≠0 is ignored.
    assert_eq!(
        Message::parse("cmd=group_connect_result rc=1 msg=no group=g").unwrap(),
        Message::GroupConnectResult {
            rc: 1,
            op: 0,
            ctx: 0,
            size: 0,
            group: None,
            rank: None,
            msg: Some(s("no")),
        }
    );
    // Flags may be spelled in any order; the writer puts them in one order.
    let m =
        Message::parse("cmd=group_connect procs=b:*,a:1 flags=early_term,optional ctx=3 card=x")
            .unwrap();
    assert_eq!(
        String::from_utf8(m.encode().unwrap()).unwrap(),
        "cmd=group_connect procs=b:*,a:1 flags=optional,early_term ctx=3 card=x\n"
    );
    // A request that does not fit one line is refused before it is sent.
    let big = Message::GroupConnect {
        procs: vec![crate::group::ProcName::new("ns", 0)],
        id: None,
        flags: Default::default(),
        ctx: 0,
        card: "c".repeat(1000),
    };
    assert!(matches!(big.encode(), Err(Error::LineTooLong { .. })));
}

/// Found by the `pmi_framer` fuzz target: a `set` key is read verbatim
/// (no unescaping), but was written escaped, so a key with a backslash
/// came back with two. Now it is written verbatim, and keys no reader
/// can get back are refused.
#[test]
fn set_keys_are_written_as_they_are_read() {
    use Message as M;
    let m = M::Set {
        key: s("debug\\x"),
        value: s("a b\\c"),
    };
    let bytes = m.encode().unwrap();
    assert_eq!(bytes, b"cmd=set debug\\x=a\\ b\\\\c\n");
    assert_eq!(
        Message::parse(std::str::from_utf8(&bytes).unwrap().trim_end()).unwrap(),
        m
    );
    for key in ["", "a=b", "a b", "a\tb", "a\nb"] {
        let bad = M::Set {
            key: s(key),
            value: s("1"),
        };
        assert!(bad.encode().is_err(), "{key:?}");
    }
}
