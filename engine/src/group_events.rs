//! Group connect's events as the engine keeps them (seed 004): the live
//! groups, the events not yet handed out and the application's handlers.
//! Its own module below `inner`, which holds the table; the calls that
//! fill and drain it are `dynamic/group.rs`.

use std::collections::HashMap;

use rivet_pmi::group::ProcName;

use crate::vc_id::VcId;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupEventKind {
    /// `proc` joined the group (with `notify_each`).
    Connected,
    /// `proc` disconnected from the group (with `notify_each`).
    Disconnected,
    /// `proc` ended without disconnecting; its VC has failed.
    Terminated,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEvent {
    pub group: String,
    pub kind: GroupEventKind,
    pub proc: ProcName,
}

pub(crate) type Handler = Box<dyn FnMut(&GroupEvent) + Send>;

/// The engine's group state: live groups (for events), queued events,
/// handlers.
#[derive(Default)]
pub(crate) struct GroupTable {
    /// Group id → its members and their VCs.
    pub(crate) live: HashMap<String, Vec<(ProcName, VcId)>>,
    pub(crate) queued: Vec<GroupEvent>,
    pub(crate) handlers: Vec<Handler>,
}
