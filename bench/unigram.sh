#!/usr/bin/env bash
# nmt-vocab --type unigram against spm_train --model_type=unigram (needs spm_train, spm_encode and
# spm_export_vocab, Debian package `sentencepiece`), on Multi30k train en+de, 8000 pieces, character
# coverage 1.0, each normalisation of NORMS (default "identity nmt_nfkc"; nmt_nfkc: each tool its own
# map, nmt's from utf8proc's NFKC, spm's built in) for both:
#  (1) learning time with 1 and 2 threads (--threads, --num_threads), best of 3 runs, wall clock and
#      CPU (user + system), peak memory;
#  (2) quality on test_2016_flickr en and de under each model (spm_encode's segmentation): pieces per
#      sentence and the log-probability of that segmentation per sentence (the sum of its pieces'
#      scores, the model's own unigram likelihood of its best path); the vocabularies' overlap;
#  (3) nmt-tokenize gives spm_encode's ids with nmt's model on every train and test line.
# Run from the repository root after `make`:  [NORMS=...] bash bench/unigram.sh [MULTI30K_DIR]
set -euo pipefail
B=${NMT_BIN:-$PWD/bin}
D=${1:-data/multi30k}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
for f in train test_2016_flickr; do for l in en de; do zcat "$D/$f.$l.gz" > "$W/$f.$l"; done; done
cat "$W/test_2016_flickr.en" "$W/test_2016_flickr.de" > "$W/test.both"
best() { # best of 3 of command "$@": prints "wall cpu maxrss_kb"
    for _ in 1 2 3; do
        /usr/bin/time -f "%e %U %S %M" -o "$W/t" "$@" > /dev/null 2>&1
        awk '{ printf "%.2f %.2f %d\n", $1, $2 + $3, $4 }' "$W/t"
    done | sort -n | head -1
}
for N in ${NORMS:-identity nmt_nfkc}; do
    echo "## --normalize $N"
    echo "# (1) learning time: best of 3 (wall s, cpu s, peak KB)"
    for t in 1 2; do
        echo "nmt-vocab threads=$t: $(best "$B/nmt-vocab" --type unigram --size 8000 --normalize $N --threads $t -o "$W/nmt_${N}_t$t.model" "$W/train.en" "$W/train.de")"
        echo "spm_train threads=$t: $(cd "$W" && best spm_train --input=train.en,train.de --model_prefix=spm_${N}_t$t --model_type=unigram \
            --vocab_size=8000 --normalization_rule_name=$N --character_coverage=1.0 --num_threads=$t)"
    done
    echo "# (2) quality on test_2016_flickr (spm_encode's segmentation under each model)"
    for m in nmt_${N}_t1 spm_${N}_t1; do
        spm_export_vocab --model="$W/$m.model" > "$W/$m.vocab"
        for f in test_2016_flickr.en test_2016_flickr.de test.both; do
            spm_encode --model="$W/$m.model" --output_format=id < "$W/$f" |
                awk -v V="$W/$m.vocab" -v name="$m $f" 'BEGIN { while ((getline l < V) > 0) { split(l, x, "\t"); s[i++] = x[2] } }
                    { n += NF; for (k = 1; k <= NF; k++) lp += s[$k]; lines++ }
                    END { printf "%s: %.3f pieces/sentence, log-prob %.2f/sentence (%d lines)\n", name, n / lines, lp / lines, lines }'
        done
    done
    cut -f1 "$W/nmt_${N}_t1.vocab" | sort > "$W/a"; cut -f1 "$W/spm_${N}_t1.vocab" | sort > "$W/b"
    echo "vocabulary overlap: $(comm -12 "$W/a" "$W/b" | wc -l) of $(wc -l < "$W/a") pieces (specials included)"
    echo "# (3) nmt-tokenize against spm_encode with nmt's model"
    for f in train.en train.de test.both; do
        spm_encode --model="$W/nmt_${N}_t1.model" --output_format=id < "$W/$f" |
            awk '{ s = ""; for (i = 1; i <= NF; i++) s = s (i > 1 ? " " : "") ($i == 0 ? 3 : $i < 3 ? $i : $i + 1); print s }' > "$W/want"
        "$B/nmt-tokenize" --vocab "$W/nmt_${N}_t1.model" --text=ids "$W/$f" > "$W/got"
        echo "$f: $(wc -l < "$W/$f") lines, $(diff "$W/want" "$W/got" | grep -c '^<' || true) differ"
    done
done
