//! The sending side of a lane: a message goes to the peer's fastbox ring
//! when it fits, else through a cell of this rank's free queue onto the
//! peer's receive queue (through up to `MAX_MESSAGE_CELLS` cells in a row
//! when longer than one); each message, or cell, takes the pair's next
//! sequence number.

use std::sync::atomic::Ordering;

use super::fastbox::next_seq;
use super::layout::*;
use super::queue::{enqueue, BadLink, Dequeued};
use super::{ShmError, ShmNode, SPINS};
use crate::wire::WireHeader;

impl ShmNode {
    /// Queue one message for local rank `peer`. `Ok(false)`: no room now;
    /// try again after polling (the caller keeps its own order).
    #[inline(always)]
    pub fn try_send(
        &mut self,
        peer: usize,
        header: &WireHeader,
        payload: &[u8],
    ) -> Result<bool, ShmError> {
        if peer >= self.local_size || peer == self.me {
            return Err(self.bad_peer(peer));
        }
        if payload.len() < self.fb_cut {
            if !self.tx[peer].announced {
                self.announce(peer);
            }
            let tx = &mut *self.tx[peer];
            if tx.ring.try_push(tx.next_seq, header, payload) {
                tx.next_seq = next_seq(tx.next_seq);
                return Ok(true);
            }
            self.stats.ring_full += 1;
        }
        self.send_cell(peer, header, payload)
    }

    #[cold]
    #[inline(never)]
    fn bad_peer(&self, peer: usize) -> ShmError {
        ShmError::BadPeer {
            peer,
            me: self.me,
            local_size: self.local_size,
        }
    }

    /// First ring message to `peer`: set our bit in its active-senders
    /// bitmap, then bump its generation so its next poll rereads the bitmap.
    #[cold]
    #[inline(never)]
    pub(super) fn announce(&mut self, peer: usize) {
        let c = self.layout.ctl(peer);
        self.seg
            .word(c + C_BITMAP + (self.me / 64) * 8)
            .fetch_or(1 << (self.me % 64), Ordering::Release);
        self.seg.word(c + C_GEN).fetch_add(1, Ordering::Release);
        self.tx[peer].announced = true;
    }

    #[inline(never)]
    fn send_cell(
        &mut self,
        peer: usize,
        header: &WireHeader,
        payload: &[u8],
    ) -> Result<bool, ShmError> {
        if payload.len() > self.max_payload {
            return self.send_cells(peer, header, payload);
        }
        let Some(off) = self.take_free_cell()? else {
            self.stats.no_room += 1;
            return Ok(false);
        };
        let seq = self.tx[peer].next_seq;
        self.fill_and_queue(peer, off, seq, payload.len() as u32, header, payload)?;
        self.tx[peer].next_seq = next_seq(seq);
        self.stats.cell_sends += 1;
        Ok(true)
    }

    /// A message longer than one cell: all its cells are taken first (or
    /// none: no room now), then queued in order, each with the next
    /// sequence number and all but the last flagged `CELL_MORE`. Nothing
    /// of ours can come between them, so the receiver finds them in a row.
    #[inline(never)]
    fn send_cells(
        &mut self,
        peer: usize,
        header: &WireHeader,
        payload: &[u8],
    ) -> Result<bool, ShmError> {
        if payload.len() > self.max_message {
            return Err(ShmError::TooLarge {
                len: payload.len(),
                max: self.max_message,
            });
        }
        let k = payload.len().div_ceil(self.max_payload);
        let mut offs = [0u64; MAX_MESSAGE_CELLS];
        for i in 0..k {
            match self.take_free_cell() {
                Ok(Some(off)) => offs[i] = off,
                got => {
                    // Not all of them: give back those taken.
                    for &off in &offs[..i] {
                        self.give_back(off)?;
                    }
                    got?;
                    self.stats.no_room += 1;
                    return Ok(false);
                }
            }
        }
        let mut seq = self.tx[peer].next_seq;
        for (i, chunk) in payload.chunks(self.max_payload).enumerate() {
            let more = if i + 1 < k { CELL_MORE } else { 0 };
            self.fill_and_queue(peer, offs[i], seq, chunk.len() as u32 | more, header, chunk)?;
            seq = next_seq(seq);
        }
        self.tx[peer].next_seq = seq;
        self.stats.cell_sends += 1;
        Ok(true)
    }

    /// A cell of ours from our free queue; `None` if it is empty (or busy
    /// for a moment).
    #[inline(always)]
    pub(super) fn take_free_cell(&mut self) -> Result<Option<u64>, ShmError> {
        let me = self.me;
        let off = match self
            .free
            .dequeue(&self.cells, self.seg.free_ends(&self.layout, me), SPINS)
        {
            Ok(Dequeued::Item(off)) => off,
            Ok(Dequeued::Empty | Dequeued::Busy) => return Ok(None),
            Err(BadLink(x)) => {
                return Err(ShmError::Corrupt {
                    peer: me,
                    what: format!("free-cell queue of local rank {me} links to {x:#x}, not a cell"),
                })
            }
        };
        let owner = (self.cells.index(off) / self.layout.cells_per_rank as u64) as usize;
        if owner != me {
            return Err(ShmError::Corrupt {
                peer: owner,
                what: format!("free-cell queue of local rank {me} holds a cell of rank {owner}"),
            });
        }
        Ok(Some(off))
    }

    /// Put back a cell taken with `take_free_cell` and not used.
    #[cold]
    fn give_back(&mut self, off: u64) -> Result<(), ShmError> {
        let me = self.me;
        enqueue(&self.cells, self.seg.free_ends(&self.layout, me), off).map_err(|BadLink(x)| {
            ShmError::Corrupt {
                peer: me,
                what: format!("free-cell queue of local rank {me} links to {x:#x}, not a cell"),
            }
        })
    }

    /// Write cell `off` (ours, from `take_free_cell`; `payload` fits its
    /// payload) and queue it on `peer`'s receive queue.
    #[inline(always)]
    pub(super) fn fill_and_queue(
        &mut self,
        peer: usize,
        off: u64,
        seq: u64,
        len_word: u32,
        header: &WireHeader,
        payload: &[u8],
    ) -> Result<(), ShmError> {
        debug_assert!(payload.len() <= self.max_payload);
        let p = self.cells.ptr(off);
        // SAFETY: the cell is inside the region (`contains` checked by the
        // dequeue) and ours alone between dequeue and enqueue; its header and
        // `max_payload` bytes of payload fit in `cell_bytes`; offsets are
        // aligned for each field (cells are 64-byte aligned).
        unsafe {
            p.add(CELL_SEQ).cast::<u64>().write(seq);
            p.add(CELL_SRC).cast::<u32>().write(self.me as u32);
            p.add(CELL_LEN).cast::<u32>().write(len_word);
            p.add(CELL_HEADER).cast::<WireHeader>().write(*header);
            std::ptr::copy_nonoverlapping(payload.as_ptr(), p.add(CELL_PAYLOAD), payload.len());
        }
        enqueue(&self.cells, self.seg.recv_ends(&self.layout, peer), off).map_err(|BadLink(x)| {
            ShmError::Corrupt {
                peer,
                what: format!("receive queue of local rank {peer} links to {x:#x}, not a cell"),
            }
        })
    }
}
