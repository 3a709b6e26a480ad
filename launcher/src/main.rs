//! `rivetrun`: Rivet's launcher. It checks the command line and the program,
//! creates the job's PMI namespace, starts the ranks (`launch`), then hands
//! everything to the `supervisor` event loop, which serves PMI, forwards
//! output and signals, and decides the exit code. `output` holds the line
//! buffering, `cli` the mpiexec-style options, `error` the launch errors.

mod cli;
mod error;
mod launch;
mod output;
mod supervisor;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::process::{ChildStdin, ExitCode};
use std::time::Duration;

use rivet_pmi::server::{NamespaceSpec, Server};

use crate::cli::Cli;
use crate::error::LaunchError;
use crate::launch::{JobSpec, PmiChannel, RankPlace};
use crate::supervisor::{Failure, Supervisor};

fn main() -> ExitCode {
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
    let job = job_spec(&cli)?;
    let size = job.size;

    let mut server = Server::new();
    let ns = server.create_namespace(NamespaceSpec {
        name: job.kvsname.clone(),
        size,
        appnum: 0,
        universe_size: size,
        node_of_rank: vec![0; size as usize],
        attributes: Vec::new(),
        preput: Vec::new(),
    })?;

    let grace = Duration::from_secs_f64(cli.kill_grace.clamp(0.0, 3600.0));
    let mut supervisor = Supervisor::new(server, ns, cli.label, grace).map_err(LaunchError::Io)?;
    let mut job = job;
    if cli.pmi_port {
        job.channel = PmiChannel::Port(supervisor.listen_tcp().map_err(LaunchError::Io)?);
    }

    let mut rank0_stdin = None;
    for rank in 0..size {
        let place = RankPlace {
            local_rank: rank,
            local_size: size,
            affinity: None,
        };
        match launch::start_rank(&job, rank, &place) {
            Ok(started) => {
                let stdin = supervisor.add_rank(started).map_err(LaunchError::Io)?;
                if rank == 0 {
                    rank0_stdin = stdin;
                }
            }
            Err(err) => {
                let code = err.exit_code();
                supervisor.fail(Failure::Internal(err.to_string()));
                supervisor.run();
                return Ok(code);
            }
        }
    }
    if let Some(stdin) = rank0_stdin {
        forward_stdin(stdin);
    }
    Ok(supervisor.run().map_or(0, |failure| failure.exit_code()))
}

/// Check the command line and the program, and gather what every rank shares.
fn job_spec(cli: &Cli) -> Result<JobSpec, LaunchError> {
    let program = &cli.command[0];
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    for name in &cli.genvlist {
        match std::env::var_os(name) {
            Some(value) => env.push((name.into(), value)),
            None => {
                eprintln!("rivetrun: warning: -genvlist names {name}, which is not set; not passed")
            }
        }
    }
    for (k, v) in cli.assignments() {
        if k.is_empty() || k.contains('=') {
            return Err(LaunchError::Usage(format!(
                "invalid variable name '{k}' in -env/-genv"
            )));
        }
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
    let resolved = launch::resolve_program(program, path.as_deref())?;
    if let Some(dir) = &cli.wdir {
        if !dir.is_dir() {
            return Err(LaunchError::BadWdir(dir.display().to_string()));
        }
    }
    // A relative program path is relative to where rivetrun was started, not to -wdir.
    let resolved = if resolved.is_relative() && cli.wdir.is_some() {
        std::env::current_dir()
            .map_err(LaunchError::Io)?
            .join(resolved)
    } else {
        resolved
    };
    Ok(JobSpec {
        program: resolved,
        argv0: program.clone(),
        args: cli.command[1..].to_vec(),
        env,
        clear_env: cli.genvnone,
        wdir: cli.wdir.clone(),
        size: cli.nprocs,
        kvsname: format!("rivet_{}_0", std::process::id()),
        channel: PmiChannel::Fd,
    })
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
