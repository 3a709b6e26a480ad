//! The `rivetrun` command line: mpiexec-style options parsed with clap.
//!
//! mpiexec users type single-dash long options (`-np 4`, `-genv K V`,
//! `-wdir /tmp`). clap only knows `--long`, so `normalize` rewrites those
//! spellings before clap sees them, and only up to the program name: the
//! program's own arguments are never touched.
//!
//! Here the clap definition; the rewriting in `normalize.rs`, the value
//! parsers in `values.rs`.

mod normalize;
#[cfg(test)]
mod tests;
mod values;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser};

use crate::topology::{BindTo, MapBy};

use normalize::{exit_on, normalize};
use values::{
    parse_auth, parse_bind_to, parse_cluster_id, parse_impi_size, parse_kill_grace, parse_launcher,
    parse_map_by, parse_nameserver, parse_timeout,
};
pub use values::{AuthPreference, MAX_KILL_GRACE};

#[derive(Debug, Parser)]
#[command(
    name = "rivetrun",
    version,
    about = "Start the ranks of a parallel job, serve them PMI-1 and PMI-2 (and PMIx), forward their output and signals.",
    long_about = "Start N copies of PROGRAM on this node, each with PMI_FD (or PMI_PORT/PMI_ID), \
PMI_RANK and PMI_SIZE set, and serve the PMI-1 wire protocol to them, or PMI-2 to a rank that \
asks for it (cmd=init pmi_version=2; Rivet ranks with RIVET_PMI=pmi2). Unmodified MPICH programs \
and Rivet programs run under it. Where OpenPMIx (libpmix.so.2) is installed, rivetrun also \
serves PMIx (OpenPMIx's server: the PMIX_* variables in each rank's environment, plus \
FLUX_JOB_ID, which Open MPI 4.1 needs to use it), so unmodified Open MPI programs run too; \
--info says whether it is available. A job whose programs all link MPICH (without PMIx) and \
whose ranks are not told RIVET_PMI=pmix gets no PMIx server: they speak PMI-1/PMI-2 only.\n\n\
Output of every rank is forwarded line by line; stdin goes to rank 0; SIGINT and SIGTERM are \
forwarded to the ranks. If a rank exits with a non-zero code, dies from a signal or calls abort, \
the other ranks are terminated (SIGTERM, then SIGKILL after a grace period) and rivetrun exits \
non-zero naming the rank and the cause (with --disable-auto-cleanup the others keep running). \
The exit code is 0 only when every rank exited 0.\n\n\
Ranks may spawn processes (PMI spawn, MPI_Comm_spawn): rivetrun starts them on this machine, \
unbound, each in a new namespace (kvsname <job>_s<N>) with PMI_SPAWNED=1 and PMI_FD, and \
supervises them like ranks: their output is forwarded (labelled [sN:I] with -l) and a failing \
one fails the job. Info keys: wdir, path (where to look for the program), host (this machine \
only); others are ignored with a warning. A spawn starts all its processes or none. With \
-hosts, every child starts on the spawning rank's host (kvsname <job>_h<N>_s<M>, served by that \
host's proxy); names and group connect are served job-wide by rivetrun.\n\n\
Names (MPI_Publish_name/MPI_Lookup_name) are served by rivetrun for its own job, or by a name \
server shared by several jobs: start one with `rivetrun --name-server` (it prints HOST:PORT) and \
give that to each job with --nameserver HOST:PORT or RIVET_NAMESERVER=HOST:PORT.\n\n\
Group connect (a Rivet extension of PMI-1 after PMIx RFC0003, used by the Rivet engine; \
MPICH does not send it) is served among the processes of this rivetrun: the ranks and the \
processes they spawned; with --nameserver also with the processes of other rivetrun jobs that \
use the same name server (its group hub matches the joins). Each connect names its processes (ns:rank or ns:*), waits for all of \
them, and hands every member the others' cards, a new rank and a group id. A process that ends \
before joining fails the connect unless it is optional; a member that ends still connected to a \
group made without early_term fails the job like a failed rank. Names qualified with a cluster \
id are accepted for this rivetrun's own cluster (--cluster-id, published to every process as \
PMI_rivet_cluster), and, through the name server, for the cluster ids of the other jobs.\n\n\
mpiexec spellings are accepted: any long option with one dash (-np, -env, -genv, -genvlist, \
-genvnone, -genvall, -wdir, -ppn, -pmi-port, -disable-auto-cleanup, -nameserver, -timeout, \
-outfile-pattern, -errfile-pattern, -configfile, -version), -prepend-rank for -l, \
MPIEXEC_TIMEOUT, and MPMD: PROG1 ARGS : -n 2 PROG2 ARGS. A single-dash word is never read as a cluster of short options: an \
unknown one is an error (exit 2) naming it.",
    after_help = "Exit codes: 0 all ranks (and spawned processes) succeeded; the failing \
process's exit code when it exited non-zero; 128+N when it died from signal N; the abort code \
when a process called abort; 126/127 when PROGRAM cannot be executed / is not found; 2 for \
usage errors; 255 when the job timed out (--timeout, MPIEXEC_TIMEOUT). --name-server exits 0 on \
SIGINT/SIGTERM.\n\n\
Examples: rivetrun -n 2 -l ./a.out\n          \
rivetrun --name-server --port 7000 &   rivetrun --nameserver $(hostname):7000 -n 2 ./server"
)]
pub struct Cli {
    /// Number of ranks to start.
    #[arg(short = 'n', long = "np", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub nprocs: u32,

    /// Set variable K to V for the ranks of the first section (MPMD: a later section's -env is its own).
    #[arg(long = "env", num_args = 2, value_names = ["K", "V"], action = clap::ArgAction::Append)]
    pub env: Vec<String>,

    /// Set variable K to V for every rank.
    #[arg(long = "genv", num_args = 2, value_names = ["K", "V"], action = clap::ArgAction::Append)]
    pub genv: Vec<String>,

    /// Comma-separated names of variables passed from rivetrun's environment (useful with -genvnone).
    #[arg(long = "genvlist", value_name = "A,B,...", value_delimiter = ',', action = clap::ArgAction::Append)]
    pub genvlist: Vec<String>,

    /// Do not pass rivetrun's environment to the ranks (only -genvlist, -env/-genv and PMI variables).
    #[arg(long = "genvnone")]
    pub genvnone: bool,

    /// Pass rivetrun's whole environment to the ranks (the default).
    #[arg(long = "genvall", conflicts_with = "genvnone")]
    pub genvall: bool,

    /// Working directory of the ranks (default: rivetrun's).
    #[arg(long = "wdir", value_name = "DIR")]
    pub wdir: Option<PathBuf>,

    /// Prefix every output line with "[RANK] " (Hydra: -prepend-rank).
    #[arg(short = 'l', long = "label", visible_alias = "prepend-rank")]
    pub label: bool,

    /// Give ranks PMI_PORT + PMI_ID (a TCP connection back to rivetrun, or on
    /// -hosts to their host's proxy) instead of an inherited PMI_FD.
    #[arg(long = "pmi-port")]
    pub pmi_port: bool,

    /// When a rank fails, report it but let the other ranks run on (they see
    /// the failure through Rivet's error reporting); rivetrun still exits
    /// non-zero naming the first failed rank. Hydra's option of the same name.
    #[arg(long = "disable-auto-cleanup")]
    pub disable_auto_cleanup: bool,

    /// Seconds between SIGTERM and SIGKILL when the job is torn down.
    #[arg(long = "kill-grace", value_name = "SECS", default_value_t = 3.0, value_parser = parse_kill_grace)]
    pub kill_grace: f64,

    /// Tear the job down if it still runs after SECS seconds: the ranks get SIGTERM (then
    /// SIGKILL after --kill-grace) and rivetrun exits 255, as mpiexec.hydra does; 0: no limit
    /// [default: $MPIEXEC_TIMEOUT, Hydra's variable; unset: no limit]
    #[arg(long = "timeout", value_name = "SECS", value_parser = parse_timeout)]
    pub timeout: Option<f64>,

    /// Write each process's stdout to the file this pattern names instead of rivetrun's stdout:
    /// %r rank, %g process group (0; N for spawn N), %p proxy (0), %h host, %t seconds from
    /// rivetrun's start, %% a %. Files are created (emptied) once and shared by ranks that name
    /// the same one, line by line. Hydra's option of the same name.
    #[arg(long = "outfile-pattern", value_name = "PATTERN")]
    pub outfile_pattern: Option<crate::outfiles::Pattern>,

    /// As --outfile-pattern, for stderr.
    #[arg(long = "errfile-pattern", value_name = "PATTERN")]
    pub errfile_pattern: Option<crate::outfiles::Pattern>,

    /// Place ranks round-robin over objects of this kind: core, hwthread, l3cache, numa, socket, node.
    #[arg(long = "map-by", value_name = "POLICY", default_value = "core", value_parser = parse_map_by)]
    pub map_by: MapBy,

    /// Bind each rank to an object of this kind: core, hwthread, l3cache, numa, socket, none
    /// [default: core, or none when there are more ranks than cores]. Ranks are placed only on
    /// the CPUs of rivetrun's own affinity mask (`taskset -c 2-3 rivetrun ...`).
    #[arg(long = "bind-to", value_name = "POLICY", value_parser = parse_bind_to)]
    pub bind_to: Option<BindTo>,

    /// Ranks per node: per host with -hosts/-hostfile (instead of each host's slots);
    /// without them, more than one node is only possible with --topology (simulated nodes).
    #[arg(long = "ppn", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub ppn: Option<u32>,

    /// Explicit CPU sets, one per rank, separated by ':' (e.g. "0-1:2-3"), or one set for all ranks.
    #[arg(long = "cpu-list", value_name = "SETS")]
    pub cpu_list: Option<String>,

    /// Plan for another machine: an hwloc XML file or a synthetic description such as
    /// "pack:2 numa:2 core:8 pu:2". Ranks still run here, unbound, and are told the simulated placement.
    #[arg(long = "topology", value_name = "FILE|SYNTHETIC")]
    pub topology: Option<String>,

    /// Print one line per rank to stderr before starting: rank, host, CPU set, object bound to.
    #[arg(long = "report-bindings")]
    pub report_bindings: bool,

    /// Publish a mesh topology with these dimensions (e.g. 2x4) instead of a cluster one.
    #[arg(long = "mesh-dims", value_name = "AxB...", value_delimiter = 'x', value_parser = clap::value_parser!(u32).range(1..))]
    pub mesh_dims: Option<Vec<u32>>,

    /// Print the topology and the transports this machine offers (io_uring, CMA, libfabric), then exit.
    #[arg(long = "info")]
    pub info: bool,

    /// With --info: also list every RIVET_* setting (value in force, where it came from,
    /// default, what it does) and any RIVET_* variable that is not one.
    #[arg(long = "all", requires = "info")]
    pub all: bool,

    /// Send the job's publish/lookup/unpublish name requests to this name server (what
    /// `rivetrun --name-server` prints), so separately started jobs find each other's ports
    /// [default: $RIVET_NAMESERVER; unset: rivetrun serves names to its own job]
    #[arg(long = "nameserver", value_name = "HOST:PORT", value_parser = parse_nameserver)]
    pub nameserver: Option<String>,

    /// Run a name server instead of a job: listen on TCP (all IPv4 interfaces), print
    /// HOST:PORT on stdout, answer publish/lookup/unpublish until SIGINT or SIGTERM (exit 0).
    #[arg(long = "name-server", conflicts_with_all = ["command", "nameserver", "info"])]
    pub name_server: bool,

    /// This job's cluster id for group connect: process names qualified with it are this
    /// job's; told to every process as the job attribute PMI_rivet_cluster [default: this
    /// host's name]
    #[arg(long = "cluster-id", value_name = "NAME", value_parser = parse_cluster_id)]
    pub cluster_id: Option<String>,

    /// TCP port for --name-server or --impi-server [default: any free port].
    #[arg(long = "port", value_name = "PORT", conflicts_with_all = ["command", "nameserver", "info"])]
    pub port: Option<u16>,

    /// Run on these hosts (`a,b:2,c`: `host[:slots]`, slots default 1); ranks go
    /// block-wise, as many to each host as its slots (or -ppn), round and round.
    /// One proxy per host starts that host's ranks (see --launcher).
    #[arg(
        long = "hosts",
        visible_alias = "host",
        value_name = "H[:SLOTS],...",
        conflicts_with = "hostfile"
    )]
    pub hosts: Option<String>,

    /// Read the hosts from FILE: one `host[:slots]` per line, `#` comments.
    #[arg(
        short = 'f',
        long = "hostfile",
        visible_alias = "machinefile",
        value_name = "FILE"
    )]
    pub hostfile: Option<PathBuf>,

    /// How proxies are started on the hosts: ssh (the default, with
    /// BatchMode=yes and ConnectTimeout=10, so hosts need keys; words in
    /// RIVET_LAUNCHER_EXTRA_ARGS go before them; hosts that are this machine
    /// are forked), rsh, fork (all here), manual (print the command lines to
    /// run by hand), slurm (one srun for all proxies).
    #[arg(long = "launcher", visible_alias = "bootstrap", value_name = "NAME",
          value_parser = parse_launcher)]
    pub launcher: Option<crate::remote::start::Kind>,

    /// Start proxies with `PROG HOST COMMAND` where ssh would be run (the
    /// command as one shell-quoted word, as ssh gets it).
    #[arg(
        long = "launcher-exec",
        visible_alias = "bootstrap-exec",
        value_name = "PROG"
    )]
    pub launcher_exec: Option<String>,

    /// The interface whose IPv4 address proxies and ranks (RIVET_TCP_IFACE)
    /// use to reach rivetrun and each other [default: the one the route to
    /// the first remote host leaves by].
    #[arg(long = "iface", value_name = "NAME")]
    pub iface: Option<String>,

    /// With -hosts: print at the end how many messages rivetrun handled
    /// (barriers cost one per host, not one per rank).
    #[arg(long = "launch-stats")]
    pub launch_stats: bool,

    /// Run as the per-node proxy of a multi-host job (started by rivetrun).
    #[arg(long = "proxy", value_name = "HOST:PORT", hide = true,
          conflicts_with_all = ["command", "info", "name_server"])]
    pub proxy: Option<String>,

    /// The proxy's node index (with --proxy).
    #[arg(long = "proxy-id", value_name = "N", hide = true, requires = "proxy")]
    pub proxy_id: Option<u32>,

    /// Hydra's MPMD config file: one section per line (`-n 2 ./a ARGS`, `#` comments), the
    /// sections joined as with ':'; instead of a PROGRAM.
    #[arg(long = "configfile", value_name = "FILE", conflicts_with_all = ["info", "name_server"])]
    pub configfile: Option<PathBuf>,

    /// Run an IMPI rendezvous server for N clients (seed 003) instead of a job: print
    /// IP:PORT on stdout, authenticate clients (IMPI_AUTH_KEY, IMPI_AUTH_NONE), relay their
    /// startup data, exit 0 once every client sent FINI (non-zero if one vanishes first).
    #[arg(long = "impi-server", value_name = "N", value_parser = parse_impi_size,
          conflicts_with_all = ["command", "nameserver", "info", "name_server", "impi_client"])]
    pub impi_server: Option<u32>,

    /// With --impi-server: authentication methods in order of preference, as numbers or
    /// ranges (1 = IMPI_AUTH_KEY, 0 = IMPI_AUTH_NONE; e.g. 1-0) [default: key, then none].
    #[arg(long = "auth", value_name = "LIST", value_parser = parse_auth, requires = "impi_server",
          conflicts_with_all = ["command", "info", "name_server"])]
    pub auth: Option<AuthPreference>,

    /// Run this job as client RANK of the IMPI job whose server (`rivetrun --impi-server`)
    /// listens at HOST:PORT: authenticate, exchange the startup data, run the ranks, then
    /// tell the server FINI.
    #[arg(long = "impi-client", num_args = 2, value_names = ["RANK", "HOST:PORT"],
          conflicts_with_all = ["info", "name_server"])]
    pub impi_client: Option<Vec<String>>,

    /// The program to run, and its arguments; `PROG1 ARGS : [-n N] [-env K V] [-wdir DIR] PROG2
    /// ARGS : ...` runs several programs in one job (MPMD: ranks numbered on over the sections,
    /// each section its own appnum).
    #[arg(value_name = "PROGRAM",
          required_unless_present_any = ["info", "name_server", "proxy", "configfile", "impi_server"],
          trailing_var_arg = true, num_args = 1..)]
    pub command: Vec<OsString>,
}

impl Cli {
    /// Parse the process's arguments, mpiexec spellings included.
    pub fn from_args() -> Cli {
        let original: Vec<OsString> = std::env::args_os().collect();
        let args = normalize(original.iter().cloned());
        // The long version probes libraries: only when it is asked for.
        let mut command = Cli::command();
        if args.iter().any(|a| a == "--version") {
            // Printed once, then the process exits: leaking it is free.
            command = command.long_version(&*Box::leak(crate::version::long().into_boxed_str()));
        }
        let matches = command
            .try_get_matches_from(&args)
            .unwrap_or_else(|e| exit_on(e, &original));
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| exit_on(e, &original))
    }

    /// Variables set with -genv (every section's).
    pub fn global_assignments(&self) -> Vec<(String, String)> {
        self.genv
            .chunks(2)
            .map(|kv| (kv[0].clone(), kv[1].clone()))
            .collect()
    }

    /// The job's MPMD sections (`mpmd.rs`): the first from -n, -env, -wdir
    /// and PROGRAM, more after each `:`; or those of -configfile.
    pub fn sections(&self) -> Result<Vec<crate::mpmd::Section>, String> {
        use crate::mpmd;
        if let Some(file) = &self.configfile {
            if !self.command.is_empty() {
                return Err("give either -configfile or a PROGRAM, not both".into());
            }
            return mpmd::read_configfile(file);
        }
        let first_len = self
            .command
            .iter()
            .position(|a| a == ":")
            .unwrap_or(self.command.len());
        let first = mpmd::Section {
            nprocs: self.nprocs,
            env: self
                .env
                .chunks(2)
                .map(|kv| (kv[0].clone(), kv[1].clone()))
                .collect(),
            wdir: self.wdir.clone(),
            command: self.command[..first_len].to_vec(),
        };
        if first.command.is_empty() {
            return Err("no PROGRAM before the first ':'".into());
        }
        let mut sections = vec![first];
        sections.extend(mpmd::later_sections(&self.command[first_len..])?);
        Ok(sections)
    }
}

/// The job's time limit: `--timeout`, else `MPIEXEC_TIMEOUT`; `None` when
/// neither sets one (or it is 0).
pub fn time_limit(cli: &Cli) -> Result<Option<std::time::Duration>, crate::error::LaunchError> {
    let secs = match cli.timeout {
        Some(secs) => secs,
        None => match std::env::var("MPIEXEC_TIMEOUT") {
            Ok(v) if !v.trim().is_empty() => parse_timeout(&v)
                .map_err(|e| crate::error::LaunchError::Usage(format!("MPIEXEC_TIMEOUT: {e}")))?,
            _ => 0.0,
        },
    };
    Ok((secs > 0.0).then(|| std::time::Duration::from_secs_f64(secs)))
}
