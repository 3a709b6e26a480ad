//! Calls by plain handle, for the C ABI (`rivet-capi`) and other callers
//! that keep requests in their own tables: requests and matched messages
//! as `u64` handles instead of Rust values that borrow a communicator, and
//! communicators on context ids the caller chose (an MPI runtime allocates
//! its own, as MPICH does).
//!
//! Handles are the request table's generation-checked ids, so a stale or
//! forged handle finds nothing: it is treated as already complete (empty
//! status), never as someone else's request.

use crate::comm::Comm;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::message::Message;
use crate::request::Request;
use crate::status::Status;
use crate::thread::Threading;

/// The handle of an operation that completed as it started (a standard
/// send the transport took at once). Never a live request's id: ids carry
/// the slot index + 1 in their low half, and the table never holds
/// 2^32 - 1 slots.
pub const REQUEST_COMPLETE: u64 = u64::MAX;

/// Caller-chosen context ids range over `0..=USER_CONTEXT_MAX`. Each one
/// takes four engine context ids from `USER_CONTEXT_BASE` up, a range the
/// engine's own agreement (dup, merge, connect) never hands out, so the
/// two allocators cannot collide.
pub const USER_CONTEXT_MAX: u32 = (1 << 28) - 1;
const USER_CONTEXT_BASE: u32 = 0x4000_0000;

impl<T: Threading> Request<'_, T> {
    /// Give up the Rust handle, keeping the operation: its raw handle
    /// ([`REQUEST_COMPLETE`] if it already finished). The caller must
    /// test, wait for or free it through [`Engine`]'s `request_*` calls.
    pub fn into_raw(self) -> u64 {
        let id = match self.id() {
            0 => REQUEST_COMPLETE,
            id => id,
        };
        std::mem::forget(self);
        id
    }
}

impl<T: Threading> Message<'_, T> {
    /// Give up the Rust handle, keeping the message out of matching: its
    /// raw key and status. Receive it with [`Engine::message_irecv_raw`].
    pub fn into_raw(self) -> (u64, Status) {
        let (key, status) = (self.key, self.status);
        std::mem::forget(self);
        (key, status)
    }
}

impl<T: Threading> Engine<T> {
    /// `Some(status)` once `id` is complete (its slot freed then);
    /// progresses once if not.
    pub fn request_test(&self, id: u64) -> Result<Option<Status>> {
        if id == REQUEST_COMPLETE {
            return Ok(Some(Status::default()));
        }
        self.inner.test(id)
    }

    /// Block until `id` completes.
    pub fn request_wait(&self, id: u64) -> Result<Status> {
        if id == REQUEST_COMPLETE {
            return Ok(Status::default());
        }
        self.inner.wait(id)
    }

    /// Ask to cancel `id` (see [`Request::cancel`]); then wait or test it.
    pub fn request_cancel(&self, id: u64) -> Result<()> {
        if id == REQUEST_COMPLETE {
            return Ok(());
        }
        self.inner.cancel(id)
    }

    /// Nobody will wait for `id`: the engine frees it when it completes.
    pub fn request_free(&self, id: u64) {
        if id != REQUEST_COMPLETE {
            self.inner.detach(id);
        }
    }

    /// Withdraw `id` before its buffer is released (a blocking call that
    /// failed): as a Rust blocking call does, the operation is finished
    /// first if a transport may still write into the buffer, or the process
    /// aborts if that cannot be done (see the engine's invariants).
    pub fn request_withdraw(&self, id: u64) {
        if id != REQUEST_COMPLETE && id != 0 {
            self.inner.abandon(&[id], false);
        }
    }

    /// Wait for every handle `id_at(0..n)`; `done(i, status)` is called
    /// once per handle as it completes (handles 0 count as done already
    /// and are not reported). Same one-pass cursor as
    /// [`Request::wait_all`].
    pub fn request_wait_all(
        &self,
        n: usize,
        id_at: impl Fn(usize) -> u64,
        mut done: impl FnMut(usize, Status),
    ) -> Result<()> {
        self.inner.wait_all_ids(n, |i, status| match status {
            None => id_at(i),
            Some(s) => {
                done(i, s);
                0
            }
        })
    }

    /// Wait until one of the handles `id_at(0..n)` other than 0 completes:
    /// its index and status. `None` if every handle is 0.
    pub fn request_wait_any(
        &self,
        n: usize,
        id_at: impl Fn(usize) -> u64,
    ) -> Result<Option<(usize, Status)>> {
        self.inner.wait_any_ids(n, |i, _| id_at(i))
    }

    /// Start receiving the message held under `key` (from
    /// [`Message::into_raw`]) into `buf..buf+len`: its request handle.
    ///
    /// # Safety
    /// As [`Comm::irecv_raw`]: the buffer stays valid for writes, and
    /// untouched by anyone else, until the request completes.
    pub unsafe fn message_irecv_raw(&self, key: u64, buf: *mut u8, len: usize) -> Result<u64> {
        self.inner.receive_held(key, buf, len)
    }
}

impl<T: Threading> Comm<T> {
    /// A communicator of `ranks` (ranks of this intracommunicator, in the
    /// new order; they must include this process) on the caller's context
    /// id `context` (`0..=USER_CONTEXT_MAX`). No communication: every
    /// member calls it with the same ranks and context, and the caller
    /// keeps `context` unused by any other live communicator these
    /// processes share.
    pub fn create_with_context(&self, ranks: &[u32], context: u32) -> Result<Comm<T>> {
        if self.is_inter() {
            return Err(Error::InvalidArgument(
                "a communicator on chosen ranks is made from an intracommunicator".into(),
            ));
        }
        let engine_context = user_context(context)?;
        let rank = self.position_in(ranks)?.ok_or_else(|| {
            Error::InvalidArgument(format!(
                "this process (rank {}) is not among the new communicator's ranks",
                self.rank
            ))
        })?;
        self.subset(ranks, rank, engine_context)
    }

    /// The same groups on the caller's context id `context` (a dup without
    /// communication; see [`create_with_context`](Self::create_with_context)
    /// for the caller's duty). Works on intercommunicators too.
    pub fn dup_with_context(&self, context: u32) -> Result<Comm<T>> {
        Ok(self.with_context(user_context(context)?))
    }
}

fn user_context(context: u32) -> Result<u32> {
    if context > USER_CONTEXT_MAX {
        return Err(Error::InvalidArgument(format!(
            "context id {context} is out of range: caller context ids are 0..={USER_CONTEXT_MAX}"
        )));
    }
    Ok(USER_CONTEXT_BASE + context * 4)
}
