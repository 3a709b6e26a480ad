//! Each stack's programs: found or built (Rivet, rivet-mpi, the MPI
//! peers, raw-tcp, fi_pingpong), and the command line of each of its runs.

use super::args::{Args, Loops};
use crate::fi_pingpong;
use crate::harness::{beside_me, find_program, CmdSpec};
use crate::peers::{self, Mpi, Transport};
use crate::sizes::{self, Kind};
use std::path::PathBuf;

/// One stack of the comparison: a name and how to run it, or why not.
pub(super) struct StackEntry {
    pub(super) name: String,
    /// How its runs look, or why it is skipped.
    pub(super) status: Result<StackRun, String>,
}

pub(super) enum StackRun {
    Rivet {
        rivetrun: PathBuf,
        bench: PathBuf,
        /// Set for rivetrun (which passes it on to the ranks).
        env: Vec<(&'static str, String)>,
    },
    Mpi(peers::Stack, Transport),
    /// tcp_pingpong.
    RawTcp(PathBuf),
    /// fi_pingpong pairs, run by `wrapper fi-pingpong` (this executable).
    FiPingpong {
        wrapper: PathBuf,
        program: PathBuf,
        provider: String,
        /// `fi-pingpong --timeout`: a little under compare's, so that it
        /// stops its pairs itself before its job is killed.
        timeout: u64,
    },
}

impl StackRun {
    /// `p2p_with` the programs' own iteration counts.
    #[cfg(test)]
    pub(super) fn p2p(&self, kind: Kind, max_size: usize, sizes: &[u64]) -> Option<CmdSpec> {
        self.p2p_with(kind, max_size, sizes, &Loops::default())
    }

    /// The job for one p2p benchmark, or None if the stack has no such
    /// bench. `sizes` are those to report: Rivet's and the MPI stacks'
    /// runs go up the ladder to `max_size`, fi_pingpong runs those only.
    pub(super) fn p2p_with(
        &self,
        kind: Kind,
        max_size: usize,
        sizes: &[u64],
        loops: &Loops,
    ) -> Option<CmdSpec> {
        match self {
            StackRun::Rivet {
                rivetrun,
                bench,
                env,
            } => {
                let spec = rivet_cmd(rivetrun, env)
                    .args(["-n", "2", "--bind-to", "core"])
                    .arg(bench)
                    .args([kind.name(), "--json"])
                    .args(loops.args(kind, ["--iters", "--warmup", "--window"]));
                Some(if kind == Kind::Mr {
                    spec
                } else {
                    spec.args(["--max", &max_size.to_string()])
                })
            }
            StackRun::Mpi(s, transport) => {
                let b = peers::pingpong_bench(kind.name())?;
                let max = if kind == Kind::Mr { 8 } else { max_size };
                Some(
                    s.mpi
                        .pingpong(&s.launcher, s.pingpong.as_ref()?, b, max, *transport)
                        .args(loops.args(kind, ["-i", "-x", "-W"])),
                )
            }
            StackRun::RawTcp(program) => {
                let (b, _) = peers::raw_tcp_bench(kind.name())?;
                let spec = CmdSpec::new(program).arg(b);
                // Its -i counts round trips (lat) or messages (bw).
                let per_iter = if kind == Kind::Bw {
                    loops.window.unwrap_or(sizes::WINDOW) as u64
                } else {
                    1
                };
                Some(match loops.iters {
                    Some(n) => spec.args(["-i".to_string(), (u64::from(n) * per_iter).to_string()]),
                    None => spec,
                })
            }
            StackRun::FiPingpong {
                wrapper,
                program,
                provider,
                timeout,
            } => {
                if !matches!(kind, Kind::Latency | Kind::Bw) || sizes.is_empty() {
                    return None;
                }
                let sizes: Vec<String> = sizes.iter().map(u64::to_string).collect();
                Some(
                    CmdSpec::new(wrapper)
                        .args(["fi-pingpong", "--provider", provider])
                        .args(["--sizes", &sizes.join(",")])
                        .arg("--program")
                        .arg(program)
                        .args(["--timeout", &timeout.to_string()]),
                )
            }
        }
    }

    /// fi_pingpong's server and client command lines, one pair per size
    /// (port shown as PORT: each pair gets a free one when it runs).
    pub(super) fn fi_pairs(&self, sizes: &[u64]) -> Vec<(CmdSpec, CmdSpec)> {
        match self {
            StackRun::FiPingpong {
                program, provider, ..
            } => sizes
                .iter()
                .map(|&s| {
                    fi_pingpong::pair(program, provider, "PORT", s, fi_pingpong::iterations(s))
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    pub(super) fn startup(&self, n: u32) -> Option<CmdSpec> {
        match self {
            StackRun::Rivet {
                rivetrun,
                bench,
                env,
            } => Some(
                rivet_cmd(rivetrun, env)
                    .args(["-n", &n.to_string()])
                    .arg(bench)
                    .arg("startup"),
            ),
            StackRun::Mpi(s, transport) => Some(
                s.mpi
                    .startup(&s.launcher, n, *transport)
                    .arg(s.hello.as_ref()?),
            ),
            StackRun::RawTcp(_) | StackRun::FiPingpong { .. } => None,
        }
    }

    /// The only sizes this stack measures for `kind`, if it cannot do others.
    pub(super) fn fixed_sizes(&self, kind: Kind) -> Option<&'static [u64]> {
        match self {
            StackRun::RawTcp(_) => peers::raw_tcp_bench(kind.name()).map(|(_, s)| s),
            _ => None,
        }
    }
}

/// `rivetrun` with the stack's `RIVET_*` settings.
pub(super) fn rivet_cmd(rivetrun: &std::path::Path, env: &[(&'static str, String)]) -> CmdSpec {
    env.iter()
        .fold(CmdSpec::new(rivetrun), |spec, (k, v)| spec.env(k, v))
}

/// fi_pingpong over `provider`, run through this executable's `fi-pingpong`.
pub(super) fn fi_pingpong_stack(args: &Args, provider: &str) -> Result<StackRun, String> {
    let program = find_program(&args.fi_pingpong)
        .ok_or_else(|| format!("{} not found (package libfabric-bin)", args.fi_pingpong))?;
    if find_program("taskset").is_none() {
        return Err("taskset not found (package util-linux)".into());
    }
    let wrapper =
        std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    Ok(StackRun::FiPingpong {
        wrapper,
        program,
        provider: provider.to_string(),
        timeout: args.timeout.saturating_sub(10).max(1),
    })
}

/// The peers' programs built with `rivetcc` (librivetmpi on librivet)
/// and run under `rivetrun`, as the MPI peers run theirs.
pub(super) fn rivet_mpi_stack(
    args: &Args,
    peers_dir: &std::path::Path,
    build_dir: &std::path::Path,
    want_pingpong: bool,
    want_hello: bool,
) -> Result<peers::Stack, String> {
    let path = |given: &Option<PathBuf>, name: &str| {
        given
            .clone()
            .unwrap_or_else(|| beside_me(name))
            .to_string_lossy()
            .into_owned()
    };
    let rivetcc = path(&args.rivetcc, "rivetcc");
    // The programs link librivetmpi by rpath from rivetcc's directory, so
    // each rivetcc (debug, release, installed) gets its own build dir.
    let dir = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        find_program(&rivetcc).unwrap_or_default().hash(&mut h);
        build_dir.join(format!("rivet-mpi-{:016x}", h.finish()))
    };
    // A program older than the library it was built against is rebuilt
    // (mpi.h may have changed with it).
    let lib = find_program(&rivetcc)
        .and_then(|cc| cc.parent().map(|d| d.to_path_buf()))
        .map(|d| {
            let beside = d.join("librivetmpi.so");
            if beside.exists() {
                beside
            } else {
                d.join("../lib/librivetmpi.so")
            }
        });
    let built = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if let Some(lib_time) = lib.as_deref().and_then(built) {
        for stem in ["mpi_p2p.rivet-mpi", "mpi_hello.rivet-mpi"] {
            let prog = dir.join(stem);
            if built(&prog).is_some_and(|t| t < lib_time) {
                let _ = std::fs::remove_file(&prog);
            }
        }
    }
    peers::prepare(
        Mpi::Rivet,
        &path(&args.rivetrun, "rivetrun"),
        &rivetcc,
        peers_dir,
        &dir,
        want_pingpong,
        want_hello,
    )
    .map_err(|e| format!("{e} (build it: cargo build --release -p rivet-mpi -p rivet-capi)"))
}

pub(super) fn rivet_stack(
    args: &Args,
    env: Vec<(&'static str, String)>,
) -> Result<StackRun, String> {
    let rivetrun = args
        .rivetrun
        .clone()
        .unwrap_or_else(|| beside_me("rivetrun"));
    let rivetrun = find_program(&rivetrun.to_string_lossy()).ok_or_else(|| {
        format!(
            "{} not found (build it: cargo build --release -p rivet-launcher)",
            rivetrun.display()
        )
    })?;
    let bench = match &args.rivet_bench {
        Some(p) => p.clone(),
        None => std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?,
    };
    if !bench.is_file() {
        return Err(format!("{} not found", bench.display()));
    }
    Ok(StackRun::Rivet {
        rivetrun,
        bench,
        env,
    })
}

#[cfg(test)]
mod tests {
    use super::super::args::Bench;
    use super::super::fixtures::table;
    use super::*;
    use crate::peers;

    #[test]
    fn tcp_command_lines() {
        let rivet = |backend: &str| StackRun::Rivet {
            rivetrun: "rivetrun".into(),
            bench: "rivet-bench".into(),
            env: vec![
                ("RIVET_NETMOD", "tcp".to_string()),
                ("RIVET_TCP_BACKEND", backend.to_string()),
            ],
        };
        assert_eq!(
            rivet("uring")
                .p2p(Kind::Latency, 65536, &[])
                .unwrap()
                .to_string(),
            "RIVET_NETMOD=tcp RIVET_TCP_BACKEND=uring rivetrun -n 2 --bind-to core \
             rivet-bench latency --json --max 65536"
        );
        assert_eq!(
            rivet("poll").p2p(Kind::Mr, 65536, &[]).unwrap().to_string(),
            "RIVET_NETMOD=tcp RIVET_TCP_BACKEND=poll rivetrun -n 2 --bind-to core rivet-bench mr --json"
        );
        assert_eq!(
            rivet("poll").startup(8).unwrap().to_string(),
            "RIVET_NETMOD=tcp RIVET_TCP_BACKEND=poll rivetrun -n 8 rivet-bench startup"
        );
        let shm = StackRun::Rivet {
            rivetrun: "rivetrun".into(),
            bench: "rivet-bench".into(),
            env: Vec::new(),
        };
        assert_eq!(
            shm.p2p(Kind::Bw, 8, &[]).unwrap().to_string(),
            "rivetrun -n 2 --bind-to core rivet-bench bw --json --max 8"
        );
        assert_eq!(shm.fixed_sizes(Kind::Latency), None);
        let raw = StackRun::RawTcp("target/peers/tcp_pingpong".into());
        assert_eq!(
            raw.p2p(Kind::Latency, 8, &[]).unwrap().to_string(),
            "target/peers/tcp_pingpong lat"
        );
        assert_eq!(
            raw.p2p(Kind::Bw, 1 << 22, &[]).unwrap().to_string(),
            "target/peers/tcp_pingpong bw"
        );
        assert!(raw.p2p(Kind::Mr, 8, &[]).is_none());
        assert!(raw.p2p(Kind::Bibw, 8, &[]).is_none());
        assert!(raw.startup(2).is_none());
        // -i, -x, -W reach every program in its own spelling.
        let loops = Loops {
            iters: Some(50),
            warmup: Some(5),
            window: Some(16),
        };
        assert_eq!(
            shm.p2p_with(Kind::Bw, 8, &[], &loops).unwrap().to_string(),
            "rivetrun -n 2 --bind-to core rivet-bench bw --json --iters 50 --warmup 5 --window 16 --max 8"
        );
        assert_eq!(
            shm.p2p_with(Kind::Latency, 8, &[], &loops)
                .unwrap()
                .to_string(),
            "rivetrun -n 2 --bind-to core rivet-bench latency --json --iters 50 --warmup 5 --max 8"
        );
        assert_eq!(
            raw.p2p_with(Kind::Bw, 8, &[], &loops).unwrap().to_string(),
            "target/peers/tcp_pingpong bw -i 800"
        );
        assert_eq!(
            raw.p2p_with(Kind::Latency, 8, &[], &loops)
                .unwrap()
                .to_string(),
            "target/peers/tcp_pingpong lat -i 50"
        );
        assert_eq!(
            raw.fixed_sizes(Kind::Bw),
            Some(&peers::RAW_TCP_BW_SIZES[..])
        );
    }

    #[test]
    fn ofi_command_lines() {
        let rivet = StackRun::Rivet {
            rivetrun: "rivetrun".into(),
            bench: "rivet-bench".into(),
            env: vec![
                ("RIVET_NETMOD", "ofi".to_string()),
                ("RIVET_OFI_PROVIDER", "tcp;ofi_rxm".to_string()),
            ],
        };
        assert_eq!(
            rivet
                .p2p(Kind::Latency, 65536, &[8, 65536])
                .unwrap()
                .to_string(),
            "RIVET_NETMOD=ofi RIVET_OFI_PROVIDER='tcp;ofi_rxm' rivetrun -n 2 --bind-to core \
             rivet-bench latency --json --max 65536"
        );
        let fi = StackRun::FiPingpong {
            wrapper: "rivet-bench".into(),
            program: "/usr/bin/fi_pingpong".into(),
            provider: "tcp;ofi_rxm".into(),
            timeout: 290,
        };
        assert_eq!(
            fi.p2p(Kind::Bw, 65536, &[8, 1024, 65536])
                .unwrap()
                .to_string(),
            "rivet-bench fi-pingpong --provider 'tcp;ofi_rxm' --sizes 8,1024,65536 \
             --program /usr/bin/fi_pingpong --timeout 290"
        );
        assert!(fi.p2p(Kind::Mr, 8, &[8]).is_none());
        assert!(fi.p2p(Kind::Bibw, 8, &[8]).is_none());
        assert!(fi.p2p(Kind::Latency, 8, &[]).is_none());
        assert!(fi.startup(2).is_none());
        assert_eq!(fi.fixed_sizes(Kind::Latency), None);
        let pairs = fi.fi_pairs(&[8, 1 << 20]);
        assert_eq!(pairs.len(), 2);
        assert_eq!(
            pairs[1].0.to_string(),
            "taskset -c 1 /usr/bin/fi_pingpong -p 'tcp;ofi_rxm' -e rdm -B PORT -S 1048576 -I 500"
        );
        assert_eq!(
            pairs[1].1.to_string(),
            "taskset -c 0 /usr/bin/fi_pingpong -p 'tcp;ofi_rxm' -e rdm -P PORT -S 1048576 -I 500 \
             127.0.0.1"
        );
        assert!(rivet.fi_pairs(&[8]).is_empty());
        // fi_pingpong runs exactly the sizes reported; `all`: the ladder.
        let lat = table(Bench::P2p(Kind::Latency), None, vec![0]);
        assert_eq!(lat.run_sizes(4), [0, 1, 2, 4]);
        let bw = table(Bench::P2p(Kind::Bw), None, vec![0]);
        assert_eq!(bw.run_sizes(4), [1, 2, 4]);
        let listed = table(Bench::P2p(Kind::Bw), Some(vec![8, 1024]), vec![0]);
        assert_eq!(listed.run_sizes(1 << 20), [8, 1024]);
    }
}
