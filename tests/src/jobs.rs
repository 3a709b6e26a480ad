//! Running jobs with a deadline under a unique tag (rivetrun's and Open
//! MPI's `mpirun` command lines), finding and killing what a job left
//! behind, and the outside services some tests need (a name server, a
//! one-node Slurm).

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::build::{bin, bin_dir, workspace_root};

/// How a job ended.
#[derive(Debug)]
pub struct Outcome {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Exit status, time taken and both outputs, for assertion messages.
    pub fn show(&self) -> String {
        format!(
            "exit {:?} after {:?}\nstdout:\n{}\nstderr:\n{}",
            self.status, self.elapsed, self.stdout, self.stderr
        )
    }
}

/// Run a launcher command to completion with a deadline. The command's
/// process tree is tagged; after it ends (or is killed at the deadline),
/// every process still carrying the tag is killed and reported by panicking,
/// so a leak fails the test instead of lingering.
/// Its stdin is /dev/null.
pub fn run_job(mut cmd: Command, deadline: Duration) -> Outcome {
    cmd.stdin(Stdio::null());
    run_job_with(&mut cmd, deadline, |_| {})
}

/// Like `run_job`, with a hook that runs once the launcher has started (given
/// its pid); stdin is whatever the caller set.
pub fn run_job_with(
    cmd: &mut Command,
    deadline: Duration,
    after_start: impl FnOnce(u32),
) -> Outcome {
    let tag = unique_tag();
    cmd.env("RIVET_TEST_TAG", &tag)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let out_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    after_start(child.id());
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the launcher") {
            break Some(status);
        }
        if start.elapsed() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let timed_out = status.is_none();
    let status = status.unwrap_or_else(|| {
        let _ = child.kill();
        child.wait().expect("reaping the launcher")
    });
    let elapsed = start.elapsed();
    let leaked = kill_tagged(&tag);
    let stdout = String::from_utf8_lossy(&out_reader.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned();
    assert!(
        !timed_out,
        "job {cmd:?} did not end within {deadline:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        leaked.is_empty(),
        "processes of the job outlived it: {leaked:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    Outcome {
        status,
        stdout,
        stderr,
        elapsed,
    }
}

fn unique_tag() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Live (non-zombie) processes whose environment has `RIVET_TEST_TAG=tag`.
pub fn tagged_processes(tag: &str) -> Vec<(u32, String)> {
    let needle = format!("RIVET_TEST_TAG={tag}");
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if !environ
            .split(|&b| b == 0)
            .any(|var| var == needle.as_bytes())
        {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // The state follows the parenthesised command name.
        let state = stat
            .rsplit(") ")
            .next()
            .and_then(|s| s.chars().next())
            .unwrap_or('?');
        if state == 'Z' || state == 'X' {
            continue;
        }
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        found.push((pid, comm.trim().to_string()));
    }
    found
}

/// Kill (SIGKILL) and return whatever still carries the tag, after a short
/// grace for processes that are already on their way out.
fn kill_tagged(tag: &str) -> Vec<(u32, String)> {
    let settle = Instant::now();
    let mut left = tagged_processes(tag);
    while !left.is_empty() && settle.elapsed() < Duration::from_millis(500) {
        std::thread::sleep(Duration::from_millis(20));
        left = tagged_processes(tag);
    }
    for (pid, _) in &left {
        // SAFETY: kill(2) takes no pointers.
        unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
    }
    left
}

/// A `rivetrun` command with the given arguments.
pub fn rivetrun(args: &[&str]) -> Command {
    let mut cmd = Command::new(bin("rivetrun"));
    cmd.args(args);
    cmd
}

/// `mpirun.openmpi -n N [-x VAR=VALUE...] PROGRAM ARGS` (as root, more
/// ranks than cores allowed; the test tag forwarded for the leak check).
pub fn mpirun_openmpi(n: u32, env: &[&str], program: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("mpirun.openmpi");
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-n",
        &n.to_string(),
    ])
    .args(["-x", "RIVET_TEST_TAG"]);
    for e in env {
        cmd.args(["-x", e]);
    }
    cmd.arg(bin(program)).args(args);
    cmd
}

/// A one-node Slurm on this machine: `.ci/local-slurm` starts one (munged,
/// slurmctld, slurmd; they keep running) unless `sinfo` already answers.
/// Bounded by `timeout 90`; a Slurm that does not come up fails the test.
pub fn slurm_up() {
    static UP: OnceLock<()> = OnceLock::new();
    UP.get_or_init(|| {
        // Not a pipe: the daemons would hold it open.
        let log = bin_dir().join("local-slurm.log");
        let file = std::fs::File::create(&log).unwrap();
        let status = Command::new("timeout")
            .args(["90", "bash"])
            .arg(workspace_root().join(".ci/local-slurm"))
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .status()
            .expect("running .ci/local-slurm");
        assert!(
            status.success(),
            "no one-node Slurm ({status}); .ci/install installs slurm-wlm and munge:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    });
}

/// `rivetrun --name-server` in the background (its `HOST:PORT` in `addr`);
/// killed on drop, or stopped with SIGTERM by `stop`.
pub struct NameServer {
    pub child: std::process::Child,
    pub addr: String,
}

impl NameServer {
    pub fn start() -> NameServer {
        let mut child = rivetrun(&["--name-server"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting rivetrun --name-server");
        let mut line = String::new();
        let out = child.stdout.take().expect("piped");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line)
            .expect("reading the name server's address");
        let addr = line.trim().to_string();
        assert!(addr.contains(':'), "name server printed {line:?}");
        NameServer { child, addr }
    }

    /// SIGTERM, and its exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().expect("reaping the name server");
        std::mem::forget(self);
        status
    }
}

impl Drop for NameServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The PMIx servers' directories in the temp dir (`rivet-<pid>-pmix-*`;
/// namespace hosts share it): what a job must not leave behind.
pub fn pmix_dirs() -> Vec<String> {
    std::fs::read_dir(std::env::temp_dir())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("rivet-") && n.contains("-pmix-"))
                .collect()
        })
        .unwrap_or_default()
}

/// What each rank of `taskset -c CPU rivetrun ARGS -n N sh -c 'echo
/// KEY=EXPR'` printed after `KEY=`, CPU being the first this process may
/// use: from N = 2 the ranks outnumber rivetrun's CPUs.
pub fn ranks_on_one_cpu(args: &[&str], n: u32, key: &str, expr: &str) -> Vec<String> {
    let cpu = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|l| l.trim().to_string())
        })
        .and_then(|l| rivet_pmi::topology::parse_cpu_list(&l).ok())
        .and_then(|cpus| cpus.first().copied())
        .expect("this process's CPU list");
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", &cpu.to_string()]).arg(bin("rivetrun"));
    cmd.args(args)
        .args(["-n", &n.to_string()])
        .args(["sh", "-c", &format!("echo {key}={expr}")]);
    let o = run_job(cmd, Duration::from_secs(60));
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let prefix = format!("{key}=");
    let seen: Vec<String> = o
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .map(str::to_string)
        .collect();
    assert_eq!(seen.len(), n as usize, "{}", o.show());
    seen
}
