#!/usr/bin/env bats
# nmt-cat and the nmt dispatcher: output, golden files, errors and exit codes.

load common

setup() {
    F="$NMT_SRCDIR/tests/fixtures/stream"
    cd "$F"
    TMP=$(mktemp -d)
}
teardown() { rm -rf "$TMP"; }

@test "fixtures are reproduced byte for byte by the writer" {
    "$NMT_BIN/../build/tests/helpers/gen_stream" "$TMP"
    for f in *.nmt; do cmp "$f" "$TMP/$f"; done
}

@test "text output of each record kind matches the golden files" {
    for k in ids tok batch hyp blob concat; do
        nmt-cat "$k.nmt" > "$TMP/out"
        diff "$TMP/out" "expected/$k.txt"
    done
}

@test "a hyp stream of format 1.1 (before alignments) reads as before" {
    nmt-cat ../stream-1.1/hyp.nmt > "$TMP/out"
    diff "$TMP/out" expected/hyp.txt
    run nmt-cat --header ../stream-1.1/hyp.nmt
    [ "${lines[1]}" = "version	1.1" ]
}

@test "--json output of each record kind matches the golden files" {
    for k in ids tok batch hyp blob concat; do
        nmt-cat --json "$k.nmt" > "$TMP/out"
        diff "$TMP/out" "expected/$k.json"
    done
}

@test "reads stdin, '-' and several files" {
    run bash -c 'nmt-cat < ids.nmt | wc -l'
    [ "$output" -eq 5 ]
    run bash -c 'nmt-cat - ids.nmt < ids1.nmt | wc -l'
    [ "$output" -eq 10 ]
}

@test "cat of two streams of the same kind reads as one stream" {
    run bash -c 'cat ids.nmt ids1.nmt | nmt-cat --count'
    [ "$status" -eq 0 ]
    [ "$output" = 10 ]
}

@test "--header shows kind, version, producer and provenance" {
    run nmt-cat --header ids.nmt
    [ "$status" -eq 0 ]
    diff <(printf '%s\n' "$output") expected/ids.header
    run nmt-cat -H --json ids.nmt
    diff <(printf '%s\n' "$output") expected/ids.header.json
}

@test "--count counts records" {
    run nmt-cat --count ids.nmt
    [ "$output" = 5 ]
    run nmt-cat -c blob.nmt hyp.nmt
    [ "$output" = 4 ]
}

@test "--head limits the records printed" {
    run nmt-cat --head 2 ids.nmt
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 2 ]
    run nmt-cat --head 0 ids.nmt
    [ "$status" -eq 2 ]
}

@test "--check accepts valid streams silently" {
    for f in ids ids1 tok batch hyp blob concat; do
        run nmt-cat --check "$f.nmt"
        [ "$status" -eq 0 ]
        [ -z "$output" ]
    done
}

@test "--check rejects each corrupt fixture with its golden one-line reason" {
    for f in bad-checksum bad-count bad-magic bad-record empty future-version mixed-kinds no-end-marker text truncated; do
        run nmt-cat --check "$f.nmt"
        [ "$status" -eq 1 ]
        [ "${#lines[@]}" -eq 1 ]
        [ "$output" = "$(cat "expected/$f.err")" ]
    done
}

@test "--check --quiet prints nothing" {
    run nmt-cat --check --quiet truncated.nmt
    [ "$status" -eq 1 ]
    [ -z "$output" ]
}

@test "printing a truncated stream fails after the records it could read" {
    run nmt-cat no-end-marker.nmt
    [ "$status" -eq 1 ]
    [[ "$output" == *"truncated at byte 368"* ]]
}

@test "--kind requires a kind" {
    run nmt-cat --kind batch ids.nmt
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-cat: ids.nmt: unexpected kind at byte 0: expected a batch stream, got ids 1.2" ]
    run nmt-cat --kind ids --count ids.nmt
    [ "$status" -eq 0 ]
}

@test "missing file: one-line error, exit 1" {
    run nmt-cat nonexistent.nmt
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-cat: cannot open 'nonexistent.nmt': No such file or directory" ]
}

@test "bad option: usage error, exit 2" {
    run nmt-cat --bogus
    [ "$status" -eq 2 ]
    [[ "$output" == *"Try 'nmt-cat --help'"* ]]
}

@test "--help and --version" {
    run nmt-cat --help
    [ "$status" -eq 0 ]
    [[ "$output" == Usage:* ]]
    run nmt-cat --version
    [ "$status" -eq 0 ]
    [[ "$output" == "nmt-cat (nmt) "* ]]
}

@test "-o writes to a file; a failed write to stdout is reported" {
    run nmt-cat -o "$TMP/x.txt" ids.nmt
    [ "$status" -eq 0 ]
    diff "$TMP/x.txt" expected/ids.txt
    if [ -w /dev/full ]; then
        run bash -c 'nmt-cat ids.nmt > /dev/full'
        [ "$status" -eq 1 ]
        [[ "$output" == *"error writing to stdout"* ]]
    fi
}

@test "a stream is also a valid zstd file" {
    command -v zstd >/dev/null || skip "zstd CLI not installed"
    run bash -c 'zstd -dc < ids.nmt | wc -c'
    [ "$status" -eq 0 ]
    [ "$output" -gt 0 ]
}

@test "nmt dispatches to nmt-cat" {
    run nmt cat --count ids.nmt
    [ "$status" -eq 0 ]
    [ "$output" = 5 ]
}

@test "nmt --help lists the tools found" {
    run nmt --help
    [ "$status" -eq 0 ]
    [[ "$output" == *"Commands found:"*" cat"* ]]
}

@test "nmt with an unknown command or no command: usage error" {
    run nmt frobnicate
    [ "$status" -eq 2 ]
    [[ "${lines[0]}" == "nmt: 'frobnicate' is not an nmt command (no nmt-frobnicate found)" ]]
    run nmt
    [ "$status" -eq 2 ]
    run nmt --bogus
    [ "$status" -eq 2 ]
}

@test "nmt --version" {
    run nmt --version
    [ "$status" -eq 0 ]
    [[ "$output" == "nmt (nmt) "* ]]
}

@test "a checkpoint is shown: metadata, one line per tensor; --header, --count, --check, --json" {
    local ck="$NMT_SRCDIR/tests/fixtures/ref/decode/model.ckpt"
    run nmt-cat "$ck"
    [ "$status" -eq 0 ]
    [ "${lines[0]}" = "$(printf 'format\tnmt-checkpoint 1.0')" ]
    [[ "$output" == *"$(printf 'model.d_model\t')"* ]]
    [[ "$output" == *"$(printf 'tensor\temb.weight\tF32\t')"*x* ]]
    n=$(grep -c '^tensor	' <<< "$output")
    [ "$n" -gt 10 ]
    run nmt-cat --count "$ck"
    [ "$status" -eq 0 ]
    [ "$output" = "$n" ]
    run nmt-cat --header "$ck"
    [ "$status" -eq 0 ]
    [ "$(grep -c '^tensor	' <<< "$output")" -eq 0 ]
    [[ "$output" == *"vocab.fingerprint"* ]]
    run nmt-cat --check "$ck"
    [ "$status" -eq 0 ]
    nmt-cat --json "$ck" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["metadata"]["format"].startswith("nmt-checkpoint"); assert len(d["tensors"]) == int(sys.argv[1]); assert all(len(t["shape"]) >= 1 for t in d["tensors"])' "$n"
    # a checkpoint cut short is an error naming it
    head -c 5000 "$ck" > "$BATS_TEST_TMPDIR/cut.ckpt"
    run nmt-cat "$BATS_TEST_TMPDIR/cut.ckpt"
    [ "$status" -eq 1 ]
    [[ "$output" == *"cut.ckpt"* ]]
}

@test "a vocabulary is shown as it is; --header its header, --count its pieces" {
    cd "$BATS_TEST_TMPDIR"
    printf 'a b c\nb c d\n' > t.txt
    nmt-tokenize t.txt | nmt-vocab -s 270 -o v.txt 2>/dev/null
    run nmt-cat v.txt
    [ "$status" -eq 0 ]
    diff <(printf '%s\n' "$output") v.txt
    run nmt-cat --header v.txt
    [ "$status" -eq 0 ]
    [ "${lines[0]}" = "nmt-vocab 1.0" ]
    [ "$(grep -c '^[0-9]' <<< "$output")" -eq 0 ]
    run nmt-cat --count v.txt
    [ "$output" = "$(sed -n 's/^size //p' v.txt)" ]
    sed -i 's/^fingerprint .*/fingerprint 0000000000000000/' v.txt
    run nmt-cat --check v.txt
    [ "$status" -eq 1 ]
    [[ "$output" == *"v.txt"* ]]
}

@test "--check rejects a stream whose end-marker checksum alone is wrong" {
    cp ids.nmt "$BATS_TEST_TMPDIR/x.nmt"
    cd "$BATS_TEST_TMPDIR"
    n=$(stat -c %s x.nmt)
    # the end marker's last 4 bytes are its checksum: flip a bit of the last one
    last=$(tail -c 1 x.nmt | od -An -tu1 | tr -d ' ')
    printf "$(printf '\\%03o' $((last ^ 1)))" | dd of=x.nmt bs=1 seek=$((n - 1)) conv=notrunc status=none
    [ "$(stat -c %s x.nmt)" -eq "$n" ]
    fails cmp -s x.nmt "$NMT_SRCDIR/tests/fixtures/stream/ids.nmt"
    run nmt-cat --check x.nmt
    [ "$status" -eq 1 ]
    [[ "$output" == *"end marker checksum mismatch"* ]]
}
