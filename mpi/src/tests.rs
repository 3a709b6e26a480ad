//! mpi.h is strict C99 and C++; librivetmpi exports only `MPI_*`; its
//! external32 codec matches MPI-2's sizes and byte order.

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// target/<profile>: the test executable is in its deps/.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

/// A translation unit touching every kind of declaration in mpi.h.
const USES: &str = r#"
#include <mpi.h>
int use_all(void);
int use_all(void) {
    MPI_Status st;
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Comm c = MPI_COMM_WORLD;
    MPI_Message m = MPI_MESSAGE_NULL;
    int n = 0, flag = 0;
    st.MPI_SOURCE = MPI_ANY_SOURCE;
    st.MPI_TAG = MPI_ANY_TAG;
    st.MPI_ERROR = MPI_SUCCESS;
    (void)m;
    (void)r;
    MPI_Get_count(&st, MPI_DOUBLE_INT, &n);
    MPI_Comm_get_attr(c, MPI_TAG_UB, &n, &flag);
    return MPI_Allreduce(MPI_IN_PLACE, &n, 1, MPI_INT, MPI_SUM, c) + (int)MPI_Wtime();
}
"#;

fn compile(compiler: &str, args: &[&str], ext: &str) {
    let dir = std::env::temp_dir().join(format!("rivet-mpi-header-{}-{ext}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = dir.join(format!("uses.{ext}"));
    std::fs::write(&src, USES).expect("write source");
    let out = Command::new(compiler)
        .args(args)
        .arg("-I")
        .arg(crate_dir().join("include"))
        .args(["-c", "-o"])
        .arg(dir.join(format!("uses-{ext}.o")))
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{compiler} {args:?} rejects mpi.h:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn header_is_strict_c99() {
    compile(
        "cc",
        &["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"],
        "c",
    );
}

#[test]
fn header_is_strict_cxx() {
    compile(
        "c++",
        &["-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic"],
        "cpp",
    );
}

#[test]
fn library_exports_only_mpi_calls() {
    let so = profile_dir().join("librivetmpi.so");
    assert!(so.exists(), "{} not built", so.display());
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output()
        .expect("nm (binutils)");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    assert!(names.contains(&"MPI_Init"), "{text}");
    assert!(names.contains(&"MPI_Alltoall"), "{text}");
    let foreign: Vec<&&str> = names.iter().filter(|n| !n.starts_with("MPI_")).collect();
    assert!(foreign.is_empty(), "exports beyond MPI_*: {foreign:?}");
    // Absent, not stubbed: a call outside the scope does not link.
    assert!(!names.contains(&"MPI_Win_create"));
    assert!(!names.contains(&"MPI_Type_vector"));
}

/// external32.c (internal, so linked from librivetmpi.a): wire bytes,
/// round trips and refusals of tests/ext32_check.c.
#[test]
fn external32_matches_mpi2s_sizes_and_byte_order() {
    let dir = std::env::temp_dir().join(format!("rivet-mpi-ext32-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let exe = dir.join("ext32_check");
    let root = crate_dir();
    let out = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root.join("src"))
        .arg("-I")
        .arg(root.join("include"))
        .arg("-I")
        .arg(root.join("../capi/include"))
        .arg(root.join("tests/ext32_check.c"))
        .arg(profile_dir().join("librivetmpi.a"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("running cc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("running ext32_check");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}");
    assert_eq!(stdout, "ext32_check OK\n");
}
