//! Connection test bodies both netmods share, each generic over the
//! netmod `Kind` and instantiated per tcp backend (`tcp_connections.rs`)
//! and per libfabric provider (`ofi_connections.rs`, `ofi_failure.rs`).
//! Where the two netmods differ, the caller says what its netmod does.

use std::time::Instant;

use rivet_netmods::{peer_id, split_peer, Netmod, NetmodError, TEMP_GROUP};

use super::kind::{Counted, Kind};
use super::*;

/// A netmod dropped mid-conversation: the survivor's sends to it fail
/// (`peer_failed`, then `Err`) within a bounded time, and its queue to the
/// dead peer is dropped.
pub fn peer_failure<K: Kind>(k: K) {
    if !k.peer_may_die_here() {
        eprintln!("note: a peer's failure is not testable within one process here");
        return;
    }
    let Some(mut nets) = k.open_n("fail", 2) else {
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

/// Jobs "xA" (ranks 0, 1) and "xB" (rank 0), each knowing the other as
/// group 1 (A) and group 7 (B): every process reaches every other, and a
/// rank-0 process of each job is a peer of the other with the same rank.
pub fn cross_job_connect<K: Kind>(k: K) {
    let Some(mut nets) = k.open_jobs(&[("xA", 0), ("xA", 1), ("xB", 0)]) else {
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
    for (i, n) in nets.iter().enumerate() {
        assert_eq!(n.connections_made(), 2, "process {i}");
        assert_eq!(n.peer_count(), 2, "process {i}");
        assert_eq!(n.connected_peers(), 2, "process {i}");
    }
}

/// Rank connections (HELLOs) from a job not added, or removed, are
/// refused, with nothing delivered; port connections from any job are
/// served.
pub fn other_job_refused<K: Kind>(k: K) {
    let Some(mut nets) = k.open_jobs(&[("rjA", 0), ("rjB", 0), ("rjA", 1)]) else {
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
    assert!(sinks[1].msgs.is_empty() && sinks[1].ports.is_empty());
    // Once added it is accepted (after forgetting the failed peer).
    nets[1].add_group(1, "rjA").unwrap();
    nets[0].disconnect(b0);
    assert!(!nets[0].knows(b0));
    nets[0].connect(b0, &c1).unwrap();
    send(&mut nets, &mut sinks, 0, b0, 0, 10);
    pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == 1);
    assert_eq!(sinks[1].from(peer_id(1, 0)), expect(0, &[10]));
    // Removed: refused again, while the existing pair is untouched.
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
/// to the same process is a connection of its own. At least `min_placed`
/// of the large payloads go straight into `place` memory.
pub fn port_connection<K: Kind>(k: K, min_placed: usize) {
    let Some(mut nets) = k.open_jobs(&[("pA", 0), ("pB", 0)]) else {
        return;
    };
    let mut sinks = vec![Rec::default(), Rec::placing()];
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
    assert!(
        sinks[1].delivered_placed >= min_placed,
        "large payloads placed: {} of at least {min_placed}",
        sinks[1].delivered_placed
    );
    assert!(nets[1].knows(q));
    for (i, &len) in sizes.iter().enumerate() {
        send(&mut nets, &mut sinks, 1, q, i as u32, len);
    }
    pump(&mut nets, &mut sinks, |_, s| s[0].msgs.len() == sizes.len());
    assert_eq!(sinks[0].from(p), expect(1, &sizes));
    // Another to the same card: a new connection and new ids on both sides.
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

/// Both ends disconnect after a goodbye, as the engine does: everything
/// sent before `disconnect` arrives whole, input after it is dropped. B
/// (its sink `receiver`) says goodbye first, A answers with its last
/// messages and disconnects, B keeps sending until it sees A go: when
/// `bye_reported`, as `peer_failed` "disconnected" after every message;
/// otherwise as the last message, with no failure on either side.
/// Afterwards the pair can connect again.
pub fn disconnect_case<K: Kind>(k: K, port: bool, receiver: Rec, bye_reported: bool) {
    let Some(mut nets) = k.open_jobs(&[("dA", 0), ("dB", 0)]) else {
        return;
    };
    let mut sinks = vec![Rec::default(), receiver];
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
    // without polling: they go out after `disconnect` returned.
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
    // B keeps sending until it sees A go: A drops all of it.
    for seq in 1..4 {
        send(&mut nets, &mut sinks, 1, pb, seq, 1000);
    }
    if bye_reported {
        pump(&mut nets, &mut sinks, |_, s| !s[1].failed.is_empty());
        assert_eq!(sinks[1].from(pb), expect(0, &sizes));
        assert_eq!(sinks[1].failed.len(), 1);
        assert_eq!(sinks[1].failed[0].0, pb);
        assert!(
            sinks[1].failed[0].1.contains("disconnected"),
            "{:?}",
            sinks[1].failed
        );
    } else {
        pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == sizes.len());
        assert_eq!(sinks[1].from(pb), expect(0, &sizes));
    }
    nets[1].disconnect(pb);
    assert!(!nets[1].knows(pb));
    pump(&mut nets, &mut sinks, |n, _| n.iter().all(|n| n.idle()));
    spin(&mut nets, &mut sinks, 50);
    assert_eq!(
        sinks[0].from(pa),
        expect(1, &[1]),
        "nothing after disconnect"
    );
    let failures = bye_reported as usize;
    assert!(sinks[0].failed.is_empty(), "{:?}", sinks[0].failed);
    assert_eq!(sinks[1].failed.len(), failures, "{:?}", sinks[1].failed);
    for n in &nets {
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
    assert_eq!(sinks[0].failed.len() + sinks[1].failed.len(), failures);
}

/// Disconnecting a port connection before it is even made (its handshake
/// not answered yet): the connect goes on and the queue is written. The
/// other side, which did not disconnect, sees the end as a failure after
/// every message.
pub fn disconnect_while_connecting<K: Kind>(k: K) {
    let Some(mut nets) = k.open_jobs(&[("dcA", 0), ("dcB", 0)]) else {
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

/// Three ranks all sending to each other, `n` messages of `size(seq)`
/// bytes each way: everything arrives in order, over one connection per
/// pair.
pub fn three_way<K: Kind>(k: K, n: u32, size: fn(u32) -> usize) {
    let Some(mut nets) = k.open_n("three", 3) else {
        return;
    };
    let mut sinks: Vec<Rec> = (0..3).map(|_| Rec::default()).collect();
    connect_all(&mut nets);
    for seq in 0..n {
        for from in 0..3 {
            for to in (0..3u64).filter(|&t| t != from as u64) {
                send(&mut nets, &mut sinks, from, to, seq, size(seq));
            }
        }
    }
    pump(&mut nets, &mut sinks, |_, s| {
        s.iter().all(|s| s.msgs.len() == 2 * n as usize)
    });
    spin(&mut nets, &mut sinks, 20);
    let sizes: Vec<usize> = (0..n).map(size).collect();
    for (me, s) in sinks.iter().enumerate() {
        for from in (0..3u64).filter(|&f| f != me as u64) {
            assert_eq!(s.from(from), expect(from, &sizes));
        }
        assert!(s.failed.is_empty());
    }
    for n in &nets {
        assert_eq!(n.connections_made(), 2);
        assert_eq!(n.connected_peers(), 2);
    }
}
