//! `rivetrun --info`: what this machine offers a Rivet job.
//!
//! Each facility is probed by trying it, not by reading version numbers:
//! io_uring and CMA are commonly blocked by seccomp or sysctls even on
//! kernels that have them (DESIGN_NOTES §3).

use std::io::{self, Write};

use crate::topology::Topology;

/// Print the topology summary and the transports' availability, and with
/// `all` every `RIVET_*` setting. A closed stdout (`rivetrun --info | head
/// -1`) ends the listing quietly.
pub fn print(topo: &Topology, all: bool) {
    let mut lines = vec![
        format!("rivetrun {}", env!("CARGO_PKG_VERSION")),
        format!("host:         {}", hostname()),
        format!("topology:     {}", topo.summary()),
        format!("shm:          {}", describe(probe_dev_shm())),
        format!("io_uring:     {}", describe(probe_io_uring())),
        format!("CMA:          {}", describe(probe_cma())),
        format!("libfabric:    {}", describe(probe_libfabric())),
        format!(
            "PMIx server:  {}",
            describe(crate::pmix_host::probe().map_err(io::Error::other))
        ),
        format!("ofi:          providers {}", ofi_providers()),
        "transports:   shm on the node; tcp (io_uring or poll) to other nodes; ofi \
         (libfabric) with RIVET_NETMOD=ofi, or by default where RIVET_OFI_PROVIDER names \
         a provider or libfabric has one faster than tcp (`rivet-bench info` shows what a job uses)"
            .to_string(),
    ];
    if all {
        lines.push(settings_listing());
    }
    let mut out = std::io::stdout().lock();
    for line in lines {
        if writeln!(out, "{line}").is_err() {
            return;
        }
    }
}

/// Every setting with its value in this environment (which the ranks
/// inherit), and unknown `RIVET_*` names.
fn settings_listing() -> String {
    let names: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .collect();
    rivet_settings::listing(|k| std::env::var(k).ok(), &names)
        .trim_end()
        .to_string()
}

/// The providers (with their domains) the ofi netmod could use here.
fn ofi_providers() -> String {
    match rivet_netmods::ofi::provider_domains() {
        Ok(list) if list.is_empty() => "none usable (RDM endpoints with tagged messages)".into(),
        Ok(list) => list
            .iter()
            .map(|(p, ds)| format!("{p} (domains: {})", ds.join(", ")))
            .collect::<Vec<_>>()
            .join("; "),
        Err(e) => format!("none ({e})"),
    }
}

fn describe(result: io::Result<String>) -> String {
    match result {
        Ok(how) => format!("available ({how})"),
        Err(err) => format!("unavailable ({err})"),
    }
}

pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

/// Shared-memory segments need a writable tmpfs at /dev/shm.
fn probe_dev_shm() -> io::Result<String> {
    let path = format!("/dev/shm/rivet-probe-{}", std::process::id());
    std::fs::write(&path, b"x")?;
    std::fs::remove_file(&path)?;
    Ok("/dev/shm writable".into())
}

/// Set up (and drop) a one-entry ring: fails under seccomp, io_uring_disabled, old kernels.
fn probe_io_uring() -> io::Result<String> {
    // io_uring_params is 120 bytes; only zeroed input is needed here.
    let mut params = [0u8; 120];
    // SAFETY: io_uring_setup reads and writes `params`, a buffer of the kernel's struct size.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: closing the fd io_uring_setup just returned.
    unsafe { libc::close(fd as i32) };
    Ok("io_uring_setup works".into())
}

/// Read our own memory through process_vm_readv: fails where the syscall is filtered.
fn probe_cma() -> io::Result<String> {
    let src = [0x5au8; 8];
    let mut dst = [0u8; 8];
    let local = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    let remote = libc::iovec {
        iov_base: src.as_ptr() as *mut _,
        iov_len: src.len(),
    };
    // SAFETY: both iovecs describe live buffers of this process of the stated length.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n != 8 || dst != src {
        return Err(io::Error::last_os_error());
    }
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .map(|s| format!("yama ptrace_scope {}", s.trim()))
        .unwrap_or_else(|_| "no yama".into());
    Ok(format!("process_vm_readv works; {scope}"))
}

/// Is the libfabric shared library loadable?
fn probe_libfabric() -> io::Result<String> {
    // SAFETY: dlopen with a constant NUL-terminated name; the handle is closed at once.
    let handle = unsafe {
        libc::dlopen(
            c"libfabric.so.1".as_ptr(),
            libc::RTLD_LAZY | libc::RTLD_LOCAL,
        )
    };
    if handle.is_null() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "libfabric.so.1 not found (apt-get install libfabric1)",
        ));
    }
    // SAFETY: `handle` came from dlopen above.
    unsafe { libc::dlclose(handle) };
    Ok("libfabric.so.1 loads: the ofi netmod can use it".into())
}
