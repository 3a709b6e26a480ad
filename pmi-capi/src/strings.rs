//! C strings in and out, checked.

use std::ffi::{c_char, c_int, CStr};

use crate::{PMI_ERR_INVALID_LENGTH, PMI_SUCCESS};

/// A string argument from C as UTF-8 text; `err` if it is null or not UTF-8
/// (the PMI-1 wire carries text).
///
/// # Safety
/// `ptr` is null or points to a NUL-terminated string that stays valid and
/// unchanged for `'a`.
pub(crate) unsafe fn arg<'a>(ptr: *const c_char, err: c_int) -> Result<&'a str, c_int> {
    if ptr.is_null() {
        return Err(err);
    }
    // SAFETY: not null, and the caller guarantees a NUL-terminated string
    // that outlives 'a.
    let s = unsafe { CStr::from_ptr(ptr) };
    s.to_str().map_err(|_| err)
}

/// Copy `s` and a terminating NUL into the C buffer `buf` of `len` bytes.
/// `null` if `buf` is null, `PMI_ERR_INVALID_LENGTH` if it is too short
/// (nothing is written then).
///
/// # Safety
/// `buf` is null or valid for writing `len` bytes.
pub(crate) unsafe fn write_str(buf: *mut c_char, len: c_int, s: &str, null: c_int) -> c_int {
    if buf.is_null() {
        return null;
    }
    let Ok(len) = usize::try_from(len) else {
        return PMI_ERR_INVALID_LENGTH;
    };
    if s.len() >= len {
        return PMI_ERR_INVALID_LENGTH;
    }
    // SAFETY: `buf` is valid for `len` bytes and s.len() + 1 <= len; `s`
    // is a Rust string, which cannot overlap a buffer C handed in.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), buf, s.len());
        buf.add(s.len()).write(0);
    }
    PMI_SUCCESS
}

/// A C array of `len` elements as a slice; `None` if `ptr` is null while
/// `len` > 0 or `len` is negative. A zero-length array may be null.
///
/// # Safety
/// `ptr` is null or valid for reading `len` elements for `'a`.
pub(crate) unsafe fn array<'a, T>(ptr: *const T, len: c_int) -> Option<&'a [T]> {
    let len = usize::try_from(len).ok()?;
    if len == 0 {
        return Some(&[]);
    }
    if ptr.is_null() {
        return None;
    }
    // SAFETY: not null, and the caller guarantees `len` readable elements.
    Some(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Write `values` to the C array `out` of `len` elements: `null` if `out`
/// is null (and there is something to write), `PMI_ERR_INVALID_LENGTH` if
/// it is too short.
///
/// # Safety
/// `out` is null or valid for writing `len` elements.
pub(crate) unsafe fn write_array(
    out: *mut c_int,
    len: c_int,
    values: &[c_int],
    null: c_int,
) -> c_int {
    if usize::try_from(len).map_or(true, |l| l < values.len()) {
        return PMI_ERR_INVALID_LENGTH;
    }
    if values.is_empty() {
        return PMI_SUCCESS;
    }
    if out.is_null() {
        return null;
    }
    // SAFETY: `out` holds at least values.len() elements (checked above).
    unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), out, values.len()) };
    PMI_SUCCESS
}
