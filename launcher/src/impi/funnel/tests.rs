//! The funnel's caps and failures, with the test as the remote host (a
//! TCP link) and as the local rank (its end of the pair): a host that
//! stops reading, a host that sends past the flow control to a rank that
//! stopped reading, and a host that sends garbage each fail that link
//! with a message naming why, and the agent's thread ends.

use super::*;
use std::io::Write;
use std::net::TcpListener;
use std::time::Duration;

use rivet_pmi::impi::world::{Host, Proc as WorldProc};

const MAXDATALEN: u32 = 1000;
const HIWATER: u32 = 4;

fn host(client: u32, id: u8) -> Host {
    Host {
        client,
        ipv6: [id; 16],
        port: 0,
        nprocs: 1,
        ackmark: 2,
        hiwater: HIWATER,
        rivet_flow: None,
    }
}

fn proc_of(client: u32, id: u8, pid: i64) -> WorldProc {
    WorldProc {
        client,
        host: client,
        ipv6: [id; 16],
        pid,
    }
}

/// Client 0 of two, one proc each, no direct channels.
fn world() -> World {
    World {
        client: 0,
        nclients: 2,
        version: (0, 0),
        nhosts: vec![1, 1],
        nprocs: vec![1, 1],
        maxdatalen: MAXDATALEN,
        tag_ub: i32::MAX,
        coll_xsize: 0,
        coll_maxlinear: 0,
        hosts: vec![host(0, 1), host(1, 2)],
        procs: vec![proc_of(0, 1, 10), proc_of(1, 2, 20)],
        proc_ports: vec![0, 0],
        nonces: vec![None, None],
    }
}

/// A data packet from `src` to `dest` with `MAXDATALEN` bytes.
fn data_packet(src: Proc, dest: Proc) -> Vec<u8> {
    let mut p = Packet::new(Kind::Data, src, dest);
    p.len = MAXDATALEN;
    p.msglen = u64::from(MAXDATALEN);
    let mut bytes = p.encode().to_vec();
    bytes.extend(std::iter::repeat_n(7u8, MAXDATALEN as usize));
    bytes
}

struct Running {
    /// The remote host's end of the link.
    remote: TcpStream,
    /// The local rank's end of its pair with world rank 1.
    rank: UnixStream,
    rx: mpsc::Receiver<Result<u32, String>>,
    thread: std::thread::JoinHandle<()>,
    _wake: UnixStream,
}

fn start_agent() -> Running {
    let world = world();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let remote = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (link, _) = l.accept().unwrap();
    let (rank, agent_end) = UnixStream::pair().unwrap();
    let (wake, wake_agent) = UnixStream::pair().unwrap();
    let (tx, rx) = mpsc::channel();
    let agent = Agent {
        links: vec![(1, link)],
        pairs: vec![(0, 1, agent_end)],
        world,
        finishing: Arc::new(AtomicBool::new(false)),
        wake: wake_agent,
        tx,
        fail_job: false,
    };
    let thread = std::thread::spawn(move || agent.run());
    Running {
        remote,
        rank,
        rx,
        thread,
        _wake: wake,
    }
}

/// Write `packet` until the other end goes (or `limit` packets went).
fn flood(mut to: impl Write, packet: &[u8], limit: usize) -> usize {
    for i in 0..limit {
        if to.write_all(packet).is_err() {
            return i;
        }
    }
    limit
}

fn failure(r: &Running) -> String {
    match r.rx.recv_timeout(Duration::from_secs(120)) {
        Ok(Err(msg)) => msg,
        other => panic!("expected the link to fail, got {other:?}"),
    }
}

fn procs() -> (Proc, Proc) {
    let mine = Proc {
        hostid: [1; 16],
        pid: 10,
    };
    let theirs = Proc {
        hostid: [2; 16],
        pid: 20,
    };
    (mine, theirs)
}

#[test]
fn a_host_that_stops_reading_fails_its_link_at_the_cap() {
    let r = start_agent();
    let (mine, theirs) = procs();
    let packet = data_packet(mine, theirs);
    let rank = r.rank.try_clone().unwrap();
    // The rank sends far more than the socket buffers and the cap hold;
    // the remote host reads nothing.
    let writer = std::thread::spawn(move || flood(rank, &packet, 200_000));
    let msg = failure(&r);
    assert!(
        msg.contains("host 1 (client 1) is not reading its host link"),
        "{msg}"
    );
    assert!(msg.contains("over the cap of 9024"), "{msg}");
    r.thread.join().unwrap();
    // The agent's end went with its thread, so the rank's writes stop.
    assert!(writer.join().unwrap() < 200_000);
    drop(r.remote);
}

#[test]
fn a_host_sending_past_the_flow_control_fails_its_link() {
    let r = start_agent();
    let (mine, theirs) = procs();
    let packet = data_packet(theirs, mine);
    let remote = r.remote.try_clone().unwrap();
    // The rank reads nothing; the host ignores hiwater.
    let writer = std::thread::spawn(move || flood(remote, &packet, 200_000));
    let msg = failure(&r);
    assert!(
        msg.contains("host 1 (client 1) sent more than the pairs' flow control allows"),
        "{msg}"
    );
    assert!(msg.contains("local rank 0 (from world rank 1)"), "{msg}");
    r.thread.join().unwrap();
    assert!(writer.join().unwrap() < 200_000, "the link was closed");
}

#[test]
fn a_host_sending_garbage_fails_its_link_with_a_message() {
    let mut r = start_agent();
    r.remote.write_all(&[0xee; 256]).unwrap();
    let msg = failure(&r);
    assert!(
        msg.contains("host 1 (client 1) sent what is no IMPI packet"),
        "{msg}"
    );
    r.thread.join().unwrap();
}
