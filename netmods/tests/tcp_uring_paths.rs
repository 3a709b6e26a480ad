//! The io_uring backend's optional paths, each behind a runtime probe:
//! receive bundles (a completion filling several provided buffers, 6.10+)
//! and zero-copy SEND_ZC for queued bytes (6.0+, only to peers on another
//! host unless forced), and direct receives in DEFER_TASKRUN mode. Each
//! carries a stream intact, is used exactly when
//! configured and probed, and stays off for a peer on this host: loopback,
//! or our own interface address. Skipped with a note where no ring can be
//! made.

mod common;

use common::tcp::{open_n_with, plain};
use common::*;
use rivet_netmods::tcp::{Backend, TcpConfig, TcpNetmod, ZeroCopy};
use rivet_netmods::Netmod;

/// Rank 0 sends `sizes` while rank 1 does not poll (its socket fills, then
/// rank 0's queue, which leaves in large flights); then both poll until
/// everything arrived. Checks every message, in order.
fn stream(nets: &mut [TcpNetmod], sizes: &[usize]) {
    let mut sinks = vec![Rec::default(), Rec::default()];
    connect_all(nets);
    send(nets, &mut sinks, 0, 1, 0, 1);
    pump(nets, &mut sinks, |_, s| s[1].msgs.len() == 1);
    let mut sent = vec![1];
    for (i, &len) in sizes.iter().enumerate() {
        let seq = i as u32 + 1;
        let p = payload(0, seq, len);
        if !nets[0].try_send(1, &header(seq, len), &p).unwrap() {
            break;
        }
        sent.push(len);
        nets[0].poll(&mut sinks[0]).unwrap();
    }
    assert!(
        sent.len() > 8,
        "the queue took only {} messages",
        sent.len()
    );
    pump(nets, &mut sinks, |n, s| {
        s[1].msgs.len() == sent.len() && n[0].idle()
    });
    assert_eq!(sinks[1].from(0), expect(0, &sent));
    assert!(sinks.iter().all(|s| s.failed.is_empty()));
}

fn sizes() -> Vec<usize> {
    // Large frames (queue flights well past the zero-copy minimum) with
    // small ones between them (frames straddling buffer boundaries).
    (0..48)
        .map(|i| if i % 3 == 2 { 1 + i * 7 } else { 256 << 10 })
        .collect()
}

fn config(bundles: bool, zc: ZeroCopy) -> TcpConfig {
    TcpConfig {
        piece: 1 << 20,
        uring_bundles: bundles,
        // The paths under test are the ring's: the busy connection
        // would spin on plain `recv` (tested on its own below).
        uring_spin: false,
        send_zc: zc,
        ..plain(Backend::Uring)
    }
}

#[test]
fn forced_zero_copy_and_bundles_carry_a_stream() {
    let c = config(true, ZeroCopy::Always);
    let Some(mut nets) = open_n_with(&c, "zc-always", 2) else {
        return;
    };
    let line = describe(&nets[0], "tcp.backend");
    stream(&mut nets, &sizes());
    let (zc, _) = nets[0].uring_paths();
    let (_, bundles) = nets[1].uring_paths();
    eprintln!("zero-copy flights {zc}, bundles {bundles}: {line}");
    if line.contains("zero-copy send to every peer") {
        assert!(zc > 0, "no flight went zero-copy: {line}");
    } else {
        eprintln!("note: no SEND_ZC here ({line})");
        assert_eq!(zc, 0);
    }
    if line.contains("recv bundles") {
        assert!(bundles > 0, "no completion filled a bundle: {line}");
    } else {
        eprintln!("note: no receive bundles here ({line})");
        assert_eq!(bundles, 0);
    }
}

#[test]
fn without_bundles_or_zero_copy_the_plain_paths_carry_it() {
    let c = config(false, ZeroCopy::Off);
    let Some(mut nets) = open_n_with(&c, "plain", 2) else {
        return;
    };
    let line = describe(&nets[0], "tcp.backend");
    assert!(
        !line.contains("recv bundles") && line.contains("no zero-copy send"),
        "{line}"
    );
    stream(&mut nets, &sizes());
    assert_eq!(nets[0].uring_paths(), (0, 0));
    assert_eq!(nets[1].uring_paths(), (0, 0));
}

/// The default (`Remote`) never sends zero-copy to a peer on this host:
/// over loopback, and over our own non-loopback address, if there is one.
#[test]
fn zero_copy_stays_off_for_peers_on_this_host() {
    for ifaces in [vec!["lo".to_string()], Vec::new()] {
        let c = TcpConfig {
            ifaces,
            ..config(true, ZeroCopy::Remote)
        };
        let Some(mut nets) = open_n_with(&c, "zc-local", 2) else {
            return;
        };
        let card = nets[0].business_card().to_string();
        stream(&mut nets, &sizes());
        assert_eq!(nets[0].uring_paths().0, 0, "zero-copy to {card}");
    }
}

/// With DEFER_TASKRUN and multishot receives, a poll that sees the
/// kernel's task-work flag reads the socket by a plain `recv`: a
/// ping-pong of small messages, and large placed ones, arrive intact and
/// in order that way on both sides. In other modes nothing is read so.
#[test]
fn flagged_polls_read_directly_and_keep_order() {
    let c = config(true, ZeroCopy::Remote);
    let Some(mut nets) = open_n_with(&c, "direct", 2) else {
        return;
    };
    let line = describe(&nets[0], "tcp.backend");
    let mut sinks = vec![Rec::placing(), Rec::placing()];
    connect_all(&mut nets);
    // Ping-pong: each message answered before the next; every few a large
    // one (placed straight into the sink's buffer).
    let sizes: Vec<usize> = (0..60)
        .map(|i| if i % 10 == 9 { 1 << 20 } else { 8 })
        .collect();
    for (i, &len) in sizes.iter().enumerate() {
        for (from, to) in [(0, 1), (1, 0)] {
            send(&mut nets, &mut sinks, from, to as u64, i as u32, len);
            pump(&mut nets, &mut sinks, |_, s| s[to].msgs.len() == i + 1);
        }
    }
    pump(&mut nets, &mut sinks, |n, _| n.iter().all(|n| n.idle()));
    assert_eq!(sinks[1].from(0), expect(0, &sizes));
    assert_eq!(sinks[0].from(1), expect(1, &sizes));
    assert!(sinks.iter().all(|s| s.failed.is_empty()));
    assert!(sinks.iter().all(|s| s.delivered_placed > 0));
    let direct: Vec<u64> = nets.iter().map(|n| n.uring_direct_reads()).collect();
    eprintln!("direct reads {direct:?}: {line}");
    if line.contains("direct recv when the kernel flags task work") {
        assert!(line.contains("defer taskrun"), "{line}");
        assert!(direct.iter().all(|&d| d > 0), "no direct read: {direct:?}");
    } else {
        eprintln!("note: no direct reads here ({line})");
        assert_eq!(direct, [0, 0]);
    }
}

/// Two peers stream large placed frames and small ones to one receiver at
/// once: its direct reads follow whichever connection last received (or
/// one spins while the other is read through the ring), and both streams
/// arrive intact and in order.
#[test]
fn direct_reads_with_two_busy_peers_keep_each_stream() {
    for spin in [false, true] {
        two_busy_peers(spin);
    }
}

fn two_busy_peers(spin: bool) {
    let c = TcpConfig {
        uring_spin: spin,
        ..config(true, ZeroCopy::Remote)
    };
    let Some(mut nets) = open_n_with(&c, &format!("direct-two-{spin}"), 3) else {
        return;
    };
    let mut sinks = vec![Rec::placing(), Rec::placing(), Rec::placing()];
    connect_all(&mut nets);
    let sizes: Vec<usize> = (0..40)
        .map(|i| if i % 4 == 3 { 1 << 20 } else { 8 + i * 3 })
        .collect();
    for (i, &len) in sizes.iter().enumerate() {
        for from in [1, 2] {
            send(&mut nets, &mut sinks, from, 0, i as u32, len);
        }
    }
    pump(&mut nets, &mut sinks, |n, s| {
        s[0].msgs.len() == 2 * sizes.len() && n.iter().all(|n| n.idle())
    });
    assert_eq!(sinks[0].from(1), expect(1, &sizes));
    assert_eq!(sinks[0].from(2), expect(2, &sizes));
    assert!(sinks.iter().all(|s| s.failed.is_empty()));
    let line = describe(&nets[0], "tcp.backend");
    let (direct, spins) = (nets[0].uring_direct_reads(), nets[0].uring_spins());
    eprintln!("direct reads {direct}, spins {spins}: {line}");
    if line.contains("direct recv when the kernel flags task work") {
        assert!(direct > 0, "{line}");
        assert_eq!(spins > 0, spin, "{line}");
    }
}

/// The busy connection spins (read by plain `recv` every poll, no
/// RECV armed, `uring/spin.rs`): a ping-pong of small and large placed
/// messages arrives intact and in order while it does; once quiet for a
/// while it is watched again, and idle polls make no system call; traffic
/// after that arrives too.
#[test]
fn the_busy_connection_spins_then_goes_quiet() {
    let c = TcpConfig {
        uring_spin: true,
        ..config(true, ZeroCopy::Remote)
    };
    let Some(mut nets) = open_n_with(&c, "spin", 2) else {
        return;
    };
    let line = describe(&nets[0], "tcp.backend");
    let mut sinks = vec![Rec::placing(), Rec::placing()];
    connect_all(&mut nets);
    let sizes: Vec<usize> = (0..80)
        .map(|i| if i % 20 == 19 { 1 << 20 } else { 8 + i })
        .collect();
    let round = |nets: &mut Vec<TcpNetmod>, sinks: &mut Vec<Rec>, i: usize| {
        for (from, to) in [(0, 1), (1, 0)] {
            send(nets, sinks, from, to as u64, i as u32, sizes[i]);
            pump(nets, sinks, |_, s| s[to].msgs.len() == i + 1);
        }
    };
    for i in 0..60 {
        round(&mut nets, &mut sinks, i);
    }
    let spins: Vec<u64> = nets.iter().map(|n| n.uring_spins()).collect();
    eprintln!("spins {spins:?}: {line}");
    if !line.contains("spins on recv") {
        eprintln!("note: no spinning here ({line})");
        assert_eq!(spins, [0, 0]);
        return;
    }
    assert!(spins.iter().all(|&s| s > 0), "never spun: {spins:?}");
    // Quiet: spinning polls (one `recv` each) until the watch is back,
    // then polls are free.
    spin(&mut nets, &mut sinks, 600);
    let calls: Vec<u64> = nets.iter().map(|n| n.syscalls()).collect();
    spin(&mut nets, &mut sinks, 200);
    let after: Vec<u64> = nets.iter().map(|n| n.syscalls()).collect();
    assert_eq!(calls, after, "idle polls made system calls: {line}");
    for i in 60..sizes.len() {
        round(&mut nets, &mut sinks, i);
    }
    pump(&mut nets, &mut sinks, |n, _| n.iter().all(|n| n.idle()));
    assert_eq!(sinks[1].from(0), expect(0, &sizes));
    assert_eq!(sinks[0].from(1), expect(1, &sizes));
    assert!(sinks.iter().all(|s| s.failed.is_empty()));
    let again: Vec<u64> = nets.iter().map(|n| n.uring_spins()).collect();
    assert!(
        again.iter().zip(&spins).all(|(a, b)| a > b),
        "did not spin again after the quiet: {spins:?} then {again:?}"
    );
}

/// A connection that stopped spinning (quiet past `SPIN_IDLE_MAX` polls)
/// is watched by a readiness poll, which takes no bytes: the frame that
/// ends the quiet is read directly and spinning starts again, and the
/// very next poll reads the frame after it. Were the multishot RECV armed
/// instead, that poll could read nothing: it must first enter to cancel
/// the RECV (a bw sender's window of CTS frames waited for that enter).
#[test]
fn after_the_quiet_the_next_poll_reads_on() {
    let c = TcpConfig {
        uring_spin: true,
        ..config(true, ZeroCopy::Remote)
    };
    let Some(mut nets) = open_n_with(&c, "quiet-read-on", 2) else {
        return;
    };
    let line = describe(&nets[0], "tcp.backend");
    if !line.contains("spins on recv") {
        eprintln!("note: no spinning here ({line})");
        return;
    }
    let mut sinks = vec![Rec::default(), Rec::default()];
    connect_all(&mut nets);
    let mut sizes = Vec::new();
    for i in 0..20u32 {
        sizes.push(8);
        send(&mut nets, &mut sinks, 0, 1, i, 8);
        pump(&mut nets, &mut sinks, |_, s| {
            s[1].msgs.len() == i as usize + 1
        });
    }
    // Quiet: both connections stop spinning and are watched again.
    spin(&mut nets, &mut sinks, 600);
    let spins = nets[1].uring_spins();
    for (seq, second) in [(20u32, false), (21, true)] {
        sizes.push(8);
        send(&mut nets, &mut sinks, 0, 1, seq, 8);
        // Written now if it waited in the queue (a small frame after
        // another since the last poll).
        nets[0].poll(&mut sinks[0]).unwrap();
        let want = seq as usize + 1;
        if second {
            // On loopback the bytes are in the socket well before this.
            std::thread::sleep(std::time::Duration::from_millis(20));
            nets[1].poll(&mut sinks[1]).unwrap();
            assert_eq!(
                sinks[1].msgs.len(),
                want,
                "the poll after the quiet's first frame read nothing: {line}"
            );
        } else {
            let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while sinks[1].msgs.len() < want {
                assert!(std::time::Instant::now() < end, "timed out");
                nets[1].poll(&mut sinks[1]).unwrap();
            }
        }
    }
    assert!(nets[1].uring_spins() > spins, "did not spin again: {line}");
    pump(&mut nets, &mut sinks, |n, _| n.iter().all(|n| n.idle()));
    assert_eq!(sinks[1].from(0), expect(0, &sizes));
    assert!(sinks.iter().all(|s| s.failed.is_empty()));
}

/// Windows of large frames from two peers to one receiver, with quiet
/// gaps between them long enough for a spinning connection to stop
/// spinning and be watched again: each window's first bytes arrive while
/// the connections are watched, one of them not the one direct reads try
/// first. Every byte arrives, in order; and once a connection has carried
/// bulk data it is watched by a readiness poll, not its multishot RECV,
/// so the later windows' bytes never pass through provided buffers (one
/// copy more) but go straight into the target by plain `recv`.
#[test]
fn windows_of_large_frames_skip_the_provided_buffers() {
    for spinning in [false, true] {
        for place in [true, false] {
            large_windows(spinning, place);
        }
    }
}

fn large_windows(spinning: bool, place: bool) {
    let c = TcpConfig {
        uring_spin: spinning,
        ..config(true, ZeroCopy::Remote)
    };
    let Some(mut nets) = open_n_with(&c, &format!("windows-{spinning}-{place}"), 3) else {
        return;
    };
    let rec = || {
        if place {
            Rec::placing()
        } else {
            Rec::default()
        }
    };
    let mut sinks = vec![rec(), rec(), rec()];
    connect_all(&mut nets);
    // A small frame (as a rendezvous request) then large ones: not placed,
    // they go through the parser's overflow buffer, as 64 KiB eager ones.
    const WINDOW: usize = 8;
    let sizes: Vec<usize> = (0..4 * WINDOW)
        .map(|i| if i % WINDOW == 0 { 8 } else { 256 << 10 })
        .collect();
    let mut after_first = None;
    for w in 0..sizes.len() / WINDOW {
        for (i, &len) in sizes.iter().enumerate().skip(w * WINDOW).take(WINDOW) {
            for from in [1, 2] {
                send(&mut nets, &mut sinks, from, 0, i as u32, len);
            }
        }
        let n = 2 * (w + 1) * WINDOW;
        pump(&mut nets, &mut sinks, |_, s| s[0].msgs.len() == n);
        // The gap: past SPIN_IDLE_MAX empty polls, the watch is back.
        spin(&mut nets, &mut sinks, 200);
        after_first.get_or_insert(nets[0].uring_rx_bytes());
    }
    pump(&mut nets, &mut sinks, |n, _| n.iter().all(|n| n.idle()));
    assert_eq!(sinks[0].from(1), expect(1, &sizes));
    assert_eq!(sinks[0].from(2), expect(2, &sizes));
    assert!(sinks.iter().all(|s| s.failed.is_empty()));
    assert_eq!(sinks[0].delivered_placed > 0, place);
    let (first, all) = (after_first.unwrap(), nets[0].uring_rx_bytes());
    let line = describe(&nets[0], "tcp.backend");
    eprintln!(
        "spin {spinning}, place {place}: after the first window {first:?}, in all {all:?}: {line}"
    );
    let total = all.ring + all.direct + all.single;
    let payload: usize = 2 * sizes.iter().sum::<usize>();
    assert!(total >= payload as u64, "{all:?} < {payload}");
    if line.contains("direct recv when the kernel flags task work") {
        assert_eq!(all.ring, first.ring, "bulk data through provided buffers");
    }
}
