//! The job's key-value space: its name, limits, put, commit, get.

use std::ffi::{c_char, c_int};

use crate::strings::{arg, write_str};
use crate::{
    put_out, rc, to_int, with_up, PMI_ERR_INVALID_ARG, PMI_ERR_INVALID_KEY, PMI_ERR_INVALID_KVS,
    PMI_ERR_INVALID_VAL,
};

/// # Safety
/// `kvsname` is null or valid for writing `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Get_my_name(kvsname: *mut c_char, length: c_int) -> c_int {
    // SAFETY: null or `length` writable bytes, as the caller guarantees.
    with_up(|up| unsafe { write_str(kvsname, length, up.client.kvs_name(), PMI_ERR_INVALID_ARG) })
}

/// # Safety
/// `length` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Get_name_length_max(length: *mut c_int) -> c_int {
    // SAFETY: null or writable, as the caller guarantees.
    with_up(|up| unsafe { put_out(length, to_int(up.client.limits().kvsname_max)) })
}

/// # Safety
/// `length` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Get_key_length_max(length: *mut c_int) -> c_int {
    // SAFETY: null or writable, as the caller guarantees.
    with_up(|up| unsafe { put_out(length, to_int(up.client.limits().keylen_max)) })
}

/// # Safety
/// `length` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Get_value_length_max(length: *mut c_int) -> c_int {
    // SAFETY: null or writable, as the caller guarantees.
    with_up(|up| unsafe { put_out(length, to_int(up.client.limits().vallen_max)) })
}

/// Put into this process group's own KVS (the only one writable).
///
/// # Safety
/// Each argument is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Put(
    kvsname: *const c_char,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    with_up(|up| {
        // SAFETY: null or NUL-terminated strings, as the caller guarantees.
        let args = unsafe {
            (
                arg(kvsname, PMI_ERR_INVALID_KVS),
                arg(key, PMI_ERR_INVALID_KEY),
                arg(value, PMI_ERR_INVALID_VAL),
            )
        };
        let (kvs, key, value) = match args {
            (Ok(n), Ok(k), Ok(v)) => (n, k, v),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return e,
        };
        if key.is_empty() {
            return PMI_ERR_INVALID_KEY;
        }
        if kvs != up.client.kvs_name() {
            return PMI_ERR_INVALID_KVS;
        }
        rc(up.client.put(key, value))
    })
}

/// Puts go out at once on the PMI-1 wire; this checks the name only.
///
/// # Safety
/// `kvsname` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Commit(kvsname: *const c_char) -> c_int {
    with_up(|up| {
        // SAFETY: null or a NUL-terminated string, as the caller guarantees.
        match unsafe { arg(kvsname, PMI_ERR_INVALID_ARG) } {
            Ok(_) => rc(up.client.commit()),
            Err(e) => e,
        }
    })
}

/// # Safety
/// `kvsname` and `key` are null or NUL-terminated strings; `value` is null
/// or valid for writing `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Get(
    kvsname: *const c_char,
    key: *const c_char,
    value: *mut c_char,
    length: c_int,
) -> c_int {
    with_up(|up| {
        // SAFETY: null or NUL-terminated strings, as the caller guarantees.
        let args = unsafe {
            (
                arg(kvsname, PMI_ERR_INVALID_KVS),
                arg(key, PMI_ERR_INVALID_KEY),
            )
        };
        let (kvs, key) = match args {
            (Ok(n), Ok(k)) => (n, k),
            (Err(e), _) | (_, Err(e)) => return e,
        };
        if key.is_empty() {
            return PMI_ERR_INVALID_KEY;
        }
        if value.is_null() {
            return PMI_ERR_INVALID_VAL;
        }
        match up.client.get_from(kvs, key) {
            // SAFETY: `value` is not null and holds `length` bytes (the
            // caller's contract); write_str checks the length.
            Ok(v) => unsafe { write_str(value, length, &v, PMI_ERR_INVALID_VAL) },
            Err(e) => crate::code(&e),
        }
    })
}
