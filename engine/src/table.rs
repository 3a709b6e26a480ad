//! The request table: every operation in flight, named by a `u64` handle.
//!
//! A handle packs a slot index and the slot's generation, so a stale handle
//! (echoed back late by a peer, or kept by a user after completion) never
//! reaches a reused slot: it is simply not found. Handles go on the wire in
//! the `sreq`/`aux` header fields; 0 is never a valid handle. Slots are
//! recycled through a free list, so steady state allocates nothing.

use crate::pg::VcId;
use crate::status::Status;

/// The sending side of an operation.
pub struct SendOp {
    pub vc: VcId,
    pub buf: *const u8,
    pub len: usize,
    pub context: u32,
    pub tag: i32,
    /// Complete only once the receiver has matched (ssend, rendezvous).
    pub needs_ack: bool,
    /// Every byte has been handed to a transport (or read by the peer).
    pub transmitted: bool,
    pub acked: bool,
    /// A cancel request is out; completion waits for its answer.
    pub cancel_pending: bool,
    /// The buffer is registered with the netmod for the receiver to read
    /// (`rma.rs`); released when the send completes.
    pub rma_key: Option<u64>,
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
    /// netmod one-sided read (`rma.rs`).
    Reading {
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

pub struct RequestTable {
    slots: Vec<(u32, Slot)>,
    free: u32,
    live: usize,
}

impl Default for RequestTable {
    fn default() -> Self {
        Self::new()
    }
}

impl RequestTable {
    pub fn new() -> RequestTable {
        RequestTable {
            slots: Vec::new(),
            free: NONE,
            live: 0,
        }
    }

    #[inline]
    pub fn insert(&mut self, req: Req) -> u64 {
        self.live += 1;
        let index = if self.free != NONE {
            let i = self.free;
            let slot = &mut self.slots[i as usize];
            if let Slot::Free { next } = slot.1 {
                self.free = next;
            }
            slot.1 = Slot::Live(req);
            i
        } else {
            self.slots.push((1, Slot::Live(req)));
            (self.slots.len() - 1) as u32
        };
        handle(index, self.slots[index as usize].0)
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
        let slot = self.slots.get_mut(index as usize)?;
        if slot.0 != gen || !matches!(slot.1, Slot::Live(_)) {
            return None;
        }
        slot.0 = slot.0.wrapping_add(1).max(1);
        let old = std::mem::replace(&mut slot.1, Slot::Free { next: self.free });
        self.free = index;
        self.live -= 1;
        match old {
            Slot::Live(req) => Some(req),
            Slot::Free { .. } => None,
        }
    }

    /// `id` is a receive whose rendezvous data is arriving (streamed or
    /// read): a netmod may be writing into its buffer.
    pub fn is_streaming(&self, id: u64) -> bool {
        matches!(
            self.get(id).map(|r| &r.op),
            Some(Op::Recv(RecvOp {
                phase: RecvPhase::Streaming { .. } | RecvPhase::Reading { .. },
                ..
            }))
        )
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
}
