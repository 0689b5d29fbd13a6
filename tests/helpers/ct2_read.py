#!/usr/bin/env python3
"""Reads a CTranslate2 model.bin (binary version 6, formats/ctranslate2.md) with the standard library
alone, independently of the writer, and prints what it holds.

  ct2_read.py model.bin             one line a variable: NAME DTYPE SHAPE (x-separated, "-" for a
                                    scalar); then one line an alias: alias NAME TARGET
  ct2_read.py model.bin NAME        the values of variable (or alias) NAME, one a line (repr)
  ct2_read.py model.bin NAME deq    the same, int8 values times 1 / NAME_scale of their row

Exits 1 with a message on a malformed file (truncated, trailing bytes, bad sizes).
"""
import array
import struct
import sys

TYPES = {0: ('float32', 'f', 4), 1: ('int8', 'b', 1), 2: ('int16', 'h', 2), 3: ('int32', 'i', 4),
         4: ('float16', 'e', 2), 5: ('bfloat16', None, 2)}


class Reader:
    def __init__(self, data):
        self.b, self.p = data, 0

    def take(self, n):
        if self.p + n > len(self.b):
            raise ValueError('truncated at byte %d (wanted %d more)' % (self.p, n))
        s = self.b[self.p:self.p + n]
        self.p += n
        return s

    def u(self, fmt):
        return struct.unpack('<' + fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self):
        n = self.u('H')
        s = self.take(n)
        if n == 0 or s[-1] != 0:
            raise ValueError('string without its NUL at byte %d' % self.p)
        return s[:-1].decode('utf-8')


def read(path):
    r = Reader(open(path, 'rb').read())
    version = r.u('I')
    if version != 6:
        raise ValueError('binary version %d, not 6' % version)
    spec, revision = r.string(), r.u('I')
    variables, order = {}, []
    for _ in range(r.u('I')):
        name = r.string()
        shape = [r.u('I') for _ in range(r.u('B'))]
        tid = r.u('B')
        if tid not in TYPES:
            raise ValueError('%s: unknown type id %d' % (name, tid))
        nbytes = r.u('I')
        count = 1
        for d in shape:
            count *= d
        if nbytes != count * TYPES[tid][2]:
            raise ValueError('%s: %d bytes for shape %s of %s' % (name, nbytes, shape, TYPES[tid][0]))
        if name in variables:
            raise ValueError('variable %s twice' % name)
        variables[name] = (TYPES[tid][0], shape, r.take(nbytes), tid)
        order.append(name)
    aliases = [(r.string(), r.string()) for _ in range(r.u('I'))]
    if r.p != len(r.b):
        raise ValueError('%d bytes after the aliases' % (len(r.b) - r.p))
    return spec, revision, variables, order, aliases


def values(variables, aliases, name):
    target = dict(aliases).get(name, name)
    dtype, shape, raw, tid = variables[target]
    a = array.array(TYPES[tid][1])
    a.frombytes(raw)
    if sys.byteorder != 'little':
        a.byteswap()
    return target, shape, list(a)


def main():
    spec, revision, variables, order, aliases = read(sys.argv[1])
    if len(sys.argv) == 2:
        print('spec %s %d' % (spec, revision))
        for name in order:
            dtype, shape, _, _ = variables[name]
            print('%s %s %s' % (name, dtype, 'x'.join(map(str, shape)) or '-'))
        for alias, target in aliases:
            print('alias %s %s' % (alias, target))
        return
    target, shape, vals = values(variables, aliases, sys.argv[2])
    if len(sys.argv) > 3:
        _, _, scale = values(variables, aliases, target + '_scale')
        cols = shape[1]
        vals = [v / scale[i // cols] for i, v in enumerate(vals)]
    print('\n'.join(repr(v) for v in vals))


if __name__ == '__main__':
    try:
        main()
    except (ValueError, KeyError, OSError) as e:
        sys.exit('ct2_read.py: %s' % e)
