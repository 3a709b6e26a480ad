//! A job on this host alone: its placement planned (and refused) before any
//! rank starts, its PMI namespace, the ranks started, then the `supervisor`
//! loop until they end. Kept apart from `main` so the entry point shows only
//! which mode runs, and from `hosts_job`, whose ranks are started by proxies.

use std::io::{Read, Write};
use std::process::ChildStdin;
use std::time::Duration;

use rivet_pmi::server::{NamespaceSpec, Server};

use crate::cli::{self, Cli};
use crate::error::LaunchError;
use crate::job::{add_job_secret, placement_request, App, JobParts, JOB_SECRET_ENV};
use crate::launch::{self, JobSpec, PmiChannel, RankPlace};
use crate::leftovers::{self, JobDir, ShmSweep};
use crate::spawn::SpawnBase;
use crate::supervisor::{Failure, Supervisor};
use crate::topology::{self, Topology};
use crate::{impi, info, outfiles, pmix_host, pmix_need, resources};

/// Start rivetrun's PMIx server for the job, beside PMI-1, on a thread of
/// its own (it loads its plugins while the topology is discovered), where
/// OpenPMIx is installed: programs whose MPI speaks PMIx (Open MPI) find it
/// through the variables it adds to each rank's environment; the others
/// ignore them. Without the library: PMI-1 alone (`rivetrun --info` says why).
/// Nor for programs sure not to want it (MPICH's, `pmix_need`).
pub(crate) fn start_pmix_server(job: &JobSpec, apps: &[App]) -> Option<pmix_host::Starting> {
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

/// Run the job `parts` describes on this host, on `topo` (discovered, or
/// loaded by `--topology`), with its PMIx server `pmix` if one is starting;
/// the exit code.
pub(crate) fn run(
    cli: &Cli,
    parts: JobParts,
    topo: Topology,
    pmix: Option<pmix_host::Starting>,
    name_server: Option<String>,
) -> Result<i32, LaunchError> {
    let (mut job, mut apps, appnums, search_path) = parts;
    // The job's processes (spawned ones too) prove to each other that they
    // belong to it (the tcp netmod's HELLO); set last, so -genv cannot.
    let secret = add_job_secret(&mut job)?;
    for app in &mut apps {
        app.env.push((JOB_SECRET_ENV.into(), secret.clone().into()));
    }
    let size = job.size;

    // Placement is decided, and refused, before any rank starts.
    let placement = topology::plan(&topo, &placement_request(cli, size as usize))?;
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
    if let Some(limit) = cli::time_limit(cli)? {
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
        for (k, v) in pmix_host::open_mpi_env(places.len(), std::process::id()) {
            for app in &mut apps {
                app.env.insert(0, (k.clone().into(), v.clone().into()));
            }
        }
    }
    let mut priority = launch::Priority::raise_own();
    priority.slack_when_oversubscribed(places.len());
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
