#!/usr/bin/env bats
# `make install PREFIX=DIR` gives tools that find their plugins from a clean environment.

load common

@test "install: tools installed under any prefix find their plugins and run" {
    cd "$BATS_TEST_TMPDIR"
    prefix="$BATS_TEST_TMPDIR/prefix"
    build=$(cd "$NMT_BIN/.." && pwd)
    run make -s -C "$NMT_SRCDIR" O="$build" PREFIX="$prefix" install
    [ "$status" -eq 0 ]
    [ -x "$prefix/bin/nmt-decode" ]
    [ -f "$prefix/lib/nmt/nmt-backend-cpu.so" ]
    run env -i HOME="$BATS_TEST_TMPDIR" PATH=/usr/bin:/bin "$prefix/bin/nmt-backends"
    [ "$status" -eq 0 ]
    [[ "$output" == *"$prefix/bin/../lib/nmt/nmt-backend-cpu.so"* ]]
    # the installed nmt-decode finds the cpu backend and translates as the build's does; so does
    # the installed dispatcher, which finds its tools beside itself
    F="$NMT_SRCDIR/tests/fixtures/ref/decode"
    nmt-decode -m "$F/model.ckpt" --out hyp < "$F/src.en" | nmt-cat > built.txt
    env -i HOME="$BATS_TEST_TMPDIR" PATH=/usr/bin:/bin "$prefix/bin/nmt-decode" -m "$F/model.ckpt" --out hyp \
        < "$F/src.en" > installed.hyp
    env -i HOME="$BATS_TEST_TMPDIR" PATH=/usr/bin:/bin "$prefix/bin/nmt" cat installed.hyp > installed.txt
    [ "$(wc -l < installed.txt)" -eq 40 ]
    cmp built.txt installed.txt
    # the installed tree still works once moved elsewhere
    mv "$prefix" "$BATS_TEST_TMPDIR/moved"
    run env -i HOME="$BATS_TEST_TMPDIR" PATH=/usr/bin:/bin "$BATS_TEST_TMPDIR/moved/bin/nmt-backends"
    [ "$status" -eq 0 ]
    [[ "$output" == *"moved/bin/../lib/nmt/nmt-backend-cpu.so"* ]]
}
