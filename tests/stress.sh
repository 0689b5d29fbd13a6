#!/usr/bin/env bash
# The Bats suites under load: runs tests/bats/*.bats N times (default 5) against the plain build
# (bin/, build/), as many files at a time as make check runs them (NMT_TEST_JOBS, tests/jobs.bash),
# while a busy loop spins on every core, and reports every test that failed in any
# round, with how many times. A test that passes on an idle machine but fails here depends on timing:
# a pipe whose reader stops early under pipefail, a deadline, an assumed order of processes.
#
#     make check-stress N=5      (or: bash tests/stress.sh N, after make tests-built)
#
# Run by hand, not by make check: it takes N times the plain Bats suite, slowed by the busy loops.
# Each round's TAP is kept in a folder named at the end when a test failed. Exit status 1 if any
# test failed in any round.
set -u
rounds=${1:-5}
case $rounds in '' | *[!0-9]* | 0) echo "usage: tests/stress.sh [ROUNDS >= 1]" >&2; exit 2 ;; esac
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
[ -x bin/nmt-train ] || { echo "stress: no build in bin/: run make tests-built first" >&2; exit 2; }
bin=$(cd bin && pwd)
. tests/jobs.bash
export NMT_SRCDIR=$src NMT_BIN=$bin NMT_PLUGIN_PATH=$bin PATH="$bin:$PATH"

logs=$(mktemp -d "${TMPDIR:-/tmp}/nmt-stress.XXXXXX")
busy=()
stop_busy() {
    local p
    for p in "${busy[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${busy[@]}"; do wait "$p" 2>/dev/null; done
    busy=()
}
trap stop_busy EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
cores=$(nproc)
for ((c = 0; c < cores; c++)); do
    ( while :; do :; done ) &
    busy+=($!)
done

echo "stress: $rounds round(s) of the Bats suites, $test_jobs file(s) at a time, beside $cores busy loop(s); logs in $logs"
start=$(date +%s)
for ((r = 1; r <= rounds; r++)); do
    t=$(date +%s)
    bats --tap "${bats_jobs[@]}" tests/bats/*.bats > "$logs/round-$r.tap" 2>&1
    rc=$?
    # "not ok N name", then "# (in test file F, line L)" or "# (from function `f' in file F, ...)":
    # one "F: name" line per failed test
    awk 'function flush() { if (name != "") print (f == "" ? "?" : f) ": " name; name = f = "" }
         /^not ok / { flush(); name = $0; sub(/^not ok [0-9]+ /, "", name); next }
         name != "" && f == "" && match($0, /^# \(.*in (test )?file [^,]*/) {
             f = substr($0, RSTART, RLENGTH); sub(/.* file /, "", f) }
         /^ok / { flush() }
         END { flush() }' "$logs/round-$r.tap" > "$logs/round-$r.failed"
    if [ $rc -ne 0 ] && [ ! -s "$logs/round-$r.failed" ]; then
        echo "?: bats exited with status $rc" > "$logs/round-$r.failed"
    fi
    passed=$(grep -c '^ok ' "$logs/round-$r.tap")
    failed=$(wc -l < "$logs/round-$r.failed")
    echo "stress: round $r/$rounds: $passed passed, $failed failed ($(($(date +%s) - t)) s)"
    sed 's/^/  not ok: /' "$logs/round-$r.failed"
done
stop_busy
total=$(($(date +%s) - start))

cat "$logs"/round-*.failed > "$logs/all.failed"
if [ -s "$logs/all.failed" ]; then
    echo "stress: tests that failed in some of the $rounds rounds ($total s), failures/rounds:"
    sort "$logs/all.failed" | uniq -c | sort -rn |
        awk -v n="$rounds" '{ c = $1; sub(/^ *[0-9]+ /, ""); print "  " c "/" n "  " $0 }'
    echo "stress: the TAP of each round is in $logs"
    exit 1
fi
rm -rf "$logs"
echo "stress: every test passed in all $rounds rounds ($total s)"
