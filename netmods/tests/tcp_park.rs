//! `Netmod::park` on both tcp backends: a process blocked in it is woken
//! by a message sent meanwhile (not by the timeout), on a connection that
//! was spinning just before (io_uring, `uring/spin.rs`) and on one of two
//! open connections (the poll backend's epoll path); and it refuses to
//! block while a write of its own waits for the next poll.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::tcp::{open_one, plain};
use common::*;
use rivet_netmods::tcp::{Backend, TcpNetmod};
use rivet_netmods::Netmod;

/// Long enough that a wait ended by it shows as a timeout, short enough
/// that a broken wake-up fails the test rather than hanging it.
const LONG: Duration = Duration::from_secs(10);

/// Rank 0 parks (`backend`); ranks 1 and 2 (poll backend, so they may
/// move to another thread) are its peers. None where io_uring is missing.
fn open(backend: Backend, job: &str) -> Option<(TcpNetmod, Vec<TcpNetmod>)> {
    let parker = open_one(plain(backend), job, 0)?;
    let senders = (1..3)
        .map(|r| TcpNetmod::new(plain(Backend::Poll), job, r).unwrap())
        .collect();
    Some((parker, senders))
}

/// Polls `n` and the others until `n`'s sink holds `count` messages.
fn pump_one(n: &mut TcpNetmod, s: &mut Rec, others: &mut [TcpNetmod], count: usize) {
    let end = Instant::now() + DEADLINE;
    let mut sinks: Vec<Rec> = others.iter().map(|_| Rec::default()).collect();
    while s.msgs.len() < count {
        assert!(Instant::now() < end, "timed out: {:?}", n.describe());
        n.poll(s).unwrap();
        for (o, os) in others.iter_mut().zip(&mut sinks) {
            o.poll(os).unwrap();
        }
    }
}

fn parks_and_wakes(backend: Backend) {
    let job = format!("park-{backend:?}");
    let Some((mut parker, mut senders)) = open(backend, &job) else {
        return;
    };
    // Everyone knows everyone; both senders' connections to rank 0 open
    // (so the poll backend watches two through epoll) by a message each,
    // and rank 0 answers rank 1 a few times (a ping-pong: an io_uring
    // connection starts spinning).
    let cards: Vec<String> = std::iter::once(&parker)
        .chain(&senders)
        .map(|n| n.business_card().to_string())
        .collect();
    for (i, c) in cards.iter().enumerate().skip(1) {
        parker.connect(i as u64, c).unwrap();
    }
    for s in senders.iter_mut() {
        s.connect(0, &cards[0]).unwrap();
    }
    let mut sink = Rec::default();
    let mut got = 0;
    for seq in 0..8u32 {
        let from = if seq == 0 { 2 } else { 1 };
        let p = payload(from as u64, seq, 8);
        assert!(senders[from - 1].try_send(0, &header(seq, 8), &p).unwrap());
        got += 1;
        pump_one(&mut parker, &mut sink, &mut senders, got);
        assert!(parker.try_send(1, &header(seq, 8), &p).unwrap());
    }
    let spins = parker.uring_spins();
    let line = describe(&parker, "tcp.backend");
    eprintln!("spins {spins} before parking: {line}");
    if line.contains("spins on recv") {
        assert!(spins > 0, "the ping-pong never spun: {line}");
    }
    // Once its answers are written and nothing is owed, rank 0 parks
    // (a spinning connection is watched by its RECV again first).
    let end = Instant::now() + DEADLINE;
    while !parker.park(Duration::from_micros(1)) {
        assert!(
            Instant::now() < end,
            "never parked: {:?}",
            parker.describe()
        );
        parker.poll(&mut sink).unwrap();
        for s in senders.iter_mut() {
            s.poll(&mut Rec::default()).unwrap();
        }
    }
    // Now a message from each sender while rank 0 blocks for up to LONG
    // at a time: each wait must end by the arrival, not the timeout.
    let (go_tx, go_rx) = mpsc::channel::<u32>();
    let sending = std::thread::spawn(move || {
        let mut sink = Rec::default();
        for seq in go_rx {
            // Likely after rank 0 blocked (if not, its wait must see the
            // bytes already there).
            std::thread::sleep(Duration::from_millis(50));
            let from = 1 + seq as usize % 2;
            let p = payload(from as u64, seq, 8);
            let s = &mut senders[from - 1];
            assert!(s.try_send(0, &header(seq, 8), &p).unwrap());
            while !s.idle() {
                s.poll(&mut sink).unwrap();
            }
        }
        senders
    });
    let (parks0, timeouts0) = parker.parks();
    for seq in 8..12u32 {
        go_tx.send(seq).unwrap();
        got += 1;
        let end = Instant::now() + DEADLINE;
        while sink.msgs.len() < got {
            assert!(
                Instant::now() < end,
                "never arrived: {:?}",
                parker.describe()
            );
            parker.park(LONG);
            parker.poll(&mut sink).unwrap();
        }
    }
    drop(go_tx);
    let senders = sending.join().expect("the sending thread");
    let (parks, timeouts) = parker.parks();
    eprintln!(
        "{} parks, {} timed out",
        parks - parks0,
        timeouts - timeouts0
    );
    assert!(parks > parks0, "rank 0 never blocked");
    assert_eq!(timeouts, timeouts0, "a wait ended by its timeout");
    assert!(sink.failed.is_empty(), "{:?}", sink.failed);
    let want: Vec<u32> = (0..12).collect();
    let mut seqs: Vec<u32> = sink.msgs.iter().map(|m| m.1).collect();
    seqs.sort();
    assert_eq!(seqs, want);
    for m in &sink.msgs {
        assert_eq!(m.3, fnv(&payload(m.0, m.1, 8)), "message {m:?} intact");
    }
    drop(senders);
}

#[test]
fn a_parked_uring_process_wakes_for_a_message() {
    parks_and_wakes(Backend::Uring);
}

#[test]
fn a_parked_poll_process_wakes_for_a_message() {
    parks_and_wakes(Backend::Poll);
}

/// The poll backend: a queue the socket did not take waits for the next
/// poll (its socket is dirty), which the peer waits for: no park until
/// it is written. (io_uring's leaves by a SEND in flight, whose
/// completion wakes a wait: it may park.)
#[test]
fn the_poll_backend_does_not_park_while_a_write_waits() {
    let (mut parker, mut senders) = open(Backend::Poll, "park-full").expect("poll opens");
    parker.connect(1, senders[0].business_card()).unwrap();
    senders[0].connect(0, parker.business_card()).unwrap();
    let mut sink = Rec::default();
    let mut theirs = Rec::default();
    // The connection opens (rank 1 gets a first message) ...
    assert!(parker
        .try_send(1, &header(0, 8), &payload(0, 0, 8))
        .unwrap());
    let end = Instant::now() + DEADLINE;
    while theirs.msgs.is_empty() {
        assert!(Instant::now() < end, "{:?}", parker.describe());
        parker.poll(&mut sink).unwrap();
        senders[0].poll(&mut theirs).unwrap();
    }
    // ... then rank 1 stops reading: rank 0's socket fills, then its queue.
    let big = payload(0, 1, 256 << 10);
    let mut seq = 1;
    while parker.idle() {
        assert!(Instant::now() < end, "{:?}", parker.describe());
        if parker.try_send(1, &header(seq, big.len()), &big).unwrap() {
            seq += 1;
        }
        parker.poll(&mut sink).unwrap();
    }
    let before = parker.parks();
    assert!(!parker.park(LONG), "parked with a write queued");
    assert_eq!(parker.parks(), before);
    drop(senders);
}
