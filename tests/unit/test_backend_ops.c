/* test_backend_ops: runs every kernel of every usable backend plugin found on the search path
 * against the cpu plugin, on the same random inputs, through the plugin's own device memory
 * (alloc/upload/download). This is what every accelerator backend is held to. With only the cpu
 * plugin installed it compares cpu with itself (and must then agree exactly). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "run/backend_loader.h"
#include "test.h"
#include "cli/cli.h"

static uint64_t rng_state;
static float urand(float lo, float hi)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (float)((rng_state >> 40) * (1.0 / 16777216.0));
}

/* Output collected from one run of one op: every output tensor appended, as floats. */
struct result {
    float *v;
    size_t n;
    int rc;
    size_t *seg; /* start of each output tensor in v, compared separately */
    int nseg;
};

static void keep(struct result *r, const float *host, size_t n)
{
    r->v = realloc(r->v, (r->n + n) * sizeof *r->v);
    memcpy(r->v + r->n, host, n * sizeof *host);
    r->seg = realloc(r->seg, (size_t)(r->nseg + 1) * sizeof *r->seg);
    r->seg[r->nseg++] = r->n;
    r->n += n;
}

/* Device helpers on backend B: a random device tensor (host copy optional), and download. */
static float *drand(struct backend *b, size_t n, float lo, float hi)
{
    float *h = malloc((n ? n : 1) * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = urand(lo, hi);
    float *d = b->ops.alloc(b->ctx, (n ? n : 1) * sizeof *d);
    if (d)
        b->ops.upload(b->ctx, d, h, n * sizeof *h);
    free(h);
    return d;
}
static int32_t *dints(struct backend *b, const int32_t *h, size_t n)
{
    int32_t *d = b->ops.alloc(b->ctx, (n ? n : 1) * sizeof *d);
    if (d)
        b->ops.upload(b->ctx, d, h, n * sizeof *h);
    return d;
}
static void fetch(struct backend *b, struct result *r, const void *dev, size_t n, int ints)
{
    float *h = malloc((n ? n : 1) * sizeof *h);
    b->ops.download(b->ctx, h, dev, n * sizeof *h);
    if (ints)
        for (size_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, &h[i], sizeof v);
            h[i] = (float)v;
        }
    keep(r, h, n);
    free(h);
}

#define OP(b, f, ...) ((b)->ops.f((b)->ctx, __VA_ARGS__))

static void op_gemm(struct backend *b, struct result *r)
{
    int M = 37, N = 29, K = 67;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            float *A = drand(b, (size_t)M * K, -1, 1), *B = drand(b, (size_t)N * K, -1, 1), *C = drand(b, (size_t)M * N, -1, 1);
            r->rc |= OP(b, gemm, ta, tb, M, N, K, 0.7f, A, ta ? M : K, B, tb ? K : N, 0.3f, C, N);
            fetch(b, r, C, (size_t)M * N, 0);
        }
    float *A = drand(b, 8 * 5, -1, 1), *B = drand(b, 8 * 5, -1, 1), *C = drand(b, 8 * 8, -1, 1);
    r->rc |= OP(b, gemm, 0, 1, 8, 8, 5, 1.0f, A, 5, B, 5, 0.0f, C, 8); /* beta 0: C not read */
    fetch(b, r, C, 64, 0);
}

static void op_bias(struct backend *b, struct result *r)
{
    int M = 19, N = 41;
    float *o = drand(b, (size_t)M * N, -1, 1), *bias = drand(b, N, -1, 1), *db = drand(b, N, -1, 1);
    r->rc |= OP(b, bias_grad, db, o, M, N);
    r->rc |= OP(b, bias_add, o, bias, M, N);
    fetch(b, r, o, (size_t)M * N, 0);
    fetch(b, r, db, N, 0);
}

static void op_embedding(struct backend *b, struct result *r)
{
    int N = 23, D = 10, V = 7;
    int32_t ids[23], pos[23];
    for (int n = 0; n < N; n++)
        ids[n] = (int32_t)urand(0, (float)V), pos[n] = n % 6 == 5 ? -1 : n;
    float *emb = drand(b, (size_t)V * D, -1, 1), *out = drand(b, (size_t)N * D, -1, 1), *dout = drand(b, (size_t)N * D, -1, 1);
    float *demb = drand(b, (size_t)V * D, -1, 1);
    int32_t *di = dints(b, ids, N), *dp = dints(b, pos, N);
    r->rc |= OP(b, embedding_forward, out, di, dp, emb, N, D, V, 3.16f);
    r->rc |= OP(b, embedding_backward, demb, dout, di, dp, N, D, V, 3.16f);
    fetch(b, r, out, (size_t)N * D, 0);
    fetch(b, r, demb, (size_t)V * D, 0);
}

/* ABI 2.5: the embedding from a position table, with zero-start rows (id -1) and padding rows. */
static void op_embedding_table(struct backend *b, struct result *r)
{
    int N = 23, D = 10, V = 7, P = 24;
    int32_t ids[23], pos[23];
    for (int n = 0; n < N; n++)
        ids[n] = n % 5 == 0 ? -1 : (int32_t)urand(0, (float)V), pos[n] = n % 6 == 5 ? -1 : n;
    float *emb = drand(b, (size_t)V * D, -1, 1), *pe = drand(b, (size_t)P * D, -1, 1);
    float *out = drand(b, (size_t)N * D, -1, 1), *dout = drand(b, (size_t)N * D, -1, 1);
    float *demb = drand(b, (size_t)V * D, -1, 1);
    int32_t *di = dints(b, ids, N), *dp = dints(b, pos, N);
    r->rc |= OP(b, embedding_table_forward, out, di, dp, emb, pe, N, D, V, P, 3.16f);
    r->rc |= OP(b, embedding_table_backward, demb, dout, di, dp, N, D, V, 3.16f);
    fetch(b, r, out, (size_t)N * D, 0);
    fetch(b, r, demb, (size_t)V * D, 0);
}

/* ABI 2.5: swish forward and backward (the backward from the forward's input). */
static void op_swish(struct backend *b, struct result *r)
{
    size_t n = 3001;
    float *x = drand(b, n, -6, 6), *d = drand(b, n, -2, 2), *o = drand(b, n, 0, 1);
    r->rc |= OP(b, swish_forward, o, x, n);
    fetch(b, r, o, n, 0);
    r->rc |= OP(b, swish_backward, o, d, x, n);
    fetch(b, r, o, n, 0);
}

static void op_attention(struct backend *b, struct result *r)
{
    int32_t kl[3] = { 6, 0, 3 };
    for (int variant = 0; variant < 3; variant++) {
        struct nmt_attn_args a = { .B = 3, .Tq = variant == 1 ? 6 : 4, .Tk = 6, .H = 2, .dh = 8 };
        int D = a.H * a.dh;
        a.q_ld = a.k_ld = a.v_ld = a.o_ld = D;
        a.q_bs = a.o_bs = (int64_t)a.Tq * D;
        a.k_bs = a.v_bs = (int64_t)a.Tk * D;
        a.scale = 0.35f;
        a.causal = variant >= 1;
        a.causal_shift = variant == 2 ? 2 : 0;
        a.dropout = variant == 2 ? 0.25f : 0;
        a.seed = 5, a.offset = 77;
        a.klen = variant == 1 ? NULL : dints(b, kl, 3);
        size_t nq = (size_t)a.B * a.q_bs, nk = (size_t)a.B * a.k_bs, np = (size_t)a.B * a.H * a.Tq * a.Tk;
        float *q = drand(b, nq, -1, 1), *k = drand(b, nk, -1, 1), *v = drand(b, nk, -1, 1), *o = drand(b, nq, -1, 1);
        float *P = drand(b, np, -1, 1), *dout = drand(b, nq, -1, 1);
        float *dq = drand(b, nq, -1, 1), *dk = drand(b, nk, -1, 1), *dv = drand(b, nk, -1, 1);
        r->rc |= OP(b, attention_forward, o, P, q, k, v, &a);
        r->rc |= OP(b, attention_backward, dq, dk, dv, dout, q, k, v, P, &a);
        fetch(b, r, o, nq, 0);
        fetch(b, r, P, np, 0);
        fetch(b, r, dq, nq, 0);
        fetch(b, r, dk, nk, 0);
        fetch(b, r, dv, nk, 0);
    }
}

/* Shapes that cross an accelerator's tiles and vector widths: several 32-key tiles, a head width
 * that is not a multiple of 32, queries and keys as column blocks of one fused (rows, 3D)
 * projection (ld = 3D), a partly masked batch, cross-attention and dropout. */
static void op_attention_tiled(struct backend *b, struct result *r)
{
    int32_t kl[2] = { 45, 29 };
    for (int variant = 0; variant < 3; variant++) {
        struct nmt_attn_args a = { .B = 2, .Tq = variant == 2 ? 13 : 45, .Tk = 45, .H = 3, .dh = variant ? 40 : 64 };
        int D = a.H * a.dh;
        int64_t ld = variant == 0 ? 3 * D : D; /* variant 0: q, k, v interleaved in one (B*T, 3D) buffer */
        a.q_ld = a.k_ld = a.v_ld = ld;
        a.o_ld = D;
        a.q_bs = (int64_t)a.Tq * ld, a.k_bs = a.v_bs = (int64_t)a.Tk * ld, a.o_bs = (int64_t)a.Tq * D;
        a.scale = 1.0f / sqrtf((float)a.dh);
        a.causal = variant != 2;
        a.dropout = variant == 1 ? 0.1f : 0;
        a.seed = 11, a.offset = 1234567;
        a.klen = variant == 1 ? NULL : dints(b, kl, 2);
        size_t nq = (size_t)a.B * a.q_bs, nk = (size_t)a.B * a.k_bs, no = (size_t)a.B * a.o_bs;
        size_t np = (size_t)a.B * a.H * a.Tq * a.Tk;
        float *qkv = NULL, *dqkv = NULL, *q, *k, *v, *dq, *dk, *dv;
        if (variant == 0) {
            qkv = drand(b, nq, -1, 1), dqkv = drand(b, nq, -1, 1);
            q = qkv, k = qkv + D, v = qkv + 2 * D, dq = dqkv, dk = dqkv + D, dv = dqkv + 2 * D;
        } else {
            q = drand(b, nq, -1, 1), k = drand(b, nk, -1, 1), v = drand(b, nk, -1, 1);
            dq = drand(b, nq, -1, 1), dk = drand(b, nk, -1, 1), dv = drand(b, nk, -1, 1);
        }
        float *o = drand(b, no, -1, 1), *P = drand(b, np, -1, 1), *dout = drand(b, no, -1, 1);
        float *o2 = drand(b, no, -1, 1);
        r->rc |= OP(b, attention_forward, o, P, q, k, v, &a);
        r->rc |= OP(b, attention_forward, o2, NULL, q, k, v, &a); /* inference path, no P */
        r->rc |= OP(b, attention_backward, dq, dk, dv, dout, q, k, v, P, &a);
        fetch(b, r, o, no, 0);
        fetch(b, r, o2, no, 0);
        fetch(b, r, P, np, 0);
        if (variant == 0) {
            fetch(b, r, dqkv, nq, 0);
        } else {
            fetch(b, r, dq, nq, 0);
            fetch(b, r, dk, nk, 0);
            fetch(b, r, dv, nk, 0);
        }
    }
}

/* Larger rows than a block of threads: layer norm at D = 512, cross-entropy and top-k over a
 * vocabulary of 1000 with ties, column sums over many rows, gemm with K = 0. */
static void op_wide(struct backend *b, struct result *r)
{
    int N = 70, D = 512, V = 1000, K = 7;
    float *x = drand(b, (size_t)N * D, -3, 3), *g = drand(b, D, 0.5f, 1.5f), *be = drand(b, D, -1, 1);
    float *m = drand(b, N, 0, 1), *rs = drand(b, N, 0, 1), *dout = drand(b, (size_t)N * D, -1, 1);
    float *dg = drand(b, D, -1, 1), *db = drand(b, D, -1, 1), *dbias = drand(b, D, -1, 1);
    float *o = drand(b, (size_t)N * D, 0, 1);
    r->rc |= OP(b, layernorm_forward, o, m, rs, x, g, be, N, D, 1e-6f);
    r->rc |= OP(b, layernorm_backward, dout, dg, db, dout, x, m, rs, g, N, D); /* dx aliasing dout */
    r->rc |= OP(b, bias_grad, dbias, x, N, D);
    fetch(b, r, o, (size_t)N * D, 0);
    fetch(b, r, dout, (size_t)N * D, 0);
    fetch(b, r, dg, D, 0);
    fetch(b, r, db, D, 0);
    fetch(b, r, dbias, D, 0);
    int32_t tgt[70];
    for (int n = 0; n < N; n++)
        tgt[n] = n % 9 == 4 ? 3 : (int32_t)urand(0, (float)V);
    float *h = malloc((size_t)N * V * sizeof *h);
    for (size_t i = 0; i < (size_t)N * V; i++)
        h[i] = (float)(int)urand(-8, 8) * 0.5f; /* many exact ties for top-k */
    float *z = b->ops.alloc(b->ctx, (size_t)N * V * sizeof *z);
    b->ops.upload(b->ctx, z, h, (size_t)N * V * sizeof *h);
    free(h);
    float *val = drand(b, (size_t)N * K, 0, 1), *rn = drand(b, N, 0, 1);
    int32_t *idx = b->ops.alloc(b->ctx, (size_t)N * K * sizeof *idx), *dt = dints(b, tgt, N);
    r->rc |= OP(b, topk_logsoftmax, val, idx, z, N, V, K);
    fetch(b, r, val, (size_t)N * K, 0);
    fetch(b, r, idx, (size_t)N * K, 1);
    struct nmt_xent_result res;
    r->rc |= OP(b, cross_entropy, &res, z, rn, z, dt, N, V, 0.1f, 3, 1.0f); /* in place */
    float s[3] = { (float)res.loss, (float)res.nll, (float)res.count };
    keep(r, s, 3);
    fetch(b, r, z, (size_t)N * V, 0);
    fetch(b, r, rn, N, 0);
    float *C = drand(b, 6 * 9, -1, 1);
    r->rc |= OP(b, gemm, 0, 0, 6, 9, 0, 1.0f, x, 1, x, 9, 0.5f, C, 9);
    fetch(b, r, C, 6 * 9, 0);
}

static void op_layernorm(struct backend *b, struct result *r)
{
    int N = 17, D = 72;
    float *x = drand(b, (size_t)N * D, -2, 2), *g = drand(b, D, 0.5f, 1.5f), *be = drand(b, D, -1, 1);
    float *o = drand(b, (size_t)N * D, 0, 1), *m = drand(b, N, 0, 1), *rs = drand(b, N, 0, 1);
    float *dout = drand(b, (size_t)N * D, -1, 1), *dx = drand(b, (size_t)N * D, 0, 1);
    float *dg = drand(b, D, -1, 1), *db = drand(b, D, -1, 1);
    r->rc |= OP(b, layernorm_forward, o, m, rs, x, g, be, N, D, 1e-5f);
    r->rc |= OP(b, layernorm_backward, dx, dg, db, dout, x, m, rs, g, N, D);
    fetch(b, r, o, (size_t)N * D, 0);
    fetch(b, r, m, N, 0);
    fetch(b, r, rs, N, 0);
    fetch(b, r, dx, (size_t)N * D, 0);
    fetch(b, r, dg, D, 0);
    fetch(b, r, db, D, 0);
}

static void op_elementwise(struct backend *b, struct result *r)
{
    size_t n = 3001;
    float *a = drand(b, n, -2, 2), *c = drand(b, n, -2, 2), *o = drand(b, n, 0, 1);
    r->rc |= OP(b, add, o, a, c, n);
    fetch(b, r, o, n, 0);
    r->rc |= OP(b, relu_forward, o, a, n);
    fetch(b, r, o, n, 0);
    r->rc |= OP(b, relu_backward, o, c, a, n);
    fetch(b, r, o, n, 0);
    r->rc |= OP(b, dropout_forward, o, a, n, 0.1f, 3, 9);
    fetch(b, r, o, n, 0);
    r->rc |= OP(b, dropout_backward, o, c, n, 0.1f, 3, 9);
    fetch(b, r, o, n, 0);
    r->rc |= OP(b, memset_zero, o + 5, 10 * sizeof *o);
    r->rc |= OP(b, copy, o + 100, a + 7, 50 * sizeof *o);
    fetch(b, r, o, n, 0);
}

static void op_gemm_rowinv(struct backend *b, struct result *r)
{
    static const int shapes[][3] = { { 1, 1, 1 }, { 7, 13, 5 }, { 33, 40, 64 }, { 64, 256, 256 }, { 5, 8000, 17 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], lda = K + 3, ldb = K + 1, ldc = N + 2;
        float *A = drand(b, (size_t)M * lda, -1, 1), *B = drand(b, (size_t)N * ldb, -1, 1);
        float *C = drand(b, (size_t)M * ldc, -1, 1);
        r->rc |= OP(b, gemm_rowinv, M, N, K, 0.7f, A, lda, B, ldb, s % 2 ? 0.3f : 0.0f, C, ldc);
        fetch(b, r, C, (size_t)M * ldc, 0);
    }
}

static void op_linear_rowinv(struct backend *b, struct result *r)
{
    static const int shapes[][3] = { { 1, 1, 1 }, { 7, 13, 5 }, { 33, 40, 64 }, { 64, 256, 256 }, { 5, 1000, 17 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], lda = K + 3, ldw = K + 1, ldc = N + 2;
        float *A = drand(b, (size_t)M * lda, -1, 1), *W = drand(b, (size_t)N * ldw, -1, 1);
        float *bias = drand(b, (size_t)N, -1, 1), *C = drand(b, (size_t)M * ldc, -1, 1);
        void *Wp = b->ops.alloc(b->ctx, b->ops.linear_packed_bytes(b->ctx, N, K));
        r->rc |= !Wp || OP(b, linear_pack, Wp, W, N, K, ldw) < 0;
        r->rc |= Wp ? OP(b, linear_rowinv, M, N, K, A, lda, Wp, s % 2 ? bias : NULL, (int)(s % 3 == 1), C, ldc) : -1;
        fetch(b, r, C, (size_t)M * ldc, 0);
    }
}

static void op_xent(struct backend *b, struct result *r)
{
    int N = 13, V = 101;
    int32_t tgt[13];
    for (int n = 0; n < N; n++)
        tgt[n] = n % 5 == 0 ? 0 : (int32_t)urand(1, (float)V);
    float *z = drand(b, (size_t)N * V, -5, 5), *d = drand(b, (size_t)N * V, 0, 1), *rn = drand(b, N, 0, 1);
    int32_t *dt = dints(b, tgt, N);
    struct nmt_xent_result res;
    r->rc |= OP(b, cross_entropy, &res, d, rn, z, dt, N, V, 0.1f, 0, 0.01f);
    float s[3] = { (float)res.loss, (float)res.nll, (float)res.count };
    keep(r, s, 3);
    fetch(b, r, d, (size_t)N * V, 0);
    fetch(b, r, rn, N, 0);
}

static void op_optim(struct backend *b, struct result *r)
{
    size_t n = 5003;
    float *p = drand(b, n, -1, 1), *m = drand(b, n, -0.1f, 0.1f), *v = drand(b, n, 0, 0.01f), *g = drand(b, n, -1, 1);
    r->rc |= OP(b, adam_update, p, m, v, g, n, 1e-3f, 0.9f, 0.98f, 1e-9f, 7, 0.5f);
    fetch(b, r, p, n, 0);
    fetch(b, r, m, n, 0);
    fetch(b, r, v, n, 0);
    double ss = 0;
    r->rc |= OP(b, sumsq, &ss, g, n);
    float f = (float)ss;
    keep(r, &f, 1);
}

static void op_decode(struct backend *b, struct result *r)
{
    int N = 6, V = 53, K = 5;
    float *z = drand(b, (size_t)N * V, -3, 3), *val = drand(b, (size_t)N * K, 0, 1);
    int32_t *idx = b->ops.alloc(b->ctx, (size_t)N * K * sizeof *idx);
    r->rc |= OP(b, topk_logsoftmax, val, idx, z, N, V, K);
    fetch(b, r, val, (size_t)N * K, 0);
    fetch(b, r, idx, (size_t)N * K, 1);
    int32_t gi[5] = { 3, 3, 0, 5, 1 };
    float *dst = drand(b, 5 * 11, 0, 1), *src = drand(b, 6 * 11, -1, 1);
    r->rc |= OP(b, gather_rows, dst, src, dints(b, gi, 5), 5, 11);
    fetch(b, r, dst, 5 * 11, 0);
}

static void op_topk_logits(struct backend *b, struct result *r)
{
    int N = 7, V = 61, K = 6;
    float *h = malloc((size_t)N * V * sizeof *h);
    for (size_t i = 0; i < (size_t)N * V; i++)
        h[i] = (float)(int)urand(-8, 8) * 0.5f; /* many exact ties */
    float *z = b->ops.alloc(b->ctx, (size_t)N * V * sizeof *z), *val = drand(b, (size_t)N * K, 0, 1);
    b->ops.upload(b->ctx, z, h, (size_t)N * V * sizeof *h);
    free(h);
    int32_t *idx = b->ops.alloc(b->ctx, (size_t)N * K * sizeof *idx);
    r->rc |= OP(b, topk_logits, val, idx, z, N, V, K);
    fetch(b, r, val, (size_t)N * K, 0);
    fetch(b, r, idx, (size_t)N * K, 1);
}

/* ABI 2.8: attention over a decoding cache of 7 rows a step, each of 5 query rows reading its keys
 * from the rows a map names (dh 16, 8 and 5; with key lengths or not). */
static void attention_rows_case(struct backend *b, int dh, int lens, int flat, float **out, float **gathered_out);
static void op_attention_rows(struct backend *b, struct result *r)
{
    static const int dhs[] = { 16, 8, 5, 128 };
    for (int v = 0; v < 4; v++) {
        float *o = NULL;
        int dh = dhs[v];
        attention_rows_case(b, dh, v != 1, v == 2, &o, NULL);
        fetch(b, r, o, (size_t)5 * 2 * dh, 0);
    }
}

/* The arguments of attention case V (0-5): the shapes of op_attention (0-2: mask, causal with
 * shift, dropout) and of op_attention_tiled (3-5: several 32-key tiles, dh 64 and 40, the fused
 * (rows, 3D) layout, cross-attention), with KL the key lengths (device) when used. */
static struct nmt_attn_args attn_case(struct backend *b, int variant)
{
    static const int32_t kl3[3] = { 6, 0, 3 }, kl2[2] = { 45, 29 };
    struct nmt_attn_args a;
    memset(&a, 0, sizeof a);
    if (variant < 3) {
        a.B = 3, a.Tq = variant == 1 ? 6 : 4, a.Tk = 6, a.H = 2, a.dh = 8;
        a.scale = 0.35f;
        a.causal = variant >= 1;
        a.causal_shift = variant == 2 ? 2 : 0;
        a.dropout = variant == 2 ? 0.25f : 0;
        a.seed = 5, a.offset = 77;
        a.klen = variant == 1 ? NULL : dints(b, kl3, 3);
    } else {
        int v = variant - 3;
        a.B = 2, a.Tq = v == 2 ? 13 : 45, a.Tk = 45, a.H = 3, a.dh = v ? 40 : 64;
        a.scale = 1.0f / sqrtf((float)a.dh);
        a.causal = v != 2;
        a.dropout = v == 1 ? 0.1f : 0;
        a.seed = 11, a.offset = 1234567;
        a.klen = v == 1 ? NULL : dints(b, kl2, 2);
    }
    int D = a.H * a.dh;
    int64_t ld = variant == 3 ? 3 * D : D; /* case 3: q, k, v interleaved in one (B*T, 3D) buffer */
    a.q_ld = a.k_ld = a.v_ld = ld;
    a.o_ld = D;
    a.q_bs = (int64_t)a.Tq * ld, a.k_bs = a.v_bs = (int64_t)a.Tk * ld, a.o_bs = (int64_t)a.Tq * D;
    return a;
}

/* attention_forward_lse and attention_backward_lse on the six cases: the output, the saved row
 * statistics (m, l) and the gradients. */
static void op_attention_lse(struct backend *b, struct result *r)
{
    for (int variant = 0; variant < 6; variant++) {
        struct nmt_attn_args a = attn_case(b, variant);
        size_t nq = (size_t)a.B * a.q_bs, nk = (size_t)a.B * a.k_bs, no = (size_t)a.B * a.o_bs;
        size_t nl = 2 * (size_t)a.B * a.H * a.Tq;
        float *q = drand(b, nq, -1, 1), *k = drand(b, nk, -1, 1), *v = drand(b, nk, -1, 1);
        float *dq = drand(b, nq, -1, 1), *dk = drand(b, nk, -1, 1), *dv = drand(b, nk, -1, 1);
        float *o = drand(b, no, -1, 1), *lse = drand(b, nl, -1, 1), *dout = drand(b, no, -1, 1);
        r->rc |= OP(b, attention_forward_lse, o, lse, q, k, v, &a);
        r->rc |= OP(b, attention_backward_lse, dq, dk, dv, dout, o, lse, q, k, v, &a);
        fetch(b, r, o, no, 0);
        fetch(b, r, lse, nl, 0);
        fetch(b, r, dq, nq, 0);
        fetch(b, r, dk, nk, 0);
        fetch(b, r, dv, nk, 0);
    }
}

/* Downloads N bf16 values from DEV and keeps them widened to float. */
static void fetch_bf16(struct backend *b, struct result *r, const void *dev, size_t n)
{
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    float *f = malloc((n ? n : 1) * sizeof *f);
    b->ops.download(b->ctx, h, dev, n * sizeof *h);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)h[i] << 16;
        memcpy(&f[i], &u, sizeof u);
    }
    keep(r, f, n);
    free(h);
    free(f);
}

/* cast float32 -> bf16 -> float32 on random values and on rounding ties, infinities and NaN. */
static void op_cast(struct backend *b, struct result *r)
{
    size_t n = 4099;
    float *x = drand(b, n, -3, 3), *y = drand(b, n, -1, 1);
    const float special[8] = { 1.00390625f, 1.01171875f, -1.00390625f, 65504.0f, -2.5e-39f, 0.0f, -0.0f, 3.0e38f };
    r->rc |= OP(b, upload, x, special, sizeof special);
    uint16_t *h = b->ops.alloc(b->ctx, n * sizeof *h);
    r->rc |= !h || OP(b, cast, h, NMT_DTYPE_BF16, x, NMT_DTYPE_F32, n) < 0;
    r->rc |= !h || OP(b, cast, y, NMT_DTYPE_F32, h, NMT_DTYPE_BF16, n) < 0;
    fetch_bf16(b, r, h, n);
    fetch(b, r, y, n, 0);
}

/* Mixed precision: gemm after set_precision(BF16) in the four transpositions, gemm_ex with a bf16
 * operand (made by cast) under bf16 and under float32 precision; precision back to float32. */
static void op_gemm_bf16(struct backend *b, struct result *r)
{
    int M = 37, N = 29, K = 67;
    r->rc |= OP(b, set_precision, NMT_DTYPE_BF16);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            float *A = drand(b, (size_t)M * K, -1, 1), *B = drand(b, (size_t)N * K, -1, 1), *C = drand(b, (size_t)M * N, -1, 1);
            r->rc |= OP(b, gemm, ta, tb, M, N, K, 0.7f, A, ta ? M : K, B, tb ? K : N, 0.3f, C, N);
            fetch(b, r, C, (size_t)M * N, 0);
        }
    float *A = drand(b, (size_t)M * (K + 3), -1, 1), *W = drand(b, (size_t)N * K, -1, 1), *C = drand(b, (size_t)M * N, -1, 1);
    uint16_t *Wb = b->ops.alloc(b->ctx, (size_t)N * K * sizeof *Wb);
    r->rc |= !Wb || OP(b, cast, Wb, NMT_DTYPE_BF16, W, NMT_DTYPE_F32, (size_t)N * K) < 0;
    r->rc |= OP(b, gemm_ex, 0, 1, M, N, K, 1.0f, A, NMT_DTYPE_F32, K + 3, Wb, NMT_DTYPE_BF16, K, 0.0f, C, N);
    fetch(b, r, C, (size_t)M * N, 0);
    float *dY = drand(b, (size_t)M * N, -1, 1), *dX = drand(b, (size_t)M * K, -1, 1);
    r->rc |= OP(b, gemm_ex, 0, 0, M, K, N, 1.0f, dY, NMT_DTYPE_F32, N, Wb, NMT_DTYPE_BF16, K, 0.0f, dX, K);
    fetch(b, r, dX, (size_t)M * K, 0);
    r->rc |= OP(b, set_precision, NMT_DTYPE_F32);
    r->rc |= OP(b, gemm_ex, 0, 1, M, N, K, 1.0f, A, NMT_DTYPE_F32, K + 3, Wb, NMT_DTYPE_BF16, K, 0.5f, C, N);
    fetch(b, r, C, (size_t)M * N, 0);
}

static const struct {
    const char *name;
    void (*run)(struct backend *, struct result *);
    double tol;
    int optional; /* uses an optional slot: 2 gemm_rowinv, 3 linear_pack and linear_rowinv, 4 the
                   * attention_*_lse slots, 5 set_precision, cast and gemm_ex, 6 the embedding_table
                   * slots, 7 the swish slots, 8 topk_logits, 9 attention_forward_rows */
} ops[] = {
    { "gemm", op_gemm, 1e-5, 0 },
    { "bias_add, bias_grad", op_bias, 1e-5, 0 },
    { "embedding forward/backward", op_embedding, 1e-5, 0 },
    { "attention forward/backward (mask, causal, shift, dropout)", op_attention, 1e-4, 0 },
    { "attention on tiled shapes (fused qkv layout, dh 40/64, inference path)", op_attention_tiled, 1e-4, 0 },
    { "layernorm forward/backward", op_layernorm, 1e-4, 0 },
    { "wide rows: layernorm D=512, bias_grad, topk and cross_entropy V=1000, gemm K=0", op_wide, 1e-4, 0 },
    { "add, relu, dropout, memset_zero, copy", op_elementwise, 1e-6, 0 },
    { "gemm_rowinv (row-invariant product)", op_gemm_rowinv, 1e-5, 2 },
    { "linear_pack, linear_rowinv (row-invariant linear layer, bias, ReLU)", op_linear_rowinv, 1e-5, 3 },
    { "attention_forward_lse, attention_backward_lse (six cases: masks, dropout, tiles, fused qkv)",
      op_attention_lse, 1e-4, 4 },
    /* bf16 tolerances: the operands are rounded identically (to nearest even) everywhere, the
     * products of bf16 values are exact in float32, so only the order and width of the float32
     * sums may differ: 1e-3 of the largest output for gemm/gemm_ex, 0 for cast */
    { "cast float32 <-> bf16 (ties to even, subnormal, large, random values)", op_cast, 0, 5 },
    { "set_precision bf16: gemm (4 transpositions), gemm_ex with a bf16 weight; gemm_ex at float32",
      op_gemm_bf16, 1e-3, 5 },
    { "cross_entropy", op_xent, 1e-5, 0 },
    { "adam_update, sumsq", op_optim, 1e-5, 0 },
    { "topk_logsoftmax, gather_rows", op_decode, 1e-5, 0 },
    { "embedding_table_forward/backward (position table, zero-start and padding rows)", op_embedding_table, 1e-5, 6 },
    { "swish_forward, swish_backward", op_swish, 1e-5, 7 },
    { "topk_logits (ties)", op_topk_logits, 0, 8 },
    { "attention_forward_rows (a decoding cache read through rows; dh 16, 8, 5, 128)", op_attention_rows, 1e-4, 9 },
};

/* Downloads N floats of DEV into a new host array. */
static float *host_of(struct backend *b, const float *dev, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof *h);
    b->ops.download(b->ctx, h, dev, n * sizeof *h);
    return h;
}

/* L = sum of DOUT * attention_forward_lse(Q, K, V) in double, on backend B. */
static double attn_loss(struct backend *b, const struct nmt_attn_args *a, float *o, const float *q, const float *k,
                        const float *v, const float *dout_h)
{
    size_t no = (size_t)a->B * a->o_bs;
    OP(b, attention_forward_lse, o, NULL, q, k, v, a);
    float *oh = host_of(b, o, no);
    double L = 0;
    for (size_t i = 0; i < no; i++)
        L += (double)oh[i] * dout_h[i];
    free(oh);
    return L;
}

/* The cpu plugin's ABI 2.5 slots against references: swish and its backward against x sigmoid(x)
 * in double and central differences; the table embedding against its formula, the zero-start and
 * padding rows, and a backward that skips them. */
static void cpu_abi25_checks(struct backend *b)
{
    size_t n = 2001;
    rng_state = 99;
    float *x = drand(b, n, -8, 8), *d = drand(b, n, -1, 1), *y = drand(b, n, 0, 1), *dx = drand(b, n, 0, 1);
    int rc = OP(b, swish_forward, y, x, n) | OP(b, swish_backward, dx, d, x, n);
    float *xh = host_of(b, x, n), *dh = host_of(b, d, n), *yh = host_of(b, y, n), *gh = host_of(b, dx, n);
    double ef = 0, eb = 0;
    for (size_t i = 0; i < n; i++) {
        double v = xh[i], f = v / (1 + exp(-v)), h = 1e-3;
        double fd = ((v + h) / (1 + exp(-(v + h))) - (v - h) / (1 + exp(-(v - h)))) / (2 * h);
        ef = fmax(ef, fabs(yh[i] - f) / fmax(1, fabs(f)));
        eb = fmax(eb, fabs(gh[i] - dh[i] * fd));
    }
    test_ok(rc == 0 && ef < 1e-6 && eb < 1e-5, "cpu: swish against x sigmoid(x) (%.2e), its backward against central "
            "differences (%.2e)", ef, eb);
    free(xh), free(dh), free(yh), free(gh);
    int32_t ids[4] = {-1, 2, 1, 2}, pos[4] = {0, 1, -1, 3};
    int D = 4, V = 3, P = 5, N = 4;
    float pe_h[20], emb_h[12], out[16], demb_h[12];
    for (int i = 0; i < 20; i++)
        pe_h[i] = 0.1f * (float)i;
    for (int i = 0; i < 12; i++)
        emb_h[i] = (float)i - 5;
    float *pe = drand(b, 20, 0, 1), *emb = drand(b, 12, 0, 1), *o = drand(b, 16, 0, 1), *dout = drand(b, 16, 1, 1);
    float *demb = drand(b, 12, 0, 1);
    int32_t *di = dints(b, ids, 4), *dp = dints(b, pos, 4);
    rc = OP(b, upload, pe, pe_h, sizeof pe_h) | OP(b, upload, emb, emb_h, sizeof emb_h) |
         OP(b, memset_zero, demb, sizeof demb_h) | OP(b, embedding_table_forward, o, di, dp, emb, pe, N, D, V, P, 2.0f) |
         OP(b, embedding_table_backward, demb, dout, di, dp, N, D, V, 2.0f) | OP(b, download, out, o, sizeof out) |
         OP(b, download, demb_h, demb, sizeof demb_h);
    int ok = rc == 0;
    for (int j = 0; j < D; j++) {
        ok &= out[j] == pe_h[j];                                     /* zero start: the position only */
        ok &= out[D + j] == emb_h[2 * D + j] * 2 + pe_h[D + j];      /* id 2 at position 1 */
        ok &= out[2 * D + j] == 0;                                   /* padding */
        ok &= out[3 * D + j] == emb_h[2 * D + j] * 2 + pe_h[3 * D + j];
        ok &= demb_h[j] == 0 && demb_h[D + j] == 0 && demb_h[2 * D + j] == 4; /* rows 0, 2 skipped; id 2 twice */
    }
    test_ok(ok, "cpu: embedding_table: the table's rows, a zero start, padding, a backward that skips both");
    int32_t bad[1] = {0}, far[1] = {5};
    int32_t *db = dints(b, bad, 1), *df = dints(b, far, 1);
    test_ok(OP(b, embedding_table_forward, o, db, df, emb, pe, 1, D, V, P, 1.0f) < 0 &&
                strstr(b->ops.last_error(b->ctx), "position 5"),
            "cpu: a position past the table is refused: %s", b->ops.last_error(b->ctx));
}

/* The cpu plugin's ABI 2.2 slots against references of their own: the lse attention equals the P
 * path bit for bit and its gradient matches central differences; bf16 products equal a double
 * reference on bf16-rounded operands; cast rounds ties to even. */
static void cpu_reference_checks(struct backend *b)
{
    for (int variant = 0; variant < 6; variant++) {
        rng_state = 500 + (uint64_t)variant;
        struct nmt_attn_args a = attn_case(b, variant);
        size_t nq = (size_t)a.B * a.q_bs, nk = (size_t)a.B * a.k_bs, no = (size_t)a.B * a.o_bs;
        size_t np = (size_t)a.B * a.H * a.Tq * a.Tk, nl = 2 * (size_t)a.B * a.H * a.Tq;
        float *q = drand(b, nq, -1, 1), *k = drand(b, nk, -1, 1), *v = drand(b, nk, -1, 1), *dout = drand(b, no, -1, 1);
        float *o1 = drand(b, no, 0, 1), *o2 = drand(b, no, 0, 1), *P = drand(b, np, 0, 1), *lse = drand(b, nl, 0, 1);
        float *g1[3], *g2[3];
        for (int t = 0; t < 3; t++) { /* zeroed: the columns of other heads' blocks are not written */
            g1[t] = drand(b, t ? nk : nq, 0, 1), g2[t] = drand(b, t ? nk : nq, 0, 1);
            OP(b, memset_zero, g1[t], (t ? nk : nq) * sizeof(float));
            OP(b, memset_zero, g2[t], (t ? nk : nq) * sizeof(float));
        }
        int rc = OP(b, attention_forward, o1, P, q, k, v, &a) | OP(b, attention_backward, g1[0], g1[1], g1[2], dout, q, k, v, P, &a) |
                 OP(b, attention_forward_lse, o2, lse, q, k, v, &a) |
                 OP(b, attention_backward_lse, g2[0], g2[1], g2[2], dout, o2, lse, q, k, v, &a);
        int same = memcmp(o1, o2, no * sizeof *o1) == 0;
        for (int t = 0; t < 3; t++)
            same &= memcmp(g1[t], g2[t], (t ? nk : nq) * sizeof(float)) == 0;
        test_ok(rc == 0 && same, "cpu: attention case %d: the lse path's output and gradients equal the P path's bit for bit",
                variant);
        if (variant == 3) /* fused layout: q, k, v overlap one buffer; the identity above covers it */
            continue;
        /* directional derivative of L = <dout, out> along a random direction of (q, k, v) */
        float *dout_h = host_of(b, dout, no), *x[3] = { q, k, v };
        size_t nx[3] = { nq, nk, nk };
        float *x0[3], *u[3];
        double dot = 0;
        for (int t = 0; t < 3; t++) {
            x0[t] = host_of(b, x[t], nx[t]);
            u[t] = malloc(nx[t] * sizeof *u[t]);
            float *gh = host_of(b, g2[t], nx[t]);
            for (size_t i = 0; i < nx[t]; i++) {
                u[t][i] = urand(-1, 1);
                dot += (double)gh[i] * u[t][i];
            }
            free(gh);
        }
        double h = 1e-2, L[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            for (int t = 0; t < 3; t++) {
                float *xp = malloc(nx[t] * sizeof *xp);
                for (size_t i = 0; i < nx[t]; i++)
                    xp[i] = x0[t][i] + (float)(sgn ? -h : h) * u[t][i];
                OP(b, upload, x[t], xp, nx[t] * sizeof *xp);
                free(xp);
            }
            L[sgn] = attn_loss(b, &a, o2, q, k, v, dout_h);
        }
        double fd = (L[0] - L[1]) / (2 * h), err = fabs(fd - dot) / (fabs(dot) > 1 ? fabs(dot) : 1);
        test_ok(err < 1e-2, "cpu: attention case %d: attention_backward_lse's directional derivative %.6g, central "
                "differences %.6g (relative error %.2e)", variant, dot, fd, err);
        for (int t = 0; t < 3; t++)
            free(x0[t]), free(u[t]);
        free(dout_h);
    }

    /* bf16 products: exact bf16 operands, float32 sums */
    int M = 23, N = 31, K = 300;
    rng_state = 77;
    float *A = drand(b, (size_t)M * K, -1, 1), *B = drand(b, (size_t)N * K, -1, 1), *C = drand(b, (size_t)M * N, 0, 1);
    float *Ah = host_of(b, A, (size_t)M * K), *Bh = host_of(b, B, (size_t)N * K);
    int rc = OP(b, set_precision, NMT_DTYPE_BF16) | OP(b, gemm, 0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
    float *Ch = host_of(b, C, (size_t)M * N);
    rc |= OP(b, set_precision, NMT_DTYPE_F32) | OP(b, gemm, 0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
    float *Cf = host_of(b, C, (size_t)M * N);
    double e_bf = 0, e_f32 = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = 0;
            for (int kk = 0; kk < K; kk++) {
                uint32_t ua, ub;
                float fa = Ah[(size_t)i * K + kk], fb = Bh[(size_t)j * K + kk];
                memcpy(&ua, &fa, 4), memcpy(&ub, &fb, 4);
                ua = (ua + 0x7fffu + ((ua >> 16) & 1u)) & 0xffff0000u;
                ub = (ub + 0x7fffu + ((ub >> 16) & 1u)) & 0xffff0000u;
                memcpy(&fa, &ua, 4), memcpy(&fb, &ub, 4);
                ref += (double)fa * fb;
            }
            double d1 = fabs(Ch[(size_t)i * N + j] - ref), d2 = fabs(Cf[(size_t)i * N + j] - ref);
            e_bf = d1 > e_bf ? d1 : e_bf;
            e_f32 = d2 > e_f32 ? d2 : e_f32;
        }
    test_ok(rc == 0 && e_bf < 1e-4 && e_f32 > 1e-3,
            "cpu: gemm in bf16 equals the product of the bf16-rounded operands (max error %.2e; float32's %.2e)", e_bf,
            e_f32);
    test_ok(OP(b, set_precision, NMT_DTYPE_INT8) < 0 && strstr(b->ops.last_error(b->ctx), "not supported"),
            "cpu: set_precision int8 is refused: %s", b->ops.last_error(b->ctx));
    free(Ah), free(Bh), free(Ch), free(Cf);

    const float in[6] = { 1.00390625f, 1.01171875f, -1.00390625f, 3.4e38f, NAN, -INFINITY };
    const float want[6] = { 1.0f, 1.015625f, -1.0f, INFINITY, NAN, -INFINITY };
    float *xd = b->ops.alloc(b->ctx, sizeof in), *yd = b->ops.alloc(b->ctx, sizeof in), out[6];
    uint16_t *hd = b->ops.alloc(b->ctx, 6 * sizeof *hd);
    rc = OP(b, upload, xd, in, sizeof in) | OP(b, cast, hd, NMT_DTYPE_BF16, xd, NMT_DTYPE_F32, 6) |
         OP(b, cast, yd, NMT_DTYPE_F32, hd, NMT_DTYPE_BF16, 6) | OP(b, download, out, yd, sizeof out);
    int ok = rc == 0;
    for (int i = 0; i < 6; i++)
        ok &= isnan(want[i]) ? isnan(out[i]) : out[i] == want[i];
    test_ok(ok, "cpu: cast to bf16 rounds ties to even, overflows to inf, keeps NaN and -inf (%g %g %g %g %g %g)",
            out[0], out[1], out[2], out[3], out[4], out[5]);
    test_ok(OP(b, cast, hd, NMT_DTYPE_INT8, xd, NMT_DTYPE_F32, 6) < 0, "cpu: cast to int8 is refused: %s",
            b->ops.last_error(b->ctx));
}

/* Max over the output tensors of max |x - ref| / max(1, max |ref|) within that tensor. */
static double compare(const struct result *x, const struct result *ref)
{
    if (x->n != ref->n || x->nseg != ref->nseg)
        return INFINITY;
    double worst = 0;
    for (int s = 0; s < ref->nseg; s++) {
        size_t end = s + 1 < ref->nseg ? ref->seg[s + 1] : ref->n;
        double num = 0, den = 1;
        for (size_t i = ref->seg[s]; i < end; i++) {
            double d = fabs((double)x->v[i] - ref->v[i]);
            if (!(d <= num))
                num = isnan(d) ? INFINITY : d;
            if (fabs(ref->v[i]) > den)
                den = fabs(ref->v[i]);
        }
        if (!(num / den <= worst))
            worst = num / den;
    }
    return worst;
}

/* share (ABI 2.3): a second context of plugin PATH computes with the first one's buffers (packed
 * weights and inputs) the bits the first computes; a context cannot share with itself. */
static void check_share(const char *path, const struct nmt_backend_opts *opts)
{
    struct backend *x = backend_open(path, opts), *y = backend_open(path, opts);
    if (!x || !y || !x->ops.share || !x->ops.linear_rowinv) {
        test_ok(x && y, "%s: share # SKIP optional slot absent (or no second context: %s)", path,
                x && y ? "ok" : nmt_errmsg());
        backend_close(y);
        backend_close(x);
        return;
    }
    test_ok(backend_can_share(y, x) && backend_can_share(x, y) && !backend_can_share(x, x),
            "%s: share: two contexts of the plugin may read each other's buffers, not a context itself", x->ops.name);
    static const int shapes[][3] = { { 1, 1, 1 }, { 33, 40, 64 }, { 5, 1000, 17 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        size_t nc = (size_t)M * (size_t)N;
        float *A = drand(x, (size_t)M * K, -1, 1), *W = drand(x, (size_t)N * K, -1, 1), *bias = drand(x, (size_t)N, -1, 1);
        float *Cx = drand(x, nc, -1, 1), *Cy = drand(y, nc, -1, 1);
        void *Wp = x->ops.alloc(x->ctx, x->ops.linear_packed_bytes(x->ctx, N, K));
        float *hx = malloc(nc * sizeof *hx), *hy = malloc(nc * sizeof *hy);
        int rc = !Wp || !hx || !hy || OP(x, linear_pack, Wp, W, N, K, K) < 0 ||
                 OP(x, linear_rowinv, M, N, K, A, K, Wp, bias, 1, Cx, N) < 0 ||
                 OP(x, download, hx, Cx, nc * sizeof *hx) < 0 ||
                 OP(y, linear_rowinv, M, N, K, A, K, Wp, bias, 1, Cy, N) < 0 ||
                 OP(y, download, hy, Cy, nc * sizeof *hy) < 0;
        test_ok(!rc && !memcmp(hx, hy, nc * sizeof *hx),
                "%s: share: linear_rowinv %dx%dx%d on a second context from the first's packed weights: the same bits",
                x->ops.name, M, N, K);
        free(hx);
        free(hy);
    }
    backend_close(y);
    backend_close(x);
}

/* gemm_rowinv (optional): each row's bits are the same whether it is computed alone or among
 * batches of any number of rows (1 to 150: every tile shape of the cuda plugin). On cuda, each
 * element also equals its documented chain, fmaf over k in increasing order from 0, then alpha *. */
/* One case of attention_forward_rows on B (see op_attention_rows): a cache of TK steps of CR rows
 * (keys and values interleaved, 2D floats a row), B query rows, the map of each row's step j to a
 * cache row of step j (FLAT: to the cache's row counted from its start, k_ld and v_ld 0); its
 * output into *OUT, and with GATHERED_OUT attention_forward's on the keys and values gathered a row
 * at a time first (gather_rows) into *GATHERED_OUT. */
static void attention_rows_case(struct backend *b, int dh, int lens, int flat, float **out, float **gathered_out)
{
    enum { NB = 5, CR = 7, TK = 9, LD = 11, H = 2 };
    int D = H * dh;
    int32_t map[NB * LD], kl[NB] = { 9, 4, 9, 1, 7 }, gi[NB * TK];
    for (int i = 0; i < NB * LD; i++)
        map[i] = (int32_t)urand(0, CR) + (flat ? i % LD * CR : 0);
    struct nmt_attn_args a = { .B = NB, .Tq = 1, .Tk = TK, .H = H, .dh = dh, .scale = 0.4f };
    a.q_ld = a.q_bs = a.o_ld = a.o_bs = D;
    a.k_ld = a.v_ld = flat ? 0 : (int64_t)CR * 2 * D, a.k_bs = a.v_bs = 2 * D;
    a.klen = lens ? dints(b, kl, NB) : NULL;
    float *cache = drand(b, (size_t)TK * CR * 2 * D, -1, 1), *q = drand(b, (size_t)NB * D, -1, 1);
    *out = drand(b, (size_t)NB * D, 0, 1);
    OP(b, attention_forward_rows, *out, q, cache, cache + D, &a, dints(b, map, NB * LD), LD);
    if (!gathered_out)
        return;
    for (int r = 0; r < NB; r++) /* row (r, j) of the gathered keys: cache row (j, map[r][j]) */
        for (int j = 0; j < TK; j++)
            gi[r * TK + j] = (flat ? 0 : j * CR) + map[r * LD + j];
    float *g = drand(b, (size_t)NB * TK * 2 * D, 0, 1);
    OP(b, gather_rows, g, cache, dints(b, gi, NB * TK), NB * TK, 2 * D);
    a.k_ld = a.v_ld = 2 * D, a.k_bs = a.v_bs = (int64_t)TK * 2 * D;
    *gathered_out = drand(b, (size_t)NB * D, 0, 1);
    OP(b, attention_forward, *gathered_out, NULL, q, g, g + D, &a);
}

/* attention_forward_rows (ABI 2.8) gives attention_forward's bits on the keys gathered first, on
 * each kernel path (the cpu: NMT_CPU_ISA at avx512, avx2 and portable; dh 16, 8, 5 and 128). */
static void check_attention_rows(const char *path, const struct nmt_backend_opts *opts)
{
    static const char *const isas[] = { NULL, "avx2", "portable" };
    static const int dhs[] = { 16, 8, 5, 128 }; /* 128: the training paths' body, its keys transposed */
    struct backend *x = backend_open(path, opts);
    if (!x || !x->ops.attention_forward_rows) {
        test_ok(x != NULL, "%s: attention_forward_rows # SKIP optional slot absent", path);
        backend_close(x);
        return;
    }
    int cpu = !strcmp(x->ops.name, "cpu");
    for (int i = 0; i < (cpu ? 3 : 1); i++) {
        if (isas[i])
            setenv("NMT_CPU_ISA", isas[i], 1);
        int same = 1;
        for (size_t v = 0; v < sizeof dhs / sizeof *dhs; v++)
            for (int var = 0; var < 4; var++) {
                float *o, *g;
                int dh = dhs[v];
                attention_rows_case(x, dh, var & 1, var >> 1, &o, &g);
                float *ho = host_of(x, o, (size_t)5 * 2 * dh), *hg = host_of(x, g, (size_t)5 * 2 * dh);
                same &= !memcmp(ho, hg, (size_t)5 * 2 * dh * sizeof *ho);
                free(ho);
                free(hg);
            }
        test_ok(same, "%s%s%s: attention_forward_rows gives the bits of attention_forward on the rows gathered first "
                      "(dh 16, 8, 5, 128; key lengths or not; rows of each step or of the whole cache)", x->ops.name, isas[i] ? ", NMT_CPU_ISA=" : "",
                isas[i] ? isas[i] : "");
        unsetenv("NMT_CPU_ISA");
    }
    backend_close(x);
}

static void check_rowinv(const char *path, const struct nmt_backend_opts *opts)
{
    struct backend *x = backend_open(path, opts);
    if (!x || !x->ops.gemm_rowinv) {
        test_ok(x != NULL, "%s: gemm_rowinv row invariance # SKIP optional slot absent", path);
        backend_close(x);
        return;
    }
    enum { M = 150, N = 333, K = 300 };
    static const int all[] = { 1, 5, 8, 9, 31, 32, 33, 64, 65, 150 }, quick[] = { 1, 9, 33, 150 };
    /* NMT_TEST_QUICK (valgrind, compute-sanitizer): one batch size per cuda tile shape */
    const int *chunks = getenv("NMT_TEST_QUICK") ? quick : all;
    size_t nchunks = getenv("NMT_TEST_QUICK") ? sizeof quick / sizeof *quick : sizeof all / sizeof *all;
    float *A = drand(x, (size_t)M * K, -1, 1), *B = drand(x, (size_t)N * K, -1, 1), *C = drand(x, (size_t)M * N, 0, 1);
    float *full = malloc((size_t)M * N * sizeof *full), *part = malloc((size_t)M * N * sizeof *part);
    int rc = !full || !part || OP(x, gemm_rowinv, M, N, K, 0.7f, A, K, B, K, 0.0f, C, N) < 0 ||
             OP(x, download, full, C, (size_t)M * N * sizeof *full) < 0;
    for (size_t c = 0; c < nchunks && !rc; c++) {
        OP(x, memset_zero, C, (size_t)M * N * sizeof(float));
        for (int r = 0; r < M && !rc; r += chunks[c]) {
            int m = M - r < chunks[c] ? M - r : chunks[c];
            rc = OP(x, gemm_rowinv, m, N, K, 0.7f, A + (size_t)r * K, K, B, K, 0.0f, C + (size_t)r * N, N) < 0;
        }
        rc = rc || OP(x, download, part, C, (size_t)M * N * sizeof *part) < 0;
        test_ok(!rc && !memcmp(full, part, (size_t)M * N * sizeof *full),
                "%s: gemm_rowinv %dx%dx%d in batches of %d rows: the bits of one batch of %d", x->ops.name, M, N, K,
                chunks[c], M);
    }
    if (!rc && !strcmp(x->ops.name, "cuda")) {
        float *ha = host_of(x, A, (size_t)M * K), *hb = host_of(x, B, (size_t)N * K);
        size_t bad = 0;
        for (int i = 0; i < 20; i++)
            for (int j = 0; j < N; j++) {
                float sum = 0.0f;
                for (int k = 0; k < K; k++)
                    sum = fmaf(ha[(size_t)i * K + k], hb[(size_t)j * K + k], sum);
                float v = 0.7f * sum;
                bad += memcmp(&v, &full[(size_t)i * N + j], sizeof v) != 0;
            }
        test_ok(bad == 0, "cuda: gemm_rowinv equals its chain of fmaf in k order bit for bit (%zu of %d differ)", bad,
                20 * N);
        free(ha);
        free(hb);
    }
    free(full);
    free(part);
    backend_close(x);
}

/* alloc_sparse (ABI 2.6): a large buffer (past the cpu plugin's huge-page size) and a small one hold
 * what is written to them, a range of the large one discarded reads back as written again, and
 * free takes them. */
static void check_alloc_sparse(const char *path, const struct nmt_backend_opts *opts)
{
    struct backend *x = backend_open(path, opts);
    if (!x || !x->ops.alloc_sparse) {
        test_ok(x != NULL, "%s: alloc_sparse # SKIP optional slot absent", path);
        backend_close(x);
        return;
    }
    static const size_t sizes[] = {(size_t)9 << 20, 1000};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        unsigned char *d = x->ops.alloc_sparse(x->ctx, n), *h = malloc(n), *back = malloc(n);
        for (size_t i = 0; h && i < n; i++)
            h[i] = (unsigned char)(i * 2654435761u >> 13);
        int rc = !d || !h || !back || OP(x, upload, d, h, n) < 0 || OP(x, download, back, d, n) < 0 ||
                 memcmp(back, h, n);
        if (!rc && x->ops.discard)
            rc = OP(x, discard, d, n / 2) < 0 || OP(x, upload, d, h, n / 2) < 0 || OP(x, download, back, d, n) < 0 ||
                 memcmp(back, h, n);
        test_ok(!rc, "%s: alloc_sparse of %zu bytes holds what is written to it", x->ops.name, n);
        x->ops.free(x->ctx, d);
        free(h);
        free(back);
    }
    backend_close(x);
}

/* linear_rows (ABI 2.9): rows of a weight packed in float32 (by linear_pack from a strided W) are W's
 * rows bit for bit, a negative row zeros; a row past N and a weight packed in int8 are errors. */
static void check_linear_rows(const char *path, const struct nmt_backend_opts *opts)
{
    struct backend *x = backend_open(path, opts);
    if (!x || !x->ops.linear_rows || !x->ops.linear_pack) {
        test_ok(x != NULL, "%s: linear_rows # SKIP optional slot absent", path);
        backend_close(x);
        return;
    }
    static const int shapes[][3] = { { 37, 19, 23 }, { 16, 1, 1 }, { 1000, 64, 64 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int N = shapes[s][0], K = shapes[s][1], ldw = shapes[s][2], n = 7;
        int32_t rows[7] = { 0, N - 1, N / 2, -1, 5 % N, N - 1, 3 % N }, past = N;
        float *W = drand(x, (size_t)N * ldw, -1, 1), *out = drand(x, (size_t)n * K, -1, 1);
        float *hw = host_of(x, W, (size_t)N * ldw), *ho = malloc((size_t)n * K * sizeof *ho);
        void *Wp = x->ops.alloc(x->ctx, x->ops.linear_packed_bytes(x->ctx, N, K));
        int rc = !Wp || !ho || OP(x, linear_pack, Wp, W, N, K, ldw) < 0 ||
                 OP(x, linear_rows, out, Wp, dints(x, rows, n), n) < 0 ||
                 OP(x, download, ho, out, (size_t)n * K * sizeof *ho) < 0;
        int same = !rc;
        for (int i = 0; same && i < n; i++)
            for (int k = 0; k < K; k++) {
                float want = rows[i] < 0 ? 0.0f : hw[(size_t)rows[i] * ldw + k];
                same &= !memcmp(&ho[(size_t)i * K + k], &want, sizeof want);
            }
        test_ok(same, "%s: linear_rows of a %dx%d weight (ldw %d) packed in float32: its rows bit for bit, row -1 zeros",
                x->ops.name, N, K, ldw);
        test_ok(x->ops.linear_rows(x->ctx, out, Wp, dints(x, &past, 1), 1) < 0,
                "%s: linear_rows: row %d of %d rows is an error", x->ops.name, N, N);
        size_t qb = x->ops.linear_packed_bytes_q ? x->ops.linear_packed_bytes_q(x->ctx, N, K, NMT_DTYPE_INT8) : 0;
        void *Wq = qb ? x->ops.alloc(x->ctx, qb) : NULL;
        if (Wq && x->ops.linear_pack_q(x->ctx, Wq, W, N, K, ldw, NMT_DTYPE_INT8) == 0)
            test_ok(x->ops.linear_rows(x->ctx, out, Wq, dints(x, rows, 1), 1) < 0,
                    "%s: linear_rows of a weight packed in int8 is an error", x->ops.name);
        free(hw);
        free(ho);
    }
    backend_close(x);
}

/* discard (ABI 2.4): in a large buffer (the cpu plugin's huge-page one) and a small one, a range
 * with unaligned ends is given back; every byte outside it keeps its value, and the range holds
 * what is written to it afterwards. */
static void check_discard(const char *path, const struct nmt_backend_opts *opts)
{
    struct backend *x = backend_open(path, opts);
    if (!x || !x->ops.discard) {
        test_ok(x != NULL, "%s: discard # SKIP optional slot absent", path);
        backend_close(x);
        return;
    }
    static const size_t sizes[][3] = { { (size_t)9 << 20, 1000, (size_t)5 << 20 }, { 100000, 333, 50001 },
                                       { 64, 8, 40 } };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s][0], at = sizes[s][1], len = sizes[s][2];
        unsigned char *d = x->ops.alloc(x->ctx, n), *h = malloc(n), *back = malloc(n);
        for (size_t i = 0; h && i < n; i++)
            h[i] = (unsigned char)(i * 2654435761u >> 13);
        int rc = !d || !h || !back || OP(x, upload, d, h, n) < 0 || OP(x, discard, d + at, len) < 0 ||
                 OP(x, download, back, d, n) < 0;
        test_ok(!rc && !memcmp(back, h, at) && !memcmp(back + at + len, h + at + len, n - at - len),
                "%s: discard of %zu bytes at %zu in a buffer of %zu: the bytes outside keep their values", x->ops.name,
                len, at, n);
        for (size_t i = at; h && i < at + len; i++)
            h[i] = (unsigned char)~h[i];
        rc = rc || OP(x, upload, d + at, h + at, len) < 0 || OP(x, download, back, d, n) < 0;
        test_ok(!rc && !memcmp(back, h, n), "%s: discard: the range holds what is written to it afterwards",
                x->ops.name);
        free(h);
        free(back);
    }
    backend_close(x);
}

int main(void)
{
    struct nmt_backend_opts opts = { .size = sizeof opts, .threads = 2 };
    struct backend *cpu = backend_open("cpu", &opts);
    test_ok(cpu != NULL, "cpu backend opens (%s)", cpu ? cpu->path : nmt_errmsg());
    if (!cpu)
        return test_done();
    cpu_reference_checks(cpu);
    cpu_abi25_checks(cpu);
    struct backend_info *list;
    int n = backend_list(&list), tested = 0;
    for (int i = 0; i < n; i++) {
        if (list[i].error)
            continue;
        if (list[i].score <= 0) {
            test_ok(1, "%s (%s): # SKIP score 0: no usable device on this machine, not compared with cpu",
                    list[i].name, list[i].path);
            continue;
        }
        struct backend *x = backend_open(list[i].path, &opts);
        test_ok(x != NULL, "%s (%s) opens: %s", list[i].name, list[i].path, x ? "ok" : nmt_errmsg());
        if (!x)
            continue;
        tested++;
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
            if ((ops[k].optional == 2 && !x->ops.gemm_rowinv) ||
                (ops[k].optional == 3 && !(x->ops.linear_packed_bytes && x->ops.linear_pack && x->ops.linear_rowinv)) ||
                (ops[k].optional == 4 && !(x->ops.attention_forward_lse && x->ops.attention_backward_lse)) ||
                (ops[k].optional == 5 && !(x->ops.set_precision && x->ops.cast && x->ops.gemm_ex)) ||
                (ops[k].optional == 6 && !(x->ops.embedding_table_forward && x->ops.embedding_table_backward)) ||
                (ops[k].optional == 7 && !(x->ops.swish_forward && x->ops.swish_backward)) ||
                (ops[k].optional == 8 && !x->ops.topk_logits) ||
                (ops[k].optional == 9 && !x->ops.attention_forward_rows)) {
                test_ok(1, "%s: %s # SKIP optional slot absent", x->ops.name, ops[k].name);
                continue;
            }
            struct result rx = { 0 }, rc = { 0 };
            rng_state = 1000 + k;
            ops[k].run(x, &rx);
            rng_state = 1000 + k;
            ops[k].run(cpu, &rc);
            double e = compare(&rx, &rc);
            int same = !strcmp(x->ops.name, "cpu");
            test_ok(rx.rc == 0 && rc.rc == 0 && (same ? e == 0 : e <= ops[k].tol),
                    "%s vs cpu: %s: %zu values, max relative difference %.3g (tolerance %s)", x->ops.name,
                    ops[k].name, rx.n, e, same ? "0, same plugin" : "per op");
            free(rx.v);
            free(rc.v);
            free(rx.seg);
            free(rc.seg);
        }
        backend_close(x);
        check_share(list[i].path, &opts);
        check_rowinv(list[i].path, &opts);
        check_attention_rows(list[i].path, &opts);
        check_discard(list[i].path, &opts);
        check_linear_rows(list[i].path, &opts);
        check_alloc_sparse(list[i].path, &opts);
    }
    test_ok(tested >= 1, "%d usable plugin(s) tested against cpu", tested);
    backend_list_free(list, n);
    backend_close(cpu);
    return test_done();
}
