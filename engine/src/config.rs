//! Engine settings from `RIVET_*` environment variables, read once at init.

use crate::error::{Error, Result};

/// How large messages cross shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LmtMode {
    /// Single copy with `process_vm_readv` where it works, else `Copy`.
    Auto,
    /// Single copy only (falls back to `Copy` per peer if the kernel refuses).
    Cma,
    /// Pipelined copy through the segment's cells.
    Copy,
}

/// Whether idle poll loops give the CPU away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YieldMode {
    /// Yield when the node has more local ranks than CPUs.
    Auto,
    Always,
    Never,
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Largest message sent eagerly over shared memory.
    pub shm_eager_max: usize,
    pub lmt: LmtMode,
    pub yield_mode: YieldMode,
}

/// Measured on the development machine (BENCHMARKS.md): below this the copy
/// through a cell beats the rendezvous round trip.
pub const DEFAULT_SHM_EAGER_MAX: usize = 16 * 1024;

impl Config {
    pub fn from_env() -> Result<Config> {
        Config::from_vars(|k| std::env::var(k).ok())
    }

    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let general = size_var(&var, "RIVET_EAGER_MAX")?;
        let shm = size_var(&var, "RIVET_SHM_EAGER_MAX")?;
        let lmt = match var("RIVET_SHM_LMT").as_deref() {
            None | Some("") | Some("auto") => LmtMode::Auto,
            Some("cma") => LmtMode::Cma,
            Some("copy") => LmtMode::Copy,
            Some(other) => return Err(bad("RIVET_SHM_LMT", other, "use auto, cma or copy")),
        };
        let yield_mode = match var("RIVET_YIELD").as_deref() {
            None | Some("") | Some("auto") => YieldMode::Auto,
            Some("always") => YieldMode::Always,
            Some("never") => YieldMode::Never,
            Some(other) => return Err(bad("RIVET_YIELD", other, "use auto, always or never")),
        };
        Ok(Config {
            shm_eager_max: shm.or(general).unwrap_or(DEFAULT_SHM_EAGER_MAX),
            lmt,
            yield_mode,
        })
    }
}

fn bad(name: &'static str, value: &str, why: &str) -> Error {
    Error::Config {
        name,
        value: value.to_string(),
        why: why.to_string(),
    }
}

/// A byte count: plain, or with a K/M/G suffix (powers of 1024).
fn size_var(var: &impl Fn(&str) -> Option<String>, name: &'static str) -> Result<Option<usize>> {
    let Some(raw) = var(name) else {
        return Ok(None);
    };
    let s = raw.trim();
    if s.is_empty() {
        return Ok(None);
    }
    let (digits, shift) = match s.trim_end_matches(['B', 'b', 'i']).to_ascii_uppercase() {
        t if t.ends_with('K') => (t[..t.len() - 1].to_string(), 10),
        t if t.ends_with('M') => (t[..t.len() - 1].to_string(), 20),
        t if t.ends_with('G') => (t[..t.len() - 1].to_string(), 30),
        t => (t, 0),
    };
    let n: usize = digits
        .trim()
        .parse()
        .map_err(|_| bad(name, &raw, "expected a byte count such as 16384 or 16K"))?;
    n.checked_mul(1usize << shift)
        .map(Some)
        .ok_or_else(|| bad(name, &raw, "too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Result<Config> {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_vars(|k| owned.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_and_overrides() {
        let c = with(&[]).unwrap();
        assert_eq!(c.shm_eager_max, DEFAULT_SHM_EAGER_MAX);
        assert_eq!(c.lmt, LmtMode::Auto);
        assert_eq!(c.yield_mode, YieldMode::Auto);
        assert_eq!(
            with(&[("RIVET_EAGER_MAX", "4K")]).unwrap().shm_eager_max,
            4096
        );
        let both = with(&[("RIVET_EAGER_MAX", "4K"), ("RIVET_SHM_EAGER_MAX", "100")]).unwrap();
        assert_eq!(both.shm_eager_max, 100, "the transport's own setting wins");
        assert_eq!(
            with(&[("RIVET_SHM_LMT", "copy")]).unwrap().lmt,
            LmtMode::Copy
        );
        assert_eq!(
            with(&[("RIVET_YIELD", "never")]).unwrap().yield_mode,
            YieldMode::Never
        );
        assert_eq!(
            with(&[("RIVET_EAGER_MAX", "1MiB")]).unwrap().shm_eager_max,
            1 << 20
        );
    }

    #[test]
    fn bad_values_are_named() {
        for (k, v) in [
            ("RIVET_SHM_LMT", "fast"),
            ("RIVET_YIELD", "sometimes"),
            ("RIVET_EAGER_MAX", "lots"),
        ] {
            let err = with(&[(k, v)]).unwrap_err().to_string();
            assert!(err.contains(k) && err.contains(v), "{err}");
        }
    }
}
