//! Group events for ranks bootstrapped by PMIx (seed 004: "processes that
//! terminate while connected ... generate a termination error event").
//!
//! Before its first group connect the client registers one handler for
//! `PMIX_GROUP_MEMBER_FAILED` (`PMIx_Register_event_handler`). The library
//! runs it on its own thread, so it only queues what it read (the group,
//! from `PMIX_GROUP_ID`, and the process that ended, from
//! `PMIX_EVENT_AFFECTED_PROC` or else the event's source) and completes
//! the event; [`crate::Client::poll_events`] drains the queue as
//! `Terminated` events for the groups this process is still in, the same
//! events Rivet's PMI-1 extension gives. rivetrun's PMIx server raises the
//! event (`launcher/src/pmix_host/`); a server that never does leaves the
//! queue empty.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::group::{GroupEvent, GroupEventKind, ProcName};
use crate::pmix_ffi::{
    PmixInfo, PmixProc, PMIX_GROUP_MEMBER_FAILED, PMIX_PROC, PMIX_STRING, PMIX_SUCCESS,
};

type OpCb = unsafe extern "C" fn(c_int, *mut c_void);
/// `pmix_event_notification_cbfunc_fn_t`: how a handler says it is done.
type EventDoneFn =
    unsafe extern "C" fn(c_int, *mut PmixInfo, usize, Option<OpCb>, *mut c_void, *mut c_void);
/// `pmix_notification_fn_t`.
type HandlerFn = unsafe extern "C" fn(
    usize,
    c_int,
    *const PmixProc,
    *mut PmixInfo,
    usize,
    *mut PmixInfo,
    usize,
    Option<EventDoneFn>,
    *mut c_void,
);
/// `PMIx_Register_event_handler(codes, ncodes, info, ninfo, handler,
/// regcb, cbdata)`; blocking with no `regcb`: a reference ≥ 0, or an error.
pub(super) type RegisterFn = unsafe extern "C" fn(
    *mut c_int,
    usize,
    *mut PmixInfo,
    usize,
    HandlerFn,
    *mut c_void,
    *mut c_void,
) -> c_int;

/// One member's end as the handler read it: (group, namespace, rank).
type Ended = (String, String, u32);

/// Filled by the library's thread, drained by `poll_events`.
static QUEUE: Mutex<Vec<Ended>> = Mutex::new(Vec::new());

fn key_of(info: &PmixInfo) -> &[u8] {
    let len = info.key.iter().position(|&c| c == 0).unwrap_or(0);
    // SAFETY: `len` bytes of the key array, reinterpreted as bytes.
    unsafe { std::slice::from_raw_parts(info.key.as_ptr().cast::<u8>(), len) }
}

/// What one event's infos say: its group and the process that ended.
fn read_infos(infos: &[PmixInfo]) -> (Option<String>, Option<(String, u32)>) {
    let (mut group, mut proc) = (None, None);
    for info in infos {
        let v = &info.value;
        match key_of(info) {
            b"pmix.grp.id" if v.ty == PMIX_STRING && v.data[0] != 0 => {
                // SAFETY: a PMIX_STRING value holds a NUL-terminated string.
                let s = unsafe { CStr::from_ptr(v.data[0] as *const c_char) };
                group = Some(s.to_string_lossy().into_owned());
            }
            b"pmix.evproc" if v.ty == PMIX_PROC && v.data[0] != 0 => {
                // SAFETY: a PMIX_PROC value points at one pmix_proc_t.
                let p = unsafe { &*(v.data[0] as *const PmixProc) };
                proc = Some((p.nspace(), p.rank));
            }
            _ => {}
        }
    }
    (group, proc)
}

unsafe extern "C" fn on_event(
    _id: usize,
    _status: c_int,
    source: *const PmixProc,
    info: *mut PmixInfo,
    ninfo: usize,
    _results: *mut PmixInfo,
    _nresults: usize,
    done: Option<EventDoneFn>,
    cbdata: *mut c_void,
) {
    let infos = if info.is_null() || ninfo == 0 {
        &[][..]
    } else {
        // SAFETY: the library passes `ninfo` valid infos for this call.
        unsafe { std::slice::from_raw_parts(info, ninfo) }
    };
    let (group, proc) = read_infos(infos);
    let proc = proc.or_else(|| {
        // SAFETY: the library's source proc, valid for this call.
        (!source.is_null()).then(|| unsafe { ((*source).nspace(), (*source).rank) })
    });
    if let (Some(group), Some((nspace, rank))) = (group, proc) {
        QUEUE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((group, nspace, rank));
    }
    if let Some(done) = done {
        // SAFETY: the library's completion with its own cbdata, once; no
        // results. PMIX_SUCCESS lets other handlers see the event too.
        unsafe {
            done(
                PMIX_SUCCESS,
                std::ptr::null_mut(),
                0,
                None,
                std::ptr::null_mut(),
                cbdata,
            )
        };
    }
}

/// Register the handler (once per process).
pub(super) fn register(register: RegisterFn, describe: impl Fn(c_int) -> String) -> Result<()> {
    let mut codes = [PMIX_GROUP_MEMBER_FAILED];
    // SAFETY: one valid code, no info, a handler that lives for the
    // process; blocking (no registration callback).
    let rc = unsafe {
        register(
            codes.as_mut_ptr(),
            1,
            std::ptr::null_mut(),
            0,
            on_event,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    if rc < 0 {
        return Err(Error::PmixFailed {
            op: "PMIx_Register_event_handler",
            why: describe(rc),
        });
    }
    Ok(())
}

/// Whether an end of a member of `group` is queued (not drained).
pub(super) fn queued_for(group: &str) -> bool {
    QUEUE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|(g, _, _)| g == group)
}

/// The queued ends of members of `groups`, as group events; ends in other
/// groups (left since, or never joined) are dropped.
pub(super) fn take(groups: &[String]) -> Vec<GroupEvent> {
    let queued = std::mem::take(&mut *QUEUE.lock().unwrap_or_else(|e| e.into_inner()));
    queued
        .into_iter()
        .filter(|(g, _, _)| groups.contains(g))
        .map(|(group, nspace, rank)| GroupEvent {
            group,
            kind: GroupEventKind::Terminated,
            proc: ProcName::new(nspace, rank),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmix_ffi::{load_key, PmixValue};

    fn info(key: &[u8], ty: u16, ptr: u64) -> PmixInfo {
        let mut i = PmixInfo::flag(c"", false);
        load_key(&mut i.key, key);
        i.value = PmixValue {
            ty,
            _pad: [0; 6],
            data: [ptr, 0, 0],
        };
        i
    }

    #[test]
    fn the_handler_reads_the_group_and_the_ended_process_and_keeps_live_groups_only() {
        let group = c"rivet-gabc-1";
        let dead = PmixProc::new("job-x", 2);
        let infos = [
            info(b"pmix.evrange", 0, 0),
            info(b"pmix.grp.id", PMIX_STRING, group.as_ptr() as u64),
            info(b"pmix.evproc", PMIX_PROC, &dead as *const PmixProc as u64),
        ];
        assert_eq!(
            read_infos(&infos),
            (Some("rivet-gabc-1".into()), Some(("job-x".into(), 2)))
        );
        let source = PmixProc::new("job-y", 7);
        let mut without_proc = [info(b"pmix.grp.id", PMIX_STRING, group.as_ptr() as u64)];
        // SAFETY: valid infos and source; no completion to call.
        unsafe {
            on_event(
                0,
                PMIX_GROUP_MEMBER_FAILED,
                &source,
                without_proc.as_mut_ptr(),
                1,
                std::ptr::null_mut(),
                0,
                None,
                std::ptr::null_mut(),
            )
        };
        let events = take(&["rivet-gabc-1".to_string()]);
        assert_eq!(
            events,
            vec![GroupEvent {
                group: "rivet-gabc-1".into(),
                kind: GroupEventKind::Terminated,
                proc: ProcName::new("job-y", 7),
            }]
        );
        assert!(take(&["rivet-gabc-1".to_string()]).is_empty(), "drained");
        assert!(!queued_for("rivet-gabc-1"));
    }
}
