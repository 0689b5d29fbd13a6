#!/usr/bin/env bash
# nmt-train against the PyTorch peer (../shared/bench/torch_peer/train.py), side by side on the same
# Multi30k training data, 2 threads each: target tokens/s (median over steps LO..HI) and peak RSS.
# Run from the repository root after `make`, one benchmark at a time:
#     flock /tmp/nmt-bench.lock bash bench/train.sh [small|base ...]
# Environment: STEPS (default 40 small, 20 base), LO (default 5), WORK (default /tmp/nmt-bench-train),
# PEER (path of the peer's train.py), PY (Python with torch, default /usr/bin/python3).
set -eu
root=$(pwd)
bin=$root/bin
WORK=${WORK:-/tmp/nmt-bench-train}
PEER=${PEER:-$root/../shared/bench/torch_peer/train.py}
[ -f "$PEER" ] || PEER=/work/shared/bench/torch_peer/train.py
PY=${PY:-/usr/bin/python3}
DATA=$root/data/multi30k
LO=${LO:-5}
configs=${*:-small base}
mkdir -p "$WORK/data" "$WORK/spm"
cd "$WORK"
if [ ! -s train.b ]; then
    for s in train val; do for l in en de; do zcat "$DATA/$s.$l.gz" > "data/$s.$l"; done; done
    "$bin/nmt-tokenize" --src data/train.en --tgt data/train.de -o train.tok
    "$bin/nmt-vocab" -s 8000 -o vocab.txt train.tok
    "$bin/nmt-tokenize" --src data/train.en --tgt data/train.de --vocab vocab.txt |
        "$bin/nmt-batch" -t 4096 -o train.b
    spm_train --input=data/train.en,data/train.de --model_prefix=spm/bpe8k --vocab_size=8000 \
        --model_type=bpe --character_coverage=1.0 --pad_id=0 --unk_id=1 --bos_id=2 --eos_id=3 \
        --num_threads=2 > spm.log 2>&1
fi
median() { sort -g | awk '{a[NR]=$1} END { if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }
rss() { awk '/Maximum resident/ {printf "%.0f", $6/1024}' "$1"; }
peak=$("$PY" "$PEER" sgemm --sizes 2048 --threads 2 | awk '/n=2048/ {print $5}')
echo "sgemm 2048^3 through torch/OpenBLAS, 2 threads, best of 5: $peak GFLOP/s"
printf '%-6s %-10s %12s %12s %10s %10s\n' config impl tgt_tok/s step_s peak_MB GFLOP/s
for cfg in $configs; do
    steps=${STEPS:-$([ "$cfg" = base ] && echo 20 || echo 40)}
    /usr/bin/time -v "$PY" "$PEER" train --config "$cfg" --spm spm/bpe8k.model --data data --max-steps "$steps" \
        --stat-lo "$LO" --stat-hi "$steps" --threads 2 --log-json "peer-$cfg.json" --log-every 1000 \
        > "peer-$cfg.out" 2> "peer-$cfg.time"
    ptok=$(grep '^SUMMARY' "peer-$cfg.out" | sed 's/^SUMMARY //' | "$PY" -c 'import json,sys; print(round(json.load(sys.stdin)["median_tgt_tok_s"]))')
    pstep=$(grep '^SUMMARY' "peer-$cfg.out" | sed 's/^SUMMARY //' | "$PY" -c 'import json,sys; print(round(json.load(sys.stdin)["median_step_s"],3))')
    pgf=$(grep '^SUMMARY' "peer-$cfg.out" | sed 's/^SUMMARY //' | "$PY" -c 'import json,sys; print(round(json.load(sys.stdin)["median_gflops_nonpad"],1))')
    printf '%-6s %-10s %12s %12s %10s %10s\n' "$cfg" peer "$ptok" "$pstep" "$(rss "peer-$cfg.time")" "$pgf"
    rm -f "nmt-$cfg.ckpt"
    /usr/bin/time -v "$bin/nmt-train" --preset "$cfg" --vocab vocab.txt -i train.b -o "nmt-$cfg.ckpt" \
        --max-steps "$steps" --threads 2 --log "nmt-$cfg.csv" -q 2> "nmt-$cfg.time"
    ntok=$(awk -F, -v lo="$LO" 'NR > 1 { gsub(/"/, ""); if ($1 >= lo) print $6 }' "nmt-$cfg.csv" | median)
    nstep=$(awk -F, -v lo="$LO" 'NR > 1 { gsub(/"/, ""); if ($1 >= lo) print $5 / $6 }' "nmt-$cfg.csv" | median)
    ngf=$(awk -F, -v lo="$LO" 'NR > 1 { gsub(/"/, ""); if ($1 >= lo) print $8 }' "nmt-$cfg.csv" | median)
    printf '%-6s %-10s %12.0f %12.3f %10s %10s\n' "$cfg" nmt-train "$ntok" "$nstep" "$(rss "nmt-$cfg.time")" "$ngf"
    awk -v a="$ntok" -v b="$ptok" -v c="$cfg" -v g="$ngf" -v p="$peak" \
        'BEGIN { printf "%-6s ratio nmt/peer tokens/s: %.2f; nmt model FLOP rate / sgemm peak: %.0f%%\n", c, a / b, 100 * g / p }'
done
