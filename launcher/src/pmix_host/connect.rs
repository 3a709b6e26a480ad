//! The PMIx server's `connect` and `disconnect` upcalls on a node of a
//! multi-host job (`PMIx_Connect`, `PMIx_Disconnect`).
//!
//! Open MPI's `MPI_Comm_spawn` and connect/accept end in a `PMIx_Connect`
//! over both sides' processes (each job's namespace); when they live on
//! more than one node, OpenPMIx gathers this node's participants and then
//! asks the host, which must complete the operation across the other
//! nodes. Without these upcalls the library never answered its clients,
//! and the spawn hung. On a node the upcall queues a [`ConnectCall`] for
//! the proxy, which gathers it through rivetrun as it does a fence over
//! some ranks (`proxy/pmix_subset.rs`); a connect given `PMIX_TIMEOUT` is
//! refused from the upcall (`timeouts.rs`). Single-host rivetrun leaves them
//! unset: every participant is a client of its one server, which
//! completes the operation itself.

use std::ffi::{c_int, c_void};

use rivet_pmi::pmix_ffi::{PmixInfo, PmixProc, PMIX_ERR_NOT_SUPPORTED, PMIX_SUCCESS};

use super::{push_event, OpCb, PmixEvent};

/// `pmix_server_connect_fn_t` and `pmix_server_disconnect_fn_t`.
pub(super) type ConnectUp = unsafe extern "C" fn(
    *const PmixProc,
    usize,
    *const PmixInfo,
    usize,
    Option<OpCb>,
    *mut c_void,
) -> c_int;

/// A connect or disconnect of this node's clients, for the proxy to
/// complete across hosts.
pub struct ConnectCall {
    /// Connect (else disconnect).
    pub connect: bool,
    /// The processes named (`PMIX_RANK_WILDCARD`: a whole namespace).
    pub procs: Vec<(String, u32)>,
    /// The upcall already refused it with this status (`timeouts.rs`):
    /// the proxy only tells the other hosts, whose members would otherwise
    /// wait for this node's part.
    pub refusal: Option<c_int>,
    /// None for a refused call: the library has finished it.
    cb: Option<OpCb>,
    cbdata: *mut c_void,
}

// SAFETY: the callback is the library's, callable from any thread (it
// moves the work to its own).
unsafe impl Send for ConnectCall {}

impl std::fmt::Debug for ConnectCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let op = if self.connect {
            "connect"
        } else {
            "disconnect"
        };
        write!(f, "{op} over {:?}", self.procs)
    }
}

impl ConnectCall {
    /// Complete the operation with `status`.
    pub fn finish(self, status: c_int) {
        if let Some(cb) = self.cb {
            // SAFETY: the library's callback with its own cbdata, called once.
            unsafe { cb(status, self.cbdata) };
        }
    }
}

#[cfg(test)]
impl ConnectCall {
    /// As the upcall leaves a call it refused: no callback to call.
    pub fn forget_callback(&mut self) {
        self.cb = None;
    }

    /// A call completed through `cb` with `cbdata` (tests without a library).
    pub fn for_test(
        connect: bool,
        procs: Vec<(String, u32)>,
        cb: OpCb,
        cbdata: *mut c_void,
    ) -> ConnectCall {
        ConnectCall {
            connect,
            procs,
            refusal: None,
            cb: Some(cb),
            cbdata,
        }
    }
}

/// Queue the call for the proxy (or refuse it where no server runs).
///
/// # Safety
/// `procs` is null or points at `nprocs` valid procs.
unsafe fn queue(
    connect: bool,
    procs: *const PmixProc,
    nprocs: usize,
    cb: Option<OpCb>,
    cbdata: *mut c_void,
    refusal: Option<c_int>,
) -> c_int {
    if cb.is_none() && refusal.is_none() {
        return rivet_pmi::pmix_ffi::PMIX_ERR_BAD_PARAM;
    }
    let procs = if procs.is_null() || nprocs == 0 {
        Vec::new()
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(procs, nprocs) }
            .iter()
            .map(|p| (p.nspace(), p.rank))
            .collect()
    };
    let call = ConnectCall {
        connect,
        procs,
        refusal,
        cb: cb.filter(|_| refusal.is_none()),
        cbdata,
    };
    if let Err(PmixEvent::Connect(call)) = push_event(PmixEvent::Connect(call)) {
        call.finish(PMIX_ERR_NOT_SUPPORTED);
    }
    PMIX_SUCCESS
}

pub(super) unsafe extern "C" fn on_node_connect(
    procs: *const PmixProc,
    nprocs: usize,
    info: *const PmixInfo,
    ninfo: usize,
    cb: Option<OpCb>,
    cbdata: *mut c_void,
) -> c_int {
    // SAFETY: the library passes `ninfo` valid infos.
    if super::timeouts::arms_library_timer(unsafe { super::timeouts::infos(info, ninfo) }) {
        // Refused here, not through `cb`: the library then fails the
        // connect itself and arms no timer (`timeouts.rs`). The proxy
        // still hears of it, to fail the other hosts' members.
        eprintln!(
            "rivetrun: proxy: a PMIx connect across hosts is not supported under multi-host \
             proxies: {}",
            super::timeouts::WHY
        );
        // SAFETY: the library passes `nprocs` valid procs.
        unsafe {
            queue(
                true,
                procs,
                nprocs,
                None,
                cbdata,
                Some(PMIX_ERR_NOT_SUPPORTED),
            )
        };
        return PMIX_ERR_NOT_SUPPORTED;
    }
    // SAFETY: the library passes `nprocs` valid procs.
    unsafe { queue(true, procs, nprocs, cb, cbdata, None) }
}

/// A disconnect given `PMIX_TIMEOUT` is taken: OpenPMIx arms no timer for
/// it (`timeouts.rs`).
pub(super) unsafe extern "C" fn on_node_disconnect(
    procs: *const PmixProc,
    nprocs: usize,
    _info: *const PmixInfo,
    _ninfo: usize,
    cb: Option<OpCb>,
    cbdata: *mut c_void,
) -> c_int {
    // SAFETY: the library passes `nprocs` valid procs.
    unsafe { queue(false, procs, nprocs, cb, cbdata, None) }
}
