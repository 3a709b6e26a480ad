//! Forwarding of the ranks' stdout and stderr, a whole line at a time.
//!
//! Each (rank, stream) has a `LineBuffer`. Bytes are released only up to the
//! last newline, so two ranks printing at once never interleave inside a line.
//! A line longer than `MAX_PENDING` is released in pieces so a rank that
//! prints without newlines cannot make rivetrun buffer without bound.

use std::io::{self, Write};

/// Longest partial line held back before it is forwarded anyway.
pub const MAX_PENDING: usize = 64 * 1024;

#[derive(Debug, Default)]
pub struct LineBuffer {
    pending: Vec<u8>,
}

impl LineBuffer {
    /// Take freshly read bytes; write every complete line (with `label` in front) to `sink`.
    pub fn push(
        &mut self,
        bytes: &[u8],
        label: Option<&str>,
        sink: &mut impl Write,
    ) -> io::Result<()> {
        self.pending.extend_from_slice(bytes);
        let Some(last_nl) = self.pending.iter().rposition(|&b| b == b'\n') else {
            if self.pending.len() >= MAX_PENDING {
                return self.flush_partial(label, sink);
            }
            return Ok(());
        };
        let complete: Vec<u8> = self.pending.drain(..=last_nl).collect();
        write_lines(&complete, label, sink)
    }

    /// The stream ended: release what is left (a last line without its newline).
    pub fn finish(&mut self, label: Option<&str>, sink: &mut impl Write) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.flush_partial(label, sink)
    }

    fn flush_partial(&mut self, label: Option<&str>, sink: &mut impl Write) -> io::Result<()> {
        let mut rest = std::mem::take(&mut self.pending);
        if label.is_some() {
            // A labelled line must end so the next label starts a line.
            rest.push(b'\n');
        }
        write_lines(&rest, label, sink)
    }
}

/// Write `bytes` (whole lines, except perhaps an unlabelled tail) in one `write_all`.
fn write_lines(bytes: &[u8], label: Option<&str>, sink: &mut impl Write) -> io::Result<()> {
    match label {
        None => sink.write_all(bytes)?,
        Some(label) => {
            let mut out = Vec::with_capacity(bytes.len() + 16 * label.len());
            for line in bytes.split_inclusive(|&b| b == b'\n') {
                out.extend_from_slice(label.as_bytes());
                out.extend_from_slice(line);
            }
            sink.write_all(&out)?;
        }
    }
    sink.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_only_complete_lines() {
        let mut buf = LineBuffer::default();
        let mut out = Vec::new();
        buf.push(b"hel", None, &mut out).unwrap();
        assert!(out.is_empty());
        buf.push(b"lo\nwor", None, &mut out).unwrap();
        assert_eq!(out, b"hello\n");
        buf.push(b"ld\n", None, &mut out).unwrap();
        assert_eq!(out, b"hello\nworld\n");
    }

    #[test]
    fn labels_every_line() {
        let mut buf = LineBuffer::default();
        let mut out = Vec::new();
        buf.push(b"a\nb\nc", Some("[3] "), &mut out).unwrap();
        assert_eq!(out, b"[3] a\n[3] b\n");
        buf.finish(Some("[3] "), &mut out).unwrap();
        assert_eq!(out, b"[3] a\n[3] b\n[3] c\n");
    }

    #[test]
    fn unlabelled_tail_is_forwarded_unchanged() {
        let mut buf = LineBuffer::default();
        let mut out = Vec::new();
        buf.push(b"no newline", None, &mut out).unwrap();
        buf.finish(None, &mut out).unwrap();
        assert_eq!(out, b"no newline");
    }

    #[test]
    fn an_endless_line_is_forwarded_in_bounded_pieces() {
        let mut buf = LineBuffer::default();
        let mut out = Vec::new();
        let chunk = vec![b'x'; 4096];
        for _ in 0..(MAX_PENDING / 4096) {
            buf.push(&chunk, None, &mut out).unwrap();
        }
        assert_eq!(out.len(), MAX_PENDING);
        assert!(buf.pending.is_empty());
    }
}
