#!/usr/bin/env bash
# Coverage-guided fuzzing of one target with libFuzzer, on stable rustc:
#   fuzz/run.sh TARGET [libFuzzer options...]     e.g. fuzz/run.sh pmi_framer -runs=1000000
#   fuzz/run.sh --list
# Builds the target's binary with SanitizerCoverage (plain -C flags: no
# nightly, no cargo-fuzz) into target/fuzz, then runs it on a scratch
# corpus (target/fuzz/corpus/TARGET, where new inputs go) seeded from the
# committed one (fuzz/corpus/TARGET). Copy an input worth keeping (a crash,
# a new edge) into fuzz/corpus/TARGET: the smoke test replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=$(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^rivet-fuzz$')
if [ "${1:-}" = "--list" ] || [ -z "${1:-}" ]; then
    echo "$targets"
    exit 0
fi
target=$1
shift
echo "$targets" | grep -qx "$target" || { echo "no fuzz target $target (--list)" >&2; exit 2; }
flags="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
flags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters"
flags+=" -Cllvm-args=-sanitizer-coverage-pc-table"
flags+=" -Cllvm-args=-sanitizer-coverage-trace-compares"
flags+=" -Cdebug-assertions -Coverflow-checks --cfg fuzzing"
# An explicit --target keeps the flags off build scripts and proc macros.
triple=$(rustc -vV | sed -n 's/^host: //p')
RUSTFLAGS="$flags" CARGO_TARGET_DIR=target/fuzz \
    cargo build --release -q -p rivet-fuzz --features libfuzzer --target "$triple" --bin "$target"
mkdir -p "target/fuzz/corpus/$target"
exec "target/fuzz/$triple/release/$target" -rss_limit_mb=2048 -timeout=10 \
    "target/fuzz/corpus/$target" "fuzz/corpus/$target" "$@"
