//! The harness: the accept/connect, Rivet spawn and Open MPI spawn jobs of
//! each rep, in a rotating order, their samples pooled.

use std::path::PathBuf;
use std::time::Duration;

use crate::dynamic::parse::{record_connect, record_ompi_spawn, record_rivet_spawn};
use crate::dynamic::table::{print_json, print_table};
use crate::dynamic::{Args, Samples, Unit};
use crate::harness::{self, CmdSpec};
use crate::peers::{self, Mpi};
use crate::progress::Progress;

/// The C reference program, in this crate's source tree.
const OMPI_SPAWN_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/peers/ompi_spawn.c");

pub fn run(args: Args) -> Result<(), String> {
    if args.reps == 0 || args.spawns == 0 || args.children.is_empty() || args.children.contains(&0)
    {
        return Err("--reps, --spawns and every --children count must be at least 1".into());
    }
    if args.connects < 2 {
        return Err("--connects must be at least 2 (the first is reported apart)".into());
    }
    for p in &args.parts {
        if !["connect", "spawn", "openmpi"].contains(&p.as_str()) {
            return Err(format!(
                "unknown --parts entry {p:?}: connect, spawn, openmpi"
            ));
        }
    }
    let want = |p: &str| args.parts.iter().any(|x| x == p);
    let me = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let rivetrun = args
        .rivetrun
        .clone()
        .unwrap_or_else(|| harness::beside_me("rivetrun"));
    let timeout = Duration::from_secs(args.timeout);
    let children = args
        .children
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let rivet = |spec: CmdSpec| spec.env("RIVET_YIELD", "always");

    let ompi = if want("openmpi") {
        match prepare_ompi(&args) {
            Ok(x) => Some(x),
            Err(why) => {
                eprintln!("rivet-bench: skipping Open MPI: {why}");
                None
            }
        }
    } else {
        None
    };
    let spawn_spec = |stack: usize| -> CmdSpec {
        if stack == 0 {
            rivet(CmdSpec::new(&rivetrun))
                .args(["-n", &args.parents.to_string()])
                .arg(&me)
                .args(["spawn", "--children", &children, "--reps"])
                .arg(args.spawns.to_string())
                .arg("--json")
        } else {
            let (launcher, binary) = ompi.as_ref().expect("only with Open MPI");
            Mpi::OpenMpi
                .launch(launcher, args.parents, false)
                .arg(binary)
                .arg(&children)
                .arg(args.spawns.to_string())
                .arg(args.hang.to_string())
        }
    };
    let mut units = Vec::new();
    if want("connect") {
        units.push(Unit::Connect);
    }
    if want("spawn") {
        units.push(Unit::Spawn(0));
    }
    if ompi.is_some() {
        units.push(Unit::Spawn(1));
    }
    if units.is_empty() {
        return Err("nothing to run".into());
    }

    let port_dir = std::env::temp_dir().join(format!("rivet-bench-dynamic-{}", std::process::id()));
    std::fs::create_dir_all(&port_dir)
        .map_err(|e| format!("cannot create {}: {e}", port_dir.display()))?;
    let mut s = Samples::default();
    for stack in 0..2 {
        s.spawn[stack] = args.children.iter().map(|_| Default::default()).collect();
    }
    let mut failures = 0;
    let mut loads = Vec::new();
    let mut progress = Progress::new(units.len() * args.reps as usize);
    for rep in 0..args.reps {
        for u in harness::rotation(units.len(), rep) {
            let what = format!(
                "rep {}/{} {}",
                rep + 1,
                args.reps,
                match units[u] {
                    Unit::Connect => "accept/connect",
                    Unit::Spawn(0) => "rivet spawn",
                    Unit::Spawn(_) => "openmpi spawn",
                }
            );
            progress.start(&what);
            let prefix = format!("rivet-bench: {what}");
            let outcome = match units[u] {
                Unit::Connect => {
                    let port_file = port_dir.join(format!("port-{rep}"));
                    let _ = std::fs::remove_file(&port_file);
                    let side = |what: &str| {
                        rivet(CmdSpec::new(&rivetrun))
                            .args(["-n", &args.ranks.to_string()])
                            .arg(&me)
                            .args([what, "--port-file"])
                            .arg(&port_file)
                            .args(["--reps", &args.connects.to_string(), "--json"])
                    };
                    let (a, c) = (side("accept"), side("connect"));
                    let (a, c) = std::thread::scope(|scope| {
                        let acceptor = scope.spawn(|| harness::run_job(&a, timeout));
                        let connector = harness::run_job(&c, timeout);
                        (acceptor.join().expect("accept job thread"), connector)
                    });
                    let _ = std::fs::remove_file(&port_file);
                    a.and_then(|a| c.map(|c| (a, c)))
                        .and_then(|(a, c)| record_connect(&mut s, &a, &c))
                        .map(|note| format!("accept/connect: {note}"))
                }
                Unit::Spawn(stack) => {
                    let name = ["rivet spawn", "openmpi spawn"][stack];
                    // Open MPI's jobs keep what they measured before a hang.
                    let run = if stack == 0 {
                        harness::run_job(&spawn_spec(stack), timeout).map(|out| (out, None))
                    } else {
                        harness::run_job_lenient(&spawn_spec(stack), timeout)
                    };
                    run.and_then(|(out, problem)| {
                        if let Some(p) = out.foreign_pct {
                            loads.push(p);
                        }
                        let note = if stack == 0 {
                            record_rivet_spawn(&mut s, &args.children, &out)
                        } else {
                            record_ompi_spawn(&mut s, &args.children, &out, problem.as_deref())
                        }?;
                        let load = out
                            .foreign_pct
                            .map_or(String::new(), |p| format!(", other load {p:.0}%"));
                        Ok(format!("{name}: {:.3} s{load}; {note}", out.wall))
                    })
                }
            };
            match outcome {
                Ok(line) => progress.finished(&format!("{prefix}: {line}")),
                Err(e) => {
                    failures += 1;
                    progress.finished(&format!("{prefix}: FAILED: {e}"));
                }
            }
        }
    }
    progress.finish();
    let _ = std::fs::remove_dir(&port_dir);
    if args.json {
        print_json(&args, &s);
    } else {
        print_table(&args, &s, ompi.is_some());
    }
    if let Some(l) = (harness::Loads {
        samples: loads,
        failures,
    })
    .describe()
    {
        eprintln!("rivet-bench: spawn jobs: {l}");
    }
    if failures > 0 {
        return Err(format!("{failures} job(s) failed (see above)"));
    }
    Ok(())
}

/// Build ompi_spawn; the launcher and the binary, or why Open MPI is skipped.
fn prepare_ompi(args: &Args) -> Result<(PathBuf, PathBuf), String> {
    let launcher = harness::find_program(&args.ompi_mpirun)
        .ok_or_else(|| format!("{} not found", args.ompi_mpirun))?;
    if !harness::version_ok(&launcher) {
        return Err(format!("{} --version fails", args.ompi_mpirun));
    }
    let cc = harness::find_program(&args.mpicc_openmpi)
        .ok_or_else(|| format!("{} not found", args.mpicc_openmpi))?;
    let source = args
        .source
        .clone()
        .unwrap_or_else(|| PathBuf::from(OMPI_SPAWN_SOURCE));
    let dir = args
        .build_dir
        .clone()
        .unwrap_or_else(peers::default_build_dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let out = dir.join("ompi_spawn.openmpi");
    peers::compile(&cc, &source, &out)?;
    Ok((launcher, out))
}
