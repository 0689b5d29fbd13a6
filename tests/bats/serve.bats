#!/usr/bin/env bats
# nmt-serve through the real server on 127.0.0.1 (a free port): translations equal nmt-decode's alone
# and under 32 concurrent clients, every error's status and message, the full queue, SIGTERM with
# requests in flight, SIGHUP reload; its client mode (--client) and its page in a headless Chromium.
# A tiny model trained for a few steps in setup_file.

load common

# Debian's python3 where there is one (it starts in a tenth of the time of a version manager's shim)
PY=$(command -v /usr/bin/python3 || command -v python3)
CLIENT="$PY $NMT_SRCDIR/tests/helpers/serve_client.py"

# Starts nmt-serve on a free port with the options given (its pid in $D/NAME.pid, its address in
# $D/NAME.addr, its stderr in $D/NAME.log) and waits until it answers /health.
start_server() {
    local name=$1 i
    shift
    rm -f "$D/$name.addr"
    nmt-serve --listen 127.0.0.1:0 --port-file "$D/$name.addr" --threads 2 --max-len-b 8 "$@" \
        2> "$D/$name.log" 3>&- &
    echo $! > "$D/$name.pid"
    for i in $(seq 300); do
        [ -s "$D/$name.addr" ] && break
        kill -0 "$(cat "$D/$name.pid")" || { cat "$D/$name.log"; return 1; }
        sleep 0.05
    done
    for i in $(seq 400); do
        curl -sf -o /dev/null "http://$(cat "$D/$name.addr")/health" && return 0
        sleep 0.05
    done
    return 1
}

# Prints the value of metric $2 of the server at address $1.
metric() {
    curl -sf -o "$D/metrics.txt" "http://$1/metrics"
    awk -v n="$2" '$1 == n { print $2 }' "$D/metrics.txt"
}

# Stops the servers still running.
stop_servers() {
    local f
    for f in "$D"/*.pid; do
        [ -e "$f" ] && stop_one "$f"
    done
    return 0
}

setup_file() {
    export D="$BATS_FILE_TMPDIR"
    zcat "$NMT_SRCDIR/data/multi30k/train.en.gz" | sed -n 1,1000p > "$D/tr.en"
    zcat "$NMT_SRCDIR/data/multi30k/train.de.gz" | sed -n 1,1000p > "$D/tr.de"
    nmt-tokenize --src "$D/tr.en" --tgt "$D/tr.de" | nmt-vocab --size 400 -o "$D/v.vocab"
    nmt-tokenize --vocab "$D/v.vocab" --src "$D/tr.en" --tgt "$D/tr.de" |
        nmt-batch -t 2000 -o "$D/p.batches" 2>/dev/null
    nmt-train --vocab "$D/v.vocab" -i "$D/p.batches" -o "$D/m.ckpt" --layers 1 --d-model 32 --heads 2 --ff 64 \
        --max-steps 12 --warmup 6 --lr 2 --label-smoothing 0 -q --threads 2
    nmt-train --vocab "$D/v.vocab" -i "$D/p.batches" -o "$D/m2.ckpt" --layers 1 --d-model 32 --heads 2 --ff 64 \
        --max-steps 2 --warmup 6 --lr 2 --label-smoothing 0 -q --threads 2 --seed 7
    # 24 source lines of mixed lengths, one empty
    zcat "$NMT_SRCDIR/data/multi30k/test_2016_flickr.en.gz" | sed -n 1,23p > "$D/src.en"
    sed -i '7i\\' "$D/src.en"
    export DEC="nmt-decode --threads 2 --max-len-b 8 -i $D/src.en"
    start_server main -m "$D/m.ckpt" --max-body-bytes 4096 --max-line-bytes 600 --max-request-sentences 8 --max-beam 4
    export A=$(cat "$D/main.addr")
}

teardown_file() {
    stop_servers
}

# Every server a test started is stopped after it, whatever its outcome.
teardown() {
    local f
    for f in "$D"/*.pid; do
        [ -e "$f" ] && [ "$f" != "$D/main.pid" ] && stop_one "$f"
    done
    return 0
}

# Stops the server of pid file $1 (TERM, then KILL after 10 s) and removes the file.
stop_one() {
    local pid i
    pid=$(cat "$1")
    rm -f "$1"
    kill -TERM "$pid" 2>/dev/null || return 0
    for i in $(seq 200); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.05; done
    kill -KILL "$pid" 2>/dev/null || true
}

# Sends METHOD $1 PATH $2 with the body in file $3 (if any) to the server at ${S:-$A}: the status in
# $code, the body in $D/ans, the headers in $D/ans.head.
call() {
    local args=(-s -o "$D/ans" -D "$D/ans.head" -w '%{http_code}' -X "$1" "http://${S:-$A}$2")
    [ -z "${3:-}" ] || args+=(--data-binary "@$3" -H 'Content-Type: application/json')
    code=$(curl "${args[@]}")
}

@test "--help and --version" {
    run nmt-serve --help
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == "Usage: nmt-serve"* ]]
    run nmt-serve --version
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == "nmt-serve (nmt) "* ]]
}

@test "usage errors exit 2" {
    for args in "" "-m x --beam 0" "-m x --beam 3 --max-beam 2" "-m x --nbest 2" "-m x --max-queue 4" \
                "-m x --max-wait-ms -1" "-m x --precision int4" "-m x extra" "-m x --bogus" "-m x --timeout 0"; do
        run nmt-serve $args
        [ "$status" -eq 2 ] || { echo "args: $args: $status $output"; return 1; }
        [[ "${lines[0]}" == "nmt-serve: "* ]] || { echo "args: $args: $output"; return 1; }
    done
}

@test "a missing checkpoint and a bad address fail with exit 1" {
    run nmt-serve -m "$D/none.ckpt" --listen 127.0.0.1:0
    [ "$status" -eq 1 ]
    [[ "$output" == *"none.ckpt"* ]]
    run nmt-serve -m "$D/m.ckpt" --listen nowhere --threads 1
    [ "$status" -eq 1 ]
    [[ "$output" == *"invalid --listen 'nowhere'"* ]]
}

@test "translations equal nmt-decode's: greedy, beam 4 with scores, n-best, one sentence a request" {
    $DEC -m "$D/m.ckpt" > "$D/ref1"
    $CLIENT translate "$A" "$D/src.en" > "$D/got1"
    cmp "$D/ref1" "$D/got1"
    $DEC -m "$D/m.ckpt" --beam 4 --scores > "$D/ref4"
    $CLIENT translate "$A" "$D/src.en" --beam 4 --scores > "$D/got4"
    cmp "$D/ref4" "$D/got4"
    $DEC -m "$D/m.ckpt" --beam 4 --nbest 3 > "$D/refn"
    $CLIENT translate "$A" "$D/src.en" --beam 4 --nbest 3 > "$D/gotn"
    cmp "$D/refn" "$D/gotn"
}

@test "translations equal nmt-decode's under 32 concurrent clients sending interleaved requests" {
    $DEC -m "$D/m.ckpt" --scores > "$D/ref1"
    $DEC -m "$D/m.ckpt" --beam 4 --nbest 2 > "$D/refn"
    # the same file four times over: 96 sentences, requests of 1 to 3, greedy and beam mixed in time
    for i in 1 2 3 4; do cat "$D/src.en"; done > "$D/src4.en"
    for i in 1 2 3 4; do cat "$D/ref1"; done > "$D/ref4x"
    $CLIENT translate "$A" "$D/src4.en" --scores --clients 32 --per-request 3 > "$D/got1" &
    local bg=$!
    $CLIENT translate "$A" "$D/src.en" --beam 4 --nbest 2 --clients 24 > "$D/gotn"
    wait $bg
    cmp "$D/ref4x" "$D/got1"
    cmp "$D/refn" "$D/gotn"
    # several sentences were decoded in one batch
    [ "$(metric "$A" 'nmt_serve_batch_sentences_bucket{le="1"}')" != \
      "$(metric "$A" nmt_serve_batch_sentences_count)" ]
}

@test "batches on the cpu: at most 16 sentences by default, larger with --max-sentences; the same translations" {
    cat "$D/src.en" "$D/src.en" > "$D/s48.en"
    start_server b16 -m "$D/m.ckpt"
    local S16 S64
    S16=$(cat "$D/b16.addr")
    $CLIENT translate "$S16" "$D/s48.en" --per-request 48 > "$D/g16"
    [ "$(metric "$S16" 'nmt_serve_batch_sentences_bucket{le="16"}')" = "$(metric "$S16" nmt_serve_batch_sentences_count)" ]
    [ "$(metric "$S16" nmt_serve_batch_sentences_count)" -ge 3 ]
    # a batch that is not full waits 2 s for more: the 48 sentences of the request go as one
    start_server b64 -m "$D/m.ckpt" --max-sentences 64 --max-wait-ms 2000
    S64=$(cat "$D/b64.addr")
    $CLIENT translate "$S64" "$D/s48.en" --per-request 48 > "$D/g64"
    [ "$(metric "$S64" 'nmt_serve_batch_sentences_bucket{le="32"}')" -lt "$(metric "$S64" nmt_serve_batch_sentences_count)" ]
    cmp "$D/g16" "$D/g64"
}

@test "bad requests: 400 naming what was wrong, and the server keeps serving" {
    local cases=(
        '{"text": ["a"'                         "malformed JSON at line 1"
        '[1, 2]'                                "the request must be a JSON object"
        '{"text": "a"}'                         "'text' must be an array of strings"
        '{"text": ["a", 3]}'                    "'text'[1] must be a string"
        '{"text": ["a"], "beam": "4"}'          "'beam' must be an integer"
        '{"text": ["a"], "beam": 5}'            "'beam' must be from 1 to 4 (--max-beam)"
        '{"text": ["a"], "beam": 2, "nbest": 3}' "'nbest' 3 exceeds 'beam' 2"
        '{"text": ["a"], "scores": 1}'          "'scores' must be true or false"
        '{"text": ["a"], "alignment": true}'    "'alignment' is not available"
        '{"text": ["a"], "colour": 1}'          "unknown field 'colour'"
        '{"beam": 2}'                           "the field 'text' (an array of strings) is missing"
        '{"text": ["a"], "text": ["b"]}'        "malformed JSON"
        '{"text": ["a\u0000b"]}'                "malformed JSON"
    )
    for ((i = 0; i < ${#cases[@]}; i += 2)); do
        printf '%s' "${cases[i]}" > "$D/body"
        call POST /translate "$D/body"
        [ "$code" = 400 ] || { echo "${cases[i]}: $code"; cat "$D/ans"; return 1; }
        grep -qF "{\"error\":\"${cases[i + 1]}" "$D/ans" || { echo "${cases[i]}:"; cat "$D/ans"; return 1; }
        call GET /health
        [ "$code" = 200 ]
    done
    printf '{"text": ["ab\xffc"]}' > "$D/body"
    call POST /translate "$D/body"
    [ "$code" = 400 ]
    grep -qF '"error":"the request body is not valid UTF-8 (byte 14)"' "$D/ans"
    printf '{"text": ["A man."]}' > "$D/body"
    call POST /translate "$D/body"
    [ "$code" = 200 ]
}

@test "limits: 413 naming the limit; unknown paths 404, wrong methods 405" {
    head -c 5000 /dev/zero | tr '\0' a > "$D/big"
    call POST /translate "$D/big"
    [ "$code" = 413 ]
    grep -qF '"error":"the request body exceeds the limit of 4096 bytes (--max-body-bytes)"' "$D/ans"
    $PY -c 'import json; print(json.dumps({"text": ["a"] * 9}))' > "$D/body"
    call POST /translate "$D/body"
    [ "$code" = 413 ]
    grep -qF '"error":"9 sentences exceed the limit of 8 (--max-request-sentences)"' "$D/ans"
    $PY -c 'import json; print(json.dumps({"text": ["a", "b " * 301]}))' > "$D/body"
    call POST /translate "$D/body"
    [ "$code" = 413 ]
    grep -qF '"error":"'"'text'"'[1] has 602 bytes, over the limit of 600 (--max-line-bytes)"' "$D/ans"
    call GET /nothing
    [ "$code" = 404 ]
    call GET /translate
    [ "$code" = 405 ]
    call POST /health "$D/body"
    [ "$code" = 405 ]
    call GET /health
    [ "$code" = 200 ]
    # each answer was counted
    [ "$(metric "$A" 'nmt_serve_requests_total{code="413"}')" -ge 3 ]
    [ "$(metric "$A" 'nmt_serve_requests_total{code="404"}')" -ge 1 ]
}

@test "GET / is a page with a text box and no external assets; /metrics is Prometheus text" {
    call GET /
    [ "$code" = 200 ]
    grep -q '<textarea' "$D/ans"
    grep -q "fetch('/translate'" "$D/ans"
    fails grep -qE '(src|href)="?(https?:)?//' "$D/ans"
    call GET /metrics
    [ "$code" = 200 ]
    for m in nmt_serve_requests_total nmt_serve_sentences_total nmt_serve_source_tokens_total \
             nmt_serve_output_tokens_total nmt_serve_queue_sentences nmt_serve_request_duration_seconds \
             nmt_serve_batch_sentences nmt_serve_requests_in_flight; do
        grep -q "^# TYPE $m " "$D/ans" || { echo "no $m"; return 1; }
    done
}

@test "a full queue answers 503 with Retry-After; SIGTERM answers the requests in flight and exits 0" {
    # the queue stays full for --max-wait-ms: long enough for the three requests below that must
    # find it full, on a loaded machine under the sanitizers too
    start_server slow -m "$D/m.ckpt" --max-queue 4 --max-request-sentences 4 --max-wait-ms 4000 -t 100000
    local S pid
    S=$(cat "$D/slow.addr")
    pid=$(cat "$D/slow.pid")
    sed -n 1,4p "$D/src.en" > "$D/four.en"
    $PY -c 'import json, sys; print(json.dumps({"text": open(sys.argv[1]).read().split("\n")[:-1]}))' "$D/four.en" \
        > "$D/four"
    $CLIENT call "$S" POST /translate "$D/four" > "$D/first" &
    local bg=$!
    for i in $(seq 200); do [ "$(metric "$S" nmt_serve_queue_sentences)" = 4 ] && break; sleep 0.02; done
    printf '{"text": ["A dog."]}' > "$D/body"
    call POST /translate "$D/body"
    [ "$code" = 503 ]
    grep -qx $'Retry-After: 1\r' "$D/ans.head"
    grep -qF '"error":"the queue is full (4 of --max-queue 4 sentences waiting)"' "$D/ans"
    # the client gives up at once without retries, and waits out the Retry-After with them
    sed -n 1p "$D/src.en" > "$D/one.en"
    run nmt-serve --client "$S" --retry-for 0 < "$D/one.en"
    [ "$status" -eq 1 ]
    [[ "$output" == "nmt-serve: line 1: 'http://$S/translate' still answered 503 after 0 s of retries: the queue is full"* ]]
    nmt-serve --client "$S" < "$D/one.en" > "$D/got1" 2> "$D/client.err"
    $DEC -m "$D/m.ckpt" | sed -n 1p | same_as "$D/got1"
    grep -q "requests answered 503 (the server's queue full) were sent again" "$D/client.err"
    wait $bg
    [ "$(sed -n 1p "$D/first")" = 200 ]
    # SIGTERM with 3 requests in flight: each answered, then exit 0
    run $CLIENT drain "$S" "$pid" "$D/one.en" 3
    [ "$status" -eq 0 ] || { cat "$D/slow.log"; return 1; }
    [ "$output" = "answered 3" ]
    rm -f "$D/slow.pid"
    wait "$pid"
}

@test "SIGHUP reloads the model: answers switch models, none lost" {
    cp "$D/m.ckpt" "$D/live.ckpt"
    start_server live -m "$D/live.ckpt"
    local S pid
    S=$(cat "$D/live.addr")
    pid=$(cat "$D/live.pid")
    $DEC -m "$D/m.ckpt" > "$D/ra"
    $DEC -m "$D/m2.ckpt" > "$D/rb"
    fails cmp -s "$D/ra" "$D/rb"
    $CLIENT translate "$S" "$D/src.en" > "$D/ga"
    cmp "$D/ra" "$D/ga"
    for i in 1 2 3 4; do cat "$D/src.en"; done > "$D/src4.en"
    $CLIENT translate "$S" "$D/src4.en" --clients 16 > "$D/during" &
    local bg=$!
    cp "$D/m2.ckpt" "$D/live.tmp"
    mv "$D/live.tmp" "$D/live.ckpt"
    kill -HUP "$pid"
    wait $bg
    for i in $(seq 200); do [ "$(metric "$S" nmt_serve_reloads_total)" = 1 ] && break; sleep 0.02; done
    [ "$(metric "$S" nmt_serve_reloads_total)" = 1 ]
    # every answer during the reload came from one model or the other
    paste "$D/during" <(for i in 1 2 3 4; do cat "$D/ra"; done) <(for i in 1 2 3 4; do cat "$D/rb"; done) |
        awk -F '\t' '$1 != $2 && $1 != $3 { bad++ } END { exit bad > 0 }'
    $CLIENT translate "$S" "$D/src.en" > "$D/gb"
    cmp "$D/rb" "$D/gb"
    grep -q "reloaded '$D/live.ckpt'" "$D/live.log"
}

@test "--client: stdin's lines through the server, in requests of --batch-lines, as nmt-decode writes them" {
    $DEC -m "$D/m.ckpt" > "$D/ref1"
    nmt-serve --client "http://$A" --batch-lines 5 < "$D/src.en" > "$D/got1"
    cmp "$D/ref1" "$D/got1"
    $DEC -m "$D/m.ckpt" --beam 4 --scores > "$D/ref4"
    nmt-serve --client "http://$A/" -b 4 --scores --batch-lines 8 < "$D/src.en" > "$D/got4"
    cmp "$D/ref4" "$D/got4"
    # n-best lines carry their input line numbers across requests
    $DEC -m "$D/m.ckpt" --beam 4 --nbest 3 > "$D/refn"
    nmt-serve --client "http://$A/translate" -b 4 --nbest 3 --batch-lines 7 < "$D/src.en" > "$D/gotn"
    cmp "$D/refn" "$D/gotn"
    # several requests were made: the server counted them
    [ "$(metric "$A" 'nmt_serve_requests_total{code="200"}')" -ge 9 ]
    nmt-serve --client "$A" < /dev/null > "$D/none"
    [ ! -s "$D/none" ]
}

@test "--client errors: the server down, its error messages naming the input line, bad input, usage" {
    # nothing listens on port 1
    run nmt-serve --client http://127.0.0.1:1 < "$D/src.en"
    [ "$status" -eq 1 ]
    [[ "$output" == "nmt-serve: cannot reach 'http://127.0.0.1:1/translate': "*"(lines 1-24 not translated)" ]]
    # line 6 over the server's --max-line-bytes 600: the requests before it are written, then the error
    { sed -n 1,5p "$D/src.en"; printf 'b %.0s' $(seq 350); echo; sed -n 6,9p "$D/src.en"; } > "$D/long.en"
    run nmt-serve --client "$A" --batch-lines 2 < "$D/long.en"
    [ "$status" -eq 1 ]
        [ "${lines[-1]}" = "nmt-serve: line 6: 'http://$A/translate' answered 413: 'text'[1] has 700 bytes, over the limit of 600 (--max-line-bytes)" ]
    $DEC -m "$D/m.ckpt" | sed -n 1,4p > "$D/ref4"
    nmt-serve --client "$A" --batch-lines 2 < "$D/long.en" 2>/dev/null > "$D/part" || true
    cmp "$D/ref4" "$D/part"
    run nmt-serve --client "$A" --batch-lines 9 < "$D/src.en"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-serve: lines 1-9: 'http://$A/translate' answered 413: 9 sentences exceed the limit of 8 (--max-request-sentences)" ]
    run nmt-serve --client "$A" -b 8 < "$D/src.en"
    [ "$status" -eq 1 ]
    [[ "$output" == *"answered 400: 'beam' must be from 1 to 4 (--max-beam)" ]]
    printf 'A man.\nab\xffc\n' > "$D/bad.en"
    run nmt-serve --client "$A" < "$D/bad.en"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-serve: stdin: line 2: not valid UTF-8 (byte 2)" ]
    run nmt-serve --client "$A" -m "$D/m.ckpt"
    [ "$status" -eq 2 ]
    run nmt-serve -m "$D/m.ckpt" --scores
    [ "$status" -eq 2 ]
    [[ "$output" == *"--scores and --batch-lines are the client's (--client URL)"* ]]
    # the server served on
    call GET /health
    [ "$code" = 200 ]
}

@test "the page in a headless Chromium: a sentence typed, the button clicked, nmt-decode's translation shown" {
    command -v chromium > /dev/null || skip "chromium is not installed (scripts/deps.sh installs it)"
    command -v chromedriver > /dev/null || skip "chromedriver is not installed (Debian chromium-driver)"
    local sentence="A man in a blue shirt is standing on a ladder."
    echo "$sentence" > "$D/sentence.en"
    nmt-decode --threads 2 --max-len-b 8 -m "$D/m.ckpt" -i "$D/sentence.en" > "$D/ref"
    $PY "$NMT_SRCDIR/tests/helpers/browser.py" "$A" "$sentence" 60 > "$D/page"
    cmp "$D/ref" "$D/page"
}
