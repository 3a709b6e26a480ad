//! Reading the jobs' output: the rank side's JSON lines and `ompi_spawn`'s
//! text, hangs included.

use crate::dynamic::Samples;
use crate::harness::JobOutput;
use crate::json::{self, Value};
use crate::stats::summarize;

/// The last line of `stdout` that is a JSON object, parsed.
fn json_line(stdout: &str) -> Result<Value, String> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or("no JSON line in the output")?;
    json::parse(line.trim())
}

fn num(v: &Value, key: &str) -> Result<f64, String> {
    v.get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("no number {key:?} in the JSON"))
}

fn list(v: &Value, key: &str) -> Result<Vec<f64>, String> {
    v.get(key)
        .and_then(|o| o.get("samples"))
        .and_then(Value::as_array)
        .ok_or_else(|| format!("no samples of {key:?} in the JSON"))?
        .iter()
        .map(|x| {
            x.as_f64()
                .ok_or_else(|| format!("a sample of {key:?} is not a number"))
        })
        .collect()
}

pub(crate) fn record_connect(
    s: &mut Samples,
    accept: &JobOutput,
    connect: &JobOutput,
) -> Result<String, String> {
    let a = json_line(&accept.stdout)?;
    let c = json_line(&connect.stdout)?;
    let open_port = num(&a, "open_port")?;
    let first = num(&c, "first")?;
    let rest = list(&c, "connect")?;
    let cycle = list(&c, "cycle")?;
    let note = format!(
        "open_port {open_port:.2} ms, first connect {first:.2} ms, connect median {}",
        summarize(&rest).map_or("-".into(), |x| format!("{:.3} ms", x.median))
    );
    s.open_port.push(open_port);
    s.first_connect.push(first);
    s.connect.extend(rest);
    s.cycle.extend(cycle);
    Ok(note)
}

pub(crate) fn record_rivet_spawn(
    s: &mut Samples,
    children: &[u32],
    out: &JobOutput,
) -> Result<String, String> {
    let v = json_line(&out.stdout)?;
    let first = v.get("first").ok_or("no \"first\" in the JSON")?;
    let rows = v
        .get("rows")
        .and_then(Value::as_array)
        .ok_or("no rows in the JSON")?;
    let mut got = Vec::new();
    for (i, &n) in children.iter().enumerate() {
        let row = rows
            .iter()
            .find(|r| r.get("children").and_then(Value::as_f64) == Some(n as f64))
            .ok_or_else(|| format!("no row for {n} children"))?;
        got.push((i, list(row, "spawn")?, list(row, "exited")?));
    }
    s.first[0].0.push(num(first, "spawn")?);
    s.first[0].1.push(num(first, "exited")?);
    Ok(store_spawn(s, 0, children, got))
}

/// ompi_spawn's lines: "warmup 1 0 SPAWN EXITED" and "spawn N REP SPAWN EXITED" (seconds, kept in ms).
pub(crate) fn parse_ompi(stdout: &str) -> Vec<(String, u32, f64, f64)> {
    stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 5 || !(f[0] == "spawn" || f[0] == "warmup") {
                return None;
            }
            Some((
                f[0].to_string(),
                f[1].parse().ok()?,
                f[3].parse::<f64>().ok()? * 1e3,
                f[4].parse::<f64>().ok()? * 1e3,
            ))
        })
        .collect()
}

/// ompi_spawn's "hang N REP SECS" or "hang warmup 1 SECS": which spawn hung.
fn parse_hang(stdout: &str) -> Option<String> {
    stdout.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f[..] {
            ["hang", "warmup", n, _] => Some(format!("warm-up N={n}")),
            ["hang", n, _, _] => Some(format!("N={n}")),
            _ => None,
        }
    })
}

/// Record an Open MPI job. A job that hung (and so failed) gives what it
/// measured before, and the hang is counted; any other failure is an error.
pub(crate) fn record_ompi_spawn(
    s: &mut Samples,
    children: &[u32],
    out: &JobOutput,
    problem: Option<&str>,
) -> Result<String, String> {
    if let Some(err) = out.stdout.lines().find(|l| l.starts_with("error")) {
        return Err(err.to_string());
    }
    let hang = parse_hang(&out.stdout);
    if let (Some(p), None) = (problem, &hang) {
        return Err(p.to_string());
    }
    let lines = parse_ompi(&out.stdout);
    let warm = lines.iter().find(|l| l.0 == "warmup");
    if warm.is_none() && hang.is_none() {
        return Err("no warmup line in ompi_spawn's output".into());
    }
    let mut got = Vec::new();
    for (i, &n) in children.iter().enumerate() {
        let rows: Vec<_> = lines
            .iter()
            .filter(|l| l.0 == "spawn" && l.1 == n)
            .collect();
        if rows.is_empty() && hang.is_none() {
            return Err(format!("no spawn lines for {n} children"));
        }
        got.push((
            i,
            rows.iter().map(|l| l.2).collect(),
            rows.iter().map(|l| l.3).collect(),
        ));
    }
    if let Some(w) = warm {
        s.first[1].0.push(w.2);
        s.first[1].1.push(w.3);
    }
    s.ompi_cycles += lines.len() + usize::from(hang.is_some());
    let mut note = store_spawn(s, 1, children, got);
    if let Some(h) = hang {
        note.push_str(&format!("; HUNG in a spawn cycle at {h}, job ended"));
        s.ompi_hangs.push(h);
    }
    Ok(note)
}

fn store_spawn(
    s: &mut Samples,
    stack: usize,
    children: &[u32],
    got: Vec<(usize, Vec<f64>, Vec<f64>)>,
) -> String {
    let mut notes = Vec::new();
    for (i, spawn, exited) in got {
        if let Some(m) = summarize(&spawn) {
            notes.push(format!("N={} {:.1} ms", children[i], m.median));
        }
        s.spawn[stack][i].0.extend(spawn);
        s.spawn[stack][i].1.extend(exited);
    }
    notes.join(", ")
}
