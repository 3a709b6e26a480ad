//! Support for Rivet's multi-process integration tests.
//!
//! The tests start real jobs (`rivetrun`, `mpiexec.hydra`), so this crate
//! makes sure they end by themselves and leave nothing behind: every job runs
//! with a deadline, under a unique `RIVET_TEST_TAG` in its environment (which
//! the launchers pass on to the ranks), and `leftovers` finds any process
//! still carrying that tag. Jobs run one at a time (`serial`): two ranks
//! busy-polling fill this machine's two cores.
//!
//! Module map:
//!
//! - `lib.rs`: the harness: deadlines, leak checks, serialisation, every transport at thread
//!   levels SINGLE and MULTIPLE; `rank_check.rs` the test ranks' engine start (level checked)
//!   and failure reporting; `procfs.rs` a job's processes seen through `/proc` (ranks,
//!   listeners, peak memory); `netns.rs` namespace hosts for multi-host tests (netns + veth on a
//!   bridge, own address, hostname, `/etc/hosts`, the `--launcher-exec` wrapper; removed on
//!   drop); `pattern.rs` the payload patterns.
//! - `src/bin/`: the Rust test ranks (`engine_check`, `dyn_check`, `group_check`, `cancel_race`,
//!   `pmi_check`, `pmi_spawn_check`) and `no_io_uring`; `c/`: the C test programs (librivet,
//!   librivet-pmi, the MPI layer, PMIx).
//! - `tests/`: the integration tests, one file per area (launcher, engine, dynamic, group, PMI,
//!   PMI-2, PMIx, IMPI, multi-host, C APIs, the MPI layer, MPICH interop, peer benchmarks).
//!
//! What must stay true here (ARCHITECTURE.md's test invariant, in full): integration tests run
//! jobs one at a time with a deadline and fail if any process of the job outlives it; under
//! `--disable-auto-cleanup` they require that the rank they killed is the only failure rivetrun
//! reported; a job that kills no rank fails if rivetrun's `/dev/shm` sweep named anything.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod netns;
pub mod pattern;
pub mod procfs;
pub mod rank_check;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rivet::ThreadLevel;

/// Hold this for the whole of a test that starts processes.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The directory cargo puts this workspace's binaries in (target/debug).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/debug/deps/<test> -> target/debug
    exe.parent()
        .and_then(Path::parent)
        .expect("target directory")
        .to_path_buf()
}

/// Path of a workspace binary, built once per test process if needed.
pub fn bin(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        cargo_build(&[
            "-p",
            "rivet-launcher",
            "-p",
            "rivet-tests",
            "-p",
            "rivet-bench",
        ])
    });
    built(bin_dir().join(name))
}

/// `cargo build --quiet --bins ARGS` in the workspace; panics on failure.
fn cargo_build(args: &[&str]) {
    cargo_build_targets("--bins", args)
}

/// `cargo build --quiet TARGETS ARGS` in the workspace; panics on failure.
fn cargo_build_targets(targets: &str, args: &[&str]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", targets])
        .args(args)
        .current_dir(workspace_root())
        .status()
        .expect("running cargo build for the test binaries");
    assert!(status.success(), "cargo build {args:?} failed");
}

fn built(path: PathBuf) -> PathBuf {
    assert!(path.exists(), "{} was not built", path.display());
    path
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Compile an MPI C program from `tests/c/` with MPICH's `mpicc`, once.
/// `mpicc.mpich` by name: where Open MPI is installed too, plain `mpicc`
/// may be Open MPI's, whose programs do not speak PMI-1.
pub fn mpicc(source: &str) -> PathBuf {
    mpicc_with("mpicc.mpich", source, "", "mpich libmpich-dev")
}

/// The same with Open MPI's `mpicc.openmpi` (its programs speak PMIx), into
/// `NAME.openmpi`.
pub fn mpicc_openmpi(source: &str) -> PathBuf {
    mpicc_with(
        "mpicc.openmpi",
        source,
        ".openmpi",
        "openmpi-bin libopenmpi-dev",
    )
}

fn mpicc_with(compiler: &str, source: &str, suffix: &str, packages: &str) -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let src = workspace_root().join("tests/c").join(source);
    let out = bin_dir().join(format!("{}{suffix}", source.trim_end_matches(".c")));
    let fresh = match (
        out.metadata().and_then(|m| m.modified()),
        src.metadata().and_then(|m| m.modified()),
    ) {
        (Ok(o), Ok(s)) => o >= s,
        _ => false,
    };
    if !fresh {
        let status = Command::new(compiler)
            .args(["-O2", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| {
                panic!("cannot run {compiler} ({e}); install it: apt-get install {packages}")
            });
        assert!(status.success(), "{compiler} failed on {}", src.display());
    }
    out
}

/// The directory (this profile's, e.g. target/debug) holding librivet-pmi
/// as `cargo build -p rivet-pmi-capi` lays it out: the libraries,
/// `include/pmi.h` and `pkgconfig/rivet-pmi{,-static}.pc`. Built once per
/// test process.
pub fn pmi_capi_dir() -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    let dir = bin_dir();
    BUILT.get_or_init(|| {
        let mut args = vec!["-p", "rivet-pmi-capi"];
        if dir.file_name().is_some_and(|n| n == "release") {
            args.push("--release");
        }
        cargo_build_targets("--lib", &args)
    });
    dir
}

/// What `pkg-config ARGS` prints for librivet-pmi's uninstalled .pc files.
pub fn pkg_config(args: &[&str]) -> String {
    let out = Command::new("pkg-config")
        .args(args)
        .env("PKG_CONFIG_PATH", pmi_capi_dir().join("pkgconfig"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run pkg-config ({e}); apt-get install pkg-config"));
    assert!(
        out.status.success(),
        "pkg-config {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("pkg-config prints text")
}

/// Compile a C program from `tests/c/` with `cc` (C99, all warnings as
/// errors) against librivet-pmi, with the flags `pkg-config --cflags --libs
/// PACKAGE` gives (`rivet-pmi`: shared; `rivet-pmi-static`: the archive).
/// The executable is `target/<profile>/<source stem><suffix>`; compiled once
/// per test process.
pub fn cc_pmi(source: &str, package: &str, suffix: &str) -> PathBuf {
    cc_c(
        &workspace_root().join("tests/c").join(source),
        package,
        suffix,
    )
}

/// The directory holding librivet (as [`pmi_capi_dir`] for librivet-pmi):
/// the libraries, `include/rivet.h`, `pkgconfig/rivet{,-static}.pc`.
pub fn capi_dir() -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    let dir = bin_dir();
    BUILT.get_or_init(|| {
        let mut args = vec!["-p", "rivet-capi"];
        if dir.file_name().is_some_and(|n| n == "release") {
            args.push("--release");
        }
        cargo_build_targets("--lib", &args)
    });
    dir
}

/// As [`cc_pmi`], for the C program at `src` and any package whose `.pc`
/// file lies in this profile's `pkgconfig/` (`rivet`, `rivet-static`,
/// `rivet-pmi`, ...; build its library first).
pub fn cc_c(src: &Path, package: &str, suffix: &str) -> PathBuf {
    static DONE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let mut done = DONE.lock().unwrap_or_else(|p| p.into_inner());
    let stem = src
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("a C file name");
    let out = bin_dir().join(format!("{stem}{suffix}"));
    if done.contains(&out) {
        return out;
    }
    let flags = pkg_config(&["--cflags", "--libs", package]);
    let result = Command::new("cc")
        .args([
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-O2",
            "-o",
        ])
        .arg(&out)
        .arg(src)
        .args(flags.split_whitespace())
        .output()
        .unwrap_or_else(|e| panic!("cannot run cc: {e}"));
    assert!(
        result.status.success(),
        "cc {} {flags} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&result.stderr)
    );
    done.push(out.clone());
    out
}

/// The directory holding librivetmpi and `rivetcc` (and librivet, which
/// it calls), as `cargo build -p rivet-mpi -p rivet-capi` lays them out.
/// Built once per test process.
pub fn mpi_dir() -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    let dir = bin_dir();
    BUILT.get_or_init(|| {
        let mut args = vec!["-p", "rivet-mpi", "-p", "rivet-capi"];
        if dir.file_name().is_some_and(|n| n == "release") {
            args.push("--release");
        }
        cargo_build_targets("--lib", &args);
        cargo_build_targets("--bins", &args);
    });
    dir
}

/// Compile an MPI program with `rivetcc` (strict C99, warnings as errors;
/// `RIVETCC_CC=compiler` and `extra` flags as given) into
/// `target/<profile>/<stem><suffix>`, once per test process.
pub fn rivetcc(src: &Path, suffix: &str, compiler: Option<&str>, extra: &[&str]) -> PathBuf {
    static DONE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let rivetcc = mpi_dir().join("rivetcc");
    let mut done = DONE.lock().unwrap_or_else(|p| p.into_inner());
    let stem = src
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("a C file name");
    let out = bin_dir().join(format!("{stem}{suffix}"));
    if done.contains(&out) {
        return out;
    }
    let mut cmd = Command::new(&rivetcc);
    if let Some(cc) = compiler {
        cmd.env("RIVETCC_CC", cc);
    }
    let result = cmd
        .args(extra)
        .args(["-Wall", "-Wextra", "-Werror", "-O2", "-o"])
        .arg(&out)
        .arg(src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", rivetcc.display()));
    assert!(
        result.status.success(),
        "rivetcc {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&result.stderr)
    );
    done.push(out.clone());
    out
}

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

/// (name, environment) of each transport a multi-process suite runs over:
/// shared memory inside a job (tcp between jobs), tcp forced everywhere,
/// and ofi forced everywhere on the `tcp;ofi_rxm` and `shm` providers.
/// Five or more processes share two cores here, so ranks yield when idle.
pub const TRANSPORTS: [(&str, &[(&str, &str)]); 4] = [
    ("shm", &[("RIVET_YIELD", "always")]),
    ("tcp", &[("RIVET_YIELD", "always"), ("RIVET_NETMOD", "tcp")]),
    (
        "ofi tcp;ofi_rxm",
        &[
            ("RIVET_YIELD", "always"),
            ("RIVET_NETMOD", "ofi"),
            ("RIVET_OFI_PROVIDER", "tcp;ofi_rxm"),
        ],
    ),
    (
        "ofi shm",
        &[
            ("RIVET_YIELD", "always"),
            ("RIVET_NETMOD", "ofi"),
            ("RIVET_OFI_PROVIDER", "shm"),
        ],
    ),
];

/// The thread levels a multi-process suite runs every case at: first
/// without `RIVET_THREAD_LEVEL`, where the rank programs' `Engine<Local>`
/// runs at SINGLE, without a lock; then with `RIVET_THREAD_LEVEL=multiple`,
/// which raises it to MULTIPLE, so the engine locks.
pub const LEVELS: [ThreadLevel; 2] = [ThreadLevel::Single, ThreadLevel::Multiple];

/// What asks the rank programs for `level`: nothing for SINGLE (their
/// default), `RIVET_THREAD_LEVEL=NAME` otherwise.
pub fn level_env(level: ThreadLevel) -> Option<(&'static str, &'static str)> {
    (level != ThreadLevel::Single).then(|| ("RIVET_THREAD_LEVEL", level.name()))
}

/// A transport of `TRANSPORTS` at a thread level of `LEVELS`: the
/// environment of one case of a multi-process suite.
#[derive(Debug, Clone)]
pub struct Over {
    pub transport: &'static str,
    pub level: ThreadLevel,
    /// The transport's settings, and the level's (`level_env`).
    pub env: Vec<(&'static str, &'static str)>,
}

impl std::fmt::Display for Over {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at thread level {}", self.transport, self.level)
    }
}

/// Every transport at every level (each transport at SINGLE, then at
/// MULTIPLE): one suite, parametrised rather than copied.
pub fn every_transport_and_level() -> Vec<Over> {
    TRANSPORTS
        .iter()
        .flat_map(|&(transport, env)| {
            LEVELS.iter().map(move |&level| Over {
                transport,
                level,
                env: env.iter().copied().chain(level_env(level)).collect(),
            })
        })
        .collect()
}

/// Lines of `stdout` saying `PROGRAM MODE OK ...` at thread level `level`
/// (the rank programs end their OK line with `at thread level NAME`).
pub fn oks_at(stdout: &str, program: &str, mode: &str, level: ThreadLevel) -> usize {
    let start = format!("{program} {mode} OK ");
    let end = format!(" at thread level {level}");
    stdout
        .lines()
        .filter(|l| l.starts_with(&start) && l.ends_with(&end))
        .count()
}

/// `rivetrun EXTRA... -n N PROGRAM ARGS...` with `env` (an `Over`'s, or a
/// `TRANSPORTS` entry's); what would choose another transport, name server
/// or thread level is cleared from the caller's environment first.
pub fn job_over(
    program: &str,
    n: u32,
    args: &[&str],
    env: &[(&str, &str)],
    extra: &[&str],
) -> Command {
    let n = n.to_string();
    let exe = bin(program);
    let mut all: Vec<&str> = extra.to_vec();
    all.extend(["-n", &n, exe.to_str().expect("utf-8 path")]);
    all.extend(args);
    let mut cmd = rivetrun(&all);
    for var in [
        "RIVET_NETMOD",
        "RIVET_OFI_PROVIDER",
        "RIVET_NAMESERVER",
        "RIVET_THREAD_LEVEL",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd
}

/// Path of a `rivet-tests` binary built with the release profile, for jobs
/// whose ranks do too much work for a debug build; built once per test
/// process (only this crate's binaries: the launcher stays the debug one).
pub fn release_bin(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| cargo_build(&["--release", "-p", "rivet-tests"]));
    built(
        bin_dir()
            .parent()
            .expect("target directory")
            .join("release")
            .join(name),
    )
}

/// libfabric's shm provider names its queues `<pid>:<n>:<m>`.
fn is_fabric_segment(name: &str) -> bool {
    name.split(':').count() == 3
        && name
            .split(':')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Names of the shared-memory segments a job may leave in /dev/shm:
/// Rivet's (`rivet-*`) and libfabric shm's.
pub fn shm_segments() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with("rivet-") || is_fabric_segment(n))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a live process maps or holds open `/dev/shm/<name>`.
fn shm_in_use(name: &str) -> bool {
    let path = format!("/dev/shm/{name}");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    for entry in dir.flatten() {
        if !entry
            .file_name()
            .to_str()
            .is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        let maps = std::fs::read_to_string(entry.path().join("maps")).unwrap_or_default();
        if maps
            .lines()
            .any(|l| l.split_whitespace().nth(5) == Some(path.as_str()))
        {
            return true;
        }
        if let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) {
            for fd in fds.flatten() {
                if std::fs::read_link(fd.path()).is_ok_and(|t| t == Path::new(&path)) {
                    return true;
                }
            }
        }
    }
    false
}

/// Watches /dev/shm across a job: `leaked` names the Rivet segments that
/// appeared since `new` and that no live process uses (so not another job
/// running at the same time), and removes them so that one leak fails one
/// test only.
pub struct ShmWatch {
    before: std::collections::BTreeSet<String>,
}

impl ShmWatch {
    pub fn new() -> ShmWatch {
        ShmWatch {
            before: shm_segments(),
        }
    }

    pub fn leaked(&self) -> Vec<String> {
        let fresh = || -> Vec<String> {
            shm_segments()
                .into_iter()
                .filter(|n| !self.before.contains(n) && !shm_in_use(n))
                .collect()
        };
        let mut left = fresh();
        // A segment another job has just created may not be mapped yet.
        let settle = Instant::now();
        while !left.is_empty() && settle.elapsed() < Duration::from_millis(500) {
            std::thread::sleep(Duration::from_millis(50));
            left = fresh();
        }
        for name in &left {
            let _ = std::fs::remove_file(Path::new("/dev/shm").join(name));
        }
        left
    }
}

impl Default for ShmWatch {
    fn default() -> Self {
        ShmWatch::new()
    }
}

/// What rivetrun says when its end-of-job sweep of `/dev/shm/rivet-<job>-*`
/// removed a segment, or when it freed a segment a rank registered and
/// left behind: either way an engine did not unlink its segment.
pub const SWEEP_MARKS: [&str; 2] = [
    "rivetrun: swept /dev/shm/",
    "ended without freeing shm rivet-",
];

/// Run a job and fail if it left a segment in `/dev/shm` or rivetrun had
/// to remove one of the job's segments for it (the sweep would otherwise
/// hide an engine that never unlinks): for every test that kills no rank.
pub fn run_job_checking_shm(cmd: Command, deadline: Duration) -> Outcome {
    let o = run_killed_job_checking_shm(cmd, deadline);
    for mark in SWEEP_MARKS {
        assert!(
            !o.stderr.contains(mark),
            "rivetrun removed a segment the job's ranks left behind ({mark:?})\n{}",
            o.show()
        );
    }
    o
}

/// [`run_job_checking_shm`] for a job that kills a rank on purpose: a
/// rank killed before the others attached leaves the node segment to
/// rivetrun's sweep, so only what is left after rivetrun is checked.
pub fn run_killed_job_checking_shm(cmd: Command, deadline: Duration) -> Outcome {
    let watch = ShmWatch::new();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_job(cmd, deadline)));
    let leaked = watch.leaked();
    match result {
        Ok(o) => {
            assert!(
                leaked.is_empty(),
                "the job left shared memory behind: /dev/shm/{leaked:?} (removed now)\n\
                 exit {:?}\nstdout:\n{}\nstderr:\n{}",
                o.status,
                o.stdout,
                o.stderr
            );
            o
        }
        Err(panic) => {
            if !leaked.is_empty() {
                eprintln!(
                    "the job also left shared memory behind: /dev/shm/{leaked:?} (removed now)"
                );
            }
            std::panic::resume_unwind(panic)
        }
    }
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

/// A prefix laid out by `cargo xtask install --no-build` from the
/// libraries and programs already built in `built` (a `target/<profile>`
/// directory), under the temp dir; removed when dropped, so a failing
/// assertion leaves nothing behind.
pub struct InstalledPrefix(PathBuf);

impl InstalledPrefix {
    pub fn new(tag: &str, built: &Path) -> InstalledPrefix {
        let prefix = InstalledPrefix(
            std::env::temp_dir().join(format!("rivet-{tag}-prefix-{}", std::process::id())),
        );
        let profile = built
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a profile directory");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let install = Command::new(cargo)
            .args(["run", "-q", "-p", "xtask", "--", "install", "--no-build"])
            .args(["--profile", profile, "--prefix"])
            .arg(&prefix.0)
            .env("CARGO_TARGET_DIR", built.parent().expect("target/"))
            .current_dir(workspace_root())
            .output()
            .expect("running cargo xtask install");
        assert!(
            install.status.success(),
            "xtask install: {}",
            String::from_utf8_lossy(&install.stderr)
        );
        prefix
    }
}

impl std::ops::Deref for InstalledPrefix {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for InstalledPrefix {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `tests/c/mpi_check.c` (any MPI's build) passed on `n` ranks, all on one
/// node: exit 0, its OK line (ring, allreduce, 4 MiB message checked by
/// the program), and one hello per rank whose node-local rank and size are
/// its world rank and size.
pub fn mpi_check_passed(o: &Outcome, n: u32) {
    assert_eq!(o.code(), Some(0), "n={n}: {}", o.show());
    assert!(
        o.stdout.contains(&format!("mpi_check OK size={n}")),
        "n={n}: {}",
        o.show()
    );
    for rank in 0..n {
        let hello = format!("hello from rank {rank} of {n} pid ");
        assert!(
            o.stdout.lines().any(
                |l| l.starts_with(&hello) && l.ends_with(&format!(" node-local {rank} of {n}"))
            ),
            "n={n} rank {rank}: {}",
            o.show()
        );
    }
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

/// The failures rivetrun reported under `--disable-auto-cleanup` (one line
/// each, the first sets the exit code): a survivor that crashes after its
/// OK line shows up here even though the exit code does not change.
pub fn reported_failures(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| {
            l.starts_with("rivetrun: ") && l.ends_with("keep running (--disable-auto-cleanup)")
        })
        .collect()
}

/// Under `--disable-auto-cleanup`: the only failure rivetrun reported is
/// `who`'s (e.g. "rank 2"): no survivor failed after it.
pub fn assert_only_failure(o: &Outcome, who: &str, case: &str) {
    let failures = reported_failures(&o.stderr);
    assert!(
        failures.len() == 1 && failures[0].starts_with(&format!("rivetrun: {who} ")),
        "{case}: the only failure must be {who}'s, not {failures:?}\n{}",
        o.show()
    );
}

/// `pmi_check rank R of N ... appnum A over KIND` lines of a job's stdout,
/// as (R, A, KIND), sorted by rank.
pub fn appnums(stdout: &str) -> Vec<(u32, i32, String)> {
    let mut seen: Vec<(u32, i32, String)> = stdout
        .lines()
        .filter(|l| l.starts_with("pmi_check rank ") && l.contains(" appnum "))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let at = |k: &str| w[w.iter().position(|x| *x == k).unwrap() + 1];
            (
                w[2].parse().unwrap(),
                at("appnum").parse().unwrap(),
                at("over").to_string(),
            )
        })
        .collect();
    seen.sort();
    seen
}
