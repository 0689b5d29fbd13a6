/* test_model.c: the Transformer against PyTorch fixtures (tests/fixtures/ref/, made by
 * tests/ref/make_fixtures.py) and by finite differences, on the cpu backend.
 *
 * With NMT_REF_DUMP=FILE and NMT_REF_PRENORM=0|1 (or NMT_REF_VARIANT=marian) it instead writes the
 * initial weights and the fixed batch of the reference test to FILE (the input of make_fixtures.py)
 * and exits. */
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run/backend_loader.h"
#include "nn/blocks.h"
#include "nn/checkpoint.h"
#include "nn/model.h"
#include "nn/params.h"
#include "io/safetensors.h"
#include "train/schedule.h"
#include "train/trainer.h"
#include "cli/cli.h"

static struct backend *be;

static void tiny_config(struct model_config *c, int pre_norm)
{
    memset(c, 0, sizeof *c);
    c->vocab = 50;
    c->d_model = pre_norm ? 16 : 32;
    c->heads = 2;
    c->ff = pre_norm ? 32 : 64;
    c->enc_layers = c->dec_layers = 2;
    c->pre_norm = pre_norm;
    c->max_len = 64;
    c->label_smoothing = 0.1f;
    c->ln_eps = 1e-5f;
}

/* The variants of the tests: the paper's post-norm, pre-norm, and the options of Marian models
 * (post-norm, Marian positions, zero start, swish, the target embedding tied to the output
 * projection, an output bias, layer norm epsilon 1e-6), with TIE_NONE three embedding matrices. */
enum { V_POST, V_PRE, V_MARIAN, V_MARIAN_NONE };
static const char *const variant_names[] = {"post", "pre", "marian", "marian-none"};

static void variant_config(struct model_config *c, int v)
{
    tiny_config(c, v == V_PRE);
    if (v >= V_MARIAN) {
        c->positions = MODEL_POS_MARIAN;
        c->start_zero = 1;
        c->activation = MODEL_ACT_SWISH;
        c->tie = v == V_MARIAN ? MODEL_TIE_TARGET : MODEL_TIE_NONE;
        c->output_bias = 1;
        c->ln_eps = 1e-6f;
    }
}

/* A fixed batch with padding: 3 rows, S 7, T 6. */
static void fixed_batch(struct batch_record *br, int V)
{
    static const uint32_t sl[3] = {7, 4, 1}, tl[3] = {5, 6, 2};
    batch_record_resize(br, 3, 7, 6);
    uint64_t s = 12345;
    for (uint32_t b = 0; b < 3; b++) {
        br->index[b] = b;
        br->src_len[b] = sl[b];
        br->tgt_len[b] = tl[b];
        for (uint32_t j = 0; j < 7; j++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            br->src[b * 7 + j] = j + 1 < sl[b] ? 4 + (uint32_t)((s >> 33) % (uint64_t)(V - 4)) : j + 1 == sl[b] ? NMT_EOS : 0;
        }
        for (uint32_t j = 0; j < 6; j++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            br->tgt[b * 6 + j] = j + 1 < tl[b] ? 4 + (uint32_t)((s >> 33) % (uint64_t)(V - 4)) : j + 1 == tl[b] ? NMT_EOS : 0;
        }
    }
}

static int dump(const char *path, int variant)
{
    struct model_config c;
    variant_config(&c, variant);
    struct model *m = model_new(be, &c, 1);
    if (!m || model_init(m, 7) < 0) {
        fprintf(stderr, "%s\n", nmt_errmsg());
        return 1;
    }
    struct batch_record br = {0};
    fixed_batch(&br, c.vocab);
    struct st_writer *w = st_writer_new();
    if (variant >= V_MARIAN) { /* a random output bias, so that its gradient and effect show */
        const struct model_weights *mw = model_weights(m);
        size_t P = model_num_params(m), off = (size_t)(mw->out_b - model_param_data(m));
        float *h = malloc(P * sizeof *h);
        model_get_params(m, h);
        for (int i = 0; i < c.vocab; i++)
            h[off + (size_t)i] = 0.5f * sinf(0.7f * (float)i);
        model_set_params(m, h);
        free(h);
    }
    if (model_save(m, w, 0) < 0)
        return fprintf(stderr, "%s\n", nmt_errmsg()), 1;
    int32_t src[21], tgt[18], sl[3], tl[3];
    for (int i = 0; i < 21; i++)
        src[i] = (int32_t)br.src[i];
    for (int i = 0; i < 18; i++)
        tgt[i] = (int32_t)br.tgt[i];
    for (int i = 0; i < 3; i++)
        sl[i] = (int32_t)br.src_len[i], tl[i] = (int32_t)br.tgt_len[i];
    uint64_t s2[2] = {3, 7}, t2[2] = {3, 6}, b1[1] = {3};
    st_writer_add(w, "batch.src", ST_I32, 2, s2, src);
    st_writer_add(w, "batch.tgt", ST_I32, 2, t2, tgt);
    st_writer_add(w, "batch.src_len", ST_I32, 1, b1, sl);
    st_writer_add(w, "batch.tgt_len", ST_I32, 1, b1, tl);
    if (st_writer_write(w, path) < 0)
        return fprintf(stderr, "%s\n", nmt_errmsg()), 1;
    st_writer_free(w);
    batch_record_free(&br);
    model_free(m);
    return 0;
}

/* max |a - b| / max |b| */
static double rel_err(const float *a, const float *b, size_t n)
{
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= md))
            md = d;
        if (fabs((double)b[i]) > mb)
            mb = fabs((double)b[i]);
    }
    return md / (mb > 1e-30 ? mb : 1e-30);
}

static void batch_from_file(struct batch_record *br, const struct st_file *f)
{
    const struct st_tensor *s = st_find(f, "batch.src"), *t = st_find(f, "batch.tgt");
    batch_record_resize(br, (uint32_t)s->shape[0], (uint32_t)s->shape[1], (uint32_t)t->shape[1]);
    const int32_t *src = s->data, *tgt = t->data, *sl = st_find(f, "batch.src_len")->data,
                  *tl = st_find(f, "batch.tgt_len")->data;
    for (uint32_t b = 0; b < br->B; b++) {
        br->index[b] = b;
        br->src_len[b] = (uint32_t)sl[b];
        br->tgt_len[b] = (uint32_t)tl[b];
    }
    for (size_t i = 0; i < (size_t)br->B * br->S; i++)
        br->src[i] = (uint32_t)src[i];
    for (size_t i = 0; i < (size_t)br->B * br->T; i++)
        br->tgt[i] = (uint32_t)tgt[i];
}

static void check_fixture(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/ref/%s.safetensors", test_srcdir(), name);
    struct st_file *f = st_read(path);
    test_ok(f != NULL, "%s: fixture loads (%s)", name, f ? "" : nmt_errmsg());
    if (!f)
        return;
    struct model_config c;
    test_ok(model_config_load(&c, f) == 0, "%s: config", name);
    c.dropout = c.attn_dropout = c.act_dropout = 0;
    struct model *m = model_new(be, &c, 1);
    int lrc = m && model_init(m, 1) == 0 ? model_load(m, f, 0) : -1;
    test_ok(lrc == 0, "%s: weights load (%s)", name, lrc ? nmt_errmsg() : "");
    struct batch_record br = {0};
    batch_from_file(&br, f);
    const struct st_tensor *rl = st_find(f, "ref.logits");
    size_t nl = (size_t)(rl->nbytes / 4);
    float *logits = malloc(nl * sizeof *logits);
    struct model_loss L;
    model_zero_grad(m);
    int rc = model_step(m, &br, 0, 1, 0, &L, logits);
    test_ok(rc == 0, "%s: forward/backward runs (%s)", name, rc ? nmt_errmsg() : "");
    double e = rel_err(logits, rl->data, nl);
    test_ok(e < 1e-4, "%s: logits match PyTorch (max rel err %.2e)", name, e);
    double ref_loss[3]; /* loss, nll, tokens (copied: tensor data need not be aligned) */
    test_ok(st_get(f, "ref.loss", ST_F64, ref_loss, 3) == 0, "%s: reference loss", name);
    test_ok(L.tokens == (int64_t)ref_loss[2], "%s: %lld target tokens", name, (long long)L.tokens);
    test_ok(fabs(L.loss - ref_loss[0]) < 1e-4 * fabs(ref_loss[0]), "%s: loss %.8f vs PyTorch %.8f", name, L.loss,
            ref_loss[0]);
    test_ok(fabs(L.nll - ref_loss[1]) < 1e-4 * fabs(ref_loss[1]), "%s: nll %.8f vs PyTorch %.8f", name, L.nll, ref_loss[1]);
    size_t P = model_num_params(m);
    float *g = malloc(P * sizeof *g);
    model_get_grads(m, g);
    const struct model_param *tab;
    size_t nt = model_params(m, &tab);
    double worst = 0;
    const char *wname = "";
    int all = 1;
    for (size_t i = 0; i < nt; i++) {
        char gn[96];
        snprintf(gn, sizeof gn, "ref.grad.%s", tab[i].name);
        const struct st_tensor *rg = st_find(f, gn);
        if (!rg || rg->nbytes != tab[i].size * 4) {
            all = 0;
            continue;
        }
        double ge = rel_err(g + tab[i].offset, rg->data, tab[i].size);
        if (!(ge <= worst))
            worst = ge, wname = tab[i].name;
    }
    test_ok(all, "%s: reference has every parameter's gradient", name);
    test_ok(worst < 1e-4, "%s: all %zu parameter gradients match PyTorch (worst %.2e in %s)", name, nt, worst, wname);
    /* 10 optimizer steps */
    const struct st_tensor *rs = st_find(f, "ref.steps");
    int nsteps = (int)(rs->shape[0]);
    double ref_steps[64];
    test_ok(nsteps <= 64 && st_get(f, "ref.steps", ST_F64, ref_steps, (uint64_t)nsteps) == 0, "%s: reference steps", name);
    const char *ws = st_meta(f, "ref.warmup"), *ss = st_meta(f, "ref.lr_scale"), *cs = st_meta(f, "ref.clip");
    double warm = atof(ws), scale = atof(ss), clip = atof(cs);
    model_load(m, f, 0);
    model_init(m, 1); /* zero moments... */
    model_load(m, f, 0); /* ...then the fixture weights again */
    double worst_s = 0;
    for (int t = 1; t <= nsteps; t++) {
        double gn;
        model_zero_grad(m);
        model_step(m, &br, 0, 1, 0, &L, NULL);
        double mine = L.loss / (double)L.tokens;
        double d = fabs(mine - ref_steps[t - 1]) / fabs(ref_steps[t - 1]);
        if (d > worst_s)
            worst_s = d;
        model_update(m, &trainer_adam, (float)lr_paper(scale, c.d_model, t, (int64_t)warm), t, L.tokens, clip, &gn);
    }
    test_ok(worst_s < 1e-4, "%s: %d Adam steps' losses match PyTorch (worst rel err %.2e)", name, nsteps, worst_s);
    free(g);
    free(logits);
    batch_record_free(&br);
    model_free(m);
    st_free(f);
}

/* Finite differences: the derivative of the summed loss along a random direction u, by central
 * differences in float, against <grad, u> from backward. Dropout on (a fixed mask per seed). */
static void check_fd(int variant, int dropout)
{
    struct model_config c;
    variant_config(&c, variant);
    c.d_model = 16, c.ff = 24;
    if (dropout)
        c.dropout = 0.2f, c.attn_dropout = 0.1f, c.act_dropout = 0.1f;
    struct model *m = model_new(be, &c, 1);
    model_init(m, 99);
    struct batch_record br = {0};
    fixed_batch(&br, c.vocab);
    size_t P = model_num_params(m);
    float *p0 = malloc(P * sizeof *p0), *g = malloc(P * sizeof *g), *u = malloc(P * sizeof *u), *p = malloc(P * sizeof *p);
    model_get_params(m, p0);
    uint64_t s = 4242;
    for (size_t i = 0; i < P; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        u[i] = (((s >> 40) & 1) ? 1.0f : -1.0f) / sqrtf((float)P);
    }
    struct model_loss L;
    model_zero_grad(m);
    model_step(m, &br, 1, 1, 777, &L, NULL);
    model_get_grads(m, g);
    double dot = 0;
    for (size_t i = 0; i < P; i++)
        dot += (double)g[i] * u[i];
    double best = 1e9;
    for (double h = 0.3; h >= 1e-4; h /= 2) {
        double lp, lm;
        for (size_t i = 0; i < P; i++)
            p[i] = p0[i] + (float)h * u[i];
        model_set_params(m, p);
        model_step(m, &br, 1, 0, 777, &L, NULL);
        lp = L.loss;
        for (size_t i = 0; i < P; i++)
            p[i] = p0[i] - (float)h * u[i];
        model_set_params(m, p);
        model_step(m, &br, 1, 0, 777, &L, NULL);
        lm = L.loss;
        double fd = (lp - lm) / (2 * h);
        double e = fabs(fd - dot) / fabs(dot);
        if (e < best)
            best = e;
    }
    test_ok(best < 1e-2, "finite differences (%s, dropout %s): directional derivative %.6g, rel err %.2e",
            variant_names[variant], dropout ? "on" : "off", dot, best);
    free(p0), free(g), free(u), free(p);
    batch_record_free(&br);
    model_free(m);
}

/* st_read_skip: the tensors named with the prefix are neither read nor listed; the others as
 * st_read gives them; a file cut inside a kept tensor is refused. */
static void check_read_skip(void)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/nmt-test-skip-%d.st", (int)getpid());
    static float a[1000], x[3000], b[7];
    for (int i = 0; i < 3000; i++)
        x[i] = (float)i, a[i % 1000] = (float)-i, b[i % 7] = (float)(2 * i);
    uint64_t sa[1] = {1000}, sx[1] = {3000}, sb[1] = {7};
    struct st_writer *w = st_writer_new();
    int rc = !w || st_writer_add(w, "a", ST_F32, 1, sa, a) < 0 || st_writer_add(w, "optim.x", ST_F32, 1, sx, x) < 0 ||
             st_writer_add(w, "b", ST_F32, 1, sb, b) < 0 || st_writer_write(w, path) < 0;
    st_writer_free(w);
    struct st_file *all = rc ? NULL : st_read(path), *some = rc ? NULL : st_read_skip(path, "optim.");
    float ga[1000], gb[7];
    test_ok(all && some && all->nt == 3 && some->nt == 2 && !st_find(some, "optim.x") &&
                st_get(some, "a", ST_F32, ga, 1000) == 0 && st_get(some, "b", ST_F32, gb, 7) == 0 &&
                !memcmp(ga, a, sizeof a) && !memcmp(gb, b, sizeof b),
            "st_read_skip: 'optim.' tensors left out, the others read (%s)", all && some ? "" : nmt_errmsg());
    test_ok(all && some && all->mapped && some->mapped, "st_read: a file of a page or more is mapped, not read");
    /* st_extra: bytes the file owns, one buffer; st_discard takes them as it takes the image's */
    unsigned char *x1 = all ? st_extra(all, 3 << 12) : NULL, *x2 = all ? st_extra(all, 16) : NULL;
    if (x1)
        memset(x1, 7, 3 << 12);
    test_ok(x1 && !x2 && strstr(nmt_errmsg(), "extra bytes already") && st_discard(all, x1 + 100, 2 << 12) == 0 &&
                x1[0] == 7 && x1[(3 << 12) - 1] == 7 && st_discard(all, x1 + 100, 3 << 12) < 0,
            "st_extra: one buffer F owns, given back by st_discard: '%s'", nmt_errmsg());
    st_free(all);
    st_free(some);
    /* a file smaller than a page is read into memory: the same tensors */
    w = st_writer_new();
    rc = !w || st_writer_add(w, "b", ST_F32, 1, sb, b) < 0 || st_writer_write(w, path) < 0;
    st_writer_free(w);
    struct st_file *small = rc ? NULL : st_read_skip(path, "optim.");
    test_ok(small && !small->mapped && small->nt == 1 && st_get(small, "b", ST_F32, gb, 7) == 0 &&
                !memcmp(gb, b, sizeof b),
            "st_read: a file of less than a page is read (%s)", small ? "" : nmt_errmsg());
    st_free(small);
    w = st_writer_new();
    rc = !w || st_writer_add(w, "a", ST_F32, 1, sa, a) < 0 || st_writer_add(w, "optim.x", ST_F32, 1, sx, x) < 0 ||
         st_writer_add(w, "b", ST_F32, 1, sb, b) < 0 || st_writer_write(w, path) < 0;
    st_writer_free(w);
    /* cut inside the last tensor ("b"), and inside the skipped one */
    FILE *fp = fopen(path, "r+b");
    long size = fp && fseek(fp, 0, SEEK_END) == 0 ? ftell(fp) : -1;
    if (fp)
        fclose(fp);
    int cut = size > 0 && truncate(path, size - 4) == 0;
    some = cut ? st_read_skip(path, "optim.") : NULL;
    test_ok(cut && !some && strstr(nmt_errmsg(), "tensor 'b'"), "st_read_skip: a cut file is refused: '%s'",
            nmt_errmsg());
    unlink(path);
}

/* model_load_except: the tensors the ranges cover whole are left out (their file bytes kept, the
 * model counts as given back), a tensor covered in part and the others loaded; model_file_floats
 * finds a range's bytes in the file, and refuses one across two tensors. */
static void check_load_except(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/ref/post.safetensors", test_srcdir());
    struct st_file *f = st_read(path), *g = st_read(path);
    struct model_config c;
    struct model *m = f && g && model_config_load(&c, f) == 0 ? model_new(be, &c, MODEL_SPARSE) : NULL;
    const struct model_param *tab = NULL;
    size_t nt = m ? model_params(m, &tab) : 0, big = 0, other = 0;
    for (size_t i = 0; i < nt; i++) /* the two largest 2-D tensors */
        if (tab[i].ndim == 2 && tab[i].size > tab[big].size)
            other = big, big = i;
        else if (tab[i].ndim == 2 && tab[i].size > tab[other].size && i != big)
            other = i;
    float *dev = m ? model_param_data(m) : NULL;
    const struct model_range r[3] = {
        {dev ? dev + tab[big].offset : NULL, tab[big].size / 2},   /* big: whole, in two ranges */
        {dev ? dev + tab[big].offset + tab[big].size / 2 : NULL, tab[big].size - tab[big].size / 2},
        {dev ? dev + tab[other].offset : NULL, tab[other].size / 2}, /* other: half */
    };
    int ok = m && nt > 2 && big != other && model_load_except(m, g, 1, r, 3) == 0;
    test_ok(ok && model_weights_discarded(m), "model_load_except: loaded, the model counts as given back (%s)",
            ok ? "" : nmt_errmsg());
    size_t P = m ? model_num_params(m) : 0;
    float *h = malloc((P ? P : 1) * sizeof *h), *want = malloc((P ? P : 1) * sizeof *want);
    struct model *whole = ok ? model_new(be, &c, 0) : NULL;
    ok = ok && h && want && whole && model_load(whole, f, 0) == 0 && model_get_params(whole, want) == 0 &&
         be->ops.download(be->ctx, h, dev, P * sizeof *h) == 0;
    int same = ok;
    for (size_t i = 0; ok && i < nt; i++)
        if (i != big)
            same &= !memcmp(h + tab[i].offset, want + tab[i].offset, tab[i].size * sizeof *h);
    test_ok(same, "model_load_except: the tensors not covered whole hold the file's values");
    const struct st_tensor *t = ok ? st_find(f, tab[big].name) : NULL;
    const void *fb = NULL;
    size_t fl = 0;
    const unsigned char *at = ok ? model_file_floats(m, g, r[1].w, r[1].n, NULL, &fb, &fl) : NULL;
    test_ok(t && at && at == fb && fl == r[1].n * sizeof(float) &&
                !memcmp(at, (const unsigned char *)t->data + tab[big].size / 2 * sizeof(float), fl),
            "model_file_floats: the bytes of a range left out, kept in the consumed file (%s)", at ? "" : nmt_errmsg());
    test_ok(ok && !model_file_floats(m, g, dev + tab[big].offset + tab[big].size - 1, 2, NULL, &fb, &fl) &&
                strstr(nmt_errmsg(), "not all in one"),
            "model_file_floats: a range across two tensors refused: '%s'", nmt_errmsg());
    free(h), free(want);
    model_free(whole);
    model_free(m);
    st_free(f);
    st_free(g);
}

/* Writes to PATH the fixture F with its 2-D weights stored as int8 with row scales (Q and S: room
 * for them, freed by the caller); 0 or -1. */
static int write_int8_copy(const struct st_file *f, const char *path, int8_t *q, float *s)
{
    struct st_writer *w = st_writer_new();
    int rc = w ? 0 : -1;
    for (size_t i = 0; i < f->nmeta && rc == 0; i++)
        rc = st_writer_meta(w, f->meta_key[i], f->meta_val[i]);
    for (size_t i = 0; i < f->nt && rc == 0; i++) {
        const struct st_tensor *t = &f->t[i];
        if (t->dtype != ST_F32 || t->ndim != 2 || strncmp(t->name, "enc.", 4) != 0) {
            rc = st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
            continue;
        }
        const float *x = t->data; /* a little-endian host, as the fixtures' readers */
        for (uint64_t r = 0; r < t->shape[0]; r++, x += t->shape[1]) {
            float amax = 0;
            for (uint64_t c = 0; c < t->shape[1]; c++)
                amax = fabsf(x[c]) > amax ? fabsf(x[c]) : amax;
            *s = amax > 0 ? amax / 127 : 1;
            for (uint64_t c = 0; c < t->shape[1]; c++)
                q[c] = (int8_t)lrintf(x[c] / *s);
            s++, q += t->shape[1];
        }
        rc = checkpoint_put_int8(w, t->name, t->shape[0], t->shape[1], q - t->shape[0] * t->shape[1],
                                 s - t->shape[0]);
    }
    rc = rc == 0 ? st_writer_write(w, path) : -1;
    st_writer_free(w);
    return rc;
}

/* A checkpoint with int8 weights: model_load reads them as float32 one tensor at a time, the values
 * checkpoint_dequantize makes of the whole file; model_file_floats reads a range of one into TMP
 * and names its int8 bytes, and wants TMP. */
static void check_load_int8(void)
{
    char src[4096], path[4096];
    snprintf(src, sizeof src, "%s/tests/fixtures/ref/post.safetensors", test_srcdir());
    snprintf(path, sizeof path, "/tmp/nmt-test-int8-%d.st", (int)getpid());
    struct st_file *f = st_read(src);
    size_t bytes = f ? f->len : 1;
    int8_t *q = malloc(bytes);
    float *s = malloc(bytes);
    int ok = f && q && s && write_int8_copy(f, path, q, s) == 0;
    struct st_file *lazy = ok ? st_read(path) : NULL, *eager = ok ? st_read(path) : NULL;
    struct model_config c;
    ok = lazy && eager && checkpoint_dequantize(eager, path) == 0 && model_config_load(&c, lazy) == 0;
    struct model *m1 = ok ? model_new(be, &c, 0) : NULL, *m2 = ok ? model_new(be, &c, 0) : NULL;
    size_t P = m1 ? model_num_params(m1) : 0, n8 = m1 ? model_file_int8_max(m1, lazy) : 0;
    float *w1 = malloc((P ? P : 1) * sizeof *w1), *w2 = malloc((P ? P : 1) * sizeof *w2);
    ok = m1 && m2 && w1 && w2 && n8 > 0 && model_load(m1, lazy, 0) == 0 && model_load(m2, eager, 0) == 0 &&
         model_get_params(m1, w1) == 0 && model_get_params(m2, w2) == 0;
    test_ok(ok && !memcmp(w1, w2, P * sizeof *w1), "model_load: int8 weights read as checkpoint_dequantize makes them (%s)",
            ok ? "" : nmt_errmsg());
    const struct model_param *tab = NULL;
    size_t nt = m1 ? model_params(m1, &tab) : 0, i = 0;
    while (i < nt && (strncmp(tab[i].name, "enc.", 4) != 0 || tab[i].ndim != 2))
        i++;
    const float *dev = m1 ? model_param_data(m1) : NULL, *at = NULL;
    const struct st_tensor *t8 = i < nt ? st_find(lazy, tab[i].name) : NULL;
    const void *fb = NULL;
    size_t fl = 0, cols = i < nt ? (size_t)tab[i].shape[1] : 0, n = cols + 3; /* a row and a bit, from column 1 */
    float *tmp = malloc((n8 ? n8 : 1) * sizeof *tmp);
    if (ok && t8 && t8->dtype == ST_I8 && tmp)
        at = model_file_floats(m1, lazy, dev + tab[i].offset + cols + 1, n, tmp, &fb, &fl);
    test_ok(at && at == tmp && fb == (const int8_t *)t8->data + cols + 1 && fl == n &&
                !memcmp(at, w2 + tab[i].offset + cols + 1, n * sizeof *at),
            "model_file_floats: a range of an int8 tensor, as float32 in TMP, its int8 bytes named (%s)",
            at ? "" : nmt_errmsg());
    test_ok(ok && t8 && !model_file_floats(m1, lazy, dev + tab[i].offset, 4, NULL, &fb, &fl) &&
                strstr(nmt_errmsg(), "is int8"),
            "model_file_floats: an int8 tensor without TMP refused: '%s'", nmt_errmsg());
    free(tmp), free(w1), free(w2), free(q), free(s);
    model_free(m1), model_free(m2);
    st_free(f), st_free(lazy), st_free(eager);
    unlink(path);
}

/* model_load_consume: the same weights as model_load; the file's copies given back as they go (an
 * image the file does not own is refused). */
static void check_load_consume(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/ref/post.safetensors", test_srcdir());
    struct st_file *f1 = st_read(path), *f2 = st_read(path);
    struct model_config c;
    int ok = f1 && f2 && model_config_load(&c, f1) == 0;
    struct model *m1 = ok ? model_new(be, &c, 0) : NULL, *m2 = ok ? model_new(be, &c, 0) : NULL;
    size_t P = m1 ? model_num_params(m1) : 0;
    float *w1 = malloc((P ? P : 1) * sizeof *w1), *w2 = malloc((P ? P : 1) * sizeof *w2);
    ok = m1 && m2 && w1 && w2 && model_load(m1, f1, 0) == 0 && model_load_consume(m2, f2) == 0 &&
         model_get_params(m1, w1) == 0 && model_get_params(m2, w2) == 0;
    test_ok(ok && !memcmp(w1, w2, P * sizeof *w1), "model_load_consume: the weights model_load gives (%s)",
            ok ? "" : nmt_errmsg());
    /* an image the file does not own (st_parse without OWN) cannot be given back */
    struct st_file *borrowed = f1 ? st_parse(f1->buf, f1->len, 0, "borrowed") : NULL;
    test_ok(borrowed && m2 && model_load_consume(m2, borrowed) < 0 &&
                strstr(nmt_errmsg(), "not in an image this file owns"),
            "model_load_consume: refused on a borrowed image: '%s'", nmt_errmsg());
    st_free(borrowed);
    free(w1);
    free(w2);
    model_free(m1);
    model_free(m2);
    st_free(f1);
    st_free(f2);
}

static void check_misc(void)
{
    struct model_config c;
    test_ok(model_preset(&c, "base") == 0 && c.d_model == 512 && c.heads == 8 && c.ff == 2048 && c.enc_layers == 6,
            "preset base");
    test_ok(model_preset(&c, "huge") < 0, "unknown preset refused");
    test_ok(fabs(lr_paper(1, 512, 4000, 4000) - pow(512, -0.5) * pow(4000, -0.5)) < 1e-12, "lr at the end of warm-up");
    test_ok(lr_paper(1, 512, 100, 4000) < lr_paper(1, 512, 200, 4000), "lr grows during warm-up");
    test_ok(lr_paper(1, 512, 8000, 4000) < lr_paper(1, 512, 5000, 4000), "lr decays after warm-up");
    enum lr_schedule s;
    double peak = pow(512, -0.5) * pow(4000, -0.5);
    test_ok(lr_schedule_parse("linear", &s) == 0 && s == LR_SCHEDULE_LINEAR &&
            !strcmp(lr_schedule_name(s), "linear") && lr_schedule_parse("cosine", &s) < 0, "schedule names");
    test_ok(lr_at(LR_SCHEDULE_INVERSE_SQRT, 1, 512, 7000, 4000, 0) == lr_paper(1, 512, 7000, 4000),
            "inverse-sqrt is the paper's schedule");
    test_ok(fabs(lr_at(LR_SCHEDULE_CONSTANT, 1, 512, 1000, 4000, 0) - peak / 4) < 1e-15 &&
            fabs(lr_at(LR_SCHEDULE_CONSTANT, 1, 512, 9000, 4000, 0) - peak) < 1e-15,
            "constant: warm-up, then the peak");
    test_ok(fabs(lr_at(LR_SCHEDULE_LINEAR, 1, 512, 4000, 4000, 6000) - peak) < 1e-15 &&
            fabs(lr_at(LR_SCHEDULE_LINEAR, 1, 512, 5000, 4000, 6000) - peak / 2) < 1e-15 &&
            lr_at(LR_SCHEDULE_LINEAR, 1, 512, 6000, 4000, 6000) == 0 &&
            lr_at(LR_SCHEDULE_LINEAR, 1, 512, 7000, 4000, 6000) == 0,
            "linear: down to 0 at the last step");
    /* bad batches */
    tiny_config(&c, 0);
    struct model *m = model_new(be, &c, 1);
    model_init(m, 1);
    struct batch_record br = {0};
    fixed_batch(&br, c.vocab);
    br.src[0] = 50;
    struct model_loss L;
    test_ok(model_step(m, &br, 0, 0, 0, &L, NULL) < 0 && strstr(nmt_errmsg(), "outside the vocabulary"),
            "id out of range refused: %s", nmt_errmsg());
    br.src[0] = 5;
    br.src_len[1] = 9;
    test_ok(model_step(m, &br, 0, 0, 0, &L, NULL) < 0, "length beyond the batch refused: %s", nmt_errmsg());
    batch_record_free(&br);
    /* save / load round trip */
    struct st_writer *w = st_writer_new();
    char path[] = "/tmp/nmt-test-model-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    test_ok(model_save(m, w, 1) == 0 && st_writer_write(w, path) == 0, "checkpoint written");
    st_writer_free(w);
    struct st_file *f = st_read(path);
    struct model *m2 = model_new(be, &c, 1);
    int lrc = f && m2 ? model_load(m2, f, 1) : -1;
    test_ok(lrc == 0, "checkpoint loads (%s)", lrc ? nmt_errmsg() : "");
    size_t P = model_num_params(m);
    float *a = malloc(P * 4), *b = malloc(P * 4);
    model_get_params(m, a);
    model_get_params(m2, b);
    test_ok(memcmp(a, b, P * 4) == 0, "round trip is exact");
    struct model_config c3 = c;
    c3.ff = 48;
    struct model *m3 = model_new(be, &c3, 0);
    test_ok(model_load(m3, f, 0) < 0 && strstr(nmt_errmsg(), "another model shape"), "other shape refused: %s",
            nmt_errmsg());
    free(a), free(b);
    model_free(m3);
    model_free(m2);
    model_free(m);
    st_free(f);
    unlink(path);
}

/* The named fields of the weights view and the table of names, shapes and offsets describe one
 * layout: every tensor in order, back to back, each field at its named tensor. */
static void check_layout(int pre_norm)
{
    struct model_config c;
    tiny_config(&c, pre_norm);
    struct model *m = model_new(be, &c, 0);
    const struct model_param *tab;
    size_t nt = model_params(m, &tab);
    const struct model_weights *w = model_weights(m);
    const float *base = model_param_data(m);
    size_t expect = 1 + 12 * (size_t)c.enc_layers + 20 * (size_t)c.dec_layers + (pre_norm ? 4 : 0), off = 0;
    int packed = 1;
    for (size_t i = 0; i < nt; i++) {
        size_t cols = tab[i].ndim == 2 ? (size_t)tab[i].shape[1] : 1;
        packed &= tab[i].offset == off && tab[i].size == (size_t)tab[i].shape[0] * cols;
        off += tab[i].size;
    }
    test_ok(nt == expect && packed && off == model_num_params(m), "%s: %zu tensors back to back, %zu floats",
            pre_norm ? "pre" : "post", nt, off);
    struct { const char *name; const float *field; int64_t r, c; } f[] = {
        {"emb.weight", w->emb, c.vocab, c.d_model},
        {"enc.0.att.qkv.weight", w->enc[0].qkv_w, 3 * c.d_model, c.d_model},
        {"enc.1.ln2.bias", w->enc[1].ln2_b, c.d_model, 0},
        {"dec.0.cross_att.kv.weight", w->dec[0].ckv_w, 2 * c.d_model, c.d_model},
        {"dec.1.ffn.w2.weight", w->dec[1].w2, c.d_model, c.ff},
        {"dec.1.ln3.bias", w->dec[1].ln3_b, c.d_model, 0},
        {"dec_ln.weight", w->dec_ln_g, c.d_model, 0},
    };
    int found = 0, at = 1;
    for (size_t j = 0; j < sizeof f / sizeof f[0]; j++)
        for (size_t i = 0; i < nt; i++)
            if (!strcmp(tab[i].name, f[j].name)) {
                found++;
                at &= f[j].field == base + tab[i].offset && tab[i].shape[0] == f[j].r && tab[i].shape[1] == f[j].c;
            }
    test_ok(found == (pre_norm ? 7 : 6) && at && (pre_norm || !w->dec_ln_g),
            "%s: the weights' fields are their named tensors", pre_norm ? "pre" : "post");
    model_free(m);
}

/* The tensors of the options: dec_emb.weight, out.weight, out.bias after the layers (the default
 * layout unchanged before them), and the fields that alias emb.weight when the matrices are one. */
static void check_marian_layout(void)
{
    struct model_config c;
    for (int v = V_MARIAN; v <= V_MARIAN_NONE; v++) {
        variant_config(&c, v);
        struct model *m = model_new(be, &c, 0);
        const struct model_param *tab;
        size_t nt = model_params(m, &tab);
        const struct model_weights *w = model_weights(m);
        const float *base = model_param_data(m);
        size_t V = (size_t)c.vocab, D = (size_t)c.d_model, P = model_num_params(m);
        size_t tail = v == V_MARIAN ? 2 : 3, base_n = 1 + 12 * (size_t)c.enc_layers + 20 * (size_t)c.dec_layers;
        int ok = nt == base_n + tail && !strcmp(tab[base_n].name, "dec_emb.weight") &&
                 w->dec_emb == base + tab[base_n].offset && w->out_b == base + P - V &&
                 !strcmp(tab[nt - 1].name, "out.bias") && tab[nt - 1].ndim == 1 && w->dec_emb != w->emb;
        if (v == V_MARIAN)
            ok &= w->out_w == w->dec_emb && P - (size_t)(w->dec_emb - base) == V * D + V;
        else
            ok &= !strcmp(tab[base_n + 1].name, "out.weight") && w->out_w == base + tab[base_n + 1].offset;
        test_ok(ok, "%s: dec_emb.weight%s and out.bias after the layers", variant_names[v],
                v == V_MARIAN ? " (also the output projection)" : ", out.weight");
        model_free(m);
    }
    tiny_config(&c, 0);
    struct model *m = model_new(be, &c, 0);
    const struct model_weights *w = model_weights(m);
    test_ok(w->dec_emb == w->emb && w->out_w == w->emb && !w->out_b, "defaults: one matrix, no output bias");
    model_free(m);
}

/* The options go into the checkpoint's metadata and come back; absent keys are the defaults;
 * an unknown value is an error naming the key and the value. */
static void check_options_saved(void)
{
    struct model_config c, r;
    char po[64], pold[64], pbad[64];
    snprintf(po, sizeof po, "/tmp/nmt-test-opts-%d.st", (int)getpid());
    snprintf(pold, sizeof pold, "/tmp/nmt-test-old-%d.st", (int)getpid());
    snprintf(pbad, sizeof pbad, "/tmp/nmt-test-bad-%d.st", (int)getpid());
    variant_config(&c, V_MARIAN_NONE);
    struct st_writer *w = st_writer_new();
    test_ok(model_config_save(&c, w) == 0 && st_writer_write(w, po) == 0, "options saved");
    st_writer_free(w);
    struct st_file *f = st_read(po);
    test_ok(f && model_config_load(&r, f) == 0 && r.positions == MODEL_POS_MARIAN && r.start_zero == 1 &&
                r.activation == MODEL_ACT_SWISH && r.tie == MODEL_TIE_NONE && r.output_bias == 1 &&
                r.ln_eps == 1e-6f,
            "options read back");
    test_ok(f && !strcmp(st_meta(f, "model.tied_embeddings"), "none") && !strcmp(st_meta(f, "model.positions"), "marian"),
            "metadata spells them");
    st_free(f);
    unlink(po);
    const char *keys[][2] = {{"model.vocab", "50"}, {"model.d_model", "32"}, {"model.heads", "2"},
                             {"model.ff", "64"}, {"model.enc_layers", "2"}, {"model.dec_layers", "2"},
                             {"model.pre_norm", "0"}, {"model.max_len", "64"}, {"model.dropout", "0"},
                             {"model.attn_dropout", "0"}, {"model.act_dropout", "0"},
                             {"model.label_smoothing", "0.1"}, {"model.ln_eps", "1e-5"},
                             {"model.activation", "gelu"}};
    for (size_t bad = 0; bad < 2; bad++) { /* an old file's keys; then with an unknown activation */
        w = st_writer_new();
        st_writer_meta(w, "format", "nmt-checkpoint 1.0");
        st_writer_meta(w, "model.arch", "transformer");
        for (size_t i = 0; i + 1 + !bad <= sizeof keys / sizeof keys[0]; i++)
            st_writer_meta(w, keys[i][0], keys[i][1]);
        st_writer_write(w, bad ? pbad : pold);
        st_writer_free(w);
    }
    f = st_read(pold);
    test_ok(f && model_config_load(&r, f) == 0 && r.positions == 0 && r.start_zero == 0 && r.activation == 0 &&
                r.tie == 0 && r.output_bias == 0,
            "a checkpoint without the keys: the defaults");
    st_free(f);
    f = st_read(pbad);
    test_ok(f && model_config_load(&r, f) < 0 && strstr(nmt_errmsg(), "model.activation") &&
                strstr(nmt_errmsg(), "gelu"),
            "an unknown value is refused by key and value: %s", nmt_errmsg());
    st_free(f);
    unlink(pold);
    unlink(pbad);
}

/* A backend without the ABI 2.5 slots a configuration needs is refused, naming the option; a model
 * of the defaults needs none of them. */
static void check_backend_refusal(void)
{
    struct model_config c;
    variant_config(&c, V_MARIAN);
    struct backend b = *be;
    b.ops.swish_backward = NULL;
    struct model *m = model_new(&b, &c, 1);
    test_ok(!m && strstr(nmt_errmsg(), "activation swish") && strstr(nmt_errmsg(), "cpu"),
            "a backend without swish is refused: %s", nmt_errmsg());
    b.ops = be->ops;
    b.ops.embedding_table_forward = NULL;
    test_ok(nn_check_backend(&b.ops, &c) < 0 && strstr(nmt_errmsg(), "positions marian"),
            "nor without the table embedding: %s", nmt_errmsg());
    c.positions = MODEL_POS_PAPER;
    test_ok(nn_check_backend(&b.ops, &c) < 0 && strstr(nmt_errmsg(), "start embedding zero"),
            "which the zero start needs too: %s", nmt_errmsg());
    b.ops.swish_forward = NULL;
    tiny_config(&c, 0);
    m = model_new(&b, &c, 1);
    test_ok(m != NULL, "a model of the defaults runs without them");
    model_free(m);
}

/* Forced decoding (model_score) gives each sentence's share of the batch NLL. */
static void check_score(int pre_norm)
{
    struct model_config c;
    tiny_config(&c, pre_norm);
    struct model *m = model_new(be, &c, 0);
    model_init(m, 5);
    struct batch_record br = {0};
    fixed_batch(&br, c.vocab);
    struct model_loss L;
    test_ok(model_step(m, &br, 0, 0, 0, &L, NULL) == 0, "%s: forward", pre_norm ? "pre" : "post");
    double sn[3];
    struct model_loss L2;
    int rs = model_score(m, &br, sn, &L2);
    double tot = sn[0] + sn[1] + sn[2];
    test_ok(rs == 0 && fabs(tot - L.nll) < 1e-5 * fabs(L.nll) && sn[2] > 0 && sn[2] < sn[1],
            "%s: model_score sums to the batch NLL (%.6f %.6f %.6f)", pre_norm ? "pre" : "post", sn[0], sn[1], sn[2]);
    batch_record_free(&br);
    model_free(m);
}

/* The model on the cpu plugin's attention_*_lse slots (its default: the plugin has them) against
 * the same model on a copy of the plugin's table without them (the P path): the same loss and
 * gradients, bit for bit. */
static void check_lse_path(int pre_norm, int dropout)
{
    struct backend bp = *be; /* the same plugin and context, the lse slots hidden */
    bp.ops.attention_forward_lse = NULL;
    bp.ops.attention_backward_lse = NULL;
    struct model_config c;
    tiny_config(&c, pre_norm);
    if (dropout)
        c.dropout = 0.2f, c.attn_dropout = 0.1f, c.act_dropout = 0.1f;
    struct model *ml = model_new(be, &c, 1), *mp = model_new(&bp, &c, 1);
    struct batch_record br = {0};
    fixed_batch(&br, c.vocab);
    size_t P = model_num_params(ml);
    float *gl = malloc(P * sizeof *gl), *gp = malloc(P * sizeof *gp);
    struct model_loss Ll, Lp;
    int rc = model_init(ml, 5) | model_init(mp, 5) | model_zero_grad(ml) | model_zero_grad(mp) |
             model_step(ml, &br, 1, 1, 31, &Ll, NULL) | model_step(mp, &br, 1, 1, 31, &Lp, NULL) |
             model_get_grads(ml, gl) | model_get_grads(mp, gp);
    test_ok(be->ops.attention_forward_lse && rc == 0 && Ll.loss == Lp.loss && memcmp(gl, gp, P * sizeof *gl) == 0,
            "%s, dropout %s: the lse attention path gives the P path's loss (%.9g, %.9g) and gradients bit for bit",
            pre_norm ? "pre-norm" : "post-norm", dropout ? "on" : "off", Ll.loss, Lp.loss);
    free(gl), free(gp);
    batch_record_free(&br);
    model_free(ml);
    model_free(mp);
}

/* bf16 mixed precision on the cpu plugin (emulated exactly): close to float32, not equal; the bf16
 * copy follows model_set_params; refused by a plugin without the ABI 2.2 slots. */
static void check_bf16(void)
{
    struct model_config c;
    tiny_config(&c, 0);
    struct model *mf = model_new(be, &c, 1), *mb = model_new(be, &c, 1);
    struct batch_record br = {0};
    fixed_batch(&br, c.vocab);
    size_t P = model_num_params(mf);
    float *gf = malloc(P * sizeof *gf), *gb = malloc(P * sizeof *gb), *p = malloc(P * sizeof *p);
    struct model_loss Lf, Lb, L2;
    int rc = model_init(mf, 9) | model_init(mb, 9) | model_set_precision(mb, NMT_DTYPE_BF16) | model_zero_grad(mf) |
             model_zero_grad(mb) | model_step(mf, &br, 0, 1, 1, &Lf, NULL) | model_step(mb, &br, 0, 1, 1, &Lb, NULL) |
             model_get_grads(mf, gf) | model_get_grads(mb, gb);
    double rel = fabs(Lb.loss - Lf.loss) / Lf.loss, ge = rel_err(gb, gf, P);
    test_ok(rc == 0 && model_precision(mb) == NMT_DTYPE_BF16 && rel > 0 && rel < 1e-2 && ge < 5e-2,
            "bf16: loss %.7g vs float32 %.7g (relative difference %.2e), gradients within %.2e", Lb.loss, Lf.loss, rel,
            ge);
    /* new parameters reach the bf16 copy: a bf16 model given mf's parameters after an Adam step
     * computes what mb computes after the same parameters are set */
    rc = model_adam(mf, 1e-2f, 1, 1.0f, 0.9f, 0.98f, 1e-9f) | model_get_params(mf, p) | model_set_params(mb, p) |
         model_step(mb, &br, 0, 0, 1, &Lb, NULL);
    struct model *m3 = model_new(be, &c, 0);
    rc |= !m3 || model_set_precision(m3, NMT_DTYPE_BF16) | model_set_params(m3, p) | model_step(m3, &br, 0, 0, 1, &L2, NULL);
    test_ok(rc == 0 && Lb.loss == L2.loss && Lb.loss != Lf.loss,
            "bf16: the weight copy follows model_set_params (%.9g == %.9g)", Lb.loss, L2.loss);
    rc = model_set_precision(mb, NMT_DTYPE_F32) | model_set_params(mf, p) | model_step(mb, &br, 0, 0, 1, &Lb, NULL) |
         model_step(mf, &br, 0, 0, 1, &Lf, NULL);
    test_ok(rc == 0 && Lb.loss == Lf.loss && model_precision(mb) == NMT_DTYPE_F32,
            "bf16 then float32 again: the float32 result (%.9g == %.9g)", Lb.loss, Lf.loss);
    struct backend bp = *be;
    bp.ops.gemm_ex = NULL;
    struct model *m4 = model_new(&bp, &c, 1);
    test_ok(m4 && model_set_precision(m4, NMT_DTYPE_BF16) < 0 && strstr(nmt_errmsg(), "ABI 2.2") &&
                model_has_bf16(m4) == 0 && model_has_bf16(mf) == 1,
            "bf16 refused by a plugin without gemm_ex: %s", nmt_errmsg());
    free(gf), free(gb), free(p);
    batch_record_free(&br);
    model_free(mf), model_free(mb), model_free(m3), model_free(m4);
}

/* What the bucket hook saw: each bucket's gradient at the moment it was declared final. */
struct bucket_log {
    struct model *m;
    float *seen;     /* (P) */
    int calls, in_order;
};

static int log_bucket(void *arg, int b)
{
    struct bucket_log *l = arg;
    const size_t *r;
    model_grad_buckets(l->m, &r);
    l->in_order &= b == l->calls++;
    return model_get_grads_range(l->m, l->seen + r[2 * b], r[2 * b], r[2 * b + 1]);
}

static int fail_bucket(void *arg, int b)
{
    (void)arg;
    return b == 1 ? nmt_seterr("stop at bucket 1") : 0;
}

/* The gradient buckets cover the parameters once, in the backward pass's order, and each is final
 * (unchanged by the rest of the pass) when the hook is told; a failing hook fails the step. */
static void check_buckets(int variant)
{
    struct model_config c;
    variant_config(&c, variant);
    int pre_norm = variant == V_PRE, tail = variant >= V_MARIAN;
    struct model *m = model_new(be, &c, 1);
    model_init(m, 5);
    const size_t *r;
    int nb = model_grad_buckets(m, &r);
    size_t P = model_num_params(m), sum = 0, prev_end = SIZE_MAX;
    int order = 1;
    for (int b = 0; b < nb; b++) {
        sum += r[2 * b + 1];
        if (r[2 * b + 1] == 2 * (size_t)c.d_model) /* a final layer norm (pre-norm), at the end of the layout */
            continue;
        if (tail && b == nb - 1) { /* the tensors after the layers: the last bucket, to the end */
            order &= r[2 * b] + r[2 * b + 1] == P;
            continue;
        }
        order &= b == nb - 1 - tail ? r[2 * b] == 0 : r[2 * b] + r[2 * b + 1] <= prev_end; /* layers from the last */
        prev_end = r[2 * b];
    }
    /* pre-norm: the decoder's final layer norm first, the encoder's after the decoder layers */
    order &= !pre_norm || (r[0] == P - 2 * (size_t)c.d_model && r[2 * 3] == P - 4 * (size_t)c.d_model);
    test_ok(nb == 5 + 2 * pre_norm + tail && sum == P && order, "%s: %d buckets, the layers from the last, emb last",
            variant_names[variant], nb);
    struct batch_record br = {0};
    fixed_batch(&br, c.vocab);
    float *g = malloc(P * sizeof *g);
    struct bucket_log l = {m, calloc(P, sizeof(float)), 0, 1};
    struct model_loss L;
    model_set_grad_ready(m, log_bucket, &l);
    model_zero_grad(m);
    test_ok(model_step(m, &br, 1, 1, 3, &L, NULL) == 0 && model_get_grads(m, g) == 0, "a step with the hook");
    test_ok(l.calls == nb && l.in_order, "the hook hears of each bucket once, in order (%d calls)", l.calls);
    test_ok(!memcmp(l.seen, g, P * sizeof *g), "each bucket's gradient was final when the hook heard of it");
    l.calls = 0;
    model_step(m, &br, 0, 0, 0, &L, NULL);
    test_ok(l.calls == 0, "no calls without a backward pass");
    model_set_grad_ready(m, fail_bucket, NULL);
    test_ok(model_step(m, &br, 1, 1, 3, &L, NULL) == -1 && strstr(nmt_errmsg(), "stop at bucket 1"),
            "a failing hook fails the step: %s", nmt_errmsg());
    model_set_grad_ready(m, NULL, NULL);
    free(l.seen);
    free(g);
    batch_record_free(&br);
    model_free(m);
}

int main(void)
{
    struct nmt_backend_opts o = {sizeof o, 2, 0};
    be = backend_open("cpu", &o);
    if (!be) {
        printf("not ok 1 - cpu backend loads: %s\n1..1\n", nmt_errmsg());
        return 1;
    }
    const char *d = getenv("NMT_REF_DUMP");
    if (d && *d) {
        const char *pn = getenv("NMT_REF_PRENORM"), *vn = getenv("NMT_REF_VARIANT");
        int rc = dump(d, vn && !strcmp(vn, "marian") ? V_MARIAN : pn && *pn == '1' ? V_PRE : V_POST);
        backend_close(be);
        return rc;
    }
    check_misc();
    check_load_consume();
    check_load_except();
    check_load_int8();
    check_read_skip();
    check_layout(0);
    check_layout(1);
    check_buckets(V_POST);
    check_buckets(V_PRE);
    check_buckets(V_MARIAN);
    check_buckets(V_MARIAN_NONE);
    check_marian_layout();
    check_backend_refusal();
    check_fixture("post");
    check_fixture("pre");
    check_fixture("marian");
    check_score(0);
    check_score(1);
    check_fd(V_POST, 0);
    check_fd(V_PRE, 0);
    check_fd(V_POST, 1);
    check_fd(V_PRE, 1);
    check_fd(V_MARIAN, 0);
    check_fd(V_MARIAN_NONE, 0);
    check_fd(V_MARIAN, 1);
    check_fd(V_MARIAN_NONE, 1);
    check_options_saved();
    check_lse_path(0, 0);
    check_lse_path(1, 1);
    check_lse_path(0, 1);
    check_bf16();
    backend_close(be);
    return test_done();
}
