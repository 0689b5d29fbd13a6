#!/usr/bin/python3
"""What-if quantisation schemes, simulated in float32 on the PyTorch peer's model: how many greedy
translations each scheme leaves identical to float32's, before writing a kernel for it.

Every linear layer of the encoder and decoder (the output projection stays float32, as nmt-decode
--precision int8 does) has its weight and/or its input rounded to an int8 grid and computed back in
float32 ("fake quantisation"); rounding is to nearest even, values in -127..127, one scale per
output row (weights) or per input row (activations), as the cpu plugin's int8 layer (linear_q.c)
computes them. The simulated `w8a8` is that layer: it agrees with `nmt-decode --precision int8` to
within a few sentences (the simulation's float32 sums are not the plugin's integer sums).

Schemes, one per argument, FORM[:OPTION...]:
  w8a8, w8a32, w32a8, w32a32   which of weights (w) and activations (a) are rounded to int8;
  w8a12, w8a16                 activations rounded to 12 or 16 bits instead (-2047..2047,
                               -32767..32767: integer products summed in int32 with int16 inputs)
  wgN, agN                     scales per group of N input columns instead of per row
  sqALPHA                      SmoothQuant (Xiao et al. 2022): inputs divided per column by
                               s = amax(x)^ALPHA / amax(w)^(1 - ALPHA), weights multiplied by it;
                               amax(x) from the calibration set's greedy decoding
  asym                         activations asymmetric in 0..255 with a zero point per row
  ditherSEED                   weights rounded with a random offset of up to 0.15 of a step
                               (same grid): the spread of agreement between equally good roundings

    /usr/bin/python3 bench/quant_sim.py --peer ../shared/bench/torch_peer/train.py \\
        --ckpt model.avg.ckpt --test test.ids --calib val.ids w8a32 w8a8 w8a8:sq0.5 w8a8:dither1

--test and --calib: source ids, one sentence per line (`nmt-tokenize --vocab V --text=ids`).
Prints, per scheme, the greedy translations identical to float32's on the test set and on the
calibration set (a second sample of the same statistic).
"""
import argparse, importlib.util, os, re, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_decode import load_checkpoint  # noqa: E402


def parse_scheme(text):
    m = re.fullmatch(r"w(8|32)a(8|12|16|32)((?::[a-z]+[0-9.]*)*)", text)
    if not m:
        sys.exit(f"quant_sim: bad scheme '{text}'")
    abits = int(m.group(2))
    s = dict(name=text, w=m.group(1) == "8", a=abits < 32, amax=(1 << (abits - 1)) - 1, wg=0, ag=0, sq=None, asym=False, dither=None)
    for opt in filter(None, m.group(3).split(":")):
        k, v = re.fullmatch(r"([a-z]+)([0-9.]*)", opt).groups()
        if k in ("wg", "ag") and v.isdigit():
            s[k] = int(v)
        elif k == "sq" and v:
            s["sq"] = float(v)
        elif k == "asym" and not v:
            s["asym"] = True
        elif k == "dither" and v.isdigit():
            s["dither"] = int(v)
        else:
            sys.exit(f"quant_sim: bad option '{opt}' in '{text}'")
    return s


class Sim:
    def __init__(self, a):
        spec = importlib.util.spec_from_file_location("torch_peer", a.peer)
        peer = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(peer)
        peer.lazy_torch()
        peer.PAD, peer.BOS, peer.EOS = 0, 1, 2  # nmt's special ids
        self.peer, self.torch = peer, peer.torch
        self.torch.set_num_threads(a.threads)
        meta, state = load_checkpoint(a.ckpt, self.torch)
        c = {k[6:]: int(float(v)) for k, v in meta.items() if k.startswith("model.") and k != "model.arch"}
        if c["pre_norm"]:
            sys.exit("quant_sim: the peer has post-norm layers only")
        self.model = peer.build_model_classes()(c["vocab"], c["d_model"], c["heads"], c["ff"], c["enc_layers"],
                                                c["dec_layers"], 0.0)
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if missing or unexpected:
            sys.exit(f"quant_sim: checkpoint does not fit the peer's model: {missing} {unexpected}")
        self.model.eval()
        self.linears = {n: m for n, m in self.model.named_modules() if isinstance(m, self.torch.nn.Linear)}
        self.w0 = {n: m.weight.detach().clone() for n, m in self.linears.items()}
        self.scheme, self.smooth, self.amax = None, {}, None
        for n, m in self.linears.items():
            m.forward = self.forward_of(n, m)

    def q8(self, x, group, gen=None, top=127):
        """x rounded per row (last dimension), or per GROUP columns of it, to the symmetric grid
        -TOP..TOP (int8: 127)."""
        torch = self.torch
        shape = x.shape
        if group and shape[-1] % group == 0:
            x = x.reshape(*shape[:-1], shape[-1] // group, group)
        m = x.abs().amax(-1, keepdim=True)
        s = torch.where(m > 0, m / top, torch.ones_like(m))
        y = x / s
        if gen is not None:
            y = y + (torch.rand(y.shape, generator=gen) - 0.5) * 0.3
        return (torch.clamp(torch.round(y), -top, top) * s).reshape(shape)

    def q8_asym(self, x):
        torch = self.torch
        lo = torch.clamp(x.amin(-1, keepdim=True), max=0)
        hi = torch.clamp(x.amax(-1, keepdim=True), min=0)
        s = torch.where(hi > lo, (hi - lo) / 255, torch.ones_like(hi))
        z = torch.round(-lo / s)
        return (torch.clamp(torch.round(x / s) + z, 0, 255) - z) * s

    def forward_of(self, name, mod):
        F = self.torch.nn.functional

        def forward(x):
            if self.amax is not None:
                a = x.detach().abs().reshape(-1, x.shape[-1]).amax(0)
                self.amax[name] = self.torch.maximum(self.amax[name], a) if name in self.amax else a
            if name in self.smooth:
                x = x / self.smooth[name]
            if self.scheme and self.scheme["a"]:
                x = self.q8_asym(x) if self.scheme["asym"] else self.q8(x, self.scheme["ag"], top=self.scheme["amax"])
            return F.linear(x, mod.weight, mod.bias)
        return forward

    def greedy(self, path):
        peer, torch = self.peer, self.torch
        srcs = [[int(x) for x in line.split()] + [peer.EOS] for line in open(path)]
        order = sorted(range(len(srcs)), key=lambda i: len(srcs[i]))
        outs = [None] * len(srcs)
        with torch.inference_mode():
            for k in range(0, len(order), 64):
                ids = order[k:k + 64]
                S = max(len(srcs[i]) for i in ids)
                src = torch.full((len(ids), S), peer.PAD, dtype=torch.long)
                for b, i in enumerate(ids):
                    src[b, :len(srcs[i])] = torch.tensor(srcs[i])
                for i, r in zip(ids, peer.greedy(self.model, src, S + 50)):
                    outs[i] = r
        return outs

    def apply(self, s, amax):
        """Sets the weights and the input transform of scheme S (None: float32)."""
        torch = self.torch
        self.scheme, self.smooth = s, {}
        gen = torch.Generator().manual_seed(s["dither"]) if s and s["dither"] is not None else None
        with torch.no_grad():
            for n, m in self.linears.items():
                w = self.w0[n]
                if s and s["sq"] is not None:
                    wmax = w.abs().amax(0).clamp(min=1e-5)
                    self.smooth[n] = amax[n].clamp(min=1e-5) ** s["sq"] / wmax ** (1 - s["sq"])
                    w = w * self.smooth[n][None, :]
                m.weight.copy_(self.q8(w, s["wg"], gen) if s and s["w"] else w)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", required=True, help="path of the peer's train.py")
    ap.add_argument("--ckpt", required=True, help="a float32 nmt checkpoint (post-norm)")
    ap.add_argument("--test", required=True)
    ap.add_argument("--calib", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("schemes", nargs="+")
    a = ap.parse_args()
    schemes = [parse_scheme(t) for t in a.schemes]
    sim = Sim(a)
    sim.amax = {}
    ref_calib = sim.greedy(a.calib)  # float32, recording each layer's input magnitudes
    amax, sim.amax = sim.amax, None
    ref_test = sim.greedy(a.test)
    print(f"float32: {len(ref_test)} test and {len(ref_calib)} calibration sentences")
    for s in schemes:
        sim.apply(s, amax)
        same_t = sum(x == y for x, y in zip(sim.greedy(a.test), ref_test))
        same_c = sum(x == y for x, y in zip(sim.greedy(a.calib), ref_calib))
        print(f"{s['name']:<20} identical to float32: test {same_t}/{len(ref_test)} ({100 * same_t / len(ref_test):.1f}%), "
              f"calibration {same_c}/{len(ref_calib)} ({100 * same_c / len(ref_calib):.1f}%)", flush=True)


if __name__ == "__main__":
    main()
