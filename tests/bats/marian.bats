#!/usr/bin/env bats
# nmt-import --from marian and nmt-export --to marian: the Marian models of tests/fixtures/marian
# (trained and run by Marian once, tests/fixtures/marian/make.sh) translated and scored as
# marian-decoder and marian-scorer did; nmt models exported and imported back; hostile archives and
# vocabularies refused by name. Marian itself is not needed.

load common

setup_file() {
    export D="$BATS_FILE_TMPDIR" F="$NMT_SRCDIR/tests/fixtures/marian"
    for n in post pre; do
        nmt-import --from marian "$F/$n.npz" --vocab "$F/vocab.yml" -o "$D/$n.ckpt"
    done
    zcat "$NMT_SRCDIR/data/multi30k/train.en.gz" | sed -n 1,300p > "$D/en"
    zcat "$NMT_SRCDIR/data/multi30k/train.de.gz" | sed -n 1,300p > "$D/de"
    nmt-tokenize --src "$D/en" --tgt "$D/de" | nmt-vocab --size 400 -o "$D/v.bpe"
    nmt-tokenize --vocab "$D/v.bpe" --src "$D/en" --tgt "$D/de" | nmt-batch --max-tokens 1024 > "$D/b" 2>/dev/null
    local marian=(--positions marian --start-embedding zero --ln-eps 1e-6)
    nmt-train -q -i "$D/b" --vocab "$D/v.bpe" -o "$D/all.ckpt" --d-model 16 --heads 2 --ff 24 --layers 1 \
        --max-steps 2 "${marian[@]}" --tied-embeddings all 2>/dev/null
    nmt-train -q -i "$D/b" --vocab "$D/v.bpe" -o "$D/target.ckpt" --d-model 16 --heads 4 --ff 32 --enc-layers 2 \
        --dec-layers 1 --pre-norm --max-steps 2 "${marian[@]}" --activation swish --tied-embeddings target \
        --output-bias 2>/dev/null
    nmt-train -q -i "$D/b" --vocab "$D/v.bpe" -o "$D/none.ckpt" --d-model 16 --heads 2 --ff 24 --layers 1 \
        --max-steps 2 "${marian[@]}" --tied-embeddings none --output-bias 2>/dev/null
}

# Compares nmt-decode's lines (TEXT<TAB>WORD SCORES) in $1 with marian-decoder's n-best lines in $2
# (first hypothesis of each sentence): prints "SAME of N, worst DIFF", fails unless all are the same
# text and every word score is within 1e-4.
same_translations() {
    python3 - "$1" "$2" <<'PY'
import sys
nmt = [l.rstrip('\n').split('\t') for l in open(sys.argv[1])]
best = {}
for l in open(sys.argv[2]):
    f = l.split(' ||| ')
    best.setdefault(int(f[0]), f)
same, worst = 0, 0.0
for i, (text, scores) in enumerate(nmt):
    m = best[i]
    ms = [float(x) for x in m[2].split()[1:]]
    ns = [float(x) for x in scores.split()]
    if len(ns) == len(ms) + 1:  # cut at the maximum length: nmt adds the end of sentence's score
        ns = ns[:-1]
    if ' '.join(text.split()) == ' '.join(m[1].split()) and len(ms) == len(ns):
        same += 1
        worst = max([worst] + [abs(a - b) for a, b in zip(ms, ns)])
    else:
        print('line %d: nmt "%s", Marian "%s"' % (i + 1, text, m[1].strip()))
print('%d of %d, worst %.2g' % (same, len(nmt), worst))
sys.exit(0 if same == len(nmt) == len(best) and worst < 1e-4 else 1)
PY
}

# Compares the log-probabilities of nmt-decode --score in $1 with marian-scorer's lines in $2.
same_scores() {
    python3 - "$1" "$2" <<'PY'
import sys
a = [float(l) for l in open(sys.argv[1])]
b = [float(l.split()[0]) for l in open(sys.argv[2])]
worst = max(abs(x - y) for x, y in zip(a, b))
print('%d lines, worst %.2g' % (len(a), worst))
sys.exit(0 if len(a) == len(b) and worst < 1e-4 else 1)
PY
}

@test "greedy: the post-norm model translates as marian-decoder, word scores within 1e-4" {
    nmt-decode -m "$D/post.ckpt" --max-len-a 3 --max-len-b 1 --word-scores < "$F/test.src" > "$D/post.greedy"
    run same_translations "$D/post.greedy" "$F/post.greedy.txt"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "beam 4: the best translation of the post-norm model is marian-decoder's" {
    nmt-decode -m "$D/post.ckpt" -b 4 --alpha 0 --max-len-a 3 --max-len-b 1 --word-scores < "$F/test.src" \
        > "$D/post.beam4"
    run same_translations "$D/post.beam4" "$F/post.beam4.txt"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "scores of given pairs are marian-scorer's within 1e-4 (post-norm ReLU tied, pre-norm Swish target-tied)" {
    for n in post pre; do
        nmt-decode -m "$D/$n.ckpt" --score --src "$F/test.src" --tgt "$F/test.trg" > "$D/$n.score"
        same_scores "$D/$n.score" "$F/$n.score.txt"
        nmt-decode -m "$D/$n.ckpt" --score --src "$F/test.src" --tgt "$F/$n.greedy.hyp" > "$D/$n.gscore"
        same_scores "$D/$n.gscore" "$F/$n.greedy.score.txt"
    done
}

@test "the pre-norm model's greedy translations score as marian-scorer scores them" {
    nmt-decode -m "$D/pre.ckpt" --max-len-a 3 --max-len-b 1 --scores --alpha 0 < "$F/test.src" > "$D/pre.greedy"
    cut -f2 "$D/pre.greedy" > "$D/pre.hyp"
    nmt-decode -m "$D/pre.ckpt" --score --src "$F/test.src" --tgt "$D/pre.hyp" > "$D/pre.hyp.score"
    cut -f1 "$D/pre.greedy" > "$D/pre.greedy.score"
    run same_scores "$D/pre.greedy.score" "$D/pre.hyp.score"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "Marian to nmt to Marian gives back every array bit for bit, and the vocabulary" {
    for n in post pre; do
        nmt-export -m "$D/$n.ckpt" --to marian -o "$D/$n.again.npz"
        python3 - "$F/$n.npz" "$D/$n.again.npz" <<'PY'
import sys, zipfile
a, b = zipfile.ZipFile(sys.argv[1]), zipfile.ZipFile(sys.argv[2])
def arrays(z):
    out = {}
    for n in z.namelist():
        d = z.read(n); hl = int.from_bytes(d[8:10], 'little')
        out[n] = (d[10:10 + hl].split(b"'shape': ")[1].split(b')')[0], d[10 + hl:])
    return out
x, y = arrays(a), arrays(b)
names = sorted(n for n in x if n != 'special:model.yml.npy')
assert names == sorted(n for n in y if n != 'special:model.yml.npy'), (names, sorted(y))
bad = [n for n in names if x[n] != y[n]]
print(len(names), 'arrays, differing:', bad)
sys.exit(1 if bad else 0)
PY
        head -c -1 "$D/$n.again.vocab.yml" | same_as "$F/vocab.yml"
    done
}

@test "export writes the .npz and its vocabulary beside it, </s> 0 and <unk> 1" {
    nmt-export -m "$D/all.ckpt" --to marian -o "$D/all.npz"
    [ -s "$D/all.npz" ]
    [ "$(sed -n 1,2p "$D/all.vocab.yml")" = "$(printf '</s>: 0\n<unk>: 1')" ]
    [ "$(wc -l < "$D/all.vocab.yml")" -eq $(( $(nmt-cat "$D/all.ckpt" | sed -n 's/^model\.vocab\t//p') - 2 )) ]
}

# Fails unless checkpoints $1 (exported) and $2 (imported back) hold the same tensors, but for rows 0
# and 1 (<pad>, <s>, which Marian lacks) of the embeddings and the output bias.
same_tensors() {
    python3 - "$1" "$2" <<'PY'
import array, json, struct, sys
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
    t = {}
    for k, v in h.items():
        if k == '__metadata__' or k.startswith('optim.') or v['dtype'] != 'F32': continue
        a = array.array('f'); a.frombytes(b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]])
        t[k] = (v['shape'], a)
    return t
a, b = load(sys.argv[1]), load(sys.argv[2])
bad = [k for k in a if k not in b] + [k for k in b if k not in a and k != 'out.bias']
for k in a:
    if k not in b: continue
    (sa, x), (sb, y) = a[k], b[k]
    skip = 2 * sa[1] if k.endswith('emb.weight') or k == 'out.weight' else 2 if k == 'out.bias' else 0
    if sa != sb or x[skip:] != y[skip:]: bad.append(k)
print('%d tensors, differing: %s' % (len(a), ' '.join(bad) or 'none'))
sys.exit(1 if bad else 0)
PY
}

@test "export then import gives back the same tensors (tied all, target, none)" {
    for t in all target none; do
        nmt-export -m "$D/$t.ckpt" --to marian -o "$D/$t.npz"
        nmt-import --from marian "$D/$t.npz" --vocab "$D/$t.vocab.yml" -o "$D/$t.back.ckpt"
        run same_tensors "$D/$t.ckpt" "$D/$t.back.ckpt"
        echo "$t: $output"
        [ "$status" -eq 0 ]
    done
}

@test "an imported model translates the exported one's pieces into the same pieces" {
    nmt-export -m "$D/target.ckpt" --to marian -o "$D/t2.npz"
    nmt-import --from marian "$D/t2.npz" --vocab "$D/t2.vocab.yml" -o "$D/t2.ckpt"
    head -20 "$D/en" > "$D/en20"
    nmt-tokenize --vocab "$D/v.bpe" --text=pieces < "$D/en20" > "$D/en20.pieces"
    nmt-decode -m "$D/target.ckpt" --max-len-a 2 --out hyp < "$D/en20" | nmt-cat | cut -f4 > "$D/ids.a"
    nmt-decode -m "$D/t2.ckpt" --max-len-a 2 --out hyp < "$D/en20.pieces" | nmt-cat | cut -f4 > "$D/ids.b"
    [ "$(wc -l < "$D/ids.a")" -eq 20 ]
    cmp "$D/ids.a" "$D/ids.b"
}

# Rewrites the archive $1 into $2 with python's zipfile (stored entries): EDIT is Python run on
# d, the dict of entry names to bytes (the .npy files; 'yml' the text of special:model.yml).
rewrite() {
    python3 - "$1" "$2" "$3" <<'PY'
import struct, sys, zipfile
z = zipfile.ZipFile(sys.argv[1]); d = {n: z.read(n) for n in z.namelist()}
y = d['special:model.yml.npy']; hl = struct.unpack('<H', y[8:10])[0]
yml = y[10 + hl:].rstrip(b'\0 ').decode()
def npy(shape, data, descr='<f4'):
    h = ("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, ', '.join(map(str, shape)) + (',' if len(shape) == 1 else ''))).encode()
    h += b' ' * (-(10 + len(h) + 1) % 64) + b'\n'
    return b'\x93NUMPY\x01\x00' + struct.pack('<H', len(h)) + h + data
exec(sys.argv[3])
d['special:model.yml.npy'] = npy((len(yml.encode()) + 1,), yml.encode() + b'\0', '|i1')
with zipfile.ZipFile(sys.argv[2], 'w', zipfile.ZIP_STORED) as o:
    for n, b in d.items(): o.writestr(n, b)
PY
}

# Runs nmt-import on archive $1 with the golden vocabulary: fails unless it exits 1 with one line
# containing $2.
refused() {
    run nmt-import --from marian "$1" --vocab "${3:-$F/vocab.yml}" -o "$D/refused.ckpt"
    echo "$output"
    [ "$status" -eq 1 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ "$output" == "nmt-import: "*"$2"* ]]
    [ ! -e "$D/refused.ckpt" ]
}

@test "hostile archives are refused by name: truncated, not a zip, missing or misshapen arrays" {
    head -c 100000 "$F/post.npz" > "$D/cut.npz"
    refused "$D/cut.npz" "cut.npz: no zip end-of-central-directory record"
    printf 'not a zip' > "$D/junk.npz"
    refused "$D/junk.npz" "junk.npz: 9 bytes, too short for a zip archive"
    rewrite "$F/post.npz" "$D/missing.npz" "del d['decoder_l2_ffn_W1.npy']"
    refused "$D/missing.npz" "missing.npz: array 'decoder_l2_ffn_W1' is missing"
    rewrite "$F/post.npz" "$D/shape.npz" "d['encoder_l1_ffn_b1.npy'] = npy((1, 63), b'\\0' * 252)"
    refused "$D/shape.npz" "shape.npz: array 'encoder_l1_ffn_b1' is not float32 of shape (1, 64)"
    rewrite "$F/post.npz" "$D/extra.npz" "d['encoder_l3_ffn_b1.npy'] = npy((1, 64), b'\\0' * 256)"
    refused "$D/extra.npz" "extra.npz: array 'encoder_l3_ffn_b1' has no nmt equivalent"
    rewrite "$F/post.npz" "$D/f8.npz" "d['encoder_l1_ffn_b1.npy'] = npy((1, 32), b'\\0' * 256, '<f8')"
    refused "$D/f8.npz" "f8.npz: entry 'encoder_l1_ffn_b1.npy': data type '<f8' is not read"
}

@test "options nmt cannot express are refused by name; so are unknown ones and huge counts" {
    rewrite "$F/post.npz" "$D/o1.npz" "yml = yml.replace('transformer-tied-layers:\\n  []', 'transformer-tied-layers:\\n  - 1\\n  - 2')"
    refused "$D/o1.npz" "option transformer-tied-layers: only an empty list has an nmt equivalent"
    rewrite "$F/post.npz" "$D/o2.npz" "yml = yml.replace('transformer-decoder-autoreg: self-attention', 'transformer-decoder-autoreg: average-attention')"
    refused "$D/o2.npz" "option transformer-decoder-autoreg 'average-attention' has no nmt equivalent"
    rewrite "$F/post.npz" "$D/o3.npz" "yml += '\\ntransformer-frobnicate: 3\\n'"
    refused "$D/o3.npz" "option transformer-frobnicate is not known to nmt-import"
    rewrite "$F/post.npz" "$D/o4.npz" "yml = yml.replace('right-left: false', 'right-left: true')"
    refused "$D/o4.npz" "option right-left: true has no nmt equivalent"
    rewrite "$F/post.npz" "$D/o5.npz" "yml = yml.replace('transformer-postprocess: dan', 'transformer-postprocess: nda')"
    refused "$D/o5.npz" "transformer-postprocess 'na'"
    rewrite "$F/post.npz" "$D/o6.npz" "yml = yml.replace('dim-emb: 32', 'dim-emb: 99999999999')"
    refused "$D/o6.npz" "option dim-emb '99999999999' is not a number in 2..65536"
    rewrite "$F/post.npz" "$D/o7.npz" "yml = yml.replace('  - 256\\n  - 256', '  - 256\\n  - 300')"
    refused "$D/o7.npz" "dim-vocabs 256 and 300 differ"
    rewrite "$F/post.npz" "$D/o8.npz" "yml = yml.replace('transformer-ffn-activation: relu', 'transformer-ffn-activation: gelu')"
    refused "$D/o8.npz" "transformer-ffn-activation 'gelu' has no nmt equivalent"
    rewrite "$F/post.npz" "$D/o9.npz" "yml = yml.replace('dim-emb: 32', 'dim-emb:\\n  nested: 1')"
    refused "$D/o9.npz" "model.yml: line"
}

@test "a Marian model without an output bias imports, and scores as with a zero bias" {
    rewrite "$F/post.npz" "$D/nobias.npz" "del d['decoder_ff_logit_out_b.npy']; yml = yml.replace('output-omit-bias: false', 'output-omit-bias: true')"
    nmt-import --from marian "$D/nobias.npz" --vocab "$F/vocab.yml" -o "$D/nobias.ckpt"
    rewrite "$F/post.npz" "$D/zero.npz" "d['decoder_ff_logit_out_b.npy'] = npy((1, 256), b'\\0' * 1024)"
    nmt-import --from marian "$D/zero.npz" --vocab "$F/vocab.yml" -o "$D/zero.ckpt"
    nmt-decode -m "$D/zero.ckpt" --score --src "$F/test.src" --tgt "$F/test.trg" > "$D/zero.score"
    nmt-decode -m "$D/nobias.ckpt" --score --src "$F/test.src" --tgt "$F/test.trg" | same_as "$D/zero.score"
}

@test "a SentencePiece vocabulary is read as Marian reads one (the model's ids)" {
    python3 - "$D/post.ckpt" "$D/post.spm" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; o = json.loads(b[8:8 + n])['vocab.file']
open(sys.argv[2], 'wb').write(b[8 + n + o['data_offsets'][0]:8 + n + o['data_offsets'][1]])
PY
    nmt-import --from marian "$F/post.npz" --vocab "$D/post.spm" -o "$D/spm.ckpt"
    nmt-decode -m "$D/spm.ckpt" --score --src "$F/test.src" --tgt "$F/test.trg" > "$D/spm.score"
    nmt-decode -m "$D/post.ckpt" --score --src "$F/test.src" --tgt "$F/test.trg" | same_as "$D/spm.score"
}

@test "hostile vocabularies are refused by name" {
    sed 's/^einem: 7$/einem: 700/' "$F/vocab.yml" > "$D/v1.yml"
    refused "$F/post.npz" "v1.yml: line 8: the value of 'einem' is not an id below 256" "$D/v1.yml"
    sed '/^<unk>: 1$/d' "$F/vocab.yml" > "$D/v2.yml"
    refused "$F/post.npz" "v2.yml: line" "$D/v2.yml"
    head -100 "$F/vocab.yml" > "$D/v3.yml"
    refused "$F/post.npz" "the model's vocabulary has 256 pieces" "$D/v3.yml"
    sed -n 's/: [0-9]*$//p' "$F/vocab.yml" | sed 's/^"\(.*\)"$/\1/' > "$D/v4.txt"
    nmt-import --from marian "$F/post.npz" --vocab "$D/v4.txt" -o "$D/v4.ckpt"
    nmt-decode -m "$D/v4.ckpt" --max-len-a 3 --max-len-b 1 < "$F/test.src" > "$D/v4.out"
    nmt-decode -m "$D/post.ckpt" --max-len-a 3 --max-len-b 1 < "$F/test.src" | same_as "$D/v4.out"
}

@test "exporting a model of paper positions, a <s> start or another epsilon is refused by name" {
    nmt-train -q -i "$D/b" --vocab "$D/v.bpe" -o "$D/paper.ckpt" --d-model 16 --heads 2 --ff 24 --layers 1 \
        --max-steps 1 2>/dev/null
    run nmt-export -m "$D/paper.ckpt" --to marian -o "$D/paper.npz"
    [ "$status" -eq 1 ]
    [[ "$output" == "nmt-export: model.positions 'paper' has no Marian equivalent"* ]]
    [ ! -e "$D/paper.npz" ]
    [ ! -e "$D/paper.vocab.yml" ]
    nmt-train -q -i "$D/b" --vocab "$D/v.bpe" -o "$D/eps.ckpt" --d-model 16 --heads 2 --ff 24 --layers 1 \
        --max-steps 1 --positions marian --start-embedding zero 2>/dev/null
    run nmt-export -m "$D/eps.ckpt" --to marian -o "$D/eps.npz"
    [ "$status" -eq 1 ]
    [[ "$output" == "nmt-export: model.ln_eps 1e-05 has no Marian equivalent"* ]]
}

@test "usage errors exit 2" {
    run nmt-import "$F/post.npz" --vocab "$F/vocab.yml" -o "$D/u.ckpt"
    [ "$status" -eq 2 ]
    run nmt-import --from fairseq "$F/post.npz" --vocab "$F/vocab.yml" -o "$D/u.ckpt"
    [ "$status" -eq 2 ]
    run nmt-import --from marian --vocab "$F/vocab.yml" -o "$D/u.ckpt"
    [ "$status" -eq 2 ]
    run nmt-export -m "$D/all.ckpt" --to marian -o "$D/q.npz" --quantize int8
    [ "$status" -eq 2 ]
}

@test "nmt-train --init-from starts from an imported model, on batches of its vocabulary" {
    nmt-export -m "$D/all.ckpt" --to marian -o "$D/i.npz"
    nmt-import --from marian "$D/i.npz" --vocab "$D/i.vocab.yml" -o "$D/i.ckpt"
    python3 - "$D/i.ckpt" "$D/i.model" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; o = json.loads(b[8:8 + n])['vocab.file']
open(sys.argv[2], 'wb').write(b[8 + n + o['data_offsets'][0]:8 + n + o['data_offsets'][1]])
PY
    for s in en de; do nmt-tokenize --vocab "$D/v.bpe" --text=pieces < "$D/$s" > "$D/$s.pieces"; done
    nmt-tokenize --vocab "$D/i.model" --src "$D/en.pieces" --tgt "$D/de.pieces" | nmt-batch --max-tokens 1024 \
        > "$D/ib" 2>/dev/null
    nmt-train -q --init-from "$D/i.ckpt" -i "$D/ib" -o "$D/i2.ckpt" --max-steps 2
    nmt-decode -m "$D/i2.ckpt" --max-len-a 2 < "$D/en.pieces" > "$D/i2.out"
    [ "$(wc -l < "$D/i2.out")" -eq 300 ]
}
