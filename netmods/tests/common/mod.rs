//! What the netmod integration tests share: a recording `Sink` that
//! checks every message's header and payload and can hand out placement
//! memory, message patterns, and bounded polling loops over any netmod.

#![allow(dead_code)] // each test binary uses part of it

use std::collections::HashMap;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use rivet_netmods::{Netmod, NetmodError, PeerId, Sink};

pub mod connections;
pub mod kind;
#[cfg(feature = "ofi")]
pub mod ofi;
pub mod setup;
pub mod tcp;

/// How long any wait may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Business card of `nets[i]`.
pub fn card<N: Netmod>(nets: &[N], i: usize) -> String {
    nets[i].business_card().to_string()
}

pub fn connect_all<N: Netmod>(nets: &mut [N]) {
    let cards: Vec<String> = nets.iter().map(|n| n.business_card().to_string()).collect();
    for (i, n) in nets.iter_mut().enumerate() {
        for (j, c) in cards.iter().enumerate() {
            if i != j {
                n.connect(j as u64, c).unwrap();
            }
        }
    }
}

pub fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Payload `seq` from `from`: a pseudo-random stream seeded by (sender,
/// sequence), so no two messages and no two places in one message look
/// alike (a pattern repeating every 256 bytes hid pieces landing at a
/// wrong multiple of 256).
pub fn payload(from: u64, seq: u32, len: usize) -> Vec<u8> {
    let mut x = (from << 32 | seq as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

pub fn header(seq: u32, len: usize) -> Vec<u8> {
    let mut h = seq.to_le_bytes().to_vec();
    h.extend_from_slice(&(len as u64).to_le_bytes());
    h
}

#[derive(Default)]
pub struct Rec {
    /// (from, seq, payload length, payload hash)
    pub msgs: Vec<(PeerId, u32, usize, u64)>,
    pub failed: Vec<(PeerId, String)>,
    pub place: bool,
    /// Buffers handed out by `place` and not yet delivered into.
    pub outstanding: HashMap<usize, Box<[u8]>>,
    pub delivered_placed: usize,
    /// `port_connection`s: (peer, tag, messages from it delivered before).
    pub ports: Vec<(PeerId, u64, usize)>,
}

impl Rec {
    pub fn placing() -> Rec {
        Rec {
            place: true,
            ..Rec::default()
        }
    }

    pub fn from(&self, peer: PeerId) -> Vec<(u32, usize, u64)> {
        self.msgs
            .iter()
            .filter(|m| m.0 == peer)
            .map(|m| (m.1, m.2, m.3))
            .collect()
    }
}

impl Sink for Rec {
    fn deliver(&mut self, peer: PeerId, h: &[u8], p: &[u8]) {
        assert_eq!(h.len(), 12, "header intact");
        let seq = u32::from_le_bytes(h[..4].try_into().unwrap());
        let len = u64::from_le_bytes(h[4..].try_into().unwrap()) as usize;
        assert_eq!(p.len(), len, "payload length");
        // Keep a placed buffer alive until its bytes are hashed.
        let placed = self.outstanding.remove(&(p.as_ptr() as usize));
        self.delivered_placed += placed.is_some() as usize;
        self.msgs.push((peer, seq, p.len(), fnv(p)));
        drop(placed);
    }

    fn place(&mut self, _: PeerId, h: &[u8], len: usize) -> Option<NonNull<u8>> {
        assert_eq!(h.len(), 12);
        if !self.place {
            return None;
        }
        let mut b = vec![0u8; len].into_boxed_slice();
        let p = b.as_mut_ptr();
        self.outstanding.insert(p as usize, b);
        NonNull::new(p)
    }

    fn peer_failed(&mut self, peer: PeerId, why: &str) {
        self.failed.push((peer, why.to_string()));
    }

    fn port_connection(&mut self, peer: PeerId, tag: u64) {
        let before = self.msgs.iter().filter(|m| m.0 == peer).count();
        self.ports.push((peer, tag, before));
    }
}

/// Polls every netmod until `done` holds; panics at the deadline.
pub fn pump<N: Netmod>(nets: &mut [N], sinks: &mut [Rec], done: impl Fn(&[N], &[Rec]) -> bool) {
    let end = Instant::now() + DEADLINE;
    while !done(nets, sinks) {
        if Instant::now() >= end {
            dump(nets, sinks);
            panic!("timed out");
        }
        spin(nets, sinks, 1);
    }
}

/// What each side has, for a test that timed out.
pub fn dump<N: Netmod>(nets: &[N], sinks: &[Rec]) {
    for (n, s) in nets.iter().zip(sinks) {
        eprintln!(
            "{} msgs (last {:?}), failed {:?}, idle {}: {:?}",
            s.msgs.len(),
            s.msgs.last(),
            s.failed,
            n.idle(),
            n.describe()
        );
    }
}

/// Polls `rounds` times.
pub fn spin<N: Netmod>(nets: &mut [N], sinks: &mut [Rec], rounds: usize) {
    for _ in 0..rounds {
        for (n, s) in nets.iter_mut().zip(sinks.iter_mut()) {
            n.poll(s).unwrap();
        }
        std::thread::yield_now();
    }
}

/// Sends message `seq` of `len` bytes from `from` to `to`, polling
/// everyone while the transport is full.
pub fn send<N: Netmod>(
    nets: &mut [N],
    sinks: &mut [Rec],
    from: usize,
    to: u64,
    seq: u32,
    len: usize,
) {
    let (h, p) = (header(seq, len), payload(from as u64, seq, len));
    let end = Instant::now() + DEADLINE;
    while !nets[from].try_send(to, &h, &p).unwrap() {
        assert!(Instant::now() < end, "send timed out");
        spin(nets, sinks, 1);
    }
}

pub fn expect(from: u64, sizes: &[usize]) -> Vec<(u32, usize, u64)> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as u32, l, fnv(&payload(from, i as u32, l))))
        .collect()
}

pub fn describe<N: Netmod>(n: &N, key: &str) -> String {
    n.describe()
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
        .unwrap_or_default()
}

/// Whether `e`, from opening the io_uring backend, says only that this
/// kernel has no io_uring (ENOSYS) or forbids it (EPERM: a sysctl or a
/// seccomp filter): the one reason an io_uring variant may skip. Any other
/// failure fails the test, and `NEED_IO_URING=1` (a machine
/// known to have io_uring) allows no skip at all.
pub fn uring_missing_here(e: &NetmodError) -> bool {
    let why = e.to_string();
    let missing = why.contains("io_uring_setup: ")
        && (why.contains("(os error 1)") || why.contains("(os error 38)"));
    let required = std::env::var_os("NEED_IO_URING").is_some_and(|v| v == "1");
    assert!(
        missing && !required,
        "the io_uring backend failed to open: {why}"
    );
    eprintln!("note: skipping the io_uring variant: {why}");
    true
}
