//! What a job leaves on the machine, and how it is removed: the job's
//! private temporary directory, its shared-memory segments, and whatever
//! jobs that died without cleaning up (`kill -9` of rivetrun) left behind.
//!
//! A job's files are named after rivetrun's pid: `/dev/shm/rivet-<pid>-*`
//! (ranks name their node segment after `RIVET_JOBID`) and
//! `$TMPDIR/rivet-<pid>-XXXXXX/` (a `mkdtemp` directory, mode 0700, which
//! rivetrun keeps `flock`ed while it lives). At start, rivetrun removes the
//! job directories of this user whose pid is not alive and whose lock
//! nobody holds, and those jobs' segments: nothing of a live job (even one
//! in another pid namespace sharing /tmp and /dev/shm), or of another user,
//! is touched.

use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A directory only this job uses (`mkdtemp`), removed with everything in
/// it on every way out of `run` (the launcher's teardown, errors, panics);
/// after a `kill -9`, the next rivetrun's [`sweep_dead_jobs`] removes it.
/// rivetrun holds a lock on it (`flock`) while it lives: the mark of a
/// live job that no pid namespace hides.
pub struct JobDir {
    path: PathBuf,
    /// Held open (and locked) for the job's life.
    _lock: std::fs::File,
}

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
        let path = PathBuf::from(std::ffi::OsString::from_vec(raw));
        // Opened close-on-exec: no rank inherits the lock.
        let locked = std::fs::File::open(&path).and_then(|lock| {
            // SAFETY: flock on a descriptor we own; no pointers.
            if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(lock)
        });
        match locked {
            Ok(lock) => Ok(JobDir { path, _lock: lock }),
            Err(e) => {
                let _ = std::fs::remove_dir(&path);
                Err(e)
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for JobDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Removes the job's shared-memory segments when the job ends. Rivet ranks
/// unlink their node segment once every local rank attached; this catches a
/// job that died before that (`/dev/shm/rivet-<RIVET_JOBID>-*`), naming
/// each one it removed on stderr ([`SWEPT`]).
pub struct ShmSweep(pub u32);

impl Drop for ShmSweep {
    fn drop(&mut self) {
        let prefix = format!("rivet-{}-", self.0);
        let Ok(dir) = std::fs::read_dir("/dev/shm") else {
            return;
        };
        for entry in dir.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !name.starts_with(&prefix) {
                continue;
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                // A directory the job made for another MPI's segments
                // (`open_mpi_segments`): theirs to empty, ours to remove.
                let _ = std::fs::remove_dir_all(entry.path());
            } else if std::fs::remove_file(entry.path()).is_ok() {
                // Said out loud: a sweep that removes something means a
                // rank did not unlink its segment (a test fails on it,
                // unless it killed a rank on purpose).
                eprintln!("{SWEPT}{name} (the job's ranks left it behind)");
            }
        }
    }
}

/// `/dev/shm/rivet-<pid>-ompi`, made now (mode 0700) if it is not there:
/// where the job's Open MPI ranks put their shared-memory segments
/// (`pmix_host::open_mpi_segments`), so that what a killed job leaves there
/// goes with its other segments, at its end or at the next rivetrun's
/// sweep. `None` if it cannot be made, or a name that is not this user's
/// directory is in the way.
pub fn open_mpi_segments_dir(pid: u32) -> Option<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = PathBuf::from(format!("/dev/shm/rivet-{pid}-ompi"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => Some(dir),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(&dir).ok()?;
            // SAFETY: geteuid takes no arguments and cannot fail.
            let me = unsafe { libc::geteuid() };
            (meta.is_dir() && meta.uid() == me).then_some(dir)
        }
        Err(_) => None,
    }
}

/// How rivetrun reports each segment its end-of-job sweep removed.
pub const SWEPT: &str = "rivetrun: swept /dev/shm/";

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

/// Whether someone holds the lock on job directory `path` (its rivetrun
/// lives, in whatever pid namespace). An unreadable directory counts as held.
fn locked(path: &Path) -> bool {
    let Ok(dir) = std::fs::File::open(path) else {
        return true;
    };
    // SAFETY: flock on a descriptor we own; no pointers.
    let got = unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    !got // released when `dir` closes
}

/// Remove what dead jobs of this user left: in `tmp`, job directories
/// (`rivet-<pid>-XXXXXX`) whose lock nobody holds (and old-style
/// `rivet-<pid>-*` files), and in `shm`, the `rivet-<pid>-*` segments of
/// those same jobs. A job counts as dead only if its pid is not alive here
/// *and* no directory of that pid is locked: a rivetrun in another pid
/// namespace sharing these directories keeps its lock, so its files stay.
/// Returns what was removed.
pub fn sweep_dead_jobs(tmp: &Path, shm: &Path) -> Vec<PathBuf> {
    // SAFETY: geteuid takes no arguments and cannot fail.
    let me = unsafe { libc::geteuid() };
    let ours = |dir: &Path| -> Vec<(PathBuf, libc::pid_t, std::fs::Metadata)> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| {
                let pid = e.file_name().to_str().and_then(job_pid)?;
                // Not following links: a link is judged (and removed) itself.
                let meta = std::fs::symlink_metadata(e.path()).ok()?;
                (meta.uid() == me && !alive(pid)).then(|| (e.path(), pid, meta))
            })
            .collect()
    };
    let mut removed = Vec::new();
    let mut dead = std::collections::HashSet::new();
    let mut live = std::collections::HashSet::new();
    let candidates = ours(tmp);
    for (path, pid, meta) in &candidates {
        if meta.is_dir() && locked(path) {
            live.insert(*pid);
        } else {
            dead.insert(*pid);
        }
    }
    for (path, pid, meta) in candidates {
        if !live.contains(&pid) && remove(&path, &meta) {
            removed.push(path);
        }
    }
    for (path, pid, meta) in ours(shm) {
        if dead.contains(&pid) && !live.contains(&pid) && remove(&path, &meta) {
            removed.push(path);
        }
    }
    removed
}

/// Removes `path`, a directory with all it holds or a file (as `meta`
/// says); whether it went.
fn remove(path: &Path, meta: &std::fs::Metadata) -> bool {
    let gone = if meta.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    gone.is_ok()
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
        let (tmp, shm) = (root.path().join("tmp"), root.path().join("shm"));
        std::fs::create_dir(&tmp).unwrap();
        std::fs::create_dir(&shm).unwrap();
        let (dead, hidden, unknown) = (dead_pid(), dead_pid(), dead_pid());
        let live = std::process::id();
        let touch = |p: &Path| std::fs::write(p, b"x").unwrap();
        // A killed job: its directory, an old-style file, a segment.
        let dead_dir = tmp.join(format!("rivet-{dead}-AbC123"));
        std::fs::create_dir(&dead_dir).unwrap();
        touch(&dead_dir.join("topology.xml"));
        let dead_file = tmp.join(format!("rivet-{dead}-topology.xml"));
        let dead_seg = shm.join(format!("rivet-{dead}-0-77"));
        touch(&dead_file);
        touch(&dead_seg);
        // Its Open MPI ranks' segment directory, with a segment in it.
        let dead_ompi = shm.join(format!("rivet-{dead}-ompi"));
        std::fs::create_dir(&dead_ompi).unwrap();
        touch(&dead_ompi.join("vader_segment.host.1234.0"));
        // A job whose pid we cannot see (another pid namespace) but whose
        // rivetrun holds its directory's lock.
        let hidden_dir = tmp.join(format!("rivet-{hidden}-XyZ789"));
        std::fs::create_dir(&hidden_dir).unwrap();
        let hidden_seg = shm.join(format!("rivet-{hidden}-0-5"));
        touch(&hidden_seg);
        let lock = std::fs::File::open(&hidden_dir).unwrap();
        // SAFETY: flock on a descriptor we own.
        assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
        // A live job of ours, a segment of a job with no directory, a stranger.
        let live_dir = tmp.join(format!("rivet-{live}-QqQqQq"));
        std::fs::create_dir(&live_dir).unwrap();
        let live_seg = shm.join(format!("rivet-{live}-0-1"));
        let unknown_seg = shm.join(format!("rivet-{unknown}-0-1"));
        let other = tmp.join(format!("other-{dead}-x"));
        for p in [&live_seg, &unknown_seg, &other] {
            touch(p);
        }

        let mut removed = sweep_dead_jobs(&tmp, &shm);
        removed.sort();
        let mut expected = vec![
            dead_dir.clone(),
            dead_file.clone(),
            dead_seg.clone(),
            dead_ompi.clone(),
        ];
        expected.sort();
        assert_eq!(removed, expected);
        for kept in [
            &hidden_dir,
            &hidden_seg,
            &live_dir,
            &live_seg,
            &unknown_seg,
            &other,
        ] {
            assert!(kept.exists(), "{kept:?} was removed");
        }
        // Its rivetrun gone, the hidden job is swept too.
        drop(lock);
        let mut removed = sweep_dead_jobs(&tmp, &shm);
        removed.sort();
        let mut want = vec![hidden_dir, hidden_seg];
        want.sort();
        assert_eq!(removed, want);
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
