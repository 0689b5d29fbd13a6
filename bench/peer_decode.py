#!/usr/bin/python3
"""Runs the PyTorch peer's own decoding (its greedy() and beam_search(), batched and timed as its
`decode` command does) on an nmt checkpoint, so that both decoders translate with the same weights.

The peer (../shared/bench/torch_peer/train.py, given by --peer) is imported at run time; its model
classes use the same parameter names, layout and sinusoid as nmt, so the checkpoint's tensors load
into them as they are. Input: source ids, one sentence per line (`nmt-tokenize --vocab V --text=ids`),
so both sides see the same token ids. Output: the ids of the best hypothesis per line (--out), and a
DECODE line of JSON with sentences/s and target tokens/s, as the peer prints.

    /usr/bin/python3 bench/peer_decode.py --peer ../shared/bench/torch_peer/train.py \\
        --ckpt model.ckpt --ids test.ids --beam 4 --batch 32 --out peer.ids
"""
import argparse, importlib.util, json, struct, sys, time


def load_checkpoint(path, torch):
    buf = open(path, "rb").read()
    n = struct.unpack("<Q", buf[:8])[0]
    hdr = json.loads(buf[8:8 + n])
    meta = hdr.pop("__metadata__", {})
    state = {}
    for name, v in hdr.items():
        if v["dtype"] != "F32" or name.startswith("optim."):
            continue
        a, b = v["data_offsets"]
        state[name] = torch.frombuffer(bytearray(buf[8 + n + a:8 + n + b]), dtype=torch.float32).reshape(v["shape"])
    return meta, state


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", required=True, help="path of the peer's train.py")
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--alpha", type=float, default=0.6)
    ap.add_argument("--max-len-b", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    spec = importlib.util.spec_from_file_location("torch_peer", a.peer)
    peer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peer)
    peer.lazy_torch()
    torch = peer.torch
    peer.PAD, peer.BOS, peer.EOS = 0, 1, 2  # nmt's special ids (the peer's own are SentencePiece's)
    torch.set_num_threads(a.threads)

    meta, state = load_checkpoint(a.ckpt, torch)
    c = {k[6:]: v for k, v in meta.items() if k.startswith("model.")}
    if int(c["pre_norm"]) or int(c["enc_layers"]) < 1:
        sys.exit("peer_decode: the peer has post-norm layers only")
    model = peer.build_model_classes()(int(c["vocab"]), int(c["d_model"]), int(c["heads"]), int(c["ff"]),
                                       int(c["enc_layers"]), int(c["dec_layers"]), 0.0)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        sys.exit(f"peer_decode: checkpoint does not fit the peer's model: missing {missing}, unexpected {unexpected}")
    model.eval()

    srcs = [[int(x) for x in l.split()] + [peer.EOS] for l in open(a.ids)]
    order = sorted(range(len(srcs)), key=lambda i: len(srcs[i]))
    outs = [None] * len(srcs)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for k in range(0, len(order), a.batch):
            ids = order[k:k + a.batch]
            S = max(len(srcs[i]) for i in ids)
            src = torch.full((len(ids), S), peer.PAD, dtype=torch.long)
            for b, i in enumerate(ids):
                src[b, :len(srcs[i])] = torch.tensor(srcs[i])
            max_len = S + a.max_len_b
            res = (peer.greedy(model, src, max_len) if a.beam <= 1
                   else peer.beam_search(model, src, a.beam, max_len, a.alpha))
            for i, r in zip(ids, res):
                outs[i] = r
    dt = time.perf_counter() - t0
    with open(a.out, "w") as f:
        for o in outs:
            f.write(" ".join(map(str, o)) + "\n")
    ntok = sum(len(o) for o in outs)
    print("DECODE " + json.dumps(dict(mode="greedy" if a.beam <= 1 else f"beam{a.beam}", batch=a.batch,
                                      threads=torch.get_num_threads(), sentences=len(outs), out_tokens=ntok,
                                      decode_s=dt, sent_per_s=len(outs) / dt, tgt_tok_per_s=ntok / dt)), flush=True)


if __name__ == "__main__":
    main()
