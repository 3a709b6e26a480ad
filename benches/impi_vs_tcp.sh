#!/bin/sh
# IMPI across clients vs the tcp netmod within one job (issue 19's speed
# target: latency and bandwidth between ranks of different clients <= 1.2x
# tcp's, measured in one run). Interleaved: each round runs tcp latency,
# IMPI latency, tcp bw, IMPI bw; then per size the median of the rounds and
# the ratio (latency: impi / tcp; bw: tcp / impi, so <= 1.2 meets the
# target either way).
#
#   benches/impi_vs_tcp.sh [ROUNDS]      (default 5)
#
# Binaries: $BIN_DIR (default target/release) holds rivetrun and
# rivet-bench. The IMPI job is `rivetrun --impi-server 2` and two
# `rivetrun --impi-client C ADDR -n 1 --bind-to none`, client 0 under
# `taskset -c 0`, client 1 under `taskset -c 1` (two clients each binding
# from core 0 would share one core); the tcp job is `RIVET_NETMOD=tcp
# rivetrun -n 2 --bind-to core`, ranks on cores 0 and 1. Both with
# RIVET_YIELD=always unless set. LAT_SIZES / BW_SIZES / LAT_ITERS /
# BW_ITERS override the sizes (rivet-bench -m) and iterations.
set -eu

ROUNDS=${1:-5}
BIN=${BIN_DIR:-target/release}
LAT_SIZES=${LAT_SIZES:-8:1K}
BW_SIZES=${BW_SIZES:-64K:1M}
LAT_ITERS=${LAT_ITERS:-3000}
BW_ITERS=${BW_ITERS:-30}
export RIVET_YIELD="${RIVET_YIELD:-always}" IMPI_AUTH_NONE=
for b in rivetrun rivet-bench; do
    [ -x "$BIN/$b" ] || {
        echo "impi_vs_tcp: no $BIN/$b (cargo build --release --workspace, or set BIN_DIR)" >&2
        exit 2
    }
done
RUN="$BIN/rivetrun"
BENCH="$BIN/rivet-bench"
TMP=$(mktemp -d)
SERVER=
cleanup() {
    rc=$?
    [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null
    [ "$rc" -eq 0 ] || { echo "impi_vs_tcp: failed; the jobs' stderr:" >&2; cat "$TMP/log" >&2; }
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

# The jobs' stderr (the server's and clients' notes), shown on failure.
exec 3>&2 2>"$TMP/log"

# tcp BENCH SIZES ITERS: one job of two ranks; its CSV rows on stdout.
tcp() {
    RIVET_NETMOD=tcp timeout 300 "$RUN" -n 2 --bind-to core \
        "$BENCH" "$1" -m "$2" -i "$3" --csv | grep "^$1,"
}

# impi BENCH SIZES ITERS: a server and two clients of one rank each.
impi() {
    : > "$TMP/addr"
    timeout 300 "$RUN" --impi-server 2 > "$TMP/addr" &
    SERVER=$!
    n=0
    until [ -s "$TMP/addr" ]; do
        n=$((n + 1))
        [ $n -lt 200 ] || { echo "impi_vs_tcp: the server printed no address" >&2; exit 1; }
        sleep 0.05
    done
    addr=$(head -1 "$TMP/addr")
    timeout 300 taskset -c 1 "$RUN" --impi-client 1 "$addr" -n 1 --bind-to none \
        "$BENCH" "$1" -m "$2" -i "$3" --csv > /dev/null &
    other=$!
    timeout 300 taskset -c 0 "$RUN" --impi-client 0 "$addr" -n 1 --bind-to none \
        "$BENCH" "$1" -m "$2" -i "$3" --csv | grep "^$1,"
    wait "$other"
    wait "$SERVER"
    SERVER=
}

: > "$TMP/rows"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    echo "round $r/$ROUNDS" >&3
    tcp latency "$LAT_SIZES" "$LAT_ITERS" | sed 's/^/tcp,/' >> "$TMP/rows"
    impi latency "$LAT_SIZES" "$LAT_ITERS" | sed 's/^/impi,/' >> "$TMP/rows"
    tcp bw "$BW_SIZES" "$BW_ITERS" | sed 's/^/tcp,/' >> "$TMP/rows"
    impi bw "$BW_SIZES" "$BW_ITERS" | sed 's/^/impi,/' >> "$TMP/rows"
    r=$((r + 1))
done

# rows: stack,bench,ranks,threads,window,unit,size,value,iters
sort -t, -k2,2 -k7,7n -k1,1 -k8,8g "$TMP/rows" | awk -F, -v rounds="$ROUNDS" '
function median(key,   n) {
    n = cnt[key]
    if (n == 0) return ""
    return (n % 2) ? v[key, (n + 1) / 2] : (v[key, n / 2] + v[key, n / 2 + 1]) / 2
}
{
    key = $2 SUBSEP $7 SUBSEP $1
    v[key, ++cnt[key]] = $8
    if (!(($2 SUBSEP $7) in seen)) { seen[$2 SUBSEP $7] = 1; order[++n] = $2 SUBSEP $7; unit[$2 SUBSEP $7] = $6 }
}
END {
    printf "# IMPI across clients vs tcp in one job, %d interleaved rounds, medians\n", rounds
    printf "# ratio: latency impi/tcp, bw tcp/impi; target <= 1.2\n"
    printf "%-8s %10s %12s %12s %7s\n", "bench", "size", "tcp", "impi", "ratio"
    worst = 0
    for (i = 1; i <= n; i++) {
        split(order[i], k, SUBSEP)
        t = median(k[1] SUBSEP k[2] SUBSEP "tcp")
        m = median(k[1] SUBSEP k[2] SUBSEP "impi")
        if (t == "" || m == "" || t <= 0 || m <= 0) { ratio = "-" }
        else {
            ratio = (k[1] == "bw") ? t / m : m / t
            if (ratio > worst) worst = ratio
            ratio = sprintf("%.2f", ratio)
        }
        printf "%-8s %10s %12.2f %12.2f %7s  %s\n", k[1], k[2], t, m, ratio, unit[order[i]]
    }
    printf "worst ratio %.2f: target %s\n", worst, (worst <= 1.2 ? "met" : "missed")
}'
