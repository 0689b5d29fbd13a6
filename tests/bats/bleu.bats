#!/usr/bin/env bats
# nmt-bleu: sacreBLEU 2.6.0 test vectors, CLI behaviour and every error message.

load common

setup() {
    FIX="$NMT_SRCDIR/tests/fixtures/bleu"
    T="$BATS_TEST_TMPDIR"
    printf 'the cat sat on the mat\nhello world\n' > "$T/ref.txt"
    printf 'the cat sat on a mat\nhello there world\n' > "$T/hyp.txt"
}

@test "bleu: every sacreBLEU 2.6.0 vector (case x configuration) matches" {
    run python3 "$NMT_SRCDIR/tests/bleu_vectors.py" "$NMT_BIN/nmt-bleu" "$FIX"
    [ "$status" -eq 0 ] || { echo "$output" | grep '^not ok' -A4 | sed -n 1,60p; false; }
    grep -q '^1\.\.[0-9]' <<< "$output"
    [ "$(echo "$output" | grep -c '^ok')" -gt 3000 ]
}

@test "bleu: --help lists options and exits 0, --version names the signature version" {
    run nmt-bleu --help
    [ "$status" -eq 0 ]
    [[ "$output" == *"--tokenize"* ]]
    run nmt-bleu --version
    [ "$status" -eq 0 ]
    [[ "$output" == *"signature version nmt-bleu-"*"+sacrebleu-2.6.0"* ]]
}

@test "bleu: hypothesis on stdin equals -i" {
    a=$(nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" -f text)
    b=$(nmt-bleu "$T/ref.txt" -f text < "$T/hyp.txt")
    [ "$a" = "$b" ]
    [[ "$a" == "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:"* ]]
}

@test "bleu: --num-refs TSV gives the same result as two reference files" {
    cd "$FIX/multi_ref2"
    paste ref.txt ref2.txt > "$T/refs.tsv"
    a=$(nmt-bleu ref.txt ref2.txt -i hyp.txt -m bleu chrf ter -f text)
    b=$(nmt-bleu "$T/refs.tsv" --num-refs 2 -i hyp.txt -m bleu chrf ter -f text)
    [ "$a" = "$b" ]
    [[ "$a" == *"nrefs:2"* ]]
}

@test "bleu: several metrics print aligned text lines and a JSON list" {
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" -m ter bleu chrf -f text
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 3 ]
    [[ "${lines[0]}" == *"BLEU|"* ]]
    [[ "${lines[1]}" == *"chrF2|"* ]]
    [[ "${lines[2]}" == "TER|"* ]]
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" -m bleu chrf
    [ "${lines[0]}" = "[" ]
    [ "${lines[-1]}" = "]" ]
    echo "$output" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert [x["name"] for x in d]==["BLEU","chrF2"]'
}

@test "bleu: -sl prints one line per input line; -b prints the score only" {
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" -sl
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 2 ]
    [[ "${lines[0]}" == *"eff:yes"* ]]
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" -b -w 3
    [[ "$output" =~ ^[0-9]+\.[0-9]{3}$ ]]
}

@test "bleu: --confidence adds mean and interval, deterministic for a seed" {
    cd "$FIX/realistic_val"
    run nmt-bleu ref.txt -i hyp.txt -ci -f text
    [ "$status" -eq 0 ]
    [[ "$output" == *"|bs:1000|seed:12345|"*" = 56.2 (μ = "*" ± "*")"* ]]
    a=$output
    run nmt-bleu ref.txt -i hyp.txt -ci -f text
    [ "$output" = "$a" ]
    SACREBLEU_SEED=7 run nmt-bleu ref.txt -i hyp.txt -ci --short -f text
    [[ "$output" == *"|bs:1000|rs:7|"* ]]
    run nmt-bleu ref.txt -i hyp.txt -ci -cin 200
    echo "$output" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["bs"]=="200" and 50<d["confidence_mean"]<60 and 0<d["confidence_var"]<5, d'
}

@test "bleu: --paired-bs compares systems with the first as baseline" {
    cd "$FIX/realistic_val"
    sed 's/ein /eine /g' hyp.txt > "$T/sys2.txt"
    run nmt-bleu ref.txt -i hyp.txt "$T/sys2.txt" -pbs -m bleu chrf
    [ "$status" -eq 0 ]
    echo "$output" | python3 -c '
import json,sys
d=json.load(sys.stdin)
assert d[0]["system"]=="Baseline: hyp.txt" and d[0]["BLEU"]["p_value"] is None
assert 0 < d[1]["BLEU"]["p_value"] <= 1 and d[1]["chrF2"]["ci"] > 0
assert abs(d[0]["BLEU"]["score"]-56.157275791119176) < 1e-9'
    run nmt-bleu ref.txt -i hyp.txt "$T/sys2.txt" -pbs -f text
    [[ "$output" == *"Paired bootstrap resampling test with 1000 resampling trials"* ]]
    [[ "$output" == *"(p = "* ]]
}

@test "bleu: error: line count mismatch" {
    printf 'one line\n' > "$T/short.txt"
    run nmt-bleu "$T/ref.txt" -i "$T/short.txt"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-bleu: hypothesis '$T/short.txt' has 1 lines but reference '$T/ref.txt' has 2" ]
}

@test "bleu: error: invalid UTF-8 names file, line and byte offset" {
    printf 'fine\nbad \xc3\x28 byte\n' > "$T/bad.txt"
    run nmt-bleu "$T/ref.txt" -i "$T/bad.txt"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-bleu: invalid UTF-8 in '$T/bad.txt' line 2 (byte offset 9)" ]
    printf 'a \xed\xa0\x80 surrogate\nb\n' > "$T/sur.txt"
    run nmt-bleu "$T/sur.txt" -i "$T/hyp.txt"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-bleu: invalid UTF-8 in '$T/sur.txt' line 1 (byte offset 2)" ]
}

@test "bleu: error: unreadable and missing files" {
    run nmt-bleu "$T/nope.txt" -i "$T/hyp.txt"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-bleu: cannot open '$T/nope.txt': No such file or directory" ]
    run nmt-bleu "$T" -i "$T/hyp.txt"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-bleu: cannot read '$T': Is a directory" ]
}

@test "bleu: error: empty hypothesis" {
    : > "$T/empty.txt"
    run nmt-bleu "$T/ref.txt" -i "$T/empty.txt"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-bleu: hypothesis '$T/empty.txt' is empty" ]
    run nmt-bleu "$T/ref.txt" < /dev/null
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-bleu: hypothesis 'stdin' is empty" ]
}

@test "bleu: error: --num-refs field count, with several files" {
    printf 'a\tb\nc\n' > "$T/refs.tsv"
    run nmt-bleu "$T/refs.tsv" --num-refs 2 -i "$T/hyp.txt"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-bleu: '$T/refs.tsv' line 2: expected 2 tab-separated references, found 1" ]
    run nmt-bleu "$T/ref.txt" "$T/ref.txt" --num-refs 2 -i "$T/hyp.txt"
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-bleu: --num-refs takes one file of tab-separated references, not several files" ]
}

@test "bleu: error: stdin systems with differing tab counts" {
    printf 'a\tb\nc\n' | { run nmt-bleu "$T/ref.txt"; [ "$status" -eq 1 ]; [ "$output" = "nmt-bleu: stdin line 2: expected 2 tab-separated systems as on line 1, found 1" ]; }
}

@test "bleu: usage errors exit 2 with a hint" {
    run nmt-bleu -i "$T/hyp.txt"
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-bleu: no reference file given (give references before -i)" ]
    [ "${lines[1]}" = "Try 'nmt-bleu --help' for more information." ]
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" -m foo
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-bleu: unknown metric 'foo' (choose from bleu, chrf, ter)" ]
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" --tokenize 14a
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-bleu: unknown tokenizer '14a' (choose from 13a, intl, zh, char, none)" ]
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" -s linear
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-bleu: unknown smoothing method 'linear' (choose from exp, floor, add-k, none)" ]
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" -f xml
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-bleu: unknown format 'xml' (choose from json, text)" ]
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" -w x
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-bleu: invalid width 'x' (expected an integer from 0 to 100)" ]
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" -sv abc
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-bleu: invalid smoothing value 'abc'" ]
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" --bogus
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-bleu: unknown option '--bogus'" ]
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" -w
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-bleu: option '-w' needs a value" ]
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" --ter-asian-support -m ter
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-bleu: --ter-asian-support is not supported" ]
}

@test "bleu: usage errors of sentence level and statistical tests" {
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" -sl -m bleu chrf
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-bleu: only one metric can be used in sentence-level mode" ]
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" -sl -ci
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-bleu: statistical tests are unavailable in sentence-level mode" ]
    cp "$T/hyp.txt" "$T/h2.txt"
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" "$T/h2.txt" -sl
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-bleu: only one system can be evaluated in sentence-level mode" ]
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" -pbs
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-bleu: paired tests require several systems given to -i" ]
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" "$T/h2.txt" -ci
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-bleu: use paired tests (--paired-bs) for several systems" ]
    run nmt-bleu "$T/ref.txt" -i "$T/hyp.txt" "$T/hyp.txt"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-bleu: '$T/hyp.txt' already used to name a system" ]
}

@test "bleu: write error on a full disk is reported" {
    [ -w /dev/full ] || skip "no /dev/full"
    run bash -c "nmt-bleu '$T/ref.txt' -i '$T/hyp.txt' > /dev/full"
    [ "$status" -eq 1 ]
    [[ "$output" == "nmt-bleu: "* ]]
}

@test "bleu: man page renders without warnings and documents every --help option" {
    run bash -c "MANWIDTH=100 man -l '$NMT_SRCDIR/man/nmt-bleu.1' 2>&1 >/dev/null"
    [ -z "$output" ]
    page=$(MANWIDTH=200 man -l "$NMT_SRCDIR/man/nmt-bleu.1" 2>/dev/null | sed 's/‐/-/g')
    for o in $(nmt-bleu --help | grep -oE -- '--[a-z][a-z-]+' | sort -u); do
        grep -q -- "$o" <<< "$page" || { echo "missing $o"; false; }
    done
}

@test "bleu: a large corpus (scored in two halves) gives the statistics of the line-by-line sum" {
    # 6000 lines with symbols, numbers, entities, Unicode spaces and case; without bootstrap the
    # corpus is split between two threads, with -ci the rows are kept and summed in order
    awk 'BEGIN { for (i = 0; i < 6000; i++) {
        printf "Line %d: the cat (%d) sat, on 3-4 mats &amp; \xc2\xa0rugs%s\n", i, i % 7, i % 3 ? "." : " !" } }' > "$T/bigref.txt"
    awk 'BEGIN { for (i = 0; i < 6000; i++) {
        printf "line %d the Cat (%d) sat on 3-4 mat &amp; rugs%s\n", i, i % 5, i % 4 ? "." : "" } }' > "$T/bighyp.txt"
    for m in bleu chrf ter; do
        run nmt-bleu "$T/bigref.txt" -i "$T/bighyp.txt" -m $m --full
        [ "$status" -eq 0 ]
        a=$output
        run nmt-bleu "$T/bigref.txt" -i "$T/bighyp.txt" -m $m --full -ci -cin 1
        [ "$status" -eq 0 ]
        echo "$m: $a / $output"
        [ "$a" = "$output" ]
    done
    run nmt-bleu "$T/bigref.txt" -i "$T/bighyp.txt" -m bleu -lc --full
    a=$output
    run nmt-bleu "$T/bigref.txt" -i "$T/bighyp.txt" -m bleu -lc --full -ci -cin 1
    [ "$a" = "$output" ]
}
