//! Safe nonblocking operations on borrowed buffers.
//!
//! Like `std::thread::scope`: every request started in a scope is finished
//! before the scope returns, so the buffers it borrows (`'env`) outlive every
//! use the engine makes of them, even if a request handle is leaked with
//! `mem::forget`. If the closure panics, unmatched receives are withdrawn and
//! queued sends dropped (the engine stops touching their buffers) before the
//! panic continues; if a netmod may still be writing into one of its receive
//! buffers (a rendezvous receive under way over the netmod), the process
//! aborts instead (`Inner::abandon`).

use std::cell::RefCell;
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use crate::comm::Comm;
use crate::error::Result;
use crate::request::Request;
use crate::thread::{Shared, Threading};

pub struct Scope<'scope, 'env: 'scope, T: Threading = Shared> {
    comm: &'env Comm<T>,
    started: RefCell<Vec<u64>>,
    /// Invariant in 'scope, as std's scope, so requests cannot escape it.
    _scope: PhantomData<&'scope mut &'scope ()>,
}

impl<T: Threading> Comm<T> {
    /// Run `f` with a [`Scope`] for nonblocking operations on borrowed
    /// buffers; every request started in it is finished before this returns.
    pub fn scope<'env, F, R>(&'env self, f: F) -> R
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env, T>) -> R,
    {
        run(self, f)
    }
}

fn run<'env, F, R, T: Threading>(comm: &'env Comm<T>, f: F) -> R
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env, T>) -> R,
{
    let scope = Scope {
        comm,
        started: RefCell::new(Vec::new()),
        _scope: PhantomData,
    };
    let result = catch_unwind(AssertUnwindSafe(|| f(&scope)));
    let ids = scope.started.take();
    let inner = &comm.inner;
    match result {
        Ok(value) => {
            for &id in &ids {
                // A failed engine cannot finish them: stop touching buffers.
                if inner.wait(id).is_err() {
                    inner.abandon(&ids, false);
                    break;
                }
            }
            value
        }
        Err(panic) => {
            inner.abandon(&ids, true);
            resume_unwind(panic)
        }
    }
}

impl<'scope, 'env, T: Threading> Scope<'scope, 'env, T> {
    pub fn comm(&self) -> &'env Comm<T> {
        self.comm
    }

    fn track(&'scope self, req: Request<'env, T>) -> Request<'scope, T> {
        if req.id() != 0 {
            self.started.borrow_mut().push(req.id());
        }
        req
    }

    pub fn isend(&'scope self, buf: &'env [u8], dest: u32, tag: i32) -> Result<Request<'scope, T>> {
        // SAFETY: `buf` is borrowed for 'env, which outlives the scope, and
        // the scope finishes (or abandons) the request before returning.
        let req = unsafe { self.comm.isend_raw(buf.as_ptr(), buf.len(), dest, tag)? };
        Ok(self.track(req))
    }

    /// Synchronous send: completes once the receiver has matched it.
    pub fn issend(
        &'scope self,
        buf: &'env [u8],
        dest: u32,
        tag: i32,
    ) -> Result<Request<'scope, T>> {
        // SAFETY: as in `isend`.
        let req = unsafe { self.comm.issend_raw(buf.as_ptr(), buf.len(), dest, tag)? };
        Ok(self.track(req))
    }

    /// `source` may be `ANY_SOURCE`, `tag` may be `ANY_TAG`.
    pub fn irecv(
        &'scope self,
        buf: &'env mut [u8],
        source: i32,
        tag: i32,
    ) -> Result<Request<'scope, T>> {
        // SAFETY: `buf` is borrowed mutably for 'env (no one else touches
        // it), and the scope finishes or withdraws the receive before
        // returning.
        let req = unsafe {
            self.comm
                .irecv_raw(buf.as_mut_ptr(), buf.len(), source, tag)?
        };
        Ok(self.track(req))
    }
}
