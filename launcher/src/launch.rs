//! Starting one rank: its environment, its PMI channel, its stdio pipes.
//!
//! Every rank runs in its own process group, so rivetrun can signal a rank
//! together with whatever it forked, and a Ctrl-C on the terminal reaches
//! rivetrun alone, which forwards it. The program is checked before the first
//! rank starts, so "not found" is one clear message, not N half-started ranks.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};

use crate::error::LaunchError;

/// How a rank reaches rivetrun's PMI server.
#[derive(Debug, Clone)]
pub enum PmiChannel {
    /// An inherited socket (`PMI_FD`), MPICH's default.
    Fd,
    /// A TCP connection to `host:port` (`PMI_PORT` + `PMI_ID`).
    Port(String),
}

/// What every rank of the job shares.
#[derive(Debug)]
pub struct JobSpec {
    /// The program as resolved by `resolve_program` (a path).
    pub program: PathBuf,
    /// argv[0] as the user typed it.
    pub argv0: OsString,
    pub args: Vec<OsString>,
    /// Variables on top of (or, with `clear_env`, instead of) rivetrun's environment.
    pub env: Vec<(OsString, OsString)>,
    pub clear_env: bool,
    pub wdir: Option<PathBuf>,
    pub size: u32,
    pub kvsname: String,
    pub channel: PmiChannel,
}

/// What rank-specific placement the launcher decided.
#[derive(Debug, Default, Clone)]
pub struct RankPlace {
    pub local_rank: u32,
    pub local_size: u32,
    /// CPU set to bind to before exec, if any.
    pub affinity: Option<libc::cpu_set_t>,
}

/// A started rank, with the parent's ends of its channels.
pub struct Started {
    pub child: Child,
    pub pmi: Option<UnixStream>,
    pub stdin: Option<ChildStdin>,
    pub stdout: ChildStdout,
    pub stderr: ChildStderr,
}

/// Find the program the way execvp would, so a missing or non-executable
/// program is reported before any rank starts.
pub fn resolve_program(
    program: &OsStr,
    search_path: Option<&OsStr>,
) -> Result<PathBuf, LaunchError> {
    let name = Path::new(program);
    if program.is_empty() {
        return Err(LaunchError::NotFound {
            program: String::new(),
            searched: false,
        });
    }
    let candidates: Vec<PathBuf> = if program.as_encoded_bytes().contains(&b'/') {
        vec![name.to_path_buf()]
    } else {
        let path = search_path
            .map(OsStr::to_os_string)
            .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .collect()
    };
    let mut denied = None;
    for candidate in &candidates {
        match fs::metadata(candidate) {
            Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => {
                return Ok(candidate.clone());
            }
            Ok(meta) => {
                let why = if meta.is_dir() {
                    "is a directory"
                } else {
                    "is not executable"
                };
                denied.get_or_insert_with(|| (candidate.clone(), why));
            }
            Err(_) => {}
        }
    }
    let shown = program.to_string_lossy().into_owned();
    match denied {
        Some((path, why)) => Err(LaunchError::NotExecutable {
            program: path.display().to_string(),
            why,
        }),
        None => Err(LaunchError::NotFound {
            program: shown,
            searched: candidates.len() > 1 || !program.as_encoded_bytes().contains(&b'/'),
        }),
    }
}

/// Start rank `rank` of the job.
pub fn start_rank(job: &JobSpec, rank: u32, place: &RankPlace) -> Result<Started, LaunchError> {
    let mut cmd = Command::new(&job.program);
    cmd.arg0(&job.argv0).args(&job.args);
    if job.clear_env {
        cmd.env_clear();
    }
    cmd.envs(job.env.iter().map(|(k, v)| (k, v)));
    cmd.env("PMI_RANK", rank.to_string())
        .env("PMI_SIZE", job.size.to_string())
        .env("MPI_LOCALRANKID", place.local_rank.to_string())
        .env("MPI_LOCALNRANKS", place.local_size.to_string());
    if let Some(dir) = &job.wdir {
        cmd.current_dir(dir);
    }
    cmd.stdin(if rank == 0 {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .process_group(0);

    let (parent_end, child_fd) = match &job.channel {
        PmiChannel::Fd => {
            let (parent_end, child_end) = UnixStream::pair().map_err(LaunchError::Io)?;
            let fd = child_end.as_raw_fd();
            cmd.env("PMI_FD", fd.to_string());
            (Some((parent_end, child_end)), Some(fd))
        }
        PmiChannel::Port(addr) => {
            cmd.env("PMI_PORT", addr).env("PMI_ID", rank.to_string());
            (None, None)
        }
    };
    let affinity = place.affinity;
    // SAFETY: the closure runs in the forked child before exec and makes only
    // async-signal-safe system calls (fcntl, sched_setaffinity) on data
    // prepared in the parent; it allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = child_fd {
                clear_cloexec(fd)?;
            }
            if let Some(set) = affinity.as_ref() {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|err| LaunchError::Spawn {
        program: job.program.display().to_string(),
        rank,
        err,
    })?;
    // The child has its copy; the parent keeps only its own end.
    let pmi = parent_end.map(|(parent, _child_end_dropped_here)| parent);
    let started = Started {
        stdin: child.stdin.take(),
        stdout: child.stdout.take().expect("stdout was piped"),
        stderr: child.stderr.take().expect("stderr was piped"),
        child,
        pmi,
    };
    Ok(started)
}

fn clear_cloexec(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl on an fd this process owns; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_programs_like_execvp() {
        let path = OsString::from("/nonexistent:/bin:/usr/bin");
        assert!(resolve_program(OsStr::new("sh"), Some(&path))
            .unwrap()
            .ends_with("sh"));
        assert!(resolve_program(OsStr::new("/bin/sh"), None).is_ok());
        match resolve_program(OsStr::new("no-such-program-rivet"), Some(&path)) {
            Err(LaunchError::NotFound {
                program,
                searched: true,
            }) => assert_eq!(program, "no-such-program-rivet"),
            other => panic!("unexpected {other:?}"),
        }
        match resolve_program(OsStr::new("/etc/passwd"), None) {
            Err(LaunchError::NotExecutable { why, .. }) => assert_eq!(why, "is not executable"),
            other => panic!("unexpected {other:?}"),
        }
        match resolve_program(OsStr::new("/tmp"), None) {
            Err(LaunchError::NotExecutable { why, .. }) => assert_eq!(why, "is a directory"),
            other => panic!("unexpected {other:?}"),
        }
    }
}
