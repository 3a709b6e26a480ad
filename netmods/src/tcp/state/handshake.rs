//! Dialling and the handshake: sockets made (accepted or connecting),
//! HELLO and verdict, the tie-break, redials, overdue strangers.

use super::*;

impl State {
    /// `slot` is an accepted socket still without its whole HELLO past
    /// the deadline: the backend found nothing more to read, so it closes.
    pub(crate) fn hello_overdue(&mut self, slot: u32) -> bool {
        let timeout = self.hs_timeout;
        let Some(s) = self.sock(slot) else {
            return false;
        };
        if s.phase != Phase::AwaitHello || s.born.elapsed() < timeout {
            return false;
        }
        self.expired += 1;
        self.close(slot, None);
        true
    }

    /// Closes every accepted socket whose HELLO is overdue (`hello_overdue`);
    /// for a backend whose receive is in flight, after reaping what arrived.
    pub(crate) fn expire_handshakes(&mut self) -> usize {
        let mut n = 0;
        for slot in 0..self.slots.len() as u32 {
            n += self.hello_overdue(slot) as usize;
        }
        n
    }

    /// Marks every accepted socket still waiting for its HELLO dirty, so
    /// the backend tries it again; their number.
    pub(crate) fn wake_awaiting_hello(&mut self) -> usize {
        let mut n = 0;
        for slot in 0..self.slots.len() as u32 {
            if self
                .sock(slot)
                .is_some_and(|s| s.phase == Phase::AwaitHello)
            {
                self.mark_dirty(slot);
                n += 1;
            }
        }
        n
    }

    /// A socket accepted on the listener: its HELLO is awaited. At most
    /// `max_awaiting` sockets wait so: the oldest is closed to make room
    /// (a rank sends its HELLO as it connects, so only a stranger waits
    /// long; a rank cut so redials).
    pub(crate) fn add_acceptor(&mut self, fd: OwnedFd) -> u32 {
        let mut waiting: Vec<(Instant, u32)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, x)| x.sock.as_ref().map(|s| (s, i as u32)))
            .filter(|(s, _)| s.phase == Phase::AwaitHello)
            .map(|(s, i)| (s.born, i))
            .collect();
        if waiting.len() >= self.max_awaiting.max(1) {
            waiting.sort_unstable();
            let excess = waiting.len() + 1 - self.max_awaiting.max(1);
            for &(_, slot) in &waiting[..excess] {
                self.evicted += 1;
                self.close(slot, None);
            }
        }
        let any: SocketAddr = ([0, 0, 0, 0], 0).into();
        self.insert(fd, Phase::AwaitHello, None, SockAddr::new(any))
    }

    /// Creates the socket for `peer`'s connect to `addrs[from]` (or the
    /// next address a socket can be made for) in phase `Connecting`; the
    /// backend starts the connect. `None`: no address left, the peer failed.
    pub(crate) fn add_connector(
        &mut self,
        peer: PeerId,
        from: usize,
        nonblocking: bool,
        last: Option<String>,
    ) -> Option<u32> {
        let (addrs, port) = self
            .peers
            .get(&peer)
            .map(|p| (p.addrs.clone(), p.port))
            .unwrap_or_default();
        self.dial(
            Some(peer),
            addrs,
            port,
            from,
            nonblocking,
            last,
            Outq::default(),
        )
    }

    /// `add_connector` for `peer`, or for a detached connect (`None`, with
    /// its queue `drain`), whose failure fails nothing.
    #[allow(clippy::too_many_arguments)]
    fn dial(
        &mut self,
        peer: Option<PeerId>,
        addrs: Vec<SocketAddr>,
        port: Option<u64>,
        from: usize,
        nonblocking: bool,
        last: Option<String>,
        drain: Outq,
    ) -> Option<u32> {
        let mut why = last;
        for (i, a) in addrs.iter().enumerate().skip(from) {
            match sys::tcp_socket(a, nonblocking) {
                Ok(fd) => {
                    let a = *a;
                    let slot =
                        self.insert(fd, Phase::Connecting { addr: i }, peer, SockAddr::new(a));
                    let s = self.slots[slot as usize].sock.as_mut()?;
                    let id = s.id(slot);
                    s.port = port;
                    s.addrs = addrs;
                    s.detached = peer.is_none();
                    s.drain = drain;
                    self.detached += peer.is_none() as usize;
                    if let Some(p) = peer.and_then(|q| self.peers.get_mut(&q)) {
                        p.mine = Some(id);
                    }
                    return Some(slot);
                }
                Err(e) => why = Some(format!("socket for {a}: {e}")),
            }
        }
        let list: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
        let why = format!(
            "cannot connect to {} ({})",
            list.join(","),
            why.unwrap_or_else(|| "no address".into())
        );
        if let Some(peer) = peer {
            self.fail_peer(peer, why);
        }
        None
    }

    /// The connect of `slot` succeeded: send the HELLO (our rank, or the
    /// port's tag).
    pub(crate) fn connected(&mut self, slot: u32) {
        let me = self.me;
        let Some(s) = self.slots.get(slot as usize).and_then(|x| x.sock.as_ref()) else {
            return;
        };
        if let Phase::Connecting { addr } = s.phase {
            let (kind, id) = match s.port {
                Some(tag) => (KIND_PORT, tag),
                None => (KIND_RANK, me),
            };
            // A rank of our own job checks the secret's MAC, a rank of an
            // added job our group key's (it got the key with our group's
            // description); a port's acceptor checks the tag.
            let (key, target) = match (s.port, s.peer.map(split_peer)) {
                (None, Some((0, rank))) => (self.key, Some((u64::from(rank), &self.jobs.own[..]))),
                (None, Some((g, rank))) => match self.jobs.added(g) {
                    Some((job, _)) => (
                        self.key.map(|k| k.group_key()),
                        Some((u64::from(rank), job)),
                    ),
                    None => (None, None),
                },
                _ => (None, None),
            };
            let auth = wire::hello_auth(key.as_ref(), kind, id, target, &self.jobs.own);
            let mut out = [0u8; HELLO_MAX];
            let len = wire::encode_hello(&mut out, kind, id, &self.jobs.own, &auth);
            if let Some(s) = self.sock(slot) {
                s.phase = Phase::Hello { addr };
                s.hs.out[..len].copy_from_slice(&out[..len]);
                s.hs.out_len = len;
                s.hs.out_pos = 0;
            }
        }
        self.mark_dirty(slot);
    }

    /// The connect of `slot` failed: drop the socket and try the peer's
    /// next address. `Some(slot)` of the new socket, `None` if the peer failed.
    pub(crate) fn connect_failed(
        &mut self,
        slot: u32,
        err: &std::io::Error,
        nonblocking: bool,
    ) -> Option<u32> {
        let s = self.sock(slot)?;
        let Phase::Connecting { addr } = s.phase else {
            return None;
        };
        let (peer, port) = (s.peer, s.port);
        if peer.is_none() && !s.detached {
            return None;
        }
        let addrs = std::mem::take(&mut s.addrs);
        let drain = std::mem::take(&mut s.drain);
        self.close(slot, None);
        let why = Some(err.to_string());
        self.dial(peer, addrs, port, addr + 1, nonblocking, why, drain)
    }

    /// `n` more handshake bytes were written from `hs.out`.
    pub(crate) fn hs_sent(&mut self, slot: u32, n: usize) {
        let Some(s) = self.sock(slot) else { return };
        s.hs.out_pos += n;
        if s.hs.out_pos < s.hs.out_len {
            self.mark_dirty(slot);
            return;
        }
        match s.phase {
            Phase::Verdict { accept: true } => {
                s.phase = Phase::Open;
                let (peer, detached) = (s.peer, s.detached);
                self.open.push(slot);
                if let Some(p) = peer.and_then(|q| self.peers.get_mut(&q)) {
                    p.open = true;
                }
                if !detached {
                    self.events += 1;
                }
                self.mark_dirty(slot);
            }
            Phase::Verdict { accept: false } => self.close(slot, None),
            _ => self.mark_dirty(slot),
        }
    }

    /// `n` more handshake bytes arrived in `hs.inb`.
    pub(crate) fn hs_received(&mut self, slot: u32, n: usize) {
        let Some(s) = self.sock(slot) else { return };
        s.hs.in_len += n;
        match s.phase {
            Phase::Hello { .. } if s.hs.in_len == VERDICT_LEN => {
                let v = wire::parse_verdict(&s.hs.inb[..VERDICT_LEN]);
                self.verdict(slot, v);
            }
            Phase::AwaitHello => self.hello(slot),
            _ => self.mark_dirty(slot),
        }
    }

    /// Connector: the acceptor answered.
    fn verdict(&mut self, slot: u32, v: Result<Verdict, &'static str>) {
        let budget = self.max_unplaced;
        let Some(s) = self.sock(slot) else { return };
        let id = s.id(slot);
        if s.detached {
            // Disconnected while connecting: if accepted, write the queue
            // and close; otherwise the queue goes with the socket.
            if v != Ok(Verdict::Accept) {
                return self.close(slot, None);
            }
            s.phase = Phase::Open;
            s.rx = Some(Rx::new(budget));
            self.open.push(slot);
            self.made += 1;
            return self.mark_dirty(slot);
        }
        let (Some(peer), port) = (s.peer, s.port.is_some()) else {
            return;
        };
        match v {
            Ok(Verdict::Accept) => {
                let p = self.peers.entry(peer).or_default();
                if p.conn.is_some() || p.failed.is_some() {
                    // Cannot happen with a peer that follows the rules.
                    self.close(slot, None);
                    return;
                }
                p.conn = Some(id);
                p.open = true;
                if let Some(s) = self.sock(slot) {
                    s.phase = Phase::Open;
                    s.rx = Some(Rx::new(budget));
                }
                self.open.push(slot);
                self.made += 1;
                self.events += 1;
                self.mark_dirty(slot);
            }
            // Lost the tie-break: the peer's own connection will come.
            Ok(Verdict::Duplicate) if !port => self.close(slot, None),
            Ok(Verdict::OtherJob) => self.fail_peer(
                peer,
                "connection rejected: the peer is in another job".into(),
            ),
            // A port connection is never a duplicate: refused.
            Ok(Verdict::Duplicate | Verdict::Unsupported) => {
                self.fail_peer(peer, "connection rejected by the peer".into())
            }
            Err(e) => self.sock_failed(slot, e.into()),
        }
    }

    /// Acceptor: parse the HELLO so far; answer once it is whole.
    fn hello(&mut self, slot: u32) {
        let me = self.me;
        let budget = self.max_unplaced;
        let Some(s) = self.slots.get(slot as usize).and_then(|x| x.sock.as_ref()) else {
            return;
        };
        let id = s.id(slot);
        let (peer, verdict) = match wire::parse_hello(&s.hs.inb[..s.hs.in_len]) {
            Hello::Partial => return self.mark_dirty(slot),
            Hello::Bad(_) => return self.close(slot, None),
            Hello::LongJob => (None, Verdict::OtherJob),
            Hello::Done {
                kind: KIND_PORT,
                id: tag,
                ..
            } => {
                // Every port connection is a new peer.
                let peer = self.new_temp();
                self.peers.insert(
                    peer,
                    Peer {
                        conn: Some(id),
                        ..Peer::default()
                    },
                );
                self.ports.push((peer, tag));
                (Some(peer), Verdict::Accept)
            }
            Hello::Done { kind, .. } if kind != KIND_RANK => (None, Verdict::Unsupported),
            Hello::Done {
                id: rank,
                job,
                nonce,
                mac,
                ..
            } => {
                // A rank of our own job proves it with the job secret, a
                // rank of an added job with that job's group key (if it
                // has one: a job started without a secret has none).
                let group = self.jobs.group_of(job);
                let key = match group {
                    Some(0) => self.key,
                    Some(g) => self.jobs.added(g).and_then(|(_, k)| k.copied()),
                    None => None,
                };
                let target = (me, &self.jobs.own[..]);
                let proven = key.is_none_or(|k| {
                    auth::same(
                        &wire::hello_mac(&k, KIND_RANK, rank, target, job, &nonce),
                        &mac,
                    )
                });
                match (group, u32::try_from(rank)) {
                    (None, _) => (None, Verdict::OtherJob),
                    (Some(_), Err(_)) => (None, Verdict::Unsupported),
                    (Some(0), Ok(_)) if rank == me => (None, Verdict::Unsupported),
                    (Some(_), Ok(_)) if !proven => (None, Verdict::Unsupported),
                    (Some(group), Ok(r)) => {
                        let peer = peer_id(group, r);
                        // The connection started by the lower identity wins.
                        let theirs_wins = (job, rank) < (self.jobs.own.as_slice(), me);
                        let p = self.peers.entry(peer).or_default();
                        let v = if p.failed.is_some()
                            || p.conn.is_some()
                            || (p.mine.is_some() && !theirs_wins)
                        {
                            Verdict::Duplicate
                        } else {
                            p.conn = Some(id);
                            Verdict::Accept
                        };
                        (Some(peer), v)
                    }
                }
            }
        };
        let accept = verdict == Verdict::Accept;
        if accept {
            self.made += 1;
        }
        let Some(s) = self.sock(slot) else { return };
        if accept {
            s.peer = peer;
            s.rx = Some(Rx::new(budget));
        }
        s.phase = Phase::Verdict { accept };
        let v = wire::encode_verdict(verdict);
        s.hs.out[..v.len()].copy_from_slice(&v);
        s.hs.out_len = v.len();
        s.hs.out_pos = 0;
        self.mark_dirty(slot);
    }

    /// Our connect's handshake was cut before the verdict (the acceptor
    /// closed it, e.g. because we were too slow to send the HELLO: its
    /// deadline): connect to the same address again, up to `MAX_REDIALS`
    /// times per peer, instead of failing the peer. True if it did.
    pub(super) fn redialed(&mut self, slot: u32, why: &str) -> bool {
        let nonblocking = self.nonblocking;
        let Some((s, peers)) = self.sock_and_peers(slot) else {
            return false;
        };
        let (Phase::Hello { addr }, Some(peer), false) = (s.phase, s.peer, s.detached) else {
            return false;
        };
        let Some(p) = peers.get_mut(&peer) else {
            return false;
        };
        if p.conn.is_some() || p.failed.is_some() || p.redials >= MAX_REDIALS {
            return false;
        }
        p.redials += 1;
        let (addrs, port) = (std::mem::take(&mut s.addrs), s.port);
        self.close(slot, None);
        let why = Some(format!("handshake cut: {why}"));
        if let Some(new) = self.dial(
            Some(peer),
            addrs,
            port,
            addr,
            nonblocking,
            why,
            Outq::default(),
        ) {
            self.redial.push(new);
        }
        true
    }
}
