//! `rivet-bench compare`: Rivet and its peers (MPICH, Open MPI; over TCP
//! also raw TCP; over libfabric fi_pingpong) side by side on this machine,
//! interleaved run by run, with median [min-max] per stack and the ratio
//! Rivet / best peer. The transport is shared memory (`--transport shm`, the
//! default), TCP over loopback (`--transport tcp`) or libfabric
//! (`--transport ofi`, one or more providers).
//!
//! Point-to-point (latency, bw, mr; bibw is Rivet only, the peers' program
//! has none): each run is one whole job on 2 ranks, one per core. Over shm:
//! - rivet:   `rivetrun -n 2 --bind-to core rivet-bench <bench> --json --max M`
//! - rivet-mpi: `MAXSIZE=M rivetrun -n 2 --bind-to core mpi_p2p.rivet-mpi <lat|bw|mr>`
//!   (the same peer program as MPICH's and Open MPI's, built with `rivetcc`:
//!   MPI on librivetmpi on librivet); its extra column rivet-mpi/rivet is
//!   what the MPI layer costs, held to 8 B latency <= 1.05 x and mr >= 0.95 x
//! - mpich:   `MAXSIZE=M mpiexec.hydra -n 2 -bind-to core mpi_p2p.mpich <lat|bw|mr>`
//! - openmpi: `PMIX_MCA_psec=native mpirun.openmpi --allow-run-as-root --oversubscribe -n 2
//!   --bind-to core --mca pml ob1 --mca btl self,vader -x MAXSIZE mpi_p2p.openmpi <lat|bw|mr>`
//!
//! Over tcp (`--transport tcp`):
//! - rivet-uring: `RIVET_NETMOD=tcp RIVET_TCP_BACKEND=uring rivetrun -n 2 --bind-to core
//!   rivet-bench <bench> --json --max M`
//! - rivet-poll:  `RIVET_NETMOD=tcp RIVET_TCP_BACKEND=poll rivetrun -n 2 --bind-to core
//!   rivet-bench <bench> --json --max M`
//! - raw-tcp:     `tcp_pingpong <lat|bw>` (latency and bw only)
//! - mpich:   `UCX_TLS=tcp,self MAXSIZE=M mpiexec.hydra -n 2 -bind-to core
//!   mpi_p2p.mpich <lat|bw|mr>`
//! - openmpi: `PMIX_MCA_psec=native mpirun.openmpi --allow-run-as-root --oversubscribe -n 2
//!   --bind-to core --mca pml ob1 --mca btl self,tcp -x MAXSIZE mpi_p2p.openmpi <lat|bw|mr>`
//!
//! where `mpi_p2p.*` is benches/peers/mpi_p2p.c built with each
//! stack's `mpicc -O2` (into `target/peers/`), and M the largest size asked
//! for, so every stack runs the same ladder of sizes up to M. mr is 8-byte
//! messages only (mpi_p2p's mr).
//!
//! raw-tcp is `benches/peers/tcp_pingpong.c` built with `cc -O2` (into
//! `target/peers/`): one loopback connection with TCP_NODELAY between two
//! processes it forks and pins to CPUs 0 and 1 itself. It is the limit
//! Rivet's TCP netmod is held to, not a peer: its latency is the busy-poll
//! table (recv(MSG_DONTWAIT) in a loop; the blocking-recv table it prints
//! first is not used) at 1, 8, 64, 512 B, 1, 4, 16, 64 KiB; its bw is one
//! stream of back-to-back sends (no window, one ack at the end) at 64 KiB,
//! 256 KiB, 1 MiB and 4 MiB. Sizes it does not measure show as "-".
//!
//! Over ofi (`--transport ofi`), for each provider P of `--provider`
//! (default `tcp;ofi_rxm` and `shm`):
//! - rivet-ofi(P):   `RIVET_NETMOD=ofi RIVET_OFI_PROVIDER=P rivetrun -n 2 --bind-to core
//!   rivet-bench <bench> --json --max M` (no `RIVET_OFI_DOMAIN`: the
//!   provider's first domain, as fi_pingpong's)
//! - fi_pingpong(P): libfabric's own ping-pong (package libfabric-bin), the
//!   raw reference, latency and bw only, one server/client pair per size
//!   (`fi_pingpong` has only one size per run), run through `rivet-bench
//!   fi-pingpong` (module `fi_pingpong`): `taskset -c 1 fi_pingpong -p P -e
//!   rdm -B PORT -S SIZE -I ITERS` and `taskset -c 0 fi_pingpong -p P -e rdm
//!   -P PORT -S SIZE -I ITERS 127.0.0.1` (as the project's reference runs, and
//!   ITERS: 50000 up to 1 KiB, 5000 up to 64 KiB, 500 above), a free port
//!   per pair, at exactly the sizes asked for. Its latency is
//!   usec/xfer (half a round trip); its bw is ping-pong bandwidth, size /
//!   half round trip with one message in flight (fi_pingpong's MB/sec
//!   column). That is not the same kind of figure as Rivet's bw, a window
//!   of 64 messages in flight: the bw ratio compares a streaming rate with a
//!   ping-pong one.
//!
//! mr, bibw and startup over ofi are rivet-ofi only (fi_pingpong has none),
//! shown without a ratio.
//!
//! Ratios are Rivet's median over the other stack's. Over shm: rivet / best
//! peer. Over tcp, per size: each Rivet stack / best peer (the better of
//! MPICH and Open MPI), each Rivet stack / raw-tcp, and rivet-uring /
//! rivet-poll; the targets are 8-byte latency <= 1.1 x raw-tcp and 1 MiB bw
//! >= 0.9 x raw-tcp, and those two ratios say whether they are met.
//!
//! Over ofi, per size: rivet-ofi(P) / fi_pingpong(P), the same provider's;
//! the targets, at every size, are latency at most 1.1 x fi_pingpong's and
//! bw at least 1.0 x fi_pingpong's ping-pong MB/s, and the ratios say
//! whether they are met.
//!
//! startup: wall time of a whole N-rank job, launcher start to exit:
//! `rivetrun -n N rivet-bench startup` against `mpiexec.hydra -n N mpi_hello.mpich`
//! and `PMIX_MCA_psec=native mpirun.openmpi --oversubscribe -n N mpi_hello.openmpi`
//! (benches/peers/`mpi_hello.c`: MPI_Init, MPI_Barrier, MPI_Finalize), default
//! binding, one untimed warm-up run of each first. Over tcp each stack gets
//! its TCP settings (the RIVET_* environment, UCX_TLS=tcp,self, --mca pml ob1
//! --mca btl self,tcp); raw-tcp has no startup. Over ofi only rivet-ofi(P) runs
//! startup (with its RIVET_* settings).
//!
//! Every `mpirun.openmpi` run has `PMIX_MCA_psec=native`, the PMIx security
//! component rivetrun's own server uses (`openmpi-rivetrun`), so both
//! launchers authenticate their ranks alike. Left to choose, mpirun tries
//! munge first; where the munge package is installed but no munged runs (a
//! stale /run/munge socket), that costs it ~2.3 s of retries per job, which
//! startup would otherwise count against Open MPI's launcher.
//!
//! Benchmarks of scale (`--benches idle,fanin`, over tcp or ofi, Rivet
//! stacks only; jobs and verdicts in `scale_compare`): `latency-idle`, 8 B
//! latency with 0 and `--idle-peers` idle ranks connected, and `memory`,
//! rank 0's RSS in the same runs, keyed by idle peers; `fanin`, keyed by
//! `--senders`. Below every table whose Rivet runs report them: rank 0's
//! netmod system calls per message (median per stack).
//!
//! Placement: the harness probes CPUs 0 and 1's round trip around every
//! run (`placement`); each sample keeps its run's probes (`Table::probes`),
//! and where the runs had two placements the reports give each
//! placement's runs apart (`Table::placed`) beside all of them.
//!
//! Order: for each rep, every bench, every stack (the stack order rotates by
//! one each rep). A stack whose launcher or compiler is missing is skipped
//! with a note; a failed run is reported and left out of the summary.
//!
//! Files, each depending only on those before it: `args` (the command
//! line), `stacks` (which stacks run), `programs` (each stack's programs
//! and command lines), `table` (one benchmark's samples), `summary`
//! (medians, ratios, targets), `record` (a run's output into its table),
//! then the reports `text`, `csv` and `json_report`. `run`, here, plans the
//! tables and cells and runs them interleaved.

mod args;
mod csv;
#[cfg(test)]
mod fixtures;
mod json_report;
mod programs;
mod record;
mod stacks;
mod summary;
mod table;
mod text;

pub use args::Args;

use self::args::{parse_sizes, Bench, Loops, SizeSel};
use self::csv::csv_doc;
use self::json_report::json_doc;
use self::programs::{
    fi_pingpong_stack, rivet_cmd, rivet_mpi_stack, rivet_stack, StackEntry, StackRun,
};
use self::record::{record, CellTarget};
use self::stacks::{select_providers, select_stacks, split_provider};
use self::table::Table;
use self::text::text_report;
use crate::harness::{self, beside_me, Cell, Order};
use crate::peers::{self, Mpi, Transport};
use crate::sizes::{self, Kind};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub fn run(args: Args) -> Result<(), String> {
    if args.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    if let Some(path) = &args.plot {
        crate::plot::format_of(path)?;
    }
    if args.iters == Some(0) || args.window == Some(0) {
        return Err("--iters and --window must be at least 1".into());
    }
    let loops = Loops {
        iters: args.iters,
        warmup: args.warmup,
        window: args.window,
    };
    let size_sel = match args.range {
        Some((min, max)) => {
            let (min, max) = (min.unwrap_or(0), max.unwrap_or(sizes::DEFAULT_MAX));
            let list = sizes::size_list(min, max);
            if list.is_empty() {
                return Err(format!("-m {min}:{max}: no ladder size in the range"));
            }
            SizeSel::List(list)
        }
        None => parse_sizes(&args.sizes)?,
    };
    let transport = args.transport;
    let mut benches = Vec::new();
    for b in &args.benches {
        let bench = match b.trim() {
            "startup" => Bench::Startup,
            "idle" if transport == Transport::Shm => {
                return Err("idle needs --transport tcp or ofi (a netmod between the ranks)".into())
            }
            "fanin" => Bench::Fanin,
            "idle" => Bench::Idle,
            other => Bench::P2p(Kind::from_name(other).ok_or_else(|| {
                format!("unknown bench {other:?}: latency, bw, bibw, mr, startup, idle or fanin")
            })?),
        };
        if !benches.contains(&bench) {
            benches.push(bench);
            if bench == Bench::Idle {
                benches.push(Bench::Memory);
            }
        }
    }
    if benches.contains(&Bench::Startup) && (args.ranks.is_empty() || args.ranks.contains(&0)) {
        return Err("--ranks must list rank counts of at least 1".into());
    }
    let want_pingpong = benches
        .iter()
        .any(|b| matches!(b, Bench::P2p(k) if *k != Kind::Bibw));
    let want_hello = benches.contains(&Bench::Startup);
    let want_raw = benches
        .iter()
        .any(|b| matches!(b, Bench::P2p(Kind::Latency | Kind::Bw)));

    let providers = select_providers(transport, args.provider.as_deref())?;
    let names = select_stacks(transport, args.stacks.as_deref(), &providers)?;
    // The stacks, in a fixed order: Rivet first.
    let build_dir = args
        .build_dir
        .clone()
        .unwrap_or_else(peers::default_build_dir);
    let peers_dir = args
        .peers_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(peers::DEFAULT_PEERS_DIR));
    let mut stacks = Vec::new();
    for name in names {
        let tcp = |backend: &str| {
            vec![
                ("RIVET_NETMOD", "tcp".to_string()),
                ("RIVET_TCP_BACKEND", backend.to_string()),
            ]
        };
        let status = match split_provider(&name) {
            ("rivet", None) => rivet_stack(&args, Vec::new()),
            ("rivet-uring", None) => rivet_stack(&args, tcp("uring")),
            ("rivet-poll", None) => rivet_stack(&args, tcp("poll")),
            ("raw-tcp" | "fi_pingpong", _) if !want_raw => Err("it has only latency and bw".into()),
            ("raw-tcp", None) => {
                peers::prepare_raw_tcp(&args.cc, &peers_dir, &build_dir).map(StackRun::RawTcp)
            }
            ("rivet-ofi", Some(provider)) => rivet_stack(
                &args,
                vec![
                    ("RIVET_NETMOD", "ofi".to_string()),
                    ("RIVET_OFI_PROVIDER", provider.to_string()),
                ],
            ),
            ("fi_pingpong", Some(provider)) => fi_pingpong_stack(&args, provider),
            ("mpich", None) => peers::prepare(
                Mpi::Mpich,
                &args.hydra,
                &args.mpicc_mpich,
                &peers_dir,
                &build_dir,
                want_pingpong,
                want_hello,
            )
            .map(|s| StackRun::Mpi(s, transport)),
            ("rivet-mpi", None) => {
                rivet_mpi_stack(&args, &peers_dir, &build_dir, want_pingpong, want_hello)
                    .map(|s| StackRun::Mpi(s, transport))
            }
            ("openmpi-rivetrun", None) => peers::prepare(
                Mpi::OpenMpiRivetrun,
                &args
                    .rivetrun
                    .clone()
                    .unwrap_or_else(|| beside_me("rivetrun"))
                    .to_string_lossy(),
                &args.mpicc_openmpi,
                &peers_dir,
                &build_dir,
                want_pingpong,
                want_hello,
            )
            .map(|s| StackRun::Mpi(s, transport)),
            ("openmpi", None) => peers::prepare(
                Mpi::OpenMpi,
                &args.ompi_mpirun,
                &args.mpicc_openmpi,
                &peers_dir,
                &build_dir,
                want_pingpong,
                want_hello,
            )
            .map(|s| StackRun::Mpi(s, transport)),
            _ => Err(format!("unknown stack {name}")),
        };
        if let Err(why) = &status {
            eprintln!("rivet-bench: skipping {name}: {why}");
        }
        stacks.push(StackEntry { name, status });
    }
    if !stacks.iter().any(|s| s.status.is_ok()) {
        return Err("no stack can run".into());
    }

    // Tables and cells: one group per p2p bench, one per startup rank count.
    let max_size = match &size_sel {
        SizeSel::All => sizes::DEFAULT_MAX,
        SizeSel::List(l) => *l.last().expect("non-empty"),
    };
    let mut tables = Vec::new();
    let mut groups: Vec<Vec<Cell>> = Vec::new();
    let mut targets: Vec<Vec<CellTarget>> = Vec::new();
    for &bench in &benches {
        let t = tables.len();
        let mut table = Table {
            bench,
            keys: None,
            stacks: Vec::new(),
            only: BTreeMap::new(),
            samples: BTreeMap::new(),
            probes: BTreeMap::new(),
            calls: BTreeMap::new(),
        };
        match bench {
            Bench::P2p(kind) => {
                table.keys = match (&size_sel, kind) {
                    (_, Kind::Mr) => Some(vec![8]),
                    (SizeSel::All, _) => None,
                    (SizeSel::List(l), _) => Some(
                        l.iter()
                            .filter(|&&s| s > 0 || kind == Kind::Latency)
                            .map(|&s| s as u64)
                            .collect(),
                    ),
                };
                let mut cells = Vec::new();
                let mut tgts = Vec::new();
                let run_sizes = table.run_sizes(max_size);
                for (i, s) in stacks.iter().enumerate() {
                    let Ok(run) = &s.status else { continue };
                    let Some(spec) = run.p2p_with(kind, max_size, &run_sizes, &loops) else {
                        continue;
                    };
                    if let Some(fixed) = run.fixed_sizes(kind) {
                        if !fixed.iter().any(|&k| table.wants(k)) {
                            eprintln!(
                                "rivet-bench: {} left out of {}: it measures only sizes {}",
                                s.name,
                                kind.name(),
                                fixed
                                    .iter()
                                    .map(u64::to_string)
                                    .collect::<Vec<_>>()
                                    .join(",")
                            );
                            continue;
                        }
                        table.only.insert(i, fixed);
                    }
                    table.stacks.push(i);
                    cells.push(Cell {
                        label: format!("{}/{} ({})", kind.name(), s.name, size_span(&run_sizes)),
                        spec,
                        warmup: false,
                    });
                    tgts.push(CellTarget {
                        table: t,
                        stack: i,
                        wall_key: None,
                        key: None,
                        memory: None,
                    });
                }
                groups.push(cells);
                targets.push(tgts);
            }
            Bench::Memory => {
                // Filled by the idle runs.
                table.stacks = stacks
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| matches!(s.status, Ok(StackRun::Rivet { .. })))
                    .map(|(i, _)| i)
                    .collect();
                table.keys = Some(vec![0, u64::from(args.idle_peers)]);
                groups.push(Vec::new());
                targets.push(Vec::new());
            }
            Bench::Idle | Bench::Fanin => {
                let keys: Vec<u64> = if bench == Bench::Idle {
                    vec![0, u64::from(args.idle_peers)]
                } else {
                    vec![u64::from(args.senders)]
                };
                table.keys = Some(keys.clone());
                let mut cells = Vec::new();
                let mut tgts = Vec::new();
                for (i, s) in stacks.iter().enumerate() {
                    let Ok(StackRun::Rivet {
                        rivetrun,
                        bench: program,
                        env,
                    }) = &s.status
                    else {
                        continue;
                    };
                    table.stacks.push(i);
                    for &k in &keys {
                        let kind = if bench == Bench::Idle {
                            Kind::Latency
                        } else {
                            Kind::Mr
                        };
                        let spec = crate::scale_compare::spec(
                            rivet_cmd(rivetrun, env),
                            program,
                            bench == Bench::Idle,
                            k,
                            loops.args(kind, ["--iters", "--warmup", "--window"]),
                        );
                        cells.push(Cell {
                            label: format!("{} {k}/{}", table.name(), s.name),
                            spec,
                            warmup: false,
                        });
                        tgts.push(CellTarget {
                            table: t,
                            stack: i,
                            wall_key: None,
                            key: Some(k),
                            // The memory table follows the idle one.
                            memory: (bench == Bench::Idle).then_some(t + 1),
                        });
                    }
                }
                groups.push(cells);
                targets.push(tgts);
            }
            Bench::Startup => {
                table.keys = Some(args.ranks.iter().map(|&n| u64::from(n)).collect());
                for (i, s) in stacks.iter().enumerate() {
                    if s.status.as_ref().is_ok_and(|r| r.startup(1).is_some()) {
                        table.stacks.push(i);
                    }
                }
                for &n in &args.ranks {
                    let mut cells = Vec::new();
                    let mut tgts = Vec::new();
                    for &i in &table.stacks {
                        let run = stacks[i].status.as_ref().expect("usable");
                        cells.push(Cell {
                            label: format!("startup N={n}/{}", stacks[i].name),
                            spec: run.startup(n).expect("usable"),
                            warmup: true,
                        });
                        tgts.push(CellTarget {
                            table: t,
                            stack: i,
                            wall_key: Some(u64::from(n)),
                            key: None,
                            memory: None,
                        });
                    }
                    groups.push(cells);
                    targets.push(tgts);
                }
            }
        }
        tables.push(table);
    }

    if args.dry_run {
        for (g, cells) in groups.iter().enumerate() {
            for (c, cell) in cells.iter().enumerate() {
                println!("{}: {}", cell.label, cell.spec);
                let target = targets[g][c];
                if let Ok(run) = &stacks[target.stack].status {
                    let sizes = tables[target.table].run_sizes(max_size);
                    for (server, client) in run.fi_pairs(&sizes) {
                        println!("  server: {server}\n  client: {client}");
                    }
                }
            }
        }
        return Ok(());
    }
    for g in &groups {
        for c in g {
            eprintln!("rivet-bench: {}: {}", c.label, c.spec);
        }
    }
    let loads = harness::run_interleaved(
        &groups,
        args.reps,
        Order::RepsOutermost,
        Duration::from_secs(args.timeout),
        |g, c, out, probe| record(&mut tables, &stacks, targets[g][c], out, probe),
    );

    let names: Vec<&str> = stacks.iter().map(|s| s.name.as_str()).collect();
    let skipped: Vec<(&str, &str)> = stacks
        .iter()
        .filter_map(|s| {
            s.status
                .as_ref()
                .err()
                .map(|w| (s.name.as_str(), w.as_str()))
        })
        .collect();
    let doc = json_doc(transport, &tables, &names, &skipped, args.reps, &loads);
    if let Some(path) = &args.plot {
        // A plot that cannot be drawn must not cost the tables.
        if let Err(e) = crate::plot::plot_json(&doc, path) {
            eprintln!("rivet-bench: no plot: {e}");
        }
    }
    if args.json {
        println!("{doc}");
    } else if args.csv {
        print!("{}", csv_doc(&tables, &names));
    } else {
        let text = text_report(transport, &tables, &names, &skipped, args.reps, &loads);
        match args.window {
            // The titles name the default window.
            Some(w) => print!(
                "{}",
                text.replace("window of 64", &format!("window of {w}"))
            ),
            None => print!("{text}"),
        }
    }
    Ok(())
}

/// "8 B-4 MiB" (or "8 B"): the sizes a run covers, for progress lines.
fn size_span(sizes: &[u64]) -> String {
    let fmt = |s: u64| match s {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    };
    match (sizes.iter().min(), sizes.iter().max()) {
        (Some(&a), Some(&b)) if a == b => fmt(a),
        (Some(&a), Some(&b)) => format!("{}-{}", fmt(a), fmt(b)),
        _ => "all sizes".into(),
    }
}
