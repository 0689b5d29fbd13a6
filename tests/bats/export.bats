#!/usr/bin/env bats
# nmt-export --to ctranslate2: the model directory read back by an independent reader of model.bin
# (tests/helpers/ct2_read.py), compared with the checkpoint; refusals. CTranslate2 itself is not needed.

load common

setup_file() {
    export D="$BATS_FILE_TMPDIR"
    zcat "$NMT_SRCDIR/data/multi30k/train.en.gz" | sed -n 1,300p > "$D/en"
    zcat "$NMT_SRCDIR/data/multi30k/train.de.gz" | sed -n 1,300p > "$D/de"
    nmt-tokenize --src "$D/en" --tgt "$D/de" | nmt-vocab --size 500 -o "$D/v.bpe"
    nmt-tokenize --vocab "$D/v.bpe" --src "$D/en" --tgt "$D/de" | nmt-batch --max-tokens 1024 > "$D/b" 2>/dev/null
    nmt-train -q -i "$D/b" --vocab "$D/v.bpe" -o "$D/post.ckpt" --d-model 16 --heads 2 --ff 24 --layers 1 \
        --max-len 80 --max-steps 2 2>/dev/null
    nmt-train -q -i "$D/b" --vocab "$D/v.bpe" -o "$D/pre.ckpt" --d-model 16 --heads 4 --ff 32 --enc-layers 2 \
        --dec-layers 1 --pre-norm --max-steps 2 2>/dev/null
    nmt-train -q -i "$D/b" --vocab "$D/v.bpe" -o "$D/mar.ckpt" --d-model 16 --heads 2 --ff 24 --layers 1 \
        --max-len 80 --max-steps 2 --positions marian --start-embedding zero --activation swish \
        --tied-embeddings none --output-bias --ln-eps 1e-6 2>/dev/null
    nmt-export -m "$D/post.ckpt" --to ctranslate2 -o "$D/post"
    nmt-export -m "$D/pre.ckpt" --to ctranslate2 -o "$D/pre"
}

ct2_read() { python3 "$NMT_SRCDIR/tests/helpers/ct2_read.py" "$@"; }

# prints the named float32 tensor of a checkpoint, one value a line (python3, standard library)
tensor() {
    python3 - "$1" "$2" <<'PY'
import array, json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
o = h[sys.argv[2]]['data_offsets']; a = array.array('f'); a.frombytes(b[8 + n + o[0]:8 + n + o[1]])
print('\n'.join(repr(x) for x in a))
PY
}

# the variables (name, type, shape) a TransformerSpec of this configuration has: $1 enc layers,
# $2 dec layers, $3 pre-norm (0/1), $4 V, $5 D, $6 F, $7 max length
expected() {
    python3 - "$@" <<'PY'
import sys
le, ld, pre, V, D, F, L = map(int, sys.argv[1:])
v = {}
def ln(p): v[p + '/gamma'] = ('float32', str(D)); v[p + '/beta'] = ('float32', str(D))
def lin(p, o, i): v[p + '/weight'] = ('float32', '%dx%d' % (o, i)); v[p + '/bias'] = ('float32', str(o))
for side in ('encoder', 'decoder'):
    for k in ('pre_norm', 'activation', 'scale_embeddings'): v[side + '/' + k] = ('int8', '-')
    v[side + '/num_heads'] = ('int16', '-')
    if pre: ln(side + '/layer_norm')
for k in ('embeddings_merge', 'multi_query_attention'): v['encoder/' + k] = ('int8', '-')
for k in ('alibi', 'alibi_use_positive_positions', 'scale_alibi', 'start_from_zero_embedding'):
    v['decoder/' + k] = ('int8', '-')
for k in ('alignment_layer', 'alignment_heads'): v['decoder/' + k] = ('int16', '-')
v['decoder/embeddings/weight'] = ('float32', '%dx%d' % (V, D))
v['decoder/position_encodings/encodings'] = ('float32', '%dx%d' % (L, D))
for i in range(le):
    p = 'encoder/layer_%d/' % i
    ln(p + 'self_attention/layer_norm'); lin(p + 'self_attention/linear_0', 3 * D, D)
    lin(p + 'self_attention/linear_1', D, D); ln(p + 'ffn/layer_norm')
    lin(p + 'ffn/linear_0', F, D); lin(p + 'ffn/linear_1', D, F)
for i in range(ld):
    p = 'decoder/layer_%d/' % i
    ln(p + 'self_attention/layer_norm'); lin(p + 'self_attention/linear_0', 3 * D, D)
    lin(p + 'self_attention/linear_1', D, D); ln(p + 'attention/layer_norm')
    lin(p + 'attention/linear_0', D, D); lin(p + 'attention/linear_1', 2 * D, D)
    lin(p + 'attention/linear_2', D, D); ln(p + 'ffn/layer_norm')
    lin(p + 'ffn/linear_0', F, D); lin(p + 'ffn/linear_1', D, F)
print('spec TransformerSpec 7')
for k in sorted(v): print(k, *v[k])
print('alias decoder/projection/weight decoder/embeddings/weight')
print('alias encoder/embeddings_0/weight decoder/embeddings/weight')
print('alias encoder/position_encodings/encodings decoder/position_encodings/encodings')
PY
}

@test "writes the three files of a CTranslate2 model directory, and nothing else" {
    run ls -A "$D/post"
    [ "$status" -eq 0 ]
    [ "$output" = "$(printf '%s\n' config.json model.bin shared_vocabulary.json)" ]
    run ls -A "$D"
    [[ "$output" != *tmp* ]]
}

@test "model.bin holds every variable of the TransformerSpec, named, shaped and typed (post-norm)" {
    ct2_read "$D/post/model.bin" > "$D/got"
    expected 1 1 0 500 16 24 80 > "$D/want"
    diff "$D/want" "$D/got"
}

@test "model.bin of a pre-norm model with other layer counts has the final layer norms" {
    ct2_read "$D/pre/model.bin" > "$D/got"
    expected 2 1 1 500 16 32 1024 > "$D/want"
    diff "$D/want" "$D/got"
    [ "$(ct2_read "$D/pre/model.bin" encoder/pre_norm)" = 1 ]
    [ "$(ct2_read "$D/post/model.bin" decoder/pre_norm)" = 0 ]
    [ "$(ct2_read "$D/pre/model.bin" decoder/num_heads)" = 4 ]
    [ "$(ct2_read "$D/pre/model.bin" decoder/alignment_layer)" = -1 ]
}

@test "the tensors are the checkpoint's, bit for bit" {
    cmp <(tensor "$D/post.ckpt" emb.weight) <(ct2_read "$D/post/model.bin" decoder/embeddings/weight)
    cmp <(tensor "$D/post.ckpt" emb.weight) <(ct2_read "$D/post/model.bin" encoder/embeddings_0/weight)
    cmp <(tensor "$D/post.ckpt" enc.0.att.qkv.weight) \
        <(ct2_read "$D/post/model.bin" encoder/layer_0/self_attention/linear_0/weight)
    cmp <(tensor "$D/post.ckpt" dec.0.cross_att.kv.bias) \
        <(ct2_read "$D/post/model.bin" decoder/layer_0/attention/linear_1/bias)
    cmp <(tensor "$D/pre.ckpt" enc.1.ffn.w2.weight) <(ct2_read "$D/pre/model.bin" encoder/layer_1/ffn/linear_1/weight)
    cmp <(tensor "$D/pre.ckpt" dec_ln.weight) <(ct2_read "$D/pre/model.bin" decoder/layer_norm/gamma)
    cmp <(tensor "$D/pre.ckpt" dec.0.ln3.bias) <(ct2_read "$D/pre/model.bin" decoder/layer_0/ffn/layer_norm/beta)
}

@test "the position table is nmt's sinusoid" {
    ct2_read "$D/post/model.bin" encoder/position_encodings/encodings > "$D/pe"
    python3 - "$D/pe" <<'PY'
import math, struct, sys
pe = [float(x) for x in open(sys.argv[1])]
D = 16
assert len(pe) == 80 * D, len(pe)
f = lambda x: struct.unpack('f', struct.pack('f', x))[0]
for p in (0, 1, 7, 79):
    for i in range(0, D, 2):
        a = p / math.pow(10000.0, i / D)
        assert pe[p * D + i] == f(math.sin(a)) and pe[p * D + i + 1] == f(math.cos(a)), (p, i)
PY
}

@test "config.json: the special tokens, the source's end token, the layer norm epsilon" {
    python3 - "$D/post/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
assert c == {'add_source_bos': False, 'add_source_eos': True, 'bos_token': '<s>', 'decoder_start_token': '<s>',
             'eos_token': '</s>', 'layer_norm_epsilon': 1e-05, 'multi_query_attention': False,
             'unk_token': '<unk>'}, c
PY
}

@test "the vocabulary lists the pieces in id order, as nmt-tokenize --text=pieces writes them" {
    printf 'A man in a blue shirt.\nTwo dogs\\ play "outside" \xc3\xa9t\xc3\xa9\n' > "$D/s"
    nmt-tokenize --vocab "$D/v.bpe" --text=pieces < "$D/s" > "$D/pieces"
    nmt-tokenize --vocab "$D/v.bpe" --text=ids < "$D/s" > "$D/ids"
    python3 - "$D/post/shared_vocabulary.json" "$D/pieces" "$D/ids" <<'PY'
import json, sys
v = json.load(open(sys.argv[1], encoding='utf-8'))
assert len(v) == 500 and v[:4] == ['<pad>', '<s>', '</s>', '<unk>'] and v[4] == '<0x00>' and v[259] == '<0xFF>', v[:8]
n = 0
for p, i in zip(open(sys.argv[2], encoding='utf-8'), open(sys.argv[3])):
    for piece, id in zip(p.split(), i.split()):
        assert v[int(id)] == piece, (id, piece, v[int(id)]); n += 1
assert n > 10, n
PY
}

@test "--quantize int8: embedding and linear weights in int8 with a scale a row, within half a step" {
    nmt-export -m "$D/post.ckpt" --to ctranslate2 -o "$D/q" --quantize int8
    ct2_read "$D/q/model.bin" > "$D/got"
    grep -qx 'decoder/embeddings/weight int8 500x16' "$D/got"
    grep -qx 'decoder/embeddings/weight_scale float32 500' "$D/got"
    grep -qx 'encoder/layer_0/ffn/linear_0/weight int8 24x16' "$D/got"
    grep -qx 'encoder/layer_0/ffn/linear_0/weight_scale float32 24' "$D/got"
    grep -qx 'encoder/layer_0/ffn/linear_0/bias float32 24' "$D/got"
    [ "$(grep -c ' int8 [0-9]' "$D/got")" -eq 12 ]
    ct2_read "$D/q/model.bin" decoder/layer_0/attention/linear_1/weight deq > "$D/deq"
    ct2_read "$D/q/model.bin" decoder/layer_0/attention/linear_1/weight_scale > "$D/scale"
    tensor "$D/post.ckpt" dec.0.cross_att.kv.weight > "$D/w"
    python3 - "$D/w" "$D/deq" "$D/scale" <<'PY'
import sys
w, d, s = ([float(x) for x in open(f)] for f in sys.argv[1:])
assert len(w) == len(d) == 32 * 16 and len(s) == 32
for r in range(32):
    row = w[r * 16:(r + 1) * 16]
    assert abs(127 / max(abs(x) for x in row) - s[r]) <= 1e-5 * s[r], r
    for x, y in zip(row, d[r * 16:(r + 1) * 16]):
        assert abs(x - y) <= 0.5 / s[r] * 1.0001, (r, x, y)
PY
}

@test "a missing checkpoint is refused in one line, nothing written" {
    run nmt-export -m "$D/nope.ckpt" --to ctranslate2 -o "$D/x1"
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ "$output" == "nmt-export: "*nope.ckpt* ]]
    [ ! -e "$D/x1" ]
}

@test "an unwritable output is refused in one line" {
    run nmt-export -m "$D/post.ckpt" --to ctranslate2 -o "$D/no/such/dir"
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ "$output" == "nmt-export: cannot create a directory beside '$D/no/such/dir': No such file or directory" ]]
    run nmt-export -m "$D/post.ckpt" --to ctranslate2 -o "$D/en/x"
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 1 ]
}

@test "an existing directory with files is left alone; the temporary directory is removed" {
    mkdir -p "$D/full"
    echo keep > "$D/full/f"
    run nmt-export -m "$D/post.ckpt" --to ctranslate2 -o "$D/full"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-export: '$D/full' exists and is not an empty directory" ]
    [ "$(ls -A "$D/full")" = f ]
    run ls -A "$D"
    [[ "$output" != *.tmp* ]]
    mkdir "$D/empty"
    nmt-export -m "$D/post.ckpt" --to ctranslate2 -o "$D/empty/"
    cmp "$D/post/model.bin" "$D/empty/model.bin"
}

@test "a model option CTranslate2 cannot express is refused by name" {
    python3 - "$D/post.ckpt" "$D/odd.ckpt" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
h['__metadata__']['model.rms_norm'] = '1'
j = json.dumps(h).encode(); j += b' ' * (-len(j) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(j)) + j + b[8 + n:])
PY
    run nmt-export -m "$D/odd.ckpt" --to ctranslate2 -o "$D/odd"
    [ "$status" -eq 1 ]
    [ "$output" = "nmt-export: model option model.rms_norm (1) has no CTranslate2 equivalent" ]
    [ ! -e "$D/odd" ]
}

@test "the options of Marian models map: swish, zero start, Marian positions, three matrices, output bias" {
    nmt-export -m "$D/mar.ckpt" --to ctranslate2 -o "$D/mar"
    ct2_read "$D/mar/model.bin" > "$D/got"
    # the default model's variables, and the source embedding, projection and its bias of their own
    { expected 1 1 0 500 16 24 80 | grep -v '^alias decoder/projection\|^alias encoder/embeddings_0'
      printf '%s\n' 'encoder/embeddings_0/weight float32 500x16' 'decoder/projection/weight float32 500x16' \
          'decoder/projection/bias float32 500'; } | sort > "$D/want"
    sort "$D/got" | diff "$D/want" -
    [ "$(ct2_read "$D/mar/model.bin" decoder/activation)" = 2 ]
    [ "$(ct2_read "$D/mar/model.bin" encoder/activation)" = 2 ]
    [ "$(ct2_read "$D/mar/model.bin" decoder/start_from_zero_embedding)" = 1 ]
    [ "$(ct2_read "$D/post/model.bin" decoder/start_from_zero_embedding)" = 0 ]
    cmp <(tensor "$D/mar.ckpt" emb.weight) <(ct2_read "$D/mar/model.bin" encoder/embeddings_0/weight)
    cmp <(tensor "$D/mar.ckpt" dec_emb.weight) <(ct2_read "$D/mar/model.bin" decoder/embeddings/weight)
    cmp <(tensor "$D/mar.ckpt" out.weight) <(ct2_read "$D/mar/model.bin" decoder/projection/weight)
    cmp <(tensor "$D/mar.ckpt" out.bias) <(ct2_read "$D/mar/model.bin" decoder/projection/bias)
    python3 - "$D/mar/config.json" <<'PY'
import json, sys
assert json.load(open(sys.argv[1]))['layer_norm_epsilon'] == 1e-06
PY
    ct2_read "$D/mar/model.bin" decoder/position_encodings/encodings > "$D/mpe"
    python3 - "$D/mpe" <<'PY'
import math, struct, sys
pe = [float(x) for x in open(sys.argv[1])]
D, h = 16, 8
f = lambda x: struct.unpack('f', struct.pack('f', x))[0]
for p in (0, 1, 7, 79):
    for i in range(h):
        a = p * math.exp(-i * math.log(10000.0) / (h - 1))
        assert abs(pe[p * D + i] - f(math.sin(a))) < 1e-6 and abs(pe[p * D + h + i] - f(math.cos(a))) < 1e-6, (p, i)
PY
}

@test "usage errors exit 2" {
    run nmt-export -m "$D/post.ckpt" --to onnx -o "$D/u"
    [ "$status" -eq 2 ]
    [[ "${lines[0]}" == "nmt-export: unknown --to 'onnx' (ctranslate2, marian)" ]]
    run nmt-export -m "$D/post.ckpt" -o "$D/u"
    [ "$status" -eq 2 ]
    run nmt-export -m "$D/post.ckpt" --to ctranslate2
    [ "$status" -eq 2 ]
    run nmt-export -m "$D/post.ckpt" --to ctranslate2 -o "$D/u" --quantize int4
    [ "$status" -eq 2 ]
    [ ! -e "$D/u" ]
}
