//! The rank's side of resource registration (`crate::resource`): register
//! a resource so rivetrun frees it if this process dies, release it after
//! freeing it yourself. Every other process manager (Hydra, Slurm, PMIx,
//! a singleton) gets no request: an error says the caller must clean up
//! itself, as seed 002 requires. The request goes out only where the job
//! attribute `PMI_rivet_resources` says the manager frees resources (an
//! unknown command would end a Hydra job).

use crate::error::{Error, Result};
use crate::resource::{Resource, KEY_RESOURCES};
use crate::wire::Message;

use super::{Client, Mode};

impl Client {
    /// Ask the process manager to free `resource` when this process ends
    /// without releasing it. Registering one twice is registering it once.
    pub fn register_resource(&mut self, resource: &Resource) -> Result<()> {
        self.resource_request(Message::ResourceRegister(resource.clone()))
    }

    /// This process freed `resource` itself: the process manager forgets it.
    pub fn release_resource(&mut self, resource: &Resource) -> Result<()> {
        self.resource_request(Message::ResourceRelease(resource.clone()))
    }

    /// Whether the process manager frees registered resources.
    pub fn frees_resources(&mut self) -> bool {
        matches!(self.mode, Mode::Remote(_))
            && self
                .job_attribute(KEY_RESOURCES)
                .is_ok_and(|v| v.is_some_and(|v| !v.is_empty()))
    }

    fn resource_request(&mut self, msg: Message) -> Result<()> {
        let op = msg.cmd();
        let refused = |message: String| Error::ResourceRefused { op, message };
        if !self.frees_resources() {
            return Err(refused(match self.mode {
                Mode::Remote(_) => "the process manager does not offer it".into(),
                _ => "there is no PMI-1 process manager (singleton, PMI-2 or PMIx)".into(),
            }));
        }
        let Mode::Remote(conn) = &mut self.mode else {
            return Err(refused("no process manager".into()));
        };
        let expected = crate::wire::response_name(op).unwrap_or("error");
        conn.send(&msg)?;
        let reply = conn.recv(expected)?;
        match reply.status() {
            Some((0, _)) if reply.cmd() == expected => Ok(()),
            Some((rc, m)) => {
                Err(refused(m.map(str::to_string).unwrap_or_else(|| {
                    format!("the process manager answered rc={rc}")
                })))
            }
            None => Err(refused(format!("unexpected answer cmd={}", reply.cmd()))),
        }
    }
}
