//! The TCP netmod's connections: simultaneous connects, failed peers, a
//! slow connector, across jobs, refused jobs, port connections and
//! disconnects, between instances in this process, over loopback, for both
//! backends (io_uring skipped with a note where no ring can be made). Every
//! wait is bounded: a stuck test fails after its deadline.

mod common;

use std::time::Instant;

use common::tcp::*;
use common::*;
use rivet_netmods::tcp::{Backend, TcpConfig, TcpNetmod};
use rivet_netmods::{peer_id, split_peer, Netmod, NetmodError, TEMP_GROUP};

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

both_backends!(
    simultaneous_connect,
    peer_failure,
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
