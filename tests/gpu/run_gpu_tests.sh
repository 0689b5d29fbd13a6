#!/usr/bin/env bash
# Runs the cuda plugin's tests on a machine with an NVIDIA GPU (they cannot run elsewhere):
#   1. build (make tests-built), list the plugins: cuda must score > 0
#   2. the op test: every kernel of cuda against cpu on random inputs (float32, 1e-4 relative),
#      including the ABI 2.2 slots: attention_*_lse (1e-4), cast (exact), bf16 gemm/gemm_ex (1e-3)
#   3. when nmt-train exists: the first 50 training steps on cpu and cuda (float32) give losses
#      within 1e-3 (NMT_GPU_TRAIN_ARGS: the nmt-train arguments, e.g. preset, batch stream, seed);
#      cuda trains through the attention_*_lse slots (no P kept). Then --precision bf16: cuda's
#      losses within 1% (relative) of cpu's bf16 run (the same bf16 rounding, other sum orders)
#      and within 2% of cuda's float32 run
#   4. when nmt-decode exists: greedy translations identical on cpu and cuda (NMT_GPU_DECODE_ARGS)
#   5. with bin/nmt-comm-nccl.so: one NCCL rank against the cpu plugin's losses; with 2 GPUs or
#      more and mpirun, one rank per GPU against one process (NMT_GPU_TRAIN_ARGS, without -q: this
#      step reads nmt-train's notice that NCCL reduces the gradients)
#   6. the op test under compute-sanitizer: memcheck (with leak check), racecheck, synccheck
#      (each limited to NMT_GPU_SANITIZER_TIMEOUT seconds, default 900)
# Usage: tests/gpu/run_gpu_tests.sh [OUTDIR]   (logs go to OUTDIR, default /tmp/nmt-gpu-tests)
# NMT_GPU_NO_BUILD=1 uses the binaries already in bin/ (built elsewhere, e.g. on a machine with the
# -dev packages) and NMT_GPU_OPS_TEST names the op-test binary (default build/tests/test_backend_ops).
# Exit status 0 when every step that ran passed, 1 otherwise. Skipped steps say why.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-/tmp/nmt-gpu-tests}
mkdir -p "$out"
cd "$src" || exit 1
export NMT_PLUGIN_PATH=$src/bin NMT_SRCDIR=$src
status=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; status=1; }
skip() { echo "SKIP $*"; }

ops_test=${NMT_GPU_OPS_TEST:-build/tests/test_backend_ops}
echo "== build"
if [ -n "${NMT_GPU_NO_BUILD:-}" ]; then
    skip "build (NMT_GPU_NO_BUILD: using the binaries in bin/ and $ops_test)"
else
    make -j"$(nproc)" tests-built > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; fail "build"; exit 1; }
    tail -1 "$out/build.log"
fi
[ -f bin/nmt-backend-cuda.so ] || { fail "bin/nmt-backend-cuda.so was not built (is nvcc on PATH?)"; exit 1; }
command -v nvidia-smi > /dev/null && nvidia-smi -L

echo "== plugins"
bin/nmt-backends | tee "$out/backends.txt"
if grep -qP '^cuda\t[1-9][0-9]*\t' "$out/backends.txt"; then
    pass "cuda scores > 0"
else
    fail "cuda scores 0 here: no usable GPU (driver, compute capability >= 8.0?)"
    exit 1
fi
bin/nmt-backends --backend cuda | tee "$out/cuda-props.txt" || fail "nmt-backends --backend cuda"
if grep -q '^default: cuda ' "$out/backends.txt"; then pass "auto picks cuda"; else fail "auto does not pick cuda"; fi

echo "== op test (cuda vs cpu)"
"$ops_test" > "$out/ops.tap" 2>&1
rc=$?
grep -E '^(not )?ok' "$out/ops.tap" | grep -E 'cuda|not ok'
if [ $rc -eq 0 ] && grep -q '^ok .* cuda vs cpu' "$out/ops.tap" && ! grep -q '^not ok' "$out/ops.tap"; then
    pass "op test"
else
    fail "op test (see $out/ops.tap)"
fi

echo "== training: cpu vs cuda, float32, 50 steps"
if [ ! -x bin/nmt-train ]; then
    skip "bin/nmt-train not built yet"
elif [ -z "${NMT_GPU_TRAIN_ARGS:-}" ]; then
    skip "set NMT_GPU_TRAIN_ARGS to the nmt-train arguments (preset small, a batch stream, a seed, 50 steps)"
else
    # shellcheck disable=SC2086
    if ! bin/nmt-train --backend cpu $NMT_GPU_TRAIN_ARGS --log "$out/train-cpu.jsonl" > "$out/train-cpu.out" 2>&1 ||
        ! bin/nmt-train --backend cuda $NMT_GPU_TRAIN_ARGS --log "$out/train-cuda.jsonl" > "$out/train-cuda.out" 2>&1; then
        fail "nmt-train (see $out/train-*.out)"
    elif /usr/bin/python3 - "$out/train-cpu.jsonl" "$out/train-cuda.jsonl" <<'PY'; then
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l][:50]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l][:50]
worst = max((abs(x - y) for x, y in zip(a, b)), default=float("inf"))
print("steps compared: %d, largest loss difference %.3g" % (min(len(a), len(b)), worst))
sys.exit(0 if len(a) == len(b) and len(a) > 0 and worst <= 1e-3 else 1)
PY
        pass "losses within 1e-3"
    else
        fail "losses differ by more than 1e-3"
    fi
fi

# Compares the first 50 losses of two JSON-lines logs: exit 0 when within TOL (relative to the
# first log's loss when REL is 1, else absolute).
compare_losses() { # LOG_A LOG_B TOL REL
    /usr/bin/python3 - "$@" <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l][:50]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l][:50]
tol, rel = float(sys.argv[3]), sys.argv[4] == "1"
worst = max((abs(x - y) / (abs(x) if rel else 1) for x, y in zip(a, b)), default=float("inf"))
print("steps compared: %d, largest %s loss difference %.3g" % (min(len(a), len(b)), "relative" if rel else "absolute", worst))
sys.exit(0 if len(a) == len(b) and len(a) > 0 and worst <= tol else 1)
PY
}

echo "== training: --precision bf16, cuda vs cpu (bf16) and vs cuda float32, 50 steps"
if [ ! -x bin/nmt-train ] || [ -z "${NMT_GPU_TRAIN_ARGS:-}" ]; then
    skip "needs bin/nmt-train and NMT_GPU_TRAIN_ARGS (as above)"
elif [ ! -s "$out/train-cuda.jsonl" ]; then
    fail "no float32 cuda log to compare with (the float32 step failed)"
else
    # shellcheck disable=SC2086
    if ! bin/nmt-train --backend cpu --precision bf16 $NMT_GPU_TRAIN_ARGS -o "$out/bf16-cpu.ckpt" --force \
            --log "$out/train-cpu-bf16.jsonl" > "$out/train-cpu-bf16.out" 2>&1 ||
        ! bin/nmt-train --backend cuda --precision bf16 $NMT_GPU_TRAIN_ARGS -o "$out/bf16-cuda.ckpt" --force \
            --log "$out/train-cuda-bf16.jsonl" > "$out/train-cuda-bf16.out" 2>&1; then
        fail "nmt-train --precision bf16 (see $out/train-*-bf16.out)"
    else
        if compare_losses "$out/train-cpu-bf16.jsonl" "$out/train-cuda-bf16.jsonl" 0.01 1; then
            pass "bf16 losses: cuda within 1% of cpu"
        else
            fail "bf16 losses: cuda differs from cpu by more than 1%"
        fi
        if compare_losses "$out/train-cuda.jsonl" "$out/train-cuda-bf16.jsonl" 0.02 1; then
            pass "bf16 losses within 2% of float32 on cuda"
        else
            fail "bf16 losses differ from float32 by more than 2% on cuda"
        fi
    fi
fi

echo "== decoding: cpu vs cuda, greedy"
if [ ! -x bin/nmt-decode ]; then
    skip "bin/nmt-decode not built yet"
elif [ -z "${NMT_GPU_DECODE_ARGS:-}" ]; then
    skip "set NMT_GPU_DECODE_ARGS to the nmt-decode arguments (checkpoint, test set, greedy)"
else
    # shellcheck disable=SC2086
    if bin/nmt-decode --backend cpu $NMT_GPU_DECODE_ARGS > "$out/decode-cpu.txt" 2> "$out/decode-cpu.err" &&
        bin/nmt-decode --backend cuda $NMT_GPU_DECODE_ARGS > "$out/decode-cuda.txt" 2> "$out/decode-cuda.err" &&
        cmp "$out/decode-cpu.txt" "$out/decode-cuda.txt"; then
        pass "same greedy translations"
    else
        fail "decoding differs or failed (see $out/decode-*)"
    fi
fi

echo "== NCCL: one rank against the cpu plugin's losses; every GPU against one process"
# Gradients reduced on the device (run/gpu_comm.h, bin/nmt-comm-nccl.so). One rank: --gpu-comm nccl
# with --update-freq 2 (the ordered sum runs through NCCL and the device adds) against the cpu
# plugin's --update-freq 2, losses within 1e-3. With G >= 2 GPUs and mpirun: G ranks (one GPU each)
# against one cuda process with --update-freq G, losses identical (the ordered sum's promise).
losses_close() { # $1 $2 jsonl logs, $3 tolerance
    /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l]
worst = max((abs(x - y) for x, y in zip(a, b)), default=float("inf"))
print("steps compared: %d, largest loss difference %.3g" % (min(len(a), len(b)), worst))
sys.exit(0 if len(a) == len(b) and len(a) > 0 and worst <= float(sys.argv[3]) else 1)
PY
}
if [ ! -f bin/nmt-comm-nccl.so ] || [ ! -x bin/nmt-train ]; then
    skip "bin/nmt-comm-nccl.so or bin/nmt-train not built (nccl.h missing?)"
elif [ -z "${NMT_GPU_TRAIN_ARGS:-}" ]; then
    skip "set NMT_GPU_TRAIN_ARGS (see the training step)"
else
    # shellcheck disable=SC2086
    if bin/nmt-train --backend cpu $NMT_GPU_TRAIN_ARGS --update-freq 2 --force -o "$out/nccl-cpu.ckpt" \
            --log "$out/nccl-cpu.jsonl" > "$out/nccl-cpu.out" 2>&1 &&
        bin/nmt-train --backend cuda --gpu-comm nccl $NMT_GPU_TRAIN_ARGS --update-freq 2 --force -o "$out/nccl-1.ckpt" \
            --log "$out/nccl-1.jsonl" > "$out/nccl-1.out" 2>&1 &&
        grep -q 'gradients reduced on the GPUs through NCCL' "$out/nccl-1.out" &&
        losses_close "$out/nccl-cpu.jsonl" "$out/nccl-1.jsonl" 1e-3; then
        pass "1 NCCL rank: losses within 1e-3 of the cpu plugin's"
    else
        fail "1 NCCL rank (see $out/nccl-cpu.out, $out/nccl-1.out)"
    fi
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    if [ "${gpus:-0}" -lt 2 ] || ! command -v mpirun > /dev/null; then
        skip "NCCL across ranks: ${gpus:-0} GPU(s) here, or no mpirun (one rank only)"
    else
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        # shellcheck disable=SC2086
        if bin/nmt-train --backend cuda $NMT_GPU_TRAIN_ARGS --update-freq "$gpus" --force -o "$out/nccl-one.ckpt" \
                --log "$out/nccl-one.jsonl" > "$out/nccl-one.out" 2>&1 &&
            mpirun --bind-to none -np "$gpus" bin/nmt-train --backend cuda $NMT_GPU_TRAIN_ARGS --force \
                -o "$out/nccl-n.ckpt" --log "$out/nccl-n.jsonl" > "$out/nccl-n.out" 2>&1 &&
            grep -q 'through NCCL' "$out/nccl-n.out" && losses_close "$out/nccl-one.jsonl" "$out/nccl-n.jsonl" 0; then
            pass "$gpus NCCL ranks: the losses of one process with --update-freq $gpus, exactly"
        else
            fail "$gpus NCCL ranks (see $out/nccl-one.out, $out/nccl-n.out)"
        fi
    fi
fi

echo "== compute-sanitizer"
cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -z "$cs" ]; then
    skip "compute-sanitizer not found"
else
    for tool in memcheck racecheck synccheck; do
        extra=()
        [ $tool = memcheck ] && extra=(--leak-check full)
        if NMT_TEST_QUICK=1 timeout "${NMT_GPU_SANITIZER_TIMEOUT:-900}" "$cs" --tool $tool "${extra[@]}" --error-exitcode 9 "$ops_test" \
            > "$out/sanitizer-$tool.log" 2>&1; then
            pass "compute-sanitizer $tool"
        else
            grep -m 20 -E '=========' "$out/sanitizer-$tool.log"
            fail "compute-sanitizer $tool (see $out/sanitizer-$tool.log)"
        fi
    done
fi

echo "== done: $([ $status -eq 0 ] && echo all steps that ran passed || echo FAILURES)"
exit $status
