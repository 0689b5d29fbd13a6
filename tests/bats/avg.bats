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

# rewrites checkpoint $1 into $2 with python3 (standard library): $3 is a Python statement run on h
# (the header, a dict) and t (tensor name -> bytearray of its data); the file is laid out afresh
rewrite() {
    python3 - "$1" "$2" "$3" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
t = {k: bytearray(b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]]) for k, v in h.items() if k != '__metadata__'}
exec(sys.argv[3])
off, data = 0, b''
for k in [k for k in h if k != '__metadata__']:
    h[k]['data_offsets'] = [off, off + len(t[k])]; off += len(t[k]); data += bytes(t[k])
hb = json.dumps(h).encode(); hb += b' ' * (-len(hb) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(hb)) + hb + data)
PY
}

@test "--quantize: linear weights in int8 with a scale a row, the embedding float32; a smaller file" {
    nmt-avg -o "$D/f.ckpt" "$D/m.ckpt"
    nmt-avg --quantize -o "$D/q.ckpt" "$D/m.ckpt"
    python3 - "$D/q.ckpt" "$D/f.ckpt" <<'PY'
import array, json, struct, sys
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; return b, n, json.loads(b[8:8 + n])
b, n, h = load(sys.argv[1]); fb, fn, fh = load(sys.argv[2])
q = [k for k, v in h.items() if k != '__metadata__' and v['dtype'] == 'I8']
assert sorted(q) == sorted(k for k, v in fh.items() if k.endswith('.weight') and len(v['shape']) == 2 and k != 'emb.weight'), q
assert h['emb.weight']['dtype'] == 'F32' and h['__metadata__']['quantized'] == 'int8'
worst = 0.0
for k in q:
    o = h[k]['data_offsets']; qs = array.array('b'); qs.frombytes(b[8 + n + o[0]:8 + n + o[1]])
    o = h[k + '.scale']['data_offsets']; sc = array.array('f'); sc.frombytes(b[8 + n + o[0]:8 + n + o[1]])
    o = fh[k]['data_offsets']; w = array.array('f'); w.frombytes(fb[8 + fn + o[0]:8 + fn + o[1]])
    rows, cols = h[k]['shape']
    assert len(sc) == rows and min(qs) >= -127 and max(qs) <= 127
    for r in range(rows):
        m = max(abs(x) for x in w[r * cols:(r + 1) * cols])
        assert max(abs(x) for x in qs[r * cols:(r + 1) * cols]) == 127
        for c in range(cols):
            worst = max(worst, abs(qs[r * cols + c] * sc[r] - w[r * cols + c]) / m)
assert worst <= 0.5 / 127 + 1e-6, worst
PY
    [ "$(stat -c %s "$D/q.ckpt")" -lt "$(stat -c %s "$D/f.ckpt")" ]
}

@test "--quantize: nmt-decode reads it; int8 decoding gives the same bytes as from the float32 checkpoint" {
    nmt-avg -o "$D/f.ckpt" "$D/m.ckpt"
    nmt-avg --quantize -o "$D/q.ckpt" "$D/m.ckpt"
    head -20 "$D/en" > "$D/src"
    for p in int8 int8-all; do
        nmt-decode -m "$D/f.ckpt" --precision $p --scores --max-len-b 5 -i "$D/src" > "$D/out.f"
        nmt-decode -m "$D/q.ckpt" --precision $p --scores --max-len-b 5 -i "$D/src" > "$D/out.q"
        [ "$(wc -l < "$D/out.q")" -eq 20 ]
        cmp "$D/out.f" "$D/out.q"
    done
    nmt-decode -m "$D/q.ckpt" --scores --max-len-b 5 -i "$D/src" > "$D/out.q32"
    [ "$(wc -l < "$D/out.q32")" -eq 20 ]
}

@test "--quantize: with --precision bf16 (on AVX512-BF16) the int8 values are what is rounded: the bytes of their float32 copy" {
    [[ " $(grep -m1 '^flags' /proc/cpuinfo) " == *" avx512_bf16 "* ]] || skip "this CPU lacks AVX512-BF16"
    nmt-avg --quantize -o "$D/q.ckpt" "$D/m.ckpt"
    rewrite "$D/q.ckpt" "$D/dq.ckpt" "
import array
for k in [k for k in h if k != '__metadata__' and h[k]['dtype'] == 'I8']:
    q = array.array('b', bytes(t[k])); s = array.array('f', bytes(t.pop(k + '.scale'))); del h[k + '.scale']
    cols = h[k]['shape'][1]
    t[k] = bytearray(array.array('f', [q[i] * s[i // cols] for i in range(len(q))]).tobytes()); h[k]['dtype'] = 'F32'
for m in ('quantized', 'quantized.rounding'):
    h['__metadata__'].pop(m, None)"
    head -20 "$D/en" > "$D/src"
    nmt-decode -m "$D/q.ckpt" --precision bf16 --scores --max-len-b 5 -i "$D/src" > "$D/out.q"
    nmt-decode -m "$D/dq.ckpt" --precision bf16 --scores --max-len-b 5 -i "$D/src" > "$D/out.dq"
    nmt-decode -m "$D/m.ckpt" --precision bf16 --scores --max-len-b 5 -i "$D/src" > "$D/out.f"
    [ "$(wc -l < "$D/out.q")" -eq 20 ]
    cmp "$D/out.q" "$D/out.dq"
    ! cmp -s "$D/out.q" "$D/out.f" # the scores show the int8 weights' rounding
}

@test "--quantize: an int8 checkpoint is not averaged again" {
    nmt-avg --quantize -o "$D/q.ckpt" "$D/m.ckpt"
    run nmt-avg -o "$D/qq.ckpt" "$D/q.ckpt"
    [ "$status" -eq 1 ]
    [[ "${lines[0]}" == "nmt-avg: $D/q.ckpt: tensor "*" is stored in int8 (nmt-avg --quantize): average float32 checkpoints" ]]
}

@test "hostile int8 checkpoints are refused, naming the tensor: wrong scale count, zero, negative or non-finite scale, -128, no scales" {
    nmt-avg --quantize -o "$D/q.ckpt" "$D/m.ckpt"
    head -3 "$D/en" > "$D/src"
    W=enc.0.ffn.w1.weight
    rewrite "$D/q.ckpt" "$D/h1.ckpt" "t['$W.scale'] = t['$W.scale'][:-4]; h['$W.scale']['shape'][0] -= 1"
    run nmt-decode -m "$D/h1.ckpt" -i "$D/src"
    [ "$status" -eq 1 ]
    [[ "${lines[0]}" == *"'$W.scale' must hold 32 float32 scales, one a row of '$W'" ]]
    for v in 0.0 -1.0; do
        rewrite "$D/q.ckpt" "$D/h2.ckpt" "t['$W.scale'][8:12] = struct.pack('<f', $v)"
        run nmt-decode -m "$D/h2.ckpt" -i "$D/src"
        [ "$status" -eq 1 ]
        [[ "${lines[0]}" == *"scale 2 of '$W' is "*", not a positive finite number" ]]
    done
    rewrite "$D/q.ckpt" "$D/h3.ckpt" "t['$W.scale'][0:4] = struct.pack('<f', float('nan'))"
    run nmt-decode -m "$D/h3.ckpt" -i "$D/src"
    [ "$status" -eq 1 ]
    [[ "${lines[0]}" == *"tensor '$W.scale' holds a non-finite value (element 0)"* ]]
    rewrite "$D/q.ckpt" "$D/h4.ckpt" "t['$W'][5] = 0x80"
    run nmt-decode -m "$D/h4.ckpt" -i "$D/src"
    [ "$status" -eq 1 ]
    [[ "${lines[0]}" == *"int8 tensor '$W' holds -128 (element 5; values are -127..127)" ]]
    rewrite "$D/q.ckpt" "$D/h5.ckpt" "del h['$W.scale']; del t['$W.scale']"
    run nmt-decode -m "$D/h5.ckpt" -i "$D/src"
    [ "$status" -eq 1 ]
    [[ "${lines[0]}" == *"int8 tensor '$W' has no scales ('$W.scale')" ]]
    # the untouched file decodes
    run nmt-decode -m "$D/q.ckpt" -i "$D/src"
    [ "$status" -eq 0 ]
}

@test "--calibrate: GPTQ-rounded int8 weights on the grid of --quantize, closer to float32 on the calibration pairs" {
    nmt-avg -o "$D/f.ckpt" "$D/m.ckpt"
    nmt-avg --quantize -o "$D/q.ckpt" "$D/m.ckpt"
    nmt-avg --quantize --calibrate "$D/b" --threads 1 -o "$D/g.ckpt" "$D/m.ckpt"
    python3 - "$D/g.ckpt" "$D/q.ckpt" <<'PY'
import array, json, struct, sys
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; return b, n, json.loads(b[8:8 + n])
def t(f, k, code):
    b, n, h = f; o = h[k]['data_offsets']; a = array.array(code); a.frombytes(b[8 + n + o[0]:8 + n + o[1]]); return a
g, q = load(sys.argv[1]), load(sys.argv[2])
assert g[2]['__metadata__']['quantized'] == 'int8' and g[2]['__metadata__']['quantized.rounding'] == 'gptq'
assert q[2]['__metadata__']['quantized.rounding'] == 'nearest'
names = [k for k, v in g[2].items() if k != '__metadata__' and v['dtype'] == 'I8']
assert sorted(names) == sorted(k for k, v in q[2].items() if k != '__metadata__' and v['dtype'] == 'I8')
moved = 0
for k in names:
    assert t(g, k + '.scale', 'f') == t(q, k + '.scale', 'f'), k
    qg, qq = t(g, k, 'b'), t(q, k, 'b'); rows, cols = g[2][k]['shape']
    for r in range(rows):
        assert max(abs(x) for x in qg[r * cols:(r + 1) * cols]) == 127, (k, r)
    moved += sum(a != b for a, b in zip(qg, qq))
assert moved > 0
PY
    # log-probabilities of the calibration pairs: GPTQ's weights stray less from float32's
    sed -n 1,200p "$D/en" > "$D/cal.en"
    sed -n 1,200p "$D/de" > "$D/cal.de"
    for m in f q g; do
        nmt-decode -m "$D/$m.ckpt" --score --src "$D/cal.en" --tgt "$D/cal.de" > "$D/score.$m"
        [ "$(wc -l < "$D/score.$m")" -eq 200 ]
    done
    dq=$(paste "$D/score.f" "$D/score.q" | awk '{d = $1 - $2; s += d < 0 ? -d : d} END {print s}')
    dg=$(paste "$D/score.f" "$D/score.g" | awk '{d = $1 - $2; s += d < 0 ? -d : d} END {print s}')
    echo "sum |lp - lp float32|: nearest $dq, GPTQ $dg"
    awk -v q="$dq" -v g="$dg" 'BEGIN {exit !(g < q)}'
    nmt-decode -m "$D/g.ckpt" --precision int8 --max-len-b 5 -i "$D/cal.en" > "$D/out.g"
    [ "$(wc -l < "$D/out.g")" -eq 200 ]
}

@test "--calibrate: needs --quantize; bad calibration data is refused by name and nothing is written" {
    run nmt-avg --calibrate "$D/b" -o "$D/c.ckpt" "$D/m.ckpt"
    [ "$status" -eq 2 ]
    [[ "${lines[0]}" == "nmt-avg: --calibrate rounds int8 weights: it needs --quantize" ]]
    run nmt-avg --quantize --calibrate "$D/none.b" -o "$D/c.ckpt" "$D/m.ckpt"
    [ "$status" -eq 1 ]
    [[ "${lines[0]}" == "nmt-avg: "*"$D/none.b"* ]]
    run nmt-avg --quantize --calibrate "$D/en" -o "$D/c.ckpt" "$D/m.ckpt"
    [ "$status" -eq 1 ]
    [[ "${lines[0]}" == "nmt-avg: "*"$D/en"*"plain text"* ]]
    nmt-tokenize --src "$D/en" --tgt "$D/de" | nmt-vocab --size 500 -o "$D/v2.bpe"
    nmt-tokenize --vocab "$D/v2.bpe" --src "$D/en" --tgt "$D/de" | nmt-batch --max-tokens 1024 > "$D/b2" 2> /dev/null
    run nmt-avg --quantize --calibrate "$D/b2" -o "$D/c.ckpt" "$D/m.ckpt"
    [ "$status" -eq 1 ]
    [[ "${lines[0]}" == "nmt-avg: $D/b2: vocab fingerprint "*" differs from the model's ("*")" ]]
    nmt-tokenize --vocab "$D/v.bpe" < /dev/null | nmt-batch > "$D/empty.b" 2> /dev/null
    run nmt-avg --quantize --calibrate "$D/empty.b" -o "$D/c.ckpt" "$D/m.ckpt"
    [ "$status" -eq 1 ]
    [[ "${lines[0]}" == "nmt-avg: $D/empty.b: no batches"* ]]
    run nmt-avg --quantize --calibrate "$D/b" --threads x -o "$D/c.ckpt" "$D/m.ckpt"
    [ "$status" -eq 2 ]
    [ ! -e "$D/c.ckpt" ]
}

@test "--shortlist: a table of target pieces a source piece and the most frequent ones, as I32 tensors" {
    nmt-avg --shortlist "$D/b" --shortlist-targets 7 --shortlist-frequent 30 -o "$D/s.ckpt" "$D/m.ckpt"
    python3 - "$D/s.ckpt" <<'PY'
import array, json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
def t(k):
    o = h[k]['data_offsets']; a = array.array('i'); a.frombytes(b[8 + n + o[0]:8 + n + o[1]]); return a
V = int(h['__metadata__']['model.vocab'])
assert h['shortlist.table']['dtype'] == 'I32' and h['shortlist.table']['shape'] == [V, 7]
assert h['shortlist.frequent']['dtype'] == 'I32' and h['shortlist.frequent']['shape'] == [30]
tab, fr = t('shortlist.table'), t('shortlist.frequent')
assert len(set(fr)) == 30 and all(0 <= x < V for x in fr)
full = 0
for s in range(V):
    row = list(tab[s * 7:(s + 1) * 7]); ids = [x for x in row if x >= 0]
    assert row == ids + [-1] * (7 - len(ids)) and len(set(ids)) == len(ids), s
    assert not set(ids) & set(fr) and all(x < V for x in ids), s
    full += len(ids) == 7
assert full > 50, full
PY
    # the parameters are the average's, and averaging again replaces the shortlist
    nmt-avg -o "$D/f.ckpt" "$D/m.ckpt"
    [ "$(tensor "$D/s.ckpt" emb.weight | md5sum)" = "$(tensor "$D/f.ckpt" emb.weight | md5sum)" ]
    nmt-avg --shortlist "$D/b" --shortlist-frequent 600 -o "$D/s2.ckpt" "$D/s.ckpt"
    nmt-cat --header "$D/s2.ckpt" > /dev/null
    run nmt-cat "$D/s2.ckpt"
    [[ "$output" == *"shortlist.frequent"*"600"* ]]
}

@test "--shortlist decoding: the whole vocabulary translates as no shortlist, byte for byte; small ones are batch-invariant" {
    head -40 "$D/en" > "$D/src"
    nmt-avg --shortlist "$D/b" --shortlist-targets 1 --shortlist-frequent 600 -o "$D/all.ckpt" "$D/m.ckpt"
    for p in float32 int8; do
        for beam in 1 3; do
            nmt-decode -m "$D/all.ckpt" --precision $p --beam $beam --scores -i "$D/src" > "$D/none.out"
            nmt-decode -m "$D/all.ckpt" --precision $p --beam $beam --scores --shortlist -i "$D/src" > "$D/all.out"
            cmp "$D/none.out" "$D/all.out"
        done
    done
    nmt-avg --shortlist "$D/b" --shortlist-targets 4 --shortlist-frequent 12 -o "$D/s.ckpt" "$D/m.ckpt"
    for p in float32 int8; do
        for beam in 1 3; do
            nmt-decode -m "$D/s.ckpt" --precision $p --beam $beam --scores --shortlist --max-tokens 1 -i "$D/src" > "$D/ref.out"
            [ "$(wc -l < "$D/ref.out")" -eq 40 ]
            for opts in "--max-tokens 7" "--max-tokens 64" "--max-tokens 64 --jobs 2 --threads 2"; do
                nmt-decode -m "$D/s.ckpt" --precision $p --beam $beam --scores --shortlist $opts -i "$D/src" > "$D/b.out"
                cmp "$D/ref.out" "$D/b.out"
            done
        done
    done
    # the softmax is over the candidates: scores change; an ensemble shares the first model's shortlist
    nmt-decode -m "$D/s.ckpt" --scores -i "$D/src" > "$D/full.out"
    fails cmp -s "$D/full.out" "$D/ref.out"
    nmt-decode -m "$D/s.ckpt" -m "$D/m.ckpt" --beam 3 --shortlist --max-tokens 1 -i "$D/src" > "$D/e1.out"
    nmt-decode -m "$D/s.ckpt" -m "$D/m.ckpt" --beam 3 --shortlist --max-tokens 64 -i "$D/src" > "$D/e2.out"
    [ "$(wc -l < "$D/e1.out")" -eq 40 ]
    cmp "$D/e1.out" "$D/e2.out"
}

@test "--shortlist errors: no shortlist in the model, --score, bad counting data, options without --shortlist" {
    head -3 "$D/en" > "$D/src"
    run nmt-decode -m "$D/m.ckpt" --shortlist -i "$D/src"
    [ "$status" -eq 1 ]
    [[ "${lines[0]}" == "nmt-decode: $D/m.ckpt: no vocabulary shortlist (tensor shortlist.table missing; nmt-avg --shortlist adds one)" ]]
    nmt-avg --shortlist "$D/b" -o "$D/s.ckpt" "$D/m.ckpt"
    run nmt-decode -m "$D/s.ckpt" --shortlist --score --src "$D/src" --tgt "$D/src"
    [ "$status" -eq 2 ]
    [[ "${lines[0]}" == *"--score scores over the whole vocabulary: it does not go with --shortlist" ]]
    run nmt-avg --shortlist-targets 5 -o "$D/c.ckpt" "$D/m.ckpt"
    [ "$status" -eq 2 ]
    [[ "${lines[0]}" == "nmt-avg: --shortlist-targets and --shortlist-frequent go with --shortlist FILE" ]]
    run nmt-avg --shortlist "$D/b" --shortlist-targets 0 -o "$D/c.ckpt" "$D/m.ckpt"
    [ "$status" -eq 2 ]
    run nmt-avg --shortlist "$D/b" --shortlist-frequent 601 -o "$D/c.ckpt" "$D/m.ckpt"
    [ "$status" -eq 1 ]
    [[ "${lines[0]}" == "nmt-avg: --shortlist-frequent 601 exceeds the vocabulary of 600 pieces" ]]
    run nmt-avg --shortlist "$D/en" -o "$D/c.ckpt" "$D/m.ckpt"
    [ "$status" -eq 1 ]
    [[ "${lines[0]}" == "nmt-avg: "*"$D/en"*"plain text"* ]]
    run nmt-avg --shortlist "$D/none.b" -o "$D/c.ckpt" "$D/m.ckpt"
    [ "$status" -eq 1 ]
    [[ "${lines[0]}" == "nmt-avg: "*"$D/none.b"* ]]
    nmt-tokenize --vocab "$D/v.bpe" < /dev/null | nmt-batch > "$D/empty.b" 2> /dev/null
    run nmt-avg --shortlist "$D/empty.b" -o "$D/c.ckpt" "$D/m.ckpt"
    [ "$status" -eq 1 ]
    [ ! -e "$D/c.ckpt" ]
}

@test "hostile shortlists are refused, naming the tensor, row and entry" {
    head -3 "$D/en" > "$D/src"
    nmt-avg --shortlist "$D/b" --shortlist-targets 4 --shortlist-frequent 10 -o "$D/s.ckpt" "$D/m.ckpt"
    T=shortlist.table F=shortlist.frequent
    check() {
        run nmt-decode -m "$D/h.ckpt" --shortlist -i "$D/src"
        [ "$status" -eq 1 ]
        [[ "${lines[0]}" == "nmt-decode: $D/h.ckpt: "$1 ]]
    }
    rewrite "$D/s.ckpt" "$D/h.ckpt" "t['$T'][4 * 4 * 9:4 * 4 * 10] = struct.pack('<4i', 5, 600, -1, -1)"
    check "tensor $T: row 9, entry 1: id 600 outside the vocabulary of 600"
    rewrite "$D/s.ckpt" "$D/h.ckpt" "t['$T'][0:16] = struct.pack('<4i', 1, 2, 3, -7)"
    check "tensor $T: row 0, entry 3: id -7 outside the vocabulary of 600"
    rewrite "$D/s.ckpt" "$D/h.ckpt" "t['$T'][0:16] = struct.pack('<4i', 5, -1, 6, -1)"
    check "tensor $T: row 0, entry 2: id 6 after the row's end (-1)"
    rewrite "$D/s.ckpt" "$D/h.ckpt" "t['$T'][0:16] = struct.pack('<4i', 5, 8, 5, -1)"
    check "tensor $T: row 0, entry 2: id 5 repeated"
    rewrite "$D/s.ckpt" "$D/h.ckpt" "t['$F'][8:12] = t['$F'][0:4]"
    check "tensor $F: entry 2: id * repeated"
    rewrite "$D/s.ckpt" "$D/h.ckpt" "h['$T']['dtype'] = 'U32'"
    check "tensor $T must be I32 of shape (600, 1..600)"
    rewrite "$D/s.ckpt" "$D/h.ckpt" "t['$T'] = t['$T'][:-16]; h['$T']['shape'][0] -= 1"
    check "tensor $T must be I32 of shape (600, 1..600)"
    rewrite "$D/s.ckpt" "$D/h.ckpt" "del h['$F']; del t['$F']"
    check "no vocabulary shortlist (tensor $F missing; nmt-avg --shortlist adds one)"
    # the untouched file decodes, and a damaged shortlist does not matter without --shortlist
    nmt-decode -m "$D/s.ckpt" --shortlist -i "$D/src" > /dev/null
    rewrite "$D/s.ckpt" "$D/h.ckpt" "t['$T'][0:4] = struct.pack('<i', 600)"
    nmt-decode -m "$D/h.ckpt" -i "$D/src" > /dev/null
}
