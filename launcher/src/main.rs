//! `rivetrun`: Rivet's launcher. It checks the command line and the program,
//! plans where every rank goes (`topology`: hwloc discovery, mapping,
//! binding), creates the job's PMI namespace with the placement published in
//! it, starts the ranks (`launch`), then hands everything to the `supervisor`
//! event loop, which serves PMI (spawns included, checked by `spawn`),
//! forwards output and signals, and decides the exit code. `output` holds the
//! line buffering, `cli` the mpiexec-style options, `info` the `--info`
//! probes, `error` the launch errors, `nameserver` the `--name-server` mode
//! and the client side of `--nameserver`, `outfiles` `-outfile-pattern`,
//! `mpmd` the sections of an MPMD job, `impi` the IMPI server and client,
//! `hosts`, `remote` and `proxy` multi-host jobs, `leftovers` the job's
//! temporary directory and the sweep of what dead jobs left.
//!
//! Choices: hwloc through `hwlocality` (=1.0.0-alpha.13), not `hwloc2` (last release 2020), which
//! cannot load XML or synthetic topologies nor export XML, as `--topology` and
//! `PMI_hwloc_xmlfile` need; builds need `libhwloc-dev libudev-dev pkg-config`, and Rust >= 1.85.
//! Ranks start by our own fork+exec (`forkexec.rs`: the child arms `PR_SET_PDEATHSIG`, which
//! rules out `posix_spawn`, and std's `Command` waits for each exec before the next fork): all of
//! a batch are forked first and their exec results read together. Binding is inherited from the
//! starting thread's CPU mask, and the PMI socket is made inheritable just for its own fork; one
//! thread, the main one, starts ranks, and since the death signal fires when that thread ends it
//! lives as long as rivetrun. rivetrun
//! runs at nice -5 relative to its ranks where allowed: every rank waits on its answers.
//!
//! Module map:
//!
//! - `cli/`: the options: the clap definition (`mod.rs`), mpiexec spellings normalised for clap
//!   (`normalize.rs`), value parsers (`values.rs`); `generate.rs` the hidden `--clap-generate`
//!   (man page, completions) shared with rivet-bench.
//! - `mpmd.rs`: MPMD sections (`prog1 : -n 2 prog2`, `-configfile`), the appnum of each rank;
//!   `job.rs`: the job the command line describes (each section's `App`, the shared `JobSpec`,
//!   the placement request).
//! - `topology/`: hwloc discovery with plugins kept out (`discover.rs`), mapping policies
//!   (`policy.rs`, `mapping.rs`), the binding plan (`binding.rs`), `--report-bindings`
//!   (`report.rs`).
//! - `hosts.rs`: host lists (`-hosts`, `-hostfile`, `host:slots`), block placement on hosts.
//! - `launch.rs`: starting ranks, all or none: env, PMI fd, pipes, affinity; `forkexec.rs` forks
//!   a batch without waiting for each exec (session, death signal), then reads which failed.
//! - `supervisor/`: the event loop (`mod.rs`): PMI serving (`pmi.rs`), output (`output.rs`),
//!   signals, reaping and teardown (`teardown.rs`), starting spawns (`spawns.rs`), name requests
//!   (`names.rs`), setup (`setup.rs`), failures and exit codes (`failure.rs`).
//! - `spawn.rs`: spawn requests checked and planned (info keys, all or none).
//! - `output.rs`: line-atomic output forwarding; `outfiles.rs`: `-outfile-pattern` and
//!   `-errfile-pattern` (Hydra's substitutions, one shared file per name); `stdout_queue.rs`:
//!   rivetrun's stdout written by a thread from a bounded queue; `nonblocking.rs` socket writes.
//! - `remote/`: multi-host jobs, rivetrun's side: the control port (address from `--iface` or the
//!   route, `addr.rs`), starting proxies (ssh, rsh, fork, manual, `--launcher-exec`: `start.rs`;
//!   Slurm allocations: `slurm.rs`), the control protocol (`wire.rs`), the job each proxy gets
//!   (`describe.rs`), barriers from the top of the proxy tree (`barrier.rs`), the loop's inputs
//!   and the threads reading them (`events.rs`), each proxy's state and host loss (`proxies.rs`),
//!   rivetrun's signals (`signals.rs`); names and group
//!   connect served job-wide with a PMI server core of rivetrun's own (`jobwide.rs`).
//! - `proxy/`: the per-node proxy (`rivetrun --proxy`): connect back and authenticate
//!   (`upstream.rs`), place and start its ranks (MPMD apps), serve their PMI-1/PMI-2 with the PMI
//!   server core in a poll loop with the node's topology keys (`pmi/`; `--pmi-port`'s port, its gate
//!   and closing: `pmi/port.rs`), barriers up a tree of
//!   proxies (`tree.rs`), spawns started on this host (`spawn.rs`), output and exits; the
//!   node's PMIx server, its fences as tree barriers and direct modex through rivetrun
//!   (`pmix.rs`), fences over some ranks and groups gathered by rivetrun (`pmix_subset.rs`;
//!   rivetrun's routing and gathering in `remote/pmix.rs`).
//! - `pmix_host/`: rivetrun as a PMIx server through OpenPMIx's server library (`mod.rs`): the job
//!   and its ranks registered, fork environments, the host module's upcalls as supervisor events;
//!   info lists and completion waits (`calls.rs`); publish/lookup/unpublish answered from the
//!   job's name table or the `--nameserver`, lookups waiting only on `PMIX_WAIT`, typed values
//!   stored as tagged strings (`names.rs`, `values.rs`); the `group` upcall (`group.rs`); spawn
//!   as a PMI-1 spawn request whose namespace is registered before it starts (`spawn.rs`); one
//!   node of a multi-host job, the server a proxy runs (`node.rs`).
//! - `impi/`: `--impi-server` (`server.rs`: threads per connection for AUTH and reading, one owner
//!   of state and writes) and `--impi-client` (`client.rs`: startup, host dance, per-proc
//!   listeners bound before the COLL exchange and sent as label `RIVET_P_PORT` (0x3F00),
//!   inherited by ranks (`IMPI_LISTEN_FDS`, `IMPI_PROCS`), `IMPI_*` for ranks, PK_FINI then
//!   FINI) and `funnel/` (rivetrun as agent while ranks run: one thread moves the packets of
//!   pairs without a direct channel over the host links, `IMPI_FUNNEL_FDS`, and watches the
//!   links: an end without PK_FINI ends the job; `funnel/end.rs`: each socket's queue, capped
//!   at twice the pairs' flow control, past which the link fails naming its host).
//! - `nameserver.rs`: the `--name-server` mode and forwarding to it (`--nameserver`).
//! - `resources.rs`: what ranks registered (seed 002), freed when they end.
//! - `leftovers.rs`: the job's private temp directory, its `/dev/shm` sweep, removing what dead
//!   jobs left (by owner and pid).
//! - `info.rs`: `--info` probes (shm, io_uring, CMA, libfabric, PMIx); `version.rs` the long
//!   `--version` (git commit from `build/git.rs`, features, libraries found); `error.rs` launch
//!   errors and their exit codes.
//!
//! What must stay true here (ARCHITECTURE.md's launcher invariants, in full):
//!
//! - Every rank, and every process a spawn starts, runs in its own session (so process group) and is
//!   supervised alike. When the job fails (non-zero exit, signal, abort, exit without PMI finalize
//!   while others run, a group member ending without disconnecting from a group made without
//!   `early_term_allowed`, or a signal to rivetrun), every group gets SIGTERM, then SIGKILL after
//!   `--kill-grace` (with `--disable-auto-cleanup` a failure is only reported); rivetrun returns
//!   only after every rank and spawned process is reaped.
//! - A spawn starts all its processes or none; nothing starts before every command's host,
//!   directory and program were checked.
//! - The event loop never blocks on the network: name-server requests run on threads with bounded
//!   waits.
//! - The exit code is 0 only if every rank and spawned process exited 0; otherwise the first
//!   failure's (exit code, 128+signal, abort code, 126/127 exec errors, 255 after `--timeout`).
//! - Output is forwarded in whole lines; no line from two ranks interleaves. stdout goes through a
//!   queue of at most 4 MiB (plus one read) that a thread writes, so the loop never blocks on
//!   rivetrun's stdout, and reads at most 8 x 64 KiB per output stream per turn.
//! - Placement is planned, and bad requests refused, before any rank starts. A topology that is
//!   not this machine's is never bound, only published. Cluster ids published to ranks are unique
//!   across the job's nodes.
//! - rivetrun removes `/dev/shm/rivet-PID-*` (PID its own) when the job ends, naming each on stderr
//!   (the test harness fails a job that kills no rank when it did: the sweep must not hide an
//!   engine that never unlinks).
//! - Nothing of a job outlives rivetrun, however it dies: its children get SIGKILL as parent-death
//!   signal, a PMI engine exits when its PMI connection hangs up (watch stopped at finalize), and
//!   the next rivetrun removes the dead job's `rivet-PID-*` in `/dev/shm` and `$TMPDIR` (only this
//!   user's, only for a dead pid whose job directory nobody holds locked, so a live job in another
//!   pid namespace is safe). Temp files live in a `mkdtemp` directory, removed on every exit path.
//! - rivetrun closes a PMI connection with more than 64 MiB of answers unread, the name server a
//!   client with more than 1 MiB (checked after every read).
//! - rivetrun sends a proxy the job only after its `hello` carried the job secret (a parent proxy
//!   takes a child's barriers only after its `child` carried the secret and the id of one of its
//!   children); a proxy kills its ranks when its connection to rivetrun ends, and rivetrun fails
//!   the job naming the host when a proxy's connection ends before its ranks did.
//! - What a rank registered (seed 002) and did not release is freed when it ends, however it ends;
//!   a child process only while its start time still matches, so a reused pid is never killed.

#![deny(clippy::undocumented_unsafe_blocks)]

mod cli;
mod error;
mod forkexec;
mod generate;
mod group_link;
mod hosts;
mod impi;
mod info;
mod job;
mod launch;
mod leftovers;
mod mpmd;
mod nameserver;
mod nonblocking;
mod outfiles;
mod output;
mod own_env;
mod pmix_host;
mod pmix_need;
mod proxy;
mod remote;
mod resources;
mod spawn;
mod stdout_queue;
mod supervisor;
mod topology;
mod version;

use std::io::{Read, Write};
use std::process::{ChildStdin, ExitCode};
use std::time::Duration;

use rivet_pmi::server::{NamespaceSpec, Server};

use crate::cli::Cli;
use crate::error::LaunchError;
use crate::job::{job_spec, placement_request, App};
use crate::launch::{JobSpec, PmiChannel, RankPlace};
use crate::leftovers::{JobDir, ShmSweep};
use crate::spawn::SpawnBase;
use crate::supervisor::{Failure, Supervisor};
use crate::topology::Topology;

/// What the netmods read the job secret from (`rivet_netmods::auth`).
const JOB_SECRET_ENV: &str = "RIVET_JOB_SECRET";

fn main() -> ExitCode {
    // Before any thread starts: they set variables OpenPMIx and hwloc read.
    pmix_host::choose_pmix_defaults();
    own_env::choose();
    if let Some(code) = generate::from_args(<Cli as clap::CommandFactory>::command) {
        return code;
    }
    let cli = Cli::from_args();
    match run(cli) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(err) => {
            eprintln!("rivetrun: {err}");
            ExitCode::from(err.exit_code() as u8)
        }
    }
}

/// Start rivetrun's PMIx server for the job, beside PMI-1, on a thread of
/// its own (it loads its plugins while the topology is discovered), where
/// OpenPMIx is installed: programs whose MPI speaks PMIx (Open MPI) find it
/// through the variables it adds to each rank's environment; the others
/// ignore them. Without the library: PMI-1 alone (`rivetrun --info` says why).
/// Nor for programs sure not to want it (MPICH's, `pmix_need`).
fn start_pmix_server(job: &JobSpec, apps: &[App]) -> Option<pmix_host::Starting> {
    let programs: Vec<pmix_need::Program<'_>> = apps
        .iter()
        .map(|app| pmix_need::Program {
            path: &app.program,
            env: &app.env,
        })
        .collect();
    if !pmix_need::may_want_pmix(&programs) {
        return None;
    }
    pmix_host::probe().ok()?;
    Some(pmix_host::Starting::spawn(
        job.kvsname.clone(),
        job.size,
        info::hostname(),
    ))
}

fn run(cli: Cli) -> Result<i32, LaunchError> {
    if let Some(control) = &cli.proxy {
        // Under srun, the node index is Slurm's.
        let id = cli.proxy_id.or_else(|| {
            std::env::var("SLURM_NODEID")
                .ok()
                .and_then(|s| s.parse().ok())
        });
        let Some(id) = id else {
            return Err(LaunchError::Usage(
                "--proxy needs --proxy-id (or SLURM_NODEID)".into(),
            ));
        };
        return Ok(proxy::run(control, id));
    }
    if let Some(size) = cli.impi_server {
        return impi::server::serve(size, cli.port.unwrap_or(0), cli.auth.map(|a| a.0));
    }
    if cli.name_server {
        return nameserver::serve(cli.port.unwrap_or(0), &info::hostname());
    }
    let name_server = match &cli.nameserver {
        Some(addr) => Some(addr.clone()),
        None => match rivet_settings::var("RIVET_NAMESERVER").ok_or(()) {
            Ok(v) if !v.trim().is_empty() => Some(
                nameserver::check_addr(&v)
                    .map_err(|e| LaunchError::Usage(format!("RIVET_NAMESERVER: {e}")))?,
            ),
            _ => None,
        },
    };
    let mut job = if cli.info {
        None
    } else {
        Some(job_spec(&cli)?)
    };
    if let (Some((job, apps, appnums, _)), Some(entries)) = (job.as_mut(), host_entries(&cli)?) {
        return run_on_hosts(&cli, job, apps, appnums, &entries, name_server);
    }
    let mut pmix = job
        .as_ref()
        .and_then(|(job, apps, ..)| start_pmix_server(job, apps));
    let topo = match &cli.topology {
        Some(spec) => Topology::load(spec)?,
        None => Topology::discover()?,
    };
    if let Some(starting) = pmix.as_mut() {
        starting.lend_topology(topo.shared());
    }
    let Some((mut job, mut apps, appnums, search_path)) = job else {
        info::print(&topo, cli.all);
        return Ok(0);
    };
    // The job's processes (spawned ones too) prove to each other that they
    // belong to it (the tcp netmod's HELLO); set last, so -genv cannot.
    let secret = add_job_secret(&mut job)?;
    for app in &mut apps {
        app.env.push((JOB_SECRET_ENV.into(), secret.clone().into()));
    }
    let size = job.size;

    // Placement is decided, and refused, before any rank starts.
    let placement = topology::plan(&topo, &placement_request(&cli, size as usize))?;
    let bind = topo.is_this_system();
    if placement.nodes > 1 && bind {
        return Err(LaunchError::Usage(format!(
            "{} ranks at -ppn {} need {} nodes, but this job runs on this host only: give the \
             hosts with -hosts or -hostfile, or use --topology to simulate another machine",
            size,
            cli.ppn.unwrap_or(0),
            placement.nodes
        )));
    }
    // IMPI: join the other clients before any rank starts (all or nothing).
    let impi = match &cli.impi_client {
        Some(args) => {
            let (rank, addr) = impi::client::parse_args(args)?;
            let mut session = impi::client::join(rank, &addr, size)?;
            session.watch()?;
            eprintln!("rivetrun: {}", session.summary());
            for (k, v) in session.env() {
                job.env.push((k.clone().into(), v.clone().into()));
                for app in &mut apps {
                    app.env.push((k.clone().into(), v.clone().into()));
                }
            }
            Some(session)
        }
        None => None,
    };
    for note in &placement.notes {
        eprintln!("rivetrun: note: {note}");
    }
    if cli.report_bindings {
        let host = info::hostname();
        for rank in &placement.ranks {
            eprintln!("{}", topology::report_line(rank, &host));
        }
    }
    // What jobs killed before they could clean up left behind.
    let tmp = std::env::temp_dir();
    let swept = leftovers::sweep_dead_jobs(&tmp, std::path::Path::new("/dev/shm"));
    if !swept.is_empty() {
        let names: Vec<String> = swept.iter().map(|p| p.display().to_string()).collect();
        eprintln!(
            "rivetrun: note: removed what dead jobs left: {}",
            names.join(" ")
        );
    }
    // Ranks load the topology from this file instead of rediscovering it.
    let dir = JobDir::create(&tmp).map_err(LaunchError::Io)?;
    let xml = dir.path().join("topology.xml");
    topo.export_xml(&xml)?;
    let _segments = ShmSweep(std::process::id());

    let mut attributes = placement.pmi_keys(Some(&xml))?;
    // Spawned processes are unbound: of the placement keys only the machine's topology holds for them.
    let mut spawn_attributes: Vec<(String, String)> = attributes
        .iter()
        .filter(|(k, _)| k == rivet_pmi::topology::KEY_HWLOC_XMLFILE)
        .cloned()
        .collect();
    let mut server = Server::new();
    let cluster = match &cli.cluster_id {
        Some(id) => id.clone(),
        None => info::hostname(),
    };
    server.set_cluster(&cluster).map_err(|e| {
        LaunchError::Usage(format!(
            "{e}; pass a valid cluster id with --cluster-id NAME"
        ))
    })?;
    // Every process, spawned ones too, learns the id it qualifies its namespace with.
    let cluster_id = Some(cluster.clone());
    let cluster_key = (rivet_pmi::group::KEY_CLUSTER.to_string(), cluster);
    attributes.push(cluster_key.clone());
    spawn_attributes.push(cluster_key);
    // Seed 002's resource registration: what a rank registers and does not
    // release is freed when it ends (`resources.rs`).
    let resources_key = resources::serve(&mut server);
    attributes.push(resources_key.clone());
    spawn_attributes.push(resources_key);
    let ns = server.create_namespace(NamespaceSpec {
        name: job.kvsname.clone(),
        size,
        appnum: 0,
        appnum_of_rank: if apps.len() > 1 {
            appnums.clone()
        } else {
            Vec::new()
        },
        universe_size: size,
        node_of_rank: placement.node_of_rank(),
        attributes,
        preput: Vec::new(),
    })?;

    let places: Vec<RankPlace> = placement
        .ranks
        .iter()
        .map(|r| RankPlace {
            local_rank: r.local_rank,
            local_size: r.local_size,
            affinity: if bind {
                r.cpuset.as_ref().map(|set| set.to_libc())
            } else {
                None
            },
        })
        .collect();
    if places.iter().any(|p| p.affinity.is_some()) {
        job.default_affinity = Some(
            topology::current_affinity()
                .map_err(LaunchError::Io)?
                .to_libc(),
        );
    }

    let grace = Duration::from_secs_f64(cli.kill_grace.clamp(0.0, cli::MAX_KILL_GRACE));
    let mut supervisor = Supervisor::new(server, ns, cli.label, grace).map_err(LaunchError::Io)?;
    supervisor.keep_going(cli.disable_auto_cleanup);
    if let Some(limit) = cli::time_limit(&cli)? {
        supervisor.time_limit(limit);
    }
    if cli.outfile_pattern.is_some() || cli.errfile_pattern.is_some() {
        let mut files = outfiles::OutFiles::new(
            cli.outfile_pattern.clone(),
            cli.errfile_pattern.clone(),
            info::hostname(),
        );
        // Every rank's files exist before any rank starts: a bad pattern fails here.
        for rank in 0..size {
            files
                .files_for(0, rank)
                .map_err(|e| LaunchError::Usage(e.to_string()))?;
        }
        supervisor.output_files(files);
    }
    if let Some(addr) = name_server {
        supervisor.use_name_server(addr).map_err(LaunchError::Io)?;
    }
    if cli.pmi_port {
        let (addr, auth) = supervisor.listen_tcp(size).map_err(LaunchError::Io)?;
        job.channel = PmiChannel::Port(addr, auth);
    }

    // Open MPI's ranks take the topology from the server rather than
    // each discovering it (`pmix.hwlocxml2`).
    let topology_xml = std::fs::read_to_string(&xml).ok();
    let pmix_appnums = if apps.len() > 1 {
        appnums.clone()
    } else {
        Vec::new()
    };
    let pmix =
        pmix.and_then(
            |starting| match starting.finish(topology_xml, cluster_id, pmix_appnums) {
                Ok(host) => Some(host),
                Err(why) => {
                    eprintln!("rivetrun: warning: no PMIx server for this job (PMI-1 only): {why}");
                    None
                }
            },
        );
    if let Some(host) = &pmix {
        host.wake(supervisor.waker());
        // First, so that the user's -genv or -env wins.
        if let Some((k, v)) = pmix_host::yield_when_oversubscribed(places.len()) {
            for app in &mut apps {
                app.env.insert(0, (k.clone().into(), v.clone().into()));
            }
        }
    }
    let priority = launch::Priority::raise_own();
    let mut rank0_stdin = None;
    let pmix_envs: Vec<Vec<(String, String)>> = (0..places.len())
        .map(|rank| match &pmix {
            Some(host) => host.fork_env(rank as u32).unwrap_or_else(|why| {
                eprintln!("rivetrun: warning: rank {rank} gets no PMIx: {why}");
                Vec::new()
            }),
            None => Vec::new(),
        })
        .collect();
    let app_jobs: Vec<JobSpec> = apps.iter().map(|app| app.job(&job)).collect();
    let procs = places.iter().enumerate().map(|(rank, place)| {
        let app_job = &app_jobs[appnums[rank] as usize];
        (app_job, rank as u32, place, &pmix_envs[rank][..])
    });
    let start_failure = match launch::start_all(procs, &priority) {
        Ok(started) => {
            for (rank, s) in started.into_iter().enumerate() {
                let stdin = supervisor.add_rank(s).map_err(LaunchError::Io)?;
                if rank == 0 {
                    rank0_stdin = stdin;
                }
            }
            None
        }
        Err((_, err)) => Some(err),
    };
    if let Some(host) = pmix {
        supervisor.serve_pmix(host);
    }
    // rivetrun itself (and threads it starts) must not stay on rank 0's CPUs.
    if let Some(mask) = &job.default_affinity {
        launch::set_thread_affinity(mask).map_err(LaunchError::Io)?;
    }
    if let Some(err) = start_failure {
        let code = err.exit_code();
        supervisor.fail(Failure::Internal(err.to_string()));
        supervisor.run();
        return Ok(code);
    }
    let cwd = std::env::current_dir().map_err(LaunchError::Io)?;
    supervisor.enable_spawn(
        SpawnBase {
            env: job.env.clone(),
            clear_env: job.clear_env,
            wdir: job.wdir.as_ref().map_or(cwd.clone(), |d| cwd.join(d)),
            search_path,
            attributes: spawn_attributes,
            kvsname: job.kvsname.clone(),
            universe_size: size,
            hostname: info::hostname(),
        },
        priority,
    );
    if let Some(stdin) = rank0_stdin {
        forward_stdin(stdin);
    }
    let code = supervisor.run().map_or(0, |failure| failure.exit_code());
    // IMPI: FINI only after every proc exited successfully (2.4); else hang up.
    match impi {
        Some(session) if code == 0 => session.finish().map(|()| 0),
        _ => Ok(code),
    }
}

/// A new random job secret, put in the job's environment and returned.
fn add_job_secret(job: &mut JobSpec) -> Result<String, LaunchError> {
    let secret: String = rivet_pmi::server::random_bytes(16)
        .map_err(LaunchError::Io)?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    job.env.push((JOB_SECRET_ENV.into(), secret.clone().into()));
    Ok(secret)
}

/// The host list of `-hosts` or `-hostfile`, if either was given.
fn host_entries(cli: &Cli) -> Result<Option<Vec<hosts::HostEntry>>, LaunchError> {
    use remote::start::Kind;
    let slurm = match cli.launcher {
        Some(Kind::Slurm) => true,
        // Inside an allocation of several nodes, Slurm is the default (as
        // in Hydra); on one node, rivetrun runs the job itself (spawn,
        // names and PMIx work there).
        None => remote::slurm::in_allocation() && remote::slurm::hosts().is_ok_and(|h| h.len() > 1),
        Some(_) => false,
    };
    let entries = match (&cli.hosts, &cli.hostfile) {
        (Some(_), _) | (_, Some(_)) if slurm => Err(
            "--launcher slurm takes the hosts from the allocation; -hosts/-hostfile are \
             not supported with it yet"
                .to_string(),
        ),
        (Some(list), _) => hosts::parse_list(list).map_err(|e| format!("-hosts: {e}")),
        (None, Some(file)) => hosts::read_file(file).map_err(|e| format!("-hostfile {e}")),
        (None, None) if slurm => remote::slurm::hosts(),
        (None, None) => return Ok(None),
    };
    entries.map(Some).map_err(LaunchError::Usage)
}

/// A job on other hosts: one proxy per host (`remote`, `proxy`).
fn run_on_hosts(
    cli: &Cli,
    job: &mut JobSpec,
    apps: &[App],
    appnums: &[u32],
    entries: &[hosts::HostEntry],
    name_server: Option<String>,
) -> Result<i32, LaunchError> {
    if cli.topology.is_some() || cli.cpu_list.is_some() || cli.mesh_dims.is_some() {
        return Err(LaunchError::Usage(
            "-hosts/-hostfile cannot be combined with --topology, --cpu-list or --mesh-dims yet"
                .into(),
        ));
    }
    let secret = add_job_secret(job)?;
    let apps: Vec<JobSpec> = apps
        .iter()
        .map(|app| {
            let mut j = app.job(job);
            j.env.push((JOB_SECRET_ENV.into(), secret.clone().into()));
            j
        })
        .collect();
    let nodes = hosts::place(entries, job.size, cli.ppn);
    let launcher = match cli.launcher {
        Some(kind) => kind,
        None if cli.hosts.is_none() && cli.hostfile.is_none() => remote::start::Kind::Slurm,
        None => remote::start::Kind::Ssh,
    };
    let opts = remote::Options {
        launcher,
        launcher_exec: cli.launcher_exec.clone(),
        iface: cli.iface.clone(),
        label: cli.label,
        report_bindings: cli.report_bindings,
        genvnone: cli.genvnone,
        map_by: cli.map_by.name().to_string(),
        bind_to: cli.bind_to.map(|b| b.name().to_string()),
        grace: cli.kill_grace,
        cluster: cli.cluster_id.clone().unwrap_or_else(info::hostname),
        stats: cli.launch_stats,
        keep_going: cli.disable_auto_cleanup,
        name_server,
        pmi_port: cli.pmi_port,
    };
    remote::run(job, &apps, appnums, nodes, &opts)
}

/// Copy rivetrun's stdin to rank 0 on a thread of its own: stdin may be a
/// file or a terminal, which the event loop cannot poll. EOF closes rank 0's stdin.
fn forward_stdin(mut rank0: ChildStdin) {
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 16384];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    if rank0.write_all(&buf[..n]).is_err() {
                        return; // rank 0 closed its stdin or exited
                    }
                }
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            }
        }
    });
}
