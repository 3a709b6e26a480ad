//! Nemesis-style lock-free multi-producer single-consumer queue of cells.
//!
//! Elements are named by relative offsets (`u64`, 0 = null) so the queue works
//! in a segment mapped at a different address in every process. The algorithm
//! (after MPICH's `MPID_nem_queue_*`):
//!
//! - enqueue (any producer): `elem.next = 0`; `prev = swap(tail, elem)`; if
//!   `prev` is null the queue was empty and `head = elem`, else
//!   `prev.next = elem`. One atomic swap, no CAS loop.
//! - dequeue (the one consumer): a *shadow head* in process-private memory
//!   takes over `head` when it is empty (and clears `head`), so polling touches
//!   the shared line only when the private one is empty. Taking element `e`:
//!   if `e.next` is set the shadow moves on; else `CAS(tail, e, null)`; if that
//!   fails a producer is between its swap and its `prev.next` store, and the
//!   consumer spins (bounded) until the link appears.
//!
//! The algorithm is generic over the atomic word ([`Word`]) and over where
//! elements live ([`Links`]) so that `tests/loom_queue.rs` can model-check the
//! very same code with loom's atomics. Offsets read from shared memory are
//! never trusted: [`Links::next`] bounds- and alignment-checks them and the
//! queue returns [`BadLink`] instead of touching memory out of range.

use std::sync::atomic::{AtomicU64, Ordering};

/// The atomic 64-bit word the queue is written against.
pub trait Word {
    fn load(&self, order: Ordering) -> u64;
    fn store(&self, value: u64, order: Ordering);
    fn swap(&self, value: u64, order: Ordering) -> u64;
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64>;
}

impl Word for AtomicU64 {
    #[inline(always)]
    fn load(&self, order: Ordering) -> u64 {
        AtomicU64::load(self, order)
    }
    #[inline(always)]
    fn store(&self, value: u64, order: Ordering) {
        AtomicU64::store(self, value, order)
    }
    #[inline(always)]
    fn swap(&self, value: u64, order: Ordering) -> u64 {
        AtomicU64::swap(self, value, order)
    }
    #[inline(always)]
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        AtomicU64::compare_exchange(self, current, new, success, failure)
    }
}

/// Where the elements live: maps an element offset to its `next` word.
pub trait Links {
    type Word: Word;
    /// The `next` word of the element at `off`, or `None` when `off` does not
    /// name an element (out of range, misaligned, null).
    fn next(&self, off: u64) -> Option<&Self::Word>;
    /// Called once per iteration while waiting for a producer to link its
    /// element (a CPU spin hint; loom models yield here).
    #[inline(always)]
    fn relax(&self) {
        std::hint::spin_loop();
    }
}

/// An offset read from the queue that names no element: the segment is
/// corrupt. Carries the offending value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadLink(pub u64);

/// The shared part of one queue: its `head` and `tail` words (kept on one
/// cache line in the segment).
pub struct Ends<'a, W> {
    pub head: &'a W,
    pub tail: &'a W,
}

impl<W> Clone for Ends<'_, W> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<W> Copy for Ends<'_, W> {}

/// Append element `elem` (which the caller owns: no other thread touches it
/// until it is dequeued). Lock-free: one swap and one store.
#[inline]
pub fn enqueue<L: Links>(links: &L, q: Ends<'_, L::Word>, elem: u64) -> Result<(), BadLink> {
    let next = links.next(elem).ok_or(BadLink(elem))?;
    next.store(0, Ordering::Relaxed);
    // AcqRel: release publishes the element's contents (and `next = 0`) to
    // whoever takes `elem` from `tail`; acquire orders our `prev.next` /
    // `head` store after the consumer's `head = 0` and `CAS(tail, e, 0)`.
    let prev = q.tail.swap(elem, Ordering::AcqRel);
    if prev == 0 {
        q.head.store(elem, Ordering::Release);
    } else {
        links
            .next(prev)
            .ok_or(BadLink(prev))?
            .store(elem, Ordering::Release);
    }
    Ok(())
}

/// What a dequeue found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dequeued {
    /// Nothing queued.
    Empty,
    /// The oldest element, now owned by the consumer.
    Item(u64),
    /// An element is there but its producer has not linked it yet and did not
    /// within the spin limit (it was preempted mid-enqueue): try again later.
    Busy,
}

/// The consumer's private state: the shadow head.
#[derive(Debug, Default)]
pub struct Consumer {
    shadow: u64,
}

impl Consumer {
    pub const fn new() -> Consumer {
        Consumer { shadow: 0 }
    }

    /// Whether the private shadow head holds elements (no shared memory read).
    #[inline]
    pub fn has_shadow(&self) -> bool {
        self.shadow != 0
    }

    /// Whether the queue looks empty: nothing in the shadow head and a null
    /// shared head (one relaxed load; a producer's element may land just
    /// after, and the next look finds it). For a cheap idle poll.
    #[inline(always)]
    pub fn looks_empty<W: Word>(&self, q: &Ends<'_, W>) -> bool {
        self.shadow == 0 && q.head.load(Ordering::Relaxed) == 0
    }

    /// Take the oldest element. Only the queue's one consumer may call this.
    /// Waits at most `spins` relax steps for a producer that is between its
    /// swap and its link store, then answers [`Dequeued::Busy`].
    #[inline]
    pub fn dequeue<L: Links>(
        &mut self,
        links: &L,
        q: Ends<'_, L::Word>,
        spins: u32,
    ) -> Result<Dequeued, BadLink> {
        if self.shadow == 0 {
            let h = q.head.load(Ordering::Acquire);
            if h == 0 {
                return Ok(Dequeued::Empty);
            }
            // No producer writes `head` now: one does only after swapping a
            // null `tail`, and `tail` cannot be null while `h` is queued.
            q.head.store(0, Ordering::Relaxed);
            self.shadow = h;
        }
        let e = self.shadow;
        let next = links.next(e).ok_or(BadLink(e))?;
        let n = next.load(Ordering::Acquire);
        if n == 0 {
            // `e` may be the last element: try to close the queue behind it.
            // AcqRel: the producer that next swaps a null tail must see our
            // `head = 0` before it stores `head`.
            if q.tail
                .compare_exchange(e, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.shadow = 0;
                return Ok(Dequeued::Item(e));
            }
            // A producer swapped `tail` after `e` and will store `e.next`.
            return self.wait_link(links, next, spins);
        }
        self.shadow = n;
        Ok(Dequeued::Item(e))
    }

    #[cold]
    #[inline(never)]
    fn wait_link<L: Links>(
        &mut self,
        links: &L,
        next: &L::Word,
        spins: u32,
    ) -> Result<Dequeued, BadLink> {
        let e = self.shadow;
        let mut i = 0;
        loop {
            links.relax();
            let n = next.load(Ordering::Acquire);
            if n != 0 {
                self.shadow = n;
                return Ok(Dequeued::Item(e));
            }
            i += 1;
            if i >= spins {
                // `e` stays in the shadow head; the next call finds its link.
                return Ok(Dequeued::Busy);
            }
        }
    }
}

/// Cells laid out back to back in one memory region: element `off` is valid
/// iff `first <= off < first + count * stride` and `off - first` is a multiple
/// of `stride` (a power of two). The `next` word is the cell's first 8 bytes.
#[derive(Debug, Clone, Copy)]
pub struct CellRegion {
    base: *mut u8,
    first: u64,
    stride: u64,
    span: u64,
}

impl CellRegion {
    /// # Safety
    /// `base + first .. base + first + count * stride` must stay mapped,
    /// readable and writable while the region (or a copy) is used; `base +
    /// first` must be 8-byte aligned; the first word of each cell must only be
    /// accessed atomically by everyone; `first > 0`; `stride` is a power of
    /// two and at least 8.
    pub unsafe fn new(base: *mut u8, first: u64, stride: u64, count: u64) -> CellRegion {
        debug_assert!(first > 0 && stride.is_power_of_two() && stride >= 8);
        debug_assert!((base as u64 + first) % 8 == 0);
        CellRegion {
            base,
            first,
            stride,
            span: stride * count,
        }
    }

    /// Whether `off` names a cell.
    #[inline(always)]
    pub fn contains(&self, off: u64) -> bool {
        let rel = off.wrapping_sub(self.first);
        rel < self.span && rel & (self.stride - 1) == 0
    }

    /// Index of cell `off` (which must be contained).
    #[inline(always)]
    pub fn index(&self, off: u64) -> u64 {
        (off - self.first) / self.stride
    }

    /// Offset of cell `index`.
    #[inline(always)]
    pub fn offset(&self, index: u64) -> u64 {
        self.first + index * self.stride
    }

    /// Pointer to cell `off` (which must be contained).
    #[inline(always)]
    pub fn ptr(&self, off: u64) -> *mut u8 {
        debug_assert!(self.contains(off));
        // SAFETY: `off` is inside the region (callers check `contains`), which
        // `new`'s contract keeps mapped; the result stays in that allocation.
        unsafe { self.base.add(off as usize) }
    }
}

impl Links for CellRegion {
    type Word = AtomicU64;
    #[inline(always)]
    fn next(&self, off: u64) -> Option<&AtomicU64> {
        if !self.contains(off) {
            return None;
        }
        // SAFETY: `off` names a cell of the region (checked above): mapped
        // for as long as `self` per `new`'s contract, 8-byte aligned (base +
        // first aligned, stride a power of two >= 8), and accessed only
        // atomically by everyone.
        Some(unsafe { AtomicU64::from_ptr(self.base.add(off as usize).cast::<u64>()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Heap-backed cells: `count` cells of `stride` bytes from offset `stride`.
    struct Arena {
        words: Box<[AtomicU64]>,
        region: CellRegion,
    }
    // SAFETY: the region points into `words`, which lives as long as the
    // arena and is only accessed atomically through `CellRegion::next` or
    // through `AtomicU64` references.
    unsafe impl Send for Arena {}
    // SAFETY: as for `Send`: shared access is atomic only.
    unsafe impl Sync for Arena {}

    impl Arena {
        fn new(count: u64, stride: u64) -> Arena {
            let n = ((count + 1) * stride / 8) as usize;
            let words: Box<[AtomicU64]> = (0..n).map(|_| AtomicU64::new(0)).collect();
            let base = words.as_ptr() as *mut u8;
            // SAFETY: the words outlive the region (same struct, boxed so
            // they never move); aligned; accessed atomically only.
            let region = unsafe { CellRegion::new(base, stride, stride, count) };
            Arena { words, region }
        }
        fn word(&self, off: u64, i: usize) -> &AtomicU64 {
            &self.words[off as usize / 8 + i]
        }
    }

    fn ends(w: &[AtomicU64; 2]) -> Ends<'_, AtomicU64> {
        Ends {
            head: &w[0],
            tail: &w[1],
        }
    }

    #[test]
    fn fifo_single_thread_and_bad_links() {
        let a = Arena::new(4, 64);
        let q = [AtomicU64::new(0), AtomicU64::new(0)];
        let mut c = Consumer::new();
        assert_eq!(c.dequeue(&a.region, ends(&q), 8), Ok(Dequeued::Empty));
        for i in 0..4 {
            enqueue(&a.region, ends(&q), a.region.offset(i)).unwrap();
        }
        for i in 0..4 {
            // Elements left (in the shared or the shadow head): not empty.
            assert!(!c.looks_empty(&ends(&q)));
            assert_eq!(
                c.dequeue(&a.region, ends(&q), 8),
                Ok(Dequeued::Item(a.region.offset(i)))
            );
        }
        assert!(c.looks_empty(&ends(&q)));
        assert_eq!(c.dequeue(&a.region, ends(&q), 8), Ok(Dequeued::Empty));
        // Garbage in head: misaligned, out of range.
        q[0].store(65, Ordering::Relaxed);
        assert_eq!(c.dequeue(&a.region, ends(&q), 8), Err(BadLink(65)));
        let mut c = Consumer::new();
        q[0].store(64 * 100, Ordering::Relaxed);
        assert_eq!(c.dequeue(&a.region, ends(&q), 8), Err(BadLink(6400)));
        // Garbage in tail: the enqueue reports it.
        q[0].store(0, Ordering::Relaxed);
        q[1].store(3, Ordering::Relaxed);
        assert_eq!(enqueue(&a.region, ends(&q), 64), Err(BadLink(3)));
        assert_eq!(enqueue(&a.region, ends(&q), 0), Err(BadLink(0)));
        // Garbage in a next word.
        let q = [AtomicU64::new(0), AtomicU64::new(0)];
        let mut c = Consumer::new();
        enqueue(&a.region, ends(&q), 64).unwrap();
        enqueue(&a.region, ends(&q), 128).unwrap();
        a.word(64, 0).store(7, Ordering::Relaxed);
        assert_eq!(c.dequeue(&a.region, ends(&q), 8), Ok(Dequeued::Item(64)));
        assert_eq!(c.dequeue(&a.region, ends(&q), 8), Err(BadLink(7)));
    }

    /// 3 producers send through the consumer's queue and get their cells
    /// back through their own free queues (the consumer is a producer there),
    /// the way `ShmNode` uses them. Checks exactly-once and per-producer order.
    #[test]
    fn stress_three_producers_with_free_queues() {
        const P: u64 = 3;
        const CELLS: u64 = 4;
        const MSGS: u64 = 60_000;
        let a = Arc::new(Arena::new(P * CELLS, 64));
        // queue words: [recv head, recv tail, free0 head, free0 tail, ...]
        let qs: Arc<Vec<[AtomicU64; 2]>> = Arc::new(
            (0..=P)
                .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                .collect(),
        );
        for p in 0..P {
            for i in 0..CELLS {
                enqueue(
                    &a.region,
                    ends(&qs[1 + p as usize]),
                    a.region.offset(p * CELLS + i),
                )
                .unwrap();
            }
        }
        let mut threads = Vec::new();
        for p in 0..P {
            let (a, qs) = (a.clone(), qs.clone());
            threads.push(std::thread::spawn(move || {
                let mut free = Consumer::new();
                let mut sent = 0;
                while sent < MSGS {
                    match free
                        .dequeue(&a.region, ends(&qs[1 + p as usize]), 64)
                        .unwrap()
                    {
                        Dequeued::Item(off) => {
                            assert_eq!(a.region.index(off) / CELLS, p, "foreign cell");
                            a.word(off, 1).store(p, Ordering::Relaxed);
                            a.word(off, 2).store(sent, Ordering::Relaxed);
                            enqueue(&a.region, ends(&qs[0]), off).unwrap();
                            sent += 1;
                        }
                        _ => std::thread::yield_now(),
                    }
                }
            }));
        }
        let mut next = [0u64; P as usize];
        let mut c = Consumer::new();
        let mut got = 0;
        while got < P * MSGS {
            match c.dequeue(&a.region, ends(&qs[0]), 64).unwrap() {
                Dequeued::Item(off) => {
                    let p = a.word(off, 1).load(Ordering::Relaxed);
                    let k = a.word(off, 2).load(Ordering::Relaxed);
                    assert_eq!(a.region.index(off) / CELLS, p);
                    assert_eq!(k, next[p as usize], "producer {p} out of order");
                    next[p as usize] += 1;
                    got += 1;
                    enqueue(&a.region, ends(&qs[1 + p as usize]), off).unwrap();
                }
                _ => std::thread::yield_now(),
            }
        }
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(next, [MSGS; P as usize]);
        assert_eq!(c.dequeue(&a.region, ends(&qs[0]), 64), Ok(Dequeued::Empty));
    }
}
