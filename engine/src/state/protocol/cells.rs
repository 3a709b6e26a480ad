//! An eager message longer than one shared-memory cell, taken into a
//! posted receive cell by cell (`shm::Deliver`): the receive is matched at
//! the first cell and each cell is copied straight into its buffer, one
//! copy per piece instead of two (into the lane's holding buffer, then out
//! of it). A message no posted receive matches at its first cell is put
//! together by the lane and arrives whole (`deliver_shm`), as one that a
//! receive posted meanwhile matches after its last cell.
//!
//! The result is the whole-message path's: the first `cap` bytes, the
//! status counting what the buffer took and a truncation error for a
//! longer message; a synchronous send is acknowledged once matched. The
//! lane counts the offsets from the cells' lengths, never from the peer's
//! word, and the receive takes only what fits its buffer.

use super::{mark_complete, truncation};
use crate::matching::Envelope;
use crate::pg::VcId;
use crate::state::State;
use crate::status::Status;
use crate::table::{Op, RecvPhase};
use crate::wire::{control, MsgKind, WireHeader, FLAG_SYNC};

impl State {
    /// The first cell of a longer message from `from`: an eager one that a
    /// posted receive matches takes `payload` now and the rest through
    /// [`State::shm_piece`] (the receive's handle is the token); anything
    /// else (no match, another kind, a port connection) is left whole.
    pub fn shm_first_piece(&mut self, from: VcId, h: &WireHeader, payload: &[u8]) -> Option<u64> {
        if h.kind != MsgKind::Eager as u8 || from.is_temp() {
            return None;
        }
        let env = Envelope {
            context: h.context,
            source: h.src,
            tag: h.tag,
        };
        let rreq = self.matcher.match_posted(env)?;
        if let Some(req) = self.requests.get_mut(rreq) {
            if let Op::Recv(r) = &mut req.op {
                r.phase = RecvPhase::Cells { from };
                req.status = Status {
                    source: env.source as i32,
                    tag: env.tag,
                    ..Status::default()
                };
            }
        }
        self.shm_piece(from, rreq, 0, payload, false);
        if h.flags & FLAG_SYNC != 0 {
            self.reply(from, control(MsgKind::Ack, h.context, h.sreq));
        }
        Some(rreq)
    }

    /// The bytes from `offset` on of the message receive `rreq` matched
    /// at its first cell ([`State::shm_first_piece`]); `last`: they end
    /// it, and the receive completes. A receive no longer waiting for
    /// this peer's cells (withdrawn, or failed with its peer) takes
    /// nothing.
    pub fn shm_piece(&mut self, from: VcId, rreq: u64, offset: usize, payload: &[u8], last: bool) {
        let Some(req) = self.requests.get_mut(rreq) else {
            return;
        };
        let Op::Recv(r) = &mut req.op else {
            return;
        };
        if r.phase != (RecvPhase::Cells { from }) {
            return;
        }
        let n = payload.len().min(r.cap.saturating_sub(offset));
        if n > 0 {
            // SAFETY: `offset + n <= cap`, and the receive owns
            // `buf..buf+cap` until it completes (API contract); shared
            // memory cannot overlap a user buffer.
            unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), r.buf.add(offset), n) };
        }
        if !last {
            return;
        }
        let sent = offset + payload.len();
        r.phase = RecvPhase::Done;
        req.status.count = sent.min(r.cap);
        req.status.error = truncation(sent as u64, r.cap);
        if mark_complete(req, &mut self.completions) {
            self.requests.remove(rreq);
        }
    }
}
