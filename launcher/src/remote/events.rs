//! What rivetrun's multi-host event loop hears (`Ev`), and the threads
//! that hear it: proxies connecting back and authenticating, each proxy's
//! messages, rivetrun's stdin for rank 0.

use std::io::BufReader;
use std::net::{TcpListener, TcpStream};
use std::process::ExitStatus;
use std::sync::mpsc;
use std::time::Duration;

use super::commands as cmd;
use super::wire;

pub(super) enum Ev {
    Hello(u32, TcpStream),
    Msg(u32, Vec<Vec<u8>>),
    Closed(u32),
    /// rivetrun's stdin for rank 0 (None: end of input).
    Stdin(Option<Vec<u8>>),
    /// A launcher command ended; the proxies it was starting.
    LauncherExit(Vec<u32>, ExitStatus),
    /// The name server's answer for a proxy (its words for the proxy).
    NameAnswer(u32, Vec<Vec<u8>>),
}

/// Accept proxies as they connect; pass on the ones whose `hello` carries
/// the job secret and a proxy id of this job (others are closed unanswered).
pub(super) fn accept_proxies(
    listener: TcpListener,
    secret: String,
    nproxies: u32,
    tx: mpsc::Sender<Ev>,
) {
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let (secret, tx) = (secret.clone(), tx.clone());
            std::thread::spawn(move || {
                let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                let _ = conn.set_nodelay(true);
                let _ = wire::keepalive(&conn, wire::LAUNCHER_PROBES);
                let Ok(read) = conn.try_clone() else { return };
                let mut reader = BufReader::new(read);
                let Ok(Some(hello)) = wire::recv(&mut reader) else {
                    return;
                };
                let ok = hello.len() == 4
                    && hello[0] == cmd::HELLO.as_bytes()
                    && hello[1] == secret.as_bytes();
                let id = wire::text(hello.get(2).map_or(&[][..], |w| w)).parse::<u32>();
                match id {
                    Ok(id) if ok && id < nproxies => {
                        let _ = conn.set_read_timeout(None);
                        let _ = tx.send(Ev::Hello(id, conn));
                    }
                    _ => {}
                }
            });
        }
    });
}

/// Copy rivetrun's stdin to rank 0 (through the event loop, which owns the
/// connection), on a thread of its own: stdin may be a terminal or a file.
pub(super) fn forward_stdin(tx: mpsc::Sender<Ev>) {
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; 16384];
        loop {
            match std::io::Read::read(&mut stdin, &mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if tx.send(Ev::Stdin(Some(buf[..n].to_vec()))).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let _ = tx.send(Ev::Stdin(None));
    });
}

/// Read one proxy's messages until its connection ends.
pub(super) fn read_proxy(id: u32, conn: TcpStream, tx: mpsc::Sender<Ev>) {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(conn);
        while let Ok(Some(msg)) = wire::recv(&mut reader) {
            if tx.send(Ev::Msg(id, msg)).is_err() {
                return;
            }
        }
        let _ = tx.send(Ev::Closed(id));
    });
}
