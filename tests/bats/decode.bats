#!/usr/bin/env bats
# nmt-decode: options, output formats, batch invariance, greedy == beam 1, forced-decoding scores
# and errors, with a tiny model trained for a few steps on a slice of Multi30k in setup_file.

load common

setup_file() {
    export D="$BATS_FILE_TMPDIR"
    zcat "$NMT_SRCDIR/data/multi30k/train.en.gz" | sed -n 1,2000p > "$D/tr.en"
    zcat "$NMT_SRCDIR/data/multi30k/train.de.gz" | sed -n 1,2000p > "$D/tr.de"
    nmt-tokenize --src "$D/tr.en" --tgt "$D/tr.de" | nmt-vocab --size 500 -o "$D/v.vocab"
    nmt-tokenize --vocab "$D/v.vocab" --src "$D/tr.en" --tgt "$D/tr.de" > "$D/p.ids"
    nmt-batch -t 2000 "$D/p.ids" -o "$D/p.batches" 2>/dev/null
    nmt-train --vocab "$D/v.vocab" -i "$D/p.batches" -o "$D/m.ckpt" --layers 2 --d-model 64 --heads 4 --ff 128 \
        --max-steps 40 --warmup 20 --lr 2 --label-smoothing 0 -q --threads 2
    # 24 source lines of mixed lengths, one empty
    zcat "$NMT_SRCDIR/data/multi30k/test_2016_flickr.en.gz" | sed -n 1,23p > "$D/src.en"
    sed -i '7i\\' "$D/src.en"
    zcat "$NMT_SRCDIR/data/multi30k/test_2016_flickr.de.gz" | sed -n 1,23p > "$D/ref.de"
    sed -i '7i\\' "$D/ref.de"
    export DEC="nmt-decode -m $D/m.ckpt --threads 2 --max-len-b 8"
    # ensembles: a second model on the same vocabulary, and one on another vocabulary
    nmt-train --vocab "$D/v.vocab" -i "$D/p.batches" -o "$D/m2.ckpt" --layers 1 --d-model 32 --heads 2 --ff 64 \
        --max-steps 30 --warmup 20 --lr 2 --label-smoothing 0 -q --threads 2 --seed 7
    nmt-tokenize --src "$D/tr.en" --tgt "$D/tr.de" | nmt-vocab --size 300 -o "$D/v3.vocab"
    nmt-tokenize --vocab "$D/v3.vocab" --src "$D/tr.en" --tgt "$D/tr.de" | nmt-batch -t 2000 -o "$D/p3.batches" 2>/dev/null
    nmt-train --vocab "$D/v3.vocab" -i "$D/p3.batches" -o "$D/m3.ckpt" --layers 1 --d-model 32 --heads 2 --ff 64 \
        --max-steps 1 -q --threads 2
}

@test "--help and --version" {
    run nmt-decode --help
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == "Usage: nmt-decode"* ]]
    run nmt-decode --version
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == "nmt-decode (nmt) "* ]]
}

@test "usage errors exit 2" {
    for args in "" "-m x --beam 0" "-m x --beam 1.5" "-m x --nbest 3 --beam 2" "-m x --in foo" "-m x --out foo" \
                "-m x --alpha -1" "-m x --src a" "-m x --score --src a" "-m x --score --beam 4" \
                "-m x --max-tokens 0" "-m x --max-sentences 0" "-m x --out hyp --scores" "-m x extra" "-m x --bogus" "-m x --jobs 0" \
                "-m x --jobs 1.5" "-m x --jobs 257" "-m x --threads 1.5" "$(printf -- '-m x %.0s' {1..17})" \
                "-m x --word-scores --out hyp" "-m x --word-scores --score" \
                "-m x --precision int4" "-m x --precision INT8" "-m x --precision int8-al" "-m x --precision" "-m x --precision ''"; do
        run nmt-decode $args
        [ "$status" -eq 2 ] || { echo "args: $args: $status $output"; return 1; }
        [[ "${lines[0]}" == "nmt-decode: "* ]] || { echo "args: $args: $output"; return 1; }
    done
}

@test "one line out per line in, in order, empty line stays empty" {
    run $DEC -i "$D/src.en"
    [ "$status" -eq 0 ]
    [ "$(wc -l < <($DEC -i "$D/src.en"))" -eq 24 ]
    [ -z "$(sed -n 7p <($DEC -i "$D/src.en"))" ]
    [ -n "$(sed -n 1p <($DEC -i "$D/src.en"))" ]
}

@test "batch invariance: every line alone, in batches of mixed lengths and streamed give identical output" {
    $DEC --beam 1 --scores -i "$D/src.en" > "$D/all.txt"
    $DEC --beam 1 --scores --max-tokens 40 -i "$D/src.en" > "$D/small.txt"
    cmp "$D/all.txt" "$D/small.txt"
    for k in 1 3; do
        $DEC --beam 1 --scores --max-sentences $k -i "$D/src.en" > "$D/k.txt"
        cmp "$D/all.txt" "$D/k.txt"
    done
    : > "$D/alone.txt"
    while IFS= read -r line; do
        printf '%s\n' "$line" > "$D/one.en"
        $DEC --beam 1 --scores -i "$D/one.en" >> "$D/alone.txt"
    done < "$D/src.en"
    cmp "$D/all.txt" "$D/alone.txt"
    # streaming (stdin is a pipe): one sentence at a time
    cat "$D/src.en" | $DEC --beam 1 --scores > "$D/pipe.txt"
    cmp "$D/all.txt" "$D/pipe.txt"
    # the same for beam 4 with n-best lists, shuffled order of the input
    $DEC --beam 4 --nbest 4 -i "$D/src.en" > "$D/b_all.txt"
    $DEC --beam 4 --nbest 4 --max-tokens 25 -i "$D/src.en" > "$D/b_small.txt"
    cmp "$D/b_all.txt" "$D/b_small.txt"
    $DEC --beam 4 --nbest 4 --max-sentences 2 -i "$D/src.en" > "$D/b_k.txt"
    cmp "$D/b_all.txt" "$D/b_k.txt"
    tac "$D/src.en" > "$D/rev.en"
    $DEC --beam 4 --nbest 4 -i "$D/rev.en" | awk -F'\t' -v n=24 'BEGIN{OFS="\t"} {$1 = n + 1 - $1; print}' |
        sort -t$'\t' -k1,1n -s > "$D/b_rev.txt"
    sort -t$'\t' -k1,1n -s "$D/b_all.txt" | same_as "$D/b_rev.txt"
}

@test "the search takes sentences into the batch under way as others end: the bytes of --static-batches" {
    zcat "$NMT_SRCDIR/data/multi30k/test_2016_flickr.en.gz" | sed -n 1,100p > "$D/s100.en"
    sed -i '5i\\' "$D/s100.en" # an empty line: no model call
    M="nmt-decode -m $D/m.ckpt --threads 2"
    # sentences that end by themselves and at their length limit, one job or two, windows of 1 to 101;
    # greedy and beam search, n-best lists, an ensemble
    for opts in "--max-len-b 8 --scores" "--word-scores" "--out hyp" "--jobs 1 --max-sentences 3" \
                "--jobs 2 --max-sentences 1" "--max-sentences 1000" "--precision int8" "--precision int8-a8-all" \
                "--precision int8-a7-all" "-m $D/m2.ckpt --scores" "--beam 4 --scores" "--beam 3 --nbest 3 --jobs 1" \
                "--beam 2 --max-sentences 5 --word-scores" "--beam 4 -m $D/m2.ckpt --precision int8"; do
        $M $opts --static-batches -i "$D/s100.en" > "$D/static.out"
        $M $opts -i "$D/s100.en" | same_as "$D/static.out" || { echo "$opts: differs"; return 1; }
    done
    $M -i "$D/s100.en" > "$D/stream.out"
    [ "$(wc -l < "$D/stream.out")" -eq 101 ]
    [ -z "$(sed -n 5p "$D/stream.out")" ]
    # the stream says so with --verbose; --alignment decodes batches to their end
    $M --verbose -i "$D/s100.en" 2> "$D/st.err" > /dev/null
    grep -qx 'nmt-decode: sentences join the batch under way as others end, at most 16 at once in each job' "$D/st.err"
    # --max-tokens bounds the window by the longest source: 200 tokens hold fewer than 16 sentences of it
    $M --verbose --max-tokens 200 -i "$D/s100.en" 2> "$D/st.err" > /dev/null
    w=$(sed -n 's/.*as others end, at most \([0-9]*\) at once in each job$/\1/p' "$D/st.err")
    [ "$w" -ge 1 ] || { cat "$D/st.err"; return 1; }
    [ "$w" -lt 16 ]
    $M --verbose --beam 2 --alignment hard -i "$D/s100.en" 2> "$D/b.err" > /dev/null
    fails grep -q 'join the batch' "$D/b.err"
    $M --verbose --static-batches -i "$D/s100.en" 2> "$D/b.err" > /dev/null
    fails grep -q 'join the batch' "$D/b.err"
}

@test "--verbose: on the cpu batches of at most 16 sentences unless --max-sentences says; same output" {
    zcat "$NMT_SRCDIR/data/multi30k/test_2016_flickr.en.gz" | sed -n 1,100p > "$D/s100.en"
    $DEC --threads 1 --verbose -i "$D/s100.en" > "$D/v32.txt" 2> "$D/v32.err"
    grep -qx 'nmt-decode: 100 sentences in 7 batches of at most 16 sentences and 4096 source tokens; 1 job(s), 1 thread(s) in all, backend cpu' "$D/v32.err"
    $DEC --threads 1 --verbose --max-sentences 1000 --max-tokens 100000 -i "$D/s100.en" > "$D/v1.txt" 2> "$D/v1.err"
    grep -qx 'nmt-decode: 100 sentences in 1 batches of at most 1000 sentences and 100000 source tokens; 1 job(s), 1 thread(s) in all, backend cpu' "$D/v1.err"
    cmp "$D/v32.txt" "$D/v1.txt"
    # without --verbose nothing on stderr
    $DEC --threads 1 -q -i "$D/s100.en" > "$D/vq.txt" 2> "$D/vq.err"
    [ ! -s "$D/vq.err" ]
    cmp "$D/v32.txt" "$D/vq.txt"
}

@test "--verbose: larger batches on the cpu for a model whose decoder step reads over 32 MiB of weights; each job's window" {
    # d 512, ff 1024, 4 decoder layers: 4 x (6 x 512^2 + 2 x 512 x 1024) weights = 42 MB in float32,
    # 10.5 MB in int8 (the 500-piece output projection adds 1 MB in float32)
    nmt-train --vocab "$D/v.vocab" -i "$D/p.batches" -o "$D/wide.ckpt" --enc-layers 1 --dec-layers 4 --d-model 512 \
        --heads 4 --ff 1024 --max-steps 1 -q --threads 2
    head -3 "$D/src.en" > "$D/s3.en"
    want() { # BEAM PRECISION SENTENCES (one output piece: the batching is chosen before the search)
        nmt-decode -m "$D/wide.ckpt" --threads 1 --verbose --beam "$1" --precision "$2" --max-len-a 0 --max-len-b 1 \
            -i "$D/s3.en" > /dev/null 2> "$D/w.err"
        grep -q "batches of at most $3 sentences" "$D/w.err" || { echo "beam $1 $2: want $3"; cat "$D/w.err"; return 1; }
    }
    want 1 float32 64
    want 4 float32 32
    want 16 float32 16
    want 1 int8-all 16
    want 4 int8-all 16
    # sentences joining the batch under way: each of several jobs keeps half as many under way by
    # default, 16 at least; --max-sentences is each job's
    awk 'BEGIN { for (i = 0; i < 100; i++) print "a" }' > "$D/a100.en" # short: the encoder costs little
    window() { # THREADS WINDOW-LINE-END OPTIONS...
        local t=$1 end=$2
        shift 2
        nmt-decode -m "$D/wide.ckpt" --threads "$t" --verbose --max-len-a 0 --max-len-b 1 --max-tokens 100000 "$@" \
            -i "$D/a100.en" > /dev/null 2> "$D/w.err"
        grep -qx "nmt-decode: sentences join the batch under way as others end, at most $end" "$D/w.err" ||
            { echo "$t threads $*: want $end"; cat "$D/w.err"; return 1; }
    }
    window 1 "64 at once"
    window 2 "32 at once in each job"
    window 2 "16 at once in each job" --beam 4
    window 2 "16 at once in each job" --beam 16
    window 2 "64 at once in each job" --max-sentences 64
    window 2 "16 at once in each job" --precision int8-all
}

@test "greedy equals beam 1; beam 4 scores never below greedy's" {
    $DEC --scores -i "$D/src.en" > "$D/g.txt"
    $DEC --beam 1 --alpha 0.6 --scores -i "$D/src.en" > "$D/b1.txt"
    cmp "$D/g.txt" "$D/b1.txt"
    $DEC --beam 4 --scores -i "$D/src.en" > "$D/b4.txt"
    paste <(cut -f1 "$D/g.txt") <(cut -f1 "$D/b4.txt") | awk -F'\t' '$2 + 1e-6 < $1 { print "line " NR ": " $0; bad = 1 } END { exit bad }'
}

@test "greedy without scores ranks by the logits alone: the translations printed with --scores, --word-scores and --out hyp" {
    # the trained model of tests/fixtures/ref: a translation of its own for each sentence
    local M="$NMT_SRCDIR/tests/fixtures/ref/decode/model.ckpt"
    zcat "$NMT_SRCDIR/data/multi30k/test_2016_flickr.en.gz" | sed -n 1,300p > "$D/t300.en"
    nmt-decode -m "$M" --threads 2 -i "$D/t300.en" > "$D/plain.txt"
    [ "$(sort -u "$D/plain.txt" | wc -l)" -gt 250 ]
    nmt-decode -m "$M" --threads 2 --scores -i "$D/t300.en" | cut -f2- > "$D/scored.txt"
    cmp "$D/plain.txt" "$D/scored.txt"
    nmt-decode -m "$M" --threads 2 --word-scores -i "$D/t300.en" | cut -f1 > "$D/ws.txt"
    cmp "$D/plain.txt" "$D/ws.txt"
    # the briefly trained model of setup_file, with its many near ties; hyp records carry scores
    $DEC -i "$D/t300.en" > "$D/plain2.txt"
    $DEC --scores -i "$D/t300.en" | cut -f2- > "$D/scored2.txt"
    cmp "$D/plain2.txt" "$D/scored2.txt"
    $DEC --out hyp -i "$D/t300.en" -o "$D/h.hyp"
    nmt-tokenize --vocab "$D/v.vocab" --decode -i "$D/h.hyp" > "$D/hyp.txt"
    cmp "$D/plain2.txt" "$D/hyp.txt"
}

@test "--nbest: TSV of line, rank, score, text, sorted by score" {
    run $DEC --beam 3 --nbest 3 -i "$D/src.en"
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq $((23 * 3 + 1)) ]
    awk -F'\t' 'NF != 4 || $2 < 1 || $2 > 3 { print "bad row " NR; exit 1 }
                $1 == l && $3 > s + 1e-9 { print "unsorted at " NR; exit 1 } { l = $1; s = $3 }' <<< "$output"
    [[ "${lines[0]}" == 1$'\t'1$'\t'* ]]
    # rank 1 text equals the plain beam 3 output
    diff <(awk -F'\t' '$2 == 1' <<< "$output" | cut -f4) <($DEC --beam 3 -i "$D/src.en")
}

@test "--score: log-probabilities of pairs, TSV and --src/--tgt agree; forced decoding of the greedy output gives its score" {
    paste "$D/src.en" "$D/ref.de" > "$D/pairs.tsv"
    run $DEC --score -i "$D/pairs.tsv"
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 24 ]
    awk '$1 > 0 || $1 !~ /^-?[0-9]+\.[0-9]+$/ { print "bad " NR ": " $0; exit 1 }' <<< "$output"
    diff <(printf '%s\n' "${lines[@]}") <($DEC --score --src "$D/src.en" --tgt "$D/ref.de")
    # alone vs batched
    head -3 "$D/pairs.tsv" | tail -1 > "$D/p3.tsv"
    [ "$($DEC --score -i "$D/p3.tsv")" = "${lines[2]}" ]
    # a better-fitting target scores higher than a shuffled one
    paste <(head -2 "$D/tr.en") <(head -2 "$D/tr.de") > "$D/good.tsv"
    paste <(head -2 "$D/tr.en") <(head -2 "$D/tr.de" | rev) > "$D/badt.tsv"
    paste <($DEC --score -i "$D/good.tsv") <($DEC --score -i "$D/badt.tsv") |
        awk '!($1 > $2) { bad = 1 } END { exit bad }'
}

@test "--score: a line without a tab, and unequal --src/--tgt files" {
    printf 'no tab here\n' > "$D/notab.tsv"
    run $DEC --score -i "$D/notab.tsv"
    [ "$status" -eq 1 ]
    [ "${lines[0]}" = "nmt-decode: $D/notab.tsv: line 1: expected 'SOURCE<TAB>TARGET'" ]
    head -3 "$D/ref.de" > "$D/ref3.de"
    run $DEC --score --src "$D/src.en" --tgt "$D/ref3.de"
    [ "$status" -eq 1 ]
    [ "${lines[0]}" = "nmt-decode: $D/src.en: line 4: no matching line in '$D/ref3.de', which has 3 lines" ]
}

@test "--in ids and --out hyp streams give the same translations as text" {
    nmt-tokenize --vocab "$D/v.vocab" -i "$D/src.en" > "$D/src.ids"
    $DEC --in ids -i "$D/src.ids" > "$D/from_ids.txt"
    $DEC -i "$D/src.en" > "$D/from_text.txt"
    cmp "$D/from_ids.txt" "$D/from_text.txt"
    $DEC --out hyp -i "$D/src.en" -o "$D/out.hyp"
    nmt-tokenize --vocab "$D/v.vocab" --decode -i "$D/out.hyp" > "$D/hyp.txt"
    cmp "$D/hyp.txt" "$D/from_text.txt"
}

@test "--interactive flushes each translation before the next line arrives" {
    coproc DECP { $DEC --interactive; }
    pid=$DECP_PID # bash unsets DECP_PID once the coprocess has ended
    echo "A man sleeps." >&"${DECP[1]}"
    read -t 20 -r first <&"${DECP[0]}"
    echo "Two dogs." >&"${DECP[1]}"
    read -t 20 -r second <&"${DECP[0]}"
    exec {DECP[1]}>&-
    wait "$pid"
    [ -n "$first" ]
    [ -n "$second" ]
    [ "$first" = "$(echo 'A man sleeps.' | $DEC)" ]
}

@test "--max-len-a/--max-len-b bound the output length" {
    out=$($DEC --max-len-a 0 --max-len-b 1 -i "$D/src.en")
    [ -z "$(tr -d '\n' <<< "$out")" ]
    $DEC --max-len-a 0 --max-len-b 3 --in ids --out hyp -i <(nmt-tokenize --vocab "$D/v.vocab" -i "$D/src.en") \
        -o "$D/short.hyp"
    # hyp records: index, rank, score, ids (at most 2 before EOS), one per sentence
    nmt-cat "$D/short.hyp" > "$D/short.txt"
    [ "$(wc -l < "$D/short.txt")" -eq 24 ]
    awk -F'\t' '{ n = split($4, ids, " "); if (n > 2) { print "line " NR " has " n " ids"; exit 1 } }' "$D/short.txt"
}

@test "a line longer than the model's limit is translated with a warning naming it" {
    python3 -c 'print("a b " * 700)' > "$D/long.en"
    cat "$D/src.en" "$D/long.en" > "$D/withlong.en"
    run $DEC -i "$D/withlong.en"
    [ "$status" -eq 0 ]
    [[ "$output" == *"nmt-decode: warning: line 25: source of "*" tokens exceeds the model's limit of 1023; using the first 1023"* ]] ||
        { head -3 <<< "$output"; return 1; }
    run $DEC -q -i "$D/withlong.en"
    [ "$status" -eq 0 ]
    [[ "$output" != *warning* ]]
    [ "$(printf "%s\n" "$output" | wc -l)" -eq 25 ]   # still every translation
}

@test "invalid UTF-8 names the line" {
    printf 'good line\nbad \xff byte\n' > "$D/bad.en"
    run $DEC -i "$D/bad.en"
    [ "$status" -eq 1 ]
    [ "${lines[0]}" = "nmt-decode: $D/bad.en: line 2: invalid UTF-8 at byte 5" ]
}

@test "bad checkpoints: missing, not a checkpoint, truncated, no vocabulary" {
    run $DEC -m "$D/none.ckpt" -i "$D/src.en"
    [ "$status" -eq 1 ]
    [[ "${lines[-1]}" == "nmt-decode: cannot read checkpoint: "*"none.ckpt"* ]]
    run $DEC -m "$D/src.en" -i "$D/src.en"
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ "${lines[0]}" == "nmt-decode: cannot read checkpoint: "* ]]
    head -c 100000 "$D/m.ckpt" > "$D/trunc.ckpt"
    run $DEC -m "$D/trunc.ckpt" -i "$D/src.en"
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ "${lines[0]}" == "nmt-decode: cannot read checkpoint: "* ]]
    run $DEC -i "$D/missing.en"
    [ "$status" -eq 1 ]
    [[ "${lines[0]}" == "nmt-decode: cannot open"*"missing.en"* ]]
}

@test "--backend: an unknown backend is a clear error" {
    run $DEC --backend nosuch -i "$D/src.en"
    [ "$status" -eq 1 ]
    [[ "${lines[0]}" == "nmt-decode: "*nosuch* ]]
}

@test "--threads does not change greedy output here" {
    $DEC --threads 1 -i "$D/src.en" > "$D/t1.txt"
    $DEC --threads 2 -i "$D/src.en" > "$D/t2.txt"
    [ "$(wc -l < "$D/t1.txt")" -eq 24 ]
    diff "$D/t1.txt" "$D/t2.txt"
}

@test "--jobs: batches decoded at once, on several copies of the model, give the same output" {
    # 24 lines in batches of at most 40 source tokens: about ten batches, shared by the jobs
    for mode in "--beam 1 --scores" "--beam 4 --nbest 4" "--beam 3 --scores --alpha 1"; do
        $DEC $mode --max-tokens 40 --jobs 1 -i "$D/src.en" > "$D/j1.txt"
        [ "$(wc -l < "$D/j1.txt")" -ge 24 ]
        for j in 2 3 7; do
            $DEC $mode --max-tokens 40 --jobs $j -i "$D/src.en" > "$D/jn.txt"
            cmp "$D/j1.txt" "$D/jn.txt" || { echo "$mode --jobs $j differs"; return 1; }
        done
        # more jobs than batches, and more jobs than threads
        $DEC $mode --jobs 4 -i "$D/src.en" | same_as "$D/j1.txt"
        $DEC $mode --max-tokens 40 --jobs 4 --threads 1 -i "$D/src.en" | same_as "$D/j1.txt"
    done
    # hyp streams and forced-decoding scores
    nmt-tokenize --vocab "$D/v.vocab" < "$D/src.en" > "$D/src.ids"
    $DEC --in ids --out hyp --max-tokens 40 --jobs 1 -i "$D/src.ids" | nmt-cat > "$D/h1.txt"
    $DEC --in ids --out hyp --max-tokens 40 --jobs 3 -i "$D/src.ids" | nmt-cat > "$D/h3.txt"
    [ -s "$D/h1.txt" ]
    cmp "$D/h1.txt" "$D/h3.txt"
    $DEC -i "$D/src.en" > "$D/hyp.de"
    paste "$D/src.en" "$D/hyp.de" > "$D/pairs.tsv"
    $DEC --score --max-tokens 40 --jobs 1 -i "$D/pairs.tsv" > "$D/s1.txt"
    $DEC --score --max-tokens 40 --jobs 3 -i "$D/pairs.tsv" | same_as "$D/s1.txt"
}

@test "--precision: a value other than float32, int8, int8-all, int8-a8, int8-a8-all, int8-a7, int8-a7-all, bf16 or bf16-all is a usage error naming it" {
    run $DEC --precision fp16 -i "$D/src.en"
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-decode: invalid precision 'fp16' (float32, int8, int8-all, int8-a8, int8-a8-all, int8-a7, int8-a7-all, bf16 or bf16-all)" ]
}

@test "memory: the weights once, whatever the precision and --jobs (no optimizer state read, no float32 copy of packed layers, no second model, the file given back by a lone job)" {
    [[ "$NMT_BIN" != */san/bin ]] || skip "ASan holds freed memory in quarantine: the plain build measures"
    # 7.6 M parameters: 30 MB of weights (W; every layer's 1 MiB or more), twice that again of Adam
    # moments in the training checkpoint; the decoding buffers at these sizes are a few MB
    nmt-train --vocab "$D/v.vocab" -i "$D/p.batches" -o "$D/big.ckpt" --layers 1 --d-model 512 --heads 8 --ff 2048 \
        --max-steps 1 -q --threads 2
    nmt-avg -o "$D/big.avg.ckpt" "$D/big.ckpt"
    W=$(($(stat -c %s "$D/big.avg.ckpt") / 1024))
    peak() { # peak RSS in KB of nmt-decode with the given options, -1 if it failed
        python3 -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if r.returncode == 0 else -1)' \
            nmt-decode --threads 2 --max-tokens 40 --max-len-b 8 -i "$D/src.en" "$@"
    }
    for p in float32 int8; do
        base=$(peak -m "$D/m.ckpt" --jobs 1 --precision $p) # a 0.5 M-parameter model
        one=$(peak -m "$D/big.ckpt" --jobs 1 --precision $p)
        two=$(peak -m "$D/big.ckpt" --jobs 2 --precision $p)
        avg=$(peak -m "$D/big.avg.ckpt" --jobs 1 --precision $p)
        solo1=$(peak -m "$D/big.avg.ckpt" --jobs 1 --precision $p --max-tokens 100000 --max-sentences 100) # one batch
        solo=$(peak -m "$D/big.avg.ckpt" --jobs 2 --precision $p --max-tokens 100000 --max-sentences 100)  # so one job of two
        echo "$p: W $W KB; peak RSS: small model $base KB, --jobs 1 $one KB, --jobs 2 $two KB, without the optimizer state $avg KB, one batch with --jobs 1 $solo1 KB, --jobs 2 $solo KB"
        [ "$base" -gt 0 ]
        [ "$one" -gt 0 ]
        [ "$two" -gt 0 ]
        [ "$avg" -gt 0 ]
        [ "$solo1" -gt 0 ]
        [ "$solo" -gt 0 ]
        # one job of two: it reads the file last and gives each part back as it is loaded
        [ $((solo - solo1)) -lt $((W / 4)) ]
        # the file's moments (2 W) are not read; the file's copy of the weights is given back as they
        # are loaded, and their float32 copies as they are packed: the model adds about W, not 2-4 W
        [ $((one - base)) -lt $((W * 3 / 2)) ]
        [ $((avg - base)) -lt $((W * 3 / 2)) ]
        [ $((two - one)) -lt 16000 ] # a copy per job would add the weights and their packed copy
    done
}

@test "--precision int8, int8-all, int8-a8-all and int8-a7-all: the same bytes in batches of 1, 7 and 64 sentences, and with --jobs 1 or 2" {
    zcat "$NMT_SRCDIR/data/multi30k/test_2016_flickr.en.gz" | sed -n 101,164p > "$D/s64.en"
    for mode in "--precision int8 --beam 1 --scores" "--precision int8 --beam 4 --scores" \
                "--precision int8-all --beam 1 --scores" "--precision int8-all --beam 4 --scores" \
                "--precision int8-a8-all --beam 4 --scores" "--precision int8-a7-all --beam 4 --scores"; do
        Q="$DEC $mode --jobs 1"
        $Q -i "$D/s64.en" > "$D/q64.txt"                      # one batch of 64 sentences
        [ "$(wc -l < "$D/q64.txt")" -eq 64 ]
        $Q --max-tokens 1 -i "$D/s64.en" | same_as "$D/q64.txt"  # every sentence alone
        rm -f "$D"/q7.*
        split -l 7 "$D/s64.en" "$D/q7."                       # batches of 7 sentences
        for f in "$D"/q7.*; do $Q -i "$f"; done | same_as "$D/q64.txt"
        $DEC $mode --jobs 2 --max-tokens 60 -i "$D/s64.en" | same_as "$D/q64.txt"
        $DEC $mode --jobs 2 --threads 1 -i "$D/s64.en" | same_as "$D/q64.txt"
        # and --batch-variant changes nothing in int8: its layers are row-invariant anyway
        $Q --batch-variant --max-tokens 60 -i "$D/s64.en" | same_as "$D/q64.txt"
    done
}

@test "--precision int8, int8-all, int8-a8, int8-a8-all, int8-a7 and int8-a7-all translate close to float32: most lines the same, scores near" {
    zcat "$NMT_SRCDIR/data/multi30k/test_2016_flickr.en.gz" | sed -n 101,164p > "$D/s64.en"
    $DEC -i "$D/s64.en" > "$D/f32.txt"
    paste "$D/s64.en" "$D/f32.txt" > "$D/fp.tsv"
    $DEC --score -i "$D/fp.tsv" > "$D/f32.lp"
    # precision: the fewest identical greedy lines of 64, the largest relative (or absolute) change of
    # a forced decoding's log-probability (8-bit activations are further from float32 than 12-bit ones,
    # 7-bit ones further still)
    for case in int8:56:0.02 int8-all:56:0.02 int8-a8:52:0.04 int8-a8-all:52:0.04 int8-a7:52:0.04 int8-a7-all:52:0.04; do
        IFS=: read -r p least tol <<< "$case"
        $DEC --precision $p -i "$D/s64.en" > "$D/i8.txt"
        same=$(paste -d '\t' "$D/f32.txt" "$D/i8.txt" | awk -F'\t' '$1 == $2' | wc -l)
        echo "$p: identical greedy translations: $same of 64"
        [ "$same" -ge "$least" ]
        # forced decoding of the float32 output: the int8 log-probabilities differ (the int8 layers ran)
        $DEC --precision $p --score -i "$D/fp.tsv" > "$D/$p.lp"
        [ "$(wc -l < "$D/$p.lp")" -eq 64 ]
        fails cmp -s "$D/f32.lp" "$D/$p.lp"
        paste "$D/f32.lp" "$D/$p.lp" | awk -v tol="$tol" '{ d = $1 - $2; d = d < 0 ? -d : d; m = $1 < 0 ? -$1 : $1
            if (d > tol && d > tol * m) { print "line " NR ": " $0; bad = 1 } } END { exit bad }'
    done
    # the output projection in int8 moves the scores further; so do 8-bit activations
    fails same_as "$D/int8.lp" < "$D/int8-all.lp"
    fails same_as "$D/int8.lp" < "$D/int8-a8.lp"
    fails same_as "$D/int8-a8.lp" < "$D/int8-a7.lp"
}

@test "--precision int8, int8-all, int8-a8, int8-a8-all, int8-a7, int8-a7-all: NMT_CPU_ISA=avx512vnni and avx512 give the same bytes as the default path, avx2 and portable the same translations" {
    zcat "$NMT_SRCDIR/data/multi30k/test_2016_flickr.en.gz" | sed -n 101,164p > "$D/s64.en"
    for mode in "--precision int8 --beam 1" "--precision int8 --beam 4" "--precision int8-all --beam 1" \
                "--precision int8-a8 --beam 1" "--precision int8-a8-all --beam 4" "--precision int8-a7 --beam 1" \
                "--precision int8-a7-all --beam 4"; do
        $DEC $mode --scores -i "$D/s64.en" > "$D/isa.txt"
        [ "$(wc -l < "$D/isa.txt")" -eq 64 ]
        # on a CPU with AMX the default runs the tile kernel, avx512vnni the vpdpwssd kernel, avx512
        # the AVX2 int8 kernel, all with the same float32 kernels around them: scores and all
        for isa in avx512vnni avx512; do
            NMT_CPU_ISA=$isa $DEC $mode --scores -i "$D/s64.en" | same_as "$D/isa.txt" ||
                { echo "$mode, NMT_CPU_ISA=$isa differs"; return 1; }
        done
        # below AVX-512 the float32 attention and top-k round otherwise in the last bits (as in
        # float32 decoding), so the scores may differ there; the int8 layers give the same bits
        for isa in avx2 portable; do
            NMT_CPU_ISA=$isa $DEC $mode -i "$D/s64.en" | same_as <(cut -f2- "$D/isa.txt") ||
                { echo "$mode, NMT_CPU_ISA=$isa differs"; return 1; }
        done
    done
}

@test "--precision bf16, bf16-all (on AVX512-BF16): the same bytes in batches of 1, 7 and 64 sentences and with --jobs 2; close to float32" {
    [[ " $(grep -m1 '^flags' /proc/cpuinfo) " == *" avx512_bf16 "* ]] || skip "this CPU lacks AVX512-BF16"
    zcat "$NMT_SRCDIR/data/multi30k/test_2016_flickr.en.gz" | sed -n 101,164p > "$D/s64.en"
    $DEC -i "$D/s64.en" > "$D/f32.txt"
    for p in bf16 bf16-all; do
        for mode in "--beam 1 --scores" "--beam 4 --scores"; do
            Q="$DEC --precision $p $mode --jobs 1"
            $Q -i "$D/s64.en" > "$D/b64.txt"
            [ "$(wc -l < "$D/b64.txt")" -eq 64 ]
            $Q --max-tokens 1 -i "$D/s64.en" | same_as "$D/b64.txt"
            rm -f "$D"/b7.*
            split -l 7 "$D/s64.en" "$D/b7."
            for f in "$D"/b7.*; do $Q -i "$f"; done | same_as "$D/b64.txt"
            $DEC --precision $p $mode --jobs 2 --max-tokens 60 -i "$D/s64.en" | same_as "$D/b64.txt"
        done
        $DEC --precision $p -i "$D/s64.en" > "$D/b.txt"
        same=$(paste -d '\t' "$D/f32.txt" "$D/b.txt" | awk -F'\t' '$1 == $2' | wc -l)
        echo "$p: identical greedy translations: $same of 64"
        [ "$same" -ge 56 ]
    done
}

@test "--precision int8, int8-all, int8-a8-all on an AMX CPU (the tile path, here on the tile emulation): the same bytes as the default path" {
    # the cpu plugin built with the tile instructions emulated (plugins/cpu/amx.h), which takes its
    # AMX path on this CPU: nmt-decode through linear_q.c's AMX driver and linear_q_amx.c's kernel
    need_amxemu
    E=$AMXEMU
    run nmt-backends --backend "$E" --threads 1
    [ "$status" -eq 0 ]
    grep -q '^device.*, amx, ' <<< "$output"
    # 16 sentences: the emulation is slow (under ASan a few seconds a run)
    zcat "$NMT_SRCDIR/data/multi30k/test_2016_flickr.en.gz" | sed -n 101,116p > "$D/s16.en"
    for mode in "--precision int8 --beam 4" "--precision int8-all --beam 1" "--precision int8-a8-all --beam 4"; do
        $DEC $mode --scores -i "$D/s16.en" > "$D/vnni.txt"
        [ "$(wc -l < "$D/vnni.txt")" -eq 16 ]
        $DEC --backend "$E" $mode --scores -i "$D/s16.en" | same_as "$D/vnni.txt" || { echo "$mode differs"; return 1; }
        $DEC --backend "$E" $mode --scores --jobs 2 --max-tokens 30 -i "$D/s16.en" | same_as "$D/vnni.txt" ||
            { echo "$mode, --jobs 2 differs"; return 1; }
    done
}

@test "NMT_CPU_ISA naming no path: exit 1 naming the value and the paths" {
    NMT_CPU_ISA=avx513 run $DEC -i "$D/src.en"
    [ "$status" -eq 1 ]
    [[ "${lines[0]}" == "nmt-decode: cannot open backend 'cpu' ("*"/nmt-backend-cpu.so): NMT_CPU_ISA='avx513' is not one of portable, avx2, avx512, avx512vnni, amx" ]]
}

@test "--precision bf16 where the CPU cannot: exit 1 naming the backend and the reason" {
    NMT_CPU_ISA=avx2 run $DEC --precision bf16 -i "$D/src.en"
    [ "$status" -eq 1 ]
    [ "${lines[0]}" = "nmt-decode: backend cpu cannot compute linear layers in bf16 here: bf16 needs AVX512-BF16, which this CPU lacks or NMT_CPU_ISA turns off" ]
}

@test "--batch-variant translates too" {
    [ "$($DEC --batch-variant -i "$D/src.en" | wc -l)" -eq 24 ]
}

@test "ensemble: -m twice; a model with itself translates as alone" {
    for mode in "--beam 1" "--beam 4"; do
        $DEC $mode -i "$D/src.en" > "$D/e1.txt"
        $DEC -m "$D/m.ckpt" $mode -i "$D/src.en" > "$D/e2.txt"
        cmp "$D/e1.txt" "$D/e2.txt" || { echo "$mode: differs"; return 1; }
    done
    # scores equal to rounding (the ensemble's softmax is taken apart from the backend's)
    $DEC --beam 4 --scores -i "$D/src.en" > "$D/e1.txt"
    $DEC -m "$D/m.ckpt" --beam 4 --scores -i "$D/src.en" > "$D/e2.txt"
    cmp <(cut -f2 "$D/e1.txt") <(cut -f2 "$D/e2.txt")
    paste <(cut -f1 "$D/e1.txt") <(cut -f1 "$D/e2.txt") | awk '{ d = $1 - $2; if (d < -1e-4 || d > 1e-4) bad = 1 }
        END { exit bad }'
}

@test "ensemble of two models: mean of their probabilities, batch invariant, any number of jobs" {
    ENS="$DEC -m $D/m2.ckpt"
    # the probability of an empty target (EOS alone) is the mean of the members'
    cut -c1-60 "$D/src.en" | sed '7d; s/$/\t/' > "$D/eos.tsv"
    $DEC --score -i "$D/eos.tsv" > "$D/a.lp"
    nmt-decode -m "$D/m2.ckpt" --threads 2 --score -i "$D/eos.tsv" > "$D/b.lp"
    $ENS --score -i "$D/eos.tsv" > "$D/ab.lp"
    [ "$(wc -l < "$D/ab.lp")" -eq 23 ]
    paste "$D/a.lp" "$D/b.lp" "$D/ab.lp" | awk -F'\t' '{ m = log((exp($1) + exp($2)) / 2); d = m - $3;
        if (d < -1e-4 || d > 1e-4) { print "line " NR ": " $1 " " $2 " -> " $3 " (want " m ")"; bad = 1 } }
        END { exit bad }'
    # the ensemble translates otherwise than either member, the same alone, in batches and with jobs
    $ENS --beam 4 --scores -i "$D/src.en" > "$D/ens.txt"
    fails cmp -s "$D/ens.txt" <($DEC --beam 4 --scores -i "$D/src.en")
    $ENS --beam 4 --scores --max-tokens 40 --jobs 3 -i "$D/src.en" | same_as "$D/ens.txt"
    $ENS --beam 4 --scores --max-tokens 40 --jobs 1 -i "$D/src.en" | same_as "$D/ens.txt"
    cat "$D/src.en" | $ENS --beam 4 --scores | same_as "$D/ens.txt"
}

@test "ensemble: models of different vocabularies are refused, naming the file" {
    run $DEC -m "$D/m3.ckpt" -i "$D/src.en"
    [ "$status" -eq 1 ]
    [[ "$output" == *"m3.ckpt': vocabulary "*" differs from the first model's"* ]]
    run $DEC -m "$D/missing.ckpt" -i "$D/src.en"
    [ "$status" -eq 1 ]
    [[ "$output" == *"missing.ckpt"* ]]
}

@test "--word-scores: after a tab, one log-probability per output piece and the EOS; they sum to the score before the length penalty" {
    $DEC --alpha 0 --scores --word-scores -i "$D/src.en" > "$D/ws0.txt"
    [ "$(wc -l < "$D/ws0.txt")" -eq 24 ]
    # --alpha 0: the score is the log-probability; line 7 (empty) has no numbers
    awk -F'\t' 'NF != 3 { print "line " NR ": " NF " fields"; bad = 1 }
        { n = split($3, w, " "); s = 0; for (i = 1; i <= n; i++) { if (w[i] > 0) bad = 1; s += w[i] }
          if (NR == 7 ? n != 0 : n < 1) { print "line " NR ": " n " numbers"; bad = 1 }
          d = s - $1; if (d < -1e-4 || d > 1e-4) { print "line " NR ": sum " s ", score " $1; bad = 1 } }
        END { exit bad }' "$D/ws0.txt"
    # one number per piece of the translation (its hyp record's ids) and one for the EOS
    $DEC --out hyp -i "$D/src.en" -o "$D/ws.hyp"
    nmt-cat "$D/ws.hyp" | awk -F'\t' '{ print split($4, x, " ") }' > "$D/ws.nids"
    awk -F'\t' '{ print NR == 7 ? 0 : split($3, w, " ") - 1 }' "$D/ws0.txt" | same_as "$D/ws.nids"
    # beam 4 n-best rows: the score is the sum over ((5 + n) / 6)^0.6, n counting the EOS
    $DEC --beam 4 --nbest 4 --word-scores -i "$D/src.en" > "$D/wsn.txt"
    awk -F'\t' 'NF != 5 { bad = 1 } { n = split($5, w, " "); s = 0; for (i = 1; i <= n; i++) s += w[i]
        d = s / ((5 + n) / 6) ^ 0.6 - $3; if (d < -1e-4 || d > 1e-4) { print NR ": " $0; bad = 1 } }
        END { exit bad }' "$D/wsn.txt"
    # the other columns are those printed without --word-scores
    cmp <(cut -f1-2 "$D/ws0.txt") <($DEC --alpha 0 --scores -i "$D/src.en")
    cmp <(cut -f1-4 "$D/wsn.txt") <($DEC --beam 4 --nbest 4 -i "$D/src.en")
    cmp <(cut -f2- "$D/ws0.txt") <($DEC --alpha 0 --word-scores -i "$D/src.en")
}

@test "--sample: seeded, the same bytes in batches of 1, 7 and 64 sentences, with --jobs 2, streamed and sharded" {
    zcat "$NMT_SRCDIR/data/multi30k/test_2016_flickr.en.gz" | sed -n 101,164p > "$D/s64.en"
    for mode in "--sample --scores --word-scores" "--sample --top-k 5 --top-p 0.9 --temperature 0.7 --seed 12 --sample-beam 3"; do
        S="$DEC $mode --jobs 1"
        $S -i "$D/s64.en" > "$D/sm64.txt"
        [ "$(wc -l < "$D/sm64.txt")" -ge 64 ]
        $S --max-sentences 1 -i "$D/s64.en" | same_as "$D/sm64.txt" || { echo "$mode: batches of 1 differ"; return 1; }
        $S --max-sentences 7 -i "$D/s64.en" | same_as "$D/sm64.txt" || { echo "$mode: batches of 7 differ"; return 1; }
        $DEC $mode --jobs 2 --max-sentences 5 -i "$D/s64.en" | same_as "$D/sm64.txt" || { echo "$mode: --jobs 2"; return 1; }
        $S -i "$D/s64.en" | same_as "$D/sm64.txt" # and again
    done
    # one line at a time from a pipe: a line's samples depend on its line number, not its batch
    $DEC --sample --scores -i "$D/src.en" > "$D/sm.txt"
    cat "$D/src.en" | $DEC --sample --scores | same_as "$D/sm.txt"
    # --shard 2/3 writes lines 2, 5, 8, ... as the whole run does
    $DEC --sample --scores --shard 2/3 -i "$D/src.en" | same_as <(sed -n '2~3p' "$D/sm.txt")
    # another seed, other samples; sampling differs from greedy
    $DEC --sample --seed 2 --scores -i "$D/src.en" | fails same_as "$D/sm.txt"
    $DEC --scores -i "$D/src.en" | fails same_as "$D/sm.txt"
}

@test "--sample: --temperature 0 and --top-k 1 give the greedy translations; --sample-beam N gives N rows, the first that of N = 1" {
    $DEC -i "$D/src.en" > "$D/greedy.txt"
    $DEC --sample --temperature 0 -i "$D/src.en" | same_as "$D/greedy.txt"
    $DEC --sample --top-k 1 --seed 5 -i "$D/src.en" | same_as "$D/greedy.txt"
    $DEC -m "$D/m2.ckpt" -i "$D/src.en" > "$D/greedy2.txt"
    $DEC -m "$D/m2.ckpt" --sample --temperature 0 -i "$D/src.en" | same_as "$D/greedy2.txt"
    $DEC --sample --sample-beam 4 --word-scores -i "$D/src.en" > "$D/sb4.txt"
    [ "$(wc -l < "$D/sb4.txt")" -eq 93 ]   # 23 lines of 4 samples, and the empty line's one row
    awk -F'\t' 'NF != 5 || $2 < 1 || $2 > 4 { print "bad row " NR ": " $0; bad = 1 } END { exit bad }' "$D/sb4.txt"
    awk -F'\t' '$2 == 1 { print $4 "\t" $5 }' "$D/sb4.txt" | same_as <($DEC --sample --word-scores -i "$D/src.en")
    # the samples of a line differ from each other
    [ "$(awk -F'\t' '$1 == 1 { print $4 }' "$D/sb4.txt" | sort -u | wc -l)" -gt 1 ]
}

@test "--sample: hostile values and combinations are usage errors naming them" {
    for args in "--sample --top-p 0" "--sample --top-p 1.5" "--sample --top-p -0.1" "--sample --temperature -1" \
                "--sample --temperature x" "--sample --top-k -1" "--sample --sample-beam 0" "--sample --seed -3" \
                "--sample --beam 2" "--sample --nbest 2" "--sample --score" "--top-k 5" "--temperature 0.5" \
                "--seed 3" "--sample-beam 2" "--top-p 0.9"; do
        run $DEC $args -i "$D/src.en"
        [ "$status" -eq 2 ] || { echo "args: $args: $status $output"; return 1; }
        [[ "${lines[0]}" == "nmt-decode: "* ]] || { echo "args: $args: $output"; return 1; }
    done
    run $DEC --sample --top-p 0 -i "$D/src.en"
    [ "${lines[0]}" = "nmt-decode: invalid --top-p '0' (expected a mass above 0, at most 1: 0 leaves no token)" ]
    run $DEC --sample --temperature -1 -i "$D/src.en"
    [[ "${lines[0]}" == "nmt-decode: invalid --temperature '-1'"* ]]
    run $DEC --sample --beam 2 -i "$D/src.en"
    [[ "${lines[0]}" == *"--sample draws its own tokens: not with --beam"* ]]
}

@test "--prefix: every output starts with its prefix and goes on, with beam search, n-best, sampling, ensembles" {
    # the first two words of each reference; line 3 forces nothing; line 7 (empty source) gets one
    awk 'NR == 3 { print ""; next } NF { print $1, $2; next } { print "Zwei Hunde" }' "$D/ref.de" > "$D/pre.de"
    for mode in "" "--beam 4" "--beam 4 --nbest 4" "-m $D/m2.ckpt --beam 3" "--sample --sample-beam 3 --seed 4"; do
        $DEC $mode --prefix "$D/pre.de" -i "$D/src.en" > "$D/pf.txt"
        # text output (line = row), or n-best rows: line, rank, score, text
        awk -F'\t' 'NR == FNR { p[NR] = $0; next }
            { l = NF >= 4 ? $1 : FNR; t = NF >= 4 ? $4 : $0; rows++ }
            index(t, p[l]) != 1 { print "line " l ": \"" t "\" does not start with \"" p[l] "\""; bad = 1 }
            length(t) > length(p[l]) { longer++ }
            END { if (longer < rows / 2) { print longer " of " rows " rows go on after the prefix"; bad = 1 }
                  exit bad }' "$D/pre.de" "$D/pf.txt" || { echo "mode: $mode"; return 1; }
    done
    # line 3 (no prefix) translates as without --prefix; beam 4 scores never below greedy's
    $DEC --scores --prefix "$D/pre.de" -i "$D/src.en" > "$D/pg.txt"
    $DEC --beam 4 --scores --prefix "$D/pre.de" -i "$D/src.en" > "$D/pb.txt"
    [ "$(sed -n 3p "$D/pg.txt")" = "$($DEC --scores -i "$D/src.en" | sed -n 3p)" ]
    paste <(cut -f1 "$D/pg.txt") <(cut -f1 "$D/pb.txt") |
        awk '$2 + 1e-6 < $1 { print "line " NR ": " $0; bad = 1 } END { exit bad }'
    # a file of empty lines forces nothing; a prefix of characters outside the vocabulary is forced as bytes
    sed 's/.*//' "$D/pre.de" > "$D/none.de"
    $DEC --beam 4 --prefix "$D/none.de" -i "$D/src.en" | same_as <($DEC --beam 4 -i "$D/src.en")
    printf 'Ω☃ x\n' > "$D/uni.pre"
    head -1 "$D/src.en" > "$D/one.en"
    [[ "$($DEC --prefix "$D/uni.pre" -i "$D/one.en")" == "Ω☃ x"* ]]
}

@test "--prefix: the score of prefix and continuation is --score's of the pair; batch invariant, streamed or not" {
    awk 'NR == 3 { print ""; next } NF { print $1, $2; next } { print "Zwei Hunde" }' "$D/ref.de" > "$D/pre.de"
    # n-best rows that ended by themselves (an EOS forced at the length limit has no log-probability)
    $DEC --beam 6 --nbest 6 --alpha 0 --word-scores --prefix "$D/pre.de" -i "$D/src.en" > "$D/pn.txt"
    awk -F'\t' 'NR == FNR { s[NR] = $0; next } { n = split($5, w, " ") }
        w[n] != 0 { print s[$1] "\t" $4 > "'"$D/pn.tsv"'"; print $3 }' "$D/src.en" "$D/pn.txt" > "$D/pn.scores"
    [ "$(wc -l < "$D/pn.scores")" -ge 10 ]
    $DEC --score -i "$D/pn.tsv" | paste - "$D/pn.scores" |
        awk '{ d = $1 - $2 } d < -1e-4 || d > 1e-4 { print "row " NR ": " $0; bad = 1 } END { exit bad }'
    for mode in "--beam 4 --nbest 2 --word-scores" "--sample --scores" "-m $D/m2.ckpt --scores"; do
        $DEC $mode --prefix "$D/pre.de" -i "$D/src.en" > "$D/pa.txt"
        $DEC $mode --prefix "$D/pre.de" --max-sentences 1 -i "$D/src.en" | same_as "$D/pa.txt"
        $DEC $mode --prefix "$D/pre.de" --max-tokens 30 --jobs 2 -i "$D/src.en" | same_as "$D/pa.txt"
    done
    # one line at a time from a pipe
    $DEC --sample --scores --prefix "$D/pre.de" -i "$D/src.en" > "$D/ps.txt"
    cat "$D/src.en" | $DEC --sample --scores --prefix "$D/pre.de" | same_as "$D/ps.txt"
}

@test "--prefix: a file of too few or too many lines, a prefix longer than the length limit, bad combinations" {
    awk 'NF { print $1, $2; next } { print "" }' "$D/ref.de" > "$D/pre.de"
    head -3 "$D/pre.de" > "$D/pre3.de"
    run $DEC --prefix "$D/pre3.de" -i "$D/src.en"
    [ "$status" -eq 1 ]
    [ "${lines[0]}" = "nmt-decode: $D/pre3.de: line 4: missing: no prefix for input line 4 (the file has 3 lines)" ]
    cat "$D/pre.de" "$D/pre.de" > "$D/pre48.de"
    run $DEC --prefix "$D/pre48.de" -i "$D/src.en"
    [ "$status" -eq 1 ]
    [ "${lines[0]}" = "nmt-decode: $D/pre48.de: line 25: more prefix lines than input lines (24)" ]
    sed '5s/.*/a b c d e f g h i j k l m n o p q r s t u v w x y z/' "$D/pre.de" > "$D/prelong.de"
    run $DEC --max-len-a 0 --max-len-b 20 --prefix "$D/prelong.de" -i "$D/src.en"
    [ "$status" -eq 1 ]
    [[ "${lines[0]}" == "nmt-decode: $D/prelong.de: line 5: a prefix of "*" tokens does not fit the output length "* ]]
    [[ "${lines[0]}" == *"limit of 20 tokens with the end of sentence (--max-len-a, --max-len-b)" ]]
    for args in "--score" "--shortlist"; do
        run $DEC --prefix "$D/pre.de" $args -i "$D/src.en"
        [ "$status" -eq 2 ] || { echo "args: $args: $status $output"; return 1; }
        [[ "${lines[0]}" == "nmt-decode: "* ]]
    done
    run $DEC --prefix - < "$D/src.en"
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-decode: --prefix - and the input cannot both be stdin" ]
    run $DEC --prefix "$D/missing.de" -i "$D/src.en"
    [ "$status" -eq 1 ]
    [[ "${lines[0]}" == *"missing.de"* ]]
}

@test "--alignment hard|soft[=T]: source-output piece pairs after a tab; translations unchanged; batch invariant" {
    $DEC --beam 3 --word-scores --alignment hard -i "$D/src.en" > "$D/al.txt"
    nmt-tokenize --vocab "$D/v.vocab" --text=ids -i "$D/src.en" | awk '{ print NF }' > "$D/al.ns"
    # hard: one pair SRC-TGT per output piece, in order, SRC among the source's pieces
    awk -F'\t' 'NR == FNR { ns[NR] = $1; next }
        { nt = split($2, w, " ") - 1; np = split($3, a, " "); want = ns[FNR] && nt > 0 ? nt : 0 }
        NF != 3 || np != want { print "line " FNR ": " np " pairs for " nt " pieces"; bad = 1 }
        { for (j = 1; j <= np; j++) { split(a[j], st, "-")
            if (a[j] !~ /^[0-9]+-[0-9]+$/ || st[2] != j - 1 || st[1] >= ns[FNR]) { print FNR ": " a[j]; bad = 1 } } }
        END { exit bad }' "$D/al.ns" "$D/al.txt"
    cut -f1-2 "$D/al.txt" | same_as <($DEC --beam 3 --word-scores -i "$D/src.en")
    $DEC --beam 3 --word-scores --alignment hard --max-sentences 1 -i "$D/src.en" | same_as "$D/al.txt"
    $DEC --beam 3 --word-scores --alignment hard --max-tokens 30 --jobs 2 -i "$D/src.en" | same_as "$D/al.txt"
    # soft=0: every pair; soft (0.5): a subset, each output piece at most once; with prefixes and ensembles too
    $DEC --alignment soft=0 -i "$D/src.en" > "$D/as0.txt"
    $DEC --alignment soft -i "$D/src.en" > "$D/as.txt"
    paste "$D/al.ns" "$D/as0.txt" "$D/as.txt" | awk -F'\t' '{ n0 = split($3, a, " "); n = split($5, b, " ") }
        $2 != "" && n0 % $1 != 0 { print "line " NR ": " n0 " pairs for " $1 " source pieces"; bad = 1 }
        { for (j = 1; j <= n; j++) { split(b[j], st, "-"); if (seen[NR, st[2]]++) bad = 1 } }
        n > n0 { bad = 1 } END { exit bad }'
    $DEC -m "$D/m2.ckpt" --beam 2 --alignment hard --prefix "$D/src.en" -i "$D/src.en" > "$D/ae.txt"
    [ "$(wc -l < "$D/ae.txt")" -eq 24 ]
    for args in "--alignment foo" "--alignment soft=2" "--alignment soft=x" "--alignment softer" \
                "--alignment hard --sample" "--alignment hard --score"; do
        run $DEC $args -i "$D/src.en"
        [ "$status" -eq 2 ] || { echo "args: $args: $status $output"; return 1; }
        [[ "${lines[0]}" == "nmt-decode: "* ]]
    done
}

# Prints the word alignment that the piece alignment $3 (Pharaoh pairs) of source pieces $1 and output
# pieces $2 (space-separated, as nmt-tokenize --text=pieces prints them) gives, a word being a piece
# that begins with '▁' and the pieces after it: each pair once, by output word, then source word.
words_of_pieces() {
    awk -v s="$1" -v o="$2" -v a="$3" 'function words(t, m,   n, k, p, w) {
            n = split(t, p, " "); w = -1
            for (k = 1; k <= n; k++) { if (k == 1 || p[k] ~ /^▁/) w++; m[k - 1] = w } }
        BEGIN { words(s, sw); words(o, ow); n = split(a, pr, " ")
            for (k = 1; k <= n; k++) { split(pr[k], st, "-"); print ow[st[2]], sw[st[1]] } }' |
        sort -n -k1,1 -k2,2 -u | awk '{ printf "%s%s-%s", (NR > 1 ? " " : ""), $2, $1 } END { print "" }'
}

@test "--alignment-words: piece alignments merged to words, each pair once, sorted; batch invariant" {
    # a constructed case: the output forced to the tokenized reference (--prefix, and no room after it),
    # so that both sides' pieces are known; several words of several pieces on both sides
    zcat "$NMT_SRCDIR/data/multi30k/test_2016_flickr.en.gz" | sed -n 1,3p > "$D/aw.en"
    zcat "$NMT_SRCDIR/data/multi30k/test_2016_flickr.de.gz" | sed -n 1,3p > "$D/aw.de"
    nmt-tokenize --vocab "$D/v.vocab" --text=pieces -i "$D/aw.en" > "$D/aw.en.pieces"
    nmt-tokenize --vocab "$D/v.vocab" --text=pieces -i "$D/aw.de" > "$D/aw.de.pieces"
    merged=0
    for n in 1 2 3; do
        sed -n "${n}p" "$D/aw.en" > "$D/aw1.en"
        sed -n "${n}p" "$D/aw.de" > "$D/aw1.de"
        sp=$(sed -n "${n}p" "$D/aw.en.pieces") op=$(sed -n "${n}p" "$D/aw.de.pieces")
        np=$(wc -w <<< "$op")
        for mode in hard soft=0.1 soft=0; do
            forced="nmt-decode -m $D/m.ckpt --threads 2 --max-len-a 0 --max-len-b $((np + 1)) --prefix $D/aw1.de"
            pieces=$($forced --alignment $mode -i "$D/aw1.en")
            words=$($forced --alignment $mode --alignment-words -i "$D/aw1.en")
            [ "$(cut -f1 <<< "$words")" = "$(cut -f1 <<< "$pieces")" ]
            [ "$(cut -f1 <<< "$words")" = "$(cat "$D/aw1.de")" ]
            want=$(words_of_pieces "$sp" "$op" "$(cut -f2 <<< "$pieces")")
            [ "$(cut -f2 <<< "$words")" = "$want" ] || { echo "line $n $mode: $words, want $want"; return 1; }
            if [ "$(wc -w <<< "$want")" -lt "$(cut -f2 <<< "$pieces" | wc -w)" ]; then merged=$((merged + 1)); fi
            if [ "$mode" = soft=0 ]; then
                # every pair of words, once
                [ "$(wc -w <<< "$want")" -eq $(( $(wc -w < "$D/aw1.en") * $(wc -w < "$D/aw1.de") )) ]
            fi
        done
    done
    [ "$merged" -gt 0 ]
    # free translations: batch invariant, and merged from the same piece alignment
    $DEC --beam 3 --alignment hard --alignment-words -i "$D/src.en" > "$D/aw.txt"
    $DEC --beam 3 --alignment hard --alignment-words --max-sentences 1 -i "$D/src.en" | same_as "$D/aw.txt"
    $DEC --beam 3 --alignment hard --alignment-words --max-tokens 30 --jobs 2 -i "$D/src.en" | same_as "$D/aw.txt"
    awk -F'\t' 'NF != 2 || ($2 != "" && $2 !~ /^[0-9]+-[0-9]+( [0-9]+-[0-9]+)*$/) { print NR ": " $0; bad = 1 }
        END { exit bad }' "$D/aw.txt"
    run $DEC --alignment-words -i "$D/src.en"
    [ "$status" -eq 2 ]
    [ "${lines[0]}" = "nmt-decode: --alignment-words goes with --alignment" ]
}

@test "--alignment with --out hyp: the pairs in the hyp records (format 1.2), as the text output has them" {
    for mode in hard "hard --alignment-words" "soft=0.05 --alignment-words"; do
        $DEC --beam 3 --nbest 2 --alignment $mode -i "$D/src.en" > "$D/ah.txt"
        $DEC --beam 3 --nbest 2 --alignment $mode -i "$D/src.en" --out hyp -o "$D/ah.hyp"
        nmt-cat "$D/ah.hyp" > "$D/ah.cat"
        # every record has the alignment column (an empty one for the empty line), the same as the text's
        awk -F'\t' 'NF != 5 { print NR ": " NF " fields"; bad = 1 } END { exit bad }' "$D/ah.cat"
        cut -f5 "$D/ah.cat" | same_as <(cut -f5 "$D/ah.txt")
        cut -f1,2 "$D/ah.cat" | awk -F'\t' '{ print $1 + 1 "\t" $2 }' | same_as <(cut -f1,2 "$D/ah.txt")
        nmt-tokenize --decode -v "$D/v.vocab" -i "$D/ah.hyp" | same_as <(cut -f4 "$D/ah.txt")
        nmt-cat --check "$D/ah.hyp"
        [ "$(nmt-cat --header "$D/ah.hyp" | sed -n 2,3p | tr '\n' ' ')" = "version	1.2 flags	alignment " ]
        nmt-cat --json "$D/ah.hyp" > "$D/ah.json"
        [ "$(awk '/"alignment":\[\[[0-9]+,[0-9]+\]/' "$D/ah.json" | wc -l)" -eq "$(awk -F'\t' '$5 != ""' "$D/ah.cat" | wc -l)" ]
        [ "$(awk -F'\t' '$5 != ""' "$D/ah.cat" | wc -l)" -gt 5 ]
    done
    # without --alignment the records and the header are as before
    $DEC --beam 3 -i "$D/src.en" --out hyp -o "$D/an.hyp"
    nmt-cat "$D/an.hyp" > "$D/an.cat"
    awk -F'\t' 'NF != 4 { bad = 1 } END { exit bad }' "$D/an.cat"
    [ "$(nmt-cat --header "$D/an.hyp" | sed -n 3p)" = "producer	nmt-decode 0.1.0" ]
}

@test "--alignment hard on a copy-task model: the diagonal on at least 90% of the output tokens" {
    # tests/fixtures/copy/model.ckpt: trained for 600 steps on source = target by
    # tests/fixtures/make_copy_model.sh; test.txt is not in its training data
    F="$NMT_SRCDIR/tests/fixtures/copy"
    nmt-decode -m "$F/model.ckpt" --alignment hard --threads 2 -i "$F/test.txt" > "$D/copy.txt"
    [ "$(wc -l < "$D/copy.txt")" -eq 100 ]
    # the fraction of output tokens whose source token is the one at the same position
    cut -f2 "$D/copy.txt" | awk '{ for (i = 1; i <= NF; i++) { split($i, p, "-"); n++; d += p[1] == p[2] } }
        END { printf "%d %d %.4f\n", d, n, n ? d / n : 0 }' > "$D/copy.diag"
    read -r diag tokens frac < "$D/copy.diag"
    echo "diagonal: $diag of $tokens output tokens ($frac)"
    [ "$tokens" -ge 500 ]
    [ $((100 * diag)) -ge $((90 * tokens)) ]
    # the model does copy, and the alignment does not depend on the batch
    [ "$(paste "$F/test.txt" <(cut -f1 "$D/copy.txt") | awk -F'\t' '$1 == $2' | wc -l)" -ge 80 ]
    nmt-decode -m "$F/model.ckpt" --alignment hard --threads 2 --max-sentences 1 -i "$F/test.txt" | same_as "$D/copy.txt"
}
