#!/usr/bin/env bash
# How often Marian translates an nmt model as nmt-decode does, and nmt an imported Marian model as
# marian-decoder does (greedy and beam 4), with per-token scores:
#   bash bench/marian_agree.sh export CHECKPOINT VOCAB SOURCE
#       nmt -> Marian: exports CHECKPOINT with nmt-export --to marian, segments SOURCE (raw text) with
#       VOCAB into pieces for marian-decoder; nmt-decode translates SOURCE itself; Marian's pieces
#       are turned back into text with nmt-tokenize --decode --text.
#   bash bench/marian_agree.sh import MODEL.npz VOCAB.yml PIECES
#       Marian -> nmt: imports MODEL.npz with nmt-import --from marian; both translate PIECES
#       (pre-segmented text) and write pieces; marian-scorer scores Marian's greedy translations and
#       nmt-decode --score the same pairs.
# Both engines: beam 1 and 4 (no length normalisation: marian-decoder -n 0, nmt-decode --alpha 0),
# one sentence a batch (Marian bounds the output by 3 x the batch's longest source with its end;
# nmt-decode --max-len-a 3 --max-len-b 1 is that bound for one sentence), THREADS threads (default 2).
# Prints, for each beam, the lines identical, and on those lines the largest difference of a token's
# log-probability (nmt-decode --word-scores, marian-decoder --word-scores) and how many tokens differ
# by more than 1e-4. MARIAN=DIR names the Marian build (default ../shared/peers/marian).
set -u
[ $# -ge 4 ] && { [ "$1" = export ] || [ "$1" = import ]; } || { sed -n 2,17p "$0" >&2; exit 2; }
dir=$1 model=$2 vocab=$3 src=$4 threads=${THREADS:-2}
top=$(cd "$(dirname "$0")/.." && pwd); B=$top/bin
marian=${MARIAN:-$top/../shared/peers/marian}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

if [ "$dir" = export ]; then
    ckpt=$model npz=$tmp/m.npz yml=$tmp/m.vocab.yml
    "$B/nmt-export" -m "$ckpt" --to marian -o "$npz" || exit 1
    "$B/nmt-tokenize" --vocab "$vocab" --text=pieces < "$src" > "$tmp/src.pieces" || exit 1
    nmt_in=$src
else
    npz=$model yml=$vocab ckpt=$tmp/m.ckpt
    "$B/nmt-import" --from marian "$npz" --vocab "$yml" -o "$ckpt" || exit 1
    cp "$src" "$tmp/src.pieces"
    nmt_in=$src
fi
n=$(wc -l < "$src")
for beam in 1 4; do
    "$B/nmt-decode" -m "$ckpt" -b "$beam" --alpha 0 --max-len-a 3 --max-len-b 1 --threads "$threads" --word-scores \
        < "$nmt_in" > "$tmp/nmt.$beam" || exit 1
    "$marian/bin/marian-decoder" -m "$npz" -v "$yml" "$yml" -b "$beam" -n 0 --max-length-factor 3 --mini-batch 1 \
        --maxi-batch 1 --cpu-threads "$threads" --n-best --word-scores --allow-unk --quiet \
        < "$tmp/src.pieces" > "$tmp/marian.$beam" || exit 1
    # the best hypothesis of each sentence, as text (export) or pieces (import)
    awk -F ' [|][|][|] ' '!($1 in seen) { seen[$1] = 1; print $2 }' "$tmp/marian.$beam" | sed 's/ *$//' > "$tmp/marian.$beam.pieces"
    if [ "$dir" = export ]; then
        "$B/nmt-tokenize" --decode --vocab "$vocab" --text < "$tmp/marian.$beam.pieces" > "$tmp/marian.$beam.txt" || exit 1
    else
        cp "$tmp/marian.$beam.pieces" "$tmp/marian.$beam.txt"
    fi
    python3 - "$tmp/nmt.$beam" "$tmp/marian.$beam" "$tmp/marian.$beam.txt" "$beam" "$n" <<'PY'
import sys
nmt = [l.rstrip('\n').split('\t') for l in open(sys.argv[1], encoding='utf-8')]
best = {}
for l in open(sys.argv[2], encoding='utf-8'):
    f = l.split(' ||| ')
    best.setdefault(int(f[0]), f)
texts = [l.rstrip('\n') for l in open(sys.argv[3], encoding='utf-8')]
same, worst, toks, over = 0, 0.0, 0, 0
for i, (text, scores) in enumerate(nmt):
    # an imported vocabulary's pieces come out of nmt-decode with U+2581 as a space, a space between
    if ' '.join(text.split()) != ' '.join(texts[i].replace('\u2581', ' ').split()):
        continue
    same += 1
    ms = [float(x) for x in best[i][2].split()[1:]]
    ns = [float(x) for x in scores.split()]
    if len(ns) == len(ms) + 1:  # cut at the length bound: nmt adds the end of sentence's score (0)
        ns = ns[:-1]
    d = [abs(a - b) for a, b in zip(ms, ns)]
    worst, toks, over = max([worst] + d), toks + len(d), over + sum(x > 1e-4 for x in d)
print('beam %s: %d of %s lines identical; per-token scores on them (%d tokens, the end included): '
      'largest difference %.2g, %d tokens differ by more than 1e-4' % (sys.argv[4], same, sys.argv[5], toks, worst, over))
PY
done
if [ "$dir" = import ]; then
    # sentence scores of given pairs: Marian's greedy translations scored by both
    "$marian/bin/marian-scorer" -m "$npz" -v "$yml" "$yml" --mini-batch 1 --maxi-batch 1 --cpu-threads "$threads" --quiet \
        -t "$tmp/src.pieces" "$tmp/marian.1.pieces" > "$tmp/scorer" || exit 1
    "$B/nmt-decode" -m "$ckpt" --score --src "$tmp/src.pieces" --tgt "$tmp/marian.1.pieces" --threads "$threads" \
        > "$tmp/nmt.score" || exit 1
    paste -d ' ' "$tmp/nmt.score" "$tmp/scorer" |
        awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > w) w = d; k++ } END { printf "scores of Marian'"'"'s greedy pairs: %d lines, largest difference from marian-scorer %.2g\n", k, w }'
fi
exit 0
