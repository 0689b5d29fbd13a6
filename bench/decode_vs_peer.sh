#!/usr/bin/env bash
# nmt-decode against the PyTorch peer's decoding, side by side, same weights, same token ids, the same
# number of threads on both sides (THREADS, default 2):
#   bash bench/decode_vs_peer.sh CHECKPOINT VOCAB SOURCE [ROUNDS]
# CHECKPOINT: an nmt checkpoint (the peer loads the same weights through bench/peer_decode.py);
# VOCAB: its vocabulary; SOURCE: raw source text (e.g. test_2016_flickr.en). Greedy with batches of
# 64 sentences and beam 4 (alpha 0.6) with batches of 32; nmt batches by source tokens, so it gets
# --max-tokens = 64 (or 32) times the mean source length. Each round runs nmt then the peer in each
# mode; prints sentences/s, target tokens/s and peak RSS (/usr/bin/time), and how many outputs agree,
# then per mode the median sentences/s of each side and their ratio (nmt: the whole command, from
# ids to hyp stream, checkpoint load included; peer: its decoding loop only, as its `decode` reports),
# and the ratio of like scopes: nmt's decoding only, the whole command less the same command on an
# empty input (process start, checkpoint load, plugin set-up), timed in each round.
# Needs /usr/bin/python3 with python3-torch, the peer (PEER=../shared/bench/torch_peer/train.py), and
# libopenblas0-openmp for the peer's OpenBLAS (its README; PEER_BLAS=DIR picks another directory for
# the peer's LD_LIBRARY_PATH, PEER_BLAS= the system default). NMT_CPU_ISA=avx2 emulates a CPU without
# AVX-512 on both sides (the peer's OpenBLAS and PyTorch kernels too). Run alone: the machine has 2 cores.
set -u
[ $# -ge 3 ] || { sed -n 2,15p "$0" >&2; exit 2; }
ckpt=$1 vocab=$2 src=$3 rounds=${4:-2} threads=${THREADS:-2}
top=$(cd "$(dirname "$0")/.." && pwd); B=$top/bin
peer=${PEER:-$top/../shared/bench/torch_peer/train.py}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# NMT_CPU_ISA=avx2 stands for a CPU without AVX-512: the peer gets the same CPU, its OpenBLAS kernels
# for Haswell/Zen (OPENBLAS_CORETYPE) and PyTorch's AVX2 kernels (ATEN_CPU_CAPABILITY).
peer_env=(env)
[ "${NMT_CPU_ISA:-}" = avx2 ] && peer_env=(env OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2)
"$B/nmt-tokenize" --vocab "$vocab" < "$src" > "$tmp/src.ids" || exit 1
"$B/nmt-tokenize" --vocab "$vocab" --text=ids < "$src" > "$tmp/src.txt" || exit 1
"$B/nmt-tokenize" --vocab "$vocab" < /dev/null > "$tmp/empty.ids" || exit 1
n=$(wc -l < "$tmp/src.txt")
mean=$(awk '{t += NF + 1} END {printf "%.2f", t / NR}' "$tmp/src.txt")
echo "$n sentences, mean source length $mean tokens (EOS included); $threads threads; NMT_CPU_ISA=${NMT_CPU_ISA:-(widest)}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
    for m in "1 64" "4 32"; do
        set -- $m
        mt=$(awk -v m="$mean" -v b="$2" 'BEGIN {printf "%d", m * b}')
        /usr/bin/time -f "%e %M" -o "$tmp/time" "$B/nmt-decode" -m "$ckpt" --in ids --out hyp --threads "$threads" --beam $1 \
            --alpha 0.6 --max-tokens "$mt" -i "$tmp/src.ids" -o "$tmp/ours.hyp" || exit 1
        "$B/nmt-cat" "$tmp/ours.hyp" | cut -f4 > "$tmp/ours.txt"
        read -r s kb < "$tmp/time"
        /usr/bin/time -f "%e" -o "$tmp/time0" "$B/nmt-decode" -m "$ckpt" --in ids --out hyp --threads "$threads" --beam $1 \
            --alpha 0.6 --max-tokens "$mt" -i "$tmp/empty.ids" -o "$tmp/empty.hyp" || exit 1
        read -r s0 < "$tmp/time0"
        tok=$(awk '{t += NF} END {print t}' "$tmp/ours.txt")
        awk -v s="$s" -v s0="$s0" -v kb="$kb" -v n="$n" -v t="$tok" -v b="$1" -v mt="$mt" 'BEGIN {
            d = s - s0 > 0.01 ? s - s0 : 0.01
            printf "round %d beam %d nmt  (max-tokens %d): %.2f s, %.1f sentences/s, %.0f target tokens/s, peak RSS %d MB; empty input %.2f s, decoding only %.1f decoding-sentences/s\n",
                   '"$r"', b, mt, s, n / s, t / s, kb / 1024, s0, n / d }' | tee -a "$tmp/rows"
        out=$(LD_LIBRARY_PATH=${PEER_BLAS-/usr/lib/x86_64-linux-gnu/openblas-openmp} /usr/bin/time -f "%e %M" -o "$tmp/time" \
            "${peer_env[@]}" /usr/bin/python3 "$top/bench/peer_decode.py" --peer "$peer" --ckpt "$ckpt" --ids "$tmp/src.txt" \
            --beam $1 --batch $2 --alpha 0.6 --threads "$threads" --out "$tmp/peer.txt") || exit 1
        read -r s kb < "$tmp/time"
        same=$(paste "$tmp/ours.txt" "$tmp/peer.txt" | awk -F'\t' '$1 == $2' | wc -l)
        echo "$out" | sed 's/^DECODE //' | /usr/bin/python3 -c "
import json, sys; d = json.load(sys.stdin)
print('round %d beam %d peer (batch %d): %.2f s in decoding (%.2f s whole process), %.1f sentences/s, %.0f target tokens/s, peak RSS %d MB; same output as nmt: %d/%d'
      % ($r, $1, $2, d['decode_s'], $s, d['sent_per_s'], d['tgt_tok_per_s'], $kb / 1024, $same, $n))" | tee -a "$tmp/rows"
    done
done
for b in 1 4; do
    awk -v b="$b" '
        function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
        $4 == b { for (i = 1; i < NF; i++) { if ($(i + 1) == "sentences/s,") v = $i; if ($(i + 1) == "decoding-sentences/s") w = $i }
                  if ($5 == "nmt") { x[++nx] = v; z[nx] = w } else y[++ny] = v }
        END { if (nx && ny) printf "beam %d: median sentences/s nmt %g, peer %g; ratio %.2fx (%d rounds); nmt decoding only %g: %.2fx\n",
                                   b, med(x, nx), med(y, ny), med(x, nx) / med(y, ny), nx, med(z, nx), med(z, nx) / med(y, ny) }' "$tmp/rows"
done
