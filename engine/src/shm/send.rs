//! The sending side of a lane: a message goes to the peer's fastbox ring
//! when it fits, else through a cell of this rank's free queue onto the
//! peer's receive queue; either way it takes the pair's next sequence
//! number.

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
            return Err(ShmError::TooLarge {
                len: payload.len(),
                max: self.max_payload,
            });
        }
        let me = self.me;
        let off = match self
            .free
            .dequeue(&self.cells, self.seg.free_ends(&self.layout, me), SPINS)
        {
            Ok(Dequeued::Item(off)) => off,
            Ok(Dequeued::Empty | Dequeued::Busy) => {
                self.stats.no_room += 1;
                return Ok(false);
            }
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
        let tx = &mut *self.tx[peer];
        let p = self.cells.ptr(off);
        // SAFETY: the cell is inside the region (`contains` checked by the
        // dequeue) and ours alone between dequeue and enqueue; its header and
        // `max_payload` bytes of payload fit in `cell_bytes`; offsets are
        // aligned for each field (cells are 64-byte aligned).
        unsafe {
            p.add(CELL_SEQ).cast::<u64>().write(tx.next_seq);
            p.add(CELL_SRC).cast::<u32>().write(me as u32);
            p.add(CELL_LEN).cast::<u32>().write(payload.len() as u32);
            p.add(CELL_HEADER).cast::<WireHeader>().write(*header);
            std::ptr::copy_nonoverlapping(payload.as_ptr(), p.add(CELL_PAYLOAD), payload.len());
        }
        enqueue(&self.cells, self.seg.recv_ends(&self.layout, peer), off).map_err(
            |BadLink(x)| ShmError::Corrupt {
                peer,
                what: format!("receive queue of local rank {peer} links to {x:#x}, not a cell"),
            },
        )?;
        tx.next_seq = next_seq(tx.next_seq);
        self.stats.cell_sends += 1;
        Ok(true)
    }
}
