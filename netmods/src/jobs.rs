//! Which job a peer belongs to, for both netmods' handshakes: our own job
//! is group 0, another job is the group slot the engine gave it with
//! `Netmod::add_group`, and any other job is refused. An added job may
//! come with its group key (`Netmod::set_group_key`), which its HELLOs
//! must then prove.

use std::io;

use crate::auth::JobKey;
use crate::{split_peer, NetmodError, PeerId, TEMP_GROUP};

/// Longest job id (the PMI KVS name) a HELLO carries: KVS names are far
/// shorter, and a bound keeps handshake buffers fixed-size.
pub(crate) const MAX_JOB: usize = 256;

pub(crate) struct Jobs {
    /// Our own job's id.
    pub own: Vec<u8>,
    /// Other jobs whose processes are peers: (group slot, job id, the
    /// job's group key if it has one).
    added: Vec<(u32, Box<[u8]>, Option<JobKey>)>,
}

impl Jobs {
    pub(crate) fn new(own: &[u8]) -> Jobs {
        Jobs {
            own: own.to_vec(),
            added: Vec::new(),
        }
    }

    /// Processes of `job` are peers in `group` from now on.
    pub(crate) fn add(&mut self, group: u32, job: &[u8]) -> Result<(), String> {
        if group == 0 || group == TEMP_GROUP {
            return Err(format!("group {group} is reserved"));
        }
        if job.len() > MAX_JOB {
            return Err(format!("job id longer than {MAX_JOB} bytes"));
        }
        if job == self.own.as_slice() {
            return Err("that is this process's own job".into());
        }
        for (g, j, _) in &self.added {
            if *g == group {
                return Err(format!("group {group} was added already"));
            }
            if **j == *job {
                return Err(format!("that job was added already, as group {g}"));
            }
        }
        self.added.push((group, job.into(), None));
        Ok(())
    }

    /// `Netmod::set_group_key`: HELLOs from `group` must prove `key`.
    pub(crate) fn set_key(&mut self, group: u32, key: JobKey) -> Result<(), NetmodError> {
        match self.added.iter_mut().find(|(g, _, _)| *g == group) {
            Some((_, _, k)) => {
                *k = Some(key);
                Ok(())
            }
            None => Err(NetmodError::Io {
                what: format!("set_group_key({group})"),
                source: io::Error::new(io::ErrorKind::InvalidInput, "group not added"),
            }),
        }
    }

    /// The job id and group key of added group `group`.
    pub(crate) fn added(&self, group: u32) -> Option<(&[u8], Option<&JobKey>)> {
        self.added
            .iter()
            .find(|(g, _, _)| *g == group)
            .map(|(_, j, k)| (&**j, k.as_ref()))
    }

    /// `Netmod::add_group`.
    pub(crate) fn add_group(&mut self, group: u32, job: &str) -> Result<(), NetmodError> {
        self.add(group, job.as_bytes())
            .map_err(|why| NetmodError::Io {
                what: format!("add_group({group}, {job:?})"),
                source: io::Error::new(io::ErrorKind::InvalidInput, why),
            })
    }

    pub(crate) fn remove(&mut self, group: u32) {
        self.added.retain(|(g, _, _)| *g != group);
    }

    pub(crate) fn has(&self, group: u32) -> bool {
        group == 0 || self.added.iter().any(|(g, _, _)| *g == group)
    }

    /// The group slot of a connector's job, if it is ours or an added one.
    pub(crate) fn group_of(&self, job: &[u8]) -> Option<u32> {
        if job == self.own.as_slice() {
            return Some(0);
        }
        self.added
            .iter()
            .find(|(_, j, _)| **j == *job)
            .map(|(g, _, _)| *g)
    }

    /// Whether `Netmod::connect` may name `peer`: temporary peers come
    /// from `connect_port`, and other jobs must have been added.
    pub(crate) fn check_connect(&self, peer: PeerId) -> Result<(), NetmodError> {
        let err = |what: String| NetmodError::Peer { peer, what };
        match split_peer(peer).0 {
            TEMP_GROUP => Err(err("temporary peers come from connect_port".into())),
            g if !self.has(g) => Err(err(format!("process group {g} was not added"))),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer_id;

    #[test]
    fn add_group_errors() {
        let mut jobs = Jobs::new(b"me");
        assert!(jobs.add(0, b"x").is_err());
        assert!(jobs.add(TEMP_GROUP, b"x").is_err());
        assert!(jobs.add(1, b"me").is_err());
        assert!(jobs.add(1, &[b'j'; MAX_JOB + 1]).is_err());
        jobs.add(1, &[b'j'; MAX_JOB]).unwrap();
        assert!(jobs.add(1, b"y").is_err(), "group taken");
        assert!(jobs.add(2, &[b'j'; MAX_JOB]).is_err(), "job taken");
        assert!(jobs.has(0) && jobs.has(1) && !jobs.has(2));
        assert_eq!(jobs.group_of(b"me"), Some(0));
        assert_eq!(jobs.group_of(&[b'j'; MAX_JOB]), Some(1));
        assert!(jobs.check_connect(peer_id(1, 3)).is_ok());
        assert!(jobs.check_connect(peer_id(2, 3)).is_err());
        assert!(jobs.check_connect(peer_id(TEMP_GROUP, 0)).is_err());
        assert!(jobs.set_key(2, JobKey::new([1; 16])).is_err(), "not added");
        jobs.set_key(1, JobKey::new([1; 16])).unwrap();
        assert_eq!(jobs.added(1).unwrap().1, Some(&JobKey::new([1; 16])));
        jobs.remove(1);
        jobs.add(2, b"y").unwrap();
        assert_eq!(jobs.added(2), Some((&b"y"[..], None)));
        assert!(!jobs.has(1) && jobs.has(2));
        assert_eq!(jobs.group_of(&[b'j'; MAX_JOB]), None);
    }
}
