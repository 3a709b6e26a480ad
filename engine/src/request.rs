//! Handles to operations in flight.
//!
//! A `Request` names a slot in the engine's request table by index and
//! generation, so a stale handle can never reach a reused slot. Its lifetime
//! ties it to the scope or communicator whose buffers it uses.

use crate::engine::Inner;
use crate::error::Result;
use crate::status::Status;

/// An operation in flight. Dropping it without waiting detaches it: the
/// engine finishes the operation and frees the slot itself (inside a
/// [`Scope`](crate::Scope), the scope still waits for it).
#[must_use = "a request must be waited for (or dropped to detach it)"]
pub struct Request<'a> {
    pub(crate) inner: &'a Inner,
    /// 0 once completed and freed.
    pub(crate) id: u64,
    pub(crate) status: Option<Status>,
}

impl<'a> Request<'a> {
    /// `Some(status)` once complete (the slot is freed then); progresses once.
    pub fn test(&mut self) -> Result<Option<Status>> {
        todo!()
    }

    /// Block until complete.
    pub fn wait(mut self) -> Result<Status> {
        let _ = &mut self;
        todo!()
    }

    /// Ask to cancel: a receive not yet matched, or a send the receiver has
    /// not matched yet. Then wait; `Status::cancelled` says whether it was.
    pub fn cancel(&self) -> Result<()> {
        todo!()
    }

    /// The status, once `test`, `wait_all` or `wait_any` saw completion.
    pub fn status(&self) -> Option<&Status> {
        self.status.as_ref()
    }

    pub fn is_done(&self) -> bool {
        self.id == 0
    }

    /// Wait for every request; each one's status is then in `status()`.
    pub fn wait_all(reqs: &mut [Request<'a>]) -> Result<()> {
        let _ = reqs;
        todo!()
    }

    /// Wait until one not-yet-done request completes: its index and status.
    /// `None` if every request was already done.
    pub fn wait_any(reqs: &mut [Request<'a>]) -> Result<Option<(usize, Status)>> {
        let _ = reqs;
        todo!()
    }
}
