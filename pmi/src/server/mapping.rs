//! `PMI_process_mapping`: which node each rank runs on, in MPICH's
//! `(vector,(start_node,num_nodes,ppn),...)` form.
//!
//! Without this key MPICH cannot tell which ranks share a node (it falls back
//! to an allgather of hostnames). The writer emits only plain triplets,
//! which every MPICH version parses (4.0.2's parser knows nothing else); the
//! reader takes the whole `mpl_rankmap.c` grammar: bare node ids,
//! `[...]xN` repeats, and the legacy wrap-around (ranks left over after the
//! list restart at the first block that begins at node 0).

use crate::error::{Error, Result};
use crate::wire::limits::MAX_VALUE;

/// `(start_node, num_nodes, ppn)`
type Triplet = (u32, u32, u32);

/// Runs of equal node ids, merged into triplets where consecutive nodes hold
/// the same number of ranks.
fn triplets(node_of_rank: &[u32]) -> Vec<Triplet> {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &node in node_of_rank {
        match runs.last_mut() {
            Some((n, count)) if *n == node => *count += 1,
            _ => runs.push((node, 1)),
        }
    }
    let mut out: Vec<Triplet> = Vec::new();
    for (node, ppn) in runs {
        match out.last_mut() {
            Some((start, nodes, p))
                if *p == ppn && u64::from(*start) + u64::from(*nodes) == u64::from(node) =>
            {
                *nodes += 1
            }
            _ => out.push((node, 1, ppn)),
        }
    }
    out
}

fn render(blocks: &[Triplet]) -> String {
    let mut s = String::from("(vector");
    for (a, b, c) in blocks {
        s.push_str(&format!(",({a},{b},{c})"));
    }
    s.push(')');
    s
}

/// Length of the shortest prefix that, repeated, gives the whole slice
/// (Knuth-Morris-Pratt failure function; linear time).
fn shortest_period(v: &[u32]) -> usize {
    let n = v.len();
    let mut fail = vec![0usize; n];
    let mut k = 0;
    for i in 1..n {
        while k > 0 && v[i] != v[k] {
            k = fail[k - 1];
        }
        if v[i] == v[k] {
            k += 1;
        }
        fail[i] = k;
    }
    n - fail.last().copied().unwrap_or(0)
}

/// The mapping string for `node_of_rank`, or `""` ("unknown") when it
/// exceeds [`MAX_VALUE`] bytes.
///
/// Block: 2 nodes × 4 ranks → `(vector,(0,2,4))`; round-robin over 2 nodes,
/// 8 ranks → `(vector,(0,2,1),(0,2,1),(0,2,1),(0,2,1))`.
pub fn process_mapping(node_of_rank: &[u32]) -> String {
    process_mapping_within(node_of_rank, MAX_VALUE)
}

/// Like [`process_mapping`] with an explicit length limit.
///
/// When the explicit list is too long but the map is periodic and starts at
/// node 0, only the first period is written; MPICH's wrap-around rule
/// expands it back (checked against MPICH 4.0.2's parser).
pub fn process_mapping_within(node_of_rank: &[u32], max_len: usize) -> String {
    if node_of_rank.is_empty() {
        return String::new();
    }
    let full = render(&triplets(node_of_rank));
    if full.len() <= max_len {
        return full;
    }
    let period = shortest_period(node_of_rank);
    if period < node_of_rank.len() && node_of_rank[0] == 0 {
        let compact = render(&triplets(&node_of_rank[..period]));
        if compact.len() <= max_len {
            return compact;
        }
    }
    String::new()
}

// ---------------------------------------------------------------- reader

fn bad(reason: impl Into<String>) -> Error {
    Error::Malformed {
        reason: format!("PMI_process_mapping: {}", reason.into()),
    }
}

/// A list item: a triplet, or a bracketed list of triplets repeated.
enum Item {
    Block(Triplet),
    Repeat(Vec<Triplet>, u32),
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn skip_ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.i).copied()
    }

    fn expect(&mut self, c: u8) -> Result<()> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(bad(format!("expected '{}' at byte {}", c as char, self.i)))
        }
    }

    fn number(&mut self) -> Result<u32> {
        self.skip_ws();
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
            self.i += 1;
        }
        std::str::from_utf8(&self.s[start..self.i])
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| bad(format!("expected a number at byte {start}")))
    }

    /// `num` or `(num,num,num)`
    fn block(&mut self) -> Result<Triplet> {
        if self.peek() == Some(b'(') {
            self.i += 1;
            let a = self.number()?;
            self.expect(b',')?;
            let b = self.number()?;
            self.expect(b',')?;
            let c = self.number()?;
            self.expect(b')')?;
            Ok((a, b, c))
        } else {
            Ok((self.number()?, 1, 1))
        }
    }
}

fn parse_items(s: &str) -> Result<Vec<Item>> {
    let mut c = Cursor {
        s: s.as_bytes(),
        i: 0,
    };
    c.expect(b'(')?;
    c.skip_ws();
    if !c.s[c.i..].starts_with(b"vector") {
        return Err(bad("only the (vector,...) form is known"));
    }
    c.i += "vector".len();
    let mut items = Vec::new();
    loop {
        match c.peek() {
            Some(b')') => {
                c.i += 1;
                break;
            }
            Some(b',') => c.i += 1,
            _ => return Err(bad(format!("expected ',' or ')' at byte {}", c.i))),
        }
        if c.peek() == Some(b'[') {
            c.i += 1;
            let mut blocks = vec![c.block()?];
            while c.peek() == Some(b',') {
                c.i += 1;
                blocks.push(c.block()?);
            }
            c.expect(b']')?;
            c.expect(b'x')?;
            items.push(Item::Repeat(blocks, c.number()?));
        } else {
            items.push(Item::Block(c.block()?));
        }
    }
    if c.peek().is_some() {
        return Err(bad("trailing characters after the closing ')'"));
    }
    if items.is_empty() {
        return Err(bad("no blocks"));
    }
    Ok(items)
}

/// Append the ranks of one triplet, stopping at `n`.
fn expand(out: &mut Vec<u32>, (start, nodes, ppn): Triplet, n: usize) -> Result<()> {
    for node in 0..nodes {
        let id = start
            .checked_add(node)
            .ok_or_else(|| bad("node id overflows"))?;
        for _ in 0..ppn {
            if out.len() == n {
                return Ok(());
            }
            out.push(id);
        }
    }
    Ok(())
}

/// Most ranks a mapping is expanded to (the result is 4 bytes a rank).
pub const MAX_MAPPED_RANKS: usize = 1 << 24;

/// Longest mapping string read (a KVS value is far shorter).
const MAX_MAPPING_TEXT: usize = 64 * 1024;

/// Whether an item places no rank at all (no nodes, no ranks per node,
/// repeated zero times).
fn is_empty(item: &Item) -> bool {
    let empty = |(_, nodes, ppn): &Triplet| *nodes == 0 || *ppn == 0;
    match item {
        Item::Block(t) => empty(t),
        Item::Repeat(blocks, times) => *times == 0 || blocks.iter().all(empty),
    }
}

/// Parse a mapping string into the node id of each of `nranks` ranks.
///
/// An empty string means "unknown" to MPICH and is an error here. The
/// work is bounded by the text's length plus `nranks`, whatever the
/// numbers say: items that place no rank are dropped before expanding, so
/// every step of the expansion places one; `nranks` over
/// [`MAX_MAPPED_RANKS`] and text over 64 KiB are refused.
pub fn parse_process_mapping(s: &str, nranks: usize) -> Result<Vec<u32>> {
    if s.trim().is_empty() {
        return Err(bad(
            "empty (the process manager could not express the mapping)",
        ));
    }
    if s.len() > MAX_MAPPING_TEXT {
        return Err(bad(format!("longer than {MAX_MAPPING_TEXT} bytes")));
    }
    if nranks > MAX_MAPPED_RANKS {
        return Err(bad(format!(
            "{nranks} ranks are more than the {MAX_MAPPED_RANKS} a mapping is read for"
        )));
    }
    let parsed = parse_items(s)?;
    // MPICH wraps around to the first repeat or the first block at node 0.
    let wrap_at = parsed.iter().position(|it| match it {
        Item::Repeat(..) => true,
        Item::Block((start, _, _)) => *start == 0,
    });
    // The wrap point counted among the items kept.
    let wrap = wrap_at.map(|w| parsed[..w].iter().filter(|it| !is_empty(it)).count());
    let items: Vec<Item> = parsed
        .into_iter()
        .filter(|it| !is_empty(it))
        .map(|it| match it {
            Item::Repeat(blocks, times) => Item::Repeat(
                blocks
                    .into_iter()
                    .filter(|&(_, n, p)| n > 0 && p > 0)
                    .collect(),
                times,
            ),
            block => block,
        })
        .collect();
    let mut out = Vec::with_capacity(nranks.min(1 << 20));
    let mut from = 0;
    while out.len() < nranks {
        let before = out.len();
        for item in &items[from..] {
            match item {
                Item::Block(t) => expand(&mut out, *t, nranks)?,
                Item::Repeat(blocks, times) => {
                    for _ in 0..*times {
                        let pass = out.len();
                        for t in blocks {
                            expand(&mut out, *t, nranks)?;
                        }
                        if out.len() == nranks || out.len() == pass {
                            break;
                        }
                    }
                }
            }
            if out.len() == nranks {
                break;
            }
        }
        if out.len() == nranks {
            break;
        }
        match wrap {
            Some(w) if out.len() > before && w < items.len() => from = w,
            _ => return Err(bad(format!("covers only {} of {nranks} ranks", out.len()))),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(nodes: u32, ppn: u32) -> Vec<u32> {
        (0..nodes)
            .flat_map(|n| std::iter::repeat_n(n, ppn as usize))
            .collect()
    }

    fn cyclic(nodes: u32, ranks: u32) -> Vec<u32> {
        (0..ranks).map(|r| r % nodes).collect()
    }

    #[test]
    fn mapping_table() {
        let cases: Vec<(Vec<u32>, &str)> = vec![
            (block(2, 4), "(vector,(0,2,4))"),
            (block(1, 4), "(vector,(0,1,4))"),
            (vec![0], "(vector,(0,1,1))"),
            (cyclic(2, 8), "(vector,(0,2,1),(0,2,1),(0,2,1),(0,2,1))"),
            (
                vec![0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3],
                "(vector,(0,2,2),(2,2,4))",
            ),
            (vec![0, 0, 0, 1, 2, 2], "(vector,(0,1,3),(1,1,1),(2,1,2))"),
            (vec![3, 3, 1, 0], "(vector,(3,1,2),(1,1,1),(0,1,1))"),
            (vec![], ""),
        ];
        for (map, want) in cases {
            let got = process_mapping(&map);
            assert_eq!(got, want, "{map:?}");
            if !map.is_empty() {
                assert_eq!(
                    parse_process_mapping(&got, map.len()).unwrap(),
                    map,
                    "{got}"
                );
            }
        }
    }

    #[test]
    fn long_maps_are_compacted_or_dropped() {
        // 1000 ranks round-robin on 3 nodes: explicit form is far too long.
        let map = cyclic(3, 1000);
        let s = process_mapping(&map);
        assert_eq!(s, "(vector,(0,3,1))");
        assert_eq!(parse_process_mapping(&s, 1000).unwrap(), map);
        // An irregular long map cannot be expressed: empty means "unknown".
        let irregular: Vec<u32> = (0..2000u32).map(|r| (r * r / 7) % 97).collect();
        assert_eq!(process_mapping(&irregular), "");
        // Periodic but not starting at node 0: MPICH would wrap wrongly.
        let shifted: Vec<u32> = (0..1000).map(|r| 1 + r % 2).collect();
        assert_eq!(process_mapping(&shifted), "");
        // Limits are honoured exactly.
        let s = process_mapping_within(&cyclic(2, 8), 20);
        assert_eq!(s, "(vector,(0,2,1))");
        assert!(process_mapping_within(&cyclic(2, 8), 5).is_empty());
    }

    #[test]
    fn reader_accepts_the_whole_grammar() {
        let cases: Vec<(&str, usize, Vec<u32>)> = vec![
            ("(vector,(0,2,4))", 8, block(2, 4)),
            (" ( vector , ( 0 , 2 , 4 ) ) ", 8, block(2, 4)),
            ("(vector,0,1,0,1)", 4, vec![0, 1, 0, 1]),
            ("(vector,[0,1]x2)", 4, vec![0, 1, 0, 1]),
            (
                "(vector,[(0,1,2),1]x2,(2,1,1))",
                7,
                vec![0, 0, 1, 0, 0, 1, 2],
            ),
            // Legacy wrap-around: (0,2,1) stands for a whole cyclic map.
            ("(vector,(0,2,1))", 5, vec![0, 1, 0, 1, 0]),
            // As MPICH 4.0.2 reads it (verified with MPI_COMM_TYPE_SHARED).
            ("(vector,(0,1,2),(1,1,1))", 5, vec![0, 0, 1, 0, 0]),
            // Wrap restarts at the first block at node 0.
            ("(vector,(5,1,1),(0,2,1))", 6, vec![5, 0, 1, 0, 1, 0]),
            // More ranks in the string than asked for: the rest is ignored.
            ("(vector,(0,4,4))", 3, vec![0, 0, 0]),
        ];
        for (s, n, want) in cases {
            assert_eq!(parse_process_mapping(s, n).unwrap(), want, "{s}");
        }
    }

    #[test]
    fn reader_rejects_bad_strings() {
        for (s, n) in [
            ("", 2),
            ("vector,(0,1,1))", 1),
            ("(matrix,(0,1,1))", 1),
            ("(vector,(0,1))", 2),
            ("(vector,(0,1,x))", 2),
            ("(vector,(1.5,1,1))", 2),
            ("(vector,(1,1,1))", 2), // no block at node 0: cannot wrap
            ("(vector,(0,0,0))", 2), // covers nothing
            ("(vector,(0,1,1)) tail", 1),
            ("(vector,[0,1]2)", 4),
            ("(vector,(4294967295,2,1))", 2),
            ("(vector,(99999999999,1,1))", 1),
            ("(vector)", 1),
        ] {
            assert!(parse_process_mapping(s, n).is_err(), "{s:?}");
        }
    }

    #[test]
    fn work_is_bounded_whatever_the_numbers_say() {
        // Four billion empty nodes, or repeats of nothing, place no rank
        // and cost nothing.
        let max = u32::MAX;
        for (s, n, want) in [
            (format!("(vector,(0,{max},0),(0,1,2))"), 2, vec![0, 0]),
            (
                format!("(vector,(5,{max},0),[(0,0,9)]x{max},(0,2,1))"),
                4,
                vec![0, 1, 0, 1],
            ),
            (
                format!("(vector,[(0,1,0),(3,1,1)]x{max})"),
                3,
                vec![3, 3, 3],
            ),
            ("(vector,(0,0,0),(1,1,1))".to_string(), 2, vec![1, 1]),
        ] {
            assert_eq!(parse_process_mapping(&s, n).unwrap(), want, "{s}");
        }
        // Nothing placeable at all: an error, not a spin.
        assert!(parse_process_mapping(&format!("(vector,({max},{max},0))"), 8).is_err());
        // A huge rank count or text is refused before any work.
        assert!(parse_process_mapping("(vector,(0,1,4))", MAX_MAPPED_RANKS + 1).is_err());
        let long = format!("(vector{})", ",(0,1,1)".repeat(10_000));
        assert!(parse_process_mapping(&long, 4).is_err());
    }

    #[test]
    fn round_trips_random_maps() {
        let mut x: u64 = 12345;
        for _ in 0..300 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let n = 1 + (x >> 33) as usize % 64;
            let nodes = 1 + (x >> 20) as u32 % 6;
            let map: Vec<u32> = (0..n)
                .map(|i| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    if (x >> 60) < 12 {
                        (i as u32 * nodes / n as u32).min(nodes - 1)
                    } else {
                        (x >> 40) as u32 % nodes
                    }
                })
                .collect();
            let s = process_mapping(&map);
            if !s.is_empty() {
                assert_eq!(parse_process_mapping(&s, n).unwrap(), map, "{s}");
            }
        }
    }
}
