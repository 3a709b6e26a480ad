//! The sinks arrivals go through: a channel's, to the engine as from its
//! world rank, and the inner netmod's, shifted to world ranks.

use std::ptr::NonNull;

use super::super::channel::Arrivals;
use crate::{peer_id, split_peer, PeerId, Sink};

/// A channel's arrivals, to the engine as from `peer`; `n` counts messages.
pub(super) struct ToSink<'a> {
    pub(super) sink: &'a mut dyn Sink,
    pub(super) peer: PeerId,
    pub(super) n: usize,
}

impl Arrivals for ToSink<'_> {
    fn deliver(&mut self, header: &[u8], payload: &[u8]) {
        self.sink.deliver(self.peer, header, payload);
        self.n += 1;
    }
    fn place(&mut self, header: &[u8], len: usize) -> Option<NonNull<u8>> {
        self.sink.place(self.peer, header, len)
    }
}

/// Hands the inner netmod's arrivals on under global ranks.
pub(super) struct Shift<'a> {
    pub(super) sink: &'a mut dyn Sink,
    pub(super) offset: u32,
}

impl Shift<'_> {
    fn map(&self, peer: PeerId) -> PeerId {
        match split_peer(peer) {
            (0, r) => peer_id(0, r + self.offset),
            _ => peer,
        }
    }
}

impl Sink for Shift<'_> {
    fn deliver(&mut self, peer: PeerId, header: &[u8], payload: &[u8]) {
        let p = self.map(peer);
        self.sink.deliver(p, header, payload)
    }
    fn place(&mut self, peer: PeerId, header: &[u8], len: usize) -> Option<NonNull<u8>> {
        let p = self.map(peer);
        self.sink.place(p, header, len)
    }
    fn peer_failed(&mut self, peer: PeerId, why: &str) {
        let p = self.map(peer);
        self.sink.peer_failed(p, why)
    }
    fn port_connection(&mut self, peer: PeerId, tag: u64) {
        self.sink.port_connection(peer, tag)
    }
}
