/* checkpoint.c: checkpoints, the one owner of formats/checkpoint.md (see checkpoint.h). */
#include "nn/checkpoint.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "nn/params.h"

/* Writes the state and record keys into W; 0 or -1. */
static int put_train_meta(struct st_writer *w, const struct train_state *s, const struct train_record *r)
{
    char v[64];
    const struct { const char *k; uint64_t v; } u[] = {
        {"train.step", s->step},     {"train.epoch", s->epoch},         {"train.pos", s->pos},
        {"train.tokens", s->tokens}, {"train.bad_valid", s->bad_valid}, {"train.skipped", s->skipped},
        {"train.seed", r->seed},     {"train.warmup", r->warmup},       {"train.update_freq", r->update_freq}};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
        snprintf(v, sizeof v, "%llu", (unsigned long long)u[i].v);
        if (st_writer_meta(w, u[i].k, v) < 0)
            return -1;
    }
    snprintf(v, sizeof v, "%.17g", s->best_valid);
    if (st_writer_meta(w, "train.best_valid", v) < 0)
        return -1;
    snprintf(v, sizeof v, "%.17g", s->best_bleu);
    if (st_writer_meta(w, "train.best_bleu", v) < 0)
        return -1;
    if (st_writer_meta(w, "train.schedule", r->schedule) < 0)
        return -1;
    snprintf(v, sizeof v, "%.17g", r->ema);
    if (st_writer_meta(w, "train.ema", v) < 0)
        return -1;
    snprintf(v, sizeof v, "%.17g", r->lr);
    return st_writer_meta(w, "train.lr", v);
}

/* checkpoint_save and checkpoint_save_weights: OPT, the optimizer's state (and EMA when not NULL);
 * EMA_WEIGHTS, the weights are a moving average. */
static int save_impl(struct model *m, const struct train_state *s, const struct train_record *r, int opt,
                     const float *ema, int ema_weights, const char *path)
{
    int fin = model_params_finite(m);
    if (fin < 0)
        return -1;
    if (!fin) /* never replace a checkpoint by a broken model */
        return nmt_seterr("the model's parameters are not finite at step %llu; '%s' was not written",
                          (unsigned long long)s->step, path);
    struct st_writer *w = st_writer_new();
    if (!w)
        return -1;
    int rc = model_save(m, w, opt);
    if (rc == 0)
        rc = put_train_meta(w, s, r);
    uint64_t np[1] = {model_num_params(m)};
    if (rc == 0 && opt && ema)
        rc = st_writer_add(w, CKPT_EMA, ST_F32, 1, np, ema);
    if (rc == 0 && ema_weights)
        rc = st_writer_meta(w, CKPT_WEIGHTS, "ema");
    if (rc == 0)
        rc = st_writer_meta(w, CKPT_VOCAB_FINGERPRINT, r->fingerprint);
    if (rc == 0)
        rc = st_writer_meta(w, CKPT_PRODUCER, r->producer);
    if (rc == 0 && r->config)
        rc = st_writer_meta(w, CKPT_TRAIN_CONFIG, r->config);
    uint64_t shape[1] = {r->vocab_text->len};
    if (rc == 0)
        rc = st_writer_add(w, CKPT_VOCAB_FILE, ST_U8, 1, shape, r->vocab_text->data);
    if (rc == 0)
        rc = st_writer_write(w, path);
    st_writer_free(w);
    return rc;
}

int checkpoint_save(struct model *m, const struct train_state *s, const struct train_record *r, const float *ema,
                    const char *path)
{
    return save_impl(m, s, r, 1, ema, 0, path);
}

int checkpoint_save_weights(struct model *m, const struct train_state *s, const struct train_record *r,
                            int ema_weights, const char *path)
{
    return save_impl(m, s, r, 0, NULL, ema_weights, path);
}

/* Adds the tensors of configuration C, their data in PARAMS, to W, checked finite. 0 or -1. */
static int put_host_tensors(struct st_writer *w, const struct model_config *c, const float *params)
{
    size_t nt = model_weights_layout(c, NULL, NULL, NULL, NULL), nf = 0;
    struct model_param *tab = nmt_calloc(nt ? nt : 1, sizeof *tab);
    if (!tab)
        return -1;
    model_weights_layout(c, NULL, tab, NULL, &nf);
    int rc = 0;
    for (size_t i = 0; i < nf && rc == 0; i++)
        if (!isfinite(params[i]))
            rc = nmt_seterr("weight %zu is not finite", i);
    for (size_t i = 0; i < nt && rc == 0; i++) {
        uint64_t shape[2] = {(uint64_t)tab[i].shape[0], (uint64_t)tab[i].shape[1]};
        rc = st_writer_add(w, tab[i].name, ST_F32, tab[i].ndim, shape, params + tab[i].offset);
    }
    free(tab);
    return rc;
}

int checkpoint_save_host(const struct model_config *c, const float *params, const struct vocab *v,
                         const char *producer, const char *path)
{
    struct st_writer *w = st_writer_new();
    struct nmt_buf text = {0};
    char fp[17];
    if (!w)
        return -1;
    vocab_fingerprint_hex(v, fp);
    int rc = model_config_check(c) < 0 || model_config_save(c, w) < 0 || put_host_tensors(w, c, params) < 0 ||
                     st_writer_meta(w, CKPT_VOCAB_FINGERPRINT, fp) < 0 || st_writer_meta(w, CKPT_PRODUCER, producer) < 0 ||
                     vocab_format(v, &text) < 0
                 ? -1
                 : 0;
    uint64_t shape[1] = {text.len};
    if (rc == 0)
        rc = st_writer_add(w, CKPT_VOCAB_FILE, ST_U8, 1, shape, text.data);
    if (rc == 0)
        rc = st_writer_write(w, path);
    st_writer_free(w);
    nmt_buf_free(&text);
    return rc;
}

int checkpoint_get_ema(const struct st_file *f, float *ema, size_t n)
{
    if (!st_find(f, CKPT_EMA))
        return 0;
    return st_get(f, CKPT_EMA, ST_F32, ema, n) < 0 ? -1 : 1;
}

static uint64_t meta_u64(const struct st_file *f, const char *k, int *bad)
{
    const char *s = st_meta(f, k);
    uint64_t v = 0;
    if (!s || nmt_parse_u64(s, UINT64_MAX, &v) < 0)
        *bad = 1;
    return v;
}

int checkpoint_train_state(const struct st_file *f, struct train_state *s)
{
    int bad = 0;
    s->step = meta_u64(f, "train.step", &bad);
    s->epoch = meta_u64(f, "train.epoch", &bad);
    s->pos = meta_u64(f, "train.pos", &bad);
    s->tokens = meta_u64(f, "train.tokens", &bad);
    s->bad_valid = meta_u64(f, "train.bad_valid", &bad);
    s->skipped = meta_u64(f, "train.skipped", &bad);
    const char *bv = st_meta(f, "train.best_valid");
    if (!bv || nmt_parse_double(bv, &s->best_valid) < 0)
        s->best_valid = INFINITY; /* "inf" is not finite: no best yet */
    const char *bb = st_meta(f, "train.best_bleu"); /* absent in checkpoints of earlier versions */
    if (!bb || nmt_parse_double(bb, &s->best_bleu) < 0)
        s->best_bleu = -INFINITY;
    return bad ? nmt_seterr("training state missing or bad") : 0;
}

struct vocab *checkpoint_vocab(const struct st_file *f, const char *name)
{
    const struct st_tensor *vt = st_find(f, CKPT_VOCAB_FILE);
    if (!vt || vt->dtype != ST_U8)
        return nmt_seterr("'%s': no vocabulary inside the checkpoint", name), NULL;
    return vocab_parse(vt->data, (size_t)vt->nbytes, name);
}

/* Whether the N float32 values at P (little-endian) include an infinity or a NaN: with every
 * exponent bit set, (bits & 0x7F800000) + 0x00800000 reaches bit 31, which nothing else does; a
 * branch-free OR over the block, so the scan runs at memory speed. */
static int block_nonfinite(const unsigned char *p, size_t n)
{
    uint32_t acc = 0;
    for (size_t k = 0; k < n; k++)
        acc |= (nmt_le32(p + 4 * k) & 0x7F800000u) + 0x00800000u;
    return (acc & 0x80000000u) != 0;
}

int checkpoint_check_finite(const struct st_file *f, const char *name)
{
    const size_t block = 4096;
    for (size_t i = 0; i < f->nt; i++) {
        const struct st_tensor *t = &f->t[i];
        if (t->dtype != ST_F32)
            continue;
        const unsigned char *p = t->data;
        uint64_t n = t->nbytes / 4;
        for (uint64_t b = 0; b < n; b += block) {
            size_t m = n - b < block ? (size_t)(n - b) : block;
            if (!block_nonfinite(p + 4 * b, m))
                continue;
            for (uint64_t k = b;; k++) /* the first bad element of this block */
                if (block_nonfinite(p + 4 * k, 1))
                    return nmt_seterr("'%s': tensor '%s' holds a non-finite value (element %llu): a diverged or "
                                      "damaged model", name, t->name, (unsigned long long)k);
        }
    }
    return 0;
}

int checkpoint_put_int8(struct st_writer *w, const char *name, uint64_t rows, uint64_t cols, const int8_t *q,
                        const float *scale)
{
    char sname[256];
    if (snprintf(sname, sizeof sname, "%s%s", name, CKPT_SCALE_SUFFIX) >= (int)sizeof sname)
        return nmt_seterr("tensor name '%s' too long", name);
    uint64_t shape[2] = {rows, cols};
    if (st_writer_add(w, name, ST_I8, 2, shape, q) < 0 || st_writer_add(w, sname, ST_F32, 1, shape, scale) < 0)
        return -1;
    return 0;
}

/* Checks the int8 tensor T of F (NAME for messages) and its scales; returns the scale tensor, or
 * NULL with the error set. */
static const struct st_tensor *int8_scales(const struct st_file *f, const struct st_tensor *t, const char *name)
{
    char sname[256];
    snprintf(sname, sizeof sname, "%s%s", t->name, CKPT_SCALE_SUFFIX);
    const struct st_tensor *s = st_find(f, sname);
    if (t->ndim != 2)
        return nmt_seterr("'%s': int8 tensor '%s' is not a matrix", name, t->name), NULL;
    if (!s)
        return nmt_seterr("'%s': int8 tensor '%s' has no scales ('%s')", name, t->name, sname), NULL;
    if (s->dtype != ST_F32 || s->ndim != 1 || s->shape[0] != t->shape[0])
        return nmt_seterr("'%s': '%s' must hold %llu float32 scales, one a row of '%s'", name, sname,
                          (unsigned long long)t->shape[0], t->name), NULL;
    for (uint64_t r = 0; r < s->shape[0]; r++) {
        float v;
        uint32_t bits = nmt_le32((const unsigned char *)s->data + 4 * r);
        memcpy(&v, &bits, 4);
        if (!(v > 0) || !isfinite(v))
            return nmt_seterr("'%s': scale %llu of '%s' is %g, not a positive finite number", name,
                              (unsigned long long)r, t->name, (double)v), NULL;
    }
    const unsigned char *bad = memchr(t->data, 0x80, (size_t)t->nbytes); /* -128 */
    if (bad)
        return nmt_seterr("'%s': int8 tensor '%s' holds -128 (element %llu; values are -127..127)", name, t->name,
                          (unsigned long long)(bad - (const unsigned char *)t->data)), NULL;
    return s;
}

/* Writes to DST the N float32 values (little-endian) q * scale from element FIRST of the int8
 * matrix Q of COLS columns, whose rows have the scales SCALE (little-endian float32). */
static void dequantize_span(unsigned char *dst, const int8_t *q, const unsigned char *scale, uint64_t cols,
                            uint64_t first, size_t n)
{
    for (uint64_t e = first, end = first + n; e < end;) {
        uint64_t r = e / cols, c = e % cols, len = cols - c < end - e ? cols - c : end - e;
        float sc;
        uint32_t bits = nmt_le32(scale + 4 * r);
        memcpy(&sc, &bits, 4);
        const int8_t *qr = q + e;
        if (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__) {
            for (uint64_t k = 0; k < len; k++) {
                float v = (float)qr[k] * sc;
                memcpy(dst + 4 * k, &v, 4);
            }
        } else {
            for (uint64_t k = 0; k < len; k++) {
                float v = (float)qr[k] * sc;
                memcpy(&bits, &v, 4);
                nmt_put32(dst + 4 * k, bits);
            }
        }
        dst += 4 * len;
        e += len;
    }
}

/* Checks every int8 tensor of F (NAME for messages); returns the bytes their float32 values take,
 * or (size_t)-1 with the error set. */
static size_t check_int8(const struct st_file *f, const char *name)
{
    size_t bytes = 0;
    for (size_t i = 0; i < f->nt; i++)
        if (f->t[i].dtype == ST_I8) {
            if (!int8_scales(f, &f->t[i], name))
                return (size_t)-1;
            bytes += (size_t)f->t[i].nbytes * sizeof(float);
        }
    return bytes;
}

int checkpoint_dequantize(struct st_file *f, const char *name)
{
    size_t extra = check_int8(f, name);
    if (extra == (size_t)-1)
        return -1;
    if (extra == 0)
        return 0;
    /* the float32 values in bytes F owns, so that st_free frees them and st_discard gives them back */
    unsigned char *nb = st_extra(f, extra);
    if (!nb)
        return -1;
    size_t off = 0;
    for (size_t i = 0; i < f->nt; i++) {
        struct st_tensor *t = &f->t[i];
        if (t->dtype != ST_I8)
            continue;
        if (checkpoint_read_f32(f, t, 0, (size_t)t->nbytes, nb + off) < 0)
            return -1;
        t->data = nb + off;
        t->dtype = ST_F32;
        off += (size_t)t->nbytes * sizeof(float);
        t->nbytes *= sizeof(float);
    }
    return 0;
}

int checkpoint_read_f32(const struct st_file *f, const struct st_tensor *t, uint64_t first, size_t n, void *dst)
{
    size_t size = t->dtype == ST_I8 ? 1 : t->dtype == ST_F32 ? 4 : 0;
    if (size == 0 || first > t->nbytes / size || n > t->nbytes / size - first)
        return nmt_seterr("tensor '%s': elements %llu..%llu are not float32 or int8 values it holds", t->name,
                          (unsigned long long)first, (unsigned long long)(first + n));
    if (size == 4) {
        memcpy(dst, (const unsigned char *)t->data + 4 * first, 4 * n);
        return 0;
    }
    char sname[256];
    snprintf(sname, sizeof sname, "%s%s", t->name, CKPT_SCALE_SUFFIX);
    const struct st_tensor *s = st_find(f, sname);
    if (!s || s->dtype != ST_F32 || t->ndim != 2 || s->nbytes != 4 * t->shape[0] || t->shape[1] == 0)
        return nmt_seterr("int8 tensor '%s' has no scale a row ('%s')", t->name, sname);
    dequantize_span(dst, t->data, s->data, t->shape[1], first, n);
    return 0;
}

int checkpoint_open_model(const char *path, struct st_file **f, struct model_config *cfg, struct vocab **v)
{
    *v = NULL;
    if (!(*f = st_read_skip(path, "optim."))) /* an optimizer's state is not read */
        return nmt_seterr("cannot read checkpoint: %s", nmt_errmsg());
    if (model_config_load(cfg, *f) < 0)
        nmt_seterr("'%s': %s", path, nmt_errmsg());
    else if (!(*v = checkpoint_vocab(*f, path)))
        ;
    else if ((int)(*v)->n != cfg->vocab)
        nmt_seterr("'%s': vocabulary of %u pieces for a model of %d", path, (*v)->n, cfg->vocab);
    else if (checkpoint_check_finite(*f, path) < 0 || check_int8(*f, path) == (size_t)-1)
        ;
    else
        return 0;
    vocab_free(*v);
    st_free(*f);
    *v = NULL;
    *f = NULL;
    return -1;
}
