//! The opaque handles C holds, and the dispatch from a run-time thread
//! level to the engine's compile-time one.
//!
//! `Engine<Local>` (below MULTIPLE: no lock, no atomics on the data path)
//! and `Engine<Shared>` (MULTIPLE) are different Rust types; a C caller
//! picks one with `rivet_init`'s level, so a handle holds either and
//! [`on!`] runs the same generic code on whichever it holds. A `Local`
//! handle used from several threads at once breaks the promise the C
//! caller made with its level, as in MPI.

use std::ffi::c_int;

use rivet::{Comm, Engine, Group, Local, RawP2p, Shared};

use crate::errors::{invalid, Fail};

/// An initialised engine (`rivet_init`), freed by `rivet_finalize`.
pub struct rivet_engine_t {
    pub(crate) e: Either<Engine<Local>, Engine<Shared>>,
}

/// A communicator, freed by `rivet_comm_free` (or `rivet_comm_disconnect`).
pub struct rivet_comm_t {
    pub(crate) c: Either<Comm<Local>, Comm<Shared>>,
    /// `c`'s point-to-point by plain pointers into it (valid while `c`
    /// lives, which is as long as this handle), for the `*_unchecked`
    /// entries: one non-generic call into the engine, no dispatch.
    pub(crate) p2p: RawP2p,
}

impl rivet_comm_t {
    pub(crate) fn local(c: Comm<Local>) -> rivet_comm_t {
        rivet_comm_t {
            p2p: c.raw_p2p(),
            c: Either::Local(c),
        }
    }

    pub(crate) fn shared(c: Comm<Shared>) -> rivet_comm_t {
        rivet_comm_t {
            p2p: c.raw_p2p(),
            c: Either::Shared(c),
        }
    }
}

/// A group made by `rivet_group_connect`, ended by `rivet_group_disconnect`.
pub struct rivet_group_t {
    pub(crate) g: Either<Group<Local>, Group<Shared>>,
}

/// An operation in flight: 0 is `RIVET_REQUEST_NULL`.
pub type rivet_request_t = u64;
/// A message taken out of matching by `rivet_mprobe`: 0 is
/// `RIVET_MESSAGE_NULL`.
pub type rivet_message_t = u64;

/// One of the two thread types.
pub enum Either<L, S> {
    Local(L),
    Shared(S),
}

/// Run `$body` on the value inside an [`Either`], whichever it is.
macro_rules! on {
    ($x:expr, $v:ident => $body:expr) => {
        match $x {
            $crate::handles::Either::Local($v) => $body,
            $crate::handles::Either::Shared($v) => $body,
        }
    };
}
pub(crate) use on;

/// Run `$body` (yielding a `Comm`) on the engine or communicator inside
/// an [`Either`] and wrap the result in a new `rivet_comm_t` of the same
/// thread type.
macro_rules! new_comm {
    ($x:expr, $v:ident => $body:expr) => {
        match $x {
            $crate::handles::Either::Local($v) => $crate::handles::rivet_comm_t::local($body),
            $crate::handles::Either::Shared($v) => $crate::handles::rivet_comm_t::shared($body),
        }
    };
}
pub(crate) use new_comm;

/// The engine behind a pointer from C.
///
/// # Safety
/// `p` is null or a live handle from `rivet_init`, not used by another
/// thread at once unless its level is MULTIPLE.
#[inline(always)]
pub(crate) unsafe fn engine<'a>(p: *const rivet_engine_t) -> Result<&'a rivet_engine_t, Fail> {
    // SAFETY: null is checked by as_ref; otherwise live by the contract.
    unsafe { p.as_ref() }.ok_or_else(|| invalid("the engine handle is null"))
}

/// The communicator behind a pointer from C.
///
/// # Safety
/// `p` is null or a live handle from this library, as for [`engine`].
#[inline(always)]
pub(crate) unsafe fn comm<'a>(p: *const rivet_comm_t) -> Result<&'a rivet_comm_t, Fail> {
    // SAFETY: null is checked by as_ref; otherwise live by the contract.
    unsafe { p.as_ref() }.ok_or_else(|| invalid("the communicator handle is null"))
}

/// Hand a new handle to C through `out` (checked non-null first by the
/// caller with [`out_ptr`]).
///
/// # Safety
/// `out` is valid for a write of one pointer.
pub(crate) unsafe fn give<T>(out: *mut *mut T, value: T) {
    // SAFETY: valid for writes by the contract.
    unsafe { out.write(Box::into_raw(Box::new(value))) };
}

/// Refuse a null output pointer before doing any work.
#[inline(always)]
pub(crate) fn out_ptr<T>(out: *mut T, what: &str) -> Result<(), Fail> {
    if out.is_null() {
        return Err(null_out(what));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn null_out(what: &str) -> Fail {
    invalid(format!("the output pointer for {what} is null"))
}

/// Take back a handle C gives up (`*_free`, `rivet_finalize`).
///
/// # Safety
/// `p` is null or came from [`give`] and is not used again.
pub(crate) unsafe fn take<T>(p: *mut T, what: &str) -> Result<Box<T>, Fail> {
    if p.is_null() {
        return Err(invalid(format!("the {what} handle is null")));
    }
    // SAFETY: from Box::into_raw in `give`, given back once by the contract.
    Ok(unsafe { Box::from_raw(p) })
}

/// A C rank or count argument that must fit a `u32`.
#[inline(always)]
pub(crate) fn rank_arg(v: c_int, what: &str) -> Result<u32, Fail> {
    u32::try_from(v).map_err(|_| negative(v, what))
}

#[cold]
#[inline(never)]
fn negative(v: c_int, what: &str) -> Fail {
    Fail::new(
        crate::errors::RIVET_ERR_RANK,
        format!("{what} {v} is negative"),
    )
}
