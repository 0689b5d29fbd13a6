#!/usr/bin/env bash
# Runs the stream reader's target (fuzz_rec) for SECONDS and each other target for half of it on a
# copy of its seed corpus (tests/fuzz/corpus/NAME/), after replaying the crash inputs kept in
# tests/fuzz/crashes/NAME/. A new crash input is saved under tests/fuzz/crashes/NAME/ so it can be
# committed. Targets run NMT_TEST_JOBS at a time (default: the number of cores). Appends
# "suite passed failed" to COUNTS, in the order of the targets, and each failed target to COUNTS.fails.
set -u
secs=$1; counts=$2; shift 2
cd "$(dirname "$0")/../.."
jobs_max=${NMT_TEST_JOBS:-$(nproc)}

# Fuzzes target $1; writes its report lines to corpus-work/NAME.report and "NAME PASSED FAILED" to
# corpus-work/NAME.count.
fuzz_one() {
    local f=$1 name short work crashes t ok runs
    name=$(basename "$f"); short=${name#fuzz_}
    work=tests/fuzz/corpus-work/$short
    crashes=tests/fuzz/crashes/$short
    rm -rf "$work"; mkdir -p "$work" "$crashes"
    [ -d "tests/fuzz/corpus/$short" ] && cp -r "tests/fuzz/corpus/$short/." "$work/"
    t=$secs; [ "$short" = rec ] || t=$(( (secs + 1) / 2 ))
    ok=1
    exec > "$work.report"
    if ls "$crashes"/* >/dev/null 2>&1; then
        "$f" -runs=0 "$crashes"/* > "$work.log" 2>&1 || { ok=0; echo "fuzz $short: a kept crash input fails again"; tail -20 "$work.log"; }
    fi
    if [ $ok = 1 ]; then
        "$f" -max_total_time="$t" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 \
            -artifact_prefix="$crashes/" "$work" > "$work.log" 2>&1 || { ok=0; tail -30 "$work.log"; }
    fi
    runs=$(grep -o 'Done [0-9]* runs' "$work.log" | tail -1)
    if [ $ok = 1 ]; then
        echo "fuzz $short: ${runs:-ran} in ${t}s, no crash: 1 passed, 0 failed"
        echo "fuzz-$short 1 0" > "$work.count"
    else
        echo "fuzz $short: 0 passed, 1 failed"
        echo "fuzz-$short 0 1" > "$work.count"
    fi
}

mkdir -p tests/fuzz/corpus-work
for f in "$@"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    fuzz_one "$f" &
done
wait
status=0
for f in "$@"; do
    short=$(basename "$f"); short=${short#fuzz_}
    cat "tests/fuzz/corpus-work/$short.report"
    [ -s "tests/fuzz/corpus-work/$short.count" ] || echo "fuzz-$short 0 1" > "tests/fuzz/corpus-work/$short.count"
    cat "tests/fuzz/corpus-work/$short.count" >> "$counts"
    if grep -q ' 0 1$' "tests/fuzz/corpus-work/$short.count"; then
        status=1
        [ "$counts" = /dev/null ] || echo "[fuzz $short] a crash, or a kept crash input failing again" >> "$counts.fails"
    fi
done
exit $status
