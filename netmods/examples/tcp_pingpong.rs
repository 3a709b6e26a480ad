//! The tcp netmod alone, in one process and one thread: two netmods on
//! loopback ping-pong messages of SIZE bytes (8 by default, with a
//! 40-byte header, as the engine's). For counting what each backend costs per message without a
//! second process: the netmod's own system calls here, and the kernel's
//! io_uring events (task-work adds, poll arms) under `perf stat`
//! (BENCHMARKS.md, io_uring spinning). One thread drives both sides, so
//! its timings say little about two-process latency.
//!
//! `cargo run --release -p rivet-netmods --example tcp_pingpong -- [uring|uring-nospin|poll] [ITERS] [SIZE]`
//! (default `uring`, 100000 round trips, 8 bytes).

use std::ptr::NonNull;
use std::time::Instant;

use rivet_netmods::tcp::{Backend, TcpConfig, TcpNetmod};
use rivet_netmods::{Netmod, PeerId, Sink};

/// Counts arrivals; nothing else happens in a ping-pong.
struct Count(usize);

impl Sink for Count {
    fn deliver(&mut self, _: PeerId, _: &[u8], _: &[u8]) {
        self.0 += 1;
    }
    fn place(&mut self, _: PeerId, _: &[u8], _: usize) -> Option<NonNull<u8>> {
        None
    }
    fn peer_failed(&mut self, peer: PeerId, why: &str) {
        eprintln!("tcp_pingpong: peer {peer} failed: {why}");
        std::process::exit(1);
    }
    fn port_connection(&mut self, _: PeerId, _: u64) {}
}

fn main() {
    let mut args = std::env::args().skip(1);
    let how = args.next().unwrap_or_else(|| "uring".into());
    let iters: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let size: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(8);
    let (backend, spin) = match how.as_str() {
        "uring" => (Backend::Uring, true),
        "uring-nospin" => (Backend::Uring, false),
        "poll" => (Backend::Poll, true),
        other => {
            eprintln!("tcp_pingpong: unknown backend {other:?} (uring, uring-nospin, poll)");
            std::process::exit(2)
        }
    };
    let config = TcpConfig {
        backend,
        uring_spin: spin,
        ifaces: vec!["lo".into()],
        ..TcpConfig::default()
    };
    let mut nets: Vec<TcpNetmod> = (0..2)
        .map(|rank| {
            TcpNetmod::new(config.clone(), "pingpong", rank).unwrap_or_else(|e| {
                eprintln!("tcp_pingpong: {e}");
                std::process::exit(1)
            })
        })
        .collect();
    let cards: Vec<String> = nets.iter().map(|n| n.business_card().to_string()).collect();
    for (i, n) in nets.iter_mut().enumerate() {
        n.connect(1 - i as u64, &cards[1 - i]).expect("connect");
    }
    let mut sinks = [Count(0), Count(0)];
    let (header, payload) = ([0u8; 40], vec![0u8; size]);
    // One round trip: 0 sends, 1 polls until it arrived, and back.
    let round = |nets: &mut [TcpNetmod], sinks: &mut [Count; 2]| {
        for (from, to) in [(0, 1), (1, 0)] {
            let want = sinks[to].0 + 1;
            while !nets[from].try_send(to as u64, &header, &payload).unwrap() {
                nets[from].poll(&mut sinks[from]).unwrap();
            }
            while sinks[to].0 < want {
                nets[to].poll(&mut sinks[to]).unwrap();
                nets[from].poll(&mut sinks[from]).unwrap();
            }
        }
    };
    for _ in 0..iters / 10 {
        round(&mut nets, &mut sinks);
    }
    let calls0: u64 = nets.iter().map(|n| n.syscalls()).sum();
    let t = Instant::now();
    for _ in 0..iters {
        round(&mut nets, &mut sinks);
    }
    let dt = t.elapsed();
    let calls: u64 = nets.iter().map(|n| n.syscalls()).sum::<u64>() - calls0;
    let msgs = 2.0 * iters as f64;
    println!(
        "{how}: {:.2} us per round trip (one thread), {:.2} netmod system calls per message, spins {:?}",
        dt.as_secs_f64() * 1e6 / iters as f64,
        calls as f64 / msgs,
        nets.iter().map(|n| n.uring_spins()).collect::<Vec<_>>()
    );
}
