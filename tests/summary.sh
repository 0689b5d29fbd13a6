#!/usr/bin/env bash
# Sums the "suite passed failed" lines of COUNTS and prints the closing "N passed, N failed" line.
# Exit status 1 if anything failed or no test ran.
f=${1:-.check-counts}
awk '{p+=$2; q+=$3} END{printf "%d passed, %d failed\n", p, q; exit (q>0 || p==0)}' "$f"
