#!/usr/bin/env bats
# pipelines/: the Multi30k experiment's Makefile over pipelines/common.mk, end to end on a slice of
# the bundled data with a tiny model and a few steps (the real runs take hours; here every rule runs).

load common

# the experiment's make with a tiny model, few steps and the data slice; extra arguments follow
pipe() {
    make -s -C "$NMT_SRCDIR/pipelines/multi30k" BIN="$NMT_BIN" DATA="$D/data" VOCAB_SIZE=400 \
        MODEL="--layers 1 --d-model 32 --heads 2 --ff 64" TRAIN_OPTS="--lr 2 --warmup 10" \
        STOP="--max-steps 12" SAVE_EVERY=4 AVG=2 VALID_EVERY=6 MAX_TOKENS=1024 BEAM=2 "$@"
}

setup_file() {
    export D="$BATS_FILE_TMPDIR"
    mkdir -p "$D/data"
    for split in train val test_2016_flickr; do
        n=400; [ "$split" = train ] || n=30
        for l in en de; do
            for sfx in "" .lc.norm.tok; do
                zcat "$NMT_SRCDIR/data/multi30k/$split$sfx.$l.gz" | sed -n "1,${n}p" | gzip > "$D/data/$split$sfx.$l.gz"
            done
        done
    done
}

@test "the lit variant: vocabulary, batches, an ensemble of two models trained side by side, translations and scores" {
    run pipe VARIANT=lit OUT="$D/lit" ALPHA=1.0
    [ "$status" -eq 0 ] || { echo "$output"; return 1; }
    [[ "$output" == *"== seed 1:"*"== seed 2:"* ]]
    [[ "$output" == *"== lit: test (test_2016_flickr)"* ]]
    for f in vocab.bpe train.batches val.batches val.hyp test_2016_flickr.hyp; do
        [ -s "$D/lit/$f" ] || { echo "missing $f"; return 1; }
    done
    [ -e "$D/lit/ensemble.trained" ]
    [ "$(wc -l < "$D/lit/test_2016_flickr.hyp")" -eq 30 ]
    for s in 1 2; do
        for f in model.ckpt model.avg.ckpt train.csv train.log; do
            [ -s "$D/lit/seed-$s/$f" ] || { echo "missing seed-$s/$f"; return 1; }
        done
        # two periodic checkpoints averaged
        [ "$(ls "$D/lit/seed-$s"/model.ckpt.step-* | wc -l)" -eq 2 ]
    done
    [ ! -e "$D/lit/model.ckpt" ]
    # different seeds, different models; the translations are their ensemble's
    fails cmp -s "$D/lit/seed-1/model.avg.ckpt" "$D/lit/seed-2/model.avg.ckpt"
    nmt-decode -m "$D/lit/seed-1/model.avg.ckpt" -m "$D/lit/seed-2/model.avg.ckpt" --beam 2 --alpha 1.0 \
        < "$D/lit/test_2016_flickr.en" | same_as "$D/lit/test_2016_flickr.hyp"
    # scored as tokenized text (--tokenize none), with BLEU and chrF signatures
    grep -q '^ *BLEU|.*tok:none' "$D/lit/test_2016_flickr.scores"
    grep -q '^chrF2|' "$D/lit/test_2016_flickr.scores"
}

@test "SEEDS with one seed: one model, its checkpoints averaged" {
    run pipe VARIANT=lit OUT="$D/one" SEEDS=1 ALPHA=1.0
    [ "$status" -eq 0 ] || { echo "$output"; return 1; }
    for f in model.ckpt model.avg.ckpt val.hyp test_2016_flickr.hyp; do
        [ -s "$D/one/$f" ] || { echo "missing $f"; return 1; }
    done
    [ "$(ls "$D/one"/model.ckpt.step-* | wc -l)" -eq 2 ]
    [ ! -e "$D/one/seed-1" ]
    nmt-decode -m "$D/one/model.avg.ckpt" --beam 2 --alpha 1.0 < "$D/one/test_2016_flickr.en" |
        same_as "$D/one/test_2016_flickr.hyp"
}

@test "BPE_DROPOUT: the training ids hold BPE_COPIES differently segmented copies; val and test do not" {
    run pipe VARIANT=lit OUT="$D/bd" BPE_DROPOUT=0.1 BPE_COPIES=3 batches texts
    [ "$status" -eq 0 ] || { echo "$output"; return 1; }
    run pipe VARIANT=lit OUT="$D/nobd" batches
    [ "$status" -eq 0 ] || { echo "$output"; return 1; }
    [ "$(nmt-cat -c "$D/bd/train.ids")" -eq 1200 ]
    [ "$(nmt-cat -c "$D/nobd/train.ids")" -eq 400 ]
    cmp "$D/bd/vocab.bpe" "$D/nobd/vocab.bpe"
    cmp "$D/bd/val.ids" "$D/nobd/val.ids"
    # copy k of pair i is record i + 400 k: the copies differ from each other and from the plain
    # segmentation, and decode to the same text
    nmt-cat "$D/bd/train.ids" | cut -f2- > "$D/bd.txt"
    nmt-cat "$D/nobd/train.ids" | cut -f2- > "$D/plain.txt"
    for k in 0 1 2; do sed -n "$((400 * k + 1)),$((400 * (k + 1)))p" "$D/bd.txt" > "$D/copy$k"; done
    fails cmp -s "$D/copy0" "$D/copy1"
    fails cmp -s "$D/copy0" "$D/plain.txt"
    n=$(paste -d'|' "$D/copy0" "$D/plain.txt" | awk -F'|' '$1 != $2' | wc -l)
    [ "$n" -gt 100 ]
    [ "$n" -lt 400 ]
    # longer on average: merges were skipped
    [ "$(wc -w < "$D/copy0")" -gt "$(wc -w < "$D/plain.txt")" ]
    # every copy decodes to the training text
    nmt-tokenize --vocab "$D/bd/vocab.bpe" --decode -i "$D/bd/train.ids" > "$D/bd.dec"
    nmt-tokenize --vocab "$D/bd/vocab.bpe" --decode -i "$D/nobd/train.ids" > "$D/plain.dec"
    [ -s "$D/plain.dec" ]
    cat "$D/plain.dec" "$D/plain.dec" "$D/plain.dec" | same_as "$D/bd.dec"
    # no temporary files left behind
    [ -z "$(ls "$D/bd" | grep tmp)" ]
}

@test "BACKEND and the usual overrides reach the tools: an unknown backend fails the training rule" {
    run pipe VARIANT=raw OUT="$D/nob" BACKEND=nosuch train
    [ "$status" -ne 0 ]
    [[ "$output" == *"nosuch"* ]]
    [ ! -e "$D/nob/model.ckpt" ]
    # with several seeds too: the failed trainings fail the rule
    run pipe VARIANT=raw OUT="$D/nob2" BACKEND=nosuch SEEDS="1 2" train
    [ "$status" -ne 0 ]
    [[ "$output" == *"nosuch"* ]]
    [ ! -e "$D/nob2/ensemble.trained" ]
}

@test "backtranslate.sh: reverse model, sampled back-translations, real + synthetic training, EMA and averages scored" {
    run env DATA="$D/data" BIN="$NMT_BIN" REAL=300 STEPS=6 SAVE_EVERY=2 AVG=2 MAX_TOKENS=1024 SPEED_LINES=20 \
        VOCAB_SIZE=400 MODEL="--layers 1 --d-model 32 --heads 2 --ff 64 --lr 2 --warmup 10" NICE=0 \
        "$NMT_SRCDIR/pipelines/multi30k/backtranslate.sh" "$D/bt"
    [ "$status" -eq 0 ] || { echo "$output"; return 1; }
    # the held-out German side, back-translated line for line by sampling
    [ "$(wc -l < "$D/bt/mono.de")" -eq 100 ]
    [ "$(wc -l < "$D/bt/mono.bt.en")" -eq 100 ]
    fails cmp -s "$D/bt/speed.sample.en" "$D/bt/speed.beam.en"
    grep -q 'translating the first 20 monolingual lines: --sample [0-9.]* s' "$D/bt/summary.txt"
    grep -q '^== .* synthetic pairs [0-9]* of 100$' "$D/bt/summary.txt"
    [ "$(wc -l < "$D/bt/bt.en")" -gt 300 ]
    # both forward models trained the same steps, each scored as last, average and EMA on val and test
    [ "$(awk -F, 'NR > 1 { s = $1 } END { print s }' "$D/bt/bt/train.csv")" -eq 6 ]
    [ "$(grep -c '^\(base\|bt\) \(last\|avg\|ema\) \(val\|test_2016_flickr\) BLEU|' "$D/bt/summary.txt")" -eq 12 ]
}
