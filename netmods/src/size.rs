//! The one parser for byte counts Rivet reads: `RIVET_*` settings (engine
//! and netmods) and `rivet-bench` options. It lives in the lowest crate
//! that needs it; the engine re-exports it as `rivet::parse_size`.

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

/// A duration setting: `"500ms"`, `"2s"`, `"30"` (seconds); zero refused.
pub(crate) fn parse_duration(v: &str) -> Result<std::time::Duration, String> {
    let v = v.trim();
    let (num, unit) = match v.strip_suffix("ms") {
        Some(n) => (n, 1),
        None => (v.strip_suffix('s').unwrap_or(v), 1000),
    };
    match num.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(std::time::Duration::from_millis(n.saturating_mul(unit))),
        _ => Err(format!(
            "{v:?} is not a positive duration (like 500ms, 30s)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
