#!/usr/bin/env bash
# Two builds of nmt side by side, alternated round by round, 2 threads, alone on the machine:
#   bash bench/before_after.sh BEFORE_BIN AFTER_BIN CHECKPOINT VOCAB SOURCE BATCHES [ROUNDS]
# BEFORE_BIN, AFTER_BIN: the bin/ folders of the two builds (each with its plugins); CHECKPOINT,
# VOCAB: a trained model and its vocabulary; SOURCE: raw source text; BATCHES: a batch stream made
# with VOCAB. Each round: the whole nmt-decode command (ids in, hyp stream out) greedy with
# --max-tokens = 64 x the mean source length and beam 4 with 32 x; then 40 nmt-train steps of the
# preset PRESET (default tiny) from scratch on BATCHES (median target tokens/s of steps 11-40). Prints each
# figure, whether the two builds' translations agree, and per measure the median of each side.
set -u
[ $# -ge 6 ] || { sed -n 2,9p "$0" >&2; exit 2; }
before=$(cd "$1" && pwd) after=$(cd "$2" && pwd) ckpt=$3 vocab=$4 src=$5 batches=$6 rounds=${7:-3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$after/nmt-tokenize" --vocab "$vocab" < "$src" > "$tmp/src.ids" || exit 1
mean=$("$after/nmt-tokenize" --vocab "$vocab" --text=ids < "$src" | awk '{t += NF + 1} END {printf "%.2f", t / NR}')
echo "mean source length $mean tokens; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
    for side in before after; do
        B=$before; [ "$side" = after ] && B=$after
        for m in "1 64" "4 32"; do
            set -- $m
            mt=$(awk -v m="$mean" -v b="$2" 'BEGIN {printf "%d", m * b}')
            /usr/bin/time -f "%e %M" -o "$tmp/time" env NMT_PLUGIN_PATH="$B" "$B/nmt-decode" -m "$ckpt" --in ids \
                --out hyp --threads 2 --beam "$1" --alpha 0.6 --max-tokens "$mt" -i "$tmp/src.ids" -o "$tmp/$side.$1.hyp" ||
                exit 1
            "$B/nmt-cat" "$tmp/$side.$1.hyp" | cut -f4 > "$tmp/$side.$1.txt"
            read -r s kb < "$tmp/time"
            echo "round $r $side decode-beam$1 $s s, peak RSS $((kb / 1024)) MB"
        done
        rm -f "$tmp/model.ckpt"*
        env NMT_PLUGIN_PATH="$B" "$B/nmt-train" -i "$batches" -o "$tmp/model.ckpt" --preset "${PRESET:-tiny}" \
            --vocab "$vocab" --threads 2 --max-steps 40 --log "$tmp/train.csv" > /dev/null 2>&1 || exit 1
        tok=$(awk -F, 'NR > 1 { gsub(/"/, ""); if ($1 > 10) print $6 }' "$tmp/train.csv" | sort -g |
              awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')
        echo "round $r $side train $tok target tokens/s"
    done
    for b in 1 4; do
        echo "round $r beam $b: translations agree on $(paste "$tmp/before.$b.txt" "$tmp/after.$b.txt" |
            awk -F'\t' '$1 == $2' | wc -l) of $(wc -l < "$tmp/after.$b.txt") lines"
    done
done 2>&1 | tee "$tmp/rows"
for what in decode-beam1 decode-beam4 train; do
    for side in before after; do
        awk -v w="$what" -v s="$side" '$3 == s && $4 == w {print $5}' "$tmp/rows" | sort -g |
            awk -v w="$what" -v s="$side" '{a[NR] = $1} END {printf "%s %s median %s\n", w, s, (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
    done
done
