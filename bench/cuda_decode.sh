#!/usr/bin/env bash
# Decoding speed on a backend: bench/cuda_decode.sh CHECKPOINT SOURCE [BACKEND]  (default cuda)
# Translates SOURCE (e.g. Multi30k test_2016_flickr.en) greedily and with beam 4, in batches of 1, 32
# and 128 sentences (--max-sentences, sorted by length as always), and prints sentences/s and target
# tokens/s (tokens of the best hypotheses, EOS excluded; the whole command, model load included).
# Batches of one sentence translate only the first ONE_LINES lines (default 200). Environment:
# DECODE_OPTS adds nmt-decode options (e.g. "--batch-variant" or "--precision bf16").
set -u
[ $# -ge 2 ] || { sed -n 2,7p "$0" >&2; exit 2; }
ckpt=$1 src=$2 backend=${3:-cuda}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
head -n "${ONE_LINES:-200}" "$src" > "$tmp/one.src"
for beam in 1 4; do
    for bs in 1 32 128; do
        in=$src
        [ "$bs" = 1 ] && in=$tmp/one.src
        n=$(wc -l < "$in")
        s=$(date +%s.%N)
        # shellcheck disable=SC2086
        bin/nmt-decode --backend "$backend" -q -m "$ckpt" --beam $beam --max-sentences $bs --max-tokens 1000000 \
            ${DECODE_OPTS:-} -i "$in" --out hyp -o "$tmp/hyp" || exit 1
        e=$(date +%s.%N)
        toks=$(bin/nmt-cat "$tmp/hyp" | awk '{n += NF - 3} END {print n}')
        python3 -c "import sys; s, e, n, t = map(float, sys.argv[1:]); print('beam $beam, batch $bs: %d sentences, %.2f s, %.0f sentences/s, %d target tokens, %.0f target tokens/s' % (n, e - s, n / (e - s), t, t / (e - s)))" "$s" "$e" "$n" "$toks"
    done
done
