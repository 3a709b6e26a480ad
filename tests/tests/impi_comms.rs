//! Communicator creation across IMPI clients (seed 003's 4.4 create, 4.6
//! dup, 4.7 split): a Rivet server with two Rivet clients of 2 ranks each
//! (world ranks 0, 1 under client 0, 2, 3 under client 1) runs
//! `engine_check comms` and `engine_check splitbad`; every job ends within
//! `DATA_DEADLINE`, its processes reaped, and the server exits 0.

use rivet_tests::impi::across_two_clients;
use rivet_tests::{bin, serial};

const NONE: [(&str, &str); 1] = [("IMPI_AUTH_NONE", "")];

#[test]
fn dup_split_and_create_across_two_clients() {
    let _serial = serial();
    let check = bin("engine_check");
    let outs = across_two_clients(&[check.to_str().unwrap(), "comms"], &NONE);
    for (c, o) in outs.iter().enumerate() {
        for r in [0, 1] {
            let g = 2 * c + r;
            // Parity split with reversed keys: descending world ranks;
            // create takes the first rank of each client, 2 then 0.
            let parity = if g % 2 == 0 { "[2, 0]" } else { "[3, 1]" };
            // The world's 0, then 4.4's rule (newcid = odd maximum + 1)
            // from the engine's first free id, 4 (COMM_SELF has 2 and 3):
            // dup 4, split 6, the split's dup 8, create 10 (taken by
            // non-members too), the split without rank 3 12.
            let mut ids = vec![0, 4, 6, 8];
            if g % 2 == 0 {
                ids.push(10);
            }
            if g != 3 {
                ids.push(12);
            }
            let want =
                format!("world rank {g}: parity {parity}, create [2, 0], context ids {ids:?}\n");
            assert!(o.stdout.contains(&want), "{want}: {}", o.show());
            let ok = format!("engine_check comms OK rank {g} of 4");
            assert!(o.stdout.contains(&ok), "{}", o.show());
        }
    }
}

#[test]
fn bad_arguments_and_a_skipped_split_fail_without_a_hang() {
    let _serial = serial();
    let check = bin("engine_check");
    let outs = across_two_clients(&[check.to_str().unwrap(), "splitbad"], &NONE);
    let all: String = outs.iter().map(|o| o.stdout.as_str()).collect();
    assert!(
        all.contains("engine_check splitbad: rank 1: split colour 4294967295 is above"),
        "{all}"
    );
    assert!(all.contains("rank 3 skips the split"), "{all}");
    // Every other rank's split fails, naming a rank that left.
    for g in 0..3 {
        let want = format!("engine_check splitbad: rank {g}: the split failed: ");
        let line = all
            .lines()
            .find(|l| l.starts_with(&want))
            .unwrap_or_else(|| panic!("{want}: {all}"));
        assert!(line.contains("rank"), "{line}");
    }
    for g in 0..4 {
        assert!(
            all.contains(&format!("engine_check splitbad OK rank {g} of 4")),
            "{all}"
        );
    }
}
