//! The small helpers every call into the PMIx server library needs: an
//! info list built and freed with the library's own loader, and a wait for
//! one operation's completion callback.

use std::ffi::{c_int, c_void, CStr, CString};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use rivet_pmi::pmix_ffi::{
    PmixInfo, PMIX_BOOL, PMIX_OPERATION_SUCCEEDED, PMIX_PROC_RANK, PMIX_STRING, PMIX_SUCCESS,
    PMIX_UINT16, PMIX_UINT32,
};

use super::{Api, OpCb};

/// A list of `pmix_info_t` built with the library's own loader (which copies
/// strings), released with it.
pub(super) struct InfoList<'a> {
    api: &'a Api,
    pub(super) infos: Vec<PmixInfo>,
}

impl<'a> InfoList<'a> {
    pub(super) fn new(api: &'a Api) -> InfoList<'a> {
        InfoList {
            api,
            infos: Vec::new(),
        }
    }

    pub(super) fn load(&mut self, key: &CStr, data: *const c_void, ty: u16) {
        // SAFETY: an all-zero pmix_info_t is the library's own "constructed"
        // state (PMIX_INFO_CONSTRUCT memsets it).
        let mut info: PmixInfo = unsafe { std::mem::zeroed() };
        // SAFETY: a valid info to fill, a NUL-terminated key, and `data`
        // pointing at a value of type `ty` (a C string for PMIX_STRING),
        // which the loader copies.
        unsafe { (self.api.info_load)(&mut info, key.as_ptr(), data, ty) };
        self.infos.push(info);
    }

    pub(super) fn string(&mut self, key: &CStr, value: &str) {
        let v = CString::new(value.replace('\0', "")).expect("NULs removed");
        self.load(key, v.as_ptr().cast(), PMIX_STRING);
    }

    pub(super) fn u32(&mut self, key: &CStr, value: u32) {
        self.load(key, (&value as *const u32).cast(), PMIX_UINT32);
    }

    pub(super) fn u16(&mut self, key: &CStr, value: u16) {
        self.load(key, (&value as *const u16).cast(), PMIX_UINT16);
    }

    pub(super) fn rank(&mut self, key: &CStr, value: u32) {
        self.load(key, (&value as *const u32).cast(), PMIX_PROC_RANK);
    }

    pub(super) fn flag(&mut self, key: &CStr, value: bool) {
        self.load(key, (&value as *const bool).cast(), PMIX_BOOL);
    }
}

impl Drop for InfoList<'_> {
    fn drop(&mut self) {
        for info in &mut self.infos {
            // SAFETY: each value was loaded by PMIx_Info_load and is
            // destructed once (frees the string copies).
            unsafe { (self.api.value_destruct)(&mut info.value) };
        }
    }
}

/// Waits for one `pmix_op_cbfunc_t` completion.
#[derive(Default)]
pub(super) struct Done {
    status: Mutex<Option<c_int>>,
    cond: Condvar,
}

unsafe extern "C" fn op_done(status: c_int, cbdata: *mut c_void) {
    // SAFETY: `cbdata` is the `Done` that `Done::wait`'s caller keeps alive
    // until this callback has run (or the wait gave up and leaked it).
    let done = unsafe { &*(cbdata as *const Done) };
    *done.status.lock().unwrap_or_else(|e| e.into_inner()) = Some(status);
    done.cond.notify_all();
}

/// How [`Done::run`]'s error ends when the library never called back.
pub(super) const NO_ANSWER: &str = "the PMIx server did not answer in 30 s";

impl Done {
    /// Run `call` with this completion as its callback; `rc` is the call's
    /// immediate answer. Leaks the completion if the library never calls
    /// back, so a late callback cannot touch freed memory.
    pub(super) fn run(
        op: &'static str,
        api: &Api,
        call: impl FnOnce(Option<OpCb>, *mut c_void) -> c_int,
    ) -> Result<(), String> {
        let done = Box::into_raw(Box::<Done>::default());
        let rc = call(Some(op_done), done.cast());
        if rc == PMIX_OPERATION_SUCCEEDED {
            // SAFETY: the library will not call back: the box is ours again.
            drop(unsafe { Box::from_raw(done) });
            return Ok(());
        }
        if rc != PMIX_SUCCESS {
            // SAFETY: as above, a refused call does not call back.
            drop(unsafe { Box::from_raw(done) });
            return api.check(op, rc);
        }
        // SAFETY: alive (leaked below if the callback never comes).
        let d = unsafe { &*done };
        let guard = d.status.lock().unwrap_or_else(|e| e.into_inner());
        let (guard, _) = d
            .cond
            .wait_timeout_while(guard, Duration::from_secs(30), |s| s.is_none())
            .unwrap_or_else(|e| e.into_inner());
        match *guard {
            Some(status) => {
                drop(guard);
                // SAFETY: the callback has run and will not run again.
                drop(unsafe { Box::from_raw(done) });
                api.check(op, status)
            }
            None => Err(format!("{op}: {NO_ANSWER}")),
        }
    }
}
