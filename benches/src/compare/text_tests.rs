//! The text reports' tests (`text.rs`): shm, tcp and ofi tables, the
//! Open MPI start-up line, and runs in two placements.

use super::super::fixtures::{ofi_tables, table, tcp_tables, OFI_NAMES};
use super::super::json_report::json_doc;
use super::super::stacks::TCP_STACKS;
use super::*;
use crate::harness;
use crate::json;
use crate::placement::Probe;

#[test]
fn text_and_json_reports() {
    let names = ["rivet", "mpich"];
    let mut mr = table(Bench::P2p(Kind::Mr), Some(vec![8]), vec![0, 1]);
    for v in [6.0e6, 5.0e6, 7.0e6] {
        mr.add(8, 0, v);
    }
    mr.add(8, 1, 5.0e6);
    mr.add(8, 1, 5.5e6);
    let mut st = table(Bench::Startup, Some(vec![8]), vec![0, 1]);
    st.add(8, 0, 0.0112);
    st.add(8, 1, 0.321);
    let loads = harness::Loads {
        samples: vec![1.0, 3.0, 40.0],
        failures: 1,
    };
    let skipped = [("openmpi", "mpirun.openmpi not found")];
    let text = text_report(Transport::Shm, &[mr, st], &names, &skipped, 3, &loads);
    let expected = "\
# Rivet vs peers: median [min-max] over 3 interleaved runs per stack; ratio = rivet / best peer
# skipped openmpi: mpirun.openmpi not found
# CPU load of other processes during the runs: median 3%, max 40%; 1 of 3 runs above 20%
# 1 run(s) failed or gave unusable output (see stderr)

# mr: 8-byte messages, window of 64, messages/s (higher is better)
# Size                rivet                           mpich     rivet/best
     8  6.00M [5.00M-7.00M]  5.25M [5.00M-5.50M] (2/3 runs)  1.14 vs mpich

# startup: whole N-rank job (init, barrier, finalize), launcher start to exit, s (lower is better)
# N                              rivet                              mpich     rivet/best
  8  0.0112 [0.0112-0.0112] (1/3 runs)  0.3210 [0.3210-0.3210] (1/3 runs)  0.03 vs mpich
";
    assert_eq!(text, expected);

    let mut lat = table(Bench::P2p(Kind::Latency), Some(vec![0]), vec![0, 1]);
    lat.add(0, 0, 0.25);
    let doc = json_doc(
        Transport::Shm,
        &[lat],
        &names,
        &skipped,
        1,
        &harness::Loads::default(),
    );
    assert_eq!(
        doc,
        "{\"benchmark\":\"compare\",\"reps\":1,\"stacks\":[\"rivet\",\"mpich\"],\
             \"skipped\":[{\"stack\":\"openmpi\",\"why\":\"mpirun.openmpi not found\"}],\
             \"other_load_pct\":null,\"failed_runs\":0,\"placement\":null,\
             \"results\":[{\"bench\":\"latency\",\
             \"unit\":\"us\",\"better\":\"lower\",\"rows\":[{\"size\":0,\"stacks\":{\"rivet\":\
             {\"median\":0.25,\"min\":0.25,\"max\":0.25,\"runs\":1},\"mpich\":null},\
             \"best_peer\":null,\"ratio\":null}]}]}"
    );
    assert!(json::parse(&doc).is_ok());
}

/// Open MPI's start-up: rivetrun's over mpirun's, per N, with the
/// target; no rivet/best column (the first stack is not rivet).
#[test]
fn openmpi_start_up_under_rivetrun_gets_its_ratio() {
    let names = ["openmpi", "openmpi-rivetrun"];
    let mut st = table(Bench::Startup, Some(vec![8, 32]), vec![0, 1]);
    st.add(8, 0, 0.6);
    st.add(8, 1, 0.4);
    st.add(32, 0, 1.6);
    st.add(32, 1, 1.2);
    let text = text_report(
        Transport::Shm,
        &[st],
        &names,
        &[],
        1,
        &harness::Loads::default(),
    );
    assert!(
        text.contains("# N=8: openmpi-rivetrun / openmpi = 0.67 met (target <= 0.7)\n"),
        "{text}"
    );
    assert!(
        text.contains("# N=32: openmpi-rivetrun / openmpi = 0.75 MISSED (target <= 0.7)\n"),
        "{text}"
    );
}

#[test]
fn tcp_text_report() {
    let text = text_report(
        Transport::Tcp,
        &tcp_tables(),
        &TCP_STACKS,
        &[],
        1,
        &harness::Loads::default(),
    );
    // raw-tcp: "-" where it measures nothing; a failed run: "failed".
    let expected = "\
# Rivet vs peers over TCP (loopback): median [min-max] over 1 interleaved runs per stack
# ratios = Rivet stack / best peer (mpich or openmpi), / raw-tcp (the loopback limit), rivet-uring / rivet-poll
# targets: 8 B latency <= 1.1 x raw-tcp, 1 MiB bw >= 0.9 x raw-tcp

# latency: half round trip, us (lower is better); raw-tcp: busy-poll recv
#    Size          rivet-uring           rivet-poll              raw-tcp                mpich              openmpi
        8  3.200 [3.200-3.200]  3.600 [3.600-3.600]  3.000 [3.000-3.000]  3.500 [3.500-3.500]  3.800 [3.800-3.800]
     1024  3.500 [3.500-3.500]  3.900 [3.900-3.900]  3.300 [3.300-3.300]  3.900 [3.900-3.900]               failed
  1048576  150.0 [150.0-150.0]               failed                    -  149.7 [149.7-149.7]  230.3 [230.3-230.3]
#    Size  rivet-uring/best  rivet-uring/raw-tcp  rivet-poll/best    rivet-poll/raw-tcp  uring/poll
        8     0.91 vs mpich    1.07 met (<= 1.1)    1.03 vs mpich  1.20 MISSED (<= 1.1)        0.89
     1024     0.90 vs mpich                 1.06    1.00 vs mpich                  1.18        0.90
  1048576     1.00 vs mpich                    -                -                     -           -

# bw: window of 64, MB/s with 1 MB = 1e6 B (higher is better); raw-tcp: one stream of back-to-back sends
#    Size       rivet-uring        rivet-poll           raw-tcp             mpich           openmpi
     1024     400 [400-400]     380 [380-380]                 -     131 [131-131]     361 [361-361]
  1048576  4500 [4500-4500]  4000 [4000-4000]  4800 [4800-4800]  5000 [5000-5000]  5400 [5400-5400]
#    Size  rivet-uring/best  rivet-uring/raw-tcp  rivet-poll/best    rivet-poll/raw-tcp  uring/poll
     1024   1.11 vs openmpi                    -  1.05 vs openmpi                     -        1.05
  1048576   0.83 vs openmpi    0.94 met (>= 0.9)  0.74 vs openmpi  0.83 MISSED (>= 0.9)        1.12
";
    assert_eq!(text, expected);
}

/// Runs in two placements: the header says so, and each table shows
/// each placement's runs apart, with their own ratios; a run whose
/// probes disagree is in neither; a stack with no run in a placement
/// says so.
#[test]
fn two_placements_are_reported_apart() {
    let names = ["rivet-uring", "rivet-poll"];
    let mut bw = table(Bench::P2p(Kind::Bw), Some(vec![1 << 20]), vec![0, 1]);
    let p = |before, after| Some(Probe { before, after });
    for (stack, v, probe) in [
        (0, 5000.0, p(100.0, 110.0)),
        (1, 4800.0, p(105.0, 95.0)),
        (0, 2600.0, p(500.0, 520.0)),
        (1, 2500.0, p(510.0, 490.0)),
        (0, 5200.0, p(120.0, 100.0)),
        (1, 4000.0, p(90.0, 480.0)),
    ] {
        bw.add_probed(1 << 20, stack, v, probe);
    }
    let mut lat = table(Bench::P2p(Kind::Latency), Some(vec![8]), vec![0, 1]);
    lat.add_probed(8, 0, 9.0, p(600.0, 610.0));
    lat.add_probed(8, 1, 5.0, p(98.0, 101.0));
    let tables = [bw, lat];
    let text = text_report(
        Transport::Tcp,
        &tables,
        &names,
        &[],
        3,
        &harness::Loads::default(),
    );
    let split = (120.0f64 * 480.0).sqrt();
    assert!(
        text.contains(
            "# placement: two, as the host placed this machine's CPUs (round trip of a cache line \
                 between CPUs 0 and 1, probed before and after each run): near 90-120 ns (4 runs), \
                 far 480-610 ns (3 runs), moved during the run (1 run); each table also shows the \
                 near and the far runs apart\n"
        ),
        "{text}"
    );
    assert_eq!(split.round(), 240.0);
    let expected_bw = "\
# near placement only: the runs with the CPUs' round trip <= 240 ns before and after
#    Size                  rivet-uring                   rivet-poll
  1048576  5100 [5000-5200] (2/3 runs)  4800 [4800-4800] (1/3 runs)
#    Size  uring/poll
  1048576        1.06
# far placement only: the runs with the CPUs' round trip > 240 ns before and after
#    Size                  rivet-uring                   rivet-poll
  1048576  2600 [2600-2600] (1/3 runs)  2500 [2500-2500] (1/3 runs)
#    Size  uring/poll
  1048576        1.04
";
    assert!(text.contains(expected_bw), "{text}");
    // All runs together: the medians of mixed placements.
    assert!(
        text.contains("  1048576  5000 [2600-5200]  4000 [2500-4800]\n"),
        "{text}"
    );
    // Latency: each stack ran in one placement only.
    assert!(
        text.contains("     8       no run  5.000 [5.000-5.000] (1/3 runs)\n"),
        "{text}"
    );

    let doc = json_doc(
        Transport::Tcp,
        &tables,
        &names,
        &[],
        3,
        &harness::Loads::default(),
    );
    assert!(json::parse(&doc).is_ok(), "{doc}");
    assert!(
        doc.contains(
            "\"placement\":{\"min_ns\":90,\"max_ns\":610,\"split_ns\":240,\
                 \"near_runs\":4,\"far_runs\":3,\"moved_runs\":1}"
        ),
        "{doc}"
    );
    assert!(
        doc.contains(
            "\"placements\":{\"near\":{\"rows\":[{\"size\":1048576,\"stacks\":{\
                 \"rivet-uring\":{\"median\":5100,\"min\":5000,\"max\":5200,\"runs\":2},\
                 \"rivet-poll\":{\"median\":4800,\"min\":4800,\"max\":4800,\"runs\":1}},\
                 \"ratios\":"
        ),
        "{doc}"
    );
    // One placement: no split, no placements.
    let mut one = table(Bench::P2p(Kind::Bw), Some(vec![1 << 20]), vec![0, 1]);
    for (stack, before) in [(0, 100.0), (1, 110.0), (0, 120.0), (1, 130.0)] {
        one.add_probed(1 << 20, stack, 5000.0, p(before, before));
    }
    let doc = json_doc(
        Transport::Tcp,
        &[one],
        &names,
        &[],
        2,
        &harness::Loads::default(),
    );
    assert!(
        doc.contains("\"placement\":{\"min_ns\":100,\"max_ns\":130,\"split_ns\":null}"),
        "{doc}"
    );
    assert!(!doc.contains("placements"), "{doc}");
}

#[test]
fn ofi_text_report() {
    let skipped = [("fi_pingpong(verbs;ofi_rxm)", "no such provider")];
    let text = text_report(
        Transport::Ofi,
        &ofi_tables(),
        &OFI_NAMES,
        &skipped,
        1,
        &harness::Loads::default(),
    );
    // Each rivet-ofi(P) over fi_pingpong(P); "-" where fi_pingpong(shm) failed; mr without ratio.
    let expected = "\
# Rivet over libfabric vs fi_pingpong: median [min-max] over 1 interleaved runs per stack
# rivet-ofi(P): RIVET_NETMOD=ofi RIVET_OFI_PROVIDER=P rivetrun -n 2 --bind-to core; fi_pingpong(P): fi_pingpong -p P -e rdm, server CPU 1, client CPU 0
# ratios = rivet-ofi(P) / fi_pingpong(P); targets at every size: latency <= 1.1, bw >= 1
# fi_pingpong's MB/s is ping-pong bandwidth (size / half round trip, one message in flight), Rivet's bw a window of 64: not the same kind of figure
# skipped fi_pingpong(verbs;ofi_rxm): no such provider

# latency: half round trip, us (lower is better); fi_pingpong: usec/xfer
#  Size  rivet-ofi(tcp;ofi_rxm)  fi_pingpong(tcp;ofi_rxm)       rivet-ofi(shm)     fi_pingpong(shm)
      8     14.50 [14.50-14.50]       13.80 [13.80-13.80]  1.900 [1.900-1.900]  1.710 [1.710-1.710]
  65536     120.0 [120.0-120.0]       60.00 [60.00-60.00]  55.00 [55.00-55.00]               failed
#  Size  rivet-ofi(tcp;ofi_rxm)/fi_pingpong  rivet-ofi(shm)/fi_pingpong
      8                   1.05 met (<= 1.1)        1.11 MISSED (<= 1.1)
  65536                2.00 MISSED (<= 1.1)                           -

# bw: MB/s with 1 MB = 1e6 B (higher is better); rivet-ofi: window of 64; fi_pingpong: ping-pong, size / half round trip (not a streaming figure)
#  Size  rivet-ofi(tcp;ofi_rxm)  fi_pingpong(tcp;ofi_rxm)    rivet-ofi(shm)  fi_pingpong(shm)
      8        2.00 [2.00-2.00]          0.58 [0.58-0.58]  6.00 [6.00-6.00]  4.68 [4.68-4.68]
  65536           900 [900-900]          1092 [1092-1092]  5200 [5200-5200]  5168 [5168-5168]
#  Size  rivet-ofi(tcp;ofi_rxm)/fi_pingpong  rivet-ofi(shm)/fi_pingpong
      8                     3.45 met (>= 1)             1.28 met (>= 1)
  65536                  0.82 MISSED (>= 1)             1.01 met (>= 1)

# mr: 8-byte messages, window of 64, messages/s (higher is better); Rivet only, no ratio (fi_pingpong has no mr)
# Size  rivet-ofi(tcp;ofi_rxm)       rivet-ofi(shm)
     8  600.0k [600.0k-600.0k]  2.00M [2.00M-2.00M]
";
    assert_eq!(text, expected);
}
