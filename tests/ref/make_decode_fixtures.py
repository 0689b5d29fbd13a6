#!/usr/bin/python3
"""Builds the greedy-decoding reference of tests/bats/decode_ref.bats with PyTorch.

Trains a small model with our tools (nmt-tokenize, nmt-vocab, nmt-batch, nmt-train, nmt-avg) on a
synthetic word-for-word translation task (random sentences of 1 to 16 words over a 32-word English
lexicon, each word replaced by its German counterpart), so that every output depends on its source:
its words, their order and its length. Then decodes 40 fresh sentences greedily in PyTorch (float64,
the functional model of make_fixtures.py, no cache: the whole prefix is re-run each step) from the
checkpoint's weights, checks that the outputs are mostly distinct and of many lengths, and writes
tests/fixtures/ref/decode/: model.ckpt, src.en, and greedy.ids (one line of output ids per sentence,
EOS excluded).

Run from the repository root after `make`, with Debian's Python (python3-torch):
    /usr/bin/python3 tests/ref/make_decode_fixtures.py
"""
import json, os, struct, subprocess, sys, tempfile
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import forward  # noqa: E402

BOS, EOS = 1, 2
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, "bin")
OUT = os.path.join(ROOT, "tests", "fixtures", "ref", "decode")
STEPS = int(os.environ.get("STEPS", "600"))


def sh(cmd, **kw):
    env = dict(os.environ, PATH=BIN + ":" + os.environ["PATH"])
    return subprocess.run(cmd, shell=True, check=True, env=env, **kw)


def load_f32(path):
    buf = open(path, "rb").read()
    n = struct.unpack("<Q", buf[:8])[0]
    hdr = json.loads(buf[8:8 + n])
    meta = hdr.pop("__metadata__", {})
    P = {}
    for k, v in hdr.items():
        if v["dtype"] == "F32":
            a, b = v["data_offsets"]
            t = torch.frombuffer(bytearray(buf[8 + n + a:8 + n + b]), dtype=torch.float32).reshape(v["shape"])
            P[k] = t.clone().double()
    return meta, P


LEXICON = dict(a="ein", man="mann", woman="frau", child="kind", dog="hund", cat="katze", red="rot",
               blue="blau", big="gross", small="klein", runs="rennt", sits="sitzt", eats="isst",
               sees="sieht", in_="in", on="auf", the="der", park="park", street="strasse", house="haus",
               water="wasser", ball="ball", with_="mit", and_="und", young="jung", old="alt",
               green="gruen", car="auto", tree="baum", bike="fahrrad", jumps="springt", plays="spielt")


def sentences(rng, n):
    words = sorted(LEXICON)
    out = []
    for _ in range(n):
        w = [rng.choice(words) for _ in range(rng.randint(1, 16))]
        out.append((" ".join(x.rstrip("_") for x in w), " ".join(LEXICON[x] for x in w)))
    return out


def main():
    import random
    os.makedirs(OUT, exist_ok=True)
    rng = random.Random(7)
    train, test = sentences(rng, 8000), sentences(rng, 40)
    with tempfile.TemporaryDirectory() as d:
        with open(f"{d}/en", "w") as f:
            f.write("".join(e + "\n" for e, _ in train))
        with open(f"{d}/de", "w") as f:
            f.write("".join(g + "\n" for _, g in train))
        with open(f"{OUT}/src.en", "w") as f:
            f.write("".join(e + "\n" for e, _ in test))
        sh(f"nmt-tokenize --src {d}/en --tgt {d}/de | nmt-vocab --size 300 -o {d}/v.bpe")
        sh(f"nmt-tokenize --vocab {d}/v.bpe --src {d}/en --tgt {d}/de | nmt-batch --max-tokens 2000 -o {d}/b 2>/dev/null")
        sh(f"nmt-train -q -i {d}/b --vocab {d}/v.bpe -o {d}/m.ckpt --d-model 64 --heads 2 --ff 128 --layers 2 "
           f"--lr 2 --warmup 300 --dropout 0 --max-steps {STEPS} --threads 2 --seed 3")
        sh(f"nmt-avg -o {OUT}/model.ckpt {d}/m.ckpt")
        ids = sh(f"nmt-tokenize --vocab {d}/v.bpe --text=ids < {OUT}/src.en", capture_output=True, text=True).stdout
    meta, P = load_f32(os.path.join(OUT, "model.ckpt"))
    cfg = dict(d=int(meta["model.d_model"]), heads=int(meta["model.heads"]), enc=int(meta["model.enc_layers"]),
               dec=int(meta["model.dec_layers"]), pre=int(meta["model.pre_norm"]), ln_eps=float(meta["model.ln_eps"]))
    lines, margins = [], []
    for line in ids.splitlines():
        src = [int(x) for x in line.split()] + [EOS]
        s = torch.tensor([src])
        sl = torch.tensor([len(src)])
        out = []
        while len(out) + 1 <= len(src) - 1 + 50:  # nmt-decode's default limit: 1 * source tokens + 50, with EOS
            tin = torch.tensor([[BOS] + out])
            logits = forward(P, cfg, s, sl, tin, torch.tensor([tin.shape[1]]))[0, -1]
            top = torch.topk(logits, 2)
            margins.append(float(top.values[0] - top.values[1]))
            nxt = int(top.indices[0])
            if nxt == EOS:
                break
            out.append(nxt)
        lines.append(" ".join(map(str, out)))
    distinct, lengths = len(set(lines)), len(set(len(x.split()) for x in lines))
    print(f"{len(lines)} sentences, {distinct} distinct outputs of {lengths} different lengths; "
          f"smallest top-2 logit margin {min(margins):.2e}", file=sys.stderr)
    if distinct < 30 or lengths < 8:
        sys.exit("the fixture model does not condition on its source enough: train it longer")
    with open(os.path.join(OUT, "greedy.ids"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
