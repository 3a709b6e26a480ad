//! Tables shared by the report and ratio tests.

use super::args::Bench;
use super::table::Table;
use crate::peers;
use crate::sizes::Kind;
use std::collections::BTreeMap;

pub(super) fn table(bench: Bench, keys: Option<Vec<u64>>, stacks: Vec<usize>) -> Table {
    Table {
        bench,
        keys,
        stacks,
        only: BTreeMap::new(),
        samples: BTreeMap::new(),
        probes: BTreeMap::new(),
        calls: BTreeMap::new(),
    }
}

/// The latency and bw tables of a tcp comparison, with raw-tcp missing
/// sizes, a failed run, and targets met and missed.
pub(super) fn tcp_tables() -> Vec<Table> {
    let mut lat = table(
        Bench::P2p(Kind::Latency),
        Some(vec![8, 1024, 1 << 20]),
        vec![0, 1, 2, 3, 4],
    );
    lat.only.insert(2, &peers::RAW_TCP_LAT_SIZES);
    for (key, vals) in [
        (8, [3.2, 3.6, 3.0, 3.5, 3.8]),
        (1024, [3.5, 3.9, 3.3, 3.9, -1.0]),
        (1 << 20, [150.0, -1.0, -1.0, 149.7, 230.3]),
    ] {
        for (stack, v) in vals.into_iter().enumerate() {
            if v > 0.0 {
                lat.add(key, stack, v);
            }
        }
    }
    let mut bw = table(
        Bench::P2p(Kind::Bw),
        Some(vec![1024, 1 << 20]),
        vec![0, 1, 2, 3, 4],
    );
    bw.only.insert(2, &peers::RAW_TCP_BW_SIZES);
    for (stack, v) in [4500.0, 4000.0, 4800.0, 5000.0, 5400.0]
        .into_iter()
        .enumerate()
    {
        bw.add(1 << 20, stack, v);
    }
    for (stack, v) in [(0, 400.0), (1, 380.0), (3, 131.0), (4, 361.0)] {
        bw.add(1024, stack, v);
    }
    vec![lat, bw]
}

pub(super) const OFI_NAMES: [&str; 4] = [
    "rivet-ofi(tcp;ofi_rxm)",
    "fi_pingpong(tcp;ofi_rxm)",
    "rivet-ofi(shm)",
    "fi_pingpong(shm)",
];

/// latency, bw and mr tables of an ofi comparison over two providers,
/// one fi_pingpong run failed.
pub(super) fn ofi_tables() -> Vec<Table> {
    let mut lat = table(
        Bench::P2p(Kind::Latency),
        Some(vec![8, 65536]),
        vec![0, 1, 2, 3],
    );
    let mut bw = table(Bench::P2p(Kind::Bw), Some(vec![8, 65536]), vec![0, 1, 2, 3]);
    for (key, lats, bws) in [
        (8, [14.5, 13.8, 1.9, 1.71], [2.0, 0.58, 6.0, 4.678]),
        (
            65536,
            [120.0, 60.0, 55.0, -1.0],
            [900.0, 1092.0, 5200.0, 5168.0],
        ),
    ] {
        for (stack, (l, b)) in lats.into_iter().zip(bws).enumerate() {
            if l > 0.0 {
                lat.add(key, stack, l);
            }
            bw.add(key, stack, b);
        }
    }
    let mut mr = table(Bench::P2p(Kind::Mr), Some(vec![8]), vec![0, 2]);
    mr.add(8, 0, 6.0e5);
    mr.add(8, 2, 2.0e6);
    vec![lat, bw, mr]
}
