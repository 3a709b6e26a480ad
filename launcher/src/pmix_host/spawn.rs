//! The PMIx server's `spawn` upcall, mapped onto rivetrun's spawn (the
//! PMI-1 `spawn` command's planning and starting, `spawn.rs` and the
//! supervisor).
//!
//! The upcall copies the applications into a PMI-1 [`SpawnRequest`] (a
//! command per application: program, arguments, count, and its working
//! directory as the `wdir` info key) and hands it to the supervisor, which
//! registers the new namespace with the PMIx server before starting the
//! children, so they are served PMIx as the job's ranks are, and calls back
//! with the namespace's name.
//!
//! Each app's environment additions go to its processes (Open MPI passes
//! the parent's port there, Rivet's client its pre-puts). Of an app's info,
//! `PMIX_HOST` becomes the `host` key and `PMIX_WDIR` the `wdir` one (where
//! the app names no `cwd`). Not mapped: the job-level directives (mapping,
//! binding) and the apps' other info.
//!
//! The same upcall serves a proxy's node server: there the proxy's main
//! thread starts the children on its own host (`proxy/spawn.rs`). Both
//! give the children their environment with [`child_envs`].

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use rivet_pmi::pmix_ffi::{
    PmixApp, PmixInfo, PmixProc, PMIX_ERR_BAD_PARAM, PMIX_ERR_JOB_APP_NOT_EXECUTABLE,
    PMIX_ERR_JOB_EXE_NOT_FOUND, PMIX_ERR_JOB_FAILED_TO_LAUNCH, PMIX_ERR_NOT_SUPPORTED, PMIX_STRING,
    PMIX_SUCCESS,
};
use rivet_pmi::server::SpawnFailure;
use rivet_pmi::wire::{SpawnCommand, SpawnRequest};

use super::{push_event, PmixEvent, PmixHost};

/// The environment additions of each process of spawned job `kvsname`
/// (`app_sizes` processes per command, in rank order): where `host`
/// serves PMIx, the job is registered with it first (spawned by `parent`,
/// as (namespace, rank)) and each process gets what setup-fork gives;
/// then each command's own additions (`command_env`, a PMIx app's env).
/// A registration that fails leaves the children PMI only, with a warning.
pub fn child_envs(
    host: Option<&PmixHost>,
    kvsname: &str,
    app_sizes: &[u32],
    parent: (&str, u32),
    command_env: &[Vec<(String, String)>],
) -> Vec<Vec<(String, String)>> {
    let total: u32 = app_sizes.iter().sum();
    let mut envs: Vec<Vec<(String, String)>> = match host {
        Some(host) => match host.register_spawned(kvsname, app_sizes, parent) {
            Ok(()) => (0..total)
                .map(|i| host.fork_env_in(kvsname, i).unwrap_or_default())
                .collect(),
            Err(why) => {
                eprintln!("rivetrun: warning: {kvsname} gets no PMIx: {why}");
                Vec::new()
            }
        },
        None => Vec::new(),
    };
    // Each command's own additions, after PMIx's.
    if !command_env.is_empty() {
        envs.resize(total as usize, Vec::new());
        let mut index = 0;
        for (&n, extra) in app_sizes.iter().zip(command_env) {
            for _ in 0..n {
                envs[index].extend(extra.iter().cloned());
                index += 1;
            }
        }
    }
    envs
}

/// `pmix_spawn_cbfunc_t`.
type SpawnCb = unsafe extern "C" fn(c_int, *const c_char, *mut c_void);
pub(super) type SpawnUp = unsafe extern "C" fn(
    *const PmixProc,
    *const PmixInfo,
    usize,
    *const PmixApp,
    usize,
    Option<SpawnCb>,
    *mut c_void,
) -> c_int;

/// A spawn asked by rank `rank` of `nspace`, answered (once) by
/// [`SpawnCall::finish`].
pub struct SpawnCall {
    pub nspace: String,
    pub rank: u32,
    pub request: SpawnRequest,
    /// Each command's environment additions (`pmix_app_t.env`).
    pub env: Vec<Vec<(String, String)>>,
    cb: SpawnCb,
    cbdata: *mut c_void,
}

// SAFETY: `cbdata` is the library's token for this call, which it lets the
// host hand back from any thread; nothing here dereferences it.
unsafe impl Send for SpawnCall {}

impl std::fmt::Debug for SpawnCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SpawnCall {{ {}:{}, request: {:?} }}",
            self.nspace, self.rank, self.request
        )
    }
}

impl SpawnCall {
    /// Tell the caller: the new namespace, or why there is none.
    pub fn finish(self, result: Result<String, c_int>) {
        let (status, ns) = match result {
            Ok(ns) => (
                PMIX_SUCCESS,
                CString::new(ns.replace('\0', "")).expect("NULs removed"),
            ),
            Err(status) => (status, CString::default()),
        };
        // SAFETY: the library's callback with its own cbdata, called once;
        // the name lives through the call (the library copies it).
        unsafe { (self.cb)(status, ns.as_ptr(), self.cbdata) };
    }
}

/// The PMIx status telling a spawner why rivetrun started nothing: a
/// missing program (error code 127, as a shell says), one that is not
/// executable (126), or another reason.
pub fn status_of(failure: &SpawnFailure) -> c_int {
    if failure.errcodes.contains(&127) {
        PMIX_ERR_JOB_EXE_NOT_FOUND
    } else if failure.errcodes.contains(&126) {
        PMIX_ERR_JOB_APP_NOT_EXECUTABLE
    } else {
        PMIX_ERR_JOB_FAILED_TO_LAUNCH
    }
}

fn string(p: *const c_char) -> Option<String> {
    // SAFETY: null or a NUL-terminated string of the caller's.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// A NULL-terminated array's strings (empty for null).
fn strings(p: *const *const c_char) -> Vec<String> {
    let mut out = Vec::new();
    if p.is_null() {
        return out;
    }
    for i in 0.. {
        // SAFETY: NULL-terminated: every index up to the terminator is valid.
        let s = unsafe { *p.add(i) };
        match string(s) {
            Some(s) => out.push(s),
            None => break,
        }
    }
    out
}

/// Each app's `NAME=VALUE` environment additions.
fn envs(apps: &[PmixApp]) -> Vec<Vec<(String, String)>> {
    apps.iter()
        .map(|app| {
            strings(app.env)
                .iter()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// An app's info entries holding strings, as (key, value).
fn app_info(app: &PmixApp) -> Vec<(String, String)> {
    if app.info.is_null() {
        return Vec::new();
    }
    // SAFETY: the library passes `ninfo` valid infos with the app.
    let infos = unsafe { std::slice::from_raw_parts(app.info, app.ninfo) };
    infos
        .iter()
        .filter(|i| i.value.ty == PMIX_STRING && i.value.data[0] != 0)
        .filter_map(|i| {
            let key = string(i.key.as_ptr())?;
            // SAFETY: a PMIX_STRING value holds a NUL-terminated char* first.
            let value = string(i.value.data[0] as *const c_char)?;
            Some((key, value))
        })
        .collect()
}

/// The PMI-1 request for `apps`, or why there is none.
fn request(apps: &[PmixApp]) -> Result<SpawnRequest, c_int> {
    let mut commands = Vec::new();
    for app in apps {
        let execname = string(app.cmd).ok_or(PMIX_ERR_BAD_PARAM)?;
        let nprocs = u32::try_from(app.maxprocs).map_err(|_| PMIX_ERR_BAD_PARAM)?;
        // argv[0] is the program's own name; the request carries the rest.
        let args = strings(app.argv).into_iter().skip(1).collect();
        let mut info: Vec<(String, String)> = string(app.cwd)
            .map(|wdir| vec![("wdir".to_string(), wdir)])
            .unwrap_or_default();
        for (key, value) in app_info(app) {
            match key.as_str() {
                "pmix.host" => info.push(("host".into(), value)),
                "pmix.wdir" if app.cwd.is_null() => info.push(("wdir".into(), value)),
                _ => {}
            }
        }
        commands.push(SpawnCommand {
            execname,
            nprocs,
            args,
            info,
        });
    }
    if commands.is_empty() {
        return Err(PMIX_ERR_BAD_PARAM);
    }
    Ok(SpawnRequest {
        commands,
        preput: Vec::new(),
    })
}

pub(super) unsafe extern "C" fn on_spawn(
    proc: *const PmixProc,
    _job_info: *const PmixInfo,
    _ninfo: usize,
    apps: *const PmixApp,
    napps: usize,
    cb: Option<SpawnCb>,
    cbdata: *mut c_void,
) -> c_int {
    let Some(cb) = cb else {
        return PMIX_ERR_BAD_PARAM;
    };
    if proc.is_null() || apps.is_null() {
        return PMIX_ERR_BAD_PARAM;
    }
    // SAFETY: the library passes `napps` valid apps.
    let apps = unsafe { std::slice::from_raw_parts(apps, napps) };
    let request = match request(apps) {
        Ok(r) => r,
        Err(status) => return status,
    };
    // SAFETY: non-null: the caller's proc, valid for the upcall.
    let (nspace, rank) = unsafe { ((*proc).nspace(), (*proc).rank) };
    let call = SpawnCall {
        nspace,
        rank,
        request,
        env: envs(apps),
        cb,
        cbdata,
    };
    match push_event(PmixEvent::Spawn(call)) {
        Ok(()) => PMIX_SUCCESS,
        Err(_) => PMIX_ERR_NOT_SUPPORTED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_app_becomes_a_pmi1_spawn_command() {
        let cmd = c"./child";
        let (a0, a1) = (c"child", c"--flag");
        let argv = [a0.as_ptr(), a1.as_ptr(), std::ptr::null()];
        let cwd = c"/tmp";
        let app = PmixApp {
            cmd: cmd.as_ptr(),
            argv: argv.as_ptr(),
            env: std::ptr::null(),
            cwd: cwd.as_ptr(),
            maxprocs: 3,
            info: std::ptr::null(),
            ninfo: 0,
        };
        let r = request(std::slice::from_ref(&app)).unwrap();
        assert_eq!(
            r.commands,
            vec![SpawnCommand {
                execname: "./child".into(),
                nprocs: 3,
                args: vec!["--flag".into()],
                info: vec![("wdir".into(), "/tmp".into())],
            }]
        );
        let mut host = PmixInfo::flag(c"pmix.host", false);
        host.value.ty = PMIX_STRING;
        host.value.data[0] = c"localhost".as_ptr() as u64;
        let mut wdir = PmixInfo::flag(c"pmix.wdir", false);
        wdir.value.ty = PMIX_STRING;
        wdir.value.data[0] = c"/var".as_ptr() as u64;
        let infos = [host, wdir, PmixInfo::flag(c"pmix.other", true)];
        let with_info = PmixApp {
            cwd: std::ptr::null(),
            info: infos.as_ptr(),
            ninfo: infos.len(),
            ..app
        };
        assert_eq!(
            request(std::slice::from_ref(&with_info)).unwrap().commands[0].info,
            vec![
                ("host".to_string(), "localhost".to_string()),
                ("wdir".to_string(), "/var".to_string())
            ]
        );
        let bad = PmixApp {
            maxprocs: -1,
            ..app
        };
        assert_eq!(request(std::slice::from_ref(&bad)), Err(PMIX_ERR_BAD_PARAM));
        assert_eq!(request(&[]), Err(PMIX_ERR_BAD_PARAM));
    }
}
