//! What a completed operation reports.

/// The outcome of a receive, a send or a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    /// Sender's rank in the communicator (receives and probes).
    pub source: i32,
    pub tag: i32,
    /// Bytes received into the buffer (receives), or waiting (probes).
    pub count: usize,
    /// The operation was cancelled; nothing was sent or received.
    pub cancelled: bool,
    /// Set when the message itself went wrong, e.g. it was truncated.
    pub error: Option<MsgError>,
}

/// A per-message failure, reported in the [`Status`] rather than as an `Err`
/// so that `wait_all` can say which message failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MsgError {
    /// The message was longer than the receive buffer; the first `capacity`
    /// bytes were delivered and the rest dropped.
    #[error("message truncated: {sent} bytes sent, receive buffer holds {capacity}")]
    Truncated { sent: usize, capacity: usize },
    /// The peer failed (its connection reset or closed) before the
    /// operation finished; nothing more will come from it.
    #[error("rank {rank} failed before the operation finished")]
    PeerFailed { rank: u32 },
}

impl Status {
    /// `Err` if the status carries an error.
    pub fn check(self) -> Result<Status, MsgError> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(self),
        }
    }
}
