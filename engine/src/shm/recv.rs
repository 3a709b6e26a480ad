//! The receiving side of a lane: the active senders' rings and the
//! receive queue, merged into each sender's send order by sequence number
//! (the module doc's "Ordering" and "Fan-in").

use std::sync::atomic::Ordering;

use super::fastbox::{BeforeCell, MergeError};
use super::layout::*;
use super::queue::{enqueue, BadLink, Dequeued};
use super::{Assembly, ShmError, ShmNode, SPINS};
use crate::wire::WireHeader;

/// Where a poll hands what arrived (`ShmNode::poll_with`).
pub trait Deliver {
    /// A whole message from local rank `peer`. The payload borrows shared
    /// memory and is valid only during the call.
    fn message(&mut self, peer: usize, header: &WireHeader, payload: &[u8]);

    /// The first cell of a message longer than one: claim it (a token of
    /// the receiver's choosing), having taken `payload`, its first bytes,
    /// and the rest comes to `piece`; or `None` (the default), and it is
    /// put together and comes to `message` after its last cell.
    #[inline(always)]
    fn first_piece(&mut self, _peer: usize, _header: &WireHeader, _payload: &[u8]) -> Option<u64> {
        None
    }

    /// The next bytes, from `offset` on, of the message claimed as
    /// `token`; `last`: they end it. Only called after `first_piece`
    /// claimed it; `offset` counts the bytes handed on before.
    #[inline(always)]
    fn piece(&mut self, _peer: usize, _token: u64, _offset: usize, _payload: &[u8], _last: bool) {}
}

/// A closure taking every message whole (`ShmNode::poll`).
struct Whole<F>(F);

impl<F: FnMut(usize, &WireHeader, &[u8])> Deliver for Whole<F> {
    #[inline(always)]
    fn message(&mut self, peer: usize, header: &WireHeader, payload: &[u8]) {
        (self.0)(peer, header, payload)
    }
}

impl ShmNode {
    /// Hand up to `budget` arrived messages to `deliver` (`Deliver`), in
    /// each sender's send order.
    ///
    /// A poll that finds nothing is the common case (every wait spins on
    /// it), so it is answered inline by [`ShmNode::idle`] before any
    /// bookkeeping.
    #[inline(always)]
    pub fn poll(
        &mut self,
        budget: usize,
        deliver: impl FnMut(usize, &WireHeader, &[u8]),
    ) -> Result<usize, ShmError> {
        self.poll_with(budget, Whole(deliver))
    }

    /// [`ShmNode::poll`] handing messages longer than a cell to
    /// `deliver` piece by piece where it claims them (`Deliver`).
    #[inline(always)]
    pub fn poll_with(&mut self, budget: usize, deliver: impl Deliver) -> Result<usize, ShmError> {
        if self.idle() {
            return Ok(0);
        }
        self.poll_some(budget, deliver)
    }

    /// Nothing to deliver: no cell waits for budget, the set of active
    /// senders is unchanged, no active sender's ring holds its next
    /// record, and the receive queue is empty. A relaxed load per active
    /// ring and two words, nothing written; anything that may have arrived
    /// takes the full poll, which reads it with the proper ordering.
    #[inline(always)]
    pub(crate) fn idle(&self) -> bool {
        if self.pending != 0 || self.seg.word(self.gen_off).load(Ordering::Relaxed) != self.seen_gen
        {
            return false;
        }
        for &s in &self.active {
            if self.rx[s as usize].ring_ready() {
                return false;
            }
        }
        self.queue_looks_empty()
    }

    /// Our receive queue holds nothing (one relaxed load): spares the
    /// out-of-line dequeue when only rings carry traffic.
    #[inline(always)]
    fn queue_looks_empty(&self) -> bool {
        self.recv
            .looks_empty(&self.seg.recv_ends(&self.layout, self.me))
    }

    #[inline(never)]
    fn poll_some(&mut self, budget: usize, mut deliver: impl Deliver) -> Result<usize, ShmError> {
        if budget == 0 {
            return Ok(0);
        }
        let mut done = 0;
        if self.pending != 0 {
            let off = std::mem::replace(&mut self.pending, 0);
            done += self.take_cell(off, budget, &mut deliver)?;
            if self.pending != 0 {
                return Ok(done);
            }
        }
        let g = self.seg.word(self.gen_off).load(Ordering::Acquire);
        if g != self.seen_gen {
            self.refresh_active(g);
        }
        let queue_first = self.queue_first;
        if queue_first && done < budget && !self.queue_looks_empty() {
            done += self.poll_queue(budget - done, &mut deliver)?;
        }
        let k = self.active.len();
        if k != 0 {
            let start = self.rr;
            self.rr = if start + 1 >= k { 0 } else { start + 1 };
            let mut i = start;
            for _ in 0..k {
                if done >= budget {
                    break;
                }
                let s = self.active[i] as usize;
                done += self.poll_ring(s, budget - done, &mut deliver)?;
                i = if i + 1 == k { 0 } else { i + 1 };
            }
        }
        if !queue_first && done < budget && !self.queue_looks_empty() {
            done += self.poll_queue(budget - done, &mut deliver)?;
        }
        self.queue_first = !queue_first && done >= budget;
        Ok(done)
    }

    /// Reread the active-senders bitmap (it changed since the last poll).
    #[cold]
    #[inline(never)]
    fn refresh_active(&mut self, g: u64) {
        self.seen_gen = g;
        self.active.clear();
        let c = self.layout.ctl(self.me);
        for w in 0..self.layout.bitmap_words {
            let mut bits = self.seg.word(c + C_BITMAP + 8 * w).load(Ordering::Acquire);
            while bits != 0 {
                let s = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                // Bits for nonexistent ranks or ourselves are ignored.
                if s < self.local_size && s != self.me && self.rx[s].ring.is_some() {
                    self.active.push(s as u32);
                }
            }
        }
        if self.rr >= self.active.len() {
            self.rr = 0;
        }
    }

    /// Deliver up to `max` records from `s`'s ring, in sequence.
    #[inline]
    fn poll_ring<F: Deliver>(
        &mut self,
        s: usize,
        max: usize,
        deliver: &mut F,
    ) -> Result<usize, ShmError> {
        let rx = &mut *self.rx[s];
        let mut k = 0;
        while k < max {
            match rx.next_record() {
                Ok(Some(rec)) => {
                    // SAFETY: `peek` checked the record lies inside the ring;
                    // the sender leaves it alone until `consume` publishes it.
                    let payload = unsafe { std::slice::from_raw_parts(rec.payload, rec.len) };
                    deliver.message(s, &rec.header, payload);
                    rx.record_done(&rec);
                    k += 1;
                }
                Ok(None) => break,
                Err(what) => {
                    return Err(ShmError::Corrupt {
                        peer: s,
                        what: what.into(),
                    })
                }
            }
        }
        Ok(k)
    }

    /// Deliver up to `max` messages from the receive queue.
    #[inline]
    fn poll_queue<F: Deliver>(&mut self, max: usize, deliver: &mut F) -> Result<usize, ShmError> {
        let mut k = 0;
        while k < max {
            let me = self.me;
            match self
                .recv
                .dequeue(&self.cells, self.seg.recv_ends(&self.layout, me), SPINS)
            {
                Ok(Dequeued::Item(off)) => {
                    k += self.take_cell(off, max - k, deliver)?;
                    if self.pending != 0 {
                        break;
                    }
                }
                Ok(Dequeued::Empty | Dequeued::Busy) => break,
                Err(BadLink(x)) => {
                    return Err(ShmError::Corrupt {
                        peer: me,
                        what: format!(
                            "receive queue of local rank {me} links to {x:#x}, not a cell"
                        ),
                    })
                }
            }
        }
        Ok(k)
    }

    /// Deliver cell `off` (dequeued from our receive queue) after any ring
    /// records of its sender that precede it, up to `max` messages in all;
    /// stash it in `pending` if the budget runs out first. Then return the
    /// cell to its owner's free queue. A cell flagged `CELL_MORE`, and the
    /// cell after it, are part of a longer message (`take_piece`).
    fn take_cell<F: Deliver>(
        &mut self,
        off: u64,
        max: usize,
        deliver: &mut F,
    ) -> Result<usize, ShmError> {
        let owner = (self.cells.index(off) / self.layout.cells_per_rank as u64) as usize;
        let p = self.cells.ptr(off);
        // SAFETY: `off` is a cell of the region (the dequeue checked it); it
        // is ours until we enqueue it on its owner's free queue, and its
        // producer's writes are visible (acquire in the dequeue).
        let (seq, src, len_word) = unsafe {
            (
                p.add(CELL_SEQ).cast::<u64>().read(),
                p.add(CELL_SRC).cast::<u32>().read() as usize,
                p.add(CELL_LEN).cast::<u32>().read(),
            )
        };
        let more = len_word & CELL_MORE != 0;
        let len = (len_word & !CELL_MORE) as usize;
        let corrupt = |what: String| ShmError::Corrupt { peer: owner, what };
        if src != owner || owner == self.me {
            return Err(corrupt(format!(
                "cell {off:#x} of local rank {owner} claims source {src} and reached rank {}",
                self.me
            )));
        }
        if len > self.max_payload {
            return Err(corrupt(format!("cell {off:#x} claims {len} payload bytes")));
        }
        let mut k = 0;
        let rx = &mut *self.rx[owner];
        loop {
            if k >= max {
                self.pending = off;
                return Ok(k);
            }
            let rec = match rx.before_cell(seq) {
                Ok(BeforeCell::Record(rec)) => rec,
                Ok(BeforeCell::Cell) => break,
                Err(e) => return Err(merge_error(owner, seq, e)),
            };
            // SAFETY: as in `poll_ring`.
            let payload = unsafe { std::slice::from_raw_parts(rec.payload, rec.len) };
            deliver.message(owner, &rec.header, payload);
            rx.record_done(&rec);
            k += 1;
        }
        // SAFETY: see above; `len <= max_payload` keeps the payload inside
        // the cell.
        let (header, payload) = unsafe {
            (
                p.add(CELL_HEADER).cast::<WireHeader>().read(),
                std::slice::from_raw_parts(p.add(CELL_PAYLOAD), len),
            )
        };
        let asm = &mut self.asm[owner];
        if !more && !asm.active {
            deliver.message(owner, &header, payload);
            k += 1;
        } else {
            let cell = (owner, &header, payload, more);
            let direct = &mut self.stats.direct;
            if !take_piece(asm, cell, self.max_message, direct, deliver) {
                return Err(corrupt(format!(
                    "cell {off:#x} continues a message past {} bytes",
                    self.max_message
                )));
            }
            k += !more as usize;
        }
        rx.cell_done();
        enqueue(&self.cells, self.seg.free_ends(&self.layout, owner), off).map_err(
            |BadLink(x)| {
                corrupt(format!(
                    "free-cell queue of local rank {owner} links to {x:#x}, not a cell"
                ))
            },
        )?;
        Ok(k)
    }
}

/// One cell of a message longer than one (`CELL_MORE` on all but the
/// last): the first offers the message to `deliver` (`first_piece`); a
/// claimed message's later cells go to `piece`, an unclaimed one's are
/// held until the last delivers it whole (`direct` counts the claimed
/// ones). `false`: the message runs past `max` bytes (a corrupt sender),
/// and nothing of this cell was handed on.
#[inline(never)]
fn take_piece<F: Deliver>(
    asm: &mut Assembly,
    (owner, header, payload, more): (usize, &WireHeader, &[u8], bool),
    max: usize,
    direct: &mut u64,
    deliver: &mut F,
) -> bool {
    let offset = if asm.active { asm.got } else { 0 };
    if offset + payload.len() > max {
        return false;
    }
    asm.got = offset + payload.len();
    if !asm.active {
        asm.active = true;
        asm.header = *header;
        asm.direct = deliver.first_piece(owner, header, payload);
        if asm.direct.is_none() {
            asm.buf.extend_from_slice(payload);
        }
        return true;
    }
    match asm.direct {
        Some(token) => deliver.piece(owner, token, offset, payload, !more),
        None => asm.buf.extend_from_slice(payload),
    }
    if !more {
        if asm.direct.take().is_some() {
            *direct += 1;
        } else {
            deliver.message(owner, &asm.header, &asm.buf);
            asm.buf.clear();
        }
        asm.active = false;
    }
    true
}

/// A cell from `peer` with sequence number `seq` that does not fit its order.
#[cold]
#[inline(never)]
fn merge_error(peer: usize, seq: u64, e: MergeError) -> ShmError {
    let what = match e {
        MergeError::Ring(w) => w.into(),
        MergeError::Missing { expected } => format!(
            "cell with sequence number {seq} arrived but message {expected} is neither in the \
             ring nor queued before it"
        ),
        MergeError::Late { expected } => {
            format!("cell with sequence number {seq} arrived after {expected} was delivered")
        }
    };
    ShmError::Corrupt { peer, what }
}
