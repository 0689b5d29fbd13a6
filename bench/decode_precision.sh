#!/usr/bin/env bash
# nmt-decode in float32 against int8, int8-all, bf16 and bf16-all (--precision), side by side:
#   bash bench/decode_precision.sh CHECKPOINT VOCAB SOURCE [REFERENCE] [ROUNDS]
# CHECKPOINT: an nmt checkpoint; VOCAB: its vocabulary; SOURCE: raw source text (e.g.
# test_2016_flickr.en); REFERENCE: its translations, for BLEU (optional). Each round runs, for greedy
# (batches of 64 sentences) and beam 4 (alpha 0.6, batches of 32), with 1 and 2 threads, each
# precision in turn (bf16 only where the CPU has AVX512-BF16): the whole command (checkpoint load and
# weight packing included, ids in, hyp stream out) under /usr/bin/time. Prints one row per run, then
# per configuration the medians (sentences/s, target tokens/s, peak RSS), the ratio to float32 (of
# the medians, and of the fastest rounds: the steadier of the two where other work shares the CPU), the
# translations identical to float32's and, with REFERENCE, the BLEU scores (nmt-bleu, sacreBLEU's
# defaults). Where /usr/bin/python3 has torch, the PyTorch peer decodes in the same rounds, same
# batches and threads, with the same weights (bench/peer_decode.py; PEER=../shared/bench/torch_peer/
# train.py; its OpenMP OpenBLAS as bench/decode_vs_peer.sh): its row "peer" gives its decoding loop
# only (PEER=none: no peer). DECODE_OPTS adds options to every nmt-decode command (e.g. an untrained
# model's fixed output length: "--max-len-a 1 --max-len-b 1"). Run alone: the machine's load changes
# the figures.
set -u
[ $# -ge 3 ] || { sed -n 2,15p "$0" >&2; exit 2; }
ckpt=$1 vocab=$2 src=$3 ref=${4:-} rounds=${5:-3}
top=$(cd "$(dirname "$0")/.." && pwd); B=$top/bin
peer=${PEER:-$top/../shared/bench/torch_peer/train.py}
use_peer=0
[ -f "$peer" ] && /usr/bin/python3 -c 'import torch' 2> /dev/null && use_peer=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# NMT_CPU_ISA=avx2 stands for a CPU without AVX-512: the peer gets the same CPU, its OpenBLAS kernels
# for Haswell/Zen (OPENBLAS_CORETYPE) and PyTorch's AVX2 kernels (ATEN_CPU_CAPABILITY).
peer_env=(env)
[ "${NMT_CPU_ISA:-}" = avx2 ] && peer_env=(env OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2)
precs="float32 int8 int8-all"
grep -qw avx512_bf16 /proc/cpuinfo && precs="$precs bf16 bf16-all"
"$B/nmt-tokenize" --vocab "$vocab" < "$src" > "$tmp/src.ids" || exit 1
"$B/nmt-tokenize" --vocab "$vocab" --text=ids < "$src" > "$tmp/src.txt" || exit 1
n=$(wc -l < "$tmp/src.txt")
mean=$(awk '{t += NF + 1} END {printf "%.2f", t / NR}' "$tmp/src.txt")
echo "$n sentences, mean source length $mean tokens (EOS included); checkpoint $(stat -c %s "$ckpt") bytes;" \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
    for m in "1 64" "4 32"; do
        set -- $m
        mt=$(awk -v m="$mean" -v b="$2" 'BEGIN {printf "%d", m * b}')
        for th in 1 2; do
            for p in $precs; do
                out="$tmp/b$1.t$th.$p"
                /usr/bin/time -f "%e %M" -o "$tmp/time" "$B/nmt-decode" -m "$ckpt" --in ids --out hyp --threads $th \
                    --beam $1 --alpha 0.6 --max-tokens "$mt" --precision $p ${DECODE_OPTS:-} -i "$tmp/src.ids" \
                    -o "$out.hyp" || exit 1
                "$B/nmt-cat" "$out.hyp" | cut -f4 > "$out.ids"
                read -r s kb < "$tmp/time"
                tok=$(awk '{t += NF} END {print t}' "$out.ids")
                awk -v s="$s" -v kb="$kb" -v n="$n" -v t="$tok" -v r="$r" -v b="$1" -v th="$th" -v p="$p" 'BEGIN {
                    printf "round %d beam %d threads %d %s: %.2f s, %.1f sentences/s, %.0f target tokens/s, peak RSS %d MB\n",
                           r, b, th, p, s, n / s, t / s, kb / 1024 }' | tee -a "$tmp/rows"
            done
            [ $use_peer = 1 ] || continue
            out=$(LD_LIBRARY_PATH=${PEER_BLAS-/usr/lib/x86_64-linux-gnu/openblas-openmp} /usr/bin/time -f "%e %M" \
                -o "$tmp/time" "${peer_env[@]}" /usr/bin/python3 "$top/bench/peer_decode.py" --peer "$peer" --ckpt "$ckpt" \
                --ids "$tmp/src.txt" --beam $1 --batch $2 --alpha 0.6 --threads $th --out "$tmp/b$1.t$th.peer.ids") || exit 1
            read -r s kb < "$tmp/time"
            echo "$out" | sed 's/^DECODE //' | /usr/bin/python3 -c "
import json, sys; d = json.load(sys.stdin)
print('round $r beam $1 threads $th peer: %.2f s, %.1f sentences/s, %.0f target tokens/s, peak RSS %d MB'
      % (d['decode_s'], d['sent_per_s'], d['tgt_tok_per_s'], $kb / 1024))" | tee -a "$tmp/rows"
        done
    done
done
echo "| mode | threads | precision | sentences/s | target tokens/s | peak RSS | x float32 | x float32, best rounds | translations identical to float32's |"
echo "|---|---|---|---|---|---|---|---|---|"
for b in 1 4; do
    for th in 1 2; do
        for p in $precs $([ $use_peer = 1 ] && echo peer); do
            f="$tmp/b$b.t$th"
            same=$(paste "$f.float32.ids" "$f.$p.ids" | awk -F'\t' '$1 == $2' | wc -l)
            awk -v b="$b" -v th="$th" -v p="$p" -v same="$same" -v n="$n" '
                function med(a, k,   i, j, t) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                                return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
                function num(w) { for (i = 1; i < NF; i++) if ($(i + 1) == w) return $i }
                $4 == b && $6 == th && $7 == "float32:" { f[++nf] = num("sentences/s,") }
                $4 == b && $6 == th && $7 == p ":" { x[++nx] = num("sentences/s,"); y[++ny] = num("target"); m[++nm] = num("MB") }
                function best(a, k,   i, t) { t = a[1]; for (i = 2; i <= k; i++) if (a[i] > t) t = a[i]; return t }
                END { printf "| %s | %d | %s | %.1f | %.0f | %.0f MB | %.2fx | %.2fx | %d/%d (%.1f%%) |\n", b == 1 ? "greedy" : "beam 4", th, p,
                             med(x, nx), med(y, ny), med(m, nm), med(x, nx) / med(f, nf), best(x, nx) / best(f, nf), same, n, 100 * same / n }' "$tmp/rows"
        done
    done
done
if [ -n "$ref" ]; then
    for b in 1 4; do
        for p in $precs; do
            "$B/nmt-tokenize" --vocab "$vocab" --decode -i "$tmp/b$b.t2.$p.hyp" > "$tmp/hyp.txt" || exit 1
            echo "beam $b $p: $("$B/nmt-bleu" "$ref" -i "$tmp/hyp.txt" -f text)"
        done
    done
fi
