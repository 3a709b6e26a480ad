//! MPMD under rivetrun's PMIx server: each section is an app, and every
//! rank learns its own (Open MPI's `MPI_APPNUM`, Rivet's appnum over
//! PMIx), as well as the number of apps, each app's size and lowest rank,
//! and its rank within its app (OpenPMIx's client, `tests/c/pmix_apps.c`).
//! Across hosts: `multihost_pmix.rs`.

use std::time::Duration;

use rivet_tests::{appnums, bin, cc_pmix, mpicc_openmpi, rivetrun, run_job_checking_shm, serial};

const DEADLINE: Duration = Duration::from_secs(90);

#[test]
fn open_mpi_sees_each_sections_appnum_under_rivetrun() {
    let _serial = serial();
    let prog = mpicc_openmpi("mpi_appnum.c").display().to_string();
    let o = run_job_checking_shm(
        rivetrun(&["-n", "1", &prog, ":", "-n", "2", &prog]),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for (rank, app) in [(0, 0), (1, 1), (2, 1)] {
        assert!(
            o.stdout
                .contains(&format!("mpi_appnum rank {rank} appnum {app}\n")),
            "rank {rank}: {}",
            o.show()
        );
    }
}

#[test]
fn pmix_clients_see_the_apps_of_an_mpmd_job_and_a_one_app_job() {
    let _serial = serial();
    let prog = cc_pmix("pmix_apps.c");
    let prog = prog.display().to_string();
    // Sections of 1, 2 and 1 ranks: apps 0, 1, 2.
    let o = run_job_checking_shm(
        rivetrun(&[
            "-n", "1", &prog, ":", "-n", "2", &prog, ":", "-n", "1", &prog,
        ]),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for (rank, size, leader, app_rank) in [(0, 1, 0, 0), (1, 2, 1, 0), (2, 2, 1, 1), (3, 1, 3, 0)] {
        let want = format!(
            "pmix_apps rank {rank} napps 3 appnums 0,1,1,2 app_size {size} app_leader {leader} \
             app_rank {app_rank} local_rank {rank}\n"
        );
        assert!(o.stdout.contains(&want), "{want:?}: {}", o.show());
    }
    // Without sections: one app of every rank.
    let o = run_job_checking_shm(rivetrun(&["-n", "2", &prog]), DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for rank in 0..2 {
        let want = format!(
            "pmix_apps rank {rank} napps 1 appnums 0,0 app_size 2 app_leader 0 \
             app_rank {rank} local_rank {rank}\n"
        );
        assert!(o.stdout.contains(&want), "{want:?}: {}", o.show());
    }
}

#[test]
fn rivet_ranks_bootstrapped_by_pmix_get_their_sections_appnum() {
    let _serial = serial();
    let check = bin("pmi_check").display().to_string();
    let o = run_job_checking_shm(
        rivetrun(&[
            "-genv",
            "RIVET_PMI",
            "pmix",
            "-n",
            "1",
            &check,
            ":",
            "-n",
            "2",
            &check,
        ]),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let want: Vec<(u32, i32, String)> = [(0, 0), (1, 1), (2, 1)]
        .into_iter()
        .map(|(r, a)| (r, a, "pmix".to_string()))
        .collect();
    assert_eq!(appnums(&o.stdout), want, "{}", o.show());
}
