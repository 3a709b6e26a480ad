//! mpiexec spellings made fit for clap: single-dash long options rewritten
//! up to the program name, and clap's errors reported as the user typed them.

use std::ffi::OsString;

/// Options mpiexec spells with one dash that clap wants with two.
const SINGLE_DASH_LONG: &[&str] = &[
    "np",
    "env",
    "genv",
    "genvlist",
    "genvnone",
    "genvall",
    "wdir",
    "ppn",
    "bind-to",
    "map-by",
    "info",
    "nameserver",
    "port",
    "hosts",
    "host",
    "hostfile",
    "machinefile",
    "launcher",
    "launcher-exec",
    "bootstrap",
    "bootstrap-exec",
    "iface",
    "auth",
    "impi-server",
    "impi-client",
];

/// Options that take values, so `normalize` can find where the program starts.
const TAKES_TWO_VALUES: &[&str] = &["--env", "--genv", "--impi-client"];
const TAKES_ONE_VALUE: &[&str] = &[
    "-n",
    "--np",
    "--genvlist",
    "--wdir",
    "--ppn",
    "--bind-to",
    "--map-by",
    "--cpu-list",
    "--topology",
    "--mesh-dims",
    "--kill-grace",
    "--timeout",
    "--configfile",
    "--outfile-pattern",
    "--errfile-pattern",
    "--nameserver",
    "--port",
    "--cluster-id",
    "--hosts",
    "--host",
    "-f",
    "--hostfile",
    "--machinefile",
    "--launcher",
    "--launcher-exec",
    "--bootstrap",
    "--bootstrap-exec",
    "--iface",
    "--proxy",
    "--proxy-id",
    "--auth",
    "--impi-server",
];

/// Leave on a clap error (help and version too, exit 0). An unknown option
/// exits 2 naming it as it was typed: `-bogus`, not the `--bogus` that
/// `normalize` made of it.
pub(super) fn exit_on(e: clap::Error, original: &[OsString]) -> ! {
    if let Some(name) = unknown_option(&e, original) {
        eprintln!("rivetrun: unknown option '{name}' (see rivetrun --help)");
        std::process::exit(2);
    }
    e.exit()
}

/// The unknown option clap complains of, spelled as the user typed it.
pub(super) fn unknown_option(e: &clap::Error, original: &[OsString]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let name = arg.split('=').next().unwrap_or(arg);
    let single = name.strip_prefix('-').filter(|s| s.starts_with('-'));
    let typed = single.filter(|s| {
        original
            .iter()
            .any(|o| o.to_string_lossy().split('=').next() == Some(*s))
    });
    Some(typed.unwrap_or(name).to_string())
}

/// Rewrite mpiexec's single-dash long options (`-np`, `-genv`, ...) as `--np`,
/// `--genv`, up to the first argument that is the program, and put `--` in
/// front of the program so that nothing after it is taken as rivetrun's.
pub(super) fn normalize<I: IntoIterator<Item = OsString>>(args: I) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut iter = args.into_iter();
    if let Some(argv0) = iter.next() {
        out.push(argv0);
    }
    let mut pending_values = 0usize;
    let mut in_program = false;
    for arg in iter {
        if in_program {
            out.push(arg);
            continue;
        }
        if pending_values > 0 {
            pending_values -= 1;
            out.push(arg);
            continue;
        }
        let text = arg.to_string_lossy().into_owned();
        if text == "--" {
            in_program = true;
            out.push(arg);
            continue;
        }
        let (name, has_inline_value) = match text.split_once('=') {
            Some((name, _)) => (name.to_string(), true),
            None => (text.clone(), false),
        };
        let rewritten = match name.strip_prefix('-') {
            Some(rest) if !rest.starts_with('-') && SINGLE_DASH_LONG.contains(&rest) => {
                format!("-{text}")
            }
            // Any other single-dash word is a long option too (mpiexec's
            // style), not a cluster of short flags: `-hosts` must not be
            // read as `-h -o -s ...` (help, exit 0). `-n4` stays `-n 4`.
            Some(rest) if rest.len() > 1 && !rest.starts_with('-') && !short_with_value(rest) => {
                format!("-{text}")
            }
            _ => text.clone(),
        };
        let flag = rewritten.split('=').next().unwrap_or_default();
        if !rewritten.starts_with('-') {
            // The program starts here: mark it, so clap treats the rest as its arguments.
            in_program = true;
            out.push(OsString::from("--"));
        } else if !has_inline_value {
            if TAKES_TWO_VALUES.contains(&flag) {
                pending_values = 2;
            } else if TAKES_ONE_VALUE.contains(&flag) {
                pending_values = 1;
            }
        }
        if rewritten == text {
            out.push(arg);
        } else {
            out.push(OsString::from(rewritten));
        }
    }
    out
}

/// `n4`: the short option `-n` with its value attached.
fn short_with_value(rest: &str) -> bool {
    rest.strip_prefix('n')
        .is_some_and(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
}
