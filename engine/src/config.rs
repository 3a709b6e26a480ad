//! Engine settings from `RIVET_*` environment variables, read once at init.

use crate::error::{Error, Result};
pub use rivet_netmods::parse_size;

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

/// Which network module reaches peers that shared memory does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetmodChoice {
    /// tcp for peers on other nodes; shared memory on the node.
    Auto,
    /// tcp for every peer, on-node ones included (testing, benchmarks).
    Tcp,
    /// libfabric for every peer.
    Ofi,
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Largest message sent eagerly over shared memory.
    pub shm_eager_max: usize,
    /// Rendezvous messages over shared memory from this size on are copied
    /// by both sides at once (`state/copy.rs`); 0: never.
    pub shm_split_min: usize,
    pub lmt: LmtMode,
    pub yield_mode: YieldMode,
    pub netmod: NetmodChoice,
    /// Eager bytes a sender may have outstanding to one netmod peer before
    /// it must wait for credit (or use rendezvous): bounds what a receiver
    /// buffers for messages it has not yet asked for.
    pub eager_window: usize,
    /// `RIVET_THREAD_LEVEL`: the least thread level the engine provides
    /// (it may raise what the program asks for, never lower it).
    pub thread_level: Option<crate::ThreadLevel>,
    /// `RIVET_WORKERS`: workers at MULTIPLE (`thread.rs`): shared-memory
    /// lanes a node leader lays out, netmod instances a rank opens.
    pub workers: usize,
}

/// Workers at MULTIPLE unless `RIVET_WORKERS` says otherwise: enough for a
/// few threads each on its own communicator, while the node segment grows
/// by only this factor.
pub const DEFAULT_WORKERS: usize = 4;
/// Most workers (shared-memory lanes) a node may have.
pub const MAX_WORKERS: usize = 32;

/// Measured on the AMD EPYC guest (BENCHMARKS.md, "eager over several
/// cells"): eager through cells, two copies, beats the rendezvous
/// (`process_vm_readv`, about 1.5 us of fixed cost there) at every size up
/// to the largest multi-cell message (4 cells: 65280 B by default), which
/// caps this value. On the earlier Intel guest the read cost 1.1 us and 4 KiB
/// was the crossover.
pub const DEFAULT_SHM_EAGER_MAX: usize = 64 * 1024;

/// From here on a shared-memory rendezvous copy is split between the two
/// ranks (BENCHMARKS.md, "bandwidth above one copy").
pub const DEFAULT_SHM_SPLIT_MIN: usize = 64 * 1024;

/// Per peer: 64 full-size eager messages of the tcp default.
pub const DEFAULT_EAGER_WINDOW: usize = 4 << 20;

impl Config {
    pub fn from_env() -> Result<Config> {
        Config::from_vars(rivet_settings::var)
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
        let netmod = match var("RIVET_NETMOD").as_deref() {
            None | Some("") | Some("auto") | Some("shm") => NetmodChoice::Auto,
            Some("tcp") => NetmodChoice::Tcp,
            Some("ofi") => NetmodChoice::Ofi,
            Some(other) => return Err(bad("RIVET_NETMOD", other, "use auto, tcp or ofi")),
        };
        let eager_window =
            size_var(&var, "RIVET_NETMOD_EAGER_WINDOW")?.unwrap_or(DEFAULT_EAGER_WINDOW);
        if eager_window < 4096 {
            return Err(bad(
                "RIVET_NETMOD_EAGER_WINDOW",
                &eager_window.to_string(),
                "must be at least 4K",
            ));
        }
        let thread_level = match var("RIVET_THREAD_LEVEL") {
            Some(v) if !v.trim().is_empty() => Some(v.trim().parse()?),
            _ => None,
        };
        let workers = match var("RIVET_WORKERS") {
            Some(v) if !v.trim().is_empty() => match v.trim().parse::<usize>() {
                Ok(n) if (1..=MAX_WORKERS).contains(&n) => n,
                _ => return Err(bad("RIVET_WORKERS", &v, "use a number from 1 to 32")),
            },
            _ => DEFAULT_WORKERS,
        };
        Ok(Config {
            shm_eager_max: shm.or(general).unwrap_or(DEFAULT_SHM_EAGER_MAX),
            shm_split_min: size_var(&var, "RIVET_SHM_SPLIT_MIN")?.unwrap_or(DEFAULT_SHM_SPLIT_MIN),
            lmt,
            yield_mode,
            netmod,
            eager_window,
            thread_level,
            workers,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name a parser reads is in rivet-settings' table, and the
    /// table's defaults are the parsers' (what `--info --all` and the
    /// README say is what happens).
    #[test]
    fn parsers_read_only_listed_settings_with_their_defaults() {
        let listed = |k: &str| -> Option<String> {
            assert!(
                rivet_settings::lookup(k).is_some(),
                "{k} is not in the table"
            );
            None
        };
        let engine = Config::from_vars(listed).unwrap();
        let shm = crate::shm::ShmConfig::from_lookup(listed).unwrap();
        let tcp = rivet_netmods::TcpConfig::from_vars(listed).unwrap();
        let ofi = rivet_netmods::OfiConfig::from_vars(listed).unwrap();
        let word = |k: &str| rivet_settings::lookup(k).unwrap().default;
        let default = |k: &str| {
            let d = rivet_settings::lookup(k).expect("listed").default;
            parse_size(d).unwrap_or_else(|e| panic!("{k}'s default {d:?}: {e}"))
        };
        assert_eq!(default("RIVET_SHM_EAGER_MAX"), engine.shm_eager_max);
        assert_eq!(default("RIVET_SHM_SPLIT_MIN"), engine.shm_split_min);
        assert_eq!(default("RIVET_NETMOD_EAGER_WINDOW"), engine.eager_window);
        assert_eq!(default("RIVET_SHM_FASTBOX_SIZE"), shm.fastbox_bytes);
        assert_eq!(default("RIVET_SHM_FASTBOX_MAX"), shm.fastbox_max);
        assert_eq!(default("RIVET_SHM_CELLS"), shm.cells_per_rank);
        assert_eq!(default("RIVET_SHM_CELL_SIZE"), shm.cell_bytes);
        assert_eq!(default("RIVET_TCP_PIECE"), tcp.piece);
        assert_eq!(default("RIVET_OFI_PIECE"), ofi.piece);
        let t = rivet_settings::lookup("RIVET_OFI_TIMEOUT").unwrap().default;
        assert_eq!(format!("{}s", ofi.timeout.as_secs()), t);
        assert_eq!(word("RIVET_OFI_RMA"), if ofi.rma { "1" } else { "0" });
        assert_eq!((word("RIVET_SHM_LMT"), engine.lmt), ("auto", LmtMode::Auto));
        assert_eq!(
            (word("RIVET_YIELD"), engine.yield_mode),
            ("auto", YieldMode::Auto)
        );
        assert_eq!(
            (word("RIVET_NETMOD"), engine.netmod),
            ("auto", NetmodChoice::Auto)
        );
        assert_eq!(
            (word("RIVET_TCP_BACKEND"), tcp.backend),
            ("auto", rivet_netmods::tcp::Backend::Auto)
        );
    }

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
        assert_eq!(c.netmod, NetmodChoice::Auto);
        assert_eq!(c.eager_window, DEFAULT_EAGER_WINDOW);
        assert_eq!(
            with(&[("RIVET_NETMOD", "tcp")]).unwrap().netmod,
            NetmodChoice::Tcp
        );
        assert_eq!(
            with(&[("RIVET_NETMOD_EAGER_WINDOW", "64K")])
                .unwrap()
                .eager_window,
            65536
        );
        assert_eq!(c.workers, DEFAULT_WORKERS);
        assert_eq!(with(&[("RIVET_WORKERS", "2")]).unwrap().workers, 2);
    }

    #[test]
    fn bad_settings_name_the_variable() {
        for (k, v) in [
            ("RIVET_NETMOD", "udp"),
            ("RIVET_NETMOD_EAGER_WINDOW", "100"),
            ("RIVET_SHM_LMT", "fast"),
            ("RIVET_WORKERS", "0"),
            ("RIVET_WORKERS", "33"),
            ("RIVET_WORKERS", "two"),
        ] {
            let e = with(&[(k, v)]).unwrap_err().to_string();
            assert!(e.contains(k), "{e}");
        }
    }

    #[test]
    fn bad_values_are_named() {
        for (k, v) in [
            ("RIVET_SHM_LMT", "fast"),
            ("RIVET_YIELD", "sometimes"),
            ("RIVET_EAGER_MAX", "lots"),
            ("RIVET_THREAD_LEVEL", "many"),
        ] {
            let err = with(&[(k, v)]).unwrap_err().to_string();
            assert!(err.contains(k) && err.contains(v), "{err}");
        }
    }
}
