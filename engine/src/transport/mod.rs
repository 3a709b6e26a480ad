//! The transports behind one shape.
//!
//! A VC names its transport by its `Route` (`route.rs`); each transport
//! answers the same questions: its `Limits` (eager size, rendezvous
//! piece), `try_send` (take one message or say it is full), `poll` (hand
//! arrivals to the protocols) and `read` (its one-sided read of a
//! rendezvous sender's buffer: shared memory's is CMA, `process_vm_readv`
//! from the pid in the sender's segment slot; a netmod's is its `Rma`).
//! `Transports` holds one of each that is open and dispatches by route with
//! a `match`, never a `dyn` call on the shared-memory path.
//!
//! - `shm.rs`: `ShmLink`, the node segment's lane (`shm::ShmNode`) with its
//!   local peers' watch, as a transport.
//! - `net.rs`: `NetLink`, the netmod (`rivet_netmods::Netmod`) as a
//!   transport, with its poll cadence and the `Sink` it hands arrivals to.
//!
//! Reads: the protocols only record a matched rendezvous receive's wish
//! (`State::rma.wanted`, in `deliver`, where a transport is borrowed);
//! `Transports::run_reads` then reads by route after the poll, so one
//! rendezvous read path serves both.

mod net;
mod shm;

pub use net::NetLink;
pub use shm::ShmLink;

use crate::error::Result;
use crate::route::{Limits, Route};
use crate::state::{ReadWant, State};
use crate::wire::WireHeader;

/// Messages handed to `deliver` per transport per progress call.
pub const POLL_BUDGET: usize = 32;

/// The shape every transport has. Implemented by `ShmLink` and `NetLink`,
/// called through `Transports` by route (static dispatch).
pub trait Transport {
    /// How the transport names a peer.
    type Peer: Copy;
    /// Its limits, fixed once it is open.
    fn limits(&self) -> Limits;
    /// Take one message for `peer`; `Ok(false)`: no room now.
    fn try_send(&mut self, peer: Self::Peer, header: &WireHeader, payload: &[u8]) -> Result<bool>;
    /// Hand what arrived to the protocols; the number of events.
    fn poll(&mut self, st: &mut State) -> Result<usize>;
    /// Start the one-sided read `w` (the sender's buffer at `w.addr`) into
    /// `dst`, `w.len` bytes long.
    ///
    /// # Safety
    /// `dst..dst+w.len` must stay the receive's alone until the read ends
    /// (`ReadStart::Done` or `Refused`, or its end reported by
    /// `poll_reads`).
    unsafe fn read(
        &mut self,
        st: &mut State,
        peer: Self::Peer,
        w: &ReadWant,
        dst: *mut u8,
    ) -> ReadStart;
}

/// How a one-sided read started.
pub enum ReadStart {
    /// All bytes are in place already.
    Done,
    /// Posted; its end comes from `NetLink::poll_reads` under this token.
    Posted(u64),
    /// Not possible (nothing written): the sender streams instead.
    Refused,
}

/// The open transports of one worker.
#[derive(Default)]
pub struct Transports {
    /// This worker's lane of the node segment.
    pub shm: Option<ShmLink>,
    /// Peers off the node (or every peer, when `RIVET_NETMOD` forces it);
    /// worker 0's only.
    pub net: Option<NetLink>,
}

impl Transports {
    /// The pid of each local rank as its slot in the node segment says
    /// (for single copies; empty until every local rank has attached).
    pub fn shm_pids(&self) -> &[u32] {
        self.shm.as_ref().map_or(&[], ShmLink::pids)
    }

    /// Poll every open transport once (the netmod at its cadence).
    /// Inline: it runs once per progress call, busy or idle.
    /// Without shared memory the netmod is polled every call, with no
    /// cadence to keep; failures are reported out of line.
    #[inline]
    pub fn poll(&mut self, st: &mut State) -> usize {
        let mut events = 0;
        let due = match self.shm.as_mut() {
            Some(shm) => {
                match shm.poll(st) {
                    Ok(n) => events += n,
                    Err(e) => shm_failed(st, e),
                }
                self.net.as_mut().is_some_and(|net| net.due(events != 0))
            }
            None => true,
        };
        if due {
            events += self.poll_net(st);
        }
        events
    }

    /// Poll the netmod, if one is open (`poll` without shared memory).
    #[inline]
    pub fn poll_net(&mut self, st: &mut State) -> usize {
        match self.net.as_mut().map(|net| net.poll(st)) {
            Some(Ok(n)) => n,
            Some(Err(e)) => {
                let name = self.net.as_ref().map_or("", NetLink::name);
                net_failed(st, name, e);
                0
            }
            None => 0,
        }
    }

    /// Have the netmod stop failed peers' reads (then fail their
    /// receives), post the reads the protocols asked for, by route, and
    /// report ended ones: a read done completes its receive and answers
    /// `Ack`, a refused one asks the sender to stream (`Cts`).
    pub fn run_reads(&mut self, st: &mut State) -> usize {
        let mut events = 0;
        for vc in st.take_reads_to_stop() {
            // A VC's id is its netmod peer id; reads in flight are netmod
            // reads (shared memory reads before returning).
            let stopped = self.net.as_mut().is_none_or(|net| net.stop_reads(vc.0));
            if stopped {
                st.reads_stopped(vc);
                events += 1;
            } else {
                st.fail(format!(
                    "the netmod could not stop its reads from failed {vc}: their receive \
                     buffers may still be written"
                ));
            }
        }
        if let Some(net) = self.net.as_mut() {
            net.release(st);
        }
        for w in st.take_wanted_reads() {
            // Failed with its peer or abandoned meanwhile: nothing to read.
            let Some(dst) = st.reading_buf(&w) else {
                continue;
            };
            let route = st.vc(w.from).map_or(Route::Loopback, |vc| vc.route);
            // SAFETY: the receive owns `dst..dst+cap`, `len <= cap`, and it
            // stays in the Reading phase (so `abandon` waits for a netmod
            // read and nothing else writes there) until the read ends.
            let start = unsafe {
                match (route, self.shm.as_mut(), self.net.as_mut()) {
                    (Route::Shm(peer), Some(shm), _) => shm.read(st, peer, &w, dst),
                    (Route::Netmod(peer), _, Some(net)) => net.read(st, peer, &w, dst),
                    _ => ReadStart::Refused,
                }
            };
            events += 1;
            match (start, route) {
                (ReadStart::Done, Route::Shm(_)) => st.single_copy_done(w),
                (ReadStart::Done, _) => st.netmod_read_done(w),
                (ReadStart::Posted(token), _) => {
                    st.read_posted(token, w);
                    events -= 1;
                }
                (ReadStart::Refused, Route::Shm(_)) => st.read_refused(w),
                (ReadStart::Refused, _) => st.netmod_read_refused(w),
            }
        }
        match self.net.as_mut() {
            Some(net) => events += net.poll_reads(st),
            // No netmod (or no RMA) any more: nothing will end these.
            None => st.reads_lost(),
        }
        events
    }
}

#[cold]
#[inline(never)]
fn shm_failed(st: &mut State, e: crate::error::Error) {
    st.fail(format!("shared memory: {e}"));
}

#[cold]
#[inline(never)]
fn net_failed(st: &mut State, name: &str, e: crate::error::Error) {
    st.fail(format!("{name} netmod: {e}"));
}
