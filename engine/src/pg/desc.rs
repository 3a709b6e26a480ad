//! Group descriptions: what connect/accept and spawn ship between roots
//! (seed 001, steps 3-8: the PG strings and the rank translations, in one).
//!
//! A description lists a communicator's members in rank order, each as
//! (process group, its size, rank in it, business card), plus a context-id
//! proposal. The receiver learns every foreign PG it did not know, with
//! the connection info it cannot read from its own KVS (seed 000).
//!
//! ```text
//! rivet-group 1 <context> <members>
//! <pg> <pg size> <rank> <contact>          one line per member
//! ```
//!
//! A member's contact is its business card (`-` for none), followed by
//! `#` and its job's group key in hex when its job has a secret
//! ([`contact`]): the key its rank HELLOs prove between jobs
//! (`rivet_netmods::auth`). Group connect sends the same contact string
//! through the process manager.

use rivet_netmods::auth::JobKey;

use crate::error::{Error, Result};

/// A business card and group key as one string (the form descriptions
/// and group connect carry).
pub fn contact(card: &str, key: Option<&JobKey>) -> String {
    let card = if card.is_empty() { "-" } else { card };
    match key {
        Some(k) => format!("{card}#{}", k.to_hex()),
        None => card.to_string(),
    }
}

/// The card (empty for none) and group key of a [`contact`] string.
pub fn split_contact(s: &str) -> Result<(String, Option<JobKey>)> {
    let (card, key) = match s.rsplit_once('#') {
        Some((card, hex)) => (
            card,
            Some(JobKey::from_hex(hex).map_err(|e| bad(format!("group key: {e}")))?),
        ),
        None => (s, None),
    };
    let card = if card == "-" { "" } else { card };
    Ok((card.to_string(), key))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDesc {
    pub pg: String,
    pub pg_size: u32,
    pub rank: u32,
    /// Empty when the member has no network module open.
    pub card: String,
    /// Its job's group key, if its job has a secret.
    pub key: Option<JobKey>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDesc {
    /// The sender's proposal for a context id free on all its members.
    pub context: u32,
    pub members: Vec<MemberDesc>,
}

/// Longest description we accept: 2^20 members of a few dozen bytes.
const MAX_MEMBERS: usize = 1 << 20;

fn bad(why: impl std::fmt::Display) -> Error {
    Error::Failed(format!("bad group description from the peer: {why}"))
}

impl MemberDesc {
    /// One member as a line (the form members send their root, too).
    pub fn encode(&self) -> String {
        let contact = contact(&self.card, self.key.as_ref());
        format!("{} {} {} {contact}\n", self.pg, self.pg_size, self.rank)
    }

    pub fn parse(line: &str) -> Result<MemberDesc> {
        // A control byte (a newline above all) in a field would let one
        // member's line become several in the description its root sends.
        if line.bytes().any(|b| b.is_ascii_control()) {
            return Err(bad(format!("member line {line:?} has a control byte")));
        }
        let mut f = line.split(' ');
        let (Some(pg), Some(size), Some(rank), Some(contact), None) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            return Err(bad(format!("member line {line:?}")));
        };
        let num = |s: &str| s.parse::<u32>().map_err(|_| bad(format!("number {s:?}")));
        let (pg_size, rank) = (num(size)?, num(rank)?);
        if pg.is_empty() || rank >= pg_size {
            return Err(bad(format!("member line {line:?}")));
        }
        let (card, key) = split_contact(contact)?;
        Ok(MemberDesc {
            pg: pg.to_string(),
            pg_size,
            rank,
            card,
            key,
        })
    }
}

impl GroupDesc {
    pub fn encode(&self) -> Vec<u8> {
        let mut s = format!("rivet-group 1 {} {}\n", self.context, self.members.len());
        for m in &self.members {
            s.push_str(&m.encode());
        }
        s.into_bytes()
    }

    pub fn parse(bytes: &[u8]) -> Result<GroupDesc> {
        let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
        let mut lines = text.lines();
        let head: Vec<&str> = lines.next().unwrap_or("").split(' ').collect();
        let ["rivet-group", "1", context, count] = head[..] else {
            return Err(bad(format!("header {:?}", head.join(" "))));
        };
        let context = context.parse().map_err(|_| bad("context"))?;
        let count: usize = count.parse().map_err(|_| bad("member count"))?;
        if count == 0 || count > MAX_MEMBERS {
            return Err(bad(format!("{count} members")));
        }
        let members = lines.map(MemberDesc::parse).collect::<Result<Vec<_>>>()?;
        if members.len() != count {
            return Err(bad(format!(
                "{} members, header says {count}",
                members.len()
            )));
        }
        Ok(GroupDesc { context, members })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_round_trip_and_garbage_is_an_error() {
        let d = GroupDesc {
            context: 12,
            members: vec![
                MemberDesc {
                    pg: "kvs_1".into(),
                    pg_size: 2,
                    rank: 1,
                    card: "tcp:10.0.0.1:5".into(),
                    key: Some(JobKey::new([3; 16])),
                },
                MemberDesc {
                    pg: "kvs_2".into(),
                    pg_size: 4,
                    rank: 3,
                    card: String::new(),
                    key: None,
                },
            ],
        };
        assert_eq!(GroupDesc::parse(&d.encode()).unwrap(), d);
        for bad in [
            &b""[..],
            b"rivet-group 1 12 3\nkvs_1 2 1 -\n",
            b"rivet-group 2 12 1\nkvs_1 2 1 -\n",
            b"rivet-group 1 x 1\nkvs_1 2 1 -\n",
            b"rivet-group 1 1 1\nkvs_1 2 2 -\n",
            b"rivet-group 1 1 1\nkvs_1 2 1\n",
            b"rivet-group 1 1 1\nkvs_1 2 1 tcp:1.2.3.4:5#00\n",
            b"rivet-group 1 1 1\nkvs_1 2 1 -#zz\n",
            b"rivet-group 1 1 0\n",
            b"\xff\xfe",
        ] {
            assert!(
                GroupDesc::parse(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// Found by the `parsers` fuzz target: a member line (as a member sends
    /// it to its root) with a newline inside a field parsed, and its root's
    /// description would then have carried an extra member.
    #[test]
    fn a_member_line_with_a_control_byte_is_refused() {
        for bad in [
            "kvs 2 1 -\n",
            "kvs 2 1 tcp:1.2.3.4:5\nkvs 2 0 -",
            "k\0vs 2 1 -",
            "kvs 2 1 c\r",
        ] {
            assert!(MemberDesc::parse(bad).is_err(), "{bad:?}");
        }
        assert!(MemberDesc::parse("kvs 2 1 -").is_ok());
    }
}
