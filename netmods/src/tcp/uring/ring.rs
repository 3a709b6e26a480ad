//! The ring: set up with the cheapest task-work mode the kernel and the
//! caller's threading allow, its descriptor registered, a table of fixed
//! files for the sockets, and the one `io_uring_enter` a poll makes.
//!
//! Modes, best first:
//! - `Defer` (6.1+, one thread drives the netmod): SINGLE_ISSUER +
//!   DEFER_TASKRUN + TASKRUN_FLAG. Receive work the network queues for us
//!   waits until we enter with GETEVENTS; the kernel raises
//!   `IORING_SQ_TASKRUN` in the shared SQ flags meanwhile, so an idle
//!   poll is two memory loads (that flag and the CQ tail) and no call.
//! - `Coop` (5.19+, or threads may take turns): COOP_TASKRUN +
//!   TASKRUN_FLAG: the work runs at our next kernel entry, no interrupt.
//! - `Plain`: neither; the kernel interrupts the thread to run it.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use io_uring::{opcode, IoUring, Probe};

use super::super::config::{TcpConfig, ZeroCopy};

const ENTRIES: u32 = 256;
/// Slots of the fixed-file table: a socket whose state slot is below it is
/// registered there (no descriptor lookup per operation), others use their
/// descriptor.
pub(crate) const FIXED_FILES: u32 = 1024;

/// From the kernel's `io_uring.h` (the crate keeps its `sys` private).
pub(crate) const ENTER_GETEVENTS: u32 = 1;
const ENTER_EXT_ARG: u32 = 8;
const ENTER_REGISTERED_RING: u32 = 16;
const REGISTER_RING_FDS: libc::c_uint = 20;

/// `struct io_uring_getevents_arg`: what an enter with `ENTER_EXT_ARG`
/// reads (no signal mask; `min_wait_usec` unused, 0).
#[repr(C)]
struct GeteventsArg {
    sigmask: u64,
    sigmask_sz: u32,
    min_wait_usec: u32,
    ts: u64,
}

/// `struct __kernel_timespec` (64-bit fields on every architecture).
#[repr(C)]
struct KernelTimespec {
    tv_sec: i64,
    tv_nsec: i64,
}

#[repr(C)]
struct RsrcUpdate {
    offset: u32,
    resv: u32,
    data: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    Defer,
    Coop,
    Plain,
}

pub(crate) struct Ring {
    pub ring: IoUring,
    pub mode: Mode,
    /// The ring's index among the thread's registered rings (`Defer`
    /// only: a registration belongs to the thread that made it).
    reg: Option<u32>,
    /// Size of the fixed-file table (0: none could be registered).
    pub fixed: u32,
    /// Multishot ACCEPT is there (5.19, with IORING_OP_SOCKET).
    pub multishot_accept: bool,
    /// Receives take bundles of buffers (6.10+, `TcpConfig::uring_bundles`).
    pub bundle: bool,
    /// The busy connection may spin (`TcpConfig::uring_spin`).
    pub spin: bool,
    /// SEND_ZC is there and wanted (`TcpConfig::send_zc`): for which peers.
    pub send_zc: Option<ZeroCopy>,
    /// An enter can wait with a timeout (`IORING_FEAT_EXT_ARG`, 5.11).
    pub ext_arg: bool,
    /// `io_uring_enter` and `io_uring_register` calls so far.
    pub calls: u64,
}

/// Creates and probes the ring; `Err` says why io_uring cannot be used.
/// `one_thread`: only the calling thread will ever drive it.
pub(crate) fn setup(cfg: &TcpConfig) -> Result<Ring, String> {
    let one_thread = cfg.one_thread;
    if cfg.inject_uring_failure {
        return Err("failure injected (RIVET_TCP_URING_INJECT_FAILURE=1)".into());
    }
    let mut built = None;
    let modes: &[Mode] = if one_thread {
        &[Mode::Defer, Mode::Coop, Mode::Plain]
    } else {
        &[Mode::Coop, Mode::Plain]
    };
    for &mode in modes {
        let mut b = IoUring::builder();
        match mode {
            Mode::Defer => b
                .setup_single_issuer()
                .setup_defer_taskrun()
                .setup_taskrun_flag(),
            Mode::Coop => b.setup_coop_taskrun().setup_taskrun_flag(),
            Mode::Plain => &mut b,
        };
        match b.build(ENTRIES) {
            Ok(r) => {
                built = Some((r, mode));
                break;
            }
            // An older kernel refuses flags it does not know: try fewer.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && mode != Mode::Plain => {}
            Err(e) => return Err(format!("io_uring_setup: {e}")),
        }
    }
    let Some((ring, mode)) = built else {
        return Err("io_uring_setup refused every mode".into());
    };
    let mut probe = Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|e| format!("io_uring probe: {e}"))?;
    for (code, name) in [
        (opcode::Recv::CODE, "RECV"),
        (opcode::Send::CODE, "SEND"),
        (opcode::SendMsg::CODE, "SENDMSG"),
        (opcode::Accept::CODE, "ACCEPT"),
        (opcode::Connect::CODE, "CONNECT"),
        (opcode::AsyncCancel::CODE, "ASYNC_CANCEL"),
    ] {
        if !probe.is_supported(code) {
            return Err(format!("the kernel lacks IORING_OP_{name}"));
        }
    }
    let multishot_accept = probe.is_supported(opcode::Socket::CODE);
    let ext_arg = ring.params().is_feature_ext_arg();
    let bundle = cfg.uring_bundles && ring.params().is_feature_recvsend_bundle();
    let send_zc = match cfg.send_zc {
        ZeroCopy::Off => None,
        z if probe.is_supported(opcode::SendZc::CODE) => Some(z),
        _ => None,
    };
    let fixed = match ring.submitter().register_files_sparse(FIXED_FILES) {
        Ok(()) => FIXED_FILES,
        Err(_) => 0,
    };
    let mut r = Ring {
        ring,
        mode,
        reg: None,
        fixed,
        multishot_accept,
        bundle,
        spin: cfg.uring_spin,
        send_zc,
        ext_arg,
        calls: 2,
    };
    if mode == Mode::Defer {
        r.reg = r.register_ring_fd();
    }
    Ok(r)
}

impl Ring {
    /// Registers the ring's descriptor with this thread (5.18+), so an
    /// enter skips the descriptor lookup.
    fn register_ring_fd(&mut self) -> Option<u32> {
        let mut up = RsrcUpdate {
            offset: u32::MAX,
            resv: 0,
            data: self.ring.as_raw_fd() as u64,
        };
        self.calls += 1;
        // SAFETY: IORING_REGISTER_RING_FDS reads and writes one
        // `io_uring_rsrc_update`, which `up` is (same layout).
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_uring_register,
                self.ring.as_raw_fd(),
                REGISTER_RING_FDS,
                &mut up as *mut RsrcUpdate,
                1u32,
            )
        };
        (r == 1).then_some(up.offset)
    }

    /// `io_uring_enter(to_submit, min_complete, flags)` through the
    /// registered descriptor when there is one.
    ///
    /// The SQEs submitted must point only at memory that stays valid until
    /// their completions are reaped (the backend's invariant).
    pub(crate) fn enter(
        &mut self,
        to_submit: u32,
        min_complete: u32,
        flags: u32,
    ) -> io::Result<()> {
        self.calls += 1;
        let (fd, flags) = match self.reg {
            Some(i) => (i as RawFd, flags | ENTER_REGISTERED_RING),
            None => (self.ring.as_raw_fd(), flags),
        };
        // SAFETY: no argument block is passed (size 0); what the queued
        // SQEs point at is the caller's obligation (see above).
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                fd,
                to_submit,
                min_complete,
                flags,
                std::ptr::null::<u8>(),
                0usize,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Submits `to_submit` SQEs and waits until a completion is there or
    /// `timeout` passes (`ext_arg` rings only): `io_uring_enter(to_submit,
    /// 1, GETEVENTS | EXT_ARG)` with the timeout in the argument block. In
    /// `Defer` mode the wait also runs the task work the network queues
    /// meanwhile, and is woken by it. `Ok(true)`: the timeout passed
    /// (`ETIME`); a signal (`EINTR`) is not an error either. Same
    /// obligation as `enter` for the SQEs.
    pub(crate) fn wait(&mut self, to_submit: u32, timeout: Duration) -> io::Result<bool> {
        self.calls += 1;
        let ts = KernelTimespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
            tv_nsec: timeout.subsec_nanos().into(),
        };
        let arg = GeteventsArg {
            sigmask: 0,
            sigmask_sz: 0,
            min_wait_usec: 0,
            ts: &ts as *const KernelTimespec as u64,
        };
        let flags = ENTER_GETEVENTS | ENTER_EXT_ARG;
        let (fd, flags) = match self.reg {
            Some(i) => (i as RawFd, flags | ENTER_REGISTERED_RING),
            None => (self.ring.as_raw_fd(), flags),
        };
        // SAFETY: `arg` is a `struct io_uring_getevents_arg` (same layout,
        // its size passed) pointing at `ts`, a `__kernel_timespec`; both
        // outlive the call. What the queued SQEs point
        // at is the caller's obligation (see `enter`).
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                fd,
                to_submit,
                1u32,
                flags,
                &arg as *const GeteventsArg,
                std::mem::size_of::<GeteventsArg>(),
            )
        };
        if r >= 0 {
            return Ok(false);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ETIME) => Ok(true),
            Some(libc::EINTR) => Ok(false),
            _ => Err(e),
        }
    }

    /// SQEs pushed and not yet submitted.
    pub(crate) fn queued(&mut self) -> u32 {
        self.ring.submission().len() as u32
    }

    /// Puts `fd` in the fixed-file table at `index` (`-1`: empties it).
    pub(crate) fn set_file(&mut self, index: u32, fd: RawFd) -> bool {
        self.calls += 1;
        self.ring
            .submitter()
            .register_files_update(index, &[fd])
            .is_ok()
    }

    /// For `describe`.
    pub(crate) fn features(&self) -> Vec<&'static str> {
        let mut f = vec![match self.mode {
            Mode::Defer => "single issuer + defer taskrun",
            Mode::Coop => "coop taskrun",
            Mode::Plain => "plain task work",
        }];
        if self.reg.is_some() {
            f.push("registered ring fd");
        }
        if self.fixed > 0 {
            f.push("fixed files");
        }
        f.push(if self.multishot_accept {
            "multishot accept"
        } else {
            "single-shot accept"
        });
        if self.bundle {
            f.push("recv bundles");
        }
        f.push(match self.send_zc {
            Some(ZeroCopy::Remote) => "zero-copy send to other hosts",
            Some(ZeroCopy::Always) => "zero-copy send to every peer",
            _ => "no zero-copy send",
        });
        f
    }
}
