//! Serving `mcmd=spawn`: checking a request and planning its processes.
//!
//! A spawn is all or nothing. Every command's `host`, working directory and
//! program are checked before anything starts ([`plan`]); a command that
//! cannot start gets a non-zero error code for each of its processes and
//! the whole spawn is refused. The supervisor then creates the children's
//! namespace and starts them like ranks (`launch::start_rank`: own process
//! group, `PMI_FD`, piped output), with `PMI_SPAWNED=1` and no CPU binding.
//!
//! Info keys per command: `wdir` (working directory, relative to the job's),
//! `path` (where a program name without `/` is looked up, like `PATH`),
//! `host` (this machine only). Other keys are ignored with a warning.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use rivet_pmi::server::NamespaceSpec;
use rivet_pmi::wire::SpawnRequest;

use crate::error::LaunchError;
use crate::launch;

/// Most processes one spawn may start (rivetrun's own `-n` limit).
pub const MAX_SPAWN_PROCS: u64 = 4096;

/// Error code of a process whose `host` or `wdir` is refused (usage error).
pub const CODE_BAD_REQUEST: i32 = 2;

/// What spawned processes inherit from the job rivetrun started.
#[derive(Debug, Clone)]
pub struct SpawnBase {
    /// Variables on top of (or, with `clear_env`, instead of) rivetrun's environment.
    pub env: Vec<(OsString, OsString)>,
    pub clear_env: bool,
    /// Where processes without a `wdir` run (the job's `-wdir` or rivetrun's
    /// directory); absolute.
    pub wdir: PathBuf,
    /// The `PATH` the ranks see, for programs named without `/`.
    pub search_path: Option<OsString>,
    /// Job attributes that also hold for the children (`PMI_hwloc_xmlfile`).
    pub attributes: Vec<(String, String)>,
    /// The job's kvsname; spawned namespaces are called `<it>_s<N>`.
    pub kvsname: String,
    pub universe_size: u32,
    /// This machine's name, the one `host` value besides loopback names.
    pub hostname: String,
}

/// One command, checked and ready to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedCommand {
    /// Absolute path of the program.
    pub program: PathBuf,
    /// argv[0] as the spawner named it.
    pub argv0: OsString,
    pub args: Vec<OsString>,
    pub wdir: PathBuf,
    pub nprocs: u32,
}

/// A spawn that can start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub commands: Vec<PlannedCommand>,
    /// Processes over all commands.
    pub total: u32,
}

impl Plan {
    /// appnum (the index of its command) of each process, in rank order.
    pub fn appnum_of_rank(&self) -> Vec<u32> {
        self.commands
            .iter()
            .enumerate()
            .flat_map(|(i, c)| std::iter::repeat_n(i as u32, c.nprocs as usize))
            .collect()
    }

    /// The namespace the children join, `name`: sized and numbered as
    /// planned, with the job's attributes and the request's pre-puts.
    /// rivetrun and a multi-host proxy both create it from this.
    pub fn namespace(&self, base: &SpawnBase, name: &str, request: &SpawnRequest) -> NamespaceSpec {
        let appnum_of_rank = if self.commands.len() > 1 {
            self.appnum_of_rank()
        } else {
            Vec::new()
        };
        NamespaceSpec {
            name: name.to_string(),
            size: self.total,
            appnum: 0,
            appnum_of_rank,
            universe_size: base.universe_size.max(self.total),
            node_of_rank: vec![0; self.total as usize],
            attributes: base.attributes.clone(),
            preput: request.preput.clone(),
        }
    }

    /// How `command`'s processes start in namespace `kvsname`: PMI on an
    /// inherited fd, no binding of their own.
    pub fn job(
        &self,
        command: &PlannedCommand,
        base: &SpawnBase,
        kvsname: &str,
    ) -> launch::JobSpec {
        launch::JobSpec {
            program: command.program.clone(),
            argv0: command.argv0.clone(),
            args: command.args.clone(),
            env: base.env.clone(),
            clear_env: base.clear_env,
            wdir: Some(command.wdir.clone()),
            size: self.total,
            kvsname: kvsname.to_string(),
            channel: launch::PmiChannel::Fd,
            default_affinity: None,
            spawned: true,
        }
    }

    /// Where child `index` runs: unbound, so it keeps the CPU mask of the
    /// thread that starts it (rivetrun's or the proxy's own).
    pub fn place(&self, index: u32) -> launch::RankPlace {
        launch::RankPlace {
            local_rank: index,
            local_size: self.total,
            affinity: None,
        }
    }

    /// Every command's [`Plan::job`] and every child's [`Plan::place`],
    /// which `launch::start_all` borrows: rivetrun and a multi-host proxy
    /// both start the children from these.
    pub fn jobs_and_places(
        &self,
        base: &SpawnBase,
        kvsname: &str,
    ) -> (Vec<launch::JobSpec>, Vec<launch::RankPlace>) {
        let jobs = self
            .commands
            .iter()
            .map(|command| self.job(command, base, kvsname))
            .collect();
        (jobs, (0..self.total).map(|i| self.place(i)).collect())
    }
}

/// A spawn that cannot start: one code per process (0 for processes of
/// commands that were fine) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub errcodes: Vec<i32>,
    pub message: String,
}

/// Check every command of `request`. Warnings (ignored info keys) are
/// appended to `warnings` whether or not the spawn can start.
pub fn plan(
    base: &SpawnBase,
    request: &SpawnRequest,
    warnings: &mut Vec<String>,
) -> Result<Plan, Refusal> {
    let total = request.total_procs();
    if request.commands.is_empty() || total == 0 {
        return Err(Refusal {
            errcodes: Vec::new(),
            message: "the spawn asks for no processes".to_string(),
        });
    }
    if total > MAX_SPAWN_PROCS {
        return Err(Refusal {
            errcodes: Vec::new(),
            message: format!(
                "the spawn asks for {total} processes; rivetrun starts at most \
                 {MAX_SPAWN_PROCS} per spawn"
            ),
        });
    }
    let mut ignored = BTreeSet::new();
    let mut commands = Vec::new();
    let mut errcodes = Vec::new();
    let mut reasons = Vec::new();
    for (i, cmd) in request.commands.iter().enumerate() {
        let mut info = CommandInfo::default();
        for (key, value) in &cmd.info {
            match key.as_str() {
                "wdir" => info.wdir = Some(value.as_str()),
                "path" => info.path = Some(value.as_str()),
                "host" => info.host = Some(value.as_str()),
                other => {
                    ignored.insert(other.to_string());
                }
            }
        }
        let n = cmd.nprocs as usize;
        match check_command(base, &cmd.execname, &info) {
            Ok((program, wdir)) => {
                errcodes.extend(std::iter::repeat_n(0, n));
                commands.push(PlannedCommand {
                    program,
                    argv0: cmd.execname.clone().into(),
                    args: cmd.args.iter().map(OsString::from).collect(),
                    wdir,
                    nprocs: cmd.nprocs,
                });
            }
            Err((code, why)) => {
                errcodes.extend(std::iter::repeat_n(code, n));
                let who = if request.commands.len() > 1 {
                    format!("command {i} ({})", cmd.execname)
                } else {
                    cmd.execname.clone()
                };
                reasons.push(format!("{who}: {why}"));
            }
        }
    }
    for key in ignored {
        warnings.push(format!(
            "spawn info key '{key}' is not supported by rivetrun; ignored"
        ));
    }
    if !reasons.is_empty() {
        return Err(Refusal {
            errcodes,
            message: reasons.join("; "),
        });
    }
    Ok(Plan {
        commands,
        total: total as u32,
    })
}

#[derive(Default)]
struct CommandInfo<'a> {
    wdir: Option<&'a str>,
    path: Option<&'a str>,
    host: Option<&'a str>,
}

/// The program and working directory of one command, or (error code, why).
fn check_command(
    base: &SpawnBase,
    execname: &str,
    info: &CommandInfo,
) -> Result<(PathBuf, PathBuf), (i32, String)> {
    if let Some(host) = info.host {
        if !is_this_host(host, &base.hostname) {
            return Err((
                CODE_BAD_REQUEST,
                format!("host {host}: rivetrun starts processes on this machine only"),
            ));
        }
    }
    let wdir = match info.wdir {
        Some(dir) => base.wdir.join(dir),
        None => base.wdir.clone(),
    };
    if !wdir.is_dir() {
        let err = LaunchError::BadWdir(wdir.display().to_string());
        return Err((err.exit_code(), err.to_string()));
    }
    // A relative path is relative to where the process will run, as for
    // execvp after chdir (what Hydra does).
    let exec = Path::new(execname);
    let named = if execname.contains('/') && exec.is_relative() {
        wdir.join(exec)
    } else {
        exec.to_path_buf()
    };
    let search = match info.path {
        Some(p) => Some(OsString::from(p)),
        None => base.search_path.clone(),
    };
    let program = launch::resolve_program(named.as_os_str(), search.as_deref())
        .map_err(|err| (err.exit_code(), err.to_string()))?;
    // A relative PATH entry was found relative to rivetrun's directory.
    let program = if program.is_relative() {
        std::env::current_dir()
            .map_err(|e| (1, format!("cannot read rivetrun's directory: {e}")))?
            .join(program)
    } else {
        program
    };
    Ok((program, wdir))
}

/// True for names of this machine: its hostname (or the part before the
/// first dot), and loopback names and addresses.
pub fn is_this_host(host: &str, hostname: &str) -> bool {
    let host = host.trim().trim_end_matches('.');
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return false;
    }
    let short = |h: &str| h.split('.').next().unwrap_or(h).to_ascii_lowercase();
    if host.eq_ignore_ascii_case(hostname)
        || (!hostname.is_empty() && host.eq_ignore_ascii_case(&short(hostname)))
        || host.eq_ignore_ascii_case("localhost")
        || host.eq_ignore_ascii_case("localhost.localdomain")
    {
        return true;
    }
    host.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rivet_pmi::wire::SpawnCommand;

    fn base() -> SpawnBase {
        SpawnBase {
            env: Vec::new(),
            clear_env: false,
            wdir: std::env::temp_dir(),
            search_path: Some("/nonexistent:/bin:/usr/bin".into()),
            attributes: Vec::new(),
            kvsname: "rivet_1_0".into(),
            universe_size: 2,
            hostname: "node7.example.org".into(),
        }
    }

    fn cmd(exec: &str, n: u32, info: &[(&str, &str)]) -> SpawnCommand {
        SpawnCommand {
            execname: exec.into(),
            nprocs: n,
            args: vec!["a b".into()],
            info: info
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn request(commands: Vec<SpawnCommand>) -> SpawnRequest {
        SpawnRequest {
            commands,
            preput: Vec::new(),
        }
    }

    #[test]
    fn a_good_request_is_planned_with_appnums() {
        let mut warnings = Vec::new();
        let req = request(vec![
            cmd("sh", 2, &[("host", "localhost"), ("wdir", "/")]),
            cmd(
                "/bin/sh",
                1,
                &[("path", "/bin"), ("soft", "1:4"), ("arch", "x")],
            ),
        ]);
        let plan = plan(&base(), &req, &mut warnings).unwrap();
        assert_eq!(plan.total, 3);
        assert_eq!(plan.appnum_of_rank(), vec![0, 0, 1]);
        assert!(plan.commands[0].program.ends_with("sh"));
        assert!(plan.commands[0].program.is_absolute());
        assert_eq!(plan.commands[0].wdir, PathBuf::from("/"));
        assert_eq!(plan.commands[0].argv0, OsString::from("sh"));
        assert_eq!(plan.commands[1].wdir, std::env::temp_dir());
        assert_eq!(
            warnings,
            vec![
                "spawn info key 'arch' is not supported by rivetrun; ignored",
                "spawn info key 'soft' is not supported by rivetrun; ignored",
            ]
        );
    }

    #[test]
    fn bad_commands_get_codes_per_process() {
        let mut warnings = Vec::new();
        let req = request(vec![
            cmd("sh", 2, &[]),
            cmd("no-such-program-rivet", 1, &[]),
            cmd("sh", 1, &[("host", "elsewhere")]),
            cmd("sh", 1, &[("wdir", "/nonexistent-rivet-dir")]),
            cmd("/etc/passwd", 1, &[]),
            cmd("sh", 1, &[("path", "/nonexistent")]),
        ]);
        let refusal = plan(&base(), &req, &mut warnings).unwrap_err();
        assert_eq!(refusal.errcodes, vec![0, 0, 127, 2, 2, 126, 127]);
        for part in [
            "command 1 (no-such-program-rivet): cannot execute 'no-such-program-rivet': not found",
            "host elsewhere: rivetrun starts processes on this machine only",
            "'/nonexistent-rivet-dir' does not exist or is not a directory",
            "is not executable",
        ] {
            assert!(refusal.message.contains(part), "{}", refusal.message);
        }
        assert!(warnings.is_empty());
        // Nothing to start, or too much.
        assert!(plan(&base(), &request(vec![]), &mut warnings).is_err());
        assert!(plan(&base(), &request(vec![cmd("sh", 0, &[])]), &mut warnings).is_err());
        let huge = request(vec![cmd("sh", 5000, &[])]);
        assert!(plan(&base(), &huge, &mut warnings)
            .unwrap_err()
            .message
            .contains("at most 4096"));
    }

    #[test]
    fn relative_programs_are_relative_to_the_working_directory() {
        let mut warnings = Vec::new();
        let req = request(vec![cmd("./sh", 1, &[("wdir", "/bin")])]);
        let plan = plan(&base(), &req, &mut warnings).unwrap();
        assert_eq!(plan.commands[0].program, PathBuf::from("/bin/./sh"));
        let req = request(vec![cmd("./sh", 1, &[("wdir", "/")])]);
        assert!(super::plan(&base(), &req, &mut warnings).is_err());
    }

    #[test]
    fn only_this_machine_is_a_host() {
        for host in [
            "localhost",
            "LOCALHOST",
            "127.0.0.1",
            "127.0.1.1",
            "::1",
            "[::1]",
            "node7",
            "node7.example.org",
            "Node7.example.org.",
        ] {
            assert!(is_this_host(host, "node7.example.org"), "{host}");
        }
        for host in ["node8", "10.0.0.1", "", "node7.other.org", "example.org"] {
            assert!(!is_this_host(host, "node7.example.org"), "{host}");
        }
    }
}
