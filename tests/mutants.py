#!/usr/bin/env python3
"""Mutation checks: small, realistic breakages the suite must catch (`make mutants`, by hand).

    python3 tests/mutants.py [-k] [NAME-SUBSTRING...]

For each mutant below, a copy of the source tree (under $MUTANTS_DIR, default /tmp/nmt-mutants)
gets one edit (the text OLD, which must occur exactly once in FILE, becomes NEW), is rebuilt
incrementally, and runs the suites named for it; the mutant is CAUGHT when one of them fails. The
unmutated copy must pass the same suites first. Prints one line per mutant and a summary; exits 1
when a mutant was missed, did not apply, or did not build. -k keeps the copy's last mutant in place
for a look."""
import os
import shutil
import subprocess
import sys
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.environ.get('MUTANTS_DIR', '/tmp/nmt-mutants')

# name, file, old, new, suites ("unit:test_x", "bats:file.bats" or "bats:file.bats:name filter")
MUTANTS = [
    ('batcher ignores its seed and epoch', 'libcommon/data/batcher.c',
     'rng_seed(&b->rng, b->o.seed + epoch);', 'rng_seed(&b->rng, 1);',
     ['unit:test_batcher', 'bats:batch.bats']),
    ('--max-tokens ignored (twice the tokens per batch)', 'libcommon/data/batcher.c',
     'rows * wide > b->o.max_tokens', 'rows * wide > 2 * b->o.max_tokens',
     ['unit:test_batcher', 'bats:batch.bats']),
    ('beam width ignored (always greedy)', 'libcommon/nn/search.c',
     '    const int K = o->beam;', '    const int K = 1;',
     ['unit:test_search', 'bats:decode.bats']),
    ('length penalty sign flipped', 'libcommon/nn/search.c',
     'pow((5.0 + (double)(t + 1)) / 6.0, o->alpha)', 'pow((5.0 + (double)(t + 1)) / 6.0, -o->alpha)',
     ['unit:test_search', 'bats:decode.bats', 'bats:decode_ref.bats']),
    ('label smoothing ignored', 'libcommon/nn/model.c',
     'a->tout + r0, R, V, c->label_smoothing, -1, 1.0f)', 'a->tout + r0, R, V, 0.0f, -1, 1.0f)',
     ['unit:test_model', 'bats:train.bats']),
    ('residual dropout ignored', 'libcommon/nn/model.c',
     'if (!m->run.train || m->c.dropout <= 0) {', 'if (1) {',
     ['unit:test_model', 'bats:train.bats']),
    ('warm-up ignored in the learning rate', 'libcommon/nn/model.c',
     '    if (warmup > 0) {\n        double b', '    if (0) {\n        double b',
     ['unit:test_model', 'bats:train.bats']),
    ('gradient clipping ignored', 'libcommon/nn/model.c',
     '    if (clip > 0) {\n        double coef', '    if (0) {\n        double coef',
     ['unit:test_model', 'bats:train.bats']),
    ('Adam bias correction dropped', 'plugins/cpu/kernels.c',
     '.step = (float)(lr / bc1), .rbc2 = (float)(1 / sqrt(bc2))', '.step = (float)lr, .rbc2 = 1.0f',
     ['unit:test_cpu_kernels', 'unit:test_model']),
    ('one BLEU n-gram order dropped from the mean', 'libcommon/eval/bleu.c',
     '    for (int n = 0; n < eff; n++)\n        sum += my_log', '    for (int n = 1; n < eff; n++)\n        sum += my_log',
     ['bats:bleu.bats']),
    ('BLEU --lowercase ignored', 'libcommon/eval/bleu.c',
     'ref_lens[r - 1] : hyp_len, m->cfg.lowercase, &sd->bt)', 'ref_lens[r - 1] : hyp_len, 0, &sd->bt)',
     ['bats:bleu.bats']),
    ('chrF beta taken as 1', 'libcommon/eval/chrf.c',
     'double factor = (double)cfg->beta * cfg->beta;', 'double factor = 1.0;',
     ['bats:bleu.bats']),
    ('TER shifts disabled', 'libcommon/eval/ter.c',
     'if (checked >= TER_MAX_SHIFT_CANDIDATES || delta <= 0)', 'if (1)',
     ['bats:bleu.bats']),
    ('BPE applies the highest-ranked merge first', 'libcommon/text/bpe.c',
     'if (!m || *m >= best)', 'if (!m || (best != BARRIER && *m <= best))',
     ['unit:test_bpe', 'bats:tokenize.bats']),
    ('vocabulary fingerprint check skipped', 'libcommon/data/batch_file.c',
     'if (hv && strcmp(hv, fp))', 'if (0 && hv && strcmp(hv, fp))',
     ['bats:train.bats', 'bats:hostile.bats']),
    ('named outputs written in place, not to a temporary file renamed', 'libcommon/io/file.c',
     'if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {\n        if ((f->fd = open(path, O_WRONLY | O_CLOEXEC)) < 0)',
     'if ((stat(path, &st) == 0 && !S_ISREG(st.st_mode)) || 1) {\n'
     '        if ((f->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)',
     ['bats:hostile.bats', 'bats:train.bats']),
    ('stream end-marker checksum not checked', 'libcommon/io/stream.c',
     'if (memcmp(t, REC_TRAILER_TAG, 4) != 0 || frame_check(t, 24) != nmt_le32(t + 24))',
     'if (memcmp(t, REC_TRAILER_TAG, 4) != 0)',
     ['unit:test_rec', 'bats:cat.bats']),
    ('decode writes in batch order, not input order', 'tools/decode.c',
     '        if (emit(st, &all[i]) < 0)', '        if (emit(st, ord[i]) < 0)',
     ['bats:decode.bats']),
    ('nmt-avg divides by one checkpoint too many', 'tools/avg.c',
     'tmp[e] = (float)(acc[e] / n);', 'tmp[e] = (float)(acc[e] / (n + 1));',
     ['bats:avg.bats']),
    ('ranks add a round in reverse rank order', 'libcommon/run/ranks.c',
     'for (int r = 0; r < count && (size_t)r < p; r++) {\n        const float *v = in + (size_t)r * sl;',
     'for (int r = count - 1; r >= 0; r--) {\n        const float *v = in + (size_t)r * sl;',
     ['bats:mpi.bats:update-freq 3']),
    ('ranks count only rank 0\'s target tokens', 'libcommon/train/trainer.c',
     'out->tokens += (uint64_t)all[r].tokens;', 'out->tokens += (uint64_t)all[0].tokens;',
     ['bats:mpi.bats:byte for byte']),
    ('--shard K/N takes the lines of shard K+1', 'tools/decode.c',
     'all[n].index % o->shard_n != o->shard_k - 1', 'all[n].index % o->shard_n != o->shard_k % o->shard_n',
     ['bats:mpi.bats:shard']),
    ('resume replays one batch too few of a streamed epoch', 'libcommon/train/trainer.c',
     'for (uint64_t i = 0; t->train->streaming && i < t->s.pos; i++) {',
     'for (uint64_t i = 1; t->train->streaming && i < t->s.pos; i++) {',
     ['bats:train.bats']),
]


def sh(cmd, env=None, log=None):
    return subprocess.run(cmd, shell=True, cwd=WORK, env=env, stdout=log or subprocess.DEVNULL,
                          stderr=subprocess.STDOUT).returncode


def suite_env():
    env = dict(os.environ)
    b = os.path.join(WORK, 'bin')
    env.update(NMT_SRCDIR=WORK, NMT_BIN=b, NMT_PLUGIN_PATH=b, PATH=b + ':' + env['PATH'],
               OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1', NMT_TEST_QUICK='1')
    return env


def run_suite(spec, log):
    kind, _, rest = spec.partition(':')
    if kind == 'unit':
        return sh(f'./build/tests/{rest}', suite_env(), log) == 0
    name, _, filt = rest.partition(':')
    f = f"-f '{filt}' " if filt else ''
    return sh(f'bats {f}tests/bats/{name}', suite_env(), log) == 0


def copy_tree():
    """Copies the source tree to WORK, keeping WORK's build folders (everything is rebuilt)."""
    skip = {'bin', 'build', 'san', 'fuzz-build', '.git'}
    os.makedirs(WORK, exist_ok=True)
    for e in os.listdir(WORK):
        if e not in skip:
            p = os.path.join(WORK, e)
            shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.remove(p)
    for e in os.listdir(SRC):
        if e in skip:
            continue
        s, d = os.path.join(SRC, e), os.path.join(WORK, e)
        # new modification times: a previous run's mutant objects are rebuilt, never reused
        shutil.copytree(s, d, symlinks=True, copy_function=shutil.copy) if os.path.isdir(s) else shutil.copy(s, d)


def main():
    args = [a for a in sys.argv[1:] if a != '-k']
    keep = '-k' in sys.argv[1:]
    chosen = [m for m in MUTANTS if not args or any(a in m[0] for a in args)]
    copy_tree()
    log = open(os.path.join(WORK, 'mutants.log'), 'w')
    if sh('make -j2 tests-built', log=log):
        sys.exit(f'mutants: the unmutated tree does not build (see {WORK}/mutants.log)')
    suites = sorted({s for m in chosen for s in m[4]})
    for s in suites:
        if not run_suite(s, log):
            sys.exit(f'mutants: the unmutated tree fails {s} (see {WORK}/mutants.log)')
    results = []
    for name, path, old, new, specs in chosen:
        full = os.path.join(WORK, path)
        text = open(full).read()
        t0 = time.time()
        if text.count(old) != 1:
            results.append((name, 'NOT APPLIED', f'{path}: the text to change occurs {text.count(old)} times'))
        else:
            open(full, 'w').write(text.replace(old, new))
            print(f'== {name}', file=log, flush=True)
            if sh('make -j2 tests-built', log=log):
                results.append((name, 'NO BUILD', path))
            else:
                caught = next((s for s in specs if not run_suite(s, log)), None)
                results.append((name, 'CAUGHT' if caught else 'MISSED', caught or ', '.join(specs)))
            if not (keep and (name, path) == chosen[-1][:2]):
                shutil.copy2(os.path.join(SRC, path), full)
                os.utime(full)
        r = results[-1]
        print(f'{r[1]:<12} {r[0]}  [{r[2]}]  ({time.time() - t0:.0f} s)', flush=True)
    bad = [r for r in results if r[1] != 'CAUGHT']
    print(f'mutants: {len(results) - len(bad)} of {len(results)} caught' + (f'; {len(bad)} not' if bad else ''))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
