#!/usr/bin/env bats
# nmt-train: options, logs, checkpoints, bit-exact resume, signals, non-finite steps, bad input.
# A tiny model (d 32, 1+1 layers) on the first 300 pairs of the bundled Multi30k training set.

load common

setup_file() {
    export D="$BATS_FILE_TMPDIR"
    local M="$NMT_SRCDIR/data/multi30k"
    zcat "$M/train.en.gz" | sed -n 1,300p > "$D/tr.en"
    zcat "$M/train.de.gz" | sed -n 1,300p > "$D/tr.de"
    zcat "$M/train.en.gz" | sed -n 301,360p > "$D/va.en"
    zcat "$M/train.de.gz" | sed -n 301,360p > "$D/va.de"
    nmt-tokenize --src "$D/tr.en" --tgt "$D/tr.de" -o "$D/tr.tok"
    nmt-vocab -s 320 -o "$D/v.txt" "$D/tr.tok" 2>/dev/null
    nmt-vocab -s 300 -o "$D/v2.txt" "$D/tr.tok" 2>/dev/null
    nmt-tokenize --src "$D/tr.en" --tgt "$D/tr.de" --vocab "$D/v.txt" -o "$D/tr.ids"
    nmt-batch -t 600 -i "$D/tr.ids" -o "$D/tr.b" 2>/dev/null
    nmt-tokenize --src "$D/va.en" --tgt "$D/va.de" --vocab "$D/v.txt" | nmt-batch -t 600 -o "$D/va.b" 2>/dev/null
}

setup() {
    cd "$BATS_TEST_TMPDIR"
    T=(nmt-train --preset tiny --d-model 32 --ff 64 --heads 2 --layers 1 --threads 1 -q --warmup 20 --lr 2
       --vocab "$D/v.txt" -i "$D/tr.b")
}

# step and loss columns of a CSV log (the timing columns differ between runs)
losses() { cut -d, -f1,3 "$1"; }

@test "--help lists every option and exits 0" {
    run nmt-train --help
    [ "$status" -eq 0 ]
    [[ "$output" == Usage:\ nmt-train* ]]
    for o in --input --valid --output --vocab --resume --backend --threads --epochs --max-steps --max-time \
             --preset --layers --enc-layers --dec-layers --d-model --heads --ff --pre-norm --max-len --lr --warmup \
             --clip-norm --update-freq --seed --label-smoothing --dropout --attention-dropout --activation-dropout \
             --no-shuffle --max-bad --valid-every --patience --save-every --keep --log --log-every --quiet --help \
             --version; do
        [[ "$output" == *"$o"* ]] || { echo "missing $o"; return 1; }
    done
}

@test "--version names the tool and lists the cpu plugin" {
    run nmt-train --version
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == "nmt-train "* ]]
    [[ "$output" == *"plugin cpu"*"score"* ]]
}

@test "usage errors exit 2" {
    run nmt-train -i "$D/tr.b" --vocab "$D/v.txt"
    [ "$status" -eq 2 ]; [[ "$output" == *"-o FILE"* ]]
    run nmt-train -i "$D/tr.b" -o m.ckpt
    [ "$status" -eq 2 ]; [[ "$output" == *"--vocab"* ]]
    run "${T[@]}" -o m.ckpt --lr x
    [ "$status" -eq 2 ]; [[ "$output" == *"invalid --lr 'x'"* ]]
    run "${T[@]}" -o m.ckpt --preset huge
    [ "$status" -eq 2 ]; [[ "$output" == *"unknown preset 'huge'"* ]]
    run "${T[@]}" -o m.ckpt --dropout 1
    [ "$status" -eq 2 ]
    run "${T[@]}" -o m.ckpt --max-time 5x
    [ "$status" -eq 2 ]
    run "${T[@]}" -o m.ckpt --keep 2
    [ "$status" -eq 2 ]; [[ "$output" == *"--keep needs --save-every"* ]]
    [ ! -e m.ckpt ]
}

@test "trains: the loss falls, a safetensors checkpoint and a CSV log are written" {
    run "${T[@]}" -o m.ckpt --epochs 3 --log log.csv
    [ "$status" -eq 0 ]
    [ -s m.ckpt ]
    head -c 400 m.ckpt | tail -c +9 | grep -q '"model.arch":"transformer"'
    head -c 2000 m.ckpt | grep -q '"vocab.fingerprint"'
    [ "$(head -1 log.csv)" = "step,epoch,loss,lr,tokens,tokens_per_s,grad_norm,gflop_s,valid_loss,valid_ppl,valid_nll" ]
    [ "$(grep -c '"' log.csv)" -eq 0 ] # plain numbers, unquoted
    [ "$(sed -n 2p log.csv | cut -d, -f1,2)" = "1,1" ]
    n=$(grep -c . log.csv)
    [ "$n" -gt 10 ]
    first=$(sed -n 2p log.csv | cut -d, -f3 | tr -d '"')
    last=$(tail -1 log.csv | cut -d, -f3 | tr -d '"')
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }'
    # full precision
    [[ "$first" =~ ^[0-9]\.[0-9]{12,}$ ]]
}

@test "JSON lines log with validation rows; the best checkpoint is kept" {
    run "${T[@]}" -o m.ckpt --max-steps 12 --valid "$D/va.b" --valid-every 4 --log log.jsonl
    [ "$status" -eq 0 ]
    [ -s m.ckpt.best ]
    grep -q '^{"step":1,"epoch":1,"loss":[0-9.]*,"lr":[0-9.e-]*,"tokens":[0-9]*,"tokens_per_s":[0-9.]*,"grad_norm":[0-9.e-]*,"gflop_s":[0-9.]*}$' log.jsonl
    [ "$(grep -c '"valid_loss"' log.jsonl)" -eq 3 ]
    grep '"valid_loss"' log.jsonl | grep '"valid_ppl"' | grep -q '"valid_nll"'
    # the same fields in both logs: validation rows of the CSV have the 11 columns filled
    run "${T[@]}" -o m2.ckpt --max-steps 8 --valid "$D/va.b" --valid-every 4 --log log2.csv
    [ "$status" -eq 0 ]
    [ "$(awk -F, 'NR > 1 && NF == 11 && $9 != "" && $10 != "" && $11 != ""' log2.csv | wc -l)" -eq 2 ]
    awk -F, 'NR > 1 && $11 != "" { d = exp($11) - $10; if (d < 0) d = -d; if (d > 1e-6 * $10) exit 1 }' log2.csv
    run "${T[@]}" -o m.ckpt --max-steps 12 --valid "$D/va.b" --valid-every 4 --force
    [ "$status" -eq 0 ]
}

@test "--log with another extension is refused" {
    run "${T[@]}" -o m.ckpt --max-steps 1 --log log.txt
    [ "$status" -eq 1 ]; [[ "$output" == *".csv or .jsonl"* ]]
}

@test "--resume continues bit for bit: 7 then 15 steps equal 15 steps" {
    O=(--max-steps 15 --update-freq 2 --attention-dropout 0.1 --activation-dropout 0.1 --clip-norm 1)
    run "${T[@]}" "${O[@]}" -o a.ckpt --log a.csv
    [ "$status" -eq 0 ]
    run "${T[@]}" "${O[@]}" --max-steps 7 -o b.ckpt --log b.csv
    [ "$status" -eq 0 ]
    [ "$(grep -c . b.csv)" -eq 8 ]
    run "${T[@]}" "${O[@]}" --resume -o b.ckpt --log b.csv
    [ "$status" -eq 0 ]
    [ "$(grep -c . b.csv)" -eq 16 ]
    diff <(losses a.csv) <(losses b.csv)
    cmp a.ckpt b.ckpt
}

@test "--resume reads the vocabulary from the checkpoint and refuses another shape" {
    run "${T[@]}" -o m.ckpt --max-steps 2
    [ "$status" -eq 0 ]
    run nmt-train -q -i "$D/tr.b" -o m.ckpt --resume --max-steps 3
    [ "$status" -eq 0 ]
    run nmt-train -q -i "$D/tr.b" -o m.ckpt --resume --max-steps 5 --d-model 64
    [ "$status" -eq 1 ]; [[ "$output" == *"another model shape"* ]]
    run nmt-train -q -i "$D/tr.b" -o m.ckpt --resume --max-steps 5 --vocab "$D/v2.txt"
    [ "$status" -eq 1 ]; [[ "$output" == *"differs"* ]]
    run nmt-train -q -i "$D/tr.b" -o none.ckpt --resume
    [ "$status" -eq 1 ]; [[ "$output" == *"cannot resume"*"none.ckpt"* ]]
    echo "not a checkpoint at all" > bad.ckpt
    run nmt-train -q -i "$D/tr.b" -o bad.ckpt --resume
    [ "$status" -eq 1 ]; [[ "$output" == *"bad.ckpt"* ]]
}

@test "batches on stdin are read in one pass" {
    run bash -c "cat '$D/tr.b' | nmt-train --preset tiny --d-model 32 --ff 64 --layers 1 --threads 1 --vocab '$D/v.txt' -o m.ckpt --log l.csv"
    [ "$status" -eq 0 ]
    [[ "$output" == *"end of data"* ]]
    [ "$(($(grep -c . l.csv) - 1))" -ge 1 ]
}

@test "--save-every with --keep keeps the last N step checkpoints" {
    run "${T[@]}" -o m.ckpt --max-steps 8 --save-every 2 --keep 2
    [ "$status" -eq 0 ]
    [ -s m.ckpt.step-6 ]
    [ -s m.ckpt.step-8 ]
    [ ! -e m.ckpt.step-2 ]
    [ ! -e m.ckpt.step-4 ]
    cmp m.ckpt m.ckpt.step-8
}

@test "--patience stops early" {
    # a rate too small to move float32 weights: the validation loss cannot improve after the first
    run "${T[@]}" -o m.ckpt --max-steps 50 --lr 1e-12 --warmup 0 --valid "$D/va.b" --valid-every 2 \
        --patience 2 --log l.csv --dropout 0
    [ "$status" -eq 0 ]
    [ "$(grep -c '^6,' l.csv)" -eq 2 ]
    [ "$(grep -c '^7,' l.csv)" -eq 0 ]
}

@test "--max-time ends the run" {
    run "${T[@]}" -o m.ckpt --max-time 0.5s --epochs 1000
    [ "$status" -eq 0 ]
    [ -s m.ckpt ]
}

@test "wrong stream kind, vocabulary mismatch, truncated stream: one-line errors, exit 1" {
    run "${T[@]}" -o m.ckpt -i "$D/tr.ids"
    [ "$status" -eq 1 ]; [[ "$output" == *"expected a batch stream, got ids"* ]]
    [ "${#lines[@]}" -eq 1 ]
    run "${T[@]}" -o m.ckpt --vocab "$D/v2.txt"
    [ "$status" -eq 1 ]; [[ "$output" == *"vocab fingerprint"*"differs"* ]]
    head -c 20000 "$D/tr.b" > trunc.b
    run "${T[@]}" -o m.ckpt -i trunc.b
    [ "$status" -eq 1 ]; [[ "$output" == *"trunc"* ]]
    [ ! -e m.ckpt ]
}

@test "an unwritable output directory is refused before training" {
    [ "$(id -u)" -eq 0 ] && out=/proc/nmt-test/m.ckpt || { mkdir ro; chmod 555 ro; out=ro/m.ckpt; }
    run "${T[@]}" -o "$out" --max-steps 1
    [ "$status" -eq 1 ]; [[ "$output" == *"cannot write checkpoints"* ]]
}

@test "non-finite steps are skipped, then training stops without overwriting the checkpoint" {
    run "${T[@]}" -o m.ckpt --max-steps 2
    [ "$status" -eq 0 ]
    cp m.ckpt good.ckpt
    run "${T[@]}" -o m.ckpt --max-steps 20 --lr 1e30 --warmup 0 --max-bad 2 --force
    [ "$status" -eq 1 ]
    [[ "$output" == *"non-finite"*"not overwritten"* ]]
    cmp m.ckpt good.ckpt
}

@test "SIGTERM finishes the step, writes the checkpoint and says how to resume" {
    "${T[@]}" -o m.ckpt --epochs 100000 2> err.txt &
    pid=$!
    for i in $(seq 100); do [ -s m.ckpt ] && break; sleep 0.1; done
    sleep 1
    kill -TERM $pid
    st=0; wait $pid || st=$?
    [ "$st" -eq 1 ]
    grep -q "interrupted by signal 15 at step [0-9]*; checkpoint written to 'm.ckpt'.*--resume" err.txt
    [ -s m.ckpt ]
    step=$(grep -o 'at step [0-9]*' err.txt | grep -o '[0-9]*')
    run "${T[@]}" -o m.ckpt --resume --max-steps $((step + 1))
    [ "$status" -eq 0 ]
}

@test "off a terminal, --progress-every S prints plain progress lines (none within S seconds)" {
    run bash -c '"$@" 2> err.txt' _ nmt-train --preset tiny --d-model 32 --ff 64 --heads 2 --layers 1 --threads 1 \
        --warmup 20 -i "$D/tr.b" --vocab "$D/v.txt" -o p.ckpt --max-steps 3 --progress-every 0
    [ "$status" -eq 0 ]
    [ "$(grep -c '^nmt-train: step [0-9]*/3 ep 1 loss [0-9.]* lr [0-9.e+-]* [0-9]* tok/s elapsed [0-9]*m[0-9]*s' err.txt)" -eq 3 ]
    run bash -c '"$@" 2> err2.txt' _ nmt-train --preset tiny --d-model 32 --ff 64 --heads 2 --layers 1 --threads 1 \
        --warmup 20 -i "$D/tr.b" --vocab "$D/v.txt" -o p2.ckpt --max-steps 3
    [ "$status" -eq 0 ]
    [ "$(grep -c ': step [0-9]*/3' err2.txt)" -eq 0 ]
    [ "$(grep -c 'max-steps: 3 steps' err2.txt)" -eq 1 ]
}

@test "--lr given an absolute rate warns; --peak-lr sets the rate the schedule peaks at" {
    T0=(nmt-train --preset tiny --d-model 32 --ff 64 --heads 2 --layers 1 --threads 1 --vocab "$D/v.txt" -i "$D/tr.b")
    run "${T0[@]}" --lr 5e-4 --warmup 20 --max-steps 2 -o a.ckpt --progress-every 1e9
    [ "$status" -eq 0 ]
    [[ "$output" == *"warning: --lr 0.0005 is the scale of the schedule"*"use --peak-lr 0.0005"* ]]
    run "${T0[@]}" --lr 2 --warmup 20 --max-steps 2 -o b.ckpt -q
    [ "$status" -eq 0 ]
    [[ "$output" != *"warning"* ]]
    run "${T0[@]}" --peak-lr 1e-3 --warmup 20 --max-steps 25 -o c.ckpt -q --log c.csv
    [ "$status" -eq 0 ]
    [ "$(wc -l < c.csv)" -eq 26 ]
    # the learning rate column rises to 1e-3 at step 20 and falls after it
    awk -F, 'NR == 21 { d = $4 - 1e-3; if (d < 0) d = -d; ok = $1 == 20 && d < 1e-12 } NR > 1 && $4 > 1.000001e-3 { bad = 1 }
             END { exit !(ok && !bad) }' c.csv
    run "${T0[@]}" --peak-lr 1e-3 --lr 2 -o d.ckpt
    [ "$status" -eq 2 ]
    [[ "$output" == *"exclude each other"* ]]
}

@test "an existing checkpoint is neither overwritten nor resumed unless asked: --force replaces it" {
    run "${T[@]}" -o m.ckpt --max-steps 2
    [ "$status" -eq 0 ]
    cp m.ckpt first.ckpt
    run "${T[@]}" -o m.ckpt --max-steps 3 --seed 9
    [ "$status" -eq 1 ]
    [[ "$output" == *"'m.ckpt' exists: continue its training with --resume, or start afresh and replace it with --force"* ]]
    cmp m.ckpt first.ckpt
    run "${T[@]}" -o m.ckpt --max-steps 3 --seed 9 --force
    [ "$status" -eq 0 ]
    fails cmp -s m.ckpt first.ckpt
    run "${T[@]}" -o m.ckpt --max-steps 4 --resume --force
    [ "$status" -eq 2 ]
}

@test "--log - writes the CSV to stdout, --log /dev/stderr beside the messages" {
    run "${T[@]}" -o a.ckpt --max-steps 3 -q --log -
    [ "$status" -eq 0 ]
    [ "${lines[0]}" = "step,epoch,loss,lr,tokens,tokens_per_s,grad_norm,gflop_s,valid_loss,valid_ppl,valid_nll" ]
    [ "${#lines[@]}" -eq 4 ]
    [[ "${lines[3]}" == 3,1,* ]]
    "${T[@]}" -o b.ckpt --max-steps 2 -q --log /dev/stderr 2> err.txt > out.txt
    [ ! -s out.txt ]
    [ "$(grep -c '^[12],1,' err.txt)" -eq 2 ]
    run "${T[@]}" -o c.ckpt --max-steps 1 --log metrics.txt
    [ "$status" -eq 1 ]
    [[ "$output" == *"must end in .csv or .jsonl (or be - for stdout)"* ]]
}

@test "--resume on a stream skips the batches the first run consumed: the uninterrupted run's checkpoint" {
    T0=("${T[@]:0:${#T[@]}-2}")   # without -i: the batches come on stdin
    run "${T0[@]}" -o full.ckpt --max-steps 10 --no-shuffle < "$D/tr.b"
    [ "$status" -eq 0 ]
    run "${T0[@]}" -o part.ckpt --max-steps 4 --no-shuffle < "$D/tr.b"
    [ "$status" -eq 0 ]
    run "${T0[@]}" -o part.ckpt --max-steps 10 --no-shuffle --resume < "$D/tr.b"
    [ "$status" -eq 0 ]
    cmp full.ckpt part.ckpt
}
