#!/usr/bin/env bats
# Hostile and mismatched inputs: nothing is accepted silently, no named output is destroyed.
# Each case is run through the real programs; errors must name the input and where in it.

load common

setup_file() {
    export D="$BATS_FILE_TMPDIR" H="$NMT_BIN/../build/tests/helpers/batch_io"
    zcat "$NMT_SRCDIR/data/multi30k/val.en.gz" | sed -n 1,200p > "$D/a.en"
    zcat "$NMT_SRCDIR/data/multi30k/val.de.gz" | sed -n 1,200p > "$D/a.de"
    nmt-tokenize --src "$D/a.en" --tgt "$D/a.de" -o "$D/a.tok"
    nmt-tokenize -N none --src "$D/a.en" --tgt "$D/a.de" -o "$D/none.tok"
    nmt-vocab --size 400 -o "$D/v1" "$D/a.tok"
    nmt-vocab --size 500 -o "$D/v2" "$D/a.tok"
    nmt-tokenize -v "$D/v1" --src "$D/a.en" --tgt "$D/a.de" -o "$D/a.ids"
    nmt-tokenize -v "$D/v2" --src "$D/a.en" --tgt "$D/a.de" -o "$D/b.ids"
    nmt-batch -i "$D/a.ids" -o "$D/a.batches" 2>/dev/null
    nmt-batch -i "$D/b.ids" -o "$D/b.batches" 2>/dev/null
}

@test "hostile: concatenated ids streams of two vocabularies are refused by nmt-batch" {
    cat "$D/a.ids" "$D/b.ids" > "$D/ab.ids"
    run nmt-batch -i "$D/ab.ids" -o "$D/out.batches"
    [ "$status" -eq 1 ]
    [[ "$output" == *"$D/ab.ids: mixed streams at byte "*": a stream with vocab="*" follows one with vocab="* ]]
}

@test "hostile: concatenated streams of one vocabulary are still one stream" {
    cat "$D/a.ids" "$D/a.ids" > "$D/aa.ids"
    run nmt-cat --count "$D/aa.ids"
    [ "$status" -eq 0 ]
    [ "$output" = 400 ]
}

@test "hostile: nmt-cat --check refuses concatenated streams of two vocabularies" {
    cat "$D/a.ids" "$D/b.ids" > "$D/ab.ids"
    run nmt-cat --check "$D/ab.ids"
    [ "$status" -eq 1 ]
    [[ "$output" == *"mixed streams"* ]]
}

@test "hostile: nmt-tokenize --decode refuses a second stream of another vocabulary" {
    cat "$D/a.ids" "$D/b.ids" > "$D/ab.ids"
    run nmt-tokenize --decode -v "$D/v1" -i "$D/ab.ids"
    [ "$status" -eq 1 ]
    [[ "$output" == *"mixed streams"*"vocab="* ]]
}

@test "hostile: nmt-vocab refuses tok streams of two normalisations" {
    cat "$D/a.tok" "$D/none.tok" > "$D/mixed.tok"
    run nmt-vocab --size 300 -o "$D/v3" "$D/mixed.tok"
    [ "$status" -eq 1 ]
    [[ "$output" == *"mixed streams"*"normalize=none follows one with normalize=nfkc"* ]]
    [ ! -e "$D/v3" ]
}

@test "hostile: nmt-train refuses concatenated batch files of two vocabularies" {
    cat "$D/a.batches" "$D/b.batches" > "$D/ab.batches"
    run nmt-train -i "$D/ab.batches" --vocab "$D/v1" -o "$D/m.ckpt" --preset tiny --max-steps 2 -q --threads 1
    [ "$status" -eq 1 ]
    [[ "$output" == *"mixed streams"* ]]
    [ ! -e "$D/m.ckpt" ]
}

@test "hostile: batch rows without </s> are refused by nmt-cat --check and nmt-train, naming the record" {
    fp=$(sed -n '/^fingerprint /{s///p;q}' "$D/v1")
    printf '#5 #6 #2\t#7 #2\n#5 #6\t#7 #2\n' | "$H" gen --kind batch --vocab "$fp" > "$D/bad.batches"
    run nmt-cat --check "$D/bad.batches"
    [ "$status" -eq 1 ]
    [[ "$output" == *"bad.batches: record 2: batch record: row 0: the source does not end with </s>"* ]]
    run nmt-train -i "$D/bad.batches" --vocab "$D/v1" -o "$D/m2.ckpt" --preset tiny --max-steps 2 -q --threads 1
    [ "$status" -eq 1 ]
    [[ "$output" == *"does not end with </s>"* ]]
}

@test "hostile: stream readers name the common wrong inputs and say what to do" {
    run nmt-batch -i "$D/a.en"
    [ "$status" -eq 1 ]
    [[ "$output" == *"a.en: not an nmt stream at byte 0: "*"this is plain text; make a stream of it with nmt-tokenize"* ]]
    run nmt-batch -i "$D/v1"
    [ "$status" -eq 1 ]
    [[ "$output" == *"this is a vocabulary file (nmt-vocab(5)); give it with --vocab"* ]]
    run nmt-cat --kind ids "$D/v1"   # nmt-cat shows a vocabulary, unless a stream kind is required
    [ "$status" -eq 1 ]
    [[ "$output" == *"this is a vocabulary file (nmt-vocab(5)); give it with --vocab"* ]]
    gzip -c "$D/a.ids" > "$D/a.ids.gz"
    run nmt-batch -i "$D/a.ids.gz"
    [ "$status" -eq 1 ]
    [[ "$output" == *"this is gzip-compressed data; decompress it first"* ]]
    zstd -q -c "$D/a.en" > "$D/a.en.zst"
    run nmt-cat --check "$D/a.en.zst"
    [ "$status" -eq 1 ]
    [[ "$output" == *"this is zstd-compressed data without an nmt stream header"* ]]
    run bash -c 'echo hi | nmt-batch'
    [ "$status" -eq 1 ]
    [[ "$output" == *"stdin: not an nmt stream at byte 0: not a stream header: this is plain text"* ]]
}

@test "hostile: every stream reader gives the same hints: plain text, a vocabulary, a checkpoint, gzip, zstd" {
    ck="$NMT_SRCDIR/tests/fixtures/ref/decode/model.ckpt"
    gzip -c "$D/a.ids" > "$BATS_TEST_TMPDIR/a.ids.gz"
    zstd -q -c "$D/a.en" > "$BATS_TEST_TMPDIR/a.en.zst"
    n=0
    for bad in "$D/a.en" "$D/v1" "$ck" "$BATS_TEST_TMPDIR/a.ids.gz" "$BATS_TEST_TMPDIR/a.en.zst"; do
        case "$bad" in
        *.en) hint="this is plain text; make a stream of it with nmt-tokenize (with --vocab V for ids)" ;;
        */v1) hint="this is a vocabulary file (nmt-vocab(5)); give it with --vocab" ;;
        *.ckpt) hint="this is a checkpoint (safetensors); give it with -m" ;;
        *.gz) hint="this is gzip-compressed data; decompress it first" ;;
        *) hint="this is zstd-compressed data without an nmt stream header" ;;
        esac
        for cmd in "nmt-batch -i" "nmt-cat --kind ids" "nmt-cat --check --kind batch" "nmt-vocab" \
                   "nmt-tokenize --decode -v $D/v1" "nmt-train -v $D/v1 -o $BATS_TEST_TMPDIR/m.ckpt -i" \
                   "nmt-train -v $D/v1 -o $BATS_TEST_TMPDIR/m.ckpt -i $D/a.batches --valid" \
                   "nmt-decode -m $ck --in ids -i"; do
            run $cmd "$bad"
            [ "$status" -eq 1 ] || { echo "$cmd $bad: status $status: $output"; return 1; }
            [[ "$output" == *"$bad: not an nmt stream at byte 0: "*"$hint"* ]] || { echo "$cmd $bad: $output"; return 1; }
            n=$((n + 1))
        done
    done
    [ "$n" -eq 40 ]
    [ ! -e "$BATS_TEST_TMPDIR/m.ckpt" ]
}

@test "hostile: a checkpoint given as a stream is named as one" {
    nmt-train -i "$D/a.batches" --vocab "$D/v1" -o "$D/t.ckpt" --preset tiny --max-steps 1 -q --threads 1
    run nmt-batch -i "$D/t.ckpt"
    [ "$status" -eq 1 ]
    [[ "$output" == *"this is a checkpoint (safetensors); give it with -m"* ]]
}

@test "hostile: nmt-batch refuses to write its input file, which stays intact" {
    cp "$D/a.ids" "$D/same.ids"
    before=$(sha256sum < "$D/same.ids")
    run nmt-batch -i "$D/same.ids" -o "$D/same.ids"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-batch: '$D/same.ids' is the input file '$D/same.ids': refusing to overwrite it" ]
    [ "$(sha256sum < "$D/same.ids")" = "$before" ]
    ln -f "$D/same.ids" "$D/hardlink.ids"
    run bash -c 'nmt-batch -o "$1" < "$2"' _ "$D/hardlink.ids" "$D/same.ids"
    [ "$status" -eq 1 ]
    [[ "$output" == *"is the input file 'stdin': refusing to overwrite it"* ]]
    [ "$(sha256sum < "$D/same.ids")" = "$before" ]
}

@test "hostile: a failed nmt-batch leaves the previous output in place and no temporary file" {
    nmt-batch -i "$D/a.ids" -o "$D/keep.batches" 2>/dev/null
    before=$(sha256sum < "$D/keep.batches")
    cat "$D/a.ids" "$D/b.ids" > "$D/ab2.ids"
    run nmt-batch -i "$D/ab2.ids" -o "$D/keep.batches"
    [ "$status" -eq 1 ]
    [ "$(sha256sum < "$D/keep.batches")" = "$before" ]
    run bash -c 'ls -A "$1" | grep -c "\.tmp"' _ "$D"
    [ "$output" = 0 ]
    run nmt-batch -i "$D/a.ids" -o /dev/null
    [ "$status" -eq 0 ]
}

@test "hostile: nmt-tokenize refuses to overwrite its input, and --src - --tgt - (one stdin for two sides)" {
    cp "$D/a.en" "$D/same.en"
    run nmt-tokenize -i "$D/same.en" -o "$D/same.en"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-tokenize: '$D/same.en' is the input file '$D/same.en': refusing to overwrite it" ]
    cmp "$D/same.en" "$D/a.en"
    run nmt-tokenize --src "$D/a.en" --tgt "$D/same.en" -o "$D/same.en"
    [ "$status" -eq 1 ]
    cmp "$D/same.en" "$D/a.en"
    run bash -c 'nmt-tokenize --src - --tgt - < "$1"' _ "$D/a.en"
    [ "$status" -eq 2 ]
    [[ "$output" == *"--src - and --tgt - would read both sides from one stdin"* ]]
}

@test "hostile: a failed nmt-tokenize keeps the previous output; an empty first line decodes" {
    nmt-tokenize -v "$D/v1" -i "$D/a.en" -o "$D/keep.ids"
    before=$(sha256sum < "$D/keep.ids")
    printf 'good line\n\xff bad\n' > "$D/bad.en"
    run nmt-tokenize -v "$D/v1" -i "$D/bad.en" -o "$D/keep.ids"
    [ "$status" -eq 1 ]
    [ "$(sha256sum < "$D/keep.ids")" = "$before" ]
    printf '\nsecond\n' | nmt-tokenize -v "$D/v1" -o "$D/empty-first.ids"
    run nmt-tokenize --decode -v "$D/v1" -i "$D/empty-first.ids"
    [ "$status" -eq 0 ]
    [ "$output" = "$(printf '\nsecond')" ]
}

@test "hostile: a line too long is an error naming the file and line, never the end of the input" {
    printf 'abc\n0123456789abcdef\nlast\n' > "$D/long.txt"
    run nmt-tokenize -i "$D/long.txt" -o "$D/long.tok" --max-line-bytes 10
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-tokenize: $D/long.txt: line 2: longer than 10 bytes (--max-line-bytes)" ]
    [ ! -e "$D/long.tok" ]
    nmt-train -i "$D/a.batches" --vocab "$D/v1" -o "$D/t2.ckpt" --preset tiny --max-steps 1 -q --threads 1
    run nmt-decode -m "$D/t2.ckpt" -i "$D/long.txt" --max-line-bytes 10 --threads 1
    [ "$status" -eq 1 ]
    [[ "$output" == *"nmt-decode: $D/long.txt: line 2: longer than 10 bytes (--max-line-bytes)"* ]]
    printf 'abc\ndef\nghi\n' > "$D/short.txt"
    run nmt-decode -m "$D/t2.ckpt" --score --src "$D/short.txt" --tgt "$D/long.txt" --max-line-bytes 10 --threads 1
    [ "$status" -eq 1 ]
    [[ "$output" == *"nmt-decode: $D/long.txt: line 2: longer than 10 bytes (--max-line-bytes)"* ]]
}

@test "hostile: a line too long in --tsv input is an error naming the file and line, --skip-bad or not" {
    printf 'a\tb\n01234\t6789\n01234\t67890\nc\td\n' > "$D/long.tsv"
    run nmt-tokenize --tsv --max-line-bytes 10 -i "$D/long.tsv" -o "$D/long.tsv.tok"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-tokenize: $D/long.tsv: line 3: longer than 10 bytes (--max-line-bytes)" ]
    [ ! -e "$D/long.tsv.tok" ]
    run nmt-tokenize --tsv --skip-bad --max-line-bytes 10 -i "$D/long.tsv" -o "$D/long.tsv.tok"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-tokenize: $D/long.tsv: line 3: longer than 10 bytes (--max-line-bytes)" ]
    run nmt-tokenize --tsv --max-line-bytes 11 -i "$D/long.tsv" -o "$D/long.tsv.tok"
    [ "$status" -eq 0 ]
}

@test "hostile: a line too long in --csv input is an error naming the file and line, inside a quoted field too" {
    printf 'a,b\n"x\ny",z\n"0123456789",abc\n' > "$D/long.csv"
    run nmt-tokenize --csv --max-line-bytes 10 -i "$D/long.csv" -o "$D/long.csv.tok"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-tokenize: $D/long.csv: line 4: longer than 10 bytes (--max-line-bytes)" ]
    [ ! -e "$D/long.csv.tok" ]
    printf 'a,"b\n0123456789ab\n"\n' > "$D/longq.csv"
    run nmt-tokenize --csv --skip-bad --max-line-bytes 10 -i "$D/longq.csv" -o "$D/long.csv.tok"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-tokenize: $D/longq.csv: line 2: longer than 10 bytes (--max-line-bytes)" ]
    run nmt-tokenize --csv --max-line-bytes 16 -i "$D/long.csv" -o "$D/long.csv.tok"
    [ "$status" -eq 0 ]
}

@test "hostile: a line too long in either of --src/--tgt is an error naming that file and line" {
    printf 'a\nb\nc\n' > "$D/short.en"
    printf 'x\n0123456789a\nz\n' > "$D/long.de"
    run nmt-tokenize --src "$D/short.en" --tgt "$D/long.de" --max-line-bytes 10 -o "$D/pair.tok"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-tokenize: $D/long.de: line 2: longer than 10 bytes (--max-line-bytes)" ]
    run nmt-tokenize --skip-bad --src "$D/long.de" --tgt "$D/short.en" --max-line-bytes 10 -o "$D/pair.tok"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-tokenize: $D/long.de: line 2: longer than 10 bytes (--max-line-bytes)" ]
    [ ! -e "$D/pair.tok" ]
}

@test "hostile: nmt-bleu refuses a line too long in a reference, a hypothesis file or stdin" {
    printf 'a b c\n0123456789a\n' > "$D/long.ref"
    printf 'a b c\nd e f\n' > "$D/ok.hyp"
    run nmt-bleu --max-line-bytes 10 "$D/long.ref" -i "$D/ok.hyp"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-bleu: $D/long.ref: line 2: longer than 10 bytes (--max-line-bytes)" ]
    run nmt-bleu --max-line-bytes 10 "$D/ok.hyp" -i "$D/long.ref"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-bleu: $D/long.ref: line 2: longer than 10 bytes (--max-line-bytes)" ]
    run nmt-bleu --max-line-bytes 10 "$D/ok.hyp" < "$D/long.ref"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-bleu: stdin: line 2: longer than 10 bytes (--max-line-bytes)" ]
    run nmt-bleu --max-line-bytes 11 -m chrf -b "$D/long.ref" -i "$D/long.ref"
    [ "$status" -eq 0 ]
    [ "$output" = "100.0" ]
}

@test "hostile: a line that memory cannot hold is an error, not the end of the input" {
    [[ "$NMT_BIN" != */san/bin ]] || skip "address space limits do not apply under ASan"
    head -c 200000000 /dev/zero | tr '\0' a > "$D/big.txt"
    printf '\nnext\n' >> "$D/big.txt"
    run bash -c 'ulimit -v 150000; nmt-tokenize -i "$1" -o "$2"' _ "$D/big.txt" "$D/big.tok"
    rm -f "$D/big.txt"
    [ "$status" -eq 1 ]
    [[ "$output" == *"$D/big.txt: line 1: out of memory"* ]]
    [ ! -e "$D/big.tok" ]
}

@test "hostile: nmt-decode --in ids checks the vocabulary of the stream against the model's" {
    nmt-train -i "$D/a.batches" --vocab "$D/v1" -o "$D/t3.ckpt" --preset tiny --max-steps 1 -q --threads 1
    nmt-tokenize -v "$D/v2" -i "$D/a.en" -o "$D/a2.ids"
    run nmt-decode -m "$D/t3.ckpt" --in ids -i "$D/a2.ids" --threads 1
    [ "$status" -eq 1 ]
    [[ "$output" == "nmt-decode: $D/a2.ids: ids of vocabulary "*", but the model's vocabulary is "* ]]
    nmt-tokenize -v "$D/v1" -i "$D/a.en" -o "$D/a1.ids"
    run nmt-decode -m "$D/t3.ckpt" --in ids -i "$D/a1.ids" --threads 1 --max-len-b 2
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 200 ]
}

@test "hostile: a non-numeric --beam is one usage error" {
    run nmt-decode -m x.ckpt --beam abc
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-decode: invalid --beam 'abc' (expected an integer from 1 to 256)" ]
    [ "$(printf '%s\n' "$output" | grep -c 'invalid --beam')" -eq 1 ]
}

# Writes a copy of checkpoint $1 to $2 with element $3 (default 0) of its first F32 tensor that has
# one set to $4 (default nan); prints that tensor's name.
poison() {
    python3 - "$1" "$2" "${3:-0}" "${4:-nan}" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
e = int(sys.argv[3])
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
k, t = next((k, v) for k, v in h.items() if k != '__metadata__' and v['dtype'] == 'F32'
            and v['data_offsets'][1] - v['data_offsets'][0] > 4 * e)
o = 8 + n + t['data_offsets'][0] + 4 * e
b[o:o + 4] = struct.pack('<f', float(sys.argv[4]))
open(sys.argv[2], 'wb').write(b)
print(k)
PY
}

@test "hostile: a checkpoint with a non-finite weight is refused by nmt-decode, nmt-avg and nmt-train --resume" {
    nmt-train -i "$D/a.batches" --vocab "$D/v1" -o "$D/ok.ckpt" --preset tiny --max-steps 1 -q --threads 1
    poison "$D/ok.ckpt" "$D/nan.ckpt" > /dev/null
    run nmt-decode -m "$D/nan.ckpt" -i "$D/a.en" --threads 1
    [ "$status" -eq 1 ]
    [[ "$output" == *"'$D/nan.ckpt': tensor '"*"' holds a non-finite value (element 0): a diverged or damaged model"* ]]
    # deep inside a large tensor (the scan goes by blocks of 4096 values), an infinity, then -inf
    for v in inf -inf; do
        t=$(poison "$D/ok.ckpt" "$D/inf.ckpt" 5001 $v)
        run nmt-decode -m "$D/inf.ckpt" -i "$D/a.en" --threads 1
        [ "$status" -eq 1 ]
        [[ "$output" == *"'$D/inf.ckpt': tensor '$t' holds a non-finite value (element 5001): a diverged"* ]]
    done
    run nmt-avg -o "$D/avg.ckpt" "$D/ok.ckpt" "$D/nan.ckpt"
    [ "$status" -eq 1 ]
    [[ "$output" == *"holds a non-finite value"* ]]
    [ ! -e "$D/avg.ckpt" ]
    cp "$D/nan.ckpt" "$D/resume.ckpt"
    run nmt-train -i "$D/a.batches" -o "$D/resume.ckpt" --resume --max-steps 2 -q --threads 1
    [ "$status" -eq 1 ]
    [[ "$output" == *"cannot resume: '$D/resume.ckpt': tensor "*"non-finite"* ]]
}

@test "hostile: nmt-cat --json writes null for a non-finite score, never NaN" {
    printf 'nan\t#5 #6\n-1.5\t#7\n' | "$H" gen --kind hyp > "$D/nan.hyp"
    run nmt-cat --json "$D/nan.hyp"
    [ "$status" -eq 0 ]
    [ "${lines[0]}" = '{"index":0,"rank":1,"score":null,"ids":[5,6]}' ]
    [ "${lines[1]}" = '{"index":1,"rank":1,"score":-1.5,"ids":[7]}' ]
    printf '%s\n' "$output" | python3 -c 'import json, sys; [json.loads(l) for l in sys.stdin]'
}

@test "hostile: a failed nmt-vocab keeps the previous vocabulary; a file that is not one is refused at once" {
    cp "$D/v1" "$D/keep.bpe"
    run nmt-vocab --size 300 -o "$D/keep.bpe" "$D/a.en"
    [ "$status" -eq 1 ]
    cmp "$D/keep.bpe" "$D/v1"
    run timeout 5 nmt-tokenize -v /dev/zero -i "$D/a.en"
    [ "$status" -eq 1 ]
    [[ "$output" == *"/dev/zero: line 1: not an nmt vocabulary (expected 'nmt-vocab 1.0'; nothing more was read)"* ]]
}

@test "hostile: on --resume the checkpoint's configuration wins; options contradicting it are errors" {
    nmt-train -i "$D/a.batches" --vocab "$D/v1" -o "$D/l1.ckpt" --preset tiny --layers 1 --max-steps 1 -q --threads 1
    run nmt-train -i "$D/a.batches" -o "$D/l1.ckpt" --resume --layers 1 --max-steps 2 -q --threads 1
    [ "$status" -eq 0 ]
    run nmt-train -i "$D/a.batches" -o "$D/l1.ckpt" --resume --max-steps 3 -q --threads 1
    [ "$status" -eq 0 ]
    run nmt-train -i "$D/a.batches" -o "$D/l1.ckpt" --resume --preset small --max-steps 4 -q --threads 1
    [ "$status" -eq 1 ]
    [[ "$output" == *"'$D/l1.ckpt' is not a model of --preset small"* ]]
    run nmt-train -i "$D/a.batches" -o "$D/l1.ckpt" --resume --layers 2 --max-steps 4 -q --threads 1
    [ "$status" -eq 1 ]
    [[ "$output" == *"holds another model shape"* ]]
}

@test "hostile: two trainers on one checkpoint: the second is refused, naming the first; stale temporaries go" {
    : > "$D/.lk.ckpt.tmpAbC123"
    nmt-train -i "$D/a.batches" --vocab "$D/v1" -o "$D/lk.ckpt" --preset tiny --max-steps 100000 -q --threads 1 \
        --save-every 1 2> "$D/first.err" &
    pid=$!
    for i in $(seq 300); do [ -s "$D/lk.ckpt" ] && break; sleep 0.1; done
    [ -s "$D/.lk.ckpt.lock" ]
    run nmt-train -i "$D/a.batches" --vocab "$D/v1" -o "$D/lk.ckpt" --preset tiny --max-steps 2 -q --threads 1
    kill -TERM "$pid"
    wait "$pid" || true
    [ "$status" -eq 1 ]
    [[ "$output" == *"'$D/lk.ckpt' is being written by another process (pid $pid"* ]]
    [ ! -e "$D/.lk.ckpt.tmpAbC123" ]
    grep -q "removed 1 temporary file left beside '$D/lk.ckpt'" "$D/first.err"
    [ ! -e "$D/.lk.ckpt.lock" ]
    [ -s "$D/lk.ckpt" ]
}

@test "hostile: an empty source side passes nmt-batch (a row of </s> alone)" {
    printf '\t#5 #6\n#7\t#8\n' | "$H" gen > "$D/emptysrc.ids"
    run nmt-batch -i "$D/emptysrc.ids" -o "$D/emptysrc.batches"
    [ "$status" -eq 0 ]
    run nmt-cat --check "$D/emptysrc.batches"
    [ "$status" -eq 0 ]
}

@test "hostile: n-best ranks count from 1 in hyp streams as in the text output (stream format 1.1)" {
    nmt-train -i "$D/a.batches" --vocab "$D/v1" -o "$D/r.ckpt" --preset tiny --max-steps 1 -q --threads 1
    head -3 "$D/a.en" > "$D/three.en"
    nmt-decode -m "$D/r.ckpt" -i "$D/three.en" --beam 2 --nbest 2 --max-len-b 3 --out hyp -o "$D/r.hyp" --threads 1
    run nmt-cat "$D/r.hyp"
    [ "$status" -eq 0 ]
    [ "$(printf '%s\n' "$output" | cut -f2 | sort -u | tr '\n' ' ')" = "1 2 " ]
    run nmt-decode -m "$D/r.ckpt" -i "$D/three.en" --beam 2 --nbest 2 --max-len-b 3 --threads 1
    [ "$(printf '%s\n' "$output" | cut -f2 | sort -u | tr '\n' ' ')" = "1 2 " ]
    run nmt-cat --header "$D/r.hyp"
    [[ "$output" == *"version	1.2"* ]]
}

@test "hostile: a bad record through nmt-tokenize --decode names the file and the record" {
    printf 'garbage\n' | "$H" gen --kind hyp > "$D/g.hyp"
    run nmt-tokenize --decode -v "$D/v1" -i "$D/g.hyp"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-tokenize: $D/g.hyp: record 1: hyp record: 7 bytes is too short" ]
}

@test "hostile: tok records with invalid UTF-8 are refused by nmt-cat --check as by nmt-vocab; an empty token is data" {
    printf 'a \xff\tc\n' | "$H" gen --kind tok > "$D/bad.tok"
    run nmt-cat --check "$D/bad.tok"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-cat: $D/bad.tok: record 1: tok record: token 2 of side 1 is not valid UTF-8 (its byte 0)" ]
    run nmt-vocab --size 270 -o "$D/bad.bpe" "$D/bad.tok"
    [ "$status" -eq 1 ]
    [[ "$output" == *"not valid UTF-8"* ]]
    printf 'a  b\tc\nb a\tc  c\n' | "$H" gen --kind tok > "$D/empty.tok"
    run nmt-vocab --size 270 --min-freq 1 -o "$D/empty.bpe" "$D/empty.tok"
    [ "$status" -eq 0 ]
    [ -s "$D/empty.bpe" ]
}

@test "hostile: nmt-train refuses an -o in a missing folder before any work" {
    run nmt-train -i "$D/a.batches" --vocab "$D/v1" -o "$D/no/such/dir/m.ckpt" --preset tiny --max-steps 1 -q
    [ "$status" -eq 1 ]
    [[ "$output" == *"cannot write checkpoints in '$D/no/such/dir'"* ]]
}
