//! Freeing what a rank registered (seed 002's resource registration,
//! `rivet_pmi::resource`) once it ended without releasing it: its shared
//! memory segments are unlinked, its files removed, its child processes
//! killed (only the very process registered: same pid *and* start time).

use rivet_pmi::resource::{start_time, Resource, ResourceKind, KEY_RESOURCES};
use rivet_pmi::server::Server;

/// Make `server` keep what its ranks register (the caller promises to
/// [`free_left`] it when each rank ends); the job attribute that tells the
/// ranks so (`PMI_rivet_resources`), for the namespace's attributes.
pub fn serve(server: &mut Server) -> (String, String) {
    server.serve_resources();
    (KEY_RESOURCES.to_string(), "shm,file,pid".to_string())
}

/// Free what `who` (a rank that ended) registered and did not release,
/// naming on stderr each one that was still there.
pub fn free_left(who: &dyn std::fmt::Display, left: Vec<Resource>) {
    for r in left {
        match free(&r) {
            Ok(true) => eprintln!("rivetrun: {who} ended without freeing {r}: freed it"),
            Ok(false) => {}
            Err(e) => eprintln!("rivetrun: cannot free {r} that {who} registered: {e}"),
        }
    }
}

/// Free `r`. `Ok(true)`: something was there and is gone now; `Ok(false)`:
/// already gone (the rank freed it, or the process ended).
pub fn free(r: &Resource) -> Result<bool, String> {
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    match r.kind() {
        ResourceKind::Shm => {
            let c = std::ffi::CString::new(format!("/{}", r.name()))
                .map_err(|_| "a NUL in the name".to_string())?;
            // SAFETY: `c` is a valid NUL-terminated string; plain syscall.
            if unsafe { libc::shm_unlink(c.as_ptr()) } == 0 {
                return Ok(true);
            }
            let e = std::io::Error::last_os_error();
            if gone(&e) {
                Ok(false)
            } else {
                Err(e.to_string())
            }
        }
        ResourceKind::File => match std::fs::remove_file(r.name()) {
            Ok(()) => Ok(true),
            Err(e) if gone(&e) => Ok(false),
            Err(e) => Err(e.to_string()),
        },
        ResourceKind::Pid => {
            let Some((pid, start)) = r.pid() else {
                return Ok(false);
            };
            // A reused pid belongs to another process: leave it alone.
            if start_time(pid) != Some(start) {
                return Ok(false);
            }
            // SAFETY: plain syscall; pid is above 1 (checked by Resource).
            if unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) } == 0 {
                Ok(true)
            } else {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::ESRCH) {
                    Ok(false)
                } else {
                    Err(e.to_string())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_segments_and_processes_are_freed_once() {
        let dir = std::env::temp_dir().join(format!("rivet-res-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f");
        std::fs::write(&file, b"x").unwrap();
        let f = Resource::file(file.to_str().unwrap()).unwrap();
        assert_eq!(free(&f), Ok(true));
        assert!(!file.exists());
        assert_eq!(free(&f), Ok(false));
        let _ = std::fs::remove_dir(&dir);

        let name = format!("rivet-res-test-{}", std::process::id());
        let shm = std::path::Path::new("/dev/shm").join(&name);
        std::fs::write(&shm, b"x").unwrap();
        let s = Resource::shm(&name).unwrap();
        assert_eq!(free(&s), Ok(true));
        assert!(!shm.exists());
        assert_eq!(free(&s), Ok(false));

        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let c = Resource::child(child.id()).unwrap();
        // The same pid with another start time is someone else: untouched.
        let (pid, start) = c.pid().unwrap();
        let other = Resource::new(ResourceKind::Pid, &format!("{pid}:{}", start + 1)).unwrap();
        assert_eq!(free(&other), Ok(false));
        assert_eq!(child.try_wait().unwrap(), None);
        assert_eq!(free(&c), Ok(true));
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    }
}
