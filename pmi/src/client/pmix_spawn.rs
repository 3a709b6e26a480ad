//! PMI-1's `spawn` mapped onto `PMIx_Spawn`, and what a child started
//! that way learns of it.
//!
//! Each command becomes one `pmix_app_t`: program, `argv` (its own name
//! first), count, and from its info keys `wdir` (the app's `cwd`), `path`
//! (directories to look the program up in, here, before asking) and
//! `host` (`PMIX_HOST`); a key starting with `pmix.` goes to the app's
//! info as a string; others are ignored, as a PMI-1 server may.
//!
//! PMIx has no twin of PMI-1's pre-put (keys the children find in their
//! own KVS), and a server need not pass job info on. What every server
//! tried passes on is each app's environment (rivetrun's PMIx server,
//! Open MPI 4.1's `mpirun`), so the children get three variables there:
//! `PMI_SPAWNED=1` (as Hydra and rivetrun set it for PMI-1 children),
//! `RIVET_PMI=pmix` (they bootstrap as their parent did), and
//! [`PREPUT_ENV`] holding the pre-put pairs, which their client then
//! answers gets of its own KVS from (`Pmix::get`).

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CString};
use std::path::Path;

use super::pmix::Pmix;
use crate::error::{Error, Result};
use crate::pmix_ffi::{load_key, PmixApp, PmixInfo, PmixValue, PMIX_STRING, PMIX_SUCCESS};
use crate::wire::{SpawnCommand, SpawnRequest};

/// `PMIx_Spawn(job_info, ninfo, apps, napps, nspace)`; `nspace` is a
/// `pmix_nspace_t` (256 bytes) the library fills.
pub(super) type SpawnFn =
    unsafe extern "C" fn(*const PmixInfo, usize, *const PmixApp, usize, *mut c_char) -> c_int;

/// The variable carrying a PMIx spawn's pre-put pairs to the children.
pub const PREPUT_ENV: &str = "RIVET_PMIX_PREPUT";

/// Most bytes of encoded pre-puts (an environment string may be 128 KiB).
const PREPUT_MAX: usize = 64 << 10;

/// `key=value` pairs joined by `;`, with `\`, `;` and newlines escaped, so
/// the variable is one line whatever the values hold.
pub(super) fn encode_preput(pairs: &[(String, String)]) -> Result<String> {
    let mut out = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if k.is_empty() || k.contains('=') {
            return Err(Error::Malformed {
                reason: format!("pre-put key {k:?} is empty or holds '='"),
            });
        }
        if i > 0 {
            out.push(';');
        }
        for c in k.chars().chain(std::iter::once('=')).chain(v.chars()) {
            match c {
                '\\' => out.push_str("\\\\"),
                ';' => out.push_str("\\s"),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
    }
    if out.len() > PREPUT_MAX {
        return Err(Error::TooLong {
            what: "pre-put values of a PMIx spawn",
            len: out.len(),
            max: PREPUT_MAX,
        });
    }
    Ok(out)
}

/// The pairs [`encode_preput`] wrote; anything else yields what parses.
pub(super) fn decode_preput(text: &str) -> HashMap<String, String> {
    let mut entries = vec![String::new()];
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        let last = entries.last_mut().expect("never empty");
        match c {
            ';' => entries.push(String::new()),
            '\\' => match chars.next() {
                Some('s') => last.push(';'),
                Some('n') => last.push('\n'),
                Some(other) => last.push(other),
                None => last.push('\\'),
            },
            c => last.push(c),
        }
    }
    entries
        .iter()
        .filter_map(|e| e.split_once('='))
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The program to ask for: a bare name found in one of `path`'s
/// directories (`:`-separated) becomes that file's path.
fn resolve(program: &str, path: Option<&str>) -> String {
    let Some(path) = path.filter(|_| !program.contains('/')) else {
        return program.to_string();
    };
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
        .map_or_else(|| program.to_string(), |p| p.to_string_lossy().into_owned())
}

/// One app's strings, owned while the `pmix_app_t` points into them.
struct AppStrings {
    cmd: CString,
    argv: Vec<CString>,
    env: Vec<CString>,
    cwd: Option<CString>,
    /// (key, value) of each info entry.
    info: Vec<(Vec<u8>, CString)>,
}

fn cstring(what: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::Malformed {
        reason: format!("{what} {s:?} holds a NUL byte"),
    })
}

impl AppStrings {
    fn new(command: &SpawnCommand, env: &[CString]) -> Result<AppStrings> {
        let info = |key: &str| {
            (command.info.iter().rev())
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let program = resolve(&command.execname, info("path"));
        let mut argv = vec![cstring("program", &program)?];
        for a in &command.args {
            argv.push(cstring("argument", a)?);
        }
        let mut extra = Vec::new();
        if let Some(host) = info("host") {
            extra.push((b"pmix.host".to_vec(), cstring("host", host)?));
        }
        for (k, v) in command.info.iter().filter(|(k, _)| k.starts_with("pmix.")) {
            extra.push((k.as_bytes().to_vec(), cstring(k, v)?));
        }
        Ok(AppStrings {
            cmd: cstring("program", &program)?,
            argv,
            env: env.to_vec(),
            cwd: info("wdir").map(|w| cstring("wdir", w)).transpose()?,
            info: extra,
        })
    }
}

/// The `PMIx_Spawn` arguments for `request`, owning every string and
/// array they point to; `apps()` borrows them.
pub(super) struct Apps {
    strings: Vec<AppStrings>,
    /// NULL-terminated pointer arrays (argv, env) and info arrays per app.
    argvs: Vec<Vec<*const c_char>>,
    envs: Vec<Vec<*const c_char>>,
    infos: Vec<Vec<PmixInfo>>,
    counts: Vec<c_int>,
}

impl Apps {
    pub(super) fn new(request: &SpawnRequest) -> Result<Apps> {
        if request.commands.is_empty() {
            return Err(Error::Malformed {
                reason: "a spawn needs at least one command".into(),
            });
        }
        let mut env = vec![
            cstring("variable", "PMI_SPAWNED=1")?,
            cstring("variable", "RIVET_PMI=pmix")?,
        ];
        if !request.preput.is_empty() {
            let preput = encode_preput(&request.preput)?;
            env.push(cstring("pre-put", &format!("{PREPUT_ENV}={preput}"))?);
        }
        let mut counts = Vec::new();
        let mut strings = Vec::new();
        for c in &request.commands {
            counts.push(c_int::try_from(c.nprocs).map_err(|_| Error::Malformed {
                reason: format!("{} processes of {} is too many", c.nprocs, c.execname),
            })?);
            strings.push(AppStrings::new(c, &env)?);
        }
        let nul_terminated = |v: &[CString]| -> Vec<*const c_char> {
            v.iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        };
        let argvs = strings.iter().map(|s| nul_terminated(&s.argv)).collect();
        let envs = strings.iter().map(|s| nul_terminated(&s.env)).collect();
        let infos = (strings.iter())
            .map(|s| {
                (s.info.iter())
                    .map(|(k, v)| {
                        let mut info = PmixInfo::flag(c"", false);
                        load_key(&mut info.key, k);
                        info.value = PmixValue {
                            ty: PMIX_STRING,
                            _pad: [0; 6],
                            data: [v.as_ptr() as u64, 0, 0],
                        };
                        info
                    })
                    .collect()
            })
            .collect();
        Ok(Apps {
            strings,
            argvs,
            envs,
            infos,
            counts,
        })
    }

    /// The `pmix_app_t`s, valid while `self` is (and unmoved: they point
    /// into its heap buffers, which moving `self` does not move).
    pub(super) fn apps(&self) -> Vec<PmixApp> {
        (0..self.strings.len())
            .map(|i| PmixApp {
                cmd: self.strings[i].cmd.as_ptr(),
                argv: self.argvs[i].as_ptr(),
                env: self.envs[i].as_ptr(),
                cwd: self.strings[i]
                    .cwd
                    .as_ref()
                    .map_or(std::ptr::null(), |c| c.as_ptr()),
                maxprocs: self.counts[i],
                info: if self.infos[i].is_empty() {
                    std::ptr::null()
                } else {
                    self.infos[i].as_ptr()
                },
                ninfo: self.infos[i].len(),
            })
            .collect()
    }
}

impl Pmix {
    /// Start `request`'s processes through `PMIx_Spawn`: one code per
    /// process (all 0) and the children's namespace, or
    /// [`Error::SpawnFailed`] with the server's status for each process.
    pub fn spawn(&self, request: &SpawnRequest) -> Result<(Vec<i32>, String)> {
        let total = usize::try_from(request.total_procs()).unwrap_or(usize::MAX);
        let spawn = self.spawn_fn()?;
        let owned = Apps::new(request)?;
        let apps = owned.apps();
        let mut nspace: [c_char; 256] = [0; 256];
        // SAFETY: `apps.len()` valid apps whose strings and arrays `owned`
        // keeps alive through the call (the library copies them); no job
        // info; `nspace` has the 256 bytes a pmix_nspace_t holds.
        let rc = unsafe {
            spawn(
                std::ptr::null(),
                0,
                apps.as_ptr(),
                apps.len(),
                nspace.as_mut_ptr(),
            )
        };
        if rc != PMIX_SUCCESS {
            let programs: Vec<&str> = request
                .commands
                .iter()
                .map(|c| c.execname.as_str())
                .collect();
            return Err(Error::SpawnFailed {
                errcodes: vec![rc; total],
                message: format!(
                    "PMIx_Spawn of {} failed: {}",
                    programs.join(", "),
                    self.describe(rc)
                ),
            });
        }
        nspace[255] = 0;
        let name = crate::pmix_ffi::PmixProc { nspace, rank: 0 }.nspace();
        Ok((vec![0; total], name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn pre_puts_survive_the_variable_whatever_they_hold() {
        let pairs: Vec<(String, String)> = [
            ("PARENT_ROOT_PORT_NAME", "tag#1$desc#a;b=c\\d\ne"),
            ("empty", ""),
            ("k2", ";;\\\\"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let text = encode_preput(&pairs).unwrap();
        assert!(!text.contains('\n'));
        let back = decode_preput(&text);
        assert_eq!(back.len(), 3);
        for (k, v) in &pairs {
            assert_eq!(back.get(k), Some(v), "{k}");
        }
        assert!(encode_preput(&[("a=b".into(), "v".into())]).is_err());
        assert!(encode_preput(&[("k".into(), "x".repeat(PREPUT_MAX))]).is_err());
        assert!(decode_preput("").is_empty());
    }

    #[test]
    fn commands_become_apps_with_the_childrens_environment() {
        let request = SpawnRequest {
            commands: vec![
                SpawnCommand {
                    execname: "sh".into(),
                    nprocs: 2,
                    args: vec!["-c".into(), "true".into()],
                    info: vec![
                        ("wdir".into(), "/tmp".into()),
                        ("path".into(), "/nonexistent:/bin".into()),
                        ("host".into(), "localhost".into()),
                        ("pmix.mapby".into(), "slot".into()),
                        ("ignored".into(), "x".into()),
                    ],
                },
                SpawnCommand {
                    execname: "./child".into(),
                    nprocs: 1,
                    args: vec![],
                    info: vec![],
                },
            ],
            preput: vec![("PARENT_ROOT_PORT_NAME".into(), "port".into())],
        };
        let owned = Apps::new(&request).unwrap();
        let apps = owned.apps();
        assert_eq!(apps.len(), 2);
        // SAFETY: every string here is one of `owned`'s, NUL-terminated.
        let s = |p: *const c_char| unsafe { CStr::from_ptr(p) }.to_str().unwrap();
        let list = |p: *const *const c_char| {
            let mut out = Vec::new();
            // SAFETY: NULL-terminated arrays built by `Apps::new`.
            unsafe {
                let mut i = 0;
                while !(*p.add(i)).is_null() {
                    out.push(s(*p.add(i)).to_string());
                    i += 1;
                }
            }
            out
        };
        // `path` found the program in /bin; argv[0] is the program.
        assert_eq!(s(apps[0].cmd), "/bin/sh");
        assert_eq!(list(apps[0].argv), ["/bin/sh", "-c", "true"]);
        assert_eq!(s(apps[0].cwd), "/tmp");
        assert_eq!(apps[0].maxprocs, 2);
        assert_eq!(apps[0].ninfo, 2);
        // SAFETY: two infos built by `Apps::new`.
        let infos = unsafe { std::slice::from_raw_parts(apps[0].info, 2) };
        let key = |i: &PmixInfo| s(i.key.as_ptr()).to_string();
        assert_eq!(key(&infos[0]), "pmix.host");
        assert_eq!(s(infos[0].value.data[0] as *const c_char), "localhost");
        assert_eq!(key(&infos[1]), "pmix.mapby");
        assert_eq!(s(apps[1].cmd), "./child");
        assert!(apps[1].cwd.is_null() && apps[1].info.is_null());
        for app in &apps {
            let env = list(app.env);
            assert_eq!(env[..2], ["PMI_SPAWNED=1", "RIVET_PMI=pmix"]);
            let preput = env[2].strip_prefix("RIVET_PMIX_PREPUT=").unwrap();
            assert_eq!(decode_preput(preput)["PARENT_ROOT_PORT_NAME"], "port");
        }
        assert!(Apps::new(&SpawnRequest::default()).is_err());
    }
}
