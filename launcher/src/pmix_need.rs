//! Whether a job's programs may want rivetrun's PMIx server. Starting one
//! (opening OpenPMIx, its plugins, `PMIx_server_init`, its progress thread,
//! a fork environment per rank) is about a third of rivetrun's own CPU time
//! in an 8-rank MPICH hello, and every proxy of a multi-host job pays it
//! again, for programs that never speak PMIx.
//!
//! The server is left out only when that is sure: every program is a
//! 64-bit ELF file that links MPICH (`libmpich.so.*`, whose PMI client
//! speaks PMI-1/PMI-2), neither it nor the MPICH library it finds links
//! OpenPMIx (an MPICH built `--with-pmix`), and no rank is told
//! `RIVET_PMI=pmix`. Anything else (scripts, Open MPI, Rivet's programs,
//! Python, an unreadable file, a library not found) gets the server.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// One program of the job: its path as the job resolved it
/// (`launch::resolve_program`: what the ranks exec) and the variables it
/// gets on top of rivetrun's environment.
pub struct Program<'a> {
    pub path: &'a Path,
    pub env: &'a [(OsString, OsString)],
}

/// False only when no program of the job can want PMIx (see the module).
pub fn may_want_pmix(programs: &[Program<'_>]) -> bool {
    programs.is_empty() || programs.iter().any(|p| !speaks_pmi_only(p))
}

fn speaks_pmi_only(p: &Program<'_>) -> bool {
    let rivet_pmi = p
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "RIVET_PMI")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var_os("RIVET_PMI"));
    if rivet_pmi.is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"pmix")) {
        return false;
    }
    let Some(needed) = needed_of(p.path) else {
        return false;
    };
    let Some(mpich) = needed.libs.iter().find(|l| l.starts_with("libmpich.so")) else {
        return false;
    };
    if needed.libs.iter().any(|l| l.starts_with("libpmix")) {
        return false;
    }
    let Some(lib) = find_library(mpich, &needed.runpath) else {
        return false;
    };
    needed_of(&lib).is_some_and(|n| !n.libs.iter().any(|l| l.starts_with("libpmix")))
}

/// A dynamic ELF file's `DT_NEEDED` names and its run path.
#[derive(Debug, Default, PartialEq)]
struct Needed {
    libs: Vec<String>,
    runpath: Vec<PathBuf>,
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;
const DT_RPATH: u64 = 15;
const DT_RUNPATH: u64 = 29;

/// Reads `DT_NEEDED` and `DT_RUNPATH`/`DT_RPATH` of a 64-bit little-endian
/// ELF file; None for anything else (or a file without them).
fn needed_of(path: &Path) -> Option<Needed> {
    let f = File::open(path).ok()?;
    let at = |off: u64, len: usize| -> Option<Vec<u8>> {
        let mut buf = vec![0; len];
        f.read_exact_at(&mut buf, off).ok()?;
        Some(buf)
    };
    let header = at(0, 64)?;
    if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let (phoff, phentsize, phnum) = (
        u64_at(&header, 0x20),
        usize::from(u16_at(&header, 0x36)),
        usize::from(u16_at(&header, 0x38)),
    );
    if phentsize < 56 || phnum == 0 || phnum > 256 {
        return None;
    }
    let table = at(phoff, phentsize * phnum)?;
    let headers: Vec<(u32, u64, u64, u64)> = (0..phnum)
        .map(|i| {
            let h = &table[i * phentsize..];
            (u32_at(h, 0), u64_at(h, 8), u64_at(h, 16), u64_at(h, 32))
        })
        .collect();
    let &(_, dyn_off, _, dyn_size) = headers.iter().find(|h| h.0 == PT_DYNAMIC)?;
    let dynamic = at(dyn_off, usize::try_from(dyn_size.min(64 * 1024)).ok()?)?;
    let (mut needed, mut paths) = (Vec::new(), Vec::new());
    let (mut strtab, mut strsz) = (None, None);
    for entry in dynamic.chunks_exact(16) {
        let (tag, val) = (u64_at(entry, 0), u64_at(entry, 8));
        match tag {
            0 => break,
            DT_NEEDED => needed.push(val),
            DT_STRTAB => strtab = Some(val),
            DT_STRSZ => strsz = Some(val),
            DT_RPATH | DT_RUNPATH => paths.push(val),
            _ => {}
        }
    }
    let (strtab, strsz) = (strtab?, strsz?.min(4 << 20));
    // The string table's address, as a file offset (through its PT_LOAD).
    let &(_, off, vaddr, _) = headers
        .iter()
        .find(|h| h.0 == PT_LOAD && h.2 <= strtab && strtab - h.2 < h.3)?;
    let strings = at(strtab - vaddr + off, usize::try_from(strsz).ok()?)?;
    let string = |i: u64| -> Option<String> {
        let rest = strings.get(usize::try_from(i).ok()?..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        Some(String::from_utf8_lossy(&rest[..end]).into_owned())
    };
    let origin = path.parent().unwrap_or(Path::new("/"));
    let runpath = paths
        .into_iter()
        .filter_map(string)
        .flat_map(|p| {
            p.split(':')
                .map(|d| PathBuf::from(d.replace("$ORIGIN", &origin.to_string_lossy())))
                .collect::<Vec<_>>()
        })
        .collect();
    Some(Needed {
        libs: needed.into_iter().filter_map(string).collect(),
        runpath,
    })
}

/// Where the dynamic loader would find `name`, near enough: the run path,
/// `LD_LIBRARY_PATH`, then the usual system directories.
fn find_library(name: &str, runpath: &[PathBuf]) -> Option<PathBuf> {
    let env: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    let system = [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
        "/usr/local/lib",
    ];
    runpath
        .iter()
        .cloned()
        .chain(env)
        .chain(system.iter().map(PathBuf::from))
        .map(|d| d.join(OsStr::new(name)))
        .find(|f| f.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(path: &Path) -> Program<'_> {
        Program { path, env: &[] }
    }

    /// This test binary is a 64-bit ELF that links libc, not MPICH.
    #[test]
    fn reads_needed_libraries() {
        let me = std::env::current_exe().unwrap();
        let needed = needed_of(&me).expect("this test binary is a dynamic ELF");
        assert!(
            needed.libs.iter().any(|l| l.starts_with("libc.so")),
            "{needed:?}"
        );
        assert!(may_want_pmix(&[program(&me)]));
    }

    /// Scripts, missing files and plain text are not known to be MPICH's:
    /// they get the server.
    #[test]
    fn unknown_programs_get_the_server() {
        let dir = std::env::temp_dir().join(format!("rivet-pmix-need-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("job.sh");
        std::fs::write(&script, "#!/bin/sh\nexec ./a.out\n").unwrap();
        assert!(needed_of(&script).is_none());
        assert!(may_want_pmix(&[program(&script)]));
        assert!(may_want_pmix(&[program(&dir.join("missing"))]));
        assert!(may_want_pmix(&[]));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An MPICH program (where MPICH is installed) needs no PMIx server,
    /// unless its ranks are told RIVET_PMI=pmix.
    #[test]
    fn mpich_programs_need_no_server() {
        let Some(src) = ["/usr/bin/mpichversion", "/usr/bin/mpivars.mpich"]
            .iter()
            .map(Path::new)
            .find(|p| {
                needed_of(p).is_some_and(|n| n.libs.iter().any(|l| l.starts_with("libmpich.so")))
            })
        else {
            eprintln!("no MPICH-linked program installed: skipped");
            return;
        };
        assert!(!may_want_pmix(&[program(src)]));
        let env = [(OsString::from("RIVET_PMI"), OsString::from("pmix"))];
        let told = Program {
            path: src,
            env: &env,
        };
        assert!(may_want_pmix(&[told]));
        // Any program that may want it is enough.
        let me = std::env::current_exe().unwrap();
        assert!(may_want_pmix(&[program(src), program(&me)]));
    }
}
