//! The PMIx bootstrap: a client of the field's own PMIx library
//! (OpenPMIx's `libpmix.so.2`, opened at run time, so a machine without
//! it builds and runs), for ranks started by a PMIx server: Open MPI's
//! `mpirun`, PRRTE, Slurm's `srun --mpi=pmix`.
//!
//! What the engine needs of PMI maps onto PMIx as follows:
//! * rank, size, appnum, universe: `PMIx_Init`'s proc and the job's
//!   `pmix.job.size`, `pmix.appnum`, `pmix.univ.size`;
//! * which ranks share the node: `pmix.lpeers`;
//! * the KVS: PMI-1's one job-wide space has no twin in PMIx, where each
//!   value belongs to the process that put it. Puts made since the last
//!   barrier are gathered into one value (`rivet.kvs`, `key=value` lines)
//!   that the barrier puts, commits and fences with data collection; a get
//!   reads a rank's whole set once and caches it. A key ending in `-N`
//!   (Rivet's own, such as `rivet-card-3`) is looked for at rank N first;
//!   any other in every rank's set;
//! * barrier: commit + `PMIx_Fence` with `pmix.collect`;
//! * names: `PMIx_Publish`, `PMIx_Lookup` (no wait), `PMIx_Unpublish`,
//!   with the name server's error codes;
//! * abort and finalize: `PMIx_Abort`, `PMIx_Finalize`.
//!
//! Group connect is mapped onto PMIx groups (`pmix_groups.rs`), a member's
//! end onto PMIx events (`pmix_events.rs`); a connect with another job goes
//! to rivetrun's PMI-1 group service beside PMIx (`pmix_side.rs`); spawn
//! onto `PMIx_Spawn`, the pre-puts travelling in the children's environment
//! (`pmix_spawn.rs`).

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};

use super::pmix_events::RegisterFn;
use super::pmix_groups::{ConstructFn, DestructFn as GroupDestructFn, PmixGroups};
use super::pmix_side::Side;
use super::pmix_spawn::{decode_preput, SpawnFn, PREPUT_ENV};
use crate::error::{Error, Result};
use crate::pmix_ffi::{
    load_key, Library, PmixInfo, PmixPdata, PmixProc, PmixValue, PMIX_ERR_DUPLICATE_KEY,
    PMIX_ERR_NOT_FOUND, PMIX_GLOBAL, PMIX_RANK_WILDCARD, PMIX_STRING, PMIX_SUCCESS, PMIX_UINT32,
};

const KVS_KEY: &CStr = c"rivet.kvs";

type InitFn = unsafe extern "C" fn(*mut PmixProc, *mut PmixInfo, usize) -> c_int;
type FinalizeFn = unsafe extern "C" fn(*const PmixInfo, usize) -> c_int;
type AbortFn = unsafe extern "C" fn(c_int, *const c_char, *mut PmixProc, usize) -> c_int;
type PutFn = unsafe extern "C" fn(u8, *const c_char, *mut PmixValue) -> c_int;
type CommitFn = unsafe extern "C" fn() -> c_int;
type FenceFn = unsafe extern "C" fn(*const PmixProc, usize, *const PmixInfo, usize) -> c_int;
type GetFn = unsafe extern "C" fn(
    *const PmixProc,
    *const c_char,
    *const PmixInfo,
    usize,
    *mut *mut PmixValue,
) -> c_int;
type DestructFn = unsafe extern "C" fn(*mut PmixValue);
type PublishFn = unsafe extern "C" fn(*const PmixInfo, usize) -> c_int;
type LookupFn = unsafe extern "C" fn(*mut PmixPdata, usize, *const PmixInfo, usize) -> c_int;
type UnpublishFn = unsafe extern "C" fn(*mut *mut c_char, *const PmixInfo, usize) -> c_int;

/// The library's client entry points, resolved once.
struct Api {
    lib: Library,
    init: InitFn,
    finalize: FinalizeFn,
    abort: AbortFn,
    put: PutFn,
    commit: CommitFn,
    fence: FenceFn,
    get: GetFn,
    destruct: DestructFn,
    publish: PublishFn,
    lookup: LookupFn,
    unpublish: UnpublishFn,
    /// `PMIx_Group_construct`/`_destruct` (absent before OpenPMIx 4).
    group: Option<(ConstructFn, GroupDestructFn)>,
    register_event: RegisterFn,
    /// `PMIx_Spawn`.
    spawn: Option<SpawnFn>,
}

impl Api {
    fn open() -> Result<Api> {
        let lib = Library::open()?;
        // SAFETY: each symbol is OpenPMIx's function of that name, whose C
        // prototype (pmix.h, 4.x) the fn type it is transmuted to spells.
        unsafe {
            Ok(Api {
                init: std::mem::transmute::<*mut c_void, InitFn>(lib.symbol(c"PMIx_Init")?),
                finalize: std::mem::transmute::<*mut c_void, FinalizeFn>(
                    lib.symbol(c"PMIx_Finalize")?,
                ),
                abort: std::mem::transmute::<*mut c_void, AbortFn>(lib.symbol(c"PMIx_Abort")?),
                put: std::mem::transmute::<*mut c_void, PutFn>(lib.symbol(c"PMIx_Put")?),
                commit: std::mem::transmute::<*mut c_void, CommitFn>(lib.symbol(c"PMIx_Commit")?),
                fence: std::mem::transmute::<*mut c_void, FenceFn>(lib.symbol(c"PMIx_Fence")?),
                get: std::mem::transmute::<*mut c_void, GetFn>(lib.symbol(c"PMIx_Get")?),
                destruct: std::mem::transmute::<*mut c_void, DestructFn>(
                    lib.symbol(c"PMIx_Value_destruct")?,
                ),
                publish: std::mem::transmute::<*mut c_void, PublishFn>(
                    lib.symbol(c"PMIx_Publish")?,
                ),
                lookup: std::mem::transmute::<*mut c_void, LookupFn>(lib.symbol(c"PMIx_Lookup")?),
                unpublish: std::mem::transmute::<*mut c_void, UnpublishFn>(
                    lib.symbol(c"PMIx_Unpublish")?,
                ),
                register_event: std::mem::transmute::<*mut c_void, RegisterFn>(
                    lib.symbol(c"PMIx_Register_event_handler")?,
                ),
                spawn: lib
                    .symbol(c"PMIx_Spawn")
                    .ok()
                    .map(|f| std::mem::transmute::<*mut c_void, SpawnFn>(f)),
                group: match (
                    lib.symbol(c"PMIx_Group_construct"),
                    lib.symbol(c"PMIx_Group_destruct"),
                ) {
                    (Ok(c), Ok(d)) => Some((
                        std::mem::transmute::<*mut c_void, ConstructFn>(c),
                        std::mem::transmute::<*mut c_void, GroupDestructFn>(d),
                    )),
                    _ => None,
                },
                lib,
            })
        }
    }

    fn describe(&self, rc: c_int) -> String {
        self.lib.describe(rc)
    }
}

/// A connected PMIx client.
pub(crate) struct Pmix {
    api: Api,
    me: PmixProc,
    pub nspace: String,
    /// Puts since the last barrier.
    pending: Vec<(String, String)>,
    /// Everything this rank put (re-put whole at each barrier).
    mine: Vec<(String, String)>,
    /// What the parent pre-put, for a spawned process (`pmix_spawn.rs`).
    preput: HashMap<String, String>,
    /// Other ranks' sets, read on first use.
    cache: HashMap<u32, HashMap<String, String>>,
    /// Group connects made (`pmix_groups.rs`).
    groups: PmixGroups,
    /// rivetrun's PMI-1 channel, for groups with other jobs (`pmix_side.rs`).
    pub(super) side: Side,
}

impl std::fmt::Debug for Pmix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Pmix {{ nspace: {:?}, rank: {} }}",
            self.nspace, self.me.rank
        )
    }
}

/// What start-up learned.
pub(crate) struct Started {
    pub pmix: Pmix,
    pub rank: u32,
    pub size: u32,
    pub appnum: i32,
    pub universe: i32,
}

fn c_key(key: &str) -> Result<CString> {
    CString::new(key).map_err(|_| Error::Malformed {
        reason: format!("key {key:?} holds a NUL byte"),
    })
}

impl Pmix {
    pub fn init() -> Result<Started> {
        let api = Api::open()?;
        let mut me = PmixProc {
            nspace: [0; 256],
            rank: 0,
        };
        // SAFETY: `me` is a valid pmix_proc_t to fill; no info.
        let rc = unsafe { (api.init)(&mut me, std::ptr::null_mut(), 0) };
        if rc != PMIX_SUCCESS {
            return Err(Error::PmixFailed {
                op: "PMIx_Init",
                why: api.describe(rc),
            });
        }
        // SAFETY: PMIx_Init wrote a NUL-terminated namespace (256 bytes, the
        // last always NUL by the type's definition).
        let nspace = unsafe { CStr::from_ptr(me.nspace.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let pmix = Pmix {
            api,
            me,
            nspace,
            pending: Vec::new(),
            mine: Vec::new(),
            preput: std::env::var(PREPUT_ENV)
                .map(|v| decode_preput(&v))
                .unwrap_or_default(),
            cache: HashMap::new(),
            groups: PmixGroups::default(),
            side: Side::from_env(),
        };
        let size = pmix
            .job_u32("pmix.job.size")?
            .ok_or_else(|| Error::PmixFailed {
                op: "PMIx_Get(pmix.job.size)",
                why: "the server gave no job size".into(),
            })?;
        let appnum = pmix.own_u32("pmix.appnum")?.map_or(0, |a| a as i32);
        let universe = pmix
            .job_u32("pmix.univ.size")?
            .map_or(size as i32, |u| u as i32);
        Ok(Started {
            rank: me.rank,
            size,
            appnum,
            universe,
            pmix,
        })
    }

    pub(super) fn rank(&self) -> u32 {
        self.me.rank
    }

    pub(super) fn describe(&self, rc: c_int) -> String {
        self.api.describe(rc)
    }

    pub(super) fn groups_state(&mut self) -> &mut PmixGroups {
        &mut self.groups
    }

    /// Register the group events' handler, once (`pmix_events.rs`).
    pub(super) fn watch_group_events(&mut self) -> Result<()> {
        if self.groups.watching {
            return Ok(());
        }
        super::pmix_events::register(self.api.register_event, |rc| self.api.describe(rc))?;
        self.groups.watching = true;
        Ok(())
    }

    /// `PMIx_Spawn`, or why there is none.
    pub(super) fn spawn_fn(&self) -> Result<SpawnFn> {
        self.api.spawn.ok_or(Error::PmixUnsupported {
            op: "spawn (the PMIx library has no PMIx_Spawn)",
        })
    }

    /// The library's group calls, or why there are none.
    pub(super) fn group_fns(&self) -> Result<(ConstructFn, GroupDestructFn)> {
        self.api.group.ok_or(Error::PmixUnsupported {
            op: "group connect (the PMIx library has no PMIx_Group_construct)",
        })
    }

    /// Free an info array the library returned (`PMIX_INFO_FREE`: each
    /// value destructed, then the array).
    pub(super) fn free_infos(&self, infos: *mut PmixInfo, n: usize) {
        if infos.is_null() {
            return;
        }
        for i in 0..n {
            // SAFETY: `n` infos the library allocated and filled for us.
            unsafe { (self.api.destruct)(&mut (*infos.add(i)).value) };
        }
        // SAFETY: the array was malloc'd by the library.
        unsafe { libc::free(infos.cast()) };
    }

    /// `PMIx_Put` of one value in `scope`, then commit.
    pub(super) fn put_value(&self, scope: u8, key: &CStr, value: &mut PmixValue) -> Result<()> {
        // SAFETY: a valid key and value; PMIx_Put copies it.
        let rc = unsafe { (self.api.put)(scope, key.as_ptr(), value) };
        self.check("PMIx_Put", rc)?;
        // SAFETY: no arguments.
        let rc = unsafe { (self.api.commit)() };
        self.check("PMIx_Commit", rc)
    }

    /// `PMIx_Fence` over `procs` (no data collected).
    pub(super) fn fence_over(&self, procs: &[PmixProc]) -> Result<()> {
        // SAFETY: `procs.len()` valid procs; no info.
        let rc = unsafe { (self.api.fence)(procs.as_ptr(), procs.len(), std::ptr::null(), 0) };
        self.check("PMIx_Fence", rc)
    }

    pub(super) fn string_of_value(v: &PmixValue) -> Option<String> {
        Pmix::string_of(v)
    }

    pub(super) fn u32_of_value(v: &PmixValue) -> Option<u32> {
        Pmix::u32_of(v)
    }

    /// One value: `Ok(None)` if the server has none under `key`.
    fn get_raw<R>(
        &self,
        rank: u32,
        key: &str,
        read: impl FnOnce(&PmixValue) -> Option<R>,
    ) -> Result<Option<R>> {
        let nspace = self.nspace.clone();
        self.get_with(&nspace, rank, key, &[], read)
    }

    /// One value of rank `rank` of `nspace`, with directives `info`.
    pub(super) fn get_with<R>(
        &self,
        nspace: &str,
        rank: u32,
        key: &str,
        info: &[PmixInfo],
        read: impl FnOnce(&PmixValue) -> Option<R>,
    ) -> Result<Option<R>> {
        let proc = PmixProc::new(nspace, rank);
        let k = c_key(key)?;
        let mut out: *mut PmixValue = std::ptr::null_mut();
        // SAFETY: valid proc, key and infos; `out` receives a value the
        // library allocated (freed below).
        let rc = unsafe { (self.api.get)(&proc, k.as_ptr(), info.as_ptr(), info.len(), &mut out) };
        if rc == PMIX_ERR_NOT_FOUND {
            return Ok(None);
        }
        if rc != PMIX_SUCCESS || out.is_null() {
            return Err(Error::PmixFailed {
                op: "PMIx_Get",
                why: format!("{key} of rank {rank}: {}", self.api.describe(rc)),
            });
        }
        // SAFETY: PMIx_Get succeeded: `out` points to a valid pmix_value_t.
        let value = read(unsafe { &*out });
        // SAFETY: `out` was allocated by the library with malloc
        // (PMIX_VALUE_RELEASE: destruct, then free).
        unsafe {
            (self.api.destruct)(out);
            libc::free(out.cast());
        }
        Ok(value)
    }

    fn u32_of(v: &PmixValue) -> Option<u32> {
        (v.ty == PMIX_UINT32).then_some(v.data[0] as u32)
    }

    fn string_of(v: &PmixValue) -> Option<String> {
        if v.ty != PMIX_STRING || v.data[0] == 0 {
            return None;
        }
        // SAFETY: a PMIX_STRING value holds a NUL-terminated char* at
        // offset 8, alive until the value is destructed (after this copy).
        Some(
            unsafe { CStr::from_ptr(v.data[0] as *const c_char) }
                .to_string_lossy()
                .into_owned(),
        )
    }

    /// The server's cluster id (`PMIX_CLUSTER_ID`), if it names one.
    pub fn cluster(&self) -> Result<Option<String>> {
        self.get_raw(PMIX_RANK_WILDCARD, "pmix.clid", Pmix::string_of)
    }

    fn job_u32(&self, key: &str) -> Result<Option<u32>> {
        self.get_raw(PMIX_RANK_WILDCARD, key, Pmix::u32_of)
    }

    fn own_u32(&self, key: &str) -> Result<Option<u32>> {
        self.get_raw(self.me.rank, key, Pmix::u32_of)
    }

    /// The ranks on this node (`pmix.lpeers`), sorted.
    pub fn local_ranks(&self) -> Result<Option<Vec<u32>>> {
        let Some(list) = self.get_raw(PMIX_RANK_WILDCARD, "pmix.lpeers", Pmix::string_of)? else {
            return Ok(None);
        };
        let mut ranks: Vec<u32> = list
            .split(',')
            .filter_map(|r| r.trim().parse().ok())
            .collect();
        ranks.sort_unstable();
        Ok(Some(ranks))
    }

    pub fn put(&mut self, key: &str, value: &str) {
        self.pending.push((key.to_string(), value.to_string()));
    }

    /// Publish what was put, then wait for every rank (fence, collecting data).
    pub fn barrier(&mut self) -> Result<()> {
        if !self.pending.is_empty() {
            self.mine.append(&mut self.pending);
            let blob: String = self
                .mine
                .iter()
                .map(|(k, v)| format!("{k}={}\n", escape(v)))
                .collect();
            let blob = CString::new(blob).map_err(|_| Error::Malformed {
                reason: "a PMI value holds a NUL byte".into(),
            })?;
            let mut value = PmixValue {
                ty: PMIX_STRING,
                _pad: [0; 6],
                data: [blob.as_ptr() as u64, 0, 0],
            };
            // SAFETY: a valid string value; PMIx_Put copies it.
            let rc = unsafe { (self.api.put)(PMIX_GLOBAL, KVS_KEY.as_ptr(), &mut value) };
            self.check("PMIx_Put", rc)?;
            // SAFETY: no arguments.
            let rc = unsafe { (self.api.commit)() };
            self.check("PMIx_Commit", rc)?;
        }
        let collect = PmixInfo::flag(c"pmix.collect", true);
        // SAFETY: no procs (= all of this namespace), one valid info.
        let rc = unsafe { (self.api.fence)(std::ptr::null(), 0, &collect, 1) };
        self.check("PMIx_Fence", rc)?;
        // What others put may have grown: read again on demand.
        self.cache.clear();
        Ok(())
    }

    fn check(&self, op: &'static str, rc: c_int) -> Result<()> {
        self.api.lib.check(op, rc)
    }

    fn set_of(&mut self, rank: u32) -> Result<&HashMap<String, String>> {
        if !self.cache.contains_key(&rank) {
            let blob = self
                .get_raw(rank, "rivet.kvs", Pmix::string_of)?
                .unwrap_or_default();
            let set = blob
                .lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_string(), unescape(v)))
                .collect();
            self.cache.insert(rank, set);
        }
        Ok(&self.cache[&rank])
    }

    /// `key` as some rank put it before a barrier.
    pub fn get(&mut self, key: &str, size: u32) -> Result<Option<String>> {
        if let Some((_, v)) = self.mine.iter().rev().find(|(k, _)| k == key) {
            return Ok(Some(v.clone()));
        }
        if let Some(v) = self.preput.get(key) {
            return Ok(Some(v.clone()));
        }
        let hint = key
            .rsplit_once('-')
            .and_then(|(_, n)| n.parse::<u32>().ok())
            .filter(|&r| r < size);
        let order = hint
            .into_iter()
            .chain((0..size).filter(|&r| Some(r) != hint));
        for rank in order {
            if rank == self.me.rank {
                continue;
            }
            if let Some(v) = self.set_of(rank)?.get(key) {
                return Ok(Some(v.clone()));
            }
        }
        Ok(None)
    }

    /// `PMIx_Publish` of `service` → `port` (the server's default range).
    pub fn publish(&self, service: &str, port: &str) -> Result<()> {
        let port = CString::new(port).map_err(|_| Error::Malformed {
            reason: "a port name holds a NUL byte".into(),
        })?;
        let mut info = PmixInfo::flag(c"", false);
        load_key(&mut info.key, service.as_bytes());
        info.value = PmixValue {
            ty: PMIX_STRING,
            _pad: [0; 6],
            data: [port.as_ptr() as u64, 0, 0],
        };
        // SAFETY: one valid info whose string outlives the call (which
        // copies it).
        let rc = unsafe { (self.api.publish)(&info, 1) };
        names_result("publish_name", rc, &self.api)
    }

    /// `PMIx_Lookup` of `service`, without waiting for it to be published.
    pub fn lookup(&self, service: &str) -> Result<String> {
        let mut pdata = PmixPdata {
            proc: PmixProc {
                nspace: [0; 256],
                rank: 0,
            },
            key: [0; 512],
            value: PmixValue {
                ty: 0,
                _pad: [0; 6],
                data: [0; 3],
            },
        };
        load_key(&mut pdata.key, service.as_bytes());
        // SAFETY: one valid pdata to fill; no info.
        let rc = unsafe { (self.api.lookup)(&mut pdata, 1, std::ptr::null(), 0) };
        names_result("lookup_name", rc, &self.api)?;
        let port = Pmix::string_of(&pdata.value);
        // SAFETY: the library loaded the value (a malloc'd string); freed once.
        unsafe { (self.api.destruct)(&mut pdata.value) };
        port.ok_or_else(|| Error::Server {
            cmd: "lookup_name".into(),
            rc: 1,
            msg: Some("service_not_found".into()),
        })
    }

    /// `PMIx_Unpublish` of `service`.
    pub fn unpublish(&self, service: &str) -> Result<()> {
        let key = c_key(service)?;
        let mut keys = [key.as_ptr() as *mut c_char, std::ptr::null_mut()];
        // SAFETY: a NULL-terminated array of one valid key, read only.
        let rc = unsafe { (self.api.unpublish)(keys.as_mut_ptr(), std::ptr::null(), 0) };
        names_result("unpublish_name", rc, &self.api)
    }

    pub fn abort(&self, code: i32, message: &str) {
        let msg = CString::new(message.replace('\0', " ")).unwrap_or_default();
        // SAFETY: a valid message; no procs (= the whole job).
        unsafe { (self.api.abort)(code, msg.as_ptr(), std::ptr::null_mut(), 0) };
    }

    pub fn finalize(self) -> Result<()> {
        // SAFETY: no info.
        let rc = unsafe { (self.api.finalize)(std::ptr::null(), 0) };
        self.check("PMIx_Finalize", rc)
    }
}

/// A name call's PMIx status as the PMI-1 client reports it (the name
/// server's codes, so callers see one set of errors).
fn names_result(cmd: &str, rc: c_int, api: &Api) -> Result<()> {
    let code = match rc {
        PMIX_SUCCESS => return Ok(()),
        PMIX_ERR_NOT_FOUND => "service_not_found".to_string(),
        PMIX_ERR_DUPLICATE_KEY => "key_already_present".to_string(),
        other => api.describe(other),
    };
    Err(Error::Server {
        cmd: cmd.into(),
        rc: 1,
        msg: Some(code),
    })
}

/// Values may hold newlines; the blob is one `key=value` per line.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

fn unescape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => out.push('\n'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_with_newlines_and_backslashes_survive_the_blob() {
        for v in ["plain", "a\nb", "back\\slash\\n", "", "x=y=z"] {
            assert_eq!(unescape(&escape(v)), v);
            assert!(!escape(v).contains('\n'));
        }
    }
}
