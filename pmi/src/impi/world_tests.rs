use super::*;
use crate::impi::labels::Broadcast;

fn mine(port: u32, nprocs: usize, xsize: i32) -> Mine {
    Mine {
        versions: vec![(0, 0)],
        datalen: 8000 - port,
        tag_ub: 40000 + port as i32,
        coll_xsize: xsize,
        coll_maxlinear: -1,
        host_ipv6: [port as u8; 16],
        host_port: port,
        ackmark: 2,
        hiwater: 4,
        pids: (0..nprocs as i64).collect(),
        proc_ports: (0..nprocs as u32).map(|p| port * 100 + p).collect(),
        nonce: Some([port as u8 ^ 0x5a; 16]),
        rivet_flow: Some((port * 8, port * 32)),
    }
}

/// What the server would broadcast, label by label.
fn exchange(clients: &[Mine]) -> Vec<Broadcast> {
    let all: Vec<Vec<(u32, Vec<u8>)>> = clients.iter().map(Mine::labels).collect();
    let mut labels: Vec<u32> = all.iter().flatten().map(|(l, _)| *l).collect();
    labels.sort_unstable();
    labels.dedup();
    // A client that does not send a label is missing from its mask.
    labels
        .into_iter()
        .map(|label| {
            Broadcast::collect(
                label,
                all.iter().map(|l| {
                    l.iter()
                        .find(|(x, _)| *x == label)
                        .map(|(_, v)| v.as_slice())
                }),
            )
        })
        .collect()
}

#[test]
fn two_clients_learn_the_same_world() {
    let clients = [mine(1, 2, -1), mine(2, 3, -1)];
    let bs = exchange(&clients);
    assert!(bs.windows(2).all(|w| w[0].label < w[1].label));
    let mut w = WorldBuilder::new(1, 2);
    for b in &bs {
        w.take(b).unwrap();
    }
    let world = w.finish().unwrap();
    assert_eq!(world.version, (0, 0));
    assert_eq!(world.nprocs, vec![2, 3]);
    assert_eq!(world.nhosts, vec![1, 1]);
    assert_eq!(world.maxdatalen, 7998);
    assert_eq!(world.tag_ub, 40001);
    assert_eq!(world.coll_xsize, 1024);
    assert_eq!(world.coll_maxlinear, 4);
    assert_eq!(world.procs.len(), 5);
    assert_eq!(world.first_rank(1), 2);
    assert_eq!(world.procs[3].client, 1);
    assert_eq!(world.procs[3].pid, 1);
    assert_eq!(world.hosts[1].port, 2);
    assert_eq!(world.hosts[1].ipv6, [2; 16]);
    assert_eq!(world.proc_ports, vec![100, 101, 200, 201, 202]);
    assert_eq!(world.nonces, vec![Some([0x5b; 16]), Some([0x58; 16])]);
    assert_eq!(world.hosts[0].rivet_flow, Some((8, 32)));
    assert_eq!(world.hosts[1].rivet_flow, Some((16, 64)));
}

#[test]
fn rivet_flow_control_is_learnt_per_host_and_checked() {
    // Clients 0 and 1 are Rivet; client 2 sends only the standard labels.
    let mut plain = mine(3, 1, -1);
    plain.rivet_flow = None;
    let bs = exchange(&[mine(1, 1, -1), mine(2, 1, -1), plain]);
    assert!(bs.windows(2).all(|w| w[0].label < w[1].label));
    let mut w = WorldBuilder::new(0, 3);
    for b in &bs {
        w.take(b).unwrap();
    }
    let world = w.finish().unwrap();
    let flows: Vec<_> = world.hosts.iter().map(|h| h.rivet_flow).collect();
    assert_eq!(flows, vec![Some((8, 32)), Some((16, 64)), None]);
    assert_eq!((world.hosts[2].ackmark, world.hosts[2].hiwater), (2, 4));
    // A broken Rivet pair is refused like a broken standard one.
    let mut bad = mine(1, 1, -1);
    bad.rivet_flow = Some((9, 3));
    let mut w = WorldBuilder::new(0, 1);
    for b in &exchange(&[bad]) {
        w.take(b).unwrap();
    }
    let e = w.finish().unwrap_err().to_string();
    assert!(e.contains("RIVET_H_ACKMARK 9"), "{e}");
}

#[test]
fn disagreements_and_gaps_are_refused() {
    let bs = exchange(&[mine(1, 2, 100), mine(2, 3, -1)]);
    let mut w = WorldBuilder::new(0, 2);
    for b in &bs {
        w.take(b).unwrap();
    }
    assert!(w.finish().unwrap_err().to_string().contains("disagree"));
    // A label a client skipped that 0.0 requires.
    let mut bs = exchange(&[mine(1, 2, -1), mine(2, 3, -1)]);
    let mut w = WorldBuilder::new(0, 2);
    let datalen = bs
        .iter_mut()
        .find(|b| b.label == labels::C_DATALEN)
        .unwrap();
    *datalen = Broadcast::collect(labels::C_DATALEN, [Some(&[0u8, 0, 0, 9][..]), None]);
    for b in &bs {
        w.take(b).unwrap();
    }
    assert!(w
        .finish()
        .unwrap_err()
        .to_string()
        .contains("client 1 sent no IMPI_C_DATALEN"));
    // Per-host data before the host counts.
    let bs = exchange(&[mine(1, 2, -1)]);
    let mut w = WorldBuilder::new(0, 1);
    let port = bs.iter().find(|b| b.label == labels::H_PORT).unwrap();
    assert!(w.take(port).is_err());
    // Flow-control marks out of order.
    let mut bad = mine(1, 1, -1);
    bad.ackmark = 5;
    let mut w = WorldBuilder::new(0, 1);
    for b in &exchange(&[bad]) {
        w.take(b).unwrap();
    }
    assert!(w.finish().unwrap_err().to_string().contains("ackmark"));
}

#[test]
fn arbitrary_broadcasts_never_panic() {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..3000 {
        let nclients = (next() % 3 + 1) as u32;
        let mut w = WorldBuilder::new(0, nclients);
        for _ in 0..(next() % 20) {
            let label = labels::LABELS_0_0[(next() % 14) as usize];
            let len = (next() % 5) as usize * 4;
            let data: Vec<u8> = (0..len).map(|_| (next() % 3) as u8).collect();
            let b = Broadcast {
                label,
                client_mask: (next() % 8) as u32,
                data,
            };
            let _ = w.take(&b);
        }
        let _ = w.finish();
    }
    // A valid exchange followed by a second, different NHOSTS.
    let bs = exchange(&[mine(1, 2, -1), mine(2, 1, -1)]);
    let mut w = WorldBuilder::new(0, 2);
    for b in &bs {
        w.take(b).unwrap();
    }
    let two = [Some(&[0u8, 0, 0, 2][..]), Some(&[0u8, 0, 0, 2][..])];
    w.take(&Broadcast::collect(labels::C_NHOSTS, two)).unwrap();
    assert!(w.finish().is_err());
}
