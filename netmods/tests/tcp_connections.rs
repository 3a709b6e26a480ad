//! The TCP netmod's connections: simultaneous connects, failed peers, a
//! slow connector, across jobs, refused jobs, port connections and
//! disconnects, between instances in this process, over loopback, for both
//! backends (io_uring skipped with a note where no ring can be made). Every
//! wait is bounded: a stuck test fails after its deadline. The bodies the
//! libfabric netmod shares are in `common/connections.rs`.

mod common;

use std::time::Instant;

use common::connections::{
    self as shared, cross_job_connect, disconnect_while_connecting, other_job_refused, peer_failure,
};
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

/// A payload is placed only when it is not whole in the input buffer
/// when its header arrives: at least one of the large ones here.
fn port_connection(b: Backend) {
    shared::port_connection(b, 1)
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

/// Neither side reports a failure: B disconnects once it has A's last
/// message.
fn disconnect_rank(b: Backend) {
    shared::disconnect_case(b, false, Rec::default(), false)
}

fn disconnect_port(b: Backend) {
    shared::disconnect_case(b, true, Rec::default(), false)
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
