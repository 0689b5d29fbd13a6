#!/usr/bin/env bash
# Decoding speed on a backend: bench/cuda_decode.sh CHECKPOINT SOURCE [BACKEND]  (default cuda)
# Translates SOURCE (e.g. Multi30k test_2016_flickr.en) greedily and with beam 4, with batches of
# 4096 source tokens and of 512 (about 32 sentences), and prints sentences/s and target tokens/s
# (tokens of the best hypotheses, EOS excluded).
set -u
[ $# -ge 2 ] || { sed -n 2,5p "$0" >&2; exit 2; }
ckpt=$1 src=$2 backend=${3:-cuda}
n=$(wc -l < "$src"); tmp=$(mktemp); trap 'rm -f "$tmp"' EXIT
for m in "1 4096" "4 512" "4 4096"; do
    set -- $m
    s=$(date +%s.%N)
    bin/nmt-decode --backend "$backend" -q -m "$ckpt" --beam $1 --max-tokens $2 -i "$src" --out hyp -o "$tmp" || exit 1
    e=$(date +%s.%N)
    toks=$(bin/nmt-cat "$tmp" | awk '{n += NF - 3} END {print n}')
    python3 -c "import sys; s, e, n, t = map(float, sys.argv[1:]); print('beam $1, max-tokens $2: %.2f s, %.0f sentences/s, %d target tokens, %.0f target tokens/s' % (e - s, n / (e - s), t, t / (e - s)))" "$s" "$e" "$n" "$toks"
done
