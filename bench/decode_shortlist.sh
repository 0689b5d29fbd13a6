#!/usr/bin/env bash
# Decoding speed with and without the vocabulary shortlist, by precision, alternated rounds on one
# machine: seconds of the whole nmt-decode command (ids in, hyp out) for each configuration, then
# the median and fastest of each and their ratio to float32 without a shortlist.
# usage: bench/decode_shortlist.sh MODEL.ckpt TRAIN.batches SRC.ids [ROUNDS] [THREADS...]
# SHORTLIST="--shortlist-targets N --shortlist-frequent N" sizes the shortlist (default: nmt-avg's).
# DECODE_OPTS adds options to every nmt-decode command (e.g. an untrained model's fixed output
# length: "--max-len-a 1 --max-len-b 1").
set -euo pipefail
model=$1 train=$2 src=$3 rounds=${4:-5}
shift $(($# < 4 ? $# : 4))
threads=${*:-1 2}
bin=${NMT_BIN:-$(dirname "$0")/../bin}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2086
"$bin/nmt-avg" --shortlist "$train" ${SHORTLIST:-} -o "$tmp/sl.ckpt" "$model"
configs=("float32" "float32 --shortlist" "int8" "int8 --shortlist" "int8-all --shortlist")
for t in $threads; do
    for beam in 1 4; do
        mt=$((beam == 1 ? 974 : 487))
        for r in $(seq "$rounds"); do
            for c in "${configs[@]}"; do
                set -- $c
                s=$(date +%s.%N)
                "$bin/nmt-decode" -m "$tmp/sl.ckpt" --in ids --out hyp --threads "$t" --beam $beam --max-tokens $mt \
                    --precision "$@" ${DECODE_OPTS:-} -i "$src" > /dev/null
                e=$(date +%s.%N)
                echo "$t $beam $1${2:+ $2} $(echo "$e - $s" | bc)"
            done
        done
    done
done > "$tmp/times"
python3 - "$tmp/times" <<'PY'
import statistics, sys
rows = {}
for l in open(sys.argv[1]):
    f = l.split(); rows.setdefault((f[0], f[1], ' '.join(f[2:-1])), []).append(float(f[-1]))
print('threads beam configuration       median s  fastest s  x float32 (median, fastest)')
for (t, b, c), v in rows.items():
    base = rows[(t, b, 'float32')]
    m, f = statistics.median(v), min(v)
    print(f'{t:>7} {b:>4} {c:<24} {m:8.3f} {f:10.3f}  {statistics.median(base) / m:5.2f}x {min(base) / f:5.2f}x')
PY
