//! Whole engine jobs end to end: a rank killed mid-job, ping-pong under
//! MPICH's Hydra and with every yield policy, dup and barriers on 1 to 4
//! ranks, a singleton without a launcher, and the harness's own leak check.
//! Every job must end by itself, leave no process and no `/dev/shm/rivet-*`
//! segment behind (`rivet_tests::engine_cases` builds the cases and checks
//! the ranks' verdicts).

use std::process::Command;

use rivet_tests::engine_cases::*;
use rivet_tests::{bin, run_job_checking_shm, run_killed_job_checking_shm, serial, LEVELS};

/// Rank 2 SIGKILLs itself while ranks 0 and 1 wait in a receive from it,
/// or (`early`) before starting its engine, while the others start theirs
/// and the node segment waits for rank 2 to attach: rivetrun ends the job
/// with 128+9, nothing outlives it, no segment is left.
#[test]
fn a_killed_rank_ends_the_job_and_leaves_nothing() {
    let _serial = serial();
    let runs = [
        (&["kill"][..], &[][..]),
        (&["kill", "early"][..], &[][..]),
        (&["kill"][..], &TCP[0][..]),
        (&["kill"][..], &TCP[1][..]),
    ];
    for (mode, settings) in runs {
        for env in at_levels(vec![settings.to_vec()]) {
            // Killed before attaching (`early`), rank 2 leaves the node
            // segment to rivetrun: only what outlives rivetrun counts.
            let o = run_killed_job_checking_shm(job(3, &bin("engine_check"), mode, &env), DEADLINE);
            let case = format!("{mode:?} {env:?}");
            assert_eq!(o.code(), Some(128 + 9), "{case}: {}", o.show());
            assert!(
                o.stderr.contains("rank 2 was killed by signal 9 (SIGKILL)"),
                "{case}: {}",
                o.show()
            );
            has(&o, &case, "engine_check kill: rank 2 raises SIGKILL");
            // Ranks 0 and 1 checked their thread level before waiting.
            assert!(!o.stderr.contains("FAILED"), "{case}: {}", o.show());
        }
    }
}

/// Ping-pong of sizes up to 4 MiB (eager and rendezvous), bootstrapped by
/// MPICH's Hydra instead of rivetrun.
#[test]
fn pingpong_under_mpich_hydra() {
    let _serial = serial();
    for env in cases(&[&[]], &[&[]]) {
        let mut cmd = Command::new("mpiexec.hydra");
        cmd.args(["-n", "2"])
            .arg(bin("engine_check"))
            .arg("pingpong");
        let o = run_job_checking_shm(with_env(cmd, &env), DEADLINE);
        assert_eq!(o.code(), Some(0), "{env:?}: {}", o.show());
        knobs_took_effect(&o, &env);
        for rank in 0..2 {
            has(&o, &env, &ok_line("pingpong", rank, 2, env.level));
        }
        has(
            &o,
            &env,
            "engine_check pingpong: sizes [0, 1, 100, 4096, 65536, 300000, 4194304]",
        );
    }
}

/// The same ping-pong under rivetrun with every yield policy.
#[test]
fn pingpong_under_rivetrun_with_every_yield_mode() {
    let _serial = serial();
    // Each (policy, transport) once, the thread levels taking turns.
    let mut turn = LEVELS.iter().cycle();
    for y in ["auto", "always", "never"] {
        for net in [&[][..], &TCP[0][..], &TCP[1][..]] {
            let settings: Env = net.iter().copied().chain([("RIVET_YIELD", y)]).collect();
            let env = Case::at(settings, *turn.next().expect("cycle never ends"));
            let o = pass(2, &["pingpong"], &env);
            knobs_took_effect(&o, &env);
        }
    }
}

/// dup: new context ids, agreed by all ranks; a message on a dup never
/// matches a receive on its parent; barriers (checked with marker files the
/// ranks write before entering) on 1 to 4 ranks.
#[test]
fn dup_isolates_traffic_and_barriers_hold_on_1_to_4_ranks() {
    let _serial = serial();
    // Each transport on each size once, the thread levels taking turns
    // (the barrier does not depend on the level; the lock does not on n).
    let jobs = (1..=4u32).flat_map(|n| {
        settings(&[&[]], &[&[]])
            .into_iter()
            .enumerate()
            .map(move |(i, env)| (n, Case::at(env, LEVELS[(n as usize + i) % 2])))
    });
    for (n, env) in jobs {
        let dir = std::env::temp_dir().join(format!("rivet-barrier-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let o = pass(n, &["dup", dir.to_str().unwrap()], &env);
        let _ = std::fs::remove_dir_all(&dir);
        for rank in 0..n {
            has(
                &o,
                &env,
                &format!("engine_check dup: rank {rank} of {n}: context ids ["),
            );
        }
        has(&o, &env, "isolation and 45 barriers checked");
    }
}

/// No launcher: a singleton of size 1 that sends to itself.
#[test]
fn a_singleton_sends_to_itself() {
    let _serial = serial();
    for env in at_levels(vec![vec![]]) {
        let mut cmd = Command::new(bin("engine_check"));
        cmd.arg("singleton");
        for var in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE"] {
            cmd.env_remove(var);
        }
        let o = run_job_checking_shm(with_env(cmd, &env), DEADLINE);
        assert_eq!(o.code(), Some(0), "{env:?}: {}", o.show());
        has(
            &o,
            &env,
            "engine_check singleton: rank 0 of 1, messages to self verified",
        );
        has(&o, &env, &ok_line("singleton", 0, 1, env.level));
    }
}

/// The harness itself: a job that leaves a Rivet segment in /dev/shm fails.
#[test]
#[should_panic(expected = "left shared memory behind")]
fn the_harness_catches_a_leaked_segment() {
    let _serial = serial();
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "touch /dev/shm/rivet-harness-check-$$"]);
    run_job_checking_shm(cmd, DEADLINE);
}
