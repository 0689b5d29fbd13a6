/* model.c: Transformer parameter layout, forward/backward layer loop over the backend kernels,
 * Adam, and checkpoint I/O (see model.h). */
#include "nn/model.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * configuration */

int model_preset(struct model_config *c, const char *name)
{
    memset(c, 0, sizeof *c);
    c->dropout = 0.1f;
    c->label_smoothing = 0.1f;
    c->ln_eps = 1e-5f;
    c->max_len = 1024;
    if (!strcmp(name, "tiny")) {
        c->d_model = 128, c->heads = 4, c->ff = 256, c->enc_layers = c->dec_layers = 4;
    } else if (!strcmp(name, "small")) {
        c->d_model = 256, c->heads = 4, c->ff = 1024, c->enc_layers = c->dec_layers = 3;
    } else if (!strcmp(name, "base")) {
        c->d_model = 512, c->heads = 8, c->ff = 2048, c->enc_layers = c->dec_layers = 6;
    } else if (!strcmp(name, "big")) {
        c->d_model = 1024, c->heads = 16, c->ff = 4096, c->enc_layers = c->dec_layers = 6;
    } else {
        return nmt_seterr("unknown preset '%s' (tiny, small, base, big)", name);
    }
    return 0;
}

int model_config_check(const struct model_config *c)
{
    if (c->vocab < 4 || c->vocab > (1 << 24))
        return nmt_seterr("vocabulary size %d out of range [4, 16777216]", c->vocab);
    if (c->d_model < 2 || c->d_model > 16384 || c->d_model % 2)
        return nmt_seterr("model width %d must be even and in [2, 16384]", c->d_model);
    if (c->heads < 1 || c->d_model % c->heads)
        return nmt_seterr("%d heads do not divide the model width %d", c->heads, c->d_model);
    if (c->ff < 1 || c->ff > 65536)
        return nmt_seterr("FFN width %d out of range [1, 65536]", c->ff);
    if (c->enc_layers < 1 || c->enc_layers > 64 || c->dec_layers < 1 || c->dec_layers > 64)
        return nmt_seterr("layer counts %d+%d out of range [1, 64]", c->enc_layers, c->dec_layers);
    if (c->max_len < 2 || c->max_len > 65536)
        return nmt_seterr("maximum length %d out of range [2, 65536]", c->max_len);
    const float p[3] = {c->dropout, c->attn_dropout, c->act_dropout};
    for (int i = 0; i < 3; i++)
        if (!(p[i] >= 0 && p[i] < 1))
            return nmt_seterr("dropout %g out of range [0, 1)", p[i]);
    if (!(c->label_smoothing >= 0 && c->label_smoothing < 1))
        return nmt_seterr("label smoothing %g out of range [0, 1)", c->label_smoothing);
    if (!(c->ln_eps > 0 && c->ln_eps < 1))
        return nmt_seterr("layer norm epsilon %g out of range (0, 1)", c->ln_eps);
    return 0;
}

int model_config_save(const struct model_config *c, struct st_writer *w)
{
    char v[64];
    const struct { const char *k; int v; } ints[] = {
        {"model.vocab", c->vocab},           {"model.d_model", c->d_model},       {"model.heads", c->heads},
        {"model.ff", c->ff},                 {"model.enc_layers", c->enc_layers}, {"model.dec_layers", c->dec_layers},
        {"model.pre_norm", c->pre_norm},     {"model.max_len", c->max_len}};
    const struct { const char *k; float v; } fl[] = {
        {"model.dropout", c->dropout},     {"model.attn_dropout", c->attn_dropout},
        {"model.act_dropout", c->act_dropout}, {"model.label_smoothing", c->label_smoothing},
        {"model.ln_eps", c->ln_eps}};
    if (st_writer_meta(w, "format", "nmt-checkpoint 1.0") < 0 || st_writer_meta(w, "model.arch", "transformer") < 0)
        return -1;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        snprintf(v, sizeof v, "%d", ints[i].v);
        if (st_writer_meta(w, ints[i].k, v) < 0)
            return -1;
    }
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) {
        snprintf(v, sizeof v, "%.9g", fl[i].v);
        if (st_writer_meta(w, fl[i].k, v) < 0)
            return -1;
    }
    return 0;
}

static int meta_int(const struct st_file *f, const char *k, int *out)
{
    const char *s = st_meta(f, k);
    uint64_t v;
    if (!s)
        return nmt_seterr("checkpoint lacks '%s'", k);
    if (nmt_parse_u64(s, 1u << 30, &v) < 0)
        return nmt_seterr("checkpoint: bad value '%.40s' for '%s'", s, k);
    *out = (int)v;
    return 0;
}

static int meta_float(const struct st_file *f, const char *k, float *out)
{
    const char *s = st_meta(f, k);
    double v;
    if (!s)
        return nmt_seterr("checkpoint lacks '%s'", k);
    if (nmt_parse_double(s, &v) < 0)
        return nmt_seterr("checkpoint: bad value '%.40s' for '%s'", s, k);
    *out = (float)v;
    return 0;
}

int model_config_load(struct model_config *c, const struct st_file *f)
{
    memset(c, 0, sizeof *c);
    const char *fmt = st_meta(f, "format");
    if (fmt && strncmp(fmt, "nmt-checkpoint 1.", 17))
        return nmt_seterr("unsupported checkpoint format '%.40s' (this reader knows nmt-checkpoint 1.x)", fmt);
    const char *arch = st_meta(f, "model.arch");
    if (!arch || strcmp(arch, "transformer"))
        return nmt_seterr("not an nmt model checkpoint (model.arch is %s)", arch ? arch : "missing");
    if (meta_int(f, "model.vocab", &c->vocab) < 0 || meta_int(f, "model.d_model", &c->d_model) < 0 ||
        meta_int(f, "model.heads", &c->heads) < 0 || meta_int(f, "model.ff", &c->ff) < 0 ||
        meta_int(f, "model.enc_layers", &c->enc_layers) < 0 || meta_int(f, "model.dec_layers", &c->dec_layers) < 0 ||
        meta_int(f, "model.pre_norm", &c->pre_norm) < 0 || meta_int(f, "model.max_len", &c->max_len) < 0 ||
        meta_float(f, "model.dropout", &c->dropout) < 0 || meta_float(f, "model.attn_dropout", &c->attn_dropout) < 0 ||
        meta_float(f, "model.act_dropout", &c->act_dropout) < 0 ||
        meta_float(f, "model.label_smoothing", &c->label_smoothing) < 0 ||
        meta_float(f, "model.ln_eps", &c->ln_eps) < 0)
        return -1;
    if (model_config_check(c) < 0)
        return nmt_seterr("checkpoint: %s", nmt_errmsg());
    return 0;
}

double model_step_flops(const struct model_config *c, const struct batch_record *br)
{
    double d = c->d_model, ff = c->ff, V = c->vocab, Le = c->enc_layers, Ld = c->dec_layers;
    double ns = 0, nt = 0, att = 0;
    for (uint32_t b = 0; b < br->B; b++) {
        double s = br->src_len[b], t = br->tgt_len[b];
        ns += s, nt += t;
        att += 2 * Le * s * s + 2 * Ld * t * t + 2 * Ld * t * s;
    }
    double fwd = 2 * ns * Le * (4 * d * d + 2 * d * ff) + 2 * nt * Ld * (6 * d * d + 2 * d * ff) +
                 2 * ns * Ld * 2 * d * d + 2 * nt * d * V + 2 * d * att;
    return 3 * fwd;
}

double model_lr(double scale, int d_model, int64_t step, int64_t warmup)
{
    double s = step < 1 ? 1 : (double)step;
    double a = 1 / sqrt(s);
    if (warmup > 0) {
        double b = s * pow((double)warmup, -1.5);
        if (b < a)
            a = b;
    }
    return scale / sqrt((double)d_model) * a;
}

/* ---------------------------------------------------------------------------------------------
 * parameter layout */

struct enc_w {
    float *qkv_w;   // (3D, D)
    float *qkv_b;   // (3D)
    float *o_w;     // (D, D)
    float *o_b;     // (D)
    float *w1;      // (F, D)
    float *b1;      // (F)
    float *w2;      // (D, F)
    float *b2;      // (D)
    float *ln1_g, *ln1_b; // (D)
    float *ln2_g, *ln2_b; // (D)
};

struct dec_w {
    float *sqkv_w;  // (3D, D) self-attention
    float *sqkv_b;  // (3D)
    float *so_w;    // (D, D)
    float *so_b;    // (D)
    float *cq_w;    // (D, D) encoder-decoder attention
    float *cq_b;    // (D)
    float *ckv_w;   // (2D, D)
    float *ckv_b;   // (2D)
    float *co_w;    // (D, D)
    float *co_b;    // (D)
    float *w1;      // (F, D)
    float *b1;      // (F)
    float *w2;      // (D, F)
    float *b2;      // (D)
    float *ln1_g, *ln1_b, *ln2_g, *ln2_b, *ln3_g, *ln3_b; // (D)
};

struct weights {
    float *emb;     // (V, D) shared source/target embedding and output projection
    struct enc_w *enc; // (Le)
    struct dec_w *dec; // (Ld)
    float *enc_ln_g, *enc_ln_b; // (D) pre-norm only: final encoder layer norm
    float *dec_ln_g, *dec_ln_b; // (D) pre-norm only
};

/* Layout walker: hands out consecutive slices of BASE and (first pass) records the table. */
struct lay {
    float *base;
    size_t off;
    struct model_param *tab;
    size_t n;
};

static float *take(struct lay *L, const char *name, int64_t r, int64_t c)
{
    size_t size = (size_t)(r * (c ? c : 1));
    if (L->tab) {
        struct model_param *p = &L->tab[L->n];
        snprintf(p->name, sizeof p->name, "%s", name);
        p->ndim = c ? 2 : 1;
        p->shape[0] = r;
        p->shape[1] = c;
        p->offset = L->off;
        p->size = size;
    }
    L->n++;
    float *out = L->base ? L->base + L->off : NULL;
    L->off += size;
    return out;
}

static void layout(const struct model_config *c, struct lay *L, struct weights *w)
{
    int64_t D = c->d_model, F = c->ff, V = c->vocab;
    char n[64];
    w->emb = take(L, "emb.weight", V, D);
    for (int l = 0; l < c->enc_layers; l++) {
        struct enc_w *e = &w->enc[l];
#define NM(fmt) (snprintf(n, sizeof n, fmt, l), n)
        e->qkv_w = take(L, NM("enc.%d.att.qkv.weight"), 3 * D, D);
        e->qkv_b = take(L, NM("enc.%d.att.qkv.bias"), 3 * D, 0);
        e->o_w = take(L, NM("enc.%d.att.o.weight"), D, D);
        e->o_b = take(L, NM("enc.%d.att.o.bias"), D, 0);
        e->w1 = take(L, NM("enc.%d.ffn.w1.weight"), F, D);
        e->b1 = take(L, NM("enc.%d.ffn.w1.bias"), F, 0);
        e->w2 = take(L, NM("enc.%d.ffn.w2.weight"), D, F);
        e->b2 = take(L, NM("enc.%d.ffn.w2.bias"), D, 0);
        e->ln1_g = take(L, NM("enc.%d.ln1.weight"), D, 0);
        e->ln1_b = take(L, NM("enc.%d.ln1.bias"), D, 0);
        e->ln2_g = take(L, NM("enc.%d.ln2.weight"), D, 0);
        e->ln2_b = take(L, NM("enc.%d.ln2.bias"), D, 0);
    }
    for (int l = 0; l < c->dec_layers; l++) {
        struct dec_w *d = &w->dec[l];
        d->sqkv_w = take(L, NM("dec.%d.self_att.qkv.weight"), 3 * D, D);
        d->sqkv_b = take(L, NM("dec.%d.self_att.qkv.bias"), 3 * D, 0);
        d->so_w = take(L, NM("dec.%d.self_att.o.weight"), D, D);
        d->so_b = take(L, NM("dec.%d.self_att.o.bias"), D, 0);
        d->cq_w = take(L, NM("dec.%d.cross_att.q.weight"), D, D);
        d->cq_b = take(L, NM("dec.%d.cross_att.q.bias"), D, 0);
        d->ckv_w = take(L, NM("dec.%d.cross_att.kv.weight"), 2 * D, D);
        d->ckv_b = take(L, NM("dec.%d.cross_att.kv.bias"), 2 * D, 0);
        d->co_w = take(L, NM("dec.%d.cross_att.o.weight"), D, D);
        d->co_b = take(L, NM("dec.%d.cross_att.o.bias"), D, 0);
        d->w1 = take(L, NM("dec.%d.ffn.w1.weight"), F, D);
        d->b1 = take(L, NM("dec.%d.ffn.w1.bias"), F, 0);
        d->w2 = take(L, NM("dec.%d.ffn.w2.weight"), D, F);
        d->b2 = take(L, NM("dec.%d.ffn.w2.bias"), D, 0);
        d->ln1_g = take(L, NM("dec.%d.ln1.weight"), D, 0);
        d->ln1_b = take(L, NM("dec.%d.ln1.bias"), D, 0);
        d->ln2_g = take(L, NM("dec.%d.ln2.weight"), D, 0);
        d->ln2_b = take(L, NM("dec.%d.ln2.bias"), D, 0);
        d->ln3_g = take(L, NM("dec.%d.ln3.weight"), D, 0);
        d->ln3_b = take(L, NM("dec.%d.ln3.bias"), D, 0);
#undef NM
    }
    if (c->pre_norm) {
        w->enc_ln_g = take(L, "enc_ln.weight", D, 0);
        w->enc_ln_b = take(L, "enc_ln.bias", D, 0);
        w->dec_ln_g = take(L, "dec_ln.weight", D, 0);
        w->dec_ln_b = take(L, "dec_ln.bias", D, 0);
    }
}

/* ---------------------------------------------------------------------------------------------
 * activations */

/* One residual sublayer. Post-norm: r = x_in + drop(sub(x_in)); x = LN(r), t holds r.
 * Pre-norm: t = LN(x_in); x = x_in + drop(sub(t)). */
struct sub_act {
    float *t;            // (N, D)
    float *x;            // (N, D) stream after the sublayer
    float *mean, *rstd;  // (N)
    uint64_t drop_off;   // residual dropout counter offset
    float *q;            // (N, 3D) self-attention qkv, or (N, D) cross-attention queries
    float *P;            // (B, H, Tq, Tk) attention probabilities
    float *att;          // (N, D) attention output before the projection
    uint64_t attn_off;
    float *h;            // (N, F) FFN ReLU output
    uint64_t act_off;
};

struct enc_act {
    struct sub_act sa, ff;
};

struct dec_act {
    struct sub_act sa, ca, ff;
    float *kv;           // (B*S, 2D) encoder-decoder keys and values of the memory
};

struct acts {
    int B, S, T, Nr;     // batch shape, non-padding target rows
    float *xs;           // (B*S, D) source embeddings (after dropout)
    float *xt;           // (B*T, D) target embeddings
    uint64_t xs_off, xt_off;
    struct enc_act *enc; // (Le)
    struct dec_act *dec; // (Ld)
    float *efl, *efl_mean, *efl_rstd; // (B*S, D), (B*S) pre-norm final encoder LN
    float *dfl, *dfl_mean, *dfl_rstd; // (B*T, D), (B*T)
    float *yp;           // (Nr + 1, D) packed decoder output rows; also their gradient in backward
    float *logits;       // (R, V) one chunk of logits
    float *rnll;         // (Nr + 1) per-token negative log-likelihood (model_score)
    float *dxs;          // (B*S, D) gradient of the encoder stream (memory gradient first)
    float *dxt;          // (B*T, D) gradient of the decoder stream
    float *sa, *sb;      // (max(B*S, B*T), D) scratch
    float *sc;           // (max(B*S, B*T), max(3D, F)) scratch
    float *dkv;          // (B*S, 2D) scratch
    int32_t *src_ids, *src_pos, *src_len;  // (B*S), (B*S), (B)
    int32_t *tin_ids, *tin_pos, *tgt_len;  // (B*T), (B*T), (B)
    int32_t *tout;       // (Nr) targets of the packed rows
    int32_t *gidx;       // (Nr) padded row of each packed row
    int32_t *sidx;       // (B*T) packed row of each padded row (Nr for padding: the zero row)
};

struct model {
    struct backend *be;
    const struct nmt_backend *k;
    nmt_bctx *ctx;
    struct model_config c;
    int training;
    size_t np;                 // P
    struct model_param *tab;   // (ntab)
    size_t ntab;
    float *params, *grads, *adam_m, *adam_v; // device, (P) each
    struct weights w, g;       // views into params and grads
    struct acts a;
    float *act_buf;            // device activation buffer
    size_t act_cap;            // floats
    int32_t *host_ints;        // host staging of the int arrays
    size_t host_ints_cap;
    void *save_args;           // (ntab + 2) struct save_arg of the last model_save
    int R;                     // logit rows per chunk
    uint64_t ctr;              // dropout counter of the current step
    uint64_t seed;             // dropout seed of the current step
    int train;                 // dropout on in the current step
};

static int bk(struct model *m, int rc, const char *what)
{
    if (rc < 0)
        return nmt_seterr("backend %s: %s: %s", m->k->name, what, m->k->last_error(m->ctx));
    return 0;
}

const struct model_config *model_config(const struct model *m)
{
    return &m->c;
}

size_t model_num_params(const struct model *m)
{
    return m->np;
}

size_t model_params(const struct model *m, const struct model_param **params)
{
    *params = m->tab;
    return m->ntab;
}

float *model_param_data(struct model *m)
{
    return m->params;
}

void model_free(struct model *m)
{
    if (!m)
        return;
    if (m->k) {
        m->k->free(m->ctx, m->params);
        m->k->free(m->ctx, m->grads);
        m->k->free(m->ctx, m->adam_m);
        m->k->free(m->ctx, m->adam_v);
        m->k->free(m->ctx, m->act_buf);
    }
    free(m->w.enc);
    free(m->w.dec);
    free(m->g.enc);
    free(m->g.dec);
    free(m->a.enc);
    free(m->a.dec);
    free(m->tab);
    free(m->host_ints);
    free(m->save_args);
    free(m);
}

static float *dalloc(struct model *m, size_t n, const char *what)
{
    float *p = m->k->alloc(m->ctx, n * sizeof(float));
    if (!p)
        nmt_seterr("cannot allocate %s (%zu MB) on backend %s: %s", what, n * sizeof(float) >> 20, m->k->name,
                   m->k->last_error(m->ctx));
    return p;
}

struct model *model_new(struct backend *be, const struct model_config *c, int training)
{
    if (model_config_check(c) < 0)
        return NULL;
    struct model *m = calloc(1, sizeof *m);
    if (!m)
        return nmt_seterr("out of memory"), NULL;
    m->be = be;
    m->k = &be->ops;
    m->ctx = be->ctx;
    m->c = *c;
    m->training = training;
    int Le = c->enc_layers, Ld = c->dec_layers;
    m->w.enc = calloc((size_t)Le, sizeof *m->w.enc);
    m->w.dec = calloc((size_t)Ld, sizeof *m->w.dec);
    m->g.enc = calloc((size_t)Le, sizeof *m->g.enc);
    m->g.dec = calloc((size_t)Ld, sizeof *m->g.dec);
    m->a.enc = calloc((size_t)Le, sizeof *m->a.enc);
    m->a.dec = calloc((size_t)Ld, sizeof *m->a.dec);
    if (!m->w.enc || !m->w.dec || !m->g.enc || !m->g.dec || !m->a.enc || !m->a.dec) {
        nmt_seterr("out of memory");
        goto fail;
    }
    struct lay L = {0};
    layout(c, &L, &m->w); /* count */
    m->ntab = L.n;
    m->np = L.off;
    m->tab = calloc(m->ntab, sizeof *m->tab);
    if (!m->tab) {
        nmt_seterr("out of memory");
        goto fail;
    }
    if (!(m->params = dalloc(m, m->np, "parameters")))
        goto fail;
    L = (struct lay){m->params, 0, m->tab, 0};
    layout(c, &L, &m->w);
    if (training) {
        if (!(m->grads = dalloc(m, m->np, "gradients")) || !(m->adam_m = dalloc(m, m->np, "Adam moments")) ||
            !(m->adam_v = dalloc(m, m->np, "Adam moments")))
            goto fail;
        L = (struct lay){m->grads, 0, NULL, 0};
        layout(c, &L, &m->g);
    }
    return m;
fail:
    model_free(m);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * initialisation */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double unif(uint64_t *s)
{
    return (double)(splitmix(s) >> 11) * (1.0 / 9007199254740992.0);
}

int model_init(struct model *m, uint64_t seed)
{
    float *h = malloc(m->np * sizeof *h);
    if (!h)
        return nmt_seterr("out of memory");
    uint64_t s = seed ^ 0x6E6D742D696E6974ULL;
    for (size_t i = 0; i < m->ntab; i++) {
        const struct model_param *p = &m->tab[i];
        float *x = h + p->offset;
        size_t nl = strlen(p->name);
        if (!strcmp(p->name, "emb.weight")) {
            double sd = 1 / sqrt((double)m->c.d_model);
            for (size_t j = 0; j < p->size; j += 2) {
                double u1 = unif(&s), u2 = unif(&s);
                double r = sqrt(-2 * log(1 - u1)) * sd;
                x[j] = (float)(r * cos(2 * M_PI * u2));
                if (j + 1 < p->size)
                    x[j + 1] = (float)(r * sin(2 * M_PI * u2));
            }
            memset(x + (size_t)NMT_PAD * (size_t)m->c.d_model, 0, (size_t)m->c.d_model * sizeof *x);
        } else if (p->ndim == 2) {
            double a = sqrt(6.0 / (double)(p->shape[0] + p->shape[1]));
            for (size_t j = 0; j < p->size; j++)
                x[j] = (float)((2 * unif(&s) - 1) * a);
        } else if (nl > 7 && !strcmp(p->name + nl - 7, ".weight")) { /* layer norm gain */
            for (size_t j = 0; j < p->size; j++)
                x[j] = 1;
        } else {
            memset(x, 0, p->size * sizeof *x);
        }
    }
    int rc = model_set_params(m, h);
    free(h);
    if (rc == 0 && m->training &&
        (bk(m, m->k->memset_zero(m->ctx, m->adam_m, m->np * sizeof(float)), "memset") < 0 ||
         bk(m, m->k->memset_zero(m->ctx, m->adam_v, m->np * sizeof(float)), "memset") < 0 ||
         bk(m, m->k->memset_zero(m->ctx, m->grads, m->np * sizeof(float)), "memset") < 0))
        rc = -1;
    return rc;
}

int model_get_params(struct model *m, float *host)
{
    return bk(m, m->k->download(m->ctx, host, m->params, m->np * sizeof(float)), "download");
}

int model_set_params(struct model *m, const float *host)
{
    return bk(m, m->k->upload(m->ctx, m->params, host, m->np * sizeof(float)), "upload");
}

int model_get_grads(struct model *m, float *host)
{
    if (!m->grads)
        return nmt_seterr("model has no gradients (not created for training)");
    return bk(m, m->k->download(m->ctx, host, m->grads, m->np * sizeof(float)), "download");
}

/* ---------------------------------------------------------------------------------------------
 * activation buffer */

struct bump {
    char *base;
    size_t off;          // bytes
};

static void *bump(struct bump *b, size_t bytes)
{
    void *p = b->base ? b->base + b->off : NULL;
    b->off += (bytes + 63) & ~(size_t)63;
    return p;
}

static float *bf(struct bump *b, size_t n)
{
    return bump(b, n * sizeof(float));
}

static int32_t *bi(struct bump *b, size_t n)
{
    return bump(b, n * sizeof(int32_t));
}

static void sub_layout(struct bump *b, struct sub_act *s, int kind, size_t N, size_t D, size_t F, size_t P)
{
    s->t = bf(b, N * D);
    s->x = bf(b, N * D);
    s->mean = bf(b, N);
    s->rstd = bf(b, N);
    if (kind == 0 || kind == 1) { /* self / cross attention */
        s->q = bf(b, N * (kind == 0 ? 3 : 1) * D);
        s->P = bf(b, P);
        s->att = bf(b, N * D);
    } else {
        s->h = bf(b, N * F);
    }
}

static void acts_layout(struct model *m, struct bump *b, int B, int S, int T, int Nr)
{
    struct acts *a = &m->a;
    size_t D = (size_t)m->c.d_model, F = (size_t)m->c.ff, H = (size_t)m->c.heads, V = (size_t)m->c.vocab;
    size_t Ns = (size_t)B * (size_t)S, Nt = (size_t)B * (size_t)T, Nm = Ns > Nt ? Ns : Nt;
    a->B = B, a->S = S, a->T = T, a->Nr = Nr;
    a->xs = bf(b, Ns * D);
    a->xt = bf(b, Nt * D);
    for (int l = 0; l < m->c.enc_layers; l++) {
        sub_layout(b, &a->enc[l].sa, 0, Ns, D, F, (size_t)B * H * (size_t)S * (size_t)S);
        sub_layout(b, &a->enc[l].ff, 2, Ns, D, F, 0);
    }
    for (int l = 0; l < m->c.dec_layers; l++) {
        sub_layout(b, &a->dec[l].sa, 0, Nt, D, F, (size_t)B * H * (size_t)T * (size_t)T);
        sub_layout(b, &a->dec[l].ca, 1, Nt, D, F, (size_t)B * H * (size_t)T * (size_t)S);
        sub_layout(b, &a->dec[l].ff, 2, Nt, D, F, 0);
        a->dec[l].kv = bf(b, Ns * 2 * D);
    }
    if (m->c.pre_norm) {
        a->efl = bf(b, Ns * D);
        a->efl_mean = bf(b, Ns);
        a->efl_rstd = bf(b, Ns);
        a->dfl = bf(b, Nt * D);
        a->dfl_mean = bf(b, Nt);
        a->dfl_rstd = bf(b, Nt);
    }
    a->yp = bf(b, ((size_t)Nr + 1) * D);
    size_t R = (size_t)m->R < (size_t)Nr ? (size_t)m->R : (size_t)Nr;
    a->logits = bf(b, (R ? R : 1) * V);
    a->rnll = bf(b, (size_t)Nr + 1);
    a->dxs = bf(b, Ns * D);
    a->dxt = bf(b, Nt * D);
    a->sa = bf(b, Nm * D);
    a->sb = bf(b, Nm * D);
    a->sc = bf(b, Nm * (3 * D > F ? 3 * D : F));
    a->dkv = bf(b, Ns * 2 * D);
    a->src_ids = bi(b, Ns);
    a->src_pos = bi(b, Ns);
    a->src_len = bi(b, (size_t)B);
    a->tin_ids = bi(b, Nt);
    a->tin_pos = bi(b, Nt);
    a->tgt_len = bi(b, (size_t)B);
    a->tout = bi(b, (size_t)Nr + 1);
    a->gidx = bi(b, (size_t)Nr + 1);
    a->sidx = bi(b, Nt);
}

/* Grows the activation buffer to at least BYTES (plus SLACK); 0 or -1. */
static int acts_grow(struct model *m, size_t bytes, size_t slack)
{
    if (bytes <= m->act_cap)
        return 0;
    m->k->free(m->ctx, m->act_buf);
    m->act_buf = NULL;
    m->act_cap = 0;
    size_t want = bytes + slack;
    m->act_buf = m->k->alloc(m->ctx, want);
    if (!m->act_buf)
        return nmt_seterr("cannot allocate activations (%zu MB) on backend %s: %s", want >> 20, m->k->name,
                          m->k->last_error(m->ctx));
    m->act_cap = want;
    return 0;
}

static size_t acts_bytes(struct model *m, int B, int S, int T, int Nr)
{
    size_t V = (size_t)m->c.vocab;
    m->R = (int)((4u << 20) / V);
    if (m->R < 64)
        m->R = 64;
    struct bump b = {NULL, 0};
    acts_layout(m, &b, B, S, T, Nr);
    return b.off;
}

/* Sizes the activation buffer for a batch and points the views into it. */
static int acts_prepare(struct model *m, int B, int S, int T, int Nr)
{
    size_t need = acts_bytes(m, B, S, T, Nr);
    if (acts_grow(m, need, need / 4) < 0)
        return -1;
    struct bump b = {(char *)m->act_buf, 0};
    acts_layout(m, &b, B, S, T, Nr);
    return 0;
}

int model_reserve(struct model *m, const struct batch_record *br)
{
    int nr = 0;
    for (uint32_t b = 0; b < br->B; b++)
        nr += (int)(br->tgt_len[b] < br->T ? br->tgt_len[b] : br->T);
    if ((uint64_t)br->B * (br->S > br->T ? br->S : br->T) > (1u << 24))
        return nmt_seterr("batch of %u x (%u, %u) tokens too large", br->B, br->S, br->T);
    return acts_grow(m, acts_bytes(m, (int)br->B, (int)br->S, (int)br->T, nr), 0);
}

/* ---------------------------------------------------------------------------------------------
 * layer building blocks */

/* y (N, out) = x (N, in) W^T + b, W (out, in). */
static int linear(struct model *m, float *y, const float *x, const float *W, const float *bias, int N, int out, int in)
{
    if (bk(m, m->k->gemm(m->ctx, 0, 1, N, out, in, 1.0f, x, in, W, in, 0.0f, y, out), "gemm") < 0)
        return -1;
    return bk(m, m->k->bias_add(m->ctx, y, bias, N, out), "bias_add");
}

/* Backward of linear: dx (N, in) = dy W (+= when BETA is 1; skipped when dx is NULL),
 * dW += dy^T x, db += column sums of dy. */
static int linear_bwd(struct model *m, float *dx, float *dW, float *db, const float *dy, const float *x,
                      const float *W, int N, int out, int in, float beta)
{
    if (dx && bk(m, m->k->gemm(m->ctx, 0, 0, N, in, out, 1.0f, dy, out, W, in, beta, dx, in), "gemm") < 0)
        return -1;
    if (bk(m, m->k->gemm(m->ctx, 1, 0, out, in, N, 1.0f, dy, out, x, in, 1.0f, dW, in), "gemm") < 0)
        return -1;
    return bk(m, m->k->bias_grad(m->ctx, db, dy, N, out), "bias_grad");
}

static uint64_t take_ctr(struct model *m, size_t n)
{
    uint64_t o = m->ctr;
    m->ctr += n;
    return o;
}

/* x = dropout(x) in place with the residual rate (no-op when off); records the counter offset. */
static int drop_fwd(struct model *m, float *x, size_t n, float p, uint64_t *off)
{
    if (!m->train || p <= 0)
        return 0;
    *off = take_ctr(m, n);
    return bk(m, m->k->dropout_forward(m->ctx, x, x, n, p, m->seed, *off), "dropout_forward");
}

static int drop_bwd(struct model *m, float *dx, const float *dy, size_t n, float p, uint64_t off)
{
    if (!m->train || p <= 0) {
        if (dx == dy)
            return 0;
        return bk(m, m->k->copy(m->ctx, dx, dy, n * sizeof(float)), "copy");
    }
    return bk(m, m->k->dropout_backward(m->ctx, dx, dy, n, p, m->seed, off), "dropout_backward");
}

/* Start of a residual sublayer: returns the sublayer input (x_in, or LN(x_in) in pre-norm). */
static const float *res_begin(struct model *m, struct sub_act *s, const float *xin, const float *g, const float *b,
                              int N)
{
    if (!m->c.pre_norm)
        return xin;
    if (bk(m, m->k->layernorm_forward(m->ctx, s->t, s->mean, s->rstd, xin, g, b, N, m->c.d_model, m->c.ln_eps),
           "layernorm_forward") < 0)
        return NULL;
    return s->t;
}

/* End of a residual sublayer: SUB (N, D) is the sublayer output (clobbered by dropout). */
static int res_end(struct model *m, struct sub_act *s, const float *xin, float *sub, const float *g, const float *b,
                   int N)
{
    size_t n = (size_t)N * (size_t)m->c.d_model;
    if (drop_fwd(m, sub, n, m->c.dropout, &s->drop_off) < 0)
        return -1;
    if (m->c.pre_norm)
        return bk(m, m->k->add(m->ctx, s->x, xin, sub, n), "add");
    if (bk(m, m->k->add(m->ctx, s->t, xin, sub, n), "add") < 0)
        return -1;
    return bk(m, m->k->layernorm_forward(m->ctx, s->x, s->mean, s->rstd, s->t, g, b, N, m->c.d_model, m->c.ln_eps),
              "layernorm_forward");
}

/* Backward through the end of a residual sublayer: DX (N, D) holds the gradient of s->x; on return
 * DX holds the gradient of the direct path to x_in and *DSUB points at the gradient of the
 * sublayer output (DX itself or scratch SCR). */
static int res_end_bwd(struct model *m, struct sub_act *s, float *dx, float *scr, float **dsub, float *dg, float *db,
                       const float *g, int N)
{
    size_t n = (size_t)N * (size_t)m->c.d_model;
    if (!m->c.pre_norm &&
        bk(m, m->k->layernorm_backward(m->ctx, dx, dg, db, dx, s->t, s->mean, s->rstd, g, N, m->c.d_model),
           "layernorm_backward") < 0)
        return -1;
    if (!m->train || m->c.dropout <= 0) {
        *dsub = dx;
        return 0;
    }
    *dsub = scr;
    return drop_bwd(m, scr, dx, n, m->c.dropout, s->drop_off);
}

/* Backward through the start: DSIN (N, D) is the gradient of the sublayer input; adds it (through
 * the pre-norm LN) into DX. DSIN is clobbered. */
static int res_begin_bwd(struct model *m, struct sub_act *s, float *dx, float *dsin, const float *xin, float *dg,
                         float *db, const float *g, int N)
{
    size_t n = (size_t)N * (size_t)m->c.d_model;
    if (m->c.pre_norm &&
        bk(m, m->k->layernorm_backward(m->ctx, dsin, dg, db, dsin, xin, s->mean, s->rstd, g, N, m->c.d_model),
           "layernorm_backward") < 0)
        return -1;
    return bk(m, m->k->add(m->ctx, dx, dx, dsin, n), "add");
}

static struct nmt_attn_args attn_args(struct model *m, int Tq, int Tk, int64_t q_ld, int64_t kv_ld, const int32_t *klen,
                                      int causal)
{
    struct nmt_attn_args a;
    memset(&a, 0, sizeof a);
    int D = m->c.d_model;
    a.B = m->a.B;
    a.Tq = Tq;
    a.Tk = Tk;
    a.H = m->c.heads;
    a.dh = D / m->c.heads;
    a.q_ld = q_ld;
    a.q_bs = q_ld * Tq;
    a.k_ld = a.v_ld = kv_ld;
    a.k_bs = a.v_bs = kv_ld * Tk;
    a.o_ld = D;
    a.o_bs = (int64_t)D * Tq;
    a.klen = klen;
    a.causal = causal;
    a.scale = 1.0f / sqrtf((float)a.dh);
    a.dropout = m->train ? m->c.attn_dropout : 0;
    a.seed = m->seed;
    return a;
}

/* Self-attention sublayer on input SIN (B*T, D) into OUT (B*T, D). */
static int self_att_fwd(struct model *m, struct sub_act *s, float *out, const float *sin, const float *qkv_w,
                        const float *qkv_b, const float *o_w, const float *o_b, int T, const int32_t *klen, int causal)
{
    int D = m->c.d_model, N = m->a.B * T;
    if (linear(m, s->q, sin, qkv_w, qkv_b, N, 3 * D, D) < 0)
        return -1;
    struct nmt_attn_args a = attn_args(m, T, T, 3 * D, 3 * D, klen, causal);
    if (a.dropout > 0)
        a.offset = s->attn_off = take_ctr(m, (size_t)a.B * a.H * (size_t)T * (size_t)T);
    if (bk(m, m->k->attention_forward(m->ctx, s->att, s->P, s->q, s->q + D, s->q + 2 * D, &a), "attention_forward") <
        0)
        return -1;
    return linear(m, out, s->att, o_w, o_b, N, D, D);
}

/* Backward of self_att_fwd: DOUT (B*T, D) gradient of the output; DSIN receives the input's gradient. */
static int self_att_bwd(struct model *m, struct sub_act *s, float *dsin, const float *dout, const float *sin,
                        const float *qkv_w, float *dqkv_w, float *dqkv_b, const float *o_w, float *do_w, float *do_b,
                        int T, const int32_t *klen, int causal)
{
    int D = m->c.d_model, N = m->a.B * T;
    float *datt = dsin, *dqkv = m->a.sc;
    if (linear_bwd(m, datt, do_w, do_b, dout, s->att, o_w, N, D, D, 0) < 0)
        return -1;
    struct nmt_attn_args a = attn_args(m, T, T, 3 * D, 3 * D, klen, causal);
    a.offset = s->attn_off;
    if (bk(m, m->k->attention_backward(m->ctx, dqkv, dqkv + D, dqkv + 2 * D, datt, s->q, s->q + D, s->q + 2 * D, s->P,
                                       &a),
           "attention_backward") < 0)
        return -1;
    return linear_bwd(m, dsin, dqkv_w, dqkv_b, dqkv, sin, qkv_w, N, 3 * D, D, 0);
}

/* Encoder-decoder attention: queries from SIN (B*T, D), keys/values KV (B*S, 2D). */
static int cross_att_fwd(struct model *m, struct sub_act *s, float *out, const float *sin, const float *kv,
                         const struct dec_w *w)
{
    int D = m->c.d_model, N = m->a.B * m->a.T;
    if (linear(m, s->q, sin, w->cq_w, w->cq_b, N, D, D) < 0)
        return -1;
    struct nmt_attn_args a = attn_args(m, m->a.T, m->a.S, D, 2 * D, m->a.src_len, 0);
    if (a.dropout > 0)
        a.offset = s->attn_off = take_ctr(m, (size_t)a.B * a.H * (size_t)m->a.T * (size_t)m->a.S);
    if (bk(m, m->k->attention_forward(m->ctx, s->att, s->P, s->q, kv, kv + D, &a), "attention_forward") < 0)
        return -1;
    return linear(m, out, s->att, w->co_w, w->co_b, N, D, D);
}

/* Backward of cross_att_fwd; adds the memory's gradient into DMEM (B*S, D). */
static int cross_att_bwd(struct model *m, struct sub_act *s, float *dsin, const float *dout, const float *sin,
                         const float *kv, const float *mem, float *dmem, const struct dec_w *w, struct dec_w *gw)
{
    int D = m->c.d_model, N = m->a.B * m->a.T, Ns = m->a.B * m->a.S;
    float *datt = dsin, *dq = m->a.sc, *dkv = m->a.dkv;
    if (linear_bwd(m, datt, gw->co_w, gw->co_b, dout, s->att, w->co_w, N, D, D, 0) < 0)
        return -1;
    struct nmt_attn_args a = attn_args(m, m->a.T, m->a.S, D, 2 * D, m->a.src_len, 0);
    a.offset = s->attn_off;
    if (bk(m, m->k->attention_backward(m->ctx, dq, dkv, dkv + D, datt, s->q, kv, kv + D, s->P, &a),
           "attention_backward") < 0)
        return -1;
    if (linear_bwd(m, dmem, gw->ckv_w, gw->ckv_b, dkv, mem, w->ckv_w, Ns, 2 * D, D, 1) < 0)
        return -1;
    return linear_bwd(m, dsin, gw->cq_w, gw->cq_b, dq, sin, w->cq_w, N, D, D, 0);
}

/* FFN sublayer: OUT = W2 drop(relu(W1 SIN + b1)) + b2. */
static int ffn_fwd(struct model *m, struct sub_act *s, float *out, const float *sin, const float *w1, const float *b1,
                   const float *w2, const float *b2, int N)
{
    int D = m->c.d_model, F = m->c.ff;
    size_t n = (size_t)N * (size_t)F;
    if (linear(m, s->h, sin, w1, b1, N, F, D) < 0 || bk(m, m->k->relu_forward(m->ctx, s->h, s->h, n), "relu") < 0)
        return -1;
    const float *hd = s->h;
    if (m->train && m->c.act_dropout > 0) {
        s->act_off = take_ctr(m, n);
        if (bk(m, m->k->dropout_forward(m->ctx, m->a.sc, s->h, n, m->c.act_dropout, m->seed, s->act_off),
               "dropout_forward") < 0)
            return -1;
        hd = m->a.sc;
    }
    return linear(m, out, hd, w2, b2, N, D, F);
}

static int ffn_bwd(struct model *m, struct sub_act *s, float *dsin, const float *dout, const float *sin,
                   const float *w1, float *dw1, float *db1, const float *w2, float *dw2, float *db2, int N)
{
    int D = m->c.d_model, F = m->c.ff;
    size_t n = (size_t)N * (size_t)F;
    float *dh = m->a.sc;
    const float *hd = s->h;
    int drop = m->train && m->c.act_dropout > 0;
    if (drop) { /* regenerate the dropped activation for dW2 */
        if (bk(m, m->k->dropout_forward(m->ctx, dh, s->h, n, m->c.act_dropout, m->seed, s->act_off),
               "dropout_forward") < 0)
            return -1;
        hd = dh;
    }
    if (linear_bwd(m, NULL, dw2, db2, dout, hd, w2, N, D, F, 0) < 0)
        return -1;
    if (bk(m, m->k->gemm(m->ctx, 0, 0, N, F, D, 1.0f, dout, D, w2, F, 0.0f, dh, F), "gemm") < 0)
        return -1;
    if (drop && drop_bwd(m, dh, dh, n, m->c.act_dropout, s->act_off) < 0)
        return -1;
    if (bk(m, m->k->relu_backward(m->ctx, dh, dh, s->h, n), "relu_backward") < 0)
        return -1;
    return linear_bwd(m, dsin, dw1, db1, dh, sin, w1, N, F, D, 0);
}

/* ---------------------------------------------------------------------------------------------
 * the model step */

/* Validates BR and fills the host int arrays; sets *NR to the target token count. */
static int stage_batch(struct model *m, const struct batch_record *br, int *nr, int64_t *nsrc)
{
    uint32_t B = br->B, S = br->S, T = br->T;
    if (B == 0 || S == 0 || T == 0)
        return nmt_seterr("empty batch (B %u, S %u, T %u)", B, S, T);
    if (S > (uint32_t)m->c.max_len || T > (uint32_t)m->c.max_len)
        return nmt_seterr("batch of %u x (%u, %u) tokens exceeds the model's maximum length %d", B, S, T,
                          m->c.max_len);
    if ((uint64_t)B * (S > T ? S : T) > (1u << 24))
        return nmt_seterr("batch of %u x (%u, %u) tokens too large", B, S, T);
    size_t Ns = (size_t)B * S, Nt = (size_t)B * T;
    size_t need = 2 * Ns + 5 * Nt + 2 * (size_t)B + 2;
    if (need > m->host_ints_cap) {
        int32_t *h = realloc(m->host_ints, need * sizeof *h);
        if (!h)
            return nmt_seterr("out of memory");
        m->host_ints = h;
        m->host_ints_cap = need;
    }
    int32_t *src_ids = m->host_ints, *src_pos = src_ids + Ns, *src_len = src_pos + Ns, *tin_ids = src_len + B,
            *tin_pos = tin_ids + Nt, *tgt_len = tin_pos + Nt, *tout = tgt_len + B, *gidx = tout + Nt + 1,
            *sidx = gidx + Nt + 1;
    (void)sidx;
    int64_t ns = 0;
    int n = 0;
    uint32_t V = (uint32_t)m->c.vocab;
    for (uint32_t b = 0; b < B; b++) {
        uint32_t sl = br->src_len[b], tl = br->tgt_len[b];
        if (sl < 1 || sl > S || tl > T)
            return nmt_seterr("batch row %u: lengths %u/%u outside the batch's %u/%u columns", b, sl, tl, S, T);
        src_len[b] = (int32_t)sl;
        tgt_len[b] = (int32_t)tl;
        ns += sl;
        for (uint32_t j = 0; j < S; j++) {
            uint32_t id = br->src[(size_t)b * S + j];
            if (j < sl && id >= V)
                return nmt_seterr("batch row %u: source id %u outside the vocabulary of %u", b, id, V);
            src_ids[(size_t)b * S + j] = j < sl ? (int32_t)id : 0;
            src_pos[(size_t)b * S + j] = j < sl ? (int32_t)j : -1;
        }
        for (uint32_t j = 0; j < T; j++) {
            size_t r = (size_t)b * T + j;
            uint32_t id = br->tgt[r];
            if (j < tl && id >= V)
                return nmt_seterr("batch row %u: target id %u outside the vocabulary of %u", b, id, V);
            tin_ids[r] = j < tl ? (j == 0 ? NMT_BOS : (int32_t)br->tgt[r - 1]) : 0;
            tin_pos[r] = j < tl ? (int32_t)j : -1;
        }
    }
    /* packed target rows */
    for (uint32_t b = 0; b < B; b++)
        for (uint32_t j = 0; j < T; j++) {
            size_t r = (size_t)b * T + j;
            if (j < (uint32_t)tgt_len[b]) {
                tout[n] = (int32_t)br->tgt[r];
                gidx[n] = (int32_t)r;
                n++;
            }
        }
    *nr = n;
    *nsrc = ns;
    return 0;
}

static int upload_ints(struct model *m, int32_t *dst, const int32_t *src, size_t n)
{
    return bk(m, m->k->upload(m->ctx, dst, src, n * sizeof(int32_t)), "upload");
}

/* Validates BR, sizes the activations and uploads the batch's int arrays. */
static int prepare_batch(struct model *m, const struct batch_record *br, int *nr, int64_t *nsrc)
{
    int Nr = 0;
    if (stage_batch(m, br, &Nr, nsrc) < 0)
        return -1;
    int B = (int)br->B, S = (int)br->S, T = (int)br->T;
    if (acts_prepare(m, B, S, T, Nr) < 0)
        return -1;
    struct acts *a = &m->a;
    size_t Ns_ = (size_t)B * (size_t)S, Nt_ = (size_t)B * (size_t)T;
    int32_t *h = m->host_ints;
    int32_t *src_ids = h, *src_pos = h + Ns_, *src_len = src_pos + Ns_, *tin_ids = src_len + B,
            *tin_pos = tin_ids + Nt_, *tgt_len = tin_pos + Nt_, *tout = tgt_len + B, *gidx = tout + Nt_ + 1,
            *sidx = gidx + Nt_ + 1;
    for (size_t r = 0; r < Nt_; r++)
        sidx[r] = Nr;
    for (int i = 0; i < Nr; i++)
        sidx[gidx[i]] = i;
    if (upload_ints(m, a->src_ids, src_ids, Ns_) < 0 || upload_ints(m, a->src_pos, src_pos, Ns_) < 0 ||
        upload_ints(m, a->src_len, src_len, (size_t)B) < 0 || upload_ints(m, a->tin_ids, tin_ids, Nt_) < 0 ||
        upload_ints(m, a->tin_pos, tin_pos, Nt_) < 0 || upload_ints(m, a->tgt_len, tgt_len, (size_t)B) < 0 ||
        (Nr && upload_ints(m, a->tout, tout, (size_t)Nr) < 0) ||
        (Nr && upload_ints(m, a->gidx, gidx, (size_t)Nr) < 0) || upload_ints(m, a->sidx, sidx, Nt_) < 0)
        return -1;
    *nr = Nr;
    return 0;
}

/* The encoder over the prepared batch; *MEM receives its output (B*S, D). */
static int encoder_fwd(struct model *m, const float **mem_out)
{
    struct acts *a = &m->a;
    const struct weights *w = &m->w;
    const struct model_config *c = &m->c;
    int D = c->d_model, V = c->vocab, B = a->B, S = a->S, Ns = B * S;
    size_t Ns_ = (size_t)Ns;
    float emb_scale = sqrtf((float)D);
    /* ---- encoder ---- */
    if (bk(m, m->k->embedding_forward(m->ctx, a->xs, a->src_ids, a->src_pos, w->emb, Ns, D, V, emb_scale),
           "embedding_forward") < 0 ||
        drop_fwd(m, a->xs, Ns_ * (size_t)D, c->dropout, &a->xs_off) < 0)
        return -1;
    const float *x = a->xs;
    for (int l = 0; l < c->enc_layers; l++) {
        const struct enc_w *ew = &w->enc[l];
        struct enc_act *ea = &a->enc[l];
        const float *sin = res_begin(m, &ea->sa, x, ew->ln1_g, ew->ln1_b, Ns);
        if (!sin || self_att_fwd(m, &ea->sa, a->sa, sin, ew->qkv_w, ew->qkv_b, ew->o_w, ew->o_b, S, a->src_len, 0) < 0 ||
            res_end(m, &ea->sa, x, a->sa, ew->ln1_g, ew->ln1_b, Ns) < 0)
            return -1;
        x = ea->sa.x;
        sin = res_begin(m, &ea->ff, x, ew->ln2_g, ew->ln2_b, Ns);
        if (!sin || ffn_fwd(m, &ea->ff, a->sa, sin, ew->w1, ew->b1, ew->w2, ew->b2, Ns) < 0 ||
            res_end(m, &ea->ff, x, a->sa, ew->ln2_g, ew->ln2_b, Ns) < 0)
            return -1;
        x = ea->ff.x;
    }
    const float *mem = x;
    if (c->pre_norm) {
        if (bk(m, m->k->layernorm_forward(m->ctx, a->efl, a->efl_mean, a->efl_rstd, x, w->enc_ln_g, w->enc_ln_b, Ns, D,
                                          c->ln_eps),
               "layernorm_forward") < 0)
            return -1;
        mem = a->efl;
    }
    *mem_out = mem;
    return 0;
}

static int step_impl(struct model *m, const struct batch_record *br, int train, int backward, uint64_t dropout_seed,
                     struct model_loss *out, float *logits_host, double *sent_nll);

int model_step(struct model *m, const struct batch_record *br, int train, int backward, uint64_t dropout_seed,
               struct model_loss *out, float *logits_host)
{
    return step_impl(m, br, train, backward, dropout_seed, out, logits_host, NULL);
}

int model_score(struct model *m, const struct batch_record *br, double *sent_nll, struct model_loss *out)
{
    return step_impl(m, br, 0, 0, 0, out, NULL, sent_nll);
}

static int step_impl(struct model *m, const struct batch_record *br, int train, int backward, uint64_t dropout_seed,
                     struct model_loss *out, float *logits_host, double *sent_nll)
{
    memset(out, 0, sizeof *out);
    if (backward && !m->training)
        return nmt_seterr("model was not created for training");
    int Nr = 0;
    int64_t nsrc = 0;
    m->train = train;
    m->seed = dropout_seed;
    m->ctr = 0;
    if (prepare_batch(m, br, &Nr, &nsrc) < 0)
        return -1;
    const float *mem;
    if (encoder_fwd(m, &mem) < 0)
        return -1;
    struct acts *a = &m->a;
    const struct weights *w = &m->w;
    const struct model_config *c = &m->c;
    int B = (int)br->B, S = (int)br->S, T = (int)br->T;
    int D = c->d_model, V = c->vocab, Ns = B * S, Nt = B * T;
    size_t Ns_ = (size_t)Ns, Nt_ = (size_t)Nt;
    float emb_scale = sqrtf((float)D);
    const float *x;

    /* ---- decoder ---- */
    if (bk(m, m->k->embedding_forward(m->ctx, a->xt, a->tin_ids, a->tin_pos, w->emb, Nt, D, V, emb_scale),
           "embedding_forward") < 0 ||
        drop_fwd(m, a->xt, Nt_ * (size_t)D, c->dropout, &a->xt_off) < 0)
        return -1;
    x = a->xt;
    for (int l = 0; l < c->dec_layers; l++) {
        const struct dec_w *dw = &w->dec[l];
        struct dec_act *da = &a->dec[l];
        const float *sin = res_begin(m, &da->sa, x, dw->ln1_g, dw->ln1_b, Nt);
        if (!sin ||
            self_att_fwd(m, &da->sa, a->sa, sin, dw->sqkv_w, dw->sqkv_b, dw->so_w, dw->so_b, T, a->tgt_len, 1) < 0 ||
            res_end(m, &da->sa, x, a->sa, dw->ln1_g, dw->ln1_b, Nt) < 0)
            return -1;
        x = da->sa.x;
        if (linear(m, da->kv, mem, dw->ckv_w, dw->ckv_b, Ns, 2 * D, D) < 0)
            return -1;
        sin = res_begin(m, &da->ca, x, dw->ln2_g, dw->ln2_b, Nt);
        if (!sin || cross_att_fwd(m, &da->ca, a->sa, sin, da->kv, dw) < 0 ||
            res_end(m, &da->ca, x, a->sa, dw->ln2_g, dw->ln2_b, Nt) < 0)
            return -1;
        x = da->ca.x;
        sin = res_begin(m, &da->ff, x, dw->ln3_g, dw->ln3_b, Nt);
        if (!sin || ffn_fwd(m, &da->ff, a->sa, sin, dw->w1, dw->b1, dw->w2, dw->b2, Nt) < 0 ||
            res_end(m, &da->ff, x, a->sa, dw->ln3_g, dw->ln3_b, Nt) < 0)
            return -1;
        x = da->ff.x;
    }
    const float *y = x;
    if (c->pre_norm) {
        if (bk(m, m->k->layernorm_forward(m->ctx, a->dfl, a->dfl_mean, a->dfl_rstd, x, w->dec_ln_g, w->dec_ln_b, Nt, D,
                                          c->ln_eps),
               "layernorm_forward") < 0)
            return -1;
        y = a->dfl;
    }

    /* ---- output projection and loss on the non-padding rows, in chunks of R rows ---- */
    if (Nr && bk(m, m->k->gather_rows(m->ctx, a->yp, y, a->gidx, Nr, D), "gather_rows") < 0)
        return -1;
    struct weights *g = &m->g;
    for (int r0 = 0; r0 < Nr; r0 += m->R) {
        int R = Nr - r0 < m->R ? Nr - r0 : m->R;
        float *yr = a->yp + (size_t)r0 * (size_t)D;
        if (bk(m, m->k->gemm(m->ctx, 0, 1, R, V, D, 1.0f, yr, D, w->emb, D, 0.0f, a->logits, V), "gemm") < 0)
            return -1;
        if (logits_host && bk(m, m->k->download(m->ctx, logits_host + (size_t)r0 * (size_t)V, a->logits,
                                                (size_t)R * (size_t)V * sizeof(float)),
                              "download") < 0)
            return -1;
        struct nmt_xent_result xr;
        if (bk(m, m->k->cross_entropy(m->ctx, &xr, backward ? a->logits : NULL, sent_nll ? a->rnll + r0 : NULL,
                                      a->logits, a->tout + r0, R, V,
                                      c->label_smoothing, -1, 1.0f),
               "cross_entropy") < 0)
            return -1;
        out->loss += xr.loss;
        out->nll += xr.nll;
        out->tokens += xr.count;
        if (backward) {
            /* dE += dlogits^T y, then dy = dlogits E written over y's rows (no longer needed) */
            if (bk(m, m->k->gemm(m->ctx, 1, 0, V, D, R, 1.0f, a->logits, V, yr, D, 1.0f, g->emb, D), "gemm") < 0 ||
                bk(m, m->k->gemm(m->ctx, 0, 0, R, D, V, 1.0f, a->logits, V, w->emb, D, 0.0f, yr, D), "gemm") < 0)
                return -1;
        }
    }
    out->src_tokens = nsrc;
    if (sent_nll) {
        float *h = malloc(((size_t)Nr + 1) * sizeof *h);
        if (!h)
            return nmt_seterr("out of memory");
        if (Nr && bk(m, m->k->download(m->ctx, h, a->rnll, (size_t)Nr * sizeof *h), "download") < 0) {
            free(h);
            return -1;
        }
        size_t r = 0;
        for (uint32_t b = 0; b < br->B; b++) {
            double sum = 0;
            for (uint32_t j = 0; j < br->tgt_len[b]; j++)
                sum += h[r++];
            sent_nll[b] = sum;
        }
        free(h);
    }
    if (!backward)
        return 0;

    /* ---- backward: decoder ---- */
    float *dx = a->dxt;
    if (bk(m, m->k->memset_zero(m->ctx, a->yp + (size_t)Nr * (size_t)D, (size_t)D * sizeof(float)), "memset") < 0 ||
        bk(m, m->k->gather_rows(m->ctx, dx, a->yp, a->sidx, Nt, D), "gather_rows") < 0)
        return -1;
    if (c->pre_norm && bk(m, m->k->layernorm_backward(m->ctx, dx, g->dec_ln_g, g->dec_ln_b, dx, a->dec[c->dec_layers - 1].ff.x,
                                                      a->dfl_mean, a->dfl_rstd, w->dec_ln_g, Nt, D),
                          "layernorm_backward") < 0)
        return -1;
    float *dmem = a->dxs;
    if (bk(m, m->k->memset_zero(m->ctx, dmem, Ns_ * (size_t)D * sizeof(float)), "memset") < 0)
        return -1;
    float *dsub;
    for (int l = c->dec_layers - 1; l >= 0; l--) {
        const struct dec_w *dw = &w->dec[l];
        struct dec_w *gw = &g->dec[l];
        struct dec_act *da = &a->dec[l];
        const float *xin = da->ca.x;
        const float *sin = c->pre_norm ? da->ff.t : xin;
        if (res_end_bwd(m, &da->ff, dx, a->sa, &dsub, gw->ln3_g, gw->ln3_b, dw->ln3_g, Nt) < 0 ||
            ffn_bwd(m, &da->ff, a->sb, dsub, sin, dw->w1, gw->w1, gw->b1, dw->w2, gw->w2, gw->b2, Nt) < 0 ||
            res_begin_bwd(m, &da->ff, dx, a->sb, xin, gw->ln3_g, gw->ln3_b, dw->ln3_g, Nt) < 0)
            return -1;
        xin = da->sa.x;
        sin = c->pre_norm ? da->ca.t : xin;
        if (res_end_bwd(m, &da->ca, dx, a->sa, &dsub, gw->ln2_g, gw->ln2_b, dw->ln2_g, Nt) < 0 ||
            cross_att_bwd(m, &da->ca, a->sb, dsub, sin, da->kv, mem, dmem, dw, gw) < 0 ||
            res_begin_bwd(m, &da->ca, dx, a->sb, xin, gw->ln2_g, gw->ln2_b, dw->ln2_g, Nt) < 0)
            return -1;
        xin = l ? a->dec[l - 1].ff.x : a->xt;
        sin = c->pre_norm ? da->sa.t : xin;
        if (res_end_bwd(m, &da->sa, dx, a->sa, &dsub, gw->ln1_g, gw->ln1_b, dw->ln1_g, Nt) < 0 ||
            self_att_bwd(m, &da->sa, a->sb, dsub, sin, dw->sqkv_w, gw->sqkv_w, gw->sqkv_b, dw->so_w, gw->so_w, gw->so_b,
                         T, a->tgt_len, 1) < 0 ||
            res_begin_bwd(m, &da->sa, dx, a->sb, xin, gw->ln1_g, gw->ln1_b, dw->ln1_g, Nt) < 0)
            return -1;
    }
    if (drop_bwd(m, dx, dx, Nt_ * (size_t)D, c->dropout, a->xt_off) < 0 ||
        bk(m, m->k->embedding_backward(m->ctx, g->emb, dx, a->tin_ids, a->tin_pos, Nt, D, V, emb_scale),
           "embedding_backward") < 0)
        return -1;

    /* ---- backward: encoder ---- */
    dx = dmem;
    if (c->pre_norm && bk(m, m->k->layernorm_backward(m->ctx, dx, g->enc_ln_g, g->enc_ln_b, dx, a->enc[c->enc_layers - 1].ff.x,
                                                      a->efl_mean, a->efl_rstd, w->enc_ln_g, Ns, D),
                          "layernorm_backward") < 0)
        return -1;
    for (int l = c->enc_layers - 1; l >= 0; l--) {
        const struct enc_w *ew = &w->enc[l];
        struct enc_w *gw = &g->enc[l];
        struct enc_act *ea = &a->enc[l];
        const float *xin = ea->sa.x;
        const float *sin = c->pre_norm ? ea->ff.t : xin;
        if (res_end_bwd(m, &ea->ff, dx, a->sa, &dsub, gw->ln2_g, gw->ln2_b, ew->ln2_g, Ns) < 0 ||
            ffn_bwd(m, &ea->ff, a->sb, dsub, sin, ew->w1, gw->w1, gw->b1, ew->w2, gw->w2, gw->b2, Ns) < 0 ||
            res_begin_bwd(m, &ea->ff, dx, a->sb, xin, gw->ln2_g, gw->ln2_b, ew->ln2_g, Ns) < 0)
            return -1;
        xin = l ? a->enc[l - 1].ff.x : a->xs;
        sin = c->pre_norm ? ea->sa.t : xin;
        if (res_end_bwd(m, &ea->sa, dx, a->sa, &dsub, gw->ln1_g, gw->ln1_b, ew->ln1_g, Ns) < 0 ||
            self_att_bwd(m, &ea->sa, a->sb, dsub, sin, ew->qkv_w, gw->qkv_w, gw->qkv_b, ew->o_w, gw->o_w, gw->o_b, S,
                         a->src_len, 0) < 0 ||
            res_begin_bwd(m, &ea->sa, dx, a->sb, xin, gw->ln1_g, gw->ln1_b, ew->ln1_g, Ns) < 0)
            return -1;
    }
    if (drop_bwd(m, dx, dx, Ns_ * (size_t)D, c->dropout, a->xs_off) < 0 ||
        bk(m, m->k->embedding_backward(m->ctx, g->emb, dx, a->src_ids, a->src_pos, Ns, D, V, emb_scale),
           "embedding_backward") < 0)
        return -1;
    return 0;
}

int model_params_finite(struct model *m)
{
    double ss;
    if (bk(m, m->k->sumsq(m->ctx, &ss, m->params, m->np), "sumsq") < 0)
        return -1;
    return isfinite(ss) ? 1 : 0;
}

int model_zero_grad(struct model *m)
{
    return bk(m, m->k->memset_zero(m->ctx, m->grads, m->np * sizeof(float)), "memset");
}

int model_grad_sumsq(struct model *m, double *out)
{
    return bk(m, m->k->sumsq(m->ctx, out, m->grads, m->np), "sumsq");
}

int model_adam(struct model *m, float lr, int64_t t, float grad_scale, float beta1, float beta2, float eps)
{
    return bk(m, m->k->adam_update(m->ctx, m->params, m->adam_m, m->adam_v, m->grads, m->np, lr, beta1, beta2, eps, t,
                                   grad_scale),
              "adam_update");
}

int model_update(struct model *m, float lr, int64_t t, int64_t tokens, double clip, double *gnorm)
{
    double ss;
    if (model_grad_sumsq(m, &ss) < 0)
        return -1;
    double inv = tokens > 0 ? 1.0 / (double)tokens : 1.0;
    *gnorm = sqrt(ss) * inv;
    if (!isfinite(*gnorm))
        return 1;
    double s = inv;
    if (clip > 0) {
        double coef = clip / (*gnorm + 1e-6);
        if (coef < 1)
            s *= coef;
    }
    return model_adam(m, lr, t, (float)s, 0.9f, 0.98f, 1e-9f);
}

/* ---------------------------------------------------------------------------------------------
 * checkpoints */

/* st_writer fill callback: bytes of a device tensor. */
struct save_arg {
    struct model *m;
    const float *dev;
};

static int save_fill(void *arg, void *dst, uint64_t offset, size_t n)
{
    struct save_arg *a = arg;
    return bk(a->m, a->m->k->download(a->m->ctx, dst, (const char *)a->dev + offset, n), "download");
}

int model_save(struct model *m, struct st_writer *w, int opt)
{
    if (opt && !m->training)
        return nmt_seterr("model has no optimizer state");
    free(m->save_args);
    m->save_args = calloc(m->ntab + 2, sizeof(struct save_arg));
    if (!m->save_args)
        return nmt_seterr("out of memory");
    struct save_arg *args = m->save_args;
    if (model_config_save(&m->c, w) < 0)
        return -1;
    for (size_t i = 0; i < m->ntab; i++) {
        const struct model_param *p = &m->tab[i];
        uint64_t shape[2] = {(uint64_t)p->shape[0], (uint64_t)p->shape[1]};
        args[i] = (struct save_arg){m, m->params + p->offset};
        if (st_writer_add_fn(w, p->name, ST_F32, p->ndim, shape, save_fill, &args[i]) < 0)
            return -1;
    }
    if (opt) {
        uint64_t shape[1] = {m->np};
        args[m->ntab] = (struct save_arg){m, m->adam_m};
        args[m->ntab + 1] = (struct save_arg){m, m->adam_v};
        if (st_writer_add_fn(w, "optim.adam_m", ST_F32, 1, shape, save_fill, &args[m->ntab]) < 0 ||
            st_writer_add_fn(w, "optim.adam_v", ST_F32, 1, shape, save_fill, &args[m->ntab + 1]) < 0)
            return -1;
    }
    return 0;
}

int model_load(struct model *m, const struct st_file *f, int opt)
{
    struct model_config c;
    if (model_config_load(&c, f) < 0)
        return -1;
    if (c.vocab != m->c.vocab || c.d_model != m->c.d_model || c.heads != m->c.heads || c.ff != m->c.ff ||
        c.enc_layers != m->c.enc_layers || c.dec_layers != m->c.dec_layers || c.pre_norm != m->c.pre_norm)
        return nmt_seterr("checkpoint holds another model shape (vocab %d, d %d, heads %d, ff %d, layers %d+%d%s; "
                          "expected vocab %d, d %d, heads %d, ff %d, layers %d+%d%s)",
                          c.vocab, c.d_model, c.heads, c.ff, c.enc_layers, c.dec_layers, c.pre_norm ? ", pre-norm" : "",
                          m->c.vocab, m->c.d_model, m->c.heads, m->c.ff, m->c.enc_layers, m->c.dec_layers,
                          m->c.pre_norm ? ", pre-norm" : "");
    if (opt && !m->training)
        return nmt_seterr("model has no optimizer state");
    float *h = NULL;
    int rc = -1;
    /* each tensor goes from the file's buffer to the backend directly (checked as st_get does) */
    for (size_t i = 0; i < m->ntab; i++) {
        const struct model_param *p = &m->tab[i];
        const struct st_tensor *t = st_find(f, p->name);
        if (!t) {
            nmt_seterr("checkpoint lacks tensor '%s'", p->name);
            goto out;
        }
        if (t->ndim != p->ndim || t->shape[0] != (uint64_t)p->shape[0] ||
            (p->ndim == 2 && t->shape[1] != (uint64_t)p->shape[1])) {
            nmt_seterr("checkpoint tensor '%s' has another shape", p->name);
            goto out;
        }
        if (t->dtype != ST_F32 || t->nbytes != (uint64_t)p->size * sizeof(float)) {
            nmt_seterr("checkpoint tensor '%s' is not %zu float32 values", p->name, (size_t)p->size);
            goto out;
        }
        if (p->size && bk(m, m->k->upload(m->ctx, m->params + p->offset, t->data, (size_t)t->nbytes), "upload") < 0)
            goto out;
    }
    if (opt) {
        h = malloc(m->np * sizeof *h);
        if (!h) {
            nmt_seterr("out of memory");
            goto out;
        }
        if (st_get(f, "optim.adam_m", ST_F32, h, m->np) < 0 ||
            bk(m, m->k->upload(m->ctx, m->adam_m, h, m->np * sizeof(float)), "upload") < 0 ||
            st_get(f, "optim.adam_v", ST_F32, h, m->np) < 0 ||
            bk(m, m->k->upload(m->ctx, m->adam_v, h, m->np * sizeof(float)), "upload") < 0)
            goto out;
    }
    rc = 0;
out:
    free(h);
    return rc;
}
