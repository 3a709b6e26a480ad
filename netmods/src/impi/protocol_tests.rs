use super::*;

fn env() -> Envelope {
    Envelope {
        src: Proc {
            hostid: [1; 16],
            pid: 10,
        },
        dest: Proc {
            hostid: [2; 16],
            pid: 20,
        },
        lsrank: 0,
        tag: 5,
        cid: 0,
    }
}

fn sends(actions: &[Action]) -> Vec<Packet> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send(p) => Some(*p),
            _ => None,
        })
        .collect()
}

#[test]
fn short_message_is_one_data_packet() {
    let mut s = Outgoing::new(env(), 7, 100, false, 1000);
    let (p, r) = s.first();
    assert_eq!(
        (p.kind, p.len, p.msglen, p.srqid, p.drqid),
        (Kind::Data, 100, 100, 7, 0)
    );
    assert_eq!(r, 0..100);
    assert!(s.complete());
    let mut rx = Incoming::new(1000, 8);
    let a = rx
        .on_packet(&Packet::decode(&p.encode(), 1000).unwrap())
        .unwrap();
    assert_eq!(a, vec![Action::Message { id: 1, first: p }]);
    assert_eq!(rx.matched(1).unwrap(), vec![Action::Complete { id: 1 }]);
    assert!(rx.matched(1).is_err());
}

#[test]
fn synchronous_short_message_completes_on_syncack() {
    let mut s = Outgoing::new(env(), 8, 10, true, 1000);
    let (p, _) = s.first();
    assert_eq!(p.kind, Kind::DataSync);
    assert!(!s.complete());
    let mut rx = Incoming::new(1000, 8);
    rx.on_packet(&p).unwrap();
    let a = rx.matched(1).unwrap();
    let ack = sends(&a)[0];
    assert_eq!(
        (ack.kind, ack.srqid, ack.src, ack.dest),
        (Kind::SyncAck, 8, p.dest, p.src)
    );
    assert!(s.on_syncack(&ack).unwrap().is_empty());
    assert!(s.complete());
    assert!(s.on_syncack(&ack).is_err(), "a second SYNCACK is refused");
}

#[test]
fn long_message_streams_after_syncack_with_the_receivers_drqid() {
    let mut s = Outgoing::new(env(), 9, 2500, false, 1000);
    let (p, r) = s.first();
    assert_eq!(
        (p.kind, p.len, p.msglen, r),
        (Kind::DataSync, 1000, 2500, 0..1000)
    );
    let mut rx = Incoming::new(1000, 100);
    rx.on_packet(&p).unwrap();
    let ack = sends(&rx.matched(1).unwrap())[0];
    let rest = s.on_syncack(&ack).unwrap();
    let ranges: Vec<_> = rest.iter().map(|(_, r)| r.clone()).collect();
    assert_eq!(ranges, vec![1000..2000, 2000..2500]);
    assert!(rest
        .iter()
        .all(|(p, _)| p.kind == Kind::Data && p.drqid == 1));
    assert_eq!(
        rx.on_packet(&rest[0].0).unwrap(),
        vec![Action::Continue {
            id: 1,
            offset: 1000,
            len: 1000
        }]
    );
    assert_eq!(
        rx.on_packet(&rest[1].0).unwrap(),
        vec![
            Action::Continue {
                id: 1,
                offset: 2000,
                len: 500
            },
            Action::Complete { id: 1 }
        ]
    );
    assert!(
        rx.on_packet(&rest[1].0).is_err(),
        "nothing past the message"
    );
    assert!(s.complete());
}

#[test]
fn cancel_destroys_the_last_unmatched_message_or_says_no() {
    let mut rx = Incoming::new(1000, 100);
    let mut a = Outgoing::new(env(), 3, 10, false, 1000);
    let mut b = Outgoing::new(env(), 3, 10, false, 1000);
    let (pa, _) = a.first();
    let (pb, _) = b.first();
    rx.on_packet(&pa).unwrap();
    rx.on_packet(&pb).unwrap();
    let cancel = b.cancel().unwrap();
    assert_eq!((cancel.kind, cancel.srqid), (Kind::Cancel, 3));
    assert!(b.cancel().is_none(), "one cancel at a time");
    let out = rx.on_packet(&cancel).unwrap();
    assert_eq!(
        out[0],
        Action::Destroy { id: 2 },
        "the later one, searched backwards"
    );
    let reply = sends(&out)[0];
    assert_eq!(reply.kind, Kind::CancelYes);
    assert_eq!(b.on_cancel_reply(&reply), Ok(true));
    assert_eq!(rx.unmatched(), 1);
    // Once matched, a cancel is answered no.
    rx.matched(1).unwrap();
    let out = rx.on_packet(&a.cancel().unwrap()).unwrap();
    let reply = sends(&out)[0];
    assert_eq!(reply.kind, Kind::CancelNo);
    assert_eq!(a.on_cancel_reply(&reply), Ok(false));
    // Outside the window (a long send streaming) it is local.
    let mut c = Outgoing::new(env(), 4, 5000, false, 1000);
    c.first();
    let mut ack = Packet::new(Kind::SyncAck, env().dest, env().src);
    ack.srqid = 4;
    ack.drqid = 9;
    c.on_syncack(&ack).unwrap();
    assert!(c.cancel().is_none());
    assert!(c
        .on_cancel_reply(&Packet::new(Kind::CancelNo, env().dest, env().src))
        .is_err());
}

#[test]
fn protocol_acks_every_ackmark_packets_and_violations_are_refused() {
    let mut rx = Incoming::new(1000, 2);
    let mut acks = 0;
    for id in 0..6 {
        let mut s = Outgoing::new(env(), id, 1, false, 1000);
        let out = rx.on_packet(&s.first().0).unwrap();
        acks += sends(&out)
            .iter()
            .filter(|p| p.kind == Kind::ProtoAck)
            .count();
    }
    assert_eq!(acks, 3);
    assert_eq!(rx.on_packet(&Packet::fini()).unwrap(), vec![Action::Fini]);
    // Continuation for nothing, oversized first packet, long first as DATA.
    let mut p = Packet::new(Kind::Data, env().src, env().dest);
    p.drqid = 77;
    p.len = 1;
    p.msglen = 1;
    assert!(rx.on_packet(&p).is_err());
    p.drqid = 0;
    p.len = 1001;
    p.msglen = 2000;
    assert!(rx.on_packet(&p).is_err());
    p.len = 1000;
    assert!(rx.on_packet(&p).is_err());
}
