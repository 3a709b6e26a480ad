//! Finding and building what the tests run: the workspace's binaries
//! (debug and release), C programs compiled against Rivet's or another
//! MPI's headers, and an installed prefix laid out by `cargo xtask install`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

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
    built_once(&BUILT, &["rivet-pmi-capi"], &["--lib"])
}

/// This profile's directory, after `cargo build` of `targets` (`--lib`,
/// `--bins`) in `packages`, done once per test process (`built`).
fn built_once(built: &OnceLock<()>, packages: &[&str], targets: &[&str]) -> PathBuf {
    let dir = bin_dir();
    built.get_or_init(|| {
        let mut args: Vec<&str> = packages.iter().flat_map(|p| ["-p", *p]).collect();
        if dir.file_name().is_some_and(|n| n == "release") {
            args.push("--release");
        }
        for t in targets {
            cargo_build_targets(t, &args);
        }
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
    built_once(&BUILT, &["rivet-capi"], &["--lib"])
}

/// `tests/c/NAME` built against OpenPMIx's client library (`pmix.pc`).
pub fn cc_pmix(name: &str) -> PathBuf {
    cc_c(
        &crate::workspace_root().join("tests/c").join(name),
        "pmix",
        "",
    )
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
    built_once(&BUILT, &["rivet-mpi", "rivet-capi"], &["--lib", "--bins"])
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

/// Path of a `rivet-tests` binary built with the release profile, for jobs
/// whose ranks do too much work for a debug build; built once per test
/// process, that binary only (the other test binaries cost a fifth more of
/// the build; the launcher stays the debug one).
pub fn release_bin(name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut done = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if !done.iter().any(|n| n == name) {
        cargo_build_targets("--bin", &[name, "--release", "-p", "rivet-tests"]);
        done.push(name.to_string());
    }
    built(
        bin_dir()
            .parent()
            .expect("target directory")
            .join("release")
            .join(name),
    )
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
