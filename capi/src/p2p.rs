//! Tagged point-to-point on caller-owned buffers: nonblocking and
//! blocking sends (standard and synchronous) and receives, probes, and
//! matched probes (`rivet_mprobe` + `rivet_mrecv`: no other receive can
//! take the message between the two, whatever other threads do).

use std::ffi::{c_int, c_void};
use std::ptr::NonNull;

use crate::errors::{boundary, CResult, Fail, RIVET_ERR_TRUNCATE};
use crate::handles::{self, comm, on, out_ptr, rank_arg, rivet_comm_t, rivet_engine_t};
use crate::handles::{rivet_message_t, rivet_request_t};
use crate::{put_status, rivet_status_t, strings};

/// Null with length 0 becomes a dangling (never dereferenced) pointer.
fn raw(p: *const c_void, len: usize) -> Result<*mut u8, Fail> {
    strings::raw_ok(p.cast(), len)?;
    Ok(if p.is_null() {
        NonNull::dangling().as_ptr()
    } else {
        p.cast_mut().cast()
    })
}

/// Truncation is an error code for blocking receives, as in MPI.
#[inline(always)]
pub(crate) fn truncation(s: rivet::Status) -> CResult {
    match s.error {
        Some(e @ rivet::MsgError::Truncated { .. }) => Err(truncated(e)),
        _ => Ok(()),
    }
}

#[cold]
#[inline(never)]
fn truncated(e: rivet::MsgError) -> Fail {
    Fail::new(RIVET_ERR_TRUNCATE, e.to_string())
}

/// Start sending `len` bytes at `buf` to `dest` with `tag` (>= 0). The
/// buffer must stay untouched until the request completes.
///
/// # Safety
/// `c` is a live handle; `buf` valid for `len` reads until completion;
/// `req` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_isend(
    c: *const rivet_comm_t,
    buf: *const c_void,
    len: usize,
    dest: c_int,
    tag: c_int,
    req: *mut rivet_request_t,
) -> c_int {
    boundary("rivet_isend", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(req, "the request")?;
        let (buf, dest) = (raw(buf, len)?, rank_arg(dest, "destination rank")?);
        // SAFETY: the caller keeps the buffer valid until completion.
        let id = on!(&c.c, c => unsafe { c.isend_raw(buf, len, dest, tag) }?.into_raw());
        // SAFETY: checked non-null; valid by the contract.
        unsafe { req.write(id) };
        Ok(())
    })
}

/// As [`rivet_isend`], completing only once the receiver has matched it.
///
/// # Safety
/// As [`rivet_isend`].
#[no_mangle]
pub unsafe extern "C" fn rivet_issend(
    c: *const rivet_comm_t,
    buf: *const c_void,
    len: usize,
    dest: c_int,
    tag: c_int,
    req: *mut rivet_request_t,
) -> c_int {
    boundary("rivet_issend", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(req, "the request")?;
        let (buf, dest) = (raw(buf, len)?, rank_arg(dest, "destination rank")?);
        // SAFETY: the caller keeps the buffer valid until completion.
        let id = on!(&c.c, c => unsafe { c.issend_raw(buf, len, dest, tag) }?.into_raw());
        // SAFETY: checked non-null; valid by the contract.
        unsafe { req.write(id) };
        Ok(())
    })
}

/// Start receiving up to `len` bytes into `buf` from `source`
/// (`RIVET_ANY_SOURCE` allowed) with `tag` (`RIVET_ANY_TAG` allowed).
///
/// # Safety
/// `c` is a live handle; `buf` valid for `len` writes, and untouched by
/// anyone else, until completion; `req` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_irecv(
    c: *const rivet_comm_t,
    buf: *mut c_void,
    len: usize,
    source: c_int,
    tag: c_int,
    req: *mut rivet_request_t,
) -> c_int {
    boundary("rivet_irecv", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(req, "the request")?;
        let buf = raw(buf, len)?;
        // SAFETY: the caller keeps the buffer valid and exclusive until completion.
        let id = on!(&c.c, c => unsafe { c.irecv_raw(buf, len, source, tag) }?.into_raw());
        // SAFETY: checked non-null; valid by the contract.
        unsafe { req.write(id) };
        Ok(())
    })
}

/// Send and return once `buf` may be reused.
///
/// # Safety
/// `c` is a live handle; `buf` valid for `len` reads.
#[no_mangle]
pub unsafe extern "C" fn rivet_send(
    c: *const rivet_comm_t,
    buf: *const c_void,
    len: usize,
    dest: c_int,
    tag: c_int,
) -> c_int {
    boundary("rivet_send", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        // SAFETY: valid for `len` reads by the contract.
        let data = unsafe { strings::bytes(buf.cast(), len) }?;
        let dest = rank_arg(dest, "destination rank")?;
        on!(&c.c, c => c.send(data, dest, tag))?;
        Ok(())
    })
}

/// Send and return once the receiver has matched the message.
///
/// # Safety
/// As [`rivet_send`].
#[no_mangle]
pub unsafe extern "C" fn rivet_ssend(
    c: *const rivet_comm_t,
    buf: *const c_void,
    len: usize,
    dest: c_int,
    tag: c_int,
) -> c_int {
    boundary("rivet_ssend", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        // SAFETY: valid for `len` reads by the contract.
        let data = unsafe { strings::bytes(buf.cast(), len) }?;
        let dest = rank_arg(dest, "destination rank")?;
        on!(&c.c, c => c.ssend(data, dest, tag))?;
        Ok(())
    })
}

/// Receive into `buf`. A longer message fills the buffer and returns
/// `RIVET_ERR_TRUNCATE` (status filled); a failed sender
/// `RIVET_ERR_PEER_FAILED`. `status` may be null.
///
/// # Safety
/// `c` is a live handle; `buf` valid for `len` writes; `status` null or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_recv(
    c: *const rivet_comm_t,
    buf: *mut c_void,
    len: usize,
    source: c_int,
    tag: c_int,
    status: *mut rivet_status_t,
) -> c_int {
    boundary("rivet_recv", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        // SAFETY: valid and exclusive for `len` bytes by the contract.
        let data = unsafe { strings::bytes_mut(buf.cast(), len) }?;
        let s = on!(&c.c, c => c.recv(data, source, tag))?;
        // SAFETY: null or valid by the contract.
        unsafe { put_status(status, s) };
        truncation(s)
    })
}

/// Block until a matching message is waiting (it stays waiting): its
/// source, tag and length in `status`.
///
/// # Safety
/// `c` is a live handle; `status` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_probe(
    c: *const rivet_comm_t,
    source: c_int,
    tag: c_int,
    status: *mut rivet_status_t,
) -> c_int {
    boundary("rivet_probe", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        let s = on!(&c.c, c => c.probe(source, tag))?;
        // SAFETY: null or valid by the contract.
        unsafe { put_status(status, s) };
        Ok(())
    })
}

/// As [`rivet_probe`] without blocking: `*flag` 1 if a message waits.
///
/// # Safety
/// `c` is a live handle; `flag` valid for a write; `status` null or valid.
#[no_mangle]
pub unsafe extern "C" fn rivet_iprobe(
    c: *const rivet_comm_t,
    source: c_int,
    tag: c_int,
    flag: *mut c_int,
    status: *mut rivet_status_t,
) -> c_int {
    boundary("rivet_iprobe", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(flag, "the flag")?;
        let found = on!(&c.c, c => c.iprobe(source, tag))?;
        // SAFETY: checked non-null; valid by the contract.
        unsafe { flag.write(found.is_some() as c_int) };
        if let Some(s) = found {
            // SAFETY: null or valid by the contract.
            unsafe { put_status(status, s) };
        }
        Ok(())
    })
}

/// Block until a matching message is waiting and take it out of
/// matching: `*msg` names it for [`rivet_mrecv`] / [`rivet_imrecv`].
///
/// # Safety
/// `c` is a live handle; `msg` valid for a write; `status` null or valid.
#[no_mangle]
pub unsafe extern "C" fn rivet_mprobe(
    c: *const rivet_comm_t,
    source: c_int,
    tag: c_int,
    msg: *mut rivet_message_t,
    status: *mut rivet_status_t,
) -> c_int {
    boundary("rivet_mprobe", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(msg, "the message")?;
        let (key, s) = on!(&c.c, c => c.mprobe(source, tag)?.into_raw());
        // SAFETY: checked non-null; valid by the contract.
        unsafe { msg.write(key) };
        // SAFETY: null or valid by the contract.
        unsafe { put_status(status, s) };
        Ok(())
    })
}

/// As [`rivet_mprobe`] without blocking: `*flag` 1 if one was taken.
///
/// # Safety
/// As [`rivet_mprobe`]; `flag` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_improbe(
    c: *const rivet_comm_t,
    source: c_int,
    tag: c_int,
    flag: *mut c_int,
    msg: *mut rivet_message_t,
    status: *mut rivet_status_t,
) -> c_int {
    boundary("rivet_improbe", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(msg, "the message")?;
        out_ptr(flag, "the flag")?;
        let found = on!(&c.c, c => c.improbe(source, tag)?.map(|m| m.into_raw()));
        // SAFETY: checked non-null; valid by the contract.
        unsafe { flag.write(found.is_some() as c_int) };
        if let Some((key, s)) = found {
            // SAFETY: checked non-null; valid by the contract.
            unsafe { msg.write(key) };
            // SAFETY: null or valid by the contract.
            unsafe { put_status(status, s) };
        }
        Ok(())
    })
}

/// Start receiving the message `*msg` (from a matched probe) into `buf`;
/// `*msg` becomes `RIVET_MESSAGE_NULL`.
///
/// # Safety
/// `engine` is a live handle; `msg` valid for reads and writes; `buf` as
/// for [`rivet_irecv`]; `req` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_imrecv(
    engine: *const rivet_engine_t,
    buf: *mut c_void,
    len: usize,
    msg: *mut rivet_message_t,
    req: *mut rivet_request_t,
) -> c_int {
    boundary("rivet_imrecv", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        out_ptr(msg, "the message")?;
        out_ptr(req, "the request")?;
        let buf = raw(buf, len)?;
        // SAFETY: checked non-null; valid by the contract.
        let key = unsafe { msg.read() };
        if key == 0 {
            return Err(crate::errors::invalid("the message is RIVET_MESSAGE_NULL"));
        }
        // SAFETY: the caller keeps the buffer valid and exclusive until completion.
        let id = on!(&e.e, e => unsafe { e.message_irecv_raw(key, buf, len) })?;
        // SAFETY: both checked non-null; valid by the contract.
        unsafe {
            msg.write(0);
            req.write(id);
        }
        Ok(())
    })
}

/// Receive the message `*msg` into `buf` and wait for it (truncation as
/// in [`rivet_recv`]); `*msg` becomes `RIVET_MESSAGE_NULL`.
///
/// # Safety
/// As [`rivet_imrecv`]; `status` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_mrecv(
    engine: *const rivet_engine_t,
    buf: *mut c_void,
    len: usize,
    msg: *mut rivet_message_t,
    status: *mut rivet_status_t,
) -> c_int {
    let mut req: rivet_request_t = 0;
    // SAFETY: forwarded under the same contract; `req` is local.
    let rc = unsafe { rivet_imrecv(engine, buf, len, msg, &mut req) };
    if rc != 0 {
        return rc;
    }
    boundary("rivet_mrecv", || {
        // SAFETY: live handle by the contract (checked by rivet_imrecv).
        let e = unsafe { handles::engine(engine) }?;
        // The buffer is the caller's until we return: finish first.
        let s = on!(&e.e, e => e.request_wait(req).inspect_err(|_| e.request_withdraw(req)))?;
        // SAFETY: null or valid by the contract.
        unsafe { put_status(status, s) };
        truncation(s)?;
        if let Some(rivet::MsgError::PeerFailed { rank }) = s.error {
            return Err(Fail::new(
                crate::errors::RIVET_ERR_PEER_FAILED,
                format!("rank {rank} failed before its message was received"),
            ));
        }
        Ok(())
    })
}
