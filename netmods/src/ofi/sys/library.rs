//! libfabric is opened at run time (`dlopen("libfabric.so.1")`), not
//! linked, for two reasons. A process that never uses the ofi netmod must
//! not pay for it: Debian's libfabric pulls in psm, psm2, verbs and efa,
//! and libinfinipath's load-time constructor installs handlers for SIGINT,
//! SIGILL, SIGABRT, SIGBUS, SIGSEGV and SIGTERM that print a backtrace and
//! exit 1, which hides a rank's real death signal from the launcher. And
//! the project builds and runs where libfabric is not installed; the
//! netmod then says so when asked for.
//!
//! [`load`] opens the library once per process and puts back whatever
//! signal dispositions the load changed. The exported functions are then
//! reached through [`api`]; the header's inline dispatchers need no
//! symbols (they call through the objects' ops tables).

use std::ffi::{CStr, CString};
use std::sync::OnceLock;

use libc::{c_char, c_int, c_void};

use super::{fi_fabric_attr, fi_info, fi_version_of, fid_fabric};

/// The soname Rivet asks the dynamic linker for.
pub const SONAME: &str = "libfabric.so.1";

/// The oldest libfabric whose structs match these bindings.
pub const MIN_VERSION: u32 = fi_version_of(1, 17);

type VersionFn = unsafe extern "C" fn() -> u32;
type GetinfoFn = unsafe extern "C" fn(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi_info,
    info: *mut *mut fi_info,
) -> c_int;
type FreeinfoFn = unsafe extern "C" fn(info: *mut fi_info);
type DupinfoFn = unsafe extern "C" fn(info: *const fi_info) -> *mut fi_info;
type FabricFn = unsafe extern "C" fn(
    attr: *mut fi_fabric_attr,
    fabric: *mut *mut fid_fabric,
    context: *mut c_void,
) -> c_int;
type StrerrorFn = unsafe extern "C" fn(errnum: c_int) -> *const c_char;
type TostrFn = unsafe extern "C" fn(
    buf: *mut c_char,
    len: usize,
    data: *const c_void,
    datatype: u32,
) -> *mut c_char;

/// The exported libfabric functions Rivet calls.
pub struct Api {
    pub fi_version: VersionFn,
    pub fi_getinfo: GetinfoFn,
    pub fi_freeinfo: FreeinfoFn,
    pub fi_dupinfo: DupinfoFn,
    pub fi_fabric: FabricFn,
    pub fi_strerror: StrerrorFn,
    pub fi_tostr_r: TostrFn,
}

static API: OnceLock<Result<Api, String>> = OnceLock::new();

/// Opens libfabric (once per process); the error says why it cannot be
/// used: not installed, too old, or a symbol missing.
pub fn load() -> Result<&'static Api, String> {
    API.get_or_init(open).as_ref().map_err(Clone::clone)
}

/// The loaded library.
///
/// # Panics
/// If [`load`] has not succeeded: every path into the netmod loads first,
/// so this is a bug in the netmod, not a user error.
pub fn api() -> &'static Api {
    match API.get() {
        Some(Ok(api)) => api,
        _ => panic!("ofi::sys used before sys::load() succeeded"),
    }
}

fn dl_error() -> String {
    // SAFETY: dlerror returns null or a thread-local NUL-terminated string.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dynamic linker error".into()
    } else {
        // SAFETY: non-null and NUL-terminated, per dlerror.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

fn open() -> Result<Api, String> {
    let soname = CString::new(SONAME).expect("no NUL in the soname");
    let saved = Signals::save();
    // SAFETY: dlopen of a shared library; its constructors run now. The
    // handle is kept for the life of the process (never dlclose'd), so
    // the function pointers below stay valid.
    let handle = unsafe { libc::dlopen(soname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    saved.restore();
    if handle.is_null() {
        return Err(format!(
            "cannot load {SONAME} ({}): install libfabric 1.17 or later (Debian: libfabric1)",
            dl_error()
        ));
    }
    let sym = |name: &str| -> Result<*mut c_void, String> {
        let c = CString::new(name).expect("no NUL in symbol names");
        // SAFETY: `handle` is a live dlopen handle; `c` a C string.
        let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
        if p.is_null() {
            Err(format!("{SONAME} has no {name}: {}", dl_error()))
        } else {
            Ok(p)
        }
    };
    // SAFETY: (every transmute below) each symbol is the libfabric function
    // of that name, whose C prototype the field's type spells out.
    let api = unsafe {
        Api {
            fi_version: std::mem::transmute::<*mut c_void, VersionFn>(sym("fi_version")?),
            fi_getinfo: std::mem::transmute::<*mut c_void, GetinfoFn>(sym("fi_getinfo")?),
            fi_freeinfo: std::mem::transmute::<*mut c_void, FreeinfoFn>(sym("fi_freeinfo")?),
            fi_dupinfo: std::mem::transmute::<*mut c_void, DupinfoFn>(sym("fi_dupinfo")?),
            fi_fabric: std::mem::transmute::<*mut c_void, FabricFn>(sym("fi_fabric")?),
            fi_strerror: std::mem::transmute::<*mut c_void, StrerrorFn>(sym("fi_strerror")?),
            fi_tostr_r: std::mem::transmute::<*mut c_void, TostrFn>(sym("fi_tostr_r")?),
        }
    };
    // SAFETY: fi_version takes nothing and returns the library's version.
    let version = unsafe { (api.fi_version)() };
    if version < MIN_VERSION {
        return Err(format!(
            "{SONAME} is libfabric {}.{}; Rivet needs 1.17 or later",
            version >> 16,
            version & 0xffff
        ));
    }
    Ok(api)
}

/// The dispositions of the classic signals (1-31), to undo what a
/// library's constructor installs.
struct Signals(Vec<(c_int, libc::sigaction)>);

impl Signals {
    fn save() -> Signals {
        let mut v = Vec::new();
        for sig in 1..32 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            // SAFETY: sigaction with a null new action only reads the
            // current one into `old`, a plain C struct.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } == 0 {
                v.push((sig, old));
            }
        }
        Signals(v)
    }

    fn restore(&self) {
        for (sig, old) in &self.0 {
            // SAFETY: reads the current action, then reinstalls `old`, an
            // action this process had before the load.
            let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: as above: a null new action only reads.
            if unsafe { libc::sigaction(*sig, std::ptr::null(), &mut now) } == 0
                && now.sa_sigaction != old.sa_sigaction
            {
                // SAFETY: `old` is an action this process had installed.
                unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
            }
        }
    }
}
