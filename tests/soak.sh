#!/usr/bin/env bash
# Soak test (not in CI): random traffic for a long time, with rank kills.
#
#   bash tests/soak.sh [--minutes M] [--seed S] [--keep DIR] [--lock FILE]
#
# Loops until M minutes (default 60) have passed. Each run starts a fresh
# job under rivetrun on a random transport (shm, tcp poll, tcp io_uring,
# ofi tcp;ofi_rxm) with 2 to 4 ranks of `engine_check stress TOTAL SEED`:
# random sizes (0 B to 1 MiB, so eager, rendezvous and CMA), tags and
# synchronous sends between all ranks, received with exact and wildcard
# patterns. Every message carries a checksum and a pattern seeded by
# (sender, receiver, sequence); each receiver knows what it must get and
# fails on anything lost, duplicated, reordered or corrupt.
#
# Every fifth run is a kill run: once all its ranks run, a random rank is
# killed with SIGKILL while the job streams, and the job must end non-zero
# within 20 s naming that rank. The next run is the relaunch.
#
# After every run: no engine_check process is left, and no /dev/shm segment
# of the job. The summary counts runs, messages and bytes checked; the exit
# code is 0 only if every run passed. Logs of failed runs stay in DIR
# (default: a temporary directory, printed). With --lock FILE each run holds
# an flock on FILE while its job runs, so that other multi-process jobs
# taking the same lock (test runs on a 2-core machine) never overlap one.
set -uo pipefail
cd "$(dirname "$0")/.."

minutes=60
seed=$(( $(date +%s) % 100000 ))
keep=""
lock=""
while [ $# -gt 0 ]; do
    case "$1" in
        --minutes) minutes="$2"; shift 2 ;;
        --seed) seed="$2"; shift 2 ;;
        --keep) keep="$2"; shift 2 ;;
        --lock) lock="$2"; shift 2 ;;
        -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "soak.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$minutes" in ''|*[!0-9]*) echo "soak.sh: --minutes wants a whole number" >&2; exit 2 ;; esac

echo "soak: building release binaries" >&2
cargo build --release --quiet -p rivet-launcher -p rivet-tests --bin rivetrun --bin engine_check || exit 1
logs=${keep:-$(mktemp -d /tmp/rivet-soak-XXXXXX)}
mkdir -p "$logs/bin"
# Copies, so that builds during the soak do not swap binaries under it.
cp target/release/rivetrun target/release/engine_check "$logs/bin/" || exit 1
run=$logs/bin/rivetrun
check=$logs/bin/engine_check
RANDOM=$seed

transports=(shm tcp-poll tcp-uring ofi)
have_uring=1
"$run" --info 2>/dev/null | grep -q '^io_uring: *available' || have_uring=0
have_ofi=1
command -v fi_info >/dev/null && fi_info -p tcp >/dev/null 2>&1 || have_ofi=0

runs=0 passed=0 failed=0 kills=0 msgs=0 bytes=0
declare -A per_transport
end=$(( $(date +%s) + minutes * 60 ))
start_all=$(date +%s)

# Environment for one transport.
transport_env() {
    case "$1" in
        shm) echo "RIVET_NETMOD=auto" ;;
        tcp-poll) echo "RIVET_NETMOD=tcp RIVET_TCP_BACKEND=poll" ;;
        tcp-uring) echo "RIVET_NETMOD=tcp RIVET_TCP_BACKEND=uring" ;;
        ofi) echo "RIVET_NETMOD=ofi RIVET_OFI_PROVIDER=tcp;ofi_rxm" ;;
    esac
}

# Nothing of job $1 (rivetrun's pid) may be left: rank processes, shared-
# memory segments or its temporary directory.
leftovers() {
    local left
    left=$(pgrep -f "$check stress" || true)
    if [ -n "$left" ]; then
        echo "engine_check processes left: $left"
        pkill -9 -f "$check stress"
        return 1
    fi
    left=$(ls -d /dev/shm/rivet-"$1"-* "${TMPDIR:-/tmp}"/rivet-"$1"-* 2>/dev/null)
    if [ -n "$left" ]; then
        echo "left by the job: $left"
        return 1
    fi
    return 0
}

fail() {
    failed=$((failed + 1))
    run_failed=1
    echo "soak: run $runs FAILED ($1); log: $2" >&2
}

# Take and drop --lock's flock around one run (the fd is shared with the
# job's processes, so it is unlocked explicitly, not by closing).
lock_take() { [ -z "$lock" ] && return 0; exec {lockfd}>>"$lock" && flock "$lockfd"; }
lock_drop() { [ -z "$lock" ] && return 0; flock -u "$lockfd"; exec {lockfd}>&-; }

while [ "$(date +%s)" -lt "$end" ]; do
    lock_take || { echo "soak: cannot lock $lock" >&2; exit 1; }
    runs=$((runs + 1))
    run_failed=0
    t=${transports[$((RANDOM % 4))]}
    [ "$t" = tcp-uring ] && [ $have_uring = 0 ] && t=tcp-poll
    [ "$t" = ofi ] && [ $have_ofi = 0 ] && t=shm
    n=$((2 + RANDOM % 3))
    s=$((RANDOM * 32768 + RANDOM))
    log="$logs/run-$runs.log"
    per_transport[$t]=$(( ${per_transport[$t]:-0} + 1 ))
    if [ $((runs % 5)) -eq 0 ]; then
        # A kill run: a long stream, one rank killed mid-way.
        kills=$((kills + 1))
        n=3
        env $(transport_env "$t") "$run" -n $n "$check" stress 2000000 "$s" >"$log" 2>&1 &
        job=$!
        # Every rank started (a loaded machine can take seconds), then a while.
        waited=0
        while [ "$(pgrep -P $job -f "$check stress" | wc -l)" -lt $n ] && kill -0 $job 2>/dev/null \
            && [ $waited -lt 600 ]; do sleep 0.1; waited=$((waited + 1)); done
        sleep "$((RANDOM % 3)).$((RANDOM % 10))"
        victim_rank=$((RANDOM % n))
        victim=""
        found=0
        for p in $(pgrep -P $job -f "$check stress"); do
            found=$((found + 1))
            r=$(tr '\0' '\n' </proc/$p/environ 2>/dev/null | sed -n 's/^PMI_RANK=//p')
            [ "$r" = "$victim_rank" ] && victim=$p
        done
        if [ -z "$victim" ]; then
            kill -9 $job 2>/dev/null; wait $job 2>/dev/null
            fail "kill run on $t: rank $victim_rank not found among $found of $n ranks (finished early?)" "$log"
            leftovers $job >>"$log" || fail "leftovers after a kill run" "$log"
            lock_drop
            continue
        fi
        kill -9 "$victim"
        waited=0
        while kill -0 $job 2>/dev/null && [ $waited -lt 200 ]; do sleep 0.1; waited=$((waited + 1)); done
        if kill -0 $job 2>/dev/null; then
            kill -9 $job; wait $job 2>/dev/null
            fail "kill run on $t: the job still ran 20 s after rank $victim_rank was killed" "$log"
        else
            wait $job; rc=$?
            if [ $rc -eq 0 ]; then
                fail "kill run on $t: exit 0 after rank $victim_rank was killed" "$log"
            elif ! grep -q "rank $victim_rank" "$log"; then
                fail "kill run on $t: no message names rank $victim_rank (exit $rc)" "$log"
            else
                passed=$((passed + 1))
            fi
        fi
    else
        total=$((20000 + RANDOM % 80000))
        env $(transport_env "$t") "$run" -n $n "$check" stress $total "$s" >"$log" 2>&1 &
        job=$!
        waited=0
        while kill -0 $job 2>/dev/null && [ $waited -lt 6000 ]; do sleep 0.1; waited=$((waited + 1)); done
        kill -0 $job 2>/dev/null && { echo "soak: still running after 600 s: killed" >>"$log"; kill -9 $job; }
        wait $job
        rc=$?
        oks=$(grep -c '^engine_check stress OK' "$log")
        if [ $rc -ne 0 ] || [ "$oks" -ne $n ]; then
            fail "$t, $n ranks, $total messages, seed $s: exit $rc, $oks of $n ranks OK" "$log"
        else
            passed=$((passed + 1))
            msgs=$((msgs + $(sed -n 's/.* received \([0-9]*\) (.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')))
            bytes=$((bytes + $(sed -n 's/.* received [0-9]* (\([0-9]*\) bytes).*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')))
        fi
    fi
    leftovers $job >>"$log" || fail "leftovers" "$log"
    lock_drop
    # Passed runs' logs are not kept.
    [ $run_failed -eq 0 ] && rm -f "$log"
    elapsed=$(( $(date +%s) - start_all ))
    printf 'soak: %d runs in %d:%02d, %d passed, %d failed, %d kill runs, %d messages checked\n' \
        $runs $((elapsed / 60)) $((elapsed % 60)) $passed $failed $kills $msgs >&2
done

echo "soak summary (seed $seed, $minutes min):"
echo "  runs $runs: passed $passed, failed $failed; kill runs $kills"
for t in "${!per_transport[@]}"; do echo "  $t: ${per_transport[$t]} runs"; done
echo "  messages received and checked: $msgs ($bytes bytes); lost or corrupt: every such run is counted as failed above"
[ "$failed" -eq 0 ] && echo "  logs: none kept (all passed)" || echo "  logs of failed runs: $logs"
[ -n "$keep" ] || [ "$failed" -ne 0 ] || rm -rf "$logs"
[ "$failed" -eq 0 ]
