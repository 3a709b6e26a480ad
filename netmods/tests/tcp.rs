//! The TCP netmod between instances in this process, over loopback, for
//! both backends (io_uring skipped with a note where no ring can be made).
//! Every wait is bounded: a stuck test fails after its deadline.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use common::*;
use rivet_netmods::auth::JobKey;
use rivet_netmods::tcp::{Backend, TcpConfig, TcpNetmod};
use rivet_netmods::{peer_id, split_peer, Netmod, NetmodError, TEMP_GROUP};

fn config(backend: Backend) -> TcpConfig {
    TcpConfig {
        backend,
        ifaces: vec!["lo".into()],
        piece: 8 << 20,
        ..TcpConfig::default()
    }
}

/// `n` netmods of ranks 0..n in job `job`, or `None` (with a note) if the
/// io_uring backend cannot run here.
fn open_n(backend: Backend, job: &str, n: u64) -> Option<Vec<TcpNetmod>> {
    let procs: Vec<(&str, u64)> = (0..n).map(|r| (job, r)).collect();
    open_jobs(backend, &procs)
}

/// One netmod per `(job, rank)`, or `None` (with a note) if the io_uring
/// backend cannot run here.
fn open_jobs(backend: Backend, procs: &[(&str, u64)]) -> Option<Vec<TcpNetmod>> {
    let mut v = Vec::new();
    for &(job, rank) in procs {
        match TcpNetmod::new(config(backend), job, rank) {
            Ok(m) => {
                assert_eq!(m.backend(), backend);
                v.push(m);
            }
            Err(e) if backend == Backend::Uring && uring_missing_here(&e) => return None,
            Err(e) => panic!("{e}"),
        }
    }
    Some(v)
}

fn lazy_connect_and_sizes(b: Backend) {
    let Some(mut nets) = open_n(b, "lazy", 2) else {
        return;
    };
    let mut sinks = vec![Rec::default(), Rec::default()];
    connect_all(&mut nets);
    assert!(nets[0].knows(1) && nets[1].knows(0));
    spin(&mut nets, &mut sinks, 50);
    for n in &nets {
        assert_eq!(
            n.connections_made(),
            0,
            "no connection before the first message"
        );
        assert!(n.idle());
    }
    let sizes = [0, 1, 64 << 10, (4 << 20) + 1, 5];
    for (i, &len) in sizes.iter().enumerate() {
        send(&mut nets, &mut sinks, 0, 1, i as u32, len);
        send(&mut nets, &mut sinks, 1, 0, i as u32, len);
    }
    pump(&mut nets, &mut sinks, |_, s| {
        s[0].msgs.len() == sizes.len() && s[1].msgs.len() == sizes.len()
    });
    assert_eq!(sinks[1].from(0), expect(0, &sizes));
    assert_eq!(sinks[0].from(1), expect(1, &sizes));
    pump(&mut nets, &mut sinks, |n, _| n.iter().all(|n| n.idle()));
    for n in &nets {
        assert_eq!(n.connections_made(), 1);
        assert_eq!(n.connected_peers(), 1);
        let d = n.describe();
        assert!(
            d.iter()
                .any(|(k, v)| k == "tcp.peers" && v == "1 connected"),
            "{d:?}"
        );
    }
    assert!(sinks.iter().all(|s| s.failed.is_empty()));
}

fn placement(b: Backend) {
    let Some(mut nets) = open_n(b, "place", 2) else {
        return;
    };
    let mut sinks = vec![
        Rec::default(),
        Rec {
            place: true,
            ..Rec::default()
        },
    ];
    connect_all(&mut nets);
    let sizes = [1 << 20, 100 << 10, 3 << 20, 17 << 10, 10];
    for (i, &len) in sizes.iter().enumerate() {
        send(&mut nets, &mut sinks, 0, 1, i as u32, len);
    }
    pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == sizes.len());
    assert_eq!(sinks[1].from(0), expect(0, &sizes));
    // The 1 MiB and 3 MiB payloads cannot be whole in the input buffer when
    // their header arrives: they must have gone straight to `place` memory.
    assert!(
        sinks[1].delivered_placed >= 2,
        "placed {}",
        sinks[1].delivered_placed
    );
    assert!(
        sinks[1].outstanding.is_empty(),
        "every placement was delivered"
    );
}

fn simultaneous_connect(b: Backend) {
    const N: u32 = 200;
    for rep in 0..4 {
        let Some(mut nets) = open_n(b, &format!("simul{rep}"), 2) else {
            return;
        };
        let mut sinks = vec![Rec::default(), Rec::default()];
        connect_all(&mut nets);
        // Both connect before either polls.
        for (from, to) in [(0, 1), (1, 0)] {
            assert!(nets[from]
                .try_send(to, &header(0, 3), &payload(from as u64, 0, 3))
                .unwrap());
        }
        if rep % 2 == 1 {
            // Let the higher rank see the lower's HELLO first.
            nets[1].poll(&mut sinks[1]).unwrap();
        }
        for seq in 1..N {
            for (from, to) in [(0, 1), (1, 0)] {
                send(&mut nets, &mut sinks, from, to, seq, 3);
            }
        }
        pump(&mut nets, &mut sinks, |_, s| {
            s.iter().all(|s| s.msgs.len() == N as usize)
        });
        spin(&mut nets, &mut sinks, 20);
        for (i, s) in sinks.iter().enumerate() {
            let from = 1 - i as u64;
            assert_eq!(s.from(from), expect(from, &[3; N as usize]), "rep {rep}");
            assert!(s.failed.is_empty(), "{:?}", s.failed);
        }
        for n in &nets {
            assert_eq!(
                n.connections_made(),
                1,
                "one connection per pair (rep {rep})"
            );
            assert_eq!(n.connected_peers(), 1);
        }
    }
}

fn three_way(b: Backend) {
    const N: u32 = 50;
    let Some(mut nets) = open_n(b, "three", 3) else {
        return;
    };
    let mut sinks: Vec<Rec> = (0..3).map(|_| Rec::default()).collect();
    connect_all(&mut nets);
    for seq in 0..N {
        for from in 0..3 {
            for to in 0..3u64 {
                if from as u64 != to {
                    let len = (seq as usize * 37) % 3000;
                    send(&mut nets, &mut sinks, from, to, seq, len);
                }
            }
        }
    }
    pump(&mut nets, &mut sinks, |_, s| {
        s.iter().all(|s| s.msgs.len() == 2 * N as usize)
    });
    spin(&mut nets, &mut sinks, 20);
    for (me, s) in sinks.iter().enumerate() {
        for from in (0..3u64).filter(|&f| f != me as u64) {
            let sizes: Vec<usize> = (0..N).map(|seq| (seq as usize * 37) % 3000).collect();
            assert_eq!(s.from(from), expect(from, &sizes));
        }
        assert!(s.failed.is_empty());
    }
    for n in &nets {
        assert_eq!(n.connections_made(), 2);
        assert_eq!(n.connected_peers(), 2);
    }
}

fn peer_failure(b: Backend) {
    let Some(mut nets) = open_n(b, "fail", 2) else {
        return;
    };
    let mut sinks = vec![Rec::default(), Rec::default()];
    connect_all(&mut nets);
    for seq in 0..20 {
        send(&mut nets, &mut sinks, 1, 0, seq, 1000);
    }
    pump(&mut nets, &mut sinks, |_, s| s[0].msgs.len() >= 5);
    // Rank 0 goes away mid-stream while rank 1 keeps sending.
    drop(nets.remove(0));
    sinks.remove(0);
    let end = Instant::now() + DEADLINE;
    let mut seq = 20;
    while sinks[0].failed.is_empty() {
        assert!(Instant::now() < end, "no peer_failed");
        match nets[0].try_send(0, &header(seq, 1000), &payload(1, seq, 1000)) {
            Ok(_) => seq += 1,
            Err(NetmodError::Peer { peer: 0, .. }) => {}
            Err(e) => panic!("{e}"),
        }
        spin(&mut nets, &mut sinks, 1);
    }
    spin(&mut nets, &mut sinks, 100);
    assert_eq!(sinks[0].failed.len(), 1, "{:?}", sinks[0].failed);
    assert_eq!(sinks[0].failed[0].0, 0);
    let e = nets[0].try_send(0, &header(0, 1), b"x").unwrap_err();
    assert!(matches!(e, NetmodError::Peer { peer: 0, .. }), "{e}");
    assert!(nets[0].idle(), "a failed peer's queue is dropped");
    assert_eq!(nets[0].connected_peers(), 0);
}

/// Connects a raw client to `net`'s listener, writes `bytes`, and returns
/// what comes back until the netmod closes the connection.
fn raw_client(nets: &mut [TcpNetmod], sinks: &mut [Rec], target: usize, bytes: &[u8]) -> Vec<u8> {
    // After an accepting verdict: a frame with a 1000-byte header.
    let mut rest = vec![0u8; 8];
    rest[..4].copy_from_slice(&1000u32.to_le_bytes());
    raw_client_then(nets, sinks, target, bytes, &rest)
}

/// As [`raw_client`], writing `after` once the netmod accepted.
fn raw_client_then(
    nets: &mut [TcpNetmod],
    sinks: &mut [Rec],
    target: usize,
    bytes: &[u8],
    after: &[u8],
) -> Vec<u8> {
    let card = nets[target].business_card().to_string();
    let addr: SocketAddr = card
        .strip_prefix("tcp:")
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(bytes).unwrap();
    c.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    let end = Instant::now() + DEADLINE;
    loop {
        assert!(
            Instant::now() < end,
            "the netmod did not close the connection"
        );
        let mut b = [0u8; 64];
        match c.read(&mut b) {
            Ok(0) => return got,
            Ok(n) => {
                got.extend_from_slice(&b[..n]);
                if got.len() == 9 && got[8] == 0 {
                    // Accepted: now send what follows the handshake.
                    c.set_nonblocking(false).unwrap();
                    // The netmod may close mid-write: that is its answer.
                    let _ = c.write_all(after);
                    c.set_nonblocking(true).unwrap();
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("{e}"),
        }
        spin(nets, sinks, 1);
    }
}

/// A HELLO with a nonce and no MAC (zeros), as a stranger sends it.
fn hello(kind: u8, rank: u64, job: &[u8]) -> Vec<u8> {
    let mut v = b"RVTCP\x02\0\0".to_vec();
    v.push(kind);
    v.extend_from_slice(&rank.to_le_bytes());
    v.extend_from_slice(&(job.len() as u16).to_le_bytes());
    v.extend_from_slice(job);
    v.extend_from_slice(&[0x5a; 8]);
    v.extend_from_slice(&[0; 8]);
    v
}

/// With a job secret, ranks of the job connect (their HELLOs carry the
/// MAC) and a stranger naming the job without it is refused.
fn keyed_peers(b: Backend) {
    let key = JobKey::new([0x42; 16]);
    let mut nets = Vec::new();
    for rank in 0..2 {
        let c = TcpConfig {
            job_key: Some(key),
            ..config(b)
        };
        match TcpNetmod::new(c, "keyed", rank) {
            Ok(m) => nets.push(m),
            Err(e) if b == Backend::Uring && uring_missing_here(&e) => return,
            Err(e) => panic!("{e}"),
        }
    }
    let mut sinks = vec![Rec::default(), Rec::default()];
    connect_all(&mut nets);
    send(&mut nets, &mut sinks, 0, 1, 0, 10);
    send(&mut nets, &mut sinks, 1, 0, 0, 10);
    pump(&mut nets, &mut sinks, |_, s| {
        s[1].msgs.len() == 1 && s[0].msgs.len() == 1
    });
    for rank in [1, 5] {
        let refused = raw_client(&mut nets, &mut sinks, 0, &hello(1, rank, b"keyed"));
        assert_eq!(refused, b"RVTCP\x02\0\0\x03", "posing as rank {rank}");
    }
    // The real pair is unharmed.
    send(&mut nets, &mut sinks, 0, 1, 1, 10);
    pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == 2);
    assert!(sinks[0].failed.is_empty() && sinks[1].failed.is_empty());
}

/// Between jobs (accept/connect, spawn, group connect): each job's ranks
/// prove themselves with their job's group key, which the other job was
/// given (`set_group_key`). The real ranks connect and exchange both ways;
/// a stranger naming job gA without the key's MAC is refused; and a job
/// told a wrong key for gA refuses gA's real rank.
fn cross_job_keys(b: Backend) {
    let (ka, kb) = (JobKey::new([0xa1; 16]), JobKey::new([0xb2; 16]));
    let mut nets = Vec::new();
    for (job, rank, key) in [
        ("gA", 0, ka),
        ("gB", 0, kb),
        ("gC", 0, JobKey::new([3; 16])),
    ] {
        let c = TcpConfig {
            job_key: Some(key),
            ..config(b)
        };
        match TcpNetmod::new(c, job, rank) {
            Ok(m) => nets.push(m),
            Err(e) if b == Backend::Uring && uring_missing_here(&e) => return,
            Err(e) => panic!("{e}"),
        }
    }
    nets[0].add_group(5, "gB").unwrap();
    nets[0].set_group_key(5, kb.group_key()).unwrap();
    nets[0].add_group(6, "gC").unwrap();
    nets[1].add_group(2, "gA").unwrap();
    nets[1].set_group_key(2, ka.group_key()).unwrap();
    // gC was told a wrong key for gA.
    nets[2].add_group(9, "gA").unwrap();
    nets[2].set_group_key(9, kb.group_key()).unwrap();
    let mut sinks: Vec<Rec> = (0..3).map(|_| Rec::default()).collect();
    let (cb, cc) = (card(&nets, 1), card(&nets, 2));
    nets[0].connect(peer_id(5, 0), &cb).unwrap();
    nets[0].connect(peer_id(6, 0), &cc).unwrap();
    send(&mut nets, &mut sinks, 0, peer_id(5, 0), 0, 10);
    send(&mut nets, &mut sinks, 0, peer_id(6, 0), 0, 10);
    pump(&mut nets, &mut sinks, |_, s| {
        s[1].msgs.len() == 1 && !s[0].failed.is_empty()
    });
    assert_eq!(sinks[1].from(peer_id(2, 0)), expect(0, &[10]));
    assert!(sinks[2].msgs.is_empty(), "gC took a HELLO it cannot check");
    assert_eq!(sinks[0].failed.len(), 1);
    assert_eq!(sinks[0].failed[0].0, peer_id(6, 0));
    send(&mut nets, &mut sinks, 1, peer_id(2, 0), 0, 10);
    pump(&mut nets, &mut sinks, |_, s| s[0].msgs.len() == 1);
    // A stranger who knows gA's name (and where gB listens), posing as
    // gA's rank 1 or rank 0, without the key: refused.
    for rank in [1, 0] {
        let refused = raw_client(&mut nets, &mut sinks, 1, &hello(1, rank, b"gA"));
        assert_eq!(refused, b"RVTCP\x02\0\0\x03", "posing as gA rank {rank}");
    }
    assert!(sinks[1].failed.is_empty());
}

fn bad_peers(b: Backend) {
    let Some(mut nets) = open_n(b, "badpeer", 2) else {
        return;
    };
    let mut sinks = vec![Rec::default(), Rec::default()];
    connect_all(&mut nets);
    send(&mut nets, &mut sinks, 0, 1, 0, 10);
    pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == 1);

    assert_eq!(
        raw_client(&mut nets, &mut sinks, 0, b"GET / HTTP/1.0\r\n"),
        b""
    );
    let other = raw_client(&mut nets, &mut sinks, 0, &hello(1, 9, b"another-job"));
    assert_eq!(other, b"RVTCP\x02\0\0\x02", "rejected as another job");
    let unknown = raw_client(&mut nets, &mut sinks, 0, &hello(3, 9, b"badpeer"));
    assert_eq!(unknown, b"RVTCP\x02\0\0\x03", "unknown identity kind");
    let self_conn = raw_client(&mut nets, &mut sinks, 0, &hello(1, 0, b"badpeer"));
    assert_eq!(self_conn, b"RVTCP\x02\0\0\x03", "a connection from itself");
    let wide = raw_client(&mut nets, &mut sinks, 0, &hello(1, 1 << 32, b"badpeer"));
    assert_eq!(wide, b"RVTCP\x02\0\0\x03", "a rank above 32 bits");
    // Rank 1 is connected already: a second connection claiming it is refused.
    let dup = raw_client(&mut nets, &mut sinks, 0, &hello(1, 1, b"badpeer"));
    assert_eq!(dup, b"RVTCP\x02\0\0\x01");
    // Accepted as rank 7, then a frame header_len of 1000: a protocol error.
    let huge = raw_client(&mut nets, &mut sinks, 0, &hello(1, 7, b"badpeer"));
    assert_eq!(huge, b"RVTCP\x02\0\0\x00");
    pump(&mut nets, &mut sinks, |_, s| !s[0].failed.is_empty());
    assert_eq!(sinks[0].failed.len(), 1);
    assert_eq!(sinks[0].failed[0].0, 7, "{:?}", sinks[0].failed);
    assert!(
        sinks[0].failed[0].1.contains("header"),
        "{:?}",
        sinks[0].failed
    );

    // The real pair is unharmed.
    send(&mut nets, &mut sinks, 0, 1, 1, 10);
    send(&mut nets, &mut sinks, 1, 0, 0, 10);
    pump(&mut nets, &mut sinks, |_, s| {
        s[1].msgs.len() == 2 && s[0].msgs.len() == 1
    });
    assert!(sinks[1].failed.is_empty());
    assert_eq!(sinks[0].failed.len(), 1);
}

/// Peak resident memory of this process (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

/// Any process may connect to a port (the engine then closes one naming
/// a tag not open): one announcing a 1 GiB frame that no receive was
/// posted for fails as a peer once the header is in, and the netmod never
/// allocates the payload. A real peer's traffic goes on.
fn huge_unplaced_frame(b: Backend) {
    let Some(mut nets) = open_n(b, "hugeframe", 2) else {
        return;
    };
    let mut sinks = vec![Rec::default(), Rec::default()];
    connect_all(&mut nets);
    send(&mut nets, &mut sinks, 1, 0, 0, 10);
    pump(&mut nets, &mut sinks, |_, s| s[0].msgs.len() == 1);
    let before = peak_rss();
    let mut after = Vec::new();
    after.extend_from_slice(&12u32.to_le_bytes());
    after.extend_from_slice(&(1u32 << 30).to_le_bytes());
    after.extend_from_slice(&header(1, 1 << 30));
    after.extend_from_slice(&[0x77; 4096]);
    let said = raw_client_then(&mut nets, &mut sinks, 0, &hello(2, 77, b"x"), &after);
    assert_eq!(said, b"RVTCP\x02\0\0\x00", "a port connection is accepted");
    pump(&mut nets, &mut sinks, |_, s| !s[0].failed.is_empty());
    let (peer, why) = &sinks[0].failed[0];
    assert_eq!(split_peer(*peer).0, TEMP_GROUP, "{why}");
    assert!(why.contains("no receive posted"), "{why}");
    let grew = peak_rss().saturating_sub(before);
    assert!(grew < 64 << 20, "peak memory grew by {grew} bytes");
    send(&mut nets, &mut sinks, 1, 0, 1, 10);
    pump(&mut nets, &mut sinks, |_, s| s[0].msgs.len() == 2);
    assert_eq!(sinks[0].failed.len(), 1);
}

/// A stranger connects to rank 0 and never sends its HELLO (another one
/// sends half of one): rank 0 closes both once the handshake deadline has
/// passed, and the job's own traffic goes on meanwhile and after.
fn silent_stranger(b: Backend) {
    let mut nets = Vec::new();
    for rank in 0..2 {
        let cfg = TcpConfig {
            handshake_timeout: std::time::Duration::from_millis(50),
            ..config(b)
        };
        match TcpNetmod::new(cfg, "silent", rank) {
            Ok(m) => nets.push(m),
            Err(e) if b == Backend::Uring && uring_missing_here(&e) => return,
            Err(e) => panic!("{e}"),
        }
    }
    let mut sinks = vec![Rec::default(), Rec::default()];
    let card = nets[0].business_card().to_string();
    let addr: SocketAddr = card.strip_prefix("tcp:").unwrap().parse().unwrap();
    let mut silent = TcpStream::connect(addr).unwrap();
    let mut half = TcpStream::connect(addr).unwrap();
    half.write_all(&hello(1, 1, b"silent")[..6]).unwrap();
    connect_all(&mut nets);
    send(&mut nets, &mut sinks, 1, 0, 0, 10);
    pump(&mut nets, &mut sinks, |n, s| {
        s[0].msgs.len() == 1 && n[0].handshakes_expired() == 2
    });
    for c in [&mut silent, &mut half] {
        c.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut b = [0u8; 16];
        match c.read(&mut b) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("the stranger's connection is still open: {other:?}"),
        }
    }
    send(&mut nets, &mut sinks, 0, 1, 1, 10);
    pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == 1);
    assert!(sinks[0].failed.is_empty() && sinks[1].failed.is_empty());
    assert_eq!(nets[0].connections_made(), 1, "only rank 1's connection");
}

/// Rank 1 starts a connect to rank 0 and then does not poll for longer
/// than rank 0's handshake deadline, so rank 0 closes the connection before
/// the HELLO comes: rank 1 connects again and its message arrives. (Poll
/// backend: io_uring's connect is only issued by a poll of rank 1.)
#[test]
fn slow_connector_reconnects() {
    let cfg = || TcpConfig {
        handshake_timeout: std::time::Duration::from_millis(50),
        ..config(Backend::Poll)
    };
    let mut nets = vec![
        TcpNetmod::new(cfg(), "slow", 0).unwrap(),
        TcpNetmod::new(cfg(), "slow", 1).unwrap(),
    ];
    let mut sinks = vec![Rec::default(), Rec::default()];
    connect_all(&mut nets);
    assert!(nets[1]
        .try_send(0, &header(0, 10), &payload(1, 0, 10))
        .unwrap());
    let end = Instant::now() + DEADLINE;
    while nets[0].handshakes_expired() == 0 {
        assert!(
            Instant::now() < end,
            "rank 0 never closed the silent connection"
        );
        nets[0].poll(&mut sinks[0]).unwrap();
        std::thread::yield_now();
    }
    pump(&mut nets, &mut sinks, |_, s| s[0].msgs.len() == 1);
    assert!(sinks[0].failed.is_empty() && sinks[1].failed.is_empty());
    assert_eq!(nets[0].handshakes_expired(), 1);
}

fn flow_control(b: Backend) {
    const LEN: usize = 256 << 10;
    let Some(mut nets) = open_n(b, "flow", 2) else {
        return;
    };
    let mut sinks = vec![Rec::default(), Rec::default()];
    connect_all(&mut nets);
    send(&mut nets, &mut sinks, 0, 1, 0, 1);
    pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == 1);
    // Only the sender polls: the receiver's socket fills, then the queue.
    let mut taken = 1u32;
    let mut full = false;
    let p = payload(0, 0, LEN);
    for _ in 0..400 {
        if nets[0].try_send(1, &header(taken, LEN), &p).unwrap() {
            taken += 1;
        } else {
            full = true;
            break;
        }
        nets[0].poll(&mut sinks[0]).unwrap();
    }
    assert!(full, "never Ok(false) after {taken} messages");
    assert!(!nets[0].idle());
    pump(&mut nets, &mut sinks, |n, s| {
        s[1].msgs.len() == taken as usize && n[0].idle()
    });
    let got = sinks[1].from(0);
    for (i, m) in got.iter().enumerate().skip(1) {
        assert_eq!(*m, (i as u32, LEN, fnv(&p)));
    }
}

/// Windows of small messages, which `try_send` queues between polls and
/// writes together (one send per window), interleaved with large ones
/// (written directly, placed or through the overflow buffer), both ways at
/// once: every message arrives whole and in order on both sides.
fn coalesced_small_among_large(b: Backend) {
    let Some(mut nets) = open_n(b, "coalesce", 2) else {
        return;
    };
    let mut sinks = vec![Rec::default(), Rec::placing()];
    connect_all(&mut nets);
    let pattern = [
        8,
        0,
        1,
        8,
        33,
        8,
        20_000,
        8,
        8,
        255,
        70_000,
        8,
        16 * 1024 - 30,
        16 * 1024,
        8,
        (256 << 10) + 3,
        8,
        8,
    ];
    let sizes: Vec<usize> = (0..700).map(|i| pattern[i % pattern.len()]).collect();
    for (w, window) in sizes.chunks(64).enumerate() {
        // No poll within a window unless a queue is full.
        for (k, &len) in window.iter().enumerate() {
            let seq = (w * 64 + k) as u32;
            send(&mut nets, &mut sinks, 0, 1, seq, len);
            send(&mut nets, &mut sinks, 1, 0, seq, len);
        }
        spin(&mut nets, &mut sinks, 1);
    }
    pump(&mut nets, &mut sinks, |_, s| {
        s[0].msgs.len() == sizes.len() && s[1].msgs.len() == sizes.len()
    });
    assert_eq!(sinks[1].from(0), expect(0, &sizes));
    assert_eq!(sinks[0].from(1), expect(1, &sizes));
    assert!(sinks[1].delivered_placed > 0, "the large ones were placed");
    assert!(sinks.iter().all(|s| s.failed.is_empty()));
    pump(&mut nets, &mut sinks, |n, _| n.iter().all(|n| n.idle()));
}

fn second_address(b: Backend) {
    let Some(mut nets) = open_n(b, "second", 2) else {
        return;
    };
    let mut sinks = vec![Rec::default(), Rec::default()];
    // Nobody listens on the first address of the card: connect moves on.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = l.local_addr().unwrap();
    drop(l);
    let live = nets[1]
        .business_card()
        .strip_prefix("tcp:")
        .unwrap()
        .to_string();
    nets[0].connect(1, &format!("tcp:{dead},{live}")).unwrap();
    send(&mut nets, &mut sinks, 0, 1, 0, 100);
    pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == 1);
    assert!(sinks.iter().all(|s| s.failed.is_empty()));
    assert_eq!(nets[0].connections_made(), 1);
}

/// Many connections: everything arrives, and an idle poll costs at most
/// one system call whatever their number (the poll backend's one
/// `epoll_wait`; io_uring enters the kernel only with work), plus the
/// slow tick's accept and connect checks every 64th poll.
fn many_peers(b: Backend) {
    const PEERS: u64 = 10;
    let Some(mut nets) = open_n(b, "many", PEERS) else {
        return;
    };
    let mut sinks: Vec<Rec> = (0..PEERS).map(|_| Rec::default()).collect();
    connect_all(&mut nets);
    for seq in 0..10 {
        for r in 1..PEERS {
            send(&mut nets, &mut sinks, r as usize, 0, seq, 100);
            send(&mut nets, &mut sinks, 0, r, seq, 100);
        }
    }
    let want = 10 * (PEERS as usize - 1);
    pump(&mut nets, &mut sinks, |_, s| {
        s[0].msgs.len() == want && s[1..].iter().all(|s| s.msgs.len() == 10)
    });
    for r in 1..PEERS {
        assert_eq!(sinks[0].from(r), expect(r, &[100; 10]));
        assert_eq!(sinks[r as usize].from(0), expect(0, &[100; 10]));
    }
    assert_eq!(nets[0].connected_peers(), PEERS as usize - 1);
    assert!(sinks.iter().all(|s| s.failed.is_empty()));
    pump(&mut nets, &mut sinks, |n, _| n.iter().all(|n| n.idle()));
    const POLLS: u64 = 640;
    let before = nets[0].syscalls();
    for _ in 0..POLLS {
        nets[0].poll(&mut sinks[0]).unwrap();
    }
    let idle_calls = nets[0].syscalls() - before;
    assert!(
        idle_calls <= POLLS + 2 * POLLS / 64,
        "{idle_calls} system calls in {POLLS} idle polls with {} connections",
        PEERS - 1
    );
    // One message still arrives at once through that single call.
    send(&mut nets, &mut sinks, 3, 0, 10, 8);
    pump(&mut nets, &mut sinks, |_, s| s[0].msgs.len() == want + 1);
}

/// Jobs "xA" (ranks 0, 1) and "xB" (rank 0), each knowing the other as
/// group 1 (A) and group 7 (B): every process reaches every other, and a
/// rank-0 process of each job is a peer of the other with the same rank.
fn cross_job_connect(b: Backend) {
    let Some(mut nets) = open_jobs(b, &[("xA", 0), ("xA", 1), ("xB", 0)]) else {
        return;
    };
    let mut sinks: Vec<Rec> = (0..3).map(|_| Rec::default()).collect();
    for n in &mut nets[..2] {
        n.add_group(7, "xB").unwrap();
    }
    nets[2].add_group(1, "xA").unwrap();
    // A0 reaches its own rank 1 and B0; only A1 connects to B, and B0 to nobody.
    let (c0, c1, c2) = (card(&nets, 0), card(&nets, 1), card(&nets, 2));
    nets[0].connect(1, &c1).unwrap();
    nets[0].connect(peer_id(7, 0), &c2).unwrap();
    nets[1].connect(0, &c0).unwrap();
    nets[1].connect(peer_id(7, 0), &c2).unwrap();
    let sizes = [10, 100 << 10, (2 << 20) + 3, 0];
    for (i, &len) in sizes.iter().enumerate() {
        send(&mut nets, &mut sinks, 0, 1, i as u32, len);
        send(&mut nets, &mut sinks, 0, peer_id(7, 0), i as u32, len);
        send(&mut nets, &mut sinks, 1, peer_id(7, 0), i as u32, len);
    }
    pump(&mut nets, &mut sinks, |_, s| {
        s[1].msgs.len() == sizes.len() && s[2].msgs.len() == 2 * sizes.len()
    });
    assert_eq!(sinks[1].from(0), expect(0, &sizes));
    assert_eq!(sinks[2].from(peer_id(1, 0)), expect(0, &sizes));
    assert_eq!(sinks[2].from(peer_id(1, 1)), expect(1, &sizes));
    // B knows both from their HELLOs and answers without `connect`.
    assert!(nets[2].knows(peer_id(1, 0)) && nets[2].knows(peer_id(1, 1)));
    assert!(!nets[2].knows(0) && !nets[2].knows(1));
    for (i, &len) in sizes.iter().enumerate() {
        send(&mut nets, &mut sinks, 2, peer_id(1, 0), i as u32, len);
        send(&mut nets, &mut sinks, 2, peer_id(1, 1), i as u32, len);
    }
    pump(&mut nets, &mut sinks, |_, s| {
        s[0].msgs.len() == sizes.len() && s[1].msgs.len() == 2 * sizes.len()
    });
    assert_eq!(sinks[0].from(peer_id(7, 0)), expect(2, &sizes));
    assert_eq!(sinks[1].from(peer_id(7, 0)), expect(2, &sizes));
    assert!(sinks
        .iter()
        .all(|s| s.failed.is_empty() && s.ports.is_empty()));
    for (i, want) in [(0, 2), (1, 2), (2, 2)] {
        assert_eq!(nets[i].connections_made(), want, "process {i}");
        assert_eq!(nets[i].peer_count(), want as usize, "process {i}");
        assert_eq!(nets[i].connected_peers(), want as usize);
    }
}

/// Rank 0 of two jobs connect to each other at once: the tie-break
/// compares jobs, so they keep exactly one connection.
fn cross_job_simultaneous(b: Backend) {
    const N: u32 = 100;
    for rep in 0..4 {
        let (ja, jb) = (format!("simA{rep}"), format!("simB{rep}"));
        let Some(mut nets) = open_jobs(b, &[(&ja, 0), (&jb, 0)]) else {
            return;
        };
        let mut sinks = vec![Rec::default(), Rec::default()];
        nets[0].add_group(3, &jb).unwrap();
        nets[1].add_group(3, &ja).unwrap();
        let (c0, c1) = (card(&nets, 0), card(&nets, 1));
        nets[0].connect(peer_id(3, 0), &c1).unwrap();
        nets[1].connect(peer_id(3, 0), &c0).unwrap();
        for from in [0, 1] {
            assert!(nets[from]
                .try_send(peer_id(3, 0), &header(0, 3), &payload(from as u64, 0, 3))
                .unwrap());
        }
        // Let either see the other's HELLO first.
        let first = rep % 2;
        nets[first].poll(&mut sinks[first]).unwrap();
        for seq in 1..N {
            for from in [0, 1] {
                send(&mut nets, &mut sinks, from, peer_id(3, 0), seq, 3);
            }
        }
        pump(&mut nets, &mut sinks, |_, s| {
            s.iter().all(|s| s.msgs.len() == N as usize)
        });
        spin(&mut nets, &mut sinks, 20);
        for (i, s) in sinks.iter().enumerate() {
            let from = 1 - i as u64;
            let want = expect(from, &[3; N as usize]);
            assert_eq!(s.from(peer_id(3, 0)), want, "rep {rep}");
            assert!(s.failed.is_empty(), "{:?}", s.failed);
        }
        for n in &nets {
            assert_eq!(n.connections_made(), 1, "one connection (rep {rep})");
            assert_eq!(n.connected_peers(), 1);
            assert_eq!(n.peer_count(), 1);
        }
    }
}

/// Rank connections from a job not added, or removed, are refused; port
/// connections from any job are accepted.
fn other_job_refused(b: Backend) {
    let Some(mut nets) = open_jobs(b, &[("rjA", 0), ("rjB", 0), ("rjA", 1)]) else {
        return;
    };
    let mut sinks: Vec<Rec> = (0..3).map(|_| Rec::default()).collect();
    let c1 = card(&nets, 1);
    let b0 = peer_id(1, 0);
    nets[0].add_group(1, "rjB").unwrap();
    nets[2].add_group(1, "rjB").unwrap();
    // B has not added rjA.
    nets[0].connect(b0, &c1).unwrap();
    send(&mut nets, &mut sinks, 0, b0, 0, 10);
    pump(&mut nets, &mut sinks, |_, s| !s[0].failed.is_empty());
    assert_eq!(sinks[0].failed[0].0, b0);
    assert!(
        sinks[0].failed[0].1.contains("another job"),
        "{:?}",
        sinks[0].failed
    );
    assert!(nets[0].try_send(b0, &header(1, 1), b"x").is_err());
    // Once added it is accepted (after forgetting the failed peer).
    nets[1].add_group(1, "rjA").unwrap();
    nets[0].disconnect(b0);
    assert!(!nets[0].knows(b0));
    nets[0].connect(b0, &c1).unwrap();
    send(&mut nets, &mut sinks, 0, b0, 0, 10);
    pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == 1);
    assert_eq!(sinks[1].from(peer_id(1, 0)), expect(0, &[10]));
    // Removed: refused again, while the existing connection is untouched.
    nets[1].remove_group(1);
    nets[2].connect(b0, &c1).unwrap();
    send(&mut nets, &mut sinks, 2, b0, 0, 10);
    pump(&mut nets, &mut sinks, |_, s| !s[2].failed.is_empty());
    assert_eq!(sinks[2].failed[0].0, b0);
    send(&mut nets, &mut sinks, 0, b0, 1, 20);
    // A port connection from the same unknown job is served.
    let p = nets[2].connect_port(&c1, 4).unwrap();
    send(&mut nets, &mut sinks, 2, p, 0, 30);
    pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == 3);
    assert_eq!(sinks[1].from(peer_id(1, 0)), expect(0, &[10, 20]));
    let q = sinks[1].ports[0].0;
    assert_eq!(sinks[1].from(q), expect(2, &[30]));
    assert!(sinks[1].failed.is_empty() && sinks[0].failed.len() == 1);
    assert_eq!(sinks[2].failed.len(), 1);
}

/// `connect_port`: a new temporary peer on each side, announced by
/// `port_connection` before its first message; a second port connection
/// to the same process is a connection of its own.
fn port_connection(b: Backend) {
    let Some(mut nets) = open_jobs(b, &[("pA", 0), ("pB", 0)]) else {
        return;
    };
    let mut sinks = vec![
        Rec::default(),
        Rec {
            place: true,
            ..Rec::default()
        },
    ];
    let c1 = card(&nets, 1);
    let p = nets[0].connect_port(&c1, 77).unwrap();
    assert_eq!(split_peer(p).0, TEMP_GROUP);
    assert!(nets[0].knows(p));
    assert_eq!(nets[0].peer_count(), 1);
    let sizes = [5, (1 << 20) + 7, 64 << 10, (3 << 20) + 1, 0];
    for (i, &len) in sizes.iter().enumerate() {
        send(&mut nets, &mut sinks, 0, p, i as u32, len);
    }
    pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == sizes.len());
    assert_eq!(sinks[1].ports.len(), 1);
    let (q, tag, before) = sinks[1].ports[0];
    assert_eq!((split_peer(q).0, tag, before), (TEMP_GROUP, 77, 0));
    assert_eq!(sinks[1].from(q), expect(0, &sizes));
    assert!(sinks[1].delivered_placed >= 1, "large payloads placed");
    assert!(nets[1].knows(q));
    for (i, &len) in sizes.iter().enumerate() {
        send(&mut nets, &mut sinks, 1, q, i as u32, len);
    }
    pump(&mut nets, &mut sinks, |_, s| s[0].msgs.len() == sizes.len());
    assert_eq!(sinks[0].from(p), expect(1, &sizes));
    // Another to the same card: a new socket and new ids on both sides.
    let p2 = nets[0].connect_port(&c1, 77).unwrap();
    assert_ne!(p2, p);
    send(&mut nets, &mut sinks, 0, p2, 0, 1);
    pump(&mut nets, &mut sinks, |_, s| {
        s[1].msgs.len() == sizes.len() + 1
    });
    let (q2, tag2, before2) = sinks[1].ports[1];
    assert_ne!(q2, q);
    assert_eq!((split_peer(q2).0, tag2, before2), (TEMP_GROUP, 77, 0));
    assert_eq!(sinks[1].from(q2), expect(0, &[1]));
    assert!(sinks.iter().all(|s| s.failed.is_empty()));
    assert!(
        sinks[0].ports.is_empty(),
        "the connector is not announced to"
    );
    for n in &nets {
        assert_eq!(n.connections_made(), 2);
        assert_eq!(n.peer_count(), 2);
    }
}

fn connect_port_refused(b: Backend) {
    let Some(mut nets) = open_n(b, "portdead", 1) else {
        return;
    };
    let mut sinks = vec![Rec::default()];
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("tcp:{}", l.local_addr().unwrap());
    drop(l);
    // Reported without any message sent.
    let p = nets[0].connect_port(&dead, 1).unwrap();
    assert_eq!(split_peer(p).0, TEMP_GROUP);
    pump(&mut nets, &mut sinks, |_, s| !s[0].failed.is_empty());
    spin(&mut nets, &mut sinks, 20);
    assert_eq!(sinks[0].failed.len(), 1);
    assert_eq!(sinks[0].failed[0].0, p);
    assert!(nets[0].try_send(p, &header(0, 1), b"x").is_err());
    assert_eq!(nets[0].peer_count(), 0);
    assert!(matches!(
        nets[0].connect_port("tcp:nowhere", 1),
        Err(NetmodError::BadCard { .. })
    ));
}

/// Both ends disconnect after a goodbye, as the engine does: everything
/// sent before `disconnect` arrives whole, input after it is dropped, and
/// neither side reports a failure.
fn disconnect_case(b: Backend, port: bool) {
    let Some(mut nets) = open_jobs(b, &[("dA", 0), ("dB", 0)]) else {
        return;
    };
    let mut sinks = vec![Rec::default(), Rec::default()];
    let (c0, c1) = (card(&nets, 0), card(&nets, 1));
    let (pa, pb) = if port {
        let pa = nets[0].connect_port(&c1, 9).unwrap();
        send(&mut nets, &mut sinks, 0, pa, 0, 10);
        pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == 1);
        (pa, sinks[1].ports[0].0)
    } else {
        nets[0].add_group(1, "dB").unwrap();
        nets[1].add_group(2, "dA").unwrap();
        nets[0].connect(peer_id(1, 0), &c1).unwrap();
        nets[1].connect(peer_id(2, 0), &c0).unwrap();
        send(&mut nets, &mut sinks, 0, peer_id(1, 0), 0, 10);
        pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == 1);
        (peer_id(1, 0), peer_id(2, 0))
    };
    // B says goodbye (seq 0) first; A waits for it.
    send(&mut nets, &mut sinks, 1, pb, 0, 1);
    pump(&mut nets, &mut sinks, |_, s| s[0].msgs.len() == 1);
    // A sends its last messages, a large one among them, and disconnects
    // without polling: they are written after `disconnect` returned.
    let sizes = [10, 100, (3 << 20) + 5, 7, 1];
    for (i, &len) in sizes.iter().enumerate().skip(1) {
        assert!(nets[0]
            .try_send(pa, &header(i as u32, len), &payload(0, i as u32, len))
            .unwrap());
    }
    nets[0].disconnect(pa);
    assert!(!nets[0].knows(pa));
    assert_eq!(nets[0].peer_count(), 0);
    nets[0].disconnect(pa); // a no-op now
    assert!(nets[0].try_send(pa, &header(0, 1), b"x").is_err());
    // B keeps sending until it sees A's goodbye: A drops all of it.
    for seq in 1..4 {
        send(&mut nets, &mut sinks, 1, pb, seq, 1000);
    }
    pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == sizes.len());
    assert_eq!(sinks[1].from(pb), expect(0, &sizes));
    nets[1].disconnect(pb);
    assert!(!nets[1].knows(pb));
    pump(&mut nets, &mut sinks, |n, _| n.iter().all(|n| n.idle()));
    spin(&mut nets, &mut sinks, 50);
    assert_eq!(
        sinks[0].from(pa),
        expect(1, &[1]),
        "nothing after disconnect"
    );
    for (n, s) in nets.iter().zip(&sinks) {
        assert!(s.failed.is_empty(), "{:?}", s.failed);
        assert_eq!(n.peer_count(), 0);
        assert_eq!(n.connected_peers(), 0);
    }
    // The pair can connect again afterwards.
    let again = if port {
        nets[0].connect_port(&c1, 10).unwrap()
    } else {
        nets[0].connect(pa, &c1).unwrap();
        pa
    };
    send(&mut nets, &mut sinks, 0, again, 9, 10);
    pump(&mut nets, &mut sinks, |_, s| {
        s[1].msgs.len() == sizes.len() + 1
    });
    assert!(sinks.iter().all(|s| s.failed.is_empty()));
}

fn disconnect_rank(b: Backend) {
    disconnect_case(b, false)
}

fn disconnect_port(b: Backend) {
    disconnect_case(b, true)
}

/// Disconnecting a port connection before it is even made: the connect
/// goes on and writes the queue. The other side, which did not
/// disconnect, sees the end as a failure after every message.
fn disconnect_while_connecting(b: Backend) {
    let Some(mut nets) = open_jobs(b, &[("dcA", 0), ("dcB", 0)]) else {
        return;
    };
    let mut sinks = vec![Rec::default(), Rec::default()];
    let c1 = card(&nets, 1);
    let p = nets[0].connect_port(&c1, 3).unwrap();
    let sizes = [100, (1 << 20) + 1, 2];
    for (i, &len) in sizes.iter().enumerate() {
        assert!(nets[0]
            .try_send(p, &header(i as u32, len), &payload(0, i as u32, len))
            .unwrap());
    }
    nets[0].disconnect(p);
    assert!(!nets[0].knows(p) && nets[0].peer_count() == 0);
    pump(&mut nets, &mut sinks, |_, s| !s[1].failed.is_empty());
    let q = sinks[1].ports[0].0;
    assert_eq!(sinks[1].from(q), expect(0, &sizes));
    assert_eq!(sinks[1].failed.len(), 1);
    assert_eq!(sinks[1].failed[0].0, q);
    pump(&mut nets, &mut sinks, |n, _| n[0].idle());
    spin(&mut nets, &mut sinks, 20);
    assert!(sinks[0].failed.is_empty());
}

/// Disconnecting a peer while its payload goes straight into `place`
/// memory: the netmod lets go of that memory at once (the engine may free
/// it), delivers nothing more, and reports nothing for the peer.
fn disconnect_mid_placement(b: Backend) {
    const LEN: usize = 8 << 20;
    let Some(mut nets) = open_n(b, "midplace", 2) else {
        return;
    };
    let mut sinks = vec![
        Rec::default(),
        Rec {
            place: true,
            ..Rec::default()
        },
    ];
    connect_all(&mut nets);
    send(&mut nets, &mut sinks, 0, 1, 0, 1);
    pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == 1);
    send(&mut nets, &mut sinks, 0, 1, 1, LEN);
    pump(&mut nets, &mut sinks, |_, s| !s[1].outstanding.is_empty());
    // Only the receiver polls: it takes what has arrived and (io_uring)
    // leaves a receive into the placement memory waiting for the rest.
    for _ in 0..20 {
        nets[1].poll(&mut sinks[1]).unwrap();
    }
    assert_eq!(sinks[1].msgs.len(), 1, "still arriving");
    nets[1].disconnect(0);
    assert!(!nets[1].knows(0));
    // The engine may reuse the receive buffer now: it is no longer written.
    let bufs: Vec<Box<[u8]>> = sinks[1].outstanding.drain().map(|(_, b)| b).collect();
    let before: Vec<Vec<u8>> = bufs.iter().map(|b| b.to_vec()).collect();
    // The sender sees the end of the connection as a failure.
    pump(&mut nets, &mut sinks, |_, s| !s[0].failed.is_empty());
    spin(&mut nets, &mut sinks, 20);
    for (b, was) in bufs.iter().zip(&before) {
        assert!(**b == **was, "placement memory written after disconnect");
    }
    assert_eq!(sinks[1].msgs.len(), 1, "nothing delivered after disconnect");
    assert!(sinks[1].failed.is_empty());
    assert_eq!(sinks[0].failed.len(), 1);
}

macro_rules! both_backends {
    ($($name:ident),*) => {
        mod poll {
            use super::*;
            $(#[test] fn $name() { super::$name(Backend::Poll) })*
        }
        mod uring {
            use super::*;
            $(#[test] fn $name() { super::$name(Backend::Uring) })*
        }
    };
}

both_backends!(
    huge_unplaced_frame,
    lazy_connect_and_sizes,
    placement,
    simultaneous_connect,
    three_way,
    peer_failure,
    bad_peers,
    keyed_peers,
    cross_job_keys,
    silent_stranger,
    flow_control,
    coalesced_small_among_large,
    second_address,
    many_peers,
    cross_job_connect,
    cross_job_simultaneous,
    other_job_refused,
    port_connection,
    connect_port_refused,
    disconnect_rank,
    disconnect_port,
    disconnect_while_connecting,
    disconnect_mid_placement
);

#[test]
fn group_errors() {
    let mut n = TcpNetmod::new(config(Backend::Poll), "groups", 0).unwrap();
    for (g, job) in [(0, "x"), (TEMP_GROUP, "x"), (1, "groups")] {
        assert!(n.add_group(g, job).is_err(), "{g} {job}");
    }
    assert!(n.add_group(1, &"j".repeat(257)).is_err(), "job id too long");
    n.add_group(1, &"j".repeat(256)).unwrap();
    assert!(n.add_group(1, "other").is_err(), "group added already");
    let c = "tcp:127.0.0.1:1";
    n.connect(peer_id(1, 3), c).unwrap();
    // Groups not added, and temporary ids, cannot be connected to.
    assert!(matches!(
        n.connect(peer_id(2, 3), c),
        Err(NetmodError::Peer { .. })
    ));
    assert!(matches!(
        n.connect(peer_id(TEMP_GROUP, 0), c),
        Err(NetmodError::Peer { .. })
    ));
    n.remove_group(1);
    n.remove_group(1);
    n.add_group(1, "other").unwrap();
    assert!(n.knows(peer_id(1, 3)), "existing peers are not touched");
    assert_eq!(n.peer_count(), 1);
    n.disconnect(peer_id(1, 3));
    n.disconnect(12345);
    assert_eq!(n.peer_count(), 0);
    assert!(TcpNetmod::new(config(Backend::Poll), "groups", 1 << 32).is_err());
}

#[test]
fn bad_cards_and_settings() {
    let mut n = TcpNetmod::new(config(Backend::Poll), "cards", 0).unwrap();
    for card in [
        "",
        "tcp:",
        "ofi:fi_addr",
        "tcp:localhost:1",
        "tcp:1.2.3.4:0",
        "tcp:1.2.3.4:5,x",
    ] {
        assert!(
            matches!(n.connect(1, card), Err(NetmodError::BadCard { .. })),
            "{card:?}"
        );
    }
    assert!(!n.knows(1));
    assert!(matches!(
        n.try_send(1, b"h", b"p"),
        Err(NetmodError::Peer { peer: 1, .. })
    ));
    n.connect(1, "tcp:127.0.0.1:1").unwrap();
    let big = vec![0u8; (8 << 20) + 1];
    assert!(
        n.try_send(1, b"h", &big).is_err(),
        "payload above the piece size"
    );
    assert!(
        n.try_send(1, &[0; 257], b"").is_err(),
        "header above 256 bytes"
    );

    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    for bad in [
        &[("RIVET_TCP_BACKEND", "fast")][..],
        &[("RIVET_TCP_EAGER_MAX", "12Q")],
        &[("RIVET_TCP_PIECE", "0")],
    ] {
        let e = TcpConfig::from_vars(vars(bad)).unwrap_err().to_string();
        assert!(e.contains(bad[0].0), "{e}");
    }
    let c = TcpConfig {
        ifaces: vec!["no-such-if9".into()],
        ..TcpConfig::default()
    };
    let e = TcpNetmod::new(c, "j", 0).err().unwrap().to_string();
    assert!(e.contains("no-such-if9") && e.contains("lo"), "{e}");
}

#[test]
fn connect_refused_fails_the_peer() {
    for b in [Backend::Poll, Backend::Uring] {
        let Some(mut nets) = open_n(b, "refused", 1) else {
            continue;
        };
        let mut sinks = vec![Rec::default()];
        // A port nobody listens on: bind one, then close it.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let card = format!("tcp:{}", l.local_addr().unwrap());
        drop(l);
        nets[0].connect(5, &card).unwrap();
        match nets[0].try_send(5, &header(0, 1), b"x") {
            Ok(true) | Err(NetmodError::Peer { peer: 5, .. }) => {}
            r => panic!("{r:?}"),
        }
        pump(&mut nets, &mut sinks, |_, s| !s[0].failed.is_empty());
        spin(&mut nets, &mut sinks, 20);
        assert_eq!(sinks[0].failed.len(), 1);
        assert_eq!(sinks[0].failed[0].0, 5);
        assert!(nets[0].try_send(5, &header(0, 1), b"x").is_err());
    }
}

#[test]
fn uring_fallback_is_described() {
    let c = TcpConfig {
        inject_uring_failure: true,
        ..config(Backend::Auto)
    };
    let n = TcpNetmod::new(c.clone(), "fallback", 0).unwrap();
    assert_eq!(n.backend(), Backend::Poll);
    let d = n.describe();
    let line = &d.iter().find(|(k, _)| k == "tcp.backend").unwrap().1;
    assert!(
        line.starts_with("poll (io_uring unavailable: failure injected"),
        "{line}"
    );
    let e = TcpNetmod::new(
        TcpConfig {
            backend: Backend::Uring,
            ..c
        },
        "fallback",
        0,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("RIVET_TCP_BACKEND=uring") && e.contains("injected"),
        "{e}"
    );
    let p = TcpNetmod::new(config(Backend::Poll), "fallback", 0).unwrap();
    let line = p.describe()[0].1.clone();
    assert_eq!(line, "poll (RIVET_TCP_BACKEND=poll, the default)");
    assert!(p.describe()[1].1.starts_with("tcp:127.0.0.1:"));
    if let Ok(u) = TcpNetmod::new(config(Backend::Auto), "fallback", 0) {
        eprintln!("auto picked: {:?}", u.describe()[0]);
    }
}
