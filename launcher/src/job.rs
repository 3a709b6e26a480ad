//! The job as the command line describes it: each MPMD section's program,
//! arguments, variables and directory (`App`), what every rank shares
//! (`JobSpec`), each rank's app, and the placement request.

use std::ffi::OsString;

use crate::cli::Cli;
use crate::error::LaunchError;
use crate::launch::{self, JobSpec, PmiChannel};
use crate::mpmd;
use crate::topology::PlacementRequest;

pub(crate) fn placement_request(cli: &Cli, nranks: usize) -> PlacementRequest {
    PlacementRequest {
        nranks,
        map_by: cli.map_by,
        bind_to: cli.bind_to,
        ppn: cli.ppn.map(|p| p as usize),
        cpu_list: cli.cpu_list.clone(),
        mesh_dims: cli
            .mesh_dims
            .as_ref()
            .map(|d| d.iter().map(|&x| x as usize).collect()),
    }
}

/// Check the command line and every program, and gather what every rank
/// shares (`JobSpec`, with the first section's program), each MPMD
/// section's program, arguments, variables and directory (`apps`, in app
/// order), the app of every rank, and the PATH the ranks see (where spawned programs are looked up).
pub(crate) fn job_spec(cli: &Cli) -> Result<JobParts, LaunchError> {
    let sections = cli.sections().map_err(LaunchError::Usage)?;
    let appnums = mpmd::appnums(&sections).map_err(LaunchError::Usage)?;
    let mut global: Vec<(OsString, OsString)> = Vec::new();
    for name in &cli.genvlist {
        match std::env::var_os(name) {
            Some(value) => global.push((name.into(), value)),
            None => {
                eprintln!("rivetrun: warning: -genvlist names {name}, which is not set; not passed")
            }
        }
    }
    let check_name = |k: &str| {
        if k.is_empty() || k.contains('=') {
            Err(LaunchError::Usage(format!(
                "invalid variable name '{k}' in -env/-genv"
            )))
        } else {
            Ok(())
        }
    };
    for (k, v) in cli.global_assignments() {
        check_name(&k)?;
        global.push((k.into(), v.into()));
    }
    let mut apps = Vec::new();
    let mut first_path = None;
    for (i, section) in sections.iter().enumerate() {
        let mut env = global.clone();
        for (k, v) in &section.env {
            check_name(k)?;
            env.push((k.into(), v.into()));
        }
        // The PATH the ranks will see decides where the program is looked up.
        let path = env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .or_else(|| {
                if cli.genvnone {
                    None
                } else {
                    std::env::var_os("PATH")
                }
            });
        let program = &section.command[0];
        let resolved = launch::resolve_program(program, path.as_deref())?;
        if let Some(dir) = &section.wdir {
            if !dir.is_dir() {
                return Err(LaunchError::BadWdir(dir.display().to_string()));
            }
        }
        // A relative program path is relative to where rivetrun was started, not to -wdir.
        let resolved = if resolved.is_relative() && section.wdir.is_some() {
            std::env::current_dir()
                .map_err(LaunchError::Io)?
                .join(resolved)
        } else {
            resolved
        };
        if i == 0 {
            first_path = path;
        }
        apps.push(App {
            program: resolved,
            argv0: program.clone(),
            args: section.command[1..].to_vec(),
            env,
            wdir: section.wdir.clone(),
        });
    }
    let first = &apps[0];
    let job = JobSpec {
        program: first.program.clone(),
        argv0: first.argv0.clone(),
        args: first.args.clone(),
        env: first.env.clone(),
        clear_env: cli.genvnone,
        wdir: first.wdir.clone(),
        size: appnums.len() as u32,
        kvsname: format!("rivet_{}_0", std::process::id()),
        channel: PmiChannel::Fd,
        default_affinity: None,
        spawned: false,
    };
    Ok((job, apps, appnums, first_path))
}

/// `job_spec`'s answer: the job, its apps, each rank's app, the ranks' PATH.
pub(crate) type JobParts = (JobSpec, Vec<App>, Vec<u32>, Option<OsString>);

/// What one MPMD section's ranks run (see `mpmd.rs`).
pub(crate) struct App {
    pub(crate) program: std::path::PathBuf,
    pub(crate) argv0: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) wdir: Option<std::path::PathBuf>,
}

impl App {
    /// The job as this app's ranks start it.
    pub(crate) fn job(&self, base: &JobSpec) -> JobSpec {
        JobSpec {
            program: self.program.clone(),
            argv0: self.argv0.clone(),
            args: self.args.clone(),
            env: self.env.clone(),
            wdir: self.wdir.clone(),
            ..base.clone()
        }
    }
}

/// What the netmods read the job secret from (`rivet_netmods::auth`).
pub(crate) const JOB_SECRET_ENV: &str = "RIVET_JOB_SECRET";

/// A new random job secret, put in the job's environment and returned.
pub(crate) fn add_job_secret(job: &mut JobSpec) -> Result<String, LaunchError> {
    let secret: String = rivet_pmi::server::random_bytes(16)
        .map_err(LaunchError::Io)?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    job.env.push((JOB_SECRET_ENV.into(), secret.clone().into()));
    Ok(secret)
}
