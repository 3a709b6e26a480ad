//! Group connect with other jobs for ranks bootstrapped by PMIx under
//! rivetrun, over rivetrun's PMI-1 group service.
//!
//! A PMIx server knows its own namespaces only, so a PMIx group cannot
//! reach a separately started job. rivetrun gives every rank its PMI-1
//! channel (`PMI_FD` or `PMI_PORT`) beside the PMIx variables, and its
//! PMI-1 group service reaches other jobs through the name server's group
//! hub. So a connect that names another namespace (or any cluster-qualified
//! name) goes there: a second client, on that channel, is started at the
//! first such connect and finalized with the PMIx one; its groups and
//! operations are remembered, so ready, disconnect and events follow them.
//! Every participant names the same processes, so all of them choose the
//! same path. Under other PMIx servers (no PMI-1 channel) such a connect is
//! refused as before.

use std::collections::HashSet;

use crate::client::groups::{GroupConnectReply, GroupConnectRequest};
use crate::client::{Client, ClientConfig, Transport};
use crate::error::Result;
use crate::group::GroupEvent;

/// The PMI-1 channel beside PMIx, and what went through it.
#[derive(Debug, Default)]
pub(crate) struct Side {
    /// How to reach rivetrun's PMI-1 server, until connected.
    config: Option<ClientConfig>,
    client: Option<Box<Client>>,
    ops: HashSet<u64>,
    groups: HashSet<String>,
}

impl Side {
    /// The PMI-1 channel the environment offers beside PMIx, if any.
    pub fn from_env() -> Side {
        let config = ClientConfig::from_vars(|k| match k {
            "RIVET_PMI" => Some("pmi1".to_string()),
            _ => std::env::var(k).ok(),
        })
        .ok()
        .filter(|c| matches!(c.transport, Transport::Fd { .. } | Transport::Port { .. }));
        Side {
            config,
            ..Side::default()
        }
    }

    /// Whether `req` goes over PMI-1: it names another namespace or a
    /// cluster, and a PMI-1 channel exists.
    pub fn takes(&self, req: &GroupConnectRequest, own: &str) -> bool {
        (self.config.is_some() || self.client.is_some())
            && req
                .procs
                .iter()
                .any(|p| p.cluster.is_some() || p.nspace != own)
    }

    fn client(&mut self) -> Result<&mut Client> {
        if self.client.is_none() {
            let config = self.config.take().expect("takes() checked the channel");
            self.client = Some(Box::new(Client::connect(config)?));
        }
        Ok(self.client.as_mut().expect("connected above"))
    }

    pub fn connect(&mut self, req: &GroupConnectRequest) -> Result<GroupConnectReply> {
        let reply = self.client()?.group_connect(req)?;
        self.ops.insert(reply.op);
        if let Some(g) = &reply.group {
            self.groups.insert(g.clone());
        }
        Ok(reply)
    }

    /// `Some` if connect `op` went over PMI-1.
    pub fn ready(&mut self, op: u64) -> Option<Result<()>> {
        if !self.ops.remove(&op) {
            return None;
        }
        Some(self.client().and_then(|c| c.group_ready(op)))
    }

    /// `Some` if `group` was made over PMI-1.
    pub fn disconnect(&mut self, group: &str) -> Option<Result<()>> {
        if !self.groups.remove(group) {
            return None;
        }
        Some(self.client().and_then(|c| c.group_disconnect(group)))
    }

    pub fn poll_events(&mut self) -> Result<Vec<GroupEvent>> {
        match &mut self.client {
            Some(c) => c.poll_events(),
            None => Ok(Vec::new()),
        }
    }

    /// Finalize the PMI-1 client, if one was started (rivetrun expects a
    /// finalize from every rank that spoke PMI-1).
    pub fn finalize(&mut self) -> Result<()> {
        match self.client.take() {
            Some(c) => c.finalize(),
            None => Ok(()),
        }
    }
}
