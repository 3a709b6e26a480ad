//! `include/rivet.h` is what cbindgen makes of this crate now, and it is
//! strict C99 and C++.

use std::path::PathBuf;
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn generated() -> String {
    let dir = crate_dir();
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(&dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not read capi/src");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("UTF-8 header")
}

#[test]
fn header_is_generated_from_the_exports() {
    let fresh = generated();
    let path = crate_dir().join("include/rivet.h");
    if std::env::var_os("RIVET_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write include/rivet.h");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/rivet.h is stale: regenerate it with \
         `RIVET_BLESS=1 cargo test -p rivet-capi header` and commit it"
    );
}

fn compile(compiler: &str, args: &[&str], source: &str, ext: &str) {
    let dir = std::env::temp_dir().join(format!("rivet-h-{}-{ext}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("use.{ext}"));
    std::fs::write(&file, source).unwrap();
    let include = crate_dir().join("include");
    let out = Command::new(compiler)
        .args(args)
        .arg(format!("-I{}", include.display()))
        .args(["-fsyntax-only"])
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{compiler} {args:?} rejects rivet.h:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Uses a few declarations, so that a header that parses but declares
/// nothing fails.
const USE: &str = r#"
#include <rivet.h>
int use_it(void);
int use_it(void) {
    rivet_engine_t *e = 0;
    rivet_comm_t *w = 0;
    rivet_request_t r = RIVET_REQUEST_NULL;
    rivet_status_t s;
    int provided = 0;
    if (rivet_init(RIVET_API_VERSION, RIVET_THREAD_SINGLE, &e, &provided) != RIVET_SUCCESS)
        return 1;
    rivet_comm_world(e, &w);
    rivet_irecv(w, 0, 0, RIVET_ANY_SOURCE, RIVET_ANY_TAG, &r);
    rivet_wait(e, &r, &s);
    rivet_comm_free(w);
    return rivet_finalize(e) + (int)s.count + (rivet_strerror(RIVET_ERR_PANIC) == 0);
}
"#;

#[test]
fn header_is_strict_c99() {
    compile(
        "cc",
        &["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"],
        USE,
        "c",
    );
}

#[test]
fn header_is_strict_cxx() {
    compile(
        "c++",
        &["-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic"],
        USE,
        "cc",
    );
}
