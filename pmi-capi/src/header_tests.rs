//! `include/pmi.h` against the Rust exports.
//!
//! [`SIGNATURES`] lists every export with its Rust type, cast to a function
//! pointer (a wrong argument count or type does not compile). From those
//! types the test spells each C prototype and checks it against the header
//! with the C compiler: redeclaring a function with a conflicting type is an
//! error in C, and C++ compares the types exactly (`std::is_same`). The
//! names in the header and in the table must be the same set; the
//! integration tests check that the built library exports exactly these.

use std::ffi::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::group::*;
use crate::kvs::*;
use crate::spawn::*;
use crate::topo::*;
use crate::unsupported::*;

/// A Rust FFI type's C spelling, as an abstract declarator.
trait CType {
    fn c() -> String;
}

impl CType for c_int {
    fn c() -> String {
        "int".into()
    }
}

impl CType for c_char {
    fn c() -> String {
        "char".into()
    }
}

impl CType for c_void {
    fn c() -> String {
        "void".into()
    }
}

impl CType for PMI_keyval_t {
    fn c() -> String {
        "PMI_keyval_t".into()
    }
}

impl CType for Handler {
    fn c() -> String {
        "void *(*)(void *)".into()
    }
}

/// `*const T` is a pointer to const T, `*mut T` a pointer to T.
impl<T: CType> CType for *const T {
    fn c() -> String {
        format!("{} const *", T::c())
    }
}

impl<T: CType> CType for *mut T {
    fn c() -> String {
        format!("{} *", T::c())
    }
}

/// A function pointer type's C return type and parameter types.
trait CSig {
    fn ret() -> String;
    fn params() -> Vec<String>;
}

macro_rules! c_sig {
    ($($a:ident),*) => {
        impl<R: CType, $($a: CType),*> CSig for unsafe extern "C" fn($($a),*) -> R {
            fn ret() -> String {
                R::c()
            }
            fn params() -> Vec<String> {
                vec![$($a::c()),*]
            }
        }
    };
}

c_sig!();
c_sig!(A);
c_sig!(A, B);
c_sig!(A, B, C);
c_sig!(A, B, C, D);
c_sig!(A, B, C, D, E);
c_sig!(A, B, C, D, E, F, G, H, I);

fn sig_of<F: CSig>(_f: F) -> (String, Vec<String>) {
    (F::ret(), F::params())
}

/// (name, C return type, C parameter types) of one export.
type Sig = (&'static str, String, Vec<String>);

macro_rules! sig {
    ($f:ident($($u:tt),*)) => {{
        let (ret, params) = sig_of($f as unsafe extern "C" fn($($u),*) -> _);
        (stringify!($f), ret, params)
    }};
}

/// Every function librivet-pmi exports.
fn signatures() -> Vec<Sig> {
    vec![
        sig!(PMI_Init(_)),
        sig!(PMI_Initialized(_)),
        sig!(PMI_Finalize()),
        sig!(PMI_Get_size(_)),
        sig!(PMI_Get_rank(_)),
        sig!(PMI_Get_universe_size(_)),
        sig!(PMI_Get_appnum(_)),
        sig!(PMI_Barrier()),
        sig!(PMI_Abort(_, _)),
        sig!(PMI_Get_clique_size(_)),
        sig!(PMI_Get_clique_ranks(_, _)),
        sig!(PMI_Publish_name(_, _)),
        sig!(PMI_Unpublish_name(_)),
        sig!(PMI_Lookup_name(_, _)),
        sig!(PMI_KVS_Get_my_name(_, _)),
        sig!(PMI_KVS_Get_name_length_max(_)),
        sig!(PMI_KVS_Get_key_length_max(_)),
        sig!(PMI_KVS_Get_value_length_max(_)),
        sig!(PMI_KVS_Put(_, _, _)),
        sig!(PMI_KVS_Commit(_)),
        sig!(PMI_KVS_Get(_, _, _, _)),
        sig!(PMI_KVS_Create(_, _)),
        sig!(PMI_KVS_Destroy(_)),
        sig!(PMI_KVS_Iter_first(_, _, _, _, _)),
        sig!(PMI_KVS_Iter_next(_, _, _, _, _)),
        sig!(PMI_Spawn_multiple(_, _, _, _, _, _, _, _, _)),
        sig!(PMI_Resource_register(_, _, _, _, _)),
        sig!(PMI_Resource_release_begin(_, _)),
        sig!(PMI_Resource_release_end(_)),
        sig!(PMI_Topo_type(_, _)),
        sig!(PMI_Topo_cluster_info(_, _, _, _)),
        sig!(PMI_Topo_mesh_info(_, _, _)),
    ]
}

fn header() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include/pmi.h")
}

/// Names of the functions the header declares (`int PMI_...(` at a line start).
fn declared() -> Vec<String> {
    let text = std::fs::read_to_string(header()).expect("reading include/pmi.h");
    let mut names: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("int PMI_"))
        .filter_map(|rest| rest.split_once('('))
        .map(|(name, _)| format!("PMI_{name}"))
        .collect();
    names.sort();
    names
}

fn params(p: &[String]) -> String {
    if p.is_empty() {
        "void".into()
    } else {
        p.join(", ")
    }
}

/// Compile `source` (language `lang`: "c" or "c++") with `compiler` and the
/// given flags, against include/; panics with the compiler's output on failure.
fn compile(compiler: &str, lang: &str, flags: &[&str], source: &str, name: &str) {
    let dir = std::env::temp_dir().join(format!("rivet-pmi-header-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(name);
    std::fs::write(&src, source).unwrap();
    let out = Command::new(compiler)
        .args(["-x", lang])
        .args(flags)
        .arg("-I")
        .arg(header().parent().unwrap())
        .args(["-fsyntax-only"])
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{compiler} {flags:?} rejected the check:\n{}\n--- source ---\n{source}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_header_declares_exactly_the_exports() {
    let mut table: Vec<String> = signatures().iter().map(|s| s.0.to_string()).collect();
    table.sort();
    assert_eq!(declared(), table, "include/pmi.h vs the export table");
}

#[test]
fn c_prototypes_match_the_rust_signatures() {
    let mut src = String::from("#include <pmi.h>\n");
    for (name, ret, p) in signatures() {
        src += &format!("{ret} {name}({});\n", params(&p));
    }
    src += "int main(void) { return 0; }\n";
    compile(
        "cc",
        "c",
        &["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"],
        &src,
        "sig.c",
    );
}

#[test]
fn cxx_function_types_match_the_rust_signatures() {
    let mut src = String::from("#include <pmi.h>\n#include <type_traits>\n");
    for (name, ret, p) in signatures() {
        src += &format!(
            "static_assert(std::is_same<decltype(&{name}), {ret} (*)({})>::value, \"{name}\");\n",
            params(&p)
        );
    }
    src += "int main() { return 0; }\n";
    compile(
        "g++",
        "c++",
        &["-std=c++11", "-Wall", "-Wextra", "-Werror"],
        &src,
        "sig.cc",
    );
}

#[test]
fn the_constants_match_the_header() {
    let text = std::fs::read_to_string(header()).unwrap();
    let value = |name: &str| -> c_int {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().take(2).eq(["#define", name]))
            .unwrap_or_else(|| panic!("{name} not defined in pmi.h"));
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    use crate::*;
    for (name, v) in [
        ("PMI_SUCCESS", PMI_SUCCESS),
        ("PMI_FAIL", PMI_FAIL),
        ("PMI_ERR_INIT", PMI_ERR_INIT),
        ("PMI_ERR_NOMEM", PMI_ERR_NOMEM),
        ("PMI_ERR_INVALID_ARG", PMI_ERR_INVALID_ARG),
        ("PMI_ERR_INVALID_KEY", PMI_ERR_INVALID_KEY),
        ("PMI_ERR_INVALID_KEY_LENGTH", PMI_ERR_INVALID_KEY_LENGTH),
        ("PMI_ERR_INVALID_VAL", PMI_ERR_INVALID_VAL),
        ("PMI_ERR_INVALID_VAL_LENGTH", PMI_ERR_INVALID_VAL_LENGTH),
        ("PMI_ERR_INVALID_LENGTH", PMI_ERR_INVALID_LENGTH),
        ("PMI_ERR_INVALID_ARGS", PMI_ERR_INVALID_ARGS),
        ("PMI_ERR_INVALID_KVS", PMI_ERR_INVALID_KVS),
        ("PMI_ERR_UNSUPPORTED", PMI_ERR_UNSUPPORTED),
        ("PMI_TRUE", PMI_TRUE),
        ("PMI_FALSE", PMI_FALSE),
        ("PMI_GROUP_WORLD", PMI_GROUP_WORLD),
        ("PMI_TOPO_NONE", PMI_TOPO_NONE),
        ("PMI_TOPO_CLUSTER", PMI_TOPO_CLUSTER),
        ("PMI_TOPO_MESH", PMI_TOPO_MESH),
    ] {
        assert_eq!(value(name), v, "{name}");
    }
}
