//! The PMIx server of one node of a multi-host job, run by that node's
//! proxy (`crate::proxy::pmix`). The namespace is the whole job's (its
//! size, the node map of every host and the process map of every node),
//! but only this node's ranks are its clients. Its host module differs
//! from single-host rivetrun's in what needs the other hosts:
//! * `fence_nb` hands the node's blob to the proxy ([`FenceCall`]), which
//!   allgathers it across hosts (the whole job: the proxy tree's barrier;
//!   some ranks of several hosts: rivetrun, `proxy/pmix_subset.rs`) and
//!   returns the concatenation of every participating node's blob;
//! * `direct_modex` hands the request to the proxy ([`DmodexCall`]), which
//!   asks the target's node through rivetrun; there the proxy asks its own
//!   server ([`request_dmodex`]) and the answer ([`PmixEvent::DmodexAnswer`])
//!   travels back;
//! * `group` hands construct and destruct to the proxy
//!   ([`super::GroupCall`], `group.rs`), completed across hosts as a
//!   subset fence is;
//! * `abort` is queued as on one host; the proxy tells rivetrun;
//! * publish, lookup and unpublish are queued as on one host; the proxy
//!   asks rivetrun's job-wide name table (`proxy/pmix_names.rs`).
//! * `spawn` is queued as on one host; the proxy starts the children on
//!   this node, registered with this server (`proxy/spawn.rs`).

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

use rivet_pmi::pmix_ffi::{PmixInfo, PmixProc, PMIX_SUCCESS};

use super::{push_event, ModexCb, PmixEvent};

/// Where a job's ranks are: the name of every node (as rivetrun was given
/// it), the ranks of each, which node this server serves, and the app
/// (MPMD section) of every rank.
#[derive(Debug, Clone)]
pub struct Layout {
    pub hosts: Vec<String>,
    pub ranks_of_node: Vec<Vec<u32>>,
    pub node: usize,
    /// The app of each rank of the job, by rank; empty: all in app 0.
    pub appnums: Vec<u32>,
}

/// One app of a job, as registered (`PMIX_APP_INFO_ARRAY`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppInfo {
    pub appnum: u32,
    pub size: u32,
    /// Its lowest rank (`PMIX_APPLDR`); None for an app of no ranks.
    pub leader: Option<u32>,
}

/// One process of a job, as registered (`PMIX_PROC_DATA`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcInfo {
    pub rank: u32,
    pub appnum: u32,
    pub app_rank: u32,
    pub app_leader: u32,
    pub node: u32,
    pub local_rank: u16,
}

impl Layout {
    /// One node holding all `size` ranks (single-host rivetrun).
    pub fn one_host(host: &str, size: u32) -> Layout {
        Layout {
            hosts: vec![host.to_string()],
            ranks_of_node: vec![(0..size).collect()],
            node: 0,
            appnums: Vec::new(),
        }
    }

    /// The layout of a job whose rank `r` is on node `node_of_rank[r]`.
    pub fn from_nodes(hosts: Vec<String>, node_of_rank: &[u32], node: usize) -> Layout {
        let mut ranks_of_node = vec![Vec::new(); hosts.len()];
        for (r, &n) in node_of_rank.iter().enumerate() {
            if let Some(list) = ranks_of_node.get_mut(n as usize) {
                list.push(r as u32);
            }
        }
        Layout {
            hosts,
            ranks_of_node,
            node,
            appnums: Vec::new(),
        }
    }

    /// This layout with rank `r` in app `appnums[r]` (empty: all in app
    /// 0); an error unless it names one app, below the job's size, for
    /// every rank.
    pub fn with_apps(mut self, appnums: Vec<u32>) -> Result<Layout, String> {
        let size = self.size();
        if !appnums.is_empty() && appnums.len() != size as usize {
            return Err(format!(
                "{} appnums for a job of {size} ranks",
                appnums.len()
            ));
        }
        if let Some(a) = appnums.iter().find(|&&a| a >= size) {
            return Err(format!("appnum {a} in a job of {size} ranks"));
        }
        self.appnums = appnums;
        Ok(self)
    }

    /// The job's size: the ranks of every node.
    pub fn size(&self) -> u32 {
        self.ranks_of_node.iter().map(Vec::len).sum::<usize>() as u32
    }

    /// This node's ranks.
    pub fn local(&self) -> &[u32] {
        self.ranks_of_node
            .get(self.node)
            .map_or(&[][..], Vec::as_slice)
    }

    /// `PMIx_generate_ppn`'s input: each node's ranks, nodes by `;`.
    pub fn ppn(&self) -> String {
        let nodes: Vec<String> = self
            .ranks_of_node
            .iter()
            .map(|rs| rs.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
            .collect();
        nodes.join(";")
    }

    fn appnum(&self, rank: u32) -> u32 {
        self.appnums.get(rank as usize).copied().unwrap_or(0)
    }

    /// Every app, by appnum, from 0 to the highest a rank is in.
    pub fn apps(&self) -> Vec<AppInfo> {
        let napps = (0..self.size()).map(|r| self.appnum(r)).max().unwrap_or(0) + 1;
        let mut apps: Vec<AppInfo> = (0..napps)
            .map(|appnum| AppInfo {
                appnum,
                size: 0,
                leader: None,
            })
            .collect();
        for r in 0..self.size() {
            let app = &mut apps[self.appnum(r) as usize];
            app.size += 1;
            app.leader.get_or_insert(r);
        }
        apps
    }

    /// Every process of the job, by rank: its app, its rank in the app, its
    /// node and its rank among its node's.
    pub fn procs(&self) -> Vec<ProcInfo> {
        let apps = self.apps();
        let mut seen = vec![0u32; apps.len()];
        let mut procs: Vec<ProcInfo> = (0..self.size())
            .map(|rank| {
                let appnum = self.appnum(rank);
                let app_rank = seen[appnum as usize];
                seen[appnum as usize] += 1;
                ProcInfo {
                    rank,
                    appnum,
                    app_rank,
                    app_leader: apps[appnum as usize].leader.unwrap_or(rank),
                    node: 0,
                    local_rank: 0,
                }
            })
            .collect();
        for (node, ranks) in self.ranks_of_node.iter().enumerate() {
            for (local, &r) in ranks.iter().enumerate() {
                if let Some(p) = procs.get_mut(r as usize) {
                    (p.node, p.local_rank) = (node as u32, local as u16);
                }
            }
        }
        procs
    }
}

pub(super) type DmodexUp = unsafe extern "C" fn(
    *const PmixProc,
    *const PmixInfo,
    usize,
    Option<ModexCb>,
    *mut c_void,
) -> c_int;

type DmodexResponse = unsafe extern "C" fn(c_int, *mut c_char, usize, *mut c_void);
pub(super) type DmodexRequestFn =
    unsafe extern "C" fn(*const PmixProc, Option<DmodexResponse>, *mut c_void) -> c_int;

/// `PMIx_server_dmodex_request`, once a node's server runs (the library is
/// never closed, so the pointer stays valid; after finalize it answers an
/// error).
pub(super) static DMODEX_REQUEST: OnceLock<DmodexRequestFn> = OnceLock::new();

/// A library callback owed data: a fence's or a direct modex's.
struct Owed {
    cb: ModexCb,
    cbdata: *mut c_void,
}

impl Owed {
    fn finish(self, status: c_int, data: Vec<u8>) {
        let data = Box::new(data);
        let (ptr, len) = (data.as_ptr() as *const c_char, data.len());
        let keep = Box::into_raw(data);
        // SAFETY: the library's own callback with its own cbdata; the data
        // stays alive until the library calls `release` with `keep`.
        unsafe { (self.cb)(status, ptr, len, self.cbdata, Some(release), keep.cast()) };
    }
}

unsafe extern "C" fn release(keep: *mut c_void) {
    // SAFETY: `keep` is the Box<Vec<u8>> `Owed::finish` leaked, released once.
    drop(unsafe { Box::from_raw(keep.cast::<Vec<u8>>()) });
}

/// A fence of this node's clients: `procs` (namespace, rank; a
/// `PMIX_RANK_WILDCARD` rank is the whole namespace) and the node's blob.
pub struct FenceCall {
    pub procs: Vec<(String, u32)>,
    pub data: Vec<u8>,
    /// The clients' `PMIX_TIMEOUT`: the proxy fails the fence on every
    /// host with `PMIX_ERR_TIMEOUT` if the hosts are not all in by then
    /// (counted from this upcall; the library's own timer stopped once
    /// this node's clients were in).
    pub timeout: Option<std::time::Duration>,
    owed: Owed,
}

// SAFETY: the callback pointers are the library's, which may be called
// from any thread (it moves the work to its own).
unsafe impl Send for FenceCall {}

impl std::fmt::Debug for FenceCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fence over {:?} ({} bytes)", self.procs, self.data.len())
    }
}

impl FenceCall {
    /// Complete the fence: `data` is every participating node's blob,
    /// concatenated (the library unpacks them one after another).
    pub fn finish(self, status: c_int, data: Vec<u8>) {
        self.owed.finish(status, data);
    }
}

#[cfg(test)]
impl FenceCall {
    /// A fence whose completion goes to `cb` with `cbdata` (tests of the
    /// proxy's fence handling, without a library).
    pub fn for_test(
        procs: Vec<(String, u32)>,
        data: Vec<u8>,
        cb: ModexCb,
        cbdata: *mut c_void,
    ) -> FenceCall {
        FenceCall {
            procs,
            data,
            timeout: None,
            owed: Owed { cb, cbdata },
        }
    }
}

/// A client's get of `rank` of `nspace`, whose data this node lacks.
pub struct DmodexCall {
    pub nspace: String,
    pub rank: u32,
    owed: Owed,
}

// SAFETY: as for `FenceCall`.
unsafe impl Send for DmodexCall {}

impl std::fmt::Debug for DmodexCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "direct modex of {}:{}", self.nspace, self.rank)
    }
}

impl DmodexCall {
    /// Answer with the target's blob (as its server packed it).
    pub fn finish(self, status: c_int, data: Vec<u8>) {
        self.owed.finish(status, data);
    }
}

/// Safe view of an upcall's proc array.
///
/// # Safety
/// `procs` points at `n` valid procs, or `n` is 0.
unsafe fn procs_of(procs: *const PmixProc, n: usize) -> Vec<(String, u32)> {
    if procs.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(procs, n) }
        .iter()
        .map(|p| (p.nspace(), p.rank))
        .collect()
}

pub(super) unsafe extern "C" fn on_fence(
    procs: *const PmixProc,
    nprocs: usize,
    info: *const PmixInfo,
    ninfo: usize,
    data: *mut c_char,
    ndata: usize,
    cb: Option<ModexCb>,
    cbdata: *mut c_void,
) -> c_int {
    let Some(cb) = cb else {
        return PMIX_SUCCESS;
    };
    // SAFETY: the library passes `nprocs` valid procs.
    let procs = unsafe { procs_of(procs, nprocs) };
    let data = if data.is_null() || ndata == 0 {
        Vec::new()
    } else {
        // SAFETY: `ndata` bytes at `data`, the library's until we return.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), ndata) }.to_vec()
    };
    // Taken even when the clients gave `PMIX_TIMEOUT`: OpenPMIx 4.2.2 has
    // deleted its timer before calling us, so `cbdata` stays valid until
    // our answer, however late (`timeouts.rs`). The proxy enforces the
    // timeout across hosts instead (the multihost_pmix test with a member
    // 3 s late behind a 1 s timeout guards both).
    // SAFETY: the library passes `ninfo` valid infos, alive until we return.
    let timeout = super::timeouts::timeout_of(unsafe { super::timeouts::infos(info, ninfo) });
    let call = FenceCall {
        procs,
        data,
        timeout,
        owed: Owed { cb, cbdata },
    };
    if let Err(PmixEvent::Fence(call)) = push_event(PmixEvent::Fence(call)) {
        call.finish(rivet_pmi::pmix_ffi::PMIX_ERR_NOT_SUPPORTED, Vec::new());
    }
    PMIX_SUCCESS
}

pub(super) unsafe extern "C" fn on_direct_modex(
    proc: *const PmixProc,
    _info: *const PmixInfo,
    _ninfo: usize,
    cb: Option<ModexCb>,
    cbdata: *mut c_void,
) -> c_int {
    let Some(cb) = cb else {
        return PMIX_SUCCESS;
    };
    if proc.is_null() {
        return rivet_pmi::pmix_ffi::PMIX_ERR_BAD_PARAM;
    }
    // SAFETY: non-null, the library's valid proc.
    let (nspace, rank) = unsafe { ((*proc).nspace(), (*proc).rank) };
    let call = DmodexCall {
        nspace,
        rank,
        owed: Owed { cb, cbdata },
    };
    if let Err(PmixEvent::Dmodex(call)) = push_event(PmixEvent::Dmodex(call)) {
        call.finish(rivet_pmi::pmix_ffi::PMIX_ERR_NOT_SUPPORTED, Vec::new());
    }
    PMIX_SUCCESS
}

unsafe extern "C" fn on_dmodex_data(status: c_int, data: *mut c_char, sz: usize, id: *mut c_void) {
    let bytes = if data.is_null() || sz == 0 {
        Vec::new()
    } else {
        // SAFETY: `sz` bytes at `data`, the library's during this call.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), sz) }.to_vec()
    };
    let _ = push_event(PmixEvent::DmodexAnswer {
        id: id as u64,
        status,
        data: bytes,
    });
}

/// Ask this node's server for the data of `rank` of `nspace` (a direct
/// modex from another node); the answer comes as
/// [`PmixEvent::DmodexAnswer`] with `id`. An error if no server runs or
/// the library refuses at once.
pub fn request_dmodex(nspace: &str, rank: u32, id: u64) -> Result<(), c_int> {
    let Some(f) = DMODEX_REQUEST.get() else {
        return Err(rivet_pmi::pmix_ffi::PMIX_ERR_NOT_SUPPORTED);
    };
    let proc = PmixProc::new(nspace, rank);
    // SAFETY: a valid proc; the id travels as the callback's data (no
    // pointer to dereference).
    let rc = unsafe { f(&proc, Some(on_dmodex_data), id as *mut c_void) };
    if rc == PMIX_SUCCESS {
        Ok(())
    } else {
        Err(rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_lists_each_nodes_ranks_for_the_process_map() {
        let l = Layout::from_nodes(vec!["a".into(), "b".into()], &[0, 0, 1, 1, 0], 1);
        assert_eq!(l.local(), &[2, 3]);
        assert_eq!(l.ppn(), "0,1,4;2,3");
        assert_eq!(Layout::one_host("h", 3).ppn(), "0,1,2");
    }

    #[test]
    fn each_process_knows_its_app_and_its_place_on_its_node() {
        // MPMD `-n 1 a : -n 3 b` on two hosts of two slots.
        let l = Layout::from_nodes(vec!["a".into(), "b".into()], &[0, 0, 1, 1], 1)
            .with_apps(vec![0, 1, 1, 1])
            .unwrap();
        let app = |appnum, size, leader| AppInfo {
            appnum,
            size,
            leader: Some(leader),
        };
        assert_eq!(l.apps(), vec![app(0, 1, 0), app(1, 3, 1)]);
        let proc = |rank, appnum, app_rank, app_leader, node, local_rank| ProcInfo {
            rank,
            appnum,
            app_rank,
            app_leader,
            node,
            local_rank,
        };
        assert_eq!(
            l.procs(),
            vec![
                proc(0, 0, 0, 0, 0, 0),
                proc(1, 1, 0, 1, 0, 1),
                proc(2, 1, 1, 1, 1, 0),
                proc(3, 1, 2, 1, 1, 1),
            ]
        );
        // One app by default; an app with no ranks has no leader.
        assert_eq!(Layout::one_host("h", 2).apps(), vec![app(0, 2, 0)]);
        let gap = Layout::one_host("h", 3).with_apps(vec![0, 0, 2]).unwrap();
        assert_eq!(gap.apps()[1].leader, None);
        assert_eq!(gap.procs()[2].app_leader, 2);
        // A list that does not cover the job, or names an app past it, is refused.
        assert!(Layout::one_host("h", 2).with_apps(vec![0]).is_err());
        assert!(Layout::one_host("h", 2).with_apps(vec![0, 7]).is_err());
    }
}
