//! Single-copy reads from another process's memory (`process_vm_readv`, "CMA").
//!
//! The kernel allows a process to read another's memory only if it may
//! ptrace it. That fails (and the engine must use the copy path through shm
//! cells instead) when:
//! - Yama `kernel.yama.ptrace_scope` is 1 (only descendants, or a process
//!   that called `prctl(PR_SET_PTRACER, ...)`), 2 (only with
//!   `CAP_SYS_PTRACE`) or 3 (never);
//! - a seccomp filter blocks the syscall (Docker's default profile does unless
//!   the container has `CAP_SYS_PTRACE`), giving `EPERM` or `ENOSYS`;
//! - the processes run as different users, or the target is not dumpable.
//!
//! So detect, don't assume: each rank publishes the address and value of its
//! [`probe_word`] in the node segment, and a peer checks with [`probe_peer`]
//! that it can really read it (`ShmNode::cma_probe`).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes per iovec entry: well below the kernel's per-call cap (`MAX_RW_COUNT`,
/// about 2 GiB), which it applies by returning a short count.
const CHUNK: usize = 1 << 30;
/// iovec entries per call.
const IOVS: usize = 16;

static PROBE: AtomicU64 = AtomicU64::new(0);
const PROBE_MAGIC: u64 = 0x5249_5645_5443_4d41; // "RIVETCMA"

/// Read `dst.len()` bytes at `remote_addr` in process `pid` into `dst`.
/// Retries on `EINTR`, continues after short reads, splits huge reads.
pub fn read(pid: u32, remote_addr: u64, dst: &mut [u8]) -> io::Result<()> {
    // SAFETY: `dst` is a live buffer we borrow mutably for the call.
    unsafe {
        transfer(
            pid,
            remote_addr,
            dst.as_mut_ptr(),
            dst.len(),
            Direction::Read,
        )
    }
}

/// Write `src` to `remote_addr` in process `pid` (`process_vm_writev`),
/// as [`read`] the other way: the other half of a copy both sides share.
pub fn write(pid: u32, remote_addr: u64, src: &[u8]) -> io::Result<()> {
    // SAFETY: `src` is a live buffer we borrow for the call; the kernel
    // only reads it for a write.
    unsafe {
        transfer(
            pid,
            remote_addr,
            src.as_ptr().cast_mut(),
            src.len(),
            Direction::Write,
        )
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Read,
    Write,
}

/// # Safety
/// `local..local+len` is valid for writes (`Read`) or reads (`Write`) for
/// the call.
unsafe fn transfer(
    pid: u32,
    remote_addr: u64,
    local_base: *mut u8,
    total: usize,
    dir: Direction,
) -> io::Result<()> {
    if remote_addr.checked_add(total as u64).is_none() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "remote address range overflows",
        ));
    }
    let mut done = 0;
    while done < total {
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let mut local = [empty; IOVS];
        let mut remote = [empty; IOVS];
        let mut cnt = 0;
        let mut off = done;
        while cnt < IOVS && off < total {
            let len = CHUNK.min(total - off);
            local[cnt] = libc::iovec {
                iov_base: local_base.wrapping_add(off).cast(),
                iov_len: len,
            };
            remote[cnt] = libc::iovec {
                iov_base: (remote_addr + off as u64) as usize as *mut libc::c_void,
                iov_len: len,
            };
            off += len;
            cnt += 1;
        }
        let call = match dir {
            Direction::Read => libc::process_vm_readv,
            Direction::Write => libc::process_vm_writev,
        };
        // SAFETY: the local iovecs cover disjoint parts of the caller's
        // buffer, valid for this direction (function contract); the kernel
        // validates the remote ones.
        let r = unsafe {
            call(
                pid as libc::pid_t,
                local.as_ptr(),
                cnt as libc::c_ulong,
                remote.as_ptr(),
                cnt as libc::c_ulong,
                0,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "process_vm_readv/writev moved nothing: the remote range is not mapped",
            ));
        }
        done += r as usize;
    }
    Ok(())
}

/// This process's probe word: its address and the bytes it holds.
pub fn probe_word() -> (u64, [u8; 8]) {
    let v = PROBE_MAGIC ^ u64::from(std::process::id());
    PROBE.store(v, Ordering::Relaxed);
    (PROBE.as_ptr() as u64, v.to_ne_bytes())
}

/// Whether a single-copy read of `expected.len()` bytes at `addr` in `pid`
/// works and returns `expected`.
pub fn probe_peer(pid: u32, addr: u64, expected: &[u8]) -> bool {
    if pid == 0 || addr == 0 {
        return false;
    }
    let mut buf = [0u8; 64];
    let Some(buf) = buf.get_mut(..expected.len()) else {
        return false;
    };
    read(pid, addr, buf).is_ok() && buf == expected
}

/// Yama's `kernel.yama.ptrace_scope`, if the kernel has Yama.
pub fn ptrace_scope() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether the syscall works at all here (reading this process's own probe
/// word). Necessary, not sufficient: reading a peer may still be refused
/// (ptrace_scope 1/2); use `ShmNode::cma_probe` for that. The error says why.
pub fn probe() -> Result<(), String> {
    let (addr, value) = probe_word();
    let mut buf = [0u8; 8];
    match read(std::process::id(), addr, &mut buf) {
        Ok(()) if buf == value => Ok(()),
        Ok(()) => Err("process_vm_readv returned wrong bytes reading this process".into()),
        Err(e) => {
            let why = match e.raw_os_error() {
                Some(libc::ENOSYS) | Some(libc::EPERM) => {
                    "the syscall is blocked (seccomp, e.g. a container without \
                     CAP_SYS_PTRACE) or not permitted"
                }
                _ => "unexpected error",
            };
            let scope = match ptrace_scope() {
                Some(s) => format!("; kernel.yama.ptrace_scope={s}"),
                None => String::new(),
            };
            Err(format!(
                "process_vm_readv does not work: {e}: {why}{scope}; large messages \
                 use the copy path"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_own_memory_in_chunks() {
        if let Err(e) = probe() {
            eprintln!("skipping: {e}");
            return;
        }
        let src: Vec<u8> = (0..3 * 1024 * 1024 + 7)
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        let mut dst = vec![0u8; src.len()];
        read(std::process::id(), src.as_ptr() as u64, &mut dst).unwrap();
        assert_eq!(src, dst);
        let (addr, v) = probe_word();
        assert!(probe_peer(std::process::id(), addr, &v));
        assert!(!probe_peer(std::process::id(), addr, &[0; 8]));
        assert!(!probe_peer(0, addr, &v));
        // Unmapped remote range: an error, not a hang.
        let mut b = [0u8; 16];
        assert!(read(std::process::id(), 8, &mut b).is_err());
        assert!(read(std::process::id(), u64::MAX - 4, &mut b).is_err());
    }

    #[test]
    fn write_own_memory() {
        if probe().is_err() {
            return;
        }
        let src: Vec<u8> = (0..100_000).map(|i| (i % 253) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        write(std::process::id(), dst.as_mut_ptr() as u64, &src).unwrap();
        assert_eq!(src, dst);
        assert!(write(std::process::id(), 8, &src[..16]).is_err());
    }
}
