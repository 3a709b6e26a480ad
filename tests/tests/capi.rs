//! librivet, the C ABI: the built library against its generated header,
//! and C programs on it (capi/examples: ping-pong, spawn, accept/connect;
//! tests/c/capi_check.c: every call's results and argument errors) under
//! rivetrun and MPICH's mpiexec.hydra, linked shared and static.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use rivet_tests::{
    capi_dir, cc_c, pkg_config, rivetrun, run_job, run_job_checking_shm, serial, workspace_root,
    Outcome,
};

const DEADLINE: Duration = Duration::from_secs(90);

/// The functions rivet.h declares (cbindgen puts each prototype's name
/// right after its return type, at the start of a line).
fn declared() -> BTreeSet<String> {
    let header = std::fs::read_to_string(workspace_root().join("capi/include/rivet.h")).unwrap();
    header
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with('#') && !l.starts_with("typedef"))
        .filter_map(|l| l.split_once("rivet_").map(|(_, rest)| rest))
        .filter_map(|rest| rest.split_once('('))
        .map(|(name, _)| format!("rivet_{name}"))
        .collect()
}

fn exported(lib: &std::path::Path) -> BTreeSet<String> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .expect("running nm (binutils)");
    assert!(out.status.success(), "nm {}", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_layout_after_cargo_build_is_usable() {
    let dir = capi_dir();
    assert_eq!(
        std::fs::read(dir.join("include/rivet.h")).unwrap(),
        std::fs::read(workspace_root().join("capi/include/rivet.h")).unwrap()
    );
    for link in ["librivet.so", "librivet.so.0", "librivet.a"] {
        assert!(dir.join(link).exists(), "{link} missing or dangling");
    }
    let readelf = Command::new("readelf")
        .arg("-d")
        .arg(dir.join("librivet.so"))
        .output()
        .expect("running readelf");
    assert!(
        String::from_utf8_lossy(&readelf.stdout).contains("Library soname: [librivet.so.0]"),
        "{}",
        String::from_utf8_lossy(&readelf.stdout)
    );
    let d = dir.display();
    assert_eq!(
        pkg_config(&["--cflags", "--libs", "rivet"]).trim(),
        format!("-I{d}/include -L{d} -Wl,-rpath,{d} -lrivet")
    );
}

#[test]
fn every_declared_function_is_exported_and_nothing_else() {
    let names = declared();
    assert!(names.len() >= 50, "{names:?}");
    let exports: BTreeSet<String> = exported(&capi_dir().join("librivet.so"))
        .into_iter()
        .filter(|s| s.starts_with("rivet_"))
        .collect();
    assert_eq!(exports, names);
    // Nothing but rivet_* (and no Rust symbols) leaves the library.
    let others: Vec<String> = exported(&capi_dir().join("librivet.so"))
        .into_iter()
        .filter(|s| !s.starts_with("rivet_"))
        .collect();
    assert!(others.is_empty(), "{others:?}");
}

fn example(name: &str) -> String {
    capi_dir();
    let src = workspace_root().join(format!("capi/examples/{name}.c"));
    cc_c(&src, "rivet", "").to_str().unwrap().to_string()
}

fn capi_check(package: &str, suffix: &str) -> PathBuf {
    capi_dir();
    cc_c(
        &workspace_root().join("tests/c/capi_check.c"),
        package,
        suffix,
    )
}

fn ok_lines(o: &Outcome, line: impl Fn(u32) -> String, n: u32) {
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for r in 0..n {
        assert!(o.stdout.contains(&line(r)), "rank {r}: {}", o.show());
    }
}

#[test]
fn capi_check_passes_at_every_thread_level() {
    let _serial = serial();
    let exe = capi_check("rivet", "");
    for level in 0..4 {
        let o = run_job_checking_shm(
            rivetrun(&["-n", "2", exe.to_str().unwrap(), &level.to_string()]),
            DEADLINE,
        );
        ok_lines(
            &o,
            |r| format!("capi_check OK rank {r} level {level} provided {level}\n"),
            2,
        );
    }
}

#[test]
fn capi_check_passes_over_tcp_and_linked_statically() {
    let _serial = serial();
    let exe = capi_check("rivet-static", "_static");
    let ldd = Command::new("ldd").arg(&exe).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&ldd.stdout).contains("librivet"),
        "{}",
        String::from_utf8_lossy(&ldd.stdout)
    );
    let o = run_job_checking_shm(
        rivetrun(&[
            "-n",
            "2",
            "-genv",
            "RIVET_NETMOD",
            "tcp",
            exe.to_str().unwrap(),
        ]),
        DEADLINE,
    );
    ok_lines(
        &o,
        |r| format!("capi_check OK rank {r} level 0 provided 0\n"),
        2,
    );
}

/// The ping-pong prints one line per size and checks every byte itself.
fn pingpong_passed(o: &Outcome) {
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let sizes: Vec<&str> = o
        .stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        sizes,
        ["0", "1", "4", "16", "64", "256", "1024", "4096", "16384", "65536", "262144", "1048576"],
        "{}",
        o.show()
    );
}

#[test]
fn examples_run_under_rivetrun() {
    let _serial = serial();
    let o = run_job_checking_shm(rivetrun(&["-n", "2", &example("pingpong"), "20"]), DEADLINE);
    pingpong_passed(&o);
    for mode in ["names", "message"] {
        let o = run_job_checking_shm(
            rivetrun(&["-n", "2", &example("accept_connect"), mode]),
            DEADLINE,
        );
        ok_lines(&o, |r| format!("accept_connect rank {r} OK ({mode})\n"), 2);
    }
    for n in [1u32, 2] {
        let o = run_job_checking_shm(
            rivetrun(&["-n", &n.to_string(), &example("spawn")]),
            DEADLINE,
        );
        ok_lines(&o, |r| format!("spawn parent {r} of {n} OK\n"), n);
        ok_lines(&o, |r| format!("spawn child {r} of 2 OK\n"), 2);
    }
}

#[test]
fn examples_run_under_mpich_hydra() {
    let _serial = serial();
    let hydra = |args: &[&str]| {
        let mut cmd = Command::new("mpiexec.hydra");
        cmd.args(["-n", "2"]).args(args);
        run_job(cmd, DEADLINE)
    };
    pingpong_passed(&hydra(&[&example("pingpong"), "20"]));
    let o = hydra(&[&example("accept_connect")]);
    ok_lines(&o, |r| format!("accept_connect rank {r} OK (message)\n"), 2);
    let o = hydra(&[&example("spawn")]);
    ok_lines(&o, |r| format!("spawn parent {r} of 2 OK\n"), 2);
    ok_lines(&o, |r| format!("spawn child {r} of 2 OK\n"), 2);
}

/// A runtime that owns PMI (here through librivet-pmi) bootstraps the
/// engine externally: address blobs through its KVS, then add_peers.
#[test]
fn external_bootstrap_under_rivetrun_and_hydra() {
    let _serial = serial();
    capi_dir();
    let exe = cc_c(
        &workspace_root().join("tests/c/capi_external.c"),
        "rivet rivet-pmi",
        "",
    );
    let exe = exe.to_str().unwrap();
    let passed = |o: &Outcome, n: u32, shm: bool| {
        ok_lines(o, |r| format!("capi_external OK rank {r} of {n}\n"), n);
        for r in 0..n {
            assert!(
                o.stdout.contains(&format!(
                    "info rank {r}: bootstrap: external (addresses exchanged by the caller)\n"
                )),
                "{}",
                o.show()
            );
            assert_eq!(
                o.stdout.contains(&format!(
                    "info rank {r}: transport.shm: on (node segment)\n"
                )),
                shm,
                "{}",
                o.show()
            );
        }
    };
    for n in [1u32, 2, 4] {
        let o = run_job_checking_shm(rivetrun(&["-n", &n.to_string(), exe]), DEADLINE);
        passed(&o, n, n > 1);
    }
    let o = run_job_checking_shm(
        rivetrun(&["-n", "2", "-genv", "RIVET_NETMOD", "tcp", exe]),
        DEADLINE,
    );
    passed(&o, 2, false);
    let mut cmd = Command::new("mpiexec.hydra");
    cmd.args(["-n", "3", exe]);
    passed(&run_job(cmd, DEADLINE), 3, true);
}

/// `cargo xtask install` lays out bin/, lib/, include/, lib/pkgconfig/; a
/// program built against the installed rivet.pc links the installed
/// library and runs under the installed rivetrun.
#[test]
fn xtask_install_lays_out_a_usable_prefix() {
    let _serial = serial();
    let dir = capi_dir();
    rivet_tests::bin("rivetrun");
    let prefix = rivet_tests::InstalledPrefix::new("capi", &dir);
    for f in [
        "bin/rivetrun",
        "lib/librivet.so.0",
        "lib/librivet.so",
        "lib/librivet.a",
        "include/rivet.h",
        "include/pmi.h",
        "lib/pkgconfig/rivet.pc",
        "lib/pkgconfig/rivet-pmi.pc",
    ] {
        assert!(prefix.join(f).exists(), "{f} not installed");
    }
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "rivet"])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .output()
        .unwrap();
    let flags = String::from_utf8_lossy(&flags.stdout).to_string();
    let p = prefix.display();
    assert_eq!(
        flags.trim(),
        format!("-I{p}/include -L{p}/lib -Wl,-rpath,{p}/lib -lrivet")
    );
    let exe = prefix.join("pingpong");
    let cc = Command::new("cc")
        .args(["-std=c99", "-O2", "-o"])
        .arg(&exe)
        .arg(workspace_root().join("capi/examples/pingpong.c"))
        .args(flags.split_whitespace())
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    // cargo test points LD_LIBRARY_PATH at target/: the installed program
    // must find its library by its own rpath.
    let ldd = Command::new("ldd")
        .arg(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&ldd.stdout).contains(&format!("{p}/lib/librivet.so.0")),
        "{}",
        String::from_utf8_lossy(&ldd.stdout)
    );
    let mut job = Command::new(prefix.join("bin/rivetrun"));
    job.args(["-n", "2"])
        .arg(&exe)
        .arg("5")
        .env_remove("LD_LIBRARY_PATH");
    let o = run_job_checking_shm(job, DEADLINE);
    drop(prefix);
    pingpong_passed(&o);
}
