#!/usr/bin/env bats
# `make demo` (pipelines/multi30k demo, and the top-level target) on a slice of the bundled data:
# bounded by steps, it says how long training will take, honours OUT=, and a run shorter than the first periodic checkpoint
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
    # the validation at the end scored BLEU, and the curves were drawn
    [[ "$(tail -n 1 "$D/demo/train.csv" | cut -d, -f12)" =~ ^[0-9]+\.[0-9]{2}$ ]]
    [[ "$output" == *"== training curves: $D/demo/train.svg"* ]]
    grep -q '<svg' "$D/demo/train.svg"
    grep -q 'validation BLEU' "$D/demo/train.svg"
}

@test "demo: the top-level make demo honours OUT= given on its command line" {
    # the top-level Makefile builds and runs the plain build's tools; the first test covers ASan
    [[ "$NMT_BIN" != */san/bin ]] || skip "the top-level demo runs the plain build"
    run env NMT_NO_DEPS=1 make -s -C "$NMT_SRCDIR" demo DATA="$D/data" OUT="$D/top" DEMO_STEPS=2
    [ "$status" -eq 0 ] || { echo "$output"; return 1; }
    [[ "$output" == *"== training 2 steps: about "* ]]
    [ -s "$D/top/model.avg.ckpt" ]
    [ "$(wc -l < "$D/top/test_2016_flickr.hyp")" -eq 20 ]
    [ "$(tail -n 1 "$D/top/train.csv" | cut -d, -f1 | tr -d '"')" = 2 ]
    [ ! -e "$NMT_SRCDIR/out/demo/train.csv" ] || [ "$NMT_SRCDIR/out/demo/train.csv" -ot "$D/top/train.csv" ]
}

@test "demo: reproducible: a second run, with a busy loop taking a core, prints the same scores and translations" {
    # determinism, not memory safety: the first demo test runs the same programs under ASan
    [[ "$NMT_BIN" != */san/bin ]] || skip "the plain build checks reproducibility"
    cd "$BATS_TEST_TMPDIR"
    M=(make -s -C "$NMT_SRCDIR/pipelines/multi30k" demo BIN="$NMT_BIN" DATA="$D/data" DEMO_STEPS=8)
    "${M[@]}" OUT="$D/quiet" > quiet.txt 2>&1
    ( while :; do :; done ) &
    busy=$!
    st=0; "${M[@]}" OUT="$D/loaded" > loaded.txt 2>&1 || st=$?
    kill "$busy"
    [ "$st" -eq 0 ] || { cat loaded.txt; return 1; }
    [ "$(grep -c 'BLEU|nrefs:1' quiet.txt)" -ge 2 ]
    diff <(grep -E '"score"|BLEU\|nrefs|chrF2' quiet.txt) <(grep -E '"score"|BLEU\|nrefs|chrF2' loaded.txt)
    cmp "$D/quiet/test_2016_flickr.hyp" "$D/loaded/test_2016_flickr.hyp"
    # every logged value but the timings (tokens/s, GFLOP/s): the same training, step by step
    diff <(cut -d, -f1-5,7,9- "$D/quiet/train.csv") <(cut -d, -f1-5,7,9- "$D/loaded/train.csv")
}

@test "plot.sh draws the curves of several logs into one SVG; refuses what is not a log" {
    cd "$BATS_TEST_TMPDIR"
    printf 'step,epoch,loss,lr,tokens,tokens_per_s,grad_norm,gflop_s,valid_loss,valid_ppl,valid_nll\n1,1,5.5,0.001,100,1000,1,1\n2,1,5.0,0.002,100,1000,1,1\n2,1,,,,,,,4.9,134.3,4.9\n' > a.csv
    printf 'step,epoch,loss,lr,tokens,tokens_per_s,grad_norm,gflop_s,valid_loss,valid_ppl,valid_nll,valid_bleu\n1,1,6.5,0.001,100,900,1,1\n1,1,,,,,,,6.1,445.8,6.1,1.25\n' > b.csv
    run "$NMT_SRCDIR/pipelines/plot.sh" curves.svg a.csv b.csv
    [ "$status" -eq 0 ]; [ "$output" = curves.svg ]
    grep -q '<svg' curves.svg
    for t in 'loss per target token' 'validation perplexity' 'validation BLEU' 'target tokens per second' 'learning rate' a.csv b.csv; do
        grep -q "$t" curves.svg || { echo "no $t"; return 1; }
    done
    # without a BLEU column there is no BLEU panel
    "$NMT_SRCDIR/pipelines/plot.sh" one.svg a.csv
    fails grep -q 'validation BLEU' one.svg
    run "$NMT_SRCDIR/pipelines/plot.sh" x.svg "$NMT_SRCDIR/README.md"
    [ "$status" -eq 1 ]; [[ "$output" == *"is not a CSV log of nmt-train"* ]]
    run "$NMT_SRCDIR/pipelines/plot.sh" x.svg missing.csv
    [ "$status" -eq 1 ]; [[ "$output" == *"cannot read 'missing.csv'"* ]]
    head -1 a.csv > empty.csv
    run "$NMT_SRCDIR/pipelines/plot.sh" x.svg empty.csv
    [ "$status" -eq 1 ]; [[ "$output" == *"has no rows"* ]]
    run "$NMT_SRCDIR/pipelines/plot.sh" x.svg
    [ "$status" -eq 2 ]
    [ ! -e x.svg ]
}
