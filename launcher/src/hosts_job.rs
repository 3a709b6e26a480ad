//! A job on other hosts: the command line turned into `remote::run`'s
//! options and host list. Apart from `local_job` because none of the local
//! placement, namespace or supervision applies: proxies do that per host.

use crate::cli::Cli;
use crate::error::LaunchError;
use crate::job::{add_job_secret, App, JOB_SECRET_ENV};
use crate::launch::JobSpec;
use crate::{hosts, info, remote};

/// The host list of `-hosts` or `-hostfile`, if either was given.
pub(crate) fn host_entries(cli: &Cli) -> Result<Option<Vec<hosts::HostEntry>>, LaunchError> {
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
pub(crate) fn run(
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
