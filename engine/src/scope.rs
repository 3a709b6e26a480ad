//! Safe nonblocking operations on borrowed buffers.
//!
//! Like `std::thread::scope`: every request started in a scope is finished
//! before the scope returns, so the buffers it borrows (`'env`) outlive every
//! use the engine makes of them, even if a request handle is leaked with
//! `mem::forget`. If the closure panics, unmatched receives are cancelled
//! and sends abandoned before the panic continues.

use crate::comm::Comm;
use crate::error::Result;
use crate::request::Request;

pub struct Scope<'scope, 'env: 'scope> {
    pub(crate) comm: &'env Comm,
    pub(crate) started: std::cell::RefCell<Vec<u64>>,
    pub(crate) _scope: std::marker::PhantomData<&'scope mut &'scope ()>,
}

impl<'scope, 'env> Scope<'scope, 'env> {
    pub fn comm(&self) -> &'env Comm {
        self.comm
    }

    pub fn isend(&'scope self, buf: &'env [u8], dest: u32, tag: i32) -> Result<Request<'scope>> {
        let _ = (buf, dest, tag);
        todo!()
    }

    /// Synchronous send: completes once the receiver has matched it.
    pub fn issend(&'scope self, buf: &'env [u8], dest: u32, tag: i32) -> Result<Request<'scope>> {
        let _ = (buf, dest, tag);
        todo!()
    }

    /// `source` may be `ANY_SOURCE`, `tag` may be `ANY_TAG`.
    pub fn irecv(
        &'scope self,
        buf: &'env mut [u8],
        source: i32,
        tag: i32,
    ) -> Result<Request<'scope>> {
        let _ = (buf, source, tag);
        todo!()
    }
}
