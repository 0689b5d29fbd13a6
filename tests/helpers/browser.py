#!/usr/bin/env python3
"""Types a sentence into nmt-serve's page in a headless Chromium and prints the translation shown.

  browser.py ADDR SENTENCE [SECONDS]

Starts chromedriver on a port it picks itself (--port=0, read back from its first lines), speaks
the WebDriver protocol to it over HTTP (JSON through urllib, standard library only): a new headless
session, GET http://ADDR/, the sentence typed into the text box, the button clicked, then the
page's output read until it is no longer empty. Every wait is bounded by SECONDS (default 30) in
all; the session and chromedriver are ended whatever happens. Exit 0 with the translation on
stdout; 1 with the reason on stderr.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference


class Driver:
    """A chromedriver process and one session in it."""

    def __init__(self, deadline):
        self.deadline = deadline
        self.session = None
        self.profile = tempfile.mkdtemp(prefix="nmt-browser-")
        self.proc = subprocess.Popen(["chromedriver", "--port=0"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        try:
            self.base = "http://127.0.0.1:%d" % self._port()
        except RuntimeError:
            self.close()
            raise
        # the rest of its output is read and dropped, so that it never blocks on a full pipe
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def _port(self):
        """The port of chromedriver's "started successfully on port N." line."""
        found = []

        def read():
            for line in self.proc.stdout:
                if "started successfully on port" in line:
                    found.append(int(line.rstrip().rstrip(".").rsplit(" ", 1)[1]))
                    return

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(max(0.1, self.deadline - time.time()))
        if not found:
            raise RuntimeError("chromedriver did not say which port it listens on")
        return found[0]

    def call(self, method, path, body=None):
        """One WebDriver command; returns its "value" or raises with the driver's message."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        timeout = max(1.0, self.deadline - time.time())
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read())["value"]
        except urllib.error.HTTPError as e:
            value = json.loads(e.read() or b"{}").get("value", {})
            raise RuntimeError("%s %s: %s" % (method, path, value.get("message", e.code))) from None

    def start(self):
        args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--user-data-dir=" + self.profile]
        opts = {"args": args}
        if shutil.which("chromium"):
            opts["binary"] = shutil.which("chromium")
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": opts}}}
        self.session = "/session/" + self.call("POST", "/session", caps)["sessionId"]

    def element(self, css):
        return self.call("POST", self.session + "/element", {"using": "css selector", "value": css})[ELEMENT]

    def script(self, js):
        return self.call("POST", self.session + "/execute/sync", {"script": js, "args": []})

    def close(self):
        try:
            if self.session:
                self.call("DELETE", self.session)
        except (OSError, RuntimeError):
            pass
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


def translate(addr, sentence, seconds):
    deadline = time.time() + seconds
    d = Driver(deadline)
    try:
        d.start()
        d.call("POST", d.session + "/url", {"url": "http://%s/" % addr})
        box = d.element("#src")
        d.call("POST", d.session + "/element/%s/value" % box, {"text": sentence})
        d.call("POST", d.session + "/element/%s/click" % d.element("#go"), {})
        while time.time() < deadline:
            text = d.script("return document.getElementById('out').textContent")
            if text:
                return text
            time.sleep(0.05)
        raise RuntimeError("no translation on the page after %g s" % seconds)
    finally:
        d.close()


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    try:
        text = translate(argv[1], argv[2], float(argv[3]) if len(argv) > 3 else 30.0)
    except (OSError, RuntimeError, ValueError, KeyError) as e:
        print("browser.py: %s" % e, file=sys.stderr)
        return 1
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    os.environ.pop("DISPLAY", None)  # headless, whatever the caller's session
    sys.exit(main(sys.argv))
