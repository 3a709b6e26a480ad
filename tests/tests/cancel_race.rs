//! Cancels raced against matches (`cancel_race` ranks): 120 rounds per
//! side, eager and rendezvous sizes, over shared memory and over tcp, at
//! thread level SINGLE. The ranks check that every round ended exactly one
//! way — cancelled (nothing written, nothing delivered, the message still
//! receivable when the receive was cancelled) or matched (the whole
//! message, byte for byte) — and die naming the round otherwise. Sends
//! cancelled before the receiver posts (eager and rendezvous sizes) must
//! be cancelled every time, with a second message of the same tag intact.

use std::time::Duration;

use rivet_tests::{bin, rivetrun, run_job_checking_shm, serial};

const DEADLINE: Duration = Duration::from_secs(120);

#[test]
fn a_cancel_racing_a_match_ends_exactly_one_way_with_the_data_intact() {
    let _serial = serial();
    for netmod in [None, Some("tcp")] {
        let mut cmd = rivetrun(&["-n", "2"]);
        cmd.arg(bin("cancel_race")).env("RIVET_YIELD", "always");
        match netmod {
            Some(n) => cmd.env("RIVET_NETMOD", n),
            None => cmd.env_remove("RIVET_NETMOD"),
        };
        let o = run_job_checking_shm(cmd, DEADLINE);
        let case = netmod.unwrap_or("shm");
        assert_eq!(o.code(), Some(0), "{case}: {}", o.show());
        for rank in 0..2 {
            assert!(
                o.stdout.contains(&format!("cancel_race OK rank {rank}:")),
                "{case}: {}",
                o.show()
            );
        }
        let line = o
            .stdout
            .lines()
            .find(|l| l.starts_with("cancel_race OK rank 0:"))
            .unwrap_or_default();
        // Which way the rounds went depends on timing; each one was
        // checked by the ranks. Shown for the record.
        eprintln!("{case}: {line}");
        let counts: Vec<u32> = line
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|w| w.parse().ok())
            .collect();
        // rank, receive side (2), send side (2), unposted sends cancelled.
        assert_eq!(counts.len(), 6, "{case}: {line}");
        assert_eq!(
            counts[1..5].iter().sum::<u32>(),
            240,
            "{case}: every round ended one way: {line}"
        );
        // With no receive posted, the send cancel wins every time (rank
        // 1 dies naming the round otherwise): that side of the race is hit.
        assert_eq!(counts[5], 12, "{case}: unposted sends cancelled: {line}");
    }
}
