#!/usr/bin/env bats
# The NCCL device communication module (bin/nmt-comm-nccl.so, built with the cuda plugin) on a
# machine without a GPU: it loads and refuses with one line naming what is missing (libnccl, the
# driver, a device), and nmt-train's choice between NCCL and MPI. A GPU machine runs it for real in
# tests/gpu/run_gpu_tests.sh.

load common

setup_file() {
    export D="$BATS_FILE_TMPDIR"
    local M="$NMT_SRCDIR/data/multi30k"
    zcat "$M/train.en.gz" | sed -n 1,300p > "$D/tr.en"
    zcat "$M/train.de.gz" | sed -n 1,300p > "$D/tr.de"
    nmt-tokenize --src "$D/tr.en" --tgt "$D/tr.de" | nmt-vocab -s 300 -o "$D/v.txt" 2>/dev/null
    nmt-tokenize --src "$D/tr.en" --tgt "$D/tr.de" --vocab "$D/v.txt" | nmt-batch -t 1500 -o "$D/tr.b" 2>/dev/null
}

setup() {
    [ -f "$NMT_BIN/nmt-comm-nccl.so" ] || skip "nmt-comm-nccl.so not built (no nvcc or no nccl.h)"
    H="$NMT_BIN/../build/tests/helpers/nccl_open"
    cd "$BATS_TEST_TMPDIR"
}

# Writes a driver library libcuda.so.1 to $BATS_TEST_TMPDIR/drv whose cuInit returns $1 and which
# reports $2 devices.
stub_driver() {
    mkdir -p drv
    cat > drv/stub.c <<C
typedef struct ctx *ctx_t;
int cuInit(unsigned f) { (void)f; return $1; }
int cuGetErrorString(int rc, const char **s) { *s = rc == 100 ? "no CUDA-capable device is detected" : "stub error"; return 0; }
int cuDeviceGetCount(int *n) { *n = $2; return 0; }
int cuDeviceGet(int *d, int i) { *d = i; return 0; }
int cuDevicePrimaryCtxRetain(ctx_t *c, int d) { (void)c; (void)d; return 999; }
int cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return 0; }
int cuCtxSetCurrent(ctx_t c) { (void)c; return 0; }
int cuCtxSynchronize(void) { return 0; }
int cuStreamCreate(void **s, unsigned f) { (void)s; (void)f; return 0; }
int cuStreamSynchronize(void *s) { (void)s; return 0; }
int cuStreamDestroy_v2(void *s) { (void)s; return 0; }
C
    cc -shared -fPIC drv/stub.c -o drv/libcuda.so.1
}

@test "without libnccl the module says so in one line" {
    run env NMT_NCCL_LIBRARY=/nonexistent/libnccl.so.2 "$H"
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ "$output" == "cannot start NCCL: cannot load NCCL (/nonexistent/libnccl.so.2: "*"); install libnccl2 or name it in NMT_NCCL_LIBRARY" ]]
}

@test "without a driver, or without a device, the module refuses with the reason" {
    if ! grep -q 'libnccl\.so\.2 ' <<< "$(ldconfig -p 2>/dev/null)"; then
        skip "libnccl.so.2 is not installed here"
    fi
    if ! grep -q 'libcuda\.so\.1 ' <<< "$(ldconfig -p 2>/dev/null)"; then
        run "$H"
        [ "$status" -eq 1 ]
        [[ "$output" == "cannot start NCCL: no NVIDIA driver: "*"libcuda.so.1"* ]]
    fi
    stub_driver 100 0
    run env LD_LIBRARY_PATH="$PWD/drv" "$H"
    [ "$status" -eq 1 ]
    [ "$output" = "cannot start NCCL: no CUDA device: cuInit: no CUDA-capable device is detected" ]
    stub_driver 0 0
    run env LD_LIBRARY_PATH="$PWD/drv" "$H"
    [ "$status" -eq 1 ]
    [ "$output" = "cannot start NCCL: no CUDA device: the driver found none" ]
    stub_driver 0 1
    run env LD_LIBRARY_PATH="$PWD/drv" "$H" 3
    [ "$status" -eq 1 ]
    [ "$output" = "cannot start NCCL: cuda device 3 does not exist (1 device found)" ]
    # device 0 exists: the stub then refuses the device's context, and the module reports it
    run env LD_LIBRARY_PATH="$PWD/drv" "$H" 0
    [ "$status" -eq 1 ]
    [[ "$output" == "cannot start NCCL: "* ]]
}

@test "nmt-train: cpu ranks reduce through MPI; --gpu-comm nccl needs the cuda backend; unknown names are usage errors" {
    local T=(nmt-train --preset tiny --d-model 32 --ff 64 --heads 2 --layers 1 --threads 1 --vocab "$D/v.txt"
             -i "$D/tr.b" --max-steps 2)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
    if command -v mpirun > /dev/null; then
        run mpirun --oversubscribe --bind-to none -np 2 "${T[@]}" -o auto.ckpt
        [ "$status" -eq 0 ]
        [[ "$output" == *"2 ranks (Open MPI"*"ordered reduction"* ]]
        [[ "$output" != *NCCL* ]]
    fi
    run "${T[@]}" --gpu-comm nccl --backend cpu -o x.ckpt
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-train: NCCL reduces gradients on NVIDIA GPUs: it needs --backend cuda, not cpu" ]
    [ ! -e x.ckpt ]
    run nmt-train --gpu-comm gloo -o x.ckpt
    [ "$status" -eq 2 ]
    [[ "$output" == *"invalid --gpu-comm 'gloo' (expected auto, nccl or mpi)"* ]]
}
