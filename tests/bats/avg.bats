#!/usr/bin/env bats
# nmt-avg: averaging checkpoints written by nmt-train.

load common

setup_file() {
    export D="$BATS_FILE_TMPDIR"
    zcat "$NMT_SRCDIR/data/multi30k/train.en.gz" | sed -n 1,400p > "$D/en"
    zcat "$NMT_SRCDIR/data/multi30k/train.de.gz" | sed -n 1,400p > "$D/de"
    nmt-tokenize --src "$D/en" --tgt "$D/de" | nmt-vocab --size 600 -o "$D/v.bpe"
    nmt-tokenize --vocab "$D/v.bpe" --src "$D/en" --tgt "$D/de" | nmt-batch --max-tokens 1024 > "$D/b" 2>/dev/null
    nmt-train -q -i "$D/b" --vocab "$D/v.bpe" -o "$D/m.ckpt" --d-model 16 --heads 2 --ff 32 --layers 1 \
        --lr 5 --warmup 10 --max-steps 6 --save-every 2 --keep 3 2>/dev/null
    nmt-train -q -i "$D/b" --vocab "$D/v.bpe" -o "$D/other.ckpt" --d-model 32 --heads 2 --ff 32 --layers 1 \
        --max-steps 1 2>/dev/null
}

# prints the named float32 tensor of a checkpoint, one value a line (python3, standard library)
tensor() {
    python3 - "$1" "$2" <<'PY'
import array, json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
o = h[sys.argv[2]]['data_offsets']; a = array.array('f'); a.frombytes(b[8 + n + o[0]:8 + n + o[1]])
print('\n'.join(repr(x) for x in a))
PY
}

@test "averages every parameter element by element" {
    run nmt-avg -o "$D/avg.ckpt" "$D/m.ckpt.step-2" "$D/m.ckpt.step-4" "$D/m.ckpt.step-6"
    [ "$status" -eq 0 ]
    python3 - "$D" <<'PY'
import array, json, struct, sys
d = sys.argv[1]
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; return b, n, json.loads(b[8:8 + n])
def t(f, name):
    b, n, h = load(f); o = h[name]['data_offsets']; a = array.array('f'); a.frombytes(b[8 + n + o[0]:8 + n + o[1]]); return a
b, n, h = load(d + '/avg.ckpt')
ins = [d + '/m.ckpt.step-%d' % s for s in (2, 4, 6)]
names = [k for k, v in h.items() if k != '__metadata__' and v['dtype'] == 'F32']
assert len(names) > 10, names
worst = 0.0
for name in names:
    xs = [t(f, name) for f in ins]; av = t(d + '/avg.ckpt', name)
    for i in range(len(av)):
        worst = max(worst, abs((xs[0][i] + xs[1][i] + xs[2][i]) / 3 - av[i]))
assert worst < 1e-6, worst
assert not any(k.startswith('optim.') for k in h), 'optimizer state left in'
assert h['__metadata__']['avg.checkpoints'] == '3'
assert 'vocab.file' in h
PY
}

@test "the inputs differ, so the average differs from each" {
    nmt-avg -o "$D/avg.ckpt" "$D/m.ckpt.step-2" "$D/m.ckpt.step-6"
    fails cmp -s <(tensor "$D/avg.ckpt" emb.weight) <(tensor "$D/m.ckpt.step-6" emb.weight)
    fails cmp -s <(tensor "$D/avg.ckpt" emb.weight) <(tensor "$D/m.ckpt.step-2" emb.weight)
}

@test "averaging one checkpoint keeps its parameters" {
    nmt-avg -o "$D/one.ckpt" "$D/m.ckpt"
    cmp <(tensor "$D/one.ckpt" emb.weight) <(tensor "$D/m.ckpt" emb.weight)
}

@test "checkpoints of different shapes are refused" {
    run nmt-avg -o "$D/x.ckpt" "$D/m.ckpt" "$D/other.ckpt"
    [ "$status" -eq 1 ]
    [[ "$output" == "nmt-avg: $D/m.ckpt: model.d_model is 16, but 32 in $D/other.ckpt" ]]
    [ ! -e "$D/x.ckpt" ]
}

@test "a file that is not a checkpoint, or a missing one, is refused" {
    run nmt-avg -o "$D/x.ckpt" "$D/b"
    [ "$status" -eq 1 ]
    [[ "$output" == "nmt-avg: $D/b: "* ]]
    run nmt-avg -o "$D/x.ckpt" "$D/nope"
    [ "$status" -eq 1 ]
    [[ "$output" == *"nope"* ]]
}

@test "usage errors" {
    run nmt-avg "$D/m.ckpt"
    [ "$status" -eq 2 ]
    [[ "${lines[0]}" == "nmt-avg: missing -o OUT" ]]
    run nmt-avg -o "$D/x.ckpt"
    [ "$status" -eq 2 ]
    run nmt-avg --help
    [ "$status" -eq 0 ]
}
