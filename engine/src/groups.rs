//! The engine's side of the PG/VC layer: opening the netmod when dynamic
//! processes first need it, describing this process to other groups,
//! registering the groups they describe, and creating and releasing VC
//! tables with the reference counts of seed 000.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rivet_pmi::Client;

use crate::core::Core;
use crate::error::{Error, Result};
use crate::inner::Inner;
use crate::netmod;
use crate::pg::{ForeignPg, GroupDesc, MemberDesc, ReleaseVcs, VcId, Vcrt};
use crate::route::Route;
use crate::wire::{MsgKind, WireHeader};

impl Inner {
    /// Run `f` on the PMI client (cold paths only; lock order: never while
    /// holding the engine lock).
    pub(crate) fn with_pmi<T>(
        &self,
        f: impl FnOnce(&mut Client) -> rivet_pmi::Result<T>,
    ) -> Result<T> {
        let mut pmi = self.pmi.lock().unwrap_or_else(|p| p.into_inner());
        let Some(client) = pmi.as_mut() else {
            return Err(if self.finalized.load(Ordering::Relaxed) {
                Error::Finalized
            } else {
                Error::Unsupported(
                    "this needs a process manager, and the engine was bootstrapped externally \
                     (Engine::bootstrap_external) without one"
                        .into(),
                )
            });
        };
        Ok(f(client)?)
    }

    /// [`Inner::with_pmi`] for a call that waits on other processes (group
    /// connect): it runs on a helper thread while this one keeps the engine
    /// progressing, so messages we queued still reach peers that must get
    /// them before they can make the same call.
    pub(crate) fn with_pmi_progressing<T: Send>(
        &self,
        f: impl FnOnce(&mut Client) -> rivet_pmi::Result<T> + Send,
    ) -> Result<T> {
        std::thread::scope(|s| {
            let call = s.spawn(|| self.with_pmi(f));
            self.progress_until(|_| call.is_finished().then_some(Ok(())))?;
            call.join()
                .unwrap_or_else(|_| Err(Error::Failed("the PMI call panicked".into())))
        })
    }

    pub(crate) fn pmi_spawn(&self, request: &rivet_pmi::wire::SpawnRequest) -> Result<Vec<i32>> {
        self.with_pmi(|pmi| pmi.spawn(request))
            .map_err(|e| match e {
                Error::Pmi(rivet_pmi::Error::SpawnFailed { errcodes, message }) => {
                    Error::Spawn { message, errcodes }
                }
                Error::Pmi(e) => Error::Spawn {
                    message: e.to_string(),
                    errcodes: Vec::new(),
                },
                e => e,
            })
    }

    /// This process's business card, opening the netmod first if a job on
    /// one node ran without one: other process groups reach us through it.
    pub(crate) fn ensure_netmod(&self) -> Result<String> {
        let mut core = self.lock()?;
        if let Some(net) = core.netmod() {
            return Ok(net.business_card().to_string());
        }
        let job = core.st.world().id.clone();
        let hints = netmod::Hints {
            one_node: false,
            one_thread: self.level <= crate::thread::ThreadLevel::Funneled,
        };
        let net = netmod::open(self.netmod_choice, &job, self.rank, hints)?.netmod;
        let card = net.business_card().to_string();
        core.open_netmod(net);
        Ok(card)
    }

    /// How other groups see this process (seed 001, ExtractLocalPGInfo).
    pub(crate) fn my_member(&self) -> Result<MemberDesc> {
        let card = self.ensure_netmod()?;
        let core = self.lock()?;
        let world = core.st.world();
        Ok(MemberDesc {
            pg: world.id.clone(),
            pg_size: world.size,
            rank: world.my_rank,
            card,
            key: group_key(),
        })
    }

    /// The VCs of a described group, registering the foreign process
    /// groups it names (with their cards) with us and with the netmod.
    pub(crate) fn register_group(&self, desc: &GroupDesc) -> Result<Vec<VcId>> {
        let mut core = self.lock()?;
        let core = &mut *core;
        let mut vcs = Vec::with_capacity(desc.members.len());
        for m in &desc.members {
            let world = core.st.world();
            if m.pg == world.id {
                if m.rank >= world.size {
                    return Err(Error::Failed(format!(
                        "the peer names rank {} of our own group of {}",
                        m.rank, world.size
                    )));
                }
                vcs.push(VcId::world(m.rank));
                continue;
            }
            let (slot, new) = core.st.add_group(&m.pg, m.pg_size)?;
            if new {
                let net = core
                    .netmod_mut()
                    .ok_or_else(|| Error::Failed("no netmod open".into()))?;
                net.add_group(slot, &m.pg)?;
                // Its ranks' HELLOs must prove the key its members sent.
                if let Some(key) = m.key {
                    net.set_group_key(slot, key)?;
                }
            }
            let id = VcId::new(slot, m.rank);
            if !m.card.is_empty() {
                core.st.set_card(id, m.card.clone());
            }
            vcs.push(id);
        }
        Ok(vcs)
    }

    /// A VC table over `members`, taking a reference on each (seed 000:
    /// "add to VCRT").
    pub(crate) fn new_vcrt(self: &Arc<Self>, members: Vec<VcId>) -> Result<Arc<Vcrt>> {
        let mut core = self.lock()?;
        for (i, &id) in members.iter().enumerate() {
            if let Err(e) = core.st.add_ref(id) {
                for &undo in &members[..i] {
                    if let Some(pg) = core.st.release_ref(undo, true) {
                        core.retire_group(pg);
                    }
                }
                return Err(e);
            }
        }
        self.vcrts.fetch_add(1, Ordering::Relaxed);
        let engine: std::sync::Weak<Inner> = Arc::downgrade(self);
        Ok(Arc::new(Vcrt::table(members, engine)))
    }
}

impl ReleaseVcs for Inner {
    /// The last handle on a VC table went (seed 000: "when VCRT freed").
    fn release_vcrt(&self, members: &[VcId], disconnect: bool) {
        let mut core = self.lock_even_finalized();
        for &id in members {
            if let Some(pg) = core.st.release_ref(id, disconnect) {
                core.retire_group(pg);
            }
        }
        self.vcrts.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Our job's group key (`rivet_netmods::auth`), shipped in our member
/// description; `None` for a job without a secret (Hydra, singletons).
pub(crate) fn group_key() -> Option<rivet_netmods::auth::JobKey> {
    rivet_netmods::auth::job_key_from_env()
        .ok()
        .flatten()
        .map(|k| k.group_key())
}

impl Core {
    /// A foreign group nothing uses any more: say goodbye on each of its
    /// connections (so the peer does not take the close for a failure),
    /// close them, and forget the group.
    pub fn retire_group(&mut self, pg: ForeignPg) {
        let slot = pg.slot;
        let bye = WireHeader {
            kind: MsgKind::Bye as u8,
            ..WireHeader::default()
        };
        for (rank, mut vc) in pg.into_vcs() {
            let id = VcId::new(slot, rank);
            for item in vc.pending.drain(..) {
                self.st.fail_request_for(item.request(), id);
            }
            if let (Some(net), Route::Netmod(peer)) = (self.netmod_mut(), vc.route) {
                if net.knows(peer) {
                    if !vc.failed {
                        let _ = net.try_send(peer, bye.as_bytes(), &[]);
                    }
                    net.disconnect(peer);
                }
            }
        }
        self.st.group_retired(slot);
        if let Some(net) = self.netmod_mut() {
            net.remove_group(slot);
        }
    }
}
