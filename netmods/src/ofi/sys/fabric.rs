//! `fabric.h`: `fi_info` and its attribute structs, the `fid` every object
//! starts with, the fabric object, capability and mode bits.

use libc::{c_char, c_int, c_void};

use super::errno::FI_ENOSYS;
use super::library::api;
use super::{fid_domain, Unused};

pub type fi_addr_t = u64;

/// `FI_VERSION(major, minor)`.
pub const fn fi_version_of(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// The API version Rivet is written against and asks for in `fi_getinfo`.
pub const FI_VERSION_1_17: u32 = fi_version_of(1, 17);

// Capabilities (fi_info.caps) and operation flags.
pub const FI_MSG: u64 = 1 << 1;
pub const FI_RMA: u64 = 1 << 2;
pub const FI_TAGGED: u64 = 1 << 3;
pub const FI_ATOMIC: u64 = 1 << 4;
pub const FI_READ: u64 = 1 << 8;
pub const FI_WRITE: u64 = 1 << 9;
pub const FI_RECV: u64 = 1 << 10;
pub const FI_SEND: u64 = 1 << 11;
pub const FI_TRANSMIT: u64 = FI_SEND;
pub const FI_REMOTE_READ: u64 = 1 << 12;
pub const FI_REMOTE_WRITE: u64 = 1 << 13;
pub const FI_MULTI_RECV: u64 = 1 << 16;
pub const FI_REMOTE_CQ_DATA: u64 = 1 << 17;
pub const FI_COMPLETION: u64 = 1 << 24;
pub const FI_INJECT: u64 = 1 << 25;
pub const FI_HMEM: u64 = 1 << 47;
pub const FI_LOCAL_COMM: u64 = 1 << 51;
pub const FI_REMOTE_COMM: u64 = 1 << 52;
pub const FI_SOURCE: u64 = 1 << 57;
pub const FI_DIRECTED_RECV: u64 = 1 << 59;

// Mode bits (fi_info.mode): what the application agrees to do.
pub const FI_CONTEXT: u64 = 1 << 59;
pub const FI_MSG_PREFIX: u64 = 1 << 58;
pub const FI_ASYNC_IOV: u64 = 1 << 57;
pub const FI_RX_CQ_DATA: u64 = 1 << 56;
pub const FI_LOCAL_MR: u64 = 1 << 55;
pub const FI_CONTEXT2: u64 = 1 << 52;

// Message ordering (tx/rx_attr.msg_order).
pub const FI_ORDER_SAS: u64 = 1 << 8;

// Memory registration modes (domain_attr.mr_mode).
pub const FI_MR_BASIC: c_int = 1;
pub const FI_MR_SCALABLE: c_int = 2;
pub const FI_MR_LOCAL: c_int = 1 << 2;
pub const FI_MR_RAW: c_int = 1 << 3;
pub const FI_MR_VIRT_ADDR: c_int = 1 << 4;
pub const FI_MR_ALLOCATED: c_int = 1 << 5;
pub const FI_MR_PROV_KEY: c_int = 1 << 6;
pub const FI_MR_MMU_NOTIFY: c_int = 1 << 7;
pub const FI_MR_RMA_EVENT: c_int = 1 << 8;
pub const FI_MR_ENDPOINT: c_int = 1 << 9;
pub const FI_MR_HMEM: c_int = 1 << 10;

// enum fi_ep_type
pub const FI_EP_RDM: u32 = 3;
// enum fi_av_type
pub const FI_AV_UNSPEC: u32 = 0;
pub const FI_AV_MAP: u32 = 1;
pub const FI_AV_TABLE: u32 = 2;
// enum fi_progress
pub const FI_PROGRESS_AUTO: u32 = 1;
pub const FI_PROGRESS_MANUAL: u32 = 2;
// enum fi_threading
pub const FI_THREAD_DOMAIN: u32 = 3;
// enum fi_resource_mgmt
pub const FI_RM_ENABLED: u32 = 2;
// Address formats (fi_info.addr_format)
pub const FI_FORMAT_UNSPEC: u32 = 0;
pub const FI_SOCKADDR: u32 = 1;
pub const FI_SOCKADDR_IN: u32 = 2;
pub const FI_SOCKADDR_IN6: u32 = 3;
pub const FI_ADDR_STR: u32 = 9;

pub const FI_ADDR_UNSPEC: fi_addr_t = u64::MAX;
pub const FI_ADDR_NOTAVAIL: fi_addr_t = u64::MAX;

// fi_control commands
pub const FI_ENABLE: c_int = 6;

// enum fi_type (for fi_tostr)
pub const FI_TYPE_INFO: u32 = 0;
pub const FI_TYPE_CAPS: u32 = 2;
pub const FI_TYPE_MODE: u32 = 14;
pub const FI_TYPE_MR_MODE: u32 = 21;
pub const FI_TYPE_PROTOCOL: u32 = 12;

#[repr(C)]
pub struct fi_tx_attr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub inject_size: usize,
    pub size: usize,
    pub iov_limit: usize,
    pub rma_iov_limit: usize,
    pub tclass: u32,
}

#[repr(C)]
pub struct fi_rx_attr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub total_buffered_recv: usize,
    pub size: usize,
    pub iov_limit: usize,
}

#[repr(C)]
pub struct fi_ep_attr {
    /// `enum fi_ep_type`.
    pub type_: u32,
    pub protocol: u32,
    pub protocol_version: u32,
    pub max_msg_size: usize,
    pub msg_prefix_size: usize,
    pub max_order_raw_size: usize,
    pub max_order_war_size: usize,
    pub max_order_waw_size: usize,
    pub mem_tag_format: u64,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub auth_key_size: usize,
    pub auth_key: *mut u8,
}

#[repr(C)]
pub struct fi_domain_attr {
    pub domain: *mut fid_domain,
    pub name: *mut c_char,
    pub threading: u32,
    pub control_progress: u32,
    pub data_progress: u32,
    pub resource_mgmt: u32,
    pub av_type: u32,
    pub mr_mode: c_int,
    pub mr_key_size: usize,
    pub cq_data_size: usize,
    pub cq_cnt: usize,
    pub ep_cnt: usize,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub max_ep_tx_ctx: usize,
    pub max_ep_rx_ctx: usize,
    pub max_ep_stx_ctx: usize,
    pub max_ep_srx_ctx: usize,
    pub cntr_cnt: usize,
    pub mr_iov_limit: usize,
    pub caps: u64,
    pub mode: u64,
    pub auth_key: *mut u8,
    pub auth_key_size: usize,
    pub max_err_data: usize,
    pub mr_cnt: usize,
    pub tclass: u32,
}

#[repr(C)]
pub struct fi_fabric_attr {
    pub fabric: *mut fid_fabric,
    pub name: *mut c_char,
    pub prov_name: *mut c_char,
    pub prov_version: u32,
    pub api_version: u32,
}

#[repr(C)]
pub struct fi_info {
    pub next: *mut fi_info,
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src_addrlen: usize,
    pub dest_addrlen: usize,
    pub src_addr: *mut c_void,
    pub dest_addr: *mut c_void,
    pub handle: *mut fid,
    pub tx_attr: *mut fi_tx_attr,
    pub rx_attr: *mut fi_rx_attr,
    pub ep_attr: *mut fi_ep_attr,
    pub domain_attr: *mut fi_domain_attr,
    pub fabric_attr: *mut fi_fabric_attr,
    /// `struct fid_nic *`, never looked at.
    pub nic: *mut c_void,
}

#[repr(C)]
pub struct fi_ops {
    pub size: usize,
    pub close: Option<unsafe extern "C" fn(fid: *mut fid) -> c_int>,
    pub bind: Option<unsafe extern "C" fn(fid: *mut fid, bfid: *mut fid, flags: u64) -> c_int>,
    pub control:
        Option<unsafe extern "C" fn(fid: *mut fid, command: c_int, arg: *mut c_void) -> c_int>,
    pub ops_open: Unused,
    pub tostr: Unused,
    pub ops_set: Unused,
}

/// The head of every libfabric object.
#[repr(C)]
pub struct fid {
    pub fclass: usize,
    pub context: *mut c_void,
    pub ops: *mut fi_ops,
}

#[repr(C)]
pub struct fi_ops_fabric {
    pub size: usize,
    pub domain: Option<
        unsafe extern "C" fn(
            fabric: *mut fid_fabric,
            info: *mut fi_info,
            dom: *mut *mut fid_domain,
            context: *mut c_void,
        ) -> c_int,
    >,
    pub passive_ep: Unused,
    pub eq_open: Unused,
    pub wait_open: Unused,
    pub trywait: Unused,
    pub domain2: Unused,
}

#[repr(C)]
pub struct fid_fabric {
    pub fid: fid,
    pub ops: *mut fi_ops_fabric,
    pub api_version: u32,
}

/// Scratch space a provider may claim in every operation's context
/// (modes `FI_CONTEXT`, `FI_CONTEXT2`).
#[repr(C)]
pub struct fi_context2 {
    pub internal: [*mut c_void; 8],
}

// The exported functions, reached through the library `load`ed at run
// time (see `library.rs`).

/// # Safety
/// Plain FFI; `load()` must have succeeded.
pub unsafe fn fi_version() -> u32 {
    (api().fi_version)()
}

/// # Safety
/// As the C function: valid `hints` (or null); `info` receives a list to
/// free with `fi_freeinfo`.
pub unsafe fn fi_getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi_info,
    info: *mut *mut fi_info,
) -> c_int {
    (api().fi_getinfo)(version, node, service, flags, hints, info)
}

/// # Safety
/// `info` must come from libfabric and not be used afterwards.
pub unsafe fn fi_freeinfo(info: *mut fi_info) {
    (api().fi_freeinfo)(info)
}

/// # Safety
/// `info` must be null or a valid `fi_info`.
pub unsafe fn fi_dupinfo(info: *const fi_info) -> *mut fi_info {
    (api().fi_dupinfo)(info)
}

/// # Safety
/// `attr` must be a fabric attribute from `fi_getinfo`.
pub unsafe fn fi_fabric(
    attr: *mut fi_fabric_attr,
    fabric: *mut *mut fid_fabric,
    context: *mut c_void,
) -> c_int {
    (api().fi_fabric)(attr, fabric, context)
}

/// `fi_tostr` into the caller's buffer (`fi_tostr`'s own is static).
///
/// # Safety
/// `data` must point at a value of the type `datatype` names; `buf` holds `len` bytes.
pub unsafe fn fi_tostr_r(
    buf: *mut c_char,
    len: usize,
    data: *const c_void,
    datatype: u32,
) -> *mut c_char {
    (api().fi_tostr_r)(buf, len, data, datatype)
}

/// `fi_allocinfo()`: an empty `fi_info` with every attribute struct allocated.
///
/// # Safety
/// Plain FFI; free the result with `fi_freeinfo`.
pub unsafe fn fi_allocinfo() -> *mut fi_info {
    fi_dupinfo(std::ptr::null())
}

/// `fi_close(fid)`.
///
/// # Safety
/// `f` must be a live libfabric object; it is invalid afterwards.
pub unsafe fn fi_close(f: *mut fid) -> c_int {
    match (*(*f).ops).close {
        Some(close) => close(f),
        None => -FI_ENOSYS,
    }
}

/// `fi_domain(fabric, info, &domain, context)`.
///
/// # Safety
/// `fabric` and `info` must be valid; `domain` writable.
pub unsafe fn fi_domain(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    domain: *mut *mut fid_domain,
    context: *mut c_void,
) -> c_int {
    match (*(*fabric).ops).domain {
        Some(f) => f(fabric, info, domain, context),
        None => -FI_ENOSYS,
    }
}

/// `fi_control(fid, command, arg)`.
///
/// # Safety
/// `f` must be a live object and `arg` what `command` expects.
pub unsafe fn fi_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    match (*(*f).ops).control {
        Some(control) => control(f, command, arg),
        None => -FI_ENOSYS,
    }
}

/// `fid->ops->bind(fid, bfid, flags)`: `fi_ep_bind`, `fi_mr_bind`.
///
/// # Safety
/// Both objects must be live.
pub unsafe fn fi_bind(f: *mut fid, bfid: *mut fid, flags: u64) -> c_int {
    match (*(*f).ops).bind {
        Some(bind) => bind(f, bfid, flags),
        None => -FI_ENOSYS,
    }
}
