#!/usr/bin/env bash
# nmt-serve under load: nmt-decode's offline speed on a file, then the server's with 1, 8 and 64
# concurrent clients sending its lines one a request (tests/helpers/serve_client.py load):
# sentences/s, p50 and p99 latency, errors, and the server's peak RSS.
# usage: bench/serve.sh MODEL.ckpt [SRC.txt] [THREADS] [CLIENTS...]
# (SRC default: the first 1000 lines of test_2016_flickr.en; THREADS default 2; CLIENTS 1 8 64).
# SERVE_OPTS adds options to nmt-serve and nmt-decode alike (e.g. "--beam 4 --max-len-b 20").
set -euo pipefail
model=$1
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${NMT_BIN:-$root/bin}
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
src=${2:-$tmp/src.en}
[ -n "${2:-}" ] || zcat "$root/data/multi30k/test_2016_flickr.en.gz" | sed -n 1,1000p > "$src"
threads=${3:-2}
shift $(($# < 3 ? $# : 3))
clients=${*:-1 8 64}
py=$(command -v /usr/bin/python3 || command -v python3)
n=$(wc -l < "$src")
s=$(date +%s.%N)
# shellcheck disable=SC2086
"$bin/nmt-decode" -m "$model" --threads "$threads" ${SERVE_OPTS:-} -i "$src" > /dev/null
e=$(date +%s.%N)
echo "nmt-decode offline: $n sentences, $(echo "scale=1; $n / ($e - $s)" | bc) sentences/s ($threads threads)"
# shellcheck disable=SC2086
"$bin/nmt-serve" -m "$model" --listen 127.0.0.1:0 --port-file "$tmp/addr" --threads "$threads" -q \
    --max-queue 100000 ${SERVE_OPTS:-} &
pid=$!
for _ in $(seq 600); do [ -s "$tmp/addr" ] && break; sleep 0.1; done
addr=$(cat "$tmp/addr")
for _ in $(seq 100); do curl -sf -o /dev/null "http://$addr/health" && break; sleep 0.1; done
echo "clients sentences/s p50_ms p99_ms errors peak_rss_mib"
for c in $clients; do
    read -r rate p50 p99 err < <("$py" "$root/tests/helpers/serve_client.py" load "$addr" "$src" "$c")
    rss=$(awk '/^VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$pid/status")
    echo "$c $rate $p50 $p99 $err $rss"
done
