//! The C side of the PMIx server's name service (`names.rs`): the host
//! module's `publish`, `lookup` and `unpublish` upcalls read what the
//! library passed into a [`NameCall`], and [`Callback::answer`] gives the
//! library its reply.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::time::{Duration, Instant};

use rivet_pmi::pmix_ffi::{
    load_key, PmixInfo, PmixPdata, PmixProc, PmixValue, PMIX_BOOL, PMIX_ERR_BAD_PARAM,
    PMIX_ERR_NOT_SUPPORTED, PMIX_ERR_PARTIAL_SUCCESS, PMIX_INT, PMIX_INT32, PMIX_RANK_UNDEF,
    PMIX_STRING, PMIX_SUCCESS,
};

use super::names::{Answer, Found, NameCall, NameOp, Wait};
use super::values::{Data, Stored};
use super::{push_event, OpCb, PmixEvent};

/// `PMIX_BYTE_OBJECT`, `PMIX_PERSIST` (`pmix_persistence_t`, a `u8`) and
/// its `PMIX_PERSIST_FIRST_READ`.
const PMIX_BYTE_OBJECT: u16 = 27;
const PMIX_PERSIST: u16 = 30;
const PMIX_PERSIST_FIRST_READ: u8 = 1;
/// `pmix_lookup_cbfunc_t`.
type LookupCb = unsafe extern "C" fn(c_int, *const PmixPdata, usize, *mut c_void);
pub(super) type PublishUp = unsafe extern "C" fn(
    *const PmixProc,
    *const PmixInfo,
    usize,
    Option<OpCb>,
    *mut c_void,
) -> c_int;
pub(super) type LookupUp = unsafe extern "C" fn(
    *const PmixProc,
    *mut *mut c_char,
    *const PmixInfo,
    usize,
    Option<LookupCb>,
    *mut c_void,
) -> c_int;
pub(super) type UnpublishUp = unsafe extern "C" fn(
    *const PmixProc,
    *mut *mut c_char,
    *const PmixInfo,
    usize,
    Option<OpCb>,
    *mut c_void,
) -> c_int;

/// The library's callback for one call.
pub(super) enum Callback {
    Op(OpCb),
    Lookup(LookupCb),
}

impl Callback {
    /// Give the library `answer` for the call `cbdata` names (once).
    pub(super) fn answer(self, cbdata: *mut c_void, answer: Answer) {
        match self {
            // SAFETY: the library's callback with its own cbdata, called
            // once for this call.
            Callback::Op(cb) => unsafe { cb(answer.status, cbdata) },
            Callback::Lookup(cb) => {
                let values: Vec<Owned> = answer
                    .found
                    .iter()
                    .map(|f| match Stored::decode(&f.port).data {
                        Data::Str(s) => {
                            Owned::Str(CString::new(s.replace('\0', "")).expect("NULs removed"))
                        }
                        Data::Bytes(b) => Owned::Bytes(b),
                    })
                    .collect();
                let data: Vec<PmixPdata> = answer
                    .found
                    .iter()
                    .zip(&values)
                    .map(|(f, value)| pdata(f, value))
                    .collect();
                let (ptr, n) = match answer.status {
                    PMIX_SUCCESS | PMIX_ERR_PARTIAL_SUCCESS => (data.as_ptr(), data.len()),
                    _ => (std::ptr::null(), 0),
                };
                // SAFETY: the library's callback with its own cbdata, called
                // once; `data` and the strings it points at outlive the
                // call, during which the library copies them into its reply.
                unsafe { cb(answer.status, ptr, n, cbdata) };
            }
        }
    }
}

/// A found value's data, kept alive while the library copies it.
enum Owned {
    Str(CString),
    Bytes(Vec<u8>),
}

/// A `pmix_pdata_t` for `found`, its value pointing into `value`.
fn pdata(found: &Found, value: &Owned) -> PmixPdata {
    let proc = match &found.publisher {
        Some((ns, rank)) => PmixProc::new(ns, *rank),
        None => PmixProc::new("", PMIX_RANK_UNDEF),
    };
    let mut d = PmixPdata {
        proc,
        key: [0; 512],
        value: match value {
            Owned::Str(s) => PmixValue {
                ty: PMIX_STRING,
                _pad: [0; 6],
                data: [s.as_ptr() as u64, 0, 0],
            },
            // pmix_byte_object_t: the bytes, then their count.
            Owned::Bytes(b) => PmixValue {
                ty: PMIX_BYTE_OBJECT,
                _pad: [0; 6],
                data: [b.as_ptr() as u64, b.len() as u64, 0],
            },
        },
    };
    load_key(&mut d.key, found.key.as_bytes());
    d
}

/// A NUL-terminated key array's strings (`None` for a null array).
///
/// # Safety
/// `keys` is null or a NULL-terminated array of NUL-terminated strings.
unsafe fn argv(keys: *mut *mut c_char) -> Option<Vec<String>> {
    if keys.is_null() {
        return None;
    }
    let mut out = Vec::new();
    for i in 0.. {
        // SAFETY: NULL-terminated, so every index up to the terminator is valid.
        let k = unsafe { *keys.add(i) };
        if k.is_null() {
            break;
        }
        // SAFETY: a NUL-terminated string of the caller's.
        out.push(unsafe { CStr::from_ptr(k) }.to_string_lossy().into_owned());
    }
    Some(out)
}

/// The infos as a slice (empty for a null array).
///
/// # Safety
/// `info` is null or points at `n` valid entries.
unsafe fn infos<'a>(info: *const PmixInfo, n: usize) -> &'a [PmixInfo] {
    if info.is_null() || n == 0 {
        &[]
    } else {
        // SAFETY: as the caller promises.
        unsafe { std::slice::from_raw_parts(info, n) }
    }
}

fn key_of(info: &PmixInfo) -> String {
    let bytes: Vec<u8> = info
        .key
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// An integer-valued info's value (`PMIX_INT`/`PMIX_INT32`; a `PMIX_BOOL`
/// counts as 0 when true).
fn int_of(value: &PmixValue) -> Option<i64> {
    // The union's first bytes hold the value (little- or big-endian alike
    // for the low word read as the C type would).
    let bytes = value.data[0].to_ne_bytes();
    match value.ty {
        PMIX_INT | PMIX_INT32 => Some(i32::from_ne_bytes(bytes[..4].try_into().ok()?) as i64),
        PMIX_BOOL => (bytes[0] != 0).then_some(0),
        _ => None,
    }
}

/// A lookup's wait, from its `PMIX_WAIT` and `PMIX_TIMEOUT` directives.
fn wait_of(info: &[PmixInfo]) -> Option<Wait> {
    let mut count = None;
    let mut until = None;
    for i in info {
        match key_of(i).as_str() {
            "pmix.wait" => count = int_of(&i.value),
            "pmix.timeout" => {
                until = int_of(&i.value)
                    .filter(|&s| s > 0)
                    .and_then(|s| Instant::now().checked_add(Duration::from_secs(s as u64)))
            }
            _ => {}
        }
    }
    count.map(|c| Wait {
        count: c.max(0) as usize,
        until,
    })
}

/// A string or byte object value's data (`None` for other types).
///
/// # Safety
/// `value` holds data of the type its tag says.
unsafe fn data_of(value: &PmixValue) -> Option<Data> {
    let ptr = value.data[0] as *const c_char;
    match value.ty {
        PMIX_STRING if !ptr.is_null() => {
            // SAFETY: a PMIX_STRING value holds a NUL-terminated char *.
            let s = unsafe { CStr::from_ptr(ptr) };
            Some(Data::Str(s.to_string_lossy().into_owned()))
        }
        PMIX_BYTE_OBJECT => {
            let len = usize::try_from(value.data[1]).ok()?;
            if ptr.is_null() || len == 0 {
                return Some(Data::Bytes(Vec::new()));
            }
            // SAFETY: a pmix_byte_object_t: `len` bytes at `ptr`.
            let b = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
            Some(Data::Bytes(b.to_vec()))
        }
        _ => None,
    }
}

fn hand_over(proc: *const PmixProc, op: NameOp, callback: Callback, cbdata: *mut c_void) -> c_int {
    if proc.is_null() {
        return PMIX_ERR_BAD_PARAM;
    }
    // SAFETY: non-null: the caller's proc, valid for the upcall.
    let (nspace, rank) = unsafe { ((*proc).nspace(), (*proc).rank) };
    let call = NameCall {
        nspace,
        rank,
        op,
        callback,
        cbdata,
    };
    match push_event(PmixEvent::Names(call)) {
        // The supervisor calls back.
        Ok(()) => PMIX_SUCCESS,
        Err(_) => PMIX_ERR_NOT_SUPPORTED,
    }
}

pub(super) unsafe extern "C" fn on_publish(
    proc: *const PmixProc,
    info: *const PmixInfo,
    ninfo: usize,
    cb: Option<OpCb>,
    cbdata: *mut c_void,
) -> c_int {
    let Some(cb) = cb else {
        return PMIX_ERR_BAD_PARAM;
    };
    let mut entries = Vec::new();
    // SAFETY: the library passes `ninfo` valid entries.
    let info = unsafe { infos(info, ninfo) };
    // Removed on its first read, or kept until unpublished (any longer
    // persistence is kept too: the job's table ends with the job).
    let once = info.iter().any(|i| {
        key_of(i) == "pmix.persist"
            && i.value.ty == PMIX_PERSIST
            && i.value.data[0] as u8 == PMIX_PERSIST_FIRST_READ
    });
    for i in info {
        let key = key_of(i);
        // Directives (range, persistence, the caller's uid) are not data.
        if key.starts_with("pmix.") {
            continue;
        }
        // SAFETY: the value is of the type its tag says.
        let Some(data) = (unsafe { data_of(&i.value) }) else {
            return PMIX_ERR_BAD_PARAM;
        };
        entries.push((key, Stored { data, once }.encode()));
    }
    if entries.is_empty() {
        return PMIX_ERR_BAD_PARAM;
    }
    hand_over(proc, NameOp::Publish(entries), Callback::Op(cb), cbdata)
}

pub(super) unsafe extern "C" fn on_lookup(
    proc: *const PmixProc,
    keys: *mut *mut c_char,
    info: *const PmixInfo,
    ninfo: usize,
    cb: Option<LookupCb>,
    cbdata: *mut c_void,
) -> c_int {
    let Some(cb) = cb else {
        return PMIX_ERR_BAD_PARAM;
    };
    // SAFETY: the library passes a NULL-terminated key array.
    let keys = match unsafe { argv(keys) } {
        Some(k) if !k.is_empty() => k,
        _ => return PMIX_ERR_BAD_PARAM,
    };
    // SAFETY: the library passes `ninfo` valid entries.
    let wait = wait_of(unsafe { infos(info, ninfo) });
    hand_over(
        proc,
        NameOp::Lookup { keys, wait },
        Callback::Lookup(cb),
        cbdata,
    )
}

pub(super) unsafe extern "C" fn on_unpublish(
    proc: *const PmixProc,
    keys: *mut *mut c_char,
    _info: *const PmixInfo,
    _ninfo: usize,
    cb: Option<OpCb>,
    cbdata: *mut c_void,
) -> c_int {
    let Some(cb) = cb else {
        return PMIX_ERR_BAD_PARAM;
    };
    // SAFETY: the library passes null or a NULL-terminated key array.
    let keys = unsafe { argv(keys) }.filter(|k| !k.is_empty());
    hand_over(proc, NameOp::Unpublish(keys), Callback::Op(cb), cbdata)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_and_timeout_are_read_from_the_directives() {
        let entry = |key: &CStr, ty: u16, v: u64| {
            let mut i = PmixInfo::flag(key, false);
            i.value.ty = ty;
            i.value.data[0] = v;
            i
        };
        assert_eq!(wait_of(&[]), None);
        assert_eq!(
            wait_of(&[entry(c"pmix.range", PMIX_INT, 2)]),
            None,
            "other directives do not ask to wait"
        );
        let w = wait_of(&[entry(c"pmix.wait", PMIX_INT, 1)]).unwrap();
        assert_eq!((w.count, w.until), (1, None));
        let w = wait_of(&[
            entry(c"pmix.wait", PMIX_BOOL, 1),
            entry(c"pmix.timeout", PMIX_INT32, 5),
        ])
        .unwrap();
        assert_eq!(w.count, 0);
        assert!(w.until.is_some_and(|t| t > Instant::now()));
        assert_eq!(wait_of(&[entry(c"pmix.wait", PMIX_BOOL, 0)]), None);
    }
}
