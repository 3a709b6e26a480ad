//! The proxy's share of the CPUs: a session of its own, its scheduling
//! group raised.
//!
//! With the kernel's autogroup scheduling (on by default) the CPUs are
//! shared fairly between sessions first; a nice value counts only inside
//! its session. Every rank runs in a session of its own (`forkexec`), so a
//! proxy in a session shared with the other proxies of the job (and with
//! rivetrun, under `--launcher-exec` or `fork`), even at nice -5, got one
//! share among as many as the ranks already running. Measured with 4
//! namespace hosts x 16 MPICH ranks on 2 cores: a proxy waited, runnable,
//! 0.22 s between two forks, and the 64 ranks exec'd over 1.07-1.24 s
//! where Hydra's proxies (each in a session of its own) took 0.39-0.53 s. So
//! the proxy leads a session of its own (rivetrun starts each launcher
//! command in a new session; a proxy started otherwise makes one, unless
//! its stdin is a terminal, which a user starting it by hand keeps), and
//! the session's group gets the same boost over the ranks' groups as
//! `launch::Priority` gives the proxy inside its own.

use std::io;

use crate::launch::Priority;

/// Where the kernel shows and takes the nice value of the calling
/// process's autogroup.
const AUTOGROUP: &str = "/proc/self/autogroup";

/// Lead a session of our own if we can, then raise its scheduling group:
/// whether the group was raised (false also where autogroups do not exist
/// or the raise is not allowed, which changes nothing else).
pub fn own_group() -> bool {
    // SAFETY: getsid, getpid and isatty take no pointers.
    let (sid, pid, tty) = unsafe { (libc::getsid(0), libc::getpid(), libc::isatty(0) == 1) };
    if sid != pid && !tty {
        // Fails (EPERM) for a process group leader: then we stay where we
        // were started, and leave that session's group alone.
        // SAFETY: setsid takes no pointers.
        unsafe { libc::setsid() };
    }
    // SAFETY: getsid takes no pointers.
    if unsafe { libc::getsid(0) } != pid {
        return false;
    }
    // Every other process of our session is ours (ranks leave it at once
    // for sessions of their own), so the raise reaches no one else.
    raise(AUTOGROUP).is_ok()
}

/// Set the autogroup nice value in `file` to `-Priority::BOOST`, unless
/// it is already that or lower.
fn raise(file: &str) -> io::Result<()> {
    let now = std::fs::read_to_string(file)?;
    let target = -Priority::BOOST;
    if parse_nice(&now).is_some_and(|n| n <= target) {
        return Ok(());
    }
    std::fs::write(file, target.to_string())
}

/// The nice value in an autogroup line (`/autogroup-123 nice 0`).
fn parse_nice(line: &str) -> Option<i32> {
    let mut words = line.split_whitespace();
    words.find(|w| *w == "nice")?;
    words.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_autogroup_line() {
        assert_eq!(parse_nice("/autogroup-18685 nice 0\n"), Some(0));
        assert_eq!(parse_nice("/autogroup-7 nice -5"), Some(-5));
        assert_eq!(parse_nice("/autogroup-7"), None);
        assert_eq!(parse_nice("/autogroup-7 nice x"), None);
    }

    #[test]
    fn raises_a_group_once_and_never_lowers_it() {
        let dir = std::env::temp_dir().join(format!("rivet-autogroup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("autogroup");
        let path = file.to_str().unwrap();
        std::fs::write(&file, "/autogroup-3 nice 0\n").unwrap();
        raise(path).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "-5");
        // Already raised further (by whoever started us): left as it is.
        std::fs::write(&file, "/autogroup-3 nice -10\n").unwrap();
        raise(path).unwrap();
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "/autogroup-3 nice -10\n"
        );
        // No autogroups here (the file is missing): an error, nothing else.
        assert!(raise(dir.join("none").to_str().unwrap()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
