//! Hosts on one machine for multi-host tests: each host is a network
//! namespace with a veth on a bridge, its own address, its own `/etc/hosts`
//! (`/etc/netns/NS/hosts`, which `ip netns exec` mounts over `/etc/hosts`)
//! and its own hostname (`unshare --uts`). A wrapper script, given to
//! `rivetrun --launcher-exec` (or Hydra's `-launcher-exec`), runs
//! `SCRIPT HOST COMMAND...` inside HOST, the command parsed again by a
//! shell as ssh would (rivetrun and Hydra quote it for that).
//!
//! The veth end inside every namespace has the bridge's name, so one
//! `--iface NAME` names the interface on every host (as `eth1` would on a
//! cluster). Names carry this process's id and a counter, so concurrent
//! runs do not collide; everything is removed on drop, which also runs when
//! an assertion fails (unwinding). [`cluster`] makes one or says why a
//! test skips; [`on_hosts`] is rivetrun through its wrapper.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// One host of a [`Cluster`].
#[derive(Debug, Clone)]
pub struct Host {
    /// Its hostname (`h1`, `h2`, ...), also what `-hosts` names it by.
    pub name: String,
    /// Its network namespace.
    pub ns: String,
    /// Its IPv4 address on the bridge.
    pub addr: String,
    /// Its veth's end on the bridge (in the root namespace).
    pub link: String,
}

/// A set of namespace hosts on one bridge; removed on drop.
#[derive(Debug)]
pub struct Cluster {
    pub hosts: Vec<Host>,
    /// The bridge in the root namespace, and each host's interface name.
    pub iface: String,
    /// The root namespace's address on the bridge.
    pub bridge_addr: String,
    dir: PathBuf,
    script: PathBuf,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Cluster {
    /// `n` hosts `h1..hN`. An error means namespaces cannot be made here
    /// (not root, no `ip`): the caller skips, saying why.
    pub fn new(n: usize) -> Result<Cluster, String> {
        sweep_dead_runs();
        static COUNT: AtomicU32 = AtomicU32::new(0);
        let k = COUNT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // At most 15 bytes with the prefixes: pid (7 digits), k, host (1).
        let tag = format!("{pid}x{}", k % 100);
        let iface = format!("rvb{tag}");
        let net = format!("10.{}.{}", 100 + (k % 100), pid % 250);
        let dir = std::env::temp_dir().join(format!("rivet-netns-{pid}-{k}"));
        let mut cluster = Cluster {
            hosts: Vec::new(),
            iface: iface.clone(),
            bridge_addr: format!("{net}.1"),
            script: dir.join("nsexec"),
            dir,
        };
        // From here on, Drop removes whatever was made.
        std::fs::create_dir_all(&cluster.dir).map_err(|e| e.to_string())?;
        ip(&["link", "add", &iface, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{net}.1/24"), "dev", &iface])?;
        ip(&["link", "set", &iface, "up"])?;
        for i in 1..=n {
            let host = Host {
                name: format!("h{i}"),
                ns: format!("rivet-{pid}-{k}-h{i}"),
                addr: format!("{net}.{}", i + 1),
                link: format!("rvv{tag}h{i}"),
            };
            cluster.hosts.push(host.clone());
            ip(&["netns", "add", &host.ns])?;
            let outer = host.link.clone();
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", "rvtmp", "netns", &host.ns,
            ])?;
            ip(&["link", "set", &outer, "master", &iface, "up"])?;
            let inside = |args: &[&str]| {
                let mut v = vec!["-n", host.ns.as_str()];
                v.extend_from_slice(args);
                ip(&v)
            };
            inside(&["link", "set", "rvtmp", "name", &iface])?;
            inside(&["addr", "add", &format!("{}/24", host.addr), "dev", &iface])?;
            inside(&["link", "set", &iface, "up"])?;
            inside(&["link", "set", "lo", "up"])?;
            inside(&["route", "add", "default", "via", &cluster.bridge_addr])?;
        }
        let mut hosts_file = String::from("127.0.0.1 localhost\n");
        for h in &cluster.hosts {
            hosts_file.push_str(&format!("{} {}\n", h.addr, h.name));
        }
        let mut cases = String::new();
        for h in &cluster.hosts {
            let etc = cluster.etc_dir(h);
            std::fs::create_dir_all(&etc).map_err(|e| format!("{}: {e}", etc.display()))?;
            std::fs::write(etc.join("hosts"), &hosts_file).map_err(|e| e.to_string())?;
            cases.push_str(&format!(
                "  {}|{}) ns={}; name={} ;;\n",
                h.name, h.addr, h.ns, h.name
            ));
        }
        let script = format!(
            "#!/bin/sh\n# rivetrun --launcher-exec: run COMMAND on HOST (a namespace).\n\
             host=$1; shift\ncase \"$host\" in\n{cases}  *) echo \"nsexec: no host $host\" >&2; exit 255 ;;\nesac\n\
             exec ip netns exec \"$ns\" unshare --uts sh -c 'hostname \"$0\" && eval \"exec $1\"' \"$name\" \"$*\"\n"
        );
        std::fs::write(&cluster.script, script).map_err(|e| e.to_string())?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cluster.script, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        Ok(cluster)
    }

    fn etc_dir(&self, h: &Host) -> PathBuf {
        Path::new("/etc/netns").join(&h.ns)
    }

    /// The `--launcher-exec` program.
    pub fn launcher_exec(&self) -> &Path {
        &self.script
    }

    /// `rivetrun -n N` on every host, `per` slots each, through the
    /// `--launcher-exec` wrapper and the cluster's `--iface`; the caller
    /// adds options and the program.
    pub fn rivetrun(&self, per: u32, n: u32) -> Command {
        let exec = self.launcher_exec().display().to_string();
        let (hosts, n) = (self.host_list(per), n.to_string());
        crate::rivetrun(&[
            "--launcher",
            "rsh",
            "--launcher-exec",
            &exec,
            "--iface",
            &self.iface,
            "-hosts",
            &hosts,
            "-n",
            &n,
        ])
    }

    /// `h1,h2,...` with `per` slots each (`h1:2,...`).
    pub fn host_list(&self, per: u32) -> String {
        self.hosts
            .iter()
            .map(|h| format!("{}:{per}", h.name))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Processes living in host `i`'s namespace.
    pub fn pids(&self, i: usize) -> Vec<u32> {
        let out = Command::new("ip")
            .args(["netns", "pids", &self.hosts[i].ns])
            .output();
        match out {
            Ok(o) => String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Cut host `i` off the network (its link down: nothing is closed, the
    /// processes live on, packets are lost).
    pub fn cut_host(&self, i: usize) -> Result<(), String> {
        ip(&["link", "set", &self.hosts[i].link, "down"])
    }

    /// SIGKILL every process of host `i` (a host that dies); how many.
    pub fn kill_host(&self, i: usize) -> usize {
        let pids = self.pids(i);
        for &p in &pids {
            // SAFETY: kill(2) takes no pointers.
            unsafe { libc::kill(p as libc::pid_t, libc::SIGKILL) };
        }
        pids.len()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.hosts.len() {
            self.kill_host(i);
        }
        for h in &self.hosts {
            let _ = ip(&["netns", "del", &h.ns]); // takes its veth pair along
            let _ = std::fs::remove_dir_all(self.etc_dir(h));
        }
        let _ = ip(&["link", "del", &self.iface]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Remove what a test run killed before its drops ran left behind: the
/// namespaces (with their processes), `/etc/netns` entries and bridges
/// named after a process that no longer exists.
fn sweep_dead_runs() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    let mut dead = std::collections::BTreeSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(pid) = name
            .strip_prefix("rivet-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if let Ok(o) = Command::new("ip").args(["netns", "pids", name]).output() {
            for p in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                if let Ok(p) = p.parse::<i32>() {
                    // SAFETY: kill(2) takes no pointers.
                    unsafe { libc::kill(p, libc::SIGKILL) };
                }
            }
        }
        let _ = ip(&["netns", "del", name]);
        let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(name));
        dead.insert(pid);
    }
    for pid in dead {
        for k in 0..100 {
            // Only bridges that exist answer; the rest is a quiet error.
            let _ = ip(&["link", "del", &format!("rvb{pid}x{k}")]);
        }
    }
}

/// `Cluster::new(n)`, or `None` after saying why on stderr: a test
/// skips where network namespaces cannot be made (not root).
pub fn cluster(n: usize) -> Option<Cluster> {
    match Cluster::new(n) {
        Ok(c) => Some(c),
        Err(why) => {
            eprintln!("skipping: cannot create network namespace hosts here: {why}");
            None
        }
    }
}

/// rivetrun on the hosts `place` names (`-hosts LIST`, `-hostfile FILE`)
/// through the cluster's wrapper.
pub fn on_hosts(
    c: &Cluster,
    place: &[&str],
    n: u32,
    extra: &[&str],
    prog: &Path,
    args: &[&str],
) -> Command {
    let n = n.to_string();
    let exec = c.launcher_exec().display().to_string();
    let mut v = vec![
        "--launcher",
        "rsh",
        "--launcher-exec",
        &exec,
        "-n",
        &n,
        "-genv",
        "RIVET_YIELD",
        "always",
        "--launch-stats",
    ];
    v.extend_from_slice(place);
    v.extend_from_slice(extra);
    let mut cmd = crate::rivetrun(&v);
    cmd.arg(prog).args(args);
    cmd
}
