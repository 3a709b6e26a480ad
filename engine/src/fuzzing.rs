//! Entry points for the fuzz targets (`fuzz/`): what a peer's bytes reach
//! in the engine, driven from outside the crate. Each takes arbitrary
//! bytes, must not panic, and asserts what must hold whatever a peer sends.

use crate::dynamic::PortName;
use crate::node_map::NodeMap;
use crate::pg::{GroupDesc, MemberDesc, Pgs, ProcessGroup, VcId};
use crate::route::RouteLimits;
use crate::state::{Setup, State};
use crate::table::SendOp;
use crate::wire::{WireHeader, HEADER_SIZE};

const CONTEXT: u32 = 7;
const RECV_CAP: usize = 4096;
static SEND_BUF: [u8; 8192] = [0x5a; 8192];

/// Rank 0 of 4 ranks, each on its own node (every peer by netmod), with
/// receives and sends posted for a peer's messages to act on.
fn state() -> State {
    let map = NodeMap::from_mapping("(vector,(0,4,1))", 4, 0);
    State::new(
        Pgs::new(ProcessGroup::new("fuzz".into(), 4, 0, map, 1 << 16)),
        Setup {
            limits: RouteLimits::uniform(1024, 1024),
            cma_allowed: false,
            split_min: 0,
        },
    )
}

/// `State::deliver` over a sequence of (VC, header, payload) from peers.
///
/// Each record: one byte naming the VC (world rank 0-3, a port connection,
/// a foreign group's rank), 40 header bytes, one length byte (×16) and the
/// payload. Before each record, a `Data` piece is offered for placement
/// and, if placed, written: the place must lie inside a posted receive's
/// buffer. Asserts that nothing a peer sends panics the engine or makes it
/// write outside a receive buffer.
pub fn deliver(data: &[u8]) {
    // Receive buffers outlive the state that points into them.
    let mut bufs: Vec<Box<[u8]>> = (0..3).map(|_| vec![0u8; RECV_CAP].into()).collect();
    let ranges: Vec<(usize, usize)> = bufs
        .iter()
        .map(|b| (b.as_ptr() as usize, b.as_ptr() as usize + b.len()))
        .collect();
    let mut st = state();
    for (i, buf) in bufs.iter_mut().enumerate() {
        let (source, tag) = match i {
            0 => (crate::ANY_SOURCE, crate::ANY_TAG),
            1 => (1, 3),
            _ => (2, crate::ANY_TAG),
        };
        let source_vc = (source >= 0).then(|| VcId::world(source as u32));
        st.post_recv(CONTEXT, buf.as_mut_ptr(), RECV_CAP, source, source_vc, tag);
    }
    for (to, eager, sync) in [(1, true, true), (2, false, false), (3, false, true)] {
        st.post_send(SendOp::new(
            VcId::world(to),
            SEND_BUF.as_ptr(),
            SEND_BUF.len(),
            CONTEXT,
            3,
            eager,
            sync,
        ));
    }
    let mut rest = data;
    while rest.len() > 1 + HEADER_SIZE {
        let sel = rest[0];
        let from = match sel % 8 {
            r @ 0..=3 => VcId::world(r as u32),
            4 => VcId::new(rivet_netmods::TEMP_GROUP, (sel >> 4) as u32),
            _ => VcId::new(1, (sel >> 4) as u32),
        };
        let Some(h) = WireHeader::from_bytes(&rest[1..1 + HEADER_SIZE]) else {
            return;
        };
        rest = &rest[1 + HEADER_SIZE..];
        let len = rest.first().map_or(0, |&n| n as usize * 16);
        rest = rest.get(1..).unwrap_or(&[]);
        let payload = &rest[..len.min(rest.len())];
        rest = &rest[payload.len()..];
        if let Some(dst) = st.placement(from, &h, payload.len()) {
            let p = dst.as_ptr() as usize;
            assert!(
                ranges
                    .iter()
                    .any(|&(a, b)| p >= a && p + payload.len() <= b),
                "placement outside every receive buffer"
            );
            // SAFETY: just checked to lie inside one of `bufs`.
            unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), dst.as_ptr(), payload.len()) };
        }
        st.deliver(from, &h, payload);
    }
    drop(st);
    drop(bufs);
}

/// The engine's text parsers a peer's bytes reach: port names and group
/// descriptions (connect/accept, spawn). What parses must encode back to
/// something that parses to the same.
pub fn parsers(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(p) = PortName::parse(&text) {
        let again = format!("rivet-port:{}:{}", p.tag, p.card);
        assert_eq!(PortName::parse(&again).ok(), Some(p));
    }
    if let Ok(m) = MemberDesc::parse(&text) {
        let line = m.encode();
        assert_eq!(MemberDesc::parse(line.trim_end_matches('\n')).ok(), Some(m));
    }
    if let Ok(g) = GroupDesc::parse(data) {
        assert_eq!(GroupDesc::parse(&g.encode()).ok(), Some(g));
    }
}
