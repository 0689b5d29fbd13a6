#!/usr/bin/env bats
# Several ranks under mpirun (Open MPI, installed by scripts/deps.sh): data-parallel nmt-train
# bit-identical to one process with --update-freq N, resume under another rank count, a killed
# rank, and nmt-decode sharded over ranks or over separate --shard jobs.

load common

setup_file() {
    export D="$BATS_FILE_TMPDIR"
    small_training_set
    zcat "$NMT_SRCDIR/data/multi30k/test_2016_flickr.en.gz" > "$D/test.en"
    # a small trained model (tests/fixtures/ref) that says something different for each sentence
    export MODEL="$NMT_SRCDIR/tests/fixtures/ref/decode/model.ckpt"
}

setup() {
    cd "$BATS_TEST_TMPDIR"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # under the sanitizer build: Open MPI keeps allocations to the end in components it has already
    # unloaded (so no suppression can name them); leaks are checked by every other suite
    export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
    MPI=(mpirun --oversubscribe --bind-to none)
    T0=(nmt-train --preset tiny --d-model 32 --ff 64 --heads 2 --layers 1 --threads 1 -q --warmup 20 --lr 2
        --vocab "$D/v.txt")
    T=("${T0[@]}" -i "$D/tr.b")
}

@test "mpirun -np 2 trains the checkpoint of one process with --update-freq 2, byte for byte" {
    run "${T[@]}" --max-steps 30 --update-freq 2 -o one.ckpt
    [ "$status" -eq 0 ]
    run "${MPI[@]}" -np 2 "${T[@]}" --max-steps 30 -o two.ckpt
    [ "$status" -eq 0 ]
    same_model one.ckpt two.ckpt
    # and not the model of --update-freq 1: the ranks did split the step
    run "${T[@]}" --max-steps 30 -o uf1.ckpt
    [ "$status" -eq 0 ]
    fails same_model one.ckpt uf1.ckpt
}

@test "mpirun -np 2 of a model with separate embedding matrices and an output bias equals --update-freq 2" {
    O=(--max-steps 12 --positions marian --start-embedding zero --activation swish --tied-embeddings none --output-bias)
    run "${T[@]}" "${O[@]}" --update-freq 2 -o one.ckpt
    [ "$status" -eq 0 ]
    run "${MPI[@]}" -np 2 "${T[@]}" "${O[@]}" -o two.ckpt
    [ "$status" -eq 0 ]
    same_model one.ckpt two.ckpt
    run "${MPI[@]}" -np 2 "${T[@]}" "${O[@]}" --overlap off -o three.ckpt
    [ "$status" -eq 0 ]
    same_model one.ckpt three.ckpt
}

@test "mpirun -np 3 equals --update-freq 3, with validation (and its BLEU) on the ranks" {
    run "${T[@]}" --max-steps 30 --update-freq 3 --valid "$D/va.b" --valid-every 10 --valid-bleu -o one.ckpt --log one.csv
    [ "$status" -eq 0 ]
    run "${MPI[@]}" -np 3 "${T[@]}" --max-steps 30 --valid "$D/va.b" --valid-every 10 --valid-bleu -o three.ckpt --log three.csv
    [ "$status" -eq 0 ]
    same_model one.ckpt three.ckpt
    same_model one.ckpt.best three.ckpt.best
    # the same validation losses, and one log (rank 0's) with 30 training and 3 validation rows
    diff <(cut -d, -f1,3,9,12 one.csv) <(cut -d, -f1,3,9,12 three.csv)
    [ "$(awk -F, 'NR > 1 && $12 != ""' three.csv | wc -l)" -eq 3 ]
    [ "$(grep -c '^[0-9]*,[0-9]*,,' three.csv)" -eq 3 ]
    [ "$(wc -l < three.csv)" -eq 34 ]
}

@test "mpirun -np 2 with --update-freq 2 equals one process with --update-freq 4" {
    run "${T[@]}" --max-steps 20 --update-freq 4 -o one.ckpt
    [ "$status" -eq 0 ]
    run "${MPI[@]}" -np 2 "${T[@]}" --max-steps 20 --update-freq 2 -o two.ckpt
    [ "$status" -eq 0 ]
    same_model one.ckpt two.ckpt
}

@test "--overlap: each layer's gradient sent during the backward pass, the checkpoint of --overlap off" {
    # 2 layers: buckets dec.1, dec.0, enc.1, enc.0, emb; rank 0 trains a micro-batch in each of the
    # 10 x 2 rounds, sending 5 buckets, 4 of them before its backward pass ends
    local V=(nmt-train --preset tiny --d-model 32 --ff 64 --heads 2 --layers 2 --threads 1 --warmup 20 --lr 2
             --vocab "$D/v.txt" -i "$D/tr.b" --max-steps 10)
    run "${MPI[@]}" -np 3 "${V[@]}" --update-freq 2 -o on.ckpt
    [ "$status" -eq 0 ]
    [[ "$output" == *"ordered reduction overlapped with the backward pass"* ]]
    [[ "$output" == *"; 100 gradient buckets sent, 80 of them during the backward pass ("* ]]
    run "${MPI[@]}" -np 3 "${V[@]}" --update-freq 2 --overlap off -o off.ckpt
    [ "$status" -eq 0 ]
    [[ "$output" != *"overlapped"* ]]
    [[ "$output" == *"; 20 gradient buckets sent, 0 of them during the backward pass ("* ]]
    same_model on.ckpt off.ckpt
    run "${V[@]}" -q --update-freq 6 -o one.ckpt
    [ "$status" -eq 0 ]
    same_model one.ckpt on.ckpt
    run nmt-train --overlap maybe -o x.ckpt --vocab "$D/v.txt"
    [ "$status" -eq 2 ]
    [[ "$output" == *"invalid --overlap 'maybe'"* ]]
}

@test "--reduce fast trains with the library's all-reduce (same tokens, close losses)" {
    run "${MPI[@]}" -np 2 "${T[@]}" --max-steps 20 --reduce fast -o fast.ckpt --log fast.csv
    [ "$status" -eq 0 ]
    run "${T[@]}" --max-steps 20 --update-freq 2 -o one.ckpt --log one.csv
    [ "$status" -eq 0 ]
    diff <(cut -d, -f1,5 one.csv) <(cut -d, -f1,5 fast.csv)
    paste -d, <(cut -d, -f3 one.csv) <(cut -d, -f3 fast.csv) | sed 1d |
        awk -F, '{d = $1 - $2; if (d < 0) d = -d; if (d > 1e-3) bad++; n++} END {exit !(n == 20 && bad == 0)}'
    run nmt-train --reduce sum -o x.ckpt --vocab "$D/v.txt"
    [ "$status" -eq 2 ]
    [[ "$output" == *"invalid --reduce 'sum'"* ]]
}

@test "SIGTERM to mpirun, then --resume under another rank count: the uninterrupted run's checkpoint" {
    # mpirun ends the job on SIGTERM by sending SIGCONT, then after odls_base_sigkill_timeout seconds
    # SIGTERM, then after as many again SIGKILL: 1 s by default, too soon for a step and a checkpoint
    # under the sanitizers on a busy machine; 10 s here
    OMPI_MCA_odls_base_sigkill_timeout=10 "${MPI[@]}" -np 2 "${T[@]}" --epochs 1000 --update-freq 3 -o run.ckpt \
        --log run.csv 2> err.txt &
    local pid=$!
    # signal after the 5th step (the log is written as the steps end)
    for _ in $(seq 600); do [ "$(cat run.csv 2>/dev/null | wc -l)" -gt 5 ] && break; sleep 0.05; done
    kill -TERM $pid
    local rc=0
    wait $pid || rc=$?
    [ "$rc" -eq 1 ]
    # the step of the checkpoint written at the signal, read from the checkpoint: mpirun may exit
    # before it forwards a rank's last line of stderr ("interrupted by signal 15 at step N"), and
    # train.bats checks that line without mpirun
    step=$(nmt-cat --header run.ckpt | awk -F '\t' '$1 == "train.step" {print $2}')
    cat err.txt # shown if the test fails
    [ "$step" -gt 5 ]
    # on to 12 steps past it, under 3 ranks; one process to the same step is the reference
    local end=$((step + 12))
    run "${MPI[@]}" -np 3 "${T[@]}" --epochs 1000 --update-freq 2 --resume --max-steps $end -o run.ckpt
    [ "$status" -eq 0 ]
    run "${T[@]}" --epochs 1000 --max-steps $end --update-freq 6 -o ref.ckpt
    [ "$status" -eq 0 ]
    same_model ref.ckpt run.ckpt
}

@test "a rank killed with SIGKILL ends every rank within seconds, with a message naming it" {
    "${MPI[@]}" -np 3 "${T[@]}" --epochs 1000 -o k.ckpt > out.txt 2>&1 &
    local pid=$!
    local victim=
    for _ in $(seq 100); do
        victim=$(pgrep -P $pid -f nmt-train | sed -n 2p || true)
        [ -n "$victim" ] && [ -e k.ckpt.lock ] && break
        sleep 0.1
    done
    [ -n "$victim" ]
    sleep 0.5
    kill -KILL "$victim"
    local rc=0 t0=$SECONDS
    wait $pid || rc=$?
    [ "$rc" -ne 0 ]
    # every rank ends (mpirun's SIGTERM, then SIGKILL): none left within 20 s of the kill
    while [ -n "$(pgrep -f "nmt-train.*k.ckpt" || true)" ] && [ $((SECONDS - t0)) -le 20 ]; do sleep 0.2; done
    [ -z "$(pgrep -f "nmt-train.*k.ckpt" || true)" ]
    [ $((SECONDS - t0)) -le 20 ]
    grep -q 'rank 1' out.txt
    grep -q 'signal 9' out.txt
    [ ! -e k.ckpt.lock ] || [ -z "$(pgrep -f "nmt-train.*k.ckpt" || true)" ]
}

@test "an error on one rank ends all of them with its message" {
    printf 'not a batch stream\n' > bad.b
    run timeout 60 "${MPI[@]}" -np 2 nmt-train --preset tiny --threads 1 -q --vocab "$D/v.txt" -i bad.b -o e.ckpt
    [ "$status" -ne 0 ]
    [ "$status" -ne 124 ]
    [[ "$output" == *"rank "*"bad.b"* ]]
    [ ! -e e.ckpt ]
}

@test "under several ranks, training batches from stdin are refused" {
    run timeout 60 "${MPI[@]}" -np 2 "${T0[@]}" --max-steps 2 -o s.ckpt < "$D/tr.b"
    [ "$status" -ne 0 ]
    [[ "$output" == *"must be a file every rank can read"* ]]
}

@test "mpirun -np 3 nmt-decode writes one process's output byte for byte (test_2016_flickr, beam 2)" {
    local DEC=(nmt-decode -m "$MODEL" --beam 2 --max-len-b 20)
    "${DEC[@]}" --threads 1 < "$D/test.en" > one.de
    [ "$(wc -l < one.de)" -eq 1000 ]
    [ "$(sort -u one.de | wc -l)" -ge 900 ]   # the model says something different for each
    "${MPI[@]}" -np 3 "${DEC[@]}" < "$D/test.en" > three.de
    cmp one.de three.de
    "${MPI[@]}" -np 2 "${DEC[@]}" -i "$D/test.en" -o two.de
    cmp one.de two.de
}

@test "mpirun nmt-decode: n-best hyp records and --score match one process" {
    local DEC=(nmt-decode -m "$MODEL" --max-len-b 20)
    head -300 "$D/test.en" > s.en
    "${DEC[@]}" --beam 3 --nbest 2 --out hyp -i s.en -o one.hyp
    "${MPI[@]}" -np 2 "${DEC[@]}" --beam 3 --nbest 2 --out hyp -i s.en -o two.hyp
    cmp one.hyp two.hyp
    [ "$(nmt-cat one.hyp | wc -l)" -eq 600 ]
    "${DEC[@]}" < s.en > s.de
    paste s.en s.de > pairs.tsv
    "${DEC[@]}" --score < pairs.tsv > one.sc
    "${MPI[@]}" -np 3 "${DEC[@]}" --score < pairs.tsv > three.sc
    cmp one.sc three.sc
    [ "$(wc -l < three.sc)" -eq 300 ]
}

@test "--shard K/N jobs merged with paste give one process's output" {
    local DEC=(nmt-decode -m "$MODEL" --beam 2 --max-len-b 20 --threads 1)
    head -301 "$D/test.en" > s.en
    "${DEC[@]}" < s.en > one.de
    for k in 1 2 3 4; do "${DEC[@]}" --shard $k/4 < s.en > "out.$k"; done
    [ "$(wc -l < out.1)" -eq 76 ]
    [ "$(wc -l < out.4)" -eq 75 ]
    paste -d '\n' out.1 out.2 out.3 out.4 | sed -n 1,301p | same_as one.de
    # line 2 of shard 2/4 is input line 6
    [ "$(sed -n 2p out.2)" = "$(sed -n 6p one.de)" ]
    run nmt-decode -m "$MODEL" --shard 5/4
    [ "$status" -eq 2 ]
    run nmt-decode -m "$MODEL" --shard 2
    [ "$status" -eq 2 ]
    [[ "$output" == *"expected K/N"* ]]
}

@test "one process never loads MPI; --comm none keeps a launched process alone" {
    # without a launcher the MPI module is not even loaded (the dynamic loader lists what it opens)
    LD_DEBUG=files "${T[@]}" --max-steps 2 -o a.ckpt 2> ld.txt
    grep -q 'nmt-backend-cpu.so' ld.txt
    run grep -c 'nmt-comm-mpi.so' ld.txt
    [ "$output" = 0 ]
    LD_DEBUG=files "${MPI[@]}" -np 2 "${T[@]}" --max-steps 2 -o b.ckpt 2> ld2.txt
    grep -q 'nmt-comm-mpi.so' ld2.txt
    # --comm none: two launched processes, each training alone (its own output)
    run "${MPI[@]}" -np 2 bash -c '"$@" -o c.$OMPI_COMM_WORLD_RANK.ckpt' _ "${T[@]}" --max-steps 2 --comm none
    [ "$status" -eq 0 ]
    same_model a.ckpt c.0.ckpt
    same_model a.ckpt c.1.ckpt
    run nmt-train --comm carrier-pigeon "${T[@]:1}" --max-steps 2 -o d.ckpt
    [ "$status" -ne 0 ]
    [[ "$output" == *"unknown communication module 'carrier-pigeon'"* ]]
}
