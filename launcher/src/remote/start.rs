//! Starting one proxy per host: `--launcher ssh|rsh|fork|manual|slurm` and
//! `--launcher-exec PROG` (run as `PROG HOST COMMAND` where ssh would be).
//! ssh, rsh and `--launcher-exec` get the command as one shell-quoted word
//! (the remote shell parses it again), so a wrapper written for Hydra's
//! `-launcher-exec` serves rivetrun too. A host that is
//! this machine (its name, `localhost`, a loopback address) is forked
//! directly by ssh/rsh, as Hydra does. The job secret goes on the proxy's
//! stdin, never on a command line (`manual` prints it as a variable).

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

/// The argv that starts the proxy on `host` (None for `manual`).
pub fn argv(
    kind: Kind,
    exec: Option<&str>,
    host: &str,
    proxy: &[String],
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
        Kind::Ssh => words(vec!["ssh".into(), "-x".into(), host.into(), joined()]),
        Kind::Rsh => words(vec!["rsh".into(), host.into(), joined()]),
        Kind::Slurm => return Err("slurm starts every proxy with one srun".into()),
    })
}

/// Start one proxy (or `srun`, for all): its own process group (a
/// terminal's Ctrl-C reaches rivetrun alone), killed if rivetrun dies, the
/// secret on its stdin, or with `in_env` in its environment (srun passes
/// that on to the proxies, and gives them no stdin).
pub fn spawn(argv: &[OsString], secret: &str, in_env: bool) -> std::io::Result<Child> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).process_group(0);
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
        assert_eq!(
            s(argv(Kind::Ssh, None, "n1", &p).unwrap()),
            vec!["ssh", "-x", "n1", "/bin/rivetrun --proxy 'a b'"]
        );
        assert_eq!(
            s(argv(Kind::Rsh, None, "n1", &p).unwrap()),
            vec!["rsh", "n1", "/bin/rivetrun --proxy 'a b'"]
        );
        assert_eq!(
            s(argv(Kind::Ssh, Some("/x/nsexec"), "n1", &p).unwrap()),
            vec!["/x/nsexec", "n1", "/bin/rivetrun --proxy 'a b'"]
        );
        assert_eq!(s(argv(Kind::Fork, None, "n1", &p).unwrap()), p);
        assert_eq!(s(argv(Kind::Ssh, None, "localhost", &p).unwrap()), p);
        assert!(argv(Kind::Manual, None, "n1", &p).unwrap().is_none());
        assert!(argv(Kind::Slurm, None, "n1", &p).is_err());
        assert!("pbs".parse::<Kind>().is_err());
    }
}
