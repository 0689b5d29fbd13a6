#!/usr/bin/env bash
# SentencePiece models as nmt vocabularies, by hand (needs spm_encode and spm_train, Debian package
# `sentencepiece`): (1) nmt-tokenize --vocab x.model gives spm_encode's ids on every Multi30k line
# (train, val, test_2016_flickr; en and de) for the six models of tests/fixtures/spm; (2) encoding
# speed against spm_encode, one thread each, same input (Multi30k train en+de), best of 3 runs, with
# the fixture models (600 pieces) and 8000-piece models learnt on train en+de.
# Run from the repository root after `make`:  bash bench/spm.sh [MULTI30K_DIR]
# (SPM_SPEED_ONLY=1: only (2)). Times: best of 3, wall clock and CPU (user + system).
set -euo pipefail
B=${NMT_BIN:-$PWD/bin}
D=${1:-data/multi30k}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
F=tests/fixtures/spm
for m in unigram_nfkc unigram_nmt_nfkc unigram_identity bpe_nfkc bpe_nmt_nfkc bpe_identity; do
    if [ -f "$F/$m.model" ]; then cp "$F/$m.model" "$W/$m.model"; else xz -dc "$F/$m.model.xz" > "$W/$m.model"; fi
done
# (1) identical ids: spm's ids mapped to nmt's numbering (unk 0 -> 3, bos 1, eos 2, the others + 1)
total=0; differ=0
[ -n "${SPM_SPEED_ONLY:-}" ] || for m in unigram_nfkc unigram_nmt_nfkc unigram_identity bpe_nfkc bpe_nmt_nfkc bpe_identity; do
    for f in train val test_2016_flickr; do
        for l in en de; do
            zcat "$D/$f.$l.gz" > "$W/in"
            spm_encode --model="$W/$m.model" --output_format=id < "$W/in" |
                awk '{ s = ""; for (i = 1; i <= NF; i++) s = s (i > 1 ? " " : "") ($i == 0 ? 3 : $i < 3 ? $i : $i + 1); print s }' > "$W/want"
            "$B/nmt-tokenize" --vocab "$W/$m.model" --text=ids "$W/in" > "$W/got"
            n=$(wc -l < "$W/in"); d=$(diff "$W/want" "$W/got" | grep -c '^<' || true)
            total=$((total + n)); differ=$((differ + d))
            echo "$m $f.$l: $n lines, $d differ"
        done
    done
done
[ -n "${SPM_SPEED_ONLY:-}" ] || echo "identical: $((total - differ)) of $total lines"
# (2) speed
zcat "$D/train.en.gz" "$D/train.de.gz" > "$W/ende"
for t in unigram bpe; do
    spm_train --input="$W/ende" --model_prefix="$W/${t}_8000" --model_type=$t --vocab_size=8000 \
        --num_threads=1 --minloglevel=2 > /dev/null 2>&1
done
best() { # best of 3 runs of "$@": wall-clock and CPU (user + system) seconds
    local w= c= out
    for _ in 1 2 3; do
        out=$( { TIMEFORMAT='%R %U %S'; time "$@" > /dev/null; } 2>&1 )
        read -r w c <<< "$(python3 -c "import sys; r, u, s = map(float, sys.argv[1].split()); w, c = sys.argv[2], sys.argv[3]
print(min(r, float(w)) if w else r, min(u + s, float(c)) if c else u + s)" "$out" "$w" "$c")"
    done
    echo "$w $c"
}
lines=$(wc -l < "$W/ende")
for m in unigram_nfkc bpe_nfkc unigram_identity bpe_identity unigram_8000 bpe_8000; do
    s=$(best spm_encode --model="$W/$m.model" --output_format=id --input="$W/ende")
    n=$(best "$B/nmt-tokenize" --vocab "$W/$m.model" -o /dev/null "$W/ende")
    t=$(best "$B/nmt-tokenize" --vocab "$W/$m.model" --text=ids "$W/ende")
    python3 -c "import sys
(sw, sc), (nw, nc), (tw, tc) = (map(float, a.split()) for a in sys.argv[2:5])
print(f'{sys.argv[1]}: wall spm_encode {sw:.2f} s, nmt-tokenize {nw:.2f} s (stream) {tw:.2f} s (--text=ids): {sw / nw:.1f}x, {sw / tw:.1f}x;'
      f' cpu {sc:.2f} s, {nc:.2f} s, {tc:.2f} s: {sc / nc:.1f}x, {sc / tc:.1f}x ({sys.argv[5]} lines)')" "$m" "$s" "$n" "$t" "$lines"
done
