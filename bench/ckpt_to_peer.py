#!/usr/bin/python3
"""Decodes with the PyTorch peer's own model and search code, using the weights of an nmt checkpoint.

Loads an nmt-train checkpoint (safetensors) into the peer's Transformer class and runs the peer's
greedy() or beam_search() (../shared/bench/torch_peer/train.py, imported at run time from its path, not
copied) on source ids from our tokenizer, so that vocabulary, weights and inputs are the same as
nmt-decode's. Batching and timing are those of the peer's `decode` sub-command: sentences sorted by
length, fixed batches of --batch sentences, time of the decoding loop only (no model load, no
tokenization). Writes one line of output ids per input line (EOS excluded) and prints a DECODE JSON line
(sentences/s, target tokens/s) like the peer.

    /usr/bin/python3 bench/ckpt_to_peer.py --ckpt model.ckpt --dump-vocab V   # the checkpoint's vocabulary
    nmt-tokenize --vocab V --text=ids < test.en > test.ids
    /usr/bin/python3 bench/ckpt_to_peer.py --ckpt model.ckpt --ids test.ids --beam 1 --batch 64 -o hyp.ids
    nmt-tokenize --decode --text=ids --vocab V < hyp.ids > hyp.txt

The parameter names of nmt checkpoints are the peer's state_dict names (same layouts: Linear weights
(out, in), fused qkv / kv projections, tied embedding), so the mapping is one to one; the script checks
that every peer tensor is found with the same shape. Special ids differ (nmt: PAD 0, BOS 1, EOS 2;
peer's SentencePiece setup: PAD 0, UNK 1, BOS 2, EOS 3): the peer module's constants are set to ours.
"""
import argparse, importlib.util, json, os, struct, sys, time

NMT_PAD, NMT_BOS, NMT_EOS = 0, 1, 2  # libcommon/records.h


def load_peer(path):
    spec = importlib.util.spec_from_file_location("torch_peer_train", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.lazy_torch()
    mod.PAD, mod.BOS, mod.EOS = NMT_PAD, NMT_BOS, NMT_EOS
    return mod


def read_checkpoint(path, torch):
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack("<Q", buf[:8])[0]
    hdr = json.loads(buf[8:8 + n])
    meta = hdr.pop("__metadata__", {})
    tensors = {}
    for name, v in hdr.items():
        a, b = v["data_offsets"]
        if name == "vocab.file":  # the vocabulary file, as bytes
            tensors[name] = buf[8 + n + a:8 + n + b]
        if v["dtype"] != "F32":
            continue
        tensors[name] = torch.frombuffer(bytearray(buf[8 + n + a:8 + n + b]), dtype=torch.float32).reshape(v["shape"])
    return meta, tensors


def build_model(peer, meta, tensors):
    torch = peer.torch
    if int(meta.get("model.pre_norm", "0")):
        sys.exit("ckpt_to_peer: the peer is post-norm only; this checkpoint is pre-norm")
    if abs(float(meta.get("model.ln_eps", "1e-5")) - 1e-5) > 1e-9:
        sys.exit("ckpt_to_peer: the peer's layer norms use eps 1e-5; this checkpoint has %s" % meta["model.ln_eps"])
    V, d, h, ff = (int(meta[k]) for k in ("model.vocab", "model.d_model", "model.heads", "model.ff"))
    enc, dec = int(meta["model.enc_layers"]), int(meta["model.dec_layers"])
    model = peer.build_model_classes()(V, d, h, ff, enc, dec, 0.0)
    state = model.state_dict()
    for name, t in state.items():
        if name not in tensors:
            sys.exit(f"ckpt_to_peer: the checkpoint has no tensor '{name}'")
        if tuple(tensors[name].shape) != tuple(t.shape):
            sys.exit(f"ckpt_to_peer: '{name}' is {tuple(tensors[name].shape)} in the checkpoint, {tuple(t.shape)} in the peer")
        state[name] = tensors[name]
    model.load_state_dict(state)
    model.eval()
    return model, dict(vocab=V, d=d, heads=h, ff=ff, enc=enc, dec=dec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt", required=True, help="nmt-train checkpoint (safetensors)")
    ap.add_argument("--ids", help="source ids, one sentence per line (nmt-tokenize --text=ids), no EOS")
    ap.add_argument("-o", "--output", help="output ids, one line per input line, EOS excluded")
    ap.add_argument("--peer", default=os.environ.get("PEER", "/work/shared/bench/torch_peer/train.py"))
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--alpha", type=float, default=0.6)
    ap.add_argument("--max-len-b", type=int, default=50, help="peer's limit: padded batch source length + this")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dump-vocab", metavar="FILE", help="only write the checkpoint's vocabulary file to FILE and exit")
    a = ap.parse_args()
    if a.dump_vocab:
        import torch
        meta, tensors = read_checkpoint(a.ckpt, torch)
        with open(a.dump_vocab, "wb") as f:
            f.write(tensors["vocab.file"])
        return

    if not a.ids or not a.output:
        ap.error("--ids and --output are needed")
    peer = load_peer(a.peer)
    torch = peer.torch
    torch.set_num_threads(a.threads)
    meta, tensors = read_checkpoint(a.ckpt, torch)
    model, cfg = build_model(peer, meta, tensors)
    del tensors
    with open(a.ids) as f:
        srcs = [[int(x) for x in line.split()] + [NMT_EOS] for line in f]
    # from here on exactly the peer's cmd_decode loop (train.py decode), with our ids
    order = sorted(range(len(srcs)), key=lambda i: len(srcs[i]))
    outs = [None] * len(srcs)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for k in range(0, len(order), a.batch):
            ids = order[k:k + a.batch]
            S = max(len(srcs[i]) for i in ids)
            src = torch.full((len(ids), S), NMT_PAD, dtype=torch.long)
            for b, i in enumerate(ids):
                src[b, :len(srcs[i])] = torch.tensor(srcs[i])
            max_len = S + a.max_len_b
            if a.beam <= 1:
                res = peer.greedy(model, src, max_len)
            else:
                res = peer.beam_search(model, src, a.beam, max_len, a.alpha)
            for i, r in zip(ids, res):
                outs[i] = r
    dt = time.perf_counter() - t0
    with open(a.output, "w") as f:
        for o in outs:
            f.write(" ".join(map(str, o)) + "\n")
    ntok = sum(len(o) for o in outs)
    res = dict(mode="greedy" if a.beam <= 1 else f"beam{a.beam}", batch=a.batch, threads=torch.get_num_threads(),
               model=cfg, sentences=len(outs), out_tokens=ntok, src_tokens=sum(len(s) for s in srcs), decode_s=dt,
               sent_per_s=len(outs) / dt, tgt_tok_per_s=ntok / dt, tgt_tok_per_s_incl_eos=(ntok + len(outs)) / dt)
    print("DECODE " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
