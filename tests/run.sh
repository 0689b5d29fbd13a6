#!/usr/bin/env bash
# Runs every test suite against the build under DIR (. for bin/ and build/, san for the sanitizer
# build): the C unit tests (build/tests/test_*) and the Bats suites (tests/bats/*.bats).
# Appends "suite passed failed" lines to COUNTS. Exit status 1 if any test failed.
set -u
dir=${1:-.}
counts=${2:-/dev/null}
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
bin=$(cd "$dir/bin" && pwd)
export NMT_SRCDIR=$src NMT_BIN=$bin NMT_PLUGIN_PATH=$bin PATH="$bin:$PATH"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
label=$([ "$dir" = . ] && echo plain || echo "$dir")
# VALGRIND=1: run the unit tests under valgrind's memcheck (errors and leaks fail the test), skip Bats.
wrap=()
if [ "${VALGRIND:-0}" = 1 ]; then
    label=valgrind
    wrap=(valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite)
    export NMT_TEST_QUICK=1
fi
status=0
# Tests run this many at a time: unit tests, and Bats files (each file's tests in order).
. "$(dirname "$0")/jobs.bash"

tap_count() { # reads TAP on stdin, echoes "passed failed skipped" (a skip is not a pass)
    awk '/^ok .*# [Ss][Kk][Ii][Pp]/{s++; next} /^ok /{p++} /^not ok /{f++} END{print p+0, f+0, s+0}'
}

# Bats's --timing adds " in Nms" after a test's name: taken out of the names listed
untime='s/ in [0-9]*ms\( #\|$\)/\1/'

# Appends the skips of the TAP in file $2 to the skip list beside COUNTS, labelled $1.
tap_skips() {
    [ "$counts" = /dev/null ] && return
    grep -i '^ok .*# skip' "$2" | sed "s/^ok [0-9]* *-* *//; $untime; s/^/[$1] /" >> "$counts.skips"
}

# Appends the name of each failed test of the TAP in file $2 to the failure list beside COUNTS,
# labelled $1; a test program that failed without a "not ok" line is listed as $3.
tap_fails() {
    [ "$counts" = /dev/null ] && return
    if grep -q '^not ok' "$2"; then
        grep '^not ok' "$2" | sed "s/^not ok [0-9]* *-* *//; $untime; s/^/[$1] /" >> "$counts.fails"
    else
        echo "[$1] $3" >> "$counts.fails"
    fi
}

# One unit test: its TAP and stderr into files named after it in $work.
run_unit() {
    "${wrap[@]}" "$1" > "$work/$(basename "$1").out" 2> "$work/$(basename "$1").err"
    echo $? > "$work/$(basename "$1").rc"
}

# Reports one unit test's results from $work, in the order of the listing.
report_unit() {
    local name out rc p f sk
    name=$(basename "$1"); out=$work/$name.out
    rc=$(cat "$work/$name.rc")
    read -r p f sk < <(tap_count < "$out")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi   # a crash or abort counts as a failure
    grep '^not ok' "$out" | sed "s/^/  [$label $name] /"
    if [ "$f" -ne 0 ]; then
        tail -20 "$work/$name.err" | sed "s/^/  [$label $name stderr] /"; status=1
        tap_fails "$label $name" "$out" "exit status $rc"
    fi
    tap_skips "$label $name" "$out"
    echo "$label unit $name: $p passed, $f failed, $sk skipped"
    echo "$label-unit-$name $p $f $sk" >> "$counts"
}

# The unit tests, NMT_TEST_JOBS at a time (default: the number of cores).
work=$(mktemp -d)
units=()
for t in "$dir"/build/tests/test_*; do [ -x "$t" ] && units+=("$t"); done
for t in "${units[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$test_jobs" ]; do wait -n; done
    run_unit "$t" &
done
wait
for t in "${units[@]}"; do report_unit "$t"; done
rm -rf "$work"

shopt -s nullglob
# The files that take longest start first, so that the jobs end close together: Bats hands the
# files to its jobs in the order given.
suites=()
for f in mpi train decode readme demo; do [ -f "tests/bats/$f.bats" ] && suites+=("tests/bats/$f.bats"); done
for f in tests/bats/*.bats; do [[ " ${suites[*]} " == *" $f "* ]] || suites+=("$f"); done
if [ ${#suites[@]} -gt 0 ] && [ "${VALGRIND:-0}" != 1 ]; then
    out=$(mktemp)
    bats --tap --timing "${bats_jobs[@]}" "${suites[@]}" > "$out" 2>&1
    rc=$?
    # the slowest tests, to keep the suite's time in view
    sed -n 's/^ok [0-9]* \(.*\) in \([0-9]*\)ms\( #.*\)*$/\2 \1/p' "$out" | sort -rn |
        awk -v l="$label" 'NR <= 5 { printf "%s bats: slow: %.1f s %s\n", l, $1 / 1000, substr($0, length($1) + 2) }'
    read -r p f sk < <(tap_count < "$out")
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; cat "$out"; fi
    awk '/^not ok /{show=1} /^ok /{show=0} show' "$out" | head -200 | sed "s/^/  [$label bats] /"
    if [ "$f" -ne 0 ]; then status=1; tap_fails "$label bats" "$out" "exit status $rc"; fi
    tap_skips "$label bats" "$out"
    echo "$label bats: $p passed, $f failed, $sk skipped"
    echo "$label-bats $p $f $sk" >> "$counts"
    rm -f "$out"
fi
exit $status
