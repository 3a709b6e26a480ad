//! Whether a job's programs may want rivetrun's PMIx server. Starting one
//! (opening OpenPMIx, its plugins, `PMIx_server_init`, its progress thread,
//! a fork environment per rank) is about a third of rivetrun's own CPU time
//! in an 8-rank MPICH hello, and every proxy of a multi-host job pays it
//! again, for programs that never speak PMIx.
//!
//! The server is left out only when that is sure: every program is an
//! ELF file that links MPICH (`libmpich.so.*`, whose PMI client
//! speaks PMI-1/PMI-2), neither it nor the MPICH library it finds (of the
//! program's own ELF class and machine, as the loader would) links
//! OpenPMIx (an MPICH built `--with-pmix`), and no rank is told
//! `RIVET_PMI=pmix`. Anything else (scripts, Open MPI, Rivet's programs,
//! Python, an unreadable or malformed file, a library not found) gets the
//! server. The ELF reading is the `object` crate's: a malformed file is its
//! error, never a panic or an out-of-range read here.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{Dyn, FileHeader, ProgramHeader};
use object::read::{ReadCache, ReadRef, StringTable};
use object::{Endianness, FileKind};

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
    let Some(lib) = find_library(mpich, &needed) else {
        return false;
    };
    !lib.libs.iter().any(|l| l.starts_with("libpmix"))
}

/// A dynamic ELF file's `DT_NEEDED` names and its run path.
#[derive(Debug, PartialEq)]
struct Needed {
    /// 64-bit (else 32-bit) and `e_machine`: a library of another kind is
    /// not the one the loader would take.
    kind: (bool, elf::Machine),
    libs: Vec<String>,
    runpath: Vec<PathBuf>,
}

/// Reads `DT_NEEDED` and `DT_RUNPATH`/`DT_RPATH` of an ELF file (either
/// class, either byte order); None for anything else, a malformed file, or
/// one without a dynamic segment. Only the parts read are read from disk
/// (`ReadCache`), not the whole file.
fn needed_of(path: &Path) -> Option<Needed> {
    let file = ReadCache::new(File::open(path).ok()?);
    match FileKind::parse(&file).ok()? {
        FileKind::Elf32 => needed_in::<elf::FileHeader32<Endianness>, _>(&file, path),
        FileKind::Elf64 => needed_in::<elf::FileHeader64<Endianness>, _>(&file, path),
        _ => None,
    }
}

/// `needed_of` for one ELF class. It follows the program headers, as the
/// dynamic loader does (section headers may be stripped): `PT_DYNAMIC`'s
/// entries, and the string table `DT_STRTAB` points at, an address
/// turned into a file offset through the `PT_LOAD` segment holding it.
fn needed_in<'data, Elf, R>(data: R, path: &Path) -> Option<Needed>
where
    Elf: FileHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    let header = Elf::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let segments = header.program_headers(endian, data).ok()?;
    let dynamic = segments
        .iter()
        .find_map(|s| s.dynamic(endian, data).transpose())?
        .ok()?;
    let (mut needed, mut paths) = (Vec::new(), Vec::new());
    let (mut strtab, mut strsz) = (None, None);
    for entry in dynamic {
        let (tag, val) = (entry.tag(endian), entry.val(endian));
        match tag {
            elf::DT_NULL => break,
            elf::DT_NEEDED => needed.push(val),
            elf::DT_STRTAB => strtab = Some(val),
            elf::DT_STRSZ => strsz = Some(val),
            elf::DT_RPATH | elf::DT_RUNPATH => paths.push(val),
            _ => {}
        }
    }
    let (strtab, strsz) = (strtab?, strsz?);
    let offset = segments.iter().find_map(|s| {
        let vaddr: u64 = s.p_vaddr(endian).into();
        let filesz: u64 = s.p_filesz(endian).into();
        let inside = s.p_type(endian) == elf::PT_LOAD && vaddr <= strtab && strtab - vaddr < filesz;
        inside.then(|| (strtab - vaddr).checked_add(s.p_offset(endian).into()))?
    })?;
    let strings = StringTable::new(data, offset, offset.checked_add(strsz)?);
    let string = |i: u64| -> Option<String> {
        let bytes = strings.get(u32::try_from(i).ok()?).ok()?;
        Some(String::from_utf8_lossy(bytes).into_owned())
    };
    let origin = path.parent().unwrap_or(Path::new("/")).to_string_lossy();
    let runpath = paths
        .into_iter()
        .filter_map(string)
        .flat_map(|p| {
            p.split(':')
                .map(|d| {
                    let d = d.replace("${ORIGIN}", &origin);
                    PathBuf::from(d.replace("$ORIGIN", &origin))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    Some(Needed {
        kind: (header.is_class_64(), header.e_machine(endian)),
        libs: needed.into_iter().filter_map(string).collect(),
        runpath,
    })
}

/// The library `name` as the dynamic loader would find it for `of`, near
/// enough: the first of that ELF kind in the run path, `LD_LIBRARY_PATH`,
/// then the usual system directories; what it needs in turn.
fn find_library(name: &str, of: &Needed) -> Option<Needed> {
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
    of.runpath
        .iter()
        .cloned()
        .chain(env)
        .chain(system.iter().map(PathBuf::from))
        .map(|d| d.join(OsStr::new(name)))
        .filter(|f| f.is_file())
        .filter_map(|f| needed_of(&f))
        .find(|lib| lib.kind == of.kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn program(path: &Path) -> Program<'_> {
        Program { path, env: &[] }
    }

    /// A fresh directory of this test's own, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let dir =
                std::env::temp_dir().join(format!("rivet-pmix-need-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// tests/c/mpi_hello.c compiled by `compiler` into `out` with `flags`.
    fn compile(compiler: &str, packages: &str, out: &Path, flags: &[&str]) {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/c/mpi_hello.c");
        let status = Command::new(compiler)
            .args(flags)
            .arg("-o")
            .arg(out)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| {
                panic!("cannot run {compiler} ({e}); install it: apt-get install {packages}")
            });
        assert!(status.success(), "{compiler} failed on {}", src.display());
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
        assert!(needed.kind.0, "{needed:?}");
        assert!(may_want_pmix(&[program(&me)]));
    }

    /// Scripts, missing files, plain text and ELF files cut short are not
    /// known to be MPICH's: they get the server.
    #[test]
    fn unknown_programs_get_the_server() {
        let dir = TempDir::new("unknown");
        let script = dir.0.join("job.sh");
        std::fs::write(&script, "#!/bin/sh\nexec ./a.out\n").unwrap();
        assert!(needed_of(&script).is_none());
        assert!(may_want_pmix(&[program(&script)]));
        assert!(may_want_pmix(&[program(&dir.0.join("missing"))]));
        assert!(may_want_pmix(&[]));
        // A real ELF header whose program headers and dynamic segment are cut off.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        for len in [16, 64, 200, 4096] {
            let cut = dir.0.join(format!("cut-{len}"));
            std::fs::write(&cut, &me[..len]).unwrap();
            assert!(needed_of(&cut).is_none(), "{len} bytes read as ELF");
            assert!(may_want_pmix(&[program(&cut)]));
        }
        // ELF magic, then garbage.
        let garbage = dir.0.join("garbage");
        let mut bytes = b"\x7fELF\x02\x01\x01".to_vec();
        bytes.resize(512, 0xff);
        std::fs::write(&garbage, &bytes).unwrap();
        assert!(needed_of(&garbage).is_none());
        assert!(may_want_pmix(&[program(&garbage)]));
    }

    /// An MPICH hello compiled here needs no PMIx server, unless its ranks
    /// are told RIVET_PMI=pmix; its run path is read with `$ORIGIN`
    /// expanded; an Open MPI hello (libmpi, which speaks PMIx) gets the server.
    #[test]
    fn mpich_programs_need_no_server_open_mpi_ones_do() {
        let dir = TempDir::new("hello");
        let mpich = dir.0.join("hello.mpich");
        compile(
            "mpicc.mpich",
            "mpich libmpich-dev",
            &mpich,
            &["-Wl,-rpath,$ORIGIN/lib"],
        );
        let needed = needed_of(&mpich).expect("an MPICH program is a dynamic ELF");
        assert!(
            needed.libs.iter().any(|l| l.starts_with("libmpich.so")),
            "{needed:?}"
        );
        assert!(needed.runpath.contains(&dir.0.join("lib")), "{needed:?}");
        let name = needed.libs.iter().find(|l| l.starts_with("libmpich.so"));
        let lib = find_library(name.unwrap(), &needed).expect("libmpich is installed");
        assert_eq!(lib.kind, needed.kind);
        assert!(
            !lib.libs.iter().any(|l| l.starts_with("libpmix")),
            "{lib:?}"
        );
        assert!(!may_want_pmix(&[program(&mpich)]));
        let env = [(OsString::from("RIVET_PMI"), OsString::from("pmix"))];
        let told = Program {
            path: &mpich,
            env: &env,
        };
        assert!(may_want_pmix(&[told]));

        let openmpi = dir.0.join("hello.openmpi");
        compile("mpicc.openmpi", "openmpi-bin libopenmpi-dev", &openmpi, &[]);
        let needed = needed_of(&openmpi).expect("an Open MPI program is a dynamic ELF");
        assert!(
            !needed.libs.iter().any(|l| l.starts_with("libmpich.so")),
            "{needed:?}"
        );
        assert!(may_want_pmix(&[program(&openmpi)]));
        // Any program that may want it is enough.
        assert!(may_want_pmix(&[program(&mpich), program(&openmpi)]));
        let me = std::env::current_exe().unwrap();
        assert!(may_want_pmix(&[program(&mpich), program(&me)]));
    }
}
