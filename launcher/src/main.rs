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
//! - `main.rs` picks the mode (proxy, IMPI server, name server, `--info`, a job);
//!   `local_job.rs` runs a job on this host (placement, namespace, ranks, supervisor), with its
//!   PMIx server (`pmix_need.rs` decides whether the programs may want one); `hosts_job.rs` hands
//!   a job on other hosts to `remote/` (host list, options).
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
//!   (`upstream.rs`), read rivetrun's commands (`control.rs`), place (`place.rs`) and start its
//!   ranks (MPMD apps), serve their PMI-1/PMI-2 with the PMI server core (the node's namespace:
//!   `node_server.rs`) in a poll loop with the node's topology keys (`pmi/`; `--pmi-port`'s port, its gate
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
//!   node of a multi-host job, the server a proxy runs (`node.rs`); Nagle turned off on each
//!   client's end of its connection, through a copy of the client's socket (`client_nodelay.rs`).
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
mod hosts_job;
mod impi;
mod info;
mod job;
mod launch;
mod leftovers;
mod local_job;
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

use std::process::ExitCode;

use crate::cli::Cli;
use crate::error::LaunchError;
use crate::job::job_spec;
use crate::topology::Topology;

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
    if let (Some((job, apps, appnums, _)), Some(entries)) =
        (job.as_mut(), hosts_job::host_entries(&cli)?)
    {
        return hosts_job::run(&cli, job, apps, appnums, &entries, name_server);
    }
    let mut pmix = job
        .as_ref()
        .and_then(|(job, apps, ..)| local_job::start_pmix_server(job, apps));
    let topo = match &cli.topology {
        Some(spec) => Topology::load(spec)?,
        None => Topology::discover()?,
    };
    if let Some(starting) = pmix.as_mut() {
        starting.lend_topology(topo.shared());
    }
    let Some(parts) = job else {
        info::print(&topo, cli.all);
        return Ok(0);
    };
    local_job::run(&cli, parts, topo, pmix, name_server)
}
