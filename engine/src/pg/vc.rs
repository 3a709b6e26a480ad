//! One virtual connection (seed 000): the path to one process, its send
//! queue, its flow-control and failure state, and its reference count.

use std::collections::VecDeque;

use crate::route::{CmaState, Route};
use crate::wire::WireHeader;

/// A message waiting for room in its transport, in send order.
pub enum Outgoing {
    /// One message; `buf` stays valid while request `done` (if any) is not
    /// complete, or is empty for control messages.
    Msg {
        header: WireHeader,
        buf: *const u8,
        len: usize,
        /// Send request to mark transmitted once the message is taken.
        done: u64,
    },
    /// A control message that owns its payload (port traffic).
    Owned { header: WireHeader, data: Vec<u8> },
    /// The pieces of a rendezvous message on the copy path: `Data`
    /// messages of `piece` bytes from `buf[offset..len]`.
    Stream {
        header: WireHeader,
        buf: *const u8,
        len: usize,
        offset: usize,
        piece: usize,
        /// The send request, completed when the last piece is taken.
        sreq: u64,
    },
}

impl Outgoing {
    pub fn request(&self) -> u64 {
        match self {
            Outgoing::Msg { done, .. } => *done,
            Outgoing::Owned { .. } => 0,
            Outgoing::Stream { sreq, .. } => *sreq,
        }
    }
}

pub struct Vc {
    pub route: Route,
    /// Messages that found the transport full; sent before anything newer.
    pub pending: VecDeque<Outgoing>,
    /// Listed in the engine's set of VCs with pending messages.
    pub listed: bool,
    pub cma: CmaState,
    /// The peer is gone: sends to it fail at once.
    pub failed: bool,
    /// The peer said `Bye` (it finalized or disconnected): its connection
    /// closing next is the end of a finished conversation, not a failure.
    pub finalized: bool,
    /// We said `Bye` (at finalize, or answering the peer's): nothing but
    /// that goes to the peer any more.
    pub bye_sent: bool,
    /// Netmod routes: eager bytes we may still send before the peer
    /// returns credit (see `state/protocol.rs`, flow control).
    pub credit: usize,
    /// Netmod routes: eager bytes from the peer consumed here but not yet
    /// returned to it as credit.
    pub owed: usize,
    /// References from VC tables, plus one for "connected" (seed 000: a VC
    /// goes from 0 straight to 2, `free` of its last table leaves 1,
    /// `disconnect` takes that last one). Counted for foreign groups only:
    /// the world's VCs are never freed.
    pub refs: u32,
}

impl Vc {
    pub fn new(route: Route, window: usize) -> Vc {
        Vc {
            route,
            pending: VecDeque::new(),
            listed: false,
            cma: CmaState::Untried,
            failed: false,
            finalized: false,
            bye_sent: false,
            credit: window,
            owed: 0,
            refs: 0,
        }
    }
}
