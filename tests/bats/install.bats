#!/usr/bin/env bats
# `make install PREFIX=DIR` gives tools that find their plugins from a clean environment.

load common

@test "install: tools installed under any prefix find their plugins and run" {
    prefix="$BATS_TEST_TMPDIR/prefix"
    build=$(cd "$NMT_BIN/.." && pwd)
    run make -s -C "$NMT_SRCDIR" O="$build" PREFIX="$prefix" install
    [ "$status" -eq 0 ]
    [ -x "$prefix/bin/nmt-decode" ]
    [ -f "$prefix/lib/nmt/nmt-backend-cpu.so" ]
    run env -i HOME="$BATS_TEST_TMPDIR" PATH=/usr/bin:/bin "$prefix/bin/nmt-backends"
    [ "$status" -eq 0 ]
    [[ "$output" == *"$prefix/bin/../lib/nmt/nmt-backend-cpu.so"* ]]
    # the installed tree still works once moved elsewhere
    mv "$prefix" "$BATS_TEST_TMPDIR/moved"
    run env -i HOME="$BATS_TEST_TMPDIR" PATH=/usr/bin:/bin "$BATS_TEST_TMPDIR/moved/bin/nmt-backends"
    [ "$status" -eq 0 ]
    [[ "$output" == *"moved/bin/../lib/nmt/nmt-backend-cpu.so"* ]]
}
