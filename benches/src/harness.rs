//! What every harness (`launch-time`, `compare`) shares: finding programs,
//! running one job with a time limit while measuring its wall time and the
//! CPU load of everything else on the machine, and running a set of jobs
//! interleaved, rep after rep, so Rivet and its peers see the same machine.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::placement::{self, Probe};
use crate::progress::Progress;

/// A command line with extra environment, printable for logs.
#[derive(Debug, Clone)]
pub struct CmdSpec {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub env: Vec<(String, String)>,
}

impl CmdSpec {
    pub fn new(program: impl Into<PathBuf>) -> CmdSpec {
        CmdSpec {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    pub fn arg(mut self, a: impl AsRef<OsStr>) -> CmdSpec {
        self.args.push(a.as_ref().to_owned());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> CmdSpec {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn env(mut self, k: &str, v: &str) -> CmdSpec {
        self.env.push((k.into(), v.into()));
        self
    }

    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.args);
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }
}

/// `text` as a shell word: as it is if it has only characters the shell
/// takes literally, else in single quotes (e.g. `'tcp;ofi_rxm'`).
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-+./,:=@%".contains(c));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

impl std::fmt::Display for CmdSpec {
    /// A shell line that would run it: `K=V ... program args`, words quoted where needed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (k, v) in &self.env {
            write!(f, "{k}={} ", shell_word(v))?;
        }
        write!(f, "{}", shell_word(&self.program.to_string_lossy()))?;
        for a in &self.args {
            write!(f, " {}", shell_word(&a.to_string_lossy()))?;
        }
        Ok(())
    }
}

/// `name` if it is a path to an existing file, else the first match in PATH.
pub fn find_program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.is_file().then_some(p);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// The program `name` beside this executable if it is there, else `name`
/// (looked up in PATH when run).
pub fn beside_me(name: &str) -> PathBuf {
    if let Ok(me) = std::env::current_exe() {
        let beside = me.with_file_name(name);
        if beside.exists() {
            return beside;
        }
    }
    PathBuf::from(name)
}

/// Whether `program --version` runs and succeeds (a launcher is usable).
pub fn version_ok(program: &Path) -> bool {
    Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What a finished job left.
#[derive(Debug, Clone)]
pub struct JobOutput {
    /// From spawning the launcher to reaping it, seconds.
    pub wall: f64,
    pub stdout: String,
    pub stderr: String,
    /// CPU time used by other processes during the job, in % of all CPUs
    /// (None for jobs under 0.2 s: too short for /proc/stat's clock ticks).
    pub foreign_pct: Option<f64>,
}

/// The job gets SIGTERM when rivet-bench (the thread that starts and waits
/// for it) dies, so a killed `compare` leaves no launcher, hence no ranks,
/// behind: launchers pass SIGTERM on to their ranks.
fn ends_with_me(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the child between fork and exec and makes
    // only async-signal-safe calls (prctl, getppid, kill, getpid).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() != parent {
                libc::kill(libc::getpid(), libc::SIGTERM);
            }
            Ok(())
        })
    };
}

/// Run a job to completion (or until `timeout`, then SIGTERM, and SIGKILL
/// 5 s later). `Err` if it cannot start, times out or exits non-zero; the
/// message ends with the tail of its stderr.
pub fn run_job(spec: &CmdSpec, timeout: Duration) -> Result<JobOutput, String> {
    match run_job_lenient(spec, timeout)? {
        (out, None) => Ok(out),
        (_, Some(problem)) => Err(problem),
    }
}

/// As `run_job`, but a job that times out or exits non-zero still gives
/// its output (what it printed before), with the problem beside it; `Err`
/// only if it cannot be started or waited for.
pub fn run_job_lenient(
    spec: &CmdSpec,
    timeout: Duration,
) -> Result<(JobOutput, Option<String>), String> {
    let before = CpuSnapshot::take();
    let start = Instant::now();
    let mut command = spec.command();
    ends_with_me(&mut command);
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {spec}: {e}"))?;
    let pid = child.id();
    let out_reader = drain(child.stdout.take().expect("piped"));
    let err_reader = drain(child.stderr.take().expect("piped"));
    let (tx, rx) = mpsc::channel::<(std::io::Result<ExitStatus>, Duration)>();
    std::thread::spawn(move || {
        let status = child.wait();
        let _ = tx.send((status, start.elapsed()));
    });
    let mut timed_out = false;
    let (status, wall) = match rx.recv_timeout(timeout) {
        Ok(done) => done,
        Err(_) => {
            timed_out = true;
            // SAFETY: plain syscall on the pid of our own child, which the
            // waiter thread has not reaped (it would have answered).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
            match rx.recv_timeout(Duration::from_secs(5)) {
                Ok(done) => done,
                Err(_) => {
                    // SAFETY: as above.
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                    rx.recv().map_err(|_| format!("lost track of {spec}"))?
                }
            }
        }
    };
    let after = CpuSnapshot::take();
    // A rank that outlives its launcher could hold the pipes open: give up
    // on its output after a while rather than hang.
    let pipe_wait = Duration::from_secs(10);
    let stdout = out_reader.recv_timeout(pipe_wait).unwrap_or_default();
    let stderr = err_reader.recv_timeout(pipe_wait).unwrap_or_default();
    let wall = wall.as_secs_f64();
    let status = status.map_err(|e| format!("waiting for {spec}: {e}"))?;
    let tail = || {
        let lines: Vec<&str> = stderr.lines().collect();
        let tail = lines[lines.len().saturating_sub(8)..].join("\n  ");
        if tail.is_empty() {
            String::new()
        } else {
            format!("; stderr:\n  {tail}")
        }
    };
    let problem = if timed_out {
        Some(format!(
            "timed out after {} s: {spec}{}",
            timeout.as_secs(),
            tail()
        ))
    } else if !status.success() {
        Some(format!("{spec} failed ({status}){}", tail()))
    } else {
        None
    };
    let out = JobOutput {
        wall,
        stdout,
        stderr,
        foreign_pct: match (before, after) {
            (Some(a), Some(b)) => a.foreign_pct(&b, wall),
            _ => None,
        },
    };
    Ok((out, problem))
}

/// Read a pipe to its end on a thread of its own; the text arrives on the channel.
pub(crate) fn drain(mut pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = pipe.read_to_end(&mut s);
        let _ = tx.send(String::from_utf8_lossy(&s).into_owned());
    });
    rx
}

/// Machine-wide busy CPU time (/proc/stat) and our own and our reaped
/// children's CPU time (getrusage), to tell how busy everyone else was.
struct CpuSnapshot {
    busy_ticks: u64,
    own_secs: f64,
}

impl CpuSnapshot {
    fn take() -> Option<CpuSnapshot> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        // user nice system idle iowait irq softirq steal
        let busy_ticks = f.first()? + f.get(1)? + f.get(2)? + f.get(5)? + f.get(6)? + f.get(7)?;
        let own_secs = rusage_secs(libc::RUSAGE_SELF) + rusage_secs(libc::RUSAGE_CHILDREN);
        Some(CpuSnapshot {
            busy_ticks,
            own_secs,
        })
    }

    fn foreign_pct(&self, later: &CpuSnapshot, wall: f64) -> Option<f64> {
        // SAFETY: sysconf has no memory-safety preconditions.
        let (hz, ncpu) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_NPROCESSORS_ONLN),
            )
        };
        // /proc/stat counts clock ticks (10 ms): say nothing about shorter runs.
        if hz <= 0 || ncpu <= 0 || wall < 0.2 {
            return None;
        }
        let busy = later.busy_ticks.saturating_sub(self.busy_ticks) as f64 / hz as f64;
        let own = later.own_secs - self.own_secs;
        Some((100.0 * (busy - own) / (wall * ncpu as f64)).clamp(0.0, 100.0))
    }
}

fn rusage_secs(who: libc::c_int) -> f64 {
    // SAFETY: getrusage fills the zeroed struct we own.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(who, &mut ru) != 0 {
            return 0.0;
        }
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// One job of an interleaved set.
#[derive(Debug, Clone)]
pub struct Cell {
    /// For progress lines, e.g. "latency/mpich".
    pub label: String,
    pub spec: CmdSpec,
    /// Run it once, untimed, before its group's first timed run.
    pub warmup: bool,
}

/// How reps and groups nest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// for rep { for group { for cell } }: noise spreads over every group
    /// (run_all.sh's order).
    RepsOutermost,
    /// for group { for rep { for cell } }: one group finished before the next.
    GroupsOutermost,
}

/// The order in which cells run for rep `rep`: rotated by one each rep, so
/// no stack always runs right after another one.
pub fn rotation(len: usize, rep: u32) -> Vec<usize> {
    (0..len).map(|i| (i + rep as usize) % len.max(1)).collect()
}

/// Run every cell of every group `reps` times, interleaved, calling
/// `record(group, cell, result, probe)` after each timed run, where
/// `probe` is the CPUs' placement just before and after it
/// (`placement::probe`). `record` turns the output into samples and
/// returns a short note for the progress line (stderr, one line per run),
/// or `Err` if the output was unusable.
pub fn run_interleaved(
    groups: &[Vec<Cell>],
    reps: u32,
    order: Order,
    timeout: Duration,
    mut record: impl FnMut(usize, usize, &JobOutput, Option<Probe>) -> Result<String, String>,
) -> Loads {
    let total: usize = groups.iter().map(Vec::len).sum::<usize>() * reps as usize;
    let mut progress = Progress::new(total);
    let mut loads = Loads::default();
    let mut warmed = vec![false; groups.len()];
    let mut run_group = |g: usize, rep: u32, progress: &mut Progress, loads: &mut Loads| {
        let cells = &groups[g];
        if !warmed[g] {
            warmed[g] = true;
            for cell in cells.iter().filter(|c| c.warmup) {
                progress.start(&format!("warm-up {}", cell.label));
                match run_job(&cell.spec, timeout) {
                    Ok(o) => progress.line(&format!(
                        "rivet-bench: warm-up {}: {:.3} s",
                        cell.label, o.wall
                    )),
                    Err(e) => {
                        progress.line(&format!("rivet-bench: warm-up {}: FAILED: {e}", cell.label))
                    }
                }
            }
        }
        for c in rotation(cells.len(), rep) {
            let cell = &cells[c];
            let what = format!("rep {}/{reps} {}", rep + 1, cell.label);
            progress.start(&what);
            let prefix = format!("rivet-bench: {what}");
            let before = placement::probe();
            let job = run_job(&cell.spec, timeout);
            let probe = before
                .zip(placement::probe())
                .map(|(before, after)| Probe { before, after });
            let line = match job {
                Ok(out) => {
                    let mut load = match out.foreign_pct {
                        Some(p) => {
                            loads.samples.push(p);
                            format!(", other load {p:.0}%")
                        }
                        None => String::new(),
                    };
                    if let Some(p) = probe {
                        load += &format!(", CPUs' round trip {:.0}/{:.0} ns", p.before, p.after);
                    }
                    match record(g, c, &out, probe) {
                        Ok(note) => format!("{prefix}: {:.3} s{load}{note}", out.wall),
                        Err(e) => {
                            loads.failures += 1;
                            format!(
                                "{prefix}: BAD OUTPUT ({e}); stdout was:\n{}\nstderr was:\n{}",
                                out.stdout.trim_end(),
                                out.stderr.trim_end()
                            )
                        }
                    }
                }
                Err(e) => {
                    loads.failures += 1;
                    format!("{prefix}: FAILED: {e}")
                }
            };
            progress.finished(&line);
        }
    };
    match order {
        Order::RepsOutermost => {
            for rep in 0..reps {
                for g in 0..groups.len() {
                    run_group(g, rep, &mut progress, &mut loads);
                }
            }
        }
        Order::GroupsOutermost => {
            for g in 0..groups.len() {
                for rep in 0..reps {
                    run_group(g, rep, &mut progress, &mut loads);
                }
            }
        }
    }
    progress.finish();
    loads
}

/// Other processes' CPU load over the timed runs, and failed runs.
#[derive(Debug, Clone, Default)]
pub struct Loads {
    pub samples: Vec<f64>,
    pub failures: usize,
}

impl Loads {
    /// "other load median 2%, max 31%; 1 run over 20%", or None without data.
    pub fn describe(&self) -> Option<String> {
        let s = crate::stats::summarize(&self.samples)?;
        let busy = self.samples.iter().filter(|&&p| p > 20.0).count();
        Some(format!(
            "CPU load of other processes during the runs: median {:.0}%, max {:.0}%; {busy} of {} runs above 20%",
            s.median,
            s.max,
            self.samples.len()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_shifts_by_rep() {
        assert_eq!(rotation(3, 0), vec![0, 1, 2]);
        assert_eq!(rotation(3, 1), vec![1, 2, 0]);
        assert_eq!(rotation(3, 5), vec![2, 0, 1]);
        assert_eq!(rotation(1, 7), vec![0]);
        assert!(rotation(0, 2).is_empty());
    }

    #[test]
    fn spec_displays_like_a_shell_line() {
        let s = CmdSpec::new("mpiexec.hydra")
            .args(["-n", "2"])
            .arg("prog")
            .env("MAXSIZE", "8");
        assert_eq!(s.to_string(), "MAXSIZE=8 mpiexec.hydra -n 2 prog");
        let s = CmdSpec::new("/usr/bin/fi_pingpong")
            .args(["-p", "tcp;ofi_rxm", "it's", ""])
            .env("RIVET_OFI_PROVIDER", "tcp;ofi_rxm")
            .env("UCX_TLS", "tcp,self");
        assert_eq!(
            s.to_string(),
            "RIVET_OFI_PROVIDER='tcp;ofi_rxm' UCX_TLS=tcp,self /usr/bin/fi_pingpong -p 'tcp;ofi_rxm' 'it'\\''s' ''"
        );
    }

    #[test]
    fn jobs_report_output_failure_and_timeout() {
        let ok = run_job(
            &CmdSpec::new("/bin/sh").args(["-c", "echo out; echo err >&2"]),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(ok.stdout, "out\n");
        assert_eq!(ok.stderr, "err\n");
        assert!(ok.wall > 0.0);
        let bad = run_job(
            &CmdSpec::new("/bin/sh").args(["-c", "echo why >&2; exit 3"]),
            Duration::from_secs(10),
        )
        .unwrap_err();
        assert!(bad.contains("failed") && bad.contains("why"), "{bad}");
        let slow = run_job(
            &CmdSpec::new("/bin/sleep").arg("30"),
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(slow.contains("timed out"), "{slow}");
        assert!(run_job(&CmdSpec::new("/nonexistent/x"), Duration::from_secs(1)).is_err());
        let (out, problem) = run_job_lenient(
            &CmdSpec::new("/bin/sh").args(["-c", "echo partial; exit 3"]),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out.stdout, "partial\n");
        assert!(problem.is_some_and(|p| p.contains("failed")));
        let (out, problem) = run_job_lenient(
            &CmdSpec::new("/bin/sh").args(["-c", "echo before; exec sleep 30"]),
            Duration::from_millis(300),
        )
        .unwrap();
        assert_eq!(out.stdout, "before\n");
        assert!(problem.is_some_and(|p| p.contains("timed out")));
    }

    #[test]
    fn interleaving_runs_every_cell_every_rep() {
        let cell = |l: &str| Cell {
            label: l.into(),
            spec: CmdSpec::new("/bin/echo").arg(l),
            warmup: false,
        };
        let groups = vec![vec![cell("a"), cell("b")], vec![cell("c")]];
        let mut seen = Vec::new();
        let loads = run_interleaved(
            &groups,
            2,
            Order::RepsOutermost,
            Duration::from_secs(10),
            |g, c, out, _| {
                seen.push((g, c, out.stdout.trim().to_string()));
                Ok(String::new())
            },
        );
        assert_eq!(loads.failures, 0);
        let labels: Vec<&str> = seen.iter().map(|s| s.2.as_str()).collect();
        assert_eq!(labels, ["a", "b", "c", "b", "a", "c"]);
        let mut seen = Vec::new();
        run_interleaved(
            &groups,
            2,
            Order::GroupsOutermost,
            Duration::from_secs(10),
            |g, c, _, _| {
                seen.push((g, c));
                Err("unusable".into())
            },
        );
        assert_eq!(seen, [(0, 0), (0, 1), (0, 1), (0, 0), (1, 0), (1, 0)]);
    }
}
