//! A real sshd inside namespace hosts ([`crate::netns::Cluster`]), for
//! `rivetrun --launcher ssh`. Everything it needs is in a private temp
//! directory: one host key per host, a client key and its
//! `authorized_keys`, each sshd's config, and a client config (`-F`) that
//! maps `hN` to its address and trusts exactly those host keys. Nothing of
//! the machine's own ssh configuration is read or changed: each sshd runs
//! in a mount namespace of its own with a private tmpfs on `/run` (for its
//! privilege-separation directory `/run/sshd`), and the client ignores the
//! system files under `-F`. Drop stops the daemons and removes the
//! directory; the cluster's drop (or the next run's sweep) kills whatever
//! the namespaces still hold.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::netns::Cluster;

/// One sshd per host of a cluster; stopped on drop.
pub struct Sshd {
    dir: PathBuf,
    /// The daemon of each host (None once stopped).
    daemons: Vec<Option<Child>>,
    /// Each host's name (its log is `sshd_NAME.log`).
    names: Vec<String>,
    /// The client config that logs in with the key.
    pub config: PathBuf,
    /// The same without any key (logins must fail).
    pub config_without_key: PathBuf,
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn keygen(path: &Path) -> Result<(), String> {
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "rivet-test", "-f"])
        .arg(path))
}

fn public(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path.with_extension("pub"))
        .map_err(|e| format!("{}.pub: {e}", path.display()))?;
    // "type base64 comment": the first two words.
    Ok(text
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" "))
}

impl Sshd {
    /// Start an sshd on every host of `c`, and wait until each accepts
    /// connections. An error means no sshd here (not installed): the
    /// caller skips, saying why.
    pub fn start(c: &Cluster) -> Result<Sshd, String> {
        let sshd = Path::new("/usr/sbin/sshd");
        if !sshd.exists() {
            return Err("no /usr/sbin/sshd (openssh-server; bash .ci/install)".into());
        }
        let dir =
            std::env::temp_dir().join(format!("rivet-sshd-{}-{}", std::process::id(), c.iface));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut me = Sshd {
            config: dir.join("ssh_config"),
            config_without_key: dir.join("ssh_config_nokey"),
            dir,
            daemons: Vec::new(),
            names: c.hosts.iter().map(|h| h.name.clone()).collect(),
        };
        // From here on, Drop cleans up.
        let user_key = me.dir.join("user_key");
        keygen(&user_key)?;
        let authorized = me.dir.join("authorized_keys");
        std::fs::write(&authorized, public(&user_key)? + "\n").map_err(|e| e.to_string())?;
        let mut known = String::new();
        let mut client_hosts = String::new();
        for h in &c.hosts {
            let key = me.dir.join(format!("host_key_{}", h.name));
            keygen(&key)?;
            known.push_str(&format!("{},{} {}\n", h.name, h.addr, public(&key)?));
            client_hosts.push_str(&format!("Host {}\n  HostName {}\n", h.name, h.addr));
            let config = me.dir.join(format!("sshd_config_{}", h.name));
            let text = format!(
                "ListenAddress {addr}\nPort 22\nHostKey {key}\nAuthorizedKeysFile {auth}\n\
                 PidFile none\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n\
                 MaxStartups 100\nLogLevel INFO\n",
                addr = h.addr,
                key = key.display(),
                auth = authorized.display()
            );
            std::fs::write(&config, text).map_err(|e| e.to_string())?;
            let log = std::fs::File::create(me.dir.join(format!("sshd_{}.log", h.name)))
                .map_err(|e| e.to_string())?;
            let child = Command::new("ip")
                .args([
                    "netns", "exec", &h.ns, "unshare", "--uts", "--mount", "sh", "-c",
                ])
                .arg(
                    "hostname \"$0\" && mount -t tmpfs -o mode=755 rivet-run /run && \
                     mkdir -m 755 /run/sshd && exec /usr/sbin/sshd -D -e -f \"$1\"",
                )
                .arg(&h.name)
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .map_err(|e| format!("starting sshd on {}: {e}", h.name))?;
            me.daemons.push(Some(child));
        }
        let known_file = me.dir.join("known_hosts");
        std::fs::write(&known_file, known).map_err(|e| e.to_string())?;
        let common = format!(
            "Host *\n  User root\n  UserKnownHostsFile {}\n  GlobalKnownHostsFile /dev/null\n  \
             StrictHostKeyChecking yes\n  IdentitiesOnly yes\n  IdentityAgent none\n",
            known_file.display()
        );
        let with_key = format!(
            "{client_hosts}{common}  IdentityFile {}\n",
            user_key.display()
        );
        std::fs::write(&me.config, with_key).map_err(|e| e.to_string())?;
        // IdentitiesOnly with no IdentityFile but the default names, none of
        // which is in authorized_keys.
        std::fs::write(&me.config_without_key, format!("{client_hosts}{common}"))
            .map_err(|e| e.to_string())?;
        for (i, h) in c.hosts.iter().enumerate() {
            me.wait_listening(i, &h.addr)?;
        }
        Ok(me)
    }

    /// Wait (up to 10 s) until host `i`'s sshd answers on port 22.
    fn wait_listening(&mut self, i: usize, addr: &str) -> Result<(), String> {
        let start = Instant::now();
        let to: std::net::SocketAddr = format!("{addr}:22").parse().map_err(|e| format!("{e}"))?;
        loop {
            if std::net::TcpStream::connect_timeout(&to, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if let Some(Some(child)) = self.daemons.get_mut(i) {
                if let Ok(Some(st)) = child.try_wait() {
                    return Err(format!("sshd on {addr} ended ({st}): {}", self.log(i)));
                }
            }
            if start.elapsed() > Duration::from_secs(10) {
                return Err(format!("sshd on {addr} does not answer: {}", self.log(i)));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Host `i`'s sshd log (its stderr), for assertion messages.
    pub fn log(&self, i: usize) -> String {
        let name = self.names.get(i).map_or("", |n| n.as_str());
        std::fs::read_to_string(self.dir.join(format!("sshd_{name}.log"))).unwrap_or_default()
    }

    /// `RIVET_LAUNCHER_EXTRA_ARGS` that make rivetrun's ssh use `config`.
    pub fn extra_args(config: &Path) -> String {
        format!("-F {}", config.display())
    }

    /// The pid of host `i`'s listening sshd (None once stopped).
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.daemons.get(i)?.as_ref().map(|c| c.id())
    }

    /// Stop host `i`'s sshd (a host whose sshd is not running).
    pub fn stop(&mut self, i: usize) {
        if let Some(slot) = self.daemons.get_mut(i) {
            if let Some(mut child) = slot.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        for i in 0..self.daemons.len() {
            self.stop(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
