//! The proxy's PMI loop against sockets standing in for ranks and rivetrun.

use super::*;
use rivet_pmi::server::NamespaceSpec;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// A PMI loop for ranks 0 and 1 (node 0) of a 3-rank job whose rank 2
/// is elsewhere; rivetrun is a socket this test reads.
fn node0() -> (Handle, BufReader<TcpStream>, [StdUnixStream; 2]) {
    let (pmi, rivetrun) = node0_loop();
    let ranks = [0, 1].map(|rank| {
        let (ours, theirs) = StdUnixStream::pair().unwrap();
        let said = Arc::new(Said::default());
        pmi.send(Cmd::Rank {
            rank,
            conn: theirs,
            said,
        });
        ours.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        ours
    });
    (pmi, rivetrun, ranks)
}

/// [`node0`]'s loop before any rank's `PMI_FD` is attached.
fn node0_loop() -> (Handle, BufReader<TcpStream>) {
    let mut server = Server::new();
    let ns = server
        .create_namespace(NamespaceSpec {
            name: "kvs_1".into(),
            size: 3,
            appnum_of_rank: vec![0, 1, 0],
            universe_size: 3,
            node_of_rank: vec![0, 0, 1],
            ..NamespaceSpec::default()
        })
        .unwrap();
    server.delegate_barriers(ns, 0);
    server.forward_names(true);
    crate::resources::serve(&mut server);
    server.forward_groups();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (rivetrun, _) = listener.accept().unwrap();
    rivetrun
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let (spawns, _) = mpsc::channel();
    let pmix = crate::proxy::pmix::State::new(0, "kvs_1", 3, vec![0, 1]);
    let up = Upstream::new(up);
    let pmi = start(server, ns, up, Tree::new(false, &[]), spawns, pmix).unwrap();
    (pmi, BufReader::new(rivetrun))
}

fn line(r: &mut StdUnixStream) -> String {
    let mut buf = [0u8; 512];
    let n = r.read(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn a_pmi1_and_a_pmi2_rank_fence_through_one_upstream_barrier() {
    let (pmi, mut rivetrun, [mut r0, mut r1]) = node0();
    // Rank 1 speaks PMI-2 and learns its appnum; rank 0 PMI-1.
    r1.write_all(b"cmd=init pmi_version=2 pmi_subversion=0\n")
        .unwrap();
    assert!(line(&mut r1).contains("pmi_version=2"));
    let full = rivet_pmi::wire::v2::V2Message::new("fullinit").with("pmirank", 1);
    r1.write_all(&full.encode().unwrap()).unwrap();
    let got = line(&mut r1);
    assert!(
        got.contains("rank=1;") && got.contains("appnum=1;"),
        "{got}"
    );
    r0.write_all(b"cmd=put kvsname=kvs_1 key=card0 value=a\n")
        .unwrap();
    assert!(line(&mut r0).contains("rc=0"));
    r0.write_all(b"cmd=barrier_in\n").unwrap();
    let put = rivet_pmi::wire::v2::V2Message::new("kvs-put")
        .with("key", "card1")
        .with("value", "b");
    r1.write_all(&put.encode().unwrap()).unwrap();
    assert!(line(&mut r1).contains("rc=0"));
    let fence = rivet_pmi::wire::v2::V2Message::new("kvs-fence");
    r1.write_all(&fence.encode().unwrap()).unwrap();
    // One message upstream for the node, with both puts.
    let mut up = String::new();
    rivetrun.read_line(&mut up).unwrap();
    let words = wire::recv(&mut up.as_bytes()).unwrap().unwrap();
    let mut puts = wire::pairs(&words);
    puts.sort();
    assert_eq!(words[0], b"barrier");
    assert_eq!(
        puts,
        vec![("card0".into(), "a".into()), ("card1".into(), "b".into())]
    );
    // The job's barrier_out (rank 2's put from the other node).
    let mut all = puts.clone();
    all.push(("card2".into(), "c".into()));
    pmi.send(Cmd::BarrierOut(all));
    assert_eq!(line(&mut r0), "cmd=barrier_out\n");
    assert!(line(&mut r1).contains("cmd=kvs-fence-response;rc=0;"));
    r0.write_all(b"cmd=get kvsname=kvs_1 key=card2\n").unwrap();
    assert!(line(&mut r0).contains("value=c"));
    // Names go to rivetrun, whose answer reaches the rank.
    r0.write_all(b"cmd=lookup_name service=x\n").unwrap();
    let mut up = String::new();
    rivetrun.read_line(&mut up).unwrap();
    let words = wire::recv(&mut up.as_bytes()).unwrap().unwrap();
    assert_eq!(words[0], b"name");
    assert_eq!((&words[1][..], &words[2][..]), (&b"kvs_1"[..], &b"0"[..]));
    assert!(wire::text(&words[4]).contains("cmd=lookup_name"));
    let conn: ConnId = wire::text(&words[3]).parse().unwrap();
    let answer = rivet_pmi::wire::Message::parse("cmd=lookup_result rc=0 port=p9").unwrap();
    pmi.send(Cmd::NameDone(conn, Ok(answer)));
    assert!(line(&mut r0).contains("port=p9"));
    // A group message goes to rivetrun whole; its answer comes back.
    r0.write_all(b"cmd=group_ready op=3\n").unwrap();
    let mut up = String::new();
    rivetrun.read_line(&mut up).unwrap();
    let words = wire::recv(&mut up.as_bytes()).unwrap().unwrap();
    assert_eq!(words[0], b"pmi");
    assert_eq!(wire::text(&words[4]), "cmd=group_ready op=3\n");
    let conn: ConnId = wire::text(&words[3]).parse().unwrap();
    pmi.send(Cmd::Out(conn, b"cmd=group_ready_result rc=0\n".to_vec()));
    assert_eq!(line(&mut r0), "cmd=group_ready_result rc=0\n");
}

#[test]
fn what_an_ended_rank_left_is_freed_and_what_it_released_is_not() {
    let (pmi, _rivetrun, [mut r0, _r1]) = node0();
    let dir = std::env::temp_dir().join(format!("rivet-proxy-res-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (left, kept) = (dir.join("left"), dir.join("kept"));
    for f in [&left, &kept] {
        std::fs::write(f, b"x").unwrap();
    }
    for (cmd, f) in [
        ("resource_register", &left),
        ("resource_register", &kept),
        ("resource_release", &kept),
    ] {
        let req = format!("cmd={cmd} kind=file name={}\n", f.display());
        r0.write_all(req.as_bytes()).unwrap();
        assert_eq!(line(&mut r0), format!("cmd={cmd}_result rc=0\n"));
    }
    // A registration written just before the rank ended (maybe unread).
    let last = dir.join("last");
    std::fs::write(&last, b"x").unwrap();
    let req = format!("cmd=resource_register kind=file name={}\n", last.display());
    r0.write_all(req.as_bytes()).unwrap();
    drop(r0);
    let (done, freed) = mpsc::channel();
    let who = "rank 0 (on here)".to_string();
    pmi.send(Cmd::Ended { rank: 0, who, done });
    freed.recv_timeout(Duration::from_secs(20)).unwrap();
    let (left_there, last_there, kept_there) = (left.exists(), last.exists(), kept.exists());
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!left_there, "the registered file was freed");
    assert!(!last_there, "the last registration was read and freed");
    assert!(kept_there, "the released file was left alone");
}

/// Connect to `addr`, send `bytes`; all the proxy says before it closes
/// the connection (the read is bounded: a connection left open fails).
fn refused(addr: &str, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(bytes).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got)
        .unwrap_or_else(|e| panic!("{:?} left open: {e}", String::from_utf8_lossy(bytes)));
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn the_pmi_port_admits_only_this_nodes_ranks_with_the_secret_once_then_closes() {
    // Node 0 of the 3-rank job: ranks 0 and 1 here, rank 2 elsewhere.
    let (pmi, mut rivetrun) = node0_loop();
    let opened = open_port("127.0.0.1".parse().unwrap(), 3, &[0, 1], "s3cret").unwrap();
    let (addr, ids) = (opened.addr.clone(), opened.auth.ids.clone());
    assert_eq!(opened.auth.secret, "s3cret");
    assert!(ids[0] > 0 && ids[1] > 0 && ids[2] == 0, "{ids:?}");
    // The loop's server has the gate (as `proxy::serve` sets it).
    let saids: HashMap<u32, Arc<Said>> = [0, 1].map(|r| (r, Arc::default())).into();
    let said0 = saids[&0].clone();
    pmi.send(Cmd::Port {
        opened,
        saids,
        host: "h1".into(),
    });
    // Refused: anything before initack, a wrong secret, the id of a rank
    // placed elsewhere (0: nobody's), an id never handed out.
    for (bytes, answer) in [
        (&b"cmd=barrier_in\n"[..], ""),
        (
            format!("cmd=initack pmiid={} secret=wrong\n", ids[0]).as_bytes(),
            "cmd=initack rc=-1 msg=wrong_secret\n",
        ),
        (
            b"cmd=initack pmiid=0 secret=s3cret\n",
            "cmd=initack rc=-1 msg=unknown_pmiid\n",
        ),
        (
            b"cmd=initack pmiid=12345\n",
            "cmd=initack rc=-1 msg=unknown_pmiid\n",
        ),
    ] {
        assert_eq!(
            refused(&addr, bytes),
            answer,
            "{:?}",
            String::from_utf8_lossy(bytes)
        );
    }
    // Rank 0 with the secret, then rank 1 with its id only (as MPICH).
    let mut r0 = TcpStream::connect(&addr).unwrap();
    r0.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    r0.write_all(format!("cmd=initack pmiid={} secret=s3cret\n", ids[0]).as_bytes())
        .unwrap();
    let mut r0 = BufReader::new(r0);
    let mut got = String::new();
    while !got.contains("debug") {
        r0.read_line(&mut got).unwrap();
        assert!(got.starts_with("cmd=initack\n"), "{got}");
    }
    assert!(got.contains("cmd=set rank=0\n"), "{got}");
    assert!(said0.spoke.load(Ordering::Relaxed));
    // Rank 0's id is good once only.
    let again = format!("cmd=initack pmiid={} secret=s3cret\n", ids[0]);
    assert_eq!(
        refused(&addr, again.as_bytes()),
        "cmd=initack rc=-1 msg=pmiid_already_used\n"
    );
    let mut r1 = TcpStream::connect(&addr).unwrap();
    r1.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    r1.write_all(format!("cmd=initack pmiid={}\ncmd=barrier_in\n", ids[1]).as_bytes())
        .unwrap();
    // Admitted, both are served as PMI_FD ranks: one barrier upstream.
    r0.get_mut().write_all(b"cmd=barrier_in\n").unwrap();
    let mut up = String::new();
    rivetrun.read_line(&mut up).unwrap();
    assert!(up.starts_with("barrier"), "{up}");
    pmi.send(Cmd::BarrierOut(Vec::new()));
    let mut out = String::new();
    r0.read_line(&mut out).unwrap();
    assert_eq!(out, "cmd=barrier_out\n");
    // Every rank of the node is in: the port is closed.
    let start = std::time::Instant::now();
    while TcpStream::connect(&addr).is_ok() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the port stayed open"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn strangers_waiting_unidentified_are_bounded_and_the_rest_still_served() {
    let (pmi, _rivetrun) = node0_loop();
    let opened = open_port("127.0.0.1".parse().unwrap(), 3, &[0, 1], "s3cret").unwrap();
    let addr = opened.addr.clone();
    let saids: HashMap<u32, Arc<Said>> = [0, 1].map(|r| (r, Arc::default())).into();
    pmi.send(Cmd::Port {
        opened,
        saids,
        host: "h1".into(),
    });
    // As many connections as may wait (two places are the ranks'), saying
    // nothing: each is held, unidentified.
    let cap = rivet_pmi::server::MAX_STRANGERS + 2;
    let mut idle: Vec<TcpStream> = (0..cap)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    // Each is accepted in order: the last answers before the next comes.
    let last = idle.last_mut().unwrap();
    last.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    last.write_all(b"cmd=initack pmiid=7\n").unwrap();
    let mut got = String::new();
    last.read_to_string(&mut got).unwrap();
    assert_eq!(got, "cmd=initack rc=-1 msg=unknown_pmiid\n");
    idle.pop();
    // One place is free again: one more is held, the next is closed unanswered.
    let _held = TcpStream::connect(&addr).unwrap();
    let mut extra = TcpStream::connect(&addr).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut got = Vec::new();
    extra.read_to_end(&mut got).expect("closed, not left open");
    assert!(got.is_empty());
    // The ones held are still served (and refused for their bad id).
    let first = &mut idle[0];
    first.write_all(b"cmd=initack pmiid=7\n").unwrap();
    first
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut got = String::new();
    first.read_to_string(&mut got).unwrap();
    assert_eq!(got, "cmd=initack rc=-1 msg=unknown_pmiid\n");
}
