//! The OpenPMIx server library as rivetrun calls it: the C prototypes
//! (`pmix_server.h`, `pmix.h`, 4.x) of the functions it opens at run time
//! and of the host module's upcalls, and [`probe`] for `rivetrun --info`.

use std::ffi::{c_char, c_int, c_void, CStr};

use rivet_pmi::pmix_ffi::{Library, PmixInfo, PmixProc, PmixValue};

use super::{connect, group, job_control, name_upcalls, node, spawn};

pub(super) type OpCb = unsafe extern "C" fn(c_int, *mut c_void);
pub(crate) type ModexCb = unsafe extern "C" fn(
    c_int,
    *const c_char,
    usize,
    *mut c_void,
    Option<unsafe extern "C" fn(*mut c_void)>,
    *mut c_void,
);
pub(super) type ConnectedUp =
    unsafe extern "C" fn(*const PmixProc, *mut c_void, Option<OpCb>, *mut c_void) -> c_int;
pub(super) type AbortUp = unsafe extern "C" fn(
    *const PmixProc,
    *mut c_void,
    c_int,
    *const c_char,
    *mut PmixProc,
    usize,
    Option<OpCb>,
    *mut c_void,
) -> c_int;
pub(super) type FenceUp = unsafe extern "C" fn(
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
pub(super) struct Module {
    pub(super) client_connected: Option<ConnectedUp>,
    pub(super) client_finalized: Option<ConnectedUp>,
    pub(super) abort: Option<AbortUp>,
    pub(super) fence_nb: Option<FenceUp>,
    pub(super) direct_modex: Option<node::DmodexUp>,
    pub(super) publish: Option<name_upcalls::PublishUp>,
    pub(super) lookup: Option<name_upcalls::LookupUp>,
    pub(super) unpublish: Option<name_upcalls::UnpublishUp>,
    pub(super) spawn: Option<spawn::SpawnUp>,
    pub(super) connect: Option<connect::ConnectUp>,
    pub(super) disconnect: Option<connect::ConnectUp>,
    /// register_events ... allocate.
    pub(super) middle: [*const c_void; 8],
    pub(super) job_control: Option<job_control::JobControlUp>,
    /// monitor ... push_stdin.
    pub(super) after_job_control: [*const c_void; 5],
    pub(super) group: Option<group::GroupUp>,
    /// fabric, client_connected2, the spare slot.
    pub(super) rest: [*const c_void; 3],
}

pub(super) type ServerInitFn = unsafe extern "C" fn(*mut Module, *mut PmixInfo, usize) -> c_int;
pub(super) type ServerFinalizeFn = unsafe extern "C" fn() -> c_int;
pub(super) type RegisterNspaceFn = unsafe extern "C" fn(
    *const c_char,
    c_int,
    *mut PmixInfo,
    usize,
    Option<OpCb>,
    *mut c_void,
) -> c_int;
pub(super) type DeregisterNspaceFn = unsafe extern "C" fn(*const c_char, Option<OpCb>, *mut c_void);
pub(super) type RegisterClientFn = unsafe extern "C" fn(
    *const PmixProc,
    libc::uid_t,
    libc::gid_t,
    *mut c_void,
    Option<OpCb>,
    *mut c_void,
) -> c_int;
pub(super) type SetupForkFn = unsafe extern "C" fn(*const PmixProc, *mut *mut *mut c_char) -> c_int;
pub(super) type InfoLoadFn =
    unsafe extern "C" fn(*mut PmixInfo, *const c_char, *const c_void, u16) -> c_int;
pub(super) type ValueDestructFn = unsafe extern "C" fn(*mut PmixValue);
pub(super) type GenerateFn = unsafe extern "C" fn(*const c_char, *mut *mut c_char) -> c_int;
pub(super) type NotifyFn = unsafe extern "C" fn(
    c_int,
    *const PmixProc,
    u8,
    *const PmixInfo,
    usize,
    Option<OpCb>,
    *mut c_void,
) -> c_int;

pub(super) struct Api {
    pub(super) lib: Library,
    pub(super) server_init: ServerInitFn,
    pub(super) server_finalize: ServerFinalizeFn,
    pub(super) register_nspace: RegisterNspaceFn,
    pub(super) deregister_nspace: DeregisterNspaceFn,
    pub(super) register_client: RegisterClientFn,
    pub(super) setup_fork: SetupForkFn,
    pub(super) info_load: InfoLoadFn,
    pub(super) value_destruct: ValueDestructFn,
    pub(super) generate_regex: GenerateFn,
    pub(super) generate_ppn: GenerateFn,
    pub(super) notify: NotifyFn,
}

impl Api {
    pub(super) fn open() -> Result<Api, String> {
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

    pub(super) fn check(&self, op: &'static str, rc: c_int) -> Result<(), String> {
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
