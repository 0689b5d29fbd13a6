#!/usr/bin/env bats
# The model options of Marian models (nmt-train --positions, --start-embedding, --activation,
# --tied-embeddings, --output-bias, --ln-eps): trained, stored in the checkpoint, resumed, decoded in
# every way (greedy, beam, scores, int8, shortlist-free batches) batch-invariantly; unknown values refused.
# A tiny model (d 32, 1+1 layers) on the first 300 pairs of the bundled Multi30k training set.

load common

setup_file() {
    export D="$BATS_FILE_TMPDIR"
    local M="$NMT_SRCDIR/data/multi30k"
    zcat "$M/train.en.gz" | sed -n 1,300p > "$D/tr.en"
    zcat "$M/train.de.gz" | sed -n 1,300p > "$D/tr.de"
    zcat "$M/test_2016_flickr.en.gz" | sed -n 1,15p > "$D/src.en"
    nmt-tokenize --src "$D/tr.en" --tgt "$D/tr.de" | nmt-vocab -s 320 -o "$D/v.txt" 2>/dev/null
    nmt-tokenize --src "$D/tr.en" --tgt "$D/tr.de" --vocab "$D/v.txt" | nmt-batch -t 600 -o "$D/tr.b" 2>/dev/null
    nmt-train --d-model 32 --ff 64 --heads 2 --layers 1 --threads 1 -q --warmup 20 --lr 2 --vocab "$D/v.txt" \
        -i "$D/tr.b" -o "$D/m.ckpt" --max-steps 30 --positions marian --start-embedding zero --activation swish \
        --tied-embeddings none --output-bias --ln-eps 1e-6
    export DEC="nmt-decode -m $D/m.ckpt --threads 2 --max-len-b 8"
}

setup() {
    cd "$BATS_TEST_TMPDIR"
    T=(nmt-train --d-model 32 --ff 64 --heads 2 --layers 1 --threads 1 -q --warmup 20 --lr 2
       --vocab "$D/v.txt" -i "$D/tr.b")
    MAR=(--positions marian --start-embedding zero --activation swish --tied-embeddings none --output-bias --ln-eps 1e-6)
}

# the value of metadata key $2 of checkpoint $1
meta() {
    local out; out=$(nmt-cat "$1")
    awk -F'\t' -v k="$2" '$1 == k { print $2 }' <<< "$out"
}

# the names of checkpoint $1's tensors, one a line
tensors() {
    python3 - "$1" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
print('\n'.join(k for k in h if k != '__metadata__'))
PY
}

@test "the checkpoint stores the options, and the tensors of the separate matrices and the bias" {
    [ "$(meta "$D/m.ckpt" model.positions)" = marian ]
    [ "$(meta "$D/m.ckpt" model.start_embedding)" = zero ]
    [ "$(meta "$D/m.ckpt" model.activation)" = swish ]
    [ "$(meta "$D/m.ckpt" model.tied_embeddings)" = none ]
    [ "$(meta "$D/m.ckpt" model.output_bias)" = 1 ]
    [ "$(meta "$D/m.ckpt" model.ln_eps)" = 9.99999997e-07 ]
    tensors "$D/m.ckpt" > names
    grep -qx dec_emb.weight names
    grep -qx out.weight names
    grep -qx out.bias names
    # a default model: every key written, no extra tensor
    run "${T[@]}" -o def.ckpt --max-steps 1
    [ "$status" -eq 0 ]
    [ "$(meta def.ckpt model.positions),$(meta def.ckpt model.start_embedding),$(meta def.ckpt model.activation)" = paper,bos,relu ]
    [ "$(meta def.ckpt model.tied_embeddings),$(meta def.ckpt model.output_bias)" = all,0 ]
    tensors def.ckpt > dnames
    [ "$(grep -c '^dec_emb\|^out\.' dnames)" -eq 0 ]
}

@test "--dump-config writes the options, and --config reads them back" {
    run "${T[@]}" -o x.ckpt "${MAR[@]}" --dump-config
    [ "$status" -eq 0 ]
    printf '%s\n' "$output" > cfg
    grep -qx 'positions: marian' cfg
    grep -qx 'start-embedding: zero' cfg
    grep -qx 'activation: swish' cfg
    grep -qx 'tied-embeddings: none' cfg
    grep -qx 'output-bias: true' cfg
    grep -qx 'ln-eps: 1e-06' cfg
    run nmt-train --config cfg --dump-config
    [ "$status" -eq 0 ]
    printf '%s\n' "$output" | same_as cfg
    run "${T[@]}" -o x.ckpt --dump-config
    [[ "$output" == *"positions: paper"*"start-embedding: bos"*"activation: relu"*"tied-embeddings: all"* ]]
}

@test "unknown values are refused by name: on the command line and in a checkpoint" {
    run "${T[@]}" -o x.ckpt --activation gelu
    [ "$status" -eq 2 ]
    [[ "$output" == *"--activation"*"gelu"* ]]
    run "${T[@]}" -o x.ckpt --tied-embeddings source
    [ "$status" -eq 2 ]
    [[ "$output" == *"--tied-embeddings"*"source"* ]]
    python3 - "$D/m.ckpt" odd.ckpt <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
h['__metadata__']['model.positions'] = 'rotary'
j = json.dumps(h).encode(); j += b' ' * (-len(j) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(j)) + j + b[8 + n:])
PY
    run nmt-decode -m odd.ckpt -i "$D/src.en"
    [ "$status" -eq 1 ]
    [[ "$output" == *"'rotary'"*"'model.positions'"* ]]
}

@test "--resume continues bit for bit; --init-from takes the options and refuses others" {
    O=(--max-steps 10 "${MAR[@]}" --tied-embeddings target)
    run "${T[@]}" "${O[@]}" -o a.ckpt
    [ "$status" -eq 0 ]
    run "${T[@]}" "${O[@]}" --max-steps 4 -o b.ckpt
    [ "$status" -eq 0 ]
    run "${T[@]}" "${O[@]}" --resume -o b.ckpt
    [ "$status" -eq 0 ]
    same_model a.ckpt b.ckpt
    [ "$(meta b.ckpt model.tied_embeddings)" = target ]
    run nmt-train -q --threads 1 --init-from a.ckpt -i "$D/tr.b" -o ft.ckpt --max-steps 1
    [ "$status" -eq 0 ]
    [ "$(meta ft.ckpt model.positions),$(meta ft.ckpt model.activation),$(meta ft.ckpt model.tied_embeddings)" = marian,swish,target ]
    run nmt-train -q --threads 1 --init-from a.ckpt -i "$D/tr.b" -o ft2.ckpt --max-steps 1 --activation relu
    [ "$status" -eq 1 ]
    [[ "$output" == *"other options"*"swish"*"relu"* ]]
}

@test "--freeze embeddings keeps every embedding matrix, the output projection and its bias" {
    run nmt-train -q --threads 1 --init-from "$D/m.ckpt" -i "$D/tr.b" -o fz.ckpt --max-steps 3 --freeze embeddings
    [ "$status" -eq 0 ]
    python3 - "$D/m.ckpt" fz.ckpt <<'PY'
import json, struct, sys
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]] for k, v in h.items() if k != '__metadata__'}
a, b = load(sys.argv[1]), load(sys.argv[2])
for k in ('emb.weight', 'dec_emb.weight', 'out.weight', 'out.bias'):
    assert a[k] == b[k], k
assert a['enc.0.ffn.w1.weight'] != b['enc.0.ffn.w1.weight']
PY
}

@test "decoding: greedy equals beam 1, beam 4 no worse, int8 runs, every one batch invariant" {
    $DEC --scores -i "$D/src.en" > g.txt
    [ "$(wc -l < g.txt)" -eq 15 ]
    $DEC --beam 1 --scores -i "$D/src.en" | same_as g.txt
    $DEC --scores --max-sentences 1 -i "$D/src.en" | same_as g.txt
    $DEC --scores --max-tokens 30 -i "$D/src.en" | same_as g.txt
    $DEC --beam 4 --scores -i "$D/src.en" > b4.txt
    $DEC --beam 4 --scores --max-sentences 1 -i "$D/src.en" | same_as b4.txt
    $DEC --beam 4 --scores --max-sentences 4 -i "$D/src.en" | same_as b4.txt
    paste <(cut -f1 g.txt) <(cut -f1 b4.txt) | awk -F'\t' '$2 + 1e-6 < $1 { print "line " NR ": " $0; bad = 1 } END { exit bad }'
    $DEC --precision int8 --scores -i "$D/src.en" > q.txt
    [ "$(wc -l < q.txt)" -eq 15 ]
    $DEC --precision int8 --scores --max-sentences 1 -i "$D/src.en" | same_as q.txt
    $DEC --batch-variant --scores -i "$D/src.en" > v.txt
    [ "$(wc -l < v.txt)" -eq 15 ]
}

@test "forced decoding (--score) of the greedy output: log-probabilities, batch invariant" {
    $DEC --scores -i "$D/src.en" | cut -f2 > hyp.de
    $DEC --score --src "$D/src.en" --tgt hyp.de > s.txt
    [ "$(wc -l < s.txt)" -eq 15 ]
    awk '$1 > 0 || $1 !~ /^-?[0-9]+\.[0-9]+$/ { print "bad " NR ": " $0; bad = 1 } END { exit bad }' s.txt
    $DEC --score --max-sentences 1 --src "$D/src.en" --tgt hyp.de | same_as s.txt
}

@test "an average of two checkpoints and an int8 checkpoint of the options decode" {
    run "${T[@]}" -o a.ckpt --max-steps 6 "${MAR[@]}" --tied-embeddings target --save-every 3 --keep 2
    [ "$status" -eq 0 ]
    run nmt-avg -o avg.ckpt a.ckpt.step-3 a.ckpt.step-6
    [ "$status" -eq 0 ]
    [ "$(meta avg.ckpt model.tied_embeddings)" = target ]
    run nmt-avg --quantize -o q.ckpt a.ckpt
    [ "$status" -eq 0 ]
    nmt-decode -m avg.ckpt --threads 2 --max-len-b 4 -i "$D/src.en" > avg.txt
    [ "$(wc -l < avg.txt)" -eq 15 ]
    nmt-decode -m q.ckpt --threads 2 --max-len-b 4 -i "$D/src.en" > q.txt
    [ "$(wc -l < q.txt)" -eq 15 ]
}

@test "--shortlist with an output bias: the whole vocabulary translates as no shortlist; small ones are batch-invariant" {
    nmt-avg --shortlist "$D/tr.b" --shortlist-targets 1 --shortlist-frequent 320 -o all.ckpt "$D/m.ckpt"
    nmt-avg --shortlist "$D/tr.b" --shortlist-targets 4 --shortlist-frequent 12 -o s.ckpt "$D/m.ckpt"
    for p in float32 int8; do
        for beam in 1 3; do
            nmt-decode -m all.ckpt --precision $p --beam $beam --scores --max-len-b 8 -i "$D/src.en" > none.out
            nmt-decode -m all.ckpt --precision $p --beam $beam --scores --max-len-b 8 --shortlist -i "$D/src.en" |
                same_as none.out
            nmt-decode -m s.ckpt --precision $p --beam $beam --scores --max-len-b 8 --shortlist --max-tokens 1 \
                -i "$D/src.en" > ref.out
            [ "$(wc -l < ref.out)" -eq 15 ]
            nmt-decode -m s.ckpt --precision $p --beam $beam --scores --max-len-b 8 --shortlist --max-tokens 64 \
                -i "$D/src.en" | same_as ref.out
        done
    done
}

@test "--shortlist over an untied output projection of 64 KiB or more (its float32 rows kept for the shortlist): the whole vocabulary translates as no shortlist" {
    # d 64: the output projection is 320 x 64 floats, 80 KiB, which nmt-decode gives back once packed
    # when no shortlist reads it
    run nmt-train --d-model 64 --ff 64 --heads 2 --layers 1 --threads 1 -q --warmup 20 --lr 2 --vocab "$D/v.txt" \
        -i "$D/tr.b" -o w.ckpt --max-steps 6 "${MAR[@]}"
    [ "$status" -eq 0 ]
    nmt-avg --shortlist "$D/tr.b" --shortlist-targets 1 --shortlist-frequent 320 -o all.ckpt w.ckpt
    for p in float32 int8; do
        nmt-decode -m all.ckpt --precision $p --beam 2 --scores --max-len-b 8 -i "$D/src.en" > none.out
        [ "$(wc -l < none.out)" -eq 15 ]
        nmt-decode -m all.ckpt --precision $p --beam 2 --scores --max-len-b 8 --shortlist -i "$D/src.en" > sl.out
        cmp none.out sl.out
    done
}
