//! How a client finds its process manager: explicit settings, or read from
//! the environment the way MPICH's client does.
//!
//! Order (MPICH's `PMIU_get_pmi_fd`): `PMI_FD` wins; else `PMI_PORT`
//! (`host:port`, with `PMI_ID` for the initack handshake); else the process
//! is a singleton — unless a PMIx launcher started it (`PMIX_NAMESPACE` and
//! `PMIX_RANK`): then the PMIx client (`pmix.rs`). `RIVET_PMI=pmi2` speaks PMI-2 over
//! `PMI_FD`/`PMI_PORT` (`pmi2.rs`; `auto` and `pmi1` speak PMI-1 there), and
//! is an error without them. `RIVET_PMI=pmi1` refuses
//! PMIx (a PMIx-only launch is then an error rather than a silent size-1
//! job); `RIVET_PMI=pmix` requires it. Tests build a [`ClientConfig`]
//! directly instead of touching the process environment.

use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;

use crate::error::{Error, Result};

/// Where the PMI server is.
#[derive(Debug)]
pub enum Transport {
    /// `PMI_FD`: an inherited, connected socket. Rank and size come from
    /// `PMI_RANK`/`PMI_SIZE` (Hydra sets both). The client takes ownership
    /// of the descriptor.
    Fd { fd: RawFd, rank: u32, size: u32 },
    /// An already connected stream (embedding, tests); like `Fd`.
    Stream {
        stream: UnixStream,
        rank: u32,
        size: u32,
    },
    /// `PMI_PORT=host:port`. With `pmiid` (`PMI_ID`) the client sends
    /// `cmd=initack pmiid=N` and learns rank and size from the reply;
    /// without it, `rank`/`size` are used as given.
    Port {
        addr: String,
        pmiid: Option<i32>,
        rank: u32,
        size: u32,
    },
    /// A PMIx server (`PMIX_NAMESPACE`, `PMIX_RANK`), through OpenPMIx.
    Pmix,
    /// No process manager: size 1, rank 0, local KVS.
    Singleton,
}

/// Everything [`crate::Client::connect`] needs.
#[derive(Debug)]
pub struct ClientConfig {
    pub transport: Transport,
    /// `PMI_SPAWNED`: this process was started by a spawn.
    pub spawned: bool,
    /// Speak PMI-2 over `Fd`, `Stream` or `Port` (`RIVET_PMI=pmi2`).
    pub pmi2: bool,
    /// `PMI_JOBID` (Slurm sets it), sent in PMI-2's `fullinit`.
    pub jobid: Option<String>,
}

/// Variables that mean "a PMIx launcher started us" (MPICH checks these).
const PMIX_VARS: [&str; 4] = [
    "PMIX_NAMESPACE",
    "PMIX_RANK",
    "PMIX_VERSION",
    "PRTE_LAUNCHED",
];

fn parse_var<T: std::str::FromStr>(var: &'static str, value: &str, what: &str) -> Result<T> {
    value.trim().parse().map_err(|_| Error::Env {
        var,
        value: value.to_string(),
        reason: format!("expected {what}"),
    })
}

impl ClientConfig {
    /// A singleton configuration.
    pub fn singleton() -> ClientConfig {
        ClientConfig {
            transport: Transport::Singleton,
            spawned: false,
            pmi2: false,
            jobid: None,
        }
    }

    /// Read the process environment.
    pub fn from_env() -> Result<ClientConfig> {
        ClientConfig::from_vars(|k| std::env::var(k).ok())
    }

    /// Read settings through `var` (a lookup of environment variables), so
    /// the rules can be tested without touching the process environment.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<ClientConfig> {
        let spawned = match var("PMI_SPAWNED") {
            Some(v) => parse_var::<i64>("PMI_SPAWNED", &v, "an integer (0 or 1)")? != 0,
            None => false,
        };
        let rank_size = || -> Result<(u32, u32)> {
            let rank = match var("PMI_RANK") {
                Some(v) => parse_var("PMI_RANK", &v, "a rank (non-negative integer)")?,
                None => 0,
            };
            let size = match var("PMI_SIZE") {
                Some(v) => parse_var("PMI_SIZE", &v, "a job size (positive integer)")?,
                None => 1,
            };
            if size == 0 || rank >= size {
                return Err(Error::Env {
                    var: "PMI_RANK",
                    value: rank.to_string(),
                    reason: format!("rank must be below PMI_SIZE={size} (and size at least 1)"),
                });
            }
            Ok((rank, size))
        };
        let choice = var("RIVET_PMI").unwrap_or_default();
        let pmix_env = var("PMIX_NAMESPACE").is_some() && var("PMIX_RANK").is_some();
        let jobid = var("PMI_JOBID");
        match choice.as_str() {
            "" | "auto" | "pmi1" | "pmi2" => {}
            "pmix" if pmix_env => {
                return Ok(ClientConfig {
                    transport: Transport::Pmix,
                    spawned,
                    pmi2: false,
                    jobid,
                })
            }
            "pmix" => {
                return Err(Error::Env {
                    var: "RIVET_PMI",
                    value: choice,
                    reason: "pmix asked for, but PMIX_NAMESPACE and PMIX_RANK are not set: \
                             start the job with a PMIx launcher (mpirun, prterun, srun --mpi=pmix)"
                        .to_string(),
                })
            }
            _ => {
                return Err(Error::Env {
                    var: "RIVET_PMI",
                    value: choice,
                    reason: "expected auto, pmi1, pmi2 or pmix".to_string(),
                })
            }
        }
        let transport = if let Some(v) = var("PMI_FD") {
            let fd: RawFd = parse_var("PMI_FD", &v, "a file descriptor number")?;
            if fd < 0 {
                return Err(Error::Env {
                    var: "PMI_FD",
                    value: v,
                    reason: "a file descriptor cannot be negative".to_string(),
                });
            }
            let (rank, size) = rank_size()?;
            Transport::Fd { fd, rank, size }
        } else if let Some(addr) = var("PMI_PORT") {
            match addr.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
                _ => {
                    return Err(Error::Env {
                        var: "PMI_PORT",
                        value: addr,
                        reason: "expected host:port".to_string(),
                    })
                }
            }
            let pmiid = match var("PMI_ID") {
                Some(v) => Some(parse_var("PMI_ID", &v, "an integer id")?),
                None => None,
            };
            let (rank, size) = if pmiid.is_some() {
                (0, 1)
            } else {
                rank_size()?
            };
            Transport::Port {
                addr,
                pmiid,
                rank,
                size,
            }
        } else if choice == "pmi2" {
            return Err(Error::Env {
                var: "RIVET_PMI",
                value: choice,
                reason: "pmi2 asked for, but neither PMI_FD nor PMI_PORT is set: start the job \
                         with rivetrun or srun --mpi=pmi2"
                    .to_string(),
            });
        } else if pmix_env && choice != "pmi1" {
            Transport::Pmix
        } else if let Some(v) = PMIX_VARS.into_iter().find(|v| var(v).is_some()) {
            return Err(Error::PmixLauncher { var: v });
        } else {
            Transport::Singleton
        };
        Ok(ClientConfig {
            transport,
            spawned,
            pmi2: choice == "pmi2",
            jobid,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> Result<ClientConfig> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ClientConfig::from_vars(|k| map.get(k).cloned())
    }

    #[test]
    fn environment_rules() {
        assert!(matches!(cfg(&[]).unwrap().transport, Transport::Singleton));
        let c = cfg(&[
            ("PMI_FD", "5"),
            ("PMI_RANK", "2"),
            ("PMI_SIZE", "4"),
            ("PMI_PORT", "h:1"),
        ])
        .unwrap();
        assert!(matches!(
            c.transport,
            Transport::Fd {
                fd: 5,
                rank: 2,
                size: 4
            }
        ));
        let c = cfg(&[
            ("PMI_PORT", "node1:4242"),
            ("PMI_ID", "3"),
            ("PMI_SPAWNED", "1"),
        ])
        .unwrap();
        assert!(c.spawned);
        match c.transport {
            Transport::Port { addr, pmiid, .. } => {
                assert_eq!(addr, "node1:4242");
                assert_eq!(pmiid, Some(3));
            }
            other => panic!("{other:?}"),
        }
        let c = cfg(&[
            ("PMI_PORT", "[::1]:80"),
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "2"),
        ])
        .unwrap();
        assert!(matches!(
            c.transport,
            Transport::Port {
                pmiid: None,
                rank: 1,
                size: 2,
                ..
            }
        ));
    }

    #[test]
    fn environment_errors() {
        for vars in [vec![("PMIX_NAMESPACE", "x")], vec![("PMIX_RANK", "0")]] {
            assert!(
                matches!(cfg(&vars), Err(Error::PmixLauncher { .. })),
                "{vars:?}"
            );
        }
        for vars in [
            vec![("PMI_FD", "x")],
            vec![("PMI_FD", "-1")],
            vec![("PMI_FD", "3"), ("PMI_RANK", "4"), ("PMI_SIZE", "4")],
            vec![("PMI_FD", "3"), ("PMI_SIZE", "0")],
            vec![("PMI_PORT", "nohost")],
            vec![("PMI_PORT", "h:99999")],
            vec![("PMI_PORT", "h:1"), ("PMI_ID", "one")],
            vec![("PMI_SPAWNED", "yes")],
        ] {
            assert!(matches!(cfg(&vars), Err(Error::Env { .. })), "{vars:?}");
        }
        // PMI variables win over PMIx ones.
        assert!(cfg(&[("PMIX_RANK", "0"), ("PMI_FD", "3")]).is_ok());
        for vars in [
            vec![("RIVET_PMI", "pmix")],
            vec![("RIVET_PMI", "pmi3")],
            vec![("RIVET_PMI", "pmix"), ("PMIX_RANK", "0")],
        ] {
            assert!(matches!(cfg(&vars), Err(Error::Env { .. })), "{vars:?}");
        }
        let pmi1 = [
            ("RIVET_PMI", "pmi1"),
            ("PMIX_NAMESPACE", "x"),
            ("PMIX_RANK", "0"),
        ];
        assert!(matches!(cfg(&pmi1), Err(Error::PmixLauncher { .. })));
    }

    #[test]
    fn a_pmix_launch_is_served_by_the_pmix_client() {
        let pmix = [("PMIX_NAMESPACE", "ns"), ("PMIX_RANK", "1")];
        assert!(matches!(cfg(&pmix).unwrap().transport, Transport::Pmix));
        let forced = [
            ("RIVET_PMI", "pmix"),
            ("PMIX_NAMESPACE", "ns"),
            ("PMIX_RANK", "1"),
            ("PMI_FD", "3"),
        ];
        assert!(matches!(cfg(&forced).unwrap().transport, Transport::Pmix));
        let auto = [
            ("RIVET_PMI", "auto"),
            ("PMIX_NAMESPACE", "ns"),
            ("PMIX_RANK", "1"),
        ];
        assert!(matches!(cfg(&auto).unwrap().transport, Transport::Pmix));
    }
}
