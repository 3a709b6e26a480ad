//! Opening channels: dialling lower-ranked procs of other clients at
//! open, accepting higher-ranked ones, and adopting an accepted connection
//! only once its hello proved the run's channel key.

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::Instant;

use super::super::hello::{check_hello, hello, HELLO_LEN};
use super::{ImpiNetmod, ACCEPTING_MAX, CONNECT_TIMEOUT, HELLO_TIMEOUT};
use crate::auth;
use crate::NetmodError;

/// An accepted connection still owing its hello.
pub(super) struct Accepting {
    sock: TcpStream,
    got: [u8; HELLO_LEN],
    len: usize,
    since: Instant,
}

impl ImpiNetmod {
    /// Connect to lower-ranked `g` (its listener exists since before we started).
    pub(super) fn dial(&mut self, g: u32) -> Result<(), NetmodError> {
        let p = &self.cfg.procs[g as usize];
        if p.addr.port() == 0 {
            return Err(NetmodError::Peer {
                peer: g.into(),
                what: format!(
                    "world rank {g} has no direct-channel port (RIVET_P_PORT) and the launcher \
                     gave no funnel socket for it (IMPI_FUNNEL_FDS)"
                ),
            });
        }
        let addr = p.addr;
        let h = hello(&self.key, self.cfg.rank, g, auth::nonce());
        let result = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).and_then(|mut s| {
            use std::io::Write;
            s.write_all(&h)?;
            s.set_nodelay(true)?;
            s.set_nonblocking(true)?;
            Ok(s)
        });
        match result.and_then(|s| self.attach(g, s)) {
            Ok(()) => {}
            Err(e) => {
                self.channel(g);
                self.failures.push((
                    g,
                    format!("IMPI: cannot connect to world rank {g} at {addr}: {e}"),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn accept(&mut self) {
        let Some(l) = self.listener.as_ref() else {
            return;
        };
        loop {
            self.syscalls += 1;
            match l.accept() {
                Ok((s, _)) => {
                    if self.accepting.len() < ACCEPTING_MAX && s.set_nonblocking(true).is_ok() {
                        let _ = s.set_nodelay(true);
                        self.accepting.push(Accepting {
                            sock: s,
                            got: [0; HELLO_LEN],
                            len: 0,
                            since: Instant::now(),
                        });
                    }
                }
                Err(_) => break,
            }
        }
    }

    /// Read the hellos of accepted connections; adopt the proven ones.
    pub(super) fn serve_hellos(&mut self) {
        let mut i = 0;
        while i < self.accepting.len() {
            let a = &mut self.accepting[i];
            self.syscalls += 1;
            let keep = match io::Read::read(&mut a.sock, &mut a.got[a.len..]) {
                Ok(0) => false,
                Ok(n) => {
                    a.len += n;
                    true
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    a.since.elapsed() < HELLO_TIMEOUT
                }
                Err(_) => false,
            };
            if keep && self.accepting[i].len < HELLO_LEN {
                i += 1;
                continue;
            }
            let a = self.accepting.swap_remove(i);
            if !keep {
                continue;
            }
            let me = self.cfg.rank;
            let proven = check_hello(&self.key, me, &a.got).filter(|&g| {
                g > me
                    && g < self.cfg.size()
                    && !self.cfg.is_own(g)
                    && self
                        .chans
                        .get(&g)
                        .is_none_or(|c| c.sock.is_none() && !c.fini_sent)
                    && !self.dead.contains_key(&g)
            });
            let Some(g) = proven else {
                // A stranger, a replay or a wrong key: closed unheard.
                self.refused += 1;
                continue;
            };
            if let Err(e) = self.attach(g, a.sock) {
                self.failures
                    .push((g, format!("IMPI: watching world rank {g}: {e}")));
                continue;
            }
            self.inbound_left -= 1;
            let c = self.channel(g);
            c.pump();
            if let Err(e) = c.flush() {
                self.failures
                    .push((g, format!("IMPI: writing to world rank {g}: {e}")));
            }
        }
        if self.inbound_left == 0 {
            if let Some(l) = self.listener.take() {
                self.epoll.del(l.as_raw_fd());
            }
        }
    }
}
