//! The request table: every operation in flight, named by a `u64` handle.
//!
//! A handle packs a slot index and the slot's generation, so a stale handle
//! (echoed back late by a peer, or kept by a user after completion) never
//! reaches a reused slot: it is simply not found. Handles go on the wire in
//! the `sreq`/`aux` header fields; 0 is never a valid handle. Slots are
//! recycled through a free list, so steady state allocates nothing.

use crate::pg::VcId;
use crate::status::Status;

/// The sending side of an operation. Its phase moves only through the
/// methods below, each of which says whether the step was allowed.
pub struct SendOp {
    pub vc: VcId,
    pub buf: *const u8,
    pub len: usize,
    pub context: u32,
    pub tag: i32,
    /// The buffer is registered with the netmod for the receiver to read
    /// (`state/rma.rs`); released when the send completes.
    pub rma_key: Option<u64>,
    phase: SendPhase,
    /// A cancel request is out; completion waits for its answer.
    cancel_pending: bool,
}

/// Where a send stands (the send state machine; `state/protocol.rs` has the
/// messages that move it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendPhase {
    /// An eager message waiting in its VC's queue, which points at the
    /// buffer. Next: `Sent` (standard) or `AwaitingAck` (synchronous) once
    /// the transport takes it.
    Queued { sync: bool },
    /// An eager standard send the transport took: finished, though a cancel
    /// may still withdraw it at the receiver.
    Sent,
    /// A synchronous eager send the transport took: waits for `Ack`.
    AwaitingAck,
    /// The rendezvous request is out (or queued): waits for `Ack` (the
    /// receiver read the buffer) or `Cts` (stream it).
    RtsSent,
    /// The receiver asked for the data: `Data` pieces are queued or going
    /// out from the buffer.
    Streaming,
    /// The receiver asked us to write part of the data into its buffer
    /// (`Write`, shared memory): the write is queued. Next: `AwaitingAck`.
    Writing,
    /// Matched, and every byte out or read.
    Done,
    /// Withdrawn at the receiver by a cancel.
    Cancelled,
    /// Its peer failed (an abandoned send is simply freed).
    Failed,
}

impl SendOp {
    /// A send that starts as an eager message (`eager`) or a rendezvous
    /// request.
    pub fn new(
        vc: VcId,
        buf: *const u8,
        len: usize,
        context: u32,
        tag: i32,
        eager: bool,
        sync: bool,
    ) -> SendOp {
        SendOp {
            vc,
            buf,
            len,
            context,
            tag,
            rma_key: None,
            phase: if eager {
                SendPhase::Queued { sync }
            } else {
                SendPhase::RtsSent
            },
            cancel_pending: false,
        }
    }

    #[cfg(test)]
    pub fn phase(&self) -> SendPhase {
        self.phase
    }

    /// The request may complete: nothing reads the buffer any more and no
    /// answer is awaited.
    pub fn finished(&self) -> bool {
        !self.cancel_pending
            && matches!(
                self.phase,
                SendPhase::Sent | SendPhase::Done | SendPhase::Cancelled | SendPhase::Failed
            )
    }

    /// The transport took the eager message.
    pub fn taken(&mut self) {
        if let SendPhase::Queued { sync } = self.phase {
            self.phase = if sync {
                SendPhase::AwaitingAck
            } else {
                SendPhase::Sent
            };
        }
    }

    /// The transport took the last `Data` piece.
    pub fn streamed(&mut self) {
        if self.phase == SendPhase::Streaming {
            self.phase = SendPhase::Done;
        }
    }

    /// The receiver matched a synchronous send, or read a rendezvous
    /// message: only then may an `Ack` finish the send.
    pub fn on_ack(&mut self) -> Result<(), &'static str> {
        match self.phase {
            SendPhase::AwaitingAck | SendPhase::RtsSent => {
                self.phase = SendPhase::Done;
                Ok(())
            }
            SendPhase::Queued { .. } => Err("an Ack for a message not sent yet"),
            SendPhase::Sent => Err("an Ack for a send that asked for none"),
            SendPhase::Streaming => Err("an Ack for a message it asked to have streamed"),
            SendPhase::Writing => Err("an Ack before our part of the copy was written"),
            SendPhase::Done | SendPhase::Cancelled | SendPhase::Failed => {
                Err("an Ack for a finished send")
            }
        }
    }

    /// The receiver asks for the rendezvous data: once, and only after a
    /// rendezvous request.
    pub fn on_cts(&mut self) -> Result<(), &'static str> {
        match self.phase {
            SendPhase::RtsSent => {
                self.phase = SendPhase::Streaming;
                Ok(())
            }
            SendPhase::Streaming => Err("a second Cts for one message"),
            _ => Err("a Cts for a send that sent no rendezvous request or was answered"),
        }
    }

    /// The receiver asks us to write part of a rendezvous message: once,
    /// only after a rendezvous request.
    pub fn on_write(&mut self) -> Result<(), &'static str> {
        match self.phase {
            SendPhase::RtsSent => {
                self.phase = SendPhase::Writing;
                Ok(())
            }
            SendPhase::Writing => Err("a second Write for one message"),
            _ => Err("a Write for a send that sent no rendezvous request or was answered"),
        }
    }

    /// Our part is written (or refused): the receiver's `Ack` ends it.
    pub fn written(&mut self) {
        if self.phase == SendPhase::Writing {
            self.phase = SendPhase::AwaitingAck;
        }
    }

    /// Ask to cancel: `false` if there is nothing to cancel (matched,
    /// streaming, finished, or a cancel already out).
    pub fn start_cancel(&mut self) -> bool {
        let open = matches!(
            self.phase,
            SendPhase::Queued { .. }
                | SendPhase::Sent
                | SendPhase::AwaitingAck
                | SendPhase::RtsSent
        );
        if !open || self.cancel_pending {
            return false;
        }
        self.cancel_pending = true;
        true
    }

    /// The answer to our cancel request (`cancelled`: the receiver
    /// withdrew the message). A withdrawn message was never matched, so
    /// never streamed or acknowledged, and it was sent before the cancel.
    pub fn on_cancel_ack(&mut self, cancelled: bool) -> Result<(), &'static str> {
        if !self.cancel_pending {
            return Err("a CancelAck for a send not being cancelled");
        }
        if cancelled {
            match self.phase {
                SendPhase::Sent | SendPhase::AwaitingAck | SendPhase::RtsSent => {
                    self.phase = SendPhase::Cancelled
                }
                SendPhase::Queued { .. } => {
                    return Err("a CancelAck withdrawing a message not sent yet")
                }
                _ => return Err("a CancelAck withdrawing a message it had matched"),
            }
        }
        self.cancel_pending = false;
        Ok(())
    }

    /// Give up: the peer failed.
    pub fn fail(&mut self) {
        self.phase = SendPhase::Failed;
        self.cancel_pending = false;
    }
}

/// Where a receive stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvPhase {
    /// In the matcher, waiting for a message.
    Posted,
    /// Matched a rendezvous message whose pieces are arriving.
    Streaming {
        total: u64,
        received: u64,
        /// The sending rank (its VC).
        from: VcId,
    },
    /// Matched a rendezvous message that it reads from the sender with a
    /// netmod one-sided read (`state/rma.rs`).
    Reading {
        from: VcId,
    },
    /// Matched a large message over shared memory whose copy it shares
    /// with the sender (`Write`): `parts` copies are outstanding (ours,
    /// the sender's); the sender may be writing into the buffer.
    Copying {
        from: VcId,
        parts: u8,
    },
    /// Matched, at its first cell, an eager message longer than one
    /// shared-memory cell, whose later cells are copied in as they come
    /// (`state/protocol/cells.rs`).
    Cells {
        from: VcId,
    },
    Done,
}

pub struct RecvOp {
    pub buf: *mut u8,
    pub cap: usize,
    /// The source pattern it was posted with (a rank or `ANY_SOURCE`).
    pub source: i32,
    /// The VC of `source` (`None` for `ANY_SOURCE`).
    pub source_vc: Option<VcId>,
    pub phase: RecvPhase,
}

pub enum Op {
    Send(SendOp),
    Recv(RecvOp),
}

pub struct Req {
    pub op: Op,
    pub status: Status,
    pub complete: bool,
    /// Nobody waits for it: free the slot when it completes.
    pub detached: bool,
}

enum Slot {
    Free { next: u32 },
    Live(Req),
}

const NONE: u32 = u32::MAX;

/// The top bits of a handle's generation name the worker whose table
/// made it (`thread.rs`), so a handle finds its worker, and a handle of
/// one worker is stale in every other's table.
pub const WORKER_SHIFT: u32 = 58;
const GEN_BITS: u32 = WORKER_SHIFT - 32;
const GEN_MASK: u32 = (1 << GEN_BITS) - 1;

/// The worker a request handle (or a held-message key) belongs to.
#[inline]
pub fn worker_of(id: u64) -> usize {
    (id >> WORKER_SHIFT) as usize
}

pub struct RequestTable {
    slots: Vec<(u32, Slot)>,
    free: u32,
    live: usize,
    /// This worker's bits of every generation.
    worker: u32,
}

impl Default for RequestTable {
    fn default() -> Self {
        Self::new()
    }
}

impl RequestTable {
    pub fn new() -> RequestTable {
        RequestTable::for_worker(0)
    }

    /// The table of worker `worker` (< 64): its handles carry the number.
    pub fn for_worker(worker: usize) -> RequestTable {
        debug_assert!(worker < 1 << (64 - WORKER_SHIFT));
        RequestTable {
            slots: Vec::new(),
            free: NONE,
            live: 0,
            worker: (worker as u32) << GEN_BITS,
        }
    }

    #[inline]
    pub fn insert(&mut self, req: Req) -> u64 {
        self.live += 1;
        // The generation comes with the slot: looking the slot up again
        // for it cost a bounds check a request (callgrind).
        let (index, gen) = if self.free != NONE {
            let i = self.free;
            let slot = &mut self.slots[i as usize];
            if let Slot::Free { next } = slot.1 {
                self.free = next;
            }
            slot.1 = Slot::Live(req);
            (i, slot.0)
        } else {
            let gen = self.worker | 1;
            self.slots.push((gen, Slot::Live(req)));
            ((self.slots.len() - 1) as u32, gen)
        };
        handle(index, gen)
    }

    #[inline]
    pub fn get(&self, id: u64) -> Option<&Req> {
        let (index, gen) = split(id)?;
        match self.slots.get(index as usize) {
            Some((g, Slot::Live(req))) if *g == gen => Some(req),
            _ => None,
        }
    }

    #[inline]
    pub fn get_mut(&mut self, id: u64) -> Option<&mut Req> {
        let (index, gen) = split(id)?;
        match self.slots.get_mut(index as usize) {
            Some((g, Slot::Live(req))) if *g == gen => Some(req),
            _ => None,
        }
    }

    /// Free the slot; the handle (and any copy of it) goes stale.
    #[inline]
    pub fn remove(&mut self, id: u64) -> Option<Req> {
        let (index, gen) = split(id)?;
        let slot = self.slots.get(index as usize)?;
        if slot.0 != gen || !matches!(slot.1, Slot::Live(_)) {
            return None;
        }
        match self.free_slot(index) {
            Slot::Live(req) => Some(req),
            Slot::Free { .. } => None,
        }
    }

    /// What a wait asks of a handle, in one lookup: `Some(status)` if it
    /// completed (the slot is freed then), `None` while it is in flight. A
    /// handle not live (freed, stale or 0) counts as complete with an empty
    /// status.
    #[inline]
    pub fn take_if_complete(&mut self, id: u64) -> Option<Status> {
        let Some((index, gen)) = split(id) else {
            return Some(Status::default());
        };
        let status = match self.slots.get(index as usize) {
            Some((g, Slot::Live(req))) if *g == gen => {
                if !req.complete {
                    return None;
                }
                req.status
            }
            _ => return Some(Status::default()),
        };
        self.free_slot(index);
        Some(status)
    }

    /// Put live slot `index` on the free list under a new generation; its
    /// old contents.
    #[inline(always)]
    fn free_slot(&mut self, index: u32) -> Slot {
        let worker = self.worker;
        let slot = &mut self.slots[index as usize];
        slot.0 = (slot.0.wrapping_add(1) & GEN_MASK).max(1) | worker;
        let old = std::mem::replace(&mut slot.1, Slot::Free { next: self.free });
        self.free = index;
        self.live -= 1;
        old
    }

    /// Requests in flight (for diagnostics).
    pub fn live(&self) -> usize {
        self.live
    }

    /// Handles of the live requests `pick` selects (a cold path: peer
    /// failure).
    pub fn select(&self, mut pick: impl FnMut(&Req) -> bool) -> Vec<u64> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, (gen, s))| match s {
                Slot::Live(r) if pick(r) => Some(handle(i as u32, *gen)),
                _ => None,
            })
            .collect()
    }

    /// Whether any live request is one `pick` selects.
    pub fn any(&self, mut pick: impl FnMut(&Req) -> bool) -> bool {
        self.slots
            .iter()
            .any(|(_, s)| matches!(s, Slot::Live(r) if pick(r)))
    }
}

#[inline]
fn handle(index: u32, gen: u32) -> u64 {
    (u64::from(gen) << 32) | (u64::from(index) + 1)
}

#[inline]
fn split(id: u64) -> Option<(u32, u32)> {
    let low = id as u32;
    if low == 0 {
        return None;
    }
    Some((low - 1, (id >> 32) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv() -> Req {
        Req {
            op: Op::Recv(RecvOp {
                buf: std::ptr::null_mut(),
                cap: 0,
                source_vc: None,
                source: 0,
                phase: RecvPhase::Posted,
            }),
            status: Status::default(),
            complete: false,
            detached: false,
        }
    }

    #[test]
    fn stale_handles_never_reach_a_reused_slot() {
        let mut t = RequestTable::new();
        let a = t.insert(recv());
        assert!(t.get(a).is_some());
        assert!(t.remove(a).is_some());
        let b = t.insert(recv());
        assert_ne!(a, b, "same slot, new generation");
        assert!(t.get(a).is_none());
        assert!(t.remove(a).is_none());
        assert!(t.get(b).is_some());
        assert!(t.get(0).is_none());
        assert!(t.get(u64::MAX).is_none());
        assert_eq!(t.live(), 1);
    }

    #[test]
    fn take_if_complete_frees_only_a_finished_request() {
        let mut t = RequestTable::new();
        let a = t.insert(recv());
        assert_eq!(t.take_if_complete(a), None, "in flight");
        assert!(t.get(a).is_some() && t.live() == 1);
        let req = t.get_mut(a).unwrap();
        req.complete = true;
        req.status.count = 7;
        assert_eq!(t.take_if_complete(a).map(|s| s.count), Some(7));
        assert!(t.get(a).is_none() && t.live() == 0, "freed once taken");
        // Gone, stale or never valid: complete, with an empty status.
        assert_eq!(t.take_if_complete(a), Some(Status::default()));
        assert_eq!(t.take_if_complete(0), Some(Status::default()));
        assert_eq!(t.take_if_complete(u64::MAX), Some(Status::default()));
        let b = t.insert(recv());
        assert_ne!(a, b);
        assert_eq!(t.take_if_complete(a), Some(Status::default()));
        assert!(
            t.get(b).is_some(),
            "a stale handle leaves the reused slot alone"
        );
    }

    #[test]
    fn handles_name_their_worker_and_are_stale_elsewhere() {
        let mut zero = RequestTable::new();
        let mut three = RequestTable::for_worker(3);
        let a = zero.insert(recv());
        let b = three.insert(recv());
        assert_eq!((worker_of(a), worker_of(b)), (0, 3));
        assert!(zero.get(b).is_none() && three.get(a).is_none());
        // The worker stays in the handle however often a slot is reused,
        // and the generation wraps inside its bits.
        let mut id = b;
        for round in 0..1000 {
            if round == 500 {
                // Jump to the last generation: the next one wraps to 1.
                three.slots[0].0 = GEN_MASK | three.worker;
                id = handle(0, three.slots[0].0);
            }
            assert!(three.remove(id).is_some());
            id = three.insert(recv());
            assert_eq!(worker_of(id), 3);
            assert_ne!(id, 0);
        }
        assert!(three.get(id).is_some());
        assert_eq!(three.live(), 1);
    }
}
