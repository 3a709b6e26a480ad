//! What a namespace is registered with (`PMIx_server_register_nspace`),
//! then each of this node's ranks as a client.
//!
//! Job level: the sizes, the node and process maps (from which the
//! library derives each node's peers and each process's host), this
//! node's peers, the number of apps, the topology (unless too big for
//! the data store: `store.rs`) and cluster id. App
//! level (`PMIX_APP_INFO_ARRAY`, one per MPMD section): its appnum, size
//! and lowest rank. Process level (`PMIX_PROC_DATA`, one per rank of the
//! job): its appnum (Open MPI's `MPI_APPNUM`), its rank in its app, its
//! app's lowest rank, and its node, local and node rank; the library
//! derives those last three from the maps only while no process data is
//! given, so they are given here too.

use std::ffi::{c_char, c_int, CStr, CString};

use rivet_pmi::pmix_ffi::{PmixDataArray, PmixProc, PMIX_DATA_ARRAY, PMIX_INFO, PMIX_PROC};

use super::api::GenerateFn;
use super::calls::{Done, InfoList};
use super::node::Layout;
use super::PmixHost;

impl PmixHost {
    /// Register namespace `job`, laid out as `layout` (this node's ranks
    /// become its clients); `parent`: who spawned it.
    pub(super) fn register(
        &self,
        job: &str,
        layout: &Layout,
        parent: Option<PmixProc>,
    ) -> Result<(), String> {
        let host = self.host.as_str();
        let ns = CString::new(job).map_err(|_| "the job name holds a NUL byte".to_string())?;
        let size = layout.size();
        let local = layout.local().to_vec();
        let peers = local
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let node_map = self.generate(self.api.generate_regex, &layout.hosts.join(","))?;
        let proc_map = self.generate(self.api.generate_ppn, &layout.ppn())?;
        let nlocal = local.len() as u32;
        let apps = layout.apps();
        let mut info = InfoList::new(&self.api);
        info.u32(c"pmix.univ.size", size);
        info.u32(c"pmix.job.size", size);
        info.u32(c"pmix.max.size", size);
        info.u32(c"pmix.local.size", nlocal);
        info.u32(c"pmix.job.napps", apps.len() as u32);
        info.u32(c"pmix.num.nodes", layout.hosts.len() as u32);
        info.rank(c"pmix.lldr", local.first().copied().unwrap_or(0));
        info.flag(c"pmix.spawned", parent.is_some());
        if let Some(parent) = &parent {
            info.load(
                c"pmix.parent",
                (parent as *const PmixProc).cast(),
                PMIX_PROC,
            );
        }
        info.string(c"pmix.lpeers", &peers);
        info.string(c"pmix.nmap", &node_map);
        info.string(c"pmix.pmap", &proc_map);
        info.string(c"pmix.jobid", job);
        info.string(c"pmix.hname", host);
        if let Some(c) = &self.cluster {
            info.string(c"pmix.clid", c);
        }
        if let Some(xml) = &self.topology_xml {
            if super::store::topology_fits(xml.len()) {
                info.string(c"pmix.hwlocxml2", xml);
            } else {
                eprintln!(
                    "rivetrun: note: this node's topology ({} bytes) is too big for \
                     OpenPMIx's shared-memory segments (NS_DATA_SEG_SIZE), so the ranks \
                     discover it themselves",
                    xml.len()
                );
            }
        }
        // More ranks than CPUs: MPI libraries then yield when idle (Open
        // MPI reads this), instead of spinning against each other.
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if nlocal as usize > cpus {
            info.flag(c"pmix.ndosub", true);
        }
        for app in &apps {
            let mut a = InfoList::new(&self.api);
            a.u32(c"pmix.appnum", app.appnum);
            a.u32(c"pmix.app.size", app.size);
            if let Some(leader) = app.leader {
                a.rank(c"pmix.aldr", leader);
            }
            nest(&mut info, c"pmix.app.arr", a);
        }
        for p in layout.procs() {
            // The rank first: the library requires it there.
            let mut d = InfoList::new(&self.api);
            d.rank(c"pmix.rank", p.rank);
            d.u32(c"pmix.appnum", p.appnum);
            d.rank(c"pmix.apprank", p.app_rank);
            d.rank(c"pmix.aldr", p.app_leader);
            d.rank(c"pmix.grank", p.rank);
            d.u16(c"pmix.lrank", p.local_rank);
            d.u16(c"pmix.nrank", p.local_rank);
            d.u32(c"pmix.nodeid", p.node);
            nest(&mut info, c"pmix.pdata", d);
        }
        let (api, ns) = (&self.api, &ns);
        Done::run("PMIx_server_register_nspace", api, |cb, data| {
            // SAFETY: a valid namespace and info array, alive until the
            // completion (this function waits for it).
            unsafe {
                (api.register_nspace)(
                    ns.as_ptr(),
                    nlocal as c_int,
                    info.infos.as_mut_ptr(),
                    info.infos.len(),
                    cb,
                    data,
                )
            }
        })?;
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        for &rank in &local {
            let proc = PmixProc::new(job, rank);
            Done::run("PMIx_server_register_client", api, |cb, data| {
                // SAFETY: a valid proc; no server object.
                unsafe { (api.register_client)(&proc, uid, gid, std::ptr::null_mut(), cb, data) }
            })?;
        }
        Ok(())
    }

    /// `PMIx_generate_regex` / `_ppn` of `input`, as an owned string.
    fn generate(&self, f: GenerateFn, input: &str) -> Result<String, String> {
        let input = CString::new(input).map_err(|_| "a NUL byte in a PMIx map".to_string())?;
        let mut out: *mut c_char = std::ptr::null_mut();
        // SAFETY: a NUL-terminated input; `out` receives a malloc'd string.
        let rc = unsafe { f(input.as_ptr(), &mut out) };
        self.api.check("PMIx_generate_regex/ppn", rc)?;
        if out.is_null() {
            return Err("PMIx_generate_regex/ppn gave nothing".into());
        }
        // SAFETY: non-null and NUL-terminated; freed right after the copy.
        let s = unsafe { CStr::from_ptr(out) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: allocated by the library with malloc.
        unsafe { libc::free(out.cast()) };
        Ok(s)
    }
}

/// Add `inner` to `outer` as the info array `key` (the loader copies the
/// array and every value in it; `inner` is released after).
fn nest(outer: &mut InfoList, key: &CStr, mut inner: InfoList) {
    let array = PmixDataArray {
        ty: PMIX_INFO,
        size: inner.infos.len(),
        array: inner.infos.as_mut_ptr().cast(),
    };
    outer.load(
        key,
        (&array as *const PmixDataArray).cast(),
        PMIX_DATA_ARRAY,
    );
}
