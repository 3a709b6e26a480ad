//! MPI matching micro-benchmarks (`rivet::matching::Matcher`).
//!
//! `cargo bench -p rivet-bench --bench matching -- --warm-up-time 1 --measurement-time 3`
//!
//! Each case keeps N entries queued on one context (distinct source/tag
//! pairs) and measures one match plus the operation that restores the queue,
//! so the size stays N:
//!
//! - `posted_exact/N`: `match_posted` of an envelope that matches the last
//!   posted exact receive, then re-post it.
//! - `unexpected_exact/N`: exact `post` that takes the newest unexpected
//!   message, then push it back.
//! - `posted_exact_1wild/N`: as `posted_exact`, with one non-matching
//!   ANY_SOURCE receive posted before all others (the arrival must look at it).
//! - `unexpected_any_source/N`: `post(ANY_SOURCE, tag)` that takes the newest
//!   unexpected message (a scan of the context's arrival list: linear in N).
//! - `unexpected_any_any/N`: `post(ANY_SOURCE, ANY_TAG)` takes the oldest
//!   message (the head of the arrival list), then push it back.
//! - `empty/*`: the empty-matcher fast paths.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use rivet::matching::{Envelope, Matcher, ANY_SOURCE, ANY_TAG};

const SIZES: [usize; 3] = [1, 64, 1024];
const CTX: u32 = 7;

/// The i-th distinct (source, tag) pair.
fn pair(i: usize) -> (u32, i32) {
    ((i % 32) as u32, (i / 32) as i32)
}

fn envelope(i: usize) -> Envelope {
    let (source, tag) = pair(i);
    Envelope {
        context: CTX,
        source,
        tag,
    }
}

fn posted(n: usize, wildcard: bool) -> Matcher<u64, u64> {
    let mut m = Matcher::new();
    if wildcard {
        assert!(m.post(CTX, ANY_SOURCE, 1 << 30, u64::MAX).is_none());
    }
    for i in 0..n {
        let (s, t) = pair(i);
        assert!(m.post(CTX, s as i32, t, i as u64).is_none());
    }
    m
}

fn unexpected(n: usize) -> Matcher<u64, u64> {
    let mut m = Matcher::new();
    for i in 0..n {
        let e = envelope(i);
        assert!(m.match_posted(e).is_none());
        m.push_unexpected(e, i as u64);
    }
    m
}

fn bench_posted(c: &mut Criterion, name: &str, wildcard: bool) {
    let mut g = c.benchmark_group(name);
    for n in SIZES {
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            let mut m = posted(n, wildcard);
            let last = envelope(n - 1);
            let (s, t) = pair(n - 1);
            b.iter(|| {
                let r = m.match_posted(black_box(last)).unwrap();
                black_box(m.post(CTX, s as i32, t, r));
            });
            assert_eq!(m.posted_len(), n + wildcard as usize);
        });
    }
    g.finish();
}

fn bench_unexpected(c: &mut Criterion, name: &str, pattern: fn(usize) -> (i32, i32)) {
    let mut g = c.benchmark_group(name);
    for n in SIZES {
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            let mut m = unexpected(n);
            let (s, t) = pattern(n);
            b.iter(|| {
                let (e, msg) = m.post(CTX, black_box(s), black_box(t), 0).unwrap();
                m.push_unexpected(e, msg);
            });
            assert_eq!(m.unexpected_len(), n);
            assert_eq!(m.posted_len(), 0);
        });
    }
    g.finish();
}

fn newest_exact(n: usize) -> (i32, i32) {
    let (s, t) = pair(n - 1);
    (s as i32, t)
}

fn newest_any_source(n: usize) -> (i32, i32) {
    (ANY_SOURCE, pair(n - 1).1)
}

fn any_any(_: usize) -> (i32, i32) {
    (ANY_SOURCE, ANY_TAG)
}

fn matching(c: &mut Criterion) {
    bench_posted(c, "posted_exact", false);
    bench_unexpected(c, "unexpected_exact", newest_exact);
    bench_posted(c, "posted_exact_1wild", true);
    bench_unexpected(c, "unexpected_any_source", newest_any_source);
    bench_unexpected(c, "unexpected_any_any", any_any);

    let mut g = c.benchmark_group("empty");
    g.bench_function("match_posted", |b| {
        let mut m = Matcher::<u64, u64>::new();
        b.iter(|| black_box(m.match_posted(black_box(envelope(0)))));
    });
    g.bench_function("post_then_match", |b| {
        let mut m = Matcher::<u64, u64>::new();
        b.iter(|| {
            assert!(m.post(CTX, 3, 4, 1).is_none());
            black_box(m.match_posted(black_box(Envelope {
                context: CTX,
                source: 3,
                tag: 4,
            })))
        });
    });
    g.finish();
}

criterion_group!(benches, matching);
criterion_main!(benches);
