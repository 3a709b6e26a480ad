//! Unlinking a node segment's name when SIGTERM ends the process before
//! every local rank attached.
//!
//! The last rank to attach unlinks the name; until then it is in
//! /dev/shm, and a rank killed meanwhile (its siblings never came) leaves
//! it there wherever no launcher sweeps (rivetrun does). Launchers that end
//! a job politely send SIGTERM first: Open MPI's `mpirun` sends SIGCONT,
//! SIGTERM and SIGKILL a second apart, Slurm SIGTERM then SIGKILL after
//! its KillWait. So while this process holds a segment whose name may
//! still exist, SIGTERM at its default disposition (death) first unlinks
//! that name, then kills the process by SIGTERM exactly as before.
//!
//! Only a default disposition is replaced: a program that ignores SIGTERM
//! or handles it itself keeps its choice (and the name may then stay, as
//! before). The handler is installed while some name is armed and removed
//! when the last is disarmed, if it is still ours. Unlinking a name that
//! is already gone is harmless, and no other process can have made a new
//! segment under it (the name carries its leader's pid, which is alive).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

/// Names armed at once in one process (one per engine; tests make more).
/// Past that, a segment is simply not armed.
const SLOTS: usize = 16;
/// `/dev/shm/<name>` with its NUL: segment names are at most 200 bytes.
const PATH_MAX: usize = 224;

const FREE: u8 = 0;
/// Being written by `arm` (the handler skips it).
const FILLING: u8 = 1;
const ARMED: u8 = 2;
/// The handler took it: nobody writes it again (the process is dying).
const TAKEN: u8 = 3;

struct Slot {
    state: AtomicU8,
    path: UnsafeCell<[u8; PATH_MAX]>,
}

// SAFETY: `path` is written only by the thread that moved `state` from
// FREE to FILLING, and read only after moving it from ARMED to TAKEN (the
// handler) with acquire ordering against `arm`'s release store of ARMED;
// those transitions are exclusive compare-exchanges.
unsafe impl Sync for Slot {}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    state: AtomicU8::new(FREE),
    path: UnsafeCell::new([0; PATH_MAX]),
};
static SLOTS_TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];

/// Whether our handler is installed, and the count of armed slots;
/// install and removal happen under it (never in the handler).
static INSTALLED: Mutex<(bool, usize)> = Mutex::new((false, 0));

/// A name that SIGTERM unlinks until this is dropped.
#[derive(Debug)]
pub(crate) struct Armed {
    slot: usize,
}

/// Arm `name` (a segment name, `segment::c_name`'s rules): `None` if every
/// slot is taken or SIGTERM is not at its default disposition.
pub(crate) fn arm(name: &str) -> Option<Armed> {
    let path = format!("/dev/shm/{name}");
    if path.len() >= PATH_MAX || path.contains('\0') {
        return None;
    }
    let mut installed = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
    if !installed.0 {
        if !install() {
            return None;
        }
        installed.0 = true;
    }
    let slot = SLOTS_TABLE.iter().position(|s| {
        s.state
            .compare_exchange(FREE, FILLING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    });
    let Some(slot) = slot else {
        if installed.1 == 0 {
            uninstall();
            installed.0 = false;
        }
        return None;
    };
    let s = &SLOTS_TABLE[slot];
    // SAFETY: this thread moved the slot to FILLING: nobody else writes
    // it, and the handler does not read a slot in that state.
    let buf = unsafe { &mut *s.path.get() };
    buf.fill(0);
    buf[..path.len()].copy_from_slice(path.as_bytes());
    s.state.store(ARMED, Ordering::Release);
    installed.1 += 1;
    Some(Armed { slot })
}

impl Drop for Armed {
    fn drop(&mut self) {
        let mut installed = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
        let s = &SLOTS_TABLE[self.slot];
        // TAKEN: the handler has it, and the process is going.
        if s.state
            .compare_exchange(ARMED, FREE, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            installed.1 -= 1;
        }
        if installed.0 && installed.1 == 0 {
            uninstall();
            installed.0 = false;
        }
    }
}

/// Put our handler on SIGTERM if its disposition is the default.
fn install() -> bool {
    // SAFETY: sigaction with a zeroed, then filled, struct; `on_term` is
    // an `extern "C" fn(c_int)` that only makes async-signal-safe calls.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGTERM, std::ptr::null(), &mut old) != 0
            || old.sa_sigaction != libc::SIG_DFL
        {
            return false;
        }
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = on_term as extern "C" fn(libc::c_int) as libc::sighandler_t;
        new.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut new.sa_mask);
        libc::sigaction(libc::SIGTERM, &new, std::ptr::null_mut()) == 0
    }
}

/// Put SIGTERM back to its default if our handler is still there (the
/// program may have put its own since: that one stays).
fn uninstall() {
    // SAFETY: as in `install`.
    unsafe {
        let mut cur: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGTERM, std::ptr::null(), &mut cur) != 0
            || cur.sa_sigaction != on_term as extern "C" fn(libc::c_int) as libc::sighandler_t
        {
            return;
        }
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut dfl.sa_mask);
        libc::sigaction(libc::SIGTERM, &dfl, std::ptr::null_mut());
    }
}

/// Unlink every armed name, then die of SIGTERM as the default would.
extern "C" fn on_term(_sig: libc::c_int) {
    for s in &SLOTS_TABLE {
        if s.state
            .compare_exchange(ARMED, TAKEN, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            // SAFETY: the slot is TAKEN by this call: its NUL-terminated
            // path was written before ARMED (release) and nobody writes it
            // again; unlink is async-signal-safe.
            unsafe { libc::unlink(s.path.get() as *const libc::c_char) };
        }
    }
    // SAFETY: sigaction and raise are async-signal-safe. SIGTERM is
    // blocked while this runs, so the raised one is delivered, at its
    // default disposition, when the handler returns.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut dfl.sa_mask);
        libc::sigaction(libc::SIGTERM, &dfl, std::ptr::null_mut());
        libc::raise(libc::SIGTERM);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disposition() -> libc::sighandler_t {
        // SAFETY: a query only.
        unsafe {
            let mut cur: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGTERM, std::ptr::null(), &mut cur);
            cur.sa_sigaction
        }
    }

    /// Arming installs the handler, disarming the last name restores the
    /// default; too long a name is not armed. (Other tests of this crate
    /// create segments too, so only what holds whatever they do is
    /// asserted: while one is armed, the handler is ours.)
    #[test]
    fn the_handler_is_ours_while_a_name_is_armed() {
        let ours = on_term as extern "C" fn(libc::c_int) as libc::sighandler_t;
        let a = arm("rivet-term-test-a").expect("armed");
        assert_eq!(disposition(), ours);
        let b = arm("rivet-term-test-b").expect("armed");
        drop(a);
        assert_eq!(disposition(), ours);
        drop(b);
        assert!(arm(&"x".repeat(PATH_MAX)).is_none());
    }

    /// A process that gets SIGTERM while a name is armed unlinks it and
    /// still dies of SIGTERM (a forked child, which only raises it).
    #[test]
    fn sigterm_unlinks_an_armed_name_and_still_kills() {
        let name = format!("rivet-term-test-{}", std::process::id());
        let path = format!("/dev/shm/{name}");
        std::fs::File::create(&path).expect("create the file to unlink");
        let armed = arm(&name).expect("armed");
        // SAFETY: the child makes only async-signal-safe calls (raise,
        // then the handler's, then _exit if it somehow survives).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: as above.
            unsafe {
                libc::raise(libc::SIGTERM);
                libc::_exit(7);
            }
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        drop(armed);
        let left = std::path::Path::new(&path).exists();
        let _ = std::fs::remove_file(&path);
        assert_eq!(r, pid);
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGTERM,
            "the child did not die of SIGTERM: status {status:#x}"
        );
        assert!(!left, "{path} outlived the SIGTERM");
    }
}
