//! Table-driven tests of the codec: exact bytes, round trips, quirks, and
//! malformed input.

use super::*;
use crate::error::Error;

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

/// Every message with its exact wire form as this crate writes it. The
/// query forms are MPICH's client's; the response forms are Hydra's,
/// with `rc` first.
fn exact_table() -> Vec<(Message, &'static str)> {
    use Message as M;
    vec![
        (M::Init { version: 1, subversion: 1 }, "cmd=init pmi_version=1 pmi_subversion=1\n"),
        (M::GetMaxes, "cmd=get_maxes\n"),
        (M::GetAppnum, "cmd=get_appnum\n"),
        (M::GetMyKvsname, "cmd=get_my_kvsname\n"),
        (M::GetUniverseSize, "cmd=get_universe_size\n"),
        (
            M::Put { kvsname: s("kvs_1_0"), key: s("-bcast-1-0"), value: s("2F6465") },
            "cmd=put kvsname=kvs_1_0 key=-bcast-1-0 value=2F6465\n",
        ),
        (
            M::Get { kvsname: Some(s("kvs_1_0")), key: s("PMI_process_mapping") },
            "cmd=get kvsname=kvs_1_0 key=PMI_process_mapping\n",
        ),
        (M::Get { kvsname: None, key: s("k") }, "cmd=get key=k\n"),
        (M::BarrierIn { group: None }, "cmd=barrier_in\n"),
        (M::BarrierIn { group: Some(s("WORLD:0")) }, "cmd=barrier_in group=WORLD:0\n"),
        (M::Finalize, "cmd=finalize\n"),
        (M::Abort { exitcode: 7, message: None }, "cmd=abort exitcode=7\n"),
        (
            M::Abort { exitcode: 3, message: Some(s("out of memory")) },
            "cmd=abort exitcode=3 message=out\\ of\\ memory\n",
        ),
        (
            M::PublishName { service: s("svc"), port: s("tag#0$") },
            "cmd=publish_name service=svc port=tag#0$\n",
        ),
        (M::UnpublishName { service: s("svc") }, "cmd=unpublish_name service=svc\n"),
        (M::LookupName { service: s("svc") }, "cmd=lookup_name service=svc\n"),
        (M::InitAck { pmiid: 3 }, "cmd=initack pmiid=3\n"),
        (
            M::InitResponse { rc: 0, version: 1, subversion: 2, msg: None },
            "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=2\n",
        ),
        (
            M::InitResponse { rc: -1, version: 1, subversion: 2, msg: Some(s("unsupported")) },
            "cmd=response_to_init rc=-1 pmi_version=1 pmi_subversion=2 msg=unsupported\n",
        ),
        (
            M::Maxes { rc: 0, kvsname_max: 256, keylen_max: 64, vallen_max: 1024, msg: None },
            "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n",
        ),
        (M::Appnum { rc: 0, appnum: 0, msg: None }, "cmd=appnum appnum=0\n"),
        (
            M::MyKvsname { rc: 0, kvsname: s("kvs_4382_0"), msg: None },
            "cmd=my_kvsname kvsname=kvs_4382_0\n",
        ),
        (M::UniverseSize { rc: 0, size: -1, msg: None }, "cmd=universe_size size=-1\n"),
        (M::PutResult { rc: 0, msg: None }, "cmd=put_result rc=0\n"),
        (
            M::PutResult { rc: 1, msg: Some(s("key_reserved")) },
            "cmd=put_result rc=1 msg=key_reserved\n",
        ),
        (
            M::GetResult { rc: 0, value: Some(s("(vector,(0,1,1))")), msg: None },
            "cmd=get_result rc=0 value=(vector,(0,1,1))\n",
        ),
        (
            M::GetResult { rc: 1, value: None, msg: Some(s("key_not_found")) },
            "cmd=get_result rc=1 msg=key_not_found\n",
        ),
        (M::BarrierOut { rc: 0, tag: None, msg: None }, "cmd=barrier_out\n"),
        (M::BarrierOut { rc: 0, tag: Some(5), msg: None }, "cmd=barrier_out tag=5\n"),
        (
            M::BarrierOut { rc: 1, tag: None, msg: Some(s("twice")) },
            "cmd=barrier_out rc=1 msg=twice\n",
        ),
        (M::FinalizeAck { rc: 0, msg: None }, "cmd=finalize_ack\n"),
        (M::PublishResult { rc: 0, msg: None }, "cmd=publish_result rc=0\n"),
        (
            M::PublishResult { rc: 1, msg: Some(s("key_already_present")) },
            "cmd=publish_result rc=1 msg=key_already_present\n",
        ),
        (M::UnpublishResult { rc: 0, msg: None }, "cmd=unpublish_result rc=0\n"),
        (
            M::LookupResult { rc: 0, port: Some(s("p1")), msg: None },
            "cmd=lookup_result rc=0 port=p1\n",
        ),
        (
            M::LookupResult { rc: 1, port: None, msg: Some(s("service_not_found")) },
            "cmd=lookup_result rc=1 msg=service_not_found\n",
        ),
        (M::SpawnResult { rc: 0, errcodes: vec![], msg: None }, "cmd=spawn_result rc=0\n"),
        (
            M::SpawnResult { rc: 0, errcodes: vec![0, 0, -3], msg: None },
            "cmd=spawn_result rc=0 errcodes=0,0,-3\n",
        ),
        (
            M::SpawnResult { rc: -1, errcodes: vec![], msg: Some(s("no such file")) },
            "cmd=spawn_result rc=-1 msg=no\\ such\\ file\n",
        ),
        (M::InitAckResponse { rc: 0, msg: None }, "cmd=initack\n"),
        (M::Set { key: s("size"), value: s("2") }, "cmd=set size=2\n"),
        (M::Error { rc: -1, msg: Some(s("unknown_command")) }, "cmd=error rc=-1 msg=unknown_command\n"),
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
        ("init", true), ("get_maxes", true), ("get_appnum", true), ("get_my_kvsname", true),
        ("get_universe_size", true), ("put", true), ("get", true), ("barrier_in", true),
        ("finalize", true), ("abort", true), ("publish_name", true), ("unpublish_name", true),
        ("lookup_name", true), ("spawn", true), ("initack", true), ("response_to_init", false),
        ("maxes", false), ("appnum", false), ("my_kvsname", false), ("universe_size", false),
        ("put_result", false), ("get_result", false), ("barrier_out", false),
        ("finalize_ack", false), ("publish_result", false), ("unpublish_result", false),
        ("lookup_result", false), ("spawn_result", false), ("initack", false), ("set", false),
        ("error", false),
    ] {
        assert!(cmds.contains(&(cmd, q)), "{cmd} (query={q}) missing from table");
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
            M::InitResponse { rc: 0, version: 1, subversion: 1, msg: None },
        ),
        // Old Hydra replies with msg=success.
        (
            "cmd=get_result rc=0 msg=success value=(vector,(0,1,1))",
            M::GetResult { rc: 0, value: Some(s("(vector,(0,1,1))")), msg: Some(s("success")) },
        ),
        ("cmd=put_result rc=0 msg=success", M::PutResult { rc: 0, msg: Some(s("success")) }),
        // Hydra 4.0.2's miss: value=unknown is not a value.
        (
            "cmd=get_result rc=-1 msg=key_x_not_found value=unknown",
            M::GetResult { rc: -1, value: None, msg: Some(s("key_x_not_found")) },
        ),
        // Hydra's publish/lookup replies carry info=ok and rc in the middle.
        (
            "cmd=lookup_result port=p1 info=ok rc=0 msg=success",
            M::LookupResult { rc: 0, port: Some(s("p1")), msg: Some(s("success")) },
        ),
        (
            "cmd=publish_result info=ok rc=1 msg=key_already_present",
            M::PublishResult { rc: 1, msg: Some(s("key_already_present")) },
        ),
        // Missing rc counts as 0; extra whitespace and unknown keys ignored.
        (
            "  cmd=get_result   value=v  foo=bar\r",
            M::GetResult { rc: 0, value: Some(s("v")), msg: None },
        ),
        ("cmd=barrier_out", M::BarrierOut { rc: 0, tag: None, msg: None }),
        // found=FALSE means not found even with rc=0; TRUE keeps the value.
        ("cmd=get_result rc=0 found=FALSE", M::GetResult { rc: 0, value: None, msg: None }),
        (
            "cmd=get_result rc=0 found=TRUE value=x",
            M::GetResult { rc: 0, value: Some(s("x")), msg: None },
        ),
        // Tuples in any order, cmd not first.
        ("key=a cmd=get", M::Get { kvsname: None, key: s("a") }),
        // Escapes are undone.
        (
            "cmd=put kvsname=k key=a value=x\\ y\\\\z",
            M::Put { kvsname: s("k"), key: s("a"), value: s("x y\\z") },
        ),
        // Empty value.
        ("cmd=put kvsname=k key=a value=", M::Put { kvsname: s("k"), key: s("a"), value: s("") }),
        // v2-style errmsg is read as msg.
        ("cmd=put_result rc=2 errmsg=bad", M::PutResult { rc: 2, msg: Some(s("bad")) }),
        // abort: exitcode defaults to 1, message optional.
        ("cmd=abort", M::Abort { exitcode: 1, message: None }),
        // Errors may leave out payload fields.
        (
            "cmd=maxes rc=-1 msg=no",
            M::Maxes { rc: -1, kvsname_max: 0, keylen_max: 0, vallen_max: 0, msg: Some(s("no")) },
        ),
        // Hydra's initack line may carry more fields in newer versions.
        ("cmd=initack rc=0 rank=1 size=2", M::InitAckResponse { rc: 0, msg: None }),
        ("cmd=set rank=1", M::Set { key: s("rank"), value: s("1") }),
        ("cmd=spawn_result rc=0 errcodes=", M::SpawnResult { rc: 0, errcodes: vec![], msg: None }),
    ];
    for (line, want) in cases {
        assert_eq!(Message::parse(line).unwrap_or_else(|e| panic!("{line:?}: {e}")), want, "{line:?}");
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
    let cases: Vec<(&str, fn(&Error) -> bool)> = vec![
        ("garbage here", |e| matches!(e, Error::MissingCmd { .. })),
        ("cmd=", |e| matches!(e, Error::MissingCmd { .. })),
        ("cmd", |e| matches!(e, Error::MissingCmd { .. })),
        ("cmd=frobnicate x=1", |e| matches!(e, Error::UnknownCommand { cmd } if cmd == "frobnicate")),
        ("cmd=init pmi_version=x pmi_subversion=1", |e| {
            matches!(e, Error::BadNumber { field: "pmi_version", .. })
        }),
        ("cmd=init pmi_version=1", |e| matches!(e, Error::MissingField { field: "pmi_subversion", .. })),
        ("cmd=get kvsname=k", |e| matches!(e, Error::MissingField { field: "key", .. })),
        ("cmd=put kvsname=k key=a", |e| matches!(e, Error::MissingField { field: "value", .. })),
        ("cmd=put kvsname=k key= value=1", |e| matches!(e, Error::Malformed { .. })),
        ("cmd=abort exitcode=abc", |e| matches!(e, Error::BadNumber { field: "exitcode", .. })),
        ("cmd=maxes kvsname_max=-1 keylen_max=1 vallen_max=1", |e| {
            matches!(e, Error::BadNumber { field: "kvsname_max", .. })
        }),
        ("cmd=maxes", |e| matches!(e, Error::MissingField { .. })),
        ("cmd=spawn_result rc=0 errcodes=1,x", |e| matches!(e, Error::BadNumber { field: "errcodes", .. })),
        ("cmd=put kvsname=k =v", |e| matches!(e, Error::Malformed { .. })),
        ("cmd=set", |e| matches!(e, Error::MissingField { .. })),
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
        format!("cmd=put kvsname=k key=a value={}", long(limits::MAX_VALUE + 1)),
        format!("cmd=put kvsname={} key=a value=1", long(limits::MAX_KVSNAME + 1)),
        format!("cmd=my_kvsname kvsname={}", long(limits::MAX_KVSNAME + 1)),
        format!("cmd=get_result rc=0 value={}", long(limits::MAX_VALUE + 1)),
    ];
    for line in &cases {
        assert!(matches!(Message::parse(line), Err(Error::TooLong { .. })), "{}", &line[..30]);
    }
}

#[test]
fn malformed_spawn_table() {
    let cases = [
        "mcmd=spawn\nnprocs=1\nexecname=x\n",                       // unterminated
        "mcmd=spawn\nexecname=x\nendcmd\n",                         // no nprocs
        "mcmd=spawn\nnprocs=1\nendcmd\n",                           // no execname
        "mcmd=spawn\nnprocs=x\nexecname=x\nendcmd\n",               // bad number
        "mcmd=spawn\nnprocs=1\nexecname=x\nargcnt=2\narg1=a\nendcmd\n", // missing arg2
        "mcmd=spawn\nnprocs=1\nexecname=x\narg0=a\nendcmd\n",       // args are 1-based
        "mcmd=spawn\nnprocs=1\nexecname=x\narg1=a\narg1=b\nendcmd\n", // duplicate
        "mcmd=spawn\nnprocs=1\nexecname=x\ninfo_num=1\ninfo_key_0=a\nendcmd\n", // no info_val_0
        "mcmd=spawn\nnprocs=1\nexecname=x\npreput_num=1\npreput_val_0=a\nendcmd\n",
        "mcmd=spawn\nnprocs=1\nexecname=x\ntotspawns=2\nspawnssofar=1\nendcmd\n", // one of two
        "mcmd=spawn\nnprocs=1\nexecname=x\nspawnssofar=2\nendcmd\n", // wrong index
        "mcmd=spawn\nmcmd=spawn\nnprocs=1\nexecname=x\nendcmd\n",  // nested
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
    let bad = Message::Put { kvsname: s("k"), key: s("a"), value: s("x\ny") };
    assert!(matches!(bad.encode(), Err(Error::Unencodable { .. })));
    let long = Message::Put { kvsname: s("k"), key: s("a"), value: "v".repeat(1000) };
    assert!(matches!(long.encode(), Err(Error::LineTooLong { .. })));
    // A reply of exactly 1023 bytes goes out; 1024 would break MPICH 4.0.2.
    let fit = |n| Message::GetResult { rc: 0, value: Some("v".repeat(n)), msg: None };
    let overhead = "cmd=get_result rc=0 value=\n".len();
    assert_eq!(fit(limits::MAX_SEND_LINE - overhead).encode().unwrap().len(), 1023);
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
        ("init", "cmd=response_to_init rc=1 pmi_version=1 pmi_subversion=2 msg=m\n"),
        ("get_maxes", "cmd=maxes rc=1 msg=m\n"),
        ("initack", "cmd=initack rc=1 msg=m\n"),
        ("abort", "cmd=error rc=1 msg=m\n"),
        ("frob", "cmd=error rc=1 msg=m\n"),
    ] {
        let m = Message::error_reply(Some(query), 1, "m");
        assert_eq!(String::from_utf8(m.encode().unwrap()).unwrap(), want, "{query}");
    }
}

// ---------------------------------------------------------------- framer

fn feed_all(chunks: &[&[u8]]) -> (Vec<Frame>, Result<(), Error>) {
    let mut framer = Framer::new();
    let mut frames = Vec::new();
    for c in chunks {
        if let Err(e) = framer.feed(c, &mut frames) {
            return (frames, Err(e));
        }
    }
    (frames, Ok(()))
}

#[test]
fn framer_handles_every_split_point() {
    let spawn = Message::Spawn(spawn_example()).encode().unwrap();
    let mut stream = b"cmd=init pmi_version=1 pmi_subversion=1\n\ncmd=get_maxes\r\n".to_vec();
    stream.extend_from_slice(&spawn);
    stream.extend_from_slice(b"cmd=frob\ncmd=barrier_in\n");
    for a in 0..=stream.len() {
        for b in [a, (a + 7).min(stream.len()), stream.len()] {
            let (frames, res) = feed_all(&[&stream[..a], &stream[a..b], &stream[b..]]);
            res.unwrap();
            let kinds: Vec<&str> = frames
                .iter()
                .map(|f| match f {
                    Frame::Message(m) => m.cmd(),
                    Frame::Invalid { .. } => "invalid",
                })
                .collect();
            assert_eq!(kinds, ["init", "get_maxes", "spawn", "invalid", "barrier_in"], "split {a}/{b}");
        }
    }
}

#[test]
fn framer_reports_invalid_lines_with_their_cmd() {
    let (frames, res) = feed_all(&[b"cmd=put key=a\ngarbage\nmcmd=spawn\nnprocs=1\nendcmd\n"]);
    res.unwrap();
    let cmds: Vec<Option<String>> = frames
        .iter()
        .map(|f| match f {
            Frame::Invalid { cmd, .. } => cmd.clone(),
            Frame::Message(m) => panic!("unexpected {m:?}"),
        })
        .collect();
    assert_eq!(cmds, vec![Some(s("put")), None, Some(s("spawn"))]);
}

#[test]
fn framer_rejects_garbage_streams() {
    let mut overlong = vec![b'a'; limits::MAX_LINE];
    overlong.push(b'\n');
    let exact = {
        let mut l = b"cmd=get key=".to_vec();
        l.resize(limits::MAX_LINE - 1, b'k');
        l.push(b'\n');
        l
    };
    // A 1024-byte line (newline included) is accepted...
    let (frames, res) = feed_all(&[&exact]);
    res.unwrap();
    assert_eq!(frames.len(), 1);
    // ...a longer one is not, even without its newline yet.
    let cases: Vec<(Vec<u8>, fn(&Error) -> bool)> = vec![
        (overlong.clone(), |e| matches!(e, Error::LineTooLong { .. })),
        (vec![b'x'; limits::MAX_LINE], |e| matches!(e, Error::LineTooLong { .. })),
        (b"cmd=get key=\xff\xfe\n".to_vec(), |e| matches!(e, Error::NotUtf8)),
        (b"cmd=get\0 key=a\n".to_vec(), |e| matches!(e, Error::ControlByte { byte: 0 })),
        (vec![0x16, 0x03, 0x01, 0x00], |e| matches!(e, Error::ControlByte { .. })),
    ];
    for (bytes, check) in cases {
        let (_, res) = feed_all(&[&bytes]);
        let e = res.expect_err("must be rejected");
        assert!(check(&e) && e.is_fatal_stream_error(), "{e:?}");
    }
    // An mcmd block that never ends is bounded.
    let mut framer = Framer::new();
    let mut frames = Vec::new();
    framer.feed(b"mcmd=spawn\n", &mut frames).unwrap();
    let line = format!("arg1={}\n", "x".repeat(1000));
    let mut err = None;
    for _ in 0..100 {
        if let Err(e) = framer.feed(line.as_bytes(), &mut frames) {
            err = Some(e);
            break;
        }
    }
    assert!(matches!(err, Some(Error::BlockTooLong { .. })));
    // Once broken, always broken.
    assert!(framer.feed(b"cmd=get_maxes\n", &mut frames).is_err());
}

#[test]
fn framer_yields_frames_before_garbage() {
    let (frames, res) = feed_all(&[b"cmd=get_maxes\ncmd=finalize\n\x01\x02\n"]);
    assert!(res.is_err());
    assert_eq!(frames.len(), 2);
}

#[test]
fn framer_knows_about_a_partial_message() {
    let mut framer = Framer::new();
    let mut frames = Vec::new();
    framer.feed(b"cmd=get_ma", &mut frames).unwrap();
    assert!(framer.has_partial());
    framer.feed(b"xes\nmcmd=spawn\n", &mut frames).unwrap();
    assert!(framer.has_partial(), "inside a spawn block");
    assert_eq!(frames.len(), 1);
}

/// Random bytes never panic the parser or the framer.
#[test]
fn fuzzish_random_input_never_panics() {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let alphabet = b"cmd=mcmd=spawn endcmd\nkey=value\\ =,()0123456789-_\t\r\xff\x00abc";
    for _ in 0..3000 {
        let len = (next() % 200) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
            .collect();
        let mut framer = Framer::new();
        let mut frames = Vec::new();
        let _ = framer.feed(&bytes, &mut frames);
        if let Ok(text) = std::str::from_utf8(&bytes) {
            let _ = Message::parse(text);
        }
    }
}
