//! `fi_domain.h`: the domain, its address vector and memory regions.

use libc::{c_char, c_int, c_void};

use super::errno::FI_ENOSYS;
use super::fabric::{fi_addr_t, fi_control, fi_info, fid, FI_ENABLE};
use super::{fi_cq_attr, fid_cq, fid_ep, Unused};

#[repr(C)]
pub struct fi_av_attr {
    /// `enum fi_av_type`.
    pub type_: u32,
    pub rx_ctx_bits: c_int,
    pub count: usize,
    pub ep_per_node: usize,
    pub name: *const c_char,
    pub map_addr: *mut c_void,
    pub flags: u64,
}

#[repr(C)]
pub struct fi_ops_av {
    pub size: usize,
    pub insert: Option<
        unsafe extern "C" fn(
            av: *mut fid_av,
            addr: *const c_void,
            count: usize,
            fi_addr: *mut fi_addr_t,
            flags: u64,
            context: *mut c_void,
        ) -> c_int,
    >,
    pub insertsvc: Unused,
    pub insertsym: Unused,
    pub remove: Option<
        unsafe extern "C" fn(
            av: *mut fid_av,
            fi_addr: *mut fi_addr_t,
            count: usize,
            flags: u64,
        ) -> c_int,
    >,
    pub lookup: Unused,
    pub straddr: Unused,
    pub av_set: Unused,
}

#[repr(C)]
pub struct fid_av {
    pub fid: fid,
    pub ops: *mut fi_ops_av,
}

#[repr(C)]
pub struct fid_mr {
    pub fid: fid,
    pub mem_desc: *mut c_void,
    pub key: u64,
}

#[repr(C)]
pub struct fi_ops_domain {
    pub size: usize,
    pub av_open: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            attr: *mut fi_av_attr,
            av: *mut *mut fid_av,
            context: *mut c_void,
        ) -> c_int,
    >,
    pub cq_open: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            attr: *mut fi_cq_attr,
            cq: *mut *mut fid_cq,
            context: *mut c_void,
        ) -> c_int,
    >,
    pub endpoint: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            info: *mut fi_info,
            ep: *mut *mut fid_ep,
            context: *mut c_void,
        ) -> c_int,
    >,
    pub scalable_ep: Unused,
    pub cntr_open: Unused,
    pub poll_open: Unused,
    pub stx_ctx: Unused,
    pub srx_ctx: Unused,
    pub query_atomic: Unused,
    pub query_collective: Unused,
    pub endpoint2: Unused,
}

#[repr(C)]
pub struct fi_ops_mr {
    pub size: usize,
    #[allow(clippy::type_complexity)]
    pub reg: Option<
        unsafe extern "C" fn(
            fid: *mut fid,
            buf: *const c_void,
            len: usize,
            access: u64,
            offset: u64,
            requested_key: u64,
            flags: u64,
            mr: *mut *mut fid_mr,
            context: *mut c_void,
        ) -> c_int,
    >,
    pub regv: Unused,
    pub regattr: Unused,
}

#[repr(C)]
pub struct fid_domain {
    pub fid: fid,
    pub ops: *mut fi_ops_domain,
    pub mr: *mut fi_ops_mr,
}

/// `fi_av_open(domain, attr, &av, context)`.
///
/// # Safety
/// `domain` live, `attr` valid, `av` writable.
pub unsafe fn fi_av_open(
    domain: *mut fid_domain,
    attr: *mut fi_av_attr,
    av: *mut *mut fid_av,
    context: *mut c_void,
) -> c_int {
    match (*(*domain).ops).av_open {
        Some(f) => f(domain, attr, av, context),
        None => -FI_ENOSYS,
    }
}

/// `fi_cq_open(domain, attr, &cq, context)`.
///
/// # Safety
/// `domain` live, `attr` valid, `cq` writable.
pub unsafe fn fi_cq_open(
    domain: *mut fid_domain,
    attr: *mut fi_cq_attr,
    cq: *mut *mut fid_cq,
    context: *mut c_void,
) -> c_int {
    match (*(*domain).ops).cq_open {
        Some(f) => f(domain, attr, cq, context),
        None => -FI_ENOSYS,
    }
}

/// `fi_av_insert(av, addr, count, fi_addr, flags, context)`: the number of
/// addresses inserted, or a negative error.
///
/// # Safety
/// `addr` must hold `count` addresses in the domain's address format;
/// `fi_addr` room for `count` results.
pub unsafe fn fi_av_insert(
    av: *mut fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    match (*(*av).ops).insert {
        Some(f) => f(av, addr, count, fi_addr, flags, context),
        None => -FI_ENOSYS,
    }
}

/// `fi_av_remove(av, fi_addr, count, flags)`.
///
/// # Safety
/// `fi_addr` must hold `count` addresses of `av`.
pub unsafe fn fi_av_remove(
    av: *mut fid_av,
    fi_addr: *mut fi_addr_t,
    count: usize,
    flags: u64,
) -> c_int {
    match (*(*av).ops).remove {
        Some(f) => f(av, fi_addr, count, flags),
        None => -FI_ENOSYS,
    }
}

/// `fi_mr_reg(domain, buf, len, access, offset, requested_key, flags, &mr, context)`.
///
/// # Safety
/// `domain` live, `mr` writable; `buf..buf+len` must stay valid while
/// the region is registered and used.
#[allow(clippy::too_many_arguments)]
pub unsafe fn fi_mr_reg(
    domain: *mut fid_domain,
    buf: *const c_void,
    len: usize,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    match (*(*domain).mr).reg {
        Some(f) => f(
            &mut (*domain).fid,
            buf,
            len,
            access,
            offset,
            requested_key,
            flags,
            mr,
            context,
        ),
        None => -FI_ENOSYS,
    }
}

/// `fi_mr_key(mr)`.
///
/// # Safety
/// `mr` must be a live memory region.
pub unsafe fn fi_mr_key(mr: *const fid_mr) -> u64 {
    (*mr).key
}

/// `fi_mr_desc(mr)`: the local descriptor for data transfer calls.
///
/// # Safety
/// `mr` must be a live memory region.
pub unsafe fn fi_mr_desc(mr: *const fid_mr) -> *mut c_void {
    (*mr).mem_desc
}

/// `fi_mr_enable(mr)` (after `fi_mr_bind` under `FI_MR_ENDPOINT`).
///
/// # Safety
/// `mr` must be a live memory region.
pub unsafe fn fi_mr_enable(mr: *mut fid_mr) -> c_int {
    fi_control(&mut (*mr).fid, FI_ENABLE, std::ptr::null_mut())
}
