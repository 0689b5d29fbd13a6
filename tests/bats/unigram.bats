#!/usr/bin/env bats
# nmt-vocab --type unigram: a SentencePiece unigram model learnt from text, read by nmt-tokenize and by
# spm_encode alike (golden segmentation: tests/fixtures/spm/make-learnt.sh), its size, determinism and
# refused options.

load common

setup() {
    F="$NMT_SRCDIR/tests/fixtures/spm"
    TMP=$(mktemp -d)
}
teardown() { rm -rf "$TMP"; }

# Prints the pieces of model $1 and the vocab_size its trainer_spec says, tab-separated.
model_size() {
    python3 - "$1" <<'EOF'
import sys
d = open(sys.argv[1], 'rb').read()
def varint(b, i):
    r = s = 0
    while True:
        c = b[i]; i += 1; r |= (c & 0x7f) << s; s += 7
        if c < 0x80: return r, i
def fields(b):
    i = 0
    while i < len(b):
        k, i = varint(b, i); f, wt = k >> 3, k & 7
        if wt == 0: v, i = varint(b, i)
        elif wt == 5: v = b[i:i + 4]; i += 4
        elif wt == 2: n, i = varint(b, i); v = b[i:i + n]; i += n
        else: raise SystemExit("wire type %d" % wt)
        yield f, v
top = list(fields(d))
size = [v for f, v in fields(dict((f, v) for f, v in top if f == 2)[2]) if f == 4][0]
print("%d\t%d" % (sum(1 for f, _ in top if f == 1), size))
EOF
}

@test "a learnt model segments as spm_encode does with it (golden pieces)" {
    nmt-vocab --type unigram --size 500 --normalize identity -o "$TMP/m.model" "$F/input.txt"
    nmt-tokenize --vocab "$TMP/m.model" --text "$F/input.txt" | same_as "$F/learnt.pieces"
    [ "$(model_size "$TMP/m.model")" = "$(printf '500\t500')" ]
}

@test "spm_encode reads the model and gives nmt-tokenize's ids (nmt_nfkc, nfkc, identity)" {
    command -v spm_encode > /dev/null || skip "spm_encode not installed (Debian package sentencepiece)"
    for norm in nmt_nfkc nfkc identity; do
        nmt-vocab --type unigram --size 300 --normalize $norm -o "$TMP/m.model" < "$F/input.txt"
        spm_encode --model="$TMP/m.model" --output_format=id < "$F/input.txt" > "$TMP/ids"
        awk '{ s = ""; for (i = 1; i <= NF; i++) s = s (i > 1 ? " " : "") ($i == 0 ? 3 : $i < 3 ? $i : $i + 1); print s }' \
            "$TMP/ids" > "$TMP/want"
        nmt-tokenize --vocab "$TMP/m.model" --text=ids "$F/input.txt" | same_as "$TMP/want"
        spm_decode --model="$TMP/m.model" --input_format=id < "$TMP/ids" > "$TMP/text"
        nmt-tokenize --vocab "$TMP/m.model" "$F/input.txt" | nmt-tokenize --decode --vocab "$TMP/m.model" | same_as "$TMP/text"
    done
}

@test "nmt_nfkc, the default, writes its character map: compatibility characters and spaces normalised" {
    nmt-vocab --type unigram --size 300 -o "$TMP/m.model" "$F/input.txt"
    printf '\xef\xbc\xa1\xef\xac\x80 \xe2\x91\xa0\tx\xe2\x80\x8by\x01\n' > "$TMP/in"   # full-width A, ff ligature, circled 1, tab, ZWSP, U+0001
    nmt-tokenize --vocab "$TMP/m.model" "$TMP/in" | nmt-tokenize --decode --vocab "$TMP/m.model" > "$TMP/out"
    [ "$(cat "$TMP/out")" = "Aff 1 x y" ]
    nmt-vocab --type unigram --size 300 --normalize identity -o "$TMP/i.model" "$F/input.txt"
    nmt-tokenize --vocab "$TMP/i.model" "$TMP/in" | nmt-tokenize --decode --vocab "$TMP/i.model" > "$TMP/out"
    [ "$(cat "$TMP/out")" != "Aff 1 x y" ]
}

@test "the same text and options give the same model bytes; more threads the same pieces" {
    nmt-vocab --type unigram --size 400 -o "$TMP/a.model" "$F/input.txt"
    nmt-vocab --type unigram --size 400 "$F/input.txt" > "$TMP/b.model"
    mv "$TMP/a.model" "$TMP/first.model"
    nmt-vocab --type unigram --size 400 -o "$TMP/a.model" "$F/input.txt"
    cmp "$TMP/first.model" "$TMP/a.model"
    nmt-vocab --type unigram --size 400 --threads 3 -o "$TMP/d.model" "$F/input.txt"
    nmt-tokenize --vocab "$TMP/a.model" --text "$F/input.txt" > "$TMP/a.pieces"
    nmt-tokenize --vocab "$TMP/b.model" --text "$F/input.txt" | same_as "$TMP/a.pieces"
    nmt-tokenize --vocab "$TMP/d.model" --text "$F/input.txt" | same_as "$TMP/a.pieces"
}

@test "the size is honoured; a text with fewer pieces gives fewer, with a warning" {
    for n in 150 250; do
        nmt-vocab --type unigram --size $n -o "$TMP/m.model" "$F/input.txt"
        [ "$(model_size "$TMP/m.model")" = "$(printf '%d\t%d' $n $n)" ]
    done
    printf 'a b c\nab bc\n' > "$TMP/tiny.txt"
    run nmt-vocab --type unigram --size 100 -o "$TMP/m.model" "$TMP/tiny.txt"
    [ "$status" -eq 0 ]
    [[ "$output" == *"warning: only "*" pieces learnt"* ]]
    n=$(model_size "$TMP/m.model" | cut -f1)
    [ "$(model_size "$TMP/m.model")" = "$(printf '%d\t%d' "$n" "$n")" ]
}

@test "options that do not apply, a size below the characters, a NUL byte are refused" {
    run nmt-vocab --type unigram --normalize nmt_nfkc_cf "$F/input.txt"
    [ "$status" -eq 2 ]
    [[ "$output" == *"--normalize nmt_nfkc_cf: nmt-vocab builds no case-folding character map"* ]]
    run nmt-vocab --type unigram --normalize nfd "$F/input.txt"
    [ "$status" -eq 2 ]
    [[ "$output" == *"invalid --normalize 'nfd' (nmt_nfkc, nfkc or identity)"* ]]
    run nmt-vocab --type unigram --side 1 "$F/input.txt"
    [ "$status" -eq 2 ]
    [[ "$output" == *"--side applies to --type bpe"* ]]
    run nmt-vocab --type unigram --min-freq 3 "$F/input.txt"
    [ "$status" -eq 2 ]
    run nmt-vocab --type wordpiece "$F/input.txt"
    [ "$status" -eq 2 ]
    run nmt-vocab --normalize identity < /dev/null
    [ "$status" -eq 2 ]
    [[ "$output" == *"--normalize applies to --type unigram"* ]]
    run nmt-vocab --threads 2 < /dev/null
    [ "$status" -eq 2 ]
    run nmt-vocab --size 100 < /dev/null
    [ "$status" -eq 2 ]
    [[ "$output" == *"invalid --size '100' (a BPE vocabulary has at least 260 pieces)"* ]]
    run nmt-vocab --type unigram --size 20 -o "$TMP/m.model" "$F/input.txt"
    [ "$status" -eq 1 ]
    [[ "$output" == *"cannot hold the "*" characters kept"* ]]
    [ ! -e "$TMP/m.model" ]
    printf 'one line\ntwo\0lines\n' > "$TMP/nul.txt"
    run nmt-vocab --type unigram --size 100 -o "$TMP/m.model" "$TMP/nul.txt"
    [ "$status" -eq 1 ]
    [[ "$output" == *"nul.txt: line 2: a NUL byte"* ]]
    run nmt-vocab --type unigram --size 100 "$TMP/none.txt"
    [ "$status" -eq 1 ]
    [[ "$output" == *"none.txt"* ]]
    run nmt-vocab --type unigram --size 100 < /dev/null
    [ "$status" -eq 1 ]
    [[ "$output" == *"no sentence to learn from"* ]]
}
