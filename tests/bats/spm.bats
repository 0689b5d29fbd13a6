#!/usr/bin/env bats
# SentencePiece models as vocabularies: nmt-tokenize --vocab x.model against the golden segmentation
# and decoding of spm_encode and spm_decode (tests/fixtures/spm/make.sh), and hostile model files.

load common

MODELS="unigram_nfkc unigram_nmt_nfkc unigram_identity bpe_nfkc bpe_nmt_nfkc bpe_identity"

setup() {
    F="$NMT_SRCDIR/tests/fixtures/spm"
    TMP=$(mktemp -d)
}
teardown() { rm -rf "$TMP"; }

model() { # the fixture model $1 as a plain file in $TMP (the large ones are committed xz-compressed)
    if [ -f "$F/$1.model" ]; then
        cp "$F/$1.model" "$TMP/$1.model"
    else
        python3 -c 'import lzma, sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$F/$1.model.xz" > "$TMP/$1.model"
    fi
}

@test "pieces identical to spm_encode's for unigram and BPE models (nfkc, nmt_nfkc, identity)" {
    for m in $MODELS; do
        model "$m"
        nmt-tokenize --vocab "$TMP/$m.model" --text "$F/input.txt" > "$TMP/$m.pieces"
        cmp "$F/$m.pieces" "$TMP/$m.pieces" || { echo "pieces differ: $m"; return 1; }
    done
}

@test "ids are the model's, the specials first: unk 0 -> 3, bos 1, eos 2, then model id + 1" {
    for m in $MODELS; do
        model "$m"
        awk '{ s = ""; for (i = 1; i <= NF; i++) s = s (i > 1 ? " " : "") ($i == 0 ? 3 : $i < 3 ? $i : $i + 1); print s }' \
            "$F/$m.ids" > "$TMP/want"
        nmt-tokenize --vocab "$TMP/$m.model" --text=ids "$F/input.txt" | same_as "$TMP/want"
    done
}

@test "an ids stream of a model decodes to spm_decode's text, and so do its pieces" {
    for m in unigram_nfkc bpe_nfkc unigram_identity bpe_identity; do
        model "$m"
        nmt-tokenize --vocab "$TMP/$m.model" -o "$TMP/ids.nmt" "$F/input.txt"
        nmt-tokenize --decode --vocab "$TMP/$m.model" "$TMP/ids.nmt" > "$TMP/text"
        cmp "$F/$m.decoded" "$TMP/text" || { echo "decoding differs: $m"; return 1; }
        nmt-tokenize --decode --text --vocab "$TMP/$m.model" "$F/$m.pieces" | same_as "$F/$m.decoded"
    done
}

@test "a long run of byte pieces decodes as one: characters across any internal buffer, invalid bytes as U+FFFD" {
    model bpe_nfkc
    python3 -c 'print(" ".join(["<0x41>"] + ["<0xC3>", "<0xA9>"] * 200 + ["<0xE2>", "<0x82>", "<0xFF>"]))' > "$TMP/bytes"
    python3 -c 'print("A" + "\u00e9" * 200 + "\ufffd" * 3)' > "$TMP/want"
    nmt-tokenize --decode --text --vocab "$TMP/bpe_nfkc.model" "$TMP/bytes" | same_as "$TMP/want"
}

@test "the stream names the model: another model's ids are refused" {
    model unigram_identity; model bpe_identity
    nmt-tokenize --vocab "$TMP/unigram_identity.model" -o "$TMP/ids.nmt" "$F/input.txt"
    run nmt-tokenize --decode --vocab "$TMP/bpe_identity.model" "$TMP/ids.nmt"
    [ "$status" -eq 1 ]
    [[ "$output" == *"vocab fingerprint"*"differs"* ]]
}

@test "--normalize and --dropout do not apply to a SentencePiece model" {
    model bpe_identity
    run nmt-tokenize --vocab "$TMP/bpe_identity.model" -N nfkc "$F/input.txt"
    [ "$status" -eq 2 ]
    [[ "$output" == *"--normalize with a SentencePiece model"* ]]
    run nmt-tokenize --vocab "$TMP/bpe_identity.model" --dropout 0.1 "$F/input.txt"
    [ "$status" -eq 2 ]
    [[ "$output" == *"--dropout with a SentencePiece model"* ]]
}

# Writes the bytes given in Python notation ($2) to $TMP/$1.model.
bytes() { python3 -c 'import sys; open(sys.argv[1], "wb").write(eval(sys.argv[2]))' "$TMP/$1.model" "$2"; }

refused() { # nmt-tokenize refuses model $1 with a message naming it and containing $2
    run nmt-tokenize --vocab "$TMP/$1.model" --text "$F/input.txt"
    [ "$status" -eq 1 ] || { echo "status $status: $output"; return 1; }
    [[ "$output" == *"$1.model: "*"$2"* ]] || { echo "message: $output"; return 1; }
}

@test "hostile model files are refused by name and byte offset" {
    model unigram_identity
    head -c 5000 "$TMP/unigram_identity.model" > "$TMP/truncated.model"
    refused truncated "byte 4995: field longer than its message (9 bytes, 3 left)"
    # a piece whose length runs past the file, a length of 2^40, a varint of 11 bytes
    bytes overlong 'b"\x0a\x05\x0a\x01a"'
    refused overlong "byte 0: field longer than its message (5 bytes, 3 left)"
    bytes huge 'b"\x0a\x80\x80\x80\x80\x80\x20" + b"x" * 16'
    refused huge "byte 0: field longer than its message (1099511627776 bytes"
    bytes varint 'b"\x0a\x02\x0a\x00" + b"\xff" * 11'
    refused varint "byte 4: varint"
    # wrong wire types: a score as a varint, a piece as a group, a group (no longer protobuf) elsewhere
    bytes wiretype 'b"\x0a\x05\x0a\x01a\x10\x01"'
    refused wiretype "byte 5: field 2 has wire type 0, expected 5"
    bytes group 'b"\x0a\x03\x0a\x01a\x0b"'
    refused group "byte 5: field 1 has wire type 3, expected 2"
    bytes group7 'b"\x0a\x03\x0a\x01a\x3b"'
    refused group7 "byte 5: unsupported wire type 3"
    # well-formed but meaningless: no unknown piece, an unknown piece type, a bad character map
    bytes nounk 'b"\x0a\x03\x0a\x01a"'
    refused nounk "no unknown piece"
    bytes badtype 'b"\x0a\x05\x0a\x01a\x18\x09"'
    refused badtype "byte 5: unknown piece type"
    bytes charsmap 'b"\x0a\x05\x0a\x01a\x18\x02" + b"\x1a\x0a\x12\x08" + (999).to_bytes(4, "little") + b"\0\0\0\0"'
    refused charsmap "precompiled_charsmap: bad trie size"
    bytes twice 'b"\x0a\x05\x0a\x01a\x18\x02\x0a\x03\x0a\x01a"'
    refused twice "piece 'a' defined twice"
}

@test "a model is the vocabulary of training and decoding: the checkpoint keeps it" {
    model unigram_identity
    sed -n 1,60p "$F/input.txt" > "$TMP/src"; sed -n 151,210p "$F/input.txt" > "$TMP/tgt"
    nmt-tokenize --vocab "$TMP/unigram_identity.model" --src "$TMP/src" --tgt "$TMP/tgt" | nmt-batch -t 600 -o "$TMP/b" 2>/dev/null
    nmt-train --preset tiny --d-model 32 --ff 64 --heads 2 --layers 1 --threads 1 -q --warmup 5 --max-steps 3 \
        --vocab "$TMP/unigram_identity.model" -i "$TMP/b" -o "$TMP/m.ckpt"
    nmt-cat "$TMP/m.ckpt" > "$TMP/cat"
    grep -q "^model.vocab	601$" "$TMP/cat"   # the 600 pieces and nmt's <pad>
    sed -n 1,3p "$TMP/src" | nmt-decode -m "$TMP/m.ckpt" --threads 1 --max-len-a 0 --max-len-b 5 > "$TMP/out"
    [ "$(wc -l < "$TMP/out")" -eq 3 ]
    # and the ids stream of the model's pieces is what the checkpoint's vocabulary reads back
    sed -n 1,3p "$TMP/src" | nmt-tokenize --vocab "$TMP/unigram_identity.model" -o "$TMP/ids"
    nmt-decode -m "$TMP/m.ckpt" --threads 1 --max-len-a 0 --max-len-b 5 --in ids -i "$TMP/ids" > "$TMP/out2"
    cmp "$TMP/out" "$TMP/out2"
}
