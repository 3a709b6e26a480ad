//! Starting many processes at once: fork each without waiting for its exec,
//! then learn which execs failed.
//!
//! `std::process::Command::spawn` waits, after each fork, until the child
//! has exec'd (it reads a close-on-exec pipe). On a busy machine that wait
//! is a whole scheduler period per process, since a new task starts behind
//! every runnable one: a proxy starting 64 ranks one after the other among
//! ranks already busy in their own start-up took 6-7 s where Hydra's proxy,
//! which does not wait, took 0.3 s. A [`Batch`] forks every process first;
//! all of them then reach exec concurrently, and [`Batch::wait_execs`]
//! reads, from one close-on-exec pipe every child inherits, the record of
//! each child whose start failed (its index in the batch and the errno).
//! The pipe ends (EOF) once every child has exec'd or exited, so
//! exec-failure reporting stays exact: which process, which error.
//!
//! Between fork and exec the child only makes async-signal-safe system
//! calls on memory prepared before the fork: stdio `dup2`, `chdir`, an
//! empty signal mask and SIGPIPE back to default (as `std` does), `setsid`
//! (a session, so a process group, of its own), `PR_SET_PDEATHSIG` armed
//! against the forking thread, the timer slack if one is asked for
//! (`PR_SET_TIMERSLACK`), then `execvpe`.

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ChildStderr, ChildStdin, ChildStdout, ExitStatus};

/// What one process runs with.
pub struct Spec {
    pub program: PathBuf,
    pub argv0: OsString,
    pub args: Vec<OsString>,
    /// Start from rivetrun's own environment (else from an empty one).
    pub inherit_env: bool,
    /// Set in order; a later value of a name wins.
    pub env: Vec<(OsString, OsString)>,
    pub wdir: Option<PathBuf>,
    /// A pipe to its stdin (else `/dev/null`).
    pub stdin: bool,
    /// Its timer slack in ns (`PR_SET_TIMERSLACK`, kept across exec; else
    /// rivetrun's own).
    pub timer_slack_ns: Option<u64>,
}

/// A forked process (not yet reaped).
#[derive(Debug)]
pub struct Process {
    pid: u32,
}

impl Process {
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// Wait for it to end and reap it.
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        let mut raw = 0;
        loop {
            // SAFETY: waitpid writes the status into a local we own; the pid
            // is our unreaped child.
            let rc = unsafe { libc::waitpid(self.pid as libc::pid_t, &mut raw, 0) };
            if rc == self.pid as libc::pid_t {
                return Ok(ExitStatus::from_raw(raw));
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }

    /// SIGKILL it and its process group, then reap it.
    pub fn kill_and_reap(&mut self) {
        let pid = self.pid as libc::pid_t;
        // SAFETY: kill(2) takes no pointers; the pid is our unreaped child
        // and the group, if it has one yet, its own.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
            libc::kill(pid, libc::SIGKILL);
        }
        let _ = self.wait();
    }
}

/// A forked process and the parent's ends of its stdio.
pub struct Forked {
    pub process: Process,
    pub stdin: Option<ChildStdin>,
    pub stdout: ChildStdout,
    pub stderr: ChildStderr,
}

/// Processes forked together; their exec results come back through one pipe.
pub struct Batch {
    read: File,
    /// Inherited by every child (close-on-exec); dropped before reading.
    write: OwnedFd,
    count: u32,
    launcher: libc::pid_t,
}

/// One record in the pipe: the child's index in the batch, then errno.
const RECORD: usize = 8;

impl Batch {
    pub fn new() -> io::Result<Batch> {
        let (read, write) = pipe()?;
        // SAFETY: getpid takes no pointers.
        let launcher = unsafe { libc::getpid() };
        Ok(Batch {
            read: File::from(read),
            write,
            count: 0,
            launcher,
        })
    }

    /// Fork a process running `spec`, without waiting for its exec; its
    /// index in the batch is the number of processes forked before it. An error means no
    /// process was made. File descriptors the child must inherit have to be
    /// open without close-on-exec now, and closed by the caller right after.
    pub fn fork(&mut self, spec: &Spec) -> io::Result<Forked> {
        let index = self.count;
        let program = cstring(spec.program.as_os_str().as_bytes())?;
        let mut argv = vec![cstring(spec.argv0.as_bytes())?];
        for a in &spec.args {
            argv.push(cstring(a.as_bytes())?);
        }
        let mut vars: BTreeMap<OsString, OsString> = if spec.inherit_env {
            std::env::vars_os()
                .filter(|(k, _)| !crate::own_env::is_own(k))
                .collect()
        } else {
            BTreeMap::new()
        };
        for (k, v) in &spec.env {
            vars.insert(k.clone(), v.clone());
        }
        let mut envp = Vec::with_capacity(vars.len());
        for (k, v) in &vars {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            envp.push(cstring(&kv)?);
        }
        let wdir = match &spec.wdir {
            Some(d) => Some(cstring(d.as_os_str().as_bytes())?),
            None => None,
        };
        let argv_ptrs: Vec<*const libc::c_char> = argv
            .iter()
            .map(|a| a.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let envp_ptrs: Vec<*const libc::c_char> = envp
            .iter()
            .map(|a| a.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let (stdin_parent, stdin_child) = if spec.stdin {
            let (r, w) = pipe()?;
            (Some(w), r)
        } else {
            let null = File::open("/dev/null")?; // close-on-exec, as std opens
            (None, OwnedFd::from(null))
        };
        let (stdout_parent, stdout_child) = pipe()?;
        let (stderr_parent, stderr_child) = pipe()?;
        let child = Child {
            program: program.as_ptr(),
            argv: argv_ptrs.as_ptr(),
            envp: envp_ptrs.as_ptr(),
            wdir: wdir.as_ref().map_or(std::ptr::null(), |d| d.as_ptr()),
            stdio: [
                stdin_child.as_raw_fd(),
                stdout_child.as_raw_fd(),
                stderr_child.as_raw_fd(),
            ],
            report: self.write.as_raw_fd(),
            index,
            launcher: self.launcher,
            timer_slack: spec.timer_slack_ns.unwrap_or(0) as libc::c_ulong,
        };
        // SAFETY: fork takes no pointers. In the child only `Child::exec`
        // runs, which makes async-signal-safe calls on memory prepared above
        // and never returns.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: we are the freshly forked child (see `Child::exec`).
            unsafe { child.exec() }
        }
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        self.count += 1;
        // The child ends close here (drop), so each pipe ends with its child.
        drop((stdin_child, stdout_child, stderr_child));
        Ok(Forked {
            process: Process { pid: pid as u32 },
            stdin: stdin_parent.map(ChildStdin::from),
            stdout: ChildStdout::from(stdout_parent),
            stderr: ChildStderr::from(stderr_parent),
        })
    }

    /// Wait until every forked process has exec'd or failed to start; the
    /// failures as (index in the batch, error), in index order. The failed
    /// ones have exited (status 127) and are still to be reaped.
    pub fn wait_execs(self) -> io::Result<Vec<(u32, io::Error)>> {
        let Batch {
            mut read, write, ..
        } = self;
        drop(write);
        let mut bytes = Vec::new();
        loop {
            match read.read_to_end(&mut bytes) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        let mut failed: Vec<(u32, io::Error)> = bytes
            .chunks_exact(RECORD)
            .map(|r| {
                let index = u32::from_ne_bytes([r[0], r[1], r[2], r[3]]);
                let errno = i32::from_ne_bytes([r[4], r[5], r[6], r[7]]);
                (index, io::Error::from_raw_os_error(errno))
            })
            .collect();
        failed.sort_by_key(|f| f.0);
        Ok(failed)
    }
}

/// What the child needs, as raw pointers into memory the parent prepared.
struct Child {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    wdir: *const libc::c_char,
    stdio: [RawFd; 3],
    report: RawFd,
    index: u32,
    launcher: libc::pid_t,
    /// 0: left as inherited.
    timer_slack: libc::c_ulong,
}

impl Child {
    /// Set the child up and exec; on failure report `(index, errno)` and
    /// `_exit(127)`.
    ///
    /// # Safety
    /// Only in the child right after `fork`, with every pointer valid (the
    /// parent's memory, copied by fork).
    unsafe fn exec(&self) -> ! {
        let fail = |errno: i32| -> ! {
            let mut record = [0u8; RECORD];
            record[..4].copy_from_slice(&self.index.to_ne_bytes());
            record[4..].copy_from_slice(&errno.to_ne_bytes());
            // SAFETY: write from a local array, then _exit; both
            // async-signal-safe. A short write cannot happen (< PIPE_BUF).
            unsafe {
                libc::write(self.report, record.as_ptr().cast(), RECORD);
                libc::_exit(127)
            }
        };
        let errno = || {
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO)
        };
        // SAFETY: each call is an async-signal-safe system call on fds the
        // parent opened for us or on the C strings it prepared.
        unsafe {
            for (target, &fd) in self.stdio.iter().enumerate() {
                if libc::dup2(fd, target as RawFd) == -1 {
                    fail(errno());
                }
            }
            if !self.wdir.is_null() && libc::chdir(self.wdir) == -1 {
                fail(errno());
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            if libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0
                || libc::signal(libc::SIGPIPE, libc::SIG_DFL) == libc::SIG_ERR
            {
                fail(errno());
            }
            // A session of its own (see `launch::start_all`).
            if libc::setsid() == -1 {
                fail(errno());
            }
            // Dies with the thread that forked it (see `launch::die_with_launcher`).
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                fail(errno());
            }
            if libc::getppid() != self.launcher {
                libc::_exit(1); // the launcher died before the signal was armed
            }
            // Best effort: a slack refused leaves the inherited one.
            if self.timer_slack != 0 {
                libc::prctl(libc::PR_SET_TIMERSLACK, self.timer_slack);
            }
            // As std does: a script without `#!` still runs through /bin/sh.
            libc::execvpe(self.program, self.argv, self.envp);
            fail(errno())
        }
    }
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "nul byte found in provided data",
        )
    })
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and nothing else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(program: &str, args: &[&str]) -> Spec {
        Spec {
            program: program.into(),
            argv0: program.into(),
            args: args.iter().map(Into::into).collect(),
            inherit_env: false,
            env: vec![("RIVET_FORKEXEC_TEST".into(), "yes".into())],
            wdir: Some("/".into()),
            stdin: false,
            timer_slack_ns: None,
        }
    }

    #[test]
    fn starts_all_then_reports_exactly_which_failed() {
        let dir = std::env::temp_dir().join(format!("rivet-forkexec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad-interpreter");
        std::fs::write(&bad, "#!/no/such/interpreter\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut batch = Batch::new().unwrap();
        let mut ok = batch
            .fork(&spec("/bin/sh", &["-c", "echo $RIVET_FORKEXEC_TEST $PWD"]))
            .unwrap();
        let mut failed = batch.fork(&spec(bad.to_str().unwrap(), &[])).unwrap();
        let mut missing = batch.fork(&spec("/no/such/program", &[])).unwrap();
        let errors = batch.wait_execs().unwrap();
        let summary: Vec<(u32, Option<i32>)> =
            errors.iter().map(|(i, e)| (*i, e.raw_os_error())).collect();
        assert_eq!(summary, [(1, Some(libc::ENOENT)), (2, Some(libc::ENOENT))]);
        let mut out = String::new();
        ok.stdout.read_to_string(&mut out).unwrap();
        assert_eq!(out, "yes /\n");
        assert_eq!(ok.process.wait().unwrap().code(), Some(0));
        assert_eq!(failed.process.wait().unwrap().code(), Some(127));
        missing.process.kill_and_reap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
