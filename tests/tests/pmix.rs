//! PMIx both ways, on the system's OpenPMIx:
//! * Rivet ranks started by a PMIx server (Open MPI's `mpirun`) bootstrap
//!   through the OpenPMIx client library, find their node's peers and
//!   exchange business cards through it, and run the engine suites on
//!   shared memory and tcp;
//! * rivetrun serves PMIx, so Open MPI programs run under it unchanged,
//!   and an `MPI_Abort` ends the job with its code; their name service
//!   (`MPI_Publish_name` ...) is the job's PMI-1 table or its name server;
//!   `PMIx_Spawn` starts processes that are served PMIx in turn;
//! * Rivet ranks bootstrapped by PMIx spawn through `PMIx_Spawn` (under
//!   rivetrun and `mpirun`; Slurm's plugin refuses it with an error).

use std::process::Command;
use std::time::Duration;

use rivet_tests::{
    bin, cc_pmix, dyn_spawn_passed, engine_check_passed, mpi_check_passed, mpicc, mpicc_openmpi,
    pmix_dirs, rivetrun, run_job, run_job_checking_shm, run_killed_job_checking_shm, serial,
    NameServer, Outcome,
};

const DEADLINE: Duration = Duration::from_secs(90);

/// `mpirun.openmpi -n N [-x VAR=VALUE...] PROGRAM ARGS` (as root, more
/// ranks than cores allowed; the test tag forwarded for the leak check).
fn mpirun(n: u32, env: &[&str], program: &str, args: &[&str]) -> Command {
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

#[test]
fn names_and_ports_work_through_pmix() {
    let _serial = serial();
    // publish/lookup/unpublish through PMIx_Publish/Lookup/Unpublish, and
    // accept/connect between the ranks of the job.
    for args in [&["names", "pmix"][..], &["refcounts"][..]] {
        let o = run_job_checking_shm(mpirun(2, &[], "dyn_check", args), DEADLINE);
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
    let o = run_job_checking_shm(mpirun(2, &[], "rivet-bench", &["info"]), DEADLINE);
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
        let o = run_job_checking_shm(mpirun(n, &[], "engine_check", &[mode]), DEADLINE);
        engine_check_passed(&o, mode, n);
    }
}

/// Over tcp the business cards travel through PMIx (put, fence, get).
#[test]
fn business_cards_travel_through_pmix_over_tcp() {
    let _serial = serial();
    for (mode, n) in [("pingpong", 2), ("stress", 3)] {
        let o = run_job_checking_shm(
            mpirun(n, &["RIVET_NETMOD=tcp"], "engine_check", &[mode]),
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
        mpirun(1, &["RIVET_PMI=pmi1"], "engine_check", &["pingpong"]),
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

/// What `OMPI_MCA_mpi_yield_when_idle` each rank of
/// `taskset -c CPU rivetrun ARGS -n N sh -c 'echo ...'` sees.
fn yield_setting_under_one_cpu(args: &[&str], n: u32) -> Vec<String> {
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
    cmd.args(args).args(["-n", &n.to_string()]).args([
        "sh",
        "-c",
        "echo yield=${OMPI_MCA_mpi_yield_when_idle-unset}",
    ]);
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let seen: Vec<String> = o
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("yield="))
        .map(str::to_string)
        .collect();
    assert_eq!(seen.len(), n as usize, "{}", o.show());
    seen
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
    let o = run_job_checking_shm(mpirun(3, &[], "group_check", &["flat"]), DEADLINE);
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

/// rivetrun's PMIx server keeps job data in OpenPMIx's `hash` store and
/// checks clients with its `native` security component (not `munge`,
/// which waits seconds for a munged that may not run), and its ranks'
/// clients pick the same, unless the user chose otherwise.
#[test]
fn the_pmix_store_and_security_are_chosen_unless_the_user_chose() {
    let _serial = serial();
    let show = ["sh", "-c", "echo gds=$PMIX_MCA_gds psec=$PMIX_MCA_psec"];
    let mut cmd = rivetrun(&["-n", "1"]);
    cmd.args(show)
        .env_remove("PMIX_MCA_gds")
        .env_remove("PMIX_MCA_psec");
    let o = run_job(cmd, DEADLINE);
    assert!(o.stdout.contains("gds=hash psec=native\n"), "{}", o.show());
    let mut cmd = rivetrun(&["-n", "1"]);
    cmd.args(show)
        .env("PMIX_MCA_gds", "ds21")
        .env("PMIX_MCA_psec", "munge");
    let o = run_job(cmd, DEADLINE);
    assert!(o.stdout.contains("gds=ds21 psec=munge\n"), "{}", o.show());
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
        mpirun(2, &[], "dyn_check", &["spawn", "3", "nomissing"]),
        DEADLINE,
    );
    dyn_spawn_passed(&o, 2, 3, PMIX_CHILD);
    // mpirun ends the job (SIGTERM, then SIGKILL a second later) while the
    // child it did start waits for its siblings with its node segment
    // created: that child unlinks the name on SIGTERM (`shm/term.rs`), so
    // nothing is left in /dev/shm either.
    let o = run_job_checking_shm(mpirun(2, &[], "dyn_check", &["spawn", "1"]), DEADLINE);
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
