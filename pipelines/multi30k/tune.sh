#!/usr/bin/env bash
# tune.sh NAME VARIANT STEPS ALPHAS [nmt-train options...]
# One tuning run of the Multi30k experiment, scored on the validation set only:
# trains on out/VARIANT (prepare it first with `make VARIANT=... OUT=out/VARIANT batches texts`),
# saves every SAVE_EVERY steps, averages the last AVG checkpoints, decodes val with beam BEAM at each
# length-penalty ALPHA of the list, and prints one line per alpha: "BLEU NAME VARIANT alpha=A :: signature".
# With TEST=1 it also decodes and scores test_2016_flickr (do that once, for the chosen configuration).
# Environment: BACKEND (cpu), SAVE_EVERY (500), AVG (10), BEAM (5), VALID_EVERY (1000), BIN (../../bin).
# Example: ./tune.sh L5 lit 10000 "0.6 1.0 1.4" --preset tiny --dropout 0.3 --lr 2 --warmup 4000
set -u
[ $# -ge 4 ] || { sed -n 2,10p "$0" >&2; exit 2; }
name=$1 v=$2 steps=$3 alphas=$4; shift 4
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../../bin} backend=${BACKEND:-cpu} every=${SAVE_EVERY:-500} avg=${AVG:-10} beam=${BEAM:-5}
g=$here/out/$v d=$here/out/tune/$name
for f in vocab.bpe train.batches val.batches val.en val.de; do
    [ -s "$g/$f" ] || { echo "tune.sh: $g/$f is missing: run make VARIANT=$v OUT=out/$v batches texts" >&2; exit 1; }
done
bleu=(); case $v in lit*) bleu=(--tokenize none);; esac
mkdir -p "$d" || exit 1
t0=$(date +%s)
"$bin/nmt-train" --backend "$backend" -q -i "$g/train.batches" --valid "$g/val.batches" --vocab "$g/vocab.bpe" \
    -o "$d/model.ckpt" --force --max-steps "$steps" --save-every "$every" --keep "$avg" --valid-every "${VALID_EVERY:-1000}" \
    --log "$d/train.csv" "$@" > "$d/train.out" 2>&1 || { echo "tune.sh: $name: nmt-train failed:" >&2; tail -3 "$d/train.out" >&2; exit 1; }
t1=$(date +%s)
"$bin/nmt-avg" -o "$d/avg.ckpt" $(ls "$d"/model.ckpt.step-* | sort -t- -k2 -n | tail -n "$avg") > /dev/null || exit 1
echo "$name $v: $steps steps in $((t1 - t0)) s on $backend, options: $*"
splits=val; [ -n "${TEST:-}" ] && splits="val test_2016_flickr"
for split in $splits; do
    for a in $alphas; do
        "$bin/nmt-decode" --backend "$backend" -q -m "$d/avg.ckpt" --beam "$beam" --alpha "$a" -i "$g/$split.en" -o "$d/$split.$a.hyp" || exit 1
        s=$("$bin/nmt-bleu" "$g/$split.de" -i "$d/$split.$a.hyp" -m bleu "${bleu[@]}" -f text | head -1)
        echo "$(echo "$s" | sed 's/^[^=]*= \([0-9.]*\) .*/\1/') $name $v $split alpha=$a :: $s"
    done
done
