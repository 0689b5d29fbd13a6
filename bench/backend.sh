#!/usr/bin/env bash
# Backend benchmark: sgemm GFLOP/s through the plugin at the BASE shapes vs OpenBLAS at 2048^3, and
# one BASE training step's worth of every other kernel. Runs under the shared benchmark lock.
# Usage: bash bench/backend.sh [BACKEND [THREADS [V]]]
set -eu
cd "$(dirname "$0")/.."
make -s bench-built >/dev/null
export NMT_PLUGIN_PATH=$PWD/bin
exec flock /tmp/nmt-bench.lock build/bench/backend_bench "$@"
