#!/usr/bin/env bash
# nmt's hand-written linear layers against oneDNN (issue 24), at rowinv_bench's shapes: GFLOP/s
# (2MNK) of nmt's linear_rowinv in float32 and int8 (through the cpu plugin) and of oneDNN's matmul in
# f32 and s8 x s8 -> f32 with nmt's scales (s8: the library call alone; s8+q: the whole layer as
# nmt's int8 figure, with the per-row quantisation and row scales), on 1 and 2 threads, on each
# machine's default ISA and with AVX2 forced (NMT_CPU_ISA=avx2 for nmt, ONEDNN_MAX_CPU_ISA=AVX2 for
# oneDNN). First, per ISA, onednn_bench's checks: oneDNN's int8 against an exact reference and
# against nmt's bits, and whether its rows depend on M or the thread count (batch invariance).
# Runs under the shared benchmark lock; needs an idle machine for figures worth keeping.
# Usage: bash bench/onednn.sh [tiny|small|both [SECONDS]]   (defaults: both, 0.2 s a figure)
# Needs libdnnl-dev (apt-get install libdnnl-dev; Debian's oneDNN 2.6, OpenMP runtime); builds
# build/bench/onednn_bench itself, outside make:
#   cc -std=c11 -O3 -g -D_GNU_SOURCE -Ilibcommon -Iplugins -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter -fopenmp -rdynamic bench/onednn_bench.c build/libnmt.a -ldnnl -lzstd -lcsv -lutf8proc -lm -ldl -lpthread -o build/bench/onednn_bench
set -eu -o pipefail
cd "$(dirname "$0")/.."
sets=${1:-both}
secs=${2:-0.2}
case $sets in tiny | small) ;; both) sets="tiny small" ;; *) echo "usage: bash bench/onednn.sh [tiny|small|both [SECONDS]]" >&2; exit 2 ;; esac
if [ ! -f /usr/include/oneapi/dnnl/dnnl.h ]; then
    echo "onednn.sh: needs libdnnl-dev (apt-get install libdnnl-dev)" >&2
    exit 2
fi
make -s all >/dev/null
mkdir -p build/bench
cc -std=c11 -O3 -g -D_GNU_SOURCE -Ilibcommon -Iplugins -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
    -Wno-unused-parameter -fopenmp -rdynamic bench/onednn_bench.c build/libnmt.a -ldnnl -lzstd -lcsv -lutf8proc \
    -lm -ldl -lpthread -o build/bench/onednn_bench
export NMT_PLUGIN_PATH=$PWD/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run ISA MODE ARGS...: onednn_bench with the ISA caps of ISA (default or avx2)
run() {
    local isa=$1
    shift
    if [ "$isa" = avx2 ]; then
        NMT_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 build/bench/onednn_bench "$@"
    else
        env -u NMT_CPU_ISA -u ONEDNN_MAX_CPU_ISA build/bench/onednn_bench "$@"
    fi
}

exec 9>/tmp/nmt-bench.lock
flock 9
echo "# onednn.sh: $(date -u +%Y-%m-%dT%H:%MZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A bad
for isa in default avx2; do
    echo
    echo "== checks, ISA $isa, 2 threads =="
    if OMP_NUM_THREADS=2 run "$isa" check 2 | tee "$tmp/check.$isa"; then bad[$isa]=; else bad[$isa]=1; fi
done
for set in $sets; do
    for threads in 1 2; do
        for isa in default avx2; do
            export OMP_NUM_THREADS=$threads
            run "$isa" nmt "$threads" "$set" "$secs" >"$tmp/nmt"
            run "$isa" onednn "$threads" "$set" "$secs" >"$tmp/dnnl"
            echo
            echo "== $set, $threads thread(s), ISA $isa: $(grep '^# oneDNN' "$tmp/dnnl" | sed 's/^# //') =="
            [ -n "${bad[$isa]}" ] && echo "   (oneDNN s8 gave WRONG results on this ISA in the check above: its s8 figures time an incorrect computation)"
            printf '%5s %5s %5s %9s %9s %7s %9s %9s %9s %7s  %s\n' M N K "nmt f32" "dnnl f32" "f32 x" \
                "nmt int8" "dnnl s8" "dnnl s8+q" "int8 x" "oneDNN impl (s8 / f32)"
            paste <(grep -v '^#' "$tmp/nmt" | tail -n +2) <(grep -v '^#' "$tmp/dnnl" | tail -n +2) |
                awk 'function x(a, b) { return b > 0 ? sprintf("%7.2f", a / b) : sprintf("%7s", "-") }
                     { printf "%5d %5d %5d %9.1f %9.1f %s %9.1f %9.1f %9.1f %s  %s / %s\n",
                       $1, $2, $3, $4, $11, x($4, $11), $5, $9, $10, x($5, $10), $12, $14 }'
        done
    done
done
echo
echo "# f32 x = nmt f32 / oneDNN f32; int8 x = nmt int8 / oneDNN s8+q (both whole layers: per-row"
echo "# quantisation, integer sums, per-column and per-row scales); GF/s count 2MNK operations."
