#!/usr/bin/env bats
# nmt-tokenize and nmt-vocab: round trips, every option, every bad input (message and exit code).

load common

setup() {
    F="$NMT_SRCDIR/tests/fixtures/tok"
    D="$NMT_SRCDIR/data/multi30k"
    TMP=$(mktemp -d)
}
teardown() { rm -rf "$TMP"; }

nfkc() { # NFKC of a file, line by line, computed independently by Python
    python3 -c 'import sys, unicodedata
for l in open(sys.argv[1], encoding="utf-8", newline="\n"): sys.stdout.write(unicodedata.normalize(sys.argv[2], l))' "$1" "${2:-NFKC}"
}

small_vocab() { # a vocabulary learnt from the adversarial fixtures and some Multi30k lines
    { cat "$F/adversarial.txt"; zcat "$D/val.en.gz" "$D/val.de.gz"; } > "$TMP/corpus.txt"
    nmt-tokenize "$TMP/corpus.txt" | nmt-vocab -s 1000 -o "$TMP/v.vocab"
}

@test "round trip on all of Multi30k with an 8000-piece joint vocabulary" {
    zcat "$D/train.en.gz" > "$TMP/en"; zcat "$D/train.de.gz" > "$TMP/de"
    nmt-tokenize --src "$TMP/en" --tgt "$TMP/de" | nmt-vocab --size 8000 -o "$TMP/v.vocab"
    grep -q '^size 8000$' "$TMP/v.vocab"
    for f in "$D"/*.gz; do
        zcat "$f" > "$TMP/x"
        nfkc "$TMP/x" > "$TMP/want"
        nmt-tokenize --vocab "$TMP/v.vocab" "$TMP/x" | nmt-tokenize --decode --vocab "$TMP/v.vocab" > "$TMP/got"
        cmp "$TMP/want" "$TMP/got" || { echo "round trip differs: $f"; return 1; }
    done
}

@test "round trip is exact with --normalize none (Multi30k and adversarial set)" {
    { cat "$F/adversarial.txt"; zcat "$D/val.de.gz"; } > "$TMP/x"
    nmt-tokenize -N none "$TMP/x" | nmt-vocab -s 600 -o "$TMP/v.vocab"
    grep -q '^normalize none$' "$TMP/v.vocab"
    nmt-tokenize --vocab "$TMP/v.vocab" "$TMP/x" | nmt-tokenize --decode --vocab "$TMP/v.vocab" | same_as "$TMP/x"
}

@test "adversarial set round-trips through ids, pieces text, ids text and dropout" {
    small_vocab
    nfkc "$F/adversarial.txt" > "$TMP/want"
    V="$TMP/v.vocab"
    nmt-tokenize -v "$V" "$F/adversarial.txt" | nmt-tokenize -D -v "$V" | same_as "$TMP/want"
    nmt-tokenize -v "$V" --text "$F/adversarial.txt" | nmt-tokenize -D --text -v "$V" | same_as "$TMP/want"
    nmt-tokenize -v "$V" --text=ids "$F/adversarial.txt" | nmt-tokenize -D --text -v "$V" | same_as "$TMP/want"
    nmt-tokenize -v "$V" --dropout 0.3 --seed 9 "$F/adversarial.txt" | nmt-tokenize -D -v "$V" | same_as "$TMP/want"
}

@test "nfkc_cf folds case; the vocabulary remembers its normalisation" {
    printf 'Straße ABC ﬁ\n' > "$TMP/x"
    run nmt-tokenize -N nfkc_cf --text "$TMP/x"
    [ "$status" -eq 0 ]
    [ "$output" = "▁strasse ▁abc ▁fi" ]
    nmt-tokenize -N nfkc_cf "$TMP/x" | nmt-vocab -s 300 -o "$TMP/v.vocab"
    grep -q '^normalize nfkc_cf$' "$TMP/v.vocab"
    run nmt-tokenize -v "$TMP/v.vocab" "$TMP/x" -o "$TMP/ids"
    [ "$status" -eq 0 ]
    [ "$(nmt-tokenize -D -v "$TMP/v.vocab" "$TMP/ids")" = "strasse abc fi" ]
    run nmt-tokenize -v "$TMP/v.vocab" -N nfkc "$TMP/x"
    [ "$status" -eq 2 ]
    [[ "$output" == *"--normalize nfkc differs from the vocabulary's nfkc_cf"* ]]
}

@test "--text shows the pre-tokenisation; escapes make tabs and backslashes visible" {
    printf 'Hello,  world!\ta\\b ▁x\n' > "$TMP/x"
    run nmt-tokenize --text "$TMP/x"
    [ "$status" -eq 0 ]
    [ "$output" = '▁Hello , ▁ ▁world ! \t a \\ b ▁␛▁ x' ]
}

@test "tok stream: kind, provenance, records readable by nmt-cat" {
    nmt-tokenize -i "$F/three.txt" -o "$TMP/t.nmt"
    run nmt-cat --header "$TMP/t.nmt"
    [[ "$output" == *"kind	tok"* ]]
    [[ "$output" == *"normalize	nfkc"* ]]
    [[ "$output" == *"producer	nmt-tokenize"* ]]
    [ "$(nmt-cat "$TMP/t.nmt")" = "$(printf '0\t▁one\n1\t▁two\n2\t▁three')" ]
    nmt-cat --check "$TMP/t.nmt"
}

@test "ids stream header carries the vocabulary fingerprint" {
    small_vocab
    fp=$(awk '$1=="fingerprint"{print $2}' "$TMP/v.vocab")
    [ ${#fp} -eq 16 ]
    nmt-tokenize -v "$TMP/v.vocab" "$F/three.txt" -o "$TMP/ids.nmt"
    run nmt-cat --header "$TMP/ids.nmt"
    [[ "$output" == *"kind	ids"* ]]
    [[ "$output" == *"vocab	$fp"* ]]
}

@test "decoding an ids stream made with another vocabulary is refused" {
    small_vocab
    nmt-tokenize -v "$F/tiny.vocab" "$F/three.txt" -o "$TMP/ids.nmt"
    run nmt-tokenize -D -v "$TMP/v.vocab" "$TMP/ids.nmt"
    [ "$status" -eq 1 ]
    [[ "$output" == *"vocab fingerprint"*"differs from '$TMP/v.vocab'"* ]]
}

@test "--decode refuses a tok stream and a truncated ids stream" {
    nmt-tokenize "$F/three.txt" -o "$TMP/t.nmt"
    run nmt-tokenize -D -v "$F/tiny.vocab" "$TMP/t.nmt"
    [ "$status" -eq 1 ]
    [[ "$output" == *"expected an ids or hyp stream, got tok"* ]]
    nmt-tokenize -v "$F/tiny.vocab" "$F/three.txt" -o "$TMP/ids.nmt"
    head -c -8 "$TMP/ids.nmt" > "$TMP/trunc.nmt"
    run nmt-tokenize -D -v "$F/tiny.vocab" "$TMP/trunc.nmt"
    [ "$status" -eq 1 ]
}

@test "--decode --text: ids out of range and unknown pieces are errors with the line" {
    printf '5 6\n99999 1\n' > "$TMP/ids.txt"
    run nmt-tokenize -D --text -v "$F/tiny.vocab" "$TMP/ids.txt"
    [ "$status" -eq 1 ]
    [[ "$output" == *"line 2: id 99999 out of range"* ]]
    printf '▁low zzzz\n' > "$TMP/p.txt"
    run nmt-tokenize -D --text -v "$F/tiny.vocab" "$TMP/p.txt"
    [ "$status" -eq 1 ]
    [[ "$output" == *"line 1: unknown piece 'zzzz'"* ]]
}

@test "--decode: byte pieces that do not form UTF-8 come out as U+FFFD, never as invalid text" {
    # ids 4 + byte: 0xA4 alone, 0xC3 0xA4 (a valid 'ä'), 0xC3 before a lead byte, 0xF0 cut short
    printf '%d %d %d %d %d\n' $((4 + 0xA4)) $((4 + 0xC3)) $((4 + 0xA4)) $((4 + 0xC3)) $((4 + 0xF0)) > "$TMP/ids.txt"
    nmt-tokenize -D --text -v "$F/tiny.vocab" "$TMP/ids.txt" > "$TMP/out"
    printf '\xef\xbf\xbd\xc3\xa4\xef\xbf\xbd\xef\xbf\xbd\n' | same_as "$TMP/out"
    nmt-bleu "$TMP/out" -i "$TMP/out" -m bleu > /dev/null
}

@test "byte fallback: characters outside the vocabulary never map to <unk>" {
    printf 'low 日本 😀\n' > "$TMP/x"
    run nmt-tokenize -v "$F/tiny.vocab" --text "$TMP/x"
    [ "$status" -eq 0 ]
    [[ "$output" == *"<0xE6>"* ]]
    [[ "$output" != *"<unk>"* ]]
    nmt-tokenize -v "$F/tiny.vocab" "$TMP/x" | nmt-tokenize -D -v "$F/tiny.vocab" | same_as "$TMP/x"
}

@test "--dropout: same seed same output, another seed differs, 0 equals no dropout" {
    small_vocab
    V="$TMP/v.vocab"
    zcat "$D/val.en.gz" | sed -n 1,200p > "$TMP/x"
    a=$(nmt-tokenize -v "$V" --dropout 0.2 --seed 3 --text=ids "$TMP/x" | md5sum)
    b=$(nmt-tokenize -v "$V" --dropout 0.2 --seed 3 --text=ids "$TMP/x" | md5sum)
    c=$(nmt-tokenize -v "$V" --dropout 0.2 --seed 4 --text=ids "$TMP/x" | md5sum)
    d=$(nmt-tokenize -v "$V" --dropout 0 --text=ids "$TMP/x" | md5sum)
    e=$(nmt-tokenize -v "$V" --text=ids "$TMP/x" | md5sum)
    [ "$a" = "$b" ]; [ "$a" != "$c" ]; [ "$d" = "$e" ]
    nmt-tokenize -v "$V" --dropout 0.2 --seed 3 "$TMP/x" -o "$TMP/ids.nmt"
    header=$(nmt-cat --header "$TMP/ids.nmt")
    grep -q '^dropout	0.2$' <<< "$header"
    grep -q '^seed	3$' <<< "$header"
}

@test "--src/--tgt: pairs; unequal line counts name the file and line" {
    run nmt-tokenize --src "$F/three.txt" --tgt "$F/three.txt" --text
    [ "$status" -eq 0 ]
    [ "${lines[2]}" = "$(printf '▁three\t▁three')" ]
    run nmt-tokenize --src "$F/three.txt" --tgt "$F/two.txt" -o "$TMP/o.nmt"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-tokenize: $F/three.txt: line 3: no matching line in '$F/two.txt', which has 2 lines" ]
    run nmt-tokenize --src "$F/three.txt" --tgt "$F/two.txt" --skip-bad --text
    [ "$status" -eq 0 ]
    [[ "$output" == *"skipped 1 bad line (invalid UTF-8: 0, missing fields: 0, unpaired: 1, malformed CSV: 0); wrote 2"* ]]
}

@test "invalid UTF-8 names file, line and byte; --skip-bad drops and counts; -q silences" {
    run nmt-tokenize "$F/bad-utf8.txt" -o "$TMP/o.nmt"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-tokenize: $F/bad-utf8.txt: line 2: invalid UTF-8 at byte 5" ]
    run nmt-tokenize --skip-bad --text "$F/bad-utf8.txt"
    [ "$status" -eq 0 ]
    [ "${lines[0]}" = "▁good ▁line" ]
    [ "${lines[1]}" = "▁another ▁good" ]
    [ "${lines[2]}" = "nmt-tokenize: warning: skipped 1 bad line (invalid UTF-8: 1, missing fields: 0, unpaired: 0, malformed CSV: 0); wrote 2" ]
    run nmt-tokenize --skip-bad -q --text "$F/bad-utf8.txt"
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 2 ]
    [ "${lines[1]}" = "▁another ▁good" ]
    kept=$(nmt-tokenize --skip-bad -q "$F/bad-utf8.txt" | nmt-cat | cut -f1 | tr '\n' ' ')
    [ "$kept" = '0 2 ' ]
}

@test "--tsv is plain: quotes are data; --csv --delimiter tab reads RFC 4180 quoting" {
    printf 'He said "hi\tEr sagte "hallo\n"quoted"\t"x\n' > "$TMP/q.tsv"
    run nmt-tokenize --tsv --text "$TMP/q.tsv"
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 2 ]
    [ "${lines[0]}" = "$(printf '▁He ▁said ▁" hi\t▁Er ▁sagte ▁" hallo')" ]
    [ "${lines[1]}" = "$(printf '▁" quoted "\t▁" x')" ]
    run nmt-tokenize --csv --delimiter tab --text "$TMP/q.tsv"
    [ "$status" -eq 1 ]
    [[ "$output" == *"q.tsv: line 1: malformed CSV"* ]]
}

@test "--csv --delimiter tab reads pairs with RFC 4180 quoting, keeping blanks" {
    run nmt-tokenize --csv --delimiter tab --text "$F/pairs.tsv"
    [ "$status" -eq 0 ]
    [ "${lines[0]}" = "$(printf '▁A ▁man ▁rides ▁a ▁bike .\t▁Ein ▁Mann ▁fährt ▁Fahrrad .')" ]
    [ "${lines[1]}" = "$(printf '▁Two , ▁quoted\t▁Zwei , ▁" zitiert "')" ]
    [ "${lines[2]}" = "$(printf '▁ ▁ ▁spaces ▁kept ▁ ▁\t')" ]   # an empty third field follows: not read
}

@test "--csv with --fields and --delimiter; missing fields are errors" {
    run nmt-tokenize --csv --fields 2 --text "$F/pairs.csv"
    [ "$status" -eq 1 ]
    [ "${lines[0]}" = "▁de" ]
    [ "${lines[2]}" = "nmt-tokenize: $F/pairs.csv: line 3: row has 1 field, --fields needs column 2" ]
    run nmt-tokenize --csv --fields 2,1 --skip-bad --text "$F/pairs.csv"
    [ "$status" -eq 0 ]
    [ "${lines[0]}" = "$(printf '▁de\t▁en')" ]
    [ "${lines[1]}" = "$(printf '▁Ein ▁Hund ▁rennt\t▁A ▁dog , ▁running')" ]
    [ "${lines[2]}" = "$(printf '▁zwei\t▁multi \\n line')" ]
    [[ "${lines[3]}" == *"missing fields: 1"* ]]
    printf 'a;b\n' > "$TMP/semi.csv"
    [ "$(nmt-tokenize --csv -d ';' --text "$TMP/semi.csv")" = "$(printf '▁a\t▁b')" ]
    [ "$(nmt-tokenize --csv --delimiter tab -f 1 --text "$F/pairs.tsv" | sed -n 1p)" = "▁A ▁man ▁rides ▁a ▁bike ." ]
}

@test "malformed CSV is an error with the line; --skip-bad counts it" {
    run nmt-tokenize --csv --text "$F/bad.csv"
    [ "$status" -eq 1 ]
    [[ "$output" == *"$F/bad.csv: line 2: malformed CSV"* ]]
    run nmt-tokenize --csv --skip-bad --text "$F/bad.csv"
    [ "$status" -eq 0 ]
    [[ "$output" == *"malformed CSV: 1"* ]]
}

@test "reads stdin and '-', writes -o; refuses a stream to a terminal" {
    a=$(nmt-tokenize --text < "$F/three.txt")
    b=$(nmt-tokenize --text - < "$F/three.txt")
    c=$(nmt-tokenize --text -i - < "$F/three.txt")
    [ "$a" = "$b" ]; [ "$a" = "$c" ]
    nmt-tokenize -o "$TMP/t.nmt" < "$F/three.txt"
    nmt-cat --check "$TMP/t.nmt"
    if command -v script >/dev/null; then
        run script -qec "$NMT_BIN/nmt-tokenize $F/three.txt" /dev/null
        [[ "$output" == *"refusing to write binary data to a terminal"* ]]
    fi
}

@test "usage errors exit 2 with a message" {
    for args in "--bogus" "--normalize nfd" "--dropout 2 -v $F/tiny.vocab" "--dropout 0.1" "--seed x -v $F/tiny.vocab" \
                "--src $F/three.txt" "--decode" "--fields 1 $F/three.txt" "--csv --fields 0" "--csv --fields 1,1" \
                "--csv -d ab" "--text=words" "--text=ids" "$F/three.txt $F/two.txt" "--vocab"; do
        run nmt-tokenize $args
        [ "$status" -eq 2 ] || { echo "args: $args -> $status: $output"; return 1; }
        [[ "${lines[-1]}" == "Try 'nmt-tokenize --help' for more information." ]]
    done
    run nmt-tokenize --normalize nfd
    [ "${lines[0]}" = "nmt-tokenize: invalid --normalize 'nfd' (none, nfkc or nfkc_cf)" ]
}

@test "missing input and missing or bad vocabulary exit 1 with the file named" {
    run nmt-tokenize "$TMP/nope.txt"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-tokenize: cannot open '$TMP/nope.txt': No such file or directory" ]
    run nmt-tokenize -v "$TMP/nope.vocab" "$F/three.txt"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-tokenize: cannot open '$TMP/nope.vocab': No such file or directory" ]
    head -c 2000 "$F/tiny.vocab" > "$TMP/trunc.vocab"
    run nmt-tokenize -v "$TMP/trunc.vocab" "$F/three.txt"
    [ "$status" -eq 1 ]
    [[ "$output" == "nmt-tokenize: $TMP/trunc.vocab: "* ]]
    sed 's/^275\tmerge\t/275\tmerge\tX/' "$F/tiny.vocab" > "$TMP/edit.vocab"
    run nmt-tokenize -v "$TMP/edit.vocab" "$F/three.txt"
    [ "$status" -eq 1 ]
    [[ "$output" == *"edit.vocab: line "*": merge piece text is not the concatenation"* ]]
    sed 's/^fingerprint .*/fingerprint 0123456789abcdef/' "$F/tiny.vocab" > "$TMP/fp.vocab"
    run nmt-tokenize -v "$TMP/fp.vocab" "$F/three.txt"
    [ "$status" -eq 1 ]
    [[ "$output" == *"fingerprint mismatch"* ]]
}

@test "--help and --version" {
    run nmt-tokenize --help
    [ "$status" -eq 0 ]; [[ "${lines[0]}" == "Usage: nmt-tokenize"* ]]
    run nmt-tokenize --version
    [ "$status" -eq 0 ]; [[ "${lines[0]}" == "nmt-tokenize (nmt) "* ]]
    run nmt-vocab --help
    [ "$status" -eq 0 ]; [[ "${lines[0]}" == "Usage: nmt-vocab"* ]]
    run nmt-vocab --version
    [ "$status" -eq 0 ]; [[ "${lines[0]}" == "nmt-vocab (nmt) "* ]]
}

# ---- nmt-vocab ----

@test "nmt-vocab is deterministic and joint by default; --side picks one side" {
    zcat "$D/val.en.gz" > "$TMP/en"; zcat "$D/val.de.gz" > "$TMP/de"
    nmt-tokenize --src "$TMP/en" --tgt "$TMP/de" -o "$TMP/pairs.nmt"
    nmt-vocab -s 2000 "$TMP/pairs.nmt" -o "$TMP/a.vocab"
    nmt-vocab -s 2000 < "$TMP/pairs.nmt" > "$TMP/b.vocab"
    cmp "$TMP/a.vocab" "$TMP/b.vocab"
    nmt-tokenize "$TMP/en" -o "$TMP/en.nmt"; nmt-tokenize "$TMP/de" -o "$TMP/de.nmt"
    nmt-vocab -s 2000 "$TMP/en.nmt" "$TMP/de.nmt" -o "$TMP/c.vocab"
    cmp "$TMP/a.vocab" "$TMP/c.vocab"
    nmt-vocab -s 2000 --side 1 "$TMP/pairs.nmt" -o "$TMP/s1.vocab"
    nmt-vocab -s 2000 "$TMP/en.nmt" -o "$TMP/en.vocab"
    diff <(sed 1,6d "$TMP/s1.vocab") <(sed 1,6d "$TMP/en.vocab")
    grep -q '^options .*side=1' "$TMP/s1.vocab"
    grep -q '^▁Hund\|	merge	▁Hund	' "$TMP/a.vocab"
    ! grep -q '	merge	▁Hund	' "$TMP/s1.vocab"
}

@test "nmt-vocab --size counts specials and bytes; --min-freq and --character-coverage" {
    zcat "$D/val.en.gz" | nmt-tokenize -o "$TMP/en.nmt"
    nmt-vocab --size 500 "$TMP/en.nmt" -o "$TMP/v.vocab"
    grep -q '^size 500$' "$TMP/v.vocab"
    [ "$(grep -c '	special	' "$TMP/v.vocab")" -eq 4 ]
    [ "$(grep -c '	byte	' "$TMP/v.vocab")" -eq 256 ]
    [ "$(tail -2 "$TMP/v.vocab" | sed -n 1p | cut -f1)" = 499 ]
    run nmt-vocab --size 20000 --min-freq 50 "$TMP/en.nmt" -o "$TMP/m.vocab"
    [ "$status" -eq 0 ]
    [[ "$output" == *"warning: only "*" pieces learnt (no pair left with count >= 50); asked for 20000"* ]]
    all=$(grep -c '	char	' "$TMP/v.vocab")
    nmt-vocab --size 500 --character-coverage 0.99 "$TMP/en.nmt" -o "$TMP/c.vocab"
    some=$(grep -c '	char	' "$TMP/c.vocab")
    [ "$some" -lt "$all" ]
    run nmt-vocab --verbose -s 500 "$TMP/en.nmt" -o /dev/null
    [ "$status" -eq 0 ]
    [[ "$output" == *"500 pieces ("*" merges"* ]]
    # -v means --vocab in the tools that take one; nmt-vocab takes none
    run nmt-vocab -v -s 500 "$TMP/en.nmt" -o /dev/null
    [ "$status" -eq 2 ]
}

@test "nmt-vocab: bad inputs name the input; usage errors exit 2" {
    run nmt-vocab "$TMP/nope.nmt"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-vocab: cannot open '$TMP/nope.nmt': No such file or directory" ]
    small_vocab
    nmt-tokenize -v "$TMP/v.vocab" "$F/three.txt" -o "$TMP/ids.nmt"
    run nmt-vocab "$TMP/ids.nmt"
    [ "$status" -eq 1 ]
    [[ "$output" == *"tok"*"ids"* ]]
    nmt-tokenize "$F/three.txt" -o "$TMP/t.nmt"
    head -c -8 "$TMP/t.nmt" > "$TMP/trunc.nmt"
    run nmt-vocab "$TMP/trunc.nmt" -o "$TMP/x.vocab"
    [ "$status" -eq 1 ]
    [ ! -s "$TMP/x.vocab" ]
    run nmt-vocab - < "$F/three.txt"
    [ "$status" -eq 1 ]
    nmt-tokenize -N none "$F/three.txt" -o "$TMP/none.nmt"
    run nmt-vocab "$TMP/t.nmt" "$TMP/none.nmt"
    [ "$status" -eq 1 ]
    [[ "$output" == *"normalization none differs from the first input's nfkc"* ]]
    for args in "--size 100" "--size x" "--min-freq 0" "--character-coverage 0" "--character-coverage 1.5" \
                "--side 3" "--bogus" "-s"; do
        run nmt-vocab $args
        [ "$status" -eq 2 ] || { echo "args: $args -> $status"; return 1; }
    done
}

@test "BPE segmentation of 40 test sentences equals the committed one (merges applied lowest rank first)" {
    zcat "$D/val.en.gz" "$D/val.de.gz" > "$TMP/c.txt"
    nmt-tokenize "$TMP/c.txt" | nmt-vocab -s 1000 -o "$TMP/v.vocab" 2>/dev/null
    zcat "$D/test_2016_flickr.en.gz" | sed -n 1,40p > "$TMP/s.txt"
    nmt-tokenize --vocab "$TMP/v.vocab" --text "$TMP/s.txt" > "$TMP/s.pieces"
    [ "$(wc -l < "$TMP/s.pieces")" -eq 40 ]
    diff "$TMP/s.pieces" "$F/val1000.pieces"
}
