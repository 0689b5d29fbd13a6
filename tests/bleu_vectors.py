#!/usr/bin/env python3
"""Runs every case x configuration of tests/fixtures/bleu (sacreBLEU 2.6.0 reference values)
through the real nmt-bleu and compares: the exact stdout of -f text, -f text -w 2, the default
JSON and the --short text line; the signatures; and with --full every value (score, counts,
totals, precisions, bp, ratio, lengths, chrF statistics, TER edits/reference length), floats
within 1e-9. nmt-bleu's signature names itself in the version field; that value is replaced by
the vectors' "2.6.0" before comparing, every other byte must match.

Usage: bleu_vectors.py NMT_BLEU FIXTURE_DIR    (prints TAP, exits 1 on any failure)
Standard library only."""
import json
import os
import subprocess
import sys

TOL = 1e-9


def main():
    exe, root = os.path.abspath(sys.argv[1]), sys.argv[2]
    ver = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    ours = [l.split()[-1] for l in ver.splitlines() if l.startswith("signature version")][0]
    n = 0
    failed = 0

    def ok(cond, what, detail=""):
        nonlocal n, failed
        n += 1
        if cond:
            print(f"ok {n} - {what}")
        else:
            failed += 1
            print(f"not ok {n} - {what}")
            for line in str(detail).splitlines():
                print(f"#   {line}")

    def run(case_dir, refs, opts):
        p = subprocess.run([exe, *refs, "-i", "hyp.txt", *opts], cwd=case_dir,
                           capture_output=True)
        out = p.stdout.decode("utf-8")
        return p.returncode, out.replace("version:" + ours, "version:2.6.0").replace(
            '"version": "' + ours + '"', '"version": "2.6.0"').replace(
            "v:" + ours, "v:2.6.0"), p.stderr.decode("utf-8", "replace")

    def close(a, b):
        if isinstance(b, list):
            return isinstance(a, list) and len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
        return abs(float(a) - float(b)) <= TOL * max(1.0, abs(float(b)))

    def cmp_fields(got, exp, fields, what):
        for f in fields:
            if f in exp:
                ok(f in got and close(got[f], exp[f]), f"{what} {f}",
                   f"expected {exp[f]!r}\ngot      {got.get(f)!r}")

    cases = sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "expected.json")))
    for case in cases:
        cdir = os.path.join(root, case)
        with open(os.path.join(cdir, "expected.json"), encoding="utf-8") as fh:
            exp = json.load(fh)
        refs = exp["ref_files"]
        fields = ["score", "counts", "totals", "precisions", "bp", "ratio", "sys_len", "ref_len",
                  "stats", "num_edits", "ref_length"]
        for e in exp["corpus"]:
            opts = e["cli_options"]
            what = f"{case} {e['id']}"
            rc, out, err = run(cdir, refs, opts + ["-f", "text"])
            ok(rc == 0 and out == e["cli_text"] + "\n", f"{what} cli_text",
               f"expected {e['cli_text']!r}\ngot      {out!r}\n{err}")
            rc, out, err = run(cdir, refs, opts + ["-f", "text", "-w", "2"])
            ok(rc == 0 and out == e["cli_text_w2"] + "\n", f"{what} cli_text_w2",
               f"expected {e['cli_text_w2']!r}\ngot      {out!r}\n{err}")
            rc, out, err = run(cdir, refs, opts)
            ok(rc == 0 and out == e["cli_json"], f"{what} cli_json",
               f"expected {e['cli_json']!r}\ngot      {out!r}\n{err}")
            try:
                sig = json.loads(out).get("signature")
            except ValueError:
                sig = None
            ok(sig == e["signature"], f"{what} signature", f"expected {e['signature']!r}\ngot      {sig!r}")
            rc, out, err = run(cdir, refs, opts + ["-f", "text", "--short"])
            want = e["cli_text"].replace(e["signature"], e["signature_short"])
            ok(rc == 0 and out == want + "\n", f"{what} signature_short",
               f"expected {want!r}\ngot      {out!r}\n{err}")
            rc, out, err = run(cdir, refs, opts + ["-b"])
            ok(rc == 0 and out == e["score_w1"] + "\n", f"{what} score_w1", f"got {out!r}")
            rc, out, err = run(cdir, refs, opts + ["--full"])
            try:
                got = json.loads(out)
            except ValueError:
                got = {}
            ok(rc == 0 and got.get("name") == e["metric"], f"{what} --full runs", out + err)
            cmp_fields(got, e, fields, what)
        for sid, blk in sorted(exp.get("sentence", {}).items()):
            opts = blk["cli_options"]
            what = f"{case} {sid}"
            nl = len(blk["lines"])
            rc, out, err = run(cdir, refs, opts)
            lines = out.split("\n")
            ok(rc == 0 and len(lines) == exp["num_lines"] + 1 and lines[-1] == "", f"{what} line count",
               f"got {len(lines) - 1} lines, expected {exp['num_lines']}\n{err}")
            for item in blk["lines"]:
                i = item["line"] - 1
                ok(i < len(lines) and lines[i] == item["cli_text"], f"{what} line {item['line']} cli_text",
                   f"expected {item['cli_text']!r}\ngot      {lines[i] if i < len(lines) else None!r}")
            rc, out, err = run(cdir, refs, opts + ["-w", "2"])
            lines = out.split("\n")
            ok(rc == 0 and all(lines[it["line"] - 1].split(" = ")[1].startswith(it["score_w2"] + " ") or
                               lines[it["line"] - 1].split(" = ")[1] == it["score_w2"]
                               for it in blk["lines"]), f"{what} -w 2 scores", out[:2000])
            rc, out, err = run(cdir, refs, opts + ["--full"])
            rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
            ok(rc == 0 and len(rows) == exp["num_lines"], f"{what} --full rows", err)
            bad = []
            for item in blk["lines"]:
                got = rows[item["line"] - 1] if item["line"] - 1 < len(rows) else {}
                for f in fields:
                    if f in item and not (f in got and close(got[f], item[f])):
                        bad.append(f"line {item['line']} {f}: expected {item[f]!r} got {got.get(f)!r}")
            ok(not bad, f"{what} full values of {nl} lines", "\n".join(bad[:20]))
    print(f"1..{n}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
