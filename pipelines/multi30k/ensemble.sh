#!/usr/bin/env bash
# ensemble.sh VARIANT ALPHAS RUN...
# Scores the ensemble of tuning runs (tune.sh's out/tune/RUN/avg.ckpt, trained on out/VARIANT) on the
# validation set only: decodes val with beam BEAM at each length-penalty ALPHA of the list and prints
# one line per alpha: "BLEU RUN+RUN... VARIANT split alpha=A :: signature".
# With TEST=1 it also decodes and scores test_2016_flickr (do that once, for the chosen configuration).
# Environment: BACKEND (cpu), BEAM (5), BIN (../../bin).
# Example: ./ensemble.sh lit6k "1.0 1.4" LV6 LV6s2
set -u
[ $# -ge 3 ] || { sed -n 2,9p "$0" >&2; exit 2; }
v=$1 alphas=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../../bin} backend=${BACKEND:-cpu} beam=${BEAM:-5}
g=$here/out/$v name=$(IFS=+; echo "$*") models=()
for r in "$@"; do
    [ -s "$here/out/tune/$r/avg.ckpt" ] || { echo "ensemble.sh: out/tune/$r/avg.ckpt is missing: run tune.sh $r first" >&2; exit 1; }
    models+=(-m "$here/out/tune/$r/avg.ckpt")
done
bleu=(); case $v in lit*) bleu=(--tokenize none);; esac
d=$here/out/ensemble/$name
mkdir -p "$d" || exit 1
splits=val; [ -n "${TEST:-}" ] && splits="val test_2016_flickr"
for split in $splits; do
    for a in $alphas; do
        "$bin/nmt-decode" --backend "$backend" -q "${models[@]}" --beam "$beam" --alpha "$a" -i "$g/$split.en" -o "$d/$split.$a.hyp" || exit 1
        s=$("$bin/nmt-bleu" "$g/$split.de" -i "$d/$split.$a.hyp" -m bleu "${bleu[@]}" -f text | head -1)
        echo "$(echo "$s" | sed 's/^[^=]*= \([0-9.]*\) .*/\1/') $name $v $split alpha=$a :: $s"
    done
done
