//! The PMI targets: the framer and parser, the server core over several
//! connections, the name server, and PMI's text parsers.

use rivet_pmi::server::{
    parse_process_mapping, process_mapping, NameServer, NamespaceSpec, Output, PortAuth, Server,
    SpawnFailure,
};
use rivet_pmi::topology::{
    format_cpu_list, parse_cpu_list, parse_cpu_mask, parse_dims, RankTopology, TopoType,
};
use rivet_pmi::wire::v2::V2Message;
use rivet_pmi::wire::v2_spawn::{spawn_query, spawn_request};
use rivet_pmi::wire::{Frame, Framer};
use rivet_pmi::ProcName;

/// The messages (as their debug text) and whether the stream broke, of
/// `stream` fed in pieces of `step` bytes.
fn frames_of(stream: &[u8], step: usize) -> (Vec<String>, bool) {
    let mut f = Framer::new();
    let mut frames = Vec::new();
    let mut broke = false;
    for chunk in stream.chunks(step.max(1)) {
        if f.feed(chunk, &mut frames).is_err() {
            broke = true;
            break;
        }
    }
    let text = frames
        .iter()
        .map(|fr| match fr {
            Frame::Message(m) => format!("{m:?}"),
            Frame::Invalid { cmd, error } => format!("invalid {cmd:?}: {error}"),
        })
        .collect();
    (text, broke)
}

/// The PMI framer and parser. `data[0]` is a piece size; the rest the
/// stream. Asserts: the same frames whatever the split; every message
/// that parsed writes out to bytes that frame and parse back to a message
/// that writes the same bytes.
pub fn pmi_framer(data: &[u8]) {
    let Some((&step, stream)) = data.split_first() else {
        return;
    };
    let (whole, whole_broke) = frames_of(stream, stream.len());
    let (split, split_broke) = frames_of(stream, step as usize);
    // A stream that breaks stops at the piece with the fault: frames after
    // it in that piece are lost either way, so only compare clean streams.
    if !whole_broke && !split_broke {
        assert_eq!(whole, split, "frames depend on the split points");
    }
    let mut f = Framer::new();
    let mut frames = Vec::new();
    let _ = f.feed(stream, &mut frames);
    for frame in frames {
        let Frame::Message(m) = frame else { continue };
        let Ok(bytes) = m.encode() else { continue };
        let mut again = Vec::new();
        Framer::new()
            .feed(&bytes, &mut again)
            .unwrap_or_else(|e| panic!("{m:?} wrote {bytes:?}, which does not frame: {e}"));
        match &again[..] {
            // A failed answer's payload is read but not written, so the
            // message read back may differ; what it writes may not.
            [Frame::Message(m2)] => assert_eq!(
                m2.encode().ok().as_ref(),
                Some(&bytes),
                "{m:?} wrote {bytes:?}, read back as {m2:?}"
            ),
            other => panic!("{m:?} wrote {bytes:?}, read back as {other:?}"),
        }
    }
}

const RANKS: u64 = 3;
const CONNS: u64 = 6;

/// Reads one operation off `data`: (selector, bytes).
fn next_op(data: &mut &[u8]) -> Option<(u8, Vec<u8>)> {
    let (&sel, rest) = data.split_first()?;
    let (&len, rest) = rest.split_first().unwrap_or((&0, &[]));
    let n = (len as usize).min(rest.len());
    let bytes = rest[..n].to_vec();
    *data = &rest[n..];
    Some((sel, bytes))
}

/// The PMI server core fed by several connections: ranks 0-2 attached
/// (`PMI_FD`), the others `PMI_PORT` connections that must authenticate.
/// Each operation: a selector byte (connection = low bits; bit 7: it hangs
/// up, bit 6: it reconnects), a length byte and that many bytes.
///
/// Asserts: no `abort` from a connection that never authenticated; every
/// answer goes to a connection the server was told of; spawns answered
/// with a failure are answered; nothing panics.
pub fn pmi_server(data: &[u8]) {
    let mut s = Server::new();
    let Ok(ns) = s.create_namespace(NamespaceSpec {
        name: "fuzz_1_0".into(),
        size: RANKS as u32,
        appnum: 0,
        appnum_of_rank: Vec::new(),
        universe_size: RANKS as u32,
        node_of_rank: vec![0, 0, 1],
        attributes: vec![("PMI_fuzz_attr".into(), "value".into())],
        preput: vec![("preput_key".into(), "preput_value".into())],
    }) else {
        panic!("namespace refused");
    };
    s.require_port_auth(
        ns,
        PortAuth {
            secret: "fuzzsecret".into(),
            ids: vec![101, 102, 103],
        },
    );
    let attach = |s: &mut Server, conn: u64| {
        if conn < RANKS {
            s.attach(conn, ns, conn as u32);
        } else {
            s.attach_unidentified(conn, ns);
        }
    };
    for c in 0..CONNS {
        attach(&mut s, c);
    }
    let mut live = [true; CONNS as usize];
    let mut rest = data;
    let mut out = Vec::new();
    while let Some((sel, bytes)) = next_op(&mut rest) {
        let conn = u64::from(sel & 0x3f) % CONNS;
        if sel & 0x80 != 0 {
            s.detach(conn);
            live[conn as usize] = false;
            continue;
        }
        if sel & 0x40 != 0 {
            attach(&mut s, conn);
            live[conn as usize] = true;
        }
        s.receive(conn, &bytes, &mut out);
        for o in out.drain(..) {
            match o {
                // Only a rank may abort: a PMI_PORT connection once its
                // initack passed (perhaps earlier in the same bytes).
                Output::Abort { rank, .. } => assert!(
                    rank.is_some_and(|r| u64::from(r) < RANKS),
                    "an abort from an unauthenticated connection: {rank:?}"
                ),
                Output::Send { conn: c, .. } => assert!(c < CONNS, "answer to connection {c}"),
                Output::SendAll { conns, .. } => assert!(conns.iter().all(|&c| c < CONNS)),
                Output::Close { conn: c, .. } => {
                    s.detach(c);
                    if let Some(l) = live.get_mut(c as usize) {
                        *l = false;
                    }
                }
                Output::Spawn { conn: c, .. } => {
                    let mut answers = Vec::new();
                    s.spawn_done(c, Err(SpawnFailure::from("fuzz")), &mut answers);
                    assert!(
                        answers
                            .iter()
                            .any(|a| matches!(a, Output::Send { conn, .. } if *conn == c)),
                        "a spawn without an answer"
                    );
                }
                Output::Name { .. } => panic!("names are served here, not forwarded"),
                Output::GroupForward { .. } => panic!("groups are served here, not forwarded"),
                Output::Barrier { .. } => panic!("barriers complete here, not upstream"),
                Output::Finalized { .. } | Output::GroupMemberLost { .. } => {}
            }
        }
    }
}

/// The standalone name server fed by several connections (same
/// operations as [`pmi_server`]), its group hub included. Asserts answers
/// go only to open connections, and a closed connection's bytes are refused.
pub fn name_server(data: &[u8]) {
    let mut s = NameServer::new();
    let mut open = [false; CONNS as usize];
    for c in 0..CONNS {
        s.open(c);
        open[c as usize] = true;
    }
    let mut rest = data;
    let mut out = Vec::new();
    while let Some((sel, bytes)) = next_op(&mut rest) {
        let conn = u64::from(sel & 0x3f) % CONNS;
        if sel & 0x80 != 0 {
            open[conn as usize] = false;
            s.close(conn, &mut out);
            for o in out.drain(..) {
                // The hub tells the other jobs' links of the ended processes.
                match o {
                    Output::Send { conn: c, .. } => assert!(
                        c < CONNS && open[c as usize],
                        "a closed link's news to closed connection {c}"
                    ),
                    other => panic!("closing a link does not {other:?}"),
                }
            }
            continue;
        }
        if sel & 0x40 != 0 {
            s.open(conn);
            open[conn as usize] = true;
        }
        let was_open = open[conn as usize];
        s.receive(conn, &bytes, &mut out);
        for o in out.drain(..) {
            match o {
                // Answers to the sender; the group hub's lines also to
                // other jobs' links, which must be open.
                Output::Send { conn: c, .. } => assert!(
                    if c == conn {
                        was_open
                    } else {
                        c < CONNS && open[c as usize]
                    },
                    "answer to a closed connection"
                ),
                Output::Close { conn: c, .. } => {
                    assert_eq!(c, conn);
                    open[c as usize] = false;
                }
                other => panic!("a name server does not {other:?}"),
            }
        }
        assert_eq!(s.connections(), open.iter().filter(|&&o| o).count());
    }
}

/// PMI's text parsers. Asserts round trips where a writer exists, and the
/// process mapping's bound (one node id per rank asked for).
pub fn parsers(data: &[u8]) {
    let Some((&n, body)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(body);
    let nranks = n as usize;
    if let Ok(nodes) = parse_process_mapping(&text, nranks) {
        assert_eq!(nodes.len(), nranks);
        if !nodes.is_empty() {
            let again = process_mapping(&nodes);
            assert_eq!(
                parse_process_mapping(&again, nranks).ok(),
                Some(nodes),
                "mapping {again:?}"
            );
        }
    }
    if let Ok(p) = text.parse::<ProcName>() {
        assert_eq!(p.to_string().parse::<ProcName>().ok(), Some(p));
    }
    if let Ok(cpus) = parse_cpu_list(&text) {
        assert_eq!(parse_cpu_list(&format_cpu_list(&cpus)).ok(), Some(cpus));
    }
    let _ = parse_cpu_mask(&text);
    let _ = parse_dims(&text);
    if let Ok(t) = TopoType::parse(&text) {
        assert_eq!(TopoType::parse(&t.to_value()).ok(), Some(t));
    }
    let _ = RankTopology::parse(&text);
    // A PMI-2 spawn query the server accepts is written back the same.
    if let Ok(q) = V2Message::parse(&text) {
        if let Ok(r) = spawn_request(&q) {
            assert_eq!(spawn_request(&spawn_query(&r)).ok(), Some(r));
        }
    }
    let _ = rivet_netmods::parse_size(&text);
}
