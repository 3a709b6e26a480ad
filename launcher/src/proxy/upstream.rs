//! The proxy's end of the control connection: connecting back to rivetrun
//! (with retries: the proxy may start before rivetrun listens on a slow
//! host), proving it belongs to the job, and a writer threads share (also
//! used for the tree's connections to parent and children).

use std::io::{self, BufReader, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::remote::commands as cmd;
use crate::remote::wire;

/// How long a proxy keeps trying to reach rivetrun.
const CONNECT_FOR: Duration = Duration::from_secs(10);

/// The writing half, shared (one message is one `write_all`, under the lock).
#[derive(Clone)]
pub struct Upstream(Arc<Mutex<TcpStream>>);

impl Upstream {
    pub fn new(stream: TcpStream) -> Upstream {
        Upstream(Arc::new(Mutex::new(stream)))
    }

    pub fn send<W: AsRef<[u8]>>(&self, words: &[W]) -> io::Result<()> {
        self.write_line(&wire::line(words))
    }

    /// A message already made into a line (`wire::line`).
    pub fn write_line(&self, line: &[u8]) -> io::Result<()> {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        s.write_all(line)
    }

    /// The local address of the connection (where children reach us).
    pub fn local_ip(&self) -> io::Result<std::net::IpAddr> {
        let s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        Ok(s.local_addr()?.ip())
    }
}

/// Connect to `addr`, say `hello`; the reader and the shared writer.
pub fn connect(
    addr: &str,
    secret: &str,
    proxy_id: u32,
    host: &str,
) -> io::Result<(BufReader<TcpStream>, Upstream)> {
    let start = Instant::now();
    let stream = loop {
        match TcpStream::connect(addr) {
            Ok(s) => break s,
            Err(_) if start.elapsed() < CONNECT_FOR => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot reach rivetrun at {addr}: {e}"),
                ))
            }
        }
    };
    stream.set_nodelay(true)?;
    wire::keepalive(&stream, wire::PROXY_PROBES)?;
    let reader = BufReader::new(stream.try_clone()?);
    let up = Upstream::new(stream);
    up.send(&[cmd::HELLO, secret, &proxy_id.to_string(), host])?;
    Ok((reader, up))
}
