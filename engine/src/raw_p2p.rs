//! A communicator's point-to-point as one plain value, for the C ABI's
//! `rivet_*_unchecked` entries (`rivet-capi`), which the MPI layer calls
//! once per message from C.
//!
//! [`Comm`]'s calls are generic over the thread level, so a downstream
//! crate compiles its own copy of them, and there the engine's
//! `Inner::start_send`/`start_recv` stay separate calls: a frame each,
//! with four arguments of `start_recv` on the stack and a `Result` the
//! size of an `Error` returned through memory. [`RawP2p`] is not generic:
//! it holds what a communicator's traffic needs (engine, the VC table it
//! names peers by, context, rank, worker) as plain pointers and numbers,
//! taken once when the C handle is made. `isend`, `irecv` and `send` are
//! inlined into the C entries, so a C start is one frame, the export's,
//! around one call into the engine (callgrind, 8 B: MPI_Isend 283.0 ->
//! 277.0, MPI_Irecv 276.2 -> 270.2, MPI_Send 281.4 -> 272.4 when they
//! stopped being a frame of their own). `recv` is compiled here, out of
//! line: inlined into librivet, LLVM left `Lent`'s calls out of line and
//! the receive cost 7 more. All call the same compiled
//! `Inner::start_send`/`start_recv` as every `Comm` (callgrind: with those
//! bodies inlined here, LLVM left other calls inside them out of line,
//! and the count moved between builds by up to 30 instructions per
//! message; the call costs a few). The checks
//! and the semantics are those of `Comm::isend_raw`, `irecv_raw`, `send`
//! and `recv` (the same errors in the same order), with a rank checked by
//! one compare.

use std::marker::PhantomData;
use std::mem::MaybeUninit;

use crate::comm::Comm;
use crate::error::Error;
use crate::inner::Inner;
use crate::matching::{ANY_SOURCE, ANY_TAG};
use crate::pg::{VcId, Vcrt};
use crate::post::SendArgs;
use crate::raw::REQUEST_COMPLETE;
use crate::request::Lent;
use crate::status::{MsgError, Status};
use crate::thread::Threading;

/// An engine error as one pointer (the success path returns in registers).
pub type BoxedError = Box<Error>;

/// A communicator's point-to-point by pointers into it; see the module
/// doc. Valid while the [`Comm`] it came from lives (it holds no
/// reference count), and usable only as that `Comm` is: from its own
/// thread if it came from an `Engine<Local>`, from any thread at
/// MULTIPLE. Its calls are `unsafe` for that reason; neither `Send` nor
/// `Sync`, so only its unsafe calls can cross threads.
#[derive(Clone, Copy)]
pub struct RawP2p {
    inner: *const Inner,
    peers: *const Vcrt,
    context: u32,
    rank: u32,
    worker: usize,
    _not_send: PhantomData<*const ()>,
}

impl<T: Threading> Comm<T> {
    /// This communicator's point-to-point as a [`RawP2p`], for a C ABI.
    /// The worker is fixed for a communicator's life (`Inner::worker_for`
    /// reads its context and groups, both constant), so it is chosen here.
    pub fn raw_p2p(&self) -> RawP2p {
        RawP2p {
            inner: &*self.inner,
            peers: self.peers(),
            context: self.context,
            rank: self.rank,
            worker: self.worker(),
            _not_send: PhantomData,
        }
    }
}

#[cold]
#[inline(never)]
fn boxed(e: Error) -> BoxedError {
    Box::new(e)
}

/// `send_args_of` for C's `int` destination: as a `u32` a negative one
/// is past every size, so one compare (the VC table's bounds check)
/// checks the rank; the errors, and their order, are `send_args_of`'s.
#[inline(always)]
fn send_args(
    p: &RawP2p,
    peers: &Vcrt,
    buf: *const u8,
    len: usize,
    dest: i32,
    tag: i32,
) -> Result<SendArgs, BoxedError> {
    let Some(vc) = peers.vc_of(dest as u32) else {
        return Err(out_of_range(dest, peers));
    };
    if tag < 0 {
        return Err(boxed(Error::InvalidTag(tag)));
    }
    Ok(SendArgs {
        context: p.context,
        src: p.rank,
        buf,
        len,
        dest: vc,
        tag,
        sync: false,
    })
}

/// `check_pattern_of` and `source_vc_of` at once: the source's VC (`None`
/// for `ANY_SOURCE`), a rank in range found by one compare as above.
#[inline(always)]
fn source_vc(peers: &Vcrt, source: i32, tag: i32) -> Result<Option<VcId>, BoxedError> {
    let vc = match peers.vc_of(source as u32) {
        Some(vc) => Some(vc),
        None if source == ANY_SOURCE => None,
        None => return Err(out_of_range(source, peers)),
    };
    if tag < ANY_TAG {
        return Err(boxed(Error::InvalidTag(tag)));
    }
    Ok(vc)
}

#[cold]
#[inline(never)]
fn out_of_range(rank: i32, peers: &Vcrt) -> BoxedError {
    Box::new(Error::RankOutOfRange {
        rank: rank.into(),
        size: peers.size(),
    })
}

impl RawP2p {
    /// # Safety
    /// The `Comm` this came from is alive.
    #[inline(always)]
    unsafe fn parts(&self) -> (&Inner, &Vcrt) {
        // SAFETY: both point into the live `Comm` (its `Arc`s), by the
        // caller's contract.
        unsafe { (&*self.inner, &*self.peers) }
    }

    /// `Comm::isend_raw(..).into_raw()`: the raw request handle,
    /// [`REQUEST_COMPLETE`] if the send finished as it started. `dest` is
    /// C's `int`: a negative one is `RankOutOfRange` naming it.
    ///
    /// # Safety
    /// As the type says (the `Comm` alive, used from a thread it may be
    /// used from), and as `isend_raw`: `buf..buf+len` stays valid and
    /// unchanged until the request completes.
    #[inline(always)]
    pub unsafe fn isend(
        &self,
        buf: *const u8,
        len: usize,
        dest: i32,
        tag: i32,
    ) -> Result<u64, BoxedError> {
        // SAFETY: by the caller's contract.
        let (inner, peers) = unsafe { self.parts() };
        let args = send_args(self, peers, buf, len, dest, tag)?;
        match inner.start_send(self.worker, &args) {
            Ok(0) => Ok(REQUEST_COMPLETE),
            Ok(id) => Ok(id),
            Err(e) => Err(boxed(e)),
        }
    }

    /// `Comm::irecv_raw(..).into_raw()`: the raw request handle.
    ///
    /// # Safety
    /// As the type says, and as `irecv_raw`: `buf..buf+len` stays valid
    /// and untouched by anyone else until the request completes.
    #[inline(always)]
    pub unsafe fn irecv(
        &self,
        buf: *mut u8,
        len: usize,
        source: i32,
        tag: i32,
    ) -> Result<u64, BoxedError> {
        // SAFETY: by the caller's contract.
        let (inner, peers) = unsafe { self.parts() };
        let vc = source_vc(peers, source, tag)?;
        match inner.start_recv(self.worker, self.context, buf, len, source, vc, tag) {
            Ok(id) => Ok(id),
            Err(e) => Err(boxed(e)),
        }
    }

    /// `Comm::recv`: the status goes to `status` (written on `Ok`, maybe
    /// on a failed sender too; a truncated message is `Ok` with its error
    /// there), so the result is one register and the caller reads only the
    /// fields it wants; a failed sender is `Err(PeerFailed)`. Withdrawn if
    /// waiting fails (`Lent`).
    ///
    /// # Safety
    /// As the type says; `buf` is valid and exclusive for `len` writes for
    /// the call.
    #[inline(never)]
    pub unsafe fn recv(
        &self,
        buf: *mut u8,
        len: usize,
        source: i32,
        tag: i32,
        status: &mut MaybeUninit<Status>,
    ) -> Result<(), BoxedError> {
        // SAFETY: by the caller's contract.
        let (inner, peers) = unsafe { self.parts() };
        let vc = source_vc(peers, source, tag)?;
        let id = match inner.start_recv(self.worker, self.context, buf, len, source, vc, tag) {
            Ok(id) => id,
            Err(e) => return Err(boxed(e)),
        };
        let lent = Lent::new(inner, id);
        // Written first, then read there: one copy of the status.
        let s = match inner.wait(id) {
            Ok(s) => status.write(s),
            // `lent` withdraws the receive as it drops.
            Err(e) => return Err(boxed(e)),
        };
        lent.finished();
        if let Some(MsgError::PeerFailed { rank }) = s.error {
            return Err(boxed(inner.failure_of(rank)));
        }
        Ok(())
    }

    /// `Comm::send`: returns once the buffer may be reused; a failed
    /// destination is `Err(PeerFailed)`; `dest` as for `isend`.
    ///
    /// # Safety
    /// As the type says; `buf` is valid for `len` reads for the call.
    #[inline(always)]
    pub unsafe fn send(
        &self,
        buf: *const u8,
        len: usize,
        dest: i32,
        tag: i32,
    ) -> Result<(), BoxedError> {
        // SAFETY: by the caller's contract.
        let (inner, peers) = unsafe { self.parts() };
        let args = send_args(self, peers, buf, len, dest, tag)?;
        match inner.start_send(self.worker, &args) {
            Ok(0) => Ok(()),
            Ok(id) => wait_send(inner, id).map_err(boxed),
            Err(e) => Err(boxed(e)),
        }
    }
}

/// The rest of a blocking send the transport did not take at once, as
/// `Comm::send_blocking`: withdrawn if waiting fails (`Lent`).
#[inline(never)]
fn wait_send(inner: &Inner, id: u64) -> crate::error::Result<()> {
    let lent = Lent::new(inner, id);
    let status = match inner.wait(id) {
        Ok(s) => s,
        Err(e) => {
            // As a `Request` dropped by its failed wait.
            inner.detach(id);
            return Err(e);
        }
    };
    lent.finished();
    match status.error {
        Some(MsgError::PeerFailed { rank }) => Err(inner.failure_of(rank)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;

    use crate::{
        Engine, Error, Local, MsgError, ThreadLevel, ANY_SOURCE, ANY_TAG, REQUEST_COMPLETE,
    };

    /// A singleton's world through `RawP2p`: messages to itself arrive
    /// whole and in order, on the communicator they were sent on, and
    /// bad ranks and tags are the errors `Comm`'s calls give.
    #[test]
    fn raw_p2p_sends_receives_and_checks_as_comm() {
        let engine = Engine::<Local>::init_thread(ThreadLevel::Single).expect("a singleton");
        let world = engine.world();
        let dup = world.dup().expect("dup");
        let (p2p, on_dup) = (world.raw_p2p(), dup.raw_p2p());
        let mut got = [[0u8; 4]; 3];
        // SAFETY: the buffers outlive the requests, each waited for below.
        unsafe {
            let on_world = p2p.irecv(got[0].as_mut_ptr(), 4, ANY_SOURCE, 7).unwrap();
            let second = p2p.irecv(got[1].as_mut_ptr(), 4, 0, 7).unwrap();
            let dup_recv = on_dup.irecv(got[2].as_mut_ptr(), 4, 0, 7).unwrap();
            on_dup.send([9u8; 4].as_ptr(), 4, 0, 7).unwrap();
            let sent = p2p.isend([1u8, 2, 3, 4].as_ptr(), 4, 0, 7).unwrap();
            p2p.send([5u8, 6, 7, 8].as_ptr(), 4, 0, 7).unwrap();
            for id in [on_world, second, dup_recv] {
                assert_ne!(id, REQUEST_COMPLETE);
                let st = engine.request_wait(id).unwrap();
                assert_eq!((st.source, st.tag, st.count), (0, 7, 4));
            }
            engine.request_wait(sent).unwrap();
        }
        assert_eq!(got, [[1, 2, 3, 4], [5, 6, 7, 8], [9; 4]]);

        // Blocking receives: the status where the caller put it, a
        // truncated message `Ok` with its error there, the dup's traffic
        // apart from the world's.
        let mut st = MaybeUninit::uninit();
        let (mut four, mut small) = ([0u8; 4], [0u8; 2]);
        // SAFETY: the buffers outlive every call, each of which completes.
        unsafe {
            on_dup.send([3u8; 4].as_ptr(), 4, 0, 9).unwrap();
            p2p.send([4u8; 3].as_ptr(), 3, 0, 9).unwrap();
            p2p.recv(four.as_mut_ptr(), 4, ANY_SOURCE, ANY_TAG, &mut st)
                .unwrap();
            let s = st.assume_init_ref();
            assert_eq!((s.source, s.tag, s.count, s.error), (0, 9, 3, None));
            on_dup.recv(small.as_mut_ptr(), 2, 0, 9, &mut st).unwrap();
            let s = st.assume_init_ref();
            let cut = Some(MsgError::Truncated {
                sent: 4,
                capacity: 2,
            });
            assert_eq!((s.count, s.error), (2, cut));
        }
        assert_eq!((four, small), ([4, 4, 4, 0], [3, 3]));

        let mut buf = [0u8; 4];
        // SAFETY: every call below fails before it keeps the buffer.
        unsafe {
            let rank = |e: Box<Error>| matches!(*e, Error::RankOutOfRange { rank: 1, size: 1 });
            let tag = |e: Box<Error>| matches!(*e, Error::InvalidTag(-5));
            assert!(rank(p2p.isend(buf.as_ptr(), 4, 1, 0).unwrap_err()));
            assert!(rank(p2p.send(buf.as_ptr(), 4, 1, 0).unwrap_err()));
            assert!(rank(p2p.irecv(buf.as_mut_ptr(), 4, 1, 0).unwrap_err()));
            let negative =
                |e: Box<Error>| matches!(*e, Error::RankOutOfRange { rank: -3, size: 1 });
            assert!(negative(p2p.isend(buf.as_ptr(), 4, -3, 0).unwrap_err()));
            assert!(negative(p2p.send(buf.as_ptr(), 4, -3, 0).unwrap_err()));
            assert!(tag(p2p.isend(buf.as_ptr(), 4, 0, -5).unwrap_err()));
            assert!(tag(p2p.send(buf.as_ptr(), 4, 0, -5).unwrap_err()));
            assert!(tag(p2p.irecv(buf.as_mut_ptr(), 4, 0, -5).unwrap_err()));
            let mut st = MaybeUninit::uninit();
            assert!(rank(
                p2p.recv(buf.as_mut_ptr(), 4, 1, 0, &mut st).unwrap_err()
            ));
            assert!(tag(p2p
                .recv(buf.as_mut_ptr(), 4, 0, -5, &mut st)
                .unwrap_err()));
            let below = |e: Box<Error>| matches!(*e, Error::RankOutOfRange { rank: -2, size: 1 });
            assert!(below(p2p.irecv(buf.as_mut_ptr(), 4, -2, 0).unwrap_err()));
            assert!(below(
                p2p.recv(buf.as_mut_ptr(), 4, -2, 0, &mut st).unwrap_err()
            ));
        }
    }
}
