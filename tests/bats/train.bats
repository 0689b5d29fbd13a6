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
    nmt-tokenize --src "$D/va.en" --tgt "$D/va.de" --vocab "$D/v.txt" | nmt-batch -t 100000 -o "$D/one.b" 2>/dev/null
}

setup() {
    cd "$BATS_TEST_TMPDIR"
    T=(nmt-train --preset tiny --d-model 32 --ff 64 --heads 2 --layers 1 --threads 1 -q --warmup 20 --lr 2
       --vocab "$D/v.txt" -i "$D/tr.b")
}

# step and loss columns of a CSV log (the timing columns differ between runs)
losses() { cut -d, -f1,3 "$1"; }
# fails, naming the step, unless every step's loss in log $2 is within 1% of log $1's
losses_within_1pc() {
    paste -d, <(losses "$1" | tail -n +2) <(losses "$2" | tail -n +2) |
        awk -F, '{ d = $2 - $4; if (d < 0) d = -d; if (d > 0.01 * $2) { print "step " $1 ": " $2 " vs " $4; bad = 1 } }
                 END { exit bad }'
}

@test "--help lists every option and exits 0" {
    run nmt-train --help
    [ "$status" -eq 0 ]
    [[ "$output" == Usage:\ nmt-train* ]]
    for o in --input --valid --output --vocab --resume --backend --threads --epochs --max-steps --max-time \
             --preset --layers --enc-layers --dec-layers --d-model --heads --ff --pre-norm --max-len --lr --warmup \
             --clip-norm --update-freq --seed --label-smoothing --dropout --attention-dropout --activation-dropout \
             --no-shuffle --max-bad --valid-every --patience --save-every --keep --log --log-every --quiet --help \
             --version --valid-bleu --valid-beam --config --dump-config --peak-lr --force --comm --reduce \
             --precision --overlap --gpu-comm --init-from --schedule --ema --freeze --save-init; do
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
    head -c 400 m.ckpt | tail -c +9 > m.head
    grep -q '"model.arch":"transformer"' m.head
    head -c 2000 m.ckpt > m.head
    grep -q '"vocab.fingerprint"' m.head
    [ "$(head -1 log.csv)" = "step,epoch,loss,lr,tokens,tokens_per_s,grad_norm,gflop_s,valid_loss,valid_ppl,valid_nll,valid_bleu" ]
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
    valid=$(grep '"valid_loss"' log.jsonl | grep '"valid_ppl"')
    grep -q '"valid_nll"' <<< "$valid"
    # the same fields in both logs: validation rows of the CSV have the 11 columns filled (12 with --valid-bleu)
    run "${T[@]}" -o m2.ckpt --max-steps 8 --valid "$D/va.b" --valid-every 4 --log log2.csv
    [ "$status" -eq 0 ]
    [ "$(awk -F, 'NR > 1 && NF == 12 && $9 != "" && $10 != "" && $11 != "" && $12 == ""' log2.csv | wc -l)" -eq 2 ]
    awk -F, 'NR > 1 && $11 != "" { d = exp($11) - $10; if (d < 0) d = -d; if (d > 1e-6 * $10) exit 1 }' log2.csv
    run "${T[@]}" -o m.ckpt --max-steps 12 --valid "$D/va.b" --valid-every 4 --force
    [ "$status" -eq 0 ]
}

@test "--log with another extension is a usage error, before any work" {
    run "${T[@]}" -o m.ckpt --max-steps 1 --log log.txt
    [ "$status" -eq 2 ]; [[ "$output" == *".csv or .jsonl"* ]]
    [ ! -e m.ckpt ]
    [ ! -e log.txt ]
    # a pipe or a device is written as it is, whatever its name
    run "${T[@]}" -o m.ckpt --max-steps 1 --log /dev/null
    [ "$status" -eq 0 ]
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
    same_model a.ckpt b.ckpt
}

@test "--save-init writes the model at step 0: resumed from it, training is that of a run from scratch" {
    run "${T[@]}" --max-steps 5 --attention-dropout 0.1 -o a.ckpt --log a.csv
    [ "$status" -eq 0 ]
    run "${T[@]}" --attention-dropout 0.1 -o b.ckpt --save-init
    [ "$status" -eq 0 ]; [ -z "$output" ]
    run nmt-cat --header b.ckpt
    [ "$status" -eq 0 ]
    [[ "$output" == *$'train.step\t0'* ]]
    [ ! -e b.csv ]
    run "${T[@]}" --attention-dropout 0.1 --resume --max-steps 5 -o b.ckpt --log b.csv
    [ "$status" -eq 0 ]
    [ "$(grep -c . b.csv)" -eq 6 ]
    diff <(losses a.csv) <(losses b.csv)
    same_model a.ckpt b.ckpt
    run "${T[@]}" -o c.ckpt --save-init --resume
    [ "$status" -eq 2 ]; [[ "$output" == *"--save-init writes a new model"* ]]
    [ ! -e c.ckpt ]
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
    [ "${lines[0]}" = "step,epoch,loss,lr,tokens,tokens_per_s,grad_norm,gflop_s,valid_loss,valid_ppl,valid_nll,valid_bleu" ]
    [ "${#lines[@]}" -eq 4 ]
    [[ "${lines[3]}" == 3,1,* ]]
    "${T[@]}" -o b.ckpt --max-steps 2 -q --log /dev/stderr 2> err.txt > out.txt
    [ ! -s out.txt ]
    [ "$(grep -c '^[12],1,' err.txt)" -eq 2 ]
    run "${T[@]}" -o c.ckpt --max-steps 1 --log metrics.txt
    [ "$status" -eq 2 ]
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
    same_model full.ckpt part.ckpt
}

@test "--valid-bleu logs the BLEU of greedy translations of the validation set, as nmt-decode and nmt-bleu score them" {
    # 12 pairs learnt by heart: BLEU 0.5-0.8 after 150 steps, 18-30 after 300 (seeds 1-3, every
    # instruction set)
    sed -n 1,12p "$D/tr.en" > s.en; sed -n 1,12p "$D/tr.de" > s.de
    nmt-tokenize --src s.en --tgt s.de --vocab "$D/v.txt" | nmt-batch -t 300 -o s.b 2>/dev/null
    run nmt-train --preset tiny --d-model 64 --ff 128 --heads 2 --layers 1 --threads 1 --warmup 30 --peak-lr 3e-3 \
        --dropout 0 --label-smoothing 0 --vocab "$D/v.txt" -i s.b -o m.ckpt --valid s.b --valid-bleu \
        --valid-every 150 --max-steps 300 --log l.csv
    [ "$status" -eq 0 ]
    [[ "$output" == *"step 300: valid loss "*" bleu "* ]]
    [ "$(grep -c ',,,,,,,' l.csv)" -eq 2 ]
    bleu=$(tail -1 l.csv | cut -d, -f12)
    awk -v b="$bleu" 'BEGIN { exit !(b > 2) }' # it learnt something: the score is not a constant
    nmt-decode -m m.ckpt --beam 1 < s.en > h.de
    [ "$(nmt-bleu -b -w 2 s.de < h.de)" = "$bleu" ]
    # the best checkpoint is the one of the best BLEU, and it records that score (in full: the log
    # rounds it to 2 decimals)
    cmp m.ckpt m.ckpt.best
    [ "$(printf %.2f "$(meta m.ckpt train.best_bleu)")" = "$bleu" ]
    # a larger beam translates differently
    run nmt-train --vocab "$D/v.txt" -i s.b -o m.ckpt --resume --valid s.b --valid-bleu --valid-beam 4 --max-steps 301 -q --log l4.csv
    [ "$status" -eq 0 ]
    [ "$(tail -1 l4.csv | cut -d, -f1)" = 301 ]
    run "${T[@]}" -o x.ckpt --valid-bleu
    [ "$status" -eq 2 ]; [[ "$output" == *"--valid-bleu needs --valid"* ]]
    run "${T[@]}" -o x.ckpt --valid "$D/va.b" --valid-bleu --valid-beam 0
    [ "$status" -eq 2 ]; [[ "$output" == *"invalid --valid-beam '0'"* ]]
}

@test "--patience counts validations without a better BLEU under --valid-bleu" {
    # the tiny model's BLEU stays 0 for its first steps while the nll falls: patience by nll goes on longer
    run "${T[@]}" -o n.ckpt --valid "$D/va.b" --valid-every 20 --max-steps 200 --patience 2 --log n.csv
    [ "$status" -eq 0 ]
    n=$(awk -F, '$11 != "" && NR > 1' n.csv | tail -1 | cut -d, -f1)
    [ "$n" -gt 60 ]
    run "${T[@]}" -o b.ckpt --valid "$D/va.b" --valid-every 20 --max-steps 200 --patience 2 --valid-bleu --log b.csv
    [ "$status" -eq 0 ]
    [ "$(awk -F, '$12 != "" && NR > 1' b.csv | cut -d, -f1 | tr '\n' ' ')" = "20 40 60 " ]
    [ "$(awk -F, '$12 != "" && NR > 1' b.csv | cut -d, -f12 | sort -u)" = "0.00" ]
}

@test "--config reads options as key: value or key = value; the command line wins; --dump-config round-trips" {
    printf '# a run\nmax-steps: 3\nlog = c.csv\nno-shuffle: true\npre-norm: false\n\nseed: 7\n' > run.conf
    run "${T[@]}" -o c.ckpt --config run.conf --seed 9 -q
    [ "$status" -eq 0 ]
    [ "$(grep -c . c.csv)" -eq 4 ]                       # max-steps and log from the file
    "${T[@]}" -o d.ckpt --max-steps 3 --no-shuffle --seed 9 -q
    same_model c.ckpt d.ckpt # seed 9 won
    # the dump names every option a configuration may hold, and reads back to itself
    "${T[@]}" -o c.ckpt --config run.conf --dump-config > full.conf
    for k in input valid output vocab backend comm log preset threads epochs max-steps max-time enc-layers dec-layers \
             d-model heads ff max-len warmup update-freq seed max-bad valid-every valid-beam patience save-every keep \
             log-every lr clip-norm label-smoothing dropout attention-dropout activation-dropout progress-every \
             pre-norm no-shuffle valid-bleu quiet reduce overlap; do
        grep -Eq "^(# )?$k:" full.conf || { echo "no $k"; return 1; }
    done
    grep -qx 'seed: 7' full.conf
    grep -qx 'd-model: 32' full.conf
    grep -qx 'no-shuffle: true' full.conf
    nmt-train --config full.conf --dump-config > again.conf
    cmp full.conf again.conf
    # the checkpoint stores the configuration of its run
    out=$(nmt-cat c.ckpt); grep -qx '	seed: 9' <<< "$out"
}

@test "--dump-config writes the options in --help's order; unset ones as comments; --peak-lr joins a dump" {
    nmt-train --vocab "$D/v.txt" -o x.ckpt --dump-config > d.conf
    nmt-train --help > help.txt
    grep -oE -- '^ +(-[a-zA-Z], )?--[a-z][a-z0-9-]*' help.txt | sed -E 's/.*--//' > help.keys
    sed -E 's/^# //; s/:.*//' d.conf > dump.keys
    # every key of the dump is an option of --help, and they come in its order
    awk 'NR == FNR { pos[$1] = FNR; next } !($1 in pos) { print "not in --help: " $1; bad = 1 }
         pos[$1] <= last { print "out of order: " $1; bad = 1 } { last = pos[$1] } END { exit bad }' help.keys dump.keys
    grep -qx '# lr:' d.conf
    grep -qx '# gpu-comm:' d.conf
    grep -qx 'overlap: on' d.conf
    nmt-train --config d.conf --peak-lr 0.001 --dump-config > p.conf
    grep -qx 'peak-lr: 0.001' p.conf
    [ "$(grep -c '^resume\|^force\|^layers:\|^help\|^config' d.conf)" -eq 0 ]
}

@test "--config errors name the file and the line and exit 2" {
    printf 'max-steps: 3\nbogus: 1\n' > a.conf
    run "${T[@]}" -o c.ckpt --config a.conf
    [ "$status" -eq 2 ]; [[ "$output" == *"a.conf:2: 'bogus' is not an option of the configuration"* ]]
    printf 'max-steps 3\n' > b.conf
    run "${T[@]}" -o c.ckpt --config b.conf
    [ "$status" -eq 2 ]; [[ "$output" == *"b.conf:1: expected 'key: value' or 'key = value'"* ]]
    printf 'seed: 1\nseed: 2\n' > c.conf
    run "${T[@]}" -o c.ckpt --config c.conf
    [ "$status" -eq 2 ]; [[ "$output" == *"c.conf:2: 'seed' is given twice"* ]]
    printf 'no-shuffle: maybe\n' > d.conf
    run "${T[@]}" -o c.ckpt --config d.conf
    [ "$status" -eq 2 ]; [[ "$output" == *"d.conf:1: 'no-shuffle' takes true or false, not 'maybe'"* ]]
    printf 'help: true\n' > e.conf
    run "${T[@]}" -o c.ckpt --config e.conf
    [ "$status" -eq 2 ]; [[ "$output" == *"e.conf:1: 'help' is not an option of the configuration"* ]]
    printf 'max-steps: x\n' > f.conf
    run "${T[@]}" -o c.ckpt --config f.conf
    [ "$status" -eq 2 ]; [[ "$output" == *"invalid --max-steps 'x'"* ]]
    run "${T[@]}" -o c.ckpt --config missing.conf
    [ "$status" -eq 2 ]; [[ "$output" == *"cannot open the configuration 'missing.conf'"* ]]
    [ ! -e c.ckpt ]
}

@test "--precision bf16 trains on cpu: close to float32, not equal; float32 unchanged" {
    "${T[@]}" -o f.ckpt --max-steps 6 --log f.csv
    "${T[@]}" -o f2.ckpt --max-steps 6 --log f2.csv --precision float32
    "${T[@]}" -o b.ckpt --max-steps 6 --log b.csv --precision bf16 2> err.txt
    same_model f.ckpt f2.ckpt
    [ ! -s err.txt ]
    cmp <(losses f.csv) <(losses f2.csv)
    run cmp <(losses f.csv) <(losses b.csv)
    [ "$status" -eq 1 ]
    losses_within_1pc f.csv b.csv
    out=$(nmt-cat b.ckpt); grep -q "precision: bf16" <<< "$out"
    [ "$(nmt-train --precision bf16 --vocab "$D/v.txt" -o x.ckpt --dump-config | grep '^precision:')" = "precision: bf16" ]
}

@test "--precision bf16 on an AMX CPU (the tile path, here on the tile emulation): within 1% of the sgemm emulation's losses, the same bits on 1 and 2 threads" {
    # the cpu plugin built with the tile instructions emulated (plugins/cpu/amx.h): its AMX path
    # here, its exact emulation on sgemm with NMT_CPU_ISA=avx2
    need_amxemu
    E=$AMXEMU
    NMT_CPU_ISA=avx2 "${T[@]}" --backend "$E" -o v.ckpt --max-steps 6 --log v.csv --precision bf16
    "${T[@]}" --backend "$E" -o a.ckpt --max-steps 6 --log a.csv --precision bf16
    "${T[@]}" --backend "$E" -o a2.ckpt --max-steps 6 --log a2.csv --precision bf16 --threads 2
    cmp <(losses a.csv) <(losses a2.csv)
    same_model a.ckpt a2.ckpt
    run cmp <(losses v.csv) <(losses a.csv)
    [ "$status" -eq 1 ]
    losses_within_1pc v.csv a.csv
}

@test "--precision bf16 with vdpbf16ps (AVX512-BF16; tiles off): within 1% of the sgemm emulation's losses, the same bits on 1 and 2 threads" {
    [[ " $(grep -m1 '^flags' /proc/cpuinfo) " == *" avx512_bf16 "* ]] || skip "this CPU lacks AVX512-BF16"
    # NMT_CPU_ISA=avx512vnni: vdpbf16ps, also on a CPU with tiles; avx2: the exact emulation on sgemm
    NMT_CPU_ISA=avx2 "${T[@]}" -o v.ckpt --max-steps 6 --log v.csv --precision bf16
    NMT_CPU_ISA=avx512vnni "${T[@]}" -o d.ckpt --max-steps 6 --log d.csv --precision bf16
    NMT_CPU_ISA=avx512vnni "${T[@]}" -o d2.ckpt --max-steps 6 --log d2.csv --precision bf16 --threads 2
    cmp <(losses d.csv) <(losses d2.csv)
    same_model d.ckpt d2.ckpt
    run cmp <(losses v.csv) <(losses d.csv)
    [ "$status" -eq 1 ]
    losses_within_1pc v.csv d.csv
}

@test "--precision bf16 resumes bit for bit like float32; the checkpoint stays float32" {
    O=(--max-steps 8 --attention-dropout 0.1 --precision bf16)
    "${T[@]}" "${O[@]}" -o a.ckpt --log a.csv
    "${T[@]}" "${O[@]}" -o r.ckpt --max-steps 4 --log r.csv
    "${T[@]}" "${O[@]}" -o r.ckpt --resume --log r.csv
    diff <(losses a.csv) <(losses r.csv)
    same_model a.ckpt r.ckpt
    out=$(nmt-cat a.ckpt); grep -q "enc.0.att.qkv.weight.*F32" <<< "$out"
}

@test "--precision: an unknown name is a usage error" {
    run "${T[@]}" -o m.ckpt --precision fp16
    [ "$status" -eq 2 ]
    [[ "$output" == *"invalid --precision 'fp16' (expected float32 or bf16)"* ]]
    [ ! -e m.ckpt ]
}

# prints the float32 tensors named after checkpoint $1 as Python lists, one a line (python3, standard library)
tensors() {
    python3 - "$@" <<'PY'
import array, json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
for k in sys.argv[2:]:
    o = h[k]['data_offsets']; a = array.array('f'); a.frombytes(b[8 + n + o[0]:8 + n + o[1]]); print(a.tolist())
PY
}

# the value of metadata key $2 of checkpoint $1
meta() {
    local out; out=$(nmt-cat "$1")
    awk -F'\t' -v k="$2" '$1 == k { print $2 }' <<< "$out"
}

@test "--init-from keeps the weights: step 1's loss is the source model's loss on the same batch" {
    run "${T[@]}" -o src.ckpt --max-steps 5 --valid "$D/one.b" --log src.csv
    [ "$status" -eq 0 ]
    want=$(tail -1 src.csv | cut -d, -f9)
    [ -n "$want" ]
    # the shape and the vocabulary come from the checkpoint; no dropout, so that training sees the validation's model
    run nmt-train -q --threads 1 --init-from src.ckpt -i "$D/one.b" -o ft.ckpt --max-steps 1 --dropout 0 --log ft.csv
    [ "$status" -eq 0 ]
    [ "$(sed -n 2p ft.csv | cut -d, -f1,3)" = "1,$want" ]
    [ "$(meta ft.ckpt train.step)" = 1 ]
    [ "$(meta ft.ckpt model.d_model)" = 32 ]
    [ "$(meta ft.ckpt vocab.fingerprint)" = "$(meta src.ckpt vocab.fingerprint)" ]
}

@test "--init-from starts a fresh optimizer: after one step the Adam moments are those of one gradient" {
    run "${T[@]}" -o src.ckpt --max-steps 5
    [ "$status" -eq 0 ]
    run nmt-train -q --threads 1 --init-from src.ckpt -i "$D/tr.b" -o ft.ckpt --max-steps 1
    [ "$status" -eq 0 ]
    # from zero moments, step 1 leaves m = 0.1 g and v = 0.02 g^2, so v = 2 m^2; carried moments would not
    check='import sys
m, v = (eval(l) for l in sys.stdin)
assert sum(x != 0 for x in m) > len(m) // 2
bad = [i for i in range(len(m)) if abs(v[i] - 2 * m[i] * m[i]) > 1e-4 * v[i] + 1e-30]
assert not bad, (len(bad), bad[:5])'
    t=$(tensors ft.ckpt optim.adam_m optim.adam_v)
    python3 -c "$check" <<< "$t"
    t=$(tensors src.ckpt optim.adam_m optim.adam_v)
    fails python3 -c "$check" <<< "$t" 2>/dev/null
}

@test "--init-from refuses another vocabulary by name, and needs an existing checkpoint" {
    run "${T[@]}" -o src.ckpt --max-steps 1
    [ "$status" -eq 0 ]
    run nmt-train -q --init-from src.ckpt --vocab "$D/v2.txt" -i "$D/tr.b" -o ft.ckpt --max-steps 1
    [ "$status" -eq 1 ]
    [[ "$output" == *"'$D/v2.txt'"*"differs from the one in 'src.ckpt'"* ]]
    run nmt-train -q --init-from src.ckpt --d-model 64 -i "$D/tr.b" -o ft.ckpt --max-steps 1
    [ "$status" -eq 1 ]; [[ "$output" == *"'src.ckpt' holds another model shape"* ]]
    run nmt-train -q --init-from none.ckpt -i "$D/tr.b" -o ft.ckpt --max-steps 1
    [ "$status" -eq 1 ]; [[ "$output" == *"cannot start"*"none.ckpt"* ]]
    [ ! -e ft.ckpt ]
}

@test "a run started --init-from resumes bit for bit: 3 then 6 steps equal 6 steps" {
    run "${T[@]}" -o src.ckpt --max-steps 4
    [ "$status" -eq 0 ]
    F=(nmt-train -q --threads 1 --init-from src.ckpt -i "$D/tr.b" --warmup 3 --lr 1 --max-steps 6)
    run "${F[@]}" -o a.ckpt --log a.csv
    [ "$status" -eq 0 ]
    run "${F[@]}" -o b.ckpt --log b.csv --max-steps 3
    [ "$status" -eq 0 ]
    run "${F[@]}" -o b.ckpt --log b.csv --resume
    [ "$status" -eq 0 ]
    diff <(losses a.csv) <(losses b.csv)
    same_model a.ckpt b.ckpt
}

# the lr column of CSV log $1 against the rates awk program $2 computes from t (the step): equal to 8 digits
lr_check() {
    awk -F, -v d=32 "NR > 1 && \$4 != \"\" { t = \$1; want = $2; if (want == 0 ? \$4 != 0 : (\$4 - want) / want > 1e-8 || (want - \$4) / want > 1e-8) { print \"step \" t \": lr \" \$4 \", expected \" want; bad = 1 } } END { exit bad }" "$1"
}

@test "--schedule constant warms up to the peak and stays; linear falls to 0 at --max-steps; inverse-sqrt as before" {
    run "${T[@]}" -o c.ckpt --max-steps 8 --warmup 4 --schedule constant --log c.csv
    [ "$status" -eq 0 ]
    [ "$(grep -c . c.csv)" -eq 9 ]
    lr_check c.csv '2 / sqrt(d) / 2 * (t < 4 ? t / 4 : 1)'
    run "${T[@]}" -o l.ckpt --max-steps 6 --warmup 2 --schedule linear --log l.csv
    [ "$status" -eq 0 ]
    lr_check l.csv '2 / sqrt(d) / sqrt(2) * (t < 2 ? t / 2 : (6 - t) / 4)'
    [ "$(tail -1 l.csv | cut -d, -f1,4)" = "6,0" ]
    [ "$(meta l.ckpt train.schedule)" = linear ]
    run "${T[@]}" -o i.ckpt --max-steps 6 --warmup 2 --schedule inverse-sqrt --log i.csv
    [ "$status" -eq 0 ]
    lr_check i.csv '2 / sqrt(d) * (t < 2 ? t * 2 ^ -1.5 : t ^ -0.5)'
    run "${T[@]}" -o l.ckpt --schedule linear --warmup 4 --max-steps 4
    [ "$status" -eq 2 ]; [[ "$output" == *"--schedule linear"*"--max-steps"* ]]
    run "${T[@]}" -o x.ckpt --schedule cosine
    [ "$status" -eq 2 ]; [[ "$output" == *"invalid --schedule 'cosine'"* ]]
}

@test "--ema: FILE.ema holds the average of the weights of every step, computed in float32" {
    run "${T[@]}" -o src.ckpt --max-steps 2
    [ "$status" -eq 0 ]
    run nmt-train -q --threads 1 --init-from src.ckpt -i "$D/tr.b" -o e.ckpt --max-steps 4 --ema 0.9 \
        --save-every 1 --keep 4
    [ "$status" -eq 0 ]
    [ "$(meta e.ckpt.ema weights)" = ema ]
    [ "$(meta e.ckpt train.ema)" = 0.90000000000000002 ]
    for k in 1 2 3 4; do [ -e e.ckpt.step-$k.ema ]; done
    # the average starts as the weights of --init-from, then takes in those of steps 1 to 4
    python3 - src.ckpt e.ckpt.step-1 e.ckpt.step-2 e.ckpt.step-3 e.ckpt.step-4 e.ckpt.ema <<'PY'
import array, json, struct, sys
def load(path):
    b = open(path, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); out = {}
    for k, v in h.items():
        if k != '__metadata__' and v['dtype'] == 'F32' and not k.startswith('optim.'):
            a = array.array('f'); a.frombytes(b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]]); out[k] = a
    return out
f32 = lambda x: struct.unpack('<f', struct.pack('<f', x))[0]
d = f32(0.9); c = f32(1 - d)
ema = {k: list(v) for k, v in load(sys.argv[1]).items()}
for path in sys.argv[2:6]:
    w = load(path)
    for k in ema:
        ema[k] = [f32(f32(d * e) + f32(c * x)) for e, x in zip(ema[k], w[k])]
got = load(sys.argv[6])
assert sorted(got) == sorted(ema), sorted(set(got) ^ set(ema))
for k in ema:
    bad = [i for i, (a, b) in enumerate(zip(got[k], ema[k])) if a != b]
    assert not bad, (k, len(bad), bad[:3], got[k][bad[0]], ema[k][bad[0]])
    assert got[k] != load(sys.argv[5])[k] or all(x == 0 for x in got[k]) or 'ln' in k, k
PY
}

@test "--ema: validation sees the average; FILE.ema decodes; resume is bit for bit" {
    run "${T[@]}" -o a.ckpt --max-steps 6 --ema 0.8 --valid "$D/one.b" --log a.csv
    [ "$status" -eq 0 ]
    want=$(tail -1 a.csv | cut -d, -f9)
    # the validated model is the average: a run from a.ckpt.ema has its loss at step 1 on that batch
    run nmt-train -q --threads 1 --init-from a.ckpt.ema -i "$D/one.b" -o f.ckpt --max-steps 1 --dropout 0 --log f.csv
    [ "$status" -eq 0 ]
    [ "$(sed -n 2p f.csv | cut -d, -f1,3)" = "1,$want" ]
    run nmt-decode -m a.ckpt.ema --threads 1 <<< "a man is walking ."
    [ "$status" -eq 0 ]; [ -n "$output" ]
    run "${T[@]}" -o b.ckpt --max-steps 3 --ema 0.8 --valid "$D/one.b" --log b.csv
    [ "$status" -eq 0 ]
    run "${T[@]}" -o b.ckpt --max-steps 6 --ema 0.8 --valid "$D/one.b" --log b.csv --resume
    [ "$status" -eq 0 ]
    # the training rows (b validated at step 3 too: swapping the average in and out changes nothing)
    diff <(awk -F, '$3 != "" { print $1 "," $3 }' a.csv) <(awk -F, '$3 != "" { print $1 "," $3 }' b.csv)
    same_model a.ckpt b.ckpt
    same_model a.ckpt.ema b.ckpt.ema
    run "${T[@]}" -o x.ckpt --ema 1
    [ "$status" -eq 2 ]; [[ "$output" == *"invalid --ema '1'"* ]]
}

@test "--freeze embeddings|encoder keeps those weights bit for bit; the others train" {
    run "${T[@]}" -o src.ckpt --max-steps 2
    [ "$status" -eq 0 ]
    F=(nmt-train -q --threads 1 --init-from src.ckpt -i "$D/tr.b" --max-steps 3)
    run "${F[@]}" -o e.ckpt --freeze embeddings
    [ "$status" -eq 0 ]
    run "${F[@]}" -o n.ckpt --freeze encoder
    [ "$status" -eq 0 ]
    run "${F[@]}" -o b.ckpt --freeze embeddings,encoder
    [ "$status" -eq 0 ]
    same() { [ "$(tensors "$1" "$3")" = "$(tensors "$2" "$3")" ]; }
    same src.ckpt e.ckpt emb.weight
    fails same src.ckpt e.ckpt enc.0.att.qkv.weight
    fails same src.ckpt e.ckpt dec.0.ffn.w1.weight
    same src.ckpt n.ckpt enc.0.att.qkv.weight
    same src.ckpt n.ckpt enc.0.ln2.bias
    fails same src.ckpt n.ckpt emb.weight
    fails same src.ckpt n.ckpt dec.0.cross_att.kv.weight
    same src.ckpt b.ckpt emb.weight
    same src.ckpt b.ckpt enc.0.ffn.w2.weight
    fails same src.ckpt b.ckpt dec.0.ffn.w2.weight
    run "${T[@]}" -o x.ckpt --freeze decoder
    [ "$status" -eq 2 ]; [[ "$output" == *"invalid --freeze 'decoder'"* ]]
}
