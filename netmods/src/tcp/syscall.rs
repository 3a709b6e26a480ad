//! The two system calls on every message's path, `recvfrom` and `sendto`,
//! made bare rather than through glibc's `recv`/`send`.
//!
//! In a process with threads (the PMI watch) glibc makes each of them a
//! cancellation point, enabling and disabling asynchronous cancellation
//! around the call and going through `errno`: callgrind counts some 60
//! instructions a call, about half of them that wrapper, paid by every
//! empty read of a busy wait and every direct send. Rivet never cancels
//! threads, so nothing is lost by skipping it. On x86-64 Linux the call is
//! the `syscall` instruction itself; elsewhere `libc::syscall`. Both give
//! the kernel's answer as `Ok(bytes)` or `Err(errno)`; `EINTR` is the
//! caller's to retry.

use std::os::fd::RawFd;

/// `recvfrom(fd, buf, len, MSG_DONTWAIT, NULL, NULL)`.
///
/// # Safety
/// `buf..buf+len` must be writable.
#[inline(always)]
pub(crate) unsafe fn recv(fd: RawFd, buf: *mut u8, len: usize) -> Result<usize, i32> {
    // SAFETY: the kernel writes at most `len` bytes at `buf`, which the
    // caller guarantees writable; no address is asked for.
    unsafe {
        syscall6(
            libc::SYS_recvfrom,
            [
                fd as usize,
                buf as usize,
                len,
                libc::MSG_DONTWAIT as usize,
                0,
                0,
            ],
        )
    }
}

/// `sendto(fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT, NULL, 0)`.
#[inline(always)]
pub(crate) fn send(fd: RawFd, data: &[u8]) -> Result<usize, i32> {
    // SAFETY: the kernel only reads `data`, a live slice; no address is
    // passed (a null pointer with length 0).
    unsafe {
        syscall6(
            libc::SYS_sendto,
            [
                fd as usize,
                data.as_ptr() as usize,
                data.len(),
                (libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) as usize,
                0,
                0,
            ],
        )
    }
}

/// System call `nr` with six arguments.
///
/// # Safety
/// The arguments must be valid for `nr`; memory the kernel writes must be
/// the caller's to give (the compiler is told memory may change).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[inline(always)]
unsafe fn syscall6(nr: libc::c_long, a: [usize; 6]) -> Result<usize, i32> {
    let r: isize;
    // SAFETY: the Linux x86-64 system call convention: number and result
    // in rax, arguments in rdi, rsi, rdx, r10, r8, r9; rcx and r11
    // clobbered; no stack use. The caller vouches for the arguments.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => r,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    // The kernel returns -errno (-4095..-1) on failure.
    if r < 0 {
        Err(-r as i32)
    } else {
        Ok(r as usize)
    }
}

/// [`syscall6`] through libc where the instruction is not written out.
///
/// # Safety
/// As the x86-64 version.
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
#[inline(always)]
unsafe fn syscall6(nr: libc::c_long, a: [usize; 6]) -> Result<usize, i32> {
    // SAFETY: the caller vouches for the arguments.
    let r = unsafe {
        libc::syscall(
            nr,
            a[0] as libc::c_long,
            a[1] as libc::c_long,
            a[2] as libc::c_long,
            a[3] as libc::c_long,
            a[4] as libc::c_long,
            a[5] as libc::c_long,
        )
    };
    if r >= 0 {
        Ok(r as usize)
    } else {
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    /// `recv` gives EAGAIN on an empty socket, the bytes sent (up to the
    /// room given, the rest left for the next call), 0 once the peer
    /// closed, and the error number of a bad descriptor.
    #[test]
    fn recv_reports_empty_data_end_and_errors() {
        fn rd(fd: RawFd, buf: &mut [u8]) -> Result<usize, i32> {
            // SAFETY: `buf` is writable for its whole length.
            unsafe { recv(fd, buf.as_mut_ptr(), buf.len()) }
        }
        let (mut a, b) = UnixStream::pair().unwrap();
        let fd = b.as_raw_fd();
        let mut buf = [0u8; 8];
        assert_eq!(rd(fd, &mut buf), Err(libc::EAGAIN));
        a.write_all(b"hello, world").unwrap();
        assert_eq!(rd(fd, &mut buf[..5]), Ok(5));
        assert_eq!(&buf[..5], b"hello");
        assert_eq!(rd(fd, &mut buf), Ok(7));
        assert_eq!(&buf[..7], b", world");
        drop(a);
        assert_eq!(rd(fd, &mut buf), Ok(0));
        assert_eq!(rd(-1, &mut buf), Err(libc::EBADF));
    }

    /// `send` writes the bytes and reports how many; a closed peer gives
    /// EPIPE (no SIGPIPE, or this test would die), a bad descriptor EBADF.
    #[test]
    fn send_writes_and_reports_errors() {
        let (a, mut b) = UnixStream::pair().unwrap();
        assert_eq!(send(a.as_raw_fd(), b"ping"), Ok(4));
        let mut got = [0u8; 4];
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        drop(b);
        assert_eq!(send(a.as_raw_fd(), b"x"), Err(libc::EPIPE));
        assert_eq!(send(-1, b"x"), Err(libc::EBADF));
    }
}
