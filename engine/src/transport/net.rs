//! A network module as a transport: `rivet_netmods::Netmod` (tcp, ofi,
//! impi) with the engine's side of it: the poll cadence next to shared
//! memory, the `Sink` it hands arrivals to, and its RMA (registering a
//! rendezvous sender's buffer, reading the sender's buffer with the key the
//! `Rts` carries, `state/rma.rs`).

use std::ptr::NonNull;

use rivet_netmods::{Netmod, NetmodError, PeerId, Sink};

use crate::error::Result;
use crate::pg::VcId;
use crate::route::Limits;
use crate::state::{ReadWant, State};
use crate::transport::{ReadStart, Transport};
use crate::wire::WireHeader;

/// In a job with shared memory too, the netmod is polled on every call
/// that found no shared-memory traffic, and otherwise on every this-many-th
/// call: a poll can cost a system call (the poll backend), which the
/// shared-memory path should not pay per message.
const NETMOD_EVERY: u32 = 16;

pub struct NetLink {
    net: Box<dyn Netmod>,
    limits: Limits,
    /// Progress calls since the netmod was last polled (`NETMOD_EVERY`).
    turn: u32,
}

impl NetLink {
    pub fn new(net: Box<dyn Netmod>) -> NetLink {
        let l = net.limits();
        NetLink {
            net,
            limits: Limits {
                eager_max: l.eager_max,
                piece: l.max_payload.max(1),
            },
            turn: 0,
        }
    }

    /// The netmod itself, for what only it does (groups, ports, cards).
    pub fn netmod(&self) -> &dyn Netmod {
        &*self.net
    }

    pub fn netmod_mut(&mut self) -> &mut dyn Netmod {
        &mut *self.net
    }

    pub fn name(&self) -> &'static str {
        self.net.name()
    }

    /// Whether to poll now: always when shared memory had nothing
    /// (`shm_busy` false), else every `NETMOD_EVERY`-th call.
    #[inline]
    pub fn due(&mut self, shm_busy: bool) -> bool {
        self.turn += 1;
        if shm_busy && self.turn < NETMOD_EVERY {
            return false;
        }
        self.turn = 0;
        true
    }

    /// Connect to `peer` on first contact, its card from `card`.
    pub fn ensure_connected(
        &mut self,
        peer: PeerId,
        card: impl FnOnce() -> Result<String>,
    ) -> Result<()> {
        if !self.net.knows(peer) {
            self.net.connect(peer, &card()?)?;
        }
        Ok(())
    }

    /// `try_send` with the netmod's own error (which fails only the peer).
    pub fn send(
        &mut self,
        peer: PeerId,
        header: &WireHeader,
        payload: &[u8],
    ) -> std::result::Result<bool, NetmodError> {
        self.net.try_send(peer, header.as_bytes(), payload)
    }

    /// Register a rendezvous send's buffer for the receiver's read, if the
    /// netmod offers reads; `None`: the data is streamed.
    pub fn register(&mut self, buf: *const u8, len: usize) -> Option<u64> {
        if len == 0 {
            return None;
        }
        self.net.rma()?.register(buf as usize, len).ok()
    }

    /// Release a send's registration now (its buffer is about to go).
    pub fn deregister(&mut self, key: u64) -> bool {
        match self.net.rma() {
            Some(rma) => {
                // A region the netmod lost with its peer is gone already.
                let _ = rma.deregister(key);
                true
            }
            None => false,
        }
    }

    /// Release the registrations of sends that no longer need them.
    pub fn release(&mut self, st: &mut State) {
        let keys = st.take_released_keys();
        if keys.is_empty() {
            return;
        }
        if let Some(rma) = self.net.rma() {
            for key in keys {
                let _ = rma.deregister(key);
            }
        }
    }

    /// Stop every read from failed `peer` (`Rma::stop_reads`); `true`
    /// once none of them writes any more (or there is no RMA).
    pub fn stop_reads(&mut self, peer: PeerId) -> bool {
        self.net.rma().is_none_or(|rma| rma.stop_reads(peer))
    }

    /// Disconnect the peers the protocols refused during a poll (out of
    /// line: every poll asks, hardly any has one).
    #[cold]
    #[inline(never)]
    fn disconnect_refused(&mut self, st: &mut State) {
        for peer in st.take_refused() {
            self.net.disconnect(peer);
        }
    }

    /// Report reads that ended since the last call.
    pub fn poll_reads(&mut self, st: &mut State) -> usize {
        if !st.reads_in_flight() {
            return 0;
        }
        let Some(rma) = self.net.rma() else {
            return 0;
        };
        let mut ended = Vec::new();
        rma.poll_reads(&mut |token, result| ended.push((token, result)));
        let mut events = 0;
        for (token, result) in ended {
            let Some(w) = st.read_ended(token) else {
                continue;
            };
            events += 1;
            match result {
                Ok(()) => st.netmod_read_done(w),
                Err(_) => st.netmod_read_refused(w),
            }
        }
        events
    }
}

impl Transport for NetLink {
    type Peer = PeerId;

    fn limits(&self) -> Limits {
        self.limits
    }

    fn try_send(&mut self, peer: PeerId, header: &WireHeader, payload: &[u8]) -> Result<bool> {
        Ok(self.send(peer, header, payload)?)
    }

    /// Arrivals go to the protocols through `NetSink`; peers found
    /// misbehaving during the poll are disconnected after it.
    fn poll(&mut self, st: &mut State) -> Result<usize> {
        let n = self.net.poll(&mut NetSink { st })?;
        if st.any_refused() {
            self.disconnect_refused(st);
        }
        Ok(n)
    }

    unsafe fn read(
        &mut self,
        _st: &mut State,
        peer: PeerId,
        w: &ReadWant,
        dst: *mut u8,
    ) -> ReadStart {
        let Some(rma) = self.net.rma() else {
            return ReadStart::Refused;
        };
        // SAFETY: the caller's contract: `dst..dst+len` stays the
        // receive's alone until the read's end is reported.
        match unsafe { rma.read(peer, dst, w.len, w.addr, w.key) } {
            Ok(token) => ReadStart::Posted(token),
            Err(_) => ReadStart::Refused,
        }
    }
}

/// How the netmod hands arrivals to the protocols.
struct NetSink<'a> {
    st: &'a mut State,
}

impl NetSink<'_> {
    /// The VC a netmod peer id names, if we know it. Stragglers from a
    /// group already disconnected are dropped. Inline: every arrival asks
    /// (the call cost some 15 instructions a message, callgrind).
    #[inline]
    fn vc(&mut self, peer: PeerId) -> Option<VcId> {
        let id = VcId::from_peer(peer);
        self.st.knows(id).then_some(id)
    }
}

impl Sink for NetSink<'_> {
    fn deliver(&mut self, peer: PeerId, header: &[u8], payload: &[u8]) {
        let Some(id) = self.vc(peer) else { return };
        match WireHeader::from_bytes(header) {
            Some(h) => self.st.deliver(id, &h, payload),
            None => self
                .st
                .misbehaved(id, &format!("a {}-byte header", header.len())),
        }
    }

    fn place(&mut self, peer: PeerId, header: &[u8], len: usize) -> Option<NonNull<u8>> {
        let id = self.vc(peer)?;
        self.st.placement(id, &WireHeader::from_bytes(header)?, len)
    }

    fn peer_failed(&mut self, peer: PeerId, why: &str) {
        if let Some(id) = self.vc(peer) {
            self.st.peer_failed(id, why);
        }
    }

    fn port_connection(&mut self, peer: PeerId, tag: u64) {
        self.st.port_connection(peer, tag);
    }
}
