//! The server started on a thread of its own, so that opening the library
//! overlaps rivetrun's own topology discovery, then registered.

use std::ffi::CString;
use std::sync::mpsc;

use super::{node, PmixHost};
use crate::topology::SharedTopology;

/// A server being started on a thread of its own (it opens the library
/// while rivetrun discovers the topology, then waits for that topology,
/// [`Starting::lend_topology`], so as not to discover it again);
/// [`Starting::finish`] registers the job. Dropped unfinished (an early
/// error return), it still waits for the thread, so the server's
/// directory is removed.
pub struct Starting {
    thread: Option<std::thread::JoinHandle<Result<PmixHost, String>>>,
    /// Where the topology goes; dropped unsent, the server discovers its own.
    topology: Option<mpsc::Sender<SharedTopology>>,
    job: String,
    size: u32,
}

impl Starting {
    /// Start the server for job `job` of `size` ranks on this node (`host`)
    /// on a new thread.
    pub fn spawn(job: String, size: u32, host: String) -> Starting {
        Starting::start(job, size, host, false)
    }

    /// Start the server of one node of multi-host job `job` (a proxy's),
    /// the node named `host` in the job's host list, on a new thread;
    /// [`Starting::finish_node`] registers the job.
    pub fn spawn_node(job: String, host: String) -> Starting {
        Starting::start(job, 0, host, true)
    }

    fn start(job: String, size: u32, host: String, node: bool) -> Starting {
        let (tx, rx) = mpsc::channel();
        Starting {
            thread: Some(std::thread::spawn(move || {
                PmixHost::start_as(&host, node, rx)
            })),
            topology: Some(tx),
            job,
            size,
        }
    }

    /// Hand the server this node's hwloc topology (None: it discovers its
    /// own), which its `PMIx_server_init` waits for. The server keeps the
    /// topology alive as long as it runs.
    pub fn lend_topology(&mut self, topology: Option<SharedTopology>) {
        if let (Some(tx), Some(topology)) = (self.topology.take(), topology) {
            let _ = tx.send(topology);
        }
    }

    /// [`Starting::finish`] for a node's server: the job registered with
    /// `layout` (every host's ranks; this node's are its clients), so
    /// fence and direct modex come to the proxy as events.
    pub fn finish_node(
        mut self,
        layout: node::Layout,
        topology_xml: Option<String>,
        cluster: Option<String>,
    ) -> Result<PmixHost, String> {
        let mut host = self.join()?;
        if layout.hosts.get(layout.node) != Some(&host.host) {
            return Err("this node is not in the job's host list".into());
        }
        host.topology_xml = topology_xml;
        host.cluster = cluster;
        host.nspace = CString::new(self.job.as_str())
            .map_err(|_| "the job name holds a NUL byte".to_string())?;
        host.register(&self.job, &layout, None)?;
        Ok(host)
    }

    fn join(&mut self) -> Result<PmixHost, String> {
        // Unblock a server still waiting for a topology.
        self.topology = None;
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(result)) => result,
            _ => Err("the PMIx server's start-up thread failed".into()),
        }
    }

    /// Wait for the server and register the job. `topology_xml` (hwloc's
    /// XML of this node) is handed to the ranks as `pmix.hwlocxml2`, which
    /// Open MPI reads instead of discovering the topology in every rank;
    /// `cluster` as `PMIX_CLUSTER_ID` (Rivet's ranks qualify their
    /// namespace with it, as under PMI-1); `appnums`: the app (MPMD
    /// section) of each rank, empty for one app.
    pub fn finish(
        mut self,
        topology_xml: Option<String>,
        cluster: Option<String>,
        appnums: Vec<u32>,
    ) -> Result<PmixHost, String> {
        let mut host = self.join()?;
        host.topology_xml = topology_xml;
        host.cluster = cluster;
        host.nspace = CString::new(self.job.as_str())
            .map_err(|_| "the job name holds a NUL byte".to_string())?;
        let layout = node::Layout::one_host(&host.host, self.size).with_apps(appnums)?;
        host.register(&self.job, &layout, None)?;
        Ok(host)
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        self.topology = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
