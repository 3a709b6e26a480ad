//! PMIx both ways, on the system's OpenPMIx, for a job's start and names
//! (spawns and groups: `pmix_dynamic.rs`):
//! * Rivet ranks started by a PMIx server (Open MPI's `mpirun`) bootstrap
//!   through the OpenPMIx client library, find their node's peers and
//!   exchange business cards through it, and run the engine suites on
//!   shared memory and tcp;
//! * rivetrun serves PMIx, so Open MPI programs run under it unchanged,
//!   and an `MPI_Abort` ends the job with its code; their connection to
//!   the server has Nagle off; their name service
//!   (`MPI_Publish_name` ...) is the job's PMI-1 table or its name server.

use std::process::Command;
use std::time::Duration;

use rivet_tests::{
    bin, cc_pmix, engine_check_passed, mpi_check_passed, mpicc, mpicc_openmpi, mpirun_openmpi,
    pmix_dirs, ranks_on_one_cpu, rivetrun, run_job, run_job_checking_shm,
    run_killed_job_checking_shm, serial, NameServer, Outcome,
};

const DEADLINE: Duration = Duration::from_secs(90);

#[test]
fn names_and_ports_work_through_pmix() {
    let _serial = serial();
    // publish/lookup/unpublish through PMIx_Publish/Lookup/Unpublish, and
    // accept/connect between the ranks of the job.
    for args in [&["names", "pmix"][..], &["refcounts"][..]] {
        let o = run_job_checking_shm(mpirun_openmpi(2, &[], "dyn_check", args), DEADLINE);
        assert_eq!(o.code(), Some(0), "{args:?}: {}", o.show());
        for r in 0..2 {
            assert!(
                o.stdout.contains(&format!(
                    "dyn_check {} OK rank {r} of 2 at thread level single",
                    args[0]
                )),
                "{args:?}: {}",
                o.show()
            );
        }
    }
}

#[test]
fn rivet_ranks_run_under_slurm_srun_pmix() {
    let _serial = serial();
    rivet_tests::slurm_up();
    let mut cmd = Command::new("srun");
    // --immediate: fail, rather than queue, when the node cannot take the job.
    cmd.args(["--mpi=pmix", "-n", "2", "--time=1", "--immediate=20"])
        .arg(bin("engine_check"))
        .arg("pingpong");
    let o = run_job_checking_shm(cmd, DEADLINE);
    engine_check_passed(&o, "pingpong", 2);
}

#[test]
fn info_says_the_job_bootstrapped_through_pmix_with_its_node_peers() {
    let _serial = serial();
    let o = run_job_checking_shm(mpirun_openmpi(2, &[], "rivet-bench", &["info"]), DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert!(
        o.stdout
            .contains("bootstrap: process manager (PMIx, OpenPMIx client)"),
        "{}",
        o.show()
    );
    // Both ranks are on this node (pmix.lpeers): shared memory, no netmod.
    assert!(
        o.stdout.contains("(rank 0 of 2, 2 on this node)"),
        "{}",
        o.show()
    );
    assert!(o.stdout.contains("transport.shm: on"), "{}", o.show());
}

#[test]
fn engine_suites_run_under_a_pmix_server() {
    let _serial = serial();
    for (mode, n) in [
        ("pingpong", 2),
        ("mprobe", 2),
        ("sizes", 2),
        ("order", 4),
        ("stress", 4),
    ] {
        let o = run_job_checking_shm(mpirun_openmpi(n, &[], "engine_check", &[mode]), DEADLINE);
        engine_check_passed(&o, mode, n);
    }
}

/// Over tcp the business cards travel through PMIx (put, fence, get).
#[test]
fn business_cards_travel_through_pmix_over_tcp() {
    let _serial = serial();
    for (mode, n) in [("pingpong", 2), ("stress", 3)] {
        let o = run_job_checking_shm(
            mpirun_openmpi(n, &["RIVET_NETMOD=tcp"], "engine_check", &[mode]),
            DEADLINE,
        );
        engine_check_passed(&o, mode, n);
    }
}

#[test]
fn rivet_ranks_bootstrap_through_rivetruns_own_pmix_server() {
    let _serial = serial();
    // RIVET_PMI=pmix: the ranks take rivetrun's PMIx server over PMI_FD;
    // over tcp their cards travel through the server's fence.
    for (netmod, mode, n) in [("auto", "pingpong", 2), ("tcp", "stress", 3)] {
        let mut cmd = rivetrun(&[
            "-n",
            &n.to_string(),
            "-genv",
            "RIVET_PMI",
            "pmix",
            "-genv",
            "RIVET_NETMOD",
            netmod,
        ]);
        cmd.arg(bin("engine_check")).arg(mode);
        let o = run_job_checking_shm(cmd, DEADLINE);
        engine_check_passed(&o, mode, n);
    }
}

#[test]
fn rivet_pmi_pmi1_refuses_a_pmix_launch_with_a_reason() {
    let _serial = serial();
    let o = run_job_checking_shm(
        mpirun_openmpi(1, &["RIVET_PMI=pmi1"], "engine_check", &["pingpong"]),
        DEADLINE,
    );
    assert_ne!(o.code(), Some(0), "{}", o.show());
    assert!(
        o.stderr.contains("launched by a PMIx launcher"),
        "{}",
        o.show()
    );
}

/// rivetrun's PMIx server directories (`rivet-<pid>-pmix-*` in the temp dir).

#[test]
fn open_mpi_programs_run_under_rivetrun_on_1_2_and_4_ranks() {
    let _serial = serial();
    let prog = mpicc_openmpi("mpi_check.c");
    let before = pmix_dirs();
    for n in [1, 2, 4] {
        let mut cmd = rivetrun(&["-n", &n.to_string()]);
        cmd.arg(&prog);
        mpi_check_passed(&run_job_checking_shm(cmd, DEADLINE), n);
    }
    let left: Vec<String> = pmix_dirs()
        .into_iter()
        .filter(|d| !before.contains(d))
        .collect();
    assert!(
        left.is_empty(),
        "PMIx server directories left behind: {left:?}"
    );
}

/// What `OMPI_MCA_mpi_yield_when_idle` each rank of `rivetrun ARGS -n N`
/// on one CPU sees.
fn yield_setting_under_one_cpu(args: &[&str], n: u32) -> Vec<String> {
    ranks_on_one_cpu(args, n, "yield", "${OMPI_MCA_mpi_yield_when_idle-unset}")
}

#[test]
fn open_mpi_ranks_yield_when_they_outnumber_rivetruns_cpus_unless_the_user_says() {
    let _serial = serial();
    // One CPU: one rank spins alone, two are told to yield, as mpirun
    // tells an oversubscribed node's ranks.
    assert_eq!(yield_setting_under_one_cpu(&[], 1), ["unset"]);
    assert_eq!(yield_setting_under_one_cpu(&[], 2), ["1", "1"]);
    // The user's choice stands.
    let mine = ["-genv", "OMPI_MCA_mpi_yield_when_idle", "0"];
    assert_eq!(yield_setting_under_one_cpu(&mine, 2), ["0", "0"]);
}

/// rivetrun turns Nagle off on its clients' end of their PMIx connection
/// (OpenPMIx's client leaves it on, and each Open MPI rank then waited for
/// the server's delayed ACK, about 40 ms, in `MPI_Finalize`).
#[test]
fn rivetruns_pmix_clients_have_nagle_off_on_their_server_connection() {
    let _serial = serial();
    let prog = cc_pmix("pmix_nodelay.c");
    let mut cmd = rivetrun(&["-n", "3"]);
    cmd.arg(&prog);
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for rank in 0..3 {
        let line = format!("pmix_nodelay rank {rank} nodelay=1\n");
        assert!(o.stdout.contains(&line), "{}", o.show());
    }
}

#[test]
fn an_open_mpi_abort_under_rivetrun_ends_the_job_with_its_code() {
    let _serial = serial();
    let prog = mpicc_openmpi("mpi_check.c");
    let mut cmd = rivetrun(&["-n", "3"]);
    cmd.arg(&prog).args(["abort", "1", "13"]);
    // Open MPI's segments (`vader_segment.*`) too: the ranks registered
    // them for removal with the PMIx server, which removes them as the
    // killed ranks' connections end.
    let o = run_killed_job_checking_shm(cmd, DEADLINE);
    assert_eq!(o.code(), Some(13), "{}", o.show());
    assert!(
        o.stderr.contains("rank 1 called abort (exit code 13)"),
        "{}",
        o.show()
    );
}

fn names_ok(o: &Outcome, mode: &str, n: u32) {
    assert_eq!(o.code(), Some(0), "{mode}: {}", o.show());
    for r in 0..n {
        assert!(
            o.stdout
                .contains(&format!("mpi_names {mode} OK rank {r} of {n}")),
            "{mode} rank {r}: {}",
            o.show()
        );
    }
}

#[test]
fn open_mpi_ranks_publish_look_up_and_unpublish_names_under_rivetrun() {
    let _serial = serial();
    let prog = mpicc_openmpi("mpi_names.c");
    let service = format!("pmix-names-{}", std::process::id());
    let mut cmd = rivetrun(&["-n", "2"]);
    cmd.arg(&prog).args(["names", &service]);
    let o = run_job(cmd, DEADLINE);
    names_ok(&o, "names", 2);
    assert!(
        o.stdout
            .contains("rank 1: unpublish by a non-publisher failed"),
        "{}",
        o.show()
    );
    assert!(
        o.stdout
            .contains("rank 1: lookup after unpublish failed with MPI_ERR_NAME"),
        "{}",
        o.show()
    );
}

/// Rivet's own PMIx client against rivetrun's PMIx server: the strict
/// checks (a duplicate publish and an unpublish of a missing name fail)
/// hold there as over PMI-1.
#[test]
fn rivet_ranks_publish_through_rivetruns_pmix_server() {
    let _serial = serial();
    let mut cmd = rivetrun(&["-n", "2", "-genv", "RIVET_PMI", "pmix"]);
    cmd.arg(bin("dyn_check")).arg("names");
    let o = run_job_checking_shm(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for r in 0..2 {
        assert!(
            o.stdout.contains(&format!(
                "dyn_check names OK rank {r} of 2 at thread level single"
            )),
            "{}",
            o.show()
        );
    }
}

/// A name an Open MPI rank publishes over PMIx is found over PMI-1 by an
/// MPICH rank of another job sharing the name server, and the other way
/// round.
#[test]
fn names_cross_between_open_mpi_and_mpich_jobs_through_a_name_server() {
    let _serial = serial();
    let (ompi, mpich) = (mpicc_openmpi("mpi_names.c"), mpicc("mpi_names.c"));
    let ns = NameServer::start();
    let id = std::process::id();
    let job = |prog: &std::path::Path, n: &str, args: [&str; 3]| {
        let mut cmd = rivetrun(&["-n", n, "--nameserver", &ns.addr]);
        cmd.arg(prog).args(args);
        run_job(cmd, DEADLINE)
    };
    let (a, b) = (format!("from-ompi-{id}"), format!("from-mpich-{id}"));
    names_ok(&job(&ompi, "2", ["publish", &a, "ompi-port"]), "publish", 2);
    names_ok(&job(&mpich, "1", ["lookup", &a, "ompi-port"]), "lookup", 1);
    names_ok(
        &job(&mpich, "1", ["publish", &b, "mpich-port"]),
        "publish",
        1,
    );
    names_ok(&job(&ompi, "2", ["lookup", &b, "mpich-port"]), "lookup", 2);
    // A name nobody published: Open MPI's lookup fails at once (it does
    // not ask to wait), and the job says so.
    let o = job(&ompi, "1", ["lookup", &format!("never-{id}"), "x"]);
    assert_eq!(o.code(), Some(5), "{}", o.show());
    assert!(
        o.stderr.contains("called abort (exit code 5)"),
        "{}",
        o.show()
    );
}

/// rivetrun's PMIx server leaves OpenPMIx to pick its data store (its
/// shared-memory `ds21`, which the ranks read themselves, where it is
/// built) without the old clients' `ds12`, with smaller segments, and
/// checks clients with its `native` security component (not `munge`,
/// which waits seconds for a munged that may not run); its ranks' clients
/// pick the same, unless the user chose otherwise. The server keeps its
/// own data in `hash`, so a list without it gets it back.
#[test]
fn the_pmix_store_and_security_are_chosen_unless_the_user_chose() {
    let _serial = serial();
    let show = [
        "sh",
        "-c",
        "echo gds=$PMIX_MCA_gds psec=$PMIX_MCA_psec seg=$NS_DATA_SEG_SIZE served=$PMIX_GDS_MODULE",
    ];
    let mut cmd = rivetrun(&["-n", "1"]);
    cmd.args(show)
        .env_remove("PMIX_MCA_gds")
        .env_remove("PMIX_MCA_psec")
        .env_remove("NS_DATA_SEG_SIZE");
    let o = run_job(cmd, DEADLINE);
    assert!(
        o.stdout
            .contains("gds=^ds12 psec=native seg=1048576 served=ds21,hash\n"),
        "{}",
        o.show()
    );
    let mut cmd = rivetrun(&["-n", "1"]);
    cmd.args(show)
        .env("PMIX_MCA_gds", "ds21,hash")
        .env("PMIX_MCA_psec", "munge")
        .env("NS_DATA_SEG_SIZE", "4194304");
    let o = run_job(cmd, DEADLINE);
    assert!(
        o.stdout
            .contains("gds=ds21,hash psec=munge seg=4194304 served=ds21,hash\n"),
        "{}",
        o.show()
    );
    let mut cmd = rivetrun(&["-n", "1"]);
    cmd.args(show).env("PMIX_MCA_gds", "ds21");
    let o = run_job(cmd, DEADLINE);
    assert!(o.stdout.contains("gds=ds21,hash "), "{}", o.show());
    assert!(o.stderr.contains("taken as \"ds21,hash\""), "{}", o.show());
}

/// Open MPI programs run under rivetrun whatever store list the user
/// gives, and leave neither shared memory nor the server's directory (with
/// `ds21`'s segment files) behind, nor on an abort. `ds21` or `ds12` alone
/// used to leave the server without its own `hash` store: with `ds21` it
/// waited for ever on its own lock as the first rank connected, with
/// `ds12` it crashed; so did a data segment too small for the job's data.
#[test]
fn open_mpi_programs_run_under_rivetrun_with_any_pmix_store() {
    let _serial = serial();
    let prog = mpicc_openmpi("mpi_check.c");
    let before = pmix_dirs();
    for gds in [
        None,
        Some("ds21"),
        Some("ds12"),
        Some("^hash"),
        Some("hash"),
    ] {
        let mut cmd = rivetrun(&["-n", "4"]);
        cmd.arg(&prog);
        match gds {
            Some(gds) => cmd.env("PMIX_MCA_gds", gds),
            None => cmd.env_remove("PMIX_MCA_gds"),
        };
        mpi_check_passed(&run_job_checking_shm(cmd, DEADLINE), 4);
    }
    // A data segment too small for the job's data crashed OpenPMIx's
    // server: rivetrun raises it.
    let mut cmd = rivetrun(&["-n", "4"]);
    cmd.arg(&prog).env("NS_DATA_SEG_SIZE", "4096");
    let o = run_job_checking_shm(cmd, DEADLINE);
    mpi_check_passed(&o, 4);
    assert!(
        o.stderr.contains("NS_DATA_SEG_SIZE=4096 taken as 65536"),
        "{}",
        o.show()
    );
    let mut cmd = rivetrun(&["-n", "3"]);
    cmd.arg(&prog)
        .args(["abort", "1", "13"])
        .env_remove("PMIX_MCA_gds");
    let o = run_killed_job_checking_shm(cmd, DEADLINE);
    assert_eq!(o.code(), Some(13), "{}", o.show());
    let left: Vec<String> = pmix_dirs()
        .into_iter()
        .filter(|d| !before.contains(d))
        .collect();
    assert!(
        left.is_empty(),
        "PMIx server directories left behind: {left:?}"
    );
}
