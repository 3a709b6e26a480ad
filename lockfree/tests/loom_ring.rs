//! Model check of the fastbox ring (`rivet::shm::fastbox`, in `rivet-lockfree`) and of the merge
//! of ring and cell traffic by per-pair sequence number, with loom: the very
//! `TxRing`, `RxRing`, `Inbound` and queue code the engine runs, over loom's
//! atomics (through the `RingMemory` and `Links` traits).
//!
//! Run (separate target dir so the normal build is not invalidated):
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p rivet-lockfree --release --test loom_ring
//! ```
//!
//! Preemptions are bounded to 4 unless `LOOM_MAX_PREEMPTIONS` says otherwise
//! (one sender and one receiver: 4 costs seconds, 5 most of a minute).
//!
//! The ring memory here ([`Ring`]) keeps each slot's first word as a loom
//! atomic, so markers are read with loom's weak-memory semantics (a load may
//! return an older store); record bytes are plain memory whose accesses are
//! declared per slot to a loom `UnsafeCell`, so a record read that is not
//! ordered after its write (or a write that overwrites a record not yet
//! consumed) is reported as a data race. Payload bytes that land on a
//! continuation slot's first word are also stored (relaxed) into that slot's
//! atomic, as they are in the segment, and every payload word imitates the
//! marker of a later message: a stale payload word taken for a marker would
//! be read as a record (a race with the sender's write, or a content
//! mismatch).
//!
//! Each model checks that every message is delivered exactly once, in send
//! order, with the header and payload it was sent with.
//!
//! Not modelled here: the active-senders bitmap and generation (which rings
//! a receiver polls), the delivery budget (`ShmNode`'s pending cell), several
//! senders at once, returning cells through free queues (`loom_queue.rs`),
//! and 48-bit sequence wrap-around (`next_seq` is unit-tested).
#![cfg(loom)]

mod loom_common;

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use std::sync::atomic::Ordering;

use loom_common::{builder, LWord};
use rivet_lockfree::fastbox::{
    next_seq, record_slots, BeforeCell, Inbound, Record, RingMemory, RxRing, TxRing, RECORD_HEADER,
    SLOT,
};
use rivet_lockfree::queue::{enqueue, Consumer, Dequeued, Ends, Links, Word};
use rivet_lockfree::wire::WireHeader;

/// One ring's memory.
struct RingCells {
    /// Each slot's first word: a marker, or payload bytes.
    first: Vec<LWord>,
    /// Stands for the slot's bytes in loom's race detector.
    access: Vec<UnsafeCell<()>>,
    /// The slots' bytes (8-byte aligned, as in the segment).
    bytes: Box<[std::cell::UnsafeCell<u64>]>,
    consumed: LWord,
}

// SAFETY: every access to `bytes` is first declared to loom on the slots'
// `access` cells (`with` / `with_mut` in `read_record` / `write_record`; a
// record's payload is read after its `read_record` and before `consume`), so
// loom reports any access not ordered with a conflicting one; loom runs one
// thread at a time; everything else is loom's atomics.
unsafe impl Sync for RingCells {}
// SAFETY: as above; the raw bytes carry no thread affinity.
unsafe impl Send for RingCells {}

/// A ring as both ends see it.
#[derive(Clone)]
struct Ring(Arc<RingCells>);

impl Ring {
    fn new(slots: u64) -> Ring {
        let n = slots as usize;
        Ring(Arc::new(RingCells {
            first: (0..n).map(|_| LWord::new()).collect(),
            access: (0..n).map(|_| UnsafeCell::new(())).collect(),
            bytes: (0..n * SLOT / 8)
                .map(|_| std::cell::UnsafeCell::new(0))
                .collect(),
            consumed: LWord::new(),
        }))
    }

    /// Start of slot `slot`'s bytes (bounds-checked), derived from the whole
    /// slice so that it may reach the following slots.
    fn slot_ptr(&self, slot: usize) -> *mut u8 {
        assert!(slot < self.0.first.len(), "slot {slot} outside the ring");
        // `UnsafeCell<u64>` has the layout of `u64`: the words are contiguous
        // and may be written through a shared reference.
        let base = std::cell::UnsafeCell::raw_get(self.0.bytes.as_ptr()).cast::<u8>();
        base.wrapping_add(slot * SLOT)
    }
}

impl RingMemory for Ring {
    type Word = LWord;

    unsafe fn marker(&self, slot: u64) -> &LWord {
        &self.0.first[slot as usize]
    }

    unsafe fn consumed(&self) -> &LWord {
        &self.0.consumed
    }

    unsafe fn write_record(&self, slot: u64, header: &WireHeader, payload: &[u8]) {
        let (s0, rs) = (slot as usize, record_slots(payload.len()) as usize);
        assert!(
            s0 + rs <= self.0.first.len(),
            "record crosses the ring's end"
        );
        for s in s0..s0 + rs {
            self.0.access[s].with_mut(|_| ());
        }
        let rec = self.slot_ptr(s0);
        // SAFETY: the record's slots are inside `bytes` (checked above; the
        // pointer is derived from the whole-slice base) and loom has been
        // told of the write (`with_mut` above), so it flags any race.
        unsafe {
            rec.add(8).cast::<WireHeader>().write(*header);
            std::ptr::copy_nonoverlapping(payload.as_ptr(), rec.add(RECORD_HEADER), payload.len());
        }
        for s in s0 + 1..s0 + rs {
            // SAFETY: slot `s` is inside the ring and written just above.
            let w = unsafe { self.slot_ptr(s).cast::<u64>().read() };
            self.0.first[s].store(w, Ordering::Relaxed);
        }
    }

    unsafe fn read_record(&self, slot: u64, slots: u64) -> (WireHeader, *const u8) {
        let (s0, rs) = (slot as usize, slots as usize);
        assert!(
            s0 + rs <= self.0.first.len(),
            "record crosses the ring's end"
        );
        for s in s0..s0 + rs {
            self.0.access[s].with(|_| ());
        }
        let rec = self.slot_ptr(s0);
        // SAFETY: inside `bytes` (checked above); loom has been told of the
        // read of every slot of the record (the payload is read later through
        // the returned pointer, before `consume`, while the sender keeps off).
        unsafe {
            (
                rec.add(8).cast::<WireHeader>().read(),
                rec.add(RECORD_HEADER),
            )
        }
    }
}

const PREEMPTIONS: usize = 4;

const SEQ48: u64 = (1 << 48) - 1;

/// How far ahead the marker imitated by payload words is: in `ring_laps` a
/// stale continuation word is read at the position of the message 4 later.
const FORGE_AHEAD: u64 = 4;

/// The header message `seq` is sent with.
fn header(seq: u64, len: usize) -> WireHeader {
    WireHeader {
        tag: seq as i32,
        len: len as u64,
        aux: seq.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        ..Default::default()
    }
}

/// The payload of message `seq`: word `j` reads as the marker of a `j`-byte
/// record for message `seq + FORGE_AHEAD`.
fn payload(seq: u64, len: usize) -> Vec<u8> {
    (0..len.div_ceil(8) as u64)
        .flat_map(|j| (((seq + FORGE_AHEAD) & SEQ48) | j << 48).to_ne_bytes())
        .take(len)
        .collect()
}

/// Check that `rec` is message `seq` of `len` bytes as sent.
fn check(rec: &Record, seq: u64, len: usize) {
    assert_eq!(rec.header, header(seq, len), "message {seq}: wrong header");
    assert_eq!(rec.len, len, "message {seq}: wrong length");
    // SAFETY: `peek` returned the record and it is not consumed yet.
    let got = unsafe { std::slice::from_raw_parts(rec.payload, rec.len) };
    assert_eq!(got, &payload(seq, len)[..], "message {seq}: wrong payload");
}

/// Slots of the ring in `ring_laps`: a quarter is 2 slots, so consumption is
/// published every 2 slots.
const LAP_SLOTS: u64 = 8;
/// Largest payload there: 2 slots.
const LAP_MAX: usize = 2 * SLOT - RECORD_HEADER;
/// Records of 1, 2, 2, 2 slots fill slots 0-6; the fifth (2 slots) does not
/// fit at slot 7, so a wrap record goes there and it takes slots 0-1, which
/// needs the receiver to have published consumption (full ring, refresh);
/// slot 2 after it held payload of message 2, so the sender zeroes it; the
/// sixth (1 slot) then goes to slot 2 after another refresh.
const LAP_LENS: [usize; 6] = [8, 40, 70, 17, 50, 0];

/// One sender pushes `LAP_LENS` through an 8-slot ring, yielding while it is
/// full; the receiver takes them in order, yielding while the next is not
/// there.
#[test]
fn ring_laps() {
    assert_eq!(
        LAP_LENS.map(record_slots),
        [1, 2, 2, 2, 2, 1],
        "the schedule above"
    );
    builder(PREEMPTIONS).check(|| {
        let ring = Ring::new(LAP_SLOTS);
        let sender = {
            let ring = ring.clone();
            loom::thread::spawn(move || {
                // SAFETY: a fresh zeroed ring of `LAP_SLOTS` slots; this
                // thread is its only sender.
                let mut tx = unsafe { TxRing::with_memory(ring, LAP_SLOTS) };
                let mut seq = 1;
                for len in LAP_LENS {
                    let p = payload(seq, len);
                    while !tx.try_push(seq, &header(seq, len), &p) {
                        loom::thread::yield_now();
                    }
                    seq = next_seq(seq);
                }
            })
        };
        // SAFETY: as above; this thread is the only receiver.
        let mut rx = unsafe { RxRing::with_memory(ring, LAP_SLOTS, LAP_MAX) };
        let mut seq = 1;
        for len in LAP_LENS {
            let rec = loop {
                if let Some(rec) = rx.peek(seq).unwrap() {
                    break rec;
                }
                loom::thread::yield_now();
            };
            check(&rec, seq, len);
            rx.consume(&rec);
            seq = next_seq(seq);
        }
        sender.join().unwrap();
        assert!(rx.peek(seq).unwrap().is_none(), "a record after the last");
    });
}

const CELL: u64 = 64;

/// Cells at offsets 64, 128, ...: a `next` word and a non-atomic body
/// `(sequence number, value)` (the cell header and payload of `ShmNode`).
struct Cells {
    next: Vec<LWord>,
    body: Vec<UnsafeCell<(u64, u64)>>,
}

impl Cells {
    fn new(n: usize) -> Cells {
        Cells {
            next: (0..n).map(|_| LWord::new()).collect(),
            body: (0..n).map(|_| UnsafeCell::new((0, 0))).collect(),
        }
    }
    fn off(i: usize) -> u64 {
        (i as u64 + 1) * CELL
    }
    fn index(off: u64) -> usize {
        assert!(off != 0 && off % CELL == 0, "bad cell offset {off}");
        (off / CELL - 1) as usize
    }
    // SAFETY (both): loom's UnsafeCell checks that these accesses never
    // race; that is what the model verifies.
    fn write(&self, off: u64, v: (u64, u64)) {
        self.body[Cells::index(off)].with_mut(|p| unsafe { *p = v });
    }
    fn read(&self, off: u64) -> (u64, u64) {
        self.body[Cells::index(off)].with(|p| unsafe { *p })
    }
}

impl Links for Cells {
    type Word = LWord;
    fn next(&self, off: u64) -> Option<&LWord> {
        if off == 0 || off % CELL != 0 {
            return None;
        }
        self.next.get((off / CELL - 1) as usize)
    }
    fn relax(&self) {
        loom::thread::yield_now();
    }
}

/// The receiver's queue `{head, tail}`.
struct Queue([LWord; 2]);

impl Queue {
    fn ends(&self) -> Ends<'_, LWord> {
        Ends {
            head: &self.0[0],
            tail: &self.0[1],
        }
    }
}

/// What a cell carries besides its sequence number.
fn cell_value(seq: u64) -> u64 {
    seq.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1
}

/// Ring of the merge model: 4 slots, a record per slot, consumption
/// published after every record.
const MERGE_SLOTS: u64 = 4;
/// Ring payloads: one slot.
const SMALL_LEN: usize = 8;
/// The messages: `true` is ring-sized (`ShmNode::try_send` tries the ring,
/// then takes a cell if the ring is full), `false` too big for the ring (a
/// cell). The ring holds 3 records before the sender must see consumption,
/// so the later small messages take the ring or a cell depending on the
/// receiver's progress, and a ring record may follow a cell that a full ring
/// forced.
const MERGE_MSGS: [bool; 7] = [true, false, true, true, true, true, false];

/// One sender sends `MERGE_MSGS` by ring or cell as `ShmNode::try_send`
/// does, with one sequence number per message whichever path it takes; the
/// receiver polls the ring, then the queue, as `ShmNode::poll` does, and
/// merges them with `Inbound` (the decisions `ShmNode::poll_ring` and
/// `take_cell` make).
#[test]
fn ring_and_cells_merge() {
    builder(PREEMPTIONS).check(|| {
        let ring = Ring::new(MERGE_SLOTS);
        let cells = Arc::new(Cells::new(MERGE_MSGS.len()));
        let q = Arc::new(Queue([LWord::new(), LWord::new()]));
        let sender = {
            let (ring, cells, q) = (ring.clone(), cells.clone(), q.clone());
            loom::thread::spawn(move || {
                // SAFETY: a fresh zeroed ring of `MERGE_SLOTS` slots; this
                // thread is its only sender.
                let mut tx = unsafe { TxRing::with_memory(ring, MERGE_SLOTS) };
                let mut seq = 1;
                let mut used = 0;
                for small in MERGE_MSGS {
                    let p = payload(seq, SMALL_LEN);
                    if !(small && tx.try_push(seq, &header(seq, SMALL_LEN), &p)) {
                        let off = Cells::off(used);
                        used += 1;
                        cells.write(off, (seq, cell_value(seq)));
                        enqueue(&*cells, q.ends(), off).unwrap();
                    }
                    seq = next_seq(seq);
                }
                used
            })
        };
        // SAFETY: as above; this thread is the only receiver.
        let mut inb = Inbound::new(unsafe { RxRing::with_memory(ring, MERGE_SLOTS, SMALL_LEN) });
        let mut c = Consumer::new();
        let mut cells_taken = vec![false; MERGE_MSGS.len()];
        let last = MERGE_MSGS.len() as u64;
        while inb.expected <= last {
            let mut progress = false;
            while let Some(rec) = inb.next_record().unwrap() {
                assert!(
                    MERGE_MSGS[inb.expected as usize - 1],
                    "a big message in the ring"
                );
                check(&rec, inb.expected, SMALL_LEN);
                inb.record_done(&rec);
                progress = true;
            }
            match c.dequeue(&*cells, q.ends(), 2).unwrap() {
                Dequeued::Item(off) => {
                    let i = Cells::index(off);
                    assert!(!cells_taken[i], "cell {i} dequeued twice");
                    cells_taken[i] = true;
                    let (seq, v) = cells.read(off);
                    assert_eq!(v, cell_value(seq), "cell of message {seq}: wrong contents");
                    // Ring records before the cell, then the cell.
                    while let BeforeCell::Record(rec) = inb.before_cell(seq).unwrap() {
                        check(&rec, inb.expected, SMALL_LEN);
                        inb.record_done(&rec);
                    }
                    assert_eq!(seq, inb.expected, "cell of message {seq} out of order");
                    inb.cell_done();
                }
                Dequeued::Empty | Dequeued::Busy => {
                    if !progress {
                        loom::thread::yield_now();
                    }
                }
            }
        }
        let used = sender.join().unwrap();
        assert_eq!(
            cells_taken.iter().filter(|&&t| t).count(),
            used,
            "cells lost"
        );
        assert!(
            inb.next_record().unwrap().is_none(),
            "a record after the last"
        );
        assert_eq!(c.dequeue(&*cells, q.ends(), 2).unwrap(), Dequeued::Empty);
        assert_eq!(q.0[1].load(Ordering::Relaxed), 0);
    });
}
