#!/usr/bin/env bash
# nmt-serve under load. In one run: nmt-decode's offline speed on a file (and its peak RSS), then one
# server, loaded in turn by 1, 8, 64 and 256 concurrent clients, each sending its share of the
# file's lines one a request over a kept-alive connection (tests/helpers/serve_client.py load):
# sentences/s (and as a share of the offline speed), p50 and p99 latency, errors (answers other
# than 200 with a translation a line, failed requests), the sentences a decoded batch (the server's
# metrics), and the server's peak RSS during that load (VmHWM, reset before each load where the
# kernel allows: /proc/PID/clear_refs). Then SIGTERM: the server must exit 0.
#
#   bench/serve.sh MODEL.ckpt [SRC.txt] [THREADS] [CLIENTS...]
#
# SRC: default test_2016_flickr.en (1,000 lines); THREADS: of nmt-decode and of nmt-serve (default
# 2); CLIENTS default 1 8 64 256. DECODE_OPTS: options of both (e.g. "--beam 4 --max-len-b 20");
# SERVER_OPTS: of nmt-serve only (e.g. "--max-wait-ms 5 --jobs 1").
#
#   SOAK=600 bench/serve.sh MODEL.ckpt [SRC.txt] [THREADS] [CLIENTS]
#
# The soak instead: CLIENTS (default 64) send requests of 1 to 8 lines in turn for SOAK seconds
# without pause; the server's RSS (VmRSS) and queue are printed every SOAK_EVERY seconds (default
# 30), then the load's figures and the peak RSS. RSS does not depend on the machine's load.
set -euo pipefail
model=$1
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${NMT_BIN:-$root/bin}
tmp=$(mktemp -d)
pid=
trap '[ -z "$pid" ] || kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
src=${2:-$tmp/src.en}
[ -n "${2:-}" ] || zcat "$root/data/multi30k/test_2016_flickr.en.gz" > "$src"
threads=${3:-2}
shift $(($# < 3 ? $# : 3))
soak=${SOAK:-0}
if [ "$soak" != 0 ]; then clients=${*:-64}; else clients=${*:-1 8 64 256}; fi
py=$(command -v /usr/bin/python3 || command -v python3)
client="$py $root/tests/helpers/serve_client.py"
n=$(wc -l < "$src")
export NMT_PLUGIN_PATH=${NMT_PLUGIN_PATH:-$bin}

# Prints the value of metric $1 of the server.
metric() {
    curl -sf "http://$addr/metrics" > "$tmp/metrics"
    awk -v m="$1" '$1 == m { print $2 }' "$tmp/metrics"
}
# Prints field $1 of the server's /proc status in MiB.
rss() {
    awk -v f="$1:" '$1 == f { printf "%.0f", $2 / 1024 }' "/proc/$pid/status"
}

echo "nmt-serve bench: $n sentences of $(basename "$src"), $threads threads, DECODE_OPTS='${DECODE_OPTS:-}'" \
     "SERVER_OPTS='${SERVER_OPTS:-}', $(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg)"
if [ "$soak" = 0 ]; then
    timer=()
    [ ! -x /usr/bin/time ] || timer=(/usr/bin/time -f %M -o "$tmp/decode.rss")
    s=$(date +%s.%N)
    # shellcheck disable=SC2086
    "${timer[@]}" "$bin/nmt-decode" -m "$model" --threads "$threads" ${DECODE_OPTS:-} -i "$src" > /dev/null
    e=$(date +%s.%N)
    offline=$(echo "scale=1; $n / ($e - $s)" | bc)
    echo "nmt-decode offline: $offline sentences/s, peak RSS" \
         "$([ -s "$tmp/decode.rss" ] && echo "$(($(cat "$tmp/decode.rss") / 1024)) MiB" || echo unknown)"
fi

# shellcheck disable=SC2086
"$bin/nmt-serve" -m "$model" --listen 127.0.0.1:0 --port-file "$tmp/addr" --threads "$threads" -q \
    --max-connections 512 ${DECODE_OPTS:-} ${SERVER_OPTS:-} &
pid=$!
for _ in $(seq 600); do [ -s "$tmp/addr" ] && break; kill -0 "$pid"; sleep 0.1; done
addr=$(cat "$tmp/addr")
for _ in $(seq 100); do curl -sf -o /dev/null "http://$addr/health" && break; sleep 0.1; done
echo "nmt-serve at $addr: RSS $(rss VmRSS) MiB before the first request"

if [ "$soak" != 0 ]; then
    every=${SOAK_EVERY:-30}
    echo "soak: $clients clients, requests of 1 to 8 lines, $soak s"
    $client load "$addr" "$src" "$clients" "$soak" > "$tmp/soak" &
    load=$!
    echo "seconds rss_mib queue_sentences"
    t0=$(date +%s)
    while kill -0 "$load" 2>/dev/null; do
        echo "$(($(date +%s) - t0)) $(rss VmRSS) $(metric nmt_serve_queue_sentences)"
        for _ in $(seq "$every"); do kill -0 "$load" 2>/dev/null || break; sleep 1; done
    done
    wait "$load"
    echo "$(($(date +%s) - t0)) $(rss VmRSS) $(metric nmt_serve_queue_sentences)"
    read -r rate p50 p99 err reqs < "$tmp/soak"
    echo "soak load: $reqs requests, $rate sentences/s, p50 $p50 ms, p99 $p99 ms, $err errors; peak RSS $(rss VmHWM) MiB"
else
    echo "clients sentences/s of_offline p50_ms p99_ms errors requests mean_batch peak_rss_mib"
    for c in $clients; do
        echo 5 2>/dev/null > "/proc/$pid/clear_refs" || true # VmHWM back to VmRSS
        b0=$(metric nmt_serve_batch_sentences_count)
        s0=$(metric nmt_serve_batch_sentences_sum)
        read -r rate p50 p99 err reqs < <($client load "$addr" "$src" "$c")
        b1=$(metric nmt_serve_batch_sentences_count)
        s1=$(metric nmt_serve_batch_sentences_sum)
        share=$(echo "scale=0; 100 * $rate / $offline" | bc)
        mean=$(echo "scale=1; ($s1 - $s0) / ($b1 - $b0)" | bc)
        echo "$c $rate $share% $p50 $p99 $err $reqs $mean $(rss VmHWM)"
    done
fi
kill -TERM "$pid"
st=0
wait "$pid" || st=$?
pid=
echo "nmt-serve: exit status $st after SIGTERM"
[ "$st" = 0 ]
