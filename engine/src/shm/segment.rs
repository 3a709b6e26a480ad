//! The POSIX shared-memory object behind the node segment: create (exclusive,
//! mode 0600, sized and backed), open (only a segment of our own user with
//! no access for anyone else, checked on the open file before it is
//! mapped), map, unlink.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::FromRawFd;

use memmap2::{MmapMut, MmapOptions};

use super::ShmError;

fn c_name(name: &str) -> Result<CString, ShmError> {
    let bad = |why: &str| ShmError::Name {
        name: name.to_string(),
        why: why.to_string(),
    };
    if name.is_empty() {
        return Err(bad("it is empty"));
    }
    if name.len() > 200 {
        return Err(bad("it is longer than 200 bytes"));
    }
    if name.contains('/') || name.contains('\0') || name == "." || name == ".." {
        return Err(bad("it contains '/' or NUL or is '.'/'..'"));
    }
    CString::new(format!("/{name}")).map_err(|_| bad("it contains NUL"))
}

/// Create `/dev/shm/<name>` exclusively with mode 0600 and reserve `size`
/// bytes of backing store (so a full /dev/shm fails here, not as a SIGBUS
/// later).
pub fn create(name: &str, size: usize) -> Result<File, ShmError> {
    let c = c_name(name)?;
    // SAFETY: `c` is a valid NUL-terminated string; plain syscall.
    let fd = unsafe {
        libc::shm_open(
            c.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            0o600 as libc::mode_t,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EEXIST) {
            return Err(ShmError::Exists {
                name: name.to_string(),
            });
        }
        return Err(ShmError::Io {
            what: format!("creating shared memory segment /dev/shm/{name}"),
            source: e,
        });
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    // On failure from here on, remove the half-made file.
    let no_space = |source: io::Error| {
        let _ = unlink(name);
        ShmError::NoSpace {
            name: name.to_string(),
            size,
            source,
        }
    };
    // SAFETY: valid fd; plain syscall.
    let r = unsafe { libc::posix_fallocate(fd, 0, size as libc::off_t) };
    match r {
        0 => {}
        libc::EOPNOTSUPP | libc::EINVAL => {
            file.set_len(size as u64).map_err(no_space)?;
        }
        e => return Err(no_space(io::Error::from_raw_os_error(e))),
    }
    Ok(file)
}

/// Open an existing segment for reading and writing.
pub fn open(name: &str) -> Result<File, ShmError> {
    let c = c_name(name)?;
    // SAFETY: `c` is a valid NUL-terminated string; plain syscall.
    let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        let hint = match e.raw_os_error() {
            Some(libc::ENOENT) => {
                " (it does not exist: the node leader has not created it, or every \
                 local rank already attached and it was unlinked; check that all ranks \
                 use the same name and local_size)"
            }
            Some(libc::EACCES) => " (permission denied: the segment belongs to another user)",
            _ => "",
        };
        return Err(ShmError::Io {
            what: format!("opening shared memory segment /dev/shm/{name}{hint}"),
            source: e,
        });
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    trusted(name, &file)?;
    Ok(file)
}

/// Whether an opened segment can be one we made: a regular file of our
/// effective user, with no permission for group or others. Anyone else
/// could have planted it under the name we expect (to feed us forged
/// queues), or could still write into it.
pub fn trusted(name: &str, file: &File) -> Result<(), ShmError> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().map_err(|source| ShmError::Io {
        what: format!("checking shared memory segment /dev/shm/{name}"),
        source,
    })?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let untrusted = |why: String| ShmError::Untrusted {
        name: name.to_string(),
        why,
    };
    if !meta.file_type().is_file() {
        return Err(untrusted("it is not a regular file".into()));
    }
    if meta.uid() != me {
        return Err(untrusted(format!(
            "it belongs to uid {}, not to us (uid {me})",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(untrusted(format!(
            "its mode is {:o}: group or others may use it",
            meta.mode() & 0o777
        )));
    }
    Ok(())
}

/// Map `len` bytes of `file` shared, read-write.
pub fn map(name: &str, file: &File, len: usize) -> Result<MmapMut, ShmError> {
    // SAFETY: the mapping is MAP_SHARED on purpose: other processes change it
    // concurrently. All accesses to it go through atomics or follow the
    // queue/ring protocols (see `ShmNode`), never through `&mut [u8]`
    // references that assume exclusive access.
    unsafe { MmapOptions::new().len(len).map_mut(file) }.map_err(|source| ShmError::Io {
        what: format!("mapping shared memory segment /dev/shm/{name} ({len} bytes)"),
        source,
    })
}

/// Remove `/dev/shm/<name>`. `Ok(false)` if it was already gone.
pub fn unlink(name: &str) -> Result<bool, ShmError> {
    let c = c_name(name)?;
    // SAFETY: `c` is a valid NUL-terminated string; plain syscall.
    if unsafe { libc::shm_unlink(c.as_ptr()) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENOENT) {
        return Ok(false);
    }
    Err(ShmError::Io {
        what: format!("removing shared memory segment /dev/shm/{name}"),
        source: e,
    })
}

/// Unlinks the name on drop unless disarmed (creation failed half way).
pub struct UnlinkGuard<'a> {
    pub name: &'a str,
    pub armed: bool,
}

impl Drop for UnlinkGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = unlink(self.name);
        }
    }
}
