//! The options of `latency`, `bw`, `bibw` and `mr`: sizes, iterations,
//! thread level, verification.

use rivet::ThreadLevel;

use crate::sizes;

/// Options shared by latency, bw, bibw and mr.
#[derive(clap::Args, Clone, Debug)]
pub struct P2pArgs {
    /// Smallest message size in bytes (suffixes K, M, G, KiB, MiB, GiB are binary).
    /// [default: 0; mr: 8 B only unless --min or --max is given]
    #[arg(long, value_parser = rivet::parse_size, value_name = "BYTES")]
    pub min: Option<usize>,
    /// Largest message size in bytes. [default: 4MiB]
    #[arg(long, value_parser = rivet::parse_size, value_name = "BYTES")]
    pub max: Option<usize>,
    /// Sizes as OSU's `-m`: `MIN:MAX`, `MAX` or `MIN:` (suffixes as --min).
    #[arg(short = 'm', value_parser = parse_range, value_name = "MIN:MAX",
          conflicts_with_all = ["min", "max"])]
    pub range: Option<(Option<usize>, Option<usize>)>,
    /// Messages per window of bw, bibw and mr (OSU's -W).
    #[arg(short = 'W', long, default_value_t = sizes::WINDOW, value_name = "N")]
    pub window: usize,
    /// Timed iterations per size (round trips, or windows), instead of
    /// mpi_p2p.c's defaults (latency 10000/1000/100, bw and bibw
    /// 500/100/20, mr 10000 up to 8 KiB, larger sizes shrinking with size).
    #[arg(short = 'i', long, value_name = "N")]
    pub iters: Option<u32>,
    /// Untimed iterations before each size [default: as mpi_p2p.c, a
    /// tenth of the timed ones (mr up to 8 KiB: 500); with --iters N: N/10].
    #[arg(short = 'x', long, value_name = "N")]
    pub warmup: Option<u32>,
    /// Print one JSON object at the end instead of the table (shape in `rivet-bench --help`).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print CSV at the end instead of the table:
    /// bench,ranks,threads,window,unit,size,value,iters, one line per size.
    #[arg(long)]
    pub csv: bool,
    /// Print the engine's configuration (rank 0) and exit.
    #[arg(long)]
    pub info: bool,
    /// latency only: the job has exactly 2 + N ranks; ranks 2 and up
    /// connect to ranks 0 and 1 (one message each way), then sleep in a
    /// blocking PMI barrier (no CPU) while 0 and 1 ping-pong. Rank 0 also
    /// reports its RSS once connected (a `memory` JSON line).
    #[arg(long, value_name = "N")]
    pub idle_peers: Option<u32>,
    /// The thread level asked for (single, funneled, serialized, multiple),
    /// as `MPI_Init_thread`. Below multiple the engine takes no lock;
    /// `RIVET_THREAD_LEVEL` may raise it.
    #[arg(long, default_value = "single", value_parser = parse_level, value_name = "LEVEL")]
    pub thread_level: ThreadLevel,
}

/// OSU's `-m [MIN:]MAX` (also `MIN:`).
pub(crate) fn parse_range(s: &str) -> Result<(Option<usize>, Option<usize>), String> {
    let size = |t: &str| -> Result<Option<usize>, String> {
        if t.is_empty() {
            Ok(None)
        } else {
            rivet::parse_size(t).map(Some)
        }
    };
    match s.split_once(':') {
        Some((min, max)) => Ok((size(min)?, size(max)?)),
        None if !s.is_empty() => Ok((None, size(s)?)),
        None => Err("empty size range".into()),
    }
}

impl P2pArgs {
    /// (--min or -m's MIN, --max or -m's MAX).
    pub(crate) fn bounds(&self) -> (Option<usize>, Option<usize>) {
        match self.range {
            Some((min, max)) => (min, max),
            None => (self.min, self.max),
        }
    }

    /// The checks every point-to-point benchmark makes of its options.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.iters == Some(0) {
            return Err("--iters must be at least 1".into());
        }
        if self.window == 0 {
            return Err("--window must be at least 1".into());
        }
        Ok(())
    }
}

fn parse_level(s: &str) -> Result<ThreadLevel, String> {
    s.parse().map_err(|e: rivet::Error| e.to_string())
}

/// Options of `mr`.
#[derive(clap::Args, Clone, Debug)]
pub struct MrArgs {
    #[command(flatten)]
    pub common: P2pArgs,
    /// Threads per rank, each on its own duplicate of the world communicator;
    /// the rate reported is that of all threads together.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub threads: u32,
    /// Pairs of ranks measuring at once, as osu_mbw_mr: rank i sends to
    /// rank i + N (the job needs 2N ranks or more); the rate reported is
    /// that of all pairs, timed on rank 0 between two barriers.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub pairs: u32,
}
