//! PMIx dynamic processes, on the system's OpenPMIx (a job's start and
//! names: `pmix.rs`):
//! * under rivetrun's PMIx server, `PMIx_Spawn` starts processes that are
//!   served PMIx in turn, Open MPI's `MPI_Comm_spawn` and connect/accept run
//!   unchanged, and PMIx groups (construct, destruct, a member's end) are
//!   served, also under Rivet's group connect;
//! * Rivet ranks bootstrapped by PMIx spawn through `PMIx_Spawn` (under
//!   rivetrun and `mpirun`; Slurm's plugin refuses it with an error) and
//!   connect groups (also under `mpirun`, where they are fences).

use std::process::Command;
use std::time::Duration;

use rivet_tests::{
    bin, cc_pmix, dyn_spawn_passed, mpicc_openmpi, mpirun_openmpi, rivetrun, run_job_checking_shm,
    serial, Outcome,
};

const DEADLINE: Duration = Duration::from_secs(90);

/// `PMIx_Spawn` (OpenPMIx's client, no MPI) under rivetrun: the children
/// start in a namespace of their own, registered with rivetrun's PMIx
/// server, and read their job's size and parent from it; the app's
/// environment reaches them.
#[test]
fn pmix_spawn_under_rivetrun_starts_children_served_pmix() {
    let _serial = serial();
    let prog = cc_pmix("pmix_spawn.c");
    let mut cmd = rivetrun(&["-n", "1"]);
    cmd.arg(&prog).arg("2");
    let o = run_job_checking_shm(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let (parent, line) = o
        .stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix("pmix_spawn parent ")?
                .split_once(" spawned ")
        })
        .unwrap_or_else(|| panic!("no spawn reported: {}", o.show()));
    assert!(line.ends_with("_s1"), "{}", o.show());
    for r in 0..2 {
        for expected in [
            format!("pmix_spawn child rank {r} of 2 in {line}"),
            // The app's environment reaches its processes.
            format!("pmix_spawn child {r} env PMIX_SPAWN_TEST=from-the-app"),
            // PMIX_PARENT_ID names the rank that asked.
            format!("pmix_spawn child {r} parent {parent}"),
        ] {
            assert!(o.stdout.contains(&expected), "{expected}: {}", o.show());
        }
    }
}

/// Open MPI's `MPI_Comm_spawn` under rivetrun: 2 children start, exchange
/// messages with their parents over the intercommunicator, merge and
/// disconnect (mpi_dynamic.c checks each step). Open MPI agrees on the new
/// communicator's id through PMIx publish/lookup of byte objects read
/// once, which rivetrun's name upcalls serve; connect/accept between the
/// job's halves goes the same way.
#[test]
fn open_mpi_comm_spawn_and_connect_accept_run_under_rivetrun() {
    let _serial = serial();
    let prog = mpicc_openmpi("mpi_dynamic.c");
    let each = |o: &Outcome, n: u32, line: &dyn Fn(u32) -> String| {
        assert_eq!(o.code(), Some(0), "{}", o.show());
        for r in 0..n {
            assert!(o.stdout.contains(&line(r)), "{}: {}", line(r), o.show());
        }
    };
    for n in [1u32, 2] {
        let mut cmd = rivetrun(&["-n", &n.to_string()]);
        cmd.arg(&prog).arg("spawn");
        let o = run_job_checking_shm(cmd, DEADLINE);
        each(&o, n, &|r| format!("spawn parent {r} of {n} OK\n"));
        each(&o, 2, &|r| format!("spawn child {r} of 2 OK\n"));
    }
    let mut cmd = rivetrun(&["-n", "2"]);
    cmd.arg(&prog).arg("ports");
    let o = run_job_checking_shm(cmd, DEADLINE);
    each(&o, 2, &|r| {
        let side = if r == 0 { "accept" } else { "connect" };
        format!("ports rank {r} of 2 OK ({side})\n")
    });
}

/// `PMIx_Group_construct` straight through OpenPMIx's client (no MPI)
/// under rivetrun: every rank joins a group of the whole job, gets a
/// context id from rivetrun's group upcall, reads every member's card and
/// destructs the group.
#[test]
fn pmix_groups_are_served_by_rivetrun() {
    let _serial = serial();
    let prog = cc_pmix("pmix_group.c");
    let mut cmd = rivetrun(&["-n", "3"]);
    cmd.arg(&prog);
    let o = run_job_checking_shm(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let ctx: Vec<&str> = (0..3)
        .map(|r| {
            let prefix = format!("pmix_group rank {r} ctx ");
            o.stdout
                .lines()
                .find_map(|l| l.strip_prefix(&prefix)?.strip_suffix(" members 3 OK"))
                .unwrap_or_else(|| panic!("rank {r}: {}", o.show()))
        })
        .collect();
    // One context id, the same for every member.
    assert!(ctx.iter().all(|c| *c == ctx[0]), "{}", o.show());
}

/// Rivet's group connect (seed 004) for ranks bootstrapped by PMIx, on
/// PMIx groups: under rivetrun's PMIx server (`RIVET_PMI=pmix`) the job
/// connects as one group and as a subset, runs a ring on each and
/// disconnects.
#[test]
fn rivet_group_connect_runs_over_pmix_groups() {
    let _serial = serial();
    let mut cmd = rivetrun(&["-n", "3", "-genv", "RIVET_PMI", "pmix"]);
    cmd.arg(bin("group_check")).arg("flat");
    let o = run_job_checking_shm(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for r in 0..3 {
        assert!(
            o.stdout
                .contains(&format!("group_check flat OK rank {r} of 3")),
            "{}",
            o.show()
        );
    }
}

/// Seed 004's termination event for Rivet ranks bootstrapped by PMIx:
/// under rivetrun's PMIx server (`RIVET_PMI=pmix`) a member that ends
/// without disconnecting is a `Terminated` group event for the others
/// (rivetrun notifies `PMIX_GROUP_MEMBER_FAILED`, the rank's handler queues
/// it) and its VC fails, as under PMI-1; without `early_term_allowed`
/// rivetrun fails the job and says why.
#[test]
fn rivet_group_members_hear_of_a_member_ending_over_pmix() {
    let _serial = serial();
    let mut cmd = rivetrun(&["-n", "3", "-genv", "RIVET_PMI", "pmix"]);
    cmd.arg(bin("group_check")).args(["term", "early"]);
    let o = run_job_checking_shm(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "early_term: {}", o.show());
    for r in 0..3 {
        assert!(
            o.stdout
                .contains(&format!("group_check term OK rank {r} of 3")),
            "early_term, rank {r}: {}",
            o.show()
        );
    }

    let mut cmd = rivetrun(&["-n", "3", "-genv", "RIVET_PMI", "pmix"]);
    cmd.arg(bin("group_check")).arg("term");
    let o = run_job_checking_shm(cmd, DEADLINE);
    assert_ne!(o.code(), Some(0), "no early_term: {}", o.show());
    assert!(
        o.stderr.contains("rank 2 ended while connected to group")
            && o.stderr.contains("early_term_allowed"),
        "no early_term: rivetrun must say why\n{}",
        o.show()
    );
}

/// The same event as any PMIx program sees it (OpenPMIx's client, no
/// MPI): a member of a group made with `PMIX_GROUP_NOTIFY_TERMINATION`
/// ends without destructing; the others get `PMIX_GROUP_MEMBER_FAILED`
/// naming the group and that rank, and destruct without it. Without the
/// directive the job fails, as a seed 004 group without early termination.
#[test]
fn pmix_programs_hear_of_a_group_member_ending_under_rivetrun() {
    let _serial = serial();
    let prog = cc_pmix("pmix_group_term.c");
    let mut cmd = rivetrun(&["-n", "3"]);
    cmd.arg(&prog);
    let o = run_job_checking_shm(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for r in 0..2 {
        assert!(
            o.stdout
                .contains(&format!("pmix_group_term rank {r} heard rank 2 end OK")),
            "rank {r}: {}",
            o.show()
        );
    }

    let mut cmd = rivetrun(&["-n", "3"]);
    cmd.arg(&prog).arg("strict");
    let o = run_job_checking_shm(cmd, DEADLINE);
    assert_ne!(o.code(), Some(0), "strict: {}", o.show());
    assert!(
        o.stderr
            .contains("rank 2 ended while connected to group pmix-term-test"),
        "strict: rivetrun must name the rank and the group\n{}",
        o.show()
    );
}

/// Rivet's group connect under Open MPI's `mpirun`: ORTE (Open MPI 4.1.4)
/// serves no PMIx groups, so the connect is a fence over the named
/// processes; the job connects as one group and as a subset, runs a ring
/// on each and disconnects, as under rivetrun.
#[test]
fn rivet_group_connect_runs_under_open_mpis_mpirun() {
    let _serial = serial();
    let o = run_job_checking_shm(mpirun_openmpi(3, &[], "group_check", &["flat"]), DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for r in 0..3 {
        assert!(
            o.stdout
                .contains(&format!("group_check flat OK rank {r} of 3")),
            "{}",
            o.show()
        );
    }
}

/// How a child bootstrapped through PMIx says so.
const PMIX_CHILD: &str = "bootstrap: process manager (PMIx, OpenPMIx client)";

/// Rivet's PMIx client spawns through `PMIx_Spawn` under rivetrun's PMIx
/// server (`RIVET_PMI=pmix`): the children learn they were spawned and
/// their parents' port from the apps' environment, bootstrap through PMIx
/// too, connect back and exchange messages both ways; a spawn naming a
/// missing program fails on every parent with the server's status, starts
/// nothing, and the job goes on and ends cleanly.
#[test]
fn rivet_ranks_spawn_through_rivetruns_pmix_server() {
    let _serial = serial();
    for netmod in ["auto", "tcp"] {
        let mut cmd = rivetrun(&[
            "-n",
            "2",
            "-genv",
            "RIVET_PMI",
            "pmix",
            "-genv",
            "RIVET_NETMOD",
            netmod,
        ]);
        cmd.arg(bin("dyn_check")).args(["spawn", "3"]);
        let o = run_job_checking_shm(cmd, DEADLINE);
        dyn_spawn_passed(&o, 2, 3, PMIX_CHILD);
        let refused = o
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("dyn_check spawn: missing program refused: "))
            .unwrap_or_else(|| panic!("{netmod}: no refusal: {}", o.show()));
        // PMIX_ERR_JOB_EXE_NOT_FOUND, once per process of the request.
        assert!(
            refused.contains("PMIx_Spawn of ") && refused.contains("[-190, -190, -190]"),
            "{netmod}: {refused}"
        );
        // Nothing of the refused spawn ran: three children in all.
        assert_eq!(
            o.stdout.matches("dyn_check child OK").count(),
            3,
            "{}",
            o.show()
        );
    }
}

/// The same spawn under Open MPI 4.1's `mpirun` (ORTE's PMIx server passes
/// the apps' environment on). A missing program there ends the whole job
/// (as Hydra does): `mpirun` fails naming it, and nothing is left running
/// or in /dev/shm.
#[test]
fn rivet_ranks_spawn_under_open_mpis_mpirun() {
    let _serial = serial();
    let o = run_job_checking_shm(
        mpirun_openmpi(2, &[], "dyn_check", &["spawn", "3", "nomissing"]),
        DEADLINE,
    );
    dyn_spawn_passed(&o, 2, 3, PMIX_CHILD);
    // mpirun ends the job (SIGTERM, then SIGKILL a second later) while the
    // child it did start waits for its siblings with its node segment
    // created: that child unlinks the name on SIGTERM (`shm/term.rs`), so
    // nothing is left in /dev/shm either.
    let o = run_job_checking_shm(
        mpirun_openmpi(2, &[], "dyn_check", &["spawn", "1"]),
        DEADLINE,
    );
    assert_ne!(o.code(), Some(0), "{}", o.show());
    assert!(
        o.stderr.contains("/nonexistent/rivet-no-such-program"),
        "{}",
        o.show()
    );
}

/// Slurm's PMIx plugin (22.05) serves no spawn: the spawn fails on every
/// parent with an error naming `PMIx_Spawn` and `PMIX_ERR_NOT_SUPPORTED`,
/// and the job goes on and ends cleanly.
#[test]
fn a_spawn_under_slurm_srun_pmix_fails_with_an_error() {
    let _serial = serial();
    rivet_tests::slurm_up();
    let mut cmd = Command::new("srun");
    cmd.args(["--mpi=pmix", "-n", "2", "--time=1", "--immediate=20"])
        .arg(bin("dyn_check"))
        .args(["spawn", "1", "refused"]);
    let o = run_job_checking_shm(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert!(
        // PMIX_ERR_NOT_SUPPORTED for the one process asked for.
        o.stdout.contains("dyn_check spawn: refused: ")
            && o.stdout.contains("PMIx_Spawn of ")
            && o.stdout.contains("[-47]"),
        "{}",
        o.show()
    );
    for r in 0..2 {
        let line = format!("dyn_check spawn OK rank {r} of 2 at thread level single");
        assert!(o.stdout.contains(&line), "{line}: {}", o.show());
    }
}
