/* blocks.c: the Transformer's forward blocks shared by training and decoding (see blocks.h). */
#include "nn/blocks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int nn_check_backend(const struct nmt_backend *k, const struct model_config *c)
{
    const char *need = NULL;
    if (c->positions != MODEL_POS_PAPER)
        need = "positions marian";
    else if (c->start_zero)
        need = "start embedding zero";
    if (need && !(k->embedding_table_forward && k->embedding_table_backward))
        return nmt_seterr("backend %s cannot run a model with %s (its plugin lacks the embedding_table slots of "
                          "ABI 2.5)",
                          k->name, need);
    if (c->activation == MODEL_ACT_SWISH && !(k->swish_forward && k->swish_backward))
        return nmt_seterr("backend %s cannot run a model with activation swish (its plugin lacks the swish slots of "
                          "ABI 2.5)",
                          k->name);
    return 0;
}

/* Rows of the position table nn_pe_table computes and uploads at a time: 64 KiB of them (a whole
 * table on the host would stay in the C library's heap after it is freed). */
static int pe_chunk_rows(int D) { return D >= 16384 ? 1 : 16384 / D; }

float *nn_pe_table(const struct nmt_backend *k, nmt_bctx *ctx, const struct model_config *c, int *err)
{
    *err = 0;
    if (!model_needs_pe_table(c))
        return NULL;
    *err = -1;
    size_t D = (size_t)c->d_model;
    int rows = pe_chunk_rows(c->d_model);
    float *h = malloc((size_t)rows * D * sizeof *h);
    if (!h)
        return nmt_seterr("out of memory"), NULL;
    float *d = k->alloc(ctx, (size_t)c->max_len * D * sizeof *d);
    if (!d) {
        free(h);
        return nmt_seterr("cannot allocate the position table on backend %s: %s", k->name, k->last_error(ctx)), NULL;
    }
    for (int p = 0; p < c->max_len; p += rows) {
        int n = c->max_len - p < rows ? c->max_len - p : rows;
        model_position_rows(c, h, p, n);
        if (k->upload(ctx, d + (size_t)p * D, h, (size_t)n * D * sizeof *d) < 0) {
            nmt_seterr("backend %s: upload: %s", k->name, k->last_error(ctx));
            k->free(ctx, d);
            free(h);
            return NULL;
        }
    }
    free(h);
    *err = 0;
    return d;
}

int nn_linear_gemm(struct nn_exec *e, float *y, const float *x, const float *W, const float *bias, int relu, int N,
                   int out, int in)
{
    if (e->wbf) {
        if (nn_bk(e, e->k->gemm_ex(e->ctx, 0, 1, N, out, in, 1.0f, x, NMT_DTYPE_F32, in, nn_wbf(e, W), NMT_DTYPE_BF16,
                                   in, 0.0f, y, out),
                  "gemm_ex") < 0)
            return -1;
    } else if (nn_bk(e, e->k->gemm(e->ctx, 0, 1, N, out, in, 1.0f, x, in, W, in, 0.0f, y, out), "gemm") < 0) {
        return -1;
    }
    if (bias && nn_bk(e, e->k->bias_add(e->ctx, y, bias, N, out), "bias_add") < 0)
        return -1;
    return relu ? nn_bk(e, e->k->relu_forward(e->ctx, y, y, (size_t)N * (size_t)out), "relu") : 0;
}

uint64_t nn_take_ctr(struct nn_exec *e, size_t n)
{
    uint64_t o = e->ctr;
    e->ctr += n;
    return o;
}

int nn_dropout(struct nn_exec *e, float *x, size_t n, float p, uint64_t *off)
{
    if (!e->train || p <= 0)
        return 0;
    uint64_t o = nn_take_ctr(e, n);
    if (off)
        *off = o;
    return nn_bk(e, e->k->dropout_forward(e->ctx, x, x, n, p, e->seed, o), "dropout_forward");
}

/* nn_embed's embedding of N rows from E->emb_packed (see struct nn_exec): the rows' values, then
 * the positions, as embedding(_table)_forward computes them from the table. */
static int embed_packed(struct nn_exec *e, float *x, const int32_t *ids, const int32_t *pos, int N)
{
    int D = e->c->d_model;
    for (int i = 0; i < N; i += e->emb_chunk) {
        int n = N - i < e->emb_chunk ? N - i : e->emb_chunk;
        float *xi = x + (size_t)i * (size_t)D;
        if (nn_bk(e, e->k->linear_rows(e->ctx, e->emb_scratch, e->emb_packed, ids + i, n), "linear_rows") < 0)
            return -1;
        /* a row of ids < 0 (the zero start) is zeros in the scratch: its embedding is its position's */
        int rc = e->pe ? e->k->embedding_table_forward(e->ctx, xi, e->emb_iota, pos + i, e->emb_scratch, e->pe, n, D, n,
                                                       e->c->max_len, sqrtf((float)D))
                       : e->k->embedding_forward(e->ctx, xi, e->emb_iota, pos + i, e->emb_scratch, n, D, n,
                                                 sqrtf((float)D));
        if (nn_bk(e, rc, e->pe ? "embedding_table_forward" : "embedding_forward") < 0)
            return -1;
    }
    return 0;
}

int nn_embed(struct nn_exec *e, float *x, const int32_t *ids, const int32_t *pos, const float *emb, int N,
             uint64_t *drop_off)
{
    int D = e->c->d_model;
    if (e->emb_packed && emb == e->emb_table) {
        if (embed_packed(e, x, ids, pos, N) < 0)
            return -1;
    } else if (e->pe) {
        if (nn_bk(e, e->k->embedding_table_forward(e->ctx, x, ids, pos, emb, e->pe, N, D, e->c->vocab, e->c->max_len,
                                                   sqrtf((float)D)),
                  "embedding_table_forward") < 0)
            return -1;
    } else if (nn_bk(e, e->k->embedding_forward(e->ctx, x, ids, pos, emb, N, D, e->c->vocab, sqrtf((float)D)),
                     "embedding_forward") < 0) {
        return -1;
    }
    return nn_dropout(e, x, (size_t)N * (size_t)D, e->c->dropout, drop_off);
}

int nn_layernorm(struct nn_exec *e, float *y, float *mean, float *rstd, const float *x, const float *g,
                 const float *b, int N)
{
    return nn_bk(e, e->k->layernorm_forward(e->ctx, y, mean, rstd, x, g, b, N, e->c->d_model, e->c->ln_eps),
                 "layernorm_forward");
}

const float *nn_res_begin(struct nn_exec *e, struct nn_sub *s, const float *xin, const float *g, const float *b,
                          int N)
{
    if (!e->c->pre_norm)
        return xin;
    return nn_layernorm(e, s->t, s->mean, s->rstd, xin, g, b, N) < 0 ? NULL : s->t;
}

int nn_res_end(struct nn_exec *e, struct nn_sub *s, const float *xin, float *sub, const float *g, const float *b,
               int N)
{
    size_t n = (size_t)N * (size_t)e->c->d_model;
    if (nn_dropout(e, sub, n, e->c->dropout, &s->drop_off) < 0)
        return -1;
    if (e->c->pre_norm)
        return nn_bk(e, e->k->add(e->ctx, s->x, xin, sub, n), "add");
    if (nn_bk(e, e->k->add(e->ctx, s->t, xin, sub, n), "add") < 0)
        return -1;
    return nn_layernorm(e, s->x, s->mean, s->rstd, s->t, g, b, N);
}

struct nmt_attn_args nn_attn_args(const struct nn_exec *e, int B, int Tq, int Tk, int64_t q_ld, int64_t kv_ld,
                                  const int32_t *klen, int causal)
{
    struct nmt_attn_args a;
    memset(&a, 0, sizeof a);
    int D = e->c->d_model;
    a.B = B;
    a.Tq = Tq;
    a.Tk = Tk;
    a.H = e->c->heads;
    a.dh = D / e->c->heads;
    a.q_ld = q_ld;
    a.q_bs = q_ld * Tq;
    a.k_ld = a.v_ld = kv_ld;
    a.k_bs = a.v_bs = kv_ld * Tk;
    a.o_ld = D;
    a.o_bs = (int64_t)D * Tq;
    a.klen = klen;
    a.causal = causal;
    a.scale = 1.0f / sqrtf((float)a.dh);
    a.dropout = e->train ? e->c->attn_dropout : 0;
    a.seed = e->seed;
    return a;
}

/* S->att = attention of S->q's queries over K, V with arguments A (dropout counters taken here). */
static int attend(struct nn_exec *e, struct nn_sub *s, struct nmt_attn_args *a, const float *k, const float *v)
{
    if (a->dropout > 0)
        a->offset = s->attn_off = nn_take_ctr(e, (size_t)a->B * a->H * (size_t)a->Tq * (size_t)a->Tk);
    if (!s->P && s->lse)
        return nn_bk(e, e->k->attention_forward_lse(e->ctx, s->att, s->lse, s->q, k, v, a), "attention_forward_lse");
    return nn_bk(e, e->k->attention_forward(e->ctx, s->att, s->P, s->q, k, v, a), "attention_forward");
}

int nn_self_attention(struct nn_exec *e, struct nn_sub *s, float *out, const float *sin, const float *qkv_w,
                      const float *qkv_b, const float *o_w, const float *o_b, int B, int T, const int32_t *klen,
                      int causal)
{
    int D = e->c->d_model, N = B * T;
    if (e->linear(e, s->q, sin, qkv_w, qkv_b, 0, N, 3 * D, D) < 0)
        return -1;
    struct nmt_attn_args a = nn_attn_args(e, B, T, T, 3 * D, 3 * D, klen, causal);
    if (attend(e, s, &a, s->q + D, s->q + 2 * D) < 0)
        return -1;
    return e->linear(e, out, s->att, o_w, o_b, 0, N, D, D);
}

int nn_cross_attention(struct nn_exec *e, struct nn_sub *s, float *out, const float *sin, const float *kv,
                       const struct dec_layer_weights *w, int B, int Tq, int Tk, const int32_t *klen,
                       const int32_t *rows)
{
    int D = e->c->d_model, N = B * Tq;
    if (e->linear(e, s->q, sin, w->cq_w, w->cq_b, 0, N, D, D) < 0)
        return -1;
    struct nmt_attn_args a = nn_attn_args(e, B, Tq, Tk, D, 2 * D, klen, 0);
    if (rows) { /* key j of item b: kv row rows[b * Tk + j] */
        a.k_bs = a.v_bs = 2 * D;
        a.k_ld = a.v_ld = 0;
        if (nn_bk(e, e->k->attention_forward_rows(e->ctx, s->att, s->q, kv, kv + D, &a, rows, Tk),
                  "attention_forward_rows") < 0)
            return -1;
    } else if (attend(e, s, &a, kv, kv + D) < 0) {
        return -1;
    }
    return e->linear(e, out, s->att, w->co_w, w->co_b, 0, N, D, D);
}

int nn_ffn(struct nn_exec *e, struct nn_sub *s, float *out, float *act, const float *sin, const float *w1,
           const float *b1, const float *w2, const float *b2, int N)
{
    int D = e->c->d_model, F = e->c->ff;
    size_t n = (size_t)N * (size_t)F;
    if (e->c->activation == MODEL_ACT_SWISH) {
        float *u = s->u ? s->u : s->h;
        if (e->linear(e, u, sin, w1, b1, 0, N, F, D) < 0 ||
            nn_bk(e, e->k->swish_forward(e->ctx, s->h, u, n), "swish_forward") < 0)
            return -1;
    } else if (e->linear(e, s->h, sin, w1, b1, 1, N, F, D) < 0) {
        return -1;
    }
    const float *hd = s->h;
    if (e->train && e->c->act_dropout > 0) {
        s->act_off = nn_take_ctr(e, n);
        if (nn_bk(e, e->k->dropout_forward(e->ctx, act, s->h, n, e->c->act_dropout, e->seed, s->act_off),
                  "dropout_forward") < 0)
            return -1;
        hd = act;
    }
    return e->linear(e, out, hd, w2, b2, 0, N, D, F);
}

int nn_encoder(struct nn_exec *e, const struct model_weights *w, struct nn_encoder_acts *a, const int32_t *ids,
               const int32_t *pos, const int32_t *len, int B, int S, const float **mem)
{
    int Ns = B * S;
    if (nn_embed(e, a->x, ids, pos, w->emb, Ns, &a->x_drop_off) < 0) /* the source embedding */
        return -1;
    const float *x = a->x;
    for (int l = 0; l < e->c->enc_layers; l++) {
        const struct enc_layer_weights *ew = &w->enc[l];
        struct nn_enc_act *ea = &a->layer[l];
        const float *sin = nn_res_begin(e, &ea->sa, x, ew->ln1_g, ew->ln1_b, Ns);
        if (!sin ||
            nn_self_attention(e, &ea->sa, a->sub, sin, ew->qkv_w, ew->qkv_b, ew->o_w, ew->o_b, B, S, len, 0) < 0 ||
            nn_res_end(e, &ea->sa, x, a->sub, ew->ln1_g, ew->ln1_b, Ns) < 0)
            return -1;
        x = ea->sa.x;
        sin = nn_res_begin(e, &ea->ff, x, ew->ln2_g, ew->ln2_b, Ns);
        if (!sin || nn_ffn(e, &ea->ff, a->sub, a->act, sin, ew->w1, ew->b1, ew->w2, ew->b2, Ns) < 0 ||
            nn_res_end(e, &ea->ff, x, a->sub, ew->ln2_g, ew->ln2_b, Ns) < 0)
            return -1;
        x = ea->ff.x;
    }
    *mem = x;
    if (e->c->pre_norm) {
        if (nn_layernorm(e, a->fl, a->fl_mean, a->fl_rstd, x, w->enc_ln_g, w->enc_ln_b, Ns) < 0)
            return -1;
        *mem = a->fl;
    }
    return 0;
}
