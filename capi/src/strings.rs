//! Strings and buffers from and to C, checked before use.

use std::ffi::{c_char, CStr};

use crate::errors::{invalid, Fail};

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that lives for `'a`.
pub(crate) unsafe fn arg<'a>(p: *const c_char, what: &str) -> Result<&'a str, Fail> {
    if p.is_null() {
        return Err(invalid(format!("{what} is null")));
    }
    // SAFETY: non-null and NUL-terminated by the contract.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| invalid(format!("{what} is not UTF-8")))
}

/// A NULL-terminated array of strings (`argv` style); null is empty.
///
/// # Safety
/// `p` is null or points to string pointers ending with a null one.
pub(crate) unsafe fn list<'a>(p: *const *const c_char, what: &str) -> Result<Vec<&'a str>, Fail> {
    let mut out = Vec::new();
    if p.is_null() {
        return Ok(out);
    }
    for i in 0.. {
        // SAFETY: the array ends with a null pointer, not yet reached.
        let s = unsafe { *p.add(i) };
        if s.is_null() {
            break;
        }
        // SAFETY: each entry is a NUL-terminated string by the contract.
        out.push(unsafe { arg(s, what) }?);
    }
    Ok(out)
}

/// Copy `s` and a NUL into `buf` of `len` bytes, or refuse if it does not fit.
///
/// # Safety
/// `buf` is null or valid for `len` bytes of writes.
pub(crate) unsafe fn put(s: &str, buf: *mut c_char, len: usize, what: &str) -> Result<(), Fail> {
    if buf.is_null() {
        return Err(invalid(format!("the buffer for {what} is null")));
    }
    if s.len() + 1 > len {
        return Err(invalid(format!(
            "the buffer for {what} holds {len} bytes, {} are needed",
            s.len() + 1
        )));
    }
    // SAFETY: `buf` has room for s.len() + 1 bytes (checked above) and
    // does not overlap `s`, which Rust owns.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        buf.add(s.len()).write(0);
    }
    Ok(())
}

/// A C buffer as a byte slice (length 0 may come with any pointer).
///
/// # Safety
/// Unless `len` is 0, `p` is valid for `len` bytes of reads for `'a`.
pub(crate) unsafe fn bytes<'a>(p: *const u8, len: usize) -> Result<&'a [u8], Fail> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(invalid("the buffer is null but its length is not 0"));
    }
    // SAFETY: non-null and valid for `len` bytes by the contract.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// A C buffer as a mutable byte slice.
///
/// # Safety
/// Unless `len` is 0, `p` is valid for `len` bytes of writes for `'a`, and
/// nothing else reads or writes it meanwhile.
pub(crate) unsafe fn bytes_mut<'a>(p: *mut u8, len: usize) -> Result<&'a mut [u8], Fail> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(invalid("the buffer is null but its length is not 0"));
    }
    // SAFETY: non-null, valid and exclusive for `len` bytes by the contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// A raw pointer for nonblocking calls: null only with length 0.
pub(crate) fn raw_ok(p: *const u8, len: usize) -> Result<(), Fail> {
    if p.is_null() && len != 0 {
        return Err(invalid("the buffer is null but its length is not 0"));
    }
    Ok(())
}
