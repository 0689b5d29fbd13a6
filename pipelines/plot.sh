#!/usr/bin/env bash
# plot.sh: draws the training curves of nmt-train CSV logs (--log FILE.csv) into one SVG picture.
#
#   pipelines/plot.sh OUT.svg LOG.csv [LOG.csv ...]
#
# Panels, by optimizer step: the training loss with the validation loss, the validation
# perplexity, the validation BLEU (logs of --valid-bleu), tokens per second and the learning
# rate. Several logs (the seeds of an ensemble, two experiments) are drawn side by side, each
# named by its file. Needs gnuplot (Debian gnuplot-nox).
set -eu
if [ $# -lt 2 ]; then
    echo "usage: $0 OUT.svg LOG.csv [LOG.csv ...]" >&2
    exit 2
fi
out=$1; shift
command -v gnuplot > /dev/null || { echo "$0: gnuplot is not installed (Debian: gnuplot-nox)" >&2; exit 1; }
header="step,epoch,loss,lr,tokens,tokens_per_s,grad_norm,gflop_s,valid_loss,valid_ppl,valid_nll"
bleu=0
for log in "$@"; do
    [ -r "$log" ] || { echo "$0: cannot read '$log'" >&2; exit 1; }
    case $log in *[[:space:]\'\"]*) echo "$0: '$log': a log's name may not hold blanks or quotes" >&2; exit 1 ;; esac
    first=$(head -1 "$log")
    case $first in
        "$header") ;;
        "$header,valid_bleu") bleu=1 ;;
        *) echo "$0: '$log' is not a CSV log of nmt-train (its first line is not the header $header...)" >&2; exit 1 ;;
    esac
    [ "$(grep -c . "$log")" -gt 1 ] || { echo "$0: '$log' has no rows" >&2; exit 1; }
done
panels=$((4 + bleu))
tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
# each log is drawn with the same style index in every panel; training rows have a loss (column 3),
# validation rows a validation loss (column 9)
{
    echo "set terminal svg size 900,$((260 * panels)) dynamic font 'sans,11' background '#ffffff'"
    echo "set output '$tmp'"
    echo "set datafile separator ','"
    echo "set key top right noenhanced"
    echo "set grid; set xlabel 'step'"
    echo "set multiplot layout $panels,1"
    echo "files = '$*'"
    echo "set title 'loss per target token (lines: training, points: validation)'"
    echo "plot for [i=1:words(files)] word(files,i) using 1:(\$3) skip 1 with lines lw 1 lc i title word(files,i), \\"
    echo "     for [i=1:words(files)] word(files,i) using 1:(\$9) skip 1 with linespoints pt 7 lc i notitle"
    echo "set title 'validation perplexity'; set logscale y"
    echo "plot for [i=1:words(files)] word(files,i) using 1:(\$10) skip 1 with linespoints pt 7 lc i title word(files,i)"
    echo "unset logscale y"
    if [ $bleu = 1 ]; then
        echo "set title 'validation BLEU'"
        echo "plot for [i=1:words(files)] word(files,i) using 1:(\$12) skip 1 with linespoints pt 7 lc i title word(files,i)"
    fi
    echo "set title 'target tokens per second'"
    echo "plot for [i=1:words(files)] word(files,i) using 1:(\$6) skip 1 with lines lc i title word(files,i)"
    echo "set title 'learning rate'"
    echo "plot for [i=1:words(files)] word(files,i) using 1:(\$4) skip 1 with lines lc i title word(files,i)"
    echo "unset multiplot"
} | gnuplot 2> "$tmp.err" || { cat "$tmp.err" >&2; rm -f "$tmp.err"; exit 1; }
rm -f "$tmp.err"
mv "$tmp" "$out"
trap - EXIT
echo "$out"
