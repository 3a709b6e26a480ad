//! Matched probe (`MPI_Mprobe` / `MPI_Mrecv`): a probe that takes the
//! message out of matching, so that no other receive (another thread's)
//! can get it between the probe and the receive.

use std::marker::PhantomData;

use crate::comm::Comm;
use crate::error::Result;
use crate::inner::Inner;
use crate::request::{Lent, Request};
use crate::status::{MsgError, Status};
use crate::thread::{Shared, Threading};

/// A message taken by [`Comm::mprobe`]: receive it with
/// [`recv`](Message::recv). Dropped unreceived, it is received into
/// nothing (its data discarded), so that its sender completes.
#[must_use = "a matched message must be received (or dropped to discard it)"]
pub struct Message<'a, T: Threading = Shared> {
    inner: &'a Inner,
    /// 0 once received.
    pub(crate) key: u64,
    pub(crate) status: Status,
    _threads: PhantomData<T>,
}

impl<T: Threading> Comm<T> {
    /// Block until a message matching the pattern has arrived and take it
    /// out of matching; no other receive can get it.
    pub fn mprobe(&self, source: i32, tag: i32) -> Result<Message<'_, T>> {
        self.check_pattern(source, tag)?;
        let (key, status) = self
            .inner
            .mprobe(self.worker(), self.context, source, tag)?;
        Ok(self.held(key, status))
    }

    /// As [`mprobe`](Self::mprobe), without waiting.
    pub fn improbe(&self, source: i32, tag: i32) -> Result<Option<Message<'_, T>>> {
        self.check_pattern(source, tag)?;
        let found = self
            .inner
            .improbe(self.worker(), self.context, source, tag)?;
        Ok(found.map(|(key, status)| self.held(key, status)))
    }

    fn held(&self, key: u64, status: Status) -> Message<'_, T> {
        Message {
            inner: &self.inner,
            key,
            status,
            _threads: PhantomData,
        }
    }
}

impl<'a, T: Threading> Message<'a, T> {
    /// Source, tag and length of the message (`count`: its whole length).
    pub fn status(&self) -> &Status {
        &self.status
    }

    /// Receive it into `buf` (truncation is reported in the status; a
    /// sender that failed before a rendezvous message was pulled, as
    /// `Err(PeerFailed)`).
    pub fn recv(mut self, buf: &mut [u8]) -> Result<Status> {
        let key = std::mem::replace(&mut self.key, 0);
        let id = self.inner.receive_held(key, buf.as_mut_ptr(), buf.len())?;
        let lent = Lent::new(self.inner, id);
        let status = self.inner.wait(id)?;
        lent.finished();
        match status.error {
            Some(MsgError::PeerFailed { rank }) => Err(self.inner.failure_of(rank)),
            _ => Ok(status),
        }
    }

    /// Start receiving it into `buf..buf+len` (`MPI_Imrecv`).
    ///
    /// # Safety
    /// As [`Comm::irecv_raw`]: the buffer stays valid for writes, and
    /// untouched by anyone else, until the request completes.
    pub unsafe fn irecv_raw(mut self, buf: *mut u8, len: usize) -> Result<Request<'a, T>> {
        let key = std::mem::replace(&mut self.key, 0);
        let id = self.inner.receive_held(key, buf, len)?;
        Ok(Request::new(self.inner, id))
    }
}

impl<T: Threading> Drop for Message<'_, T> {
    fn drop(&mut self) {
        if self.key != 0 {
            // Into nothing: eager data is dropped, a rendezvous sender is
            // asked for no bytes and completes.
            if let Ok(id) =
                self.inner
                    .receive_held(self.key, std::ptr::NonNull::dangling().as_ptr(), 0)
            {
                self.inner.detach(id);
            }
        }
    }
}
