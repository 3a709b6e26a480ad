//! One worker's state behind its lock, and the progress loop.
//!
//! `Core` is everything a worker mutates: transports (`shm`: its lane;
//! `netmod`: worker 0's only), and the protocol `State` (requests,
//! matching, VCs). Each worker's `Core` lives in its own `EngineLock`
//! (`Inner::core` for worker 0, `Inner::lanes` for the others; `thread.rs`).
//! Why one lock per worker rather than finer ones: MPI matching is serial
//! per context by definition (non-overtaking order), posting and arrival
//! must see one consistent queue, and the shm send side of a lane's pair is
//! single-producer; so a context stays on one worker. Uncontended the lock
//! costs one atomic exchange (release is a plain store); `rivet-bench mr
//! --threads 2` measures it. Everything crossing processes (shm rings and
//! queues) is lock-free.
//!
//! Transports hand arrivals to `State::deliver` (protocol.rs; the netmod
//! through `NetSink`, which also offers it receive buffers to fill
//! directly and learns of failed peers), which never
//! sends directly: replies go to the VC's pending queue and `flush` sends
//! them once the transport is free again. That keeps the borrow of the shm
//! receive slot and the send side apart, and keeps per-pair send order.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use rivet_netmods::{Netmod, PeerId, Sink};
use rivet_pmi::Client;

use crate::error::{Error, Result};
use crate::peer_watch::LocalPeers;
use crate::pg::{Outgoing, Route, VcId};
use crate::shm::ShmNode;
use crate::state::{bytes, State};
use crate::wire::WireHeader;

/// Messages handed to `deliver` per transport per progress call.
const POLL_BUDGET: usize = 32;

pub struct Core {
    pub shm: Option<ShmNode>,
    /// Peers off the node (or every peer, when `RIVET_NETMOD` forces it).
    pub netmod: Option<Box<dyn Netmod>>,
    /// Where peers' business cards are looked up on first contact; shared
    /// with `Inner` (lock order: the engine lock, then this one).
    pub pmi: Arc<Mutex<Option<Client>>>,
    pub st: State,
    /// Progress calls since the netmod was last polled (`NETMOD_EVERY`).
    net_turn: u32,
    /// The local peers' processes, watched for their end once all attached.
    local_peers: Option<LocalPeers>,
}

/// In a job with shared memory too, the netmod is polled on every call
/// that found no shared-memory traffic, and otherwise on every this-many-th
/// call: a poll can cost a system call (the poll backend), which the
/// shared-memory path should not pay per message.
const NETMOD_EVERY: u32 = 16;

// SAFETY: the raw buffer pointers in requests and pending messages are only
// dereferenced under the engine lock, and the API contract (scopes, blocking
// calls, or the caller of an `unsafe *_raw` call) keeps each buffer valid
// until its request completes, whichever thread drives progress.
unsafe impl Send for Core {}

impl Core {
    pub fn new(
        shm: Option<ShmNode>,
        netmod: Option<Box<dyn Netmod>>,
        pmi: Arc<Mutex<Option<Client>>>,
        st: State,
    ) -> Core {
        Core {
            shm,
            netmod,
            pmi,
            st,
            net_turn: 0,
            local_peers: None,
        }
    }

    /// Poll every transport once, then send what was waiting for room.
    pub fn progress(&mut self) -> usize {
        let mut events = 0;
        if let Some(shm) = self.shm.as_mut() {
            if self.st.shm_pids.is_empty() {
                let pids: Vec<u32> = (0..shm.local_size()).map(|p| shm.peer_pid(p)).collect();
                if !pids.contains(&0) {
                    self.local_peers = Some(LocalPeers::new(&pids, shm.me()));
                    self.st.shm_pids = pids;
                }
            }
            let st = &mut self.st;
            let polled = shm.poll(POLL_BUDGET, |peer, header, payload| {
                match st.pgs.world.node_map.local_ranks().get(peer).copied() {
                    Some(rank) => st.deliver_shm(VcId::world(rank), header, payload),
                    None => st.fail(format!("shared memory names unknown local rank {peer}")),
                }
            });
            match polled {
                Ok(n) => events += n,
                Err(e) => self.st.fail(format!("shared memory: {e}")),
            }
        }
        self.net_turn += 1;
        let net_due = events == 0 || self.shm.is_none() || self.net_turn >= NETMOD_EVERY;
        if let Some(net) = self.netmod.as_mut().filter(|_| net_due) {
            self.net_turn = 0;
            let mut sink = NetSink { st: &mut self.st };
            match net.poll(&mut sink) {
                Ok(n) => events += n,
                Err(e) => self.st.fail(format!("{} netmod: {e}", net.name())),
            }
            for peer in std::mem::take(&mut self.st.ports.refused) {
                net.disconnect(peer);
            }
        }
        if self.st.rma.busy() {
            events += self.st.rma_progress(self.netmod.as_mut());
        }
        if !self.st.pending_vcs.is_empty() {
            events += self.flush();
        }
        if self.st.copies.busy() {
            events += self.st.run_copies();
            if !self.st.pending_vcs.is_empty() {
                events += self.flush();
            }
        }
        if events == 0 && self.local_peers.as_mut().is_some_and(LocalPeers::due) {
            events += self.local_deaths();
        }
        events
    }

    /// Fail the local peers whose process ended (`peer_watch.rs`): what
    /// they wrote before is delivered first, so a death counts only once
    /// a poll after seeing it finds nothing. A peer that had finalized
    /// fails only what names it, as after a netmod `Bye`. Only peers
    /// reached through shared memory: the netmod judges its own.
    #[cold]
    fn local_deaths(&mut self) -> usize {
        let (Some(watch), Some(shm)) = (self.local_peers.as_mut(), self.shm.as_mut()) else {
            return 0;
        };
        let ended = watch.ended();
        if ended.is_empty() {
            return 0;
        }
        let st = &mut self.st;
        let polled = shm.poll(POLL_BUDGET, |peer, header, payload| {
            match st.pgs.world.node_map.local_ranks().get(peer).copied() {
                Some(rank) => st.deliver_shm(VcId::world(rank), header, payload),
                None => st.fail(format!("shared memory names unknown local rank {peer}")),
            }
        });
        match polled {
            Ok(0) => {}
            Ok(n) => return n, // the next look decides
            Err(e) => {
                self.st.fail(format!("shared memory: {e}"));
                return 0;
            }
        }
        for (peer, pid) in ended {
            watch.report(peer);
            let Some(rank) = self.st.pgs.world.node_map.local_ranks().get(peer).copied() else {
                continue;
            };
            let id = VcId::world(rank);
            // A peer reached over the netmod (RIVET_NETMOD forced) is the
            // netmod's to judge: what it sent may still be in a socket.
            match self.st.pgs.vc(id) {
                Ok(vc) if matches!(vc.route, Route::Shm(_)) => {
                    if shm.peer_finalized(peer) {
                        vc.finalized = true;
                    }
                }
                _ => continue,
            }
            self.st
                .peer_failed(id, &format!("its process (pid {pid}) on this node ended"));
        }
        1
    }

    /// Send a message now if its VC has nothing queued and the transport has
    /// room; else queue it. `Ok(true)`: it went out now.
    #[inline]
    pub fn send_or_queue(&mut self, id: VcId, item: Outgoing) -> Result<bool> {
        let vc = self.st.pgs.vc(id)?;
        if vc.failed {
            return Err(self.st.failure_of(id));
        }
        if vc.pending.is_empty() {
            let route = vc.route;
            let sent = match &item {
                Outgoing::Msg {
                    header, buf, len, ..
                } => {
                    // SAFETY: `buf..buf+len` is the caller's live buffer or empty.
                    let payload = unsafe { bytes(*buf, *len) };
                    self.transmit(route, id, header, payload)?
                }
                Outgoing::Owned { header, data } => self.transmit(route, id, header, data)?,
                Outgoing::Stream { .. } => false,
            };
            if sent {
                return Ok(true);
            }
        }
        self.st.queue(id, item)?;
        Ok(false)
    }

    /// Hand one message to the VC's transport; `Ok(false)` if it is full.
    /// Shared memory is the inline path; the others go out of line.
    #[inline(always)]
    pub(crate) fn transmit(
        &mut self,
        route: Route,
        id: VcId,
        header: &WireHeader,
        payload: &[u8],
    ) -> Result<bool> {
        if let (Route::Shm(peer), Some(shm)) = (route, self.shm.as_mut()) {
            return Ok(shm.try_send(peer, header, payload)?);
        }
        self.transmit_elsewhere(route, id, header, payload)
    }

    #[inline(never)]
    fn transmit_elsewhere(
        &mut self,
        route: Route,
        id: VcId,
        header: &WireHeader,
        payload: &[u8],
    ) -> Result<bool> {
        match route {
            // `transmit` took it where the node segment exists.
            Route::Shm(_) => Err(Error::NoRoute(id)),
            Route::Loopback => {
                self.st.deliver(id, header, payload);
                Ok(true)
            }
            Route::Netmod(peer) => {
                let Some(net) = self.netmod.as_mut() else {
                    return Err(Error::NoRoute(id));
                };
                if !net.knows(peer) {
                    let card = match self.st.pgs.card(id) {
                        Some(card) => card.to_string(),
                        None if id.group() == 0 => business_card(&self.pmi, id.rank())?,
                        None => return Err(Error::NoRoute(id)),
                    };
                    net.connect(peer, &card)?;
                }
                match net.try_send(peer, header.as_bytes(), payload) {
                    Ok(taken) => Ok(taken),
                    Err(e) => {
                        self.st.peer_failed(id, &e.to_string());
                        Err(self.st.failure_of(id))
                    }
                }
            }
        }
    }

    /// Send queued messages, oldest first per VC, until transports fill up.
    pub fn flush(&mut self) -> usize {
        let mut sent = 0;
        let mut i = 0;
        while i < self.st.pending_vcs.len() {
            let id = self.st.pending_vcs[i];
            match self.flush_vc(id) {
                Ok((n, empty)) => {
                    sent += n;
                    if empty {
                        self.st.pending_vcs.swap_remove(i);
                        if let Ok(vc) = self.st.pgs.vc(id) {
                            vc.listed = false;
                        }
                        continue;
                    }
                }
                Err(e) => {
                    // A failed peer already had its requests completed with
                    // the error, a retired VC has nobody waiting on it;
                    // anything else stops the engine.
                    if !matches!(e, Error::PeerFailed { .. } | Error::NoRoute(_)) {
                        self.st.fail(format!("sending to {id}: {e}"));
                    }
                    self.st.pending_vcs.swap_remove(i);
                    if let Ok(vc) = self.st.pgs.vc(id) {
                        vc.listed = false;
                    }
                    continue;
                }
            }
            i += 1;
        }
        sent
    }

    /// (messages sent, queue now empty)
    fn flush_vc(&mut self, id: VcId) -> Result<(usize, bool)> {
        let mut sent = 0;
        loop {
            let vc = self.st.pgs.vc(id)?;
            let route = vc.route;
            let Some(front) = vc.pending.front_mut() else {
                return Ok((sent, true));
            };
            match front {
                Outgoing::Msg {
                    header,
                    buf,
                    len,
                    done,
                } => {
                    let (header, done) = (*header, *done);
                    // SAFETY: as in `send_or_queue`; the request `done` is
                    // not complete, so its buffer is still lent to us.
                    let payload = unsafe { bytes(*buf, *len) };
                    if !self.transmit(route, id, &header, payload)? {
                        return Ok((sent, false));
                    }
                    self.st.pgs.vc(id)?.pending.pop_front();
                    if done != 0 {
                        self.st.transmitted(done);
                    }
                }
                Outgoing::Owned { header, data } => {
                    let (header, data) = (*header, std::mem::take(data));
                    if !self.transmit(route, id, &header, &data)? {
                        if let Some(Outgoing::Owned { data: d, .. }) =
                            self.st.pgs.vc(id)?.pending.front_mut()
                        {
                            *d = data;
                        }
                        return Ok((sent, false));
                    }
                    self.st.pgs.vc(id)?.pending.pop_front();
                }
                Outgoing::Stream {
                    header,
                    buf,
                    len,
                    offset,
                    piece,
                    sreq,
                } => {
                    let end = (*offset + *piece).min(*len);
                    let mut h = *header;
                    h.len = *offset as u64;
                    let (start, total, sreq) = (*offset, *len, *sreq);
                    // SAFETY: the send request `sreq` is incomplete until
                    // the last piece is out, so `buf..buf+len` is lent to us.
                    let payload = unsafe { bytes(buf.add(start), end - start) };
                    if !self.transmit(route, id, &h, payload)? {
                        return Ok((sent, false));
                    }
                    let vc = self.st.pgs.vc(id)?;
                    if end >= total {
                        vc.pending.pop_front();
                        self.st.streamed(sreq);
                    } else if let Some(Outgoing::Stream { offset, .. }) = vc.pending.front_mut() {
                        *offset = end;
                    }
                }
            }
            sent += 1;
        }
    }
}

/// A peer's business card from the process manager's key-value space.
fn business_card(pmi: &Mutex<Option<Client>>, rank: u32) -> Result<String> {
    let mut pmi = pmi.lock().unwrap_or_else(|p| p.into_inner());
    let client = pmi.as_mut().ok_or(Error::Finalized)?;
    Ok(client.get(&crate::netmod::card_key(rank))?)
}

/// How the netmod hands arrivals to the protocols.
struct NetSink<'a> {
    st: &'a mut State,
}

impl NetSink<'_> {
    /// The VC a netmod peer id names, if we know it. Stragglers from a
    /// group already disconnected are dropped.
    fn vc(&mut self, peer: PeerId) -> Option<VcId> {
        let id = VcId::from_peer(peer);
        self.st.pgs.knows(id).then_some(id)
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
