//! `fi_errno.h`: libfabric returns negated errno values, plus its own
//! codes from 256 up.

pub const FI_SUCCESS: i32 = 0;
pub const FI_ENOENT: i32 = libc::ENOENT;
pub const FI_EIO: i32 = libc::EIO;
pub const FI_EAGAIN: i32 = libc::EAGAIN;
pub const FI_ENOMEM: i32 = libc::ENOMEM;
pub const FI_EINVAL: i32 = libc::EINVAL;
pub const FI_ENOSYS: i32 = libc::ENOSYS;
pub const FI_ENODATA: i32 = libc::ENODATA;
pub const FI_EOPNOTSUPP: i32 = libc::EOPNOTSUPP;
pub const FI_ECONNREFUSED: i32 = libc::ECONNREFUSED;
pub const FI_ECONNRESET: i32 = libc::ECONNRESET;
pub const FI_ENOTCONN: i32 = libc::ENOTCONN;
pub const FI_ECANCELED: i32 = libc::ECANCELED;

/// Unspecified error.
pub const FI_EOTHER: i32 = 256;
/// An error entry is waiting in the queue: read it with `fi_cq_readerr`.
pub const FI_EAVAIL: i32 = 259;
/// A message was longer than the receive buffer posted for it.
pub const FI_ETRUNC: i32 = 265;
/// Receiver not ready.
pub const FI_ENORX: i32 = 269;

/// A static description of `errnum` (positive).
///
/// # Safety
/// Plain FFI; `load()` must have succeeded.
pub unsafe fn fi_strerror(errnum: libc::c_int) -> *const libc::c_char {
    (super::library::api().fi_strerror)(errnum)
}
