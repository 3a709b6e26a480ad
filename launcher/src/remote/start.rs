//! Starting one proxy per host: `--launcher ssh|rsh|fork|manual|slurm` and
//! `--launcher-exec PROG` (run as `PROG HOST COMMAND` where ssh would be).
//! ssh, rsh and `--launcher-exec` get the command as one shell-quoted word
//! (the remote shell parses it again), so a wrapper written for Hydra's
//! `-launcher-exec` serves rivetrun too. A host that is
//! this machine (its name, `localhost`, a loopback address) is forked
//! directly by ssh/rsh, as Hydra does. The job secret goes on the proxy's
//! stdin, never on a command line (`manual` prints it as a variable).
//! ssh runs in batch mode with a connect timeout: a host without the key
//! or down fails the job at once (ssh's message, exit 255), never waits at
//! a password prompt. `RIVET_LAUNCHER_EXTRA_ARGS` (Hydra's
//! `HYDRA_LAUNCHER_EXTRA_ARGS`) adds words before those options, e.g.
//! `-F FILE` or `-p PORT`, so they win.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

/// How proxies are started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Ssh,
    Rsh,
    Fork,
    Manual,
    Slurm,
}

impl std::str::FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Kind, String> {
        Ok(match s {
            "ssh" => Kind::Ssh,
            "rsh" => Kind::Rsh,
            "fork" => Kind::Fork,
            "manual" => Kind::Manual,
            "slurm" => Kind::Slurm,
            _ => {
                return Err(format!(
                    "unknown launcher {s:?}; one of ssh, rsh, slurm, fork, manual"
                ))
            }
        })
    }
}

/// Quote a word for a POSIX shell.
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,@%+".contains(&b))
    {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// Whether `host` names this machine.
pub fn is_local(host: &str) -> bool {
    host == "localhost"
        || host == crate::info::hostname()
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The options rivetrun gives ssh after the user's extra words: no
/// prompt for a password or a host key, a bounded wait for an answer.
pub const SSH_OPTIONS: [&str; 4] = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10"];

/// `RIVET_LAUNCHER_EXTRA_ARGS`, split on white space.
pub fn extra_args() -> Vec<String> {
    rivet_settings::var("RIVET_LAUNCHER_EXTRA_ARGS")
        .map(|v| v.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// What to add to a launcher's failure: ssh and rsh exit 255 when they
/// cannot reach or log in to the host (their own message is above).
pub fn failure_hint(kind: Kind, exec: Option<&str>, code: Option<i32>) -> &'static str {
    match (kind, exec, code) {
        (Kind::Ssh, None, Some(255)) => {
            "; ssh could not connect or log in (its message is above; rivetrun runs it \
             with BatchMode=yes, so a host needs a key that works without a password)"
        }
        (Kind::Rsh, None, Some(255)) => "; rsh could not reach the host (its message is above)",
        _ => "",
    }
}

/// The argv that starts the proxy on `host` (None for `manual`); `extra`
/// goes to ssh and rsh before the host.
pub fn argv(
    kind: Kind,
    exec: Option<&str>,
    host: &str,
    proxy: &[String],
    extra: &[String],
) -> Result<Option<Vec<OsString>>, String> {
    let joined = || {
        proxy
            .iter()
            .map(|w| shell_quote(w))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let words = |v: Vec<String>| Some(v.into_iter().map(OsString::from).collect());
    if let Some(prog) = exec {
        if kind == Kind::Ssh || kind == Kind::Rsh {
            return Ok(words(vec![prog.to_string(), host.to_string(), joined()]));
        }
    }
    Ok(match kind {
        Kind::Manual => None,
        Kind::Fork => words(proxy.to_vec()),
        Kind::Ssh | Kind::Rsh if is_local(host) => words(proxy.to_vec()),
        Kind::Ssh => {
            let mut v = vec!["ssh".to_string(), "-x".into()];
            v.extend(extra.iter().cloned());
            v.extend(SSH_OPTIONS.iter().map(|o| o.to_string()));
            v.extend([host.to_string(), joined()]);
            words(v)
        }
        Kind::Rsh => {
            let mut v = vec!["rsh".to_string()];
            v.extend(extra.iter().cloned());
            v.extend([host.to_string(), joined()]);
            words(v)
        }
        Kind::Slurm => return Err("slurm starts every proxy with one srun".into()),
    })
}

/// Start one proxy (or `srun`, for all): in a session of its own, so also
/// its own process group (a terminal's Ctrl-C reaches rivetrun alone) and
/// its own scheduling group (a proxy started here leads it and raises it
/// over its ranks', `proxy::session`; Hydra also starts each launcher
/// command in a session of its own), killed if rivetrun dies, the secret
/// on its stdin, or with `in_env` in its environment (srun passes that on
/// to the proxies, and gives them no stdin).
pub fn spawn(argv: &[OsString], secret: &str, in_env: bool) -> std::io::Result<Child> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    crate::own_env::keep_out_of(&mut cmd);
    // SAFETY: the closure runs between fork and exec and makes one
    // async-signal-safe system call, touching no memory.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    if in_env {
        cmd.env(crate::proxy::SECRET_ENV, secret)
            .stdin(Stdio::null());
    } else {
        cmd.stdin(Stdio::piped());
    }
    crate::launch::die_with_launcher(&mut cmd);
    let mut child = cmd.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        // A proxy that dies before reading it is reported by its exit.
        let _ = stdin.write_all(format!("{secret}\n").as_bytes());
    }
    Ok(child)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: Option<Vec<OsString>>) -> Vec<String> {
        v.unwrap()
            .into_iter()
            .map(|w| w.into_string().unwrap())
            .collect()
    }

    #[test]
    fn quoting_survives_a_shell() {
        assert_eq!(shell_quote("/usr/bin/x"), "/usr/bin/x");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn each_launcher_builds_its_command() {
        let p = vec!["/bin/rivetrun".to_string(), "--proxy".into(), "a b".into()];
        let none: &[String] = &[];
        let cmd = "/bin/rivetrun --proxy 'a b'";
        let ssh = [
            "ssh",
            "-x",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
        ];
        let mut want: Vec<&str> = ssh.to_vec();
        want.extend(["n1", cmd]);
        assert_eq!(s(argv(Kind::Ssh, None, "n1", &p, none).unwrap()), want);
        // The user's words come first (ssh keeps the first value of an option).
        let extra = vec!["-F".to_string(), "/x/cfg".into()];
        let mut want = vec!["ssh", "-x", "-F", "/x/cfg"];
        want.extend(&ssh[2..]);
        want.extend(["n1", cmd]);
        assert_eq!(s(argv(Kind::Ssh, None, "n1", &p, &extra).unwrap()), want);
        assert_eq!(
            s(argv(Kind::Rsh, None, "n1", &p, none).unwrap()),
            vec!["rsh", "n1", cmd]
        );
        assert_eq!(
            s(argv(Kind::Ssh, Some("/x/nsexec"), "n1", &p, &extra).unwrap()),
            vec!["/x/nsexec", "n1", cmd]
        );
        assert_eq!(s(argv(Kind::Fork, None, "n1", &p, none).unwrap()), p);
        assert_eq!(s(argv(Kind::Ssh, None, "localhost", &p, none).unwrap()), p);
        assert!(argv(Kind::Manual, None, "n1", &p, none).unwrap().is_none());
        assert!(argv(Kind::Slurm, None, "n1", &p, none).is_err());
        assert!(failure_hint(Kind::Ssh, None, Some(255)).contains("BatchMode"));
        assert_eq!(failure_hint(Kind::Ssh, Some("/x/nsexec"), Some(255)), "");
        assert_eq!(failure_hint(Kind::Ssh, None, Some(1)), "");
        assert!("pbs".parse::<Kind>().is_err());
    }
}
