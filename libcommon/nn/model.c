/* model.c: the Transformer for training (see model.h): the batch's activations, the forward pass
 * over the shared blocks of nn/blocks.h, its backward pass, Adam, and checkpoint I/O over the
 * parameter layout of nn/params.h. */
#include "nn/model.h"
#include "base/rng.h"
#include "base/util.h"
#include "nn/blocks.h"
#include "nn/checkpoint.h"
#include "nn/params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * FLOPs */

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

/* ---------------------------------------------------------------------------------------------
 * activations */

struct dec_act {
    struct nn_sub sa, ca, ff;
    float *kv;           // (B*S, 2D) encoder-decoder keys and values of the memory
};

struct acts {
    int B, S, T, Nr;     // batch shape, non-padding target rows
    struct nn_encoder_acts e; // the encoder's; its scratch sub and act are sa and sc below
    float *xt;           // (B*T, D) target embeddings (after dropout)
    uint64_t xt_off;
    struct dec_act *dec; // (Ld)
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
    struct nn_exec run;        // how the blocks run (dropout state of the current step)
    const struct nmt_backend *k;
    nmt_bctx *ctx;
    struct model_config c;
    int training;
    size_t np;                 // P
    struct model_param *tab;   // (ntab)
    size_t ntab;
    float *params, *grads, *adam_m, *adam_v; // device, (P) each
    struct model_weights w, g; // views into params and grads
    struct acts a;
    float *act_buf;            // device activation buffer
    size_t act_cap;            // floats
    int32_t *host_ints;        // host staging of the int arrays
    size_t host_ints_cap;
    void *save_args;           // (ntab + 2) struct save_arg of the last model_save
    int R;                     // logit rows per chunk
    int lse;                   // attention through the backend's attention_*_lse slots (no P kept)
    uint32_t precision;        // of the matrix products: NMT_DTYPE_F32 or NMT_DTYPE_BF16
    void *wbf;                 // device, (P) bfloat16 copy of params (bf16 precision), else NULL
    float *pe;                 // device, (max_len, D) position table (nn_pe_table), or NULL
    int discarded;             // part of params given back (model_discard_weight) since last set
    size_t *buckets;           // (nbuckets, 2) gradient buckets: offset, length (model_grad_buckets)
    int nbuckets;
    model_grad_ready_fn grad_ready;  // told as each bucket of the backward pass is final
    void *grad_ready_arg;
    int next_bucket;           // the bucket the backward pass finishes next
    size_t *frozen;            // (nfrozen, 2) frozen parameters (model_freeze): offset, length
    int nfrozen;
    model_linear_seen_fn linear_seen;  // told of each linear layer's input (model_set_linear_observer)
    void *linear_seen_arg;
};

const struct model_config *model_config(const struct model *m)
{
    return &m->c;
}

struct backend *model_backend(const struct model *m)
{
    return m->be;
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

const struct model_weights *model_weights(const struct model *m)
{
    return &m->w;
}

const float *model_pe_table(const struct model *m) { return m->pe; }

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
        m->k->free(m->ctx, m->wbf);
        m->k->free(m->ctx, m->pe);
    }
    model_weights_free(&m->w);
    model_weights_free(&m->g);
    free(m->a.e.layer);
    free(m->a.dec);
    free(m->tab);
    free(m->host_ints);
    free(m->save_args);
    free(m->buckets);
    free(m->frozen);
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

/* Fills m->buckets in the order the backward pass finishes them (see model_grad_buckets). 0 or -1. */
static int make_buckets(struct model *m)
{
    const struct model_config *c = &m->c;
    const struct model_weights *w = &m->w;
    size_t D = (size_t)c->d_model;
    int tail = c->tie != MODEL_TIE_ALL || c->output_bias; /* tensors after the final layer norms */
    m->nbuckets = c->dec_layers + c->enc_layers + 1 + (c->pre_norm ? 2 : 0) + tail;
    if (!(m->buckets = calloc((size_t)m->nbuckets * 2, sizeof *m->buckets)))
        return nmt_seterr("out of memory");
    size_t *b = m->buckets;
    /* a range from tensor FIRST to the end of tensor LAST (of LEN floats), as offsets */
#define RANGE(first, last, len) (*b++ = (size_t)((first) - m->params), *b++ = (size_t)((last) - (first)) + (len))
    if (c->pre_norm)
        RANGE(w->dec_ln_g, w->dec_ln_b, D);
    for (int l = c->dec_layers - 1; l >= 0; l--)
        RANGE(w->dec[l].sqkv_w, w->dec[l].ln3_b, D);
    if (c->pre_norm)
        RANGE(w->enc_ln_g, w->enc_ln_b, D);
    for (int l = c->enc_layers - 1; l >= 0; l--)
        RANGE(w->enc[l].qkv_w, w->enc[l].ln2_b, D);
    RANGE(w->emb, w->emb, (size_t)c->vocab * D);
    if (tail) { /* the target embedding, output projection and bias: from the first of them to the end */
        const float *first = c->tie != MODEL_TIE_ALL ? w->dec_emb : w->out_b;
        *b++ = (size_t)(first - m->params), *b++ = m->np - (size_t)(first - m->params);
    }
#undef RANGE
    return 0;
}

struct model *model_new(struct backend *be, const struct model_config *c, int training)
{
    if (model_config_check(c) < 0 || nn_check_backend(&be->ops, c) < 0)
        return NULL;
    struct model *m = calloc(1, sizeof *m);
    if (!m)
        return nmt_seterr("out of memory"), NULL;
    m->be = be;
    m->k = &be->ops;
    m->ctx = be->ctx;
    m->c = *c;
    m->run = (struct nn_exec){.k = m->k, .ctx = m->ctx, .c = &m->c, .linear = nn_linear_gemm, .owner = m};
    int sparse = (training & MODEL_SPARSE) && m->k->alloc_sparse;
    training &= ~MODEL_SPARSE;
    m->training = training;
    m->lse = m->k->attention_forward_lse && m->k->attention_backward_lse;
    m->precision = NMT_DTYPE_F32;
    if (model_weights_alloc(&m->w, c) < 0 || (training && model_weights_alloc(&m->g, c) < 0))
        goto fail;
    m->a.e.layer = calloc((size_t)c->enc_layers, sizeof *m->a.e.layer);
    m->a.dec = calloc((size_t)c->dec_layers, sizeof *m->a.dec);
    m->ntab = model_weights_layout(c, NULL, NULL, NULL, &m->np);
    m->tab = calloc(m->ntab, sizeof *m->tab);
    if (!m->a.e.layer || !m->a.dec || !m->tab) {
        nmt_seterr("out of memory");
        goto fail;
    }
    if (sparse && !(m->params = m->k->alloc_sparse(m->ctx, m->np * sizeof(float))))
        nmt_seterr("cannot allocate parameters (%zu MB) on backend %s: %s", m->np * sizeof(float) >> 20, m->k->name,
                   m->k->last_error(m->ctx));
    if (!sparse && !(m->params = dalloc(m, m->np, "parameters")))
        goto fail;
    if (!m->params)
        goto fail;
    int err;
    m->run.pe = m->pe = nn_pe_table(m->k, m->ctx, c, &err);
    if (err < 0)
        goto fail;
    model_weights_layout(c, m->params, m->tab, &m->w, NULL);
    if (training) {
        if (!(m->grads = dalloc(m, m->np, "gradients")) || !(m->adam_m = dalloc(m, m->np, "Adam moments")) ||
            !(m->adam_v = dalloc(m, m->np, "Adam moments")))
            goto fail;
        model_weights_layout(c, m->grads, NULL, &m->g, NULL);
        if (make_buckets(m) < 0)
            goto fail;
    }
    return m;
fail:
    model_free(m);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * initialisation */

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
        if (!strcmp(p->name, "emb.weight") || !strcmp(p->name, "dec_emb.weight") || !strcmp(p->name, "out.weight")) {
            double sd = 1 / sqrt((double)m->c.d_model);
            for (size_t j = 0; j < p->size; j += 2) {
                double u1 = rng_unit(rng_splitmix64(&s)), u2 = rng_unit(rng_splitmix64(&s));
                double r = sqrt(-2 * log(1 - u1)) * sd;
                x[j] = (float)(r * cos(2 * M_PI * u2));
                if (j + 1 < p->size)
                    x[j + 1] = (float)(r * sin(2 * M_PI * u2));
            }
            memset(x + (size_t)NMT_PAD * (size_t)m->c.d_model, 0, (size_t)m->c.d_model * sizeof *x);
        } else if (p->ndim == 2) {
            double a = sqrt(6.0 / (double)(p->shape[0] + p->shape[1]));
            for (size_t j = 0; j < p->size; j++)
                x[j] = (float)((2 * rng_unit(rng_splitmix64(&s)) - 1) * a);
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
        (nn_bk(&m->run, m->k->memset_zero(m->ctx, m->adam_m, m->np * sizeof(float)), "memset") < 0 ||
         nn_bk(&m->run, m->k->memset_zero(m->ctx, m->adam_v, m->np * sizeof(float)), "memset") < 0 ||
         nn_bk(&m->run, m->k->memset_zero(m->ctx, m->grads, m->np * sizeof(float)), "memset") < 0))
        rc = -1;
    return rc;
}

int model_discard_weight(struct model *m, const float *w, size_t n)
{
    uintptr_t base = (uintptr_t)m->params, at = (uintptr_t)w;
    if (at < base || (at - base) % sizeof(float) || n > m->np || (at - base) / sizeof(float) > m->np - n)
        return nmt_seterr("discard: %zu floats that are not all in the model's weights", n);
    if (!m->k->discard)
        return 0;
    if (nn_bk(&m->run, m->k->discard(m->ctx, (void *)at, n * sizeof(float)), "discard") < 0)
        return -1;
    m->discarded = 1;
    return 1;
}

int model_weights_discarded(const struct model *m) { return m->discarded; }

/* 0 when all of M's weights hold their values, else -1 with the error set. */
static int weights_whole(const struct model *m)
{
    if (m->discarded)
        return nmt_seterr("the model's weights were partly given back (model_discard_weight): load or set them first");
    return 0;
}

int model_get_params(struct model *m, float *host)
{
    if (weights_whole(m) < 0)
        return -1;
    return nn_bk(&m->run, m->k->download(m->ctx, host, m->params, m->np * sizeof(float)), "download");
}

/* Refreshes the bfloat16 copy of the parameters (bf16 precision; nothing otherwise). 0 or -1. */
static int wbf_refresh(struct model *m)
{
    if (!m->wbf)
        return 0;
    return nn_bk(&m->run, m->k->cast(m->ctx, m->wbf, NMT_DTYPE_BF16, m->params, NMT_DTYPE_F32, m->np), "cast");
}

int model_set_params(struct model *m, const float *host)
{
    if (nn_bk(&m->run, m->k->upload(m->ctx, m->params, host, m->np * sizeof(float)), "upload") < 0)
        return -1;
    m->discarded = 0;
    return wbf_refresh(m);
}

int model_has_bf16(const struct model *m)
{
    return m->k->set_precision && m->k->cast && m->k->gemm_ex;
}

int model_set_precision(struct model *m, uint32_t dtype)
{
    if (dtype != NMT_DTYPE_F32 && dtype != NMT_DTYPE_BF16)
        return nmt_seterr("precision %u is neither float32 nor bf16", (unsigned)dtype);
    if (dtype == NMT_DTYPE_BF16 && !model_has_bf16(m))
        return nmt_seterr("backend %s cannot train in bf16 (its plugin lacks the set_precision, cast and gemm_ex "
                          "slots of ABI 2.2)",
                          m->k->name);
    if (m->k->set_precision && nn_bk(&m->run, m->k->set_precision(m->ctx, dtype), "set_precision") < 0)
        return -1;
    m->precision = dtype;
    if (dtype == NMT_DTYPE_F32) {
        m->k->free(m->ctx, m->wbf);
        m->wbf = NULL;
        m->run.wbase = NULL;
        m->run.wbf = NULL;
        return 0;
    }
    if (!m->wbf) {
        m->wbf = m->k->alloc(m->ctx, m->np * sizeof(uint16_t));
        if (!m->wbf)
            return nmt_seterr("cannot allocate the bf16 copy of the parameters (%zu MB) on backend %s: %s",
                              m->np * sizeof(uint16_t) >> 20, m->k->name, m->k->last_error(m->ctx));
    }
    m->run.wbase = m->params;
    m->run.wbf = m->wbf;
    return wbf_refresh(m);
}

uint32_t model_precision(const struct model *m)
{
    return m->precision;
}

int model_get_grads(struct model *m, float *host)
{
    if (!m->grads)
        return nmt_seterr("model has no gradients (not created for training)");
    return nn_bk(&m->run, m->k->download(m->ctx, host, m->grads, m->np * sizeof(float)), "download");
}

int model_get_grads_range(struct model *m, float *host, size_t off, size_t n)
{
    if (!m->grads)
        return nmt_seterr("model has no gradients (not created for training)");
    if (off > m->np || n > m->np - off)
        return nmt_seterr("gradient range of %zu floats at %zu lies outside the %zu", n, off, m->np);
    return nn_bk(&m->run, m->k->download(m->ctx, host, m->grads + off, n * sizeof(float)), "download");
}

float *model_grad_data(struct model *m)
{
    return m->grads;
}

int model_grad_buckets(const struct model *m, const size_t **ranges)
{
    *ranges = m->buckets;
    return m->nbuckets;
}

void model_set_grad_ready(struct model *m, model_grad_ready_fn fn, void *arg)
{
    m->grad_ready = fn;
    m->grad_ready_arg = arg;
}

/* nn_linear_gemm after telling the observer of M (E's owner) of the layer's input. */
static int observed_linear(struct nn_exec *e, float *y, const float *x, const float *W, const float *bias, int relu,
                           int N, int out, int in)
{
    struct model *m = e->owner;
    if (m->linear_seen(m->linear_seen_arg, W, x, N, out, in) < 0)
        return -1;
    return nn_linear_gemm(e, y, x, W, bias, relu, N, out, in);
}

void model_set_linear_observer(struct model *m, model_linear_seen_fn fn, void *arg)
{
    m->linear_seen = fn;
    m->linear_seen_arg = arg;
    m->run.linear = fn ? observed_linear : nn_linear_gemm;
}

/* The backward pass has finished the next bucket (in model_grad_buckets' order): tells the
 * caller's function. 0 or -1. */
static int bucket_done(struct model *m)
{
    int b = m->next_bucket++;
    return m->grad_ready ? m->grad_ready(m->grad_ready_arg, b) : 0;
}

int model_set_grads(struct model *m, const float *host)
{
    if (!m->grads)
        return nmt_seterr("model has no gradients (not created for training)");
    return nn_bk(&m->run, m->k->upload(m->ctx, m->grads, host, m->np * sizeof(float)), "upload");
}

/* ---------------------------------------------------------------------------------------------
 * activation buffer */

/* A sublayer's views: KIND 0 self-attention, 1 cross-attention, 2 FFN; P the elements of its
 * attention probabilities, L of their row statistics (kept instead of P when LSE); SWISH: the FFN
 * keeps its pre-activation. */
static void sub_layout(struct nn_bump *b, struct nn_sub *s, int kind, size_t N, size_t D, size_t F, size_t P, size_t L,
                       int lse, int swish)
{
    s->t = nn_bump_f(b, N * D);
    s->x = nn_bump_f(b, N * D);
    s->mean = nn_bump_f(b, N);
    s->rstd = nn_bump_f(b, N);
    if (kind == 0 || kind == 1) { /* self / cross attention */
        s->q = nn_bump_f(b, N * (kind == 0 ? 3 : 1) * D);
        s->P = lse ? NULL : nn_bump_f(b, P);
        s->lse = lse ? nn_bump_f(b, L) : NULL;
        s->att = nn_bump_f(b, N * D);
    } else {
        s->h = nn_bump_f(b, N * F);
        s->u = swish ? nn_bump_f(b, N * F) : NULL;
    }
}

static void acts_layout(struct model *m, struct nn_bump *b, int B, int S, int T, int Nr)
{
    struct acts *a = &m->a;
    size_t D = (size_t)m->c.d_model, F = (size_t)m->c.ff, H = (size_t)m->c.heads, V = (size_t)m->c.vocab;
    size_t Ns = (size_t)B * (size_t)S, Nt = (size_t)B * (size_t)T, Nm = Ns > Nt ? Ns : Nt;
    int swish = m->c.activation == MODEL_ACT_SWISH;
    a->B = B, a->S = S, a->T = T, a->Nr = Nr;
    a->e.x = nn_bump_f(b, Ns * D);
    a->xt = nn_bump_f(b, Nt * D);
    for (int l = 0; l < m->c.enc_layers; l++) {
        sub_layout(b, &a->e.layer[l].sa, 0, Ns, D, F, (size_t)B * H * (size_t)S * (size_t)S, 2 * (size_t)B * H * S,
                   m->lse, 0);
        sub_layout(b, &a->e.layer[l].ff, 2, Ns, D, F, 0, 0, 0, swish);
    }
    for (int l = 0; l < m->c.dec_layers; l++) {
        sub_layout(b, &a->dec[l].sa, 0, Nt, D, F, (size_t)B * H * (size_t)T * (size_t)T, 2 * (size_t)B * H * T,
                   m->lse, 0);
        sub_layout(b, &a->dec[l].ca, 1, Nt, D, F, (size_t)B * H * (size_t)T * (size_t)S, 2 * (size_t)B * H * T,
                   m->lse, 0);
        sub_layout(b, &a->dec[l].ff, 2, Nt, D, F, 0, 0, 0, swish);
        a->dec[l].kv = nn_bump_f(b, Ns * 2 * D);
    }
    if (m->c.pre_norm) {
        a->e.fl = nn_bump_f(b, Ns * D);
        a->e.fl_mean = nn_bump_f(b, Ns);
        a->e.fl_rstd = nn_bump_f(b, Ns);
        a->dfl = nn_bump_f(b, Nt * D);
        a->dfl_mean = nn_bump_f(b, Nt);
        a->dfl_rstd = nn_bump_f(b, Nt);
    }
    a->yp = nn_bump_f(b, ((size_t)Nr + 1) * D);
    size_t R = (size_t)m->R < (size_t)Nr ? (size_t)m->R : (size_t)Nr;
    a->logits = nn_bump_f(b, (R ? R : 1) * V);
    a->rnll = nn_bump_f(b, (size_t)Nr + 1);
    a->dxs = nn_bump_f(b, Ns * D);
    a->dxt = nn_bump_f(b, Nt * D);
    a->sa = nn_bump_f(b, Nm * D);
    a->sb = nn_bump_f(b, Nm * D);
    a->sc = nn_bump_f(b, Nm * (3 * D > F ? 3 * D : F));
    a->dkv = nn_bump_f(b, Ns * 2 * D);
    a->e.sub = a->sa;
    a->e.act = a->sc;
    a->src_ids = nn_bump_i(b, Ns);
    a->src_pos = nn_bump_i(b, Ns);
    a->src_len = nn_bump_i(b, (size_t)B);
    a->tin_ids = nn_bump_i(b, Nt);
    a->tin_pos = nn_bump_i(b, Nt);
    a->tgt_len = nn_bump_i(b, (size_t)B);
    a->tout = nn_bump_i(b, (size_t)Nr + 1);
    a->gidx = nn_bump_i(b, (size_t)Nr + 1);
    a->sidx = nn_bump_i(b, Nt);
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
    struct nn_bump b = {NULL, 0};
    acts_layout(m, &b, B, S, T, Nr);
    return b.off;
}

/* Sizes the activation buffer for a batch and points the views into it. */
static int acts_prepare(struct model *m, int B, int S, int T, int Nr)
{
    size_t need = acts_bytes(m, B, S, T, Nr);
    if (acts_grow(m, need, need / 4) < 0)
        return -1;
    struct nn_bump b = {(char *)m->act_buf, 0};
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

/* C (M,N) = op(A) W^T (TRANSW) or op(A) W, W a weight of the parameter buffer with leading
 * dimension LDW: gemm, or gemm_ex on W's bfloat16 copy in bf16 precision. */
static int gemm_w(struct model *m, int transA, int transW, int M, int N, int K, const float *A, int lda, const float *W,
                  int ldw, float beta, float *C, int ldc)
{
    if (m->wbf)
        return nn_bk(&m->run,
                     m->k->gemm_ex(m->ctx, transA, transW, M, N, K, 1.0f, A, NMT_DTYPE_F32, lda, nn_wbf(&m->run, W),
                                   NMT_DTYPE_BF16, ldw, beta, C, ldc),
                     "gemm_ex");
    return nn_bk(&m->run, m->k->gemm(m->ctx, transA, transW, M, N, K, 1.0f, A, lda, W, ldw, beta, C, ldc), "gemm");
}

/* Backward of linear: dx (N, in) = dy W (+= when BETA is 1; skipped when dx is NULL),
 * dW += dy^T x, db += column sums of dy. */
static int linear_bwd(struct model *m, float *dx, float *dW, float *db, const float *dy, const float *x,
                      const float *W, int N, int out, int in, float beta)
{
    if (dx && gemm_w(m, 0, 0, N, in, out, dy, out, W, in, beta, dx, in) < 0)
        return -1;
    if (nn_bk(&m->run, m->k->gemm(m->ctx, 1, 0, out, in, N, 1.0f, dy, out, x, in, 1.0f, dW, in), "gemm") < 0)
        return -1;
    return nn_bk(&m->run, m->k->bias_grad(m->ctx, db, dy, N, out), "bias_grad");
}

static int drop_bwd(struct model *m, float *dx, const float *dy, size_t n, float p, uint64_t off)
{
    if (!m->run.train || p <= 0) {
        if (dx == dy)
            return 0;
        return nn_bk(&m->run, m->k->copy(m->ctx, dx, dy, n * sizeof(float)), "copy");
    }
    return nn_bk(&m->run, m->k->dropout_backward(m->ctx, dx, dy, n, p, m->run.seed, off), "dropout_backward");
}

/* Backward through the end of a residual sublayer: DX (N, D) holds the gradient of s->x; on return
 * DX holds the gradient of the direct path to x_in and *DSUB points at the gradient of the
 * sublayer output (DX itself or scratch SCR). */
static int res_end_bwd(struct model *m, struct nn_sub *s, float *dx, float *scr, float **dsub, float *dg, float *db,
                       const float *g, int N)
{
    size_t n = (size_t)N * (size_t)m->c.d_model;
    if (!m->c.pre_norm &&
        nn_bk(&m->run, m->k->layernorm_backward(m->ctx, dx, dg, db, dx, s->t, s->mean, s->rstd, g, N, m->c.d_model),
           "layernorm_backward") < 0)
        return -1;
    if (!m->run.train || m->c.dropout <= 0) {
        *dsub = dx;
        return 0;
    }
    *dsub = scr;
    return drop_bwd(m, scr, dx, n, m->c.dropout, s->drop_off);
}

/* Backward through the start: DSIN (N, D) is the gradient of the sublayer input; adds it (through
 * the pre-norm LN) into DX. DSIN is clobbered. */
static int res_begin_bwd(struct model *m, struct nn_sub *s, float *dx, float *dsin, const float *xin, float *dg,
                         float *db, const float *g, int N)
{
    size_t n = (size_t)N * (size_t)m->c.d_model;
    if (m->c.pre_norm &&
        nn_bk(&m->run, m->k->layernorm_backward(m->ctx, dsin, dg, db, dsin, xin, s->mean, s->rstd, g, N, m->c.d_model),
           "layernorm_backward") < 0)
        return -1;
    return nn_bk(&m->run, m->k->add(m->ctx, dx, dx, dsin, n), "add");
}

/* Attention backward of sublayer S (queries s->q, output s->att) over keys K and values V: from
 * the saved P, or recomputing it from the saved row statistics. */
static int attn_bwd(struct model *m, struct nn_sub *s, float *dq, float *dk, float *dv, const float *datt,
                    const float *k, const float *v, const struct nmt_attn_args *a)
{
    if (s->lse)
        return nn_bk(&m->run, m->k->attention_backward_lse(m->ctx, dq, dk, dv, datt, s->att, s->lse, s->q, k, v, a),
                     "attention_backward_lse");
    return nn_bk(&m->run, m->k->attention_backward(m->ctx, dq, dk, dv, datt, s->q, k, v, s->P, a),
                 "attention_backward");
}

/* Backward of nn_self_attention: DOUT (B*T, D) gradient of the output; DSIN receives the input's gradient. */
static int self_att_bwd(struct model *m, struct nn_sub *s, float *dsin, const float *dout, const float *sin,
                        const float *qkv_w, float *dqkv_w, float *dqkv_b, const float *o_w, float *do_w, float *do_b,
                        int T, const int32_t *klen, int causal)
{
    int D = m->c.d_model, N = m->a.B * T;
    float *datt = dsin, *dqkv = m->a.sc;
    if (linear_bwd(m, datt, do_w, do_b, dout, s->att, o_w, N, D, D, 0) < 0)
        return -1;
    struct nmt_attn_args a = nn_attn_args(&m->run, m->a.B, T, T, 3 * D, 3 * D, klen, causal);
    a.offset = s->attn_off;
    if (attn_bwd(m, s, dqkv, dqkv + D, dqkv + 2 * D, datt, s->q + D, s->q + 2 * D, &a) < 0)
        return -1;
    return linear_bwd(m, dsin, dqkv_w, dqkv_b, dqkv, sin, qkv_w, N, 3 * D, D, 0);
}

/* Backward of nn_cross_attention; adds the memory's gradient into DMEM (B*S, D). */
static int cross_att_bwd(struct model *m, struct nn_sub *s, float *dsin, const float *dout, const float *sin,
                         const float *kv, const float *mem, float *dmem, const struct dec_layer_weights *w,
                         struct dec_layer_weights *gw)
{
    int D = m->c.d_model, N = m->a.B * m->a.T, Ns = m->a.B * m->a.S;
    float *datt = dsin, *dq = m->a.sc, *dkv = m->a.dkv;
    if (linear_bwd(m, datt, gw->co_w, gw->co_b, dout, s->att, w->co_w, N, D, D, 0) < 0)
        return -1;
    struct nmt_attn_args a = nn_attn_args(&m->run, m->a.B, m->a.T, m->a.S, D, 2 * D, m->a.src_len, 0);
    a.offset = s->attn_off;
    if (attn_bwd(m, s, dq, dkv, dkv + D, datt, kv, kv + D, &a) < 0)
        return -1;
    if (linear_bwd(m, dmem, gw->ckv_w, gw->ckv_b, dkv, mem, w->ckv_w, Ns, 2 * D, D, 1) < 0)
        return -1;
    return linear_bwd(m, dsin, gw->cq_w, gw->cq_b, dq, sin, w->cq_w, N, D, D, 0);
}

static int ffn_bwd(struct model *m, struct nn_sub *s, float *dsin, const float *dout, const float *sin,
                   const float *w1, float *dw1, float *db1, const float *w2, float *dw2, float *db2, int N)
{
    int D = m->c.d_model, F = m->c.ff;
    size_t n = (size_t)N * (size_t)F;
    float *dh = m->a.sc;
    const float *hd = s->h;
    int drop = m->run.train && m->c.act_dropout > 0;
    if (drop) { /* regenerate the dropped activation for dW2 */
        if (nn_bk(&m->run, m->k->dropout_forward(m->ctx, dh, s->h, n, m->c.act_dropout, m->run.seed, s->act_off),
               "dropout_forward") < 0)
            return -1;
        hd = dh;
    }
    if (linear_bwd(m, NULL, dw2, db2, dout, hd, w2, N, D, F, 0) < 0)
        return -1;
    if (gemm_w(m, 0, 0, N, F, D, dout, D, w2, F, 0.0f, dh, F) < 0)
        return -1;
    if (drop && drop_bwd(m, dh, dh, n, m->c.act_dropout, s->act_off) < 0)
        return -1;
    if (m->c.activation == MODEL_ACT_SWISH
            ? nn_bk(&m->run, m->k->swish_backward(m->ctx, dh, dh, s->u, n), "swish_backward") < 0
            : nn_bk(&m->run, m->k->relu_backward(m->ctx, dh, dh, s->h, n), "relu_backward") < 0)
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
            tin_ids[r] = j < tl ? (j == 0 ? (m->c.start_zero ? -1 : NMT_BOS) : (int32_t)br->tgt[r - 1]) : 0;
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
    return nn_bk(&m->run, m->k->upload(m->ctx, dst, src, n * sizeof(int32_t)), "upload");
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

/* The decoder over the prepared batch, on the encoder output MEM (B*S, D); *Y receives its output
 * (B*T, D): the last layer's stream, or its final layer norm in pre-norm. */
static int decoder_fwd(struct model *m, const float *mem, const float **y)
{
    struct acts *a = &m->a;
    const struct model_weights *w = &m->w;
    const struct model_config *c = &m->c;
    struct nn_exec *e = &m->run;
    int B = a->B, S = a->S, T = a->T, D = c->d_model, Ns = B * S, Nt = B * T;
    if (nn_embed(e, a->xt, a->tin_ids, a->tin_pos, w->dec_emb, Nt, &a->xt_off) < 0)
        return -1;
    const float *x = a->xt;
    for (int l = 0; l < c->dec_layers; l++) {
        const struct dec_layer_weights *dw = &w->dec[l];
        struct dec_act *da = &a->dec[l];
        const float *sin = nn_res_begin(e, &da->sa, x, dw->ln1_g, dw->ln1_b, Nt);
        if (!sin ||
            nn_self_attention(e, &da->sa, a->sa, sin, dw->sqkv_w, dw->sqkv_b, dw->so_w, dw->so_b, B, T, a->tgt_len,
                              1) < 0 ||
            nn_res_end(e, &da->sa, x, a->sa, dw->ln1_g, dw->ln1_b, Nt) < 0)
            return -1;
        x = da->sa.x;
        if (e->linear(e, da->kv, mem, dw->ckv_w, dw->ckv_b, 0, Ns, 2 * D, D) < 0)
            return -1;
        sin = nn_res_begin(e, &da->ca, x, dw->ln2_g, dw->ln2_b, Nt);
        if (!sin || nn_cross_attention(e, &da->ca, a->sa, sin, da->kv, dw, B, T, S, a->src_len, NULL) < 0 ||
            nn_res_end(e, &da->ca, x, a->sa, dw->ln2_g, dw->ln2_b, Nt) < 0)
            return -1;
        x = da->ca.x;
        sin = nn_res_begin(e, &da->ff, x, dw->ln3_g, dw->ln3_b, Nt);
        if (!sin || nn_ffn(e, &da->ff, a->sa, a->sc, sin, dw->w1, dw->b1, dw->w2, dw->b2, Nt) < 0 ||
            nn_res_end(e, &da->ff, x, a->sa, dw->ln3_g, dw->ln3_b, Nt) < 0)
            return -1;
        x = da->ff.x;
    }
    *y = x;
    if (c->pre_norm) {
        if (nn_layernorm(e, a->dfl, a->dfl_mean, a->dfl_rstd, x, w->dec_ln_g, w->dec_ln_b, Nt) < 0)
            return -1;
        *y = a->dfl;
    }
    return 0;
}

/* Output projection and loss on the Nr non-padding rows of Y (B*T, D), in chunks of R rows, into
 * *OUT; with BACKWARD, the embedding's gradient and (over a->yp) the rows' gradients; LOGITS_HOST
 * and SENT_NLL as step_impl's. */
static int output_loss(struct model *m, const float *y, int backward, struct model_loss *out, float *logits_host,
                       int want_rnll)
{
    struct acts *a = &m->a;
    const struct model_config *c = &m->c;
    int D = c->d_model, V = c->vocab, Nr = a->Nr;
    if (Nr && nn_bk(&m->run, m->k->gather_rows(m->ctx, a->yp, y, a->gidx, Nr, D), "gather_rows") < 0)
        return -1;
    for (int r0 = 0; r0 < Nr; r0 += m->R) {
        int R = Nr - r0 < m->R ? Nr - r0 : m->R;
        float *yr = a->yp + (size_t)r0 * (size_t)D;
        if (gemm_w(m, 0, 1, R, V, D, yr, D, m->w.out_w, D, 0.0f, a->logits, V) < 0 ||
            (m->w.out_b && nn_bk(&m->run, m->k->bias_add(m->ctx, a->logits, m->w.out_b, R, V), "bias_add") < 0))
            return -1;
        if (logits_host && nn_bk(&m->run, m->k->download(m->ctx, logits_host + (size_t)r0 * (size_t)V, a->logits,
                                                       (size_t)R * (size_t)V * sizeof(float)),
                                 "download") < 0)
            return -1;
        struct nmt_xent_result xr;
        if (nn_bk(&m->run,
                  m->k->cross_entropy(m->ctx, &xr, backward ? a->logits : NULL, want_rnll ? a->rnll + r0 : NULL,
                                      a->logits, a->tout + r0, R, V, c->label_smoothing, -1, 1.0f),
                  "cross_entropy") < 0)
            return -1;
        out->loss += xr.loss;
        out->nll += xr.nll;
        out->tokens += xr.count;
        /* dE += dlogits^T y (db += its column sums), then dy = dlogits E written over y's rows (no
         * longer needed) */
        if (backward && (nn_bk(&m->run, m->k->gemm(m->ctx, 1, 0, V, D, R, 1.0f, a->logits, V, yr, D, 1.0f, m->g.out_w, D),
                               "gemm") < 0 ||
                         (m->g.out_b && nn_bk(&m->run, m->k->bias_grad(m->ctx, m->g.out_b, a->logits, R, V),
                                              "bias_grad") < 0) ||
                         gemm_w(m, 0, 0, R, D, V, a->logits, V, m->w.out_w, D, 0.0f, yr, D) < 0))
            return -1;
    }
    return 0;
}

/* SENT_NLL (B) = each sentence's summed per-token NLL of the last output_loss. 0 or -1. */
static int sentence_nll(struct model *m, const struct batch_record *br, double *sent_nll)
{
    int Nr = m->a.Nr;
    float *h = malloc(((size_t)Nr + 1) * sizeof *h);
    if (!h)
        return nmt_seterr("out of memory");
    if (Nr && nn_bk(&m->run, m->k->download(m->ctx, h, m->a.rnll, (size_t)Nr * sizeof *h), "download") < 0) {
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
    return 0;
}

/* DEMB (V, D) += the embedding gradient of the N rows DX of IDS at POS (through the position-table
 * slot when the model has a table: it skips the zero start's ids < 0). 0 or -1. */
static int emb_bwd(struct model *m, float *demb, const float *dx, const int32_t *ids, const int32_t *pos, int N)
{
    int D = m->c.d_model;
    if (m->pe)
        return nn_bk(&m->run,
                     m->k->embedding_table_backward(m->ctx, demb, dx, ids, pos, N, D, m->c.vocab, sqrtf((float)D)),
                     "embedding_table_backward");
    return nn_bk(&m->run, m->k->embedding_backward(m->ctx, demb, dx, ids, pos, N, D, m->c.vocab, sqrtf((float)D)),
                 "embedding_backward");
}

/* Backward through the decoder, from the rows' gradients in a->yp; the memory's gradient goes to
 * DMEM (B*S, D), assigned. MEM is the encoder output. */
static int decoder_bwd(struct model *m, const float *mem, float *dmem)
{
    struct acts *a = &m->a;
    const struct model_weights *w = &m->w;
    struct model_weights *g = &m->g;
    const struct model_config *c = &m->c;
    int B = a->B, S = a->S, T = a->T, D = c->d_model, Nt = B * T, Nr = a->Nr;
    size_t Ns_ = (size_t)B * (size_t)S, Nt_ = (size_t)Nt;
    float *dx = a->dxt;
    if (nn_bk(&m->run, m->k->memset_zero(m->ctx, a->yp + (size_t)Nr * (size_t)D, (size_t)D * sizeof(float)),
              "memset") < 0 ||
        nn_bk(&m->run, m->k->gather_rows(m->ctx, dx, a->yp, a->sidx, Nt, D), "gather_rows") < 0)
        return -1;
    if (c->pre_norm && nn_bk(&m->run, m->k->layernorm_backward(m->ctx, dx, g->dec_ln_g, g->dec_ln_b, dx,
                                                             a->dec[c->dec_layers - 1].ff.x, a->dfl_mean, a->dfl_rstd,
                                                             w->dec_ln_g, Nt, D),
                             "layernorm_backward") < 0)
        return -1;
    if (c->pre_norm && bucket_done(m) < 0)
        return -1;
    if (nn_bk(&m->run, m->k->memset_zero(m->ctx, dmem, Ns_ * (size_t)D * sizeof(float)), "memset") < 0)
        return -1;
    float *dsub;
    for (int l = c->dec_layers - 1; l >= 0; l--) {
        const struct dec_layer_weights *dw = &w->dec[l];
        struct dec_layer_weights *gw = &g->dec[l];
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
            res_begin_bwd(m, &da->sa, dx, a->sb, xin, gw->ln1_g, gw->ln1_b, dw->ln1_g, Nt) < 0 ||
            bucket_done(m) < 0)
            return -1;
    }
    if (drop_bwd(m, dx, dx, Nt_ * (size_t)D, c->dropout, a->xt_off) < 0 ||
        emb_bwd(m, g->dec_emb, dx, a->tin_ids, a->tin_pos, Nt) < 0)
        return -1;
    return 0;
}

/* Backward through the encoder from the memory's gradient DX (B*S, D, clobbered). */
static int encoder_bwd(struct model *m, float *dx)
{
    struct acts *a = &m->a;
    const struct model_weights *w = &m->w;
    struct model_weights *g = &m->g;
    const struct model_config *c = &m->c;
    int S = a->S, D = c->d_model, Ns = a->B * S;
    if (c->pre_norm && nn_bk(&m->run, m->k->layernorm_backward(m->ctx, dx, g->enc_ln_g, g->enc_ln_b, dx,
                                                             a->e.layer[c->enc_layers - 1].ff.x, a->e.fl_mean,
                                                             a->e.fl_rstd, w->enc_ln_g, Ns, D),
                             "layernorm_backward") < 0)
        return -1;
    if (c->pre_norm && bucket_done(m) < 0)
        return -1;
    float *dsub;
    for (int l = c->enc_layers - 1; l >= 0; l--) {
        const struct enc_layer_weights *ew = &w->enc[l];
        struct enc_layer_weights *gw = &g->enc[l];
        struct nn_enc_act *ea = &a->e.layer[l];
        const float *xin = ea->sa.x;
        const float *sin = c->pre_norm ? ea->ff.t : xin;
        if (res_end_bwd(m, &ea->ff, dx, a->sa, &dsub, gw->ln2_g, gw->ln2_b, ew->ln2_g, Ns) < 0 ||
            ffn_bwd(m, &ea->ff, a->sb, dsub, sin, ew->w1, gw->w1, gw->b1, ew->w2, gw->w2, gw->b2, Ns) < 0 ||
            res_begin_bwd(m, &ea->ff, dx, a->sb, xin, gw->ln2_g, gw->ln2_b, ew->ln2_g, Ns) < 0)
            return -1;
        xin = l ? a->e.layer[l - 1].ff.x : a->e.x;
        sin = c->pre_norm ? ea->sa.t : xin;
        if (res_end_bwd(m, &ea->sa, dx, a->sa, &dsub, gw->ln1_g, gw->ln1_b, ew->ln1_g, Ns) < 0 ||
            self_att_bwd(m, &ea->sa, a->sb, dsub, sin, ew->qkv_w, gw->qkv_w, gw->qkv_b, ew->o_w, gw->o_w, gw->o_b, S,
                         a->src_len, 0) < 0 ||
            res_begin_bwd(m, &ea->sa, dx, a->sb, xin, gw->ln1_g, gw->ln1_b, ew->ln1_g, Ns) < 0 ||
            bucket_done(m) < 0)
            return -1;
    }
    if (drop_bwd(m, dx, dx, (size_t)Ns * (size_t)D, c->dropout, a->e.x_drop_off) < 0 ||
        emb_bwd(m, g->emb, dx, a->src_ids, a->src_pos, Ns) < 0)
        return -1;
    return 0;
}

/* model_step and model_score: the forward pass over BR, its loss and, when BACKWARD, the backward
 * pass; SENT_NLL (B) as model_score's when not NULL. 0 or -1. */
static int step_impl(struct model *m, const struct batch_record *br, int train, int backward, uint64_t dropout_seed,
                     struct model_loss *out, float *logits_host, double *sent_nll)
{
    memset(out, 0, sizeof *out);
    if (backward && !m->training)
        return nmt_seterr("model was not created for training");
    if (weights_whole(m) < 0)
        return -1;
    int Nr = 0;
    int64_t nsrc = 0;
    m->run.train = train;
    m->run.seed = dropout_seed;
    m->run.ctr = 0;
    if (prepare_batch(m, br, &Nr, &nsrc) < 0)
        return -1;
    /* the precision is the context's: another model or decoder may share it */
    if (m->k->set_precision && nn_bk(&m->run, m->k->set_precision(m->ctx, m->precision), "set_precision") < 0)
        return -1;
    struct acts *a = &m->a;
    const float *mem, *y;
    if (nn_encoder(&m->run, &m->w, &a->e, a->src_ids, a->src_pos, a->src_len, a->B, a->S, &mem) < 0 ||
        decoder_fwd(m, mem, &y) < 0 || output_loss(m, y, backward, out, logits_host, sent_nll != NULL) < 0)
        return -1;
    out->src_tokens = nsrc;
    if (sent_nll && sentence_nll(m, br, sent_nll) < 0)
        return -1;
    if (!backward)
        return 0;
    m->next_bucket = 0;
    if (decoder_bwd(m, mem, a->dxs) < 0 || encoder_bwd(m, a->dxs) < 0)
        return -1;
    if (bucket_done(m) < 0) /* the embedding: the encoder's embedding backward was the last to add */
        return -1;
    return m->c.tie != MODEL_TIE_ALL || m->c.output_bias ? bucket_done(m) : 0; /* the tensors after it */
}

int model_params_finite(struct model *m)
{
    double ss;
    if (weights_whole(m) < 0)
        return -1;
    if (nn_bk(&m->run, m->k->sumsq(m->ctx, &ss, m->params, m->np), "sumsq") < 0)
        return -1;
    return isfinite(ss) ? 1 : 0;
}

int model_zero_grad(struct model *m)
{
    return nn_bk(&m->run, m->k->memset_zero(m->ctx, m->grads, m->np * sizeof(float)), "memset");
}

int model_grad_sumsq(struct model *m, double *out)
{
    return nn_bk(&m->run, m->k->sumsq(m->ctx, out, m->grads, m->np), "sumsq");
}

int model_adam(struct model *m, float lr, int64_t t, float grad_scale, float beta1, float beta2, float eps)
{
    if (weights_whole(m) < 0)
        return -1;
    if (nn_bk(&m->run,
              m->k->adam_update(m->ctx, m->params, m->adam_m, m->adam_v, m->grads, m->np, lr, beta1, beta2, eps, t,
                                grad_scale),
              "adam_update") < 0)
        return -1;
    return wbf_refresh(m);
}

int model_freeze(struct model *m, const char *const *prefixes, int n)
{
    if (!m->training)
        return nmt_seterr("model has no optimizer state");
    int count = 0;
    for (size_t i = 0; i < m->ntab; i++) {
        const struct model_param *p = &m->tab[i];
        int hit = 0;
        for (int k = 0; k < n && !hit; k++)
            hit = !strncmp(p->name, prefixes[k], strlen(prefixes[k]));
        if (!hit || !p->size)
            continue;
        size_t *r = realloc(m->frozen, (size_t)(m->nfrozen + 1) * 2 * sizeof *r);
        if (!r)
            return nmt_seterr("out of memory");
        m->frozen = r;
        r[2 * m->nfrozen] = p->offset, r[2 * m->nfrozen + 1] = p->size;
        m->nfrozen++, count++;
        size_t off = p->offset * sizeof(float), len = p->size * sizeof(float);
        if (nn_bk(&m->run, m->k->memset_zero(m->ctx, (char *)m->adam_m + off, len), "memset") < 0 ||
            nn_bk(&m->run, m->k->memset_zero(m->ctx, (char *)m->adam_v + off, len), "memset") < 0)
            return -1;
    }
    return count;
}

int model_update(struct model *m, const struct adam_opts *adam, float lr, int64_t t, int64_t tokens, double clip,
                 double *gnorm)
{
    double ss;
    for (int i = 0; i < m->nfrozen; i++) /* frozen: no gradient, so Adam leaves them as they are */
        if (nn_bk(&m->run, m->k->memset_zero(m->ctx, m->grads + m->frozen[2 * i], m->frozen[2 * i + 1] * sizeof(float)),
                  "memset") < 0)
            return -1;
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
    return model_adam(m, lr, t, (float)s, adam->beta1, adam->beta2, adam->eps);
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
    return nn_bk(&a->m->run, a->m->k->download(a->m->ctx, dst, (const char *)a->dev + offset, n), "download");
}

int model_save(struct model *m, struct st_writer *w, int opt)
{
    if (opt && !m->training)
        return nmt_seterr("model has no optimizer state");
    if (weights_whole(m) < 0)
        return -1;
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

/* model_load; CONSUME (F itself, or NULL) gives back each tensor's bytes once uploaded
 * (model_load_consume), in pieces of at least CONSUME_STEP bytes of adjacent tensors but the last
 * (the caller frees F next). */
#define CONSUME_STEP ((size_t)4 << 20)
static int load_impl(struct model *m, const struct st_file *f, int opt, struct st_file *consume,
                     const struct model_range *r, size_t nr);

int model_load(struct model *m, const struct st_file *f, int opt) { return load_impl(m, f, opt, NULL, NULL, 0); }

int model_load_consume(struct model *m, struct st_file *f) { return load_impl(m, f, 0, f, NULL, 0); }

int model_load_except(struct model *m, struct st_file *f, int consume, const struct model_range *r, size_t nr)
{
    return load_impl(m, f, 0, consume ? f : NULL, r, nr);
}

/* Whether the NR ranges R cover the parameters of P whole (ranges do not overlap). */
static int covered(const struct model *m, const struct model_param *p, const struct model_range *r, size_t nr)
{
    const float *lo = m->params + p->offset, *hi = lo + p->size;
    size_t n = 0;
    for (size_t i = 0; i < nr; i++)
        if (r[i].w >= lo && r[i].w < hi && r[i].n <= (size_t)(hi - r[i].w))
            n += r[i].n;
    return p->size > 0 && n == p->size;
}

/* Whether T of F holds the P's values: float32, or an int8 matrix of its shape (read as float32 by
 * checkpoint_read_f32); else -1 with the error set. */
static int tensor_holds(const struct model_param *p, const struct st_tensor *t)
{
    if (t->dtype == ST_F32 ? t->nbytes == (uint64_t)p->size * sizeof(float)
                           : t->dtype == ST_I8 && p->ndim == 2 && t->nbytes == (uint64_t)p->size)
        return 0;
    return nmt_seterr("checkpoint tensor '%s' is not %zu float32 values", p->name, (size_t)p->size);
}

size_t model_file_int8_max(const struct model *m, const struct st_file *f)
{
    size_t most = 0;
    for (size_t i = 0; i < m->ntab; i++) {
        const struct st_tensor *t = st_find(f, m->tab[i].name);
        if (t && t->dtype == ST_I8 && t->nbytes > most)
            most = (size_t)t->nbytes;
    }
    return most;
}

const void *model_file_floats(const struct model *m, const struct st_file *f, const float *w, size_t n, float *tmp,
                              const void **file_bytes, size_t *file_len)
{
    for (size_t i = 0; i < m->ntab; i++) {
        const struct model_param *p = &m->tab[i];
        const float *lo = m->params + p->offset;
        if (w < lo || w >= lo + p->size || n > (size_t)(lo + p->size - w))
            continue;
        const struct st_tensor *t = st_find(f, p->name);
        if (!t)
            return nmt_seterr("checkpoint lacks tensor '%s'", p->name), NULL;
        if (tensor_holds(p, t) < 0)
            return NULL;
        size_t first = (size_t)(w - lo), size = t->dtype == ST_I8 ? 1 : sizeof(float);
        *file_bytes = (const unsigned char *)t->data + first * size;
        *file_len = n * size;
        if (t->dtype == ST_F32)
            return *file_bytes;
        if (!tmp)
            return nmt_seterr("checkpoint tensor '%s' is int8: no room to read it as float32", p->name), NULL;
        return checkpoint_read_f32(f, t, first, n, tmp) < 0 ? NULL : tmp;
    }
    return nmt_seterr("%zu floats that are not all in one of the model's tensors", n), NULL;
}

static int load_impl(struct model *m, const struct st_file *f, int opt, struct st_file *consume,
                     const struct model_range *r, size_t nr)
{
    struct model_config c;
    if (model_config_load(&c, f) < 0)
        return -1;
    if (c.positions != m->c.positions || c.start_zero != m->c.start_zero || c.activation != m->c.activation ||
        c.tie != m->c.tie || c.output_bias != m->c.output_bias)
        return nmt_seterr("checkpoint holds a model of other options (positions %s, start embedding %s, activation %s, "
                          "tied embeddings %s, output bias %d; expected %s, %s, %s, %s, %d)",
                          model_positions_name(c.positions), model_start_name(c.start_zero),
                          model_activation_name(c.activation), model_tie_name(c.tie), c.output_bias,
                          model_positions_name(m->c.positions), model_start_name(m->c.start_zero),
                          model_activation_name(m->c.activation), model_tie_name(m->c.tie), m->c.output_bias);
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
    int rc = -1, left_out = 0;
    /* CONSUME: the file's bytes of the tensors uploaded so far that are not given back yet (one
     * run of adjacent tensors), given back in pieces of CONSUME_STEP or more: a few system calls */
    const unsigned char *run = NULL;
    size_t run_len = 0;
    if (consume && consume->nt && st_discard(consume, consume->t[0].data, 0) < 0) /* F must own its image */
        return -1;
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
        if (tensor_holds(p, t) < 0)
            goto out;
        if (nr && covered(m, p, r, nr)) { /* left in F for the caller; breaks a run of bytes to give back */
            left_out = 1;
            if (consume && run && st_discard(consume, run, run_len) < 0)
                goto out;
            run = NULL, run_len = 0;
            continue;
        }
        const void *src = t->data;
        if (t->dtype == ST_I8) { /* read as float32 through H, the size of the largest int8 tensor */
            if (!h && !(h = malloc(model_file_int8_max(m, f) * sizeof *h))) {
                nmt_seterr("out of memory");
                goto out;
            }
            if (checkpoint_read_f32(f, t, 0, p->size, h) < 0)
                goto out;
            src = h;
        }
        if (p->size && nn_bk(&m->run, m->k->upload(m->ctx, m->params + p->offset, src, p->size * sizeof(float)),
                             "upload") < 0)
            goto out;
        if (consume && run && (const unsigned char *)t->data == run + run_len) {
            run_len += (size_t)t->nbytes;
        } else if (consume) {
            if (run && st_discard(consume, run, run_len) < 0)
                goto out;
            run = t->data, run_len = (size_t)t->nbytes;
        }
        if (consume && run_len >= CONSUME_STEP) {
            if (st_discard(consume, run, run_len) < 0)
                goto out;
            run += run_len, run_len = 0;
        }
    }
    if (opt) {
        free(h);
        h = malloc(m->np * sizeof *h);
        if (!h) {
            nmt_seterr("out of memory");
            goto out;
        }
        if (st_get(f, "optim.adam_m", ST_F32, h, m->np) < 0 ||
            nn_bk(&m->run, m->k->upload(m->ctx, m->adam_m, h, m->np * sizeof(float)), "upload") < 0 ||
            st_get(f, "optim.adam_v", ST_F32, h, m->np) < 0 ||
            nn_bk(&m->run, m->k->upload(m->ctx, m->adam_v, h, m->np * sizeof(float)), "upload") < 0)
            goto out;
    }
    if (consume && run && st_discard(consume, run, run_len) < 0)
        goto out;
    m->discarded = left_out; /* every weight was uploaded, or some left out */
    rc = wbf_refresh(m);
out:
    free(h);
    return rc;
}
