#!/usr/bin/env bats
# The include graph follows the layers of libcommon/README.md (tests/layers.sh).

load common

setup() {
    src=${NMT_SRCDIR:-$(cd "$BATS_TEST_DIRNAME/../.." && pwd)}
    tree=$(mktemp -d)
    (cd "$src" && tar cf - libcommon plugins) | tar xf - -C "$tree"
}
teardown() { rm -rf "$tree"; }

@test "layers: the source tree follows libcommon/README.md" {
    run bash "$src/tests/layers.sh" "$src"
    [ "$status" -eq 0 ]
    [ -z "$output" ]
}

@test "layers: a lower layer including a higher one is refused, naming the file and line" {
    sed -i '1a #include "nn/model.h"' "$tree/libcommon/base/util.c"
    run bash "$src/tests/layers.sh" "$tree"
    [ "$status" -eq 1 ]
    [[ "$output" == *'libcommon/base/util.c:2: layer base includes "nn/model.h"'* ]]
}

@test "layers: a sibling layer not listed is refused (eval may not use io)" {
    sed -i '1a #include "io/stream.h"' "$tree/libcommon/eval/bleu.c"
    run bash "$src/tests/layers.sh" "$tree"
    [ "$status" -eq 1 ]
    [[ "$output" == *'libcommon/eval/bleu.c:2: layer eval includes "io/stream.h"'* ]]
}

@test "layers: an include without its layer, the plugin ABI outside run, a plugin reaching into libcommon, two headers of one name" {
    sed -i '1a #include "util.h"' "$tree/libcommon/io/file.c"
    sed -i '1a #include "../../plugins/backend.h"' "$tree/libcommon/text/bpe.c"
    echo '#include "../../libcommon/base/util.h"' >> "$tree/plugins/cpu/cpu.h"
    cp "$tree/libcommon/base/buf.h" "$tree/libcommon/text/buf.h"
    run bash "$src/tests/layers.sh" "$tree"
    [ "$status" -eq 1 ]
    [[ "$output" == *'libcommon/io/file.c:2: includes "util.h" without its layer'* ]]
    [[ "$output" == *'libcommon/text/bpe.c:2: includes the plugin ABI'* ]]
    [[ "$output" == *'plugins/cpu/cpu.h:'*'a plugin includes only its own headers'* ]]
    [[ "$output" == *'headers share the name buf.h'* ]]
}

@test "layers: a folder that is not a layer is refused" {
    mkdir "$tree/libcommon/misc"
    echo 'int x;' > "$tree/libcommon/misc/x.c"
    run bash "$src/tests/layers.sh" "$tree"
    [ "$status" -eq 1 ]
    [[ "$output" == *'libcommon/misc/x.c: folder libcommon/misc is not a layer'* ]]
}
