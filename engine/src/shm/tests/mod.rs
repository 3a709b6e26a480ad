//! ShmNode tests: several handles on one segment in one process, threads as
//! ranks. What the tests share is here; each concept has a module.

use super::*;
use crate::wire::WireHeader;
use std::path::Path;
use std::sync::atomic::AtomicUsize;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A unique segment name that is unlinked when the guard drops (even when
/// the test fails).
struct Name(String);

impl Name {
    fn new(tag: &str) -> Name {
        Name(format!(
            "rivet-test-{}-{tag}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ))
    }
    fn exists(&self) -> bool {
        Path::new("/dev/shm").join(&self.0).exists()
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        let _ = segment::unlink(&self.0);
    }
}

fn small() -> ShmConfig {
    ShmConfig {
        fastbox_bytes: 2048,
        fastbox_max: 128,
        cells_per_rank: 8,
        cell_bytes: 1024,
    }
}

fn nodes(name: &Name, n: usize, cfg: &ShmConfig) -> Vec<ShmNode> {
    let mut v = vec![ShmNode::create(&name.0, n, 0, cfg).unwrap()];
    for r in 1..n {
        v.push(ShmNode::attach(&name.0, n, r).unwrap());
    }
    v
}

fn hdr(tag: i32, src: u32) -> WireHeader {
    WireHeader {
        kind: 1,
        tag,
        src,
        len: (tag as u64).wrapping_mul(3),
        sreq: 0xdead_beef,
        ..Default::default()
    }
}

fn pattern(src: usize, i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (k * 7 + i * 13 + src * 101) as u8)
        .collect()
}

/// xorshift64*.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn drain(n: &mut ShmNode) -> Vec<(usize, WireHeader, Vec<u8>)> {
    let mut out = Vec::new();
    loop {
        let k = n
            .poll(1000, |p, h, b| out.push((p, *h, b.to_vec())))
            .unwrap();
        if k == 0 {
            return out;
        }
    }
}

mod corrupt;
mod lifecycle;
mod messages;
mod processes;
