//! Communicators: a context id and a table of ranks.

use std::sync::Arc;

use crate::engine::Inner;
use crate::error::{Error, Result};
use crate::matching::{ANY_SOURCE, ANY_TAG};
use crate::protocol::SendArgs;
use crate::request::Request;
use crate::scope::Scope;
use crate::status::{MsgError, Status};

/// Collective traffic runs on `context + 1`, out of the way of user tags.
const COLLECTIVE_OFFSET: u32 = 1;
const TAG_BARRIER: i32 = 1;
const TAG_DUP: i32 = 2;

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
        // Every member proposes its next free context id; all take the
        // largest (a max-allreduce by dissemination, correct because max is
        // idempotent), so the id is free on every member.
        let mut agreed = self
            .inner
            .next_context
            .load(std::sync::atomic::Ordering::Relaxed);
        self.dissemination(|comm, to, from| {
            let mut got = [0u8; 4];
            comm.exchange(&agreed.to_le_bytes(), to, &mut got, from)?;
            agreed = agreed.max(u32::from_le_bytes(got));
            Ok(())
        })?;
        let next = agreed
            .checked_add(2)
            .ok_or_else(|| Error::Failed("context ids exhausted".to_string()))?;
        self.inner
            .next_context
            .fetch_max(next, std::sync::atomic::Ordering::Relaxed);
        Ok(Comm {
            inner: self.inner.clone(),
            context: agreed,
            rank: self.rank,
            size: self.size,
        })
    }

    /// Rounds k = 1, 2, 4, .. < size: talk to rank+k, hear from rank-k.
    fn dissemination(&self, mut round: impl FnMut(&Comm, u32, u32) -> Result<()>) -> Result<()> {
        let collective = Comm {
            inner: self.inner.clone(),
            context: self.context + COLLECTIVE_OFFSET,
            rank: self.rank,
            size: self.size,
        };
        let mut k = 1u32;
        while k < self.size {
            let to = (self.rank + k) % self.size;
            let from = (self.rank + self.size - k) % self.size;
            round(&collective, to, from)?;
            k = k.saturating_mul(2);
        }
        Ok(())
    }

    /// Send `out` to `to` while receiving `inp` from `from` (no deadlock
    /// whatever the message size).
    fn exchange(&self, out: &[u8], to: u32, inp: &mut [u8], from: u32) -> Result<()> {
        self.scope(|s| {
            let send = s.isend(out, to, TAG_DUP)?;
            let status = self.fail_on_peer(s.irecv(inp, from as i32, TAG_DUP)?.wait()?)?;
            self.fail_on_peer(send.wait()?)?;
            status.check().map_err(|e| Error::Failed(e.to_string()))?;
            Ok(())
        })
    }

    /// Dissemination barrier over point-to-point messages.
    pub fn barrier(&self) -> Result<()> {
        self.dissemination(|comm, to, from| {
            comm.scope(|s| {
                let send = s.isend(&[], to, TAG_BARRIER)?;
                comm.fail_on_peer(s.irecv(&mut [], from as i32, TAG_BARRIER)?.wait()?)?;
                comm.fail_on_peer(send.wait()?)?;
                Ok(())
            })
        })
    }

    /// Blocking calls report a failed peer as `Err(Error::PeerFailed)`;
    /// nonblocking ones leave it in the status (`MsgError::PeerFailed`).
    fn fail_on_peer(&self, status: Status) -> Result<Status> {
        match status.error {
            Some(MsgError::PeerFailed { rank }) => Err(self.inner.failure_of(rank)),
            _ => Ok(status),
        }
    }

    /// Returns once the buffer may be reused. `Err(PeerFailed)` if `dest`
    /// failed before the message was out.
    pub fn send(&self, buf: &[u8], dest: u32, tag: i32) -> Result<()> {
        let args = self.send_args(buf.as_ptr(), buf.len(), dest, tag, false)?;
        self.fail_on_peer(self.inner.start_send(&args)?.wait()?)
            .map(|_| ())
    }

    /// Returns once the receiver has matched the message.
    pub fn ssend(&self, buf: &[u8], dest: u32, tag: i32) -> Result<()> {
        let args = self.send_args(buf.as_ptr(), buf.len(), dest, tag, true)?;
        self.fail_on_peer(self.inner.start_send(&args)?.wait()?)
            .map(|_| ())
    }

    /// A truncated message is reported in the status; a failed sender
    /// (or, for `ANY_SOURCE`, any failed peer) as `Err(PeerFailed)`.
    pub fn recv(&self, buf: &mut [u8], source: i32, tag: i32) -> Result<Status> {
        self.check_pattern(source, tag)?;
        let id = self
            .inner
            .start_recv(self.context, buf.as_mut_ptr(), buf.len(), source, tag)?;
        self.fail_on_peer(self.inner.wait(id)?)
    }

    /// Block until a matching message is waiting; it stays waiting.
    pub fn probe(&self, source: i32, tag: i32) -> Result<Status> {
        self.check_pattern(source, tag)?;
        self.inner.probe(self.context, source, tag)
    }

    pub fn iprobe(&self, source: i32, tag: i32) -> Result<Option<Status>> {
        self.check_pattern(source, tag)?;
        self.inner.iprobe(self.context, source, tag)
    }

    /// Run `f` with a [`Scope`] for nonblocking operations on borrowed
    /// buffers; every request started in it is finished before this returns.
    pub fn scope<'env, F, T>(&'env self, f: F) -> T
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
    {
        crate::scope::run(self, f)
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
        let args = self.send_args(buf, len, dest, tag, false)?;
        self.inner.start_send(&args)
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
        let args = self.send_args(buf, len, dest, tag, true)?;
        self.inner.start_send(&args)
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
        self.check_pattern(source, tag)?;
        let id = self.inner.start_recv(self.context, buf, len, source, tag)?;
        Ok(Request::new(&self.inner, id))
    }

    fn send_args(
        &self,
        buf: *const u8,
        len: usize,
        dest: u32,
        tag: i32,
        sync: bool,
    ) -> Result<SendArgs> {
        if dest >= self.size {
            return Err(Error::RankOutOfRange {
                rank: dest.into(),
                size: self.size,
            });
        }
        if tag < 0 {
            return Err(Error::InvalidTag(tag));
        }
        Ok(SendArgs {
            context: self.context,
            src: self.rank,
            buf,
            len,
            dest,
            tag,
            sync,
        })
    }

    fn check_pattern(&self, source: i32, tag: i32) -> Result<()> {
        if source != ANY_SOURCE && (source < 0 || source as u32 >= self.size) {
            return Err(Error::RankOutOfRange {
                rank: source.into(),
                size: self.size,
            });
        }
        if tag < 0 && tag != ANY_TAG {
            return Err(Error::InvalidTag(tag));
        }
        Ok(())
    }
}
