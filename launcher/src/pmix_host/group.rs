//! The PMIx server's `group` upcall: `PMIx_Group_construct` and
//! `PMIx_Group_destruct` (OpenPMIx 4.x).
//!
//! The library gathers the participants it serves before it calls the
//! host, as for a fence; every rank and spawned process of a rivetrun job
//! is served by rivetrun's one server, so by then the collective is
//! complete. Construct answers `PMIX_GROUP_CONTEXT_ID` when asked to
//! assign one (`PMIX_GROUP_ASSIGN_CONTEXT_ID`), from a counter of the
//! server's, unique among the groups it made; destruct needs nothing more.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

use rivet_pmi::pmix_ffi::{PmixInfo, PmixProc, PMIX_BOOL, PMIX_ERR_BAD_PARAM, PMIX_SUCCESS};

/// `pmix_release_cbfunc_t`.
type ReleaseCb = unsafe extern "C" fn(*mut c_void);
/// `pmix_info_cbfunc_t`.
type InfoCb =
    unsafe extern "C" fn(c_int, *mut PmixInfo, usize, *mut c_void, Option<ReleaseCb>, *mut c_void);
pub(super) type GroupUp = unsafe extern "C" fn(
    c_int,
    *mut c_char,
    *const PmixProc,
    usize,
    *const PmixInfo,
    usize,
    Option<InfoCb>,
    *mut c_void,
) -> c_int;

/// `PMIX_SIZE`: a `size_t` value.
const PMIX_SIZE: u16 = 4;
/// `PMIX_GROUP_CONSTRUCT` of `pmix_group_operation_t`.
const CONSTRUCT: c_int = 0;

/// Context ids handed out so far (the first is 1, so 0 never names a group).
static NEXT_CONTEXT: AtomicU64 = AtomicU64::new(1);

fn key_is(info: &PmixInfo, key: &[u8]) -> bool {
    let len = info.key.iter().position(|&c| c == 0).unwrap_or(0);
    info.key[..len]
        .iter()
        .map(|&c| c as u8)
        .eq(key.iter().copied())
}

/// Whether the directives ask for a context id (a true
/// `PMIX_GROUP_ASSIGN_CONTEXT_ID`).
fn wants_context(directives: &[PmixInfo]) -> bool {
    directives.iter().any(|i| {
        key_is(i, b"pmix.grp.actxid") && i.value.ty == PMIX_BOOL && i.value.data[0] as u8 != 0
    })
}

/// The results handed to the library, freed when it says so.
unsafe extern "C" fn release(data: *mut c_void) {
    // SAFETY: `data` is the box `on_group` leaked for this call, released once.
    drop(unsafe { Box::from_raw(data.cast::<Vec<PmixInfo>>()) });
}

pub(super) unsafe extern "C" fn on_group(
    op: c_int,
    _grp: *mut c_char,
    _procs: *const PmixProc,
    _nprocs: usize,
    directives: *const PmixInfo,
    ndirs: usize,
    cb: Option<InfoCb>,
    cbdata: *mut c_void,
) -> c_int {
    let Some(cb) = cb else {
        return PMIX_ERR_BAD_PARAM;
    };
    let directives = if directives.is_null() || ndirs == 0 {
        &[][..]
    } else {
        // SAFETY: the library passes `ndirs` valid entries.
        unsafe { std::slice::from_raw_parts(directives, ndirs) }
    };
    let mut results: Box<Vec<PmixInfo>> = Box::default();
    if op == CONSTRUCT && wants_context(directives) {
        let id = NEXT_CONTEXT.fetch_add(1, Ordering::Relaxed);
        // SAFETY: all-zero is a constructed pmix_info_t; a size_t value
        // holds no pointer, so nothing needs destructing.
        let mut info: PmixInfo = unsafe { std::mem::zeroed() };
        rivet_pmi::pmix_ffi::load_key(&mut info.key, b"pmix.grp.ctxid");
        info.value.ty = PMIX_SIZE;
        info.value.data[0] = id;
        results.push(info);
    }
    let (ptr, n) = (results.as_mut_ptr(), results.len());
    let keep = Box::into_raw(results);
    // SAFETY: the library's callback with its own cbdata, called once; the
    // results stay alive until it calls `release` with `keep`.
    unsafe { cb(PMIX_SUCCESS, ptr, n, cbdata, Some(release), keep.cast()) };
    PMIX_SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_true_assign_directive_asks_for_a_context_id() {
        let yes = rivet_pmi::pmix_ffi::PmixInfo::flag(c"pmix.grp.actxid", true);
        let no = rivet_pmi::pmix_ffi::PmixInfo::flag(c"pmix.grp.actxid", false);
        let other = rivet_pmi::pmix_ffi::PmixInfo::flag(c"pmix.grp.opt", true);
        assert!(wants_context(std::slice::from_ref(&yes)));
        assert!(!wants_context(&[no, other]));
        assert!(!wants_context(&[]));
    }
}
