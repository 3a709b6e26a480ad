//! Group connect end to end (`group_check` ranks under rivetrun, seed 004):
//! a group across two process groups (a job and the children it spawned)
//! with connect ids, new ranks, `xchg_only` and events; `optional` with a
//! participant that died; a member ending without disconnecting, allowed
//! (`early_term_allowed`) and not. Each runs over shared memory inside a job
//! (tcp between process groups), and with a netmod forced everywhere:
//! `RIVET_NETMOD=tcp`, and `RIVET_NETMOD=ofi` on the `tcp;ofi_rxm` and
//! `shm` providers; each at thread level SINGLE (no `RIVET_THREAD_LEVEL`:
//! the ranks' `Engine<Local>` runs without a lock) and at MULTIPLE
//! (`RIVET_THREAD_LEVEL=multiple`), the ranks checking that they run at the
//! level asked for (`rivet_tests::every_transport_and_level`). Under Hydra
//! the call is refused before Hydra sees it.
//! Every job must end by itself and leave no process and no shared-memory
//! segment behind.

use std::process::Command;
use std::time::Duration;

use rivet::ThreadLevel;
use rivet_tests::{
    bin, every_transport_and_level, job_over, level_env, oks_at, run_job_checking_shm, serial,
    Outcome, LEVELS,
};

const DEADLINE: Duration = Duration::from_secs(120);

fn group_job(n: u32, args: &[&str], env: &[(&str, &str)], extra: &[&str]) -> Command {
    job_over("group_check", n, args, env, extra)
}

/// Ranks that passed `mode` at thread level `level`.
fn oks(o: &Outcome, mode: &str, level: ThreadLevel) -> usize {
    oks_at(&o.stdout, "group_check", mode, level)
}

#[test]
fn a_group_across_a_job_and_its_children() {
    let _g = serial();
    for over in every_transport_and_level() {
        let (name, env, level) = (over.to_string(), &over.env, over.level);
        let o = run_job_checking_shm(group_job(2, &["parents", "2"], env, &[]), DEADLINE);
        assert_eq!(o.code(), Some(0), "{name}: {}", o.show());
        assert_eq!(
            oks(&o, "parents", level) + oks(&o, "child", level),
            4,
            "{name}: 2 parents and 2 children must pass at thread level {level}\n{}",
            o.show()
        );
    }
}

#[test]
fn optional_goes_on_without_a_dead_participant() {
    let _g = serial();
    for over in every_transport_and_level() {
        let (name, env, level) = (over.to_string(), &over.env, over.level);
        let job = group_job(3, &["optional"], env, &["--disable-auto-cleanup"]);
        let o = run_job_checking_shm(job, DEADLINE);
        // Rank 2 aborted: rivetrun reports it, the others finished.
        assert_eq!(o.code(), Some(128 + libc::SIGABRT), "{name}: {}", o.show());
        assert_eq!(oks(&o, "optional", level), 2, "{name}: {}", o.show());
        rivet_tests::assert_only_failure(&o, "rank 2", &name);
        assert_eq!(
            o.stdout.matches("refused").count(),
            2,
            "{name}: the strict connect must fail on both survivors\n{}",
            o.show()
        );
    }
}

#[test]
fn a_member_that_ends_without_disconnecting() {
    let _g = serial();
    for over in every_transport_and_level() {
        let (name, env, level) = (over.to_string(), &over.env, over.level);
        let o = run_job_checking_shm(group_job(3, &["term", "early"], env, &[]), DEADLINE);
        assert_eq!(o.code(), Some(0), "{name}, early_term: {}", o.show());
        assert_eq!(
            oks(&o, "term", level),
            3,
            "{name}, early_term: {}",
            o.show()
        );

        let o = run_job_checking_shm(group_job(3, &["term"], env, &[]), DEADLINE);
        assert_ne!(o.code(), Some(0), "{name}, no early_term: {}", o.show());
        assert!(
            o.stderr.contains("early_term_allowed"),
            "{name}, no early_term: rivetrun must say why\n{}",
            o.show()
        );
    }
}

#[test]
fn hydra_is_not_asked() {
    let _g = serial();
    for level in LEVELS {
        let mut cmd = Command::new("mpiexec.hydra");
        cmd.args(["-n", "2"])
            .arg(bin("group_check"))
            .arg("unserved");
        cmd.env_remove("RIVET_NETMOD")
            .env_remove("RIVET_THREAD_LEVEL")
            .env("RIVET_YIELD", "always")
            .envs(level_env(level));
        let o = run_job_checking_shm(cmd, DEADLINE);
        assert_eq!(o.code(), Some(0), "thread level {level}: {}", o.show());
        assert_eq!(
            oks(&o, "unserved", level),
            2,
            "thread level {level}: {}",
            o.show()
        );
    }
}
