//! `fi_eq.h`: completion queues (event queues and counters are not used).

use libc::{c_char, c_int, c_void};

use super::errno::FI_ENOSYS;
use super::fabric::{fi_addr_t, fid};
use super::Unused;

// enum fi_cq_format
pub const FI_CQ_FORMAT_TAGGED: u32 = 4;
// enum fi_wait_obj
pub const FI_WAIT_NONE: u32 = 0;

#[repr(C)]
pub struct fi_cq_attr {
    pub size: usize,
    pub flags: u64,
    /// `enum fi_cq_format`.
    pub format: u32,
    /// `enum fi_wait_obj`.
    pub wait_obj: u32,
    pub signaling_vector: c_int,
    /// `enum fi_cq_wait_cond`.
    pub wait_cond: u32,
    /// `struct fid_wait *`.
    pub wait_set: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_cq_tagged_entry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
}

#[repr(C)]
pub struct fi_cq_err_entry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
    pub olen: usize,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: usize,
}

#[repr(C)]
pub struct fi_ops_cq {
    pub size: usize,
    pub read:
        Option<unsafe extern "C" fn(cq: *mut fid_cq, buf: *mut c_void, count: usize) -> isize>,
    pub readfrom: Option<
        unsafe extern "C" fn(
            cq: *mut fid_cq,
            buf: *mut c_void,
            count: usize,
            src_addr: *mut fi_addr_t,
        ) -> isize,
    >,
    pub readerr: Option<
        unsafe extern "C" fn(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, flags: u64) -> isize,
    >,
    pub sread: Unused,
    pub sreadfrom: Unused,
    pub signal: Unused,
    pub strerror: Option<
        unsafe extern "C" fn(
            cq: *mut fid_cq,
            prov_errno: c_int,
            err_data: *const c_void,
            buf: *mut c_char,
            len: usize,
        ) -> *const c_char,
    >,
}

#[repr(C)]
pub struct fid_cq {
    pub fid: fid,
    pub ops: *mut fi_ops_cq,
}

/// `fi_cq_read(cq, buf, count)`: entries read, `-FI_EAGAIN` if none,
/// `-FI_EAVAIL` if an error entry waits.
///
/// # Safety
/// `buf` must have room for `count` entries of the queue's format.
pub unsafe fn fi_cq_read(cq: *mut fid_cq, buf: *mut c_void, count: usize) -> isize {
    match (*(*cq).ops).read {
        Some(f) => f(cq, buf, count),
        None => -(FI_ENOSYS as isize),
    }
}

/// `fi_cq_readerr(cq, buf, flags)`.
///
/// # Safety
/// `buf` must be writable; its `err_data` stays valid until the next read.
pub unsafe fn fi_cq_readerr(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, flags: u64) -> isize {
    match (*(*cq).ops).readerr {
        Some(f) => f(cq, buf, flags),
        None => -(FI_ENOSYS as isize),
    }
}

/// `fi_cq_strerror(cq, prov_errno, err_data, buf, len)`.
///
/// # Safety
/// `err_data` from the error entry just read; `buf` writable for `len`.
pub unsafe fn fi_cq_strerror(
    cq: *mut fid_cq,
    prov_errno: c_int,
    err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    match (*(*cq).ops).strerror {
        Some(f) => f(cq, prov_errno, err_data, buf, len),
        None => std::ptr::null(),
    }
}
