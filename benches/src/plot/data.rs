//! What a plot shows, read from `compare --json`'s document: per
//! benchmark the median [min, max] of every stack at every key (message
//! size or rank count), and each Rivet stack's median over its reference's
//! (the best peer, MPICH or Open MPI; where there is none, the raw
//! reference: raw-tcp, or the same provider's fi_pingpong).

use crate::json::{self, Value};

/// One stack's curve.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    /// (key, median, min, max), keys ascending.
    pub points: Vec<(f64, f64, f64, f64)>,
}

/// One Rivet stack's ratio curve.
#[derive(Debug, Clone, PartialEq)]
pub struct Ratio {
    pub name: String,
    /// What it is divided by: "best peer" or a stack's name.
    pub against: String,
    pub points: Vec<(f64, f64)>,
}

/// One benchmark.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    pub bench: String,
    pub unit: String,
    pub lower_is_better: bool,
    /// "size" or "ranks".
    pub key: String,
    pub series: Vec<Series>,
    pub ratios: Vec<Ratio>,
}

impl Panel {
    /// The y axis' description, with its unit.
    pub fn y_desc(&self) -> String {
        let what = match self.bench.as_str() {
            "latency" => "Latency",
            "bw" => "Bandwidth",
            "bibw" => "Bidirectional bandwidth",
            "mr" => "Message rate",
            "startup" => "Job time",
            other => other,
        };
        format!("{what} ({})", self.unit)
    }

    /// The panel's caption: what was measured.
    pub fn title(&self) -> String {
        match self.bench.as_str() {
            "latency" => "Ping-pong latency".into(),
            "bw" => "Bandwidth, one direction".into(),
            "bibw" => "Bandwidth, both directions".into(),
            "mr" => "Message rate".into(),
            "startup" => "Job start to end".into(),
            other => other.into(),
        }
    }

    pub fn x_desc(&self) -> &'static str {
        if self.key == "size" {
            "Message size (bytes)"
        } else {
            "Ranks"
        }
    }
}

/// Everything one picture shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub title: String,
    /// Every stack of the run, in its order (colours follow it).
    pub stacks: Vec<String>,
    pub panels: Vec<Panel>,
    /// What was left out, and why.
    pub notes: Vec<String>,
}

/// Who a stack is to the ratios (as `compare`'s roles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Rivet,
    Peer,
    Raw,
}

fn role(name: &str) -> Role {
    if name.starts_with("rivet") {
        Role::Rivet
    } else if name.starts_with("raw") || name.starts_with("fi_pingpong") {
        Role::Raw
    } else {
        Role::Peer
    }
}

/// `rivet-ofi(shm)` → `Some("shm")`.
fn provider(name: &str) -> Option<&str> {
    name.strip_suffix(')')
        .and_then(|n| n.split_once('('))
        .map(|(_, p)| p)
}

impl Figure {
    pub fn from_json(text: &str) -> Result<Figure, String> {
        let doc = json::parse(text)?;
        if doc.get("benchmark").and_then(Value::as_str) != Some("compare") {
            return Err("not a `rivet-bench compare --json` document".into());
        }
        let stacks: Vec<String> = doc
            .get("stacks")
            .and_then(Value::as_array)
            .ok_or("no \"stacks\" in the document")?
            .iter()
            .filter_map(|s| s.as_str().map(String::from))
            .collect();
        let transport = doc
            .get("transport")
            .and_then(Value::as_str)
            .unwrap_or("shm");
        let reps = doc.get("reps").and_then(Value::as_f64).unwrap_or(0.0);
        let mut notes = Vec::new();
        let mut panels = Vec::new();
        for result in doc
            .get("results")
            .and_then(Value::as_array)
            .ok_or("no \"results\" in the document")?
        {
            let panel = read_panel(result, &stacks, &mut notes)?;
            let keys = panel
                .series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.0.to_bits()))
                .collect::<std::collections::BTreeSet<_>>();
            if keys.len() < 2 {
                notes.push(format!(
                    "{} left out: measured at one {} only (no curve to draw)",
                    panel.bench, panel.key
                ));
                continue;
            }
            panels.push(panel);
        }
        if panels.is_empty() {
            return Err("nothing to plot: no benchmark was measured at two sizes or more".into());
        }
        Ok(Figure {
            title: format!(
                "Rivet vs peers over {transport}: median and min-max of {reps} run(s) per stack"
            ),
            stacks,
            panels,
            notes,
        })
    }
}

fn read_panel(result: &Value, stacks: &[String], notes: &mut Vec<String>) -> Result<Panel, String> {
    let text = |k: &str| {
        result
            .get(k)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("a result without \"{k}\""))
    };
    let bench = text("bench")?.to_string();
    let unit = text("unit")?.to_string();
    let lower_is_better = text("better")? == "lower";
    let rows = result
        .get("rows")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{bench}: no rows"))?;
    let key = match rows.first() {
        Some(r) if r.get("ranks").is_some() => "ranks",
        _ => "size",
    };
    let mut series: Vec<Series> = Vec::new();
    for name in stacks {
        let mut points = Vec::new();
        for row in rows {
            let Some(k) = row.get(key).and_then(Value::as_f64) else {
                continue;
            };
            let Some(cell) = row.get("stacks").and_then(|s| s.get(name)) else {
                continue;
            };
            let num = |f: &str| cell.get(f).and_then(Value::as_f64);
            if let (Some(med), Some(min), Some(max)) = (num("median"), num("min"), num("max")) {
                if k <= 0.0 || med <= 0.0 || min <= 0.0 {
                    notes.push(format!(
                        "{bench}: {name} at {key} {k} left out (log axes show no zero)"
                    ));
                    continue;
                }
                points.push((k, med, min, max));
            }
        }
        if !points.is_empty() {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            series.push(Series {
                name: name.clone(),
                points,
            });
        }
    }
    let ratios = ratios(&series, lower_is_better);
    Ok(Panel {
        bench,
        unit,
        lower_is_better,
        key: key.to_string(),
        series,
        ratios,
    })
}

/// Each Rivet stack's median over its reference's at every key both have.
fn ratios(series: &[Series], lower_is_better: bool) -> Vec<Ratio> {
    let better = |a: f64, b: f64| if lower_is_better { a < b } else { a > b };
    let has_peer = series.iter().any(|s| role(&s.name) == Role::Peer);
    let mut out = Vec::new();
    for rivet in series.iter().filter(|s| role(&s.name) == Role::Rivet) {
        // Over ofi, the same provider's raw reference; else the best peer,
        // or the raw reference where no MPI stack ran.
        let refs: Vec<&Series> = series
            .iter()
            .filter(|s| match provider(&rivet.name) {
                Some(p) => role(&s.name) == Role::Raw && provider(&s.name) == Some(p),
                None if has_peer => role(&s.name) == Role::Peer,
                None => role(&s.name) == Role::Raw,
            })
            .collect();
        if refs.is_empty() {
            continue;
        }
        let against = match refs.as_slice() {
            [one] => one.name.clone(),
            _ => "best peer".to_string(),
        };
        let points: Vec<(f64, f64)> = rivet
            .points
            .iter()
            .filter_map(|&(k, med, _, _)| {
                let best = refs
                    .iter()
                    .filter_map(|r| r.points.iter().find(|p| p.0 == k).map(|p| p.1))
                    .reduce(|a, b| if better(b, a) { b } else { a })?;
                Some((k, med / best))
            })
            .collect();
        if !points.is_empty() {
            out.push(Ratio {
                name: rivet.name.clone(),
                against,
                points,
            });
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A small shm comparison as `compare --json` prints it: latency and bw
    /// at three sizes (one failed cell), mr at one size.
    pub(crate) const DOC: &str = r#"{"benchmark":"compare","reps":3,"stacks":["rivet","mpich","openmpi"],"skipped":[],"other_load_pct":null,"failed_runs":1,"results":[
{"bench":"latency","unit":"us","better":"lower","rows":[
 {"size":0,"stacks":{"rivet":{"median":0.2,"min":0.19,"max":0.3,"runs":3},"mpich":{"median":0.4,"min":0.39,"max":0.5,"runs":3},"openmpi":{"median":0.3,"min":0.29,"max":0.31,"runs":3}},"best_peer":"openmpi","ratio":0.67},
 {"size":8,"stacks":{"rivet":{"median":0.25,"min":0.2,"max":0.3,"runs":3},"mpich":{"median":0.45,"min":0.4,"max":0.5,"runs":3},"openmpi":{"median":0.3,"min":0.29,"max":0.35,"runs":3}},"best_peer":"openmpi","ratio":0.83},
 {"size":1024,"stacks":{"rivet":{"median":0.5,"min":0.45,"max":0.6,"runs":3},"mpich":{"median":2.0,"min":1.9,"max":2.1,"runs":3},"openmpi":null},"best_peer":"mpich","ratio":0.25},
 {"size":1048576,"stacks":{"rivet":{"median":90.0,"min":85.0,"max":99.0,"runs":3},"mpich":{"median":120.0,"min":110.0,"max":130.0,"runs":3},"openmpi":{"median":100.0,"min":95.0,"max":140.0,"runs":3}},"best_peer":"openmpi","ratio":0.9}]},
{"bench":"bw","unit":"MB/s","better":"higher","rows":[
 {"size":8,"stacks":{"rivet":{"median":80,"min":70,"max":90,"runs":3},"mpich":{"median":40,"min":38,"max":44,"runs":3},"openmpi":{"median":45,"min":40,"max":50,"runs":3}},"best_peer":"openmpi","ratio":1.78},
 {"size":1024,"stacks":{"rivet":{"median":3000,"min":2800,"max":3200,"runs":3},"mpich":{"median":1700,"min":1600,"max":1800,"runs":3},"openmpi":{"median":2200,"min":2000,"max":2300,"runs":3}},"best_peer":"openmpi","ratio":1.36},
 {"size":1048576,"stacks":{"rivet":{"median":9000,"min":8500,"max":9500,"runs":3},"mpich":{"median":7000,"min":6000,"max":7500,"runs":3},"openmpi":{"median":9500,"min":9000,"max":9900,"runs":3}},"best_peer":"openmpi","ratio":0.95}]},
{"bench":"mr","unit":"msg/s","better":"higher","rows":[
 {"size":8,"stacks":{"rivet":{"median":9000000,"min":8000000,"max":9500000,"runs":3},"mpich":{"median":4000000,"min":3900000,"max":4100000,"runs":3},"openmpi":{"median":3600000,"min":3500000,"max":3700000,"runs":3}},"best_peer":"mpich","ratio":2.25}]}]}"#;

    #[test]
    fn reads_curves_and_ratios_from_compare_json() {
        let f = Figure::from_json(DOC).unwrap();
        assert_eq!(f.stacks, ["rivet", "mpich", "openmpi"]);
        // mr has one size: no curve; size 0 cannot sit on a log axis.
        assert_eq!(f.panels.len(), 2);
        assert!(
            f.notes.iter().any(|n| n.contains("mr left out")),
            "{:?}",
            f.notes
        );
        assert!(
            f.notes.iter().any(|n| n.contains("size 0")),
            "{:?}",
            f.notes
        );
        let lat = &f.panels[0];
        assert_eq!(lat.y_desc(), "Latency (us)");
        assert_eq!(lat.x_desc(), "Message size (bytes)");
        assert_eq!(lat.series.len(), 3);
        assert_eq!(lat.series[0].points[0], (8.0, 0.25, 0.2, 0.3));
        // openmpi failed at 1 KiB: its curve skips that size.
        assert_eq!(lat.series[2].points.len(), 2);
        // rivet / best peer: the lower latency of mpich and openmpi per size.
        assert_eq!(lat.ratios.len(), 1);
        assert_eq!(lat.ratios[0].against, "best peer");
        let r = &lat.ratios[0].points;
        assert_eq!(r.len(), 3);
        assert!((r[0].1 - 0.25 / 0.3).abs() < 1e-12);
        assert!((r[1].1 - 0.5 / 2.0).abs() < 1e-12);
        // bw: the higher is the best peer.
        let bw = &f.panels[1];
        assert_eq!(bw.y_desc(), "Bandwidth (MB/s)");
        assert!((bw.ratios[0].points[2].1 - 9000.0 / 9500.0).abs() < 1e-12);
        assert!(Figure::from_json("{\"benchmark\":\"latency\"}").is_err());
        assert!(Figure::from_json("not json").is_err());
    }

    #[test]
    fn ofi_ratios_pair_each_provider() {
        let doc = r#"{"benchmark":"compare","transport":"ofi","reps":1,"stacks":["rivet-ofi(shm)","fi_pingpong(shm)","rivet-ofi(tcp)","fi_pingpong(tcp)"],"results":[
{"bench":"latency","unit":"us","better":"lower","rows":[
 {"size":8,"stacks":{"rivet-ofi(shm)":{"median":1,"min":1,"max":1,"runs":1},"fi_pingpong(shm)":{"median":2,"min":2,"max":2,"runs":1},"rivet-ofi(tcp)":{"median":10,"min":10,"max":10,"runs":1},"fi_pingpong(tcp)":{"median":5,"min":5,"max":5,"runs":1}}},
 {"size":64,"stacks":{"rivet-ofi(shm)":{"median":1,"min":1,"max":1,"runs":1},"fi_pingpong(shm)":{"median":4,"min":4,"max":4,"runs":1},"rivet-ofi(tcp)":{"median":10,"min":10,"max":10,"runs":1},"fi_pingpong(tcp)":{"median":20,"min":20,"max":20,"runs":1}}}]}]}"#;
        let f = Figure::from_json(doc).unwrap();
        let r = &f.panels[0].ratios;
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].against, "fi_pingpong(shm)");
        assert_eq!(r[0].points, [(8.0, 0.5), (64.0, 0.25)]);
        assert_eq!(r[1].against, "fi_pingpong(tcp)");
        assert_eq!(r[1].points, [(8.0, 2.0), (64.0, 0.5)]);
    }
}
