//! Starting the ranks (or a spawn's processes), all or none: each one's
//! environment, PMI channel, stdio pipes and binding; `forkexec` forks them
//! all before waiting for their execs.
//!
//! Every rank runs in its own session (so its own process group), so rivetrun can signal a rank
//! together with whatever it forked, and a Ctrl-C on the terminal reaches
//! rivetrun alone, which forwards it. The program is checked before the first
//! rank starts, so "not found" is one clear message, not N half-started ranks.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command};

use rivet_pmi::server::{PortAuth, PORT_SECRET_ENV};

use crate::error::LaunchError;
use crate::forkexec;

/// How a rank reaches rivetrun's PMI server.
#[derive(Debug, Clone)]
pub enum PmiChannel {
    /// An inherited socket (`PMI_FD`), MPICH's default.
    Fd,
    /// A TCP connection to `host:port` (`PMI_PORT` + `PMI_ID`), with the
    /// random ids and job secret that authenticate it.
    Port(String, PortAuth),
}

/// What every rank of the job shares.
#[derive(Debug, Clone)]
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
    /// rivetrun's own CPU mask, given to unbound ranks once any rank is bound
    /// (ranks inherit the mask of the thread that starts them).
    pub default_affinity: Option<libc::cpu_set_t>,
    /// Processes of a spawn: `PMI_SPAWNED=1`, and no stdin for any of them.
    pub spawned: bool,
}

/// What rank-specific placement the launcher decided.
#[derive(Debug, Default, Clone)]
pub struct RankPlace {
    pub local_rank: u32,
    pub local_size: u32,
    /// CPU set the rank is bound to from its first instruction, if any.
    pub affinity: Option<libc::cpu_set_t>,
}

/// A started rank, with the parent's ends of its channels.
pub struct Started {
    pub child: forkexec::Process,
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

/// One process to start: its job, its rank (index) in it, its place, and
/// its own variables (PMIx's).
pub type Proc<'a> = (&'a JobSpec, u32, &'a RankPlace, &'a [(String, String)]);

/// Start every process of `procs`, all or none, and the process at which
/// it failed (its position in `procs`) with why.
///
/// All are forked first and their execs awaited together (`forkexec`):
/// waiting for each exec before the next fork cost a scheduler period per
/// rank on a busy machine. Each child gets the nice value `priority` says
/// right after its fork. On a failure (a fork, a binding, or an exec: the
/// lowest such position is reported) every process already forked is killed
/// and reaped before this returns.
pub fn start_all<'a>(
    procs: impl IntoIterator<Item = Proc<'a>>,
    priority: &Priority,
) -> Result<Vec<Started>, (usize, LaunchError)> {
    let (started, execs) = fork_all(procs, priority);
    match execs.wait() {
        Ok(()) => Ok(started),
        Err(f) => {
            for mut s in started {
                s.child.kill_and_reap();
            }
            Err(f)
        }
    }
}

/// The exec results still to come of processes [`fork_all`] forked.
pub struct Execs {
    batch: Result<forkexec::Batch, std::io::Error>,
    /// Each forked process's rank and program, by position.
    who: Vec<(u32, String)>,
    /// A start that failed before its fork, and its position.
    early: Option<(usize, LaunchError)>,
}

impl Execs {
    /// Wait until every forked process has exec'd or failed to; the lowest
    /// position that failed (an exec, or a start before its fork) and why.
    /// Nothing is killed: that is the caller's to do.
    pub fn wait(self) -> Result<(), (usize, LaunchError)> {
        let failed = match self.batch {
            Ok(batch) => batch.wait_execs(),
            Err(e) => Err(e),
        };
        match failed {
            Ok(failed) => match failed.into_iter().next() {
                Some((index, err)) => {
                    let (rank, program) = self.who[index as usize].clone();
                    Err((index as usize, LaunchError::Spawn { program, rank, err }))
                }
                None => self.early.map_or(Ok(()), Err),
            },
            Err(e) => Err((0, LaunchError::Io(e))),
        }
    }
}

/// Fork every process of `procs` without waiting for any exec: those
/// forked (up to the first that could not be), and their exec results to
/// wait for. A caller can hand each process its PMI service before the
/// results are in, so early ranks are served while later ones exec.
pub fn fork_all<'a>(
    procs: impl IntoIterator<Item = Proc<'a>>,
    priority: &Priority,
) -> (Vec<Started>, Execs) {
    let mut started: Vec<Started> = Vec::new();
    let mut execs = Execs {
        batch: forkexec::Batch::new(),
        who: Vec::new(),
        early: None,
    };
    let Ok(batch) = execs.batch.as_mut() else {
        return (started, execs);
    };
    for (i, (job, rank, place, extra_env)) in procs.into_iter().enumerate() {
        match fork_one(batch, job, rank, place, extra_env, priority.timer_slack_ns) {
            Ok(s) => {
                priority.reset_child(s.child.id());
                started.push(s);
                execs.who.push((rank, job.program.display().to_string()));
            }
            Err(e) => {
                execs.early = Some((i, e));
                break;
            }
        }
    }
    (started, execs)
}

/// Fork rank `rank` of the job into `batch` without waiting for its exec.
fn fork_one(
    batch: &mut forkexec::Batch,
    job: &JobSpec,
    rank: u32,
    place: &RankPlace,
    extra_env: &[(String, String)],
    timer_slack_ns: Option<u64>,
) -> Result<Started, LaunchError> {
    let mut env = job.env.clone();
    let mut set = |k: &str, v: String| env.push((k.into(), v.into()));
    set("PMI_RANK", rank.to_string());
    set("PMI_SIZE", job.size.to_string());
    set("MPI_LOCALRANKID", place.local_rank.to_string());
    set("MPI_LOCALNRANKS", place.local_size.to_string());
    // Rivet ranks name their shm segments after it (see `ShmSweep`).
    set("RIVET_JOBID", std::process::id().to_string());
    for (k, v) in extra_env {
        set(k, v.clone());
    }
    if job.spawned {
        // Hydra sets it too; MPICH then connects to its parent.
        set("PMI_SPAWNED", "1".into());
    }
    // The child's end must survive exec. Only this thread forks, and it
    // closes this end right after the fork, so no other child inherits it.
    let mut child_end = None;
    let mut pmi = None;
    match &job.channel {
        PmiChannel::Fd => {
            let (parent, child) = inheritable_socketpair().map_err(LaunchError::Io)?;
            set("PMI_FD", child.as_raw_fd().to_string());
            pmi = Some(parent);
            child_end = Some(child);
        }
        PmiChannel::Port(addr, auth) => {
            let id = auth.ids.get(rank as usize).copied().unwrap_or(-1);
            set("PMI_PORT", addr.clone());
            set("PMI_ID", id.to_string());
            set(PORT_SECRET_ENV, auth.secret.clone());
        }
    }
    // Every rank runs in a session of its own (so also a process group of
    // its own: the teardown's kill(-pid) reaches what the rank forks), as
    // Hydra's proxy does: with the kernel's autogroup scheduling (on by
    // default), each session shares the CPUs fairly with other sessions, so
    // a job's ranks are not squeezed into the one share of rivetrun's
    // session on a busy machine (a 64-rank MPICH start-up on 2 shared cores
    // took 2.4-4x Hydra's time that way, the CPU half idle). It dies with
    // the forking thread (`die_with_launcher`); `forkexec` does both.
    let spec = forkexec::Spec {
        program: job.program.clone(),
        argv0: job.argv0.clone(),
        args: job.args.clone(),
        inherit_env: !job.clear_env,
        env,
        wdir: job.wdir.clone(),
        stdin: rank == 0 && !job.spawned,
        timer_slack_ns,
    };
    // A process starts with the CPU mask of the thread that created it, so
    // binding needs no code between fork and exec.
    if let Some(mask) = place.affinity.as_ref().or(job.default_affinity.as_ref()) {
        set_thread_affinity(mask).map_err(|err| LaunchError::Bind { rank, err })?;
    }
    let forked = batch.fork(&spec).map_err(|err| LaunchError::Spawn {
        program: job.program.display().to_string(),
        rank,
        err,
    })?;
    drop(child_end); // the child has its copy
                     // A PMIx client of rivetrun's server: known by its pid once it connects.
    let pmix_var = |name: &str| extra_env.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    if let (Some(ns), Some(r)) = (pmix_var("PMIX_NAMESPACE"), pmix_var("PMIX_RANK")) {
        if let Ok(r) = r.parse() {
            crate::pmix_host::client_started(ns, r, forked.process.id());
        }
    }
    Ok(Started {
        child: forked.process,
        pmi,
        stdin: forked.stdin,
        stdout: forked.stdout,
        stderr: forked.stderr,
    })
}

/// The started process gets SIGKILL when rivetrun dies, however it dies
/// (`kill -9` included): nothing of a job outlives its launcher.
///
/// The parent-death signal fires when the *thread* that forked exits, so
/// ranks and spawned processes must be started by a thread that lives as
/// long as rivetrun: the main thread, which runs the supervisor. The
/// process (or a rank's engine, which also watches its PMI connection) may
/// still fork children of its own; those are reached by the process-group
/// kill of a teardown, or by the engine's watch, not by this.
pub(crate) fn die_with_launcher(cmd: &mut Command) {
    // SAFETY: getpid takes no pointers.
    let launcher = unsafe { libc::getpid() };
    // SAFETY: the closure runs between fork and exec and calls only
    // async-signal-safe system calls (prctl, getppid, _exit), touching no
    // memory but its captured integer.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // rivetrun died before the signal was armed: go at once.
            if libc::getppid() != launcher {
                libc::_exit(1);
            }
            Ok(())
        })
    };
}

/// rivetrun's scheduling priority relative to its ranks.
///
/// Every rank waits on rivetrun's PMI answers, and on two cores a rank woken
/// by an answer preempts rivetrun before it has answered the others: two
/// context switches per message. Where allowed (root or CAP_SYS_NICE),
/// rivetrun runs a little ahead of its ranks (nice -5), and each rank is put
/// back to the nice value rivetrun was started with.
///
/// Also the ranks' timer slack: where they outnumber the CPUs, a rank that
/// waits in short sleeps (Open MPI's waits in `MPI_Init` and `MPI_Finalize`
/// sleep 100 µs at a time; the kernel's default slack is 50 µs) wakes
/// thousands of times a second, each wake taking a CPU from a rank still
/// working. With [`Priority::slack_when_oversubscribed`] each rank gets
/// [`Priority::OVERSUBSCRIBED_SLACK_NS`], so such wakes come in batches
/// (sleeps and timeouts may end up to that much later).
pub struct Priority {
    original: Option<i32>,
    /// The ranks' timer slack (None: rivetrun's own, inherited).
    timer_slack_ns: Option<u64>,
}

impl Priority {
    pub const BOOST: i32 = 5;

    /// Timer slack of oversubscribed ranks. An Open MPI hello of 32 ranks
    /// on 2 CPUs (`perf stat` of the whole job, 3 rounds): 2.9-3.7 s of CPU
    /// and 41-59k sleeps with the default 50 µs, 2.3-2.9 s and 8-11k with
    /// 1 ms; 5 ms saved little more CPU and no time.
    pub const OVERSUBSCRIBED_SLACK_NS: u64 = 1_000_000;

    /// Give ranks [`Self::OVERSUBSCRIBED_SLACK_NS`] when `ranks_here`
    /// outnumber the CPUs rivetrun may use.
    pub fn slack_when_oversubscribed(&mut self, ranks_here: usize) {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if ranks_here > cpus {
            self.timer_slack_ns = Some(Self::OVERSUBSCRIBED_SLACK_NS);
        }
    }

    pub fn raise_own() -> Priority {
        // SAFETY: getpriority/setpriority take no pointers. errno is cleared
        // first because -1 is a valid priority.
        let original = unsafe {
            *libc::__errno_location() = 0;
            let nice = libc::getpriority(libc::PRIO_PROCESS, 0);
            if nice == -1 && *libc::__errno_location() != 0 {
                return Priority {
                    original: None,
                    timer_slack_ns: None,
                };
            }
            nice
        };
        // SAFETY: as above.
        let raised =
            unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, original - Self::BOOST) } == 0;
        Priority {
            original: raised.then_some(original),
            timer_slack_ns: None,
        }
    }

    /// Give a started rank the nice value rivetrun itself was started with.
    pub fn reset_child(&self, pid: u32) {
        if let Some(nice) = self.original {
            // SAFETY: setpriority takes no pointers; `pid` is our child.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, pid, nice) };
        }
    }
}

/// A socket pair whose second end is inherited across exec.
fn inheritable_socketpair() -> std::io::Result<(UnixStream, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two fds into the array it is given.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and nothing else owns them.
    let (parent, child) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on an fd we own; no memory is passed.
    if unsafe { libc::fcntl(child.as_raw_fd(), libc::F_SETFD, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((UnixStream::from(parent), child))
}

/// Bind the calling thread, and so the processes it starts, to `mask`.
pub fn set_thread_affinity(mask: &libc::cpu_set_t) -> std::io::Result<()> {
    crate::topology::bind_self(mask)
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
