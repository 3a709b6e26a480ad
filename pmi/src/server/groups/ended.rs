//! A process's end ([`Server::process_ended`]), or a whole namespace's
//! ([`Server::namespace_ended`]), and what it settles in every operation,
//! phase and group that named it.

use super::*;

impl Server {
    /// The launcher reaped rank `rank` of `ns`. Pending connects that
    /// expected it fail (or, with `optional`, go on without it), `group_ready`
    /// phases stop waiting for it (or fail), and the groups it was still
    /// connected to get `event=terminated`; groups made without
    /// `early_term` also yield [`Output::GroupMemberLost`]. Unknown
    /// processes and repeated reports are ignored.
    pub fn process_ended(&mut self, ns: NsId, rank: u32, out: &mut Vec<Output>) {
        if self
            .namespaces
            .get(ns as usize)
            .is_none_or(|n| rank >= n.size)
        {
            return;
        }
        let p = (ns, rank);
        if self.groups.has_ended(&p) {
            return;
        }
        self.groups.ended.insert(p);
        self.settle_ended(p, out);
    }

    /// Every process of namespace `ns` ended at once (its job's link to the
    /// name server's hub closed): what [`Server::process_ended`] does for
    /// each, in time proportional to the group state that names them rather
    /// than to the namespace's size (up to 2^20 processes).
    pub fn namespace_ended(&mut self, ns: NsId, out: &mut Vec<Output>) {
        if self.namespaces.get(ns as usize).is_none() || !self.groups.ended_namespaces.insert(ns) {
            return;
        }
        let g = &self.groups;
        let mine = |p: &&Proc| p.0 == ns && !g.ended.contains(p);
        let mut named: BTreeSet<Proc> = BTreeSet::new();
        for key in g.ops.keys().chain(g.poisoned.keys()) {
            named.extend(key.procs.iter().filter(mine));
        }
        for phase in g.ready.values() {
            named.extend(phase.pending.iter().filter(mine));
        }
        for record in g.records.values() {
            named.extend(record.connected.iter().filter(mine));
        }
        for p in named {
            self.settle_ended(p, out);
        }
        // The namespace's mark covers its processes' own ones.
        self.groups.ended.retain(|p| p.0 != ns);
    }

    /// The consequences of `p`'s end, once it is recorded as ended.
    pub(super) fn settle_ended(&mut self, p: Proc, out: &mut Vec<Output>) {
        let mut keys: Vec<OpKey> = self
            .groups
            .ops
            .iter()
            .filter(|(k, op)| k.expects(p) && !op.joined.contains_key(&p))
            .map(|(k, _)| k.clone())
            .collect();
        // Deterministic order of answers.
        keys.sort_by(|a, b| (&a.procs, &a.id).cmp(&(&b.procs, &b.id)));
        for key in keys {
            self.settle(&key, out);
        }
        let poisoned: Vec<OpKey> = self
            .groups
            .poisoned
            .keys()
            .filter(|k| k.expects(p))
            .cloned()
            .collect();
        for key in poisoned {
            self.drop_poison_if_done(&key);
        }
        let mut phases: Vec<u64> = self
            .groups
            .ready
            .iter()
            .filter(|(_, ph)| ph.pending.contains(&p))
            .map(|(&op, _)| op)
            .collect();
        phases.sort_unstable();
        for op in phases {
            self.ready_member_ended(op, p, out);
        }
        let groups: Vec<String> = self
            .groups
            .records
            .iter()
            .filter(|(_, r)| r.connected.contains(&p))
            .map(|(g, _)| g.clone())
            .collect();
        for g in groups {
            self.group_member_ended(&g, p, out);
        }
    }

    /// Every namespace that group state still names (see
    /// [`Server::retire_namespace`]).
    pub fn namespaces_in_group_state(&self) -> HashSet<NsId> {
        self.groups.namespaces_named()
    }

    /// Groups currently kept (for tests and diagnostics).
    pub fn group_count(&self) -> usize {
        self.groups.records.len()
    }
}
