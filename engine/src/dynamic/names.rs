//! The name service (`MPI_Publish_name` and friends), through the process
//! manager: rivetrun serves it within a job, or forwards it to a name
//! server (`rivetrun --name-server`) shared by several jobs.

use crate::engine::Engine;
use crate::error::Result;
use crate::thread::Threading;

impl<T: Threading> Engine<T> {
    /// Publish `port` under `service`. Publishing a name already taken is
    /// an error, not an overwrite.
    pub fn publish_name(&self, service: &str, port: &str) -> Result<()> {
        self.inner.with_pmi(|pmi| pmi.publish_name(service, port))
    }

    /// The port published under `service`; an error if there is none.
    pub fn lookup_name(&self, service: &str) -> Result<String> {
        self.inner.with_pmi(|pmi| pmi.lookup_name(service))
    }

    pub fn unpublish_name(&self, service: &str) -> Result<()> {
        self.inner.with_pmi(|pmi| pmi.unpublish_name(service))
    }

    /// Open a port other groups can `connect` to (seed 001).
    pub fn open_port(&self) -> Result<String> {
        self.inner.open_port()
    }

    /// Close a port; connections still waiting on it are refused.
    pub fn close_port(&self, port: &str) -> Result<()> {
        self.inner.close_port(port)
    }
}
