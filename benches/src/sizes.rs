//! Message sizes: parsing `--min`/`--max`/`--sizes` values, the OSU size
//! ladder, and the iteration counts per size (those of the anchors'
//! `mpi_pingpong.c`, so Rivet and its peers do the same work).

/// The largest message of a run unless `--max` says otherwise (4 MiB, as
/// `mpi_pingpong.c`).
pub const DEFAULT_MAX: usize = 4 << 20;

/// Parse a byte count: digits with an optional binary suffix, case-insensitive:
/// `K`/`Ki`/`KiB` = 2^10, `M`/`Mi`/`MiB` = 2^20, `G`/`Gi`/`GiB` = 2^30, or
/// `B` for bytes. `KB`/`MB`/`GB` are refused: they are ambiguous (this suite
/// reports bandwidth in MB = 1e6 B, but message sizes are powers of two).
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

/// The OSU ladder 0, 1, 2, 4, ... (powers of two) up to `max`, keeping only
/// the sizes within `[min, max]`. `max` itself is included only if it is 0 or
/// a power of two.
pub fn size_list(min: usize, max: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut s = 0usize;
    while s <= max {
        if s >= min {
            sizes.push(s);
        }
        s = match s {
            0 => 1,
            _ => match s.checked_mul(2) {
                Some(next) => next,
                None => break,
            },
        };
    }
    sizes
}

/// The point-to-point benchmarks of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Latency,
    Bw,
    Bibw,
    Mr,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Latency => "latency",
            Kind::Bw => "bw",
            Kind::Bibw => "bibw",
            Kind::Mr => "mr",
        }
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        Some(match name {
            "latency" | "lat" => Kind::Latency,
            "bw" => Kind::Bw,
            "bibw" => Kind::Bibw,
            "mr" => Kind::Mr,
            _ => return None,
        })
    }

    /// What a row's value is, for table headers.
    pub fn column(self) -> &'static str {
        match self {
            Kind::Latency => "Latency (us)",
            Kind::Bw | Kind::Bibw => "Bandwidth (MB/s)",
            Kind::Mr => "Messages/s",
        }
    }

    /// The unit in JSON output.
    pub fn unit(self) -> &'static str {
        match self {
            Kind::Latency => "us",
            Kind::Bw | Kind::Bibw => "MB/s",
            Kind::Mr => "msg/s",
        }
    }

    pub fn lower_is_better(self) -> bool {
        self == Kind::Latency
    }

    /// Messages posted per iteration (the OSU window), 1 for ping-pong.
    pub fn window(self) -> usize {
        match self {
            Kind::Latency => 1,
            _ => WINDOW,
        }
    }
}

/// Messages in flight per window (osu_bw, osu_bibw, mpi_pingpong's mr).
pub const WINDOW: usize = 64;

/// The sizes a benchmark runs: the ladder within `[min, max]`. Bandwidth
/// benchmarks skip 0 B (no bandwidth to measure), as osu_bw and
/// mpi_pingpong do. `mr` runs 8 B only unless `--min` or `--max` is given
/// (mpi_pingpong's mr is 8 B only).
pub fn sizes_for(kind: Kind, min: Option<usize>, max: Option<usize>) -> Result<Vec<usize>, String> {
    if kind == Kind::Mr && min.is_none() && max.is_none() {
        return Ok(vec![8]);
    }
    let min = min.unwrap_or(0);
    let max = max.unwrap_or(DEFAULT_MAX);
    if min > max {
        return Err(format!("--min {min} is larger than --max {max}"));
    }
    let mut sizes = size_list(min, max);
    if matches!(kind, Kind::Bw | Kind::Bibw) {
        sizes.retain(|&s| s > 0);
    }
    if sizes.is_empty() {
        return Err(format!(
            "no message size in [{min}, {max}]: sizes are 0 and powers of two{}",
            if matches!(kind, Kind::Bw | Kind::Bibw) {
                " (bandwidth starts at 1 B)"
            } else {
                ""
            }
        ));
    }
    Ok(sizes)
}

/// (warm-up, timed) iterations for one size, as `mpi_pingpong.c`: an
/// iteration is one round trip (latency) or one window (bw, bibw, mr).
pub fn iterations(kind: Kind, size: usize) -> (u32, u32) {
    match kind {
        Kind::Latency => {
            if size <= 8192 {
                (1000, 10000)
            } else if size <= 262144 {
                (100, 1000)
            } else {
                (10, 100)
            }
        }
        Kind::Mr if size <= 8192 => (500, 10000),
        Kind::Bw | Kind::Bibw | Kind::Mr => {
            if size <= 8192 {
                (50, 500)
            } else if size <= 262144 {
                (10, 100)
            } else {
                (2, 20)
            }
        }
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

    #[test]
    fn ladder_is_zero_then_powers_of_two() {
        assert_eq!(size_list(0, 8), vec![0, 1, 2, 4, 8]);
        assert_eq!(size_list(0, 10), vec![0, 1, 2, 4, 8]);
        assert_eq!(size_list(3, 32), vec![4, 8, 16, 32]);
        assert_eq!(size_list(0, 0), vec![0]);
        assert_eq!(size_list(5, 7), Vec::<usize>::new());
        assert_eq!(size_list(0, DEFAULT_MAX).len(), 24);
        assert_eq!(
            *size_list(0, usize::MAX).last().unwrap(),
            1 << (usize::BITS - 1)
        );
    }

    #[test]
    fn benchmark_sizes() {
        assert_eq!(
            sizes_for(Kind::Latency, None, Some(4)),
            Ok(vec![0, 1, 2, 4])
        );
        assert_eq!(sizes_for(Kind::Bw, None, Some(4)), Ok(vec![1, 2, 4]));
        assert_eq!(
            sizes_for(Kind::Bibw, Some(1024), Some(4096)),
            Ok(vec![1024, 2048, 4096])
        );
        assert_eq!(sizes_for(Kind::Mr, None, None), Ok(vec![8]));
        assert_eq!(sizes_for(Kind::Mr, None, Some(2)), Ok(vec![0, 1, 2]));
        assert_eq!(
            sizes_for(Kind::Latency, None, None).unwrap().last(),
            Some(&DEFAULT_MAX)
        );
        assert!(sizes_for(Kind::Latency, Some(8), Some(4)).is_err());
        assert!(sizes_for(Kind::Bw, Some(0), Some(0)).is_err());
    }

    #[test]
    fn iterations_follow_mpi_pingpong() {
        assert_eq!(iterations(Kind::Latency, 8), (1000, 10000));
        assert_eq!(iterations(Kind::Latency, 65536), (100, 1000));
        assert_eq!(iterations(Kind::Latency, 1 << 20), (10, 100));
        assert_eq!(iterations(Kind::Bw, 8192), (50, 500));
        assert_eq!(iterations(Kind::Bibw, 262144), (10, 100));
        assert_eq!(iterations(Kind::Bw, 4 << 20), (2, 20));
        assert_eq!(iterations(Kind::Mr, 8), (500, 10000));
        assert_eq!(iterations(Kind::Mr, 1 << 20), (2, 20));
    }

    #[test]
    fn kinds_round_trip_their_names() {
        for k in [Kind::Latency, Kind::Bw, Kind::Bibw, Kind::Mr] {
            assert_eq!(Kind::from_name(k.name()), Some(k));
        }
        assert_eq!(Kind::from_name("lat"), Some(Kind::Latency));
        assert_eq!(Kind::from_name("startup"), None);
    }
}
