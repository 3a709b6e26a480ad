//! PMI-2 served beside PMI-1 on one server: switching, fullinit, the KVS
//! and fence shared with PMI-1 ranks, job attributes, bad input.

use super::*;
use crate::wire::v2::{V2Frame, V2Framer, V2Message};

fn server(size: u32) -> (Server, NsId) {
    let mut s = Server::new();
    let ns = s
        .create_namespace(NamespaceSpec {
            name: "job_7".into(),
            size,
            appnum: 3,
            universe_size: 16,
            node_of_rank: vec![0; size as usize],
            ..NamespaceSpec::default()
        })
        .unwrap();
    for r in 0..size {
        s.attach(u64::from(r), ns, r);
    }
    (s, ns)
}

fn feed(s: &mut Server, conn: ConnId, bytes: &[u8]) -> Vec<Output> {
    let mut out = Vec::new();
    s.receive(conn, bytes, &mut out);
    out
}

/// The PMI-2 messages sent to `conn` in `out`.
fn v2_to(out: &[Output], conn: ConnId) -> Vec<V2Message> {
    let mut f = V2Framer::new();
    let mut frames = Vec::new();
    for o in out {
        if let Output::Send { conn: c, bytes } = o {
            if *c == conn {
                f.feed(bytes, &mut frames).unwrap();
            }
        }
    }
    frames
        .into_iter()
        .map(|fr| match fr {
            V2Frame::Message(m) => m,
            V2Frame::Invalid { error, .. } => panic!("{error}"),
        })
        .collect()
}

fn ask(s: &mut Server, conn: ConnId, q: V2Message) -> V2Message {
    let out = feed(s, conn, &q.encode().unwrap());
    let mut replies = v2_to(&out, conn);
    assert_eq!(replies.len(), 1, "{q:?} → {out:?}");
    replies.remove(0)
}

fn init_v2(s: &mut Server, conn: ConnId) {
    let out = feed(s, conn, b"cmd=init pmi_version=2 pmi_subversion=0\n");
    match &out[..] {
        [Output::Send { bytes, .. }] => {
            let text = String::from_utf8_lossy(bytes);
            assert!(text.starts_with("cmd=response_to_init"), "{text}");
            assert!(
                text.contains("pmi_version=2") && text.contains("rc=0"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn pmi2_and_pmi1_ranks_share_a_job() {
    let (mut s, _) = server(2);
    init_v2(&mut s, 1);
    let r = ask(
        &mut s,
        1,
        V2Message::new("fullinit")
            .with("pmijobid", "job_7")
            .with("pmirank", 1)
            .with("threaded", "FALSE"),
    );
    assert_eq!(r.cmd, "fullinit-response");
    assert_eq!(r.rc().unwrap(), 0);
    assert_eq!(r.get("rank"), Some("1"));
    assert_eq!(r.get("size"), Some("2"));
    assert_eq!(r.get("appnum"), Some("3"));
    let r = ask(&mut s, 1, V2Message::new("job-getid"));
    assert_eq!(r.get("jobid"), Some("job_7"));
    // A put with '=' and spaces in the value (nothing escaped).
    let r = ask(
        &mut s,
        1,
        V2Message::new("kvs-put")
            .with("key", "card-1")
            .with("value", "tcp:a=b c"),
    );
    assert_eq!((r.cmd.as_str(), r.rc().unwrap()), ("kvs-put-response", 0));
    // Rank 0 speaks PMI-1.
    assert!(String::from_utf8(
        feed(&mut s, 0, b"cmd=put kvsname=job_7 key=card-0 value=x\n")[0]
            .clone()
            .bytes()
    )
    .unwrap()
    .contains("put_result"));
    // The fence completes when both arrive, each in its own dialect.
    let out = feed(
        &mut s,
        1,
        &V2Message::new("kvs-fence")
            .with("thrid", "9")
            .encode()
            .unwrap(),
    );
    assert!(out.is_empty(), "{out:?}");
    let out = feed(&mut s, 0, b"cmd=barrier_in\n");
    let to1 = v2_to(&out, 1);
    assert_eq!(to1.len(), 1);
    assert_eq!(to1[0].cmd, "kvs-fence-response");
    assert_eq!(to1[0].get("thrid"), Some("9"));
    assert!(out.iter().any(
        |o| matches!(o, Output::Send { conn: 0, bytes } if bytes.starts_with(b"cmd=barrier_out"))
    ));
    let r = ask(
        &mut s,
        1,
        V2Message::new("kvs-get")
            .with("jobid", "job_7")
            .with("srcid", -1)
            .with("key", "card-0"),
    );
    assert_eq!((r.get("found"), r.get("value")), (Some("TRUE"), Some("x")));
    let out = feed(&mut s, 0, b"cmd=get kvsname=job_7 key=card-1\n");
    let text = match &out[..] {
        [Output::Send { bytes, .. }] => String::from_utf8(bytes.clone()).unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(
        text.contains("get_result") && text.contains("tcp:a=b"),
        "{text}"
    );
    // A miss is found=FALSE with rc=0, as Slurm answers.
    let r = ask(&mut s, 1, V2Message::new("kvs-get").with("key", "nothing"));
    assert_eq!((r.rc().unwrap(), r.get("found")), (0, Some("FALSE")));
    let r = ask(&mut s, 1, V2Message::new("finalize"));
    assert_eq!(r.cmd, "finalize-response");
    assert!(s.is_finalized(0, 1));
}

trait Bytes {
    fn bytes(self) -> Vec<u8>;
}
impl Bytes for Output {
    fn bytes(self) -> Vec<u8> {
        match self {
            Output::Send { bytes, .. } => bytes,
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn job_and_node_attributes() {
    let (mut s, ns) = server(2);
    s.set_attribute(ns, "PMI_process_mapping", "(vector,(0,1,2))");
    // No init line: the first bytes are a PMI-2 prefix.
    let r = ask(&mut s, 0, V2Message::new("fullinit").with("pmirank", 0));
    assert_eq!(r.get("rank"), Some("0"));
    let r = ask(
        &mut s,
        0,
        V2Message::new("info-getjobattr").with("key", "PMI_process_mapping"),
    );
    assert_eq!(r.get("value"), Some("(vector,(0,1,2))"));
    let r = ask(
        &mut s,
        0,
        V2Message::new("info-getjobattr").with("key", "universeSize"),
    );
    assert_eq!(r.get("value"), Some("16"));
    let r = ask(
        &mut s,
        0,
        V2Message::new("info-getjobattr").with("key", "PMI_nothing"),
    );
    assert_eq!(r.get("found"), Some("FALSE"));
    let r = ask(
        &mut s,
        0,
        V2Message::new("info-putnodeattr")
            .with("key", "shm")
            .with("value", "seg"),
    );
    assert_eq!(r.rc().unwrap(), 0);
    let r = ask(
        &mut s,
        0,
        V2Message::new("info-getnodeattr").with("key", "shm"),
    );
    assert_eq!(r.get("value"), Some("seg"));
}

#[test]
fn bad_pmi2_input_is_answered_or_closed_never_a_panic() {
    let (mut s, _) = server(2);
    init_v2(&mut s, 0);
    let r = ask(&mut s, 0, V2Message::new("no-such-cmd"));
    assert_eq!(r.rc().unwrap(), -1);
    let r = ask(&mut s, 0, V2Message::new("kvs-put").with("key", "k"));
    assert!(r.errmsg().unwrap().contains("value"), "{r:?}");
    let r = ask(&mut s, 0, V2Message::new("fullinit").with("pmirank", 1));
    assert_ne!(r.rc().unwrap(), 0, "another rank's fullinit");
    let r = ask(&mut s, 0, V2Message::new("spawn"));
    assert_ne!(r.rc().unwrap(), 0);
    // A PMI-1 value PMI-2 cannot carry is an error answer, not bad framing.
    feed(&mut s, 1, b"cmd=put kvsname=job_7 key=semi value=a;b\n");
    let r = ask(&mut s, 0, V2Message::new("kvs-get").with("key", "semi"));
    assert_ne!(r.rc().unwrap(), 0);
    let body = "cmd=kvs-put;oops;";
    let r = feed(&mut s, 0, format!("{:>6}{body}", body.len()).as_bytes());
    assert_eq!(v2_to(&r, 0)[0].cmd, "kvs-put-response");
    // Abort tears the job down.
    let out = feed(
        &mut s,
        0,
        &V2Message::new("abort")
            .with("isworld", 1)
            .with("msg", "bye")
            .encode()
            .unwrap(),
    );
    assert!(
        matches!(&out[..], [Output::Abort { rank: Some(0), exit_code: 1, message: Some(m), .. }] if m == "bye")
    );
    // Garbage where a prefix should be closes the connection.
    let out = feed(&mut s, 0, b"xxxxxxcmd=finalize;");
    assert!(
        matches!(&out[..], [Output::Close { conn: 0, .. }]),
        "{out:?}"
    );
}

#[test]
fn a_port_connection_must_initack_before_pmi2() {
    let mut s = Server::new();
    let ns = s
        .create_namespace(NamespaceSpec {
            name: "job_p".into(),
            size: 1,
            node_of_rank: vec![0],
            ..NamespaceSpec::default()
        })
        .unwrap();
    s.require_port_auth(
        ns,
        PortAuth {
            secret: "s3cret".into(),
            ids: vec![1234],
        },
    );
    s.attach_unidentified(5, ns);
    let out = feed(
        &mut s,
        5,
        &V2Message::new("fullinit")
            .with("pmiid", 0)
            .encode()
            .unwrap(),
    );
    assert!(
        matches!(&out[..], [Output::Close { conn: 5, .. }]),
        "{out:?}"
    );
}

/// A spawn over PMI-2 is answered `spawn-response` with the new job's id
/// as `jobid` (MPICH's client requires it when asked for the id); a failed
/// one has no `jobid`, its message and codes instead.
#[test]
fn a_pmi2_spawn_response_names_the_new_job() {
    let (mut s, _) = server(2);
    init_v2(&mut s, 0);
    let request = crate::wire::SpawnRequest {
        commands: vec![crate::wire::SpawnCommand {
            execname: "/bin/child".into(),
            nprocs: 2,
            ..Default::default()
        }],
        preput: vec![],
    };
    let q = crate::wire::v2_spawn::spawn_query(&request).with("thrid", "t1");
    let out = feed(&mut s, 0, &q.encode().unwrap());
    assert!(
        matches!(&out[..], [Output::Spawn { conn: 0, .. }]),
        "{out:?}"
    );
    let mut out = Vec::new();
    let done = Spawned {
        jobid: "job_7_s1".into(),
        errcodes: vec![0, 0],
    };
    s.spawn_done(0, Ok(done), &mut out);
    let r = v2_to(&out, 0);
    assert_eq!(r.len(), 1, "{out:?}");
    assert_eq!(r[0].cmd, "spawn-response");
    assert_eq!(r[0].rc().unwrap(), 0);
    assert_eq!(r[0].get("jobid"), Some("job_7_s1"));
    assert_eq!(r[0].get("thrid"), Some("t1"));

    feed(&mut s, 0, &q.encode().unwrap());
    let mut out = Vec::new();
    let failure = SpawnFailure {
        errcodes: vec![0, -190],
        message: "not found".into(),
    };
    s.spawn_done(0, Err(failure), &mut out);
    let r = v2_to(&out, 0);
    assert_eq!(r[0].rc().unwrap(), 1);
    assert_eq!(r[0].get("jobid"), None);
    assert_eq!(r[0].get("errcodes"), Some("0,-190"));
    assert_eq!(r[0].errmsg(), Some("not found"));

    // PMI-1's spawn_result stays as it was: no jobid.
    let mut out = Vec::new();
    feed(
        &mut s,
        1,
        b"mcmd=spawn\nnprocs=1\nexecname=/bin/child\ntotspawns=1\nspawnssofar=1\nargcnt=0\npreput_num=0\ninfo_num=0\nendcmd\n",
    );
    s.spawn_done(
        1,
        Ok(Spawned {
            jobid: "job_7_s2".into(),
            errcodes: vec![0],
        }),
        &mut out,
    );
    match &out[..] {
        [Output::Send { conn: 1, bytes }] => {
            assert_eq!(String::from_utf8_lossy(bytes), "cmd=spawn_result rc=0\n")
        }
        other => panic!("{other:?}"),
    }
}
