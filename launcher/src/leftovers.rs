//! What a job leaves on the machine, and how it is removed: the job's
//! private temporary directory, its shared-memory segments, and whatever
//! jobs that died without cleaning up (`kill -9` of rivetrun) left behind.
//!
//! A job's files are named after rivetrun's pid: `/dev/shm/rivet-<pid>-*`
//! (ranks name their node segment after `RIVET_JOBID`) and
//! `$TMPDIR/rivet-<pid>-XXXXXX/` (a `mkdtemp` directory, mode 0700). At
//! start, rivetrun removes such names whose pid is no longer alive and
//! whose owner is rivetrun's user: nothing of a live job, or of another
//! user, is touched.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A directory only this job uses (`mkdtemp`), removed with everything in
/// it on every way out of `run` (the launcher's teardown, errors, panics);
/// after a `kill -9`, the next rivetrun's [`sweep_dead_jobs`] removes it.
pub struct JobDir(PathBuf);

impl JobDir {
    /// `<tmp>/rivet-<pid>-XXXXXX`, mode 0700.
    pub fn create(tmp: &Path) -> io::Result<JobDir> {
        let template = tmp.join(format!("rivet-{}-XXXXXX", std::process::id()));
        let template = CString::new(template.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in TMPDIR"))?;
        let mut raw = template.into_bytes_with_nul();
        // SAFETY: `raw` is a writable NUL-terminated template that mkdtemp
        // fills in place; it stays alive for the call.
        let made = unsafe { libc::mkdtemp(raw.as_mut_ptr().cast()) };
        if made.is_null() {
            return Err(io::Error::last_os_error());
        }
        raw.pop(); // the NUL
        Ok(JobDir(PathBuf::from(std::ffi::OsString::from_vec(raw))))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for JobDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes the job's shared-memory segments when the job ends. Rivet ranks
/// unlink their node segment once every local rank attached; this catches a
/// job that died before that (`/dev/shm/rivet-<RIVET_JOBID>-*`).
pub struct ShmSweep(pub u32);

impl Drop for ShmSweep {
    fn drop(&mut self) {
        let prefix = format!("rivet-{}-", self.0);
        let Ok(dir) = std::fs::read_dir("/dev/shm") else {
            return;
        };
        for entry in dir.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// The pid in a name `rivet-<pid>-...`, if it has that shape.
fn job_pid(name: &str) -> Option<libc::pid_t> {
    let rest = name.strip_prefix("rivet-")?;
    let (digits, _) = rest.split_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&pid: &libc::pid_t| pid > 0)
}

/// Whether a process `pid` exists (EPERM: it does, someone else's).
fn alive(pid: libc::pid_t) -> bool {
    // SAFETY: kill with signal 0 sends nothing and takes no pointers.
    let sent = unsafe { libc::kill(pid, 0) } == 0;
    sent || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Remove, in each of `dirs`, the `rivet-<pid>-*` entries (files or
/// directories) owned by this user whose rivetrun `pid` is dead. Returns
/// what was removed.
pub fn sweep_dead_jobs(dirs: &[&Path]) -> Vec<PathBuf> {
    // SAFETY: geteuid takes no arguments and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut removed = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(job_pid) else {
                continue;
            };
            // Not following links: a link is judged (and removed) itself.
            let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
                continue;
            };
            if meta.uid() != me || alive(pid) {
                continue;
            }
            let path = entry.path();
            let gone = if meta.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            if gone.is_ok() {
                removed.push(path);
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pid that is surely dead: a child that was just reaped.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn names_of_jobs_are_recognised() {
        assert_eq!(job_pid("rivet-123-0-456"), Some(123));
        assert_eq!(job_pid("rivet-123-topology.xml"), Some(123));
        assert_eq!(job_pid("rivet-kvs_1_0-0-1"), None);
        assert_eq!(job_pid("rivet--1"), None);
        assert_eq!(job_pid("rivet-0-x"), None);
        assert_eq!(job_pid("other-1-2"), None);
        assert_eq!(job_pid("rivet-99999999999999999999-x"), None);
    }

    #[test]
    fn sweep_removes_only_what_dead_jobs_left() {
        let root = JobDir::create(&std::env::temp_dir()).unwrap();
        let dead = dead_pid();
        let live = std::process::id();
        let stale_file = root.path().join(format!("rivet-{dead}-0-77"));
        let stale_dir = root.path().join(format!("rivet-{dead}-AbC123"));
        let live_file = root.path().join(format!("rivet-{live}-0-77"));
        let other = root.path().join(format!("other-{dead}-x"));
        std::fs::write(&stale_file, b"x").unwrap();
        std::fs::create_dir(&stale_dir).unwrap();
        std::fs::write(stale_dir.join("topology.xml"), b"x").unwrap();
        std::fs::write(&live_file, b"x").unwrap();
        std::fs::write(&other, b"x").unwrap();

        let mut removed = sweep_dead_jobs(&[root.path()]);
        removed.sort();
        let mut expected = vec![stale_file.clone(), stale_dir.clone()];
        expected.sort();
        assert_eq!(removed, expected);
        assert!(!stale_file.exists() && !stale_dir.exists());
        assert!(live_file.exists() && other.exists());
    }

    #[test]
    fn job_dir_is_private_and_removed_when_dropped() {
        let dir = JobDir::create(&std::env::temp_dir()).unwrap();
        let path = dir.path().to_path_buf();
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        assert_eq!(job_pid(&name), Some(std::process::id() as libc::pid_t));
        std::fs::write(path.join("topology.xml"), b"x").unwrap();
        drop(dir);
        assert!(!path.exists());
    }
}
