#!/usr/bin/env python3
"""Rejects Bats test lines that cannot fail a test.

    python3 tests/bats-lint.py FILE.bats...

Bats runs a test body under `set -e`, which ignores the status of a command prefixed with `!` and of
every command of an `A && B` list but the last, so such lines catch nothing unless they end the test.
Reported, inside @test bodies:
  - a `! cmd` line that is not the test's last command (write `run cmd` and check "$status", or
    the `fails cmd` helper of tests/bats/common.bash);
  - an `A && B` list on its own line that is not the test's last command (one check per line),
    unless it ends in `break`, `continue` or `return` (control flow, not a check);
  - `cmd || skip`, where the failure of a command under test becomes a skip; allowed only after a
    probe of the machine (`command -v`, `[ ... ]`, `[[ ... ]]`, `test`).
  - a file that does not `load common` (which sets pipefail: a failing stage of a pipeline that
    feeds a check fails the test).
Prints FILE:LINE: what, one line each, and exits 1 if anything was found."""
import re
import sys

PROBE = re.compile(r'^\s*(command -v\b|\[\[? |test )')


def strip_quotes(text):
    """Blanks out quoted strings (which may span lines) and comments, keeping the newlines, so
    that operators inside them do not count."""
    out, q, i = [], None, 0
    while i < len(text):
        c = text[i]
        if q:
            if c == '\\' and q == '"' and i + 1 < len(text):
                out.append('  ' if text[i + 1] != '\n' else ' \n')
                i += 2
                continue
            if c == q:
                q = None
            out.append('\n' if c == '\n' else ' ')
        elif c in '\'"':
            q = c
            out.append(' ')
        elif c == '#' and (i == 0 or text[i - 1] in ' \t;\n'):
            while i < len(text) and text[i] != '\n':
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return ''.join(out)


def commands_of(body, first):
    """The body's commands as (line number, code): quotes blanked, continuations joined."""
    lines = strip_quotes('\n'.join(body)).split('\n')
    out, buf, start = [], '', None
    for k, code in enumerate(lines):
        if start is None:
            start = first + k
        if code.rstrip().endswith('\\'):
            buf += code.rstrip()[:-1] + ' '
            continue
        code = (buf + code).strip()
        if code:
            out.append((start, code))
        buf, start = '', None
    return out


def top_level_and(code):
    """True when && joins commands at the top level of the line (not inside $(...), (...) or {...})."""
    depth = 0
    for i, c in enumerate(code):
        if c in '({':
            depth += 1
        elif c in ')}':
            depth -= 1
        elif code.startswith('&&', i) and depth == 0:
            return True
    return False


def check_test(path, body, first, report):
    commands = commands_of(body, first)
    last = commands[-1][0] if commands else None
    for num, code in commands:
        if num != last and re.match(r'^!\s', code):
            report(path, num, "'! cmd' before the test's last line never fails it: use run and check "
                   "\"$status\", or 'fails cmd'")
        if num != last and top_level_and(code) and not re.search(r'&&\s*(break|continue|return)\b', code) \
                and not re.match(r'^(for|while|if|until)\b', code) and '||' not in code:
            report(path, num, "'A && B' before the test's last line fails the test only when B fails: "
                   "one check per line")
        m = re.search(r'\|\|\s*skip\b', code)
        if m and not PROBE.match(code[:m.start()]):
            report(path, num, "'|| skip' after a command under test turns its failure into a skip")


def lint(path, report):
    with open(path, encoding='utf-8') as f:
        src = f.read().split('\n')
    if not any(re.match(r'^\s*load\s+["\']?common["\']?\s*$', l) for l in src):
        report(path, 1, "does not 'load common' (pipefail and the shared helpers)")
    i = 0
    while i < len(src):
        if re.match(r'^\s*@test\b', src[i]):
            body, j = [], i + 1
            while j < len(src) and not re.match(r'^}\s*$', src[j]):
                body.append(src[j])
                j += 1
            check_test(path, body, i + 2, report)
            i = j
        i += 1


def main():
    found = []

    def report(path, num, what):
        found.append(f'{path}:{num}: {what}')

    for path in sys.argv[1:]:
        lint(path, report)
    for f in found:
        print(f)
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
