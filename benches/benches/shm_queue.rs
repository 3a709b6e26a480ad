//! Shared-memory transport micro-benchmarks (one process, one thread, so they
//! measure the instruction and cache-line cost of each path, not the
//! cross-core transfer):
//! - `mpsc_queue/enqueue_dequeue`: one cell through the Nemesis MPSC queue
//!   (swap on tail + head store, shadow-head dequeue with CAS on tail).
//! - `fastbox/try_send_poll_8B`: an 8-byte message through a per-pair ring
//!   via `ShmNode::try_send` and `ShmNode::poll`.
//! - `cells/try_send_poll_8B`: the same message with rings off, i.e. free
//!   queue dequeue + receive queue enqueue + dequeue + free queue enqueue.
//!
//! `cargo bench -p rivet-bench --bench shm_queue -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::sync::atomic::AtomicU64;

use criterion::{criterion_group, criterion_main, Criterion};
use rivet::shm::queue::{enqueue, CellRegion, Consumer, Dequeued, Ends};
use rivet::shm::{ShmConfig, ShmNode};
use rivet::wire::WireHeader;

#[repr(align(64))]
struct Line([AtomicU64; 8]);

impl Line {
    fn new() -> Line {
        Line(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

fn mpsc_queue(c: &mut Criterion) {
    // Four 64-byte cells after one unused line (offset 0 is null).
    let lines: Vec<Line> = (0..5).map(|_| Line::new()).collect();
    // SAFETY: `lines` outlives `region` (dropped at the end of this function,
    // after the benchmark), is 64-byte aligned, and cells' first words are
    // only accessed atomically.
    let region = unsafe { CellRegion::new(lines.as_ptr() as *mut u8, 64, 64, 4) };
    let q = Line::new();
    let ends = Ends {
        head: &q.0[0],
        tail: &q.0[1],
    };
    let mut consumer = Consumer::new();
    let mut g = c.benchmark_group("mpsc_queue");
    g.bench_function("enqueue_dequeue", |b| {
        b.iter(|| {
            enqueue(&region, ends, black_box(64)).unwrap();
            match consumer.dequeue(&region, ends, 64).unwrap() {
                Dequeued::Item(off) => black_box(off),
                other => panic!("{other:?}"),
            }
        })
    });
    g.finish();
}

/// A segment with two handles in this process; the guard removes the name
/// if something fails before both attached.
fn pair(tag: &str, cfg: &ShmConfig) -> (ShmNode, ShmNode) {
    let name = format!("rivet-bench-{}-{tag}", std::process::id());
    let a = ShmNode::create(&name, 2, 0, cfg).expect("create segment");
    let b = ShmNode::attach(&name, 2, 1);
    let _ = ShmNode::remove(&name);
    (a, b.expect("attach segment"))
}

fn send_poll(c: &mut Criterion, group: &str, cfg: ShmConfig) {
    let (mut a, mut b) = pair(group, &cfg);
    let header = WireHeader {
        kind: 1,
        tag: 7,
        len: 8,
        ..Default::default()
    };
    let payload = [0x5au8; 8];
    let mut g = c.benchmark_group(group);
    g.bench_function("try_send_poll_8B", |bench| {
        bench.iter(|| {
            assert!(a.try_send(1, &header, black_box(&payload)).unwrap());
            let mut sum = 0u64;
            let n = b.poll(1, |_, h, p| sum += h.len + p[0] as u64).unwrap();
            debug_assert_eq!(n, 1);
            black_box(sum)
        })
    });
    g.finish();
}

fn fastbox(c: &mut Criterion) {
    send_poll(c, "fastbox", ShmConfig::default());
}

fn cells(c: &mut Criterion) {
    send_poll(
        c,
        "cells",
        ShmConfig {
            fastbox_bytes: 0,
            ..ShmConfig::default()
        },
    );
}

criterion_group!(benches, mpsc_queue, fastbox, cells);
criterion_main!(benches);
