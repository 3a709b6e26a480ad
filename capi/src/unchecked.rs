//! Point-to-point entries for a caller that has checked its arguments
//! already: librivetmpi, whose `MPI_Send`/`Recv`/`Isend`/`Irecv` have
//! looked up the communicator, sized the buffer from a predefined
//! datatype and refused a null buffer or request before they get here.
//! Each skips librivet's own null checks (the handle, the buffer, the
//! request pointer), so the one check is made in one place: the caller
//! passes a non-null buffer even when empty (C's null is not Rust's
//! dangling pointer, and mapping one costs every call); the engine
//! still checks what only it knows (the rank against the communicator's
//! size, the tag), and the panic boundary stays. All four go through the
//! handle's `RawP2p` (the engine's non-generic point-to-point, taken when
//! the handle is made): no thread-level dispatch, and for isend, irecv
//! and send `RawP2p`'s checks inlined here, so the export is the one
//! frame around the engine's start (`Comm`'s generic calls, compiled into
//! this crate, cost 60-70 instructions of their own per message).
//!
//! Any other caller should use the checked calls in `p2p.rs`: a null
//! pointer here is undefined behaviour, not an error code.

use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;

use crate::errors::{boundary, Fail};
use rivet::BoxedError;

use crate::handles::{rivet_comm_t, rivet_request_t};
use crate::{put_status, rivet_status_t};

/// Store the new request's handle, or `RIVET_REQUEST_NULL` if it failed.
///
/// # Safety
/// `req` is valid for a write.
#[inline(always)]
unsafe fn started(req: *mut rivet_request_t, id: Result<u64, BoxedError>) -> Result<(), Fail> {
    match id {
        Ok(id) => {
            // SAFETY: valid for a write by the contract.
            unsafe { req.write(id) };
            Ok(())
        }
        Err(e) => {
            // SAFETY: valid for a write by the contract.
            unsafe { req.write(0) };
            Err(unboxed(e))
        }
    }
}

/// The engine's error, boxed by `RawP2p` so its result fits two registers.
#[cold]
#[inline(never)]
#[allow(clippy::boxed_local)]
fn unboxed(e: BoxedError) -> Fail {
    Fail::from(*e)
}

/// `rivet_isend` for a caller that checked its
/// arguments (the MPI layer): `*req` is `RIVET_REQUEST_NULL` if it fails.
///
/// # Safety
/// `c` is a live handle; `buf` is non-null (a dangling pointer such as 1
/// when `len` is 0) and valid for `len` reads until completion; `req` is
/// non-null and valid for a write. None of this is checked (a negative
/// `dest` is: `RIVET_ERR_RANK`).
#[no_mangle]
pub unsafe extern "C" fn rivet_isend_unchecked(
    c: *const rivet_comm_t,
    buf: *const c_void,
    len: usize,
    dest: c_int,
    tag: c_int,
    req: *mut rivet_request_t,
) -> c_int {
    boundary("rivet_isend_unchecked", || {
        // SAFETY: a live handle by the contract.
        let c = unsafe { &*c };
        // SAFETY: `c.p2p` points into `c.c`, alive while the handle is;
        // the caller keeps the buffer valid until completion.
        let id = unsafe { c.p2p.isend(buf.cast(), len, dest, tag) };
        // SAFETY: valid for a write by the contract.
        unsafe { started(req, id) }
    })
}

/// `rivet_irecv` for a caller that checked its
/// arguments (the MPI layer): `*req` is `RIVET_REQUEST_NULL` if it fails.
///
/// # Safety
/// `c` is a live handle; `buf` is non-null (a dangling pointer such as 1
/// when `len` is 0) and valid for `len` writes, and untouched by anyone
/// else, until completion; `req` is non-null and valid for a write. None
/// of this is checked.
#[no_mangle]
pub unsafe extern "C" fn rivet_irecv_unchecked(
    c: *const rivet_comm_t,
    buf: *mut c_void,
    len: usize,
    source: c_int,
    tag: c_int,
    req: *mut rivet_request_t,
) -> c_int {
    boundary("rivet_irecv_unchecked", || {
        // SAFETY: a live handle by the contract.
        let c = unsafe { &*c };
        // SAFETY: `c.p2p` points into `c.c`, alive while the handle is;
        // the caller keeps the buffer valid and exclusive until completion.
        let id = unsafe { c.p2p.irecv(buf.cast(), len, source, tag) };
        // SAFETY: valid for a write by the contract.
        unsafe { started(req, id) }
    })
}

/// `rivet_send` for a caller that checked its
/// arguments (the MPI layer).
///
/// # Safety
/// `c` is a live handle; `buf` is non-null (a dangling pointer such as 1
/// when `len` is 0) and valid for `len` reads. Not checked.
#[no_mangle]
pub unsafe extern "C" fn rivet_send_unchecked(
    c: *const rivet_comm_t,
    buf: *const c_void,
    len: usize,
    dest: c_int,
    tag: c_int,
) -> c_int {
    boundary("rivet_send_unchecked", || {
        // SAFETY: a live handle by the contract.
        let c = unsafe { &*c };
        // SAFETY: `c.p2p` points into `c.c`, alive while the handle is;
        // the buffer is valid for `len` reads by the contract.
        match unsafe { c.p2p.send(buf.cast(), len, dest, tag) } {
            Ok(()) => Ok(()),
            Err(e) => Err(unboxed(e)),
        }
    })
}

/// `rivet_recv` for a caller that checked its
/// arguments (the MPI layer). `status` may be null; a truncated message
/// returns `RIVET_ERR_TRUNCATE` with the status filled, as there.
///
/// # Safety
/// `c` is a live handle; `buf` is non-null (a dangling pointer such as 1
/// when `len` is 0) and valid and exclusive for `len` writes (not
/// checked); `status` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_recv_unchecked(
    c: *const rivet_comm_t,
    buf: *mut c_void,
    len: usize,
    source: c_int,
    tag: c_int,
    status: *mut rivet_status_t,
) -> c_int {
    boundary("rivet_recv_unchecked", || {
        // SAFETY: a live handle by the contract.
        let c = unsafe { &*c };
        let mut s = MaybeUninit::uninit();
        // SAFETY: `c.p2p` points into `c.c`, alive while the handle is; the
        // buffer is valid and exclusive for `len` writes by the contract.
        if let Err(e) = unsafe { c.p2p.recv(buf.cast(), len, source, tag, &mut s) } {
            return Err(unboxed(e));
        }
        // SAFETY: `RawP2p::recv` wrote it, as it does on `Ok`.
        let s = unsafe { s.assume_init_ref() };
        if !status.is_null() {
            // SAFETY: non-null, so valid by the contract.
            unsafe { put_status(status, *s) };
        }
        match s.error {
            None => Ok(()),
            Some(_) => status_error(*s),
        }
    })
}

/// A received status's error: truncation (`RawP2p::recv` returns a failed
/// sender as `Err`). Out of line: the common receive has none.
#[cold]
#[inline(never)]
fn status_error(s: rivet::Status) -> Result<(), Fail> {
    crate::p2p::truncation(s)
}
