//! The control connection between rivetrun and its per-node proxies (and
//! between parent and child proxies): one message per line, words separated
//! by one space, each word percent-encoded (so values may hold spaces,
//! newlines, any byte). A message's first word is its command, one of
//! `commands`' table, which also gives each command's direction and words.

use std::io::{self, BufRead, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// Longest line accepted (a barrier carries a node's puts).
pub const MAX_LINE: usize = 64 << 20;

/// TCP keepalive on a control connection, both ends: a host that vanishes
/// without closing it (power loss, a cut link) is noticed after about
/// `KEEPALIVE_IDLE + probes * KEEPALIVE_INTERVAL` seconds (also while data
/// waits for an ACK: `TCP_USER_TIMEOUT`). A proxy gives up
/// first ([`PROXY_PROBES`]: it kills its node's ranks), rivetrun a little
/// later ([`LAUNCHER_PROBES`]: the job fails naming the host), so a cut-off
/// node has cleaned up by the time the job is reported.
pub const KEEPALIVE_IDLE: i32 = 3;
pub const KEEPALIVE_INTERVAL: i32 = 1;
pub const PROXY_PROBES: i32 = 2;
pub const LAUNCHER_PROBES: i32 = 4;

pub fn keepalive(stream: &TcpStream, probes: i32) -> io::Result<()> {
    let fd = stream.as_raw_fd();
    for (level, name, value) in [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, KEEPALIVE_IDLE),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, KEEPALIVE_INTERVAL),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, probes),
        // The same bound while data waits for an ACK (keepalive is off
        // then, and retransmission alone would wait many minutes).
        (
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (KEEPALIVE_IDLE + probes * KEEPALIVE_INTERVAL) * 1000,
        ),
    ] {
        // SAFETY: `value` is a live c_int and the length passed is its size.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Encode one word.
pub fn encode(word: &[u8], out: &mut Vec<u8>) {
    if word.is_empty() {
        out.extend_from_slice(b"%");
        return;
    }
    for &b in word {
        if b.is_ascii_graphic() && b != b'%' {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
}

/// Decode one word (`%` alone is the empty word).
pub fn decode(word: &str) -> Result<Vec<u8>, String> {
    if word == "%" {
        return Ok(Vec::new());
    }
    let b = word.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = word
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad escape in {word:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// One message as a line (with its newline).
pub fn line<W: AsRef<[u8]>>(words: &[W]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        encode(w.as_ref(), &mut out);
    }
    out.push(b'\n');
    out
}

/// Write one message.
pub fn send<W: AsRef<[u8]>>(to: &mut impl Write, words: &[W]) -> io::Result<()> {
    to.write_all(&line(words))?;
    to.flush()
}

/// Read one message: `Ok(None)` at end of stream.
pub fn recv<R: BufRead>(from: &mut R) -> io::Result<Option<Vec<Vec<u8>>>> {
    let mut buf = Vec::new();
    let n = <&mut R as std::io::Read>::take(from, MAX_LINE as u64).read_until(b'\n', &mut buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() != Some(&b'\n') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "control message cut short or over-long",
        ));
    }
    buf.pop();
    let text = std::str::from_utf8(&buf)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "control message not ASCII"))?;
    text.split(' ')
        .map(|w| decode(w).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)))
        .collect::<io::Result<Vec<_>>>()
        .map(Some)
}

/// `NAME K V K V ...`, as barriers carry puts.
pub fn with_pairs(name: &str, pairs: Vec<(String, String)>) -> Vec<Vec<u8>> {
    let mut words = Vec::with_capacity(1 + 2 * pairs.len());
    words.push(name.as_bytes().to_vec());
    for (k, v) in pairs {
        words.push(k.into_bytes());
        words.push(v.into_bytes());
    }
    words
}

/// The pairs after a message's first word (a trailing odd word is dropped).
pub fn pairs(words: &[Vec<u8>]) -> Vec<(String, String)> {
    words
        .get(1..)
        .unwrap_or_default()
        .chunks_exact(2)
        .map(|kv| (text(&kv[0]), text(&kv[1])))
        .collect()
}

/// A word as text (lossy: only names and numbers are read this way).
pub fn text(word: &[u8]) -> String {
    String::from_utf8_lossy(word).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_whatever_bytes_they_hold() {
        let words: Vec<Vec<u8>> = vec![
            b"barrier".to_vec(),
            b"".to_vec(),
            b"a b\nc%d".to_vec(),
            vec![0, 255, b'='],
        ];
        let l = line(&words);
        assert_eq!(l.iter().filter(|&&b| b == b'\n').count(), 1);
        let back = recv(&mut &l[..]).unwrap().unwrap();
        assert_eq!(back, words);
        assert!(recv(&mut &b""[..]).unwrap().is_none());
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(recv(&mut &b"abc"[..]).is_err());
        assert!(recv(&mut &b"a%G1\n"[..]).is_err());
        assert!(recv(&mut &b"a%4\n"[..]).is_err());
        assert!(decode("%e9%").is_err());
    }
}
