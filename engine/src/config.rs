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

/// A byte count from the environment; unset or empty is `None`.
fn size_var(var: &impl Fn(&str) -> Option<String>, name: &'static str) -> Result<Option<usize>> {
    match var(name) {
        Some(raw) if !raw.trim().is_empty() => parse_size(&raw)
            .map(Some)
            .map_err(|why| bad(name, &raw, &why)),
        _ => Ok(None),
    }
}

/// Parse a byte count: digits with an optional binary suffix, case-insensitive:
/// `K`/`Ki`/`KiB` = 2^10, `M`/`Mi`/`MiB` = 2^20, `G`/`Gi`/`GiB` = 2^30, or
/// `B` for bytes. `KB`/`MB`/`GB` are refused: they are ambiguous (the
/// benchmarks report bandwidth in MB = 1e6 B, sizes are powers of two).
/// The one parser for every size Rivet reads: `RIVET_*` settings and
/// `rivet-bench` options.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let s = text.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if digits == 0 {
        return Err(format!(
            "{text:?} is not a size: expected digits, e.g. 8, 4K, 1M, 4MiB"
        ));
    }
    let n: u64 = s[..digits]
        .parse()
        .map_err(|e| format!("{text:?} is not a size: {e}"))?;
    let suffix = s[digits..].trim();
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "ki" | "kib" => 10,
        "m" | "mi" | "mib" => 20,
        "g" | "gi" | "gib" => 30,
        "kb" | "mb" | "gb" => {
            return Err(format!(
                "{text:?}: {suffix} is ambiguous; write {}{} (binary, 2^{}) or the byte count",
                &s[..digits],
                &suffix[..1].to_ascii_uppercase(),
                match suffix.as_bytes()[0].to_ascii_lowercase() {
                    b'k' => 10,
                    b'm' => 20,
                    _ => 30,
                }
            ))
        }
        _ => {
            return Err(format!(
                "{text:?}: unknown suffix {suffix:?} (use K, M, G, KiB, MiB or GiB; all binary)"
            ))
        }
    };
    n.checked_mul(1u64 << shift)
        .and_then(|v| usize::try_from(v).ok())
        .ok_or_else(|| format!("{text:?} is too large"))
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
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("8B"), Ok(8));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_size("4 MiB"), Ok(4 << 20));
        assert_eq!(parse_size("1Gi"), Ok(1 << 30));
        assert_eq!(parse_size(" 16 "), Ok(16));
    }

    #[test]
    fn bad_sizes_say_why() {
        assert!(parse_size("").unwrap_err().contains("expected digits"));
        assert!(parse_size("M").unwrap_err().contains("expected digits"));
        assert!(parse_size("-1").is_err());
        assert!(parse_size("4MB").unwrap_err().contains("ambiguous"));
        assert!(parse_size("4MB").unwrap_err().contains("4M"));
        assert!(parse_size("4X").unwrap_err().contains("unknown suffix"));
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("17179869184G")
            .unwrap_err()
            .contains("too large"));
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
