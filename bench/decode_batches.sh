#!/usr/bin/env bash
# nmt-decode's time and peak memory against the size of its batches on the cpu:
#   bash bench/decode_batches.sh CHECKPOINT SOURCE
# Rows: greedy and beam 4 (no length normalisation), float32 and int8-all, 1 and 2 threads; columns:
# SIZES (default "16 32 64 0"), the --max-sentences of each run (0: as many as --max-tokens 4096
# allows; nmt-decode's default on the cpu is 16). ROUNDS (default 3) rounds, each running every
# size of every row once in turn (interleaved), timed whole with /usr/bin/time (seconds, peak RSS);
# prints one line per run, then a Markdown table of medians. Checks that every size gives the same
# output as the first (batch invariance). Run it alone, from the repository root, after `make`:
# timings need an idle machine.
set -eu
[ $# -eq 2 ] || { echo "usage: bash bench/decode_batches.sh CHECKPOINT SOURCE" >&2; exit 2; }
ckpt=$1 src=$2 rounds=${ROUNDS:-3} sizes=${SIZES:-16 32 64 0}
B=${NMT_BIN:-bin}
export NMT_PLUGIN_PATH=${NMT_PLUGIN_PATH:-$B}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "$(wc -l < "$src") sentences; rounds $rounds; NMT_CPU_ISA=${NMT_CPU_ISA:-(widest)}; $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
rows=()
for mode in greedy beam4; do for p in float32 int8-all; do for t in 1 2; do rows+=("$mode $p $t"); done; done; done
for ((r = 1; r <= rounds; r++)); do
    for row in "${rows[@]}"; do
        read -r mode p t <<< "$row"
        beam=1; [ "$mode" = greedy ] || beam=${mode#beam}
        for s in $sizes; do
            ms=(--max-sentences "$s"); [ "$s" = 0 ] && ms=(--max-sentences 100000000)
            out=$tmp/out.$mode.$p.$t.$s
            /usr/bin/time -f "%e %M" -o "$tmp/time" "$B/nmt-decode" -q -m "$ckpt" --threads "$t" --beam "$beam" --alpha 0 \
                --precision "$p" --max-tokens 4096 "${ms[@]}" -i "$src" -o "$out"
            read -r sec kb < "$tmp/time"
            echo "$mode $p $t $s $sec $kb" | tee -a "$tmp/runs"
            first=$tmp/out.$mode.$p.$t.${sizes%% *}
            cmp -s "$first" "$out" || { echo "batches of $s sentences change the output of $mode $p $t" >&2; exit 1; }
        done
    done
done
python3 - "$tmp/runs" "$sizes" <<'PY'
import sys, statistics
runs, sizes = {}, sys.argv[2].split()
for line in open(sys.argv[1]):
    mode, p, t, s, sec, kb = line.split()
    runs.setdefault((mode, p, t), {}).setdefault(s, []).append((float(sec), int(kb)))
name = lambda s: "as --max-tokens allows" if s == "0" else "%s sentences" % s
print("\n| mode | precision | threads | " + " | ".join("%s: s, MiB" % name(s) for s in sizes) + " |")
print("|---|---|---|" + "---|" * len(sizes))
for (mode, p, t), by in runs.items():
    cells = ["%.2f, %.0f" % (statistics.median(x[0] for x in by[s]), statistics.median(x[1] for x in by[s]) / 1024) for s in sizes]
    print("| %s | %s | %s | %s |" % (mode, p, t, " | ".join(cells)))
PY
