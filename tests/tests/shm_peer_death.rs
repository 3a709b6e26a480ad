//! A rank on the same node dies while others wait on it over shared
//! memory, with `--disable-auto-cleanup` so nobody tears the job down: the
//! waiters' receives (one naming it, one `ANY_SOURCE`) fail with
//! `PeerFailed` naming it, found by its process ending, and the survivors
//! go on and finalize. Without the engine's watch they wait forever.

use std::time::Duration;

use rivet::ThreadLevel;
use rivet_tests::{assert_only_failure, bin, level_env, rivetrun, run_job_checking_shm, serial};

const DEADLINE: Duration = Duration::from_secs(60);

#[test]
fn a_dead_shm_peer_fails_its_waiters_with_peer_failed() {
    let _serial = serial();
    for level in [ThreadLevel::Single, ThreadLevel::Multiple] {
        let mut cmd = rivetrun(&["-n", "3", "--disable-auto-cleanup"]);
        cmd.arg(bin("engine_check"))
            .arg("shmkill")
            .env("RIVET_YIELD", "always")
            .env_remove("RIVET_NETMOD");
        if let Some((k, v)) = level_env(level) {
            cmd.env(k, v);
        }
        let o = run_job_checking_shm(cmd, DEADLINE);
        let show = o.show();
        assert_eq!(o.code(), Some(128 + 9), "{level}: {show}");
        assert!(
            o.stderr
                .contains("rank 2 was killed by signal 9 (SIGKILL); 2 other rank(s) keep running"),
            "{level}: {show}"
        );
        for (rank, source) in [(0, "2"), (1, "-1")] {
            let failed = format!(
                "engine_check shmkill: rank {rank}'s receive from {source} failed: rank 2 failed"
            );
            assert!(
                o.stdout.contains(&failed),
                "{level}: no {failed:?} in {show}"
            );
            let ok = format!("engine_check shmkill OK rank {rank} of 3 at thread level {level}");
            assert!(o.stdout.contains(&ok), "{level}: no {ok:?} in {show}");
        }
        assert!(!o.stderr.contains("FAILED"), "{level}: {show}");
        // Survivors that crash after their OK line fail the test too.
        assert_only_failure(&o, "rank 2", &level.to_string());
    }
}
