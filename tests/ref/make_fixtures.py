#!/usr/bin/python3
"""Builds the reference fixtures of the model test (tests/unit/test_model.c) with PyTorch.

For each variant (post-norm, pre-norm, and "marian": post-norm with Marian's positions, a zero start
embedding, swish, a separate source embedding, an output bias and layer norm epsilon 1e-6) it asks
the C test for our initial weights and fixed batch (NMT_REF_DUMP), builds the same Transformer in
PyTorch (float64) from those weights, and writes
tests/fixtures/ref/<variant>.safetensors holding the weights, the batch, and the reference logits,
loss, every parameter gradient and the losses of 10 Adam steps (dropout 0).

Run from the repository root after `make tests-built`, with Debian's Python (python3-torch):
    /usr/bin/python3 tests/ref/make_fixtures.py [VARIANT...]
(all variants when none is named).
"""
import json, math, os, struct, subprocess, sys, tempfile
import torch
import torch.nn.functional as F

PAD, BOS, EOS = 0, 1, 2
DT = {"F32": (torch.float32, 4), "F64": (torch.float64, 8), "I32": (torch.int32, 4)}


def st_read(path):
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack("<Q", buf[:8])[0]
    hdr = json.loads(buf[8:8 + n])
    meta = hdr.pop("__metadata__", {})
    data = buf[8 + n:]
    out = {}
    for k, v in hdr.items():
        dt, _ = DT[v["dtype"]]
        a, b = v["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=dt).reshape(v["shape"]) if b > a else torch.zeros(v["shape"], dtype=dt)
        out[k] = t.clone()
    return meta, out


def st_write(path, meta, tensors):
    hdr, blobs, off = {"__metadata__": meta}, [], 0
    for k, t in tensors.items():
        t = t.contiguous()
        name = {torch.float32: "F32", torch.float64: "F64", torch.int32: "I32"}[t.dtype]
        b = t.numpy().tobytes()
        hdr[k] = {"dtype": name, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def sinusoid(T, d):
    pe = torch.zeros(T, d, dtype=torch.float64)
    pos = torch.arange(T, dtype=torch.float64).unsqueeze(1)
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d))
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
    return pe


def sinusoid_marian(T, d):
    """Marian's: sines in dims [0, d/2), cosines in [d/2, d), angle p exp(-i ln(10000)/(d/2-1))."""
    h = d // 2
    pos = torch.arange(T, dtype=torch.float64).unsqueeze(1)
    ang = pos * torch.exp(torch.arange(h, dtype=torch.float64) * (-math.log(10000.0) / max(h - 1, 1)))
    return torch.cat([torch.sin(ang), torch.cos(ang)], 1)


def forward(P, cfg, src, src_len, tin, tgt_len):
    """Functional Transformer over the parameter dict P (float64), as model.c computes it."""
    d, H, pre = cfg["d"], cfg["heads"], cfg["pre"]
    dh = d // H
    eps = cfg["ln_eps"]
    B, S = src.shape
    T = tin.shape[1]
    ln = lambda x, p: F.layer_norm(x, (d,), P[p + ".weight"], P[p + ".bias"], eps)
    lin = lambda x, p: F.linear(x, P[p + ".weight"], P[p + ".bias"])

    def attend(q, k, v, mask):
        sp = lambda x: x.view(B, -1, H, dh).transpose(1, 2)
        s = sp(q) @ sp(k).transpose(-1, -2) * dh ** -0.5 + mask
        a = torch.softmax(s, -1)
        return (a @ sp(v)).transpose(1, 2).reshape(B, -1, d)

    def res(x, p_ln, sub):
        if pre:
            return x + sub(ln(x, p_ln))
        return ln(x + sub(x), p_ln)

    pe = sinusoid_marian if cfg["positions"] == "marian" else sinusoid
    act = F.silu if cfg["activation"] == "swish" else torch.relu
    emb = P["emb.weight"]
    demb = emb if cfg["tie"] == "all" else P["dec_emb.weight"]
    out_w = P["out.weight"] if cfg["tie"] == "none" else demb
    neg = torch.tensor(float("-inf"), dtype=torch.float64)
    smask = torch.where(torch.arange(S)[None, :] < src_len[:, None], 0.0, neg).to(torch.float64)[:, None, None, :]
    x = emb[src] * math.sqrt(d) + pe(S, d)
    for l in range(cfg["enc"]):
        p = f"enc.{l}."
        def sa(h, p=p):
            q, k, v = lin(h, p + "att.qkv").chunk(3, -1)
            return lin(attend(q, k, v, smask), p + "att.o")
        x = res(x, p + "ln1", sa)
        x = res(x, p + "ln2", lambda h, p=p: lin(act(lin(h, p + "ffn.w1")), p + "ffn.w2"))
    mem = ln(x, "enc_ln") if pre else x
    causal = torch.triu(torch.full((T, T), float("-inf"), dtype=torch.float64), diagonal=1)
    y = demb[tin] * math.sqrt(d)
    if cfg["start_zero"]:  # the first input is a zero vector (plus its position)
        y = torch.cat([torch.zeros_like(y[:, :1]), y[:, 1:]], 1)
    y = y + pe(T, d)
    for l in range(cfg["dec"]):
        p = f"dec.{l}."
        def sa(h, p=p):
            q, k, v = lin(h, p + "self_att.qkv").chunk(3, -1)
            return lin(attend(q, k, v, causal), p + "self_att.o")
        def ca(h, p=p):
            q = lin(h, p + "cross_att.q")
            k, v = lin(mem, p + "cross_att.kv").chunk(2, -1)
            return lin(attend(q, k, v, smask), p + "cross_att.o")
        y = res(y, p + "ln1", sa)
        y = res(y, p + "ln2", ca)
        y = res(y, p + "ln3", lambda h, p=p: lin(act(lin(h, p + "ffn.w1")), p + "ffn.w2"))
    if pre:
        y = ln(y, "dec_ln")
    logits = y @ out_w.t()  # (B, T, V)
    return logits + P["out.bias"] if cfg["output_bias"] else logits


def make(variant, pre, test_bin, outdir):
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "init.safetensors")
        env = dict(os.environ, NMT_REF_DUMP=dump, NMT_REF_PRENORM="1" if pre else "0", NMT_REF_VARIANT=variant)
        subprocess.run([test_bin], env=env, check=True)
        meta, T = st_read(dump)
    cfg = dict(d=int(meta["model.d_model"]), heads=int(meta["model.heads"]), enc=int(meta["model.enc_layers"]),
               dec=int(meta["model.dec_layers"]), pre=int(meta["model.pre_norm"]), ln_eps=float(meta["model.ln_eps"]),
               positions=meta.get("model.positions", "paper"),
               start_zero=meta.get("model.start_embedding", "bos") == "zero",
               activation=meta.get("model.activation", "relu"), tie=meta.get("model.tied_embeddings", "all"),
               output_bias=meta.get("model.output_bias", "0") == "1")
    eps_ls = float(meta["model.label_smoothing"])
    V = int(meta["model.vocab"])
    names = [k for k in T if not k.startswith("batch.")]
    src, tgt = T["batch.src"].long(), T["batch.tgt"].long()
    sl, tl = T["batch.src_len"].long(), T["batch.tgt_len"].long()
    Tt = tgt.shape[1]
    tin = torch.cat([torch.full((tgt.shape[0], 1), BOS), tgt[:, :-1]], 1)
    valid = torch.arange(Tt)[None, :] < tl[:, None]
    tin = torch.where(valid, tin, torch.zeros_like(tin))
    labels = torch.where(valid, tgt, torch.full_like(tgt, -100))

    def run(P):
        logits = forward(P, cfg, src, sl, tin, tl)
        lf = logits.reshape(-1, V)
        loss = F.cross_entropy(lf, labels.reshape(-1), ignore_index=-100, label_smoothing=eps_ls, reduction="sum")
        nll = F.cross_entropy(lf, labels.reshape(-1), ignore_index=-100, reduction="sum")
        return logits, loss, nll

    P = {k: T[k].double().requires_grad_(True) for k in names}
    logits, loss, nll = run(P)
    loss.backward()
    ntok = int(valid.sum())
    out = dict(T)
    out["ref.logits"] = logits[valid].detach().float()  # (tokens, V) in row-major batch order
    out["ref.loss"] = torch.tensor([loss.item(), nll.item(), float(ntok)], dtype=torch.float64)
    for k in names:
        out["ref.grad." + k] = P[k].grad.float()
    # 10 Adam steps on the per-token loss with clipping and the paper's schedule
    warmup, scale, clip, steps = 4, 2.0, 1.0, 10
    P = {k: T[k].double().requires_grad_(True) for k in names}
    opt = torch.optim.Adam(list(P.values()), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    losses = []
    for t in range(1, steps + 1):
        for g in opt.param_groups:
            g["lr"] = scale * cfg["d"] ** -0.5 * min(t ** -0.5, t * warmup ** -1.5)
        opt.zero_grad()
        _, l, _ = run(P)
        (l / ntok).backward()
        losses.append(l.item() / ntok)
        torch.nn.utils.clip_grad_norm_(list(P.values()), clip)
        opt.step()
    out["ref.steps"] = torch.tensor(losses, dtype=torch.float64)
    meta = dict(meta, **{"ref.warmup": str(warmup), "ref.lr_scale": str(scale), "ref.clip": str(clip),
                         "ref.torch": torch.__version__})
    path = os.path.join(outdir, variant + ".safetensors")
    st_write(path, meta, out)
    print(f"{path}: {len(names)} tensors, loss {loss.item():.6f}, {ntok} tokens, steps {losses[0]:.4f} -> {losses[-1]:.4f}")


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    test_bin = os.path.join(root, "build", "tests", "test_model")
    outdir = os.path.join(root, "tests", "fixtures", "ref")
    os.makedirs(outdir, exist_ok=True)
    os.environ.setdefault("NMT_PLUGIN_PATH", os.path.join(root, "bin"))
    variants = {"post": False, "pre": True, "marian": False}
    for v in sys.argv[1:] or list(variants):
        make(v, variants[v], test_bin, outdir)


if __name__ == "__main__":
    main()
