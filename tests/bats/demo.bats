#!/usr/bin/env bats
# `make demo` (pipelines/multi30k demo) on a slice of the bundled data: bounded by steps, it says
# how long training will take, honours OUT=, and a run shorter than the first periodic checkpoint
# still averages, translates and scores.

load common

setup_file() {
    export D="$BATS_FILE_TMPDIR"
    mkdir -p "$D/data"
    for split in train val test_2016_flickr; do
        n=300; [ "$split" = train ] || n=20
        for l in en de; do
            zcat "$NMT_SRCDIR/data/multi30k/$split.$l.gz" | sed -n "1,${n}p" | gzip > "$D/data/$split.$l.gz"
        done
    done
}

@test "demo: bounded by steps, an estimate first, OUT= honoured, scores without any periodic checkpoint" {
    run make -s -C "$NMT_SRCDIR/pipelines/multi30k" demo BIN="$NMT_BIN" DATA="$D/data" OUT="$D/demo" DEMO_STEPS=8
    [ "$status" -eq 0 ] || { echo "$output"; return 1; }
    [[ "$output" == *"== training 8 steps: about "*" minutes on this machine ("*" s a step)"* ]]
    [[ "$output" == *"== raw: test (test_2016_flickr)"*"BLEU|nrefs:1"* ]]
    [[ "$output" == *"== examples (source / reference / translation)"* ]]
    [ -s "$D/demo/model.avg.ckpt" ]
    [ "$(ls "$D/demo" | grep -c 'model.ckpt.step-')" -eq 0 ]
    [ "$(wc -l < "$D/demo/test_2016_flickr.hyp")" -eq 20 ]
    # exactly the steps asked for: the log's last row is step 8
    [ "$(tail -n 1 "$D/demo/train.csv" | cut -d, -f1 | tr -d '"')" = 8 ]
}
