//! Point-to-point entries for a caller that has checked its arguments
//! already: librivetmpi, whose `MPI_Send`/`Recv`/`Isend`/`Irecv` have
//! looked up the communicator, sized the buffer from a predefined
//! datatype and refused a null buffer or request before they get here.
//! Each skips librivet's own null checks (the handle, the buffer, the
//! request pointer), so the one check is made in one place; the engine
//! still checks what only it knows (the rank against the communicator's
//! size, the tag), and the panic boundary stays.
//!
//! Any other caller should use the checked calls in `p2p.rs`: a null
//! pointer here is undefined behaviour, not an error code.

use std::ffi::{c_int, c_void};
use std::ptr::NonNull;

use crate::errors::{boundary, Fail};
use crate::handles::{on, rank_arg, rivet_comm_t, rivet_request_t};
use crate::{put_status, rivet_status_t};

/// The buffer as the engine takes it: null (allowed only with length 0)
/// becomes a dangling pointer, never dereferenced.
#[inline(always)]
fn buffer(p: *const c_void) -> *mut u8 {
    if p.is_null() {
        NonNull::dangling().as_ptr()
    } else {
        p.cast_mut().cast()
    }
}

/// Store the new request's handle, or `RIVET_REQUEST_NULL` if it failed.
///
/// # Safety
/// `req` is valid for a write.
#[inline(always)]
unsafe fn started(req: *mut rivet_request_t, id: rivet::Result<u64>) -> Result<(), Fail> {
    match id {
        Ok(id) => {
            // SAFETY: valid for a write by the contract.
            unsafe { req.write(id) };
            Ok(())
        }
        Err(e) => {
            // SAFETY: valid for a write by the contract.
            unsafe { req.write(0) };
            Err(e.into())
        }
    }
}

/// `rivet_isend` for a caller that checked its
/// arguments (the MPI layer): `*req` is `RIVET_REQUEST_NULL` if it fails.
///
/// # Safety
/// `c` is a live handle; `buf` is valid for `len` reads until completion
/// and non-null unless `len` is 0; `req` is non-null and valid for a
/// write. None of this is checked.
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
        let (buf, dest) = (buffer(buf), rank_arg(dest, "destination rank")?);
        // SAFETY: the caller keeps the buffer valid until completion.
        let id = on!(&c.c, c => unsafe { c.isend_raw(buf, len, dest, tag) }.map(|r| r.into_raw()));
        // SAFETY: valid for a write by the contract.
        unsafe { started(req, id) }
    })
}

/// `rivet_irecv` for a caller that checked its
/// arguments (the MPI layer): `*req` is `RIVET_REQUEST_NULL` if it fails.
///
/// # Safety
/// `c` is a live handle; `buf` is valid for `len` writes, and untouched by
/// anyone else, until completion, and non-null unless `len` is 0; `req` is
/// non-null and valid for a write. None of this is checked.
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
        let buf = buffer(buf);
        let id = on!(&c.c, c => {
            // SAFETY: the caller keeps the buffer valid and exclusive until completion.
            unsafe { c.irecv_raw(buf, len, source, tag) }.map(|r| r.into_raw())
        });
        // SAFETY: valid for a write by the contract.
        unsafe { started(req, id) }
    })
}

/// `rivet_send` for a caller that checked its
/// arguments (the MPI layer).
///
/// # Safety
/// `c` is a live handle; `buf` is valid for `len` reads and non-null
/// unless `len` is 0. Not checked.
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
        // SAFETY: non-null (or dangling with length 0) and valid for `len`
        // reads by the contract.
        let data = unsafe { std::slice::from_raw_parts(buffer(buf), len) };
        let dest = rank_arg(dest, "destination rank")?;
        on!(&c.c, c => c.send(data, dest, tag))?;
        Ok(())
    })
}

/// `rivet_recv` for a caller that checked its
/// arguments (the MPI layer). `status` may be null; a truncated message
/// returns `RIVET_ERR_TRUNCATE` with the status filled, as there.
///
/// # Safety
/// `c` is a live handle; `buf` is valid and exclusive for `len` writes and
/// non-null unless `len` is 0 (not checked); `status` null or valid for a
/// write.
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
        // SAFETY: non-null (or dangling with length 0), valid and exclusive
        // for `len` bytes by the contract.
        let data = unsafe { std::slice::from_raw_parts_mut(buffer(buf), len) };
        let received = on!(&c.c, c => c.recv(data, source, tag));
        // The status is read where it lies, field by field as needed: with
        // no status wanted and no error, only its error is.
        let s = match &received {
            Ok(s) => s,
            Err(_) => return received.map(|_| ()).map_err(Fail::from),
        };
        if !status.is_null() {
            // SAFETY: non-null, so valid by the contract.
            unsafe { put_status(status, *s) };
        }
        match s.error {
            None => Ok(()),
            Some(_) => crate::p2p::truncation(*s),
        }
    })
}
