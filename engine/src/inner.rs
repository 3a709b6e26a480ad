//! `Inner`: what every `Engine`, `Comm` and `Request` points at, the
//! engine's state behind its lock (`thread.rs`) plus what never changes
//! after init. API calls take the lock, do their step, and let go;
//! blocking calls loop over `progress` with the `Backoff` policy between
//! empty polls, retaking the lock each turn so other threads get their
//! share.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rivet_pmi::Client;

use crate::backoff::Backoff;
use crate::config::NetmodChoice;
use crate::core::Core;
use crate::dynamic::GroupTable;
use crate::error::{Error, Result};
use crate::pg::{VcId, Vcrt};
use crate::pmi_watch::PmiWatch;
use crate::post::SendArgs;
use crate::status::Status;
use crate::table::Op;
use crate::thread::{EngineGuard, EngineLock, ThreadLevel};

pub struct Inner {
    /// The engine's state: locked at MULTIPLE, unlocked below (`core.rs`
    /// says why one lock, `thread.rs` how it is dropped).
    pub(crate) core: EngineLock<Core>,
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
    pub(crate) impi: std::sync::OnceLock<crate::impi_coll::ClientMap>,
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

impl Inner {
    #[inline]
    pub(crate) fn lock(&self) -> Result<EngineGuard<'_, Core>> {
        if self.finalized.load(Ordering::Relaxed) {
            return Err(Error::Finalized);
        }
        Ok(self.lock_even_finalized())
    }

    #[inline]
    pub(crate) fn check(core: &Core) -> Result<()> {
        match &core.st.fatal {
            Some(why) => Err(failed(why)),
            None => Ok(()),
        }
    }

    /// The error of a failed peer, with the reason the transport gave.
    pub(crate) fn failure_of(&self, rank: u32) -> Error {
        let core = self.lock_even_finalized();
        let vc = core
            .st
            .failed_peers
            .iter()
            .map(|(vc, _)| *vc)
            .find(|vc| vc.rank() == rank)
            .unwrap_or(VcId::world(rank));
        core.st.failure_of(vc)
    }

    /// Start a send: its request's handle. A standard eager send that the
    /// transport takes at once needs no request at all: 0, finished.
    pub(crate) fn start_send(&self, a: &SendArgs) -> Result<u64> {
        let mut core = self.lock()?;
        Self::check(&core)?;
        if core.try_send_now(a)? {
            return Ok(0);
        }
        core.start_send(a)
    }

    pub(crate) fn start_recv(
        &self,
        context: u32,
        buf: *mut u8,
        cap: usize,
        source: i32,
        source_vc: Option<VcId>,
        tag: i32,
    ) -> Result<u64> {
        let mut core = self.lock()?;
        Self::check(&core)?;
        Ok(core.start_recv(context, buf, cap, source, source_vc, tag))
    }

    /// The status if `id` is complete (freeing it); a freed handle counts
    /// as complete with an empty status.
    #[inline]
    pub(crate) fn take_if_complete(core: &mut Core, id: u64) -> Option<Status> {
        match core.st.requests.get(id) {
            Some(req) if req.complete => {
                let status = req.status;
                core.st.requests.remove(id);
                Some(status)
            }
            Some(_) => None,
            None => Some(Status::default()),
        }
    }

    pub(crate) fn test(&self, id: u64) -> Result<Option<Status>> {
        let mut core = self.lock()?;
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
        loop {
            {
                let mut core = self.lock()?;
                if let Some(s) = Self::take_if_complete(&mut core, id) {
                    return Ok(s);
                }
                if core.progress() > 0 {
                    backoff.busy();
                    if let Some(s) = Self::take_if_complete(&mut core, id) {
                        return Ok(s);
                    }
                }
                Self::check(&core)?;
            }
            backoff.idle();
        }
    }

    pub(crate) fn cancel(&self, id: u64) -> Result<()> {
        self.lock()?.cancel(id)
    }

    /// Nobody will wait for `id`: free it now if complete, else on completion.
    pub(crate) fn detach(&self, id: u64) {
        let mut core = self.lock_even_finalized();
        if let Some(req) = core.st.requests.get_mut(id) {
            if req.complete {
                core.st.requests.remove(id);
            } else {
                req.detached = true;
            }
        }
    }

    /// Withdraw `ids`, whose buffers are about to be released: a scope
    /// ending on an error or unwinding from a panic (`unwinding`), or a
    /// blocking call that failed or is unwinding.
    ///
    /// The rule: no buffer is released while a netmod, a netmod read or a
    /// peer's single-copy write may still write into it, i.e. a receive
    /// streaming from a netmod peer (the netmod may have been handed the
    /// buffer, `State::placement`), reading from one (`rma.rs`), or sharing
    /// its copy with a shared-memory sender (`copy.rs`). Such a receive is finished first (or
    /// failed with its peer) if the engine can still do that; during a
    /// panic, or once the engine has failed, the process aborts instead:
    /// an unwind must not free memory the netmod is writing, and waiting
    /// inside it for a peer could hang forever. Everything else is
    /// withdrawn at once: shared-memory copies and our own single-copy
    /// reads are done under the engine lock, and a transport copies what
    /// it takes of a send.
    pub(crate) fn abandon(&self, ids: &[u64], unwinding: bool) {
        let mut backoff = Backoff::new(self.yields);
        loop {
            {
                let mut core = self.lock_even_finalized();
                let writer = ids.iter().find_map(|&id| core.st.remote_writer(id));
                let Some(from) = writer else {
                    core.abandon(ids);
                    return;
                };
                if unwinding || core.st.fatal.is_some() {
                    abort_for_live_buffer(from, unwinding);
                }
                core.progress();
            }
            backoff.idle();
        }
    }

    pub(crate) fn iprobe(&self, context: u32, source: i32, tag: i32) -> Result<Option<Status>> {
        let mut core = self.lock()?;
        let found = |core: &Core| {
            core.st
                .matcher
                .probe(context, source, tag)
                .map(|(env, m)| Status {
                    source: env.source as i32,
                    tag: env.tag,
                    count: m.len(),
                    cancelled: false,
                    error: None,
                })
        };
        if let Some(s) = found(&core) {
            return Ok(Some(s));
        }
        core.progress();
        Self::check(&core)?;
        Ok(found(&core))
    }

    /// A matched probe: the taken message's handle and status, if one
    /// matches now (after one progress call).
    pub(crate) fn improbe(
        &self,
        context: u32,
        source: i32,
        tag: i32,
    ) -> Result<Option<(u64, Status)>> {
        let mut core = self.lock()?;
        if let Some(found) = core.take_matching(context, source, tag) {
            return Ok(Some(found));
        }
        core.progress();
        Self::check(&core)?;
        Ok(core.take_matching(context, source, tag))
    }

    pub(crate) fn mprobe(&self, context: u32, source: i32, tag: i32) -> Result<(u64, Status)> {
        let mut backoff = Backoff::new(self.yields);
        loop {
            if let Some(found) = self.improbe(context, source, tag)? {
                return Ok(found);
            }
            backoff.idle();
        }
    }

    /// Start receiving held message `key` into `buf..buf+cap`.
    pub(crate) fn receive_held(&self, key: u64, buf: *mut u8, cap: usize) -> Result<u64> {
        Ok(self.lock_even_finalized().receive_held(key, buf, cap))
    }

    pub(crate) fn probe(&self, context: u32, source: i32, tag: i32) -> Result<Status> {
        let mut backoff = Backoff::new(self.yields);
        loop {
            if let Some(s) = self.iprobe(context, source, tag)? {
                return Ok(s);
            }
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
        self.drain(|core| {
            !core
                .st
                .requests
                .any(|r| !r.complete && matches!(r.op, Op::Send(_)))
        });
        self.lock_even_finalized().st.say_bye();
        self.drain(|core| core.st.byes_answered());
        self.finalized.store(true, Ordering::Relaxed);
        // Local peers then take our process ending for a goodbye, not a failure.
        if let Some(shm) = self.lock_even_finalized().shm.as_ref() {
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

    /// Progress until `done` holds and nothing waits to be sent, in the
    /// engine's queues or the netmod's, or until the engine has failed.
    pub(crate) fn drain(&self, done: impl Fn(&mut Core) -> bool) {
        let mut backoff = Backoff::new(self.yields);
        loop {
            {
                let mut core = self.lock_even_finalized();
                core.progress();
                let net_idle = core.netmod.as_ref().is_none_or(|n| n.idle());
                if (net_idle && core.st.pending_vcs.is_empty() && done(&mut core))
                    || core.st.fatal.is_some()
                {
                    return;
                }
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
