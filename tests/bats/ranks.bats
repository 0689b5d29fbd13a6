#!/usr/bin/env bats
# nmt-train --ranks N: data-parallel training as N processes on one machine without MPI
# (libcommon/run/comm_local.h), bit-identical to one process with --update-freq N, with validation,
# a signal and --resume under another rank count, a killed rank, and the errors.

load common

setup_file() {
    export D="$BATS_FILE_TMPDIR"
    small_training_set
}

setup() {
    cd "$BATS_TEST_TMPDIR"
    local B=(nmt-train --preset tiny --d-model 32 --ff 64 --heads 2 --layers 1 --threads 1 --warmup 20 --lr 2
             --vocab "$D/v.txt")
    T0=("${B[@]}" -q)
    T=("${T0[@]}" -i "$D/tr.b")
    TV=("${B[@]}" -i "$D/tr.b") # not quiet
}

@test "--ranks 2 trains the checkpoint of one process with --update-freq 2, byte for byte" {
    run "${T[@]}" --max-steps 30 --update-freq 2 -o one.ckpt
    [ "$status" -eq 0 ]
    run "${TV[@]}" --max-steps 30 --ranks 2 -o two.ckpt
    [ "$status" -eq 0 ]
    [[ "$output" == *"2 ranks (processes on this machine, shared memory), ordered reduction"* ]]
    [[ "$output" == *"max-steps: 30 steps"*"; peak resident memory of the 2 ranks together "*" MiB"* ]]
    same_model one.ckpt two.ckpt
    # and not the model of --update-freq 1: the ranks did split the step
    run "${T[@]}" --max-steps 30 -o uf1.ckpt
    [ "$status" -eq 0 ]
    fails same_model one.ckpt uf1.ckpt
    # --ranks 1 is one process
    run "${TV[@]}" --max-steps 30 --ranks 1 -o r1.ckpt
    [ "$status" -eq 0 ]
    [[ "$output" != *"ranks"* ]]
    same_model uf1.ckpt r1.ckpt
}

@test "--ranks 3 with --update-freq 2 equals --update-freq 6, with validation (and its BLEU) and one log" {
    local V=(--max-steps 12 --valid "$D/va.b" --valid-every 4 --valid-bleu)
    run "${T[@]}" "${V[@]}" --update-freq 6 -o one.ckpt --log one.csv
    [ "$status" -eq 0 ]
    run "${T[@]}" "${V[@]}" --ranks 3 --update-freq 2 -o three.ckpt --log three.csv
    [ "$status" -eq 0 ]
    same_model one.ckpt three.ckpt
    same_model one.ckpt.best three.ckpt.best
    # the same losses, validation losses and BLEU; 12 training and 3 validation rows
    diff <(cut -d, -f1,3,5,9,12 one.csv) <(cut -d, -f1,3,5,9,12 three.csv)
    [ "$(awk -F, 'NR > 1 && $12 != ""' three.csv | wc -l)" -eq 3 ]
    [ "$(wc -l < three.csv)" -eq 16 ]
}

@test "SIGTERM to nmt-train --ranks 2, then --resume under --ranks 3: the uninterrupted run's checkpoint" {
    "${T[@]}" --epochs 1000 --ranks 2 --update-freq 3 -o run.ckpt --log run.csv 2> err.txt &
    local pid=$!
    # signal rank 0 alone after the 5th step (the log is written as the steps end)
    for _ in $(seq 600); do [ "$(cat run.csv 2>/dev/null | wc -l)" -gt 5 ] && break; sleep 0.05; done
    kill -TERM $pid
    local rc=0
    wait $pid || rc=$?
    cat err.txt # shown if the test fails
    [ "$rc" -eq 1 ]
    grep -q "interrupted by signal 15 at step" err.txt
    step=$(nmt-cat --header run.ckpt | awk -F '\t' '$1 == "train.step" {print $2}')
    [ "$step" -gt 5 ]
    local end=$((step + 12))
    run "${T[@]}" --epochs 1000 --ranks 3 --update-freq 2 --resume --max-steps $end -o run.ckpt
    [ "$status" -eq 0 ]
    run "${T[@]}" --epochs 1000 --max-steps $end --update-freq 6 -o ref.ckpt
    [ "$status" -eq 0 ]
    same_model ref.ckpt run.ckpt
}

# Starts nmt-train --ranks 3 on a long run into k.ckpt (its pid in $pid, its messages in out.txt)
# and waits for its two other ranks ($ranks) and its first step.
start_three() {
    "${T[@]}" --epochs 1000 --ranks 3 -o k.ckpt --log k.csv > out.txt 2>&1 &
    pid=$!
    ranks=
    for _ in $(seq 200); do
        ranks=$(pgrep -P $pid -d ' ' || true)
        [ "$(wc -w <<< "$ranks")" -eq 2 ] && [ "$(cat k.csv 2>/dev/null | wc -l)" -gt 1 ] && break
        sleep 0.1
    done
    [ "$(wc -w <<< "$ranks")" -eq 2 ]
}

# Fails unless no process of the ranks started by start_three is left within 20 seconds.
none_left() {
    local t0=$SECONDS
    while [ -n "$(pgrep -f "nmt-train.*k.ckpt" || true)" ] && [ $((SECONDS - t0)) -le 20 ]; do sleep 0.2; done
    [ -z "$(pgrep -f "nmt-train.*k.ckpt" || true)" ]
}

@test "a rank killed with SIGKILL ends the job within seconds, with a message naming it" {
    start_three
    local victim=${ranks%% *}
    kill -KILL "$victim"
    local rc=0
    wait $pid || rc=$?
    cat out.txt # shown if the test fails
    [ "$rc" -eq 1 ]
    none_left
    grep -q "was killed by signal 9" out.txt
    [ ! -e k.ckpt.lock ]
}

@test "rank 0 killed with SIGKILL takes the other ranks with it" {
    start_three
    kill -KILL "$pid"
    wait $pid || true
    none_left
}

@test "--ranks: bad batches end every rank with the message; stdin, mpirun and 0 refused" {
    printf 'not a batch stream\n' > bad.b
    run timeout 60 nmt-train --preset tiny --threads 1 -q --vocab "$D/v.txt" -i bad.b -o e.ckpt --ranks 2
    [ "$status" -eq 1 ]
    [[ "$output" == *"rank 0: "*"bad.b"* ]]
    [ ! -e e.ckpt ]
    run timeout 60 "${T0[@]}" --max-steps 2 --ranks 2 -o s.ckpt < "$D/tr.b"
    [ "$status" -eq 1 ]
    [[ "$output" == *"must be a file every rank can read"* ]]
    run timeout 60 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
        mpirun --oversubscribe --bind-to none -np 2 "${T[@]}" --max-steps 2 --ranks 2 -o m.ckpt
    [ "$status" -ne 0 ]
    [[ "$output" == *"--ranks 2 starts its own ranks, but this process is one of 2 started by mpirun"* ]]
    run nmt-train --ranks 0 --vocab "$D/v.txt" -o z.ckpt
    [ "$status" -eq 2 ]
    [[ "$output" == *"--ranks"* ]]
}
