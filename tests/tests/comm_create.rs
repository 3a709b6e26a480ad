//! `Comm::create` and `Comm::split` within one job (the engine's own
//! context agreement and gather, `engine/src/split.rs`): 4 ranks under one
//! rivetrun run `engine_check comms` and `engine_check splitbad`, bounded
//! in time, every process reaped. Across IMPI clients: `impi_comms.rs`.

use std::time::Duration;

use rivet_tests::{bin, serial};

const DEADLINE: Duration = Duration::from_secs(120);

fn run(mode: &str) -> rivet_tests::Outcome {
    let check = bin("engine_check");
    let mut cmd = rivet_tests::rivetrun(&["-n", "4", check.to_str().unwrap(), mode]);
    cmd.env("RIVET_YIELD", "always");
    let o = rivet_tests::run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    o
}

#[test]
fn dup_split_and_create_in_one_job() {
    let _serial = serial();
    let o = run("comms");
    for g in 0..4 {
        let parity = if g % 2 == 0 { "[2, 0]" } else { "[3, 1]" };
        let want = format!("world rank {g}: parity {parity}, create [2, 0], context ids [0, ");
        assert!(o.stdout.contains(&want), "{want}: {}", o.show());
        assert!(
            o.stdout
                .contains(&format!("engine_check comms OK rank {g} of 4")),
            "{}",
            o.show()
        );
    }
}

#[test]
fn a_split_one_rank_skips_fails_the_others_in_one_job() {
    let _serial = serial();
    let o = run("splitbad");
    assert!(o.stdout.contains("rank 3 skips the split"), "{}", o.show());
    for g in 0..3 {
        let want = format!("engine_check splitbad: rank {g}: the split failed: ");
        assert!(o.stdout.contains(&want), "{want}: {}", o.show());
    }
    for g in 0..4 {
        let ok = format!("engine_check splitbad OK rank {g} of 4");
        assert!(o.stdout.contains(&ok), "{}", o.show());
    }
}
