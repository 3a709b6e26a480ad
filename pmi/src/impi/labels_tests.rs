use super::*;
use crate::impi::{Command, CMD_COLL, DEFAULT_MAX_PAYLOAD};

fn coll(label: u32, value: Value) -> Vec<u8> {
    Command::new(
        CMD_COLL,
        Coll {
            label,
            data: value.encode(),
        }
        .encode(),
    )
    .encode()
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

#[test]
fn seed_example_nhosts_3_2_2() {
    // Each client sends {COLL, 8} {C_NHOSTS, n}.
    assert_eq!(
        coll(C_NHOSTS, Value::Count(3)),
        words(&[CMD_COLL, 8, C_NHOSTS, 3])
    );
    let parts = [3u32, 2, 2].map(|n| Value::Count(n).encode());
    let b = Broadcast::collect(C_NHOSTS, parts.iter().map(|p| Some(p.as_slice())));
    let sent = Command::new(CMD_COLL, b.encode()).encode();
    assert_eq!(sent, words(&[CMD_COLL, 20, C_NHOSTS, 0x7, 3, 2, 2]));
    let (cmd, _) = Command::decode(&sent, DEFAULT_MAX_PAYLOAD)
        .unwrap()
        .unwrap();
    let got = Broadcast::decode(&cmd.payload).unwrap();
    let split = got.split(3, &[]).unwrap();
    let values: Vec<Value> = split
        .iter()
        .map(|p| Value::decode(C_NHOSTS, p.unwrap()).unwrap())
        .collect();
    assert_eq!(values, [3, 2, 2].map(Value::Count));
}

#[test]
fn seed_example_datalen_and_its_optional_variant() {
    let parts = [8000u32, 4000, 4000].map(|n| Value::Count(n).encode());
    let all = Broadcast::collect(C_DATALEN, parts.iter().map(|p| Some(p.as_slice())));
    assert_eq!(
        Command::new(CMD_COLL, all.encode()).encode(),
        words(&[CMD_COLL, 20, C_DATALEN, 0x7, 8000, 4000, 4000])
    );
    // Client 1 did not send the label: mask 0x5, len 16.
    let some = Broadcast::collect(
        C_DATALEN,
        [Some(parts[0].as_slice()), None, Some(parts[2].as_slice())],
    );
    assert_eq!(
        Command::new(CMD_COLL, some.encode()).encode(),
        words(&[CMD_COLL, 16, C_DATALEN, 0x5, 8000, 4000])
    );
    let split = some.split(3, &[]).unwrap();
    assert_eq!(split[1], None);
    assert_eq!(
        Value::decode(C_DATALEN, split[2].unwrap()),
        Ok(Value::Count(4000))
    );
}

#[test]
fn seed_example_host_ports() {
    assert_eq!(
        coll(H_PORT, Value::Counts(vec![5001, 5002, 5003])),
        words(&[CMD_COLL, 16, H_PORT, 5001, 5002, 5003])
    );
    assert_eq!(
        coll(H_PORT, Value::Counts(vec![6001, 6002])),
        words(&[CMD_COLL, 12, H_PORT, 6001, 6002])
    );
    let parts = [vec![5001, 5002, 5003], vec![6001, 6002], vec![7001, 7002]]
        .map(|p| Value::Counts(p).encode());
    let b = Broadcast::collect(H_PORT, parts.iter().map(|p| Some(p.as_slice())));
    assert_eq!(
        Command::new(CMD_COLL, b.encode()).encode(),
        words(&[CMD_COLL, 36, H_PORT, 0x7, 5001, 5002, 5003, 6001, 6002, 7001, 7002])
    );
    let split = b.split(3, &[3, 2, 2]).unwrap();
    assert_eq!(
        Value::decode(H_PORT, split[1].unwrap()),
        Ok(Value::Counts(vec![6001, 6002]))
    );
    // Host counts that do not add up are refused, not guessed.
    assert!(b.split(3, &[3, 2, 1]).is_err());
    assert!(b.split(3, &[3, 2, 3]).is_err());
    assert!(b.split(3, &[3, 2]).is_err());
    assert!(b.split(3, &[u32::MAX, 2, 2]).is_err());
}

#[test]
fn seed_example_version_choosing_0_1() {
    let lists = [
        vec![(0, 0), (0, 1)],
        vec![(0, 0), (0, 1), (0, 2)],
        vec![(0, 0), (0, 1), (0, 2)],
    ];
    let parts = lists.clone().map(|l| Value::Versions(l).encode());
    let b = Broadcast::collect(C_VERSION, parts.iter().map(|p| Some(p.as_slice())));
    let sent = Command::new(CMD_COLL, b.encode()).encode();
    assert_eq!(&sent[..16], &words(&[CMD_COLL, 72, C_VERSION, 0x7])[..]);
    assert_eq!(sent.len(), 8 + 72);
    let got = Broadcast::decode(&sent[8..]).unwrap();
    let split = got.split(3, &[]).unwrap();
    let decoded: Vec<Vec<(u32, u32)>> = split
        .iter()
        .map(|p| match Value::decode(C_VERSION, p.unwrap()).unwrap() {
            Value::Versions(v) => v,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(decoded, lists.to_vec());
    assert_eq!(common_version(&decoded), Some((0, 1)));
    assert_eq!(common_version(&[vec![(0, 0)], vec![(1, 0)]]), None);
}

#[test]
fn every_label_of_0_0_round_trips() {
    let ip = [0xfe; 16];
    let cases = [
        (C_VERSION, Value::Versions(vec![(0, 0)])),
        (C_NHOSTS, Value::Count(1)),
        (C_NPROCS, Value::Count(2)),
        (C_DATALEN, Value::Count(32768)),
        (C_TAGUB, Value::Int(i32::MAX)),
        (C_COLL_XSIZE, Value::Int(-1)),
        (C_COLL_MAXLINEAR, Value::Int(-1)),
        (H_IPV6, Value::Addrs(vec![ip])),
        (H_PORT, Value::Counts(vec![5001])),
        (H_NPROCS, Value::Counts(vec![2])),
        (H_ACKMARK, Value::Counts(vec![10])),
        (H_HIWATER, Value::Counts(vec![20])),
        (P_IPV6, Value::Addrs(vec![ip, ip])),
        (P_PID, Value::Pids(vec![-1, 1 << 40])),
    ];
    assert_eq!(cases.clone().map(|c| c.0), LABELS_0_0);
    for (label, value) in cases {
        let bytes = value.encode();
        assert_eq!(
            Value::decode(label, &bytes),
            Ok(value),
            "{}",
            label_name(label)
        );
        let up = Coll::decode(
            &Coll {
                label,
                data: bytes.clone(),
            }
            .encode(),
        )
        .unwrap();
        assert_eq!(up.label, label);
        let b = Broadcast::collect(label, [Some(bytes.as_slice()), Some(bytes.as_slice())]);
        let n = (bytes.len() / shape(label).1) as u32;
        let split = b.split(2, &[n, n]).unwrap();
        assert_eq!(split, vec![Some(bytes.as_slice()); 2]);
    }
    assert!(LABELS_0_0.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn bad_coll_bytes_are_refused() {
    assert!(Coll::decode(b"\0\0").is_err());
    assert!(Broadcast::decode(b"\0\0\x11\0\0\0").is_err());
    assert!(Value::decode(C_NHOSTS, b"\0\0\0").is_err());
    assert!(Value::decode(C_NHOSTS, &[0; 8]).is_err());
    assert!(Value::decode(C_VERSION, b"").is_err());
    assert!(Value::decode(C_VERSION, &words(&[0, 1, 0, 0])).is_err());
    assert!(Value::decode(P_PID, &[0; 12]).is_err());
    assert_eq!(
        Value::decode(0x7777, b"abc"),
        Ok(Value::Opaque(b"abc".to_vec()))
    );
    // A mask naming clients the job does not have.
    let b = Broadcast {
        label: C_NHOSTS,
        client_mask: 0b1000,
        data: words(&[1]),
    };
    assert!(b.split(3, &[]).is_err());
    // Bytes left over after every client's part.
    let b = Broadcast {
        label: C_NHOSTS,
        client_mask: 0b1,
        data: words(&[1, 2]),
    };
    assert!(b.split(3, &[]).is_err());
    // More version lists than clients in the mask.
    let b = Broadcast {
        label: C_VERSION,
        client_mask: 0b1,
        data: words(&[0, 0, 0, 0]),
    };
    assert!(b.split(1, &[]).is_err());
}
