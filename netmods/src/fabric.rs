//! Whether this node has an interconnect device at all, looked up in sysfs
//! and `/dev` without loading libfabric. `auto` asks this first: loading
//! libfabric costs 0.2-0.7 s on a Debian host (its psm provider's library
//! calibrates a clock with hundreds of sleeps in its constructor, and
//! `fi_getinfo` reads `/proc/kallsyms`), and every provider faster than
//! tcp (`verbs`, `efa`, `usnic`, `psm`, `psm2`, `psm3` on verbs, `opx`,
//! `cxi`) needs one of the devices listed here.

use std::path::Path;

/// Directories whose entries are interconnect devices, and `/dev` name
/// prefixes of the same (relative to the root; `/` in production).
const CLASS_DIRS: [&str; 2] = ["sys/class/infiniband", "sys/class/cxi"];
const DEV_PREFIXES: [&str; 3] = ["hfi1", "ipath", "cxi"];

/// The interconnect devices on this node (`infiniband/mlx5_0`,
/// `dev/hfi1_0`, ...); empty when there is none, and then no libfabric
/// provider faster than tcp can run here.
pub fn fabric_devices() -> Vec<String> {
    devices_under(Path::new("/"))
}

fn devices_under(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for dir in CLASS_DIRS {
        let class = dir.rsplit('/').next().unwrap_or(dir);
        if let Ok(entries) = std::fs::read_dir(root.join(dir)) {
            for e in entries.flatten() {
                out.push(format!("{class}/{}", e.file_name().to_string_lossy()));
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir(root.join("dev")) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if DEV_PREFIXES.iter().any(|p| name.starts_with(p)) {
                out.push(format!("dev/{name}"));
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_devices_by_class_and_dev_name() {
        let root = std::env::temp_dir().join(format!("rivet-fabric-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("dev")).unwrap();
        std::fs::write(root.join("dev/null"), b"").unwrap();
        assert!(devices_under(&root).is_empty(), "no device yet");
        std::fs::create_dir_all(root.join("sys/class/infiniband/mlx5_0")).unwrap();
        std::fs::write(root.join("dev/hfi1_0"), b"").unwrap();
        let found = devices_under(&root);
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(found, ["dev/hfi1_0", "infiniband/mlx5_0"]);
    }
}
