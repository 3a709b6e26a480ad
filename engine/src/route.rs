//! How a VC reaches its peer (`Route`) and what that way lets the
//! protocols do (`Limits`), as plain data: the VCs (`pg/`) and the protocol
//! state (`state/`) hold them, the transports (`transport/`) act on them.

use rivet_netmods::PeerId;

/// How bytes reach the peer of a VC: which transport, under which address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// This process: delivered straight into its own matching.
    Loopback,
    /// Node-local rank of the world, by index into the node's local ranks.
    Shm(usize),
    /// Through the network module, under this peer id.
    Netmod(PeerId),
}

/// Whether single-copy reads (shared memory's RMA) from the peer work,
/// learned on first use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmaState {
    Untried,
    Works,
    Refused,
}

/// What one transport allows a message, fixed when it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest eager message (larger ones go by rendezvous).
    pub eager_max: usize,
    /// Bytes per piece when a rendezvous message is streamed (at least 1).
    pub piece: usize,
}

/// The limits of every transport, so that the protocols ask by route.
#[derive(Debug, Clone, Copy)]
pub struct RouteLimits {
    pub shm: Limits,
    pub net: Limits,
}

impl RouteLimits {
    /// Every transport with the same limits (the sans-I/O tests and the
    /// fuzz target, which open none).
    pub fn uniform(eager_max: usize, piece: usize) -> RouteLimits {
        let l = Limits { eager_max, piece };
        RouteLimits { shm: l, net: l }
    }

    /// The limits of the transport behind `route`. Loopback has no eager
    /// limit; its pieces (never streamed in practice) are shared memory's.
    #[inline(always)]
    pub fn of(&self, route: Route) -> Limits {
        match route {
            Route::Loopback => Limits {
                eager_max: usize::MAX,
                piece: self.shm.piece,
            },
            Route::Shm(_) => self.shm,
            Route::Netmod(_) => self.net,
        }
    }
}
