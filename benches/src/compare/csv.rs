//! The CSV report (`--csv`).

use super::summary::summarize_table;
use super::table::Table;
use crate::json;

/// The CSV report (`--csv`): a header, then per table, key and stack that
/// measures it, the summary; a Rivet stack's row adds its ratio to the best
/// peer and to its raw reference.
pub(super) fn csv_doc(tables: &[Table], stacks: &[&str]) -> String {
    let mut out =
        String::from("bench,unit,better,key,value,stack,median,min,max,runs,vs_best_peer,vs_raw\n");
    let opt = |v: Option<f64>| v.map_or_else(String::new, json::num);
    for table in tables {
        let better = if table.lower_is_better() {
            "lower"
        } else {
            "higher"
        };
        for r in summarize_table(table, stacks) {
            for (i, s) in &r.per_stack {
                if s.is_none() && !table.measures(*i, r.key) {
                    continue;
                }
                let (med, min, max, runs) = match s {
                    Some((s, n)) => (
                        json::num(s.median),
                        json::num(s.min),
                        json::num(s.max),
                        n.to_string(),
                    ),
                    None => (String::new(), String::new(), String::new(), "0".into()),
                };
                let ratios = r.rivets.iter().find(|x| x.stack == *i);
                out += &format!(
                    "{},{},{better},{},{},{},{med},{min},{max},{runs},{},{}\n",
                    table.name(),
                    table.unit(),
                    table.key_name(),
                    r.key,
                    csv_field(stacks[*i]),
                    opt(ratios.and_then(|x| x.vs_best.map(|b| b.0))),
                    opt(ratios.and_then(|x| x.vs_raw)),
                );
            }
        }
    }
    out
}

/// A CSV field, quoted if it holds a comma, quote or semicolon.
pub(super) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', ';']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::super::args::Bench;
    use super::super::fixtures::table;
    use super::*;
    use crate::sizes::Kind;

    #[test]
    fn csv_report() {
        let names = [
            "rivet-uring",
            "raw-tcp",
            "mpich",
            "fi_pingpong(tcp;ofi_rxm)",
        ];
        let mut lat = table(
            Bench::P2p(Kind::Latency),
            Some(vec![8, 16]),
            vec![0, 1, 2, 3],
        );
        lat.only.insert(1, &[8]);
        lat.add(8, 0, 2.0);
        lat.add(8, 0, 4.0);
        lat.add(8, 1, 2.5);
        lat.add(8, 2, 4.0);
        lat.add(16, 0, 3.0);
        let csv = csv_doc(&[lat], &names);
        assert_eq!(
            csv,
            "bench,unit,better,key,value,stack,median,min,max,runs,vs_best_peer,vs_raw
latency,us,lower,size,8,rivet-uring,3,2,4,2,0.75,1.2
latency,us,lower,size,8,raw-tcp,2.5,2.5,2.5,1,,
latency,us,lower,size,8,mpich,4,4,4,1,,
latency,us,lower,size,8,\"fi_pingpong(tcp;ofi_rxm)\",,,,0,,
latency,us,lower,size,16,rivet-uring,3,3,3,1,,
latency,us,lower,size,16,mpich,,,,0,,
latency,us,lower,size,16,\"fi_pingpong(tcp;ofi_rxm)\",,,,0,,
"
        );
    }
}
