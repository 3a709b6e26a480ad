//! The host module's own upcalls (client connected or finalized, abort,
//! one node's fence) and the queue through which upcalls reach the
//! supervisor: events, and the waker that says so.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::{Arc, Mutex, OnceLock};

use mio::Waker;
use rivet_pmi::pmix_ffi::{PmixInfo, PmixProc, PMIX_OPERATION_SUCCEEDED, PMIX_SUCCESS};

use super::{ModexCb, OpCb, PmixEvent};

/// The supervisor's side of the upcalls: events and the waker that says so
/// (set once the supervisor exists, before any rank starts).
pub(super) struct Upcalls {
    pub(super) waker: Mutex<Option<Arc<Waker>>>,
    pub(super) events: Mutex<Vec<PmixEvent>>,
}

/// Upcalls carry no pointer of ours, so their target is process-wide (one
/// PMIx server per process is the library's own rule too).
pub(super) static UPCALLS: OnceLock<Upcalls> = OnceLock::new();

/// The upcalls' events since the last call (none if no server runs in
/// this process).
pub fn take_queued() -> Vec<PmixEvent> {
    UPCALLS.get().map_or_else(Vec::new, |up| {
        std::mem::take(&mut *up.events.lock().unwrap_or_else(|e| e.into_inner()))
    })
}

/// Queue `event` for the supervisor and wake it; the event comes back if
/// no server runs.
pub(super) fn push_event(event: PmixEvent) -> Result<(), PmixEvent> {
    let Some(up) = UPCALLS.get() else {
        return Err(event);
    };
    up.events
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(event);
    if let Some(waker) = up.waker.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        let _ = waker.wake();
    }
    Ok(())
}

/// A client connected: Nagle off on its end (`client_nodelay.rs`).
pub(super) unsafe extern "C" fn on_connected(
    proc: *const PmixProc,
    _object: *mut c_void,
    _cb: Option<OpCb>,
    _cbdata: *mut c_void,
) -> c_int {
    if !proc.is_null() {
        // SAFETY: non-null, the connected client's proc.
        let (nspace, rank) = unsafe { ((*proc).nspace(), (*proc).rank) };
        super::client_nodelay::connected(nspace, rank);
    }
    PMIX_OPERATION_SUCCEEDED
}

pub(super) unsafe extern "C" fn on_finalized(
    _proc: *const PmixProc,
    _object: *mut c_void,
    _cb: Option<OpCb>,
    _cbdata: *mut c_void,
) -> c_int {
    PMIX_OPERATION_SUCCEEDED
}

/// The library's completion of a `PMIx_Abort`, called when this is
/// dropped: once the event carrying it has been handled (the job failed on
/// one host; the abort sent to rivetrun on a node). Until then the caller
/// stays in `PMIx_Abort`, so it cannot exit first and have its exit, which
/// travels by another path, reported before its abort.
pub struct AbortAck {
    cb: Option<OpCb>,
    cbdata: *mut c_void,
}

// SAFETY: the callback is the library's, callable from any thread (it
// moves the work to its own).
unsafe impl Send for AbortAck {}

impl Drop for AbortAck {
    fn drop(&mut self) {
        if let Some(cb) = self.cb.take() {
            // SAFETY: the library's callback with its own cbdata, called once.
            unsafe { cb(PMIX_SUCCESS, self.cbdata) };
        }
    }
}

impl std::fmt::Debug for AbortAck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AbortAck")
    }
}

pub(super) unsafe extern "C" fn on_abort(
    proc: *const PmixProc,
    _object: *mut c_void,
    status: c_int,
    msg: *const c_char,
    _procs: *mut PmixProc,
    _nprocs: usize,
    cb: Option<OpCb>,
    cbdata: *mut c_void,
) -> c_int {
    // SAFETY: the library passes the caller's valid proc.
    let (nspace, rank) = unsafe { ((*proc).nspace(), (*proc).rank) };
    let message = if msg.is_null() {
        String::new()
    } else {
        // SAFETY: non-null, NUL-terminated (the client's message).
        unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned()
    };
    let waits = cb.is_some();
    let event = PmixEvent::Aborted {
        nspace,
        rank,
        code: status,
        message,
        ack: AbortAck { cb, cbdata },
    };
    match push_event(event) {
        // The caller is released once the abort is handled.
        Ok(()) if waits => PMIX_SUCCESS,
        Ok(()) => PMIX_OPERATION_SUCCEEDED,
        Err(PmixEvent::Aborted { mut ack, .. }) => {
            // Nobody to handle it: released at once, not by the ack.
            ack.cb = None;
            PMIX_OPERATION_SUCCEEDED
        }
        Err(_) => PMIX_OPERATION_SUCCEEDED,
    }
}

pub(super) unsafe extern "C" fn on_fence(
    _procs: *const PmixProc,
    _nprocs: usize,
    _info: *const PmixInfo,
    _ninfo: usize,
    data: *mut c_char,
    ndata: usize,
    cb: Option<ModexCb>,
    cbdata: *mut c_void,
) -> c_int {
    // One node: the local contributions are the whole job's.
    if let Some(cb) = cb {
        // SAFETY: the library's own callback with its own data and cbdata;
        // no release function (the data stays the library's).
        unsafe {
            cb(
                PMIX_SUCCESS,
                data,
                ndata,
                cbdata,
                None,
                std::ptr::null_mut(),
            )
        };
    }
    PMIX_SUCCESS
}
