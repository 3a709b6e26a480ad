//! `RIVET_OFI_*` settings. Also buildable in code (pub fields, `Default`)
//! so tests pick a provider without touching the process environment.

use std::io;
use std::time::Duration;

use crate::auth::{JobKey, JOB_SECRET_ENV};
use crate::size::parse_duration;
use crate::{parse_size, NetmodError};

use super::wire::MAX_PAYLOAD;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfiConfig {
    /// `RIVET_OFI_PROVIDER`: a provider name as `fi_info` prints it
    /// (`tcp;ofi_rxm`, `shm`, `verbs;ofi_rxm`), matched exactly. `None`:
    /// libfabric's choice, which honours its own `FI_PROVIDER`.
    pub provider: Option<String>,
    /// `RIVET_OFI_DOMAIN`: a domain name (`lo`, `eth0`, `mlx5_0`); `None`:
    /// the provider's first.
    pub domain: Option<String>,
    /// `Limits::eager_max`; also the largest payload sent inline, in one
    /// message (larger ones go as a header and a payload message). `None`:
    /// the provider's default (`default_eager_max`).
    pub eager_max: Option<usize>,
    /// `Limits::max_payload`: the largest payload of one message.
    pub piece: usize,
    /// `RIVET_OFI_TIMEOUT`: how long a peer may leave us without progress
    /// (a handshake unanswered, sends refused throughout) before it counts
    /// as failed, and the longest `disconnect` waits for a receive into the
    /// engine's memory to stop. It also sets the keepalive
    /// ([`OfiConfig::keepalive_interval`]): a peer we send nothing to gets
    /// a PING every interval while we poll, so a peer that died while
    /// idle is reported failed within about two intervals and the timeout.
    /// A live peer is not failed for not polling while we have nothing
    /// for it; while we do, it has the timeout to take it.
    pub timeout: Duration,
    /// `RIVET_OFI_RMA=0`: do not ask for one-sided reads.
    pub rma: bool,
    /// Register every local buffer and pass its descriptor, as providers
    /// with `FI_MR_LOCAL` require, even where the provider does not (tests
    /// that path on providers without the requirement).
    pub force_mr_local: bool,
    /// A domain taken before the provider's first where the provider
    /// offers it, without requiring it (`domain` wins): `lo` for a job on
    /// one node, so that a tcp provider does not pick whatever interface
    /// comes first (a container bridge that may vanish).
    pub prefer_domain: Option<String>,
    /// The job secret (`RIVET_JOB_SECRET`): rank HELLOs within the job
    /// prove it (`wire::hello_mac`); without it nothing is checked.
    pub job_key: Option<JobKey>,
}

impl Default for OfiConfig {
    fn default() -> OfiConfig {
        OfiConfig {
            provider: None,
            domain: None,
            eager_max: None,
            piece: 1 << 20,
            timeout: Duration::from_secs(60),
            rma: true,
            force_mr_local: false,
            prefer_domain: None,
            job_key: None,
        }
    }
}

/// The eager limit where nothing better is known: a 64 KiB copy costs
/// less than a rendezvous round trip over a network.
pub(crate) const LARGE_EAGER_MAX: usize = 64 * 1024;

/// The eager limit for `provider` when none is set. libfabric's shm
/// provider reads rendezvous data with one copy (CMA), while an eager
/// message is copied twice (into the send copy, out of a receive buffer):
/// from 16 KiB up rendezvous is faster there (BENCHMARKS.md, ofi).
pub fn default_eager_max(provider: &str) -> usize {
    match provider {
        "shm" | "sm2" => 8 * 1024,
        _ => LARGE_EAGER_MAX,
    }
}

fn invalid(name: &str, why: String) -> NetmodError {
    NetmodError::Io {
        what: name.to_string(),
        source: io::Error::new(io::ErrorKind::InvalidInput, why),
    }
}

impl OfiConfig {
    /// How long a connection goes without sends before the keepalive
    /// PINGs it: a quarter of the timeout, at least 100 ms, at most 5 s.
    pub fn keepalive_interval(&self) -> Duration {
        (self.timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(5))
    }

    /// From the process environment.
    pub fn from_env() -> Result<OfiConfig, NetmodError> {
        OfiConfig::from_vars(rivet_settings::var)
    }

    /// From any variable lookup (the environment, a test's map).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<OfiConfig, NetmodError> {
        let mut c = OfiConfig::default();
        let set = |k: &str| var(k).filter(|v| !v.trim().is_empty());
        c.provider = set("RIVET_OFI_PROVIDER").map(|v| v.trim().to_string());
        c.domain = set("RIVET_OFI_DOMAIN").map(|v| v.trim().to_string());
        // The general eager limit applies where the ofi one is not set.
        let eager = set("RIVET_OFI_EAGER_MAX")
            .map(|v| ("RIVET_OFI_EAGER_MAX", v))
            .or_else(|| set("RIVET_EAGER_MAX").map(|v| ("RIVET_EAGER_MAX", v)));
        if let Some((name, v)) = eager {
            c.eager_max = Some(parse_size(&v).map_err(|why| invalid(name, why))?);
        }
        if let Some(v) = set("RIVET_OFI_PIECE") {
            c.piece = parse_size(&v).map_err(|why| invalid("RIVET_OFI_PIECE", why))?;
        }
        if let Some(v) = set("RIVET_OFI_TIMEOUT") {
            c.timeout = parse_duration(&v).map_err(|why| invalid("RIVET_OFI_TIMEOUT", why))?;
        }
        if let Some(v) = set("RIVET_OFI_RMA") {
            c.rma = match v.trim() {
                "0" => false,
                "1" => true,
                other => {
                    return Err(invalid(
                        "RIVET_OFI_RMA",
                        format!("unknown value {other:?}; use 0 or 1"),
                    ))
                }
            };
        }
        if let Some(v) = set(JOB_SECRET_ENV) {
            c.job_key = Some(JobKey::from_hex(&v).map_err(|why| invalid(JOB_SECRET_ENV, why))?);
        }
        c.validate()?;
        Ok(c)
    }

    /// The sizes are consistent with each other and the wire's limits.
    pub fn validate(&self) -> Result<(), NetmodError> {
        if self.piece == 0 || self.piece > MAX_PAYLOAD {
            return Err(invalid(
                "RIVET_OFI_PIECE",
                format!("{} is out of range 1..=1GiB", self.piece),
            ));
        }
        let eager_max = self.eager_max.unwrap_or(LARGE_EAGER_MAX);
        if eager_max > self.piece || eager_max > 16 << 20 {
            return Err(invalid(
                "RIVET_OFI_EAGER_MAX",
                format!(
                    "{} exceeds RIVET_OFI_PIECE ({}) or 16MiB",
                    eager_max, self.piece
                ),
            ));
        }
        if self.timeout.is_zero() {
            return Err(invalid("RIVET_OFI_TIMEOUT", "must not be zero".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn env_values() {
        assert_eq!(
            OfiConfig::from_vars(vars(&[])).unwrap(),
            OfiConfig::default()
        );
        let c = OfiConfig::from_vars(vars(&[
            ("RIVET_OFI_PROVIDER", " tcp;ofi_rxm "),
            ("RIVET_OFI_DOMAIN", "lo"),
            ("RIVET_OFI_EAGER_MAX", "8K"),
            ("RIVET_OFI_PIECE", "2MiB"),
            ("RIVET_OFI_TIMEOUT", "1500ms"),
            ("RIVET_OFI_RMA", "0"),
        ]))
        .unwrap();
        assert_eq!(c.provider.as_deref(), Some("tcp;ofi_rxm"));
        assert_eq!(c.domain.as_deref(), Some("lo"));
        assert_eq!((c.eager_max, c.piece), (Some(8192), 2 << 20));
        assert_eq!(c.timeout, Duration::from_millis(1500));
        assert!(!c.rma);
        assert_eq!(c.keepalive_interval(), Duration::from_millis(375));
        assert_eq!(
            OfiConfig::default().keepalive_interval(),
            Duration::from_secs(5)
        );
        let short = OfiConfig {
            timeout: Duration::from_millis(200),
            ..OfiConfig::default()
        };
        assert_eq!(short.keepalive_interval(), Duration::from_millis(100));
        let general = vars(&[("RIVET_EAGER_MAX", "1K"), ("RIVET_OFI_TIMEOUT", "3s")]);
        let c = OfiConfig::from_vars(general).unwrap();
        assert_eq!(
            (c.eager_max, c.timeout),
            (Some(1024), Duration::from_secs(3))
        );
        let both = vars(&[("RIVET_EAGER_MAX", "1K"), ("RIVET_OFI_EAGER_MAX", "2K")]);
        assert_eq!(OfiConfig::from_vars(both).unwrap().eager_max, Some(2048));
        for bad in [
            &[("RIVET_OFI_PIECE", "lots")][..],
            &[("RIVET_OFI_PIECE", "2G")],
            &[("RIVET_OFI_EAGER_MAX", "4M")],
            &[("RIVET_OFI_TIMEOUT", "soon")],
            &[("RIVET_OFI_TIMEOUT", "0")],
            &[("RIVET_OFI_RMA", "yes")],
        ] {
            let e = OfiConfig::from_vars(vars(bad)).unwrap_err().to_string();
            assert!(e.contains(bad[0].0), "{e}");
        }
    }
}
