//! rivetrun as a PMIx server, so programs whose MPI speaks PMIx (Open MPI,
//! anything on PRRTE's or Slurm's `--mpi=pmix`) run under it unchanged.
//!
//! The server is OpenPMIx's own (`PMIx_server_*` in `libpmix.so.2`, opened
//! at run time): rivetrun registers the job's namespace and each rank, and
//! each rank's environment gets what `PMIx_server_setup_fork` adds (and,
//! when ranks outnumber CPUs, Open MPI's yield-when-idle setting, as
//! `mpirun` gives it: [`yield_when_oversubscribed`]). The
//! library runs its own thread; its upcalls into rivetrun (the host module)
//! are served there:
//! * `fence_nb`: every rank is on this node, so the library has already
//!   gathered everything; the data is handed back as the result;
//! * `abort`: queued as an event for the supervisor, which tears the job
//!   down with the rank's code, as for a PMI-1 abort;
//! * `client_connected`, `client_finalized`: acknowledged;
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
//! Single-host jobs only: a multi-host job (`remote/`, `proxy/`) starts no
//! PMIx server. Serving one per proxy needs: the namespace registered on
//! every node with the whole job's node and process maps (`pmix.nmap`,
//! `pmix.pmap` from every host, `pmix.lpeers` per node); `fence_nb` handing
//! the node's blob to the proxy's loop, allgathered through rivetrun and
//! returned concatenated (today it answers with the local data alone);
//! `direct_modex` for gets without a collecting fence; `group` construct as
//! the same allgather across proxies, and members' end events forwarded by
//! rivetrun to each proxy's server; spawned namespaces registered on the
//! spawning proxy. Not built yet.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

mod calls;
mod group;
mod job_control;
mod names;
mod spawn;
mod values;

use calls::{Done, InfoList};
use mio::Waker;
pub use names::{serve_from_job, serve_from_name_server, NameCall, RETRY as NAME_RETRY};
use rivet_pmi::pmix_ffi::{
    Library, PmixDataArray, PmixInfo, PmixProc, PmixValue, PMIX_DATA_ARRAY,
    PMIX_GROUP_MEMBER_FAILED, PMIX_OPERATION_SUCCEEDED, PMIX_PROC, PMIX_RANGE_CUSTOM, PMIX_SUCCESS,
};
pub use spawn::SpawnCall;

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
    },
}

type OpCb = unsafe extern "C" fn(c_int, *mut c_void);
type ModexCb = unsafe extern "C" fn(
    c_int,
    *const c_char,
    usize,
    *mut c_void,
    Option<unsafe extern "C" fn(*mut c_void)>,
    *mut c_void,
);
type ConnectedUp =
    unsafe extern "C" fn(*const PmixProc, *mut c_void, Option<OpCb>, *mut c_void) -> c_int;
type AbortUp = unsafe extern "C" fn(
    *const PmixProc,
    *mut c_void,
    c_int,
    *const c_char,
    *mut PmixProc,
    usize,
    Option<OpCb>,
    *mut c_void,
) -> c_int;
type FenceUp = unsafe extern "C" fn(
    *const PmixProc,
    usize,
    *const PmixInfo,
    usize,
    *mut c_char,
    usize,
    Option<ModexCb>,
    *mut c_void,
) -> c_int;

/// `pmix_server_module_t` (OpenPMIx 4.x): 28 function pointers (and one
/// spare null slot); the unset ones are answered "not supported" by the
/// library.
#[repr(C)]
struct Module {
    client_connected: Option<ConnectedUp>,
    client_finalized: Option<ConnectedUp>,
    abort: Option<AbortUp>,
    fence_nb: Option<FenceUp>,
    direct_modex: *const c_void,
    publish: Option<names::PublishUp>,
    lookup: Option<names::LookupUp>,
    unpublish: Option<names::UnpublishUp>,
    spawn: Option<spawn::SpawnUp>,
    /// connect ... allocate.
    middle: [*const c_void; 10],
    job_control: Option<job_control::JobControlUp>,
    /// monitor ... push_stdin.
    after_job_control: [*const c_void; 5],
    group: Option<group::GroupUp>,
    /// fabric, client_connected2, the spare slot.
    rest: [*const c_void; 3],
}

type ServerInitFn = unsafe extern "C" fn(*mut Module, *mut PmixInfo, usize) -> c_int;
type ServerFinalizeFn = unsafe extern "C" fn() -> c_int;
type RegisterNspaceFn = unsafe extern "C" fn(
    *const c_char,
    c_int,
    *mut PmixInfo,
    usize,
    Option<OpCb>,
    *mut c_void,
) -> c_int;
type DeregisterNspaceFn = unsafe extern "C" fn(*const c_char, Option<OpCb>, *mut c_void);
type RegisterClientFn = unsafe extern "C" fn(
    *const PmixProc,
    libc::uid_t,
    libc::gid_t,
    *mut c_void,
    Option<OpCb>,
    *mut c_void,
) -> c_int;
type SetupForkFn = unsafe extern "C" fn(*const PmixProc, *mut *mut *mut c_char) -> c_int;
type InfoLoadFn = unsafe extern "C" fn(*mut PmixInfo, *const c_char, *const c_void, u16) -> c_int;
type ValueDestructFn = unsafe extern "C" fn(*mut PmixValue);
type GenerateFn = unsafe extern "C" fn(*const c_char, *mut *mut c_char) -> c_int;
type NotifyFn = unsafe extern "C" fn(
    c_int,
    *const PmixProc,
    u8,
    *const PmixInfo,
    usize,
    Option<OpCb>,
    *mut c_void,
) -> c_int;

struct Api {
    lib: Library,
    server_init: ServerInitFn,
    server_finalize: ServerFinalizeFn,
    register_nspace: RegisterNspaceFn,
    deregister_nspace: DeregisterNspaceFn,
    register_client: RegisterClientFn,
    setup_fork: SetupForkFn,
    info_load: InfoLoadFn,
    value_destruct: ValueDestructFn,
    generate_regex: GenerateFn,
    generate_ppn: GenerateFn,
    notify: NotifyFn,
}

impl Api {
    fn open() -> Result<Api, String> {
        let lib = Library::open().map_err(|e| e.to_string())?;
        let sym = |name: &CStr| lib.symbol(name).map_err(|e| e.to_string());
        // SAFETY: each symbol is OpenPMIx's function of that name, whose C
        // prototype (pmix_server.h / pmix.h, 4.x) the fn type spells.
        unsafe {
            Ok(Api {
                server_init: std::mem::transmute::<*mut c_void, ServerInitFn>(sym(
                    c"PMIx_server_init",
                )?),
                server_finalize: std::mem::transmute::<*mut c_void, ServerFinalizeFn>(sym(
                    c"PMIx_server_finalize",
                )?),
                register_nspace: std::mem::transmute::<*mut c_void, RegisterNspaceFn>(sym(
                    c"PMIx_server_register_nspace",
                )?),
                deregister_nspace: std::mem::transmute::<*mut c_void, DeregisterNspaceFn>(sym(
                    c"PMIx_server_deregister_nspace",
                )?),
                register_client: std::mem::transmute::<*mut c_void, RegisterClientFn>(sym(
                    c"PMIx_server_register_client",
                )?),
                setup_fork: std::mem::transmute::<*mut c_void, SetupForkFn>(sym(
                    c"PMIx_server_setup_fork",
                )?),
                info_load: std::mem::transmute::<*mut c_void, InfoLoadFn>(sym(c"PMIx_Info_load")?),
                value_destruct: std::mem::transmute::<*mut c_void, ValueDestructFn>(sym(
                    c"PMIx_Value_destruct",
                )?),
                generate_regex: std::mem::transmute::<*mut c_void, GenerateFn>(sym(
                    c"PMIx_generate_regex",
                )?),
                generate_ppn: std::mem::transmute::<*mut c_void, GenerateFn>(sym(
                    c"PMIx_generate_ppn",
                )?),
                notify: std::mem::transmute::<*mut c_void, NotifyFn>(sym(c"PMIx_Notify_event")?),
                lib,
            })
        }
    }

    fn check(&self, op: &'static str, rc: c_int) -> Result<(), String> {
        self.lib.check(op, rc).map_err(|e| e.to_string())
    }
}

/// `rivetrun --info`: whether jobs are served PMIx, with the library's version.
pub fn probe() -> Result<String, String> {
    let api = Api::open()?;
    let version = api
        .lib
        .symbol(c"PMIx_Get_version")
        .map_err(|e| e.to_string())?;
    // SAFETY: the symbol is PMIx_Get_version, `const char *(void)`.
    let version = unsafe {
        std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> *const c_char>(version)
    };
    // SAFETY: it returns a static NUL-terminated string.
    let v = unsafe { version() };
    let v = if v.is_null() {
        "version unknown".into()
    } else {
        // SAFETY: non-null, static, NUL-terminated.
        unsafe { CStr::from_ptr(v) }.to_string_lossy().into_owned()
    };
    Ok(format!(
        "{v}; rivetrun serves PMIx beside PMI-1, so Open MPI programs run under it"
    ))
}

/// The supervisor's side of the upcalls: events and the waker that says so
/// (set once the supervisor exists, before any rank starts).
struct Upcalls {
    waker: Mutex<Option<Arc<Waker>>>,
    events: Mutex<Vec<PmixEvent>>,
}

/// Upcalls carry no pointer of ours, so their target is process-wide (one
/// PMIx server per process is the library's own rule too).
static UPCALLS: OnceLock<Upcalls> = OnceLock::new();

/// Queue `event` for the supervisor and wake it; the event comes back if
/// no server runs.
fn push_event(event: PmixEvent) -> Result<(), PmixEvent> {
    let Some(up) = UPCALLS.get() else {
        return Err(event);
    };
    up.events
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(event);
    if let Some(waker) = up.waker.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        let _ = waker.wake();
    }
    Ok(())
}

unsafe extern "C" fn on_connected(
    _proc: *const PmixProc,
    _object: *mut c_void,
    _cb: Option<OpCb>,
    _cbdata: *mut c_void,
) -> c_int {
    PMIX_OPERATION_SUCCEEDED
}

unsafe extern "C" fn on_abort(
    proc: *const PmixProc,
    _object: *mut c_void,
    status: c_int,
    msg: *const c_char,
    _procs: *mut PmixProc,
    _nprocs: usize,
    _cb: Option<OpCb>,
    _cbdata: *mut c_void,
) -> c_int {
    // SAFETY: the library passes the caller's valid proc.
    let (nspace, rank) = unsafe { ((*proc).nspace(), (*proc).rank) };
    let message = if msg.is_null() {
        String::new()
    } else {
        // SAFETY: non-null, NUL-terminated (the client's message).
        unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned()
    };
    let _ = push_event(PmixEvent::Aborted {
        nspace,
        rank,
        code: status,
        message,
    });
    // The caller is released at once; the supervisor ends the job.
    PMIX_OPERATION_SUCCEEDED
}

unsafe extern "C" fn on_fence(
    _procs: *const PmixProc,
    _nprocs: usize,
    _info: *const PmixInfo,
    _ninfo: usize,
    data: *mut c_char,
    ndata: usize,
    cb: Option<ModexCb>,
    cbdata: *mut c_void,
) -> c_int {
    // One node: the local contributions are the whole job's.
    if let Some(cb) = cb {
        // SAFETY: the library's own callback with its own data and cbdata;
        // no release function (the data stays the library's).
        unsafe {
            cb(
                PMIX_SUCCESS,
                data,
                ndata,
                cbdata,
                None,
                std::ptr::null_mut(),
            )
        };
    }
    PMIX_SUCCESS
}

/// A server being started on a thread of its own (it loads its plugins
/// while rivetrun discovers the topology); [`Starting::finish`] registers
/// the job once the topology is known. Dropped unfinished (an early error
/// return), it still waits for the thread, so the server's directory is
/// removed.
pub struct Starting {
    thread: Option<std::thread::JoinHandle<Result<PmixHost, String>>>,
    job: String,
    size: u32,
}

impl Starting {
    /// Start the server for job `job` of `size` ranks on this node (`host`)
    /// on a new thread.
    pub fn spawn(job: String, size: u32, host: String) -> Starting {
        Starting {
            thread: Some(std::thread::spawn(move || PmixHost::start(&host))),
            job,
            size,
        }
    }

    /// Wait for the server and register the job. `topology_xml` (hwloc's
    /// XML of this node) is handed to the ranks as `pmix.hwlocxml2`, which
    /// Open MPI reads instead of discovering the topology in every rank;
    /// `cluster` as `PMIX_CLUSTER_ID` (Rivet's ranks qualify their
    /// namespace with it, as under PMI-1).
    pub fn finish(
        mut self,
        topology_xml: Option<String>,
        cluster: Option<String>,
    ) -> Result<PmixHost, String> {
        let mut host = match self.thread.take().map(|t| t.join()) {
            Some(Ok(result)) => result?,
            _ => return Err("the PMIx server's start-up thread failed".into()),
        };
        host.topology_xml = topology_xml;
        host.cluster = cluster;
        host.nspace = CString::new(self.job.as_str())
            .map_err(|_| "the job name holds a NUL byte".to_string())?;
        host.register(&self.job, self.size, None)?;
        Ok(host)
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
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
}

impl PmixHost {
    /// Start the server for ranks on this node (`host`); the job is
    /// registered by [`Starting::finish`].
    fn start(host: &str) -> Result<PmixHost, String> {
        let api = Api::open()?;
        let tmpdir = private_dir()?;
        let host_obj = PmixHost {
            api,
            nspace: CString::default(),
            tmpdir,
            host: host.to_string(),
            topology_xml: None,
            cluster: None,
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
        host_obj.init()?;
        Ok(host_obj)
    }

    fn init(&self) -> Result<(), String> {
        let mut module = Box::new(Module {
            client_connected: Some(on_connected),
            client_finalized: Some(on_connected),
            abort: Some(on_abort),
            fence_nb: Some(on_fence),
            direct_modex: std::ptr::null(),
            publish: Some(names::on_publish),
            lookup: Some(names::on_lookup),
            unpublish: Some(names::on_unpublish),
            spawn: Some(spawn::on_spawn),
            middle: [std::ptr::null(); 10],
            job_control: Some(job_control::on_job_control),
            after_job_control: [std::ptr::null(); 5],
            group: Some(group::on_group),
            rest: [std::ptr::null(); 3],
        });
        let dir = self.tmpdir.to_string_lossy().into_owned();
        let mut info = InfoList::new(&self.api);
        info.string(c"pmix.srvr.tmpdir", &dir);
        info.string(c"pmix.sys.tmpdir", &dir);
        // SAFETY: the module lives for the process (leaked below, as the
        // library keeps a pointer to it); a valid info array.
        let rc = unsafe {
            (self.api.server_init)(&mut *module, info.infos.as_mut_ptr(), info.infos.len())
        };
        Box::leak(module);
        self.api.check("PMIx_server_init", rc)
    }

    /// Register the spawned job `job` of `size` processes (before they
    /// start), so they are served PMIx as the job's ranks are.
    /// `parent`: the process that asked, as (namespace, rank).
    pub fn register_spawned(
        &self,
        job: &str,
        size: u32,
        parent: (&str, u32),
    ) -> Result<(), String> {
        self.register(job, size, Some(PmixProc::new(parent.0, parent.1)))
    }

    fn register(&self, job: &str, size: u32, parent: Option<PmixProc>) -> Result<(), String> {
        let host = self.host.as_str();
        let ns = CString::new(job).map_err(|_| "the job name holds a NUL byte".to_string())?;
        let ranks: Vec<String> = (0..size).map(|r| r.to_string()).collect();
        let peers = ranks.join(",");
        let node_map = self.generate(self.api.generate_regex, host)?;
        let proc_map = self.generate(self.api.generate_ppn, &peers)?;
        let mut info = InfoList::new(&self.api);
        info.u32(c"pmix.univ.size", size);
        info.u32(c"pmix.job.size", size);
        info.u32(c"pmix.max.size", size);
        info.u32(c"pmix.local.size", size);
        info.u32(c"pmix.job.napps", 1);
        info.u32(c"pmix.num.nodes", 1);
        info.u32(c"pmix.appnum", 0);
        info.rank(c"pmix.lldr", 0);
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
            info.string(c"pmix.hwlocxml2", xml);
        }
        // More ranks than CPUs: MPI libraries then yield when idle (Open
        // MPI reads this), instead of spinning against each other.
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if size as usize > cpus {
            info.flag(c"pmix.ndosub", true);
        }
        let (api, ns) = (&self.api, &ns);
        Done::run("PMIx_server_register_nspace", api, |cb, data| {
            // SAFETY: a valid namespace and info array, alive until the
            // completion (this function waits for it).
            unsafe {
                (api.register_nspace)(
                    ns.as_ptr(),
                    size as c_int,
                    info.infos.as_mut_ptr(),
                    info.infos.len(),
                    cb,
                    data,
                )
            }
        })?;
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        for rank in 0..size {
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
    /// `PMIX_EVENT_AFFECTED_PROC`). Returns the groups whose members were
    /// not allowed to end without leaving, for the supervisor to fail the
    /// job as for a PMI-1 group; a failed notification is an error naming
    /// the group.
    pub fn member_ended(&self, nspace: &str, rank: u32) -> (Vec<String>, Vec<String>) {
        let mut forbidden = Vec::new();
        let mut errors = Vec::new();
        for left in group::member_ended(nspace, rank) {
            if let Err(e) = self.notify_member_failed(&left.group, nspace, rank, &left.procs) {
                errors.push(format!("group {}: {e}", left.group));
            }
            if !left.early_term {
                forbidden.push(left.group);
            }
        }
        (forbidden, errors)
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
        UPCALLS.get().map_or_else(Vec::new, |up| {
            std::mem::take(&mut *up.events.lock().unwrap_or_else(|e| e.into_inner()))
        })
    }
}

impl Drop for PmixHost {
    fn drop(&mut self) {
        let api = &self.api;
        let ns = &self.nspace;
        let _ = Done::run("PMIx_server_deregister_nspace", api, |cb, data| {
            // SAFETY: a valid namespace; the callback signals completion.
            unsafe { (api.deregister_nspace)(ns.as_ptr(), cb, data) };
            PMIX_SUCCESS
        });
        // SAFETY: no arguments; no PMIx call follows.
        unsafe { (self.api.server_finalize)() };
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

/// Open MPI's setting for ranks that spin while they wait.
pub const OMPI_YIELD_VAR: &str = "OMPI_MCA_mpi_yield_when_idle";

/// `OMPI_MCA_mpi_yield_when_idle=1` when `ranks_here` outnumber the CPUs
/// rivetrun may use and the user did not set it: `mpirun` does the same
/// for an oversubscribed node, and Open MPI 4.1 does not take it from
/// `pmix.ndosub`, so without it its ranks under rivetrun spin against
/// each other while they start.
pub fn yield_when_oversubscribed(ranks_here: usize) -> Option<(String, String)> {
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
        assert_eq!(std::mem::offset_of!(Module, job_control), 19 * slot);
        assert_eq!(std::mem::offset_of!(Module, group), 25 * slot);
        assert_eq!(std::mem::size_of::<Module>(), 29 * slot);
    }
}
