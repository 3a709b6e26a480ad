//! `accept` and `connect` (seed 001's connect/accept table).
//!
//! 1. Every member proposes a context id and sends its root its own
//!    description (process group, size, rank, business card); the root
//!    builds the group description.
//! 2. The roots meet over a temporary VC (the connector opens it with the
//!    port tag in the handshake; the acceptor takes it from the port's
//!    queue) and swap descriptions.
//! 3. Each root broadcasts the other side's description (or its failure).
//! 4. Every member registers the foreign process groups with their cards
//!    and builds the remote VC table: the intercommunicator, with the
//!    larger of the two context proposals.
//! 5. Local barrier (every member of this side is ready), the roots swap
//!    "ready" over the temporary VC and close it, the outcome is broadcast:
//!    after this no member of either side can receive traffic from a group
//!    it has not registered.

use crate::comm::Comm;
use crate::dynamic::PortName;
use crate::error::{Error, Result};
use crate::pg::{GroupDesc, MemberDesc, VcId};
use crate::thread::Threading;

const READY: &[u8] = b"ready";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Accept,
    Connect,
}

impl<T: Threading> Comm<T> {
    /// Wait for a `connect` to `port` and return the intercommunicator to
    /// the connecting group. Collective over this (intra)communicator;
    /// `port` matters at `root` only. Errors at the root (a bad or closed
    /// port) reach every member: none is left waiting.
    pub fn accept(&self, port: &str, root: u32) -> Result<Comm<T>> {
        self.connect_or_accept(port, root, Side::Accept)
    }

    /// Connect to a group waiting in `accept` on `port` (which matters at
    /// `root` only). Collective over this (intra)communicator.
    pub fn connect(&self, port: &str, root: u32) -> Result<Comm<T>> {
        self.connect_or_accept(port, root, Side::Connect)
    }

    fn connect_or_accept(&self, port: &str, root: u32, side: Side) -> Result<Comm<T>> {
        self.check_rooted("accept/connect", root)?;
        // Step 1.
        let me = self.inner.my_member()?;
        let proposal = self.agree_max(self.next_free_context())?;
        let members = self.gather_bytes(root, me.encode().as_bytes())?;

        // Steps 2-3.
        let mut temp = None;
        let outcome = members.map(|members| -> Result<Vec<u8>> {
            PortName::parse(port)?;
            let local = GroupDesc {
                context: proposal,
                members: members
                    .iter()
                    .map(|m| MemberDesc::parse(String::from_utf8_lossy(m).trim_end()))
                    .collect::<Result<_>>()?,
            };
            let t = match side {
                Side::Accept => self.inner.wait_port_connection(port)?,
                Side::Connect => self.inner.connect_port(port)?,
            };
            temp = Some(t);
            self.inner.port_send(t, &local.encode())?;
            self.inner.port_recv(t)
        });
        let remote = self.bcast_outcome(root, outcome);
        let remote = match remote {
            Ok(r) => GroupDesc::parse(&r),
            Err(e) => Err(e),
        };
        let remote = match remote {
            Ok(r) => r,
            Err(e) => {
                self.close_temp(temp);
                return Err(e);
            }
        };

        // Step 4.
        let context = proposal.max(remote.context);
        let remote_vcs = self.inner.register_group(&remote)?;
        let remote_vcrt = self.inner.new_vcrt(remote_vcs)?;
        self.take_context(context, 4)?;
        let inter = Comm {
            inner: self.inner.clone(),
            context,
            rank: self.rank,
            size: self.size,
            local: self.local.clone(),
            remote: Some(remote_vcrt),
            first: side == Side::Accept,
            _threads: std::marker::PhantomData,
        };

        // Step 5.
        let ready = self.barrier().and_then(|()| {
            let synced = temp.map(|t| -> Result<Vec<u8>> {
                self.inner.port_send(t, READY)?;
                let got = self.inner.port_recv(t)?;
                if got != READY {
                    return Err(Error::Failed("the other root did not get ready".into()));
                }
                Ok(Vec::new())
            });
            self.close_temp(temp);
            self.bcast_outcome(root, synced)
        });
        match ready {
            Ok(_) => Ok(inter),
            Err(e) => {
                // Half-made: give the other group's VCs back as disconnect
                // does, so no connection outlives the failed operation.
                self.close_temp(temp);
                if let Some(remote) = inter.remote.clone() {
                    remote.mark_disconnect();
                }
                Err(e)
            }
        }
    }

    fn close_temp(&self, temp: Option<VcId>) {
        if let Some(t) = temp {
            let _ = self.inner.close_temp(t);
        }
    }
}
