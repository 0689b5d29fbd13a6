#!/usr/bin/env bash
# Times nmt-batch on all of Multi30k train (29000 pairs, --max-tokens 4096), next to the floor of
# decompressing the same ids stream with the zstd CLI. Run from the repository root after
# `make tests-built`, under the bench lock:  flock /tmp/nmt-bench.lock bash bench/batch.sh
# The ids stream comes from nmt-tokenize with an 8000-piece joint BPE vocabulary.
set -eu
runs=${RUNS:-11}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
en=data/multi30k/train.en.gz de=data/multi30k/train.de.gz
zcat "$en" > "$tmp/train.en"; zcat "$de" > "$tmp/train.de"
bin/nmt-tokenize --src "$tmp/train.en" --tgt "$tmp/train.de" | bin/nmt-vocab --size 8000 -o "$tmp/v.bpe"
bin/nmt-tokenize --vocab "$tmp/v.bpe" --src "$tmp/train.en" --tgt "$tmp/train.de" > "$tmp/train.ids"
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
timeit() { # command... -> median wall seconds over $runs runs
    for _ in $(seq "$runs"); do
        s=$(date +%s.%N); "$@" > /dev/null 2>&1; e=$(date +%s.%N)
        echo "$e - $s" | bc -l
    done | median
}
t_batch=$(timeit bin/nmt-batch --max-tokens 4096 "$tmp/train.ids" -o "$tmp/out")
t_zstd=$(timeit zstd -qdc "$tmp/train.ids")
bin/nmt-batch --max-tokens 4096 "$tmp/train.ids" -o "$tmp/out"
printf 'input: %s bytes, output: %s bytes\n' "$(stat -c %s "$tmp/train.ids")" "$(stat -c %s "$tmp/out")"
printf 'nmt-batch --max-tokens 4096: %.4f s (median of %d)\n' "$t_batch" "$runs"
printf 'zstd -dc of the same input:  %.4f s (median of %d)\n' "$t_zstd" "$runs"
printf 'ratio nmt-batch / zstd -dc:  %.2f\n' "$(echo "$t_batch / $t_zstd" | bc -l)"
