//! The libfabric netmod finding failed peers: a dropped peer, an idle one,
//! and the keepalive's PINGs between live and dead peers, between instances
//! in this process, for the providers `tcp;ofi_rxm` (on loopback) and
//! `shm`, which every libfabric build has: a provider that cannot be opened
//! fails the test. Every wait is bounded: a stuck test fails after its
//! deadline. `peer_failure`, which tcp shares, is in `common/connections.rs`.

#![cfg(feature = "ofi")]

mod common;

use std::time::{Duration, Instant};

use common::connections::peer_failure;
use common::ofi::*;
use common::*;
use rivet_netmods::{Netmod, OfiConfig, OfiNetmod};

/// A peer that was idle when it went: the first send after finds out
/// within the timeout (the provider alone would retry forever).
fn idle_peer_failure(prov: &str) {
    if prov == SHM {
        eprintln!("note: shm peer failure is not testable within one process");
        return;
    }
    let cfg = OfiConfig {
        timeout: Duration::from_millis(1500),
        ..config(prov)
    };
    let Some(mut nets) = open_with(&cfg, &[("idlefail", 0), ("idlefail", 1)]) else {
        return;
    };
    let mut sinks = vec![Rec::default(), Rec::default()];
    connect_all(&mut nets);
    send(&mut nets, &mut sinks, 1, 0, 0, 10);
    pump(&mut nets, &mut sinks, |n, s| {
        s[0].msgs.len() == 1 && n[1].idle()
    });
    drop(nets.remove(0));
    sinks.remove(0);
    spin(&mut nets, &mut sinks, 100);
    let start = Instant::now();
    let end = start + DEADLINE;
    let mut seq = 1;
    while sinks[0].failed.is_empty() {
        assert!(Instant::now() < end, "no peer_failed");
        if let Ok(true) = nets[0].try_send(0, &header(seq, 10), &payload(1, seq, 10)) {
            seq += 1;
        }
        spin(&mut nets, &mut sinks, 1);
    }
    assert!(start.elapsed() < cfg.timeout + Duration::from_secs(5));
    assert_eq!(sinks[0].failed.len(), 1);
    assert!(nets[0].try_send(0, &header(0, 1), b"x").is_err());
}

/// Settings for the keepalive tests: a short timeout, so a short interval.
fn keepalive_config(prov: &str) -> OfiConfig {
    OfiConfig {
        timeout: Duration::from_millis(1500),
        ..config(prov)
    }
}

/// Two netmods of `job` that have handshaken (one message each way,
/// sequence 0, `len` bytes) and are idle.
fn idle_pair(cfg: &OfiConfig, job: &str, len: usize) -> (Vec<OfiNetmod>, Vec<Rec>) {
    let mut nets = open_with(cfg, &[(job, 0), (job, 1)]).unwrap();
    let mut sinks = vec![Rec::default(), Rec::placing()];
    connect_all(&mut nets);
    send(&mut nets, &mut sinks, 0, 1, 0, len);
    send(&mut nets, &mut sinks, 1, 0, 0, len);
    pump(&mut nets, &mut sinks, |n, s| {
        s.iter().all(|s| s.msgs.len() == 1) && n.iter().all(|n| n.idle())
    });
    (nets, sinks)
}

/// Polls everyone for `d`.
fn spin_for(nets: &mut [OfiNetmod], sinks: &mut [Rec], d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        spin(nets, sinks, 1);
    }
}

/// A peer that dies while we have nothing in flight to it and only poll
/// (as an engine waiting for its answer does): the keepalive's PINGs find
/// out, within about two intervals and the timeout.
fn idle_peer_dies_while_we_poll(prov: &str) {
    if prov == SHM {
        eprintln!("note: shm peer failure is not testable within one process");
        return;
    }
    let cfg = keepalive_config(prov);
    let interval = cfg.keepalive_interval();
    let (mut nets, mut sinks) = idle_pair(&cfg, "kadead", 10);
    drop(nets.remove(0));
    sinks.remove(0);
    let start = Instant::now();
    pump(&mut nets, &mut sinks, |_, s| !s[0].failed.is_empty());
    let took = start.elapsed();
    eprintln!(
        "dead idle peer failed after {took:?}: {:?}; pings {:?}",
        sinks[0].failed,
        nets[0].pings()
    );
    assert!(took < cfg.timeout + 2 * interval + Duration::from_secs(5));
    assert!(nets[0].pings().0 >= 1, "found by a PING");
    spin_for(&mut nets, &mut sinks, interval);
    assert_eq!(sinks[0].failed.len(), 1, "{:?}", sinks[0].failed);
    assert_eq!(sinks[0].failed[0].0, 0);
    assert_eq!(sinks[0].msgs.len(), 1, "nothing delivered");
    assert!(nets[0].idle());
    assert_eq!(nets[0].connected_peers(), 0);
    // No more PINGs to a failed peer.
    let pings = nets[0].pings();
    spin_for(&mut nets, &mut sinks, 3 * interval);
    assert_eq!(nets[0].pings(), pings);
    assert!(nets[0].try_send(0, &header(1, 1), b"x").is_err());
}

/// Two live netmods with nothing to say PING each other: nothing reaches
/// the engine, nobody fails, they stay idle, and what they send afterwards
/// arrives whole and in order. After both disconnect, no more PINGs.
fn keepalive_between_idle_peers(prov: &str) {
    let cfg = keepalive_config(prov);
    let interval = cfg.keepalive_interval();
    let (mut nets, mut sinks) = idle_pair(&cfg, "kalive", 10);
    let start = Instant::now();
    pump(&mut nets, &mut sinks, |n, _| {
        start.elapsed() > 4 * interval && n.iter().all(|n| n.pings().1 >= 2)
    });
    for (n, s) in nets.iter().zip(&sinks) {
        let (sent, answered) = n.pings();
        eprintln!("pings sent {sent}, answered {answered}");
        assert!(
            sent >= answered && sent - answered <= 2,
            "{sent} {answered}"
        );
        assert!(n.idle());
        assert_eq!(s.msgs.len(), 1, "no PING reaches the engine");
        assert!(s.failed.is_empty(), "{:?}", s.failed);
        assert_eq!(n.connected_peers(), 1);
        assert_eq!(n.dropped(), 0);
        assert!(describe(n, "ofi.keepalive").contains(" sent, "));
    }
    // Credits and order are intact: a window's worth and more, large
    // ones among them, each way.
    let sizes: Vec<usize> = (0..20).map(|i| [10, 0, 100 << 10, 7][i % 4]).collect();
    for (i, &len) in sizes.iter().enumerate().skip(1) {
        send(&mut nets, &mut sinks, 0, 1, i as u32, len);
        send(&mut nets, &mut sinks, 1, 0, i as u32, len);
    }
    pump(&mut nets, &mut sinks, |n, s| {
        s.iter().all(|s| s.msgs.len() == sizes.len()) && n.iter().all(|n| n.idle())
    });
    assert_eq!(sinks[1].from(0), expect(0, &sizes));
    assert_eq!(sinks[0].from(1), expect(1, &sizes));
    // Disconnected (as the engine does: one side, then the other once
    // it saw the BYE): idle, and no PINGs any more.
    nets[0].disconnect(1);
    pump(&mut nets, &mut sinks, |_, s| !s[1].failed.is_empty());
    nets[1].disconnect(0);
    pump(&mut nets, &mut sinks, |n, _| n.iter().all(|n| n.idle()));
    let pings: Vec<u64> = nets.iter().map(|n| n.pings().0).collect();
    spin_for(&mut nets, &mut sinks, 3 * interval);
    for (n, &before) in nets.iter().zip(&pings) {
        assert_eq!(n.pings().0, before, "PINGs after disconnect");
        assert!(n.idle());
        assert_eq!(n.peer_count(), 0);
    }
    assert!(sinks[0].failed.is_empty(), "{:?}", sinks[0].failed);
    assert_eq!(sinks[1].failed.len(), 1);
}

/// A live peer that does not poll for a few intervals (less than the
/// timeout) is not failed; the PINGs it gets meanwhile are few; once it
/// polls again they are answered and the pair goes on.
fn unpolled_live_peer_not_failed(prov: &str) {
    let cfg = keepalive_config(prov);
    let interval = cfg.keepalive_interval();
    let (mut nets, mut sinks) = idle_pair(&cfg, "kaquiet", 10);
    // Settled: PINGs went both ways and all are answered.
    pump(&mut nets, &mut sinks, |n, _| {
        n.iter()
            .all(|n| n.pings().1 >= 1 && n.pings().0 == n.pings().1)
    });
    let before = nets[0].pings();
    // Only rank 0 polls, for three intervals (below the timeout).
    let start = Instant::now();
    while start.elapsed() < 3 * interval {
        nets[0].poll(&mut sinks[0]).unwrap();
        std::thread::yield_now();
    }
    let (sent, answered) = nets[0].pings();
    eprintln!(
        "unpolled for {:?}: pings {before:?} -> {:?}",
        start.elapsed(),
        (sent, answered)
    );
    assert!(sent > before.0, "rank 0 sent PINGs meanwhile");
    assert!(sent - answered <= 2, "at most two unanswered");
    assert!(sinks[0].failed.is_empty(), "{:?}", sinks[0].failed);
    // Both poll again: the PINGs are answered, nobody fails.
    pump(&mut nets, &mut sinks, |n, _| {
        let (s, a) = n[0].pings();
        s == a && s > sent
    });
    spin_for(&mut nets, &mut sinks, interval);
    assert!(sinks.iter().all(|s| s.failed.is_empty()));
    assert!(sinks.iter().all(|s| s.msgs.len() == 1));
    assert!(nets.iter().all(|n| n.idle() && n.connected_peers() == 1));
    send(&mut nets, &mut sinks, 0, 1, 1, 5);
    send(&mut nets, &mut sinks, 1, 0, 1, 5);
    pump(&mut nets, &mut sinks, |_, s| {
        s.iter().all(|s| s.msgs.len() == 2)
    });
    assert_eq!(sinks[1].from(0), expect(0, &[10, 5]));
    assert_eq!(sinks[0].from(1), expect(1, &[10, 5]));
}

both_providers!(
    peer_failure,
    idle_peer_failure,
    idle_peer_dies_while_we_poll,
    keepalive_between_idle_peers,
    unpolled_live_peer_not_failed
);
