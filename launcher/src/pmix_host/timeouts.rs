//! What OpenPMIx 4.2.2's server does with a client's `PMIX_TIMEOUT`
//! (`pmix.timeout`) on a collective, and so when a node's host may take
//! such a collective across hosts (read in the 4.2.2 source,
//! `src/server/pmix_server_ops.c` and `src/server/pmix_server.c`):
//!
//! * **fence** (`pmix_server_fence`): the timer is armed once, at the first
//!   local participant, and deleted as soon as the last one is in, before
//!   `fence_nb` is called. The host is therefore never handed a tracker
//!   whose timer still runs; only the host's callback (`modex_cbfunc`, then
//!   `_mdxcbfunc`) completes and frees it, however late it comes. So the
//!   library enforces the timeout only while a server waits for its own
//!   clients, and a node's host enforces it across hosts: the fence upcall
//!   reads it ([`timeout_of`]) and the proxy times the fence from then; if
//!   the other hosts are not all in by the deadline, rivetrun fails it on
//!   every host with `PMIX_ERR_TIMEOUT` (those in at once, the late ones
//!   as they come; `proxy/pmix_fences.rs` for a whole-job fence,
//!   `proxy/pmix_subset.rs` for some ranks). When the library's own timer
//!   fires on a node (one of that node's clients late), it fails the
//!   fence for the clients in without calling the host, and the late
//!   client's fence, when it comes, is matched by its processes to the
//!   next fence over the same processes, which the others then join: the
//!   node's fences no longer pair with the other hosts' one for one. That
//!   is the library's, and no host can see it (seen with rivetrun `-n 2`
//!   on one host, where the library alone times fences: the rank in time
//!   gets `PMIX_ERR_TIMEOUT` at the deadline, the late one's fence
//!   completes with the other's next).
//!   One window the source does not close, the library's own: its timer handler
//!   (`fence_timeout`) hands the completion to a later event, and a last
//!   local participant arriving in between still finds the tracker and
//!   calls the host with it, which that completion then frees. It lasts
//!   one turn of the library's event loop, at the deadline, and no host
//!   can see it.
//! * **connect** (`pmix_server_connect`): the timer is armed (with a
//!   reference on the tracker) after every local participant's call that
//!   returns success, including the one that called the host. When it
//!   fires (`connect_timeout`) it completes the connect itself (`_cnct`:
//!   the clients get `PMIX_ERR_TIMEOUT`, the tracker leaves the server's
//!   list of collectives); the host's answer afterwards runs `_cnct` again
//!   on the same tracker: a second reply to each client (its library logs
//!   "UNEXPECTED MESSAGE") and a second unlink from the list through stale
//!   pointers. In our runs the node's server then crashed. When the upcall
//!   returns an error instead, no timer is armed for that call, and the
//!   one an earlier local participant armed is deleted as the library
//!   fails the connect (`_cnct`). `disconnect` arms no timer.
//! * **group** construct and destruct (`pmix_server_grpconstruct`,
//!   `pmix_server_grpdestruct`): the timer is armed at every local
//!   participant, before the host is called, with the tracker as its data,
//!   but its handler (`grp_timeout`) reads that data as a client's request:
//!   if it fires before the host's answer, the server crashes (seen: a
//!   segfault in libpmix on the node at the deadline). The host's answer
//!   (`grpcbfunc`, then `_grpcbfunc`) deletes the timer. An error returned
//!   by the upcall instead frees the tracker with the calling client's
//!   request still on it, which the server's switchyard then releases a
//!   second time; the clients got no answer in our runs.
//!
//! So a node's host refuses a connect given a timeout from the upcall
//! itself (`PMIX_ERR_NOT_SUPPORTED`, never through the callback, which the
//! library then calls itself): no timer is left to complete it. A group
//! operation given a timeout it refuses through the callback at once,
//! within the upcall, as single-host rivetrun answers every group: the
//! library's handler deletes the timer before it can fire (unless it had
//! fired already, the node's last participant coming after the deadline,
//! which no host can prevent).
//!
//! Where two or more of one server's clients each give the timeout, the
//! library arms the same timer event twice (the second arm re-initialises
//! an event still queued in libevent), and once the deadline passes its
//! progress thread spins for ever, however the operation ended: for a
//! group whatever the host does, for a connect unless the host refuses it
//! from the upcall (the last participant's arm follows a successful
//! upcall). Seen on one host, where the server completes connects and
//! groups among its own clients without the host: a connect or a group of
//! two ranks given `PMIX_TIMEOUT`, the job then hung. A group construct
//! over the job without a context id, or any operation whose participants
//! are all one server's clients, never reaches the host.

use std::time::Duration;

use rivet_pmi::pmix_ffi::PmixInfo;

/// Whether OpenPMIx 4.2.2 arms its timer for a connect or a group
/// operation given `info`: a `pmix.timeout` entry whose value, read as the
/// library reads it (the low 32 bits as an unsigned number, whatever its
/// type), is not zero.
pub(super) fn arms_library_timer(info: &[PmixInfo]) -> bool {
    timeout_of(info).is_some()
}

/// The `pmix.timeout` of an upcall's infos, read as the library reads it
/// (the low 32 bits of the value as unsigned seconds, whatever its type):
/// None when absent or zero. A node's fence carries it to the proxy, which
/// enforces it across hosts (`proxy/pmix_fences.rs`, `proxy/pmix_subset.rs`).
pub(super) fn timeout_of(info: &[PmixInfo]) -> Option<Duration> {
    info.iter().find_map(|i| {
        let len = i.key.iter().position(|&c| c == 0).unwrap_or(i.key.len());
        let key = i.key[..len].iter().map(|&c| c as u8);
        let secs = i.value.data[0] as u32;
        (key.eq(b"pmix.timeout".iter().copied()) && secs != 0)
            .then(|| Duration::from_secs(secs.into()))
    })
}

/// Why a node refuses such an operation, for its message.
pub(super) const WHY: &str = "it gave PMIX_TIMEOUT (pmix.timeout), and OpenPMIx 4.2's server \
     completes it a second time (connect) or crashes (group) if its own timer fires before the \
     other hosts answer; call it without a timeout";

/// Views of an upcall's infos.
///
/// # Safety
/// `info` is null or points at `n` valid infos, alive while the view is.
pub(super) unsafe fn infos<'a>(info: *const PmixInfo, n: usize) -> &'a [PmixInfo] {
    if info.is_null() || n == 0 {
        &[]
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(info, n) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rivet_pmi::pmix_ffi::{load_key, PMIX_INT, PMIX_UINT32};

    fn number(key: &[u8], ty: u16, value: u64) -> PmixInfo {
        let mut info = PmixInfo::flag(c"x", false);
        info.key = [0; 512];
        load_key(&mut info.key, key);
        info.value.ty = ty;
        info.value.data[0] = value;
        info
    }

    #[test]
    fn a_timeout_arms_the_library_timer_as_the_library_reads_it() {
        assert!(arms_library_timer(&[number(b"pmix.timeout", PMIX_INT, 1)]));
        assert!(arms_library_timer(&[
            PmixInfo::flag(c"pmix.grp.actxid", true),
            number(b"pmix.timeout", PMIX_UINT32, 30),
        ]));
        // -1 as a C int: the library reads 0xffffffff seconds.
        let minus_one = u32::MAX as u64;
        assert!(arms_library_timer(&[number(
            b"pmix.timeout",
            PMIX_INT,
            minus_one
        )]));
        // Zero, another key, none: no timer.
        assert!(!arms_library_timer(&[number(b"pmix.timeout", PMIX_INT, 0)]));
        assert!(!arms_library_timer(&[number(
            b"pmix.timeout.x",
            PMIX_INT,
            5
        )]));
        assert!(!arms_library_timer(&[]));
        // The fence's deadline, read alike.
        assert_eq!(
            timeout_of(&[number(b"pmix.timeout", PMIX_INT, 1)]),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            timeout_of(&[number(b"pmix.timeout", PMIX_INT, minus_one)]),
            Some(Duration::from_secs(u32::MAX.into()))
        );
        assert_eq!(timeout_of(&[number(b"pmix.timeout", PMIX_INT, 0)]), None);
        // SAFETY: null with any count is an empty view.
        assert!(unsafe { infos(std::ptr::null(), 3) }.is_empty());
    }
}

#[cfg(test)]
mod upcall_tests {
    use std::ffi::{c_char, c_int, c_void};
    use std::sync::Mutex;

    use rivet_pmi::pmix_ffi::{
        load_key, PmixInfo, PmixProc, PMIX_ERR_NOT_SUPPORTED, PMIX_INT, PMIX_SUCCESS,
    };

    type ReleaseCb = unsafe extern "C" fn(*mut c_void);

    /// The statuses each callback was called with.
    static CONNECTS: Mutex<Vec<c_int>> = Mutex::new(Vec::new());
    static GROUPS: Mutex<Vec<c_int>> = Mutex::new(Vec::new());

    unsafe extern "C" fn op_done(status: c_int, _cbdata: *mut c_void) {
        CONNECTS.lock().unwrap().push(status);
    }

    unsafe extern "C" fn info_done(
        status: c_int,
        _info: *mut PmixInfo,
        _n: usize,
        _cbdata: *mut c_void,
        release: Option<ReleaseCb>,
        release_data: *mut c_void,
    ) {
        GROUPS.lock().unwrap().push(status);
        if let Some(r) = release {
            // SAFETY: the release function and data the upcall passed.
            unsafe { r(release_data) };
        }
    }

    fn timed() -> [PmixInfo; 1] {
        let mut info = PmixInfo::flag(c"x", false);
        info.key = [0; 512];
        load_key(&mut info.key, b"pmix.timeout");
        info.value.ty = PMIX_INT;
        info.value.data[0] = 1;
        [info]
    }

    /// A node's connect upcall refuses a timed connect by its return value
    /// and never calls the library's callback (which would complete it
    /// twice: the library completes a refused connect itself); its group
    /// upcall refuses a timed construct or destruct through the callback,
    /// once, before it returns.
    #[test]
    fn a_node_refuses_a_timed_connect_by_its_return_and_a_timed_group_at_once() {
        let procs = [PmixProc::new("rivet-test-timeout-ns", 0)];
        let info = timed();
        // SAFETY: valid procs and infos; the callback only records.
        let rc = unsafe {
            super::super::connect::on_node_connect(
                procs.as_ptr(),
                1,
                info.as_ptr(),
                1,
                Some(op_done),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(rc, PMIX_ERR_NOT_SUPPORTED);
        assert!(
            CONNECTS.lock().unwrap().is_empty(),
            "connect's callback was called"
        );
        let name = c"rivet-test-timeout-group";
        // PMIX_GROUP_CONSTRUCT, PMIX_GROUP_DESTRUCT.
        for op in [0, 1] {
            // SAFETY: as above, and a NUL-terminated name.
            let rc = unsafe {
                super::super::group::on_node_group(
                    op,
                    name.as_ptr() as *mut c_char,
                    procs.as_ptr(),
                    1,
                    info.as_ptr(),
                    1,
                    Some(info_done),
                    std::ptr::null_mut(),
                )
            };
            assert_eq!(rc, PMIX_SUCCESS);
            assert_eq!(GROUPS.lock().unwrap().pop(), Some(PMIX_ERR_NOT_SUPPORTED));
            assert!(GROUPS.lock().unwrap().is_empty(), "answered more than once");
        }
    }
}
