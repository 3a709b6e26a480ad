//! `no_io_uring CMD [ARGS...]`: run CMD where io_uring does not exist, as in
//! a container under Docker's default seccomp profile.
//!
//! It installs a seccomp filter (after `PR_SET_NO_NEW_PRIVS`, so no
//! privilege is needed) that makes `io_uring_setup`, `io_uring_enter` and
//! `io_uring_register` (425, 426, 427 on x86_64 and aarch64, and in their
//! 32-bit compat ABIs: i386 and x32, arm) fail with EPERM and lets every
//! other system call through, then execs CMD (searched in PATH). The filter
//! is inherited across fork and exec and cannot be removed, so a whole job
//! (`no_io_uring rivetrun -n 2 prog`: the launcher and every rank) runs
//! without io_uring.
//!
//! Exit status: CMD's, as it replaces this process; 127 if CMD is not found;
//! 2 for a usage error, a filter that cannot be installed, another exec
//! failure, or an architecture other than x86_64 and aarch64.
//!
//! `no_io_uring --self-test` installs the filter in itself and checks that
//! the three calls fail with EPERM, that a neighbouring system call (424)
//! does not, and that a child it spawns (`no_io_uring --probe`) inherits the
//! filter; exit 0 if so, 1 if not. `no_io_uring --probe` calls
//! io_uring_setup and exits 0 if it fails with EPERM, 1 otherwise.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

/// io_uring_setup, io_uring_enter, io_uring_register (the same numbers on
/// x86_64, i386, aarch64 and arm).
const IO_URING_FIRST: u32 = 425;
const IO_URING_LAST: u32 = 427;
/// x32 system calls are x86_64 ones with this bit set in the number.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

// <linux/audit.h>: EM_* | __AUDIT_ARCH_64BIT (0x8000_0000) | __AUDIT_ARCH_LE (0x4000_0000).
const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const AUDIT_ARCH_I386: u32 = 0x4000_0003;
const AUDIT_ARCH_AARCH64: u32 = 0xC000_00B7;
const AUDIT_ARCH_ARM: u32 = 0x4000_0028;

/// Offsets in `struct seccomp_data`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

/// The architectures (as seccomp reports them) whose io_uring calls are
/// 425-427 and that a process of this build can use.
fn arches() -> Option<&'static [u32]> {
    if cfg!(target_arch = "x86_64") {
        Some(&[AUDIT_ARCH_X86_64, AUDIT_ARCH_I386])
    } else if cfg!(target_arch = "aarch64") {
        Some(&[AUDIT_ARCH_AARCH64, AUDIT_ARCH_ARM])
    } else {
        None
    }
}

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

/// A conditional jump: `jt` and `jf` count instructions after this one.
fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: (libc::BPF_JMP | code | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    }
}

/// The BPF program: on one of `arches`, system calls 425-427 (x32 bit
/// ignored) return EPERM; everything else is allowed.
fn filter(arches: &[u32]) -> Vec<libc::sock_filter> {
    let n = arches.len();
    let mut prog = vec![stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, DATA_ARCH)];
    for (i, &arch) in arches.iter().enumerate() {
        // Match: skip the rest of the list and the RET ALLOW after it.
        prog.push(jump(libc::BPF_JEQ, arch, (n - i) as u8, 0));
    }
    prog.extend([
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, DATA_NR),
        stmt(
            libc::BPF_ALU | libc::BPF_AND | libc::BPF_K,
            !X32_SYSCALL_BIT,
        ),
        jump(libc::BPF_JGE, IO_URING_FIRST, 0, 2),
        jump(libc::BPF_JGT, IO_URING_LAST, 1, 0),
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | (libc::EPERM as u32 & libc::SECCOMP_RET_DATA),
        ),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ]);
    prog
}

/// Install the filter on this thread (inherited by what it forks and execs).
fn install() -> Result<(), String> {
    let arches = arches().ok_or_else(|| {
        format!(
            "unsupported architecture {}: only x86_64 and aarch64 are known",
            std::env::consts::ARCH
        )
    })?;
    let mut prog = filter(arches);
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(format!(
            "prctl(PR_SET_NO_NEW_PRIVS): {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: `fprog` points at `prog`, both alive for the call; the kernel
    // copies the program.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            &fprog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        return Err(format!(
            "prctl(PR_SET_SECCOMP): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// `syscall(nr, args...)`: the result, or the errno.
fn raw_syscall(nr: libc::c_long, args: [libc::c_long; 4]) -> Result<libc::c_long, i32> {
    // SAFETY: the calls made here get null or invalid (-1) pointers and fds,
    // or (io_uring_setup) a params struct we own; none writes our memory
    // except through that struct.
    let rc = unsafe { libc::syscall(nr, args[0], args[1], args[2], args[3]) };
    if rc < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(rc)
    }
}

/// io_uring_setup(1, &params): a ring fd (closed again), or the errno.
fn io_uring_setup() -> Result<(), i32> {
    // struct io_uring_params is 120 bytes; zeroed = no flags.
    let mut params = [0u64; 15];
    let fd = raw_syscall(
        IO_URING_FIRST as libc::c_long,
        [1, params.as_mut_ptr() as libc::c_long, 0, 0],
    )?;
    // SAFETY: closing the fd io_uring_setup just gave us.
    unsafe { libc::close(fd as libc::c_int) };
    Ok(())
}

fn describe(r: Result<(), i32>) -> String {
    match r {
        Ok(()) => "succeeded".into(),
        Err(e) => format!("failed: {}", std::io::Error::from_raw_os_error(e)),
    }
}

/// `--probe`: does io_uring_setup fail with EPERM here?
fn probe() -> ExitCode {
    let r = io_uring_setup();
    println!("no_io_uring --probe: io_uring_setup {}", describe(r));
    if r == Err(libc::EPERM) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `--self-test`: install the filter and check it, in this process and in a child.
fn self_test() -> ExitCode {
    println!(
        "no_io_uring --self-test: before the filter, io_uring_setup {}",
        describe(io_uring_setup())
    );
    if let Err(e) = install() {
        eprintln!("no_io_uring: {e}");
        return ExitCode::from(2);
    }
    let mut ok = true;
    let mut check = |what: &str, got: Result<libc::c_long, i32>, want_eperm: bool| {
        let eperm = got == Err(libc::EPERM);
        let shown = match got {
            Ok(v) => format!("returned {v}"),
            Err(e) => format!("failed: {}", std::io::Error::from_raw_os_error(e)),
        };
        let pass = eperm == want_eperm;
        ok &= pass;
        println!("  {} {what} {shown}", if pass { "ok  " } else { "FAIL" });
    };
    let mut params = [0u64; 15];
    let p = params.as_mut_ptr() as libc::c_long;
    check(
        "io_uring_setup(1, &params)",
        raw_syscall(425, [1, p, 0, 0]),
        true,
    );
    check(
        "io_uring_enter(-1, ...)",
        raw_syscall(426, [-1, 0, 0, 0]),
        true,
    );
    check(
        "io_uring_register(-1, ...)",
        raw_syscall(427, [-1, 0, 0, 0]),
        true,
    );
    // pidfd_send_signal(-1, 0, NULL, 0): EBADF, not EPERM.
    check(
        "syscall 424 (pidfd_send_signal(-1, ...))",
        raw_syscall(424, [-1, 0, 0, 0]),
        false,
    );
    if cfg!(target_arch = "x86_64") {
        let x32 = (X32_SYSCALL_BIT | IO_URING_FIRST) as libc::c_long;
        check("x32 io_uring_setup", raw_syscall(x32, [1, p, 0, 0]), true);
    }
    // A child, forked and exec'd, inherits the filter.
    match std::env::current_exe()
        .and_then(|me| std::process::Command::new(me).arg("--probe").status())
    {
        Ok(status) => {
            let pass = status.success();
            ok &= pass;
            println!(
                "  {} child process (fork + exec): {status}",
                if pass { "ok  " } else { "FAIL" }
            );
        }
        Err(e) => {
            ok = false;
            println!("  FAIL cannot run the child: {e}");
        }
    }
    println!(
        "no_io_uring --self-test: {}",
        if ok { "passed" } else { "FAILED" }
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

const USAGE: &str = "usage: no_io_uring CMD [ARGS...]   (run CMD with io_uring_setup/enter/register failing with EPERM)
       no_io_uring --self-test          (check the filter here and in a child)";

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match args.first().and_then(|a| a.to_str()) {
        None => {
            eprintln!("no_io_uring: no command given\n{USAGE}");
            return ExitCode::from(2);
        }
        Some("-h" | "--help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some("--self-test") => return self_test(),
        Some("--probe") => return probe(),
        Some("--") => {
            args.remove(0);
            if args.is_empty() {
                eprintln!("no_io_uring: no command given\n{USAGE}");
                return ExitCode::from(2);
            }
        }
        _ => {}
    }
    let argv: Vec<CString> = match args
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
    {
        Ok(v) => v,
        Err(_) => {
            eprintln!("no_io_uring: an argument contains a NUL byte");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = install() {
        eprintln!("no_io_uring: {e}");
        return ExitCode::from(2);
    }
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: a NULL-terminated array of pointers to NUL-terminated strings
    // that outlive the call (which returns only on failure).
    unsafe { libc::execvp(ptrs[0], ptrs.as_ptr()) };
    let err = std::io::Error::last_os_error();
    eprintln!(
        "no_io_uring: cannot run {}: {err}",
        args[0].to_string_lossy()
    );
    if err.raw_os_error() == Some(libc::ENOENT) {
        ExitCode::from(127)
    } else {
        ExitCode::from(2)
    }
}
