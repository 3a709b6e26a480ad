//! The PMIx server's `group` upcall: `PMIx_Group_construct` and
//! `PMIx_Group_destruct` (OpenPMIx 4.x).
//!
//! The library gathers the participants it serves before it calls the
//! host, as for a fence; every rank and spawned process of a rivetrun job
//! is served by rivetrun's one server, so by then the collective is
//! complete. Construct answers `PMIX_GROUP_CONTEXT_ID` when asked to
//! assign one (`PMIX_GROUP_ASSIGN_CONTEXT_ID`), from a counter of the
//! server's, unique among the groups it made.
//!
//! Seed 004's termination events: construct records the group (its name,
//! the processes named, wildcards kept, and whether members may end
//! without leaving: `PMIX_GROUP_NOTIFY_TERMINATION`); destruct, the
//! collective end of the group, forgets it. When a recorded member ends
//! first, [`member_ended`] says which groups it was in, so the host can
//! notify the others (`PMIX_GROUP_MEMBER_FAILED`) and, where that was not
//! allowed, fail the job as for a PMI-1 group without `early_term`.
//!
//! On a node of a multi-host job the library has gathered only this
//! node's members: the upcall (`on_node_group`) queues a [`GroupCall`]
//! for the proxy, which completes it across hosts through rivetrun, the
//! context id then rivetrun's, unique in the job (`proxy/pmix_subset.rs`).
//! The group is recorded there too, so a member's end is notified on every
//! node that has members (`proxy/pmix.rs`'s `member_ended`), once the
//! operation has completed on every host ([`GroupCall::finish`]): a
//! construct that failed (a host refused it, a member's host was lost)
//! records nothing, so no member's end is later taken for a group
//! member's.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rivet_pmi::pmix_ffi::{
    PmixInfo, PmixProc, PMIX_BOOL, PMIX_ERR_BAD_PARAM, PMIX_RANK_WILDCARD, PMIX_SUCCESS,
};

/// `pmix_release_cbfunc_t`.
type ReleaseCb = unsafe extern "C" fn(*mut c_void);
/// `pmix_info_cbfunc_t`.
pub type InfoCb =
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
/// `PMIX_GROUP_DESTRUCT`.
const DESTRUCT: c_int = 1;

/// `PMIX_GROUP_NOTIFY_TERMINATION`: members hear of one that ends without
/// leaving, in place of an error (PMIx's twin of RFC0003's
/// `PMIX_CONNECT_EARLY_TERM_ALLOWED`).
const NOTIFY_TERMINATION: &[u8] = b"pmix.grp.notterm";

/// A live group as construct named it.
#[derive(Debug, Clone)]
struct Record {
    /// `(namespace, rank)`; `PMIX_RANK_WILDCARD` for a whole namespace.
    procs: Vec<(String, u32)>,
    early_term: bool,
    /// Members that ended while in it.
    ended: BTreeSet<(String, u32)>,
}

/// The groups constructed and not yet destructed, by name.
static GROUPS: Mutex<BTreeMap<String, Record>> = Mutex::new(BTreeMap::new());

/// A group a process was in when it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    pub group: String,
    /// Who to tell: the processes construct named (wildcards kept).
    pub procs: Vec<(String, u32)>,
    /// Whether members may end without leaving.
    pub early_term: bool,
}

/// Process `rank` of `nspace` ended: the live groups it was a member of
/// (each reported once per process).
pub fn member_ended(nspace: &str, rank: u32) -> Vec<Left> {
    let mut groups = GROUPS.lock().unwrap_or_else(|e| e.into_inner());
    let mut left = Vec::new();
    for (name, record) in groups.iter_mut() {
        let named = record
            .procs
            .iter()
            .any(|(ns, r)| ns == nspace && (*r == rank || *r == PMIX_RANK_WILDCARD));
        if named && record.ended.insert((nspace.to_string(), rank)) {
            left.push(Left {
                group: name.clone(),
                procs: record.procs.clone(),
                early_term: record.early_term,
            });
        }
    }
    left
}

/// Construct (`construct`) or destruct of group `name` completed: record
/// it (or forget it).
fn record(name: &str, construct: bool, procs: &[(String, u32)], early_term: bool) {
    let mut groups = GROUPS.lock().unwrap_or_else(|e| e.into_inner());
    if construct {
        let record = Record {
            procs: procs.to_vec(),
            early_term,
            ended: BTreeSet::new(),
        };
        groups.insert(name.to_string(), record);
    } else {
        groups.remove(name);
    }
}

/// Whether the directives let members end without leaving (a true
/// `PMIX_GROUP_NOTIFY_TERMINATION`).
fn early_term(directives: &[PmixInfo]) -> bool {
    directives.iter().any(|i| {
        key_is(i, NOTIFY_TERMINATION) && i.value.ty == PMIX_BOOL && i.value.data[0] as u8 != 0
    })
}

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

/// Views of an upcall's procs and directives.
///
/// # Safety
/// Each pointer is null (its count then ignored) or points at as many
/// valid entries as its count says, alive while the views are used.
unsafe fn views<'a>(
    procs: *const PmixProc,
    nprocs: usize,
    directives: *const PmixInfo,
    ndirs: usize,
) -> (&'a [PmixProc], &'a [PmixInfo]) {
    let procs = if procs.is_null() || nprocs == 0 {
        &[][..]
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(procs, nprocs) }
    };
    let directives = if directives.is_null() || ndirs == 0 {
        &[][..]
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(directives, ndirs) }
    };
    (procs, directives)
}

/// Complete a group upcall: `status`, and `PMIX_GROUP_CONTEXT_ID` when
/// `context` is given.
fn reply(cb: InfoCb, cbdata: *mut c_void, status: c_int, context: Option<u64>) {
    let mut results: Box<Vec<PmixInfo>> = Box::default();
    if let Some(id) = context {
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
    unsafe { cb(status, ptr, n, cbdata, Some(release), keep.cast()) };
}

pub(super) unsafe extern "C" fn on_group(
    op: c_int,
    grp: *mut c_char,
    procs: *const PmixProc,
    nprocs: usize,
    directives: *const PmixInfo,
    ndirs: usize,
    cb: Option<InfoCb>,
    cbdata: *mut c_void,
) -> c_int {
    let Some(cb) = cb else {
        return PMIX_ERR_BAD_PARAM;
    };
    // SAFETY: the library passes `nprocs` procs and `ndirs` directives.
    let (procs, directives) = unsafe { views(procs, nprocs, directives, ndirs) };
    if !grp.is_null() && (op == CONSTRUCT || op == DESTRUCT) {
        // SAFETY: non-null, the library's NUL-terminated group name.
        let name = unsafe { std::ffi::CStr::from_ptr(grp) }.to_string_lossy();
        let procs: Vec<_> = procs.iter().map(|p| (p.nspace(), p.rank)).collect();
        // Complete here: every member is this server's client.
        record(&name, op == CONSTRUCT, &procs, early_term(directives));
    }
    let context = (op == CONSTRUCT && wants_context(directives))
        .then(|| NEXT_CONTEXT.fetch_add(1, Ordering::Relaxed));
    reply(cb, cbdata, PMIX_SUCCESS, context);
    PMIX_SUCCESS
}

/// A group operation of one node's clients in a multi-host job, for the
/// proxy to complete across hosts (`proxy/pmix_subset.rs`).
pub struct GroupCall {
    pub construct: bool,
    pub name: String,
    /// The processes named (`PMIX_RANK_WILDCARD`: a whole namespace);
    /// empty when the library named none (a destruct may not).
    pub procs: Vec<(String, u32)>,
    /// `PMIX_GROUP_ASSIGN_CONTEXT_ID`.
    pub wants_context: bool,
    /// `PMIX_GROUP_OPTIONAL`: members may never join.
    pub optional: bool,
    /// `PMIX_GROUP_NOTIFY_TERMINATION`: members may end without leaving.
    early_term: bool,
    /// The upcall already refused it with this status (`timeouts.rs`):
    /// the proxy only tells the other hosts, whose members would otherwise
    /// wait for this node's part.
    pub refusal: Option<c_int>,
    /// None for a refused call: the library has its answer.
    cb: Option<InfoCb>,
    cbdata: *mut c_void,
}

// SAFETY: the callback is the library's, callable from any thread (it
// moves the work to its own).
unsafe impl Send for GroupCall {}

impl std::fmt::Debug for GroupCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let op = if self.construct {
            "construct"
        } else {
            "destruct"
        };
        write!(f, "group {op} of {} over {:?}", self.name, self.procs)
    }
}

impl GroupCall {
    /// Complete the operation with `status` (and a context id for a
    /// construct that asked for one). Only now, and only if it succeeded
    /// on every host, is the group recorded (or forgotten): a construct
    /// that failed leaves no member whose end would be reported.
    pub fn finish(self, status: c_int, context: Option<u64>) {
        let Some(cb) = self.cb else { return };
        if status == PMIX_SUCCESS {
            record(&self.name, self.construct, &self.procs, self.early_term);
        }
        let context = context.filter(|_| self.construct && self.wants_context);
        reply(cb, self.cbdata, status, context);
    }
}

#[cfg(test)]
impl GroupCall {
    /// As the upcall leaves a call it refused: no callback to call.
    pub fn forget_callback(&mut self) {
        self.cb = None;
    }

    /// A call completed through `cb` with `cbdata` (tests without a library).
    pub fn for_test(
        construct: bool,
        name: &str,
        procs: Vec<(String, u32)>,
        wants_context: bool,
        cb: InfoCb,
        cbdata: *mut c_void,
    ) -> GroupCall {
        GroupCall {
            construct,
            name: name.to_string(),
            procs,
            wants_context,
            optional: false,
            early_term: false,
            refusal: None,
            cb: Some(cb),
            cbdata,
        }
    }
}

/// The `group` upcall of a multi-host job's node: queued for the proxy;
/// refused at once when given `PMIX_TIMEOUT` (`timeouts.rs`).
pub(super) unsafe extern "C" fn on_node_group(
    op: c_int,
    grp: *mut c_char,
    procs: *const PmixProc,
    nprocs: usize,
    directives: *const PmixInfo,
    ndirs: usize,
    cb: Option<InfoCb>,
    cbdata: *mut c_void,
) -> c_int {
    let Some(cb) = cb else {
        return PMIX_ERR_BAD_PARAM;
    };
    if grp.is_null() || (op != CONSTRUCT && op != DESTRUCT) {
        return PMIX_ERR_BAD_PARAM;
    }
    // SAFETY: the library passes `nprocs` procs and `ndirs` directives.
    let (procs, directives) = unsafe { views(procs, nprocs, directives, ndirs) };
    let timed = super::timeouts::arms_library_timer(directives);
    let refusal = timed.then_some(rivet_pmi::pmix_ffi::PMIX_ERR_NOT_SUPPORTED);
    let flag = |key: &[u8]| {
        directives
            .iter()
            .any(|i| key_is(i, key) && i.value.ty == PMIX_BOOL && i.value.data[0] as u8 != 0)
    };
    // Copied out before any answer: the library may free its arguments
    // once it has one.
    let call = GroupCall {
        construct: op == CONSTRUCT,
        // SAFETY: non-null, the library's NUL-terminated group name.
        name: unsafe { std::ffi::CStr::from_ptr(grp) }
            .to_string_lossy()
            .into_owned(),
        procs: procs.iter().map(|p| (p.nspace(), p.rank)).collect(),
        wants_context: flag(b"pmix.grp.actxid"),
        optional: flag(b"pmix.grp.opt"),
        early_term: early_term(directives),
        refusal,
        cb: Some(cb).filter(|_| !timed),
        cbdata,
    };
    if timed {
        // Refused through `cb` at once, within the upcall: the library's
        // handler then deletes its timer, which would crash it if it fired
        // first (`timeouts.rs`). The proxy still hears of it, to fail the
        // other hosts' members, which would otherwise wait for this node.
        eprintln!(
            "rivetrun: proxy: a PMIx group across hosts is not supported under multi-host \
             proxies: {}",
            super::timeouts::WHY
        );
        reply(
            cb,
            cbdata,
            rivet_pmi::pmix_ffi::PMIX_ERR_NOT_SUPPORTED,
            None,
        );
    }
    if let Err(super::PmixEvent::Group(call)) = super::push_event(super::PmixEvent::Group(call)) {
        call.finish(rivet_pmi::pmix_ffi::PMIX_ERR_NOT_SUPPORTED, None);
    }
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

    #[test]
    fn a_member_ending_is_reported_once_per_live_group_it_was_named_in() {
        let procs = [
            ("rivet-test-ns".to_string(), PMIX_RANK_WILDCARD),
            ("rivet-test-other".to_string(), 4),
        ];
        let eterm = rivet_pmi::pmix_ffi::PmixInfo::flag(c"pmix.grp.notterm", true);
        assert!(early_term(std::slice::from_ref(&eterm)));
        record("rivet-test-group-a", true, &procs, true);
        record("rivet-test-group-b", true, &procs[1..], false);
        let left = member_ended("rivet-test-ns", 2);
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].group, "rivet-test-group-a");
        assert!(left[0].early_term);
        assert_eq!(left[0].procs.len(), 2);
        assert!(
            member_ended("rivet-test-ns", 2).is_empty(),
            "reported twice"
        );
        let left = member_ended("rivet-test-other", 4);
        assert_eq!(left.len(), 2);
        assert!(left
            .iter()
            .any(|l| l.group == "rivet-test-group-b" && !l.early_term));
        record("rivet-test-group-a", false, &[], false);
        record("rivet-test-group-b", false, &[], false);
        assert!(
            member_ended("rivet-test-ns", 3).is_empty(),
            "a destructed group"
        );
    }

    /// Completions seen by `done`.
    static DONE: Mutex<Vec<c_int>> = Mutex::new(Vec::new());

    unsafe extern "C" fn done(
        status: c_int,
        _info: *mut PmixInfo,
        _n: usize,
        _cbdata: *mut c_void,
        release: Option<ReleaseCb>,
        release_data: *mut c_void,
    ) {
        DONE.lock().unwrap().push(status);
        if let Some(r) = release {
            // SAFETY: the release function and data `reply` passed.
            unsafe { r(release_data) };
        }
    }

    #[test]
    fn a_node_records_a_group_only_once_its_construct_completed_everywhere() {
        let ns = "rivet-test-node-ns";
        let call = |construct| {
            let procs = vec![(ns.to_string(), PMIX_RANK_WILDCARD)];
            GroupCall::for_test(
                construct,
                "rivet-test-node-group",
                procs,
                false,
                done,
                std::ptr::null_mut(),
            )
        };
        // Failed on some host (refused, or a member's host lost): no record,
        // so a member's end later is nobody's business.
        call(true).finish(rivet_pmi::pmix_ffi::PMIX_ERR_UNREACH, None);
        assert!(
            member_ended(ns, 0).is_empty(),
            "a failed construct left a record"
        );
        // Completed: recorded; a destruct that failed keeps it, one that
        // completed forgets it.
        call(true).finish(PMIX_SUCCESS, Some(3));
        call(false).finish(rivet_pmi::pmix_ffi::PMIX_ERR_UNREACH, None);
        assert_eq!(member_ended(ns, 1).len(), 1);
        call(false).finish(PMIX_SUCCESS, None);
        assert!(member_ended(ns, 2).is_empty(), "a destructed group");
        let seen = DONE.lock().unwrap().clone();
        assert_eq!(seen.len(), 4);
    }
}
