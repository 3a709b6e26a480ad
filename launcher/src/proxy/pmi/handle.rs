//! How other threads talk to the proxy's PMI loop: the commands it takes
//! (`Cmd`), the handle that sends them and wakes it, what a rank did over
//! PMI (`Said`), and a spawn request (PMI-1 or PMIx) handed to the main
//! thread.

use std::collections::HashMap;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc};

use mio::Waker;
use rivet_pmi::server::{ConnId, NamespaceSpec, SpawnFailure, Spawned};
use rivet_pmi::wire::{Message, SpawnRequest};

use super::port::Opened;
use crate::pmix_host::SpawnCall;
use crate::proxy::upstream::Upstream;

/// What a rank did over PMI, read when it exits: one that spoke PMI and
/// exits 0 without finalizing fails the job (others may wait for it).
#[derive(Default)]
pub struct Said {
    pub spoke: AtomicBool,
    pub finalized: AtomicBool,
}

/// What other threads tell the PMI loop.
pub enum Cmd {
    /// A rank started: serve its PMI connection.
    Rank {
        rank: u32,
        conn: StdUnixStream,
        said: Arc<Said>,
    },
    /// A rank ended: free what it registered and did not release (seed
    /// 002, as single-host rivetrun does), then say so on `done`.
    Ended {
        rank: u32,
        who: String,
        done: mpsc::Sender<()>,
    },
    /// Upstream's `barrier_out`: the job's puts since the last barrier.
    BarrierOut(Vec<(String, String)>),
    /// A child proxy's `barrier` (its subtree's puts).
    ChildBarrier(u32, Vec<(String, String)>),
    /// A child proxy's connection ended.
    ChildGone(u32),
    /// The connection to the parent proxy is up (its writing half).
    Parent(Upstream),
    /// A child proxy connected (the writing half of its connection).
    Child(u32, Upstream),
    /// The way upstream is gone: barriers fail.
    Lost,
    /// The parent proxy's connection ended (see `Tree::orphaned`).
    ParentGone,
    /// A namespace for children this proxy spawns (before their `Child`).
    Namespace(NamespaceSpec),
    /// A spawned process started: serve its PMI connection as `index` of `kvs`.
    Spawned {
        kvs: String,
        index: u32,
        id: ConnId,
        conn: StdUnixStream,
        said: Arc<Said>,
    },
    /// The answer to a spawn request from connection `ConnId`.
    SpawnDone(ConnId, Result<Spawned, SpawnFailure>),
    /// rivetrun's answer to a name request.
    NameDone(ConnId, Result<Message, String>),
    /// Bytes rivetrun's job-wide server sends a connection (`pmi_out`).
    Out(ConnId, Vec<u8>),
    /// rivetrun's word on a PMIx direct modex.
    Pmix(crate::proxy::pmix::Msg),
    /// `--pmi-port`: the port the node's ranks connect to and its gate
    /// (sent before they start), what each rank did, the host (for messages).
    Port {
        opened: Opened,
        saids: HashMap<u32, Arc<Said>>,
        host: String,
    },
}

/// Who waits for a spawn's answer.
pub enum Asker {
    /// A PMI-1 `spawn` on this connection of the PMI loop.
    Pmi(ConnId),
    /// A `PMIx_Spawn` (the node's PMIx server's upcall).
    Pmix(SpawnCall),
}

/// A rank's spawn request, for the proxy's main thread.
pub struct SpawnAsk {
    pub asker: Asker,
    /// The namespace and rank of the process that asked.
    pub kvs: String,
    pub rank: u32,
    pub request: SpawnRequest,
}

/// How other threads reach the PMI loop.
#[derive(Clone)]
pub struct Handle {
    pub(super) tx: mpsc::Sender<Cmd>,
    pub(super) waker: Arc<Waker>,
}

impl Handle {
    pub fn send(&self, cmd: Cmd) {
        if self.tx.send(cmd).is_ok() {
            let _ = self.waker.wake();
        }
    }

    /// What wakes the loop (the PMIx server's upcalls use it too).
    pub fn waker(&self) -> Arc<Waker> {
        self.waker.clone()
    }
}
