//! The `rivetrun` command line: mpiexec-style options parsed with clap.
//!
//! mpiexec users type single-dash long options (`-np 4`, `-genv K V`,
//! `-wdir /tmp`). clap only knows `--long`, so `normalize` rewrites those
//! spellings before clap sees them, and only up to the program name: the
//! program's own arguments are never touched.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser};

use crate::topology::{BindTo, MapBy};

fn parse_map_by(s: &str) -> Result<MapBy, String> {
    s.parse()
        .map_err(|e: crate::topology::TopologyError| e.to_string())
}

fn parse_bind_to(s: &str) -> Result<BindTo, String> {
    s.parse()
        .map_err(|e: crate::topology::TopologyError| e.to_string())
}

/// The longest `--kill-grace`, in seconds.
pub const MAX_KILL_GRACE: f64 = 3600.0;

/// `--kill-grace`: a number of seconds from 0 to an hour; nan, infinities
/// and negative values are refused (they cannot be a wait).
fn parse_kill_grace(s: &str) -> Result<f64, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !secs.is_finite() || !(0.0..=MAX_KILL_GRACE).contains(&secs) {
        return Err(format!(
            "{s} is not a number of seconds from 0 to {MAX_KILL_GRACE}"
        ));
    }
    Ok(secs)
}

/// Options mpiexec spells with one dash that clap wants with two.
const SINGLE_DASH_LONG: &[&str] = &[
    "np",
    "env",
    "genv",
    "genvlist",
    "genvnone",
    "genvall",
    "wdir",
    "ppn",
    "bind-to",
    "map-by",
    "info",
    "nameserver",
    "port",
    "hosts",
    "host",
    "hostfile",
    "machinefile",
    "launcher",
    "launcher-exec",
    "bootstrap",
    "bootstrap-exec",
    "iface",
    "auth",
    "impi-server",
    "impi-client",
];

/// Options that take values, so `normalize` can find where the program starts.
const TAKES_TWO_VALUES: &[&str] = &["--env", "--genv", "--impi-client"];
const TAKES_ONE_VALUE: &[&str] = &[
    "-n",
    "--np",
    "--genvlist",
    "--wdir",
    "--ppn",
    "--bind-to",
    "--map-by",
    "--cpu-list",
    "--topology",
    "--mesh-dims",
    "--kill-grace",
    "--timeout",
    "--configfile",
    "--outfile-pattern",
    "--errfile-pattern",
    "--nameserver",
    "--port",
    "--cluster-id",
    "--hosts",
    "--host",
    "-f",
    "--hostfile",
    "--machinefile",
    "--launcher",
    "--launcher-exec",
    "--bootstrap",
    "--bootstrap-exec",
    "--iface",
    "--proxy",
    "--proxy-id",
    "--auth",
    "--impi-server",
];

/// The longest `--timeout`: a year, in seconds.
pub const MAX_TIMEOUT: f64 = 366.0 * 24.0 * 3600.0;

/// `--timeout` / `MPIEXEC_TIMEOUT`: seconds from 0 (no limit) to a year.
fn parse_timeout(s: &str) -> Result<f64, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !secs.is_finite() || !(0.0..=MAX_TIMEOUT).contains(&secs) {
        return Err(format!(
            "{s} is not a number of seconds from 0 (no limit) to {MAX_TIMEOUT}"
        ));
    }
    Ok(secs)
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

fn parse_nameserver(s: &str) -> Result<String, String> {
    crate::nameserver::check_addr(s)
}

fn parse_launcher(s: &str) -> Result<crate::remote::start::Kind, String> {
    s.parse()
}

/// `--auth`'s list of IMPI authentication methods, most preferred first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthPreference(pub Vec<u32>);

fn parse_auth(s: &str) -> Result<AuthPreference, String> {
    rivet_pmi::impi::auth::parse_preference(s).map(AuthPreference)
}

fn parse_impi_size(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of clients"))?;
    let most = rivet_pmi::impi::MAX_CLIENTS;
    if n == 0 || n > most {
        return Err(format!("an IMPI job has 1 to {most} clients, not {n}"));
    }
    Ok(n)
}

fn parse_cluster_id(s: &str) -> Result<String, String> {
    rivet_pmi::group::check_cluster_name(s)
        .map(|()| s.to_string())
        .map_err(|e| e.to_string())
}

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
--info says whether it is available.\n\n\
Output of every rank is forwarded line by line; stdin goes to rank 0; SIGINT and SIGTERM are \
forwarded to the ranks. If a rank exits with a non-zero code, dies from a signal or calls abort, \
the other ranks are terminated (SIGTERM, then SIGKILL after a grace period) and rivetrun exits \
non-zero naming the rank and the cause (with --disable-auto-cleanup the others keep running). \
The exit code is 0 only when every rank exited 0.\n\n\
Ranks may spawn processes (PMI spawn, MPI_Comm_spawn): rivetrun starts them on this machine, \
unbound, each in a new namespace (kvsname <job>_s<N>) with PMI_SPAWNED=1 and PMI_FD, and \
supervises them like ranks: their output is forwarded (labelled [sN:I] with -l) and a failing \
one fails the job. Info keys: wdir, path (where to look for the program), host (this machine \
only); others are ignored with a warning. A spawn starts all its processes or none.\n\n\
Names (MPI_Publish_name/MPI_Lookup_name) are served by rivetrun for its own job, or by a name \
server shared by several jobs: start one with `rivetrun --name-server` (it prints HOST:PORT) and \
give that to each job with --nameserver HOST:PORT or RIVET_NAMESERVER=HOST:PORT.\n\n\
Group connect (a Rivet extension of PMI-1 after PMIx RFC0003, used by the Rivet engine; \
MPICH does not send it) is served among the processes of this rivetrun: the ranks and the \
processes they spawned. Each connect names its processes (ns:rank or ns:*), waits for all of \
them, and hands every member the others' cards, a new rank and a group id. A process that ends \
before joining fails the connect unless it is optional; a member that ends still connected to a \
group made without early_term fails the job like a failed rank. Names qualified with a cluster \
id are accepted for this rivetrun's own cluster (--cluster-id, published to every process as \
PMI_rivet_cluster); processes of other clusters or other rivetrun jobs cannot be connected.\n\n\
mpiexec spellings are accepted: any long option with one dash (-np, -env, -genv, -genvlist, \
-genvnone, -genvall, -wdir, -ppn, -pmi-port, -disable-auto-cleanup, -nameserver, -timeout, \
-outfile-pattern, -errfile-pattern, -configfile, -version), -prepend-rank for -l, \
MPIEXEC_TIMEOUT, and MPMD: PROG1 ARGS : -n 2 PROG2 ARGS. A single-dash word is never read as a cluster of short options: an \
unknown one is an error (exit 2) naming it. Options that start ranks on other hosts (-hosts, \
-host, -f, -hostfile, -machinefile, -launcher, -launcher-exec, -iface) are refused (exit 2).",
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

    /// Give ranks PMI_PORT + PMI_ID (a TCP connection back to rivetrun) instead of an inherited PMI_FD.
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
    /// [default: core, or none when there are more ranks than cores]
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

    /// How proxies are started on the hosts: ssh (the default; hosts that are
    /// this machine are forked), rsh, fork (all here), manual (print the
    /// command lines to run by hand), slurm (not implemented yet).
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

/// Leave on a clap error (help and version too, exit 0). An unknown option
/// exits 2 naming it as it was typed: `-bogus`, not the `--bogus` that
/// `normalize` made of it.
fn exit_on(e: clap::Error, original: &[OsString]) -> ! {
    if let Some(name) = unknown_option(&e, original) {
        eprintln!("rivetrun: unknown option '{name}' (see rivetrun --help)");
        std::process::exit(2);
    }
    e.exit()
}

/// The unknown option clap complains of, spelled as the user typed it.
fn unknown_option(e: &clap::Error, original: &[OsString]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let name = arg.split('=').next().unwrap_or(arg);
    let single = name.strip_prefix('-').filter(|s| s.starts_with('-'));
    let typed = single.filter(|s| {
        original
            .iter()
            .any(|o| o.to_string_lossy().split('=').next() == Some(*s))
    });
    Some(typed.unwrap_or(name).to_string())
}

/// Rewrite mpiexec's single-dash long options (`-np`, `-genv`, ...) as `--np`,
/// `--genv`, up to the first argument that is the program, and put `--` in
/// front of the program so that nothing after it is taken as rivetrun's.
pub fn normalize<I: IntoIterator<Item = OsString>>(args: I) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut iter = args.into_iter();
    if let Some(argv0) = iter.next() {
        out.push(argv0);
    }
    let mut pending_values = 0usize;
    let mut in_program = false;
    for arg in iter {
        if in_program {
            out.push(arg);
            continue;
        }
        if pending_values > 0 {
            pending_values -= 1;
            out.push(arg);
            continue;
        }
        let text = arg.to_string_lossy().into_owned();
        if text == "--" {
            in_program = true;
            out.push(arg);
            continue;
        }
        let (name, has_inline_value) = match text.split_once('=') {
            Some((name, _)) => (name.to_string(), true),
            None => (text.clone(), false),
        };
        let rewritten = match name.strip_prefix('-') {
            Some(rest) if !rest.starts_with('-') && SINGLE_DASH_LONG.contains(&rest) => {
                format!("-{text}")
            }
            // Any other single-dash word is a long option too (mpiexec's
            // style), not a cluster of short flags: `-hosts` must not be
            // read as `-h -o -s ...` (help, exit 0). `-n4` stays `-n 4`.
            Some(rest) if rest.len() > 1 && !rest.starts_with('-') && !short_with_value(rest) => {
                format!("-{text}")
            }
            _ => text.clone(),
        };
        let flag = rewritten.split('=').next().unwrap_or_default();
        if !rewritten.starts_with('-') {
            // The program starts here: mark it, so clap treats the rest as its arguments.
            in_program = true;
            out.push(OsString::from("--"));
        } else if !has_inline_value {
            if TAKES_TWO_VALUES.contains(&flag) {
                pending_values = 2;
            } else if TAKES_ONE_VALUE.contains(&flag) {
                pending_values = 1;
            }
        }
        if rewritten == text {
            out.push(arg);
        } else {
            out.push(OsString::from(rewritten));
        }
    }
    out
}

/// `n4`: the short option `-n` with its value attached.
fn short_with_value(rest: &str) -> bool {
    rest.strip_prefix('n')
        .is_some_and(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_single_dash_words_are_long_options() {
        assert_eq!(
            norm(&["rivetrun", "-hosts", "a,b", "-n", "2", "prog"])[1],
            "--hosts"
        );
        assert_eq!(norm(&["rivetrun", "-n4", "prog"])[1], "-n4");
        // Hydra's host options parse, with their values.
        let c = parse(&[
            "rivetrun",
            "-hosts",
            "a,b:2",
            "-ppn",
            "2",
            "-launcher",
            "rsh",
            "-launcher-exec",
            "/x",
            "-iface",
            "br0",
            "-n",
            "4",
            "prog",
            "-f",
        ])
        .unwrap();
        assert_eq!(c.hosts.as_deref(), Some("a,b:2"));
        assert_eq!(c.launcher, Some(crate::remote::start::Kind::Rsh));
        assert_eq!(c.launcher_exec.as_deref(), Some("/x"));
        assert_eq!(c.iface.as_deref(), Some("br0"));
        assert_eq!(c.command, ["prog", "-f"]);
        let c = parse(&["rivetrun", "-f", "hf", "-n", "2", "prog"]).unwrap();
        assert_eq!(c.hostfile, Some(PathBuf::from("hf")));
        let c = parse(&[
            "rivetrun",
            "-machinefile",
            "hf",
            "-bootstrap",
            "ssh",
            "prog",
        ])
        .unwrap();
        assert_eq!(c.hostfile, Some(PathBuf::from("hf")));
        assert!(parse(&["rivetrun", "-launcher", "pbs", "prog"]).is_err());
        // An unknown mpiexec word is an error, not help.
        assert!(parse(&["rivetrun", "-bogus", "-n", "2", "prog"]).is_err());
    }

    #[test]
    fn unknown_options_are_named_as_typed_and_f_is_a_hostfile() {
        let typed = |args: &[&str]| {
            let original: Vec<OsString> = args.iter().map(OsString::from).collect();
            let e = Cli::command()
                .try_get_matches_from(normalize(original.iter().cloned()))
                .expect_err("must fail");
            assert_eq!(e.exit_code(), 2, "{e}");
            unknown_option(&e, &original)
        };
        assert_eq!(
            typed(&["rivetrun", "-bogus", "prog"]).as_deref(),
            Some("-bogus")
        );
        assert_eq!(
            typed(&["rivetrun", "--bogus", "prog"]).as_deref(),
            Some("--bogus")
        );
        assert_eq!(
            typed(&["rivetrun", "-hx=1", "prog"]).as_deref(),
            Some("-hx")
        );
        // Not an unknown option: a missing value.
        assert_eq!(typed(&["rivetrun", "-n"]), None);
        let cli = parse(&["rivetrun", "-f", "hosts", "prog"]).unwrap();
        assert_eq!(cli.hostfile, Some(PathBuf::from("hosts")));
        let cli = parse(&["rivetrun", "-prepend-rank", "prog"]).unwrap();
        assert!(cli.label);
    }

    #[test]
    fn hydra_spellings_parse() {
        let cli = parse(&[
            "rivetrun",
            "-genvall",
            "-prepend-rank",
            "-pmi-port",
            "-disable-auto-cleanup",
            "-timeout",
            "5",
            "-outfile-pattern",
            "o.%r",
            "-errfile-pattern",
            "e.%r",
            "-n",
            "2",
            "prog",
            "-timeout",
        ])
        .unwrap();
        assert!(cli.genvall && cli.label && cli.pmi_port && cli.disable_auto_cleanup);
        assert_eq!(cli.timeout, Some(5.0));
        assert!(cli.outfile_pattern.is_some() && cli.errfile_pattern.is_some());
        assert_eq!(cli.command, ["prog", "-timeout"]);
        assert_eq!(norm(&["rivetrun", "-version"])[1], "--version");
        let cli = parse(&["rivetrun", "-configfile", "f.cfg"]).unwrap();
        assert_eq!(cli.configfile, Some(PathBuf::from("f.cfg")));
        assert!(cli.command.is_empty());
        // Hydra's launcher options, spelled with one dash.
        let cli = parse(&[
            "rivetrun",
            "-launcher",
            "fork",
            "-launcher-exec",
            "x",
            "-iface",
            "lo",
            "-hosts",
            "a,b",
            "prog",
        ])
        .unwrap();
        assert_eq!(cli.launcher_exec.as_deref(), Some("x"));
        assert_eq!(cli.iface.as_deref(), Some("lo"));
        assert_eq!(cli.hosts.as_deref(), Some("a,b"));
    }

    fn norm(args: &[&str]) -> Vec<String> {
        normalize(args.iter().map(OsString::from))
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect()
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(normalize(args.iter().map(OsString::from)))
    }

    #[test]
    fn mpiexec_spellings_are_rewritten_before_the_program_only() {
        let cases: &[(&[&str], &[&str])] = &[
            (
                &["rivetrun", "-np", "4", "a.out"],
                &["rivetrun", "--np", "4", "--", "a.out"],
            ),
            (
                &[
                    "rivetrun", "-genv", "A", "1", "-n", "2", "prog", "-np", "9", "-env",
                ],
                &[
                    "rivetrun", "--genv", "A", "1", "-n", "2", "--", "prog", "-np", "9", "-env",
                ],
            ),
            (
                &["rivetrun", "-wdir", "/tmp", "-genvlist", "A,B", "x"],
                &["rivetrun", "--wdir", "/tmp", "--genvlist", "A,B", "--", "x"],
            ),
            // A value that looks like an option is a value, not an option.
            (
                &["rivetrun", "-env", "X", "-np", "p"],
                &["rivetrun", "--env", "X", "-np", "--", "p"],
            ),
            (&["rivetrun", "--", "-np"], &["rivetrun", "--", "-np"]),
        ];
        for (input, want) in cases {
            assert_eq!(norm(input), *want, "input {input:?}");
        }
    }

    #[test]
    fn parses_a_full_command_line() {
        let cli = parse(&[
            "rivetrun",
            "-np",
            "3",
            "-l",
            "-genv",
            "A",
            "1",
            "-env",
            "B",
            "two words",
            "-wdir",
            "/tmp",
            "prog",
            "--flag",
            "-n",
            "5",
        ])
        .unwrap();
        assert_eq!(cli.nprocs, 3);
        assert!(cli.label);
        assert_eq!(cli.wdir, Some(PathBuf::from("/tmp")));
        assert_eq!(cli.global_assignments(), [("A".into(), "1".into())]);
        let sections = cli.sections().unwrap();
        assert_eq!(sections.len(), 1);
        assert_eq!(sections[0].env, [("B".into(), "two words".into())]);
        assert_eq!(sections[0].nprocs, 3);
        let cmd: Vec<_> = cli.command.iter().map(|s| s.to_str().unwrap()).collect();
        assert_eq!(cmd, ["prog", "--flag", "-n", "5"]);
    }

    #[test]
    fn rejects_bad_usage() {
        assert!(parse(&["rivetrun", "-n", "2"]).is_err(), "no program");
        assert!(parse(&["rivetrun", "-n", "0", "x"]).is_err(), "zero ranks");
        assert!(
            parse(&["rivetrun", "-n", "two", "x"]).is_err(),
            "not a number"
        );
        assert!(
            parse(&["rivetrun", "-genv", "A", "-n"]).is_err(),
            "missing program"
        );
        assert!(
            parse(&["rivetrun", "--bogus", "x"]).is_err(),
            "unknown option"
        );
    }

    #[test]
    fn impi_server_options() {
        let cli = parse(&[
            "rivetrun",
            "-impi-server",
            "2",
            "-port",
            "7000",
            "-auth",
            "3,1-0",
        ])
        .unwrap();
        assert_eq!(cli.impi_server, Some(2));
        assert_eq!(cli.port, Some(7000));
        assert_eq!(cli.auth, Some(AuthPreference(vec![3, 1, 0])));
        assert!(parse(&["rivetrun", "--impi-server", "0"]).is_err());
        assert!(parse(&["rivetrun", "--impi-server", "33"]).is_err());
        assert!(parse(&["rivetrun", "--impi-server", "2", "prog"]).is_err());
        assert!(parse(&["rivetrun", "--impi-server", "2", "--auth", "x"]).is_err());
        assert!(parse(&["rivetrun", "--auth", "1", "-n", "2", "prog"]).is_err());
        let cli = parse(&["rivetrun", "-impi-client", "1", "h:5", "-n", "2", "prog"]).unwrap();
        assert_eq!(
            cli.impi_client,
            Some(vec!["1".to_string(), "h:5".to_string()])
        );
        assert_eq!(cli.command, ["prog"]);
        assert!(parse(&["rivetrun", "--impi-client", "1", "-n", "2", "prog"]).is_err());
    }

    #[test]
    fn name_server_options() {
        let cli = parse(&["rivetrun", "--name-server", "--port", "7000"]).unwrap();
        assert!(cli.name_server);
        assert_eq!(cli.port, Some(7000));
        assert!(cli.command.is_empty());
        let cli = parse(&["rivetrun", "--name-server"]).unwrap();
        assert_eq!(cli.port, None);
        // Hydra's spelling, before the program only.
        let cli = parse(&[
            "rivetrun",
            "-nameserver",
            "node1:7000",
            "-n",
            "2",
            "prog",
            "-port",
        ])
        .unwrap();
        assert_eq!(cli.nameserver.as_deref(), Some("node1:7000"));
        assert_eq!(cli.command, ["prog", "-port"]);
        assert!(parse(&["rivetrun", "--nameserver", "node1", "prog"]).is_err());
        assert!(parse(&["rivetrun", "--name-server", "prog"]).is_err());
        assert!(parse(&["rivetrun", "--port", "7000", "prog"]).is_err());
        assert!(parse(&["rivetrun", "--name-server", "--nameserver", "h:1"]).is_err());
        assert!(parse(&["rivetrun", "--port", "7000"]).is_err());
        let cli = parse(&["rivetrun", "--kill-grace", "5", "prog"]).unwrap();
        assert_eq!(cli.kill_grace, 5.0);
        assert_eq!(cli.command, ["prog"]);
    }

    #[test]
    fn kill_grace_is_a_finite_wait() {
        for ok in ["0", "0.5", "3600"] {
            let cli = parse(&["rivetrun", "--kill-grace", ok, "prog"]).unwrap();
            assert_eq!(cli.kill_grace, ok.parse::<f64>().unwrap());
        }
        for bad in [
            "nan", "NaN", "inf", "-inf", "-1", "3601", "1e300", "soon", "",
        ] {
            let arg = format!("--kill-grace={bad}");
            let err = parse(&["rivetrun", &arg, "prog"])
                .expect_err(bad)
                .to_string();
            assert!(err.contains("--kill-grace"), "{bad}: {err}");
        }
    }

    #[test]
    fn timeout_is_a_bounded_number_of_seconds() {
        let cli = parse(&["rivetrun", "-timeout", "2.5", "-n", "2", "prog"]).unwrap();
        assert_eq!(cli.timeout, Some(2.5));
        assert_eq!(cli.command, ["prog"]);
        assert_eq!(
            time_limit(&cli).unwrap(),
            Some(std::time::Duration::from_millis(2500))
        );
        let cli = parse(&["rivetrun", "--timeout", "0", "prog"]).unwrap();
        assert_eq!(time_limit(&cli).unwrap(), None, "0: no limit");
        for bad in ["-1", "nan", "inf", "1e12", "later", ""] {
            let arg = format!("--timeout={bad}");
            let err = parse(&["rivetrun", &arg, "prog"])
                .expect_err(bad)
                .to_string();
            assert!(err.contains("--timeout"), "{bad}: {err}");
        }
    }

    #[test]
    fn mpmd_sections_and_configfile() {
        let cli = parse(&[
            "rivetrun", "-genv", "G", "1", "-n", "2", "a", "x", ":", "-np", "3", "-env", "K", "V",
            "b", "-n", "7",
        ])
        .unwrap();
        let s = cli.sections().unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].nprocs, s[0].command.clone()),
            (2, vec!["a".into(), "x".into()])
        );
        assert_eq!(s[1].nprocs, 3);
        assert_eq!(s[1].command, ["b", "-n", "7"]);
        assert_eq!(s[1].env, [("K".into(), "V".into())]);
        assert!(parse(&["rivetrun", "a", ":"]).unwrap().sections().is_err());
        let cli = parse(&["rivetrun", "-configfile", "/nonexistent/cfg"]).unwrap();
        assert!(cli.sections().unwrap_err().contains("/nonexistent/cfg"));
        let both = parse(&["rivetrun", "-configfile", "cfg", "prog"]).unwrap();
        assert!(both.sections().is_err());
    }

    #[test]
    fn cluster_id_option() {
        let cli = parse(&["rivetrun", "--cluster-id", "clA", "-n", "2", "prog"]).unwrap();
        assert_eq!(cli.cluster_id.as_deref(), Some("clA"));
        assert_eq!(cli.command, ["prog"]);
        assert_eq!(parse(&["rivetrun", "prog"]).unwrap().cluster_id, None);
        for bad in ["a:b", "", "a b", "x,y"] {
            assert!(
                parse(&["rivetrun", "--cluster-id", bad, "prog"]).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn genvlist_splits_on_commas() {
        let cli = parse(&[
            "rivetrun",
            "-genvnone",
            "-genvlist",
            "A,B",
            "-genvlist",
            "C",
            "x",
        ])
        .unwrap();
        assert!(cli.genvnone);
        assert_eq!(cli.genvlist, ["A", "B", "C"]);
    }
}
