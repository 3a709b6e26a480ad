//! The TCP netmod against strangers and hostile peers: job secrets and
//! group keys in the HELLO, malformed peers, a huge unplaced frame and
//! silent strangers past the handshake deadline, between instances in this
//! process, over loopback, for both backends (io_uring skipped with a note
//! where no ring can be made). Every wait is bounded: a stuck test fails
//! after its deadline.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use common::tcp::*;
use common::*;
use rivet_netmods::auth::JobKey;
use rivet_netmods::tcp::{Backend, TcpConfig, TcpNetmod};
use rivet_netmods::{peer_id, split_peer, Netmod, TEMP_GROUP};

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
    let c = TcpConfig {
        job_key: Some(key),
        ..config(b)
    };
    let Some(mut nets) = open_with(&c, &[("keyed", 0), ("keyed", 1)]) else {
        return;
    };
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
        let Some(m) = open_one(c, job, rank) else {
            return;
        };
        nets.push(m);
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
    let cfg = TcpConfig {
        handshake_timeout: std::time::Duration::from_millis(50),
        ..config(b)
    };
    let Some(mut nets) = open_with(&cfg, &[("silent", 0), ("silent", 1)]) else {
        return;
    };
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

both_backends!(
    huge_unplaced_frame,
    bad_peers,
    keyed_peers,
    cross_job_keys,
    silent_stranger
);
