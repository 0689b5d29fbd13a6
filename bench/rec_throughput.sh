#!/usr/bin/env bash
# Record layer throughput: 10 million ~48-byte ids records written and read back through a pipe
# (rec_write | nmt-cat --count), and read back from a file. Prints payload MB/s.
set -eu
cd "$(dirname "$0")/.."
make -s bench-built >/dev/null
N=${1:-10000000}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
bytes=$(build/bench/rec_write "$N" 2>&1 >"$tmp/s.nmt" | awk '{print $4}')
ls -l "$tmp/s.nmt" | awk '{printf "stream file: %.1f MB compressed\n", $5/1e6}'
t0=$(date +%s.%N); build/bench/rec_write "$N" 2>/dev/null | bin/nmt-cat --count >/dev/null; t1=$(date +%s.%N)
echo "pipe (write+read): $(echo "$bytes $t0 $t1" | awk '{printf "%.2f s, %.0f MB/s of payload", $3-$2, $1/($3-$2)/1e6}')"
t0=$(date +%s.%N); bin/nmt-cat --count "$tmp/s.nmt" >/dev/null; t1=$(date +%s.%N)
echo "nmt-cat --count from file: $(echo "$bytes $t0 $t1" | awk '{printf "%.2f s, %.0f MB/s of payload", $3-$2, $1/($3-$2)/1e6}')"
t0=$(date +%s.%N); build/bench/rec_write "$N" 2>/dev/null >/dev/null; t1=$(date +%s.%N)
echo "writer alone: $(echo "$bytes $t0 $t1" | awk '{printf "%.2f s, %.0f MB/s of payload", $3-$2, $1/($3-$2)/1e6}')"
