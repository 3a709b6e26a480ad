//! The `job_control` upcall, there so that the library serves clean-up
//! requests itself.
//!
//! Open MPI 4.1's shared-memory transport (`btl/vader`) asks for its
//! `/dev/shm/vader_segment.*` files to be removed when the rank ends:
//! `PMIx_Job_control_nb` on itself with `PMIX_REGISTER_CLEANUP`
//! ("pmix.reg.cleanup", the path). OpenPMIx's server keeps such paths in the
//! client's epilog and removes them when the client goes away, without the
//! host ever seeing them, but only if the host module has a `job_control`
//! upcall at all: with none it answers "not supported" before reading the
//! request (`pmix_server_job_ctrl`, `src/server/pmix_server_ops.c`), and a
//! rank that aborts leaves its segment behind. Any other job-control
//! directive does reach this upcall and is refused: rivetrun has no
//! job-control actions to offer.

use std::ffi::{c_int, c_void};

use rivet_pmi::pmix_ffi::{PmixInfo, PmixProc, PMIX_ERR_NOT_SUPPORTED};

/// `pmix_info_cbfunc_t`, never called (the upcall answers at once).
type InfoCb = unsafe extern "C" fn(
    c_int,
    *mut PmixInfo,
    usize,
    *mut c_void,
    Option<unsafe extern "C" fn(*mut c_void)>,
    *mut c_void,
);

/// `pmix_server_job_control_fn_t`.
pub(super) type JobControlUp = unsafe extern "C" fn(
    *const PmixProc,
    *const PmixProc,
    usize,
    *const PmixInfo,
    usize,
    Option<InfoCb>,
    *mut c_void,
) -> c_int;

/// Refuse what the library left to the host (clean-up it handled itself).
pub(super) unsafe extern "C" fn on_job_control(
    _requestor: *const PmixProc,
    _targets: *const PmixProc,
    _ntargets: usize,
    _directives: *const PmixInfo,
    _ndirs: usize,
    _cb: Option<InfoCb>,
    _cbdata: *mut c_void,
) -> c_int {
    PMIX_ERR_NOT_SUPPORTED
}
