//! `fi_endpoint.h`, `fi_cm.h`, `fi_tagged.h`, `fi_rma.h`: the endpoint and
//! the operations Rivet posts on it.

use libc::{c_int, c_void};

use super::errno::FI_ENOSYS;
use super::fabric::{fi_addr_t, fi_bind, fi_control, fi_info, fid, FI_ENABLE};
use super::{fid_domain, Unused};

#[repr(C)]
pub struct fi_ops_ep {
    pub size: usize,
    pub cancel: Option<unsafe extern "C" fn(fid: *mut fid, context: *mut c_void) -> isize>,
    pub getopt: Unused,
    pub setopt: Unused,
    pub tx_ctx: Unused,
    pub rx_ctx: Unused,
    pub rx_size_left: Unused,
    pub tx_size_left: Unused,
}

#[repr(C)]
pub struct fi_ops_cm {
    pub size: usize,
    pub setname: Unused,
    pub getname: Option<
        unsafe extern "C" fn(fid: *mut fid, addr: *mut c_void, addrlen: *mut usize) -> c_int,
    >,
    pub getpeer: Unused,
    pub connect: Unused,
    pub listen: Unused,
    pub accept: Unused,
    pub reject: Unused,
    pub shutdown: Unused,
    pub join: Unused,
}

#[repr(C)]
pub struct fi_ops_tagged {
    pub size: usize,
    #[allow(clippy::type_complexity)]
    pub recv: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *mut c_void,
            len: usize,
            desc: *mut c_void,
            src_addr: fi_addr_t,
            tag: u64,
            ignore: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    pub recvv: Unused,
    pub recvmsg: Unused,
    pub send: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: usize,
            desc: *mut c_void,
            dest_addr: fi_addr_t,
            tag: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    pub sendv: Unused,
    pub sendmsg: Unused,
    pub inject: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: usize,
            dest_addr: fi_addr_t,
            tag: u64,
        ) -> isize,
    >,
    pub senddata: Unused,
    pub injectdata: Unused,
}

#[repr(C)]
pub struct fi_ops_rma {
    pub size: usize,
    #[allow(clippy::type_complexity)]
    pub read: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *mut c_void,
            len: usize,
            desc: *mut c_void,
            src_addr: fi_addr_t,
            addr: u64,
            key: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    pub readv: Unused,
    pub readmsg: Unused,
    pub write: Unused,
    pub writev: Unused,
    pub writemsg: Unused,
    pub inject: Unused,
    pub writedata: Unused,
    pub injectdata: Unused,
}

#[repr(C)]
pub struct fid_ep {
    pub fid: fid,
    pub ops: *mut fi_ops_ep,
    pub cm: *mut fi_ops_cm,
    /// `struct fi_ops_msg *`: untagged messages are not used.
    pub msg: *mut c_void,
    pub rma: *mut fi_ops_rma,
    pub tagged: *mut fi_ops_tagged,
    /// `struct fi_ops_atomic *`.
    pub atomic: *mut c_void,
    /// `struct fi_ops_collective *`.
    pub collective: *mut c_void,
}

/// `fi_endpoint(domain, info, &ep, context)`.
///
/// # Safety
/// `domain` live, `info` valid, `ep` writable.
pub unsafe fn fi_endpoint(
    domain: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    match (*(*domain).ops).endpoint {
        Some(f) => f(domain, info, ep, context),
        None => -FI_ENOSYS,
    }
}

/// `fi_ep_bind(ep, bfid, flags)`.
///
/// # Safety
/// Both objects must be live.
pub unsafe fn fi_ep_bind(ep: *mut fid_ep, bfid: *mut fid, flags: u64) -> c_int {
    fi_bind(&mut (*ep).fid, bfid, flags)
}

/// `fi_enable(ep)`.
///
/// # Safety
/// `ep` must be live.
pub unsafe fn fi_enable(ep: *mut fid_ep) -> c_int {
    fi_control(&mut (*ep).fid, FI_ENABLE, std::ptr::null_mut())
}

/// `fi_cancel(&ep->fid, context)`: a posted operation with this context
/// completes with `FI_ECANCELED` if it had not started.
///
/// # Safety
/// `ep` must be live.
pub unsafe fn fi_cancel(ep: *mut fid_ep, context: *mut c_void) -> isize {
    match (*(*ep).ops).cancel {
        Some(f) => f(&mut (*ep).fid, context),
        None => -(FI_ENOSYS as isize),
    }
}

/// `fi_getname(&ep->fid, addr, &addrlen)`.
///
/// # Safety
/// `ep` must be live; `addr` writable for `*addrlen` bytes.
pub unsafe fn fi_getname(ep: *mut fid_ep, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    match (*(*ep).cm).getname {
        Some(f) => f(&mut (*ep).fid, addr, addrlen),
        None => -FI_ENOSYS,
    }
}

/// `fi_tsend(ep, buf, len, desc, dest_addr, tag, context)`.
///
/// # Safety
/// `buf..buf+len` and `context` must stay valid until the completion.
pub unsafe fn fi_tsend(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    dest_addr: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    match (*(*ep).tagged).send {
        Some(f) => f(ep, buf, len, desc, dest_addr, tag, context),
        None => -(FI_ENOSYS as isize),
    }
}

/// `fi_tinject(ep, buf, len, dest_addr, tag)`: the buffer may be reused at
/// once and no completion is generated.
///
/// # Safety
/// `buf..buf+len` readable.
pub unsafe fn fi_tinject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest_addr: fi_addr_t,
    tag: u64,
) -> isize {
    match (*(*ep).tagged).inject {
        Some(f) => f(ep, buf, len, dest_addr, tag),
        None => -(FI_ENOSYS as isize),
    }
}

/// `fi_trecv(ep, buf, len, desc, src_addr, tag, ignore, context)`.
///
/// # Safety
/// `buf..buf+len` must stay writable, and `context` valid, until the
/// completion.
#[allow(clippy::too_many_arguments)]
pub unsafe fn fi_trecv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    src_addr: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    match (*(*ep).tagged).recv {
        Some(f) => f(ep, buf, len, desc, src_addr, tag, ignore, context),
        None => -(FI_ENOSYS as isize),
    }
}

/// `fi_read(ep, buf, len, desc, src_addr, addr, key, context)`.
///
/// # Safety
/// `buf..buf+len` must stay writable, and `context` valid, until the
/// completion.
#[allow(clippy::too_many_arguments)]
pub unsafe fn fi_read(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    src_addr: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    if (*ep).rma.is_null() {
        return -(FI_ENOSYS as isize);
    }
    match (*(*ep).rma).read {
        Some(f) => f(ep, buf, len, desc, src_addr, addr, key, context),
        None => -(FI_ENOSYS as isize),
    }
}
