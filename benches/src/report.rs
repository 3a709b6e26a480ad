//! Output of the rank-side point-to-point benchmarks: an OSU-style table, or
//! one JSON object per run (and reading that object back, for `compare`).
//!
//! Table (rank 0, stdout; a row is printed as soon as its size is done):
//!
//! ```text
//! # Rivet latency (2 ranks)
//! # Size          Latency (us)
//! 0                      0.512
//! 1                      0.520
//! ```
//!
//! bw, bibw and mr add `, window 64` (and for mr `, N threads per rank`) to
//! the first line. JSON, one line printed at the end of the run:
//!
//! ```text
//! {"bench":"latency","ranks":2,"threads":1,"window":1,"unit":"us",
//!  "rows":[{"size":0,"value":0.512,"iters":10000}, ...]}
//! ```
//!
//! `unit` is `us` (latency: half round trip), `MB/s` (bw, bibw; 1 MB = 1e6 B)
//! or `msg/s` (mr, all threads together); `iters` is the number of timed
//! iterations: round trips (latency) or windows (bw, bibw, mr; per thread).

use crate::json;
use crate::sizes::Kind;

#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Row {
    pub size: usize,
    pub value: f64,
    pub iters: u32,
    /// Rank 0's netmod system calls per message it sent or received
    /// (acks of a window not counted), where the netmod counts them.
    pub syscalls: Option<f64>,
}

/// The first line of a table.
/// `window`: messages per window of bw, bibw and mr (latency has none).
pub fn title(kind: Kind, ranks: u32, threads: u32, window: usize) -> String {
    let mut t = format!("# Rivet {} ({ranks} ranks)", kind.name());
    if kind != Kind::Latency {
        t += &format!(", window {window}");
    }
    if kind == Kind::Mr {
        t += &format!(
            ", {threads} thread{} per rank",
            if threads == 1 { "" } else { "s" }
        );
    }
    t
}

/// The column header line.
pub fn column_header(kind: Kind) -> String {
    format!("{:<10}{:>18}", "# Size", kind.column())
}

pub fn table_row(kind: Kind, size: usize, value: f64) -> String {
    let precision = match kind {
        Kind::Latency => 3,
        Kind::Bw | Kind::Bibw => 2,
        Kind::Mr => 0,
    };
    format!("{:<10}{:>18.*}", size, precision, value)
}

/// `window`: as `title`'s; latency's is 1.
pub fn json_doc(kind: Kind, ranks: u32, threads: u32, window: usize, rows: &[Row]) -> String {
    let window = if kind == Kind::Latency { 1 } else { window };
    json_doc_named(kind.name(), kind.unit(), (ranks, threads, window), rows)
}

/// `json_doc` for a benchmark outside `Kind` (`fanin`, `memory`).
pub fn json_doc_named(
    bench: &str,
    unit: &str,
    (ranks, threads, window): (u32, u32, usize),
    rows: &[Row],
) -> String {
    let rows: Vec<String> = rows
        .iter()
        .map(|r| {
            let calls = r
                .syscalls
                .map_or(String::new(), |c| format!(",\"syscalls\":{}", json::num(c)));
            format!(
                "{{\"size\":{},\"value\":{},\"iters\":{}{calls}}}",
                r.size,
                json::num(r.value),
                r.iters
            )
        })
        .collect();
    format!(
        "{{\"bench\":{},\"ranks\":{ranks},\"threads\":{threads},\"window\":{window},\"unit\":{},\"rows\":[{}]}}",
        json::string(bench),
        json::string(unit),
        rows.join(",")
    )
}

/// `--csv`: a header and one line per size, each naming the run.
pub fn csv_doc(kind: Kind, ranks: u32, threads: u32, window: usize, rows: &[Row]) -> String {
    let window = if kind == Kind::Latency { 1 } else { window };
    let mut out = String::from("bench,ranks,threads,window,unit,size,value,iters\n");
    for r in rows {
        out += &format!(
            "{},{ranks},{threads},{window},{},{},{},{}\n",
            kind.name(),
            kind.unit(),
            r.size,
            json::num(r.value),
            r.iters
        );
    }
    out
}

/// Find the `json_doc` of benchmark `bench` in a job's stdout (other lines,
/// e.g. from the launcher, are skipped; of several JSON lines, the one of
/// `bench`) and return its (size, value, system calls per message) rows.
pub fn parse_json_rows(stdout: &str, bench: &str) -> Result<Vec<(u64, f64, Option<f64>)>, String> {
    // The line of `bench` (a run may print several), else the first.
    let mine = format!("{{\"bench\":{}", json::string(bench));
    let mut lines = stdout.lines().map(str::trim);
    let line = lines
        .clone()
        .find(|l| l.starts_with(&mine))
        .or_else(|| lines.find(|l| l.starts_with("{\"bench\"")))
        .ok_or("no JSON result line in the output")?;
    let doc = json::parse(line).map_err(|e| format!("bad JSON result: {e}"))?;
    let got = doc.get("bench").and_then(|v| v.as_str()).unwrap_or("?");
    if got != bench {
        return Err(format!("JSON result is for {got:?}, expected {bench:?}"));
    }
    let rows = doc
        .get("rows")
        .and_then(|r| r.as_array())
        .ok_or("JSON result has no rows")?;
    rows.iter()
        .map(|r| {
            let size = r.get("size").and_then(|v| v.as_f64());
            let value = r.get("value").and_then(|v| v.as_f64());
            let calls = r.get("syscalls").and_then(|v| v.as_f64());
            match (size, value) {
                (Some(s), Some(v)) if s >= 0.0 && s.fract() == 0.0 => Ok((s as u64, v, calls)),
                _ => Err(format!("bad JSON row {r:?}")),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_lines() {
        assert_eq!(title(Kind::Latency, 2, 1, 64), "# Rivet latency (2 ranks)");
        assert_eq!(title(Kind::Bw, 3, 1, 64), "# Rivet bw (3 ranks), window 64");
        assert_eq!(
            title(Kind::Mr, 2, 4, 64),
            "# Rivet mr (2 ranks), window 64, 4 threads per rank"
        );
        assert_eq!(
            title(Kind::Mr, 2, 1, 64),
            "# Rivet mr (2 ranks), window 64, 1 thread per rank"
        );
        assert_eq!(column_header(Kind::Latency), "# Size          Latency (us)");
        assert_eq!(column_header(Kind::Bibw), "# Size      Bandwidth (MB/s)");
        assert_eq!(column_header(Kind::Mr), "# Size            Messages/s");
        assert_eq!(
            table_row(Kind::Latency, 8, 0.51234),
            "8                      0.512"
        );
        assert_eq!(
            table_row(Kind::Bw, 4194304, 8123.456),
            "4194304              8123.46"
        );
        assert_eq!(
            table_row(Kind::Mr, 8, 5234567.8),
            "8                    5234568"
        );
        // Columns line up with the header.
        assert_eq!(
            column_header(Kind::Bw).len(),
            table_row(Kind::Bw, 1, 1.0).len()
        );
    }

    #[test]
    fn json_shape_and_round_trip() {
        let rows = [
            Row {
                size: 0,
                value: 0.5,
                iters: 10000,
                syscalls: None,
            },
            Row {
                size: 1024,
                value: 1.25,
                iters: 10000,
                syscalls: None,
            },
        ];
        let doc = json_doc(Kind::Latency, 2, 1, 64, &rows);
        assert_eq!(
            doc,
            "{\"bench\":\"latency\",\"ranks\":2,\"threads\":1,\"window\":1,\"unit\":\"us\",\"rows\":[\
             {\"size\":0,\"value\":0.5,\"iters\":10000},{\"size\":1024,\"value\":1.25,\"iters\":10000}]}"
        );
        let out = format!("rivetrun: some note\n{doc}\n");
        assert_eq!(
            parse_json_rows(&out, "latency"),
            Ok(vec![(0, 0.5, None), (1024, 1.25, None)])
        );
        assert!(parse_json_rows(&out, "bw")
            .unwrap_err()
            .contains("expected \"bw\""));
        assert!(parse_json_rows("# table\n8 1.0\n", "bw").is_err());
        // System calls per message ride along; of two lines, the named one.
        let row = Row {
            size: 8,
            value: 3.0,
            iters: 5,
            syscalls: Some(0.25),
        };
        let two = format!(
            "{}\n{}\n",
            json_doc(Kind::Latency, 4, 1, 64, &[row]),
            json_doc_named(
                "memory",
                "KiB",
                (4, 1, 1),
                &[Row {
                    syscalls: None,
                    ..row
                }]
            )
        );
        assert_eq!(
            parse_json_rows(&two, "latency"),
            Ok(vec![(8, 3.0, Some(0.25))])
        );
        assert_eq!(parse_json_rows(&two, "memory"), Ok(vec![(8, 3.0, None)]));
        let csv = csv_doc(
            Kind::Bw,
            2,
            1,
            16,
            &[Row {
                size: 8,
                value: 12.5,
                iters: 100,
                syscalls: None,
            }],
        );
        assert_eq!(
            csv,
            "bench,ranks,threads,window,unit,size,value,iters\nbw,2,1,16,MB/s,8,12.5,100\n"
        );
        let mr = json_doc(
            Kind::Mr,
            2,
            4,
            16,
            &[Row {
                size: 8,
                value: f64::NAN,
                iters: 1,
                syscalls: None,
            }],
        );
        assert!(mr.contains("\"threads\":4,\"window\":16,\"unit\":\"msg/s\""));
        assert!(parse_json_rows(&mr, "mr")
            .unwrap_err()
            .contains("bad JSON row"));
    }
}
