#!/usr/bin/env bats
# The cuda plugin on a machine without a usable GPU: it loads, scores 0, and auto falls back to cpu.
# (On a machine with a GPU, tests/gpu/run_gpu_tests.sh holds it to the cpu plugin.)

load common

setup() {
    CUDA="$NMT_BIN/nmt-backend-cuda.so"
    [ -f "$CUDA" ] || skip "cuda plugin not built (no nvcc)"
    if grep -q 'libcuda\.so\.1 ' <<< "$(ldconfig -p 2>/dev/null)"; then
        skip "a CUDA driver is installed here: run tests/gpu/run_gpu_tests.sh"
    fi
    TMP=$(mktemp -d)
}
teardown() { [ -z "${TMP:-}" ] || rm -rf "$TMP"; }

@test "nmt-backends lists cuda with score 0 and ABI 2.10; the default is cpu" {
    run nmt-backends
    [ "$status" -eq 0 ]
    grep -qP "^cuda\t0\t2\.10\t$CUDA\tunusable here: no NVIDIA driver: .*libcuda\.so\.1.*$" <<< "$output"
    grep -q '^default: cpu (' <<< "$output"
}

@test "--backend auto picks cpu; --backend cuda is refused with the reason" {
    run nmt-backends --backend auto
    [ "$status" -eq 0 ]
    grep -qx "$(printf 'name\tcpu')" <<< "$output"
    run nmt-backends --backend cuda
    [ "$status" -eq 1 ]
    [[ "$output" == "nmt-backends: backend 'cuda' ($CUDA) is not usable on this machine: no NVIDIA driver: "*libcuda.so.1* ]]
    V="$NMT_SRCDIR/tests/fixtures/tok/tiny.vocab"
    nmt-tokenize --vocab "$V" --tsv "$NMT_SRCDIR/tests/fixtures/tok/pairs.tsv" | nmt-batch -o "$TMP/b" 2> /dev/null
    run nmt-train --backend cuda --vocab "$V" -i "$TMP/b" -o "$TMP/m.ckpt"
    [ "$status" -eq 1 ]; [[ "$output" == *"is not usable on this machine: no NVIDIA driver"* ]]
    run nmt-train --backend cuda --precision bf16 --vocab "$V" -i "$TMP/b" -o "$TMP/m.ckpt"
    [ "$status" -eq 1 ]; [[ "$output" == *"is not usable on this machine: no NVIDIA driver"* ]]
    [ ! -e "$TMP/m.ckpt" ]
    run nmt-train --version
    [[ "$output" == *"plugin cuda ($CUDA): score 0, ABI 2.10, unusable here: no NVIDIA driver: "* ]]
}

@test "with a driver library but no device the runtime starts, fails cleanly, and cuda scores 0" {
    command -v cc > /dev/null || skip "no C compiler"
    printf 'int cuInit(unsigned f) { (void)f; return 100; }\nint cuDriverGetVersion(int *v) { *v = 13000; return 0; }\n' > "$TMP/stub.c"
    cc -shared -fPIC "$TMP/stub.c" -o "$TMP/libcuda.so.1"
    LD_LIBRARY_PATH="$TMP" run nmt-backends
    [ "$status" -eq 0 ]
    grep -qP "^cuda\t0\t2\.10\t.*\tunusable here: no CUDA device: .+$" <<< "$output"
    grep -q '^default: cpu (' <<< "$output"
    LD_LIBRARY_PATH="$TMP" run nmt-backends --backend auto
    [ "$status" -eq 0 ] && grep -qx "$(printf 'name\tcpu')" <<< "$output"
}
