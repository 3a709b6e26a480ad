//! Connecting to the process manager and the start-up sequence: `PMI_FD`,
//! `PMI_PORT` with its `initack` secret, PMI-2, PMIx or a singleton, then
//! MPICH's queries, whose answers the client caches.

use super::*;

/// Take ownership of the inherited descriptor `fd`.
fn file_from_fd(fd: RawFd) -> Result<File> {
    let bad = |reason: String| Error::Env {
        var: "PMI_FD",
        value: fd.to_string(),
        reason,
    };
    // SAFETY: fcntl(F_GETFD) only reads the descriptor flags; it is safe for
    // any integer and fails with EBADF if `fd` is not open.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(bad(format!(
            "descriptor is not open ({}); was the process started by the launcher?",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: as above, on a descriptor known to be open. Close-on-exec keeps
    // the PMI socket out of processes this rank execs.
    unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) };
    // SAFETY: `fd` is open (checked above) and was handed to this process by
    // its process manager for the PMI client alone; the client becomes its
    // only owner and closes it when dropped.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(File::from(owned))
}

/// The job secret rivetrun gives `PMI_PORT` ranks, sent with `initack`.
fn port_secret() -> Option<String> {
    std::env::var(crate::server::PORT_SECRET_ENV)
        .ok()
        .filter(|s| !s.is_empty())
}

impl Client {
    /// Connect with explicit settings and run the start-up sequence.
    pub fn connect(config: ClientConfig) -> Result<Client> {
        let spawned = config.spawned;
        let (pmi2, jobid) = (config.pmi2, config.jobid);
        let (stream, rank, size, pmiid): (Box<dyn conn::Duplex>, u32, u32, Option<i32>) =
            match config.transport {
                Transport::Singleton => return Ok(Client::singleton(spawned)),
                Transport::Pmix => return Client::pmix(spawned),
                Transport::Fd { fd, rank, size } => (Box::new(file_from_fd(fd)?), rank, size, None),
                Transport::Stream { stream, rank, size } => (Box::new(stream), rank, size, None),
                Transport::Port {
                    addr,
                    pmiid,
                    rank,
                    size,
                } => {
                    let tcp = TcpStream::connect(&addr)
                        .map_err(|e| Error::io(format!("connecting to PMI_PORT={addr}"), e))?;
                    // Small request/response lines: do not let Nagle delay them.
                    let _ = tcp.set_nodelay(true);
                    (Box::new(tcp), rank, size, pmiid)
                }
            };
        let mut client = Client {
            mode: Mode::Remote(Conn::new(stream)),
            rank,
            size,
            appnum: 0,
            kvs_name: String::new(),
            universe_size: i32::try_from(size).unwrap_or(i32::MAX),
            spawned,
            limits: Limits::DEFAULT,
            server_version: None,
        };
        if let Some(id) = pmiid {
            client.initack(id)?;
        }
        if pmi2 {
            client.start_pmi2(jobid.as_deref())?;
        } else {
            client.handshake()?;
        }
        Ok(client)
    }

    /// Shorthand for [`Transport::Fd`] (`PMI_FD` mode).
    pub fn from_fd(fd: RawFd, rank: u32, size: u32) -> Result<Client> {
        Client::connect(ClientConfig {
            transport: Transport::Fd { fd, rank, size },
            spawned: false,
            pmi2: false,
            jobid: None,
        })
    }

    fn singleton(spawned: bool) -> Client {
        Client {
            mode: Mode::Singleton(Local::default()),
            rank: 0,
            size: 1,
            appnum: -1,
            kvs_name: format!("singleton_kvs_{}", std::process::id()),
            universe_size: 1,
            spawned,
            limits: Limits::DEFAULT,
            server_version: None,
        }
    }

    fn pmix(spawned: bool) -> Result<Client> {
        let started = Pmix::init()?;
        Ok(Client {
            kvs_name: started.pmix.nspace.clone(),
            mode: Mode::Pmix(Box::new(started.pmix)),
            rank: started.rank,
            size: started.size,
            appnum: started.appnum,
            universe_size: started.universe,
            spawned,
            limits: Limits::DEFAULT,
            server_version: None,
        })
    }

    /// `PMI_PORT` mode: identify with `initack` and read `set` lines.
    fn initack(&mut self, pmiid: i32) -> Result<()> {
        let Some(conn) = self.conn() else {
            return Ok(());
        };
        check(
            conn.request(
                &Message::InitAck {
                    pmiid,
                    secret: port_secret(),
                },
                "initack",
            )?,
            "initack",
        )?;
        let (mut rank, mut size) = (None, None);
        for _ in 0..3 {
            if let Message::Set { key, value } = conn.expect("set")? {
                let n = value.trim().parse::<u32>().ok();
                match key.as_str() {
                    "rank" => rank = n,
                    "size" => size = n,
                    _ => {}
                }
            }
        }
        match (rank, size) {
            (Some(r), Some(s)) if r < s => {
                self.rank = r;
                self.size = s;
                self.universe_size = i32::try_from(s).unwrap_or(i32::MAX);
                Ok(())
            }
            _ => Err(Error::UnexpectedReply {
                expected: "set",
                got: format!("initack set lines without a valid rank and size ({rank:?}/{size:?})"),
            }),
        }
    }

    /// Switch the connection to PMI-2 and run its start-up (`pmi2.rs`).
    fn start_pmi2(&mut self, jobid: Option<&str>) -> Result<()> {
        let placeholder = Mode::Singleton(Local::default());
        let stream = match std::mem::replace(&mut self.mode, placeholder) {
            Mode::Remote(conn) => conn.into_stream(),
            other => {
                self.mode = other;
                return Ok(());
            }
        };
        let (p, started) = Pmi2::start(stream, self.rank, jobid)?;
        self.mode = Mode::Pmi2(Box::new(p));
        self.rank = started.rank;
        self.size = started.size;
        self.appnum = started.appnum;
        self.kvs_name = started.jobid;
        self.universe_size = started.universe_size;
        self.server_version = Some((2, 0));
        Ok(())
    }

    /// MPICH's start-up sequence.
    fn handshake(&mut self) -> Result<()> {
        let Some(conn) = self.conn() else {
            return Ok(());
        };
        let init = Message::Init {
            version: 1,
            subversion: 1,
        };
        let version = match check(conn.request(&init, "response_to_init")?, "init")? {
            Message::InitResponse {
                version,
                subversion,
                ..
            } if version == 1 && (1..=2).contains(&subversion) => (version, subversion),
            Message::InitResponse {
                version,
                subversion,
                ..
            } => {
                return Err(Error::VersionMismatch {
                    version,
                    subversion,
                })
            }
            _ => unreachable_reply("response_to_init")?,
        };
        let limits = match check(conn.request(&Message::GetMaxes, "maxes")?, "get_maxes")? {
            Message::Maxes {
                kvsname_max,
                keylen_max,
                vallen_max,
                ..
            } => Limits {
                kvsname_max: kvsname_max as usize,
                keylen_max: keylen_max as usize,
                vallen_max: vallen_max as usize,
            }
            .clamp_to_codec(),
            _ => unreachable_reply("maxes")?,
        };
        let kvs_name = match check(
            conn.request(&Message::GetMyKvsname, "my_kvsname")?,
            "get_my_kvsname",
        )? {
            Message::MyKvsname { kvsname, .. } => kvsname,
            _ => unreachable_reply("my_kvsname")?,
        };
        let appnum = match check(conn.request(&Message::GetAppnum, "appnum")?, "get_appnum")? {
            Message::Appnum { appnum, .. } => appnum,
            _ => unreachable_reply("appnum")?,
        };
        let universe = Message::GetUniverseSize;
        let universe_size = match check(
            conn.request(&universe, "universe_size")?,
            "get_universe_size",
        )? {
            Message::UniverseSize { size, .. } => size,
            _ => unreachable_reply("universe_size")?,
        };
        self.server_version = Some(version);
        self.limits = limits;
        self.kvs_name = kvs_name;
        self.appnum = appnum;
        self.universe_size = universe_size;
        Ok(())
    }
}
