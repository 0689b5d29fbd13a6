#!/usr/bin/env bash
# Training throughput of the cuda backend (run on a machine with an NVIDIA GPU, from the repo root,
# after `make` and `make -C pipelines/multi30k OUT=out/raw batches`):
#   1. matmul peaks through PyTorch (float32 without TF32, TF32, bf16), the reference for utilisation
#   2. nmt-train --backend cuda, 60 steps per configuration on Multi30k batches of 16k and 32k tokens:
#      median target tokens/s and model TFLOP/s (the gflop_s log column) over steps 11..60
set -u
ids=pipelines/multi30k/out/raw/train.ids vocab=pipelines/multi30k/out/raw/vocab.bpe
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for t in 16384 32768; do bin/nmt-batch --max-tokens $t --seed 1 -i $ids -o "$tmp/train$t.batches" 2> /dev/null || exit 1; done
python3 - <<'PY'
import torch, time
def peak(n, dt, tf32=False):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(n, n, device="cuda", dtype=dt); b = torch.randn(n, n, device="cuda", dtype=dt)
    for _ in range(3): a @ b
    torch.cuda.synchronize(); t = time.time(); r = 10
    for _ in range(r): a @ b
    torch.cuda.synchronize(); return 2 * n**3 * r / (time.time() - t) / 1e12
for n in (4096, 8192):
    print("matmul %d: f32 %.1f TFLOP/s, tf32 %.1f, bf16 %.1f" % (n, peak(n, torch.float32), peak(n, torch.float32, True), peak(n, torch.bfloat16)))
PY
med() { python3 -c "
import json,sys,statistics as s
r=[json.loads(l) for l in open(sys.argv[1]) if '\"tokens_per_s\"' in l][10:]
print('median of %d steps: %.0f target tokens/s, %.1f model TFLOP/s' % (len(r), s.median(x['tokens_per_s'] for x in r), s.median(x['gflop_s'] for x in r)/1000))" "$1"; }
for cfg in "base 32768" "base 16384" "small 16384" "big 32768"; do
    set -- $cfg
    bin/nmt-train --backend cuda -q -i "$tmp/train$2.batches" --vocab $vocab -o "$tmp/b.ckpt" --preset $1 \
        --max-steps 60 --log "$tmp/$1-$2.jsonl" > "$tmp/train.out" 2>&1 || { tail -3 "$tmp/train.out"; exit 1; }
    echo "train $1, batches of $2 tokens: $(med "$tmp/$1-$2.jsonl")"
done
