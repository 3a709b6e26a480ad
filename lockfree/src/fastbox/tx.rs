//! The sending end of a ring: space check, record push, next-marker zeroing.

use super::*;

/// Sending end (process-private state) of one ring.
#[derive(Debug)]
pub struct TxRing<M = Shared> {
    mem: M,
    /// Slots: a power of two.
    slots: u64,
    /// Slots written since the start (monotonic).
    head: u64,
    /// Last value read from `consumed`.
    cached: u64,
    /// Bit per slot: its first word holds payload bytes (a continuation
    /// slot), so it must be zeroed before it can be a next-record position.
    payload_slots: Vec<u64>,
}

impl TxRing {
    /// # Safety
    /// `data` points to `slots * SLOT` bytes of a shared ring that stay
    /// mapped while this value lives, 64-byte aligned; `consumed` to its
    /// consumption counter; this is the ring's only sender; `slots` is a power
    /// of two.
    pub unsafe fn new(data: *mut u8, consumed: *const AtomicU64, slots: u64) -> TxRing {
        // SAFETY: per this function's contract.
        unsafe { TxRing::with_memory(Shared { data, consumed }, slots) }
    }

    /// An unusable ring (for oneself, or when rings are off).
    pub fn none() -> TxRing {
        TxRing {
            mem: Shared {
                data: std::ptr::null_mut(),
                consumed: std::ptr::null(),
            },
            slots: 0,
            head: 0,
            cached: 0,
            payload_slots: Vec::new(),
        }
    }
}

impl<M: RingMemory> TxRing<M> {
    /// # Safety
    /// `mem` is a ring of `slots` slots (a power of two) that starts zeroed
    /// and stays live while this value lives, and its methods behave as
    /// [`RingMemory`] documents; this is its only sender.
    pub unsafe fn with_memory(mem: M, slots: u64) -> TxRing<M> {
        debug_assert!(slots.is_power_of_two());
        TxRing {
            mem,
            slots,
            head: 0,
            cached: 0,
            payload_slots: vec![0; (slots as usize).div_ceil(64)],
        }
    }

    #[inline(always)]
    fn holds_payload(&self, slot: u64) -> bool {
        self.payload_slots[(slot / 64) as usize] & (1 << (slot % 64)) != 0
    }

    #[inline(always)]
    fn mark(&mut self, slot: u64, payload: bool) {
        let word = &mut self.payload_slots[(slot / 64) as usize];
        if payload {
            *word |= 1 << (slot % 64);
        } else {
            *word &= !(1 << (slot % 64));
        }
    }

    /// Write one record with sequence number `seq`, or return false if the
    /// ring has no room now. `payload.len()` must be at most the ring's
    /// fastbox maximum (checked by the caller against the config, which
    /// guarantees a record plus a wrap fits in a quarter ring).
    #[inline(always)]
    pub fn try_push(&mut self, seq: u64, header: &WireHeader, payload: &[u8]) -> bool {
        if payload.len() <= SLOT - RECORD_HEADER {
            return self.push_one_slot(seq, header, payload);
        }
        self.push_record(seq, header, payload)
    }

    /// [`TxRing::try_push`] of a record that fits one slot (payload up to
    /// 16 bytes, the message-rate case): it never needs a wrap record, it
    /// covers no continuation slot, and its own slot is never marked as
    /// holding payload (every push leaves the next record position
    /// unmarked), so only the next position's mark is looked at.
    #[inline(always)]
    fn push_one_slot(&mut self, seq: u64, header: &WireHeader, payload: &[u8]) -> bool {
        let n = self.slots;
        // The record's slot and the next record's marker slot.
        if self.head + 2 - self.cached > n && !self.refresh(2) {
            return false;
        }
        let pos = self.head & (n - 1);
        debug_assert!(
            !self.holds_payload(pos),
            "a record position marked as payload"
        );
        let next = (pos + 1) & (n - 1);
        let zero_next = self.holds_payload(next);
        if zero_next {
            self.mark(next, false);
        }
        // SAFETY: slot `pos` and the next record's first slot are owned by
        // the sender (space check) and inside the ring; the receiver reads
        // them only after the release store of the marker below.
        unsafe {
            self.mem.write_record(pos, header, payload);
            if zero_next {
                self.mem.marker(next).store(0, Ordering::Relaxed);
            }
            self.mem.marker(pos).store(
                (seq & SEQ_MASK) | ((payload.len() as u64) << LEN_SHIFT),
                Ordering::Release,
            );
        }
        self.head += 1;
        // As in `push_record`.
        if self.head + WRITE_AHEAD < self.cached + n {
            self.mem.prefetch_write((self.head + WRITE_AHEAD) & (n - 1));
        }
        true
    }

    /// [`TxRing::try_push`] of any record.
    #[inline(always)]
    fn push_record(&mut self, seq: u64, header: &WireHeader, payload: &[u8]) -> bool {
        let len = payload.len();
        let n = self.slots;
        let rs = record_slots(len);
        let mut pos = self.head & (n - 1);
        let skip = if pos + rs > n { n - pos } else { 0 };
        // The record, the wrap filler and the next record's marker slot.
        let need = skip + rs + 1;
        if self.head + need - self.cached > n && !self.refresh(need) {
            return false;
        }
        let seq48 = seq & SEQ_MASK;
        if skip != 0 {
            // SAFETY: slots 0 and `pos` are ours (space check) and inside the ring.
            unsafe {
                self.mem.marker(0).store(0, Ordering::Relaxed);
                self.mem.marker(pos).store(WRAP | seq48, Ordering::Release);
            }
            self.mark(0, false);
            self.mark(pos, false);
            self.head += skip;
            pos = 0;
        }
        let next = (pos + rs) & (n - 1);
        let zero_next = self.holds_payload(next);
        self.mark(pos, false);
        for slot in pos + 1..pos + rs {
            self.mark(slot, true);
        }
        if zero_next {
            self.mark(next, false);
        }
        // Ask for every further line of the record before writing it: the
        // receiver last read them a lap ago, and fetched together their
        // transfers between cores overlap instead of queueing one by one.
        for slot in pos + 1..pos + rs {
            self.mem.prefetch_write(slot);
        }
        // SAFETY: slots `pos .. pos + rs` and the next record's first slot
        // are owned by the sender (space check against the receiver's
        // published consumption) and inside the ring (no record crosses its
        // end, `pos + rs <= n`); the receiver reads them only after the
        // release store of the marker below.
        unsafe {
            self.mem.write_record(pos, header, payload);
            if zero_next {
                self.mem.marker(next).store(0, Ordering::Relaxed);
            }
            self.mem
                .marker(pos)
                .store(seq48 | ((len as u64) << LEN_SHIFT), Ordering::Release);
        }
        self.head += rs;
        // Ask for the line a few slots on, for the messages to come: the
        // receiver read it a lap ago (or just now, reading ahead). Only
        // within the space the receiver is known to have left: a slot of
        // a full ring may still be being read.
        if self.head + WRITE_AHEAD < self.cached + n {
            self.mem.prefetch_write((self.head + WRITE_AHEAD) & (n - 1));
        }
        true
    }

    /// Reload the receiver's consumption counter; true if `need` slots fit.
    #[cold]
    #[inline(never)]
    fn refresh(&mut self, need: u64) -> bool {
        // SAFETY: the memory is live (`new` / `with_memory`).
        let c = unsafe { self.mem.consumed() }.load(Ordering::Acquire);
        // A counter that runs ahead of what was written is garbage; treat the
        // ring as full rather than overwrite unread records.
        if c > self.head {
            return false;
        }
        self.cached = c;
        self.head + need - c <= self.slots
    }

    /// Whether this end is usable.
    pub fn is_some(&self) -> bool {
        self.slots != 0
    }
}
