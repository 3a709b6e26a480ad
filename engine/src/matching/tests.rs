use super::*;

fn env(context: u32, source: u32, tag: i32) -> Envelope {
    Envelope {
        context,
        source,
        tag,
    }
}

type M = Matcher<u32, &'static str>;

// -- table tests -------------------------------------------------------

#[test]
fn take_removes_the_earliest_match() {
    let mut m = M::new();
    m.push_unexpected(env(0, 1, 5), "a");
    m.push_unexpected(env(0, 2, 5), "b");
    m.push_unexpected(env(0, 1, 5), "c");
    m.push_unexpected(env(1, 1, 5), "other context");
    assert_eq!(m.take(0, 1, 5), Some((env(0, 1, 5), "a")));
    assert_eq!(m.take(0, ANY_SOURCE, 5), Some((env(0, 2, 5), "b")));
    assert_eq!(m.take(0, 1, 6), None);
    assert_eq!(m.take(0, ANY_SOURCE, ANY_TAG), Some((env(0, 1, 5), "c")));
    assert_eq!(m.take(0, ANY_SOURCE, ANY_TAG), None);
    // Taken messages are gone: a receive posted now waits.
    assert_eq!(m.post(0, 1, 5, 7), None);
    assert_eq!(m.unexpected_len(), 1);
    m.check_invariants();
}

#[test]
fn empty_matcher() {
    let mut m = M::new();
    assert_eq!(m.match_posted(env(0, 0, 0)), None);
    assert!(m.probe(0, ANY_SOURCE, ANY_TAG).is_none());
    assert!(m.probe(0, 0, 0).is_none());
    assert!(!m.cancel_posted(1));
    assert!(m.remove_unexpected(0, |_, _| true).is_none());
    assert_eq!((m.posted_len(), m.unexpected_len()), (0, 0));
    m.check_invariants();
}

#[test]
fn exact_posted_then_arrival() {
    let mut m = M::new();
    assert!(m.post(0, 3, 7, 1).is_none());
    assert_eq!(m.posted_len(), 1);
    assert_eq!(m.match_posted(env(0, 3, 8)), None);
    assert_eq!(m.match_posted(env(0, 4, 7)), None);
    assert_eq!(m.match_posted(env(1, 3, 7)), None);
    assert_eq!(m.match_posted(env(0, 3, 7)), Some(1));
    assert_eq!(m.posted_len(), 0);
    assert_eq!(m.match_posted(env(0, 3, 7)), None);
    m.check_invariants();
}

#[test]
fn receives_match_in_post_order() {
    let mut m = M::new();
    for r in 1..=3 {
        m.post(0, 2, 5, r);
    }
    assert_eq!(m.match_posted(env(0, 2, 5)), Some(1));
    assert_eq!(m.match_posted(env(0, 2, 5)), Some(2));
    assert_eq!(m.match_posted(env(0, 2, 5)), Some(3));
    assert_eq!(m.match_posted(env(0, 2, 5)), None);
}

#[test]
fn earliest_wins_across_exact_and_wildcard() {
    // Wildcard posted first wins over a later exact receive.
    let mut m = M::new();
    m.post(0, ANY_SOURCE, 5, 1);
    m.post(0, 2, 5, 2);
    assert_eq!(m.match_posted(env(0, 2, 5)), Some(1));
    assert_eq!(m.match_posted(env(0, 2, 5)), Some(2));

    // Exact posted first wins over a later wildcard.
    let mut m = M::new();
    m.post(0, 2, 5, 1);
    m.post(0, ANY_SOURCE, ANY_TAG, 2);
    assert_eq!(m.match_posted(env(0, 2, 5)), Some(1));
    assert_eq!(m.match_posted(env(0, 2, 5)), Some(2));

    // A non-matching earlier wildcard is skipped.
    let mut m = M::new();
    m.post(0, ANY_SOURCE, 9, 1);
    m.post(0, 4, ANY_TAG, 2);
    m.post(0, 2, 5, 3);
    m.post(0, 2, ANY_TAG, 4);
    assert_eq!(m.match_posted(env(0, 2, 5)), Some(3));
    assert_eq!(m.match_posted(env(0, 2, 5)), Some(4));
    assert_eq!(m.match_posted(env(0, 2, 5)), None);
    assert_eq!(m.match_posted(env(0, 4, 9)), Some(1));
    assert_eq!(m.match_posted(env(0, 4, 9)), Some(2));
    assert_eq!(m.posted_len(), 0);
    m.check_invariants();
}

#[test]
fn any_source_any_tag() {
    let mut m = M::new();
    m.post(0, ANY_SOURCE, ANY_TAG, 1);
    assert_eq!(m.match_posted(env(0, 123, 456)), Some(1));

    m.push_unexpected(env(0, 3, 1), "a");
    m.push_unexpected(env(0, 1, 2), "b");
    m.push_unexpected(env(0, 2, 0), "c");
    assert_eq!(m.post(0, ANY_SOURCE, ANY_TAG, 2), Some((env(0, 3, 1), "a")));
    assert_eq!(m.post(0, ANY_SOURCE, ANY_TAG, 3), Some((env(0, 1, 2), "b")));
    assert_eq!(m.post(0, ANY_SOURCE, ANY_TAG, 4), Some((env(0, 2, 0), "c")));
    assert!(m.post(0, ANY_SOURCE, ANY_TAG, 5).is_none());
    assert_eq!(m.posted_len(), 1);
    m.check_invariants();
}

#[test]
fn unexpected_earliest_arrival_wins() {
    let mut m = M::new();
    m.push_unexpected(env(0, 1, 5), "a");
    m.push_unexpected(env(0, 2, 5), "b");
    m.push_unexpected(env(0, 1, 6), "c");
    m.push_unexpected(env(0, 1, 5), "d");
    // ANY_TAG from source 1: a, c, d in arrival order.
    assert_eq!(m.post(0, 1, ANY_TAG, 1), Some((env(0, 1, 5), "a")));
    // ANY_SOURCE tag 5: b came before d.
    assert_eq!(m.post(0, ANY_SOURCE, 5, 2), Some((env(0, 2, 5), "b")));
    assert_eq!(m.post(0, 1, 5, 3), Some((env(0, 1, 5), "d")));
    assert_eq!(m.post(0, 1, ANY_TAG, 4), Some((env(0, 1, 6), "c")));
    assert_eq!(m.unexpected_len(), 0);
    assert_eq!(m.posted_len(), 0);
    m.check_invariants();
}

#[test]
fn per_source_order_preserved() {
    // Messages from one source on one context match in arrival order,
    // whatever mix of exact and wildcard receives takes them.
    let mut m = Matcher::<u32, u32>::new();
    for k in 0..10 {
        m.push_unexpected(env(0, 7, 3), k);
    }
    let mut got = Vec::new();
    for k in 0..10 {
        let (e, msg) = match k % 3 {
            0 => m.post(0, 7, 3, k),
            1 => m.post(0, ANY_SOURCE, 3, k),
            _ => m.post(0, 7, ANY_TAG, k),
        }
        .unwrap();
        assert_eq!(e, env(0, 7, 3));
        got.push(msg);
    }
    assert_eq!(got, (0..10).collect::<Vec<_>>());
}

#[test]
fn contexts_isolated() {
    let mut m = M::new();
    m.post(1, ANY_SOURCE, ANY_TAG, 1);
    m.post(2, 0, 0, 2);
    assert_eq!(m.match_posted(env(3, 0, 0)), None);
    assert_eq!(m.match_posted(env(2, 0, 0)), Some(2));
    assert_eq!(m.match_posted(env(2, 0, 0)), None);
    m.push_unexpected(env(2, 0, 0), "x");
    assert!(m.probe(1, ANY_SOURCE, ANY_TAG).is_none());
    assert!(m.probe(3, 0, 0).is_none());
    assert!(m.post(3, ANY_SOURCE, ANY_TAG, 3).is_none());
    assert!(m.remove_unexpected(1, |_, _| true).is_none());
    assert_eq!(m.match_posted(env(1, 9, 9)), Some(1));
    assert_eq!(m.post(2, ANY_SOURCE, ANY_TAG, 4), Some((env(2, 0, 0), "x")));
    m.check_invariants();
}

#[test]
fn probe_does_not_remove() {
    let mut m = M::new();
    m.push_unexpected(env(0, 1, 1), "a");
    m.push_unexpected(env(0, 2, 1), "b");
    assert_eq!(m.probe(0, 2, 1), Some((env(0, 2, 1), &"b")));
    assert_eq!(m.probe(0, ANY_SOURCE, 1), Some((env(0, 1, 1), &"a")));
    assert_eq!(m.probe(0, 2, ANY_TAG), Some((env(0, 2, 1), &"b")));
    assert_eq!(m.probe(0, ANY_SOURCE, ANY_TAG), Some((env(0, 1, 1), &"a")));
    assert_eq!(m.probe(0, 3, ANY_TAG), None);
    assert_eq!(m.probe(0, 1, 2), None);
    assert_eq!(m.unexpected_len(), 2);
    assert_eq!(m.post(0, ANY_SOURCE, 1, 1), Some((env(0, 1, 1), "a")));
    assert_eq!(m.probe(0, ANY_SOURCE, 1), Some((env(0, 2, 1), &"b")));
}

#[test]
fn cancel() {
    let mut m = M::new();
    m.post(0, 1, 1, 10);
    m.post(0, ANY_SOURCE, 1, 11);
    m.post(0, 1, 1, 12);
    assert!(m.cancel_posted(10));
    assert!(!m.cancel_posted(10));
    assert!(m.cancel_posted(11));
    assert_eq!(m.posted_len(), 1);
    assert_eq!(m.match_posted(env(0, 1, 1)), Some(12));
    assert!(!m.cancel_posted(12));
    assert_eq!(m.match_posted(env(0, 1, 1)), None);
    m.check_invariants();
}

#[test]
fn remove_unexpected_picks_earliest() {
    let mut m = Matcher::<u32, u32>::new();
    m.push_unexpected(env(0, 1, 1), 100);
    m.push_unexpected(env(0, 2, 1), 200);
    m.push_unexpected(env(0, 2, 1), 201);
    m.push_unexpected(env(1, 2, 1), 300);
    assert_eq!(
        m.remove_unexpected(0, |e, _| e.source == 2),
        Some((env(0, 2, 1), 200))
    );
    assert_eq!(m.remove_unexpected(0, |_, &v| v == 300), None);
    assert_eq!(
        m.remove_unexpected(1, |_, &v| v == 300),
        Some((env(1, 2, 1), 300))
    );
    assert_eq!(m.unexpected_len(), 2);
    assert_eq!(m.post(0, 2, 1, 1), Some((env(0, 2, 1), 201)));
    assert_eq!(m.post(0, ANY_SOURCE, ANY_TAG, 2), Some((env(0, 1, 1), 100)));
    m.check_invariants();
}

#[test]
fn idle_buckets_bounded_and_reused() {
    let mut m = Matcher::<u32, u32>::new();
    for t in 0..1000 {
        m.post(0, 0, t, t as u32);
        assert_eq!(m.match_posted(env(0, 0, t)), Some(t as u32));
    }
    m.check_invariants();
    // The idle list, and the cached bucket of the key used last.
    assert!(m.bucket_map.len() <= IDLE_BUCKETS + 1);
    // Same key again and again: the bucket stays in the map.
    let buckets = m.bucket_map.len();
    for _ in 0..1000 {
        m.post(0, 5, 5, 1);
        assert_eq!(m.match_posted(env(0, 5, 5)), Some(1));
    }
    assert!(m.bucket_map.len() <= buckets + 1);
    m.check_invariants();
}

#[test]
fn steady_state_does_not_grow() {
    let mut m = Matcher::<u32, u32>::new();
    let round = |m: &mut Matcher<u32, u32>| {
        for k in 0..256u32 {
            m.post(k % 3, (k % 7) as i32, (k % 11) as i32, k);
            if k % 5 == 0 {
                m.post(k % 3, ANY_SOURCE, (k % 11) as i32, 1000 + k);
            }
            m.push_unexpected(env(k % 2, k % 13, (k % 4) as i32), k);
        }
        for k in 0..256u32 {
            let e = env(k % 3, k % 7, (k % 11) as i32);
            let _ = m.match_posted(e);
        }
        while m.post(0, ANY_SOURCE, ANY_TAG, 0).is_some() {}
        while m.post(1, ANY_SOURCE, ANY_TAG, 0).is_some() {}
        for k in 0..1300u32 {
            while m.cancel_posted(k) {}
        }
        assert_eq!(m.posted_len(), 0);
        assert_eq!(m.unexpected_len(), 0);
    };
    round(&mut m);
    round(&mut m);
    let caps = m.capacities();
    for _ in 0..20 {
        round(&mut m);
    }
    assert_eq!(m.capacities(), caps);
    m.check_invariants();
}

// -- randomized differential test -------------------------------------

/// xorshift64*: fixed-seed, dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The reference: two vectors scanned linearly.
#[derive(Default)]
struct Model {
    posted: Vec<(u32, i32, i32, u32)>,
    unexp: Vec<(Envelope, u64)>,
}

impl Model {
    fn post(&mut self, c: u32, s: i32, t: i32, r: u32) -> Option<(Envelope, u64)> {
        let pos = self
            .unexp
            .iter()
            .position(|(e, _)| e.context == c && pattern_matches(s, t, e));
        match pos {
            Some(p) => Some(self.unexp.remove(p)),
            None => {
                self.posted.push((c, s, t, r));
                None
            }
        }
    }
    fn match_posted(&mut self, e: Envelope) -> Option<u32> {
        let p = self
            .posted
            .iter()
            .position(|&(c, s, t, _)| c == e.context && pattern_matches(s, t, &e))?;
        Some(self.posted.remove(p).3)
    }
    fn probe(&self, c: u32, s: i32, t: i32) -> Option<(Envelope, &u64)> {
        self.unexp
            .iter()
            .find(|(e, _)| e.context == c && pattern_matches(s, t, e))
            .map(|(e, m)| (*e, m))
    }
    fn cancel(&mut self, r: u32) -> bool {
        match self.posted.iter().position(|p| p.3 == r) {
            Some(p) => {
                self.posted.remove(p);
                true
            }
            None => false,
        }
    }
    fn remove_unexpected(
        &mut self,
        c: u32,
        mut pred: impl FnMut(&Envelope, &u64) -> bool,
    ) -> Option<(Envelope, u64)> {
        let p = self
            .unexp
            .iter()
            .position(|(e, m)| e.context == c && pred(e, m))?;
        Some(self.unexp.remove(p))
    }
}

fn differential(seed: u64, ops: usize, contexts: u64, sources: u64, tags: u64) {
    let mut rng = Rng(seed);
    let mut m = Matcher::<u32, u64>::new();
    let mut model = Model::default();
    let mut next_r = 0u32;
    let mut next_m = 0u64;
    for step in 0..ops {
        // Phases biased towards posting or arriving so queues both grow
        // deep and drain to empty.
        let phase = (step / 500) % 3;
        let roll = rng.below(100);
        let (post_w, arrive_w) = match phase {
            0 => (45, 35),
            1 => (25, 55),
            _ => (35, 35),
        };
        let c = rng.below(contexts) as u32;
        if roll < post_w {
            let s = if rng.below(4) == 0 {
                ANY_SOURCE
            } else {
                rng.below(sources) as i32
            };
            let t = if rng.below(4) == 0 {
                ANY_TAG
            } else {
                rng.below(tags) as i32
            };
            let r = next_r;
            next_r += 1;
            assert_eq!(
                m.post(c, s, t, r),
                model.post(c, s, t, r),
                "step {step}: post({c}, {s}, {t}, {r})"
            );
        } else if roll < post_w + arrive_w {
            let e = env(c, rng.below(sources) as u32, rng.below(tags) as i32);
            let got = m.match_posted(e);
            assert_eq!(got, model.match_posted(e), "step {step}: arrival {e:?}");
            if got.is_none() {
                m.push_unexpected(e, next_m);
                model.unexp.push((e, next_m));
                next_m += 1;
            }
        } else if roll < post_w + arrive_w + 8 {
            let s = if rng.below(2) == 0 {
                ANY_SOURCE
            } else {
                rng.below(sources) as i32
            };
            let t = if rng.below(2) == 0 {
                ANY_TAG
            } else {
                rng.below(tags) as i32
            };
            assert_eq!(
                m.probe(c, s, t),
                model.probe(c, s, t),
                "step {step}: probe({c}, {s}, {t})"
            );
        } else if roll < post_w + arrive_w + 14 {
            // Usually a live receive, sometimes a stale one.
            let r = if next_r > 0 {
                let back = rng.below(64.min(next_r as u64) + 1) as u32;
                next_r.saturating_sub(back)
            } else {
                0
            };
            assert_eq!(
                m.cancel_posted(r),
                model.cancel(r),
                "step {step}: cancel {r}"
            );
        } else {
            let k = rng.below(4) + 2;
            let x = rng.below(k);
            let want_src = rng.below(sources) as u32;
            let by_src = rng.below(2) == 0;
            let mut pred = |e: &Envelope, v: &u64| {
                if by_src {
                    e.source == want_src
                } else {
                    v % k == x
                }
            };
            assert_eq!(
                m.remove_unexpected(c, &mut pred),
                model.remove_unexpected(c, &mut pred),
                "step {step}: remove_unexpected"
            );
        }
        assert_eq!(m.posted_len(), model.posted.len(), "step {step}");
        assert_eq!(m.unexpected_len(), model.unexp.len(), "step {step}");
        if step % 97 == 0 {
            m.check_invariants();
        }
    }
    m.check_invariants();
    // Drain both and compare the leftovers in order.
    for c in 0..contexts as u32 {
        loop {
            let a = m.post(c, ANY_SOURCE, ANY_TAG, u32::MAX);
            let b = model.post(c, ANY_SOURCE, ANY_TAG, u32::MAX);
            assert_eq!(a, b);
            if a.is_none() {
                break;
            }
        }
        assert!(m.cancel_posted(u32::MAX));
        assert!(model.cancel(u32::MAX));
    }
    assert_eq!(m.unexpected_len(), 0);
    // Drain the receives: an arrival built from the model's oldest
    // receive (wildcards filled in) must take the same one from both.
    while let Some(&(c, s, t, _)) = model.posted.first() {
        let e = env(
            c,
            if s < 0 { 0 } else { s as u32 },
            if t < 0 { 0 } else { t },
        );
        let want = model.match_posted(e);
        assert!(want.is_some());
        assert_eq!(m.match_posted(e), want);
    }
    assert_eq!(m.posted_len(), 0);
    m.check_invariants();
}

#[test]
fn differential_small_key_space() {
    for seed in 1..=8u64 {
        differential(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15), 6000, 2, 3, 3);
    }
}

#[test]
fn differential_medium_key_space() {
    for seed in 1..=4u64 {
        differential(seed.wrapping_mul(0xd1b5_4a32_d192_ed03), 8000, 3, 6, 8);
    }
}

#[test]
fn differential_large_key_space() {
    // More distinct keys than idle buckets kept: exercises eviction.
    for seed in 1..=3u64 {
        differential(seed ^ 0x1234_5678_9abc_def0, 8000, 4, 16, 64);
    }
}

/// Test-only views of the matcher: slab capacities and its invariants.
impl<R: Copy + Eq, M> Matcher<R, M> {
    fn capacities(&self) -> [usize; 5] {
        [
            self.posted.slots.capacity(),
            self.unexp.slots.capacity(),
            self.buckets.slots.capacity(),
            self.bucket_map.capacity(),
            self.ctx_map.capacity(),
        ]
    }

    fn check_invariants(&self) {
        let mut idle = 0;
        let mut i = self.idle.head;
        while i != NIL {
            let b = self.buckets.get(i);
            assert!(b.posted.is_empty() && b.unexp.is_empty());
            idle += 1;
            i = b.idle.next;
        }
        assert_eq!(idle, self.idle_len);
        assert!(self.idle_len <= IDLE_BUCKETS);
        // Idle-listed: exactly the empty buckets but the cached one.
        let empty = self
            .bucket_map
            .values()
            .filter(|&&b| {
                let bucket = self.buckets.get(b);
                b != self.last_bucket && bucket.posted.is_empty() && bucket.unexp.is_empty()
            })
            .count();
        assert_eq!(empty, self.idle_len);
        if self.last_bucket != NIL {
            assert_eq!(self.bucket_map.get(&self.last_key), Some(&self.last_bucket));
        }
        assert_eq!(self.bucket_map.len(), self.buckets.len);
        for (&key, &b) in &self.bucket_map {
            let bucket = self.buckets.get(b);
            assert_eq!(bucket.key, key);
            assert_eq!(self.ctx_map[&key.context], bucket.ctx);
        }
        let mut wild = 0;
        let mut unexp = 0;
        for ctx in &self.ctxs {
            let mut i = ctx.wild.head;
            let mut last = None;
            while i != NIL {
                let p = self.posted.get(i);
                assert!(last < Some(p.seq));
                last = Some(p.seq);
                wild += 1;
                i = p.links.next;
            }
            let mut i = ctx.unexp.head;
            while i != NIL {
                unexp += 1;
                i = self.unexp.get(i).in_ctx.next;
            }
        }
        assert_eq!(wild, self.wild_len);
        assert_eq!(unexp, self.unexp.len);
    }
}
