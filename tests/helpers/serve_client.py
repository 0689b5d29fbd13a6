#!/usr/bin/env python3
"""A client of nmt-serve for the tests (standard library only).

  serve_client.py call ADDR METHOD PATH [BODY_FILE]
                                              one request: prints the status, the Retry-After
                                              header when present, and the body
  serve_client.py translate ADDR FILE [--beam K] [--nbest N] [--scores] [--clients C] [--per-request M]
                                              translates FILE's lines, M a request (default 1), over C
                                              concurrent clients (default 1) taking interleaved
                                              requests; prints what nmt-decode prints with the same
                                              options (text; score TAB text; line TAB rank TAB score
                                              TAB text); exit 1 if a request failed
  serve_client.py load ADDR FILE C [SECONDS]  sends FILE's lines one a request from C concurrent clients
                                              (each client its share, in turn); prints "sentences/s p50_ms
                                              p99_ms errors requests" (errors: answers other than 200 with
                                              one translation a line, and requests that failed). With
                                              SECONDS: each client goes round its share for that long, in
                                              requests of 1 to 8 lines in turn (the soak)
  serve_client.py drain ADDR PID FILE N       sends N requests of FILE's lines at once, waits until
                                              the server has them all in flight, sends PID SIGTERM,
                                              and checks that each is answered 200 with a translation
                                              per line; prints "answered N"
"""
import http.client
import json
import os
import signal
import sys
import threading
import time


def conn(addr, timeout=60):
    host, port = addr.rsplit(":", 1)
    return http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout)


def request(addr, method, path, body=None):
    c = conn(addr)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, r.getheader("Retry-After"), data


def metric(addr, name):
    text = request(addr, "GET", "/metrics")[2].decode()
    for line in text.splitlines():
        if line.split(" ")[0] == name:
            return float(line.split(" ")[1])
    raise SystemExit("no metric %s" % name)


def fmt(i, t, opts):
    """nmt-decode's lines for sentence I (0-based) of answer entry T."""
    if opts["nbest"] > 1:
        return ["%d\t%d\t%.6f\t%s" % (i + 1, k + 1, h["score"], h["text"]) for k, h in enumerate(t["nbest"])]
    if opts["scores"]:
        return ["%.6f\t%s" % (t["score"], t["text"])]
    return [t]


def translate(addr, path, args):
    opts = {"beam": 1, "nbest": 1, "scores": False, "clients": 1, "per": 1}
    keys = {"--beam": "beam", "--nbest": "nbest", "--clients": "clients", "--per-request": "per"}
    i = 0
    while i < len(args):
        if args[i] == "--scores":
            opts["scores"] = True
            i += 1
        else:
            opts[keys[args[i]]] = int(args[i + 1])
            i += 2
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")[:-1]
    reqs = [list(range(j, min(j + opts["per"], len(lines)))) for j in range(0, len(lines), opts["per"])]
    out = [None] * len(lines)
    failures = []

    def client(k):
        c = conn(addr)
        for r in reqs[k::opts["clients"]]:
            body = {"text": [lines[j] for j in r], "beam": opts["beam"], "nbest": opts["nbest"]}
            if opts["scores"]:
                body["scores"] = True
            c.request("POST", "/translate", body=json.dumps(body), headers={"Content-Type": "application/json"})
            resp = c.getresponse()
            data = resp.read()
            if resp.status != 200:
                failures.append("%d %s" % (resp.status, data.decode(errors="replace")))
                continue
            for j, t in zip(r, json.loads(data)["translations"]):
                out[j] = fmt(j, t, opts)
        c.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(opts["clients"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for f in failures:
        print("failed: " + f, file=sys.stderr)
    for o in out:
        for line in o or ["<missing>"]:
            sys.stdout.write(line + "\n")
    return 1 if failures or None in out else 0


def drain(addr, pid, path, n):
    with open(path, encoding="utf-8") as f:
        lines = [s for s in f.read().split("\n")[:-1] if s]
    results = []

    def one():
        try:
            status, _, data = request(addr, "POST", "/translate", json.dumps({"text": lines}))
            results.append((status, len(json.loads(data).get("translations", []))))
        except OSError as e:
            results.append((str(e), 0))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    end = time.time() + 20
    while metric(addr, "nmt_serve_requests_in_flight") < n + 1:  # the metrics request counts too
        if time.time() > end:
            raise SystemExit("the requests never were all in flight")
        time.sleep(0.02)
    os.kill(pid, signal.SIGTERM)
    for t in threads:
        t.join()
    bad = [r for r in results if r != (200, len(lines))]
    if bad or len(results) != n:
        print("bad answers: %r" % bad, file=sys.stderr)
        return 1
    print("answered %d" % n)
    return 0


def load(addr, path, clients, seconds=None):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")[:-1]
    lat, errors, sent = [], [0], [0]
    lock = threading.Lock()
    end = time.time() + seconds if seconds else None

    def one(c, chunk):
        """Sends CHUNK; returns the connection to go on with (a new one after a failure)."""
        t = time.time()
        ok = False
        try:
            c.request("POST", "/translate", body=json.dumps({"text": chunk}),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            ok = r.status == 200 and len(json.loads(data)["translations"]) == len(chunk)
        except (OSError, http.client.HTTPException, ValueError, KeyError):
            c.close()
            c = conn(addr)
        with lock:
            lat.append(time.time() - t)
            sent[0] += len(chunk)
            errors[0] += 0 if ok else 1
        return c

    def client(k):
        c = conn(addr)
        mine = lines[k::clients]
        if end is None:
            for line in mine:
                c = one(c, [line])
        else:
            i, size = 0, 1
            while mine and time.time() < end:
                chunk = [mine[(i + j) % len(mine)] for j in range(size)]
                c = one(c, chunk)
                i, size = i + size, size % 8 + 1
        c.close()

    t0 = time.time()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    lat.sort()

    def pct(q):  # nearest rank
        return 1000 * lat[max(0, min(len(lat) - 1, -(-int(q * 1000) * len(lat) // 1000) - 1))] if lat else 0.0

    expected = len(lines) if end is None else len(lat)
    print("%.1f %.1f %.1f %d %d" % (sent[0] / wall, pct(0.5), pct(0.99), errors[0] + expected - len(lat), len(lat)))
    return 0


def main(argv):
    cmd, addr = argv[1], argv[2]
    if cmd == "call":
        body = open(argv[5], "rb").read() if len(argv) > 5 else None
        status, retry, data = request(addr, argv[3], argv[4], body)
        print(status)
        if retry:
            print("Retry-After: " + retry)
        sys.stdout.write(data.decode(errors="replace"))
        return 0
    if cmd == "translate":
        return translate(addr, argv[3], argv[4:])
    if cmd == "load":
        return load(addr, argv[3], int(argv[4]), float(argv[5]) if len(argv) > 5 else None)
    if cmd == "drain":
        return drain(addr, int(argv[3]), argv[4], int(argv[5]))
    raise SystemExit("unknown command " + cmd)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
