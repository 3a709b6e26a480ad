//! Model check of the shared-memory MPSC queue (`rivet::shm::queue`, in `rivet-lockfree`) with
//! loom: the very code the engine runs, instantiated with loom's atomics.
//! (The fastbox ring and its merge with cell traffic are checked in
//! `loom_ring.rs`; `loom_common` holds what both share.)
//!
//! Run (separate target dir so the normal build is not invalidated):
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p rivet-lockfree --release --test loom_queue
//! ```
//!
//! The models bound preemptions to 3 (loom's `preemption_bound`) unless
//! `LOOM_MAX_PREEMPTIONS` says otherwise: unbounded exploration of 3
//! producers + 1 consumer does not finish in reasonable time, and bugs in
//! algorithms of this size show up within 2-3 preemptions.
//!
//! Each model checks that every element is dequeued exactly once, that each
//! producer's elements arrive in its order, that the element's contents
//! written before the enqueue are visible after the dequeue (loom's
//! `UnsafeCell` flags a data race otherwise), and that the queue ends empty.
#![cfg(loom)]

mod loom_common;

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicUsize;
use loom::sync::Arc;
use std::sync::atomic::Ordering;

use loom_common::{builder, LWord};
use rivet_lockfree::queue::{enqueue, Consumer, Dequeued, Ends, Links, Word};

const STRIDE: u64 = 64;

/// Cells at offsets 64, 128, ...: a `next` word and a non-atomic payload.
struct Arena {
    next: Vec<LWord>,
    payload: Vec<UnsafeCell<u64>>,
}

impl Arena {
    fn new(n: usize) -> Arena {
        Arena {
            next: (0..n).map(|_| LWord::new()).collect(),
            payload: (0..n).map(|_| UnsafeCell::new(0)).collect(),
        }
    }
    fn off(i: usize) -> u64 {
        (i as u64 + 1) * STRIDE
    }
    fn index(off: u64) -> usize {
        assert!(off != 0 && off % STRIDE == 0, "bad offset {off}");
        (off / STRIDE - 1) as usize
    }
    // SAFETY (both): loom's UnsafeCell checks that these accesses never
    // race; that is what the model verifies.
    fn write(&self, off: u64, v: u64) {
        self.payload[Arena::index(off)].with_mut(|p| unsafe { *p = v });
    }
    fn read(&self, off: u64) -> u64 {
        self.payload[Arena::index(off)].with(|p| unsafe { *p })
    }
}

impl Links for Arena {
    type Word = LWord;
    fn next(&self, off: u64) -> Option<&LWord> {
        if off == 0 || off % STRIDE != 0 {
            return None;
        }
        self.next.get((off / STRIDE - 1) as usize)
    }
    fn relax(&self) {
        loom::thread::yield_now();
    }
}

struct Queue {
    head: LWord,
    tail: LWord,
}

impl Queue {
    fn new() -> Queue {
        Queue {
            head: LWord::new(),
            tail: LWord::new(),
        }
    }
    fn ends(&self) -> Ends<'_, LWord> {
        Ends {
            head: &self.head,
            tail: &self.tail,
        }
    }
}

/// Take one element, yielding while the queue is empty or busy.
fn take(c: &mut Consumer, arena: &Arena, q: &Queue) -> u64 {
    loop {
        match c.dequeue(arena, q.ends(), 2).unwrap() {
            Dequeued::Item(off) => return off,
            Dequeued::Empty | Dequeued::Busy => loom::thread::yield_now(),
        }
    }
}

/// `producers` threads each enqueue `per` distinct elements (payload =
/// producer << 8 | sequence); the main thread consumes them all.
fn producers_and_consumer(producers: usize, per: usize) {
    builder(3).check(move || {
        let arena = Arc::new(Arena::new(producers * per));
        let q = Arc::new(Queue::new());
        let threads: Vec<_> = (0..producers)
            .map(|p| {
                let (arena, q) = (arena.clone(), q.clone());
                loom::thread::spawn(move || {
                    for j in 0..per {
                        let off = Arena::off(p * per + j);
                        arena.write(off, (p as u64) << 8 | j as u64);
                        enqueue(&*arena, q.ends(), off).unwrap();
                    }
                })
            })
            .collect();
        let mut c = Consumer::new();
        let mut seen = vec![false; producers * per];
        let mut next = vec![0u64; producers];
        for _ in 0..producers * per {
            let off = take(&mut c, &arena, &q);
            let i = Arena::index(off);
            assert!(!seen[i], "element {i} dequeued twice");
            seen[i] = true;
            let v = arena.read(off);
            let (p, j) = ((v >> 8) as usize, v & 0xff);
            assert_eq!(
                i,
                p * per + j as usize,
                "payload does not match the element"
            );
            assert_eq!(j, next[p], "producer {p} out of order");
            next[p] += 1;
        }
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(c.dequeue(&*arena, q.ends(), 2).unwrap(), Dequeued::Empty);
        assert_eq!(q.tail.load(Ordering::Relaxed), 0);
    });
}

#[test]
fn two_producers_two_elements_each() {
    producers_and_consumer(2, 2);
}

#[test]
fn three_producers_one_element_each() {
    producers_and_consumer(3, 1);
}

/// The cell cycle as `ShmNode` runs it: sender A owns one cell and sends up
/// to 2 messages, so it must get the cell back through its free queue (where
/// A is the consumer and the receiver a producer) before the second; sender B
/// sends one message concurrently. Checks order, exactly-once and that a
/// reused cell's new contents are visible.
///
/// Only the receiver waits in a loop: A tries a bounded number of times to
/// get its cell back and otherwise sends one message (two threads spinning on
/// each other make loom's search explode). The receiver stops when both
/// senders have finished and the queue is empty, which also checks that a
/// finished enqueue is never invisible to the consumer.
#[test]
fn cell_recycled_through_free_queue() {
    builder(3).check(|| {
        let arena = Arc::new(Arena::new(2));
        let recv = Arc::new(Queue::new());
        let free_a = Arc::new(Queue::new());
        let finished = Arc::new(AtomicUsize::new(0));
        let sent_a = Arc::new(AtomicUsize::new(0));
        enqueue(&*arena, free_a.ends(), Arena::off(0)).unwrap();
        let a = {
            let (arena, recv, free_a) = (arena.clone(), recv.clone(), free_a.clone());
            let (finished, sent_a) = (finished.clone(), sent_a.clone());
            loom::thread::spawn(move || {
                let mut mine = Consumer::new();
                let mut sent = 0;
                for _ in 0..3 {
                    if let Dequeued::Item(off) = mine.dequeue(&*arena, free_a.ends(), 1).unwrap() {
                        assert_eq!(Arena::index(off), 0, "got another sender's cell");
                        arena.write(off, sent);
                        enqueue(&*arena, recv.ends(), off).unwrap();
                        sent += 1;
                        if sent == 2 {
                            break;
                        }
                    }
                    loom::thread::yield_now();
                }
                sent_a.store(sent as usize, Ordering::Relaxed);
                finished.fetch_add(1, Ordering::Release);
            })
        };
        let b = {
            let (arena, recv, finished) = (arena.clone(), recv.clone(), finished.clone());
            loom::thread::spawn(move || {
                let off = Arena::off(1);
                arena.write(off, 1 << 8);
                enqueue(&*arena, recv.ends(), off).unwrap();
                finished.fetch_add(1, Ordering::Release);
            })
        };
        let mut c = Consumer::new();
        let (mut next_a, mut got_b) = (0, false);
        loop {
            // Read before the dequeue: an Empty seen after both finished
            // (acquire) means their elements were all taken.
            let both_done = finished.load(Ordering::Acquire) == 2;
            match c.dequeue(&*arena, recv.ends(), 1).unwrap() {
                Dequeued::Item(off) => {
                    let v = arena.read(off);
                    if Arena::index(off) == 0 {
                        assert_eq!(v, next_a, "sender A out of order");
                        next_a += 1;
                        enqueue(&*arena, free_a.ends(), off).unwrap();
                    } else {
                        assert!(!got_b, "B's element dequeued twice");
                        assert_eq!(v, 1 << 8);
                        got_b = true;
                    }
                }
                Dequeued::Busy => loom::thread::yield_now(),
                Dequeued::Empty => {
                    if both_done {
                        break;
                    }
                    loom::thread::yield_now();
                }
            }
        }
        a.join().unwrap();
        b.join().unwrap();
        assert!(got_b, "B's element lost");
        assert_eq!(
            next_a,
            sent_a.load(Ordering::Relaxed) as u64,
            "A's elements lost"
        );
        assert_eq!(recv.tail.load(Ordering::Relaxed), 0);
    });
}
