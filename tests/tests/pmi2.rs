//! PMI-2 on both sides: Rivet ranks with `RIVET_PMI=pmi2` bootstrap
//! through Slurm's PMI-2 server (`srun --mpi=pmi2`) and through rivetrun,
//! which serves PMI-2 and PMI-1 on the same connections; the engine says
//! which PMI it used (`bootstrap: process manager (PMI-2)`). The client
//! also runs under MPICH's `mpiexec.hydra`, whose server speaks PMI-2.
//! Ranks spawn over PMI-2 under rivetrun and Hydra.

use std::process::Command;
use std::time::Duration;

use rivet_tests::{
    bin, dyn_spawn_passed, engine_check_passed, rivetrun, run_job_checking_shm, serial,
};

const DEADLINE: Duration = Duration::from_secs(90);
const PMI2: &str = "bootstrap: process manager (PMI-2)";

/// `srun --mpi=pmi2 -n N PROGRAM ARGS` with `RIVET_PMI=pmi2` (and `env`).
fn srun_pmi2(n: u32, env: &[(&str, &str)], program: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("srun");
    // --immediate: fail, rather than queue, when the node cannot take the job.
    cmd.args([
        "--mpi=pmi2",
        "-n",
        &n.to_string(),
        "--time=1",
        "--immediate=20",
    ])
    .env("RIVET_PMI", "pmi2")
    .arg(bin(program))
    .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

#[test]
fn rivet_ranks_run_under_srun_mpi_pmi2_with_pmi2() {
    let _serial = serial();
    rivet_tests::slurm_up();
    // Shared memory (cards for the node segment), then tcp: the business
    // cards go through Slurm's PMI-2 KVS and fence.
    for netmod in ["auto", "tcp"] {
        let o = run_job_checking_shm(
            srun_pmi2(
                2,
                &[("RIVET_NETMOD", netmod)],
                "engine_check",
                &["pingpong"],
            ),
            DEADLINE,
        );
        engine_check_passed(&o, "pingpong", 2);
        assert!(o.stdout.contains(PMI2), "{netmod}: {}", o.show());
    }
    let o = run_job_checking_shm(srun_pmi2(2, &[], "rivet-bench", &["info"]), DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert!(o.stdout.contains(PMI2), "{}", o.show());
    // PMI_process_mapping (a job attribute over PMI-2) put both on this node.
    assert!(
        o.stdout.contains("(rank 0 of 2, 2 on this node)"),
        "{}",
        o.show()
    );
}

#[test]
fn rivetrun_serves_pmi2_clients_over_pmi_fd_and_pmi_port() {
    let _serial = serial();
    for (extra, netmod, mode, n) in [
        (None, "auto", "pingpong", 2),
        (None, "tcp", "stress", 3),
        (Some("--pmi-port"), "tcp", "pingpong", 2),
    ] {
        let n_text = n.to_string();
        let mut args = vec!["-n", &n_text, "-genv", "RIVET_PMI", "pmi2"];
        args.extend(["-genv", "RIVET_NETMOD", netmod]);
        args.extend(extra);
        let mut cmd = rivetrun(&args);
        cmd.arg(bin("engine_check")).arg(mode);
        let o = run_job_checking_shm(cmd, DEADLINE);
        engine_check_passed(&o, mode, n);
        assert!(o.stdout.contains(PMI2), "{extra:?} {mode}: {}", o.show());
    }
    // Without RIVET_PMI the same rivetrun serves PMI-1.
    let mut cmd = rivetrun(&["-n", "2"]);
    cmd.arg(bin("rivet-bench")).arg("info");
    let o = run_job_checking_shm(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert!(
        o.stdout.contains("bootstrap: process manager (PMI-1)"),
        "{}",
        o.show()
    );
}

#[test]
fn the_pmi_client_checks_and_aborts_over_pmi2_under_rivetrun() {
    let _serial = serial();
    // put, barrier, get, names, finalize; over PMI_FD and PMI_PORT.
    for extra in [&[][..], &["--pmi-port"][..]] {
        let mut args = vec!["-n", "3", "-genv", "RIVET_PMI", "pmi2"];
        args.extend_from_slice(extra);
        let mut cmd = rivetrun(&args);
        cmd.arg(bin("pmi_check"));
        let o = run_job_checking_shm(cmd, DEADLINE);
        assert_eq!(o.code(), Some(0), "{extra:?}: {}", o.show());
        for r in 0..3 {
            assert!(
                o.stdout.contains(&format!("pmi_check OK rank {r}")),
                "{}",
                o.show()
            );
        }
        assert_eq!(o.stdout.matches(" over pmi2\n").count(), 3, "{}", o.show());
    }
    let mut cmd = rivetrun(&["-n", "3", "-genv", "RIVET_PMI", "pmi2"]);
    cmd.arg(bin("pmi_check")).args(["abort", "1", "13"]);
    let o = run_job_checking_shm(cmd, DEADLINE);
    assert_eq!(o.code(), Some(13), "{}", o.show());
    assert!(o.stderr.contains("rank 1 called abort"), "{}", o.show());
}

/// Rivet's PMI-2 client against MPICH's own PMI-2 server (Hydra's): the
/// KVS, fence and job attributes carry the engine's start-up, over shared
/// memory and over tcp.
#[test]
fn rivet_ranks_run_under_mpich_hydra_with_pmi2() {
    let _serial = serial();
    for (netmod, mode, n) in [("auto", "pingpong", 2), ("tcp", "stress", 3)] {
        let mut cmd = Command::new("mpiexec.hydra");
        cmd.args(["-n", &n.to_string(), "-genv", "RIVET_PMI", "pmi2"])
            .args(["-genv", "RIVET_NETMOD", netmod])
            .arg(bin("engine_check"))
            .arg(mode);
        let o = run_job_checking_shm(cmd, DEADLINE);
        engine_check_passed(&o, mode, n);
        assert!(o.stdout.contains(PMI2), "{netmod}: {}", o.show());
    }
}

/// PMI-2's `spawn` under rivetrun: the children start with the parents'
/// port pre-put in their KVS, bootstrap over PMI-2, connect back and
/// exchange messages both ways; a spawn naming a missing program fails on
/// every parent with rivetrun's message and one code per process (127 for
/// the missing program's two), and nothing of it runs.
#[test]
fn rivet_ranks_spawn_over_pmi2_under_rivetrun() {
    let _serial = serial();
    let mut cmd = rivetrun(&["-n", "2", "-genv", "RIVET_PMI", "pmi2"]);
    cmd.arg(bin("dyn_check")).args(["spawn", "3"]);
    let o = run_job_checking_shm(cmd, DEADLINE);
    dyn_spawn_passed(&o, 2, 3, PMI2);
    let refused = o
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("dyn_check spawn: missing program refused: "))
        .unwrap_or_else(|| panic!("no refusal: {}", o.show()));
    assert!(
        refused.contains("rivet-no-such-program") && refused.contains("[0, 127, 127]"),
        "{refused}"
    );
    assert_eq!(
        o.stdout.matches("dyn_check child OK").count(),
        3,
        "{}",
        o.show()
    );
}

/// The same spawn over MPICH Hydra's PMI-2 server (which ends the job on
/// a missing program, so that part is left out).
#[test]
fn rivet_ranks_spawn_over_pmi2_under_mpich_hydra() {
    let _serial = serial();
    let mut cmd = Command::new("mpiexec.hydra");
    cmd.args(["-n", "2", "-genv", "RIVET_PMI", "pmi2"])
        .arg(bin("dyn_check"))
        .args(["spawn", "3", "nomissing"]);
    let o = run_job_checking_shm(cmd, DEADLINE);
    dyn_spawn_passed(&o, 2, 3, PMI2);
}
