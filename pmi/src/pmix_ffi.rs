//! The few OpenPMIx types and calls Rivet uses, declared once for the PMIx
//! client (`client/pmix.rs`) and rivetrun's PMIx server. The library
//! (`libpmix.so.2`, OpenPMIx 4.x) is opened at run time, so a machine
//! without it builds and runs; the layouts are checked against the header
//! by a test where `libpmix-dev` is installed.

use std::ffi::{c_char, c_int, c_void, CStr};

use crate::error::{Error, Result};

pub const LIBRARY: &CStr = c"libpmix.so.2";

pub const PMIX_SUCCESS: c_int = 0;
pub const PMIX_ERROR: c_int = -1;
pub const PMIX_ERR_NO_PERMISSIONS: c_int = -23;
pub const PMIX_ERR_TIMEOUT: c_int = -24;
pub const PMIX_ERR_UNREACH: c_int = -25;
pub const PMIX_ERR_BAD_PARAM: c_int = -27;
pub const PMIX_ERR_OUT_OF_RESOURCE: c_int = -29;
pub const PMIX_ERR_PARTIAL_SUCCESS: c_int = -52;
pub const PMIX_ERR_NOT_FOUND: c_int = -46;
pub const PMIX_ERR_NOT_SUPPORTED: c_int = -47;
pub const PMIX_ERR_DUPLICATE_KEY: c_int = -53;
/// Why a spawn started nothing: its program is missing, is not
/// executable, or another reason.
pub const PMIX_ERR_JOB_EXE_NOT_FOUND: c_int = -190;
pub const PMIX_ERR_JOB_APP_NOT_EXECUTABLE: c_int = -177;
pub const PMIX_ERR_JOB_FAILED_TO_LAUNCH: c_int = -181;
/// An upcall finished at once: the library must not wait for its callback.
pub const PMIX_OPERATION_SUCCEEDED: c_int = -157;
pub const PMIX_BOOL: u16 = 1;
pub const PMIX_STRING: u16 = 3;
pub const PMIX_INT: u16 = 6;
pub const PMIX_INT32: u16 = 9;
pub const PMIX_UINT16: u16 = 13;
pub const PMIX_UINT32: u16 = 14;
pub const PMIX_PROC_RANK: u16 = 40;
/// `PMIX_PROC`: a `pmix_proc_t` value.
pub const PMIX_PROC: u16 = 22;
/// `PMIX_DATA_ARRAY`: a `pmix_data_array_t` value.
pub const PMIX_DATA_ARRAY: u16 = 39;
/// `PMIX_INFO`: a `pmix_info_t` (the element type of an info array).
pub const PMIX_INFO: u16 = 24;
/// `PMIX_POINTER`: a bare `void *`, copied as a pointer.
pub const PMIX_POINTER: u16 = 31;
/// The event a group member's end raises for the other members.
pub const PMIX_GROUP_MEMBER_FAILED: c_int = -170;
/// `PMIX_RANGE_CUSTOM`: an event's targets are listed (`pmix.evrange`).
pub const PMIX_RANGE_CUSTOM: u8 = 6;
/// `PMIX_GLOBAL`: visible to processes on every node.
pub const PMIX_GLOBAL: u8 = 3;
pub const PMIX_RANK_WILDCARD: u32 = u32::MAX - 1;
pub const PMIX_RANK_UNDEF: u32 = u32::MAX;

/// `pmix_proc_t` (OpenPMIx 4.x: 256-byte namespace, then the rank).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PmixProc {
    pub nspace: [c_char; 256],
    pub rank: u32,
}

impl PmixProc {
    /// `nspace` cut to 255 bytes (the type's limit) and NUL-terminated.
    pub fn new(nspace: &str, rank: u32) -> PmixProc {
        let mut p = PmixProc {
            nspace: [0; 256],
            rank,
        };
        for (d, s) in p.nspace.iter_mut().zip(nspace.bytes().take(255)) {
            *d = s as c_char;
        }
        p
    }

    pub fn nspace(&self) -> String {
        let bytes: Vec<u8> = self
            .nspace
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// `pmix_value_t`: a type tag and a 24-byte union at offset 8.
#[repr(C)]
pub struct PmixValue {
    pub ty: u16,
    pub _pad: [u8; 6],
    pub data: [u64; 3],
}

/// `pmix_info_t`: a 512-byte key, flags, a value.
#[repr(C)]
pub struct PmixInfo {
    pub key: [c_char; 512],
    pub flags: u32,
    pub _pad: u32,
    pub value: PmixValue,
}

/// `pmix_data_array_t`: a type tag, a count, the elements.
#[repr(C)]
pub struct PmixDataArray {
    pub ty: u16,
    pub size: usize,
    pub array: *mut c_void,
}

/// `pmix_pdata_t`: what `PMIx_Lookup` fills in for one key.
#[repr(C)]
pub struct PmixPdata {
    pub proc: PmixProc,
    pub key: [c_char; 512],
    pub value: PmixValue,
}

/// `pmix_app_t`: one application of a `PMIx_Spawn` (client) or of the
/// server's spawn upcall.
#[repr(C)]
pub struct PmixApp {
    pub cmd: *const c_char,
    /// NULL-terminated; `argv[0]` is the program's own name.
    pub argv: *const *const c_char,
    /// NULL-terminated `NAME=VALUE` additions to the processes' environment.
    pub env: *const *const c_char,
    pub cwd: *const c_char,
    pub maxprocs: c_int,
    pub info: *const PmixInfo,
    pub ninfo: usize,
}

/// Copy `key` (cut to 511 bytes) into a NUL-terminated `pmix_key_t`.
pub fn load_key(dst: &mut [c_char; 512], key: &[u8]) {
    *dst = [0; 512];
    for (d, s) in dst.iter_mut().zip(key.iter().take(511)) {
        *d = *s as c_char;
    }
}

impl PmixInfo {
    /// A boolean entry (no pointers inside, so nothing to release).
    pub fn flag(key: &CStr, on: bool) -> PmixInfo {
        let mut info = PmixInfo {
            key: [0; 512],
            flags: 0,
            _pad: 0,
            value: PmixValue {
                ty: PMIX_BOOL,
                _pad: [0; 6],
                data: [on as u64, 0, 0],
            },
        };
        load_key(&mut info.key, key.to_bytes());
        info
    }
}

/// The library, opened once per process and never closed (its symbols and
/// threads live as long as the process).
pub struct Library(*mut c_void);

// SAFETY: a dlopen handle may be used from any thread (dlsym is thread-safe).
unsafe impl Send for Library {}
// SAFETY: as above; the handle is only read.
unsafe impl Sync for Library {}

type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;

impl Library {
    pub fn open() -> Result<Library> {
        // SAFETY: dlopen with a constant NUL-terminated name. RTLD_GLOBAL:
        // the library's own plugins resolve against it.
        let lib = unsafe { libc::dlopen(LIBRARY.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if lib.is_null() {
            return Err(unavailable(format!(
                "cannot load {}: {} (install OpenPMIx: apt-get install libpmix2)",
                LIBRARY.to_string_lossy(),
                dl_error()
            )));
        }
        Ok(Library(lib))
    }

    /// The address of `name`, or an error naming what is missing.
    pub fn symbol(&self, name: &CStr) -> Result<*mut c_void> {
        // SAFETY: a live handle and a NUL-terminated name.
        let p = unsafe { libc::dlsym(self.0, name.as_ptr()) };
        if p.is_null() {
            return Err(unavailable(format!(
                "{} lacks {}",
                LIBRARY.to_string_lossy(),
                name.to_string_lossy()
            )));
        }
        Ok(p)
    }

    /// `PMIx_Error_string(rc)` with the code, for error messages.
    pub fn describe(&self, rc: c_int) -> String {
        let Ok(f) = self.symbol(c"PMIx_Error_string") else {
            return format!("PMIx status {rc}");
        };
        // SAFETY: the symbol is PMIx_Error_string, `const char *(pmix_status_t)`.
        let f = unsafe { std::mem::transmute::<*mut c_void, ErrorStringFn>(f) };
        // SAFETY: it returns a static string (or null) for any code.
        let s = unsafe { f(rc) };
        if s.is_null() {
            return format!("PMIx status {rc}");
        }
        // SAFETY: non-null, NUL-terminated, static.
        format!("{} ({rc})", unsafe { CStr::from_ptr(s) }.to_string_lossy())
    }

    /// `Ok` for `PMIX_SUCCESS`, else [`Error::PmixFailed`] naming `op`.
    pub fn check(&self, op: &'static str, rc: c_int) -> Result<()> {
        if rc == PMIX_SUCCESS {
            Ok(())
        } else {
            Err(Error::PmixFailed {
                op,
                why: self.describe(rc),
            })
        }
    }
}

fn unavailable(why: String) -> Error {
    Error::PmixUnavailable { why }
}

fn dl_error() -> String {
    // SAFETY: dlerror returns null or a thread-local NUL-terminated string.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null, NUL-terminated.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_openpmix_4() {
        assert_eq!(std::mem::size_of::<PmixProc>(), 260);
        assert_eq!(std::mem::offset_of!(PmixProc, rank), 256);
        assert_eq!(std::mem::size_of::<PmixValue>(), 32);
        assert_eq!(std::mem::offset_of!(PmixValue, data), 8);
        assert_eq!(std::mem::size_of::<PmixInfo>(), 552);
        assert_eq!(std::mem::offset_of!(PmixInfo, flags), 512);
        assert_eq!(std::mem::offset_of!(PmixInfo, value), 520);
        assert_eq!(std::mem::offset_of!(PmixPdata, key), 260);
        assert_eq!(std::mem::offset_of!(PmixPdata, value), 776);
        assert_eq!(std::mem::size_of::<PmixPdata>(), 808);
        assert_eq!(std::mem::offset_of!(PmixDataArray, size), 8);
        assert_eq!(std::mem::offset_of!(PmixDataArray, array), 16);
        assert_eq!(std::mem::size_of::<PmixDataArray>(), 24);
        assert_eq!(std::mem::offset_of!(PmixApp, cwd), 24);
        assert_eq!(std::mem::offset_of!(PmixApp, maxprocs), 32);
        assert_eq!(std::mem::offset_of!(PmixApp, info), 40);
        assert_eq!(std::mem::size_of::<PmixApp>(), 56);
    }

    /// Where the header is installed, its constants are the ones above.
    #[test]
    fn constants_match_the_installed_header() {
        let header = "/usr/lib/x86_64-linux-gnu/pmix2/include/pmix_common.h";
        let Ok(text) = std::fs::read_to_string(header) else {
            eprintln!("{header} not installed: constants not compared");
            return;
        };
        let value = |name: &str| -> i64 {
            let line = text
                .lines()
                .find(|l| l.split_whitespace().take(2).eq(["#define", name]))
                .unwrap_or_else(|| panic!("{name} not in {header}"));
            line.split_whitespace().nth(2).unwrap().parse().unwrap()
        };
        assert_eq!(value("PMIX_SUCCESS"), PMIX_SUCCESS as i64);
        assert_eq!(value("PMIX_ERR_NOT_FOUND"), PMIX_ERR_NOT_FOUND as i64);
        assert_eq!(
            value("PMIX_ERR_NOT_SUPPORTED"),
            PMIX_ERR_NOT_SUPPORTED as i64
        );
        assert_eq!(
            value("PMIX_OPERATION_SUCCEEDED"),
            PMIX_OPERATION_SUCCEEDED as i64
        );
        for (name, code) in [
            ("PMIX_ERROR", PMIX_ERROR),
            ("PMIX_ERR_NO_PERMISSIONS", PMIX_ERR_NO_PERMISSIONS),
            ("PMIX_ERR_UNREACH", PMIX_ERR_UNREACH),
            ("PMIX_ERR_BAD_PARAM", PMIX_ERR_BAD_PARAM),
            ("PMIX_ERR_OUT_OF_RESOURCE", PMIX_ERR_OUT_OF_RESOURCE),
            ("PMIX_ERR_PARTIAL_SUCCESS", PMIX_ERR_PARTIAL_SUCCESS),
            ("PMIX_ERR_DUPLICATE_KEY", PMIX_ERR_DUPLICATE_KEY),
            ("PMIX_ERR_JOB_EXE_NOT_FOUND", PMIX_ERR_JOB_EXE_NOT_FOUND),
            (
                "PMIX_ERR_JOB_APP_NOT_EXECUTABLE",
                PMIX_ERR_JOB_APP_NOT_EXECUTABLE,
            ),
            (
                "PMIX_ERR_JOB_FAILED_TO_LAUNCH",
                PMIX_ERR_JOB_FAILED_TO_LAUNCH,
            ),
        ] {
            assert_eq!(value(name), code as i64, "{name}");
        }
        assert_eq!(value("PMIX_INT"), PMIX_INT as i64);
        assert_eq!(value("PMIX_INT32"), PMIX_INT32 as i64);
        assert_eq!(value("PMIX_BOOL"), PMIX_BOOL as i64);
        assert_eq!(value("PMIX_STRING"), PMIX_STRING as i64);
        assert_eq!(value("PMIX_UINT16"), PMIX_UINT16 as i64);
        assert_eq!(value("PMIX_UINT32"), PMIX_UINT32 as i64);
        assert_eq!(value("PMIX_PROC_RANK"), PMIX_PROC_RANK as i64);
        assert_eq!(value("PMIX_PROC"), PMIX_PROC as i64);
        assert_eq!(value("PMIX_DATA_ARRAY"), PMIX_DATA_ARRAY as i64);
        assert_eq!(value("PMIX_INFO"), PMIX_INFO as i64);
        assert_eq!(value("PMIX_POINTER"), PMIX_POINTER as i64);
        assert_eq!(
            value("PMIX_GROUP_MEMBER_FAILED"),
            PMIX_GROUP_MEMBER_FAILED as i64
        );
        assert_eq!(value("PMIX_RANGE_CUSTOM"), PMIX_RANGE_CUSTOM as i64);
        assert_eq!(value("PMIX_GLOBAL"), PMIX_GLOBAL as i64);
    }

    #[test]
    fn a_proc_name_round_trips_and_is_cut_to_the_type() {
        let p = PmixProc::new("rivet-42", 3);
        assert_eq!((p.nspace(), p.rank), ("rivet-42".to_string(), 3));
        let long = "x".repeat(300);
        assert_eq!(PmixProc::new(&long, 0).nspace().len(), 255);
    }
}
