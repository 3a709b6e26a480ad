//! The matcher's bookkeeping: sequence numbers, contexts, buckets (with
//! their idle list) and the slab lists posted receives and unexpected
//! messages live on. `mod.rs` holds the matching rules that use them.

use super::*;

impl<R: Copy + Eq, M> Matcher<R, M> {
    #[inline]
    pub(super) fn bump_seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    pub(super) fn acquire_ctx(&mut self, context: u32) -> u32 {
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

    /// The bucket for `key`, created if needed; it becomes the cached one
    /// (so it is not on the idle list). The cached last bucket is the
    /// inline path; a map lookup or a new bucket is out of line.
    #[inline(always)]
    pub(super) fn acquire_bucket(&mut self, key: Key) -> u32 {
        if self.last_bucket != NIL && self.last_key == key {
            self.last_bucket
        } else {
            self.lookup_or_create_bucket(key)
        }
    }

    /// [`acquire_bucket`](Self::acquire_bucket) past the cache: the map's
    /// bucket or a new one, which becomes the cached one.
    #[inline(never)]
    pub(super) fn lookup_or_create_bucket(&mut self, key: Key) -> u32 {
        if let Some(&b) = self.bucket_map.get(&key) {
            self.set_last(key, b, true);
            return b;
        }
        let ctx = self.acquire_ctx(key.context);
        let b = self.buckets.insert(Bucket {
            key,
            ctx,
            posted: List::EMPTY,
            unexp: List::EMPTY,
            idle: Links::NONE,
        });
        self.bucket_map.insert(key, b);
        // Born empty but never idle-listed: it is the cached one now.
        self.set_last(key, b, false);
        b
    }

    /// Make `b` (of `key`) the cached bucket: off the idle list if it is
    /// on it (`listed`: it was in the map before, not cached, so it is
    /// there exactly when empty), and the bucket cached before parked if
    /// it is empty (it leaves the cache, so it joins the idle list).
    pub(super) fn set_last(&mut self, key: Key, b: u32, listed: bool) {
        debug_assert!(b != self.last_bucket);
        let bucket = self.buckets.get(b);
        if listed && bucket.posted.is_empty() && bucket.unexp.is_empty() {
            unlink(&mut self.buckets, &mut self.idle, b, bucket_idle_links);
            self.idle_len -= 1;
        }
        let old = self.last_bucket;
        self.last_key = key;
        self.last_bucket = b;
        if old != NIL {
            let was = self.buckets.get(old);
            if was.posted.is_empty() && was.unexp.is_empty() {
                // `b` is off the list, so the eviction this may do spares it.
                self.park_bucket(old);
            }
        }
    }

    /// Park `b` on the idle list if it just became empty (see
    /// [`release_empty`](Self::release_empty)).
    #[inline(always)]
    pub(super) fn release_bucket(&mut self, b: u32) {
        let bucket = self.buckets.get(b);
        if bucket.posted.is_empty() && bucket.unexp.is_empty() {
            self.release_empty(b);
        }
    }

    /// Bucket `b` just became empty: park it, unless it is the cached one
    /// (parked once it leaves the cache, `set_last`).
    #[inline(always)]
    pub(super) fn release_empty(&mut self, b: u32) {
        if b != self.last_bucket {
            self.park_bucket(b);
        }
    }

    /// Inline, the eviction out of line (the call cost some 15
    /// instructions, callgrind).
    #[inline]
    pub(super) fn park_bucket(&mut self, b: u32) {
        push_back(&mut self.buckets, &mut self.idle, b, bucket_idle_links);
        self.idle_len += 1;
        if self.idle_len > IDLE_BUCKETS {
            self.evict_idle();
        }
    }

    /// Drops the oldest idle bucket (`IDLE_BUCKETS`).
    #[cold]
    #[inline(never)]
    fn evict_idle(&mut self) {
        let old = self.idle.head;
        unlink(&mut self.buckets, &mut self.idle, old, bucket_idle_links);
        self.idle_len -= 1;
        debug_assert!(old != self.last_bucket, "the cached bucket is never idle");
        let key = self.buckets.remove(old).key;
        self.bucket_map.remove(&key);
    }

    #[inline(always)]
    pub(super) fn remove_posted(&mut self, i: u32) -> Posted<R> {
        let (b, c) = {
            let p = self.posted.get(i);
            (p.bucket, p.ctx)
        };
        if b != NIL {
            let bucket = self.buckets.get_mut(b);
            unlink(&mut self.posted, &mut bucket.posted, i, posted_links);
            if bucket.posted.is_empty() && bucket.unexp.is_empty() {
                self.release_empty(b);
            }
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

    /// [`remove_posted`](Self::remove_posted) for the head `i` of bucket
    /// `b`'s posted list, the usual match: the bucket is known, and the
    /// entry has no predecessor to relink.
    #[inline(always)]
    pub(super) fn remove_exact_head(&mut self, b: u32, i: u32) -> R {
        let (recv, empty) = take_posted_head(&mut self.posted, self.buckets.get_mut(b), i);
        if empty {
            self.release_empty(b);
        }
        recv
    }

    pub(super) fn remove_unexp(&mut self, i: u32) -> Unexpected<M> {
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
    pub(super) fn find_unexp(&self, c: u32, source: i32, tag: i32) -> u32 {
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
}

/// Take `i`, the head of `bucket`'s posted list, out of `posted`; its
/// receive, and whether the bucket is left empty (`release_empty`).
#[inline(always)]
pub(super) fn take_posted_head<R>(
    posted: &mut Slab<Posted<R>>,
    bucket: &mut Bucket,
    i: u32,
) -> (R, bool) {
    let p = posted.remove(i);
    debug_assert!(p.links.prev == NIL && bucket.posted.head == i);
    let next = p.links.next;
    bucket.posted.head = next;
    if next != NIL {
        posted.get_mut(next).links.prev = NIL;
        (p.recv, false)
    } else {
        bucket.posted.tail = NIL;
        (p.recv, bucket.unexp.is_empty())
    }
}
