#!/usr/bin/env bash
# Data-parallel nmt-train on this machine: one process with 2 threads and --update-freq 2 against
# mpirun -np 2 with 1 thread per rank (the same global batch; the ordered ranks train the model of
# one 1-thread process with --update-freq 2 bit for bit, tests/bats/mpi.bats), and the fast all-reduce; target tokens/s (median over steps LO..STEPS, from rank 0's
# log), the time spent reducing gradients per step and the part of it after the backward passes
# (the ordered reduction overlapped with the backward pass, the default, and with --overlap off). Then the reduction's cost per step on the
# larger presets (few steps). Run from the repository root after `make`, one benchmark at a time:
#     flock /tmp/nmt-bench.lock bash bench/mpi.sh [small base] [-- base big]
# Environment: STEPS (default 30 small, 12 base), LO (default 4), COST_STEPS (default 3),
# WORK (default /tmp/nmt-bench-train, shared with bench/train.sh).
set -eu
root=$(pwd)
bin=$root/bin
WORK=${WORK:-/tmp/nmt-bench-train}
DATA=$root/data/multi30k
LO=${LO:-4}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NMT_PLUGIN_PATH=$bin
speed=() cost=() seen=
for a in "$@"; do
    if [ "$a" = -- ]; then seen=1; elif [ -z "$seen" ]; then speed+=("$a"); else cost+=("$a"); fi
done
[ $# -gt 0 ] || { speed=(small base); cost=(base big); }
mkdir -p "$WORK/data"
cd "$WORK"
if [ ! -s train.b ]; then
    for s in train val; do for l in en de; do zcat "$DATA/$s.$l.gz" > "data/$s.$l"; done; done
    "$bin/nmt-tokenize" --src data/train.en --tgt data/train.de -o train.tok
    "$bin/nmt-vocab" -s 8000 -o vocab.txt train.tok
    "$bin/nmt-tokenize" --src data/train.en --tgt data/train.de --vocab vocab.txt |
        "$bin/nmt-batch" -t 4096 -o train.b
fi
median() { sort -g | awk '{a[NR]=$1} END { if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }
tokps() { awk -F, -v lo="$LO" 'NR > 1 && $1 >= lo && $6 != "" { print $6 }' "$1" | median; }
# seconds reducing per step, from the closing line ("..., X s of it reducing gradients")
reduce_per_step() { awk -v n="$2" '/reducing gradients/ { for (i = 1; i <= NF; i++) if ($(i+1) == "s" && $(i+3) == "it") r = $i } END { printf "%.3f", r / n }' "$1"; }
# of which after the backward passes ("..., Y s after the backward passes")
wait_per_step() { awk -v n="$2" '/reducing gradients/ { for (i = 1; i <= NF; i++) if ($(i+1) == "s" && $(i+2) == "after") r = $i } END { printf "%.3f", r / n }' "$1"; }
train() { # NAME STEPS CFG [LAUNCHER...] -- [OPTIONS...]: trains, leaving NAME.csv and NAME.err
    local name=$1 steps=$2 cfg=$3 launch=()
    shift 3
    while [ "$1" != -- ]; do launch+=("$1"); shift; done
    shift
    rm -f "$name.ckpt"
    "${launch[@]}" "$bin/nmt-train" --preset "$cfg" --vocab vocab.txt -i train.b -o "$name.ckpt" \
        --max-steps "$steps" --log "$name.csv" --progress-every 1e9 "$@" 2> "$name.err"
}
MPI=(mpirun -np 2 --bind-to none)
lscpu | awk -F: '/Model name/ { gsub(/^ +/, "", $2); print "CPU: " $2 }'
echo "cores: $(nproc); $(mpirun --version | head -1); $(date -u +%F)"
printf '%-6s %-44s %10s %14s %14s\n' config run tgt_tok/s reduce_s/step after_bwd_s/step
for cfg in "${speed[@]}"; do
    steps=${STEPS:-$([ "$cfg" = small ] && echo 30 || echo 12)}
    train "one-$cfg" "$steps" "$cfg" env -- --threads 2 --update-freq 2
    train "two-$cfg" "$steps" "$cfg" "${MPI[@]}" -- --threads 1
    train "off-$cfg" "$steps" "$cfg" "${MPI[@]}" -- --threads 1 --overlap off
    train "fast-$cfg" "$steps" "$cfg" "${MPI[@]}" -- --threads 1 --reduce fast
    for r in "one:1 process, 2 threads, --update-freq 2" "two:mpirun -np 2, 1 thread each (ordered)" \
             "off:mpirun -np 2, 1 thread each, --overlap off" "fast:mpirun -np 2, 1 thread each, --reduce fast"; do
        printf '%-6s %-44s %10.0f %14s %14s\n' "$cfg" "${r#*:}" "$(tokps "${r%%:*}-$cfg.csv")" \
            "$(reduce_per_step "${r%%:*}-$cfg.err" "$steps")" "$(wait_per_step "${r%%:*}-$cfg.err" "$steps")"
    done
    awk -v a="$(tokps "two-$cfg.csv")" -v b="$(tokps "one-$cfg.csv")" -v o="$(tokps "off-$cfg.csv")" -v f="$(tokps "fast-$cfg.csv")" -v c="$cfg" \
        'BEGIN { printf "%-6s 2 ranks / 1 process: %.2f (ordered, overlapped), %.2f (ordered, --overlap off), %.2f (fast)\n", c, a / b, o / b, f / b }'
done
for cfg in "${cost[@]}"; do
    steps=${COST_STEPS:-3}
    train "cost-$cfg" "$steps" "$cfg" "${MPI[@]}" -- --threads 1 --warmup 4000
    train "costoff-$cfg" "$steps" "$cfg" "${MPI[@]}" -- --threads 1 --warmup 4000 --overlap off
    for r in "cost:overlapped" "costoff:--overlap off"; do
        printf '%-6s %-44s %10.0f %14s %14s\n' "$cfg" "mpirun -np 2, ${r#*:} ($steps steps)" \
            "$(awk -F, 'NR > 1 && $6 != "" { print $6 }' "${r%%:*}-$cfg.csv" | median)" \
            "$(reduce_per_step "${r%%:*}-$cfg.err" "$steps")" "$(wait_per_step "${r%%:*}-$cfg.err" "$steps")"
    done
done
