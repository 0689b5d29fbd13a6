#!/usr/bin/env bash
# Training throughput of the cuda backend (run on a machine with an NVIDIA GPU, from the repo root,
# after `make` and `make -C pipelines/multi30k OUT=out/raw batches`; IDS and VOCAB name other files):
#   1. matmul peaks through PyTorch (float32 without TF32, TF32, bf16), the reference for utilisation
#   2. nmt-train --backend cuda, 60 steps per configuration on Multi30k batches of 16k and 32k tokens,
#      in each precision of PRECISIONS (default "float32 bf16"): median target tokens/s and model
#      TFLOP/s (the gflop_s log column) over steps 11..60, and the model FLOPs utilisation (MFU)
#      against the bf16 dense matmul peak measured in 1 (8192^3)
set -u
ids=${IDS:-pipelines/multi30k/out/raw/train.ids} vocab=${VOCAB:-pipelines/multi30k/out/raw/vocab.bpe}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for t in 16384 32768; do bin/nmt-batch --max-tokens $t --seed 1 -i $ids -o "$tmp/train$t.batches" 2> /dev/null || exit 1; done
python3 - "$tmp/peak" <<'PY'
import torch, time
def peak(n, dt, tf32=False):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(n, n, device="cuda", dtype=dt); b = torch.randn(n, n, device="cuda", dtype=dt)
    for _ in range(3): a @ b
    torch.cuda.synchronize(); t = time.time(); r = 10
    for _ in range(r): a @ b
    torch.cuda.synchronize(); return 2 * n**3 * r / (time.time() - t) / 1e12
for n in (4096, 8192):
    bf = peak(n, torch.bfloat16)
    print("matmul %d: f32 %.1f TFLOP/s, tf32 %.1f, bf16 %.1f" % (n, peak(n, torch.float32), peak(n, torch.float32, True), bf))
open(__import__("sys").argv[1], "w").write("%.1f\n" % bf)
PY
bf16_peak=$(cat "$tmp/peak")
med() { python3 -c "
import json,sys,statistics as s
r=[json.loads(l) for l in open(sys.argv[1]) if '\"tokens_per_s\"' in l][10:]
t=s.median(x['gflop_s'] for x in r)/1000
print('median of %d steps: %.0f target tokens/s, %.1f model TFLOP/s, MFU %.1f%%' % (len(r), s.median(x['tokens_per_s'] for x in r), t, 100*t/float(sys.argv[2])))" "$1" "$bf16_peak"; }
for prec in ${PRECISIONS:-float32 bf16}; do
    for cfg in "base 32768" "base 16384" "small 16384" "big 32768"; do
        set -- $cfg
        bin/nmt-train --backend cuda --precision $prec -q -i "$tmp/train$2.batches" --vocab $vocab -o "$tmp/b.ckpt" \
            --force --preset $1 --max-steps 60 --log "$tmp/$1-$2.jsonl" > "$tmp/train.out" 2>&1 ||
            { tail -3 "$tmp/train.out"; exit 1; }
        echo "train $prec $1, batches of $2 tokens: $(med "$tmp/$1-$2.jsonl")"
    done
done
