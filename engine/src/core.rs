//! One worker's state behind its lock, and the progress loop.
//!
//! `Core` is everything a worker mutates: its transports (`tx`,
//! `transport/`: its shm lane, its netmod instance), and the protocol
//! `State` (requests, matching, VCs). Each worker's `Core` lives in its own `EngineLock`
//! (`Inner::core` for worker 0, `Inner::lanes` for the others; `thread.rs`).
//! Why one lock per worker rather than finer ones: MPI matching is serial
//! per context by definition (non-overtaking order), posting and arrival
//! must see one consistent queue, and the shm send side of a lane's pair is
//! single-producer; so a context stays on one worker. Uncontended the lock
//! costs one atomic exchange (release is a plain store); `rivet-bench mr
//! --threads 2` measures it. Everything crossing processes (shm rings and
//! queues) is lock-free.
//!
//! Transports hand arrivals to `State::deliver` (`state/protocol.rs`; the netmod
//! through its `Sink`, which also offers it receive buffers to fill
//! directly and learns of failed peers), which never
//! sends directly (a rendezvous read it wants runs after the poll,
//! `Transports::run_reads`): replies go to the VC's pending queue and `flush` sends
//! them once the transport is free again. That keeps the borrow of the shm
//! receive slot and the send side apart, and keeps per-pair send order.

use std::sync::{Arc, Mutex};

use rivet_netmods::Netmod;
use rivet_pmi::Client;

use crate::error::{Error, Result};
use crate::netmod::CardKeys;
use crate::pg::{Outgoing, VcId};
use crate::route::Route;
use crate::shm::ShmNode;
use crate::state::{bytes, State};
use crate::transport::{NetLink, ShmLink, Transport, Transports};
use crate::wire::WireHeader;

pub struct Core {
    /// The open transports: this worker's shm lane and netmod instance.
    pub tx: Transports,
    /// Where peers' business cards are looked up on first contact; shared
    /// with `Inner` (lock order: the engine lock, then this one).
    pub pmi: Arc<Mutex<Option<Client>>>,
    /// Which of a peer's cards this worker's netmod connects to: the
    /// peer's instance of the same worker (`netmod::CardKeys`).
    pub cards: CardKeys,
    pub st: State,
    /// Waits that blocked in the netmod (`park`), for `info`.
    pub parked: u64,
}

// SAFETY: the raw buffer pointers in requests and pending messages are only
// dereferenced under the engine lock, and the API contract (scopes, blocking
// calls, or the caller of an `unsafe *_raw` call) keeps each buffer valid
// until its request completes, whichever thread drives progress.
unsafe impl Send for Core {}

impl Core {
    /// A worker on these transports; `st.limits` takes the netmod's
    /// (shared memory's are set up with `st`).
    pub fn new(
        shm: Option<ShmNode>,
        netmod: Option<Box<dyn Netmod>>,
        pmi: Arc<Mutex<Option<Client>>>,
        st: State,
    ) -> Core {
        let shm = shm.map(|node| ShmLink::new(node, st.limits().shm));
        let mut core = Core {
            tx: Transports { shm, net: None },
            pmi,
            cards: CardKeys::ONE,
            st,
            parked: 0,
        };
        if let Some(net) = netmod {
            core.open_netmod(net);
        }
        core
    }

    /// Take the netmod (opened at init, or later for dynamic processes).
    pub fn open_netmod(&mut self, net: Box<dyn Netmod>) {
        let link = NetLink::new(net);
        self.st.netmod_opened(link.limits());
        self.tx.net = Some(link);
    }

    /// The netmod, if one is open.
    pub fn netmod(&self) -> Option<&dyn Netmod> {
        self.tx.net.as_ref().map(NetLink::netmod)
    }

    pub fn netmod_mut(&mut self) -> Option<&mut dyn Netmod> {
        self.tx.net.as_mut().map(NetLink::netmod_mut)
    }

    /// This worker's lane of the node segment, if shared memory is on.
    pub fn shm(&self) -> Option<&ShmNode> {
        self.tx.shm.as_ref().map(ShmLink::node)
    }

    /// Poll every transport once, then send what was waiting for room.
    ///
    /// A worker on shared memory alone with nothing in flight and nothing
    /// arrived is answered inline, without the full poll's call: that is
    /// every round of a waiting loop, and the shorter the round, the sooner
    /// the loop sees an arrival.
    ///
    /// A worker on a netmod alone (no shared-memory lane) polls it in
    /// `progress_net`, which goes on to the rest of `progress_all` only if
    /// the poll left work: that is every round of a waiting loop over tcp.
    #[inline(always)]
    pub fn progress(&mut self) -> usize {
        if self.tx.net.is_none()
            && !self.st.sends_queued()
            && !self.st.reads_busy()
            && !self.st.copies_busy()
        {
            if let Some(shm) = self.tx.shm.as_mut() {
                if shm.looks_idle() {
                    return shm.idle_turn(&mut self.st);
                }
            }
        }
        if self.tx.shm.is_none() && self.tx.net.is_some() {
            return self.progress_net();
        }
        self.progress_all()
    }

    /// `progress_all` of a worker with a netmod and no shared memory:
    /// the poll, then the rest out of line only if there is any (so the
    /// empty poll of a waiting loop saves and restores few registers).
    #[inline(never)]
    fn progress_net(&mut self) -> usize {
        let events = self.tx.poll_net(&mut self.st);
        if self.st.reads_busy() || self.st.sends_queued() || self.st.copies_busy() {
            return self.after_net_poll(events);
        }
        events
    }

    #[inline(never)]
    fn after_net_poll(&mut self, events: usize) -> usize {
        self.after_poll(events)
    }

    #[inline(never)]
    fn progress_all(&mut self) -> usize {
        let events = self.tx.poll(&mut self.st);
        self.after_poll(events)
    }

    /// What a progress call does after its poll (that found `events`):
    /// reads, sends waiting for room, copies, and shared memory's idle
    /// turn.
    #[inline]
    fn after_poll(&mut self, mut events: usize) -> usize {
        if self.st.reads_busy() {
            events += self.tx.run_reads(&mut self.st);
        }
        if self.st.sends_queued() {
            events += self.flush();
        }
        if self.st.copies_busy() {
            events += self.st.run_copies(self.tx.shm_pids());
            if self.st.sends_queued() {
                events += self.flush();
            }
        }
        if events == 0 {
            if let Some(shm) = self.tx.shm.as_mut() {
                events += shm.idle_turn(&mut self.st);
            }
        }
        events
    }

    /// Block in the netmod until something arrives or `timeout` passes
    /// (`Netmod::park`), if nothing but the netmod could give this worker
    /// work: no shared-memory lane (its arrivals wake nobody), nothing
    /// queued to send, no read or copy running. True if it blocked.
    pub fn park(&mut self, timeout: std::time::Duration) -> bool {
        if self.tx.shm.is_some()
            || self.st.sends_queued()
            || self.st.reads_busy()
            || self.st.copies_busy()
        {
            return false;
        }
        let parked = self
            .tx
            .net
            .as_mut()
            .is_some_and(|net| net.netmod_mut().park(timeout));
        self.parked += parked as u64;
        parked
    }

    /// Send a message now if its VC has nothing queued and the transport has
    /// room; else queue it. `Ok(true)`: it went out now.
    #[inline]
    pub fn send_or_queue(&mut self, id: VcId, item: Outgoing) -> Result<bool> {
        let vc = self.st.vc(id)?;
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

    /// Hand one message to the VC's transport (by its route); `Ok(false)`
    /// if it is full. Shared memory is the inline path; the others go out of
    /// line.
    #[inline(always)]
    pub(crate) fn transmit(
        &mut self,
        route: Route,
        id: VcId,
        header: &WireHeader,
        payload: &[u8],
    ) -> Result<bool> {
        if let (Route::Shm(peer), Some(shm)) = (route, self.tx.shm.as_mut()) {
            return shm.try_send(peer, header, payload);
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
                let Some(net) = self.tx.net.as_mut() else {
                    return Err(Error::NoRoute(id));
                };
                // The send first: a netmod refuses a peer it does not
                // know yet, which is connected then and sent to again (a
                // lookup less per message than asking every time).
                match net.send(peer, header, payload) {
                    Ok(taken) => Ok(taken),
                    Err(e) => self.net_refused(id, peer, header, payload, e),
                }
            }
        }
    }

    /// The netmod refused a message to `peer` with `e`: connect on first
    /// contact and send again, else (or if that fails too) fail the peer.
    /// Also `Core::try_send_now`'s, which sends to a netmod peer itself.
    #[cold]
    #[inline(never)]
    pub(crate) fn net_refused(
        &mut self,
        id: VcId,
        peer: rivet_netmods::PeerId,
        header: &WireHeader,
        payload: &[u8],
        e: rivet_netmods::NetmodError,
    ) -> Result<bool> {
        let Some(net) = self.tx.net.as_mut() else {
            return Err(Error::NoRoute(id));
        };
        let mut r = Err(e);
        if !net.netmod().knows(peer) {
            connect_first(net, &self.st, &self.pmi, self.cards, id, peer)?;
            r = net.send(peer, header, payload);
        }
        match r {
            Ok(taken) => Ok(taken),
            Err(e) => {
                self.st.peer_failed(id, &e.to_string());
                Err(self.st.failure_of(id))
            }
        }
    }

    /// Send queued messages, oldest first per VC, until transports fill up.
    pub fn flush(&mut self) -> usize {
        let mut sent = 0;
        let mut i = 0;
        while let Some(id) = self.st.queued_vc(i) {
            match self.flush_vc(id) {
                Ok((n, empty)) => {
                    sent += n;
                    if empty {
                        self.st.unlist_queued(i);
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
                    self.st.unlist_queued(i);
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
            let vc = self.st.vc(id)?;
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
                    self.st.vc(id)?.pending.pop_front();
                    if done != 0 {
                        self.st.transmitted(done);
                    }
                }
                Outgoing::Owned { header, data } => {
                    let (header, data) = (*header, std::mem::take(data));
                    if !self.transmit(route, id, &header, &data)? {
                        if let Some(Outgoing::Owned { data: d, .. }) =
                            self.st.vc(id)?.pending.front_mut()
                        {
                            *d = data;
                        }
                        return Ok((sent, false));
                    }
                    self.st.vc(id)?.pending.pop_front();
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
                    let vc = self.st.vc(id)?;
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

/// First contact with `id` through this worker's netmod: its card (from
/// its process group, else the KVS), then the connection. Out of line, so
/// that a send to a known peer builds nothing for it.
#[cold]
#[inline(never)]
fn connect_first(
    net: &mut NetLink,
    st: &State,
    pmi: &Mutex<Option<Client>>,
    cards: CardKeys,
    id: VcId,
    peer: rivet_netmods::PeerId,
) -> Result<()> {
    net.ensure_connected(peer, || match st.card(id) {
        Some(card) => Ok(card.to_string()),
        None if id.group() == 0 => business_card(pmi, cards, id.rank()),
        None => Err(Error::NoRoute(id)),
    })
}

/// A peer's business card for this worker from the process manager's
/// key-value space. None there while the peer runs: the peer published
/// its cards for another number of workers (`netmod::CardKeys`).
#[cold]
fn business_card(pmi: &Mutex<Option<Client>>, cards: CardKeys, rank: u32) -> Result<String> {
    let mut pmi = pmi.lock().unwrap_or_else(|p| p.into_inner());
    let client = pmi.as_mut().ok_or(Error::Finalized)?;
    let key = cards.key(rank);
    client.get(&key).map_err(|e| {
        Error::Failed(format!(
            "no netmod card {key:?} for rank {rank} ({e}); this rank runs {} worker(s): every \
             rank of a job with a netmod must run with the same number of workers (all at \
             MULTIPLE with the same RIVET_WORKERS, or all below MULTIPLE)",
            cards.workers
        ))
    })
}
