//! Noticing that a rank on this node died.
//!
//! Shared memory has no connection to break: a killed peer just stops
//! writing, and a receive waiting for it would wait forever (with
//! `--disable-auto-cleanup` nobody ends the waiter either). So each rank
//! holds a pidfd for every local peer (the process named by its slot in
//! the node segment, so a reused pid is never mistaken for it) and, while
//! idle, polls them now and then. A pidfd turns readable when its process
//! ends, reaped or not. Kernels without pidfds fall back to `kill(pid, 0)`.
//!
//! `Core::progress` acts on a death only after one more poll of shared
//! memory found nothing: what the peer wrote before it died is delivered
//! first (its writes precede its death, which precedes our look).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Idle progress calls between looks at the clock.
const IDLE_CALLS: u32 = 256;
/// Least time between two looks at the peers.
const EVERY: Duration = Duration::from_millis(20);

/// How one peer is watched.
enum Probe {
    Pidfd(OwnedFd),
    /// No pidfd (old kernel, or it could not be opened): `kill(pid, 0)`.
    Pid(libc::pid_t),
    /// Its process was already gone when the watch started.
    Gone,
}

/// The local peers of this rank and which of them were reported dead.
pub struct LocalPeers {
    peers: Vec<(usize, u32, Probe)>,
    reported: Vec<bool>,
    idle: u32,
    last: Instant,
}

impl LocalPeers {
    /// Watch local ranks `pids[i]` (index = local rank), all but `me`.
    pub fn new(pids: &[u32], me: usize) -> LocalPeers {
        let peers = pids
            .iter()
            .enumerate()
            .filter(|&(i, &pid)| i != me && pid != 0)
            .map(|(i, &pid)| (i, pid, open(pid)))
            .collect();
        LocalPeers {
            peers,
            reported: vec![false; pids.len()],
            idle: 0,
            last: Instant::now(),
        }
    }

    /// Count an idle progress call; true when it is time to look. Inline:
    /// it runs in every round of a waiting loop.
    #[inline(always)]
    pub fn due(&mut self) -> bool {
        self.idle += 1;
        if self.idle < IDLE_CALLS {
            return false;
        }
        self.clock_due()
    }

    #[inline(never)]
    fn clock_due(&mut self) -> bool {
        self.idle = 0;
        if self.last.elapsed() < EVERY {
            return false;
        }
        self.last = Instant::now();
        true
    }

    /// Local peers (index, pid) whose process has ended and that were not
    /// reported yet. They count as reported once [`Self::report`] says so.
    pub fn ended(&self) -> Vec<(usize, u32)> {
        self.peers
            .iter()
            .filter(|(i, _, probe)| !self.reported[*i] && has_ended(probe))
            .map(|&(i, pid, _)| (i, pid))
            .collect()
    }

    pub fn report(&mut self, peer: usize) {
        if let Some(r) = self.reported.get_mut(peer) {
            *r = true;
        }
    }
}

fn open(pid: u32) -> Probe {
    // SAFETY: pidfd_open takes a pid and flags, no pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd >= 0 {
        // SAFETY: the kernel just returned this descriptor; nobody else owns it.
        return Probe::Pidfd(unsafe { OwnedFd::from_raw_fd(fd as i32) });
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ESRCH) => Probe::Gone,
        _ => Probe::Pid(pid as libc::pid_t),
    }
}

fn has_ended(probe: &Probe) -> bool {
    match probe {
        Probe::Gone => true,
        Probe::Pidfd(fd) => {
            let mut p = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll(2) on one pollfd we own, without waiting.
            let n = unsafe { libc::poll(&mut p, 1, 0) };
            n > 0 && p.revents & libc::POLLIN != 0
        }
        Probe::Pid(pid) => {
            // SAFETY: signal 0 sends nothing; no pointers.
            let sent = unsafe { libc::kill(*pid, 0) } == 0;
            !sent && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_seen_to_end_once_reported_and_the_living_never() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let me = std::process::id();
        let pids = [me, child.id(), me];
        let mut w = LocalPeers::new(&pids, 0);
        assert!(w.ended().is_empty());
        child.kill().unwrap();
        // Ended before it is reaped (a zombie) already.
        let start = Instant::now();
        while w.ended().is_empty() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(w.ended(), [(1, child.id())]);
        child.wait().unwrap();
        w.report(1);
        assert!(w.ended().is_empty());
    }
}
