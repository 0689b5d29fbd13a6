#!/usr/bin/env bash
# Prints the reason of each skipped test (from COUNTS.skips), then the name of each failed test
# (COUNTS.fails: last, so that the tail of a long log shows them), then sums the "suite passed failed
# [skipped]" lines of COUNTS into the closing line "N passed, N failed, N skipped" (a skip is never
# counted as a pass). Exit status 1 if anything failed or no test ran.
f=${1:-.check-counts}
if [ -s "$f.skips" ]; then
    echo "skipped:"
    sed 's/^/  /' "$f.skips"
fi
if [ -s "$f.fails" ]; then
    echo "failed:"
    sed 's/^/  /' "$f.fails"
fi
awk '{p+=$2; q+=$3; s+=$4} END{printf "%d passed, %d failed, %d skipped\n", p, q, s; exit (q>0 || p==0)}' "$f"
