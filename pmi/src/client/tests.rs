//! Client unit tests: singleton mode, and scripted fake servers that answer
//! the way Hydra 4.0.2 does, or misbehave.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::thread;

use super::*;
use crate::wire::SpawnCommand;

fn assert_send<T: Send>() {}

#[test]
fn client_is_send() {
    assert_send::<Client>();
}

#[test]
fn singleton_works_without_a_process_manager() {
    let mut c = Client::connect(ClientConfig::singleton()).unwrap();
    assert!(c.is_singleton());
    assert_eq!(
        (c.rank(), c.size(), c.appnum(), c.universe_size()),
        (0, 1, -1, 1)
    );
    assert!(c.kvs_name().starts_with("singleton_kvs_"));
    assert!(!c.spawned());
    assert_eq!(c.limits(), Limits::DEFAULT);
    assert_eq!(c.server_version(), None);
    c.put("card", "A B").unwrap();
    c.commit().unwrap();
    c.barrier().unwrap();
    assert_eq!(c.get("card").unwrap(), "A B");
    assert!(matches!(c.get("none"), Err(Error::KeyNotFound { .. })));
    assert!(matches!(
        c.get_from("otherkvs", "card"),
        Err(Error::KeyNotFound { .. })
    ));
    assert!(matches!(
        c.put("PMI_x", "1"),
        Err(Error::ReservedKey { .. })
    ));
    assert!(matches!(
        c.put(&"k".repeat(65), "1"),
        Err(Error::TooLong { what: "key", .. })
    ));
    assert!(matches!(
        c.put("k", &"v".repeat(1025)),
        Err(Error::TooLong { what: "value", .. })
    ));
    assert!(matches!(c.put("k", "a\nb"), Err(Error::Unencodable { .. })));
    assert_eq!(
        c.job_attribute("process_mapping").unwrap().as_deref(),
        Some("(vector,(0,1,1))")
    );
    assert_eq!(c.job_attribute("PMI_hwloc_xmlfile").unwrap(), None);
    c.publish_name("svc", "port").unwrap();
    assert!(matches!(
        c.publish_name("svc", "p2"),
        Err(Error::Server { rc: 1, .. })
    ));
    assert_eq!(c.lookup_name("svc").unwrap(), "port");
    c.unpublish_name("svc").unwrap();
    assert!(c.lookup_name("svc").is_err());
    let req = SpawnRequest {
        commands: vec![SpawnCommand {
            execname: "x".into(),
            nprocs: 1,
            ..Default::default()
        }],
        preput: vec![],
    };
    assert!(matches!(c.spawn(&req), Err(Error::NoProcessManager { .. })));
    c.abort(1, "nothing to tell").unwrap();
    c.finalize().unwrap();
}

/// Run `script` as a fake server on one end of a socketpair: for each line
/// received, send the scripted answer (`None` = close the connection).
pub(super) fn fake_server(
    script: Vec<(&'static str, Option<&'static str>)>,
) -> (UnixStream, thread::JoinHandle<Vec<String>>) {
    let (client_end, server_end) = UnixStream::pair().unwrap();
    let handle = thread::spawn(move || {
        let mut writer = server_end.try_clone().unwrap();
        let mut reader = BufReader::new(server_end);
        let mut seen = Vec::new();
        for (expect_prefix, answer) in script {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            assert!(
                line.starts_with(expect_prefix),
                "got {line:?}, expected {expect_prefix:?}"
            );
            if line.starts_with("mcmd=spawn") {
                // Read the rest of the (single-segment) block.
                while line.trim_end() != "endcmd" {
                    line.clear();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return seen;
                    }
                }
            }
            seen.push(line);
            match answer {
                Some(a) => writer.write_all(a.as_bytes()).unwrap(),
                None => return seen,
            }
        }
        seen
    });
    (client_end, handle)
}

/// Hydra 4.0.2's answers to MPICH's start-up sequence (captured with strace).
pub(super) const HYDRA_STARTUP: [(&str, Option<&str>); 5] = [
    (
        "cmd=init pmi_version=1 pmi_subversion=1\n",
        Some("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n"),
    ),
    (
        "cmd=get_maxes\n",
        Some("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n"),
    ),
    (
        "cmd=get_my_kvsname\n",
        Some("cmd=my_kvsname kvsname=kvs_4382_0_984152976_vm\n"),
    ),
    ("cmd=get_appnum\n", Some("cmd=appnum appnum=0\n")),
    (
        "cmd=get_universe_size\n",
        Some("cmd=universe_size size=-1\n"),
    ),
];

pub(super) fn connect(stream: UnixStream, rank: u32, size: u32) -> Result<Client> {
    Client::connect(ClientConfig {
        transport: Transport::Stream { stream, rank, size },
        spawned: true,
        pmi2: false,
        jobid: None,
    })
}

#[test]
fn talks_to_hydra_4_0_2() {
    let mut script = HYDRA_STARTUP.to_vec();
    script.extend([
        (
            "cmd=put kvsname=kvs_4382_0_984152976_vm key=a value=1\n",
            Some("cmd=put_result rc=0 msg=success\n"),
        ),
        (
            "cmd=get kvsname=kvs_4382_0_984152976_vm key=PMI_process_mapping\n",
            Some("cmd=get_result rc=0 msg=success value=(vector,(0,1,2))\n"),
        ),
        (
            "cmd=get kvsname=kvs_4382_0_984152976_vm key=nokey\n",
            Some("cmd=get_result rc=-1 msg=key_nokey_not_found value=unknown\n"),
        ),
        ("cmd=barrier_in\n", Some("cmd=barrier_out\n")),
        (
            "cmd=publish_name service=s port=p\n",
            Some("cmd=publish_result info=ok rc=0 msg=success\n"),
        ),
        (
            "cmd=lookup_name service=s\n",
            Some("cmd=lookup_result port=p info=ok rc=0 msg=success\n"),
        ),
        (
            "cmd=lookup_name service=z\n",
            Some("cmd=lookup_result rc=1 msg=service_not_found\n"),
        ),
        ("mcmd=spawn\n", Some("cmd=spawn_result rc=0\n")),
        ("cmd=abort exitcode=3 message=bye\\ now\n", Some("")),
        ("cmd=finalize\n", Some("cmd=finalize_ack\n")),
    ]);
    let (stream, server) = fake_server(script);
    let mut c = connect(stream, 1, 2).unwrap();
    assert_eq!((c.rank(), c.size(), c.universe_size()), (1, 2, -1));
    assert_eq!(c.kvs_name(), "kvs_4382_0_984152976_vm");
    assert_eq!(c.server_version(), Some((1, 1)));
    assert!(c.spawned());
    c.put("a", "1").unwrap();
    assert_eq!(
        c.job_attribute("process_mapping").unwrap().as_deref(),
        Some("(vector,(0,1,2))")
    );
    assert!(matches!(c.get("nokey"), Err(Error::KeyNotFound { key }) if key == "nokey"));
    c.barrier().unwrap();
    c.publish_name("s", "p").unwrap();
    assert_eq!(c.lookup_name("s").unwrap(), "p");
    match c.lookup_name("z") {
        Err(Error::Server { cmd, rc: 1, msg }) => {
            assert_eq!(cmd, "lookup_name");
            assert_eq!(msg.as_deref(), Some("service_not_found"));
        }
        other => panic!("{other:?}"),
    }
    let req = SpawnRequest {
        commands: vec![SpawnCommand {
            execname: "./a".into(),
            nprocs: 3,
            ..Default::default()
        }],
        preput: vec![],
    };
    assert_eq!(c.spawn(&req).unwrap(), vec![0, 0, 0]);
    c.abort(3, "bye now").unwrap();
    c.finalize().unwrap();
    let seen = server.join().unwrap();
    assert_eq!(seen.len(), HYDRA_STARTUP.len() + 10);
}

#[test]
fn unexpected_lines_are_errors_not_hangs() {
    let mut script = HYDRA_STARTUP.to_vec();
    script.push(("cmd=barrier_in\n", Some("cmd=put_result rc=0\n")));
    let (stream, server) = fake_server(script);
    let mut c = connect(stream, 0, 1).unwrap();
    match c.barrier() {
        Err(Error::UnexpectedReply {
            expected: "barrier_out",
            got,
        }) => {
            assert_eq!(got, "cmd=put_result rc=0")
        }
        other => panic!("{other:?}"),
    }
    drop(c);
    server.join().unwrap();

    let mut script = HYDRA_STARTUP.to_vec();
    script.push(("cmd=get ", Some("\u{1}\u{2}\n")));
    let (stream, server) = fake_server(script);
    let mut c = connect(stream, 0, 1).unwrap();
    assert!(matches!(c.get("x"), Err(Error::ControlByte { .. })));
    drop(c);
    server.join().unwrap();

    let mut script = HYDRA_STARTUP.to_vec();
    script.push(("cmd=get ", Some("cmd=nonsense\n")));
    let (stream, server) = fake_server(script);
    let mut c = connect(stream, 0, 1).unwrap();
    assert!(matches!(
        c.get("x"),
        Err(Error::UnexpectedReply {
            expected: "get_result",
            ..
        })
    ));
    drop(c);
    server.join().unwrap();
}

#[test]
fn closed_connection_and_server_errors() {
    let mut script = HYDRA_STARTUP.to_vec();
    script.push(("cmd=barrier_in\n", None));
    let (stream, server) = fake_server(script);
    let mut c = connect(stream, 0, 1).unwrap();
    assert!(matches!(c.barrier(), Err(Error::ConnectionClosed { .. })));
    server.join().unwrap();

    let (stream, server) = fake_server(vec![(
        "cmd=init",
        Some("cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n"),
    )]);
    assert!(matches!(
        connect(stream, 0, 1),
        Err(Error::VersionMismatch { version: 2, .. })
    ));
    server.join().unwrap();

    let (stream, server) = fake_server(vec![(
        "cmd=init",
        Some("cmd=response_to_init rc=-1 msg=nope\n"),
    )]);
    assert!(matches!(
        connect(stream, 0, 1),
        Err(Error::Server { rc: -1, .. })
    ));
    server.join().unwrap();

    let mut script = HYDRA_STARTUP.to_vec();
    script.push((
        "cmd=get ",
        Some("cmd=get_result rc=1 msg=unknown_kvsname\n"),
    ));
    script.push(("cmd=get ", Some("cmd=get_result rc=1\n")));
    script.push(("cmd=get ", Some("cmd=get_result rc=0 found=FALSE\n")));
    script.push(("cmd=get ", Some("cmd=get_result rc=0 value=a\\ b\n")));
    script.push(("mcmd=spawn", Some("cmd=spawn_result rc=0 errcodes=0,1\n")));
    script.push(("mcmd=spawn", Some("cmd=spawn_result rc=0 errcodes=0,5,0\n")));
    // Failed spawns: rivetrun's shape (codes and a message), Hydra's (rc only).
    script.push((
        "mcmd=spawn",
        Some("cmd=spawn_result rc=1 errcodes=0,127,127 msg=program\\ not\\ found\n"),
    ));
    script.push(("mcmd=spawn", Some("cmd=spawn_result rc=-1\n")));
    let (stream, server) = fake_server(script);
    let mut c = connect(stream, 0, 1).unwrap();
    assert!(matches!(
        c.get_from("other", "k"),
        Err(Error::Server { rc: 1, .. })
    ));
    assert!(matches!(c.get("k"), Err(Error::KeyNotFound { .. })));
    assert!(matches!(c.get("k"), Err(Error::KeyNotFound { .. })));
    assert_eq!(c.get("k").unwrap(), "a b");
    let req = SpawnRequest {
        commands: vec![SpawnCommand {
            execname: "./a".into(),
            nprocs: 3,
            ..Default::default()
        }],
        preput: vec![],
    };
    assert!(matches!(c.spawn(&req), Err(Error::UnexpectedReply { .. })));
    assert_eq!(c.spawn(&req).unwrap(), vec![0, 5, 0]);
    match c.spawn(&req) {
        Err(Error::SpawnFailed { errcodes, message }) => {
            assert_eq!(errcodes, vec![0, 127, 127]);
            assert_eq!(message, "program not found");
        }
        other => panic!("{other:?}"),
    }
    match c.spawn(&req) {
        Err(Error::SpawnFailed { errcodes, message }) => {
            assert_eq!(errcodes, vec![-1, -1, -1]);
            assert!(message.contains("rc=-1"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // Limits are checked before anything is sent.
    assert!(matches!(c.get(&"k".repeat(65)), Err(Error::TooLong { .. })));
    assert!(matches!(
        c.put("k", &"v".repeat(1000)),
        Err(Error::LineTooLong { .. })
    ));
    drop(c);
    server.join().unwrap();
}

#[test]
fn initack_handshake_reads_rank_and_size() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = thread::spawn(move || {
        let (sock, _) = listener.accept().unwrap();
        let mut w = sock.try_clone().unwrap();
        let mut r = BufReader::new(sock);
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert_eq!(line, "cmd=initack pmiid=3\n");
        w.write_all(b"cmd=initack\ncmd=set size=4\ncmd=set rank=3\ncmd=set debug=0\n")
            .unwrap();
        for (q, a) in HYDRA_STARTUP {
            line.clear();
            r.read_line(&mut line).unwrap();
            assert_eq!(line, q);
            w.write_all(a.unwrap_or_default().as_bytes()).unwrap();
        }
    });
    let c = Client::connect(ClientConfig {
        transport: Transport::Port {
            addr,
            pmiid: Some(3),
            rank: 0,
            size: 1,
        },
        spawned: false,
        pmi2: false,
        jobid: None,
    })
    .unwrap();
    assert_eq!((c.rank(), c.size()), (3, 4));
    server.join().unwrap();
}

#[test]
fn bad_pmi_fd_is_a_clear_error() {
    // A descriptor number far above anything open in the test process.
    match Client::from_fd(1_000_000, 0, 1) {
        Err(Error::Env { var: "PMI_FD", .. }) => {}
        other => panic!("{other:?}"),
    }
}
