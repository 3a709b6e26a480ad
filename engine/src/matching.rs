//! MPI matching: posted receives and unexpected messages per context id.
//!
//! # Data structures
//!
//! Everything lives in three slabs (a `Vec` of slots plus a free list) and
//! is linked by `u32` indices, so steady-state operation allocates nothing:
//!
//! - **Buckets**, one per exact key (context, source, tag), found through a
//!   hash map with a small Fx-style hasher. A bucket holds two FIFO lists:
//!   the exact posted receives on that key (post order) and the unexpected
//!   messages with that envelope (arrival order).
//! - **Posted receives**. An exact receive sits in its bucket's list; a
//!   receive with ANY_SOURCE and/or ANY_TAG sits in its context's wildcard
//!   list (post order). Every receive carries a sequence number taken from
//!   one counter, so `match_posted` picks the earlier of the exact bucket's
//!   head and the first matching wildcard (the wildcard scan stops as soon
//!   as it passes the exact head's sequence number).
//! - **Unexpected messages**, each on two lists: its bucket's FIFO (exact
//!   `post` and `probe` take the head, O(1)) and its context's arrival list
//!   (a wildcard `post`/`probe` scans it from the oldest message and stops at
//!   the first match; ANY_SOURCE+ANY_TAG takes the head).
//!
//! Contexts are kept in a `Vec` indexed through a second map and are never
//! freed (one small record per context id ever used; MPI recycles them).
//! A bucket whose two lists become empty is not removed from the map at
//! once: it joins an idle list and is reused if its key comes back (the
//! ping-pong case costs one map lookup per operation, no insert/remove).
//! Beyond [`IDLE_BUCKETS`] idle buckets the oldest idle one is evicted, so
//! the map stays bounded by live keys plus a constant.
//!
//! When the matcher holds no posted receive, `match_posted` returns before
//! hashing; when it holds no unexpected message, `post` only does the one
//! lookup it needs to store the receive.

use std::collections::hash_map::{Entry, HashMap};
use std::fmt;
use std::hash::{Hash, Hasher};

use rivet_netmods::FxBuildHasher;

pub const ANY_SOURCE: i32 = -1;
pub const ANY_TAG: i32 = -1;

/// How many empty buckets are kept in the map for reuse before the oldest
/// is evicted.
pub const IDLE_BUCKETS: usize = 64;

/// What an arriving message is matched on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Envelope {
    pub context: u32,
    pub source: u32,
    pub tag: i32,
}

/// Exact matching key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    context: u32,
    source: u32,
    tag: i32,
}

impl Key {
    #[inline]
    fn of(env: Envelope) -> Key {
        Key {
            context: env.context,
            source: env.source,
            tag: env.tag,
        }
    }
}

impl Hash for Key {
    #[inline]
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u64(((self.context as u64) << 32) | self.source as u64);
        h.write_u32(self.tag as u32);
    }
}

// ---------------------------------------------------------------------------
// Slab and intrusive doubly-linked lists.

const NIL: u32 = u32::MAX;

enum Slot<T> {
    Used(T),
    Free(u32),
}

struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: u32,
    len: usize,
}

impl<T> Slab<T> {
    const fn new() -> Self {
        Slab {
            slots: Vec::new(),
            free: NIL,
            len: 0,
        }
    }

    #[inline]
    fn insert(&mut self, value: T) -> u32 {
        self.len += 1;
        if self.free != NIL {
            let i = self.free;
            let slot = &mut self.slots[i as usize];
            match *slot {
                Slot::Free(next) => self.free = next,
                Slot::Used(_) => unreachable!("matching: free list points at a used slot"),
            }
            *slot = Slot::Used(value);
            i
        } else {
            let i = self.slots.len();
            assert!(i < NIL as usize, "matching: too many entries");
            self.slots.push(Slot::Used(value));
            i as u32
        }
    }

    #[inline]
    fn remove(&mut self, i: u32) -> T {
        let slot = &mut self.slots[i as usize];
        assert!(matches!(slot, Slot::Used(_)), "matching: slot already free");
        let old = std::mem::replace(slot, Slot::Free(self.free));
        self.free = i;
        self.len -= 1;
        match old {
            Slot::Used(value) => value,
            Slot::Free(_) => unreachable!(),
        }
    }

    #[inline]
    fn get(&self, i: u32) -> &T {
        match &self.slots[i as usize] {
            Slot::Used(value) => value,
            Slot::Free(_) => unreachable!("matching: stale index"),
        }
    }

    #[inline]
    fn get_mut(&mut self, i: u32) -> &mut T {
        match &mut self.slots[i as usize] {
            Slot::Used(value) => value,
            Slot::Free(_) => unreachable!("matching: stale index"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Links {
    prev: u32,
    next: u32,
}

impl Links {
    const NONE: Links = Links {
        prev: NIL,
        next: NIL,
    };
}

#[derive(Debug, Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
}

impl List {
    const EMPTY: List = List {
        head: NIL,
        tail: NIL,
    };

    #[inline]
    fn is_empty(&self) -> bool {
        self.head == NIL
    }
}

#[inline]
fn push_back<T>(slab: &mut Slab<T>, list: &mut List, i: u32, links: fn(&mut T) -> &mut Links) {
    *links(slab.get_mut(i)) = Links {
        prev: list.tail,
        next: NIL,
    };
    if list.tail == NIL {
        list.head = i;
    } else {
        links(slab.get_mut(list.tail)).next = i;
    }
    list.tail = i;
}

#[inline]
fn unlink<T>(slab: &mut Slab<T>, list: &mut List, i: u32, links: fn(&mut T) -> &mut Links) {
    let Links { prev, next } = *links(slab.get_mut(i));
    if prev == NIL {
        list.head = next;
    } else {
        links(slab.get_mut(prev)).next = next;
    }
    if next == NIL {
        list.tail = prev;
    } else {
        links(slab.get_mut(next)).prev = prev;
    }
}

// ---------------------------------------------------------------------------
// Entries.

struct Posted<R> {
    recv: R,
    /// Post order, across exact and wildcard receives.
    seq: u64,
    /// In the bucket's list (exact) or the context's wildcard list.
    links: Links,
    /// NIL for a wildcard receive.
    bucket: u32,
    ctx: u32,
    source: i32,
    tag: i32,
}

fn posted_links<R>(p: &mut Posted<R>) -> &mut Links {
    &mut p.links
}

struct Unexpected<M> {
    env: Envelope,
    msg: M,
    in_bucket: Links,
    in_ctx: Links,
    bucket: u32,
}

fn unexp_bucket_links<M>(u: &mut Unexpected<M>) -> &mut Links {
    &mut u.in_bucket
}

fn unexp_ctx_links<M>(u: &mut Unexpected<M>) -> &mut Links {
    &mut u.in_ctx
}

struct Bucket {
    key: Key,
    ctx: u32,
    posted: List,
    unexp: List,
    /// In the matcher's idle list while both lists are empty.
    idle: Links,
}

fn bucket_idle_links(b: &mut Bucket) -> &mut Links {
    &mut b.idle
}

struct Ctx {
    /// Wildcard posted receives, post order.
    wild: List,
    /// Every unexpected message of the context, arrival order.
    unexp: List,
}

#[inline]
fn pattern_matches(source: i32, tag: i32, env: &Envelope) -> bool {
    (source == ANY_SOURCE || source as u32 == env.source) && (tag == ANY_TAG || tag == env.tag)
}

// ---------------------------------------------------------------------------

pub struct Matcher<R, M> {
    posted: Slab<Posted<R>>,
    unexp: Slab<Unexpected<M>>,
    buckets: Slab<Bucket>,
    bucket_map: HashMap<Key, u32, FxBuildHasher>,
    ctxs: Vec<Ctx>,
    ctx_map: HashMap<u32, u32, FxBuildHasher>,
    /// Empty buckets still in the map, oldest first.
    idle: List,
    idle_len: usize,
    /// Wildcard receives posted, all contexts.
    wild_len: usize,
    next_seq: u64,
    /// The bucket of the key used last (`NIL`: none): a program that
    /// posts and receives on one key, as most loops do, skips the hash.
    last_key: Key,
    last_bucket: u32,
}

impl<R: Copy + Eq, M> Default for Matcher<R, M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R, M> fmt::Debug for Matcher<R, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Matcher")
            .field("posted", &self.posted.len)
            .field("wildcard_posted", &self.wild_len)
            .field("unexpected", &self.unexp.len)
            .field("contexts", &self.ctxs.len())
            .finish()
    }
}

impl<R: Copy + Eq, M> Matcher<R, M> {
    pub fn new() -> Self {
        Matcher {
            posted: Slab::new(),
            unexp: Slab::new(),
            buckets: Slab::new(),
            bucket_map: HashMap::with_hasher(FxBuildHasher),
            ctxs: Vec::new(),
            ctx_map: HashMap::with_hasher(FxBuildHasher),
            idle: List::EMPTY,
            idle_len: 0,
            wild_len: 0,
            next_seq: 0,
            last_key: Key {
                context: 0,
                source: 0,
                tag: 0,
            },
            last_bucket: NIL,
        }
    }

    /// The bucket of `key` if it has one (the map only on a cache miss).
    #[inline]
    fn find_bucket(&mut self, key: Key) -> Option<u32> {
        if self.last_bucket != NIL && self.last_key == key {
            return Some(self.last_bucket);
        }
        let b = *self.bucket_map.get(&key)?;
        self.last_key = key;
        self.last_bucket = b;
        Some(b)
    }

    /// Post a receive for (`context`, `source` or ANY_SOURCE, `tag` or
    /// ANY_TAG). If a matching message already waits, the earliest one is
    /// removed and returned and the receive is not stored.
    pub fn post(&mut self, context: u32, source: i32, tag: i32, recv: R) -> Option<(Envelope, M)> {
        debug_assert!(
            source >= ANY_SOURCE && tag >= ANY_TAG,
            "matching: bad pattern"
        );
        if source != ANY_SOURCE && tag != ANY_TAG {
            let b = self.acquire_bucket(Key {
                context,
                source: source as u32,
                tag,
            });
            let (head, ctx) = {
                let bucket = self.buckets.get(b);
                (bucket.unexp.head, bucket.ctx)
            };
            if head != NIL {
                let u = self.remove_unexp(head);
                return Some((u.env, u.msg));
            }
            let seq = self.bump_seq();
            let i = self.posted.insert(Posted {
                recv,
                seq,
                links: Links::NONE,
                bucket: b,
                ctx,
                source,
                tag,
            });
            push_back(
                &mut self.posted,
                &mut self.buckets.get_mut(b).posted,
                i,
                posted_links,
            );
            None
        } else {
            if self.unexp.len != 0 {
                if let Some(&c) = self.ctx_map.get(&context) {
                    let u = self.find_unexp(c, source, tag);
                    if u != NIL {
                        let u = self.remove_unexp(u);
                        return Some((u.env, u.msg));
                    }
                }
            }
            let c = self.acquire_ctx(context);
            let seq = self.bump_seq();
            let i = self.posted.insert(Posted {
                recv,
                seq,
                links: Links::NONE,
                bucket: NIL,
                ctx: c,
                source,
                tag,
            });
            push_back(
                &mut self.posted,
                &mut self.ctxs[c as usize].wild,
                i,
                posted_links,
            );
            self.wild_len += 1;
            None
        }
    }

    /// A message arrived: remove and return the earliest-posted receive that
    /// matches it. `None`: store it with `push_unexpected`.
    pub fn match_posted(&mut self, env: Envelope) -> Option<R> {
        if self.posted.len == 0 {
            return None;
        }
        let (exact, ctx) = match self.find_bucket(Key::of(env)) {
            Some(b) => {
                let bucket = self.buckets.get(b);
                (bucket.posted.head, bucket.ctx)
            }
            None => (NIL, NIL),
        };
        let mut pick = exact;
        if self.wild_len != 0 {
            let ctx = if ctx != NIL {
                ctx
            } else {
                self.ctx_map.get(&env.context).copied().unwrap_or(NIL)
            };
            if ctx != NIL {
                let limit = if exact == NIL {
                    u64::MAX
                } else {
                    self.posted.get(exact).seq
                };
                let mut w = self.ctxs[ctx as usize].wild.head;
                while w != NIL {
                    let p = self.posted.get(w);
                    if p.seq > limit {
                        break;
                    }
                    if pattern_matches(p.source, p.tag, &env) {
                        pick = w;
                        break;
                    }
                    w = p.links.next;
                }
            }
        }
        if pick == NIL {
            return None;
        }
        Some(self.remove_posted(pick).recv)
    }

    pub fn push_unexpected(&mut self, env: Envelope, msg: M) {
        let b = self.acquire_bucket(Key::of(env));
        let c = self.buckets.get(b).ctx;
        let i = self.unexp.insert(Unexpected {
            env,
            msg,
            in_bucket: Links::NONE,
            in_ctx: Links::NONE,
            bucket: b,
        });
        push_back(
            &mut self.unexp,
            &mut self.buckets.get_mut(b).unexp,
            i,
            unexp_bucket_links,
        );
        push_back(
            &mut self.unexp,
            &mut self.ctxs[c as usize].unexp,
            i,
            unexp_ctx_links,
        );
    }

    /// The earliest unexpected message matching the pattern, left in place.
    pub fn probe(&self, context: u32, source: i32, tag: i32) -> Option<(Envelope, &M)> {
        let i = self.find_unexpected(context, source, tag);
        if i == NIL {
            return None;
        }
        let u = self.unexp.get(i);
        Some((u.env, &u.msg))
    }

    /// Remove and return the earliest unexpected message matching the
    /// pattern (a matched probe: nothing else can take it afterwards).
    pub fn take(&mut self, context: u32, source: i32, tag: i32) -> Option<(Envelope, M)> {
        let i = self.find_unexpected(context, source, tag);
        if i == NIL {
            return None;
        }
        let u = self.remove_unexp(i);
        Some((u.env, u.msg))
    }

    /// The earliest unexpected message matching the pattern (`NIL`: none).
    fn find_unexpected(&self, context: u32, source: i32, tag: i32) -> u32 {
        if self.unexp.len == 0 {
            return NIL;
        }
        if source != ANY_SOURCE && tag != ANY_TAG {
            let key = Key {
                context,
                source: source as u32,
                tag,
            };
            match self.bucket_map.get(&key) {
                Some(&b) => self.buckets.get(b).unexp.head,
                None => NIL,
            }
        } else {
            match self.ctx_map.get(&context) {
                Some(&c) => self.find_unexp(c, source, tag),
                None => NIL,
            }
        }
    }

    /// Withdraw a posted receive; false if it is no longer posted.
    pub fn cancel_posted(&mut self, recv: R) -> bool {
        // Cold path: scan the slab. Should `recv` be posted twice, the
        // earliest-posted one goes.
        let mut pick = NIL;
        let mut pick_seq = u64::MAX;
        for (i, slot) in self.posted.slots.iter().enumerate() {
            if let Slot::Used(p) = slot {
                if p.recv == recv && p.seq < pick_seq {
                    pick = i as u32;
                    pick_seq = p.seq;
                }
            }
        }
        if pick == NIL {
            return false;
        }
        self.remove_posted(pick);
        true
    }

    /// Remove the earliest unexpected message on `context` that `pred` picks.
    pub fn remove_unexpected(
        &mut self,
        context: u32,
        mut pred: impl FnMut(&Envelope, &M) -> bool,
    ) -> Option<(Envelope, M)> {
        if self.unexp.len == 0 {
            return None;
        }
        let c = *self.ctx_map.get(&context)?;
        let mut i = self.ctxs[c as usize].unexp.head;
        while i != NIL {
            let u = self.unexp.get(i);
            if pred(&u.env, &u.msg) {
                let u = self.remove_unexp(i);
                return Some((u.env, u.msg));
            }
            i = u.in_ctx.next;
        }
        None
    }

    pub fn posted_len(&self) -> usize {
        self.posted.len
    }

    pub fn unexpected_len(&self) -> usize {
        self.unexp.len
    }

    // -- internals ----------------------------------------------------------

    #[inline]
    fn bump_seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    fn acquire_ctx(&mut self, context: u32) -> u32 {
        match self.ctx_map.entry(context) {
            Entry::Occupied(o) => *o.get(),
            Entry::Vacant(v) => {
                let c = self.ctxs.len() as u32;
                self.ctxs.push(Ctx {
                    wild: List::EMPTY,
                    unexp: List::EMPTY,
                });
                v.insert(c);
                c
            }
        }
    }

    /// The bucket for `key`, created if needed, taken off the idle list if
    /// it was there.
    #[inline]
    fn acquire_bucket(&mut self, key: Key) -> u32 {
        if let Some(b) = self.find_bucket(key) {
            let bucket = self.buckets.get(b);
            if bucket.posted.is_empty() && bucket.unexp.is_empty() {
                unlink(&mut self.buckets, &mut self.idle, b, bucket_idle_links);
                self.idle_len -= 1;
            }
            return b;
        }
        match self.bucket_map.entry(key) {
            Entry::Occupied(o) => {
                let b = *o.get();
                let bucket = self.buckets.get(b);
                if bucket.posted.is_empty() && bucket.unexp.is_empty() {
                    unlink(&mut self.buckets, &mut self.idle, b, bucket_idle_links);
                    self.idle_len -= 1;
                }
                b
            }
            Entry::Vacant(v) => {
                let ctx = match self.ctx_map.entry(key.context) {
                    Entry::Occupied(o) => *o.get(),
                    Entry::Vacant(cv) => {
                        let c = self.ctxs.len() as u32;
                        self.ctxs.push(Ctx {
                            wild: List::EMPTY,
                            unexp: List::EMPTY,
                        });
                        cv.insert(c);
                        c
                    }
                };
                let b = self.buckets.insert(Bucket {
                    key,
                    ctx,
                    posted: List::EMPTY,
                    unexp: List::EMPTY,
                    idle: Links::NONE,
                });
                v.insert(b);
                b
            }
        }
    }

    /// Park `b` on the idle list if it just became empty; evict the oldest
    /// idle bucket beyond the cap.
    #[inline]
    fn release_bucket(&mut self, b: u32) {
        let bucket = self.buckets.get(b);
        if !(bucket.posted.is_empty() && bucket.unexp.is_empty()) {
            return;
        }
        push_back(&mut self.buckets, &mut self.idle, b, bucket_idle_links);
        self.idle_len += 1;
        if self.idle_len > IDLE_BUCKETS {
            let old = self.idle.head;
            unlink(&mut self.buckets, &mut self.idle, old, bucket_idle_links);
            self.idle_len -= 1;
            let key = self.buckets.remove(old).key;
            self.bucket_map.remove(&key);
            if self.last_bucket == old {
                self.last_bucket = NIL;
            }
        }
    }

    fn remove_posted(&mut self, i: u32) -> Posted<R> {
        let (b, c) = {
            let p = self.posted.get(i);
            (p.bucket, p.ctx)
        };
        if b != NIL {
            unlink(
                &mut self.posted,
                &mut self.buckets.get_mut(b).posted,
                i,
                posted_links,
            );
            self.release_bucket(b);
        } else {
            unlink(
                &mut self.posted,
                &mut self.ctxs[c as usize].wild,
                i,
                posted_links,
            );
            self.wild_len -= 1;
        }
        self.posted.remove(i)
    }

    fn remove_unexp(&mut self, i: u32) -> Unexpected<M> {
        let b = self.unexp.get(i).bucket;
        let c = self.buckets.get(b).ctx;
        unlink(
            &mut self.unexp,
            &mut self.buckets.get_mut(b).unexp,
            i,
            unexp_bucket_links,
        );
        unlink(
            &mut self.unexp,
            &mut self.ctxs[c as usize].unexp,
            i,
            unexp_ctx_links,
        );
        self.release_bucket(b);
        self.unexp.remove(i)
    }

    /// Earliest-arrived unexpected message of context `c` matching the
    /// pattern (scan of the context's arrival list).
    fn find_unexp(&self, c: u32, source: i32, tag: i32) -> u32 {
        let mut i = self.ctxs[c as usize].unexp.head;
        while i != NIL {
            let u = self.unexp.get(i);
            if pattern_matches(source, tag, &u.env) {
                return i;
            }
            i = u.in_ctx.next;
        }
        NIL
    }

    #[cfg(test)]
    fn capacities(&self) -> [usize; 5] {
        [
            self.posted.slots.capacity(),
            self.unexp.slots.capacity(),
            self.buckets.slots.capacity(),
            self.bucket_map.capacity(),
            self.ctx_map.capacity(),
        ]
    }

    #[cfg(test)]
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

#[cfg(test)]
mod tests {
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
        assert!(m.bucket_map.len() <= IDLE_BUCKETS);
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
}
