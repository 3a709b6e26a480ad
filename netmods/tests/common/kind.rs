//! What a test body shared by the tcp and libfabric netmods needs to know
//! of the one it runs on: how to open it, the counters both keep, and
//! whether a peer in this process may die under it. A tcp netmod is named
//! by its `Backend`, a libfabric one by its provider.

use rivet_netmods::tcp::{Backend, TcpNetmod};
use rivet_netmods::Netmod;

/// The counters both netmods keep (inherent methods of each).
pub trait Counted: Netmod {
    /// Connections (handshakes) made since the netmod opened.
    fn connections_made(&self) -> u64;
    /// Peers with a live connection.
    fn connected_peers(&self) -> usize;
}

/// A netmod kind under test: opens netmods and says what they can test.
pub trait Kind: Copy {
    type Net: Counted;

    /// One netmod per `(job, rank)`, or `None` (with a note) where this
    /// kind cannot run here.
    fn open_jobs(self, procs: &[(&str, u64)]) -> Option<Vec<Self::Net>>;

    /// `n` netmods of ranks 0..n in job `job`.
    fn open_n(self, job: &str, n: u64) -> Option<Vec<Self::Net>> {
        let procs: Vec<(&str, u64)> = (0..n).map(|r| (job, r)).collect();
        self.open_jobs(&procs)
    }

    /// Whether a netmod of this process can be dropped while another one
    /// still talks to it (not so for every libfabric provider).
    fn peer_may_die_here(self) -> bool {
        true
    }
}

impl Counted for TcpNetmod {
    fn connections_made(&self) -> u64 {
        TcpNetmod::connections_made(self)
    }
    fn connected_peers(&self) -> usize {
        TcpNetmod::connected_peers(self)
    }
}

impl Kind for Backend {
    type Net = TcpNetmod;

    fn open_jobs(self, procs: &[(&str, u64)]) -> Option<Vec<TcpNetmod>> {
        super::tcp::open_jobs(self, procs)
    }
}

#[cfg(feature = "ofi")]
mod ofi {
    use rivet_netmods::OfiNetmod;

    use super::{Counted, Kind};
    use crate::common::ofi::{open_jobs, SHM};

    impl Counted for OfiNetmod {
        fn connections_made(&self) -> u64 {
            OfiNetmod::connections_made(self)
        }
        fn connected_peers(&self) -> usize {
            OfiNetmod::connected_peers(self)
        }
    }

    impl Kind for &str {
        type Net = OfiNetmod;

        fn open_jobs(self, procs: &[(&str, u64)]) -> Option<Vec<OfiNetmod>> {
            open_jobs(self, procs)
        }

        /// libfabric 1.17's shm maps a peer in the same process through
        /// that peer's own mapping: sending to a closed endpoint of this
        /// process crashes (SIGSEGV). Across processes its sends fill the
        /// dead queue and the netmod's timeout fails the peer.
        fn peer_may_die_here(self) -> bool {
            self != SHM
        }
    }
}
