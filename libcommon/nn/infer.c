/* infer.c: encoder forward and incremental decoder steps for inference (see infer.h). */
#include "nn/infer.h"
#include "io/records.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct enc_p {
    const float *qkv_w, *qkv_b, *o_w, *o_b, *w1, *b1, *w2, *b2, *ln1_g, *ln1_b, *ln2_g, *ln2_b;
};

struct dec_p {
    const float *sqkv_w, *sqkv_b, *so_w, *so_b, *cq_w, *cq_b, *ckv_w, *ckv_b, *co_w, *co_b, *w1, *b1, *w2, *b2;
    const float *ln1_g, *ln1_b, *ln2_g, *ln2_b, *ln3_g, *ln3_b;
};

/* A linear layer's weight W (out, kin) and its copy packed by the backend's linear_pack, which
 * linear_rowinv reads (made only when the backend has those slots). */
struct wt_entry {
    const float *w;
    const void *packed;
    int out, kin;
};

struct infer {
    struct backend *be;
    const struct nmt_backend *k;
    nmt_bctx *ctx;
    struct model *m;
    struct model_config c;
    int invariant;
    const float *emb;                /* (V, D) */
    struct enc_p *enc;               /* (Le) */
    struct dec_p *dec;               /* (Ld) */
    const float *enc_ln_g, *enc_ln_b, *dec_ln_g, *dec_ln_b; /* pre-norm only */
    struct wt_entry *wts;            /* (nwt) packed weights, in wt_buf */
    int nwt;
    char *wt_buf;                    /* device buffer of the packed weights */

    /* device arena, laid out per batch */
    char *arena;
    size_t arena_cap;
    int B, S, K, tmax, Rcap;         /* batch shape of the arena */
    float *ex, *et, *eq, *eatt, *esub, *eh;   /* encoder (B*S, D|3D|F) */
    int32_t *src_ids, *src_pos, *src_len;     /* (B*S), (B*S), (B) */
    float **ckv;                     /* (Ld) cross keys/values (B, S, 2D) of the live sentences */
    float *ckv_spare;                /* (B, S, 2D) */
    float **kv;                      /* (Ld) self keys/values (t, R, 2D) of the live rows */
    float *kv_spare;                 /* (tmax, Rcap, 2D) */
    float *x, *t, *q, *att, *sub, *h, *logits, *vals;  /* decoder (Rcap, D|F|V|topk) */
    int32_t *idx, *tok, *pos, *tgt;  /* (tmax*Rcap), (Rcap) x3 */
    float *lp;                       /* (Rcap) */
    float *padx, *pady;              /* (INFER_BLOCK, max(D, F)), (INFER_BLOCK, max(3D, F, V)) */
    int topk_cap;

    /* decoder state */
    int ns, R, time;                 /* live sentences, live rows, step */
    int32_t *host_len;               /* (B) source lengths of the live sentences (with EOS) */
    int32_t *host_ints;              /* (max(B*S*2, tmax*Rcap)) staging */
    size_t host_cap;

    /* infer_logits_at: device flat indices and gathered logits */
    int32_t *at_idx;
    float *at_val;
    size_t at_cap;
};

static int bk(struct infer *in, int rc, const char *what)
{
    if (rc < 0)
        return nmt_seterr("backend %s: %s: %s", in->k->name, what, in->k->last_error(in->ctx));
    return 0;
}

static const float *param(struct infer *in, const char *fmt, int l, int *bad)
{
    char name[64];
    snprintf(name, sizeof name, fmt, l);
    const struct model_param *tab;
    size_t n = model_params(in->m, &tab);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(tab[i].name, name))
            return model_param_data(in->m) + tab[i].offset;
    if (!*bad)
        nmt_seterr("model has no parameter '%s'", name);
    *bad = 1;
    return NULL;
}

void infer_free(struct infer *in)
{
    if (!in)
        return;
    if (in->k) {
        in->k->free(in->ctx, in->arena);
        in->k->free(in->ctx, in->wt_buf);
        in->k->free(in->ctx, in->at_idx);
        in->k->free(in->ctx, in->at_val);
    }
    free(in->wts);
    free(in->enc);
    free(in->dec);
    free(in->ckv);
    free(in->kv);
    free(in->host_len);
    free(in->host_ints);
    free(in);
}

/* Whether the backend has the three slots of its own linear layer for inference. */
static int has_linear_rowinv(const struct nmt_backend *k)
{
    return k->linear_packed_bytes && k->linear_pack && k->linear_rowinv;
}

/* Adds W (out, kin) to the table of weights to pack (filled in by pack_weights). */
static void wt_add(struct infer *in, const float *w, int out, int kin)
{
    in->wts[in->nwt++] = (struct wt_entry){ w, NULL, out, kin };
}

/* W (out, kin) as linear_pack left it, or NULL when it has no packed copy. */
static const void *wt_find(const struct infer *in, const float *w, int out)
{
    for (int i = 0; i < in->nwt; i++)
        if (in->wts[i].w == w && in->wts[i].out == out)
            return in->wts[i].packed;
    return NULL;
}

/* Packs every weight the products of inference read with the backend's linear_pack, once, into
 * one device buffer. 0, or -1 with the error set. */
static int pack_weights(struct infer *in)
{
    const struct model_config *c = &in->c;
    const struct nmt_backend *k = in->k;
    int D = c->d_model, F = c->ff, Le = c->enc_layers, Ld = c->dec_layers;
    in->wts = calloc((size_t)(4 * Le + 8 * Ld + 1), sizeof *in->wts);
    if (!in->wts)
        return nmt_seterr("out of memory");
    for (int l = 0; l < Le; l++) {
        const struct enc_p *e = &in->enc[l];
        wt_add(in, e->qkv_w, 3 * D, D);
        wt_add(in, e->o_w, D, D);
        wt_add(in, e->w1, F, D);
        wt_add(in, e->w2, D, F);
    }
    for (int l = 0; l < Ld; l++) {
        const struct dec_p *d = &in->dec[l];
        wt_add(in, d->sqkv_w, D, D);                             /* the queries' rows of qkv */
        wt_add(in, d->sqkv_w + (size_t)D * (size_t)D, 2 * D, D); /* the keys' and values' rows */
        wt_add(in, d->so_w, D, D);
        wt_add(in, d->cq_w, D, D);
        wt_add(in, d->ckv_w, 2 * D, D);
        wt_add(in, d->co_w, D, D);
        wt_add(in, d->w1, F, D);
        wt_add(in, d->w2, D, F);
    }
    wt_add(in, in->emb, c->vocab, D); /* the tied output projection */
    size_t total = 0;
    for (int i = 0; i < in->nwt; i++)
        total += (k->linear_packed_bytes(in->ctx, in->wts[i].out, in->wts[i].kin) + 63) & ~(size_t)63;
    in->wt_buf = k->alloc(in->ctx, total);
    if (!in->wt_buf)
        return nmt_seterr("cannot allocate %zu MB for the packed weights on backend %s: %s", total >> 20, k->name,
                          k->last_error(in->ctx));
    size_t off = 0;
    for (int i = 0; i < in->nwt; i++) {
        struct wt_entry *e = &in->wts[i];
        if (bk(in, k->linear_pack(in->ctx, in->wt_buf + off, e->w, e->out, e->kin, e->kin), "linear_pack") < 0)
            return -1;
        e->packed = in->wt_buf + off;
        off += (k->linear_packed_bytes(in->ctx, e->out, e->kin) + 63) & ~(size_t)63;
    }
    return 0;
}

struct infer *infer_new(struct backend *be, struct model *m, int invariant)
{
    struct infer *in = calloc(1, sizeof *in);
    if (!in)
        return nmt_seterr("out of memory"), NULL;
    in->be = be;
    in->k = &be->ops;
    in->ctx = be->ctx;
    in->m = m;
    in->c = *model_config(m);
    in->invariant = invariant;
    int Le = in->c.enc_layers, Ld = in->c.dec_layers, bad = 0;
    in->enc = calloc((size_t)Le, sizeof *in->enc);
    in->dec = calloc((size_t)Ld, sizeof *in->dec);
    in->ckv = calloc((size_t)Ld, sizeof *in->ckv);
    in->kv = calloc((size_t)Ld, sizeof *in->kv);
    if (!in->enc || !in->dec || !in->ckv || !in->kv) {
        infer_free(in);
        return nmt_seterr("out of memory"), NULL;
    }
    in->emb = param(in, "emb.weight", 0, &bad);
    for (int l = 0; l < Le; l++) {
        struct enc_p *e = &in->enc[l];
        e->qkv_w = param(in, "enc.%d.att.qkv.weight", l, &bad);
        e->qkv_b = param(in, "enc.%d.att.qkv.bias", l, &bad);
        e->o_w = param(in, "enc.%d.att.o.weight", l, &bad);
        e->o_b = param(in, "enc.%d.att.o.bias", l, &bad);
        e->w1 = param(in, "enc.%d.ffn.w1.weight", l, &bad);
        e->b1 = param(in, "enc.%d.ffn.w1.bias", l, &bad);
        e->w2 = param(in, "enc.%d.ffn.w2.weight", l, &bad);
        e->b2 = param(in, "enc.%d.ffn.w2.bias", l, &bad);
        e->ln1_g = param(in, "enc.%d.ln1.weight", l, &bad);
        e->ln1_b = param(in, "enc.%d.ln1.bias", l, &bad);
        e->ln2_g = param(in, "enc.%d.ln2.weight", l, &bad);
        e->ln2_b = param(in, "enc.%d.ln2.bias", l, &bad);
    }
    for (int l = 0; l < Ld; l++) {
        struct dec_p *d = &in->dec[l];
        d->sqkv_w = param(in, "dec.%d.self_att.qkv.weight", l, &bad);
        d->sqkv_b = param(in, "dec.%d.self_att.qkv.bias", l, &bad);
        d->so_w = param(in, "dec.%d.self_att.o.weight", l, &bad);
        d->so_b = param(in, "dec.%d.self_att.o.bias", l, &bad);
        d->cq_w = param(in, "dec.%d.cross_att.q.weight", l, &bad);
        d->cq_b = param(in, "dec.%d.cross_att.q.bias", l, &bad);
        d->ckv_w = param(in, "dec.%d.cross_att.kv.weight", l, &bad);
        d->ckv_b = param(in, "dec.%d.cross_att.kv.bias", l, &bad);
        d->co_w = param(in, "dec.%d.cross_att.o.weight", l, &bad);
        d->co_b = param(in, "dec.%d.cross_att.o.bias", l, &bad);
        d->w1 = param(in, "dec.%d.ffn.w1.weight", l, &bad);
        d->b1 = param(in, "dec.%d.ffn.w1.bias", l, &bad);
        d->w2 = param(in, "dec.%d.ffn.w2.weight", l, &bad);
        d->b2 = param(in, "dec.%d.ffn.w2.bias", l, &bad);
        d->ln1_g = param(in, "dec.%d.ln1.weight", l, &bad);
        d->ln1_b = param(in, "dec.%d.ln1.bias", l, &bad);
        d->ln2_g = param(in, "dec.%d.ln2.weight", l, &bad);
        d->ln2_b = param(in, "dec.%d.ln2.bias", l, &bad);
        d->ln3_g = param(in, "dec.%d.ln3.weight", l, &bad);
        d->ln3_b = param(in, "dec.%d.ln3.bias", l, &bad);
    }
    if (in->c.pre_norm) {
        in->enc_ln_g = param(in, "enc_ln.weight", 0, &bad);
        in->enc_ln_b = param(in, "enc_ln.bias", 0, &bad);
        in->dec_ln_g = param(in, "dec_ln.weight", 0, &bad);
        in->dec_ln_b = param(in, "dec_ln.bias", 0, &bad);
    }
    if (bad || (invariant && has_linear_rowinv(in->k) && pack_weights(in) < 0)) {
        infer_free(in);
        return NULL;
    }
    return in;
}

/* ---------------------------------------------------------------------------------------------
 * arena */

struct bump {
    char *base;
    size_t off;
};

static void *bump(struct bump *b, size_t bytes)
{
    void *p = b->base ? b->base + b->off : NULL;
    b->off += (bytes + 63) & ~(size_t)63;
    return p;
}

static float *bf(struct bump *b, size_t n) { return bump(b, n * sizeof(float)); }
static int32_t *bi(struct bump *b, size_t n) { return bump(b, n * sizeof(int32_t)); }

static void arena_layout(struct infer *in, struct bump *b)
{
    size_t D = (size_t)in->c.d_model, F = (size_t)in->c.ff, V = (size_t)in->c.vocab;
    size_t Ns = (size_t)in->B * (size_t)in->S, R = (size_t)in->Rcap, T = (size_t)in->tmax;
    size_t kk = (size_t)in->topk_cap;
    in->ex = bf(b, Ns * D);
    in->et = bf(b, Ns * D);
    in->eq = bf(b, Ns * 3 * D);
    in->eatt = bf(b, Ns * D);
    in->esub = bf(b, Ns * D);
    in->eh = bf(b, Ns * F);
    in->src_ids = bi(b, Ns);
    in->src_pos = bi(b, Ns);
    in->src_len = bi(b, (size_t)in->B);
    for (int l = 0; l < in->c.dec_layers; l++)
        in->ckv[l] = bf(b, Ns * 2 * D);
    in->ckv_spare = bf(b, Ns * 2 * D);
    for (int l = 0; l < in->c.dec_layers; l++)
        in->kv[l] = bf(b, T * R * 2 * D);
    in->kv_spare = bf(b, T * R * 2 * D);
    in->x = bf(b, R * D);
    in->t = bf(b, R * D);
    in->q = bf(b, R * D);
    in->att = bf(b, R * D);
    in->sub = bf(b, R * D);
    in->h = bf(b, R * F);
    in->logits = bf(b, R * V);
    in->vals = bf(b, R * kk);
    in->idx = bi(b, T * R > R * kk ? T * R : R * kk);
    in->tok = bi(b, R);
    in->pos = bi(b, R);
    in->tgt = bi(b, R);
    in->lp = bf(b, R);
    size_t win = D > F ? D : F, wout = 3 * D;
    if (F > wout)
        wout = F;
    if (V > wout)
        wout = V;
    in->padx = bf(b, INFER_BLOCK * win);
    in->pady = bf(b, INFER_BLOCK * wout);
}

static int arena_prepare(struct infer *in)
{
    struct bump b = {NULL, 0};
    arena_layout(in, &b);
    if (b.off > in->arena_cap) {
        in->k->free(in->ctx, in->arena);
        in->arena = NULL;
        in->arena_cap = 0;
        size_t want = b.off + b.off / 4;
        in->arena = in->k->alloc(in->ctx, want);
        if (!in->arena)
            return nmt_seterr("cannot allocate decoder memory (%zu MB) on backend %s: %s", want >> 20, in->k->name,
                              in->k->last_error(in->ctx));
        in->arena_cap = want;
    }
    b = (struct bump){in->arena, 0};
    arena_layout(in, &b);
    return 0;
}

static int host_ints(struct infer *in, size_t n)
{
    if (n <= in->host_cap)
        return 0;
    int32_t *p = realloc(in->host_ints, n * sizeof *p);
    if (!p)
        return nmt_seterr("out of memory");
    in->host_ints = p;
    in->host_cap = n;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * building blocks */

/* y (N, out) = x (N, kin) W^T + b, W (out, kin), then ReLU if RELU. Invariant mode: the backend's
 * row-invariant linear layer (linear_rowinv, on W as linear_pack left it) or product (gemm_rowinv)
 * when it has one, else gemm on blocks of INFER_BLOCK rows, the last one padded through scratch;
 * either way each row's result is the same whatever N is. */
static int linear(struct infer *in, float *y, const float *x, const float *W, const float *bias, int relu, int N,
                  int out, int kin)
{
    const struct nmt_backend *k = in->k;
    const void *wp = in->invariant ? wt_find(in, W, out) : NULL;
    if (wp)
        return bk(in, k->linear_rowinv(in->ctx, N, out, kin, x, kin, wp, bias, relu, y, out), "linear_rowinv");
    if (in->invariant && k->gemm_rowinv) {
        if (bk(in, k->gemm_rowinv(in->ctx, N, out, kin, 1.0f, x, kin, W, kin, 0.0f, y, out), "gemm_rowinv") < 0)
            return -1;
    } else if (!in->invariant) {
        if (bk(in, k->gemm(in->ctx, 0, 1, N, out, kin, 1.0f, x, kin, W, kin, 0.0f, y, out), "gemm") < 0)
            return -1;
    } else {
        const int P = INFER_BLOCK;
        for (int r = 0; r < N; r += P) {
            int n = N - r < P ? N - r : P;
            const float *xr = x + (size_t)r * (size_t)kin;
            float *yr = y + (size_t)r * (size_t)out;
            if (n == P) {
                if (bk(in, k->gemm(in->ctx, 0, 1, P, out, kin, 1.0f, xr, kin, W, kin, 0.0f, yr, out), "gemm") < 0)
                    return -1;
                continue;
            }
            if (bk(in, k->copy(in->ctx, in->padx, xr, (size_t)n * (size_t)kin * sizeof(float)), "copy") < 0 ||
                bk(in, k->gemm(in->ctx, 0, 1, P, out, kin, 1.0f, in->padx, kin, W, kin, 0.0f, in->pady, out),
                   "gemm") < 0 ||
                bk(in, k->copy(in->ctx, yr, in->pady, (size_t)n * (size_t)out * sizeof(float)), "copy") < 0)
                return -1;
        }
    }
    if (bias && bk(in, k->bias_add(in->ctx, y, bias, N, out), "bias_add") < 0)
        return -1;
    return relu ? bk(in, k->relu_forward(in->ctx, y, y, (size_t)N * (size_t)out), "relu") : 0;
}

/* Start of a residual sublayer on X (N, D): returns its input (X, or LN(X) into T in pre-norm). */
static const float *res_begin(struct infer *in, float *t, const float *x, const float *g, const float *b, int N)
{
    if (!in->c.pre_norm)
        return x;
    if (bk(in, in->k->layernorm_forward(in->ctx, t, NULL, NULL, x, g, b, N, in->c.d_model, in->c.ln_eps),
           "layernorm_forward") < 0)
        return NULL;
    return t;
}

/* End of a residual sublayer: X = LN(X + SUB) (post-norm, through T) or X += SUB (pre-norm). */
static int res_end(struct infer *in, float *x, float *t, const float *sub, const float *g, const float *b, int N)
{
    size_t n = (size_t)N * (size_t)in->c.d_model;
    if (in->c.pre_norm)
        return bk(in, in->k->add(in->ctx, x, x, sub, n), "add");
    if (bk(in, in->k->add(in->ctx, t, x, sub, n), "add") < 0)
        return -1;
    return bk(in, in->k->layernorm_forward(in->ctx, x, NULL, NULL, t, g, b, N, in->c.d_model, in->c.ln_eps),
              "layernorm_forward");
}

static int ffn(struct infer *in, float *out, float *h, const float *sin, const float *w1, const float *b1,
               const float *w2, const float *b2, int N)
{
    int D = in->c.d_model, F = in->c.ff;
    if (linear(in, h, sin, w1, b1, 1, N, F, D) < 0)
        return -1;
    return linear(in, out, h, w2, b2, 0, N, D, F);
}

static struct nmt_attn_args attn(struct infer *in, int B, int Tq, int Tk)
{
    struct nmt_attn_args a;
    memset(&a, 0, sizeof a);
    a.B = B;
    a.Tq = Tq;
    a.Tk = Tk;
    a.H = in->c.heads;
    a.dh = in->c.d_model / in->c.heads;
    a.scale = 1.0f / sqrtf((float)a.dh);
    return a;
}

/* ---------------------------------------------------------------------------------------------
 * encoder */

/* Sets the batch shape the arena is laid out for. */
static void set_shape(struct infer *in, int B, int S, int K, int tmax)
{
    in->B = B;
    in->S = S;
    in->K = K;
    in->tmax = tmax;
    in->Rcap = B * K;
    in->topk_cap = 4 * K; /* beam search's 2K, and an ensemble's members' 4K */
    if (in->topk_cap > in->c.vocab)
        in->topk_cap = in->c.vocab;
}

int infer_reserve(struct infer *in, int B, int S, int K, int tmax)
{
    if (B < 1 || S < 1 || K < 1 || tmax < 1)
        return nmt_seterr("reserve: empty batch shape (B=%d S=%d K=%d T=%d)", B, S, K, tmax);
    set_shape(in, B, S, K, tmax);
    in->ns = in->R = 0; /* no batch is under way until the next infer_encode */
    return arena_prepare(in);
}

int infer_encode(struct infer *in, int B, const uint32_t *const *src, const int *len, int K, int tmax)
{
    const struct model_config *c = &in->c;
    int S = 1;
    if (B < 1 || K < 1 || tmax < 1)
        return nmt_seterr("empty batch");
    for (int b = 0; b < B; b++) {
        if (len[b] < 0 || len[b] + 1 > c->max_len)
            return nmt_seterr("sentence of %d tokens exceeds the model's maximum length %d", len[b] + 1, c->max_len);
        if (len[b] + 1 > S)
            S = len[b] + 1;
    }
    set_shape(in, B, S, K, tmax);
    if (arena_prepare(in) < 0)
        return -1;
    int D = c->d_model, V = c->vocab, Ns = B * S;
    size_t Ns_ = (size_t)Ns;
    if (host_ints(in, 2 * Ns_ + (size_t)B) < 0 || host_ints(in, (size_t)tmax * (size_t)in->Rcap) < 0)
        return -1;
    free(in->host_len);
    in->host_len = malloc((size_t)B * sizeof *in->host_len);
    if (!in->host_len)
        return nmt_seterr("out of memory");
    int32_t *ids = in->host_ints, *pos = ids + Ns_;
    for (int b = 0; b < B; b++) {
        for (int j = 0; j < S; j++) {
            size_t r = (size_t)b * (size_t)S + (size_t)j;
            int32_t id = j < len[b] ? (int32_t)src[b][j] : j == len[b] ? NMT_EOS : 0;
            if (j < len[b] && src[b][j] >= (uint32_t)V)
                return nmt_seterr("source id %u outside the vocabulary of %d", src[b][j], V);
            ids[r] = id;
            pos[r] = j <= len[b] ? j : -1;
        }
        in->host_len[b] = len[b] + 1;
    }
    const struct nmt_backend *k = in->k;
    if (bk(in, k->upload(in->ctx, in->src_ids, ids, Ns_ * sizeof(int32_t)), "upload") < 0 ||
        bk(in, k->upload(in->ctx, in->src_pos, pos, Ns_ * sizeof(int32_t)), "upload") < 0 ||
        bk(in, k->upload(in->ctx, in->src_len, in->host_len, (size_t)B * sizeof(int32_t)), "upload") < 0)
        return -1;
    if (bk(in, k->embedding_forward(in->ctx, in->ex, in->src_ids, in->src_pos, in->emb, Ns, D, V, sqrtf((float)D)),
           "embedding_forward") < 0)
        return -1;
    for (int l = 0; l < c->enc_layers; l++) {
        const struct enc_p *e = &in->enc[l];
        const float *sin = res_begin(in, in->et, in->ex, e->ln1_g, e->ln1_b, Ns);
        if (!sin || linear(in, in->eq, sin, e->qkv_w, e->qkv_b, 0, Ns, 3 * D, D) < 0)
            return -1;
        struct nmt_attn_args a = attn(in, B, S, S);
        a.q_ld = a.k_ld = a.v_ld = 3 * D;
        a.q_bs = a.k_bs = a.v_bs = (int64_t)3 * D * S;
        a.o_ld = D;
        a.o_bs = (int64_t)D * S;
        a.klen = in->src_len;
        if (bk(in, k->attention_forward(in->ctx, in->eatt, NULL, in->eq, in->eq + D, in->eq + 2 * D, &a),
               "attention_forward") < 0 ||
            linear(in, in->esub, in->eatt, e->o_w, e->o_b, 0, Ns, D, D) < 0 ||
            res_end(in, in->ex, in->et, in->esub, e->ln1_g, e->ln1_b, Ns) < 0)
            return -1;
        sin = res_begin(in, in->et, in->ex, e->ln2_g, e->ln2_b, Ns);
        if (!sin || ffn(in, in->esub, in->eh, sin, e->w1, e->b1, e->w2, e->b2, Ns) < 0 ||
            res_end(in, in->ex, in->et, in->esub, e->ln2_g, e->ln2_b, Ns) < 0)
            return -1;
    }
    const float *mem = in->ex;
    if (c->pre_norm) {
        if (bk(in, k->layernorm_forward(in->ctx, in->et, NULL, NULL, in->ex, in->enc_ln_g, in->enc_ln_b, Ns, D,
                                        c->ln_eps),
               "layernorm_forward") < 0)
            return -1;
        mem = in->et;
    }
    for (int l = 0; l < c->dec_layers; l++)
        if (linear(in, in->ckv[l], mem, in->dec[l].ckv_w, in->dec[l].ckv_b, 0, Ns, 2 * D, D) < 0)
            return -1;
    in->ns = B;
    in->R = B * K;
    in->time = 0;
    return 0;
}

const struct model_config *infer_config(const struct infer *in) { return &in->c; }
int infer_rows(const struct infer *in) { return in->R; }
int infer_time(const struct infer *in) { return in->time; }

/* ---------------------------------------------------------------------------------------------
 * decoder */

int infer_step(struct infer *in, const int32_t *tok, int topk, float *vals, int32_t *idx, const int32_t *tgt,
               float *lp)
{
    const struct model_config *c = &in->c;
    const struct nmt_backend *k = in->k;
    int D = c->d_model, V = c->vocab, R = in->R, t = in->time, K = in->K;
    if (t >= in->tmax)
        return nmt_seterr("decoder step %d past the prepared length %d", t, in->tmax);
    if (topk > in->topk_cap)
        return nmt_seterr("top-%d asked, at most %d prepared", topk, in->topk_cap);
    int32_t *hp = in->host_ints;
    for (int r = 0; r < R; r++) {
        if (tok[r] < 0 || tok[r] >= V)
            return nmt_seterr("token id %d outside the vocabulary of %d", tok[r], V);
        hp[r] = t;
    }
    if (bk(in, k->upload(in->ctx, in->tok, tok, (size_t)R * sizeof(int32_t)), "upload") < 0 ||
        bk(in, k->upload(in->ctx, in->pos, hp, (size_t)R * sizeof(int32_t)), "upload") < 0 ||
        bk(in, k->embedding_forward(in->ctx, in->x, in->tok, in->pos, in->emb, R, D, V, sqrtf((float)D)),
           "embedding_forward") < 0)
        return -1;
    size_t slot = (size_t)R * 2 * (size_t)D; /* floats per time step of a cache */
    for (int l = 0; l < c->dec_layers; l++) {
        const struct dec_p *d = &in->dec[l];
        float *cache = in->kv[l];
        /* causal self-attention over the cached keys/values of steps 0..t */
        const float *sin = res_begin(in, in->t, in->x, d->ln1_g, d->ln1_b, R);
        if (!sin || linear(in, in->q, sin, d->sqkv_w, d->sqkv_b, 0, R, D, D) < 0 ||
            linear(in, cache + (size_t)t * slot, sin, d->sqkv_w + (size_t)D * (size_t)D, d->sqkv_b + D, 0, R, 2 * D,
                   D) < 0)
            return -1;
        struct nmt_attn_args a = attn(in, R, 1, t + 1);
        a.q_ld = a.q_bs = a.o_ld = a.o_bs = D;
        a.k_ld = a.v_ld = (int64_t)slot;
        a.k_bs = a.v_bs = 2 * D;
        if (bk(in, k->attention_forward(in->ctx, in->att, NULL, in->q, cache, cache + D, &a), "attention_forward") <
                0 ||
            linear(in, in->sub, in->att, d->so_w, d->so_b, 0, R, D, D) < 0 ||
            res_end(in, in->x, in->t, in->sub, d->ln1_g, d->ln1_b, R) < 0)
            return -1;
        /* encoder-decoder attention: the K rows of a sentence are its K queries */
        sin = res_begin(in, in->t, in->x, d->ln2_g, d->ln2_b, R);
        if (!sin || linear(in, in->q, sin, d->cq_w, d->cq_b, 0, R, D, D) < 0)
            return -1;
        a = attn(in, in->ns, K, in->S);
        a.q_ld = a.o_ld = D;
        a.q_bs = a.o_bs = (int64_t)K * D;
        a.k_ld = a.v_ld = 2 * D;
        a.k_bs = a.v_bs = (int64_t)2 * D * in->S;
        a.klen = in->src_len;
        if (bk(in, k->attention_forward(in->ctx, in->att, NULL, in->q, in->ckv[l], in->ckv[l] + D, &a),
               "attention_forward") < 0 ||
            linear(in, in->sub, in->att, d->co_w, d->co_b, 0, R, D, D) < 0 ||
            res_end(in, in->x, in->t, in->sub, d->ln2_g, d->ln2_b, R) < 0)
            return -1;
        sin = res_begin(in, in->t, in->x, d->ln3_g, d->ln3_b, R);
        if (!sin || ffn(in, in->sub, in->h, sin, d->w1, d->b1, d->w2, d->b2, R) < 0 ||
            res_end(in, in->x, in->t, in->sub, d->ln3_g, d->ln3_b, R) < 0)
            return -1;
    }
    const float *y = in->x;
    if (c->pre_norm) {
        if (bk(in, k->layernorm_forward(in->ctx, in->t, NULL, NULL, in->x, in->dec_ln_g, in->dec_ln_b, R, D, c->ln_eps),
               "layernorm_forward") < 0)
            return -1;
        y = in->t;
    }
    if (linear(in, in->logits, y, in->emb, NULL, 0, R, V, D) < 0)
        return -1;
    if (topk > 0) {
        if (bk(in, k->topk_logsoftmax(in->ctx, in->vals, in->idx, in->logits, R, V, topk), "topk_logsoftmax") < 0 ||
            bk(in, k->download(in->ctx, vals, in->vals, (size_t)R * (size_t)topk * sizeof(float)), "download") < 0 ||
            bk(in, k->download(in->ctx, idx, in->idx, (size_t)R * (size_t)topk * sizeof(int32_t)), "download") < 0)
            return -1;
    }
    if (tgt) {
        struct nmt_xent_result xr;
        for (int r = 0; r < R; r++)
            if (tgt[r] < 0 || tgt[r] >= V)
                return nmt_seterr("target id %d outside the vocabulary of %d", tgt[r], V);
        if (bk(in, k->upload(in->ctx, in->tgt, tgt, (size_t)R * sizeof(int32_t)), "upload") < 0 ||
            bk(in, k->cross_entropy(in->ctx, &xr, NULL, in->lp, in->logits, in->tgt, R, V, 0.0f, NMT_PAD, 1.0f),
               "cross_entropy") < 0 ||
            bk(in, k->download(in->ctx, lp, in->lp, (size_t)R * sizeof(float)), "download") < 0)
            return -1;
        for (int r = 0; r < R; r++)
            lp[r] = -lp[r];
    }
    in->time = t + 1;
    return 0;
}

int infer_logits(struct infer *in, float *logits)
{
    if (in->time == 0 || in->R == 0)
        return nmt_seterr("no decoder step to read the logits of");
    return bk(in, in->k->download(in->ctx, logits, in->logits, (size_t)in->R * (size_t)in->c.vocab * sizeof(float)),
              "download");
}

int infer_logits_at(struct infer *in, int n, const int32_t *ids, int32_t *flat, float *out)
{
    const struct nmt_backend *k = in->k;
    int R = in->R, V = in->c.vocab;
    size_t N = (size_t)R * (size_t)n;
    if (in->time == 0 || R == 0)
        return nmt_seterr("no decoder step to read the logits of");
    if (N == 0)
        return 0;
    if ((size_t)R * (size_t)V > (size_t)INT32_MAX)
        return nmt_seterr("%d rows of %d logits are too many to index", R, V);
    if (N > in->at_cap) {
        k->free(in->ctx, in->at_idx);
        k->free(in->ctx, in->at_val);
        in->at_cap = 0;
        in->at_idx = k->alloc(in->ctx, N * sizeof(int32_t));
        in->at_val = in->at_idx ? k->alloc(in->ctx, N * sizeof(float)) : NULL;
        if (!in->at_idx || !in->at_val)
            return nmt_seterr("backend %s: alloc: %s", k->name, k->last_error(in->ctx));
        in->at_cap = N;
    }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < n; j++) {
            int32_t id = ids[(size_t)r * (size_t)n + (size_t)j];
            if (id < 0 || id >= V)
                return nmt_seterr("token id %d outside the vocabulary of %d", id, V);
            flat[(size_t)r * (size_t)n + (size_t)j] = r * V + id;
        }
    if (bk(in, k->upload(in->ctx, in->at_idx, flat, N * sizeof(int32_t)), "upload") < 0 ||
        bk(in, k->gather_rows(in->ctx, in->at_val, in->logits, in->at_idx, (int)N, 1), "gather_rows") < 0 ||
        bk(in, k->download(in->ctx, out, in->at_val, N * sizeof(float)), "download") < 0)
        return -1;
    return 0;
}

int infer_reorder(struct infer *in, int ns, const int *keep, const int *parent)
{
    const struct nmt_backend *k = in->k;
    int K = in->K, R = in->R, Rn = ns * K, t = in->time, D = in->c.d_model;
    if (ns < 0 || ns > in->ns)
        return nmt_seterr("reorder: %d sentences kept of %d", ns, in->ns);
    int same_sent = ns == in->ns, same_rows = Rn == R;
    for (int s = 0; s < ns; s++) {
        if (keep[s] < 0 || keep[s] >= in->ns || (s && keep[s] <= keep[s - 1]))
            return nmt_seterr("reorder: bad sentence index %d", keep[s]);
        same_sent &= keep[s] == s;
    }
    for (int i = 0; i < Rn; i++) {
        if (parent[i] < 0 || parent[i] >= R)
            return nmt_seterr("reorder: bad parent row %d", parent[i]);
        same_rows &= parent[i] == i;
    }
    if (ns == 0) {
        in->ns = in->R = 0;
        return 0;
    }
    int32_t *h = in->host_ints;
    if (!same_sent) {
        for (int s = 0; s < ns; s++)
            h[s] = keep[s];
        if (bk(in, k->upload(in->ctx, in->idx, h, (size_t)ns * sizeof(int32_t)), "upload") < 0)
            return -1;
        int64_t row = (int64_t)in->S * 2 * D;
        for (int l = 0; l < in->c.dec_layers; l++) {
            if (bk(in, k->gather_rows(in->ctx, in->ckv_spare, in->ckv[l], in->idx, ns, row), "gather_rows") < 0)
                return -1;
            float *tmp = in->ckv[l];
            in->ckv[l] = in->ckv_spare;
            in->ckv_spare = tmp;
        }
        for (int s = 0; s < ns; s++)
            h[s] = in->host_len[keep[s]];
        for (int s = 0; s < ns; s++)
            in->host_len[s] = h[s];
        if (bk(in, k->upload(in->ctx, in->src_len, in->host_len, (size_t)ns * sizeof(int32_t)), "upload") < 0)
            return -1;
    }
    if (!(same_sent && same_rows) && t > 0) {
        /* cache row (j, i) of the new layout = row (j, parent[i]) of the old one */
        for (int j = 0; j < t; j++)
            for (int i = 0; i < Rn; i++)
                h[(size_t)j * (size_t)Rn + (size_t)i] = (int32_t)((size_t)j * (size_t)R + (size_t)parent[i]);
        if (bk(in, k->upload(in->ctx, in->idx, h, (size_t)t * (size_t)Rn * sizeof(int32_t)), "upload") < 0)
            return -1;
        for (int l = 0; l < in->c.dec_layers; l++) {
            if (bk(in, k->gather_rows(in->ctx, in->kv_spare, in->kv[l], in->idx, t * Rn, 2 * D), "gather_rows") < 0)
                return -1;
            float *tmp = in->kv[l];
            in->kv[l] = in->kv_spare;
            in->kv_spare = tmp;
        }
    }
    in->ns = ns;
    in->R = Rn;
    return 0;
}
