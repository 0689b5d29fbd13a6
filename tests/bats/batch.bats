#!/usr/bin/env bats
# nmt-batch: options, errors, determinism, coverage and padding (Multi30k).
# Inputs are built and outputs read with build/tests/helpers/batch_io (gen / dump / header): see
# tests/helpers/batch_io.c. dump prints one line per row:
#   batch index src_len tgt_len B S T src_ids tgt_ids

load common

setup_file() {
    export H="$NMT_BIN/../build/tests/helpers/batch_io"
    export FX="$NMT_SRCDIR/tests/fixtures/batch"
    export D="$BATS_FILE_TMPDIR"
    "$H" gen --vocab test:v1 < "$FX/small.tsv" > "$D/small.ids"
    # expected rows of small.ids: index src tgt (ids comma-joined, "-" when empty)
    awk -F'\t' '{ for (s = 1; s <= 2; s++) { x = $s; gsub(/#/, "", x); gsub(/ +/, ",", x); if (x == "") x = "-"; v[s] = x }
                  print NR - 1, v[1], v[2] }' "$FX/small.tsv" > "$D/small.expect"
    # Multi30k train as ids through the real tokenizer and an 8000-piece joint BPE vocabulary
    zcat "$NMT_SRCDIR/data/multi30k/train.en.gz" > "$D/train.en"
    zcat "$NMT_SRCDIR/data/multi30k/train.de.gz" > "$D/train.de"
    nmt-tokenize --src "$D/train.en" --tgt "$D/train.de" | nmt-vocab --size 8000 -o "$D/m30k.vocab"
    nmt-tokenize --vocab "$D/m30k.vocab" --src "$D/train.en" --tgt "$D/train.de" > "$D/m30k.ids"
}

dump() { "$H" dump "$1"; }
# index sequence of a batch stream, one a line
indices() { "$H" dump "$1" | awk '{print $2}'; }

@test "--help lists every option and exits 0" {
    run nmt-batch --help
    [ "$status" -eq 0 ]
    [[ "$output" == Usage:\ nmt-batch* ]]
    for o in --input --output --max-tokens --max-sentences --max-len --truncate --max-ratio --window \
             --seed --epochs --shard --log --help --version; do
        [[ "$output" == *"$o"* ]] || { echo "missing $o"; return 1; }
    done
}

@test "--version names the tool and the stream format" {
    run nmt-batch --version
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == "nmt-batch (nmt) "* ]]
    [[ "$output" == *"record stream format 1."* ]]
}

@test "usage errors exit 2 with a message" {
    check() {
        run nmt-batch "$@" "$D/small.ids" -o "$D/x"
        [ "$status" -eq 2 ] || { echo "status $status for $*"; return 1; }
        [[ "${lines[0]}" == "nmt-batch: "* ]] || { echo "$output"; return 1; }
        [[ "$output" == *"Try 'nmt-batch --help' for more information."* ]]
    }
    check --bogus
    check --max-tokens 0
    check --max-tokens abc
    check --max-tokens 99999999999
    check --max-sentences 0
    check --max-len 0
    check --max-ratio 0.5
    check --max-ratio x
    check --window 0
    check --epochs 0
    check --seed -1
    check --shard 3/3
    check --shard 1
    check --shard a/b
    check --log out.txt
    run nmt-batch --max-tokens 0 "$D/small.ids"
    [ "${lines[0]}" = "nmt-batch: invalid --max-tokens '0' (expected an integer from 1 to 16777216)" ]
    run nmt-batch --shard 2/2 "$D/small.ids"
    [ "${lines[0]}" = "nmt-batch: invalid --shard '2/2' (expected K/N with 0 <= K < N)" ]
    run nmt-batch --log out.txt "$D/small.ids"
    [ "${lines[0]}" = "nmt-batch: --log FILE must end in .jsonl or .csv: 'out.txt'" ]
    run nmt-batch "$D/small.ids" "$D/small.ids"
    [ "$status" -eq 2 ]
    [[ "${lines[0]}" == "nmt-batch: expected one input, got extra argument"* ]]
}

@test "rows carry the input ids followed by EOS then PAD, each pair once" {
    nmt-batch --max-tokens 100 "$D/small.ids" -o "$D/out"
    dump "$D/out" > "$D/rows"          # dump fails on a wrong EOS/PAD layout
    awk '{print $2, $8, $9}' "$D/rows" | sort -n > "$D/got"
    diff "$D/small.expect" "$D/got"
    # lengths count the EOS
    awk '{ ns = ($8 == "-") ? 0 : split($8, a, ","); nt = ($9 == "-") ? 0 : split($9, b, ",");
           if ($3 != ns + 1 || $4 != nt + 1) { print "bad lengths: " $0; exit 1 } }' "$D/rows"
}

@test "--max-tokens bounds the padded size of the larger side" {
    for n in 40 100 333 4096; do
        run nmt-batch --max-tokens $n "$D/small.ids" -o "$D/out"
        [ "$status" -eq 0 ]
        dump "$D/out" | awk -v n=$n '{ w = $6 > $7 ? $6 : $7; if ($5 * w > n) { print "over budget: " $0; bad = 1 } }
                                     END { exit bad }'
        dropped=$(echo "$output" | sed -n 's/.* read, \([0-9]*\) dropped.*/\1/p')
        [ "$(indices "$D/out" | wc -l)" -eq $((60 - dropped)) ]
    done
    # the budget is used: with 4096 every pair fits one batch
    nmt-batch --max-tokens 4096 "$D/small.ids" -o "$D/out" 2>/dev/null
    [ "$(dump "$D/out" | awk '{print $1}' | sort -u | wc -l)" -eq 1 ]
}

@test "a pair longer than --max-tokens is dropped and counted" {
    longest=$(awk '{ s = $3 > $4 ? $3 : $4; if (s > m) m = s } END {print m}' <(nmt-batch --max-tokens 4096 "$D/small.ids" 2>/dev/null | "$H" dump -))
    n=$((longest - 1))
    run nmt-batch --max-tokens $n "$D/small.ids" -o "$D/out"
    [ "$status" -eq 0 ]
    want=$(awk -v n=$n '{ a = split($1, x, ","); b = split($2, y, ","); if ($1 == "-") a = 0; if ($2 == "-") b = 0;
                          if (a + 1 > n || b + 1 > n) c++ } END {print c + 0}' <(cut -d' ' -f2- "$D/small.expect"))
    [ "$want" -ge 1 ]
    [[ "$output" == *"60 pairs read, $want dropped ($want too long, 0 over ratio)"* ]]
    [ "$(indices "$D/out" | wc -l)" -eq $((60 - want)) ]
}

@test "--max-sentences bounds the rows of a batch" {
    nmt-batch --max-sentences 7 "$D/small.ids" -o "$D/out" 2>/dev/null
    dump "$D/out" | awk '$5 > 7 { print "too many rows: " $0; bad = 1 } END { exit bad }'
    [ "$(dump "$D/out" | awk '{print $1}' | sort -u | wc -l)" -eq 9 ]   # ceil(60/7)
}

@test "--max-len drops longer pairs and reports them" {
    want=$(awk '{ a = ($2 == "-") ? 0 : split($2, x, ","); b = ($3 == "-") ? 0 : split($3, y, ",");
                  if (a + 1 > 12 || b + 1 > 12) c++ } END {print c + 0}' "$D/small.expect")
    [ "$want" -gt 5 ]
    run nmt-batch --max-len 12 "$D/small.ids" -o "$D/out"
    [ "$status" -eq 0 ]
    [[ "$output" == "nmt-batch: 1 epoch, 60 pairs read, $want dropped ($want too long, 0 over ratio), 0 truncated,"* ]]
    dump "$D/out" | awk '$3 > 12 || $4 > 12 { print "too long: " $0; bad = 1 } END { exit bad }'
    [ "$(indices "$D/out" | wc -l)" -eq $((60 - want)) ]
}

@test "--truncate cuts longer sides instead of dropping the pair" {
    want=$(awk '{ a = ($2 == "-") ? 0 : split($2, x, ","); b = ($3 == "-") ? 0 : split($3, y, ",");
                  if (a + 1 > 12 || b + 1 > 12) c++ } END {print c + 0}' "$D/small.expect")
    run nmt-batch --max-len 12 --truncate "$D/small.ids" -o "$D/out"
    [ "$status" -eq 0 ]
    [[ "$output" == *"60 pairs read, 0 dropped (0 too long, 0 over ratio), $want truncated,"* ]]
    dump "$D/out" > "$D/rows"
    awk '$3 > 12 || $4 > 12 { print "too long: " $0; exit 1 }' "$D/rows"
    [ "$(wc -l < "$D/rows")" -eq 60 ]
    # each side is a prefix of the input side
    awk '{print $2, $8, $9}' "$D/rows" | sort -n | paste -d' ' - "$D/small.expect" |
        awk '{ if (index($5 ",", $2 == "-" ? "" : $2 ",") != 1 && $2 != "-") { print "not a prefix: " $0; bad = 1 }
               if (index($6 ",", $3 == "-" ? "" : $3 ",") != 1 && $3 != "-") { print "not a prefix: " $0; bad = 1 } }
             END { exit bad }'
}

@test "--max-ratio drops pairs with an extreme length ratio" {
    want=$(awk '{ a = 1 + (($2 == "-") ? 0 : split($2, x, ",")); b = 1 + (($3 == "-") ? 0 : split($3, y, ","));
                  hi = a > b ? a : b; lo = a > b ? b : a; if (hi > 1.5 * lo) c++ } END {print c + 0}' "$D/small.expect")
    [ "$want" -ge 3 ]
    run nmt-batch --max-ratio 1.5 "$D/small.ids" -o "$D/out"
    [ "$status" -eq 0 ]
    [[ "$output" == *"60 pairs read, $want dropped (0 too long, $want over ratio)"* ]]
    dump "$D/out" | awk '{ hi = $3 > $4 ? $3 : $4; lo = $3 > $4 ? $4 : $3
                           if (hi > 1.5 * lo) { print "ratio: " $0; bad = 1 } } END { exit bad }'
}

@test "--window buckets and shuffles each window on its own" {
    nmt-batch --window 16 --max-tokens 120 "$D/small.ids" -o "$D/out" 2>/dev/null
    # every batch holds pairs of one window, and the windows come out in input order
    dump "$D/out" | awk '{ w = int($2 / 16)
                           if ($1 in win && win[$1] != w) { print "batch spans windows: " $0; bad = 1 }
                           win[$1] = w; if (w < last) { print "window order: " $0; bad = 1 } last = w }
                         END { exit bad }'
    [ "$(indices "$D/out" | sort -n | uniq | wc -l)" -eq 60 ]
}

@test "same input and seed give byte-identical output; other seeds other orders" {
    nmt-batch --seed 7 "$D/m30k.ids" -o "$D/a" 2>/dev/null
    nmt-batch --seed 7 < "$D/m30k.ids" > "$D/b" 2>/dev/null
    cmp "$D/a" "$D/b"
    nmt-batch --seed 8 "$D/m30k.ids" -o "$D/c" 2>/dev/null
    fails cmp -s "$D/a" "$D/c"
    indices "$D/a" > "$D/ia"
    indices "$D/c" > "$D/ic"
    fails cmp -s "$D/ia" "$D/ic"
    [ "$(sort -n "$D/ia" | md5sum)" = "$(sort -n "$D/ic" | md5sum)" ]
    # default seed is 1
    nmt-batch "$D/m30k.ids" -o "$D/d" 2>/dev/null
    nmt-batch --seed 1 "$D/m30k.ids" -o "$D/e" 2>/dev/null
    cmp "$D/d" "$D/e"
}

@test "Multi30k: every pair exactly once, padding below 5% with --max-tokens 4096" {
    run nmt-batch --max-tokens 4096 "$D/m30k.ids" -o "$D/out"
    [ "$status" -eq 0 ]
    [[ "$output" == "nmt-batch: 1 epoch, 29000 pairs read, 0 dropped"* ]]
    nmt-cat --check "$D/out"
    # the index fields of the batch records, read by nmt-cat: each pair exactly once
    nmt-cat --json "$D/out" | grep -o '"index":\[[0-9,]*\]' | tr -c '0-9\n' '\n' | grep . | sort -n > "$D/idx"
    diff "$D/idx" <(seq 0 28999)
    dump "$D/out" | awk '{ w = $6 > $7 ? $6 : $7; if ($5 * w > 4096) { print "over budget: " $0; bad = 1 } }
                         END { exit bad }'
    pad=$(echo "$output" | sed -n 's/.*padding \([0-9.]*\)%$/\1/p')
    echo "# Multi30k train, --max-tokens 4096: padding $pad%" >&3
    awk -v p="$pad" 'BEGIN { exit !(p != "" && p < 5) }'
    # the summary's padding agrees with the batches
    dump "$D/out" | awk -v p="$pad" '!($1 in seen) { seen[$1] = 1; cells += $5 * ($6 + $7) } { tok += $3 + $4 }
                                     END { q = 100 * (1 - tok / cells); if (q - p > 0.01 || p - q > 0.01) { print q, p; exit 1 } }'
}

@test "--epochs re-reads the input, each epoch a permutation, epoch e uses seed+e" {
    nmt-batch --epochs 3 --seed 5 --max-tokens 100 "$D/small.ids" -o "$D/out" 2>"$D/err"
    grep -q "^nmt-batch: 3 epochs, 180 pairs read," "$D/err"
    indices "$D/out" > "$D/idx"
    [ "$(wc -l < "$D/idx")" -eq 180 ]
    for e in 0 1 2; do
        diff <(sed -n "$((e * 60 + 1)),$((e * 60 + 60))p" "$D/idx" | sort -n) <(seq 0 59)
    done
    fails cmp -s <(sed -n 1,60p "$D/idx") <(sed -n 61,120p "$D/idx")
    # the second epoch is what seed 6 gives as a first epoch
    nmt-batch --seed 6 --max-tokens 100 "$D/small.ids" -o "$D/s6" 2>/dev/null
    diff <(dump "$D/out" | sed -n 61,120p | cut -d' ' -f2-) <(dump "$D/s6" | cut -d' ' -f2-)
    # Multi30k over two epochs: each pair exactly twice
    nmt-batch --epochs 2 "$D/m30k.ids" -o "$D/m2" 2>/dev/null
    diff <(indices "$D/m2" | sort -n | uniq -c | awk '$1 != 2') /dev/null
    [ "$(indices "$D/m2" | wc -l)" -eq 58000 ]
    # a redirected file is seekable too
    nmt-batch --epochs 2 < "$D/small.ids" > "$D/r" 2>/dev/null
    [ "$(indices "$D/r" | wc -l)" -eq 120 ]
}

@test "--epochs on a pipe is refused" {
    run bash -c "cat '$D/small.ids' | nmt-batch --epochs 2 > '$D/out'"
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-batch: --epochs 2 needs a seekable input; stdin is not seekable (Illegal seek)" ]
    # one epoch from a pipe is fine
    run bash -c "cat '$D/small.ids' | nmt-batch -i - > '$D/out'"
    [ "$status" -eq 0 ]
}

@test "--shard K/N emits every N-th batch for rank K" {
    nmt-batch --max-tokens 60 "$D/small.ids" -o "$D/all" 2>/dev/null
    dump "$D/all" > "$D/all.rows"
    nb=$(awk '{print $1}' "$D/all.rows" | sort -u | wc -l)
    [ "$nb" -ge 6 ]
    : > "$D/union"
    for k in 0 1 2; do
        run nmt-batch --max-tokens 60 --shard $k/3 "$D/small.ids" -o "$D/s$k"
        [ "$status" -eq 0 ]
        want=$(( (nb - k + 2) / 3 ))
        [[ "$output" == *", $want batches,"* ]]
        # batch j of shard k is batch 3j+k of the whole
        diff <(dump "$D/s$k" | cut -d' ' -f2-) <(awk -v k=$k '$1 % 3 == k' "$D/all.rows" | cut -d' ' -f2-)
        indices "$D/s$k" >> "$D/union"
    done
    diff <(sort -n "$D/union") <(seq 0 59)
}

@test "summary on stderr and --log as JSON lines or CSV" {
    run nmt-batch --max-tokens 100 --log "$D/log.jsonl" "$D/small.ids" -o "$D/out"
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ "${lines[0]}" =~ ^nmt-batch:\ 1\ epoch,\ 60\ pairs\ read,\ 0\ dropped\ \(0\ too\ long,\ 0\ over\ ratio\),\ 0\ truncated,\ [0-9]+\ batches,\ 60\ rows,\ [0-9]+\ tokens,\ [0-9]+\ padded\ cells,\ padding\ [0-9.]+%$ ]]
    [ "$(wc -l < "$D/log.jsonl")" -eq 1 ]
    grep -Eq '^\{"epochs":1,"pairs":60,"dropped_len":0,"dropped_ratio":0,"truncated":0,"batches":[0-9]+,"rows":60,"tokens":[0-9]+,"cells":[0-9]+,"padding":0\.[0-9]{6}\}$' "$D/log.jsonl"
    /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["rows"]==60' "$D/log.jsonl"
    nmt-batch --max-tokens 100 --max-len 10 --log "$D/log.csv" "$D/small.ids" -o "$D/out" 2>/dev/null
    [ "$(sed -n 1p "$D/log.csv")" = "epochs,pairs,dropped_len,dropped_ratio,truncated,batches,rows,tokens,cells,padding" ]
    [[ "$(sed -n 2p "$D/log.csv")" =~ ^1,60,[1-9][0-9]*,0,0,[0-9]+,[0-9]+,[0-9]+,[0-9]+,0\.[0-9]+$ ]]
    run nmt-batch --log "$D/nodir/log.csv" "$D/small.ids" -o "$D/out"
    [ "$status" -eq 1 ]
    [[ "$output" == "nmt-batch: cannot open '$D/nodir/log.csv' for writing: No such file or directory" ]]
}

@test "header records the input vocab and the options" {
    nmt-batch --max-tokens 300 --max-sentences 9 --max-len 40 --truncate --max-ratio 2.5 --window 1000 \
        --seed 42 --shard 1/2 "$D/small.ids" -o "$D/out" 2>/dev/null
    run "$H" header "$D/out"
    [ "$status" -eq 0 ]
    [ "${lines[0]}" = "kind batch" ]
    [ "${lines[1]}" = "producer nmt-batch 0.1.0" ]
    for kv in vocab=test:v1 max_tokens=300 max_sentences=9 max_len=40 truncate=1 max_ratio=2.5 window=1000 \
              seed=42 epochs=1 shard=1/2; do
        [[ " ${lines[*]} " == *" $kv "* ]] || { echo "missing $kv: ${lines[*]}"; return 1; }
    done
    # no vocab in the input, none in the output
    printf '#5\t#6\n' | "$H" gen > "$D/nov.ids"
    nmt-batch "$D/nov.ids" -o "$D/out" 2>/dev/null
    run "$H" header "$D/out"
    [[ "$output" != *vocab=* ]]
}

@test "source-only records are refused: batches are made of pairs" {
    printf '#5 #6 #7\t#4\n#8\n#9 #10\t#11\n' | "$H" gen > "$D/one.ids"
    run nmt-batch "$D/one.ids" -o "$D/one.batches"
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ "$output" == "nmt-batch: $D/one.ids: record 2: a source sentence without a target; batches are made of pairs (tokenize both sides: "* ]]
    [ ! -e "$D/one.batches" ]
}

@test "bad input: wrong kind, truncated, not a stream, empty, missing, special ids" {
    printf 'a b\tc\n' | "$H" gen --kind tok > "$D/tok"
    run nmt-batch "$D/tok" -o "$D/out"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-batch: $D/tok: unexpected kind at byte 0: expected a ids stream, got tok 1.2" ]

    head -c $(( $(stat -c %s "$D/m30k.ids") / 2 )) "$D/m30k.ids" > "$D/trunc"
    nmt-batch "$D/small.ids" -o "$D/out" 2>/dev/null
    before=$(sha256sum < "$D/out")
    run nmt-batch "$D/trunc" -o "$D/out"
    [ "$status" -eq 1 ]
    [[ "$output" == "nmt-batch: $D/trunc: truncated at byte "* ]]
    # the named output is written only on success: the previous file is intact, no temporary is left
    [ "$(sha256sum < "$D/out")" = "$before" ]
    [ -z "$(ls -A "$D" | grep '\.tmp')" ]
    # on stdout, the output stays truncated: its reader says so
    run bash -c 'nmt-batch "$1" > "$2"' _ "$D/trunc" "$D/out.stdout"
    [ "$status" -eq 1 ]
    run "$H" dump "$D/out.stdout"
    [ "$status" -eq 1 ]
    [[ "$output" == *truncated* ]]

    head -c -4 "$D/small.ids" > "$D/notrailer"
    run nmt-batch "$D/notrailer" -o "$D/out"
    [ "$status" -eq 1 ]
    [[ "$output" == "nmt-batch: $D/notrailer: "*truncated* || "$output" == "nmt-batch: $D/notrailer: "*corrupt* ]]

    echo hello > "$D/txt"
    run nmt-batch "$D/txt" -o "$D/out"
    [ "$status" -eq 1 ]
    [[ "$output" == "nmt-batch: $D/txt: not an nmt stream at byte 0"* ]]

    : > "$D/empty"
    run nmt-batch < "$D/empty" -o "$D/out"
    [ "$status" -eq 1 ]
    [[ "$output" == "nmt-batch: stdin: truncated at byte 0"* ]]

    run nmt-batch "$D/missing" -o "$D/out"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-batch: cannot open '$D/missing': No such file or directory" ]

    printf '#5 #6\t#7\n#5 #2\t#7\n' | "$H" gen > "$D/special.ids"
    run nmt-batch "$D/special.ids" -o "$D/out"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-batch: $D/special.ids: record 2: source id 2 at position 1 is a special id (PAD, BOS or EOS)" ]
}

@test "output: -o errors, /dev/full, and no binary to a terminal" {
    run nmt-batch "$D/small.ids" -o "$D/nodir/out"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-batch: cannot open '$D/nodir/out' for writing: No such file or directory" ]
    run nmt-batch "$D/small.ids" -o /dev/full
    [ "$status" -eq 1 ]
    [[ "$output" == nmt-batch:*"No space left on device"* ]]
    run script -qec "nmt-batch '$D/small.ids'" /dev/null
    [ "$status" -eq 1 ]
    [[ "$output" == *"nmt-batch: refusing to write binary data to a terminal"* ]]
    # -o - is stdout
    nmt-batch "$D/small.ids" -o - > "$D/o1" 2>/dev/null
    nmt-batch "$D/small.ids" -o "$D/o2" 2>/dev/null
    cmp "$D/o1" "$D/o2"
}

@test "concatenated input streams are read as one" {
    cat "$D/small.ids" "$D/small.ids" > "$D/two.ids"
    run nmt-batch "$D/two.ids" -o "$D/out"
    [ "$status" -eq 0 ]
    [[ "$output" == *"120 pairs read"* ]]
    diff <(indices "$D/out" | sort -n | uniq -c | awk '$1 != 2') /dev/null
}

@test "man page renders without warnings and lists every --help option" {
    page="$NMT_SRCDIR/man/nmt-batch.1"
    run bash -c "LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l '$page' 2>&1 >/dev/null"
    [ "$status" -eq 0 ]
    [ -z "$output" ]
    text=$(MANWIDTH=200 man -l "$page" 2>/dev/null)
    for o in $(nmt-batch --help | grep -oE -- '--[a-z][a-z-]+' | sort -u); do
        [[ "$text" == *"$o"* ]] || { echo "man page lacks $o"; return 1; }
    done
}
