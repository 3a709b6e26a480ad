//! A rank's stdout and stderr, copied to the proxy's own a whole line at a
//! time (labelled with `-l`), which the launcher carries back to rivetrun.

use std::io::{Read, Write};
use std::process::{ChildStderr, ChildStdout};
use std::thread::JoinHandle;

use crate::output::LineBuffer;

/// Copy a rank's stream to ours, a whole line at a time.
fn forward<R: Read + Send + 'static>(
    mut from: R,
    label: Option<String>,
    err: bool,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut lines = LineBuffer::default();
        let mut buf = vec![0u8; 16384];
        let sink = |bytes: &[u8], lines: &mut LineBuffer, end: bool| {
            let label = label.as_deref();
            let mut out = Vec::new();
            let _ = if end {
                lines.finish(label, &mut out)
            } else {
                lines.push(bytes, label, &mut out)
            };
            if !out.is_empty() {
                let _ = if err {
                    std::io::stderr().lock().write_all(&out)
                } else {
                    std::io::stdout().lock().write_all(&out)
                };
            }
        };
        loop {
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => sink(&buf[..n], &mut lines, false),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        sink(&[], &mut lines, true);
    })
}

pub(super) fn output_threads(
    stdout: ChildStdout,
    stderr: ChildStderr,
    label: Option<String>,
) -> [JoinHandle<()>; 2] {
    [
        forward(stdout, label.clone(), false),
        forward(stderr, label, true),
    ]
}
