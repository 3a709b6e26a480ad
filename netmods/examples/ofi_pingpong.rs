//! The libfabric netmod alone, without the engine: an 8-byte ping-pong
//! (with a 40-byte header, as the engine's) between two processes, pinned
//! to CPUs 0 and 1. It splits Rivet's latency over `RIVET_NETMOD=ofi` into
//! the netmod's part and the engine's (BENCHMARKS.md, libfabric netmod).
//!
//! `cargo run --release -p rivet-netmods --example ofi_pingpong -- [PROVIDER] [ITERS]`
//! (default `shm`, 200000 round trips).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::ptr::NonNull;
use std::time::Instant;

use rivet_netmods::{Netmod, OfiConfig, OfiNetmod, PeerId, Sink};

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
        eprintln!("ofi_pingpong: peer {peer} failed: {why}");
        std::process::exit(1);
    }
    fn port_connection(&mut self, _: PeerId, _: u64) {}
}

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_setaffinity
    // reads `size_of` bytes of it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let provider = args.next().unwrap_or_else(|| "shm".into());
    let iters: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(200_000);
    let (parent, child) = UnixStream::pair().expect("socketpair");
    // SAFETY: no threads yet; each side opens its own netmod after the fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    let me: u64 = if pid == 0 { 1 } else { 0 };
    let mut sock = if me == 0 { parent } else { child };
    pin(me as usize);
    let config = OfiConfig {
        provider: Some(provider.clone()),
        ..OfiConfig::default()
    };
    let mut net = OfiNetmod::new(config, "pingpong", me).unwrap_or_else(|e| {
        eprintln!("ofi_pingpong: {e}");
        std::process::exit(1)
    });
    writeln!(sock, "{}", net.business_card()).expect("send card");
    let mut card = String::new();
    BufReader::new(&sock)
        .read_line(&mut card)
        .expect("read card");
    let peer = 1 - me;
    net.connect(peer, card.trim()).expect("connect");
    let mut sink = Count(0);
    let (header, payload) = ([0u8; 40], [0u8; 8]);
    let warmup = iters / 10;
    let mut start = Instant::now();
    for i in 0..warmup + iters {
        if i == warmup {
            start = Instant::now();
        }
        let send = |net: &mut OfiNetmod, sink: &mut Count| {
            while !net.try_send(peer, &header, &payload).expect("send") {
                net.poll(sink).expect("poll");
            }
        };
        if me == 0 {
            send(&mut net, &mut sink);
        }
        let want = sink.0 + 1;
        while sink.0 < want {
            net.poll(&mut sink).expect("poll");
        }
        if me == 1 {
            send(&mut net, &mut sink);
        }
    }
    let half = start.elapsed().as_secs_f64() * 1e6 / iters as f64 / 2.0;
    // Flush the last answer before the peer's endpoint goes.
    while !net.idle() {
        net.poll(&mut sink).expect("poll");
    }
    if me == 0 {
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        println!("{provider}: 8 B + 40 B header, {half:.3} us half round trip");
    } else {
        // Stay until the parent has its last message.
        for _ in 0..100_000 {
            net.poll(&mut sink).expect("poll");
        }
    }
}
