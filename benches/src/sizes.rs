//! Message sizes: the OSU size ladder and the iteration counts per size
//! (values are parsed by `rivet::parse_size`, as the engine's settings are) (those of
//! `benches/peers/mpi_p2p.c` too, so Rivet and its peers do the same work).

/// The largest message of a run unless `--max` says otherwise (4 MiB, as
/// `mpi_p2p.c`).
pub const DEFAULT_MAX: usize = 4 << 20;

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
}

/// Messages in flight per window (osu_bw, osu_bibw, mpi_p2p's mr) unless
/// `--window` / `-W` says otherwise.
pub const WINDOW: usize = 64;

/// The sizes a benchmark runs: the ladder within `[min, max]`. Bandwidth
/// benchmarks skip 0 B (no bandwidth to measure), as osu_bw and
/// mpi_p2p do. `mr` runs 8 B only unless `--min` or `--max` is given
/// (mpi_p2p's mr is 8 B only).
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

/// (warm-up, timed) iterations for one size, as `mpi_p2p.c`: an
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
    fn iterations_follow_the_peers() {
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
