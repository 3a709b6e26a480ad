//! Choosing and opening the network module at init, and where business
//! cards live in the process manager's key-value space.
//!
//! A netmod is opened only when some peer needs one: a job on one node runs
//! on shared memory alone unless `RIVET_NETMOD` forces a netmod. Every rank
//! that opens one publishes its card before the init barrier; peers read it
//! on their first message to that rank (lazy connection, seed 000).

use rivet_netmods::tcp::{TcpConfig, TcpNetmod};
use rivet_netmods::Netmod;

use crate::config::NetmodChoice;
use crate::error::Result;

/// The KVS key of `rank`'s business card.
pub fn card_key(rank: u32) -> String {
    format!("rivet-net-{rank}")
}

/// Open the netmod `choice` names for process group `job`, as `rank`.
pub fn open(choice: NetmodChoice, job: &str, rank: u32) -> Result<Box<dyn Netmod>> {
    match choice {
        NetmodChoice::Auto | NetmodChoice::Tcp => {
            let config = TcpConfig::from_env()?;
            Ok(Box::new(TcpNetmod::new(config, job, rank.into())?))
        }
        NetmodChoice::Ofi => Ok(rivet_netmods::open_ofi(job, rank.into())?),
    }
}
