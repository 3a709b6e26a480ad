//! The message protocols: eager, rendezvous (single-copy read or piecewise
//! copy), synchronous-send acknowledgement, and send cancellation.
//!
//! Receive side (`State::deliver`), by header kind:
//! - `Eager`: match or store as unexpected; `FLAG_SYNC` asks for an `Ack`
//!   once matched.
//! - `Rts`: match or store. Once matched the receiver reads the sender's
//!   buffer with its transport's one-sided read, after the poll
//!   (`Transports::run_reads`; shared memory: `process_vm_readv` from the
//!   process the node segment has at the sender's slot, never a pid the
//!   message names; a netmod with one-sided reads: the key the `Rts`
//!   carries) and answers `Ack` (`rma.rs`), or, where no read is possible
//!   or it is refused, answers `Cts` and the sender streams `Data` pieces.
//! - `CancelReq`: withdraw the message if it is still unexpected; answer
//!   `CancelAck` either way.
//!
//! Flow control over a netmod: a sender spends credit (bytes + a fixed
//! per-message charge) on each eager message to a peer and sends by
//! rendezvous once the peer's window (`RIVET_NETMOD_EAGER_WINDOW`) is
//! spent; the receiver returns credit with `Credit` once it has consumed a
//! quarter of the window. A receiver therefore never holds more than one
//! window of unasked-for eager data per peer, however fast the sender.
//! (Shared memory is bounded by its cells instead.)
//!
//! Peer failure, protocol violations and the finalize handshake: `failure.rs`.
//! Large shared-memory copies shared with the sender: `copy.rs`.
//! Here: dispatch, eager, acknowledgements, cancel, completion; the
//! rendezvous receive side with `Cts` and `Data` in `protocol/rendezvous.rs`;
//! flow control in `protocol/credit.rs`; an eager message longer than a
//! shared-memory cell taken cell by cell into a posted receive in
//! `protocol/cells.rs`.
//!
//! Send side: every send with a request runs one state machine
//! (`table::SendPhase`, moved only by `SendOp`'s methods):
//!
//! ```text
//! Queued{sync} --taken--> Sent (standard: finished)
//!              \-taken--> AwaitingAck --Ack--> Done
//! RtsSent --Ack (receiver read it)--> Done
//!         \-Cts--> Streaming --last piece taken--> Done
//!         \-Write--> Writing --our part written--> AwaitingAck --Ack--> Done
//! Sent | AwaitingAck | RtsSent --CancelAck(cancelled)--> Cancelled
//! any --peer failed--> Failed
//! ```
//!
//! A cancel is a flag on top (a `CancelReq` is out; completion waits for
//! its `CancelAck`). A send completes once its phase is `Sent`, `Done`,
//! `Cancelled` or `Failed` and no cancel is pending; in `Queued` and
//! `Streaming` a VC queue still reads its buffer.
//!
//! Control messages are checked before they act: an `Ack`, `Cts` or
//! `CancelAck` must name a live send *to the VC it came from* and fit its
//! phase (one `Cts`, after an `Rts`; an `Ack` only where one is awaited; a
//! `CancelAck` only for a pending cancel, and "withdrawn" only for a
//! message sent and not matched). Temporary VCs carry `Port` messages and
//! nothing else, and only they carry them. A message that breaks these
//! rules is dropped and its sender treated as failed (`misbehaved`: its
//! requests fail with "protocol violation: ...", its netmod connection is
//! closed); the send it named is untouched. A handle that names no live
//! request (the request was freed meanwhile) is simply ignored.
//!
//! Peers name requests by the handles they were sent (`sreq`, `aux`); a
//! handle that no longer names a live request of the right kind is ignored,
//! and a malformed message fails the engine (or the peer) with a message,
//! never a panic.

use crate::error::Result;
use crate::matching::Envelope;
use crate::pg::{Outgoing, VcId};
use crate::state::{State, Unexpected};
use crate::status::{MsgError, Status};
use crate::table::{Op, RecvPhase, Req, SendOp};
use crate::wire::{control, MsgKind, WireHeader, FLAG_CANCELLED, FLAG_SYNC};

mod cells;
mod credit;
mod rendezvous;

pub(crate) fn truncation(sent: u64, capacity: usize) -> Option<MsgError> {
    (sent > capacity as u64).then_some(MsgError::Truncated {
        sent: sent as usize,
        capacity,
    })
}

impl State {
    /// Append to the VC's send queue (behind anything already queued).
    pub fn queue(&mut self, id: VcId, item: Outgoing) -> Result<()> {
        let vc = self.pgs.vc(id)?;
        if vc.failed {
            // Nothing goes to a dead peer; a request waiting on it fails.
            let req = item.request();
            self.fail_request(req, id);
            return Ok(());
        }
        vc.pending.push_back(item);
        if !vc.listed {
            vc.listed = true;
            self.pending_vcs.push(id);
        }
        Ok(())
    }

    pub(crate) fn reply(&mut self, to: VcId, header: WireHeader) {
        // A peer that said `Bye` waits for nothing but ours (`Credit`,
        // `Ack` and the like would be sent to a process about to exit).
        if header.kind != MsgKind::Bye as u8 && self.pgs.vc(to).is_ok_and(|vc| vc.finalized) {
            return;
        }
        let item = Outgoing::Msg {
            header,
            buf: std::ptr::null(),
            len: 0,
            done: 0,
        };
        // A VC of a group freed meanwhile (disconnect) needs no answer.
        if let Err(e) = self.queue(to, item) {
            if to.group() == 0 {
                self.fail(format!("answering {to}: {e}"));
            }
        }
    }

    /// A request reached its end: mark it, and free it if nobody waits.
    pub fn complete(&mut self, id: u64) {
        if let Some(req) = self.requests.get_mut(id) {
            let detached = mark_complete(req, &mut self.completions);
            if let Op::Send(SendOp {
                rma_key: key @ Some(_),
                ..
            }) = &mut req.op
            {
                // The receiver has read it, or never will.
                self.rma.release.extend(key.take());
            }
            if detached {
                self.requests.remove(id);
            }
        }
    }

    /// A transport took send `id`'s eager message.
    pub fn transmitted(&mut self, id: u64) {
        if let Some(Req {
            op: Op::Send(s), ..
        }) = self.requests.get_mut(id)
        {
            s.taken();
            self.maybe_complete_send(id);
        }
    }

    /// A transport took the last `Data` piece of send `id`.
    pub fn streamed(&mut self, id: u64) {
        if let Some(Req {
            op: Op::Send(s), ..
        }) = self.requests.get_mut(id)
        {
            s.streamed();
            self.maybe_complete_send(id);
        }
    }

    fn maybe_complete_send(&mut self, id: u64) {
        if let Some(Req {
            op: Op::Send(s),
            complete: false,
            ..
        }) = self.requests.get(id)
        {
            if s.finished() {
                self.complete(id);
            }
        }
    }

    /// Whether a control message (`what`) from `from` may act on send
    /// `sreq`: it must name a live send to `from`. A stale handle (the send
    /// was freed) is ignored; a handle naming another peer's send, or a
    /// receive, is a protocol violation (`misbehaved`).
    pub(crate) fn names_send_to(&mut self, from: VcId, sreq: u64, what: &str) -> bool {
        let why = match self.requests.get(sreq) {
            None => return false,
            Some(Req {
                op: Op::Send(s), ..
            }) if s.vc == from => return true,
            Some(Req {
                op: Op::Send(s), ..
            }) => format!("{what} for a message to {}", s.vc),
            Some(_) => format!("{what} naming a receive"),
        };
        self.misbehaved(from, &why);
        false
    }

    /// `Ack`: the receiver matched our synchronous send, or read our
    /// rendezvous message.
    fn on_ack(&mut self, from: VcId, h: &WireHeader) {
        if !self.names_send_to(from, h.sreq, "an Ack") {
            return;
        }
        if let Some(Req {
            op: Op::Send(s), ..
        }) = self.requests.get_mut(h.sreq)
        {
            match s.on_ack() {
                Ok(()) => self.maybe_complete_send(h.sreq),
                Err(why) => self.misbehaved(from, why),
            }
        }
    }

    /// One arrival from rank `from` (its VC), in that peer's send order.
    ///
    /// Inline, with an eager message from a rank taken first: that is most
    /// arrivals, and it then costs no call into the dispatch below (whose
    /// register saves were some 20 instructions a message, callgrind).
    #[inline]
    pub fn deliver(&mut self, from: VcId, h: &WireHeader, payload: &[u8]) {
        if h.kind == MsgKind::Eager as u8 && !from.is_temp() {
            self.on_eager(from, h, payload, true);
        } else {
            self.deliver_other(from, h, payload);
        }
    }

    /// [`deliver`](Self::deliver) for every message but an eager one from
    /// a rank (an eager one on a port connection is refused here).
    #[inline(never)]
    fn deliver_other(&mut self, from: VcId, h: &WireHeader, payload: &[u8]) {
        // Temporary VCs (port connections) carry `Port` messages only, and
        // only they do.
        if from.is_temp() != (h.kind == MsgKind::Port as u8) {
            let why = match from.is_temp() {
                true => "a message other than Port on a port connection",
                false => "a Port message outside a port connection",
            };
            return self.misbehaved(from, why);
        }
        match h.kind() {
            Some(MsgKind::Eager) => self.on_eager(from, h, payload, true),
            Some(MsgKind::Rts) => self.on_rts(from, h, payload),
            Some(MsgKind::Cts) => self.on_cts(from, h),
            Some(MsgKind::Data) => self.on_data(from, h, payload),
            Some(MsgKind::Ack) => self.on_ack(from, h),
            Some(MsgKind::CancelReq) => {
                let removed = self
                    .matcher
                    .remove_unexpected(h.context, |_, m| m.origin() == (from, h.sreq));
                let found = removed.is_some();
                if let Some((_, Unexpected::Eager { data, .. })) = removed {
                    self.consumed(from, data.len());
                    self.spare.give_back(data);
                }
                let mut answer = control(MsgKind::CancelAck, h.context, h.sreq);
                if found {
                    answer.flags = FLAG_CANCELLED;
                }
                self.reply(from, answer);
            }
            Some(MsgKind::CancelAck) => self.on_cancel_ack(from, h),
            Some(MsgKind::Port) => self.on_port_chunk(from, h, payload),
            Some(MsgKind::Write) => self.on_write(from, h, payload),
            Some(MsgKind::Written) => self.on_written(from, h),
            Some(MsgKind::Bye) => {
                if let Ok(vc) = self.pgs.vc(from) {
                    vc.finalized = true;
                    // Answer once: the peer waits for it before it exits,
                    // so nothing we still send can reach a closed endpoint.
                    if !vc.bye_sent && !vc.failed {
                        vc.bye_sent = true;
                        self.reply(from, control(MsgKind::Bye, 0, 0));
                    }
                }
            }
            Some(MsgKind::Credit) => {
                let window = self.pgs.world.window;
                if let Ok(vc) = self.pgs.vc(from) {
                    vc.credit = vc.credit.saturating_add(h.aux as usize).min(window);
                }
            }
            None => self.fail(format!(
                "rank {from} sent a message of unknown kind {}",
                h.kind
            )),
        }
    }

    /// [`deliver`](Self::deliver) for a message that came through shared
    /// memory: an eager message there owes no netmod credit, so its
    /// matching skips the VC lookup that credit needs.
    #[inline]
    pub fn deliver_shm(&mut self, from: VcId, h: &WireHeader, payload: &[u8]) {
        if h.kind == MsgKind::Eager as u8 && !from.is_temp() {
            self.on_eager(from, h, payload, false);
        } else {
            self.deliver_other(from, h, payload);
        }
    }

    /// `netmod`: it came through the netmod, whose window it counts
    /// against until consumed.
    #[inline]
    fn on_eager(&mut self, from: VcId, h: &WireHeader, payload: &[u8], netmod: bool) {
        let env = Envelope {
            context: h.context,
            source: h.src,
            tag: h.tag,
        };
        let sync = h.flags & FLAG_SYNC != 0;
        match self.matcher.match_posted(env) {
            Some(rreq) => {
                self.finish_eager_recv(rreq, env, payload);
                if netmod {
                    self.consumed(from, payload.len());
                }
                if sync {
                    self.reply(from, control(MsgKind::Ack, h.context, h.sreq));
                }
            }
            None => self.matcher.push_unexpected(
                env,
                Unexpected::Eager {
                    data: self.spare.copy_of(payload),
                    sreq: h.sreq,
                    sync,
                    vc: from,
                },
            ),
        }
    }

    /// Always inline: the tail of every matched eager arrival (netmod and
    /// shared memory alike); out of line it cost a call a message.
    #[inline(always)]
    pub(crate) fn finish_eager_recv(&mut self, rreq: u64, env: Envelope, data: &[u8]) {
        let Some(req) = self.requests.get_mut(rreq) else {
            return;
        };
        let Op::Recv(r) = &mut req.op else {
            return;
        };
        let n = data.len().min(r.cap);
        if n > 0 {
            // SAFETY: the receive owns `buf..buf+cap` until it completes
            // (API contract), `n <= cap`, and shared memory or a heap copy
            // cannot overlap a user buffer.
            unsafe { rivet_lockfree::small_copy::copy_bytes(data.as_ptr(), r.buf, n) };
        }
        r.phase = RecvPhase::Done;
        req.status = Status {
            source: env.source as i32,
            tag: env.tag,
            count: n,
            cancelled: false,
            error: truncation(data.len() as u64, r.cap),
        };
        // As `complete` (a receive has no registration), without looking
        // the request up again.
        if mark_complete(req, &mut self.completions) {
            self.requests.remove(rreq);
        }
    }

    /// A receive matched a rendezvous request: pull the data.
    /// Receive `id` matched `msg`, which had arrived before it: finish an
    /// eager one (acknowledging a synchronous send), start pulling a
    /// rendezvous one.
    pub(crate) fn receive_matched(&mut self, id: u64, env: Envelope, msg: Unexpected) {
        match msg {
            Unexpected::Eager {
                data,
                sreq,
                sync,
                vc,
            } => {
                self.finish_eager_recv(id, env, &data);
                self.consumed(vc, data.len());
                self.spare.give_back(data);
                if sync {
                    self.reply(vc, control(MsgKind::Ack, env.context, sreq));
                }
            }
            rts @ Unexpected::Rts { .. } => self.start_rendezvous_recv(id, env, rts),
        }
    }

    fn on_cancel_ack(&mut self, from: VcId, h: &WireHeader) {
        if !self.names_send_to(from, h.sreq, "a CancelAck") {
            return;
        }
        let Some(req) = self.requests.get_mut(h.sreq) else {
            return;
        };
        let Op::Send(s) = &mut req.op else {
            return;
        };
        let cancelled = h.flags & FLAG_CANCELLED != 0;
        if let Err(why) = s.on_cancel_ack(cancelled) {
            return self.misbehaved(from, why);
        }
        if cancelled {
            req.status.cancelled = true;
        }
        self.maybe_complete_send(h.sreq);
    }
}

/// Mark `req` complete and count it; true if nobody waits for it (the
/// caller frees its slot).
#[inline(always)]
fn mark_complete(req: &mut Req, completions: &mut u64) -> bool {
    req.complete = true;
    *completions = completions.wrapping_add(1);
    req.detached
}

#[cfg(test)]
#[path = "protocol_tests.rs"]
pub(crate) mod tests;

#[cfg(test)]
#[path = "protocol_buffer_tests.rs"]
mod buffer_tests;

#[cfg(test)]
#[path = "credit_tests.rs"]
mod credit_tests;

#[cfg(test)]
#[path = "cells_tests.rs"]
mod cells_tests;
