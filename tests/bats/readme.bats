#!/usr/bin/env bats
# The documented pipelines run as written: README.md's "The pipeline" block, the example of
# nmt(7), and the one-line example of nmt(1), on a slice of the bundled data with the step counts
# made small. Each substitution must find its text, so the documents cannot drift unnoticed.

load common

setup() {
    W="$BATS_TEST_TMPDIR/w"
    mkdir -p "$W/data/multi30k"
    for s in train val test_2016_flickr; do
        n=300; [ "$s" = train ] || n=20
        for l in en de; do
            zcat "$NMT_SRCDIR/data/multi30k/$s.$l.gz" | sed -n "1,${n}p" | gzip > "$W/data/multi30k/$s.$l.gz"
        done
    done
    ln -s "$NMT_BIN" "$W/bin"
}

# Substitutes FROM by TO in the script SCRIPT, failing when FROM is not there.
subst() {
    grep -qF -- "$2" "$1" || { echo "'$2' not found in the documented commands"; return 1; }
    sed -i "s|$2|$3|g" "$1"
}

# Runs the pipeline script $1 in the work folder with fewer steps; checks every documented output.
run_pipeline() {
    subst "$1" "--max-steps 10000" "--max-steps 6"
    subst "$1" "--save-every 500" "--save-every 2"
    (cd "$W" && bash -e -o pipefail "$1") > "$W/out" 2>&1 || { cat "$W/out"; return 1; }
    for f in v.bpe train.batches val.batches model.ckpt model.avg.ckpt hyp.de; do
        [ -s "$W/$f" ] || { echo "missing $f"; return 1; }
    done
    [ "$(wc -l < "$W/hyp.de")" -eq 20 ]
    grep -q '"name": "BLEU"' "$W/out"
    grep -q '"name": "chrF2"' "$W/out"
}

@test "readme: the pipeline of README.md runs as written" {
    awk '/^## The pipeline/ {f = 1; next} f && /^    / {b = 1; sub(/^    /, ""); print; next} b && !/^    / {exit}' \
        "$NMT_SRCDIR/README.md" > "$W/readme.sh"
    [ "$(wc -l < "$W/readme.sh")" -ge 8 ]
    run_pipeline "$W/readme.sh"
}

@test "readme: the pipeline of nmt(7) runs as written" {
    awk '/^\.SS The pipeline/ {f = 1; next} f && /^\.nf/ {b = 1; next} b && /^\.fi/ {exit} b' \
        "$NMT_SRCDIR/man/nmt.7" | sed 's/\\-/-/g; s/\\\\/\\/g' > "$W/man7.sh"
    [ "$(wc -l < "$W/man7.sh")" -ge 8 ]
    run_pipeline "$W/man7.sh"
}

@test "readme: the example of nmt(1) runs as written" {
    cd "$W"
    zcat data/multi30k/train.en.gz > train.en; zcat data/multi30k/train.de.gz > train.de
    paste train.en train.de > train.tsv   # with its lines holding '"': plain TSV reads them as they are
    nmt-tokenize --src train.en --tgt train.de | nmt-vocab --size 500 -o v.bpe
    awk '/^\.nf/ {b = 1; next} b && /^\.fi/ {exit} b' "$NMT_SRCDIR/man/nmt.1" | sed 's/\\-/-/g' > nmt1.sh
    [ "$(wc -l < nmt1.sh)" -eq 1 ]
    subst nmt1.sh "nmt train " "nmt train --max-steps 3 -q "
    PATH="$W/bin:$PATH" run bash -e -o pipefail nmt1.sh
    [ "$status" -eq 0 ] || { echo "$output"; return 1; }
    [ -s m.ckpt ]
}
