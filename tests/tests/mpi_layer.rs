//! librivetmpi, the thin MPI layer on librivet's C ABI: MPI programs built
//! with `rivetcc` run under rivetrun on 1, 2 and 4 ranks with their
//! outputs checked: a start-up probe and a ping-pong (the anchors'
//! hello_mpi.c and mpi_pingpong.c, as tests/c equivalents with every byte
//! checked), the unmodified tests/c/mpi_check.c, the layer's own checks of
//! point to point (tests/c/mpi_p2p.c), collectives (mpi_coll.c) and
//! dynamic processes (mpi_dynamic.c); error handlers, MPI_Abort, and mpi.h
//! compiled as C++.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use rivet_tests::{
    rivetcc, rivetrun, run_job_checking_shm, run_killed_job_checking_shm, serial, workspace_root,
    Outcome,
};

const DEADLINE: Duration = Duration::from_secs(120);

fn program(name: &str) -> String {
    let src = workspace_root().join(format!("tests/c/{name}.c"));
    let exe: PathBuf = rivetcc(&src, "_rivetmpi", None, &["-std=c99", "-pedantic"]);
    exe.to_str().expect("utf-8 path").to_string()
}

fn run(n: u32, exe: &str, args: &[&str]) -> Outcome {
    let n = n.to_string();
    let mut all = vec!["-n", n.as_str(), exe];
    all.extend_from_slice(args);
    run_job_checking_shm(rivetrun(&all), DEADLINE)
}

/// [`run`] for a job that ends by abort: rivetrun kills the other ranks,
/// and one killed before its peers attached leaves its segment to rivetrun.
fn run_aborting(n: u32, exe: &str, args: &[&str]) -> Outcome {
    let n = n.to_string();
    let mut all = vec!["-n", n.as_str(), exe];
    all.extend_from_slice(args);
    run_killed_job_checking_shm(rivetrun(&all), DEADLINE)
}

/// Exit 0 and, for each rank r < n, `line(r)` in the output.
fn each_rank(o: &Outcome, n: u32, line: impl Fn(u32) -> String) {
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for r in 0..n {
        assert!(o.stdout.contains(&line(r)), "rank {r}: {}", o.show());
    }
}

#[test]
fn programs_built_with_rivetcc_run_on_1_2_and_4_ranks() {
    let _serial = serial();
    let (hello, check, p2p, coll) = (
        program("mpi_hello"),
        program("mpi_check"),
        program("mpi_p2p"),
        program("mpi_coll"),
    );
    for n in [1u32, 2, 4] {
        let o = run(n, &hello, &[]);
        each_rank(&o, n, |r| format!("hello from rank {r} of {n}\n"));

        let o = run(n, &check, &[]);
        let sum = n * (n - 1) / 2;
        each_rank(&o, n, |r| format!("hello from rank {r} of {n} pid"));
        assert!(
            o.stdout
                .contains(&format!("mpi_check OK size={n} sum={sum}\n")),
            "{}",
            o.show()
        );

        let o = run(n, &p2p, &[]);
        each_rank(&o, n, |r| format!("mpi_p2p OK rank {r} of {n} level 0\n"));

        let o = run(n, &coll, &[]);
        each_rank(&o, n, |r| format!("mpi_coll OK rank {r} of {n} ("));
    }
}

#[test]
fn pingpong_checks_every_byte() {
    let _serial = serial();
    let exe = program("mpi_pingpong");
    let o = run(1, &exe, &[]);
    assert!(o.stdout.contains("needs 2 ranks"), "{}", o.show());
    for n in [2u32, 4] {
        let o = run(n, &exe, &[]);
        assert_eq!(o.code(), Some(0), "{}", o.show());
        let sizes: Vec<&str> = o
            .stdout
            .lines()
            .filter(|l| l.contains(" lat "))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(
            sizes,
            [
                "0", "1", "4", "16", "64", "256", "1024", "4096", "16384", "65536", "262144",
                "1048576", "4194304"
            ],
            "{}",
            o.show()
        );
        for size in [1, 16, 256, 4096, 65536] {
            assert!(
                o.stdout.contains(&format!("{size} window OK\n")),
                "{}",
                o.show()
            );
        }
    }
}

#[test]
fn point_to_point_at_thread_multiple_and_over_tcp() {
    let _serial = serial();
    let exe = program("mpi_p2p");
    let o = run(2, &exe, &["3"]);
    each_rank(&o, 2, |r| format!("mpi_p2p OK rank {r} of 2 level 3\n"));
    let o = run_job_checking_shm(
        rivetrun(&["-n", "2", "-genv", "RIVET_NETMOD", "tcp", &exe]),
        DEADLINE,
    );
    each_rank(&o, 2, |r| format!("mpi_p2p OK rank {r} of 2 level 0\n"));
}

#[test]
fn dynamic_processes_spawn_ports_and_names() {
    let _serial = serial();
    let exe = program("mpi_dynamic");
    for n in [1u32, 2] {
        let o = run(n, &exe, &["spawn"]);
        each_rank(&o, n, |r| format!("spawn parent {r} of {n} OK\n"));
        each_rank(&o, 2, |r| format!("spawn child {r} of 2 OK\n"));
    }
    for n in [2u32, 4] {
        let o = run(n, &exe, &["ports"]);
        let side = |r: u32| if r < n / 2 { "accept" } else { "connect" };
        each_rank(&o, n, |r| {
            format!("ports rank {r} of {n} OK ({})\n", side(r))
        });
    }
}

#[test]
fn errors_are_fatal_by_default_and_abort_ends_the_job_with_its_code() {
    let _serial = serial();
    // mpi_p2p checks MPI_ERRORS_RETURN's codes itself; here the default
    // handler: a send to a rank out of range ends the job with the class.
    let o = run_aborting(2, &program("mpi_p2p"), &["fatal"]);
    assert_eq!(o.code(), Some(6), "MPI_ERR_RANK is 6: {}", o.show());
    assert!(o.stderr.contains("MPI_ERR_RANK"), "{}", o.show());
    assert!(!o.stdout.contains("MPI_Send returned"), "{}", o.show());

    let check = program("mpi_check");
    for n in [2u32, 4] {
        let o = run_aborting(n, &check, &["abort", "1", "7"]);
        assert_eq!(o.code(), Some(7), "{}", o.show());
        assert!(o.stdout.contains("rank 1 aborting with 7"), "{}", o.show());
        assert!(!o.stdout.contains("mpi_check OK"), "{}", o.show());
    }
}

#[test]
fn mpi_h_compiles_as_cxx_and_rivetcc_wraps_the_compiler() {
    let _serial = serial();
    let src = workspace_root().join("tests/c/mpi_hello.c");
    let exe = rivetcc(
        &src,
        "_cxx",
        Some("c++"),
        &["-x", "c++", "-std=c++11", "-pedantic"],
    );
    let o = run(2, exe.to_str().unwrap(), &[]);
    each_rank(&o, 2, |r| format!("hello from rank {r} of 2\n"));

    let rivetcc = rivet_tests::mpi_dir().join("rivetcc");
    let show = Command::new(&rivetcc)
        .args(["-show", "-o", "x", "x.c"])
        .output()
        .expect("rivetcc -show");
    let line = String::from_utf8_lossy(&show.stdout);
    assert!(show.status.success(), "{line}");
    assert!(line.contains("-lrivetmpi -lrivet"), "{line}");
    assert!(line.contains("/include"), "{line}");
    let compile_only = Command::new(&rivetcc)
        .args(["-show", "-c", "x.c"])
        .output()
        .expect("rivetcc -show -c");
    let line = String::from_utf8_lossy(&compile_only.stdout);
    assert!(!line.contains("-lrivetmpi"), "{line}");
}

#[test]
fn installed_rivetcc_builds_programs_that_run_from_the_prefix() {
    let _serial = serial();
    let dir = rivet_tests::mpi_dir();
    rivet_tests::bin("rivetrun");
    let prefix = rivet_tests::InstalledPrefix::new("mpi", &dir);
    for f in [
        "bin/rivetcc",
        "lib/librivetmpi.so",
        "lib/librivetmpi.so.0",
        "lib/librivetmpi.a",
        "include/mpi.h",
    ] {
        assert!(prefix.join(f).exists(), "{f} not installed");
    }
    // The installed rivetcc names the prefix, not target/.
    let exe = prefix.join("hello");
    let cc = Command::new(prefix.join("bin/rivetcc"))
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(workspace_root().join("tests/c/mpi_hello.c"))
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let ldd = Command::new("ldd")
        .arg(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let ldd = String::from_utf8_lossy(&ldd.stdout).to_string();
    let p = prefix.display();
    assert!(
        ldd.contains(&format!("{p}/lib/librivetmpi.so.0"))
            && ldd.contains(&format!("{p}/lib/librivet.so.0")),
        "{ldd}"
    );
    let mut job = Command::new(prefix.join("bin/rivetrun"));
    job.args(["-n", "2"])
        .arg(&exe)
        .env_remove("LD_LIBRARY_PATH");
    let o = run_job_checking_shm(job, DEADLINE);
    drop(prefix);
    each_rank(&o, 2, |r| format!("hello from rank {r} of 2\n"));
}

#[test]
fn programs_run_under_mpich_hydra_too() {
    let _serial = serial();
    // librivet bootstraps through PMI-1, so Hydra launches them as well.
    let (p2p, coll) = (program("mpi_p2p"), program("mpi_coll"));
    for exe in [&p2p, &coll] {
        let mut cmd = Command::new("mpiexec.hydra");
        cmd.args(["-n", "2", exe]);
        let o = run_job_checking_shm(cmd, DEADLINE);
        let name = if exe == &p2p { "mpi_p2p" } else { "mpi_coll" };
        each_rank(&o, 2, |r| format!("{name} OK rank {r} of 2"));
    }
}

#[test]
fn a_program_started_alone_is_a_singleton() {
    let _serial = serial();
    for name in ["mpi_p2p", "mpi_coll"] {
        let o = run_job_checking_shm(Command::new(program(name)), DEADLINE);
        each_rank(&o, 1, |r| format!("{name} OK rank {r} of 1"));
    }
}
