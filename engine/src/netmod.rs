//! Choosing and opening the network module at init, and where business
//! cards live in the process manager's key-value space.
//!
//! A netmod is opened only when some peer needs one: a job on one node runs
//! on shared memory alone unless `RIVET_NETMOD` forces a netmod. Every rank
//! that opens one publishes its card before the init barrier; peers read it
//! on their first message to that rank (lazy connection, seed 000).
//!
//! `auto` (peers on other nodes) takes the libfabric netmod when
//! `RIVET_OFI_PROVIDER` names a provider (which must then open), or when
//! libfabric offers a provider faster than tcp (verbs, efa, cxi, psm3,
//! ...; asked only where an interconnect device exists, since loading
//! libfabric is slow); otherwise, or when that provider cannot be opened, the tcp netmod. Every rank decides alike on a homogeneous cluster; a rank that
//! decides otherwise cannot read its peers' cards and says so.

use rivet_netmods::tcp::{TcpConfig, TcpNetmod};
use rivet_netmods::Netmod;

use crate::config::NetmodChoice;
use crate::error::Result;

/// The KVS key of `rank`'s business card (a job with one worker).
pub fn card_key(rank: u32) -> String {
    format!("rivet-net-{rank}")
}

/// Which worker's card a `Core` publishes and reads (`thread.rs`): with
/// one worker, the plain [`card_key`]; with several, worker `k` of `W`
/// publishes under `rivet-net-<rank>-w<k>of<W>`, one short key per worker
/// (a card's size stays as it was, within PMI's value limit). The count
/// is in the key so that ranks disagreeing on it find no card, and say
/// so, rather than reach a worker that maps contexts otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CardKeys {
    pub worker: usize,
    pub workers: usize,
}

impl CardKeys {
    /// One worker, one netmod: the keys a job had before workers.
    pub const ONE: CardKeys = CardKeys {
        worker: 0,
        workers: 1,
    };

    /// The key of `rank`'s card for this worker.
    pub fn key(self, rank: u32) -> String {
        match self.workers {
            0 | 1 => card_key(rank),
            w => format!("rivet-net-{rank}-w{}of{w}", self.worker),
        }
    }
}

/// An open netmod, and why it is the one (for `info`).
pub struct Opened {
    pub netmod: Box<dyn Netmod>,
    pub why: String,
}

/// Under IMPI: the `impi` netmod, reaching other clients' ranks itself and
/// this client's through `inner` (if any).
pub fn wrap_impi(cfg: rivet_netmods::impi::ImpiConfig, inner: Option<Opened>) -> Result<Opened> {
    let why = format!(
        "IMPI world rank {} of {}: other clients' ranks over seed 003's packets{}",
        cfg.rank,
        cfg.size(),
        inner
            .as_ref()
            .map_or(String::new(), |o| format!("; this client's over {}", o.why))
    );
    let netmod = Box::new(rivet_netmods::impi::ImpiNetmod::new(
        cfg,
        inner.map(|o| o.netmod),
    )?);
    Ok(Opened { netmod, why })
}

/// `RIVET_OFI_PROVIDER`, if set: naming a provider asks for ofi.
fn named_provider() -> Option<String> {
    rivet_settings::var("RIVET_OFI_PROVIDER").filter(|p| !p.trim().is_empty())
}

/// What the engine knows about how a netmod will be used.
#[derive(Clone, Copy, Debug, Default)]
pub struct Hints {
    /// Every rank of the job runs on this node (a netmod forced there):
    /// libfabric's loopback domain is preferred to its first interface,
    /// which may be any bridge or tunnel (`OfiConfig::prefer_domain`).
    pub one_node: bool,
    /// Only this thread will drive it (thread level FUNNELED or lower),
    /// which lets the tcp netmod's io_uring ring skip locking.
    pub one_thread: bool,
}

/// Open the netmod `choice` names for process group `job`, as `rank`.
pub fn open(choice: NetmodChoice, job: &str, rank: u32, hints: Hints) -> Result<Opened> {
    let tcp = |why: String| -> Result<Opened> {
        let mut config = TcpConfig::from_env()?;
        config.one_thread = hints.one_thread;
        let netmod = Box::new(TcpNetmod::new(config, job, rank.into())?);
        Ok(Opened { netmod, why })
    };
    let ofi = |provider: Option<&str>, why: String| -> Result<Opened> {
        let netmod = rivet_netmods::open_ofi(job, rank.into(), provider, hints.one_node)?;
        Ok(Opened { netmod, why })
    };
    match choice {
        NetmodChoice::Tcp => tcp("RIVET_NETMOD=tcp".into()),
        NetmodChoice::Ofi => ofi(None, "RIVET_NETMOD=ofi".into()),
        NetmodChoice::Auto => {
            if let Some(named) = named_provider() {
                return ofi(None, format!("auto: RIVET_OFI_PROVIDER={named}"));
            }
            // Loading libfabric costs a few hundred ms (rivet_netmods::fabric):
            // not worth it where no provider faster than tcp can run.
            if rivet_netmods::fabric_devices().is_empty() {
                return tcp(
                    "auto: no interconnect device (/sys/class/infiniband, /sys/class/cxi, \
                     /dev/hfi1*), libfabric not loaded"
                        .into(),
                );
            }
            match rivet_netmods::ofi_fast_provider() {
                Ok(Some(fast)) => ofi(Some(&fast), format!("auto: libfabric offers {fast}"))
                    .or_else(|e| tcp(format!("auto: libfabric's {fast} did not open: {e}"))),
                Ok(None) => tcp("auto: no libfabric provider faster than tcp here".into()),
                Err(why) => tcp(format!("auto: no libfabric ({why})")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::wire::{MsgKind, WireHeader};

    #[test]
    fn the_impi_netmod_finds_the_envelope_where_the_header_keeps_it() {
        // pk_lsrank, pk_tag and pk_cid (seed 003, 3.5) come from these bytes.
        let h = WireHeader {
            kind: MsgKind::Eager as u8,
            flags: 0,
            reserved: 0,
            context: 0x0102_0304,
            tag: -9,
            src: 41,
            len: 7,
            sreq: 1,
            aux: 2,
        };
        assert_eq!(
            rivet_netmods::impi::engine_envelope(h.as_bytes()),
            (41, -9, 0x0102_0304)
        );
    }
}
