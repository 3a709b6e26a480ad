//! The MPI stacks Rivet is compared with: building the anchors' C programs
//! (`mpi_pingpong.c`, `hello_mpi.c`) with each stack's compiler, their
//! command lines (those of the anchors' `run_all.sh`), and reading
//! `mpi_pingpong`'s tables.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::{find_program, version_ok, CmdSpec};

/// Where the anchors' C sources are unless `--anchors` says otherwise.
pub const DEFAULT_ANCHORS: &str = "/work/shared/anchors";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mpi {
    Mpich,
    OpenMpi,
}

impl Mpi {
    pub fn name(self) -> &'static str {
        match self {
            Mpi::Mpich => "mpich",
            Mpi::OpenMpi => "openmpi",
        }
    }

    /// The launch command for `n` ranks (before the program), each rank bound
    /// to a core if `bind` (the anchors' point-to-point runs), else with the
    /// launcher's default binding (the anchors' startup runs).
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
            Mpi::OpenMpi => {
                let spec = spec
                    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
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

    /// `mpi_pingpong <lat|bw|mr>` on 2 ranks with messages up to `max_size`.
    pub fn pingpong(self, launcher: &Path, binary: &Path, bench: &str, max_size: usize) -> CmdSpec {
        let max = max_size.to_string();
        let spec = self.launch(launcher, 2, true).env("MAXSIZE", &max);
        let spec = match self {
            Mpi::Mpich => spec,
            // The anchors' shm column: ob1 + vader (Debian's default, made explicit).
            Mpi::OpenMpi => spec.args([
                "--mca",
                "pml",
                "ob1",
                "--mca",
                "btl",
                "self,vader",
                "-x",
                "MAXSIZE",
            ]),
        };
        spec.arg(binary).arg(bench)
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
    anchors: &Path,
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
        let src = anchors.join(source);
        let out = build_dir.join(format!("{stem}.{}", mpi.name()));
        compile(&cc, &src, &out)?;
        Ok(out)
    };
    let pingpong = if want_pingpong {
        Some(build("mpi_pingpong.c", "mpi_pingpong")?)
    } else {
        None
    };
    let hello = if want_hello {
        Some(build("hello_mpi.c", "hello")?)
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

/// `cc -O2 src -o out`, unless `out` is newer than `src`.
fn compile(cc: &Path, src: &Path, out: &Path) -> Result<(), String> {
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

/// The rows of `mpi_pingpong`'s table: lines "SIZE VALUE [MORE]" (comment
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

/// mpi_pingpong's name for a benchmark of this suite (it has no bibw).
pub fn pingpong_bench(bench: &str) -> Option<&'static str> {
    match bench {
        "latency" => Some("lat"),
        "bw" => Some("bw"),
        "mr" => Some("mr"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from `MAXSIZE=64 mpirun.openmpi ... mpi_pingpong.openmpi lat`
    /// and `mpiexec.hydra -n 2 -bind-to core mpi_pingpong.mpich mr` on the
    /// project machine.
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
    fn reads_mpi_pingpong_tables() {
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
    fn command_lines_match_run_all_sh() {
        let hydra = Path::new("mpiexec.hydra");
        let bin = Path::new("target/peers/mpi_pingpong.mpich");
        assert_eq!(
            Mpi::Mpich.pingpong(hydra, bin, "lat", 4096).to_string(),
            "MAXSIZE=4096 mpiexec.hydra -n 2 -bind-to core target/peers/mpi_pingpong.mpich lat"
        );
        let ompi = Mpi::OpenMpi
            .pingpong(Path::new("mpirun.openmpi"), Path::new("pp"), "bw", 8)
            .to_string();
        assert_eq!(
            ompi,
            "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MAXSIZE=8 mpirun.openmpi \
             --allow-run-as-root --oversubscribe -n 2 --bind-to core --mca pml ob1 --mca btl self,vader \
             -x MAXSIZE pp bw"
        );
        assert_eq!(
            Mpi::Mpich.launch(hydra, 2, false).arg("hello").to_string(),
            "mpiexec.hydra -n 2 hello"
        );
        assert_eq!(pingpong_bench("latency"), Some("lat"));
        assert_eq!(pingpong_bench("bibw"), None);
    }
}
