//! librivet-pmi, the PMI-1 C API: the built library against its header, and
//! a C program using only pmi.h (tests/c/pmi_c_check.c, compiled with `cc`
//! and pkg-config) under rivetrun, MPICH's mpiexec.hydra, Slurm's
//! `srun --mpi=pmi2` (a one-node Slurm started by `.ci/local-slurm`) and alone.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use rivet_tests::{
    cc_pmi, pkg_config, pmi_capi_dir, rivetrun, run_job, run_job_checking_shm, serial,
    workspace_root, Outcome,
};

const DEADLINE: Duration = Duration::from_secs(60);

/// The `PMI_*` functions include/pmi.h declares.
fn declared() -> BTreeSet<String> {
    let header = std::fs::read_to_string(pmi_capi_dir().join("include/pmi.h")).unwrap();
    header
        .lines()
        .filter_map(|l| l.strip_prefix("int PMI_"))
        .filter_map(|rest| rest.split_once('('))
        .map(|(name, _)| format!("PMI_{name}"))
        .collect()
}

/// The dynamic symbols `lib` defines, as `nm -D --defined-only` lists them.
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
    let dir = pmi_capi_dir();
    // The header laid out is the source's.
    assert_eq!(
        std::fs::read(dir.join("include/pmi.h")).unwrap(),
        std::fs::read(workspace_root().join("pmi-capi/include/pmi.h")).unwrap()
    );
    for link in ["librivet-pmi.so", "librivet-pmi.so.0", "librivet-pmi.a"] {
        assert!(dir.join(link).exists(), "{link} missing or dangling");
    }
    let readelf = Command::new("readelf")
        .args(["-d"])
        .arg(dir.join("librivet-pmi.so"))
        .output()
        .expect("running readelf");
    assert!(
        String::from_utf8_lossy(&readelf.stdout).contains("Library soname: [librivet-pmi.so.0]"),
        "{}",
        String::from_utf8_lossy(&readelf.stdout)
    );
    let flags = pkg_config(&["--cflags", "--libs", "rivet-pmi"]);
    let d = dir.display();
    assert_eq!(
        flags.trim(),
        format!("-I{d}/include -L{d} -Wl,-rpath,{d} -lrivet-pmi")
    );
    assert_eq!(
        pkg_config(&["--modversion", "rivet-pmi"]).trim(),
        env!("CARGO_PKG_VERSION")
    );
}

/// The library exports exactly the functions the header declares, and a C
/// program taking the address of each one links against it and runs.
#[test]
fn every_declared_function_is_exported_and_nothing_else() {
    let dir = pmi_capi_dir();
    let names = declared();
    assert!(names.len() >= 30, "{names:?}");
    assert_eq!(exported(&dir.join("librivet-pmi.so")), names);

    let src_dir = std::env::temp_dir().join(format!("rivet-pmi-capi-{}", std::process::id()));
    std::fs::create_dir_all(&src_dir).unwrap();
    let mut src = String::from("#include <pmi.h>\n#include <stdio.h>\nint main(void) {\n");
    src += "    void (*fns[])(void) = {\n";
    for n in &names {
        src += &format!("        (void (*)(void)){n},\n");
    }
    src += "    };\n    int n = 0;\n";
    src += "    for (unsigned i = 0; i < sizeof fns / sizeof fns[0]; i++) n += fns[i] != NULL;\n";
    src += "    printf(\"%d functions\\n\", n);\n    return 0;\n}\n";
    let c = src_dir.join("all.c");
    let exe = src_dir.join("all");
    std::fs::write(&c, &src).unwrap();
    let flags = pkg_config(&["--cflags", "--libs", "rivet-pmi"]);
    let cc = Command::new("cc")
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&c)
        .args(flags.split_whitespace())
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "{}\n{src}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_dir_all(&src_dir);
    assert_eq!(
        String::from_utf8_lossy(&run.stdout),
        format!("{} functions\n", names.len())
    );
}

/// Lines of `o`'s stdout that start with `prefix`, the prefix removed.
fn lines<'a>(o: &'a Outcome, prefix: &str) -> Vec<&'a str> {
    o.stdout
        .lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .collect()
}

/// The job passed: exit 0 and one OK line per rank.
fn passed(o: &Outcome, n: u32) {
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for r in 0..n {
        assert!(
            o.stdout
                .contains(&format!("pmi_c_check OK rank {r} of {n}\n")),
            "rank {r}\n{}",
            o.show()
        );
    }
    assert!(!o.stderr.contains("FAILED"), "{}", o.show());
}

/// The `topo rank R ...` line of rank `r`, after the prefix.
fn topo(o: &Outcome, r: u32) -> String {
    let prefix = format!("topo rank {r} ");
    lines(o, &prefix)
        .first()
        .unwrap_or_else(|| panic!("no topo line for rank {r}\n{}", o.show()))
        .to_string()
}

fn c_check() -> String {
    cc_pmi("pmi_c_check.c", "rivet-pmi", "")
        .to_str()
        .unwrap()
        .to_string()
}

#[test]
fn c_program_runs_alone() {
    let _serial = serial();
    let mut cmd = Command::new(c_check());
    for var in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE"] {
        cmd.env_remove(var);
    }
    let o = run_job(cmd, DEADLINE);
    passed(&o, 1);
    assert!(
        o.stdout
            .contains("pmi_c_check rank 0 of 1 appnum -1 universe 1 kvs singleton_kvs_"),
        "{}",
        o.show()
    );
    assert_eq!(lines(&o, "mapping rank 0 "), ["(vector,(0,1,1))"]);
    assert_eq!(lines(&o, "clique rank 0 "), ["size 1 ranks 0"]);
    // Nothing published: no type; a singleton is alone on its node.
    assert_eq!(topo(&o, 0), "type 0 cluster 0/0 mesh unsupported");
}

#[test]
fn c_program_runs_under_rivetrun() {
    let _serial = serial();
    for n in [1u32, 2, 4] {
        let o = run_job_checking_shm(rivetrun(&["-n", &n.to_string(), &c_check()]), DEADLINE);
        passed(&o, n);
        let all: Vec<String> = (0..n).map(|r| r.to_string()).collect();
        for r in 0..n {
            assert!(
                o.stdout.contains(&format!(
                    "pmi_c_check rank {r} of {n} appnum 0 universe {n} kvs "
                )),
                "{}",
                o.show()
            );
            assert_eq!(
                lines(&o, &format!("clique rank {r} ")),
                [format!("size {n} ranks {}", all.join(","))],
                "{}",
                o.show()
            );
            // A cluster: level 0 is node 0, where this rank is the r-th.
            let t = topo(&o, r);
            assert!(
                t.starts_with(&format!("type 1 cluster 0/{r}")) && t.ends_with(" mesh unsupported"),
                "n={n} rank {r}: {t}\n{}",
                o.show()
            );
        }
    }
}

#[test]
fn c_program_sees_a_mesh_under_rivetrun() {
    let _serial = serial();
    let o = run_job_checking_shm(
        rivetrun(&["-n", "4", "--mesh-dims", "2x2", &c_check()]),
        DEADLINE,
    );
    passed(&o, 4);
    for r in 0..4 {
        let t = topo(&o, r);
        assert!(
            t.starts_with(&format!("type 2 cluster 0/{r}")) && t.ends_with(" mesh 2x2x1"),
            "rank {r}: {t}\n{}",
            o.show()
        );
    }
}

#[test]
fn c_program_runs_under_mpich_hydra() {
    let _serial = serial();
    let mut cmd = Command::new("mpiexec.hydra");
    cmd.args(["-n", "2"]).arg(c_check());
    let o = run_job(cmd, DEADLINE);
    passed(&o, 2);
    for r in 0..2 {
        assert!(
            o.stdout
                .contains(&format!("pmi_c_check rank {r} of 2 appnum 0 ")),
            "{}",
            o.show()
        );
        assert_eq!(
            lines(&o, &format!("clique rank {r} ")),
            ["size 2 ranks 0,1"]
        );
        // Hydra publishes no topology.
        assert_eq!(topo(&o, r), "type 0 cluster unsupported mesh unsupported");
    }
}

fn spawn_passed(o: &Outcome, launcher: &str) {
    passed(o, 2);
    assert_eq!(
        lines(o, "spawned ").len(),
        1,
        "{launcher}: rank 0 spawns once\n{}",
        o.show()
    );
    for r in 0..2 {
        assert!(
            o.stdout.contains(&format!(
                "pmi_c_check child rank {r} of 2 parent said hello-child\n"
            )),
            "{launcher}: child {r}\n{}",
            o.show()
        );
    }
}

#[test]
fn c_program_spawns_under_rivetrun() {
    let _serial = serial();
    let o = run_job_checking_shm(rivetrun(&["-n", "2", &c_check(), "spawn"]), DEADLINE);
    spawn_passed(&o, "rivetrun");
}

#[test]
fn c_program_spawns_under_mpich_hydra() {
    let _serial = serial();
    let mut cmd = Command::new("mpiexec.hydra");
    cmd.args(["-n", "2"]).arg(c_check()).arg("spawn");
    let o = run_job(cmd, DEADLINE);
    spawn_passed(&o, "hydra");
}

#[test]
fn a_refused_spawn_is_pmi_fail_with_error_codes() {
    let _serial = serial();
    let o = run_job_checking_shm(rivetrun(&["-n", "2", &c_check(), "spawnbad"]), DEADLINE);
    passed(&o, 2);
    // rivetrun: 127 = program not found, for each process.
    assert_eq!(
        lines(&o, "spawn refused, error codes "),
        ["127 127"],
        "{}",
        o.show()
    );
}

#[test]
fn pmi_abort_ends_the_job_with_its_code() {
    let _serial = serial();
    let o = run_job_checking_shm(rivetrun(&["-n", "2", &c_check(), "abort"]), DEADLINE);
    assert_eq!(o.code(), Some(7), "{}", o.show());
    assert!(
        o.stderr.contains("pmi_c_check aborts on purpose"),
        "{}",
        o.show()
    );
    assert!(!o.stdout.contains("pmi_c_check OK"), "{}", o.show());
}

#[test]
fn the_static_library_links_and_runs() {
    let _serial = serial();
    let exe = cc_pmi("pmi_c_check.c", "rivet-pmi-static", "_static");
    let ldd = Command::new("ldd").arg(&exe).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&ldd.stdout).contains("librivet-pmi"),
        "{}",
        String::from_utf8_lossy(&ldd.stdout)
    );
    let o = run_job_checking_shm(rivetrun(&["-n", "2", exe.to_str().unwrap()]), DEADLINE);
    passed(&o, 2);
}

#[test]
fn c_program_runs_under_slurm_srun_pmi2() {
    let _serial = serial();
    rivet_tests::slurm_up();
    let mut cmd = Command::new("srun");
    // --immediate: fail, rather than queue, when the node cannot take the job.
    cmd.args(["--mpi=pmi2", "-n", "2", "--time=1", "--immediate=20"])
        .arg(c_check());
    let o = run_job(cmd, DEADLINE);
    passed(&o, 2);
    for r in 0..2 {
        assert!(
            o.stdout.contains(&format!("pmi_c_check rank {r} of 2 ")),
            "{}",
            o.show()
        );
        // Slurm's PMI_process_mapping: both on one node.
        assert_eq!(
            lines(&o, &format!("clique rank {r} ")),
            ["size 2 ranks 0,1"]
        );
        // Slurm publishes no Rivet topology.
        assert_eq!(topo(&o, r), "type 0 cluster unsupported mesh unsupported");
    }
}
