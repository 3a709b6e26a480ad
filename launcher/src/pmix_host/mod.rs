//! rivetrun as a PMIx server, so programs whose MPI speaks PMIx (Open MPI,
//! anything on PRRTE's or Slurm's `--mpi=pmix`) run under it unchanged.
//!
//! The server is OpenPMIx's own (`PMIx_server_*` in `libpmix.so.2`, opened
//! at run time): rivetrun registers the job's namespace (with each MPMD
//! section as an app and each rank's appnum: `register.rs`) and each rank, and
//! each rank's environment gets what `PMIx_server_setup_fork` adds (and,
//! when ranks outnumber CPUs, Open MPI's yield-when-idle setting, as
//! `mpirun` gives it: [`yield_when_oversubscribed`]). The
//! library runs its own thread; its upcalls into rivetrun (the host module)
//! are served there:
//! * `fence_nb`: every rank is on this node, so the library has already
//!   gathered everything; the data is handed back as the result;
//! * `abort`: queued as an event for the supervisor, which tears the job
//!   down with the rank's code, as for a PMI-1 abort;
//! * `client_connected`: Nagle turned off on the client's end of its
//!   connection (`client_nodelay.rs`); `client_finalized`: acknowledged;
//! * `publish`, `lookup`, `unpublish`: queued for the supervisor, which
//!   answers from the job's name table or its name server (`names.rs`);
//! * `spawn`: queued for the supervisor, which starts the processes as for
//!   a PMI-1 spawn, their namespace registered here first (`spawn.rs`);
//! * `group`: construct and destruct, complete once the library has
//!   gathered its clients; a context id when asked; each live group is
//!   recorded, so that a member's end is notified to the others
//!   (`PMIX_GROUP_MEMBER_FAILED`, [`PmixHost::member_ended`]) and, unless
//!   the group allowed it (`PMIX_GROUP_NOTIFY_TERMINATION`), fails the job
//!   as a PMI-1 group without `early_term` does (`group.rs`);
//! * `job_control`: present so the library keeps the files a rank asks to
//!   have removed when it ends (Open MPI's shared-memory segments), and
//!   removes them itself; anything else is refused (`job_control.rs`).
//!
//! Everything else is left out of the module, which the library answers
//! with "not supported" (connect and disconnect among clients of this one
//! server the library completes itself).
//!
//! The server's rendezvous files live in a private directory that is removed
//! when the host is dropped; the server listens on loopback only and admits
//! only the clients rivetrun registered.
//!
//! In a multi-host job each node's proxy runs one of these servers instead
//! ([`PmixHost::start_node`], `node.rs`): the job's namespace registered
//! with every host's node and process maps and this node's ranks as its
//! clients; fence, direct modex, group, and connect and disconnect
//! (`connect.rs`: OpenPMIx hands the host those whose participants are not
//! all its clients) go across hosts through the proxy, names to rivetrun's
//! job-wide table; a spawn goes to the proxy,
//! which starts the children on its own host, their namespace registered
//! with its server (`proxy/spawn.rs`). A group member's end reaches the
//! members on every host: its proxy tells rivetrun, which tells the other
//! proxies, and each node's server notifies its own clients.
//!
//! Files: `api.rs` (the library's prototypes, opened at run time),
//! `register.rs` (what a namespace is registered with), `starting.rs`
//! (the server started on its own thread, then the job registered),
//! `client_nodelay.rs` (Nagle off on each client's socket), `store.rs`
//! (which OpenPMIx data store, and what it asks of rivetrun),
//! `timeouts.rs` (what OpenPMIx does with a client's `PMIX_TIMEOUT`, so
//! which timed operations a node refuses), `upcalls.rs` (the
//! module's own upcalls and the event queue), `calls.rs` and `values.rs`
//! (info lists, completions), one file per served area.

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};

mod api;
mod calls;
mod client_nodelay;
mod connect;
mod group;
mod job_control;
mod name_upcalls;
pub mod names;
pub mod node;
mod register;
mod spawn;
mod starting;
mod store;
mod timeouts;
mod upcalls;
mod values;

pub use api::probe;
use api::*;
use calls::{Done, InfoList};
pub use client_nodelay::started as client_started;
pub use connect::ConnectCall;
pub use group::GroupCall;
use mio::Waker;
pub use names::{serve_from_job, serve_from_name_server, NameCall, RETRY as NAME_RETRY};
use rivet_pmi::pmix_ffi::{
    PmixDataArray, PmixProc, PMIX_DATA_ARRAY, PMIX_GROUP_MEMBER_FAILED, PMIX_POINTER, PMIX_PROC,
    PMIX_RANGE_CUSTOM, PMIX_SUCCESS,
};
pub use spawn::{child_envs, status_of, SpawnCall};
pub use starting::Starting;
pub use upcalls::take_queued;

use crate::topology::SharedTopology;
use upcalls::{on_abort, on_connected, on_fence, on_finalized, push_event, Upcalls, UPCALLS};

/// What the library's thread tells the supervisor.
#[derive(Debug)]
pub enum PmixEvent {
    /// A publish, lookup or unpublish to answer.
    Names(NameCall),
    /// A spawn to carry out.
    Spawn(SpawnCall),
    /// `PMIx_Abort` from rank `rank` of namespace `nspace`.
    Aborted {
        nspace: String,
        rank: u32,
        code: i32,
        message: String,
        /// Releases the caller when dropped, after the abort is handled.
        ack: upcalls::AbortAck,
    },
    /// A fence of a node's clients, to gather across hosts (proxies only).
    Fence(node::FenceCall),
    /// A get of another node's rank's data (proxies only).
    Dmodex(node::DmodexCall),
    /// This node's server's answer to [`node::request_dmodex`] `id`.
    DmodexAnswer { id: u64, status: i32, data: Vec<u8> },
    /// A group construct or destruct of a node's clients, to complete
    /// across hosts (proxies only).
    Group(GroupCall),
    /// A connect or disconnect of a node's clients, to complete across
    /// hosts (proxies only).
    Connect(ConnectCall),
}

/// What [`PmixHost::member_ended`] found.
#[derive(Debug, Default)]
pub struct MemberEnded {
    /// The live groups the process was in.
    pub groups: Vec<String>,
    /// Those made without `PMIX_GROUP_NOTIFY_TERMINATION`.
    pub forbidden: Vec<String>,
    /// Notifications that failed.
    pub errors: Vec<String>,
}

/// rivetrun's PMIx server for one job.
pub struct PmixHost {
    api: Api,
    nspace: CString,
    tmpdir: PathBuf,
    /// This node's name, as registered.
    host: String,
    /// hwloc's XML of this node (`pmix.hwlocxml2` of every namespace).
    topology_xml: Option<String>,
    /// rivetrun's cluster id (`PMIX_CLUSTER_ID` of every namespace).
    cluster: Option<String>,
    /// The topology lent to the library (`pmix.topo`), which keeps only a
    /// pointer to it: dropped after the server is finalized (`Drop`).
    _topology: Option<SharedTopology>,
}

impl PmixHost {
    /// Start the server for ranks on this node (`host`); `node_role`: as
    /// one node of a multi-host job. The job is registered by
    /// [`Starting::finish`] or [`Starting::finish_node`].
    fn start_as(
        host: &str,
        node_role: bool,
        topology: mpsc::Receiver<SharedTopology>,
    ) -> Result<PmixHost, String> {
        let api = Api::open()?;
        let tmpdir = private_dir()?;
        let host_obj = PmixHost {
            api,
            nspace: CString::default(),
            tmpdir,
            host: host.to_string(),
            topology_xml: None,
            cluster: None,
            _topology: topology.recv().ok(),
        };
        if UPCALLS
            .set(Upcalls {
                waker: Mutex::new(None),
                events: Mutex::new(Vec::new()),
            })
            .is_err()
        {
            return Err("a PMIx server is already running in this process".into());
        }
        host_obj.init(node_role)?;
        Ok(host_obj)
    }

    /// Start the library's server; `node_role`: a multi-host job's node
    /// (`node.rs`'s upcalls), else single-host rivetrun's.
    fn init(&self, node_role: bool) -> Result<(), String> {
        let mut module = Box::new(Module {
            client_connected: Some(on_connected),
            client_finalized: Some(on_finalized),
            abort: Some(on_abort),
            fence_nb: Some(on_fence),
            direct_modex: None,
            publish: Some(name_upcalls::on_publish),
            lookup: Some(name_upcalls::on_lookup),
            unpublish: Some(name_upcalls::on_unpublish),
            spawn: Some(spawn::on_spawn),
            connect: None,
            disconnect: None,
            middle: [std::ptr::null(); 8],
            job_control: Some(job_control::on_job_control),
            after_job_control: [std::ptr::null(); 5],
            group: Some(group::on_group),
            rest: [std::ptr::null(); 3],
        });
        if node_role {
            module.fence_nb = Some(node::on_fence);
            module.direct_modex = Some(node::on_direct_modex);
            module.group = Some(group::on_node_group);
            module.connect = Some(connect::on_node_connect);
            module.disconnect = Some(connect::on_node_disconnect);
            let f = self
                .api
                .lib
                .symbol(c"PMIx_server_dmodex_request")
                .map_err(|e| e.to_string())?;
            // SAFETY: OpenPMIx's PMIx_server_dmodex_request, whose 4.x
            // prototype the fn type spells.
            let f = unsafe { std::mem::transmute::<*mut c_void, node::DmodexRequestFn>(f) };
            let _ = node::DMODEX_REQUEST.set(f);
        }
        let dir = self.tmpdir.to_string_lossy().into_owned();
        let mut info = InfoList::new(&self.api);
        info.string(c"pmix.srvr.tmpdir", &dir);
        info.string(c"pmix.sys.tmpdir", &dir);
        if node_role {
            // The node's name as the node map has it (rivetrun's host list),
            // so the library finds itself in the map.
            info.string(c"pmix.hname", &self.host);
        }
        // rivetrun's own hwloc topology (the library and rivetrun share one
        // libhwloc), so the library does not discover the node a second time
        // (about a tenth of rivetrun's CPU time in an 8-rank Open MPI hello).
        // `pmix.topo` (a bare pointer, which the library neither copies nor
        // frees) rather than `pmix.topo2`, whose loader would copy it. The
        // loader takes a PMIX_POINTER's value as the data argument itself.
        if let Some(ptr) = self._topology.as_ref().and_then(SharedTopology::raw) {
            info.load(c"pmix.topo", ptr.cast_const(), PMIX_POINTER);
        }
        // SAFETY: the module lives for the process (leaked below, as the
        // library keeps a pointer to it); a valid info array.
        let rc = unsafe {
            (self.api.server_init)(&mut *module, info.infos.as_mut_ptr(), info.infos.len())
        };
        Box::leak(module);
        self.api.check("PMIx_server_init", rc)
    }

    /// Register the spawned job `job` (before its processes start), so
    /// they are served PMIx as the job's ranks are: all on this host,
    /// `app_sizes` the processes of each app (spawn command), in rank
    /// order. `parent`: the process that asked, as (namespace, rank).
    pub fn register_spawned(
        &self,
        job: &str,
        app_sizes: &[u32],
        parent: (&str, u32),
    ) -> Result<(), String> {
        let appnums: Vec<u32> = (app_sizes.iter().enumerate())
            .flat_map(|(app, &n)| std::iter::repeat_n(app as u32, n as usize))
            .collect();
        let layout = node::Layout::one_host(&self.host, appnums.len() as u32).with_apps(appnums)?;
        self.register(job, &layout, Some(PmixProc::new(parent.0, parent.1)))
    }

    /// Register job `job`, spawned by `parent` on node `node` of `hosts`
    /// (a multi-host job's other node: none of its processes is this
    /// server's client), so this node's clients can name them; their data
    /// comes by direct modex from `node`.
    pub fn register_elsewhere(
        &self,
        job: &str,
        hosts: &[String],
        node: u32,
        app_sizes: &[u32],
        parent: (&str, u32),
    ) -> Result<(), String> {
        let appnums: Vec<u32> = (app_sizes.iter().enumerate())
            .flat_map(|(app, &n)| std::iter::repeat_n(app as u32, n as usize))
            .collect();
        let host = hosts.get(node as usize).ok_or("no such node")?;
        // Its one host; this node (index 1, past the list) holds none of it.
        let mut layout = node::Layout::one_host(host, appnums.len() as u32).with_apps(appnums)?;
        layout.node = 1;
        self.register(job, &layout, Some(PmixProc::new(parent.0, parent.1)))
    }

    /// The variables rank `rank` needs to reach this server
    /// (`PMIx_server_setup_fork`).
    pub fn fork_env(&self, rank: u32) -> Result<Vec<(String, String)>, String> {
        self.fork_env_in(&self.nspace.to_string_lossy(), rank)
    }

    /// [`Self::fork_env`] for process `rank` of job `job`.
    pub fn fork_env_in(&self, job: &str, rank: u32) -> Result<Vec<(String, String)>, String> {
        let proc = PmixProc::new(job, rank);
        let mut env: *mut *mut c_char = std::ptr::null_mut();
        // SAFETY: a valid proc; `env` is an empty argv the library grows
        // with malloc'd strings.
        let rc = unsafe { (self.api.setup_fork)(&proc, &mut env) };
        let strings = take_argv(env);
        self.api.check("PMIx_server_setup_fork", rc)?;
        let mut env: Vec<(String, String)> = strings
            .iter()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        client_nodelay::learn_server(&env);
        // Open MPI 4.1 uses a PMIx server only when one of its launch
        // environments claims the job (open-mpi/ompi#13180); otherwise it
        // starts as a singleton with its own daemon. Its Flux one asks for
        // no more than this variable, and leaves binding to the launcher.
        env.push(("FLUX_JOB_ID".into(), job.to_string()));
        Ok(env)
    }

    /// Process `rank` of `nspace` ended: each PMIx group it was still in
    /// (constructed, not destructed) hears of it (seed 004's termination
    /// event: `PMIX_GROUP_MEMBER_FAILED` from that process, to the
    /// processes the group named, with `PMIX_GROUP_ID` and
    /// `PMIX_EVENT_AFFECTED_PROC`; the library delivers it to the targets
    /// that are this server's clients). Says which groups it was in, and
    /// which of them did not allow members to end without leaving, for
    /// the caller to fail the job as for a PMI-1 group; a failed
    /// notification is an error naming the group. On a node of a
    /// multi-host job, the proxy has the other nodes' servers told too.
    pub fn member_ended(&self, nspace: &str, rank: u32) -> MemberEnded {
        let mut ended = MemberEnded::default();
        for left in group::member_ended(nspace, rank) {
            if let Err(e) = self.notify_member_failed(&left.group, nspace, rank, &left.procs) {
                ended.errors.push(format!("group {}: {e}", left.group));
            }
            if !left.early_term {
                ended.forbidden.push(left.group.clone());
            }
            ended.groups.push(left.group);
        }
        ended
    }

    fn notify_member_failed(
        &self,
        group: &str,
        nspace: &str,
        rank: u32,
        procs: &[(String, u32)],
    ) -> Result<(), String> {
        let source = PmixProc::new(nspace, rank);
        let mut targets: Vec<PmixProc> =
            procs.iter().map(|(ns, r)| PmixProc::new(ns, *r)).collect();
        let range = PmixDataArray {
            ty: PMIX_PROC,
            size: targets.len(),
            array: targets.as_mut_ptr().cast(),
        };
        let mut info = InfoList::new(&self.api);
        // The loader copies the array (and the procs in it).
        info.load(
            c"pmix.evrange",
            (&range as *const PmixDataArray).cast(),
            PMIX_DATA_ARRAY,
        );
        info.load(
            c"pmix.evproc",
            (&source as *const PmixProc).cast(),
            PMIX_PROC,
        );
        info.string(c"pmix.grp.id", group);
        let api = &self.api;
        Done::run("PMIx_Notify_event", api, |cb, data| {
            // SAFETY: a valid source proc and info array, alive until the
            // completion (this function waits for it).
            unsafe {
                (api.notify)(
                    PMIX_GROUP_MEMBER_FAILED,
                    &source,
                    PMIX_RANGE_CUSTOM,
                    info.infos.as_ptr(),
                    info.infos.len(),
                    cb,
                    data,
                )
            }
        })
    }

    /// Upcalls wake `waker` from now on.
    pub fn wake(&self, waker: Arc<Waker>) {
        if let Some(up) = UPCALLS.get() {
            *up.waker.lock().unwrap_or_else(|e| e.into_inner()) = Some(waker);
        }
    }

    /// Events since the last call (after the waker fired).
    pub fn take_events(&self) -> Vec<PmixEvent> {
        take_queued()
    }
}

impl Drop for PmixHost {
    fn drop(&mut self) {
        let api = &self.api;
        let ns = &self.nspace;
        let deregistered = Done::run("PMIx_server_deregister_nspace", api, |cb, data| {
            // SAFETY: a valid namespace; the callback signals completion.
            unsafe { (api.deregister_nspace)(ns.as_ptr(), cb, data) };
            PMIX_SUCCESS
        });
        // The library's thread did not answer: finalizing waits for it
        // too, for ever, so rivetrun leaves it (the process ends anyway).
        match &deregistered {
            Err(e) if e.ends_with(calls::NO_ANSWER) => {
                eprintln!("rivetrun: {e}; not finalizing it");
            }
            _ => {
                // SAFETY: no arguments; no PMIx call follows.
                unsafe { (self.api.server_finalize)() };
            }
        }
        let _ = std::fs::remove_dir_all(&self.tmpdir);
    }
}

/// A fresh 0700 directory of our own under the system's temp dir, named
/// `rivet-<pid>-pmix-*` so that the next rivetrun sweeps it away if this one
/// dies before removing it (`leftovers.rs`).
fn private_dir() -> Result<PathBuf, String> {
    let template = std::env::temp_dir().join(format!("rivet-{}-pmix-XXXXXX", std::process::id()));
    let mut bytes = template.into_os_string().into_encoded_bytes();
    bytes.push(0);
    // SAFETY: a writable NUL-terminated template ending in XXXXXX.
    let p = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    if p.is_null() {
        return Err(format!(
            "cannot make a PMIx directory: {}",
            std::io::Error::last_os_error()
        ));
    }
    bytes.pop();
    // SAFETY: mkdtemp only replaced the X's with path characters.
    Ok(PathBuf::from(unsafe {
        std::ffi::OsString::from_encoded_bytes_unchecked(bytes)
    }))
}

/// Copy out and free a malloc'd, NULL-terminated `char **`.
fn take_argv(argv: *mut *mut c_char) -> Vec<String> {
    let mut out = Vec::new();
    if argv.is_null() {
        return out;
    }
    let mut i = 0;
    loop {
        // SAFETY: a NULL-terminated array; `i` stops at the terminator.
        let s = unsafe { *argv.add(i) };
        if s.is_null() {
            break;
        }
        // SAFETY: a NUL-terminated malloc'd string, freed after the copy.
        out.push(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned());
        // SAFETY: as above.
        unsafe { libc::free(s.cast()) };
        i += 1;
    }
    // SAFETY: the array itself was malloc'd by the library.
    unsafe { libc::free(argv.cast()) };
    out
}

/// OpenPMIx settings rivetrun chooses unless the user set them, each with
/// its reason. The ranks inherit them (their OpenPMIx client picks the
/// same components and segment sizes).
/// - `PMIX_MCA_gds=^ds12`: OpenPMIx's own choice of data store (`ds21`,
///   shared memory the ranks read, where it is built; else `hash`) without
///   `ds12`, the store of pre-3.0 clients (`store.rs`).
/// - `NS_META_SEG_SIZE`, `NS_DATA_SEG_SIZE`: `ds21`'s segments smaller
///   than its 4 MiB, which the server zeroes while the first clients wait
///   ([`store::SEGMENT_DEFAULTS`]).
/// - `PMIX_MCA_psec=native`: with the `munge` package installed (Slurm
///   needs it) but no `munged` running, OpenPMIx picks its munge security
///   component, and server init retries `munge_encode` with growing sleeps:
///   about 2.25 s before every job (`rivetrun -n 1 /bin/true` took 2.3 s).
///   A server here serves only clients on its own host, which `native`
///   checks by the socket's peer credentials.
pub const PMIX_DEFAULTS: [(&str, &str); 4] = [
    ("PMIX_MCA_gds", store::GDS_DEFAULT),
    store::SEGMENT_DEFAULTS[0],
    store::SEGMENT_DEFAULTS[1],
    ("PMIX_MCA_psec", "native"),
];

/// Applies [`PMIX_DEFAULTS`], gives `hash` back to a user's
/// `PMIX_MCA_gds` that left it out (the server needs it: `store.rs`), and
/// raises a user's `NS_DATA_SEG_SIZE` below [`store::MIN_DATA_SEGMENT`].
/// Called first thing in `main`, before any thread runs (the environment
/// is not safe to change once threads may read it).
pub fn choose_pmix_defaults() {
    for (var, value) in PMIX_DEFAULTS {
        if std::env::var_os(var).is_none() {
            std::env::set_var(var, value);
        }
    }
    let given = std::env::var("PMIX_MCA_gds").unwrap_or_default();
    if let Some(list) = store::with_hash(&given) {
        eprintln!(
            "rivetrun: note: PMIX_MCA_gds={given:?} taken as {list:?}: OpenPMIx's server \
             keeps its own data in the hash store, and hangs or crashes without it"
        );
        std::env::set_var("PMIX_MCA_gds", list);
    }
    let given = std::env::var("NS_DATA_SEG_SIZE").unwrap_or_default();
    if let Some(size) = store::data_segment_floor(&given) {
        eprintln!(
            "rivetrun: note: NS_DATA_SEG_SIZE={given} taken as {size}: OpenPMIx's server \
             crashes when a job's data does not fit in one segment"
        );
        std::env::set_var("NS_DATA_SEG_SIZE", size);
    }
}

/// Open MPI's setting for where its shared-memory transport (`vader`)
/// keeps its segment files (default `/dev/shm`).
const OMPI_SEGMENTS_VAR: &str = "OMPI_MCA_btl_vader_backing_directory";

/// `OMPI_MCA_btl_vader_backing_directory` set to the job's own directory
/// in `/dev/shm` (`leftovers::open_mpi_segments_dir`, named after `pid`,
/// the rivetrun or proxy that starts the ranks) unless the user set it.
/// Open MPI's ranks ask the PMIx server to remove their segments when they
/// die; after a `kill -9` of rivetrun no server is left to, and the
/// segments stayed in `/dev/shm`. In the job's directory they go with the
/// job's own leftovers. Same tmpfs, so nothing else changes for the ranks.
fn open_mpi_segments(pid: u32) -> Option<(String, String)> {
    if std::env::var_os(OMPI_SEGMENTS_VAR).is_some() {
        return None;
    }
    let dir = crate::leftovers::open_mpi_segments_dir(pid)?;
    Some((OMPI_SEGMENTS_VAR.to_string(), dir.display().to_string()))
}

/// What rivetrun (or proxy `pid`) sets for the Open MPI ranks it starts,
/// `ranks_here` of them on this host, where the user did not:
/// [`yield_when_oversubscribed`] and [`open_mpi_segments`]. The caller
/// lets a job's own `-genv`/`-env` win.
pub fn open_mpi_env(ranks_here: usize, pid: u32) -> Vec<(String, String)> {
    [
        yield_when_oversubscribed(ranks_here),
        open_mpi_segments(pid),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Open MPI's setting for ranks that spin while they wait.
const OMPI_YIELD_VAR: &str = "OMPI_MCA_mpi_yield_when_idle";

/// `OMPI_MCA_mpi_yield_when_idle=1` when `ranks_here` outnumber the CPUs
/// rivetrun may use and the user did not set it: `mpirun` does the same
/// for an oversubscribed node, and Open MPI 4.1 does not take it from
/// `pmix.ndosub`, so without it its ranks under rivetrun spin against
/// each other while they start.
fn yield_when_oversubscribed(ranks_here: usize) -> Option<(String, String)> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (ranks_here > cpus && std::env::var_os(OMPI_YIELD_VAR).is_none())
        .then(|| (OMPI_YIELD_VAR.to_string(), "1".to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The upcalls sit where `pmix_server.h` (4.x) puts them.
    #[test]
    fn module_slots_match_the_header_order() {
        let slot = std::mem::size_of::<*const c_void>();
        assert_eq!(std::mem::offset_of!(Module, fence_nb), 3 * slot);
        assert_eq!(std::mem::offset_of!(Module, publish), 5 * slot);
        assert_eq!(std::mem::offset_of!(Module, lookup), 6 * slot);
        assert_eq!(std::mem::offset_of!(Module, unpublish), 7 * slot);
        assert_eq!(std::mem::offset_of!(Module, spawn), 8 * slot);
        assert_eq!(std::mem::offset_of!(Module, connect), 9 * slot);
        assert_eq!(std::mem::offset_of!(Module, disconnect), 10 * slot);
        assert_eq!(std::mem::offset_of!(Module, job_control), 19 * slot);
        assert_eq!(std::mem::offset_of!(Module, group), 25 * slot);
        assert_eq!(std::mem::size_of::<Module>(), 29 * slot);
    }
}
