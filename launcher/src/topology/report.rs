//! Lines for `--report-bindings`.

use super::mapping::RankPlacement;

/// One line describing where a rank runs, e.g.
/// `rank 1 on host1 (node 0, local 1 of 4): core 1, cpus 2-3` or
/// `rank 5 on host1 (node 0, local 5 of 8): not bound`.
pub fn report_line(p: &RankPlacement, host: &str) -> String {
    let head = format!(
        "rank {} on {host} (node {}, local {} of {})",
        p.rank, p.node, p.local_rank, p.local_size
    );
    match &p.cpuset {
        Some(cs) => format!("{head}: {}, cpus {cs}", p.bound_to),
        None => format!("{head}: not bound"),
    }
}
