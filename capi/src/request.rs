//! Requests as `u64` handles: test, wait, wait for all or any, cancel,
//! free. A handle the engine completed becomes `RIVET_REQUEST_NULL` (0)
//! in the caller's variable; a stale handle finds nothing and counts as
//! complete with an empty status (handles are generation-checked).

use std::ffi::c_int;

use crate::errors::{boundary, invalid, CResult, Fail, RIVET_ERR_IN_STATUS};
use crate::handles::{self, on, out_ptr, rivet_engine_t, rivet_request_t};
use crate::{put_status, rivet_status_t};

/// A completed request's own error as the call's return code.
#[inline(always)]
fn status_code(s: rivet::Status) -> CResult {
    match s.error {
        None => Ok(()),
        Some(_) => Err(status_fail(s)),
    }
}

#[cold]
#[inline(never)]
fn status_fail(s: rivet::Status) -> Fail {
    let code = rivet_status_t::from(s).error;
    Fail::new(code, s.error.map(|e| e.to_string()).unwrap_or_default())
}

/// `*flag` 1 and `*req` set to `RIVET_REQUEST_NULL` if the request has
/// completed (then its status, and its error as the return code); else
/// progress once and `*flag` 0. `status` may be null.
///
/// # Safety
/// `engine` is a live handle; `req` and `flag` valid for reads/writes;
/// `status` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_test(
    engine: *const rivet_engine_t,
    req: *mut rivet_request_t,
    flag: *mut c_int,
    status: *mut rivet_status_t,
) -> c_int {
    boundary("rivet_test", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        out_ptr(req, "the request")?;
        out_ptr(flag, "the flag")?;
        // SAFETY: checked non-null; valid by the contract.
        let id = unsafe { req.read() };
        let done = match id {
            0 => Some(rivet::Status::default()),
            id => on!(&e.e, e => e.request_test(id))?,
        };
        // SAFETY: checked non-null; valid by the contract.
        unsafe { flag.write(done.is_some() as c_int) };
        let Some(s) = done else { return Ok(()) };
        // SAFETY: checked non-null / null or valid, by the contract.
        unsafe {
            req.write(0);
            put_status(status, s);
        }
        status_code(s)
    })
}

/// Block until the request completes; `*req` becomes
/// `RIVET_REQUEST_NULL`. Returns the request's own error, if it has one
/// (`RIVET_ERR_TRUNCATE`, `RIVET_ERR_PEER_FAILED`).
///
/// # Safety
/// As [`rivet_test`], without `flag`.
#[no_mangle]
pub unsafe extern "C" fn rivet_wait(
    engine: *const rivet_engine_t,
    req: *mut rivet_request_t,
    status: *mut rivet_status_t,
) -> c_int {
    boundary("rivet_wait", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        out_ptr(req, "the request")?;
        // SAFETY: checked non-null; valid by the contract.
        let id = unsafe { req.read() };
        let s = match id {
            0 => rivet::Status::default(),
            id => on!(&e.e, e => e.request_wait(id))?,
        };
        // SAFETY: checked non-null / null or valid, by the contract.
        unsafe {
            req.write(0);
            put_status(status, s);
        }
        status_code(s)
    })
}

/// Block until every request of `reqs[0..n]` completes (null ones count
/// as done); each becomes `RIVET_REQUEST_NULL` and its status goes to
/// `statuses[i]` (`statuses` may be null). `RIVET_ERR_IN_STATUS` if some
/// request failed.
///
/// # Safety
/// `engine` is a live handle; `reqs` valid for `n` reads and writes;
/// `statuses` null or valid for `n` writes.
#[no_mangle]
pub unsafe extern "C" fn rivet_waitall(
    engine: *const rivet_engine_t,
    n: usize,
    reqs: *mut rivet_request_t,
    statuses: *mut rivet_status_t,
) -> c_int {
    boundary("rivet_waitall", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        if n == 0 {
            return Ok(());
        }
        out_ptr(reqs, "the requests")?;
        let mut failed = false;
        if !statuses.is_null() {
            for i in 0..n {
                // SAFETY: valid for `n` writes by the contract.
                unsafe { statuses.add(i).write(rivet_status_t::default()) };
            }
        }
        // A leading run of sends that completed as they started (and of
        // null handles) needs no engine: nulled here in one pass (their
        // statuses are the empty ones written above), so a window of
        // such sends costs one read and write each.
        let mut first = 0;
        while first < n {
            // SAFETY: first < n; valid for `n` reads and writes by the contract.
            let id = unsafe { reqs.add(first).read() };
            if id != 0 && id != rivet::REQUEST_COMPLETE {
                break;
            }
            // SAFETY: as above.
            unsafe { reqs.add(first).write(0) };
            first += 1;
        }
        if first == n {
            return Ok(());
        }
        // SAFETY: first < n, so both stay inside their arrays.
        let (n, reqs) = (n - first, unsafe { reqs.add(first) });
        let statuses = match statuses.is_null() {
            true => statuses,
            // SAFETY: as above.
            false => unsafe { statuses.add(first) },
        };
        // Each handle is read where it lies and nulled as it completes
        // (so one that completed stays null even if the wait then fails).
        // SAFETY: the engine asks only for i < n (`request_wait_all`), and
        // `reqs` is valid for `n` reads and writes by the contract.
        let id_at = |i: usize| unsafe { reqs.add(i).read() };
        let done = |i: usize, s: rivet::Status| {
            failed |= s.error.is_some();
            // SAFETY: i < n, as for `id_at`.
            unsafe { reqs.add(i).write(0) };
            if !statuses.is_null() {
                // SAFETY: i < n; valid for `n` writes by the contract.
                unsafe { statuses.add(i).write(s.into()) };
            }
        };
        on!(&e.e, e => e.request_wait_all(n, id_at, done))?;
        if failed {
            return Err(Fail::new(
                RIVET_ERR_IN_STATUS,
                "a request failed: see its status",
            ));
        }
        Ok(())
    })
}

/// Block until one request of `reqs[0..n]` other than null completes:
/// its index in `*index` (`SIZE_MAX` if all are null), it becomes
/// `RIVET_REQUEST_NULL`, its status goes to `*status` (may be null) and
/// its error is the return code.
///
/// # Safety
/// `engine` is a live handle; `reqs` valid for `n` reads and writes;
/// `index` valid for a write; `status` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_waitany(
    engine: *const rivet_engine_t,
    n: usize,
    reqs: *mut rivet_request_t,
    index: *mut usize,
    status: *mut rivet_status_t,
) -> c_int {
    boundary("rivet_waitany", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        out_ptr(index, "the index")?;
        if n > 0 {
            out_ptr(reqs, "the requests")?;
        }
        let ids: &mut [u64] = if n == 0 {
            &mut []
        } else {
            // SAFETY: non-null and valid for `n` elements by the contract.
            unsafe { std::slice::from_raw_parts_mut(reqs, n) }
        };
        let ids_read: &[u64] = ids;
        let found = on!(&e.e, e => e.request_wait_any(n, |i| ids_read[i]))?;
        let Some((i, s)) = found else {
            // SAFETY: checked non-null; valid by the contract.
            unsafe { index.write(usize::MAX) };
            return Ok(());
        };
        ids[i] = 0;
        // SAFETY: checked non-null / null or valid, by the contract.
        unsafe {
            index.write(i);
            put_status(status, s);
        }
        status_code(s)
    })
}

/// Ask to cancel: a receive not yet matched, or a synchronous or
/// rendezvous send not yet matched. Then wait or test the request; its
/// status says whether it was cancelled.
///
/// # Safety
/// `engine` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rivet_cancel(
    engine: *const rivet_engine_t,
    req: rivet_request_t,
) -> c_int {
    boundary("rivet_cancel", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        if req == 0 {
            return Err(invalid("the request is RIVET_REQUEST_NULL"));
        }
        on!(&e.e, e => e.request_cancel(req))?;
        Ok(())
    })
}

/// Nobody will wait for the request: the engine frees it when it
/// completes (its buffer stays the engine's until then). `*req` becomes
/// `RIVET_REQUEST_NULL`.
///
/// # Safety
/// `engine` is a live handle; `req` valid for reads and writes.
#[no_mangle]
pub unsafe extern "C" fn rivet_request_free(
    engine: *const rivet_engine_t,
    req: *mut rivet_request_t,
) -> c_int {
    boundary("rivet_request_free", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        out_ptr(req, "the request")?;
        // SAFETY: checked non-null; valid by the contract.
        let id = unsafe { req.read() };
        if id != 0 {
            on!(&e.e, e => e.request_free(id));
        }
        // SAFETY: checked non-null; valid by the contract.
        unsafe { req.write(0) };
        Ok(())
    })
}
