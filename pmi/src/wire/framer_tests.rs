//! Framer tests: split points, bounded memory, garbage streams, and random
//! input.

use super::*;
use crate::error::Error;

/// A predicate on the expected error.
type Check = fn(&Error) -> bool;

fn s(x: &str) -> String {
    x.to_string()
}

fn spawn_example() -> SpawnRequest {
    SpawnRequest {
        commands: vec![SpawnCommand {
            execname: s("./child"),
            nprocs: 4,
            args: vec![s("foo"), s("bar baz")],
            info: vec![(s("wdir"), s("/tmp"))],
        }],
        preput: vec![(s("PARENT_ROOT_PORT_NAME"), s("tag#0$port#1$"))],
    }
}

fn feed_all(chunks: &[&[u8]]) -> (Vec<Frame>, Result<(), Error>) {
    let mut framer = Framer::new();
    let mut frames = Vec::new();
    for c in chunks {
        if let Err(e) = framer.feed(c, &mut frames) {
            return (frames, Err(e));
        }
    }
    (frames, Ok(()))
}

#[test]
fn framer_handles_every_split_point() {
    let spawn = Message::Spawn(spawn_example()).encode().unwrap();
    let mut stream = b"cmd=init pmi_version=1 pmi_subversion=1\n\ncmd=get_maxes\r\n".to_vec();
    stream.extend_from_slice(&spawn);
    stream.extend_from_slice(b"cmd=frob\ncmd=barrier_in\n");
    for a in 0..=stream.len() {
        for b in [a, (a + 7).min(stream.len()), stream.len()] {
            let (frames, res) = feed_all(&[&stream[..a], &stream[a..b], &stream[b..]]);
            res.unwrap();
            let kinds: Vec<&str> = frames
                .iter()
                .map(|f| match f {
                    Frame::Message(m) => m.cmd(),
                    Frame::Invalid { .. } => "invalid",
                })
                .collect();
            assert_eq!(
                kinds,
                ["init", "get_maxes", "spawn", "invalid", "barrier_in"],
                "split {a}/{b}"
            );
        }
    }
}

#[test]
fn framer_reports_invalid_lines_with_their_cmd() {
    let (frames, res) = feed_all(&[b"cmd=put key=a\ngarbage\nmcmd=spawn\nnprocs=1\nendcmd\n"]);
    res.unwrap();
    let cmds: Vec<Option<String>> = frames
        .iter()
        .map(|f| match f {
            Frame::Invalid { cmd, .. } => cmd.clone(),
            Frame::Message(m) => panic!("unexpected {m:?}"),
        })
        .collect();
    assert_eq!(cmds, vec![Some(s("put")), None, Some(s("spawn"))]);
}

#[test]
fn framer_rejects_garbage_streams() {
    let mut overlong = vec![b'a'; limits::MAX_LINE];
    overlong.push(b'\n');
    let exact = {
        let mut l = b"cmd=get key=".to_vec();
        l.resize(limits::MAX_LINE - 1, b'k');
        l.push(b'\n');
        l
    };
    // A 1024-byte line (newline included) is accepted...
    let (frames, res) = feed_all(&[&exact]);
    res.unwrap();
    assert_eq!(frames.len(), 1);
    // ...a longer one is answerable (see `framer_answers_overlong_lines`);
    // binary junk is not.
    let cases: Vec<(Vec<u8>, Check)> = vec![
        ([&overlong[..100], b"\x01"].concat(), |e| {
            matches!(e, Error::ControlByte { byte: 1 })
        }),
        (b"cmd=get key=\xff\xfe\n".to_vec(), |e| {
            matches!(e, Error::NotUtf8)
        }),
        (b"cmd=get\0 key=a\n".to_vec(), |e| {
            matches!(e, Error::ControlByte { byte: 0 })
        }),
        (vec![0x16, 0x03, 0x01, 0x00], |e| {
            matches!(e, Error::ControlByte { .. })
        }),
    ];
    for (bytes, check) in cases {
        let (_, res) = feed_all(&[&bytes]);
        let e = res.expect_err("must be rejected");
        assert!(check(&e) && e.is_fatal_stream_error(), "{e:?}");
    }
    // An mcmd block that never ends is bounded.
    let mut framer = Framer::new();
    let mut frames = Vec::new();
    framer.feed(b"mcmd=spawn\n", &mut frames).unwrap();
    let line = format!("arg1={}\n", "x".repeat(1000));
    let mut err = None;
    for _ in 0..100 {
        if let Err(e) = framer.feed(line.as_bytes(), &mut frames) {
            err = Some(e);
            break;
        }
    }
    assert!(matches!(err, Some(Error::BlockTooLong { .. })));
    // Once broken, always broken.
    assert!(framer.feed(b"cmd=get_maxes\n", &mut frames).is_err());
}

#[test]
fn framer_answers_overlong_lines_and_goes_on() {
    // A put far over the limit, between two good lines, at every split
    // point of its start and end: one `Invalid` naming `put`, and the
    // lines around it intact.
    let long = format!("cmd=put kvsname=k key=a value={}\n", "v".repeat(5000));
    let stream = format!("cmd=get_maxes\n{long}cmd=barrier_in\n");
    let bytes = stream.as_bytes();
    for a in (0..bytes.len()).step_by(97) {
        for b in [a, (a + 1500).min(bytes.len()), bytes.len()] {
            let (frames, res) = feed_all(&[&bytes[..a], &bytes[a..b], &bytes[b..]]);
            res.unwrap();
            assert_eq!(frames.len(), 3, "split {a}/{b}");
            assert!(matches!(&frames[0], Frame::Message(m) if m.cmd() == "get_maxes"));
            match &frames[1] {
                Frame::Invalid {
                    cmd,
                    error: Error::LineTooLong { len, max },
                } => {
                    assert_eq!(cmd.as_deref(), Some("put"), "split {a}/{b}");
                    assert_eq!((*len, *max), (long.len(), limits::MAX_LINE));
                }
                other => panic!("split {a}/{b}: {other:?}"),
            }
            assert!(matches!(&frames[2], Frame::Message(m) if m.cmd() == "barrier_in"));
        }
    }
    // Megabytes without a newline are dropped as they come.
    let mut framer = Framer::new();
    let mut frames = Vec::new();
    framer.feed(b"cmd=get key=", &mut frames).unwrap();
    for _ in 0..1024 {
        framer.feed(&[b'k'; 4096], &mut frames).unwrap();
    }
    assert!(frames.is_empty() && framer.has_partial());
    framer.feed(b"\ncmd=get_maxes\n", &mut frames).unwrap();
    assert!(matches!(&frames[0], Frame::Invalid { cmd: Some(c), .. } if c == "get"));
    assert!(matches!(&frames[1], Frame::Message(m) if m.cmd() == "get_maxes"));
    assert!(!framer.has_partial());
}

#[test]
fn framer_yields_frames_before_garbage() {
    let (frames, res) = feed_all(&[b"cmd=get_maxes\ncmd=finalize\n\x01\x02\n"]);
    assert!(res.is_err());
    assert_eq!(frames.len(), 2);
}

#[test]
fn framer_knows_about_a_partial_message() {
    let mut framer = Framer::new();
    let mut frames = Vec::new();
    framer.feed(b"cmd=get_ma", &mut frames).unwrap();
    assert!(framer.has_partial());
    framer.feed(b"xes\nmcmd=spawn\n", &mut frames).unwrap();
    assert!(framer.has_partial(), "inside a spawn block");
    assert_eq!(frames.len(), 1);
}

/// Random bytes never panic the parser or the framer.
#[test]
fn fuzzish_random_input_never_panics() {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let alphabet = b"cmd=mcmd=spawn endcmd\nkey=value\\ =,()0123456789-_\t\r\xff\x00abc";
    for _ in 0..3000 {
        let len = (next() % 200) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
            .collect();
        let mut framer = Framer::new();
        let mut frames = Vec::new();
        let _ = framer.feed(&bytes, &mut frames);
        if let Ok(text) = std::str::from_utf8(&bytes) {
            let _ = Message::parse(text);
        }
    }
}
