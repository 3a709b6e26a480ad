//! Handles to operations in flight.
//!
//! A `Request` holds a handle into the engine's request table (`table.rs`)
//! and borrows the scope or communicator whose buffers the operation uses,
//! so it cannot outlive them.

use std::marker::PhantomData;

use crate::error::Result;
use crate::inner::Inner;
use crate::status::Status;
use crate::thread::{Shared, Threading};

/// An operation in flight. Dropping it without waiting detaches it: the
/// engine finishes the operation and frees its slot itself (inside a
/// [`Scope`](crate::Scope), the scope still waits for it before returning).
#[must_use = "a request must be waited for (or dropped to detach it)"]
pub struct Request<'a, T: Threading = Shared> {
    inner: &'a Inner,
    /// 0 once completed and freed.
    id: u64,
    status: Option<Status>,
    _threads: PhantomData<T>,
}

impl<'a, T: Threading> Request<'a, T> {
    pub(crate) fn new(inner: &'a Inner, id: u64) -> Request<'a, T> {
        Request {
            inner,
            id,
            status: None,
            _threads: PhantomData,
        }
    }

    /// An operation that completed as it started.
    pub(crate) fn finished(inner: &'a Inner, status: Status) -> Request<'a, T> {
        Request {
            inner,
            id: 0,
            status: Some(status),
            _threads: PhantomData,
        }
    }

    /// A request for handle `id` from `Inner::start_send` (0: it finished
    /// as it started).
    pub(crate) fn started(inner: &'a Inner, id: u64) -> Request<'a, T> {
        match id {
            0 => Request::finished(inner, Status::default()),
            id => Request::new(inner, id),
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    fn done(&mut self, status: Status) -> Status {
        self.id = 0;
        self.status = Some(status);
        status
    }

    /// `Some(status)` once complete (the slot is freed then); progresses
    /// once if not.
    pub fn test(&mut self) -> Result<Option<Status>> {
        if self.id == 0 {
            return Ok(self.status);
        }
        Ok(self.inner.test(self.id)?.map(|s| self.done(s)))
    }

    /// Block until complete.
    pub fn wait(mut self) -> Result<Status> {
        if self.id == 0 {
            return Ok(self.status.unwrap_or_default());
        }
        let status = self.inner.wait(self.id)?;
        Ok(self.done(status))
    }

    /// Ask to cancel: a receive not yet matched, or a synchronous or
    /// rendezvous send the receiver has not matched yet. Then wait;
    /// `Status::cancelled` says whether it was. A small (eager) standard send
    /// is complete as soon as it is started, so cancelling it has no effect.
    pub fn cancel(&self) -> Result<()> {
        if self.id == 0 {
            return Ok(());
        }
        self.inner.cancel(self.id)
    }

    /// The status, once `test`, `wait_all` or `wait_any` saw completion.
    pub fn status(&self) -> Option<&Status> {
        self.status.as_ref()
    }

    pub fn is_done(&self) -> bool {
        self.id == 0
    }

    /// Wait for every request; each one's status is then in `status()`.
    ///
    /// One pass: a cursor moves over the requests in order and only the
    /// one under it is checked after each progress call (the others
    /// complete meanwhile and are then passed in one step each), so the
    /// cost is O(requests + polls), with no allocation.
    pub fn wait_all(reqs: &mut [Request<'a, T>]) -> Result<()> {
        let Some(first) = reqs.iter().find(|r| r.id != 0) else {
            return Ok(());
        };
        let inner = first.inner;
        inner.wait_all_ids(reqs.len(), |i, status| match status {
            None => reqs[i].id,
            Some(s) => {
                reqs[i].done(s);
                0
            }
        })
    }

    /// Wait until one not-yet-done request completes: its index and status.
    /// `None` if every request was already done.
    ///
    /// The requests are scanned once, then again only after a progress
    /// call completed something (the engine counts completions), and
    /// nothing is allocated.
    pub fn wait_any(reqs: &mut [Request<'a, T>]) -> Result<Option<(usize, Status)>> {
        let Some(first) = reqs.iter().find(|r| r.id != 0) else {
            return Ok(None);
        };
        let inner = first.inner;
        inner.wait_any_ids(reqs.len(), |i, status| match status {
            None => reqs[i].id,
            Some(s) => {
                reqs[i].done(s);
                0
            }
        })
    }
}

/// A blocking call's request on the caller's buffer: withdrawn
/// (`Inner::abandon`) if the call returns or unwinds before it finished,
/// since the buffer is released then.
pub(crate) struct Lent<'a> {
    inner: &'a Inner,
    id: u64,
}

impl<'a> Lent<'a> {
    pub(crate) fn new(inner: &'a Inner, id: u64) -> Lent<'a> {
        Lent { inner, id }
    }

    /// It finished: nothing to withdraw.
    pub(crate) fn finished(mut self) {
        self.id = 0;
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if self.id != 0 {
            self.inner.abandon(&[self.id], std::thread::panicking());
        }
    }
}

impl<T: Threading> Drop for Request<'_, T> {
    fn drop(&mut self) {
        if self.id != 0 {
            self.inner.detach(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::Engine;

    /// A blocking receive or synchronous send whose wait fails (here: the
    /// engine fails while it waits) returns with nothing left pointing at
    /// the caller's buffer: no posted receive a later message could fill,
    /// no send a queue could still read.
    #[test]
    fn failed_blocking_calls_leave_no_request_on_the_buffer() {
        let engine = Engine::init().expect("a singleton engine");
        let world = engine.world();
        let inner = &*engine.inner;
        let live = || inner.lock_even_finalized().st.requests_live();
        std::thread::scope(|t| {
            let recv = t.spawn(|| world.recv(&mut [0u8; 64], 0, 9));
            let ssend = t.spawn(|| world.ssend(&[1u8; 64], 0, 10));
            while live() < 2 {
                std::thread::yield_now();
            }
            inner
                .lock_even_finalized()
                .st
                .fail("the test fails the engine".into());
            assert!(recv.join().unwrap().is_err());
            assert!(ssend.join().unwrap().is_err());
        });
        assert_eq!(live(), 0, "a failed call left its request on the buffer");
    }
}
