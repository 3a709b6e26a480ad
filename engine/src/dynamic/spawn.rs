//! `spawn` (seed 001's spawn table): the root opens a port, asks the
//! process manager to start the children with the port pre-put in their
//! KVS (`PARENT_ROOT_PORT_NAME`, PMI `mcmd=spawn`), broadcasts how that
//! went, and every parent accepts the children's connection; the children
//! connect back from `Engine::init`.

use crate::comm::Comm;
use crate::dynamic::PARENT_PORT_KEY;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::pmi::wire::{SpawnCommand as PmiCommand, SpawnRequest};
use crate::thread::Threading;

/// One command of a spawn: a program, its arguments, how many copies, and
/// MPI_Info-style keys for the process manager (`wdir`, `path`, `host`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpawnCommand {
    pub program: String,
    pub args: Vec<String>,
    pub maxprocs: u32,
    pub info: Vec<(String, String)>,
}

impl SpawnCommand {
    pub fn new(program: &str, args: &[&str], maxprocs: u32) -> SpawnCommand {
        SpawnCommand {
            program: program.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            maxprocs,
            info: Vec::new(),
        }
    }

    pub fn info(mut self, key: &str, value: &str) -> SpawnCommand {
        self.info.push((key.to_string(), value.to_string()));
        self
    }
}

impl<T: Threading> Comm<T> {
    /// Start `maxprocs` copies of `program` and return the intercommunicator
    /// to them. Collective; the arguments matter at `root` only.
    pub fn spawn(&self, program: &str, args: &[&str], maxprocs: u32, root: u32) -> Result<Comm<T>> {
        self.spawn_multiple(&[SpawnCommand::new(program, args, maxprocs)], root)
    }

    /// Start every command's processes as one new process group (one
    /// COMM_WORLD, ranks in command order) and return the intercommunicator
    /// to it. All or nothing: if any process cannot start, none runs and
    /// every caller gets `Error::Spawn` with one code per process.
    pub fn spawn_multiple(&self, commands: &[SpawnCommand], root: u32) -> Result<Comm<T>> {
        self.check_rooted("spawn", root)?;
        let mut port = None;
        let outcome = (self.rank == root).then(|| -> Result<Vec<u8>> {
            if commands.is_empty() || commands.iter().any(|c| c.maxprocs == 0) {
                return Err(Error::InvalidArgument(
                    "spawn needs at least one command, each with maxprocs > 0".into(),
                ));
            }
            let name = self.inner.open_port()?;
            port = Some(name.clone());
            let request = SpawnRequest {
                commands: commands
                    .iter()
                    .map(|c| PmiCommand {
                        execname: c.program.clone(),
                        nprocs: c.maxprocs,
                        args: c.args.clone(),
                        info: c.info.clone(),
                    })
                    .collect(),
                preput: vec![(PARENT_PORT_KEY.to_string(), name.clone())],
            };
            let codes = self.inner.pmi_spawn(&request)?;
            if codes.iter().any(|&c| c != 0) {
                return Err(Error::Spawn {
                    message: "some processes could not be started".into(),
                    errcodes: codes,
                });
            }
            Ok(name.into_bytes())
        });
        let spawned = self.bcast_outcome(root, outcome);
        let result = spawned.and_then(|name| {
            let name = String::from_utf8_lossy(&name).into_owned();
            self.accept(&name, root)
        });
        if let Some(name) = port {
            let _ = self.inner.close_port(&name);
        }
        result
    }
}

impl<T: Threading> Engine<T> {
    /// Started by `spawn`: connect to the parents through the port they
    /// pre-put in our KVS (seed 001, spawnees' column). Called by start-up
    /// (`engine/startup.rs`).
    pub(crate) fn connect_to_parent(&self) -> Result<Comm<T>> {
        let port = self.inner.with_pmi(|pmi| pmi.get(PARENT_PORT_KEY))?;
        self.world().connect(&port, 0)
    }
}
