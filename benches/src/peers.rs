//! The stacks Rivet is compared with: building this crate's peer programs
//! (`benches/peers/mpi_p2p.c`, `mpi_hello.c`) with each MPI stack's
//! compiler, their command lines over shared memory or TCP, and reading
//! `mpi_p2p`'s tables; and the raw TCP reference, `benches/peers/
//! tcp_pingpong.c` built with `cc`, and its output. (libfabric's reference,
//! `fi_pingpong`, is in `fi_pingpong`.) The sources live in the checkout,
//! so a fresh clone compares against MPICH and Open MPI with nothing else.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::{find_program, version_ok, CmdSpec};

/// Where the peer programs' C sources are unless `--peers-dir` says
/// otherwise: `benches/peers` of the source tree this was built from.
pub const DEFAULT_PEERS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/peers");

/// The path point-to-point messages take between the two ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// Shared memory: rivet, mpich (UCX sm), openmpi (btl vader).
    Shm,
    /// TCP over loopback: rivet-uring, rivet-poll (Rivet's TCP netmod),
    /// raw-tcp, mpich (UCX tcp), openmpi (btl tcp).
    Tcp,
    /// libfabric, per provider (--provider): rivet-ofi (Rivet's ofi
    /// netmod) and fi_pingpong; no MPI stack.
    Ofi,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Shm => "shm",
            Transport::Tcp => "tcp",
            Transport::Ofi => "ofi",
        }
    }
}

// `OpenMpi` is the project's name, not a repetition of the enum's.
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mpi {
    Mpich,
    OpenMpi,
    /// Rivet's own MPI layer (librivetmpi): the peers' programs built
    /// with `rivetcc`, run under `rivetrun`.
    Rivet,
    /// Open MPI's programs run under `rivetrun` (its PMIx server), to
    /// compare the launchers: `compare --stacks openmpi,openmpi-rivetrun
    /// --benches startup`.
    OpenMpiRivetrun,
}

impl Mpi {
    pub fn name(self) -> &'static str {
        match self {
            Mpi::Mpich => "mpich",
            Mpi::OpenMpi => "openmpi",
            Mpi::Rivet => "rivet-mpi",
            Mpi::OpenMpiRivetrun => "openmpi-rivetrun",
        }
    }

    /// The launch command for `n` ranks (before the program), each rank bound
    /// to a core if `bind` (point-to-point runs), else with the launcher's
    /// default binding (startup runs).
    pub fn launch(self, launcher: &Path, n: u32, bind: bool) -> CmdSpec {
        let spec = CmdSpec::new(launcher);
        match self {
            Mpi::Mpich => {
                let spec = spec.args(["-n", &n.to_string()]);
                if bind {
                    spec.args(["-bind-to", "core"])
                } else {
                    spec
                }
            }
            Mpi::Rivet | Mpi::OpenMpiRivetrun => {
                let spec = spec.args(["-n", &n.to_string()]);
                if bind {
                    spec.args(["--bind-to", "core"])
                } else {
                    spec
                }
            }
            Mpi::OpenMpi => {
                let spec = spec
                    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
                    // The PMIx security component rivetrun's server uses: left
                    // to choose, mpirun tries munge first, and a stale munge
                    // socket (the package installed, no munged) costs it ~2.3 s
                    // of retries per job.
                    .env("PMIX_MCA_psec", "native")
                    .args([
                        "--allow-run-as-root",
                        "--oversubscribe",
                        "-n",
                        &n.to_string(),
                    ]);
                if bind {
                    spec.args(["--bind-to", "core"])
                } else {
                    spec
                }
            }
        }
    }

    /// The environment that selects `transport` (before MAXSIZE).
    /// (No MPI stack is compared over ofi: nothing is set for it.)
    fn transport_env(self, spec: CmdSpec, transport: Transport) -> CmdSpec {
        match (self, transport) {
            (Mpi::Mpich, Transport::Tcp) => spec.env("UCX_TLS", "tcp,self"),
            (Mpi::Rivet, Transport::Tcp) => spec.env("RIVET_NETMOD", "tcp"),
            // rivetrun takes no --mca: Open MPI reads the same from its environment.
            (Mpi::OpenMpiRivetrun, Transport::Shm) => spec
                .env("OMPI_MCA_pml", "ob1")
                .env("OMPI_MCA_btl", "self,vader"),
            (Mpi::OpenMpiRivetrun, Transport::Tcp) => spec
                .env("OMPI_MCA_pml", "ob1")
                .env("OMPI_MCA_btl", "self,tcp"),
            _ => spec,
        }
    }

    /// The launcher options that select `transport`.
    /// (No MPI stack is compared over ofi: nothing is added for it.)
    fn transport_args(self, spec: CmdSpec, transport: Transport) -> CmdSpec {
        let btl = match (self, transport) {
            (Mpi::Mpich | Mpi::Rivet | Mpi::OpenMpiRivetrun, _)
            | (Mpi::OpenMpi, Transport::Ofi) => return spec,
            (Mpi::OpenMpi, Transport::Shm) => "self,vader",
            (Mpi::OpenMpi, Transport::Tcp) => "self,tcp",
        };
        spec.args(["--mca", "pml", "ob1", "--mca", "btl", btl])
    }

    /// `mpi_p2p <lat|bw|mr>` on 2 ranks with messages up to `max_size`,
    /// over `transport`.
    pub fn pingpong(
        self,
        launcher: &Path,
        binary: &Path,
        bench: &str,
        max_size: usize,
        transport: Transport,
    ) -> CmdSpec {
        let max = max_size.to_string();
        let spec = self.launch(launcher, 2, true);
        let spec = self.transport_env(spec, transport).env("MAXSIZE", &max);
        let spec = self.transport_args(spec, transport);
        let spec = match self {
            Mpi::Mpich | Mpi::Rivet | Mpi::OpenMpiRivetrun => spec,
            Mpi::OpenMpi => spec.args(["-x", "MAXSIZE"]),
        };
        spec.arg(binary).arg(bench)
    }

    /// The launch command for a startup job of `n` ranks (before the
    /// program): the launcher's defaults over shared memory (as
    /// startup runs), the TCP settings of `pingpong` over TCP.
    pub fn startup(self, launcher: &Path, n: u32, transport: Transport) -> CmdSpec {
        let spec = self.launch(launcher, n, false);
        match transport {
            Transport::Shm | Transport::Ofi => spec,
            Transport::Tcp => self.transport_args(self.transport_env(spec, transport), transport),
        }
    }
}

/// A usable MPI stack: its launcher and compiled programs.
#[derive(Debug, Clone)]
pub struct Stack {
    pub mpi: Mpi,
    pub launcher: PathBuf,
    pub pingpong: Option<PathBuf>,
    pub hello: Option<PathBuf>,
}

/// Find `mpi`'s launcher and compiler and build what is wanted into
/// `build_dir`; `Err` says why the stack has to be skipped.
pub fn prepare(
    mpi: Mpi,
    launcher: &str,
    compiler: &str,
    sources: &Path,
    build_dir: &Path,
    want_pingpong: bool,
    want_hello: bool,
) -> Result<Stack, String> {
    let launcher_path = find_program(launcher).ok_or_else(|| format!("{launcher} not found"))?;
    if !version_ok(&launcher_path) {
        return Err(format!("{launcher} --version fails"));
    }
    let cc = find_program(compiler).ok_or_else(|| format!("{compiler} not found"))?;
    std::fs::create_dir_all(build_dir)
        .map_err(|e| format!("cannot create {}: {e}", build_dir.display()))?;
    let build = |source: &str, stem: &str| -> Result<PathBuf, String> {
        let src = sources.join(source);
        let out = build_dir.join(format!("{stem}.{}", mpi.name()));
        compile(&cc, &src, &out)?;
        Ok(out)
    };
    let pingpong = if want_pingpong {
        Some(build("mpi_p2p.c", "mpi_p2p")?)
    } else {
        None
    };
    let hello = if want_hello {
        Some(build("mpi_hello.c", "mpi_hello")?)
    } else {
        None
    };
    Ok(Stack {
        mpi,
        launcher: launcher_path,
        pingpong,
        hello,
    })
}

/// Build `tcp_pingpong.c` of `sources` with `compiler` (`cc -O2`) into
/// `build_dir`; `Err` says why the raw-tcp stack has to be skipped.
pub fn prepare_raw_tcp(
    compiler: &str,
    sources: &Path,
    build_dir: &Path,
) -> Result<PathBuf, String> {
    let cc = find_program(compiler).ok_or_else(|| format!("{compiler} not found"))?;
    std::fs::create_dir_all(build_dir)
        .map_err(|e| format!("cannot create {}: {e}", build_dir.display()))?;
    let out = build_dir.join("tcp_pingpong");
    compile(&cc, &sources.join("tcp_pingpong.c"), &out)?;
    Ok(out)
}

/// `cc -O2 src -o out`, unless `out` is newer than `src`.
pub(crate) fn compile(cc: &Path, src: &Path, out: &Path) -> Result<(), String> {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let src_time = modified(src).ok_or_else(|| format!("{} not found", src.display()))?;
    if modified(out).is_some_and(|t| t >= src_time) {
        return Ok(());
    }
    let result = Command::new(cc)
        .args(["-O2", "-Wno-stringop-overflow", "-o"])
        .arg(out)
        .arg(src)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", cc.display()))?;
    if !result.status.success() {
        return Err(format!(
            "{} {} failed: {}",
            cc.display(),
            src.display(),
            String::from_utf8_lossy(&result.stderr).trim()
        ));
    }
    eprintln!("rivet-bench: built {}", out.display());
    Ok(())
}

/// Where peers' programs are built: `target/peers` when this executable is
/// in `target/<profile>/`, else a directory under the system's temp dir.
pub fn default_build_dir() -> PathBuf {
    let me = std::env::current_exe().ok();
    let profile_dir = me.as_deref().and_then(Path::parent);
    match profile_dir {
        Some(dir)
            if matches!(
                dir.file_name().and_then(|n| n.to_str()),
                Some("release" | "debug")
            ) && dir.parent().is_some() =>
        {
            dir.parent().expect("checked").join("peers")
        }
        _ => std::env::temp_dir().join("rivet-bench-peers"),
    }
}

/// The rows of `mpi_p2p`'s table: lines "SIZE VALUE [MORE]" (comment
/// lines start with '#'; anything else, e.g. launcher noise, is skipped).
pub fn parse_table(stdout: &str) -> Vec<(u64, f64)> {
    stdout
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let size = f.next()?.parse::<u64>().ok()?;
            let value = f.next()?.parse::<f64>().ok()?;
            value.is_finite().then_some((size, value))
        })
        .collect()
}

/// mpi_p2p's name for a benchmark of this suite (it has no bibw).
pub fn pingpong_bench(bench: &str) -> Option<&'static str> {
    match bench {
        "latency" => Some("lat"),
        "bw" => Some("bw"),
        "mr" => Some("mr"),
        _ => None,
    }
}

/// The sizes `tcp_pingpong lat` measures (its `LAT_SIZES`).
pub const RAW_TCP_LAT_SIZES: [u64; 8] = [1, 8, 64, 512, 1024, 4096, 16384, 65536];
/// The sizes `tcp_pingpong bw` measures (its `BW_SIZES`).
pub const RAW_TCP_BW_SIZES: [u64; 4] = [65536, 262144, 1 << 20, 4 << 20];

/// tcp_pingpong's name for a benchmark of this suite, and the sizes it
/// reports for it (it has only lat and bw, at fixed sizes).
pub fn raw_tcp_bench(bench: &str) -> Option<(&'static str, &'static [u64])> {
    match bench {
        "latency" => Some(("lat", &RAW_TCP_LAT_SIZES)),
        "bw" => Some(("bw", &RAW_TCP_BW_SIZES)),
        _ => None,
    }
}

/// The table of `tcp_pingpong lat|bw` that is the reference for benchmark
/// `bench`: for latency the busy-poll one, for bw the streaming one. Tables
/// are told apart by their title comment (a blocking-recv table, which the
/// program does not print, would be skipped); column headers ("# Size ...")
/// and anything that is not a "SIZE VALUE" row are skipped.
pub fn parse_raw_tcp(stdout: &str, bench: &str) -> Result<Vec<(u64, f64)>, String> {
    #[derive(PartialEq)]
    enum Table {
        None,
        Blocking,
        BusyPoll,
        Bandwidth,
    }
    let want = match bench {
        "latency" => Table::BusyPoll,
        "bw" => Table::Bandwidth,
        other => return Err(format!("tcp_pingpong has no {other}")),
    };
    let mut current = Table::None;
    let mut seen = false;
    let mut rows = Vec::new();
    for line in stdout.lines().map(str::trim) {
        if let Some(comment) = line.strip_prefix('#') {
            let comment = comment.trim();
            if comment.starts_with("Size") {
                continue;
            }
            current = if comment.contains("busy-poll") {
                Table::BusyPoll
            } else if comment.contains("blocking") {
                Table::Blocking
            } else if comment.contains("bandwidth") {
                Table::Bandwidth
            } else {
                Table::None
            };
            seen |= current == want;
            continue;
        }
        if current != want {
            continue;
        }
        rows.extend(parse_table(line));
    }
    if !seen {
        return Err(match want {
            Table::BusyPoll => "no busy-poll latency table in tcp_pingpong's output".into(),
            _ => "no bandwidth table in tcp_pingpong's output".into(),
        });
    }
    Ok(rows)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Tables in the shape `mpi_p2p` prints (the values are from earlier runs
    /// of both stacks on the project machine).
    const OMPI_LAT: &str = "\
# Library: Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022
# ranks: 2
# MPI ping-pong latency (half round trip), blocking Send/Recv
# Size         Latency (us)
0                     0.226
1                     0.277
2                     0.269
4                     0.268
8                     0.266
16                    0.303
32                    0.300
64                    0.330
";
    const MPICH_MR: &str = "\
# Library: MPICH Version:\t4.0.2
# ranks: 2
# MPI message rate, 8-byte messages, window 64
# Size             Messages/s             MB/s
8                     3844028            30.75
";
    const MPICH_BW: &str = "\
# Library: MPICH Version:\t4.0.2
# ranks: 2
# MPI uni-directional bandwidth, window 64 Isend + 4-byte ack
# Size       Bandwidth (MB/s)
1                        4.05
2                        8.01
4096                  3378.66
";

    #[test]
    fn reads_mpi_p2p_tables() {
        let lat = parse_table(OMPI_LAT);
        assert_eq!(lat.len(), 8);
        assert_eq!(lat[0], (0, 0.226));
        assert_eq!(lat[7], (64, 0.330));
        assert_eq!(parse_table(MPICH_MR), vec![(8, 3844028.0)]);
        assert_eq!(
            parse_table(MPICH_BW),
            vec![(1, 4.05), (2, 8.01), (4096, 3378.66)]
        );
        let noisy = format!("[0] some launcher warning\n{MPICH_MR}  \nnan row\n16 nan\n");
        assert_eq!(parse_table(&noisy), vec![(8, 3844028.0)]);
        assert!(parse_table("").is_empty());
    }

    #[test]
    fn mpi_command_lines() {
        let hydra = Path::new("mpiexec.hydra");
        let bin = Path::new("target/peers/mpi_p2p.mpich");
        assert_eq!(
            Mpi::Mpich
                .pingpong(hydra, bin, "lat", 4096, Transport::Shm)
                .to_string(),
            "MAXSIZE=4096 mpiexec.hydra -n 2 -bind-to core target/peers/mpi_p2p.mpich lat"
        );
        let ompi = Mpi::OpenMpi
            .pingpong(
                Path::new("mpirun.openmpi"),
                Path::new("pp"),
                "bw",
                8,
                Transport::Shm,
            )
            .to_string();
        assert_eq!(
            ompi,
            "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PMIX_MCA_psec=native MAXSIZE=8 mpirun.openmpi \
             --allow-run-as-root --oversubscribe -n 2 --bind-to core --mca pml ob1 --mca btl self,vader \
             -x MAXSIZE pp bw"
        );
        assert_eq!(
            Mpi::Mpich.launch(hydra, 2, false).arg("hello").to_string(),
            "mpiexec.hydra -n 2 hello"
        );
        assert_eq!(
            Mpi::OpenMpi
                .startup(Path::new("mpirun.openmpi"), 8, Transport::Shm)
                .to_string(),
            "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PMIX_MCA_psec=native mpirun.openmpi \
             --allow-run-as-root --oversubscribe -n 8"
        );
        assert_eq!(pingpong_bench("latency"), Some("lat"));
        assert_eq!(pingpong_bench("bibw"), None);
    }

    #[test]
    fn tcp_mpi_command_lines() {
        let hydra = Path::new("mpiexec.hydra");
        let bin = Path::new("target/peers/mpi_p2p.mpich");
        assert_eq!(
            Mpi::Mpich
                .pingpong(hydra, bin, "bw", 4194304, Transport::Tcp)
                .to_string(),
            "UCX_TLS=tcp,self MAXSIZE=4194304 mpiexec.hydra -n 2 -bind-to core \
             target/peers/mpi_p2p.mpich bw"
        );
        let ompirun = Path::new("mpirun.openmpi");
        assert_eq!(
            Mpi::OpenMpi
                .pingpong(ompirun, Path::new("pp"), "lat", 64, Transport::Tcp)
                .to_string(),
            "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PMIX_MCA_psec=native MAXSIZE=64 mpirun.openmpi \
             --allow-run-as-root --oversubscribe -n 2 --bind-to core --mca pml ob1 --mca btl self,tcp \
             -x MAXSIZE pp lat"
        );
        assert_eq!(
            Mpi::Mpich
                .startup(hydra, 2, Transport::Tcp)
                .arg("hello")
                .to_string(),
            "UCX_TLS=tcp,self mpiexec.hydra -n 2 hello"
        );
        assert_eq!(
            Mpi::OpenMpi
                .startup(ompirun, 2, Transport::Tcp)
                .arg("hello")
                .to_string(),
            "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PMIX_MCA_psec=native mpirun.openmpi \
             --allow-run-as-root --oversubscribe -n 2 --mca pml ob1 --mca btl self,tcp hello"
        );
    }

    /// Captured from `tcp_pingpong lat -i 200` and `tcp_pingpong bw -i 64`
    /// (built with `cc -O2` from benches/peers) on the project machine, while
    /// it was busy.
    pub(crate) const RAW_TCP_LAT: &str = "\
# raw TCP loopback, busy-poll recv, ping-pong latency (half round trip)
# Size  Latency (us)
1 3.515
8 4.054
64 3.670
512 4.192
1024 3.755
4096 5.042
16384 7.276
65536 17.783
";
    const RAW_TCP_BW: &str = "\
# raw TCP loopback, one stream, bandwidth
# Size  Bandwidth (MB/s)
65536 5671.72
262144 8138.95
1048576 6588.29
4194304 4416.10
";

    #[test]
    fn reads_tcp_pingpong_output() {
        let lat = parse_raw_tcp(RAW_TCP_LAT, "latency").unwrap();
        assert_eq!(lat[0], (1, 3.515));
        assert_eq!(lat[7], (65536, 17.783));
        let sizes: Vec<u64> = lat.iter().map(|r| r.0).collect();
        assert_eq!(sizes, RAW_TCP_LAT_SIZES);
        let bw = parse_raw_tcp(RAW_TCP_BW, "bw").unwrap();
        assert_eq!(
            bw,
            vec![
                (65536, 5671.72),
                (262144, 8138.95),
                (1048576, 6588.29),
                (4194304, 4416.10)
            ]
        );
        let sizes: Vec<u64> = bw.iter().map(|r| r.0).collect();
        assert_eq!(sizes, RAW_TCP_BW_SIZES);
        // Both in one output: each bench takes its own table.
        let all = format!("{RAW_TCP_LAT}{RAW_TCP_BW}");
        assert_eq!(parse_raw_tcp(&all, "latency").unwrap(), lat);
        assert_eq!(parse_raw_tcp(&all, "bw").unwrap(), bw);
        // The wrong program's output, or a run cut short before its table.
        assert!(parse_raw_tcp(RAW_TCP_BW, "latency").is_err());
        assert!(parse_raw_tcp(RAW_TCP_LAT, "bw").is_err());
        // A blocking-recv table is not the reference.
        let blocking = RAW_TCP_LAT.replace("busy-poll", "blocking");
        assert!(parse_raw_tcp(&blocking, "latency")
            .unwrap_err()
            .contains("busy-poll"));
        assert!(parse_raw_tcp(RAW_TCP_LAT, "mr").is_err());
        assert_eq!(
            raw_tcp_bench("latency"),
            Some(("lat", &RAW_TCP_LAT_SIZES[..]))
        );
        assert_eq!(raw_tcp_bench("bw").map(|b| b.0), Some("bw"));
        assert_eq!(raw_tcp_bench("mr"), None);
    }
}
