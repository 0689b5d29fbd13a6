#!/usr/bin/env bash
# backtranslate.sh [OUT]: back-translation by sampling (Edunov et al. 2018) on Multi30k en->de, and
# EMA against checkpoint averaging on the same runs.
#
# Multi30k has no German text beyond its pairs, so the training pairs are split in two: the first
# REAL pairs are the parallel data, the German side of the others is the monolingual text.
#   1. a joint BPE vocabulary on the real pairs; a forward (en->de) baseline and a reverse (de->en)
#      model trained on the real pairs at the same time, one core each, for STEPS steps or TIME1
#      (--max-time: on a busy machine the step count is what the time allowed)
#   2. the monolingual German back-translated by the reverse model with --sample (unrestricted
#      sampling, temperature 1), and the throughput of --sample against --beam 4 on that input
#   3. a forward model trained from scratch on real + synthetic pairs (no tag), the baseline's steps
#   4. val and test_2016_flickr BLEU of both forward models, each as its last checkpoint, the
#      average of its last AVG checkpoints and its EMA weights (--ema EMA)
# Environment: STEPS (1200), TIME1 (24m), REAL (14500), AVG (5, one every SAVE_EVERY=50 steps),
# EMA (0.995), WARMUP (300), MAX_TOKENS (1024), BEAM (4), ALPHA (0.6), SPEED_LINES (1000: the lines of the
# throughput comparison), VOCAB_SIZE (6000), MODEL (the nmt-train options of every model: --preset tiny
# --dropout 0.1 --lr 1.2 --warmup $WARMUP --label-smoothing 0.1 --clip-norm 1), DATA (../../data/multi30k),
# BIN (../../bin), NICE (5).
# Results: OUT/summary.txt (default OUT: out/bt).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/out/bt}
bin=${BIN:-$here/../../bin} data=${DATA:-$here/../../data/multi30k}
steps=${STEPS:-1200} real=${REAL:-14500} avg=${AVG:-5} every=${SAVE_EVERY:-50} ema=${EMA:-0.995}
time1=${TIME1:-24m} tokens=${MAX_TOKENS:-1024} beam=${BEAM:-4} alpha=${ALPHA:-0.6}
nice="nice -n ${NICE:-5}"
read -r -a model <<< "${MODEL:---preset tiny --dropout 0.1 --lr 1.2 --warmup ${WARMUP:-300} --label-smoothing 0.1 --clip-norm 1}"
mkdir -p "$out"
cd "$out"
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a summary.txt; }

# 1. data: real pairs, monolingual German, validation and test text
zcat "$data/train.en.gz" | head -n "$real" > real.en
zcat "$data/train.de.gz" | head -n "$real" > real.de
zcat "$data/train.de.gz" | tail -n +"$((real + 1))" > mono.de
for s in val test_2016_flickr; do for l in en de; do zcat "$data/$s.$l.gz" > "$s.$l"; done; done
log "real pairs $(wc -l < real.en), monolingual German lines $(wc -l < mono.de); $steps steps of $tokens-token batches"
"$bin/nmt-tokenize" --src real.en --tgt real.de | "$bin/nmt-vocab" --size "${VOCAB_SIZE:-6000}" -o vocab.bpe
batches() { # SRC-FILE TGT-FILE NAME
    "$bin/nmt-tokenize" --vocab vocab.bpe --src "$1" --tgt "$2" -o "$3.ids"
    "$bin/nmt-batch" --max-tokens "$tokens" --seed 1 -i "$3.ids" -o "$3.batches"
}
batches real.en real.de fwd; batches val.en val.de val.fwd
batches real.de real.en rev; batches val.de val.en val.rev
train() { # NAME TRAIN-BATCHES VALID-BATCHES THREADS [options]
    local n=$1 b=$2 v=$3 t=$4; shift 4
    mkdir -p "$n"
    $nice "$bin/nmt-train" -q -i "$b" --valid "$v" --vocab vocab.bpe -o "$n/model.ckpt" --force \
        "${model[@]}" --threads "$t" --seed 1 --valid-every 400 \
        --save-every "$every" --keep "$avg" --log "$n/train.csv" "$@" > "$n/train.out" 2>&1
}
t0=$(date +%s)
train base fwd.batches val.fwd.batches 1 --max-steps "$steps" --max-time "$time1" --ema "$ema" & p1=$!
train rev rev.batches val.rev.batches 1 --max-steps "$steps" --max-time "$time1" & p2=$!
wait $p1; wait $p2
laststep() { awk -F, 'NR > 1 {s = $1} END {print s}' "$1/train.csv"; }
log "baseline ($(laststep base) steps) and reverse model ($(laststep rev) steps) trained side by side in $(( $(date +%s) - t0 )) s"

# 2. back-translation by sampling, and its throughput against beam 4 (same model, same input)
head -n "${SPEED_LINES:-1000}" mono.de > speed.de
n=$(wc -l < speed.de)
t0=$(date +%s.%N)
$nice "$bin/nmt-decode" -q -m rev/model.ckpt --sample --seed 1 --threads 2 -i speed.de -o speed.sample.en
t1=$(date +%s.%N)
$nice "$bin/nmt-decode" -q -m rev/model.ckpt --beam 4 --alpha "$alpha" --threads 2 -i speed.de -o speed.beam.en
t2=$(date +%s.%N)
log "$(awk -v n="$n" -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN {printf "translating the first %d monolingual lines: --sample %.1f s (%.1f sentences/s), --beam 4 %.1f s (%.1f sentences/s)", n, b - a, n / (b - a), c - b, n / (c - b)}')"
n=$(wc -l < mono.de)
$nice "$bin/nmt-decode" -q -m rev/model.ckpt --sample --seed 1 --threads 2 -i mono.de -o mono.bt.en
# a sample may be empty: such pairs are left out
paste mono.bt.en mono.de | awk -F'\t' '$1 != "" && $2 != ""' > synth.tsv
cut -f1 synth.tsv | cat real.en - > bt.en
cut -f2 synth.tsv | cat real.de - > bt.de
log "synthetic pairs $(wc -l < synth.tsv) of $n"
batches bt.en bt.de bt

score() { # NAME: last checkpoint, average of the last checkpoints, EMA weights on val and test
    local n=$1 w s b
    "$bin/nmt-avg" -o "$n/avg.ckpt" $(ls "$n"/model.ckpt.step-* | sort -t- -k2 -n | tail -n "$avg") > /dev/null
    for w in last:model.ckpt avg:avg.ckpt ema:model.ckpt.ema; do
        for s in val test_2016_flickr; do
            $nice "$bin/nmt-decode" -q -m "$n/${w#*:}" --beam "$beam" --alpha "$alpha" --threads 1 -i "$s.en" -o "$n/$s.${w%%:*}.hyp"
            b=$("$bin/nmt-bleu" "$s.de" -i "$n/$s.${w%%:*}.hyp" -m bleu -f text | head -n 1)
            echo "$n ${w%%:*} $s $b" >> "$n/scores.txt"
        done
    done
}

# 3. the forward model on real + synthetic pairs, the baseline's steps (the baseline scored meanwhile)
score base & p1=$!
t0=$(date +%s)
train bt bt.batches val.fwd.batches 2 --max-steps "$(laststep base)" --ema "$ema"
log "real + synthetic model trained in $(( $(date +%s) - t0 )) s ($(laststep bt) steps)"
wait $p1
score bt
cat base/scores.txt bt/scores.txt | tee -a summary.txt
