//! The receiving end of a ring: marker check, record read, lazily published consumption.

use super::*;

/// One record the receiver may deliver.
pub struct Record {
    pub header: WireHeader,
    pub payload: *const u8,
    pub len: usize,
    slots: u64,
}

/// Receiving end (process-private state) of one ring.
#[derive(Debug)]
pub struct RxRing<M = Shared> {
    mem: M,
    slots: u64,
    /// Slots consumed since the start (monotonic).
    read: u64,
    /// Last value stored into `consumed`.
    published: u64,
    /// Largest valid payload length.
    max_len: u64,
}

impl RxRing {
    /// # Safety
    /// As for [`TxRing::new`], for the ring's only receiver; `max_len` is the
    /// configured fastbox maximum.
    pub unsafe fn new(
        data: *mut u8,
        consumed: *const AtomicU64,
        slots: u64,
        max_len: usize,
    ) -> RxRing {
        // SAFETY: per this function's contract.
        unsafe { RxRing::with_memory(Shared { data, consumed }, slots, max_len) }
    }

    pub fn none() -> RxRing {
        RxRing {
            mem: Shared {
                data: std::ptr::null_mut(),
                consumed: std::ptr::null(),
            },
            slots: 0,
            read: 0,
            published: 0,
            max_len: 0,
        }
    }
}

impl<M: RingMemory> RxRing<M> {
    /// # Safety
    /// As for [`TxRing::with_memory`], for the ring's only receiver;
    /// `max_len` is the configured fastbox maximum.
    pub unsafe fn with_memory(mem: M, slots: u64, max_len: usize) -> RxRing<M> {
        RxRing {
            mem,
            slots,
            read: 0,
            published: 0,
            max_len: max_len as u64,
        }
    }

    pub fn is_some(&self) -> bool {
        self.slots != 0
    }

    /// Whether the read position holds a marker for sequence number `seq`
    /// (its record, or the wrap record before it): one relaxed load, for
    /// an idle poll; [`RxRing::peek`] then reads it properly.
    #[inline(always)]
    pub fn holds(&self, seq: u64) -> bool {
        if self.slots == 0 {
            return false;
        }
        let pos = self.read & (self.slots - 1);
        // SAFETY: `pos < slots`; the ring is live (`new`), not `none`.
        let m = unsafe { self.mem.marker(pos) }.load(Ordering::Relaxed);
        m & SEQ_MASK == seq & SEQ_MASK
    }

    /// The record at the read position if it carries sequence number `seq`
    /// (skipping a wrap record for `seq`). `Err` names what is corrupt.
    #[inline(always)]
    pub fn peek(&mut self, seq: u64) -> Result<Option<Record>, &'static str> {
        let n = self.slots;
        let seq48 = seq & SEQ_MASK;
        let mut pos = self.read & (n - 1);
        // SAFETY: `pos < n`; the ring is live (`new`).
        let mut m = unsafe { self.mem.marker(pos) }.load(Ordering::Acquire);
        if m & SEQ_MASK != seq48 {
            return Ok(None);
        }
        if m & WRAP != 0 {
            if m != WRAP | seq48 || pos == 0 {
                return Err("bad wrap record in fastbox ring");
            }
            self.read += n - pos;
            pos = 0;
            // SAFETY: as above, slot 0.
            m = unsafe { self.mem.marker(0) }.load(Ordering::Acquire);
            if m & SEQ_MASK != seq48 {
                return Ok(None);
            }
            if m & WRAP != 0 {
                return Err("two wrap records in a row in fastbox ring");
            }
        }
        let len = (m >> LEN_SHIFT) & LEN_MASK;
        let rs = record_slots(len as usize);
        if len > self.max_len || pos + rs > n {
            return Err("fastbox record longer than the configured maximum");
        }
        // SAFETY: the record lies inside the ring (checked above) and was
        // fully written before its marker's release store, which we acquired;
        // the sender does not touch it until we publish its consumption.
        let (header, payload) = unsafe { self.mem.read_record(pos, rs) };
        // Ask for the record's further lines and the next few slots at
        // once: the copy and the next markers then wait for their
        // transfers between cores side by side, not one after another.
        for slot in pos + 1..pos + rs + AHEAD_READ {
            self.mem.prefetch_read(slot & (n - 1));
        }
        Ok(Some(Record {
            header,
            payload,
            len: len as usize,
            slots: rs,
        }))
    }

    /// Mark the record returned by `peek` consumed (after its payload is no
    /// longer used). Publishes consumption every quarter ring.
    #[inline(always)]
    pub fn consume(&mut self, rec: &Record) {
        self.read += rec.slots;
        if self.read - self.published >= self.slots / 4 {
            self.publish();
        }
    }

    #[inline(never)]
    fn publish(&mut self) {
        self.published = self.read;
        // SAFETY: the memory is live (`new` / `with_memory`).
        unsafe { self.mem.consumed() }.store(self.read, Ordering::Release);
    }
}
