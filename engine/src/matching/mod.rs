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
//! the map stays bounded by live keys plus a constant. The cached bucket
//! of the key used last is never on the idle list: it is parked only once
//! another key takes the cache, so a ping-pong on one key, whose bucket
//! empties every message, does not park and unpark it every time.
//!
//! When the matcher holds no posted receive, `match_posted` returns before
//! hashing; when it holds no unexpected message, `post` only does the one
//! lookup it needs to store the receive.

use std::collections::hash_map::{Entry, HashMap};
use std::fmt;
use std::hash::{Hash, Hasher};

use rivet_netmods::FxBuildHasher;

mod lists;
mod slab;

use lists::take_posted_head;
use slab::{push_back, unlink, Links, List, Slab, Slot, NIL};

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
    /// In the matcher's idle list while both lists are empty, unless it
    /// is the cached `last_bucket`.
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
    #[inline(always)]
    fn find_bucket(&mut self, key: Key) -> Option<u32> {
        if self.last_bucket != NIL && self.last_key == key {
            return Some(self.last_bucket);
        }
        self.find_bucket_uncached(key)
    }

    /// [`find_bucket`](Self::find_bucket) past the cache, out of line:
    /// inline, it made `match_posted` too big to inline (callgrind: some
    /// 20 instructions a message more).
    #[inline(never)]
    fn find_bucket_uncached(&mut self, key: Key) -> Option<u32> {
        let b = *self.bucket_map.get(&key)?;
        self.set_last(key, b, true);
        Some(b)
    }

    /// Post a receive for (`context`, `source` or ANY_SOURCE, `tag` or
    /// ANY_TAG). If a matching message already waits, the earliest one is
    /// removed and returned and the receive is not stored.
    #[inline]
    pub fn post(&mut self, context: u32, source: i32, tag: i32, recv: R) -> Option<(Envelope, M)> {
        debug_assert!(
            source >= ANY_SOURCE && tag >= ANY_TAG,
            "matching: bad pattern"
        );
        if source != ANY_SOURCE && tag != ANY_TAG {
            // The bucket is looked up once for everything below (reading
            // it, appending to it): each lookup cost a bounds and a slot
            // check (callgrind). Being the cached one, it is not idle.
            let key = Key {
                context,
                source: source as u32,
                tag,
            };
            let b = if self.last_bucket != NIL && self.last_key == key {
                self.last_bucket
            } else {
                self.lookup_or_create_bucket(key)
            };
            let bucket = self.buckets.get_mut(b);
            let head = bucket.unexp.head;
            if head != NIL {
                let u = self.remove_unexp(head);
                return Some((u.env, u.msg));
            }
            let tail = bucket.posted.tail;
            let seq = self.next_seq;
            self.next_seq += 1;
            let i = self.posted.insert(Posted {
                recv,
                seq,
                links: Links {
                    prev: tail,
                    next: NIL,
                },
                bucket: b,
                ctx: bucket.ctx,
                source,
                tag,
            });
            bucket.posted.tail = i;
            if tail == NIL {
                bucket.posted.head = i;
            } else {
                self.posted.get_mut(tail).links.next = i;
            }
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
    #[inline]
    pub fn match_posted(&mut self, env: Envelope) -> Option<R> {
        if self.posted.len == 0 {
            return None;
        }
        if self.wild_len == 0 {
            // Only exact receives: the head of the envelope's bucket, the
            // bucket looked up once (callgrind: a second lookup was some 8
            // instructions a message).
            let b = self.find_bucket(Key::of(env))?;
            let bucket = self.buckets.get_mut(b);
            let head = bucket.posted.head;
            if head == NIL {
                return None;
            }
            let (recv, empty) = take_posted_head(&mut self.posted, bucket, head);
            if empty {
                self.release_empty(b);
            }
            return Some(recv);
        }
        let (b, exact, ctx) = match self.find_bucket(Key::of(env)) {
            Some(b) => {
                let bucket = self.buckets.get(b);
                (b, bucket.posted.head, bucket.ctx)
            }
            None => (NIL, NIL, NIL),
        };
        let mut pick = exact;
        {
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
        if pick == exact {
            return Some(self.remove_exact_head(b, exact));
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
}

#[cfg(test)]
mod tests;
