#!/usr/bin/env bash
# Every output a refactor must leave bit-identical, made by one build on the bundled data:
#   bash bench/identical.sh BIN OUTDIR [STEPS]
# BIN: a bin/ folder (tools and plugins); OUTDIR: where the outputs go (created). Writes the BPE
# vocabulary, the tok, ids and batch streams, for the presets tiny and small the per-step losses of
# STEPS (default 200) training steps and the checkpoint bytes after them (and a hash of the tensor
# bytes alone, for builds that store other metadata), the greedy and beam-4
# translations of test_2016_flickr by the small model, and nmt-bleu's output (BLEU, chrF++, TER) on
# every vector of ../shared/testdata/bleu. Compare two runs with `diff -r` or `sha256sum`:
#   bash bench/identical.sh before/bin /tmp/a; bash bench/identical.sh bin /tmp/b; diff -r /tmp/a /tmp/b
# 2 threads throughout: the outputs do not depend on the thread count, the run time does.
set -eu -o pipefail
[ $# -ge 2 ] || { sed -n 2,9p "$0" >&2; exit 2; }
bin=$(cd "$1" && pwd); out=$2; steps=${3:-200}
src=$(cd "$(dirname "$0")/.." && pwd)
data=$src/data/multi30k
vectors=$src/../shared/testdata/bleu
mkdir -p "$out"; out=$(cd "$out" && pwd); rm -f "$out/SHA256SUMS"
export NMT_PLUGIN_PATH=$bin PATH="$bin:$PATH"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
zcat "$data/train.en.gz" | sed -n 1,8000p > "$tmp/train.en"
zcat "$data/train.de.gz" | sed -n 1,8000p > "$tmp/train.de"
zcat "$data/test_2016_flickr.en.gz" > "$tmp/test.en"
zcat "$data/test_2016_flickr.de.gz" > "$tmp/test.de"

nmt-tokenize --src "$tmp/train.en" --tgt "$tmp/train.de" -o "$out/train.tok"
nmt-vocab --size 2000 "$out/train.tok" -o "$out/vocab.bpe"
nmt-tokenize --vocab "$out/vocab.bpe" --src "$tmp/train.en" --tgt "$tmp/train.de" -o "$out/train.ids"
nmt-batch --max-tokens 2048 --seed 3 -i "$out/train.ids" -o "$out/train.batches"
for preset in tiny small; do
    nmt-train -i "$out/train.batches" --vocab "$out/vocab.bpe" -o "$out/$preset.ckpt" --preset "$preset" \
        --threads 2 --max-steps "$steps" --warmup 100 --log "$tmp/$preset.csv" -q
    # the losses, without the timing columns
    python3 - "$tmp/$preset.csv" > "$out/$preset.losses" <<'EOF'
import csv, sys
for row in csv.DictReader(open(sys.argv[1])):
    print(' '.join(f'{k}={v}' for k, v in row.items() if k not in ('elapsed', 'gflop_s', 'tok_s', 'tokens_per_s', 'time', 'wall', 'tgt_tok_s', 'src_tok_s')))
EOF
    # the tensor bytes alone (after the safetensors header, whose metadata holds the run's
    # configuration and so changes when an option is added)
    python3 - "$out/$preset.ckpt" > "$out/$preset.tensors.sha256" <<'EOF'
import hashlib, struct, sys
b = open(sys.argv[1], 'rb').read()
print(hashlib.sha256(b[8 + struct.unpack('<Q', b[:8])[0]:]).hexdigest())
EOF
done
nmt-decode -m "$out/small.ckpt" --threads 2 --beam 1 < "$tmp/test.en" > "$out/test.greedy.de"
nmt-decode -m "$out/small.ckpt" --threads 2 --beam 4 < "$tmp/test.en" > "$out/test.beam4.de"
for d in "$vectors"/*/; do
    n=$(basename "$d")
    nmt-bleu "$d/ref.txt" -m bleu chrf ter -cw 2 < "$d/hyp.txt" > "$out/bleu.$n.txt" 2>&1 || echo "exit $?" >> "$out/bleu.$n.txt"
done
nmt-bleu "$tmp/test.de" -m bleu chrf ter < "$out/test.beam4.de" > "$out/bleu.test.txt"
(cd "$out" && sha256sum -- * > "$tmp/SHA256SUMS" && mv "$tmp/SHA256SUMS" .)
cat "$out/SHA256SUMS"
