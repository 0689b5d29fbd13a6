#!/usr/bin/env bats
# The backend loader through nmt-backends: discovery, selection, and refusal of broken plugins.

load common

setup() {
    P="$NMT_BIN/../build/tests/plugins"
    G="$NMT_SRCDIR/tests/fixtures/backend/nmt-backend-garbage.so"
    TMP=$(mktemp -d)
}
teardown() { rm -rf "$TMP"; }

@test "lists the cpu plugin with its score and ABI, and the default" {
    run nmt-backends
    [ "$status" -eq 0 ]
    [ "${lines[0]}" = "$(printf 'NAME\tSCORE\tABI\tPATH\tSTATUS')" ]
    grep -qP '^cpu\t1[0-9]\t2\.10\t.*/nmt-backend-cpu\.so\tok$' <<< "$output"
    grep -q '^default: cpu (' <<< "$output"
}

@test "--backend cpu opens it and prints its properties" {
    run nmt-backends --backend cpu --threads 1
    [ "$status" -eq 0 ]
    grep -qx "$(printf 'name\tcpu')" <<< "$output"
    grep -qx "$(printf 'abi\t2.10')" <<< "$output"
    grep -qP '^device\tcpu: .*\(1 thread, ' <<< "$output"
    grep -qx "$(printf 'dtypes\tf32 bf16')" <<< "$output"
}

@test "OpenBLAS runs the sgemm kernel of the plugin's instruction set, unless OPENBLAS_CORETYPE names one" {
    local flags; flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
    [[ $flags == *" avx2 "* && $flags == *" fma "* ]] || skip "this CPU lacks AVX2 and FMA"
    unset OPENBLAS_CORETYPE
    NMT_CPU_ISA=avx2 run nmt-backends --backend cpu --threads 1
    [ "$status" -eq 0 ]
    grep -qP '^device\tcpu: .*\(1 thread, avx2, OpenBLAS Haswell\)$' <<< "$output"
    NMT_CPU_ISA=avx2 OPENBLAS_CORETYPE=Sandybridge run nmt-backends --backend cpu --threads 1
    [ "$status" -eq 0 ]
    grep -qP '^device\tcpu: .*\(1 thread, avx2, OpenBLAS Sandybridge\)$' <<< "$output"
    if [[ $flags == *" avx512f "* && $flags == *" avx512dq "* && $flags == *" avx512bw "* && $flags == *" avx512vl "* ]]; then
        NMT_CPU_ISA=avx512 run nmt-backends --backend cpu --threads 1
        [ "$status" -eq 0 ]
        grep -qP '^device\tcpu: .*\(1 thread, avx512, OpenBLAS SkylakeX\)$' <<< "$output"
    fi
}

@test "NMT_CPU_ISA caps the element-wise loops too, and every path gives their bits: training with OpenBLAS on one kernel writes the same tensors" {
    local flags; flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
    [[ $flags == *" avx2 "* && $flags == *" fma "* ]] || skip "this CPU lacks AVX2 and FMA"
    local isas="portable avx2" M="$NMT_SRCDIR/data/multi30k"
    if [[ $flags == *" avx512f "* && $flags == *" avx512dq "* && $flags == *" avx512bw "* && $flags == *" avx512vl "* ]]
    then
        isas="$isas avx512"
    fi
    zcat "$M/train.en.gz" | sed -n 1,200p > "$TMP/tr.en"
    zcat "$M/train.de.gz" | sed -n 1,200p > "$TMP/tr.de"
    nmt-tokenize --src "$TMP/tr.en" --tgt "$TMP/tr.de" | nmt-vocab -s 320 -o "$TMP/v.txt" 2>/dev/null
    nmt-tokenize --src "$TMP/tr.en" --tgt "$TMP/tr.de" --vocab "$TMP/v.txt" | nmt-batch -t 600 -o "$TMP/tr.b" 2>/dev/null
    for act in relu swish; do
        for isa in $isas; do
            # dropout, the activation and its backward, layer norm, attention, the loss, Adam
            NMT_CPU_ISA=$isa OPENBLAS_CORETYPE=Haswell nmt-train --d-model 32 --ff 64 --heads 2 --layers 1 \
                --threads 2 -q --warmup 20 --lr 2 --dropout 0.1 --activation-dropout 0.1 --attention-dropout 0.1 \
                --activation $act --vocab "$TMP/v.txt" -i "$TMP/tr.b" -o "$TMP/m.ckpt" --force --max-steps 6
            # the tensor bytes alone (the metadata records the run's options)
            python3 -c 'import hashlib, struct, sys
b = open(sys.argv[1], "rb").read()
print(hashlib.sha256(b[8 + struct.unpack("<Q", b[:8])[0]:]).hexdigest())' "$TMP/m.ckpt" > "$TMP/$act.$isa"
        done
        for isa in $isas; do
            cmp "$TMP/$act.portable" "$TMP/$act.$isa" || { echo "$act: NMT_CPU_ISA=$isa differs"; return 1; }
        done
    done
}

@test "--backend auto and NMT_BACKEND select cpu; an explicit path loads that file" {
    run nmt-backends --backend auto
    [ "$status" -eq 0 ]
    grep -qx "$(printf 'name\tcpu')" <<< "$output"
    NMT_BACKEND=cpu run nmt-backends --backend ''
    [ "$status" -eq 0 ]
    grep -qx "$(printf 'name\tcpu')" <<< "$output"
    run nmt-backends --backend "$NMT_BIN/nmt-backend-cpu.so"
    [ "$status" -eq 0 ] && grep -qx "$(printf 'path\t%s' "$NMT_BIN/nmt-backend-cpu.so")" <<< "$output"
}

@test "a plugin with another ABI major version is refused" {
    run nmt-backends --backend "$P/bad_abi.so"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-backends: refusing backend '$P/bad_abi.so': ABI 3.0, this program needs ABI 2.x" ]
}

@test "a plugin with a missing required slot is refused" {
    run nmt-backends --backend "$P/missing_slot.so"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-backends: refusing backend '$P/missing_slot.so': required slot 'attention_backward' is missing" ]
}

@test "a plugin whose table is too small is refused" {
    run nmt-backends --backend "$P/too_small.so"
    [ "$status" -eq 1 ]
    [[ "$output" == "nmt-backends: refusing backend '$P/too_small.so': table of "*" bytes is smaller than ABI 2.0's "* ]]
}

@test "a shared object without the entry symbol is refused" {
    run nmt-backends --backend "$P/no_entry.so"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-backends: refusing backend '$P/no_entry.so': not an nmt backend plugin (no symbol nmt_backend_entry)" ]
}

@test "a file that is not a shared object is refused" {
    run nmt-backends --backend "$G"
    [ "$status" -eq 1 ]
    [[ "$output" == "nmt-backends: refusing backend '$G': not a loadable shared object ("*"invalid ELF header)" ]]
}

@test "a missing file and an unknown name are errors naming what was searched" {
    run nmt-backends --backend "$TMP/none.so"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-backends: cannot load backend '$TMP/none.so': No such file or directory" ]
    NMT_PLUGIN_PATH="$TMP" run nmt-backends --backend nosuch
    [ "$status" -eq 1 ]
    [[ "$output" == "nmt-backends: no backend plugin 'nosuch' found (searched $TMP:"*":$NMT_BIN:$NMT_BIN/../lib/nmt); the backends found: cpu"* ]]
}

@test "the listing shows refused plugins with their reasons; auto skips them" {
    for f in bad_abi missing_slot no_entry minor_old; do cp "$P/$f.so" "$TMP/nmt-backend-$f.so"; done
    cp "$G" "$TMP/"
    NMT_PLUGIN_PATH="$TMP" run nmt-backends
    [ "$status" -eq 0 ]
    grep -qP "^bad_abi\t-\t-\t$TMP/nmt-backend-bad_abi.so\trefusing backend .*: ABI 3.0, " <<< "$output"
    grep -qP "^missing_slot\t-\t-\t.*required slot 'attention_backward' is missing$" <<< "$output"
    grep -qP "^no_entry\t-\t-\t.*no symbol nmt_backend_entry\)$" <<< "$output"
    grep -qP "^garbage\t-\t-\t.*not a loadable shared object" <<< "$output"
    grep -qP "^minor_old\t1\t2\.0\t$TMP/nmt-backend-minor_old.so\tok$" <<< "$output"
    grep -qP '^cpu\t' <<< "$output"
    grep -q '^default: cpu (' <<< "$output"
}

@test "the first directory of the search path wins for a name" {
    cp "$P/bad_abi.so" "$TMP/nmt-backend-cpu.so"
    NMT_PLUGIN_PATH="$TMP" run nmt-backends --backend cpu
    [ "$status" -eq 1 ]
    [[ "$output" == *"refusing backend '$TMP/nmt-backend-cpu.so': ABI 3.0"* ]]
}

@test "usage errors exit 2; --help and --version exit 0" {
    run nmt-backends --bogus
    [ "$status" -eq 2 ]
    run nmt-backends extra
    [ "$status" -eq 2 ]
    run nmt-backends --threads x
    [ "$status" -eq 2 ]
    run nmt-backends --help
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == "Usage: nmt-backends"* ]]
    run nmt-backends --version
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == "nmt-backends (nmt) "* ]]
}

@test "a plugin unusable here (score 0) says why: in the listing, --version, and when asked for by name" {
    cp "$P/unusable.so" "$TMP/nmt-backend-unusable.so"
    abi=$(awk '/define NMT_BACKEND_ABI_MAJOR/ {M = $3} /define NMT_BACKEND_ABI_MINOR/ {m = $3} END {print M "." m}' "$NMT_SRCDIR/plugins/backend.h")
    why="no test accelerator: /dev/nmt-test0 is missing"
    NMT_PLUGIN_PATH="$TMP" run nmt-backends
    [ "$status" -eq 0 ]
    grep -qxF "$(printf 'unusable\t0\t%s\t%s\tunusable here: %s' "$abi" "$TMP/nmt-backend-unusable.so" "$why")" <<< "$output"
    grep -q '^default: cpu (' <<< "$output"
    NMT_PLUGIN_PATH="$TMP" run nmt-backends --backend unusable
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-backends: backend 'unusable' ($TMP/nmt-backend-unusable.so) is not usable on this machine: $why" ]
    NMT_PLUGIN_PATH="$TMP" run nmt-decode --backend unusable -m "$NMT_SRCDIR/tests/fixtures/ref/decode/model.ckpt"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-decode: backend 'unusable' ($TMP/nmt-backend-unusable.so) is not usable on this machine: $why" ]
    NMT_PLUGIN_PATH="$TMP" run nmt-train --version
    [ "$status" -eq 0 ]
    [[ "$output" == *"plugin unusable ($TMP/nmt-backend-unusable.so): score 0, ABI $abi, unusable here: $why"* ]]
    # an unknown name lists the backends there are, the unusable one with them
    NMT_PLUGIN_PATH="$TMP" run nmt-decode --backend nosuch -m "$NMT_SRCDIR/tests/fixtures/ref/decode/model.ckpt"
    [ "$status" -eq 1 ]
    [[ "$output" == *"no backend plugin 'nosuch' found"*"the backends found: "*unusable* ]]
}
