//! The report: median [min-max] per figure and Rivet / Open MPI, as a
//! table or JSON.

use crate::dynamic::{Args, Samples};
use crate::json;
use crate::stats::{summarize, Summary};

pub(crate) fn fmt_ms(samples: &[f64]) -> String {
    summarize(samples).map_or("-".into(), |s| fmt_summary(&s))
}

fn fmt_summary(s: &Summary) -> String {
    format!("{:.2} [{:.2}-{:.2}]", s.median, s.min, s.max)
}

// -------------------------------------------------------------- harness

/// One row of the table: what, Rivet's samples, Open MPI's (if any).
struct Row<'a> {
    what: String,
    ours: &'a [f64],
    theirs: Option<&'a [f64]>,
}

fn rows<'a>(args: &Args, s: &'a Samples) -> Vec<Row<'a>> {
    let mut rows = Vec::new();
    let mut row = |what: String, ours: &'a [f64], theirs: Option<&'a [f64]>| {
        rows.push(Row { what, ours, theirs })
    };
    let pair = format!("{}+{} ranks", args.ranks, args.ranks);
    if !s.connect.is_empty() || !s.first_connect.is_empty() {
        row("open_port (opens the netmod)".into(), &s.open_port, None);
        row(
            format!("first connect of a job ({pair})"),
            &s.first_connect,
            None,
        );
        row(format!("connect ({pair})"), &s.connect, None);
        row(
            format!("connect+barrier+disconnect ({pair})"),
            &s.cycle,
            None,
        );
    }
    let some = |v: &'a Vec<f64>| (!v.is_empty()).then_some(v.as_slice());
    if !s.first[0].0.is_empty() || !s.first[1].0.is_empty() {
        row(
            "first spawn of a job, N=1".into(),
            &s.first[0].0,
            some(&s.first[1].0),
        );
    }
    for (i, n) in args.children.iter().enumerate() {
        let (r, o) = (&s.spawn[0][i], &s.spawn[1][i]);
        if r.0.is_empty() && o.0.is_empty() {
            continue;
        }
        row(format!("spawn N={n}"), &r.0, some(&o.0));
        row(
            format!("spawn N={n} until children exited"),
            &r.1,
            some(&o.1),
        );
    }
    rows
}

pub(crate) fn print_table(args: &Args, s: &Samples, with_ompi: bool) {
    println!(
        "# Dynamic processes, ms: median [min-max] (samples); {} parent rank(s) per spawn job; \
         Rivet jobs with RIVET_YIELD=always",
        args.parents
    );
    println!(
        "# {:<44}  {:>30}  {:>30}  {:>7}",
        "what",
        "Rivet",
        if with_ompi {
            "Open MPI"
        } else {
            "Open MPI (skipped)"
        },
        "ratio"
    );
    for Row { what, ours, theirs } in rows(args, s) {
        let cell = |v: &[f64]| {
            summarize(v).map_or("-".into(), |x| format!("{} ({})", fmt_summary(&x), v.len()))
        };
        let ratio = match (summarize(ours), theirs.and_then(summarize)) {
            (Some(a), Some(b)) => fmt_ratio(a.median / b.median),
            _ => "-".into(),
        };
        println!(
            "  {what:<44}  {:>30}  {:>30}  {ratio:>7}",
            cell(ours),
            theirs.map_or("-".into(), cell)
        );
    }
    if with_ompi {
        println!("# {}", hang_note(args, s));
    }
}

fn hang_note(args: &Args, s: &Samples) -> String {
    if s.ompi_hangs.is_empty() {
        return format!(
            "Open MPI: none of {} spawn cycles hung (limit {} s)",
            s.ompi_cycles, args.hang
        );
    }
    format!(
        "Open MPI: {} of {} spawn cycles hung in MPI_Comm_spawn (at {}) and were cut off after {} s, \
         ending their jobs; the figures are over the cycles that finished",
        s.ompi_hangs.len(),
        s.ompi_cycles,
        s.ompi_hangs.join(", "),
        args.hang
    )
}

/// Three significant digits: 0.00874, 0.0312, 0.87, 1.20.
pub(crate) fn fmt_ratio(r: f64) -> String {
    if !r.is_finite() || r <= 0.0 || r >= 0.1 {
        return format!("{r:.2}");
    }
    let decimals = (2.0 - r.log10().floor()) as usize;
    format!("{r:.decimals$}")
}

pub(crate) fn print_json(args: &Args, s: &Samples) {
    let stat = |v: &[f64]| match summarize(v) {
        Some(x) => format!(
            "{{\"median\":{},\"min\":{},\"max\":{},\"n\":{}}}",
            json::num(x.median),
            json::num(x.min),
            json::num(x.max),
            v.len()
        ),
        None => "null".into(),
    };
    let items: Vec<String> = rows(args, s)
        .into_iter()
        .map(|Row { what, ours, theirs }| {
            let ratio = match (summarize(ours), theirs.and_then(summarize)) {
                (Some(a), Some(b)) => json::num(a.median / b.median),
                _ => "null".into(),
            };
            format!(
                "{{\"what\":{},\"rivet\":{},\"openmpi\":{},\"ratio\":{ratio}}}",
                json::string(&what),
                stat(ours),
                theirs.map_or("null".into(), stat)
            )
        })
        .collect();
    let hangs: Vec<String> = s.ompi_hangs.iter().map(|h| json::string(h)).collect();
    println!(
        "{{\"benchmark\":\"dynamic\",\"unit\":\"ms\",\"parents\":{},\"ranks\":{},\"rows\":[{}],\"openmpi_cycles\":{},\"openmpi_hangs\":[{}]}}",
        args.parents,
        args.ranks,
        items.join(","),
        s.ompi_cycles,
        hangs.join(",")
    );
}
