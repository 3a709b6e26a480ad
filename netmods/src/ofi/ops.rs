//! Operations posted to the endpoint and not yet completed. Each owns the
//! memory the provider reads or writes (a send's copy, a receive buffer)
//! and is the operation's `context`: its address comes back in the
//! completion. The context starts with the `fi_context2` scratch space
//! providers in `FI_CONTEXT`/`FI_CONTEXT2` mode may use.

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ptr::{self, NonNull};

use libc::c_void;

use crate::{FxBuildHasher, PeerId};

use super::fid::Mr;
use super::pool::PageBuf;
use super::sys::fi_context2;

/// Where a large payload is received.
pub(crate) enum Dest {
    /// The engine's memory, from `Sink::place`.
    Engine(NonNull<u8>),
    /// Our own buffer.
    Own(Vec<u8>),
}

pub(crate) enum OpKind {
    /// A generic receive: control messages and inline ones.
    Recv { buf: PageBuf },
    /// A send from our copy; `conn` fails if it does. An `optional` one
    /// (PING, PONG, CREDIT: bookkeeping whose loss costs no data) is not
    /// counted in `Ops::sends`.
    Send {
        conn: Option<u32>,
        buf: Vec<u8>,
        optional: bool,
    },
    /// The payload of a LARGE message from `conn`.
    Payload {
        conn: u32,
        hdr: Vec<u8>,
        dst: Dest,
        len: usize,
        tag: u64,
    },
    /// A payload nobody wants, received and dropped so its sender completes.
    Drain { buf: Vec<u8>, tag: u64 },
    /// An RMA read for the engine's `token`: `len` bytes at `remote` (as
    /// the provider names it) of the endpoint `src` into `local`.
    Read {
        token: u64,
        peer: PeerId,
        local: *mut u8,
        len: usize,
        src: u64,
        remote: u64,
        key: u64,
    },
}

#[repr(C)]
pub(crate) struct Op {
    /// First, so the context pointer is also the provider's scratch space;
    /// the provider writes it during our calls into libfabric.
    ctx: UnsafeCell<fi_context2>,
    pub kind: OpKind,
    /// Local registration of the operation's buffer (`FI_MR_LOCAL`).
    pub mr: Option<Mr>,
    /// Cancelled by us (`fi_cancel`): its completion is not used.
    pub cancelled: bool,
}

/// A send `Ops::sends` counts.
fn counted(kind: &OpKind) -> bool {
    matches!(
        kind,
        OpKind::Send {
            optional: false,
            ..
        }
    )
}

/// Contexts of posted operations, by address. Boxed and held as raw
/// pointers: the provider keeps the address until the completion.
#[derive(Default)]
pub(crate) struct Ops {
    live: HashMap<usize, NonNull<Op>, FxBuildHasher>,
    sends: usize,
}

impl Ops {
    /// A new operation; its context for the posting call.
    pub(crate) fn add(&mut self, kind: OpKind, mr: Option<Mr>) -> *mut c_void {
        self.sends += counted(&kind) as usize;
        let op = Box::new(Op {
            ctx: UnsafeCell::new(fi_context2 {
                internal: [ptr::null_mut(); 8],
            }),
            kind,
            mr,
            cancelled: false,
        });
        let p = NonNull::from(Box::leak(op));
        self.live.insert(p.as_ptr() as usize, p);
        p.as_ptr().cast()
    }

    /// Takes back the operation with context `ctx` (completed, or its
    /// posting failed). `None` for a context that is not ours.
    pub(crate) fn take(&mut self, ctx: *mut c_void) -> Option<Box<Op>> {
        let p = self.live.remove(&(ctx as usize))?;
        // SAFETY: `p` came from Box::leak in `add` and was in `live` until
        // now, so it is still allocated and owned by nobody else; the
        // provider is done with it (completion read or posting refused).
        let op = unsafe { Box::from_raw(p.as_ptr()) };
        self.sends -= counted(&op.kind) as usize;
        Some(op)
    }

    /// The live operation with context `ctx`.
    pub(crate) fn get_mut(&mut self, ctx: *mut c_void) -> Option<&mut Op> {
        let p = self.live.get(&(ctx as usize))?;
        // SAFETY: allocated while in `live`; `&mut self` makes this the
        // only reference, and the provider touches only `ctx`, and only
        // inside libfabric calls, during which no such reference is held.
        Some(unsafe { &mut *p.as_ptr() })
    }

    /// Sends posted and not completed, optional ones aside.
    pub(crate) fn sends(&self) -> usize {
        self.sends
    }

    /// Contexts of the reads from `peer` not yet completed (every peer's
    /// with `None`).
    pub(crate) fn reads_from(&self, peer: Option<PeerId>) -> Vec<*mut c_void> {
        self.live
            .values()
            .filter(|p| {
                // SAFETY: allocated while in `live`; `&self` keeps `Ops`
                // unchanged, and the provider touches only the context
                // scratch space, and only inside libfabric calls.
                let op = unsafe { p.as_ref() };
                matches!(op.kind, OpKind::Read { peer: from, .. } if peer.is_none_or(|p| p == from))
            })
            .map(|p| p.as_ptr().cast())
            .collect()
    }
}

impl Drop for Ops {
    fn drop(&mut self) {
        for (_, p) in self.live.drain() {
            // SAFETY: leaked in `add`; the endpoint that used it is closed
            // (it is declared before `Ops` in the netmod), so nothing else
            // refers to it.
            drop(unsafe { Box::from_raw(p.as_ptr()) });
        }
    }
}
