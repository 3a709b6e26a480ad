//! `Inner`: what every `Engine`, `Comm` and `Request` points at, the
//! engine's workers, each its state behind its own lock (`thread.rs`), plus
//! what never changes after init. API calls take the lock of the worker
//! their communicator (or request handle) names, do their step, and let
//! go; blocking calls loop over `progress` with the `Backoff` policy
//! between empty polls, retaking the lock each turn so other threads get
//! their share, and now and then progress the other workers too (without
//! waiting for their locks), so nothing owed on another worker starves;
//! a worker found failed there (a netmod failure on any worker's instance)
//! fails the wait too, so the engine's failure reaches waits on every worker.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rivet_pmi::Client;

use crate::backoff::Backoff;
use crate::config::NetmodChoice;
use crate::core::Core;
use crate::error::{Error, Result};
use crate::group_events::GroupTable;
use crate::pg::{VcId, Vcrt};
use crate::pmi_watch::PmiWatch;
use crate::post::SendArgs;
use crate::status::Status;
use crate::table::worker_of;
use crate::thread::{EngineGuard, EngineLock, ThreadLevel};

pub struct Inner {
    /// Worker 0's state: everything not on a worker of its own (dynamic
    /// processes, other process groups, ports, the netmod they use) and
    /// the communicators mapped to it. Locked at MULTIPLE, unlocked below
    /// (`thread.rs`).
    pub(crate) core: EngineLock<Core>,
    /// Workers 1..: each its own requests, matching and send queues, its
    /// shared-memory lane and its netmod instance where the job has them
    /// (`thread.rs`); empty below MULTIPLE (in a one-node job on shared
    /// memory alone: unless its node leader runs at MULTIPLE).
    pub(crate) lanes: Box<[EngineLock<Core>]>,
    /// Workers communicators of our own world spread over (1 + lanes.len()).
    pub(crate) spread: u32,
    /// The level provided.
    pub(crate) level: ThreadLevel,
    pub(crate) rank: u32,
    pub(crate) size: u32,
    pub(crate) yields: bool,
    /// Next free context id on this process; `dup` agrees on the maximum.
    pub(crate) next_context: AtomicU32,
    /// Cold: business cards on first contact, abort and finalize. Lock
    /// order: the engine lock (`core`) before this one.
    pub(crate) pmi: Arc<Mutex<Option<Client>>>,
    /// Ends the process if the PMI connection hangs up; stopped at finalize.
    pub(crate) pmi_watch: Mutex<Option<PmiWatch>>,
    pub(crate) finalized: AtomicBool,
    pub(crate) info: Vec<(String, String)>,
    pub(crate) local_size: u32,
    /// Which netmod to open when dynamic processes need one later.
    pub(crate) netmod_choice: NetmodChoice,
    /// COMM_WORLD's VC table (an identity map, shared by its dups).
    pub(crate) world_vcrt: Arc<Vcrt>,
    /// COMM_SELF's: this process alone.
    pub(crate) self_vcrt: Arc<Vcrt>,
    /// VC tables alive (for the reference-count tests and `--info`).
    pub(crate) vcrts: AtomicUsize,
    /// Spawned processes: the intercommunicator to the parents, until it
    /// is disconnected (`Engine::parent` hands out handles on it).
    pub(crate) parent: Mutex<Option<ParentLink>>,
    /// Groups made by group connect, their events and handlers. Lock
    /// order: before the engine lock, never while holding it.
    pub(crate) groups: Mutex<GroupTable>,
    /// Under IMPI: which client each world rank runs under (chapter 4's
    /// collectives need it); unset otherwise.
    pub(crate) impi: std::sync::OnceLock<crate::impi_topo::ClientMap>,
}

/// The parent intercommunicator of a spawned process, as the engine keeps
/// it (the parts of a `Comm`, without a handle on this `Inner`).
pub(crate) struct ParentLink {
    pub context: u32,
    pub rank: u32,
    pub size: u32,
    pub local: Arc<Vcrt>,
    pub remote: Arc<Vcrt>,
    pub first: bool,
}

/// Idle turns of a blocking call between looks at the other workers.
const OTHERS_EVERY: u32 = 8;

/// The longest a parked wait blocks (`Inner::idle_turn`). Parking is only
/// done where everything that could give the worker work wakes the
/// netmod's kernel wait (no shared memory, one thread, one worker), so
/// this bounds only what nothing announces: none in tcp today (its
/// timers, the handshake deadline, are seconds). Each expiry costs the
/// parked process a wake-up; at 1 ms sixteen waiting ranks cost at most
/// 16 000 a second.
const PARK_TIMEOUT: Duration = Duration::from_millis(1);

impl Inner {
    #[inline]
    pub(crate) fn lock(&self) -> Result<EngineGuard<'_, Core>> {
        self.lock_on(0)
    }

    /// Worker `w`'s state (an unknown `w`, from a forged handle, is
    /// worker 0, whose table knows no such handle).
    #[inline]
    pub(crate) fn worker(&self, w: usize) -> &EngineLock<Core> {
        if w == 0 {
            return &self.core;
        }
        self.lanes.get(w - 1).unwrap_or(&self.core)
    }

    /// How many workers there are.
    pub(crate) fn workers(&self) -> usize {
        1 + self.lanes.len()
    }

    /// The worker of a communicator on `context` whose groups are all of
    /// our world (`world_only`): a function of the context id alone, the
    /// same on every rank (all ranks agree on `spread`, `thread.rs`).
    /// Contexts come in fours (`collective.rs`), so
    /// a communicator's own contexts share a worker and successive dups
    /// take successive workers. Anything else runs on worker 0.
    #[inline]
    pub(crate) fn worker_for(&self, context: u32, world_only: bool) -> usize {
        if self.spread <= 1 || !world_only {
            return 0;
        }
        ((context >> 2) % self.spread) as usize
    }

    #[inline]
    pub(crate) fn lock_on(&self, w: usize) -> Result<EngineGuard<'_, Core>> {
        if self.finalized.load(Ordering::Relaxed) {
            return Err(Error::Finalized);
        }
        Ok(self.worker(w).lock())
    }

    /// Progress every worker but `w` whose lock is free now (never waits
    /// for one): blocking calls do this every `OTHERS_EVERY` idle turns,
    /// so a request of another worker progresses while this thread waits
    /// (as MPICH's global progress does among its VCIs). A worker that has
    /// failed fails the caller's wait too: the engine failed (a netmod
    /// failure on worker 0 ends a wait on a lane, which would otherwise
    /// wait for a peer the engine no longer serves).
    #[inline]
    pub(crate) fn progress_others(&self, w: usize, idle_turns: &mut u32) -> Result<()> {
        if self.lanes.is_empty() {
            return Ok(());
        }
        *idle_turns += 1;
        if *idle_turns % OTHERS_EVERY != 0 {
            return Ok(());
        }
        self.progress_all_but(w).map(|_| ())
    }

    /// Progress once every worker but `w` whose lock is free now; the
    /// events handled. Fails as [`Inner::progress_others`] does.
    pub(crate) fn progress_all_but(&self, w: usize) -> Result<usize> {
        let mut events = 0;
        for other in (0..self.workers()).filter(|&o| o != w) {
            if let Some(mut core) = self.worker(other).try_lock() {
                events += core.progress();
                Self::check(&core)?;
            }
        }
        Ok(events)
    }

    #[inline]
    pub(crate) fn check(core: &Core) -> Result<()> {
        match core.st.fatal() {
            Some(why) => Err(failed(why)),
            None => Ok(()),
        }
    }

    /// The error of a failed peer, with the reason the transport gave.
    pub(crate) fn failure_of(&self, rank: u32) -> Error {
        let mut first = None;
        for w in 0..self.workers() {
            let core = self.worker(w).lock();
            match core.st.failed_with_rank(rank) {
                Some(vc) => return core.st.failure_of(vc),
                None if w == 0 => first = Some(core.st.failure_of(VcId::world(rank))),
                None => {}
            }
        }
        first.unwrap_or(Error::Finalized)
    }

    /// Fail `vc` on every worker that has it (a world VC is on each, a
    /// foreign one on worker 0 only): its requests run on whichever worker
    /// its communicator maps to, and one left unfailed there would wait
    /// for the netmod to notice the peer gone (ofi over `tcp;ofi_rxm`: a
    /// minute) or for ever.
    pub(crate) fn peer_failed_everywhere(&self, vc: VcId, why: &str) {
        for w in 0..self.workers() {
            self.worker(w).lock().st.peer_failed(vc, why);
        }
    }

    /// Start a send: its request's handle. A standard eager send that the
    /// transport takes at once needs no request at all: 0, finished.
    pub(crate) fn start_send(&self, w: usize, a: &SendArgs) -> Result<u64> {
        let mut core = self.lock_on(w)?;
        Self::check(&core)?;
        if core.try_send_now(a)? {
            return Ok(0);
        }
        core.start_send(a)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_recv(
        &self,
        w: usize,
        context: u32,
        buf: *mut u8,
        cap: usize,
        source: i32,
        source_vc: Option<VcId>,
        tag: i32,
    ) -> Result<u64> {
        let mut core = self.lock_on(w)?;
        Self::check(&core)?;
        Ok(core.start_recv(context, buf, cap, source, source_vc, tag))
    }

    /// An idle turn of a blocking call waiting on worker `w`: the
    /// backoff's spin, pause or yield, or, once it has yielded a while
    /// with nothing to do, a park (`Backoff::idle_or_park`).
    #[inline]
    pub(crate) fn idle_turn(&self, w: usize, backoff: &mut Backoff) {
        if backoff.idle_or_park() {
            self.park(w);
        }
    }

    /// Blocks in worker `w`'s netmod until something arrives or
    /// `PARK_TIMEOUT` passes (`Core::park`), holding its lock: only with
    /// one worker below MULTIPLE, where no other thread waits for that
    /// lock (or progresses another worker). Yields where it cannot park.
    #[cold]
    fn park(&self, w: usize) {
        if self.lanes.is_empty() && self.level < ThreadLevel::Multiple {
            if let Ok(mut core) = self.lock_on(w) {
                if core.park(PARK_TIMEOUT) {
                    return;
                }
            }
        }
        std::thread::yield_now();
    }

    /// Poll up to [`Backoff::polls_per_hold`] times under the caller's
    /// hold of the worker (so only these polls complete its requests);
    /// true once one made progress.
    #[inline]
    pub(crate) fn poll_a_while(core: &mut Core, backoff: &Backoff) -> bool {
        (0..backoff.polls_per_hold()).any(|_| core.progress() > 0)
    }

    /// The status if `id` is complete (freeing it); a freed handle counts
    /// as complete with an empty status.
    #[inline]
    pub(crate) fn take_if_complete(core: &mut Core, id: u64) -> Option<Status> {
        core.st.take_if_complete(id)
    }

    pub(crate) fn test(&self, id: u64) -> Result<Option<Status>> {
        let mut core = self.lock_on(worker_of(id))?;
        if let Some(s) = Self::take_if_complete(&mut core, id) {
            return Ok(Some(s));
        }
        core.progress();
        if let Some(s) = Self::take_if_complete(&mut core, id) {
            return Ok(Some(s));
        }
        Self::check(&core)?;
        Ok(None)
    }

    pub(crate) fn wait(&self, id: u64) -> Result<Status> {
        let mut backoff = Backoff::new(self.yields);
        let w = worker_of(id);
        let mut idle = 0;
        loop {
            {
                let mut core = self.lock_on(w)?;
                if let Some(s) = Self::take_if_complete(&mut core, id) {
                    return Ok(s);
                }
                if Self::poll_a_while(&mut core, &backoff) {
                    backoff.busy();
                    if let Some(s) = Self::take_if_complete(&mut core, id) {
                        return Ok(s);
                    }
                }
                Self::check(&core)?;
            }
            self.progress_others(w, &mut idle)?;
            self.idle_turn(w, &mut backoff);
        }
    }

    pub(crate) fn cancel(&self, id: u64) -> Result<()> {
        self.lock_on(worker_of(id))?.cancel(id)
    }

    /// Nobody will wait for `id`: free it now if complete, else on completion.
    pub(crate) fn detach(&self, id: u64) {
        self.worker(worker_of(id)).lock().st.detach(id);
    }

    /// Withdraw `ids`, whose buffers are about to be released: a scope
    /// ending on an error or unwinding from a panic (`unwinding`), or a
    /// blocking call that failed or is unwinding.
    ///
    /// The rule: no buffer is released while a netmod, a netmod read or a
    /// peer's single-copy write may still write into it, i.e. a receive
    /// streaming from a netmod peer (the netmod may have been handed the
    /// buffer, `State::placement`), reading from one (`state/rma.rs`), or sharing
    /// its copy with a shared-memory sender (`state/copy.rs`). Such a receive is finished first (or
    /// failed with its peer) if the engine can still do that; during a
    /// panic, or once the engine has failed, the process aborts instead:
    /// an unwind must not free memory the netmod is writing, and waiting
    /// inside it for a peer could hang forever. Everything else is
    /// withdrawn at once: shared-memory copies and our own single-copy
    /// reads are done under the engine lock, and a transport copies what
    /// it takes of a send.
    pub(crate) fn abandon(&self, ids: &[u64], unwinding: bool) {
        // Each worker withdraws its own handles (the others' are stale in
        // its table).
        for w in 0..self.workers() {
            self.abandon_on(w, ids, unwinding);
        }
    }

    fn abandon_on(&self, w: usize, ids: &[u64], unwinding: bool) {
        let mut backoff = Backoff::new(self.yields);
        let mut idle = 0;
        loop {
            {
                let mut core = self.worker(w).lock();
                let writer = ids.iter().find_map(|&id| core.st.remote_writer(id));
                let Some(from) = writer else {
                    core.abandon(ids);
                    return;
                };
                if unwinding || core.st.fatal().is_some() {
                    abort_for_live_buffer(from, unwinding);
                }
                core.progress();
            }
            // A failure elsewhere does not free this buffer's writer: the
            // check above aborts once this worker knows of it.
            let _ = self.progress_others(w, &mut idle);
            backoff.idle();
        }
    }

    pub(crate) fn iprobe(
        &self,
        w: usize,
        context: u32,
        source: i32,
        tag: i32,
    ) -> Result<Option<Status>> {
        let mut core = self.lock_on(w)?;
        if let Some(s) = core.st.probe(context, source, tag) {
            return Ok(Some(s));
        }
        core.progress();
        Self::check(&core)?;
        Ok(core.st.probe(context, source, tag))
    }

    /// A matched probe: the taken message's handle and status, if one
    /// matches now (after one progress call).
    pub(crate) fn improbe(
        &self,
        w: usize,
        context: u32,
        source: i32,
        tag: i32,
    ) -> Result<Option<(u64, Status)>> {
        let mut core = self.lock_on(w)?;
        if let Some(found) = core.st.take_matching(context, source, tag) {
            return Ok(Some(found));
        }
        core.progress();
        Self::check(&core)?;
        Ok(core.st.take_matching(context, source, tag))
    }

    pub(crate) fn mprobe(
        &self,
        w: usize,
        context: u32,
        source: i32,
        tag: i32,
    ) -> Result<(u64, Status)> {
        let mut backoff = Backoff::new(self.yields);
        let mut idle = 0;
        loop {
            if let Some(found) = self.improbe(w, context, source, tag)? {
                return Ok(found);
            }
            self.progress_others(w, &mut idle)?;
            backoff.idle();
        }
    }

    /// Start receiving held message `key` into `buf..buf+cap`.
    pub(crate) fn receive_held(&self, key: u64, buf: *mut u8, cap: usize) -> Result<u64> {
        Ok(self
            .worker(worker_of(key))
            .lock()
            .st
            .receive_held(key, buf, cap))
    }

    pub(crate) fn probe(&self, w: usize, context: u32, source: i32, tag: i32) -> Result<Status> {
        let mut backoff = Backoff::new(self.yields);
        let mut idle = 0;
        loop {
            if let Some(s) = self.iprobe(w, context, source, tag)? {
                return Ok(s);
            }
            self.progress_others(w, &mut idle)?;
            backoff.idle();
        }
    }

    /// Send everything still owed to peers, then tell the process manager.
    pub(crate) fn finalize(&self) -> Result<()> {
        if self.finalized.load(Ordering::Relaxed) {
            return Ok(());
        }
        // The engine's own handle on the parent intercommunicator goes first
        // (its VC tables give back their references while we still can).
        let parent = self.parent.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(parent);
        // What peers are owed first; then a goodbye to each netmod peer, so
        // that our connections closing is not taken for a failure, and
        // theirs in answer: after it a peer sends us nothing more, so we
        // exit without leaving it talking to a closed endpoint (which some
        // providers retry until a timeout rather than fail).
        self.drain(|core| !core.st.sends_in_flight());
        for w in 0..self.workers() {
            self.worker(w).lock().st.say_bye();
        }
        self.drain(|core| core.st.byes_answered());
        self.finalized.store(true, Ordering::Relaxed);
        // Local peers then take our process ending for a goodbye, not a failure.
        if let Some(shm) = self.lock_even_finalized().shm() {
            shm.mark_finalized();
        }
        // The process manager may close the connection once we finalized.
        let watch = self
            .pmi_watch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        drop(watch);
        let client = self.pmi.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(client) = client {
            client.finalize()?;
        }
        Ok(())
    }

    /// Progress every worker until, in each, `done` holds and nothing
    /// waits to be sent, in the engine's queues or the netmod's, or that
    /// worker has failed.
    pub(crate) fn drain(&self, done: impl Fn(&mut Core) -> bool) {
        let mut backoff = Backoff::new(self.yields);
        loop {
            let mut all = true;
            for w in 0..self.workers() {
                let mut core = self.worker(w).lock();
                core.progress();
                let net_idle = core.netmod().is_none_or(|n| n.idle());
                let drained = net_idle && !core.st.sends_queued() && done(&mut core);
                all &= drained || core.st.fatal().is_some();
            }
            if all {
                return;
            }
            backoff.idle();
        }
    }

    #[inline]
    pub(crate) fn lock_even_finalized(&self) -> EngineGuard<'_, Core> {
        self.core.lock()
    }
}

#[cold]
fn failed(why: &str) -> Error {
    Error::Failed(why.to_owned())
}

/// A buffer about to be released may still be written into by `from`'s
/// netmod, and the engine can neither finish nor wait for that: end the
/// process rather than let the write land in freed memory.
#[cold]
fn abort_for_live_buffer(from: VcId, unwinding: bool) -> ! {
    let why = match unwinding {
        true => "a panic is unwinding",
        false => "the engine failed",
    };
    eprintln!(
        "rivet: {why} while {from} may still be writing into a receive buffer; aborting \
         rather than releasing the buffer"
    );
    std::process::abort()
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.finalize();
    }
}

#[cfg(test)]
#[path = "inner_tests.rs"]
mod tests;
