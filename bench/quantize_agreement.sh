#!/usr/bin/env bash
# How close reduced-precision decoding stays to float32, and what GPTQ rounding adds:
#   bash bench/quantize_agreement.sh CALIB SOURCE REFERENCE CHECKPOINT...
# CHECKPOINT...: the checkpoints a run averages (nmt-train's model.ckpt.step-*); CALIB: calibration
# batches for nmt-avg --calibrate (the validation set); SOURCE, REFERENCE: the test set's raw source
# and reference (e.g. test_2016_flickr.en / .de). Makes the float32 average, the int8 file rounded to
# nearest (nmt-avg --quantize) and the GPTQ one (--calibrate CALIB, timed), then translates SOURCE
# greedily and with beam 5 (alpha BEAM_ALPHA, default 1.4) in float32, and in each reduced precision
# (int8 and int8-all from the float32 file, which quantises to nearest when loading, and from the
# GPTQ file; bf16 and bf16-all where the CPU has AVX512-BF16, and bf16 from each int8 file: int8
# weights, bf16 products), printing per run the translations
# identical to float32's and the BLEU (nmt-bleu, sacreBLEU's defaults). Outputs do not depend on the
# machine's load; the whole run takes a few minutes for a tiny model.
set -u
[ $# -ge 4 ] || { sed -n 2,14p "$0" >&2; exit 2; }
calib=$1 src=$2 ref=$3; shift 3
top=$(cd "$(dirname "$0")/.." && pwd); B=$top/bin
alpha=${BEAM_ALPHA:-1.4}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$B/nmt-avg" -o "$tmp/f32.ckpt" "$@" || exit 1
"$B/nmt-avg" --quantize -o "$tmp/rtn.ckpt" "$@" || exit 1
s0=$(date +%s.%N)
"$B/nmt-avg" --quantize --calibrate "$calib" -o "$tmp/gptq.ckpt" "$@" || exit 1
s1=$(date +%s.%N)
printf 'nmt-avg --quantize --calibrate: %.1f s; files: float32 %d bytes, int8 %d, int8 GPTQ %d\n' \
    "$(awk -v a="$s0" -v b="$s1" 'BEGIN {print b - a}')" "$(stat -c %s "$tmp/f32.ckpt")" "$(stat -c %s "$tmp/rtn.ckpt")" "$(stat -c %s "$tmp/gptq.ckpt")"
runs="f32:int8 f32:int8-all gptq:int8 gptq:int8-all"
grep -qw avx512_bf16 /proc/cpuinfo && runs="$runs f32:bf16 f32:bf16-all rtn:bf16 gptq:bf16"
bleu() { "$B/nmt-bleu" "$ref" < "$1" | grep -m1 '"score"' | tr -dc '0-9.'; }
for beam in 1 5; do
    opts=(--beam "$beam" --alpha "$alpha")
    "$B/nmt-decode" -m "$tmp/f32.ckpt" "${opts[@]}" -i "$src" > "$tmp/float32.txt" || exit 1
    n=$(wc -l < "$tmp/float32.txt")
    printf 'beam %d float32: BLEU %s\n' "$beam" "$(bleu "$tmp/float32.txt")"
    for r in $runs; do
        ck=${r%%:*} p=${r#*:}
        "$B/nmt-decode" -m "$tmp/$ck.ckpt" "${opts[@]}" --precision "$p" -i "$src" > "$tmp/x.txt" || exit 1
        same=$(paste -d '\t' "$tmp/float32.txt" "$tmp/x.txt" | awk -F '\t' '$1 == $2' | wc -l)
        label=$p; [ "$ck" = gptq ] && label="$p (GPTQ file)"; [ "$ck" = rtn ] && label="$p (int8 file)"
        printf 'beam %d %-20s identical to float32 %d/%d (%.1f%%), BLEU %s\n' "$beam" "$label" "$same" "$n" \
            "$(awk -v s="$same" -v n="$n" 'BEGIN {print 100 * s / n}')" "$(bleu "$tmp/x.txt")"
    done
done
