#!/usr/bin/env bash
# Builds the nmt-bleu benchmark corpus: 100,000 reference lines from Multi30k train.de (the file
# repeated; every pass after the first appends the following sentence to each line) and a
# hypothesis made by a seeded word-level corruption of each line (drops, substitutions with a
# word from elsewhere, swaps of neighbours, typos). About 2 million tokens a side.
# Usage: bench/bleu_corpus.sh [TRAIN_DE_GZ] [OUTDIR]   -> OUTDIR/ref.de OUTDIR/hyp.de
set -eu
src=${1:-/work/shared/data/multi30k/train.de.gz}
out=${2:-bench/data}
mkdir -p "$out"
zcat "$src" | awk -v N=100000 '
    { line[n++] = $0 }
    END {
        for (i = 0; i < N; i++) {
            k = i % n; pass = int(i / n)
            s = line[k]
            if (pass > 0) s = s " " line[(k + pass) % n]
            print s
        }
    }' > "$out/ref.de"
awk 'BEGIN { srand(20261122) }
    {
        nw = split($0, w, " ")
        for (i = 1; i <= nw; i++) pool[np++ % 5000] = w[i]
        o = ""
        for (i = 1; i <= nw; i++) {
            r = rand(); t = w[i]
            if (r < 0.08) continue                                    # drop
            else if (r < 0.18 && np > 0) t = pool[int(rand() * (np < 5000 ? np : 5000))]  # substitute
            else if (r < 0.24 && i < nw) { t = w[i + 1]; w[i + 1] = w[i] }  # swap with the next
            else if (r < 0.30 && length(t) > 3 && t ~ /[a-z]$/) t = substr(t, 1, length(t) - 1)  # typo (ASCII end)
            o = o (o == "" ? "" : " ") t
        }
        print o
    }' "$out/ref.de" > "$out/hyp.de"
wc -lw "$out/ref.de" "$out/hyp.de"
