//! The libfabric netmod's connections: across jobs, refused jobs, port
//! connections and disconnects, between instances in this process, for the
//! providers `tcp;ofi_rxm` (on loopback) and `shm`, which every libfabric
//! build has: a provider that cannot be opened fails the test. Every wait
//! is bounded: a stuck test fails after its deadline. The bodies tcp
//! shares are in `common/connections.rs`.

#![cfg(feature = "ofi")]

mod common;

use std::time::{Duration, Instant};

use common::connections::{
    self as shared, cross_job_connect, disconnect_while_connecting, other_job_refused,
};
use common::ofi::*;
use common::*;
use rivet_netmods::{split_peer, Netmod, NetmodError, OfiConfig, TEMP_GROUP};

/// Every payload above the eager limit is placed: two or more here.
fn port_connection(prov: &str) {
    shared::port_connection(prov, 2)
}

/// A port HELLO to an endpoint that is gone: the handshake is never
/// answered, and the peer fails after the timeout, with nothing sent.
fn connect_port_refused(prov: &str) {
    if prov == SHM {
        // libfabric 1.17's shm keeps endpoints of this process in a
        // process-wide list and reaches a closed one through its unmapped
        // region: inserting or sending to it crashes (SIGSEGV).
        eprintln!("note: a dead shm endpoint of this process cannot be tested");
        return;
    }
    let cfg = OfiConfig {
        timeout: Duration::from_millis(1500),
        ..config(prov)
    };
    let Some(mut nets) = open_with(&cfg, &[("portdead", 0), ("portdead", 1)]) else {
        return;
    };
    let dead = card(&nets, 1);
    drop(nets.pop());
    let mut sinks = vec![Rec::default()];
    let start = Instant::now();
    match nets[0].connect_port(&dead, 1) {
        Ok(p) => {
            assert_eq!(split_peer(p).0, TEMP_GROUP);
            pump(&mut nets, &mut sinks, |_, s| !s[0].failed.is_empty());
            spin(&mut nets, &mut sinks, 20);
            assert_eq!(sinks[0].failed.len(), 1);
            assert_eq!(sinks[0].failed[0].0, p);
            assert!(start.elapsed() < cfg.timeout + Duration::from_secs(5));
            assert!(nets[0].try_send(p, &header(0, 1), b"x").is_err());
            assert_eq!(nets[0].peer_count(), 0);
        }
        Err(e) => panic!("{e}"),
    }
    assert!(matches!(
        nets[0].connect_port("ofi:nowhere:00", 1),
        Err(NetmodError::BadCard { .. })
    ));
}

/// The side that had not disconnected yet sees the peer go (its BYE) after
/// every message.
fn disconnect_rank(prov: &str) {
    shared::disconnect_case(prov, false, Rec::placing(), true)
}

fn disconnect_port(prov: &str) {
    shared::disconnect_case(prov, true, Rec::placing(), true)
}

/// Disconnecting a peer while its payload goes straight into `place`
/// memory: the netmod lets go of that memory before `disconnect` returns
/// and delivers nothing more. The sender keeps polling on a thread of its
/// own, as a separate process would.
fn disconnect_mid_placement(prov: &str) {
    const LEN: usize = 8 << 20;
    let Some(mut nets) = open_n(prov, "midplace", 2) else {
        return;
    };
    let mut sinks = vec![Rec::default(), Rec::placing()];
    connect_all(&mut nets);
    send(&mut nets, &mut sinks, 0, 1, 0, 1);
    pump(&mut nets, &mut sinks, |_, s| s[1].msgs.len() == 1);
    send(&mut nets, &mut sinks, 0, 1, 1, LEN);
    let mut recv = nets.pop().unwrap();
    let mut rsink = sinks.pop().unwrap();
    let mut sender = nets.pop().unwrap();
    let mut ssink = sinks.pop().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let t = std::thread::spawn(move || {
        let end = Instant::now() + DEADLINE;
        while !flag.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < end {
            sender.poll(&mut ssink).unwrap();
            std::thread::yield_now();
        }
        (sender, ssink)
    });
    let end = Instant::now() + DEADLINE;
    while rsink.outstanding.is_empty() && rsink.msgs.len() == 1 {
        assert!(Instant::now() < end, "no placement");
        recv.poll(&mut rsink).unwrap();
    }
    recv.disconnect(0);
    assert!(!recv.knows(0));
    // The engine may reuse the receive buffer now: it is no longer written.
    let bufs: Vec<Box<[u8]>> = rsink.outstanding.drain().map(|(_, b)| b).collect();
    let before: Vec<Vec<u8>> = bufs.iter().map(|b| b.to_vec()).collect();
    let delivered = rsink.msgs.len();
    for _ in 0..200 {
        recv.poll(&mut rsink).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut sender, mut ssink) = t.join().unwrap();
    for (b, was) in bufs.iter().zip(&before) {
        assert!(**b == **was, "placement memory written after disconnect");
    }
    assert_eq!(
        rsink.msgs.len(),
        delivered,
        "nothing delivered after disconnect"
    );
    assert!(rsink.failed.is_empty());
    assert_eq!(
        describe(&recv, "ofi.dropped"),
        "",
        "every placement stopped in time"
    );
    // The sender's payload send completes (the receiver drained it).
    let end = Instant::now() + DEADLINE;
    while !sender.idle() {
        assert!(Instant::now() < end, "sender never idle");
        sender.poll(&mut ssink).unwrap();
        recv.poll(&mut rsink).unwrap();
    }
}

both_providers!(
    cross_job_connect,
    other_job_refused,
    port_connection,
    connect_port_refused,
    disconnect_rank,
    disconnect_port,
    disconnect_while_connecting,
    disconnect_mid_placement
);
