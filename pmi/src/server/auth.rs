//! Who may speak on a `PMI_PORT` connection.
//!
//! Anyone on the machine can connect to a TCP port, so a connection that
//! has not identified itself is served nothing but the `initack`
//! handshake: any other line closes it (a stranger's `cmd=abort` never
//! reaches the launcher). The launcher gives every rank a random
//! `PMI_ID` of its own (not its rank) and the job a random secret
//! (`RIVET_PMI_SECRET`, 128 bits). An `initack` is admitted only with an
//! id the launcher handed out and not used before, and, when it carries a
//! `secret=` (Rivet's client sends it), the job's secret. MPICH's client
//! sends only its id: 31 random bits, good once, and only until the rank
//! it belongs to connects (milliseconds after start), so guessing one
//! means winning a race against the rank, which then fails loudly.

use std::collections::HashMap;
use std::io;

/// The variable rivetrun passes the job secret in.
pub const PORT_SECRET_ENV: &str = "RIVET_PMI_SECRET";

/// A PMI port holds at most this many connections beyond the ranks still
/// to come waiting unidentified at once, and closes more as they come: a
/// stranger cannot run the launcher out of files, nor crowd out a rank
/// (every rank not yet admitted has a place of its own).
pub const MAX_STRANGERS: usize = 64;

/// What the launcher handed out: each rank's `PMI_ID` (index = rank) and
/// the job secret. An id of 0 or less is handed to nobody: a proxy's
/// gate ([`PortAuth::for_ranks`]) admits only the ranks it placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAuth {
    pub secret: String,
    pub ids: Vec<i32>,
}

/// `n` bytes from the kernel's random source.
pub fn random_bytes(n: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; n];
    let mut filled = 0;
    while filled < n {
        // SAFETY: getrandom writes at most `n - filled` bytes into the
        // unfilled tail of `buf`, which we own.
        let got = unsafe {
            libc::getrandom(
                buf[filled..].as_mut_ptr().cast(),
                n - filled,
                0, // block until the pool is ready, as /dev/urandom would not
            )
        };
        if got < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        filled += got as usize;
    }
    Ok(buf)
}

impl PortAuth {
    /// A fresh 128-bit secret (hex) and distinct positive random ids for
    /// `size` ranks.
    pub fn generate(size: u32) -> io::Result<PortAuth> {
        let secret: String = random_bytes(16)?
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let mut ids = Vec::with_capacity(size as usize);
        let mut seen = std::collections::HashSet::new();
        while ids.len() < size as usize {
            let want = (size as usize - ids.len()) * 4;
            for chunk in random_bytes(want)?.chunks_exact(4) {
                let id = (u32::from_le_bytes(chunk.try_into().expect("4 bytes")) >> 1) as i32;
                if id > 0 && ids.len() < size as usize && seen.insert(id) {
                    ids.push(id);
                }
            }
        }
        Ok(PortAuth { secret, ids })
    }

    /// Ids for the ranks `ranks` of a job of `size` (a proxy's node), the
    /// job's `secret`: every other rank's id is 0, which admits nobody.
    pub fn for_ranks(size: u32, ranks: &[u32], secret: String) -> io::Result<PortAuth> {
        let fresh = PortAuth::generate(ranks.len() as u32)?;
        let mut ids = vec![0; size as usize];
        for (&rank, id) in ranks.iter().zip(fresh.ids) {
            if let Some(slot) = ids.get_mut(rank as usize) {
                *slot = id;
            }
        }
        Ok(PortAuth { secret, ids })
    }
}

/// The server's side of [`PortAuth`] for one namespace.
#[derive(Debug)]
pub(super) struct PortGate {
    secret: String,
    rank_of: HashMap<i32, u32>,
    ids: Vec<i32>,
    used: Vec<bool>,
}

impl PortGate {
    pub(super) fn new(auth: PortAuth) -> PortGate {
        let rank_of = auth
            .ids
            .iter()
            .enumerate()
            .filter(|&(_, &id)| id > 0)
            .map(|(rank, &id)| (id, rank as u32))
            .collect();
        PortGate {
            secret: auth.secret,
            used: vec![false; auth.ids.len()],
            ids: auth.ids,
            rank_of,
        }
    }

    /// The rank an `initack` from a connection not yet identified
    /// identifies, once; `Err` says why not (the answer's `msg`).
    pub(super) fn admit(&mut self, pmiid: i32, secret: Option<&str>) -> Result<u32, &'static str> {
        if secret.is_some_and(|s| !same(s.as_bytes(), self.secret.as_bytes())) {
            return Err("wrong_secret");
        }
        let Some(&rank) = self.rank_of.get(&pmiid) else {
            return Err("unknown_pmiid");
        };
        let used = &mut self.used[rank as usize];
        if *used {
            return Err("pmiid_already_used");
        }
        *used = true;
        Ok(rank)
    }

    /// Whether `pmiid` is the id handed to `rank` (a repeated `initack`).
    pub(super) fn is_id_of(&self, rank: u32, pmiid: i32) -> bool {
        pmiid > 0 && self.ids.get(rank as usize) == Some(&pmiid)
    }
}

/// Byte strings compared in time that depends on their length only.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_distinct_positive_and_secrets_differ() {
        let a = PortAuth::generate(1000).unwrap();
        let b = PortAuth::generate(3).unwrap();
        assert_eq!(a.ids.len(), 1000);
        assert!(a.ids.iter().all(|&i| i > 0));
        let distinct: std::collections::HashSet<_> = a.ids.iter().collect();
        assert_eq!(distinct.len(), 1000);
        assert_eq!(a.secret.len(), 32);
        assert_ne!(a.secret, b.secret);
    }

    #[test]
    fn an_id_admits_its_rank_once_and_a_wrong_secret_nobody() {
        let mut g = PortGate::new(PortAuth {
            secret: "s3cr3t".into(),
            ids: vec![77, 5],
        });
        assert_eq!(g.admit(5, Some("wrong!")), Err("wrong_secret"));
        assert_eq!(g.admit(0, None), Err("unknown_pmiid"));
        assert_eq!(g.admit(5, Some("s3cr3t")), Ok(1));
        assert_eq!(g.admit(5, Some("s3cr3t")), Err("pmiid_already_used"));
        assert_eq!(g.admit(77, None), Ok(0));
        assert!(g.is_id_of(0, 77) && !g.is_id_of(0, 5));
    }

    #[test]
    fn a_gate_for_some_ranks_admits_only_those() {
        let auth = PortAuth::for_ranks(5, &[3, 1], "job".into()).unwrap();
        assert_eq!(auth.ids.len(), 5);
        assert!(auth.ids[1] > 0 && auth.ids[3] > 0 && auth.ids[1] != auth.ids[3]);
        assert_eq!([auth.ids[0], auth.ids[2], auth.ids[4]], [0, 0, 0]);
        let (one, three) = (auth.ids[1], auth.ids[3]);
        let mut g = PortGate::new(auth);
        // The id 0 the other ranks "have" is nobody's.
        assert_eq!(g.admit(0, Some("job")), Err("unknown_pmiid"));
        assert!(!g.is_id_of(0, 0));
        assert_eq!(g.admit(three, Some("nope")), Err("wrong_secret"));
        assert_eq!(g.admit(three, Some("job")), Ok(3));
        assert_eq!(g.admit(one, None), Ok(1));
        assert_eq!(g.admit(one, Some("job")), Err("pmiid_already_used"));
    }
}
