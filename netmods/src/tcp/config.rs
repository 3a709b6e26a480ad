//! `RIVET_TCP_*` settings. Also buildable in code (pub fields, `Default`)
//! so tests choose a backend and an interface without touching the
//! process environment.

use std::io;
use std::time::Duration;

use crate::auth::{JobKey, JOB_SECRET_ENV};
use crate::size::parse_duration;
use crate::{parse_size, NetmodError};

use super::wire::MAX_PAYLOAD;

/// Which I/O engine drives the sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// io_uring if the ring can be set up with the operations we need,
    /// else poll (the reason is kept for `describe`). The default: with
    /// runs told apart by placement, io_uring is at least as fast as poll
    /// at every measured point (BENCHMARKS.md, fourteenth session).
    #[default]
    Auto,
    /// io_uring or an error saying why not.
    Uring,
    /// Nonblocking sockets, epoll and plain system calls; `Auto`'s
    /// fallback.
    Poll,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpConfig {
    pub backend: Backend,
    /// Interfaces whose IPv4 addresses go in the business card; empty:
    /// every up non-loopback interface, or loopback if that is all.
    pub ifaces: Vec<String>,
    /// `Limits::eager_max`.
    pub eager_max: usize,
    /// `Limits::max_payload`: the largest payload of one message.
    pub piece: usize,
    /// Make the io_uring set-up fail, to test the fallback to poll.
    pub inject_uring_failure: bool,
    /// Only the thread that opens the netmod ever drives it (the engine
    /// sets this from its thread level: FUNNELED or lower). io_uring can
    /// then use SINGLE_ISSUER + DEFER_TASKRUN; else COOP_TASKRUN.
    pub one_thread: bool,
    /// The job secret (`RIVET_JOB_SECRET`): HELLOs within the job prove it.
    pub job_key: Option<JobKey>,
    /// `RIVET_TCP_KEEPALIVE`: how long a connection's host may stay
    /// unreachable before the connection fails (TCP keepalive probes while
    /// it is idle); `None`: the kernel's keepalive settings, probes off.
    pub keepalive: Option<Duration>,
    /// `RIVET_TCP_HANDSHAKE_TIMEOUT`: an accepted connection that has not
    /// sent its whole HELLO by then is closed.
    pub handshake_timeout: Duration,
    /// io_uring: multishot receives take bundles of provided buffers where
    /// the kernel has them (6.10+); false: one buffer per completion.
    pub uring_bundles: bool,
    /// io_uring: the busy connection is read by plain `recv` on every
    /// poll with no RECV armed (`uring/spin.rs`); false (tests): it stays
    /// watched by its multishot RECV.
    pub uring_spin: bool,
    /// io_uring: when queued bytes leave by zero-copy SEND_ZC (the kernel
    /// pins the queue's pages instead of copying them).
    pub send_zc: ZeroCopy,
    /// `RIVET_TCP_STATS=1`: when the netmod closes, one line on stderr
    /// with its system calls and (io_uring) the bytes each receive path
    /// took, to check which path bulk data takes without a profiler.
    pub stats: bool,
}

/// When io_uring's zero-copy send is used (the kernel must have SEND_ZC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZeroCopy {
    /// For a queue flight of at least `ZC_MIN` bytes to a peer on another
    /// host: on loopback the kernel copies anyway (MSG_ZEROCOPY docs), and
    /// small sends cost more in notifications than the copy.
    #[default]
    Remote,
    Off,
    /// Every queue flight of at least `ZC_MIN` bytes, loopback included:
    /// for tests of the path on one host.
    Always,
}

/// Defaults of the two timeouts (the settings table says the same).
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(60);
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl Default for TcpConfig {
    fn default() -> TcpConfig {
        TcpConfig {
            backend: Backend::Auto,
            ifaces: Vec::new(),
            eager_max: 64 * 1024,
            piece: 1 << 20,
            inject_uring_failure: false,
            one_thread: true,
            job_key: None,
            keepalive: Some(DEFAULT_KEEPALIVE),
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            uring_bundles: true,
            uring_spin: true,
            send_zc: ZeroCopy::Remote,
            stats: false,
        }
    }
}

fn invalid(name: &str, why: String) -> NetmodError {
    NetmodError::Io {
        what: name.to_string(),
        source: io::Error::new(io::ErrorKind::InvalidInput, why),
    }
}

impl TcpConfig {
    /// From the process environment.
    pub fn from_env() -> Result<TcpConfig, NetmodError> {
        TcpConfig::from_vars(rivet_settings::var)
    }

    /// From any variable lookup (the environment, a test's map).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<TcpConfig, NetmodError> {
        let mut c = TcpConfig::default();
        let set = |k: &str| var(k).filter(|v| !v.trim().is_empty());
        if let Some(v) = set("RIVET_TCP_BACKEND") {
            c.backend = match v.trim() {
                "auto" => Backend::Auto,
                "uring" => Backend::Uring,
                "poll" => Backend::Poll,
                other => {
                    return Err(invalid(
                        "RIVET_TCP_BACKEND",
                        format!("unknown value {other:?}; use auto, uring or poll"),
                    ))
                }
            };
        }
        if let Some(v) = set("RIVET_TCP_IFACE") {
            c.ifaces = v
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
        }
        // The general eager limit applies where the tcp one is not set.
        let eager = set("RIVET_TCP_EAGER_MAX")
            .map(|v| ("RIVET_TCP_EAGER_MAX", v))
            .or_else(|| set("RIVET_EAGER_MAX").map(|v| ("RIVET_EAGER_MAX", v)));
        for (field, setting) in [
            (&mut c.eager_max, eager),
            (
                &mut c.piece,
                set("RIVET_TCP_PIECE").map(|v| ("RIVET_TCP_PIECE", v)),
            ),
        ] {
            if let Some((name, v)) = setting {
                *field = parse_size(&v).map_err(|why| invalid(name, why))?;
            }
        }
        if let Some(v) = set(JOB_SECRET_ENV) {
            c.job_key = Some(JobKey::from_hex(&v).map_err(|why| invalid(JOB_SECRET_ENV, why))?);
        }
        if let Some(v) = set("RIVET_TCP_KEEPALIVE") {
            c.keepalive = match v.trim() {
                "0" | "off" => None,
                t => Some(parse_duration(t).map_err(|why| invalid("RIVET_TCP_KEEPALIVE", why))?),
            };
        }
        if let Some(v) = set("RIVET_TCP_HANDSHAKE_TIMEOUT") {
            c.handshake_timeout =
                parse_duration(&v).map_err(|why| invalid("RIVET_TCP_HANDSHAKE_TIMEOUT", why))?;
        }
        if let Some(v) = set("RIVET_TCP_URING_INJECT_FAILURE") {
            c.inject_uring_failure = v.trim() == "1";
        }
        if let Some(v) = set("RIVET_TCP_STATS") {
            c.stats = v.trim() == "1";
        }
        c.validate()?;
        Ok(c)
    }

    /// The sizes are consistent with each other and the wire's limits.
    pub fn validate(&self) -> Result<(), NetmodError> {
        if self.piece == 0 || self.piece > MAX_PAYLOAD {
            return Err(invalid(
                "RIVET_TCP_PIECE",
                format!("{} is out of range 1..=1GiB", self.piece),
            ));
        }
        if self.eager_max > self.piece {
            return Err(invalid(
                "RIVET_TCP_EAGER_MAX",
                format!(
                    "{} exceeds RIVET_TCP_PIECE ({})",
                    self.eager_max, self.piece
                ),
            ));
        }
        Ok(())
    }
}

/// A byte count: digits with an optional binary suffix K, M, G (or KiB,
/// MiB, GiB), case-insensitive.
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
        let c = TcpConfig::from_vars(vars(&[])).unwrap();
        assert_eq!(c, TcpConfig::default());
        let c = TcpConfig::from_vars(vars(&[
            ("RIVET_TCP_BACKEND", "poll"),
            ("RIVET_TCP_IFACE", "lo, eth0"),
            ("RIVET_TCP_EAGER_MAX", "8K"),
            ("RIVET_TCP_PIECE", "2MiB"),
            ("RIVET_TCP_URING_INJECT_FAILURE", "1"),
            ("RIVET_TCP_KEEPALIVE", "off"),
            ("RIVET_TCP_HANDSHAKE_TIMEOUT", "500ms"),
        ]))
        .unwrap();
        assert_eq!(c.keepalive, None);
        assert_eq!(c.handshake_timeout, Duration::from_millis(500));
        let ka = TcpConfig::from_vars(vars(&[("RIVET_TCP_KEEPALIVE", "20s")])).unwrap();
        assert_eq!(ka.keepalive, Some(Duration::from_secs(20)));
        assert_eq!(c.backend, Backend::Poll);
        assert_eq!(TcpConfig::default().backend, Backend::Auto);
        assert_eq!(c.ifaces, ["lo", "eth0"]);
        assert_eq!((c.eager_max, c.piece), (8192, 2 << 20));
        assert!(c.inject_uring_failure);
        let general = vars(&[("RIVET_EAGER_MAX", "1K")]);
        assert_eq!(TcpConfig::from_vars(general).unwrap().eager_max, 1024);
        let both = vars(&[("RIVET_EAGER_MAX", "1K"), ("RIVET_TCP_EAGER_MAX", "2K")]);
        assert_eq!(TcpConfig::from_vars(both).unwrap().eager_max, 2048);
        for bad in [
            &[("RIVET_TCP_BACKEND", "epoll")][..],
            &[("RIVET_TCP_PIECE", "lots")],
            &[("RIVET_TCP_PIECE", "2G")],
            &[("RIVET_TCP_EAGER_MAX", "4M")],
            &[("RIVET_TCP_KEEPALIVE", "soon")],
            &[("RIVET_TCP_HANDSHAKE_TIMEOUT", "0")],
        ] {
            let e = TcpConfig::from_vars(vars(bad)).unwrap_err().to_string();
            assert!(e.contains(bad[0].0), "{e}");
        }
    }
}
