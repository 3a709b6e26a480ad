//! Binding the calling process to CPUs.

use std::io;

use super::cpuset::CpuSet;

/// Binds the calling thread to `set`; in a child right after `fork` (one thread) that is the
/// whole process, and threads it creates later inherit the mask.
///
/// Async-signal-safe: one `sched_setaffinity` system call, no allocation, no lock, so it may
/// be called in a `pre_exec` hook between `fork` and `exec`. Build `set` in the parent with
/// [`CpuSet::to_libc`]. The mask is inherited across `exec`.
pub fn bind_self(set: &libc::cpu_set_t) -> io::Result<()> {
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 means the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
    if rc == 0 {
        Ok(())
    } else {
        // io::Error from a raw OS error does not allocate.
        Err(io::Error::last_os_error())
    }
}

/// The CPUs the calling thread may run on (`sched_getaffinity`).
pub fn current_affinity() -> io::Result<CpuSet> {
    // SAFETY: all-zero is a valid (empty) cpu_set_t.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc == 0 {
        Ok(CpuSet::from_libc(&set))
    } else {
        Err(io::Error::last_os_error())
    }
}
