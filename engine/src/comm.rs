//! Communicators: a context id and a table of ranks.

use std::sync::Arc;

use crate::engine::Inner;
use crate::error::Result;
use crate::request::Request;
use crate::scope::Scope;
use crate::status::Status;

/// A communicator. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Comm {
    pub(crate) inner: Arc<Inner>,
    pub(crate) context: u32,
    pub(crate) rank: u32,
    pub(crate) size: u32,
}

impl Comm {
    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// The context id point-to-point traffic on this communicator carries.
    pub fn context_id(&self) -> u32 {
        self.context
    }

    /// A new communicator with the same ranks and a new context id.
    /// Collective: every rank of `self` must call it, in the same order.
    pub fn dup(&self) -> Result<Comm> {
        todo!()
    }

    /// Dissemination barrier over point-to-point messages.
    pub fn barrier(&self) -> Result<()> {
        todo!()
    }

    pub fn send(&self, buf: &[u8], dest: u32, tag: i32) -> Result<()> {
        let _ = (buf, dest, tag);
        todo!()
    }

    /// Returns once the receiver has matched the message.
    pub fn ssend(&self, buf: &[u8], dest: u32, tag: i32) -> Result<()> {
        let _ = (buf, dest, tag);
        todo!()
    }

    pub fn recv(&self, buf: &mut [u8], source: i32, tag: i32) -> Result<Status> {
        let _ = (buf, source, tag);
        todo!()
    }

    /// Block until a matching message is waiting; it stays waiting.
    pub fn probe(&self, source: i32, tag: i32) -> Result<Status> {
        let _ = (source, tag);
        todo!()
    }

    pub fn iprobe(&self, source: i32, tag: i32) -> Result<Option<Status>> {
        let _ = (source, tag);
        todo!()
    }

    /// Run `f` with a [`Scope`] for nonblocking operations on borrowed
    /// buffers; every request started in it is finished before this returns.
    pub fn scope<'env, F, T>(&'env self, f: F) -> T
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
    {
        let _ = f;
        todo!()
    }

    /// # Safety
    /// `buf..buf+len` must stay valid and unchanged until the request
    /// completes (wait/test saw it done, or it was detached and finished).
    pub unsafe fn isend_raw(
        &self,
        buf: *const u8,
        len: usize,
        dest: u32,
        tag: i32,
    ) -> Result<Request<'_>> {
        let _ = (buf, len, dest, tag);
        todo!()
    }

    /// # Safety
    /// As [`isend_raw`](Self::isend_raw).
    pub unsafe fn issend_raw(
        &self,
        buf: *const u8,
        len: usize,
        dest: u32,
        tag: i32,
    ) -> Result<Request<'_>> {
        let _ = (buf, len, dest, tag);
        todo!()
    }

    /// # Safety
    /// `buf..buf+len` must stay valid for writes, and not be read or written
    /// by anyone else, until the request completes.
    pub unsafe fn irecv_raw(
        &self,
        buf: *mut u8,
        len: usize,
        source: i32,
        tag: i32,
    ) -> Result<Request<'_>> {
        let _ = (buf, len, source, tag);
        todo!()
    }
}
