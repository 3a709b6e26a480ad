//! Tests of the output parsers and the report's formatting.

use crate::dynamic::parse::{parse_ompi, record_connect, record_ompi_spawn, record_rivet_spawn};
use crate::dynamic::rank::{exited, samples_json};
use crate::dynamic::table::fmt_ratio;
use crate::dynamic::Samples;
use crate::harness::JobOutput;

#[test]
fn reads_ompi_spawn_output() {
    let out = "\
# Library: Open MPI v4.1.4, package: Debian OpenMPI
# parents: 1
# spawn N REP SPAWN_SECONDS EXITED_SECONDS
warmup 1 0 0.300000 0.350000
spawn 1 0 0.228619 0.283713
spawn 4 0 0.364835 0.431183
[host:123] some launcher warning
";
    let lines = parse_ompi(out);
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0].0, "warmup");
    assert_eq!(lines[2].1, 4);
    assert!((lines[2].2 - 364.835).abs() < 1e-9);
    let mut s = Samples::default();
    s.spawn[1] = vec![Default::default(), Default::default()];
    let job = JobOutput {
        wall: 1.0,
        stdout: out.into(),
        stderr: String::new(),
        foreign_pct: None,
    };
    record_ompi_spawn(&mut s, &[1, 4], &job, None).unwrap();
    assert_eq!(s.first[1].0, vec![300.0]);
    assert_eq!(s.spawn[1][1].1.len(), 1);
    assert_eq!(s.ompi_cycles, 3);
    assert!(record_ompi_spawn(&mut s, &[16], &job, None).is_err());
    assert!(record_ompi_spawn(&mut s, &[1], &job, Some("failed (exit 1)")).is_err());
    // A hang: what came before counts, the hang is noted, no error.
    let hung = JobOutput {
        stdout: format!("{out}hang 4 1 60\n"),
        ..job.clone()
    };
    let note = record_ompi_spawn(&mut s, &[1, 4], &hung, Some("failed (exit 3)")).unwrap();
    assert!(note.contains("HUNG"), "{note}");
    assert_eq!(s.ompi_hangs, vec!["N=4".to_string()]);
    assert_eq!(s.spawn[1][1].0.len(), 2);
    assert_eq!(s.ompi_cycles, 7);
    let early = JobOutput {
        stdout: "# header\nhang warmup 1 60\n".into(),
        ..job
    };
    record_ompi_spawn(&mut s, &[1, 4], &early, Some("failed")).unwrap();
    assert_eq!(s.ompi_hangs[1], "warm-up N=1");
    let error = JobOutput {
        stdout: "error MPI_Comm_spawn: MPI_ERR_SPAWN\n".into(),
        ..hung
    };
    assert!(record_ompi_spawn(&mut s, &[1], &error, Some("failed")).is_err());
}

#[test]
fn reads_rivet_spawn_and_connect_json() {
    let out = format!(
        "noise\n{{\"bench\":\"spawn\",\"parents\":1,\"unit\":\"ms\",\"reps\":2,\"first\":{{\"children\":1,\"spawn\":9,\"exited\":12}},\"rows\":[{{\"children\":1,\"spawn\":{},\"exited\":{}}}]}}\n",
        samples_json(&[2.0, 3.0]),
        samples_json(&[4.0, 5.0])
    );
    let job = |stdout: String| JobOutput {
        wall: 1.0,
        stdout,
        stderr: String::new(),
        foreign_pct: None,
    };
    let mut s = Samples::default();
    s.spawn[0] = vec![Default::default()];
    record_rivet_spawn(&mut s, &[1], &job(out)).unwrap();
    assert_eq!(s.spawn[0][0].0, vec![2.0, 3.0]);
    assert_eq!(s.first[0].1, vec![12.0]);
    let accept = format!(
        "{{\"bench\":\"accept\",\"open_port\":0.5,\"accept\":{}}}",
        samples_json(&[1.0])
    );
    let connect = format!(
        "{{\"bench\":\"connect\",\"first\":3,\"first_cycle\":4,\"connect\":{},\"cycle\":{}}}",
        samples_json(&[1.0, 2.0]),
        samples_json(&[1.5, 2.5])
    );
    record_connect(&mut s, &job(accept), &job(connect)).unwrap();
    assert_eq!(s.first_connect, vec![3.0]);
    assert_eq!(s.connect, vec![1.0, 2.0]);
    assert!(record_connect(&mut s, &job("{}".into()), &job("x".into())).is_err());
}

#[test]
fn ratios_keep_three_digits() {
    assert_eq!(fmt_ratio(0.008741), "0.00874");
    assert_eq!(fmt_ratio(0.0312), "0.0312");
    assert_eq!(fmt_ratio(0.87), "0.87");
    assert_eq!(fmt_ratio(1.2), "1.20");
}

#[test]
fn exited_tells_live_from_gone() {
    assert!(!exited(std::process::id()));
    assert!(exited(u32::MAX - 1));
}
