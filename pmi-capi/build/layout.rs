//! File helpers the C libraries' build scripts share (pmi-capi and capi
//! include this file): writes that a concurrent reader never sees half done.

use std::path::Path;
use std::{fs, io};

/// Write `path` through a temporary file and a rename, so a concurrent
/// reader never sees half a file.
pub fn replace_file(path: &Path, contents: &[u8]) -> io::Result<()> {
    if fs::read(path).is_ok_and(|old| old == contents) {
        return Ok(());
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    fs::write(&tmp, contents)?;
    fs::rename(&tmp, path)
}

/// Make `link` a symbolic link to `target` (relative to the link's directory).
pub fn symlink(target: &str, link: &Path) -> io::Result<()> {
    if fs::read_link(link).is_ok_and(|t| t == Path::new(target)) {
        return Ok(());
    }
    let tmp = link.with_extension(format!("tmp{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    fs::rename(&tmp, link)
}
