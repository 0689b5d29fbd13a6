#!/usr/bin/env bash
# How often CTranslate2 translates an exported nmt model as nmt-decode does (greedy):
#   bash bench/ct2_agree.sh CHECKPOINT VOCAB SOURCE [MAXLEN]
# Exports CHECKPOINT with nmt-export --to ctranslate2 (float32, and --quantize int8), segments SOURCE
# with VOCAB (the model's vocabulary) into pieces, translates them with ct2-translator (beam 1, at
# most MAXLEN pieces, default 256, empty outputs allowed, sources cut as nmt-decode cuts them) and nmt-decode (beam 1, the same bound:
# --max-len-a 0 --max-len-b MAXLEN+1, which counts the end token), turns CTranslate2's pieces back
# into text with nmt-tokenize --decode --text, and prints how many lines are identical: float32
# against nmt-decode's float32, then CTranslate2's int8 (the int8 export) against the same.
# CT2=DIR names the CTranslate2 build (default ../shared/peers/ctranslate2; ct2-translator in
# DIR/bin, its library in DIR/lib, found through LD_LIBRARY_PATH as well). THREADS: threads of both
# (default 2). Needs the peer's run-time packages (its README: libdnnl2, libgomp1).
set -u
[ $# -ge 3 ] || { sed -n 2,13p "$0" >&2; exit 2; }
ckpt=$1 vocab=$2 src=$3 maxlen=${4:-256} threads=${THREADS:-2}
top=$(cd "$(dirname "$0")/.." && pwd); B=$top/bin
ct2=${CT2:-$top/../shared/peers/ctranslate2}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export LD_LIBRARY_PATH="$ct2/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$B/nmt-export" -m "$ckpt" --to ctranslate2 -o "$tmp/f32" || exit 1
"$B/nmt-export" -m "$ckpt" --to ctranslate2 -o "$tmp/i8" --quantize int8 || exit 1
"$B/nmt-tokenize" --vocab "$vocab" --text=pieces < "$src" > "$tmp/src.pieces" || exit 1
"$B/nmt-decode" -m "$ckpt" --beam 1 --max-len-a 0 --max-len-b $((maxlen + 1)) --threads "$threads" --word-scores \
    < "$src" > "$tmp/nmt.scored" || exit 1
cut -f1 "$tmp/nmt.scored" > "$tmp/nmt.txt"
n=$(wc -l < "$src")
# sources longer than the model's maximum length: both keep the first max_len - 1 pieces and the end
mlen=$("$B/nmt-cat" --header "$ckpt" | awk -F '\t' '$1 == "model.max_len" {print $2}')
for m in "f32 float32" "i8 int8"; do
    set -- $m
    s0=$(date +%s.%N)
    "$ct2/bin/ct2-translator" --model "$tmp/$1" --compute_type "$2" --beam_size 1 --max_decoding_length "$maxlen" \
        --min_decoding_length 0 --max_input_length "$mlen" --intra_threads "$threads" --with_score \
        < "$tmp/src.pieces" > "$tmp/$1.scored" || exit 1
    s1=$(date +%s.%N)
    sed 's/^[^|]* ||| //' "$tmp/$1.scored" > "$tmp/$1.pieces"
    "$B/nmt-tokenize" --decode --vocab "$vocab" --text < "$tmp/$1.pieces" > "$tmp/$1.txt" || exit 1
    same=$(awk 'NR == FNR {a[FNR] = $0; next} FNR in a && a[FNR] == $0' "$tmp/nmt.txt" "$tmp/$1.txt" | wc -l)
    echo "ct2 $2: $same of $n lines identical to nmt-decode's greedy float32 ($(awk -v a="$s0" -v b="$s1" 'BEGIN {printf "%.1f", b - a}') s)"
    # CTranslate2's score (length penalty 1) is the mean log-probability of the output pieces, the end's
    # included when it was produced: the same mean of nmt-decode --word-scores, on the identical lines
    # (not when the length bound cut the output: no end then, nmt-decode gives it 0)
    python3 - "$tmp/nmt.scored" "$tmp/$1.scored" "$tmp/nmt.txt" "$tmp/$1.txt" "$maxlen" <<'PY'
import sys
ns, cs, nt, ct = (open(f, encoding='utf-8').read().split('\n')[:-1] for f in sys.argv[1:5])
worst, k = 0.0, 0
for a, b, x, y in zip(ns, cs, nt, ct):
    if x != y:
        continue
    w = [float(v) for v in a.split('\t')[-1].split()]
    score, pieces = b.split(' ||| ', 1)
    if len(pieces.split()) == int(sys.argv[5]):
        w = w[:-1]
    worst, k = max(worst, abs(sum(w) / len(w) - float(score))), k + 1
print('  sentence scores (mean log-probability a piece) of the %d identical lines: largest difference %.2g' % (k, worst))
PY
    [ "${KEEP:-}" ] && cp "$tmp/$1.txt" "$KEEP.$1.txt"
    [ "$1" = f32 ] || continue
    # Per-token scores: CTranslate2 scores its own output pieces (--task score --with_tokens_score:
    # one log-probability a piece, the end's last); on the identical lines that ended before the
    # length bound these are the pieces nmt-decode produced, so each token's score is compared with
    # nmt-decode --word-scores
    "$ct2/bin/ct2-translator" --model "$tmp/$1" --compute_type "$2" --task score --with_tokens_score \
        --max_input_length "$mlen" --intra_threads "$threads" --src "$tmp/src.pieces" --tgt "$tmp/$1.pieces" \
        > "$tmp/$1.tokscores" || exit 1
    python3 - "$tmp/nmt.scored" "$tmp/$1.tokscores" "$tmp/nmt.txt" "$tmp/$1.txt" "$maxlen" <<'PY'
import sys
ns, cs, nt, ct = (open(f, encoding='utf-8').read().split('\n')[:-1] for f in sys.argv[1:5])
worst, lines, toks, over = 0.0, 0, 0, 0
for a, b, x, y in zip(ns, cs, nt, ct):
    w = [float(v) for v in a.split('\t')[-1].split()]
    _, pieces, scores = b.split(' ||| ')
    c = [float(v) for v in scores.split()]
    if x != y or len(pieces.split()) > int(sys.argv[5]) or len(w) != len(c):
        continue
    d = max(abs(p - q) for p, q in zip(w, c))
    worst, lines, toks, over = max(worst, d), lines + 1, toks + len(w), over + sum(abs(p - q) > 1e-4 for p, q in zip(w, c))
print('  per-token scores on %d identical lines ended before the bound (%d tokens, the end included): '
      'largest difference %.2g, %d tokens differ by more than 1e-4' % (lines, toks, worst, over))
PY
done
[ "${KEEP:-}" ] && cp "$tmp/nmt.txt" "$KEEP.nmt.txt"
exit 0
