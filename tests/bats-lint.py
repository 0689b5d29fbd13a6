#!/usr/bin/env python3
"""Rejects Bats test lines that cannot fail a test, or that can fail it by chance.

    python3 tests/bats-lint.py FILE.bats... [tests/bats/common.bash]

Bats runs a test body under `set -e`, which ignores the status of a command prefixed with `!` and of
every command of an `A && B` list but the last, so such lines catch nothing unless they end the test.
Reported, inside @test bodies:
  - a `! cmd` line that is not the test's last command (write `run cmd` and check "$status", or
    the `fails cmd` helper of tests/bats/common.bash);
  - an `A && B` list on its own line that is not the test's last command (one check per line),
    unless it ends in `break`, `continue` or `return` (control flow, not a check);
  - `cmd || skip`, where the failure of a command under test becomes a skip; allowed only after a
    probe of the machine (`command -v`, `[ ... ]`, `[[ ... ]]`, `test`).
  - a .bats file that does not `load common` (which sets pipefail: a failing stage of a pipeline
    that feeds a check fails the test).
Reported anywhere in a file (test bodies, setup, helper functions: all run under pipefail):
  - a pipeline stage that may exit before reading all of its input: `grep -q`/`-m`/`-l` (and their
    long forms), `head`, `sed` with a `q` command, `cmp` reading the pipe ('-'), `awk` with an `exit`
    outside its END blocks, `read`, `dd count=`, `od -N`. The command writing to it then dies of
    SIGPIPE when it writes after the reader has gone, which pipefail turns into the pipeline's
    failure: the result depends on the scheduling. Stages inside a process substitution <(...) are
    let be (nothing sees their status). Read a here-string (`grep -q x <<< "$out"`), a file, or a
    reader of all its input (`grep -c`, `same_as FILE` of common.bash).
Prints FILE:LINE: what, one line each, and exits 1 if anything was found."""
import re
import shlex
import sys

PROBE = re.compile(r'^\s*(command -v\b|\[\[? |test )')
HEREDOC = re.compile(r'<<(-?)\s*(["\']?)([A-Za-z_][A-Za-z0-9_]*)\2')


def scan(text):
    """Returns (code, raw, inner): `text` with quoted strings (which may span lines), comments and
    here-document bodies blanked out; `text` with only its comments and here-document bodies
    blanked; the offsets of the newlines inside a quoted string or a $(...). Every character keeps
    its place (newlines stay); code inside $(...), also within double quotes, stays, so that
    operators count only where they are operators."""
    out, raw, i, n = list(text), list(text), 0, len(text)
    stack, depth, heredocs, inner = ['code'], [0], [], set()

    def blank(k, everywhere=False):
        if out[k] != '\n':
            out[k] = ' '
            if everywhere:
                raw[k] = ' '

    while i < n:
        c, top = text[i], stack[-1]
        if c == '\n' and len(stack) > 1:
            inner.add(i)
        if top == 'sq':
            if c == "'":
                stack.pop()
            blank(i)
            i += 1
            continue
        if top == 'dq':
            if c == '\\' and i + 1 < n:
                blank(i)
                blank(i + 1)
                i += 2
            elif text.startswith('$(', i):
                stack.append('code')
                depth.append(0)
                i += 2
            else:
                if c == '"':
                    stack.pop()
                blank(i)
                i += 1
            continue
        if c == '\\' and i + 1 < n and text[i + 1] != '\n':
            blank(i)
            blank(i + 1)
            i += 2
            continue
        m = HEREDOC.match(text, i) if c == '<' and not text.startswith('<<<', i) else None
        if m:
            heredocs.append((m.group(3), m.group(1) == '-'))
            for k in range(i + 2, m.end()):
                blank(k)
            i = m.end()
            continue
        if c == '\n' and heredocs:
            i += 1
            for word, dash in heredocs:   # the bodies follow the line, one after the other
                while i < n:
                    e = text.find('\n', i)
                    e = n if e < 0 else e
                    line = text[i:e]
                    for k in range(i, e):
                        blank(k, True)
                    i = e + 1
                    if (line.lstrip('\t') if dash else line) == word:
                        break
            heredocs = []
            continue
        if c == "'":
            stack.append('sq')
            blank(i)
        elif c == '"':
            stack.append('dq')
            blank(i)
        elif c == '#' and (i == 0 or text[i - 1] in ' \t;\n'):
            while i < n and text[i] != '\n':
                blank(i, True)
                i += 1
            continue
        elif text.startswith('$(', i):
            stack.append('code')
            depth.append(0)
            i += 2
            continue
        elif c == '(':
            depth[-1] += 1
        elif c == ')':
            if depth[-1] == 0 and len(stack) > 1:
                stack.pop()
                depth.pop()
            else:
                depth[-1] -= 1
        i += 1
    return ''.join(out), ''.join(raw), inner


def strip_quotes(text):
    """`text` with its quoted strings, comments and here-document bodies blanked out (see scan)."""
    return scan(text)[0]


class Command:
    """One command of the source: its code with quotes blanked (`code`), the same text as written
    (`raw`, quotes kept, comments blanked), continuation lines joined, and the line of each offset."""

    def __init__(self):
        self.code, self.raw, self.starts = '', '', []

    def line_of(self, offset):
        return max((s for s in self.starts if s[0] <= offset), default=self.starts[0])[1]

    @property
    def num(self):
        return self.starts[0][1]


def commands_of(body, first):
    """The commands of the lines `body`, the first being line `first`: one per line, a line ending
    in a backslash, a pipe '|' or inside a quoted string or a $(...) joined with the next."""
    code, raw, inner = scan('\n'.join(body))
    out, cur, pos = [], Command(), 0
    for k, (code, raw) in enumerate(zip(code.split('\n'), raw.split('\n'))):
        pos += len(code) + 1
        end = code.rstrip()
        more = end.endswith('\\') or (end.endswith('|') and not end.endswith('||')) or pos - 1 in inner
        if end.endswith('\\'):
            code, raw = end[:-1], raw[:len(end) - 1]
        if code.strip() or cur.code.strip():
            cur.starts.append((len(cur.code), first + k))
        cur.code += code + ' '
        cur.raw += raw + ' '
        if more:
            continue
        if cur.code.strip():
            out.append(cur)
        cur = Command()
    if cur.code.strip():
        out.append(cur)
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
    last = commands[-1].num if commands else None
    for c in commands:
        num, code = c.num, c.code.strip()
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

def stage_end(code, j):
    """Where the pipeline stage starting at offset j of `code` ends: at the next |, ;, & or
    unmatched ) outside parentheses."""
    depth = 0
    for k in range(j, len(code)):
        c = code[k]
        if c == '(':
            depth += 1
        elif c == ')':
            if depth == 0:
                return k
            depth -= 1
        elif depth == 0 and (c in '|;' or (c == '&' and code[k - 1] not in '<>' and code[k + 1:k + 2] != '>')):
            return k
    return len(code)


def piped_stages(code):
    """The offsets (start, end) of the commands of `code` that read a pipe (those after a '|' or
    '|&'), but not those in a process substitution, whose status nothing sees."""
    stack, out, i = [], [], 0
    while i < len(code):
        if code.startswith(('<(', '>(', '$('), i):
            stack.append(code[i])
            i += 2
            continue
        c = code[i]
        if c == '(':
            stack.append(c)
        elif c == ')' and stack:
            stack.pop()
        elif code.startswith('||', i):
            i += 2
            continue
        elif c == '|':
            j = i + 2 if code.startswith('|&', i) else i + 1
            if '<' not in stack and '>' not in stack:
                out.append((j, stage_end(code, j)))
        i += 1
    return out


def words_of(text):
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def option_values(words, takes, longs=()):
    """(options, operands) of a command line: short options taking a value (letters `takes`) and the
    long ones named in `longs` (without '=') keep it in the option's entry ('-n5', '--lines 5');
    everything after '--' is an operand."""
    opts, operands, k = [], [], 1
    while k < len(words):
        w = words[k]
        if w == '--':
            operands += words[k + 1:]
            break
        if w.startswith('--'):
            if w in longs and k + 1 < len(words):
                w, k = w + '=' + words[k + 1], k + 1
            opts.append(w)
        elif w.startswith('-') and len(w) > 1:
            for p, ch in enumerate(w[1:], 1):
                if ch in takes:
                    if p == len(w) - 1 and k + 1 < len(words):
                        w, k = w + words[k + 1], k + 1
                    break
            opts.append(w)
        else:
            operands.append(w)
        k += 1
    return opts, operands


def without_end_blocks(prog):
    """An awk program without its END { ... } blocks."""
    while True:
        m = re.search(r'\bEND\s*\{', prog)
        if not m:
            return prog
        depth, k = 0, m.end() - 1
        while k < len(prog):
            depth += {'{': 1, '}': -1}.get(prog[k], 0)
            if depth == 0:
                break
            k += 1
        prog = prog[:m.start()] + prog[k + 1:]


SED_QUIT = re.compile(r'(?:^|[;{}\n]|\d|\$|/)\s*[qQ]\s*\d*\s*(?:$|[;}\n])')


def stops_early(words):
    """Why the command `words` may exit before reading all of its standard input, or None."""
    while words and (re.match(r'^[A-Za-z_][A-Za-z0-9_]*=', words[0]) or words[0] in ('!', 'command', 'exec')):
        words = words[1:]
    if not words:
        return None
    name = words[0].rsplit('/', 1)[-1]
    if name in ('grep', 'egrep', 'fgrep', 'zgrep'):
        opts, _ = option_values(words, 'efmABCdD', ('--regexp', '--file'))
        for o in opts:
            if o in ('--quiet', '--silent', '--files-with-matches', '--files-without-match') \
                    or o.startswith('--max-count'):
                return f"'grep {o}' stops at its first match"
            if not o.startswith('--'):
                letters = re.match(r'-([^efmABCdD]*)([efmABCdD]?)', o)
                if set('qlL') & set(letters.group(1)) or letters.group(2) == 'm':
                    return f"'grep {o}' stops at its first match"
        return None
    if name == 'head':
        opts, _ = option_values(words, 'nc', ('--lines', '--bytes'))
        counts = [re.sub(r'^(-[nc]|--lines=|--bytes=)', '', o) for o in opts
                  if re.match(r'^(-[nc]|--lines=|--bytes=)', o)]
        if any(n.startswith('-') for n in counts):
            return None   # all but the last N: reads everything
        return "'head' stops after the lines or bytes it prints"
    if name == 'sed':
        opts, operands = option_values(words, 'ef', ('--expression', '--file'))
        scripts = [re.sub(r'^(-e|--expression=)', '', o) for o in opts if re.match(r'^(-e|--expression=)', o)]
        if not scripts and not any(re.match(r'^(-f|--file=)', o) for o in opts) and operands:
            scripts = operands[:1]
        if any(SED_QUIT.search(x) for x in scripts):
            return "'sed' with a q command stops there"
        return None
    if name == 'cmp':
        opts, operands = option_values(words, 'in', ('--ignore-initial', '--bytes'))
        if '-' in operands or len(operands) == 1:
            return "'cmp' reading a pipe stops at the first difference"
        return None
    if name in ('awk', 'gawk', 'mawk', 'nawk'):
        opts, operands = option_values(words, 'Fvf', ('--field-separator', '--assign', '--file'))
        if operands and not any(re.match(r'^(-f|--file=)', o) for o in opts) \
                and re.search(r'\bexit\b', without_end_blocks(operands[0])):
            return "'awk' with an exit before its END stops there"
        return None
    if name == 'read':
        return "'read' takes one line"
    if name == 'dd' and any(w.startswith('count=') for w in words):
        return "'dd count=' stops after its blocks"
    if name == 'od':
        opts, _ = option_values(words, 'AjNSwt', ('--read-bytes',))
        if any(re.match(r'^(-N|--read-bytes=)', o) for o in opts):
            return "'od -N' stops after its bytes"
    return None


def check_pipes(path, commands, report):
    for c in commands:
        for start, end in piped_stages(c.code):
            start += len(c.code[start:end]) - len(c.code[start:end].lstrip())
            why = stops_early(words_of(c.raw[start:end]))
            if why:
                report(path, c.line_of(start), f"{why}: its writer may die of SIGPIPE, a failure under "
                       "pipefail by chance; read a file or a here-string (<<< \"$var\")")


def lint(path, report):
    with open(path, encoding='utf-8') as f:
        src = f.read().split('\n')
    if path.endswith('.bats') and not any(re.match(r'^\s*load\s+["\']?common["\']?\s*$', l) for l in src):
        report(path, 1, "does not 'load common' (pipefail and the shared helpers)")
    check_pipes(path, commands_of(src, 1), report)
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
        start = len(found)
        lint(path, report)
        found[start:] = sorted(found[start:], key=lambda f: int(f.split(':')[1]))
    for f in found:
        print(f)
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
