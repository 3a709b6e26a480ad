//! Host lists (`-hosts a,b:2`, `-hostfile FILE`) and where each rank goes.
//!
//! Hydra's rules: a host has a number of slots (`host:slots`, default 1);
//! ranks are given out block-wise, as many to each host as its slots (or
//! `-ppn`), in list order, starting over at the first host while ranks
//! remain. A host named twice is one node (its ranks are added up).

use std::path::Path;

/// One entry of a host list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostEntry {
    pub name: String,
    pub slots: u32,
}

/// The nodes of a job: each distinct host with the ranks placed on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub host: String,
    /// Global ranks, ascending.
    pub ranks: Vec<u32>,
}

/// Parse one `host[:slots]` word.
pub fn parse_entry(word: &str) -> Result<HostEntry, String> {
    let word = word.trim();
    let (name, slots) = match word.rsplit_once(':') {
        Some((name, slots)) => {
            let n: u32 = slots
                .parse()
                .map_err(|_| format!("bad slot count {slots:?} in host {word:?}"))?;
            if n == 0 {
                return Err(format!("host {word:?} has 0 slots"));
            }
            (name, n)
        }
        None => (word, 1),
    };
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c == ',') {
        return Err(format!("bad host name {name:?}"));
    }
    Ok(HostEntry {
        name: name.to_string(),
        slots,
    })
}

/// `a,b:2,c` (what `-hosts` and `-host` take).
pub fn parse_list(list: &str) -> Result<Vec<HostEntry>, String> {
    let entries: Vec<HostEntry> = list
        .split(',')
        .filter(|w| !w.trim().is_empty())
        .map(parse_entry)
        .collect::<Result<_, _>>()?;
    if entries.is_empty() {
        return Err("empty host list".into());
    }
    Ok(entries)
}

/// A host file's text: one `host[:slots]` per line, `#` starts a comment,
/// blank lines are skipped.
pub fn parse_file_text(text: &str) -> Result<Vec<HostEntry>, String> {
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        entries.push(parse_entry(line).map_err(|e| format!("line {}: {e}", i + 1))?);
    }
    if entries.is_empty() {
        return Err("no hosts in it".into());
    }
    Ok(entries)
}

/// Read a host file.
pub fn read_file(path: &Path) -> Result<Vec<HostEntry>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_file_text(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Place `nranks` ranks block-wise: each host in turn gets `ppn` ranks (or
/// its slots), round and round until none remain. Nodes come in the order
/// their host first appears; hosts that get no rank are left out.
pub fn place(entries: &[HostEntry], nranks: u32, ppn: Option<u32>) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::new();
    let mut next = 0u32;
    if entries.is_empty() {
        return nodes;
    }
    'outer: loop {
        for e in entries {
            let take = ppn.unwrap_or(e.slots).max(1);
            for _ in 0..take {
                if next == nranks {
                    break 'outer;
                }
                match nodes.iter_mut().find(|n| n.host == e.name) {
                    Some(n) => n.ranks.push(next),
                    None => nodes.push(Node {
                        host: e.name.clone(),
                        ranks: vec![next],
                    }),
                }
                next += 1;
            }
        }
    }
    nodes
}

/// Node index of every rank (what `PMI_process_mapping` is built from).
pub fn node_of_rank(nodes: &[Node], nranks: u32) -> Vec<u32> {
    let mut of = vec![0u32; nranks as usize];
    for (i, n) in nodes.iter().enumerate() {
        for &r in &n.ranks {
            of[r as usize] = i as u32;
        }
    }
    of
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(nodes: &[Node]) -> Vec<(&str, Vec<u32>)> {
        nodes
            .iter()
            .map(|n| (n.host.as_str(), n.ranks.clone()))
            .collect()
    }

    #[test]
    fn entries_and_slots() {
        assert_eq!(
            parse_list("a,b:3").unwrap(),
            vec![
                HostEntry {
                    name: "a".into(),
                    slots: 1
                },
                HostEntry {
                    name: "b".into(),
                    slots: 3
                }
            ]
        );
        assert!(parse_list("a:0").is_err());
        assert!(parse_list("a:x").is_err());
        assert!(parse_list(",").is_err());
    }

    #[test]
    fn host_file_comments_and_blank_lines() {
        let e = parse_file_text("# cluster\nh1:2\n\n  h2  # second\n").unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!((e[0].name.as_str(), e[0].slots), ("h1", 2));
        assert_eq!((e[1].name.as_str(), e[1].slots), ("h2", 1));
        let err = parse_file_text("h1\nh2:zero\n").unwrap_err();
        assert!(err.contains("line 2"), "{err}");
        assert!(parse_file_text("# nothing\n").is_err());
    }

    #[test]
    fn block_placement_by_slots_then_wraps() {
        let e = parse_list("a:2,b:2,c").unwrap();
        let nodes = place(&e, 7, None);
        assert_eq!(
            names(&nodes),
            vec![("a", vec![0, 1, 5, 6]), ("b", vec![2, 3]), ("c", vec![4])]
        );
        assert_eq!(node_of_rank(&nodes, 7), vec![0, 0, 1, 1, 2, 0, 0]);
    }

    #[test]
    fn ppn_overrides_slots_and_unused_hosts_drop_out() {
        let e = parse_list("a:8,b,c").unwrap();
        let nodes = place(&e, 4, Some(2));
        assert_eq!(names(&nodes), vec![("a", vec![0, 1]), ("b", vec![2, 3])]);
    }

    #[test]
    fn a_host_listed_twice_is_one_node() {
        let e = parse_list("a,b,a").unwrap();
        let nodes = place(&e, 3, None);
        assert_eq!(names(&nodes), vec![("a", vec![0, 2]), ("b", vec![1])]);
    }
}
