//! Communicators: a context id and the VC tables of their groups.
//!
//! Point-to-point calls live here; collectives the engine itself needs
//! (barrier, dup, and the steps of connect/accept) in `collective.rs`,
//! `create` and `split` in `split.rs`, intercommunicator `merge` in
//! `intercomm.rs`.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::inner::{Inner, ParentLink};
use crate::matching::{ANY_SOURCE, ANY_TAG};
use crate::pg::{VcId, Vcrt};
use crate::post::SendArgs;
use crate::request::{Lent, Request};
use crate::status::{MsgError, Status};
use crate::thread::{Shared, Threading};

/// A communicator: a context id and one VC table (intracommunicator) or
/// two (intercommunicator: a local and a remote group). Cheap to clone
/// (a clone is the same communicator, not a dup); `Send + Sync` unless it
/// came from an `Engine<Local>`.
///
/// Dropping the last clone frees it (seed 000: `free` keeps connections to
/// other process groups); [`disconnect`](Comm::disconnect) ends them.
pub struct Comm<T: Threading = Shared> {
    pub(crate) inner: Arc<Inner>,
    pub(crate) context: u32,
    /// Rank in the local group.
    pub(crate) rank: u32,
    /// Size of the local group.
    pub(crate) size: u32,
    /// This side's ranks → VCs, shared with dups.
    pub(crate) local: Arc<Vcrt>,
    /// Intercommunicators: the other side's ranks → VCs.
    pub(crate) remote: Option<Arc<Vcrt>>,
    /// Intercommunicators: `merge` puts this side first when both sides
    /// pass the same `high` (true on the accepting / parent side).
    pub(crate) first: bool,
    pub(crate) _threads: PhantomData<T>,
}

impl<T: Threading> Clone for Comm<T> {
    fn clone(&self) -> Self {
        Comm {
            inner: self.inner.clone(),
            context: self.context,
            rank: self.rank,
            size: self.size,
            local: self.local.clone(),
            remote: self.remote.clone(),
            first: self.first,
            _threads: PhantomData,
        }
    }
}

impl<T: Threading> Comm<T> {
    /// The parts the engine keeps of a parent intercommunicator (`None`
    /// for an intracommunicator).
    pub(crate) fn into_link(self) -> Option<ParentLink> {
        Some(ParentLink {
            context: self.context,
            rank: self.rank,
            size: self.size,
            local: self.local.clone(),
            remote: self.remote.clone()?,
            first: self.first,
        })
    }

    /// A handle on the parent intercommunicator the engine keeps.
    pub(crate) fn from_link(inner: &Arc<Inner>, l: &ParentLink) -> Comm<T> {
        Comm {
            inner: inner.clone(),
            context: l.context,
            rank: l.rank,
            size: l.size,
            local: l.local.clone(),
            remote: Some(l.remote.clone()),
            first: l.first,
            _threads: PhantomData,
        }
    }

    /// This process's rank (in the local group of an intercommunicator).
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of ranks (of the local group of an intercommunicator).
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Whether this is an intercommunicator (from accept, connect, spawn).
    pub fn is_inter(&self) -> bool {
        self.remote.is_some()
    }

    /// The size of the remote group of an intercommunicator.
    pub fn remote_size(&self) -> Option<u32> {
        self.remote.as_ref().map(|r| r.size())
    }

    /// The context id point-to-point traffic on this communicator carries.
    pub fn context_id(&self) -> u32 {
        self.context
    }

    /// The ranks point-to-point calls name: the remote group of an
    /// intercommunicator, else this one.
    #[inline]
    pub(crate) fn peers(&self) -> &Vcrt {
        self.remote.as_deref().unwrap_or(&self.local)
    }

    /// The worker this communicator's traffic runs on (`thread.rs`): one
    /// of several for a communicator of our own world's processes at
    /// MULTIPLE, else worker 0.
    #[inline]
    pub(crate) fn worker(&self) -> usize {
        self.inner.worker_for(
            self.context,
            self.remote.is_none() && self.local.world_only(),
        )
    }

    /// Same groups, another context.
    pub(crate) fn with_context(&self, context: u32) -> Comm<T> {
        Comm {
            context,
            ..self.clone()
        }
    }

    /// A new communicator with the same groups and a new context id (the
    /// VC tables are shared, seed 000). Collective: every rank of `self`
    /// (both groups of an intercommunicator) must call it, in the same order.
    /// Across IMPI clients the id is agreed as seed 003's 4.6 (`split.rs`).
    pub fn dup(&self) -> Result<Comm<T>> {
        let context = self.dup_context()?;
        Ok(self.with_context(context))
    }

    /// Blocking calls report a failed peer as `Err(Error::PeerFailed)`;
    /// nonblocking ones leave it in the status (`MsgError::PeerFailed`).
    pub(crate) fn fail_on_peer(&self, status: Status) -> Result<Status> {
        match status.error {
            Some(MsgError::PeerFailed { rank }) => Err(self.inner.failure_of(rank)),
            _ => Ok(status),
        }
    }

    /// Returns once the buffer may be reused. `Err(PeerFailed)` if `dest`
    /// failed before the message was out.
    pub fn send(&self, buf: &[u8], dest: u32, tag: i32) -> Result<()> {
        let args = self.send_args(buf.as_ptr(), buf.len(), dest, tag, false)?;
        self.send_blocking(&args)
    }

    /// Returns once the receiver has matched the message.
    pub fn ssend(&self, buf: &[u8], dest: u32, tag: i32) -> Result<()> {
        let args = self.send_args(buf.as_ptr(), buf.len(), dest, tag, true)?;
        self.send_blocking(&args)
    }

    /// A send on a borrowed buffer, withdrawn if waiting fails (`Lent`).
    fn send_blocking(&self, args: &SendArgs) -> Result<()> {
        let id = self.inner.start_send(self.worker(), args)?;
        if id == 0 {
            // Gone out already (`Inner::start_send`): nothing to wait for,
            // and its status (the default) carries no error.
            return Ok(());
        }
        let req = Request::<T>::new(&self.inner, id);
        let lent = Lent::new(&self.inner, req.id());
        let status = req.wait()?;
        lent.finished();
        self.fail_on_peer(status).map(|_| ())
    }

    /// A truncated message is reported in the status; a failed sender
    /// (or, for `ANY_SOURCE`, any failed peer) as `Err(PeerFailed)`.
    pub fn recv(&self, buf: &mut [u8], source: i32, tag: i32) -> Result<Status> {
        self.check_pattern(source, tag)?;
        let id = self.inner.start_recv(
            self.worker(),
            self.context,
            buf.as_mut_ptr(),
            buf.len(),
            source,
            self.source_vc(source),
            tag,
        )?;
        let lent = Lent::new(&self.inner, id);
        let status = self.inner.wait(id)?;
        lent.finished();
        self.fail_on_peer(status)
    }

    /// Block until a matching message is waiting; it stays waiting.
    pub fn probe(&self, source: i32, tag: i32) -> Result<Status> {
        self.check_pattern(source, tag)?;
        self.inner.probe(self.worker(), self.context, source, tag)
    }

    pub fn iprobe(&self, source: i32, tag: i32) -> Result<Option<Status>> {
        self.check_pattern(source, tag)?;
        self.inner.iprobe(self.worker(), self.context, source, tag)
    }

    /// # Safety
    /// `buf..buf+len` must stay valid and unchanged until the request
    /// completes (wait/test saw it done, or it was detached and finished).
    ///
    /// The `*_raw` starts are `#[inline]`: a caller that keeps only the
    /// handle (`into_raw`, the C ABI) then never builds the `Request`.
    #[inline]
    pub unsafe fn isend_raw(
        &self,
        buf: *const u8,
        len: usize,
        dest: u32,
        tag: i32,
    ) -> Result<Request<'_, T>> {
        let args = self.send_args(buf, len, dest, tag, false)?;
        Ok(Request::started(
            &self.inner,
            self.inner.start_send(self.worker(), &args)?,
        ))
    }

    /// # Safety
    /// As [`isend_raw`](Self::isend_raw).
    #[inline]
    pub unsafe fn issend_raw(
        &self,
        buf: *const u8,
        len: usize,
        dest: u32,
        tag: i32,
    ) -> Result<Request<'_, T>> {
        let args = self.send_args(buf, len, dest, tag, true)?;
        Ok(Request::started(
            &self.inner,
            self.inner.start_send(self.worker(), &args)?,
        ))
    }

    /// # Safety
    /// `buf..buf+len` must stay valid for writes, and not be read or written
    /// by anyone else, until the request completes.
    #[inline]
    pub unsafe fn irecv_raw(
        &self,
        buf: *mut u8,
        len: usize,
        source: i32,
        tag: i32,
    ) -> Result<Request<'_, T>> {
        self.check_pattern(source, tag)?;
        let id = self.inner.start_recv(
            self.worker(),
            self.context,
            buf,
            len,
            source,
            self.source_vc(source),
            tag,
        )?;
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
        send_args_of(
            self.peers(),
            self.context,
            self.rank,
            buf,
            len,
            dest,
            tag,
            sync,
        )
    }

    #[inline]
    fn source_vc(&self, source: i32) -> Option<VcId> {
        source_vc_of(self.peers(), source)
    }

    pub(crate) fn check_pattern(&self, source: i32, tag: i32) -> Result<()> {
        check_pattern_of(self.peers(), source, tag)
    }
}

/// A send's arguments after its checks (the destination in range of
/// `peers`, the tag not negative); shared with `raw_p2p.rs`.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn send_args_of(
    peers: &Vcrt,
    context: u32,
    rank: u32,
    buf: *const u8,
    len: usize,
    dest: u32,
    tag: i32,
    sync: bool,
) -> Result<SendArgs> {
    if dest >= peers.size() {
        return Err(Error::RankOutOfRange {
            rank: dest.into(),
            size: peers.size(),
        });
    }
    if tag < 0 {
        return Err(Error::InvalidTag(tag));
    }
    Ok(SendArgs {
        context,
        src: rank,
        buf,
        len,
        dest: peers.vc(dest),
        tag,
        sync,
    })
}

/// The VC of a receive's source (none for `ANY_SOURCE`), after
/// [`check_pattern_of`].
#[inline]
pub(crate) fn source_vc_of(peers: &Vcrt, source: i32) -> Option<VcId> {
    (source != ANY_SOURCE).then(|| peers.vc(source as u32))
}

/// A receive's source and tag: a rank of `peers` or `ANY_SOURCE`, a tag
/// not negative or `ANY_TAG`.
#[inline]
pub(crate) fn check_pattern_of(peers: &Vcrt, source: i32, tag: i32) -> Result<()> {
    let size = peers.size();
    if source != ANY_SOURCE && (source < 0 || source as u32 >= size) {
        return Err(Error::RankOutOfRange {
            rank: source.into(),
            size,
        });
    }
    if tag < 0 && tag != ANY_TAG {
        return Err(Error::InvalidTag(tag));
    }
    Ok(())
}
