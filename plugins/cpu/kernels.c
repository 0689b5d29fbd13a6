/* kernels.c: the cpu backend's non-matmul kernels except attention (see plugins/backend.h for
 * every kernel's contract). Each kernel validates its arguments serially, then runs a body over
 * a parallel-for whose result does not depend on how the range is split. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>

#include "cpu.h"
#include "kernels.h"

#define EW_GRAIN 16384 /* elements per chunk of an elementwise loop, at least */
#define SUMSQ_BLOCK 4096

/* ---------------- elementwise ---------------- */

struct ew {
    float *out;
    const float *a, *b;
    float s;
    uint64_t seed, offset;
};

CPU_VEC_BODY(add_body)
{
    const struct ew *e = arg;
    float *out = e->out;
    const float *a = e->a, *b = e->b;
    for (int64_t i = lo; i < hi; i++)
        out[i] = a[i] + b[i];
}

CPU_VEC_BODY(relu_body)
{
    const struct ew *e = arg;
    float *out = e->out;
    const float *a = e->a;
    for (int64_t i = lo; i < hi; i++)
        out[i] = a[i] > 0 ? a[i] : 0.0f;
}

CPU_VEC_BODY(relu_back_body)
{
    const struct ew *e = arg; /* out = dx, a = dout, b = y */
    float *out = e->out;
    const float *a = e->a, *b = e->b;
    for (int64_t i = lo; i < hi; i++)
        out[i] = b[i] > 0 ? a[i] : 0.0f;
}

CPU_VEC_BODY(swish_body)
{
    struct ew *e = arg; /* out, a = x */
    for (int64_t i = lo; i < hi; i++)
        e->out[i] = e->a[i] / (1.0f + expf(-e->a[i]));
}

CPU_VEC_BODY(swish_back_body)
{
    struct ew *e = arg; /* out = dx, a = dout, b = x */
    for (int64_t i = lo; i < hi; i++) {
        float x = e->b[i], s = 1.0f / (1.0f + expf(-x));
        e->out[i] = e->a[i] * (s + x * s * (1.0f - s));
    }
}

CPU_VEC_BODY(dropout_body)
{
    const struct ew *e = arg; /* out, a = input, s = p */
    float p = e->s, k = 1.0f / (1.0f - p), *out = e->out;
    const float *a = e->a;
    uint64_t key = rng_key(e->seed), offset = e->offset;
    for (int64_t i = lo; i < hi; i++)
        out[i] = a[i] * (rng_uniform_keyed(key, offset + (uint64_t)i) >= p ? k : 0.0f);
}

static int ew_run(nmt_bctx *ctx, pool_fn fn, struct ew *e, size_t n)
{
    pool_for(ctx->pool, (int64_t)n, EW_GRAIN, fn, e);
    return 0;
}

int cpu_add(nmt_bctx *ctx, float *out, const float *a, const float *b, size_t n)
{
    struct ew e = { .out = out, .a = a, .b = b };
    return ew_run(ctx, add_body, &e, n);
}

int cpu_relu_forward(nmt_bctx *ctx, float *out, const float *x, size_t n)
{
    struct ew e = { .out = out, .a = x };
    return ew_run(ctx, relu_body, &e, n);
}

int cpu_relu_backward(nmt_bctx *ctx, float *dx, const float *dout, const float *y, size_t n)
{
    struct ew e = { .out = dx, .a = dout, .b = y };
    return ew_run(ctx, relu_back_body, &e, n);
}

int cpu_swish_forward(nmt_bctx *ctx, float *out, const float *x, size_t n)
{
    struct ew e = { .out = out, .a = x };
    return ew_run(ctx, swish_body, &e, n);
}

int cpu_swish_backward(nmt_bctx *ctx, float *dx, const float *dout, const float *x, size_t n)
{
    struct ew e = { .out = dx, .a = dout, .b = x };
    return ew_run(ctx, swish_back_body, &e, n);
}

int cpu_dropout_forward(nmt_bctx *ctx, float *out, const float *x, size_t n, float p, uint64_t seed, uint64_t offset)
{
    if (!(p >= 0 && p < 1))
        return cpu_err(ctx, "dropout: probability %g outside [0, 1)", (double)p);
    if (p == 0) {
        if (out != x && n)
            memcpy(out, x, n * sizeof *out);
        return 0;
    }
    struct ew e = { .out = out, .a = x, .s = p, .seed = seed, .offset = offset };
    return ew_run(ctx, dropout_body, &e, n);
}

int cpu_dropout_backward(nmt_bctx *ctx, float *dx, const float *dout, size_t n, float p, uint64_t seed,
                         uint64_t offset)
{
    return cpu_dropout_forward(ctx, dx, dout, n, p, seed, offset);
}

/* ---------------- bias ---------------- */

struct rows {
    float *out, *out2, *out3;
    const float *a, *b, *c, *d, *e;
    const int32_t *ids, *pos;
    int M, N, V;
    float s;
    double *dres;
};

CPU_VEC_BODY(bias_add_body)
{
    const struct rows *r = arg;
    const float *bias = r->a;
    int N = r->N;
    for (int64_t i = lo; i < hi; i++) {
        float *o = r->out + i * N;
        for (int j = 0; j < N; j++)
            o[j] += bias[j];
    }
}

int cpu_bias_add(nmt_bctx *ctx, float *out, const float *bias, int M, int N)
{
    if (M < 0 || N < 0)
        return cpu_err(ctx, "bias_add: negative size M=%d N=%d", M, N);
    struct rows r = { .out = out, .a = bias, .M = M, .N = N };
    pool_for(ctx->pool, M, N ? EW_GRAIN / N + 1 : M, bias_add_body, &r);
    return 0;
}

/* Column sums over the column range [lo, hi), rows in order: deterministic. */
CPU_VEC_BODY(bias_grad_body)
{
    const struct rows *r = arg;
    float *out = r->out;
    for (int64_t i = 0; i < r->M; i++) {
        const float *g = r->a + i * r->N;
        for (int64_t j = lo; j < hi; j++)
            out[j] += g[j];
    }
}

int cpu_bias_grad(nmt_bctx *ctx, float *dbias, const float *dout, int M, int N)
{
    if (M < 0 || N < 0)
        return cpu_err(ctx, "bias_grad: negative size M=%d N=%d", M, N);
    struct rows r = { .out = dbias, .a = dout, .M = M, .N = N };
    pool_for(ctx->pool, N, 64, bias_grad_body, &r);
    return 0;
}

/* ---------------- embedding ---------------- */

/* Makes the position table cover positions < ROWS for width D; 0 or -1. */
static int pe_table(nmt_bctx *ctx, int rows, int D)
{
    if (ctx->pe && ctx->pe_d == D && ctx->pe_rows >= rows)
        return 0;
    if (ctx->pe_d == D && ctx->pe_rows * 2 > rows)
        rows = ctx->pe_rows * 2;
    float *pe = malloc((size_t)rows * (size_t)D * sizeof *pe);
    if (!pe)
        return cpu_err(ctx, "out of memory (position table %d x %d)", rows, D);
    for (int p = 0; p < rows; p++)
        for (int i = 0; i < D; i += 2) {
            double ang = p / pow(10000.0, (double)i / D);
            pe[(size_t)p * D + i] = (float)sin(ang);
            pe[(size_t)p * D + i + 1] = (float)cos(ang);
        }
    free(ctx->pe);
    ctx->pe = pe;
    ctx->pe_rows = rows;
    ctx->pe_d = D;
    return 0;
}

/* Checks the sizes and the ids of the rows with pos >= 0 (with ZERO_OK, ids < 0 too: zero rows);
 * *MAXPOS receives the largest position. 0 or -1. */
static int check_ids(nmt_bctx *ctx, const char *what, const int32_t *ids, const int32_t *pos, int N, int D, int V,
                     int zero_ok, int *maxpos)
{
    if (N < 0 || D <= 0 || V <= 0)
        return cpu_err(ctx, "%s: invalid size N=%d D=%d V=%d", what, N, D, V);
    if (D % 2)
        return cpu_err(ctx, "%s: model width %d is odd", what, D);
    int mp = -1;
    for (int n = 0; n < N; n++) {
        if (pos[n] < 0)
            continue;
        if ((ids[n] < 0 && !zero_ok) || ids[n] >= V)
            return cpu_err(ctx, "%s: token id %d at row %d outside [0, %d)", what, ids[n], n, V);
        if (pos[n] > mp)
            mp = pos[n];
    }
    *maxpos = mp;
    return 0;
}

CPU_VEC_BODY(emb_fwd_body)
{
    struct rows *r = arg; /* out, a = emb, b = pe table */
    int D = r->N;
    for (int64_t n = lo; n < hi; n++) {
        float *o = r->out + n * D;
        if (r->pos[n] < 0) {
            memset(o, 0, (size_t)D * sizeof *o);
            continue;
        }
        const float *p = r->b + (int64_t)r->pos[n] * D;
        if (r->ids[n] < 0) { /* a zero embedding (embedding_table_forward) */
            memcpy(o, p, (size_t)D * sizeof *o);
            continue;
        }
        const float *e = r->a + (int64_t)r->ids[n] * D;
        for (int j = 0; j < D; j++)
            o[j] = e[j] * r->s + p[j];
    }
}

int cpu_embedding_forward(nmt_bctx *ctx, float *out, const int32_t *ids, const int32_t *pos, const float *emb, int N,
                          int D, int V, float scale)
{
    int mp = -1;
    if (check_ids(ctx, "embedding_forward", ids, pos, N, D, V, 0, &mp) < 0 || pe_table(ctx, mp + 1, D) < 0)
        return -1;
    struct rows r = { .out = out, .a = emb, .b = ctx->pe, .ids = ids, .pos = pos, .N = D, .s = scale };
    pool_for(ctx->pool, N, EW_GRAIN / D + 1, emb_fwd_body, &r);
    return 0;
}

/* Each chunk owns a column range of demb and visits the rows in order: deterministic. */
CPU_VEC_BODY(emb_bwd_body)
{
    struct rows *r = arg; /* out = demb, a = dout, M = rows, N = D */
    for (int64_t n = 0; n < r->M; n++) {
        if (r->pos[n] < 0 || r->ids[n] < 0)
            continue;
        float *g = r->out + (int64_t)r->ids[n] * r->N;
        const float *d = r->a + n * r->N;
        for (int64_t j = lo; j < hi; j++)
            g[j] += r->s * d[j];
    }
}

int cpu_embedding_backward(nmt_bctx *ctx, float *demb, const float *dout, const int32_t *ids, const int32_t *pos,
                           int N, int D, int V, float scale)
{
    int mp = -1;
    if (check_ids(ctx, "embedding_backward", ids, pos, N, D, V, 0, &mp) < 0)
        return -1;
    struct rows r = { .out = demb, .a = dout, .ids = ids, .pos = pos, .M = N, .N = D, .s = scale };
    pool_for(ctx->pool, D, 32, emb_bwd_body, &r);
    return 0;
}

int cpu_embedding_table_forward(nmt_bctx *ctx, float *out, const int32_t *ids, const int32_t *pos, const float *emb,
                                const float *pe, int N, int D, int V, int P, float scale)
{
    int mp = -1;
    if (check_ids(ctx, "embedding_table_forward", ids, pos, N, D, V, 1, &mp) < 0)
        return -1;
    if (mp >= P)
        return cpu_err(ctx, "embedding_table_forward: position %d past the table's %d rows", mp, P);
    struct rows r = { .out = out, .a = emb, .b = pe, .ids = ids, .pos = pos, .N = D, .s = scale };
    pool_for(ctx->pool, N, EW_GRAIN / D + 1, emb_fwd_body, &r);
    return 0;
}

int cpu_embedding_table_backward(nmt_bctx *ctx, float *demb, const float *dout, const int32_t *ids,
                                 const int32_t *pos, int N, int D, int V, float scale)
{
    int mp = -1;
    if (check_ids(ctx, "embedding_table_backward", ids, pos, N, D, V, 1, &mp) < 0)
        return -1;
    struct rows r = { .out = demb, .a = dout, .ids = ids, .pos = pos, .M = N, .N = D, .s = scale };
    pool_for(ctx->pool, D, 32, emb_bwd_body, &r);
    return 0;
}

/* ---------------- layer norm ---------------- */

CPU_VEC_BODY(ln_fwd_body)
{
    struct rows *r = arg; /* out, out2 = mean, out3 = rstd, a = x, b = gamma, c = beta, s = eps */
    int D = r->N;
    for (int64_t n = lo; n < hi; n++) {
        const float *x = r->a + n * D;
        float *o = r->out + n * D;
        float mean = vsum(x, D) / D;
        float acc[LANES] = { 0 };
        int j = 0;
        for (; j + LANES <= D; j += LANES)
            for (int l = 0; l < LANES; l++)
                acc[l] += (x[j + l] - mean) * (x[j + l] - mean);
        for (int l = 0; j < D; j++, l++)
            acc[l] += (x[j] - mean) * (x[j] - mean);
        float var = vsum(acc, LANES) / D;
        float rstd = 1.0f / sqrtf(var + r->s);
        if (r->out2)
            r->out2[n] = mean;
        if (r->out3)
            r->out3[n] = rstd;
        for (j = 0; j < D; j++)
            o[j] = (x[j] - mean) * rstd * r->b[j] + r->c[j];
    }
}

int cpu_layernorm_forward(nmt_bctx *ctx, float *out, float *mean, float *rstd, const float *x, const float *gamma,
                          const float *beta, int N, int D, float eps)
{
    if (N < 0 || D <= 0)
        return cpu_err(ctx, "layernorm_forward: invalid size N=%d D=%d", N, D);
    struct rows r = { .out = out, .out2 = mean, .out3 = rstd, .a = x, .b = gamma, .c = beta, .N = D, .s = eps };
    pool_for(ctx->pool, N, EW_GRAIN / D + 1, ln_fwd_body, &r);
    return 0;
}

/* dgamma/dbeta over a column range, rows in order. */
CPU_VEC_BODY(ln_bwd_param_body)
{
    const struct rows *r = arg; /* out = dgamma, out2 = dbeta, a = dout, b = x, c = mean, d = rstd */
    int D = r->N;
    float *dgamma = r->out, *dbeta = r->out2;
    for (int64_t n = 0; n < r->M; n++) {
        const float *g = r->a + n * D, *x = r->b + n * D;
        float mu = r->c[n], rs = r->d[n];
        for (int64_t j = lo; j < hi; j++) {
            dgamma[j] += g[j] * ((x[j] - mu) * rs);
            dbeta[j] += g[j];
        }
    }
}

CPU_VEC_BODY(ln_bwd_x_body)
{
    struct rows *r = arg; /* out = dx, a = dout, b = x, c = mean, d = rstd, e = gamma */
    int D = r->N;
    for (int64_t n = lo; n < hi; n++) {
        const float *g = r->a + n * D, *x = r->b + n * D;
        float *dx = r->out + n * D;
        float mu = r->c[n], rs = r->d[n];
        float a1[LANES] = { 0 }, a2[LANES] = { 0 };
        int j = 0;
        for (; j + LANES <= D; j += LANES)
            for (int l = 0; l < LANES; l++) {
                float dxh = g[j + l] * r->e[j + l];
                a1[l] += dxh;
                a2[l] += dxh * ((x[j + l] - mu) * rs);
            }
        for (int l = 0; j < D; j++, l++) {
            float dxh = g[j] * r->e[j];
            a1[l] += dxh;
            a2[l] += dxh * ((x[j] - mu) * rs);
        }
        float m1 = vsum(a1, LANES) / D, m2 = vsum(a2, LANES) / D;
        for (j = 0; j < D; j++)
            dx[j] = rs * (g[j] * r->e[j] - m1 - (x[j] - mu) * rs * m2);
    }
}

int cpu_layernorm_backward(nmt_bctx *ctx, float *dx, float *dgamma, float *dbeta, const float *dout, const float *x,
                           const float *mean, const float *rstd, const float *gamma, int N, int D)
{
    if (N < 0 || D <= 0)
        return cpu_err(ctx, "layernorm_backward: invalid size N=%d D=%d", N, D);
    struct rows r = { .out = dgamma, .out2 = dbeta, .a = dout, .b = x, .c = mean, .d = rstd, .M = N, .N = D };
    pool_for(ctx->pool, D, 32, ln_bwd_param_body, &r); /* before dx, which may overwrite dout */
    struct rows r2 = { .out = dx, .a = dout, .b = x, .c = mean, .d = rstd, .e = gamma, .M = N, .N = D };
    pool_for(ctx->pool, N, EW_GRAIN / D + 1, ln_bwd_x_body, &r2);
    return 0;
}

/* ---------------- cross-entropy ---------------- */

/* The sum of exp(Z[j] - MX) over the V logits Z, over LANES partial sums (lane l: j = l mod LANES,
 * in order), then vsum: the same bits on every path. */
static inline __attribute__((always_inline)) float sum_exp(const float *z, int V, float mx)
{
    float acc[LANES] = { 0 };
    int j = 0;
    for (; j + LANES <= V; j += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] += vexp(z[j + l] - mx);
    for (int l = 0; j < V; j++, l++)
        acc[l] += vexp(z[j] - mx);
    return vsum(acc, LANES);
}

struct xent {
    float *dlogits, *row_nll;
    const float *logits;
    const int32_t *tgt;
    int V, pad;
    float eps, gscale;
    double *loss, *nll; /* (N) per-row results, summed in order afterwards */
};

CPU_VEC_BODY(xent_body)
{
    struct xent *x = arg;
    int V = x->V;
    for (int64_t n = lo; n < hi; n++) {
        const float *z = x->logits + n * V;
        int t = x->tgt[n];
        if (t == x->pad) {
            x->loss[n] = x->nll[n] = 0;
            if (x->row_nll)
                x->row_nll[n] = 0;
            if (x->dlogits)
                memset(x->dlogits + n * V, 0, (size_t)V * sizeof(float));
            continue;
        }
        float mx = vmax(z, V);
        double lse = mx + log((double)sum_exp(z, V, mx));
        double sumz = vsum(z, V);
        double nll = lse - z[t];
        x->nll[n] = nll;
        x->loss[n] = (1 - (double)x->eps) * nll + (double)x->eps * (lse - sumz / V);
        if (x->row_nll)
            x->row_nll[n] = (float)nll;
        if (x->dlogits) {
            float *d = x->dlogits + n * V;
            float flse = (float)lse, s = x->gscale, sm = x->eps / V;
            float zt = z[t]; /* d may alias z */
            for (int j = 0; j < V; j++)
                d[j] = s * (vexp(z[j] - flse) - sm);
            d[t] = s * (vexp(zt - flse) - sm - (1 - x->eps));
        }
    }
}

int cpu_cross_entropy(nmt_bctx *ctx, struct nmt_xent_result *res, float *dlogits, float *row_nll, const float *logits,
                      const int32_t *tgt, int N, int V, float eps, int pad_id, float grad_scale)
{
    if (N < 0 || V <= 0)
        return cpu_err(ctx, "cross_entropy: invalid size N=%d V=%d", N, V);
    if (!(eps >= 0 && eps <= 1))
        return cpu_err(ctx, "cross_entropy: label smoothing %g outside [0, 1]", (double)eps);
    int64_t count = 0;
    for (int n = 0; n < N; n++) {
        if (tgt[n] == pad_id)
            continue;
        if (tgt[n] < 0 || tgt[n] >= V)
            return cpu_err(ctx, "cross_entropy: target %d at row %d outside [0, %d)", tgt[n], n, V);
        count++;
    }
    double *tmp = malloc(2 * (size_t)(N ? N : 1) * sizeof *tmp);
    if (!tmp)
        return cpu_err(ctx, "out of memory");
    struct xent x = { .dlogits = dlogits, .row_nll = row_nll, .logits = logits, .tgt = tgt, .V = V, .pad = pad_id,
                      .eps = eps, .gscale = grad_scale, .loss = tmp, .nll = tmp + N };
    pool_for(ctx->pool, N, 1, xent_body, &x);
    double loss = 0, nll = 0;
    for (int n = 0; n < N; n++) {
        loss += tmp[n];
        nll += tmp[N + n];
    }
    free(tmp);
    if (res) {
        res->loss = loss;
        res->nll = nll;
        res->count = count;
    }
    return 0;
}

/* ---------------- optimizer ---------------- */

struct adam {
    float *p, *m, *v;
    const float *g;
    float b1, b2, eps, step, rbc2, gs;
};

CPU_VEC_BODY(adam_body)
{
    struct adam *a = arg;
    for (int64_t i = lo; i < hi; i++) {
        float g = a->g[i] * a->gs;
        float m = a->b1 * a->m[i] + (1 - a->b1) * g;
        float v = a->b2 * a->v[i] + (1 - a->b2) * g * g;
        a->m[i] = m;
        a->v[i] = v;
        a->p[i] -= a->step * m / (sqrtf(v) * a->rbc2 + a->eps);
    }
}

int cpu_adam_update(nmt_bctx *ctx, float *param, float *m, float *v, const float *grad, size_t n, float lr,
                    float beta1, float beta2, float eps, int64_t t, float grad_scale)
{
    if (t < 1)
        return cpu_err(ctx, "adam_update: step %lld < 1", (long long)t);
    double bc1 = 1 - pow(beta1, (double)t), bc2 = 1 - pow(beta2, (double)t);
    if (!(bc1 > 0 && bc2 > 0))
        return cpu_err(ctx, "adam_update: betas %g, %g must be in [0, 1)", (double)beta1, (double)beta2);
    struct adam a = { .p = param, .m = m, .v = v, .g = grad, .b1 = beta1, .b2 = beta2, .eps = eps,
                      .step = (float)(lr / bc1), .rbc2 = (float)(1 / sqrt(bc2)), .gs = grad_scale };
    pool_for(ctx->pool, (int64_t)n, EW_GRAIN, adam_body, &a);
    return 0;
}

struct sumsq {
    const float *x;
    int64_t n;
    double *part;
};

CPU_VEC_BODY(sumsq_body)
{
    struct sumsq *s = arg;
    for (int64_t b = lo; b < hi; b++) {
        int64_t i0 = b * SUMSQ_BLOCK, len = s->n - i0 < SUMSQ_BLOCK ? s->n - i0 : SUMSQ_BLOCK;
        s->part[b] = vdot(s->x + i0, s->x + i0, len);
    }
}

int cpu_sumsq(nmt_bctx *ctx, double *out, const float *x, size_t n)
{
    int64_t nb = ((int64_t)n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
    double *part = malloc((size_t)(nb ? nb : 1) * sizeof *part);
    if (!part)
        return cpu_err(ctx, "out of memory");
    struct sumsq s = { .x = x, .n = (int64_t)n, .part = part };
    pool_for(ctx->pool, nb, 4, sumsq_body, &s);
    double t = 0;
    for (int64_t b = 0; b < nb; b++)
        t += part[b];
    free(part);
    *out = t;
    return 0;
}

/* ---------------- decoding ---------------- */

struct topk {
    float *values;
    int32_t *idx;
    const float *logits;
    int V, K;
    int isa;    /* CPU_ISA_AVX512 or CPU_ISA_AVX2: use the scans below */
    int norm;   /* subtract each row's log-sum-exp (topk_logsoftmax), or not (topk_logits) */
};

/* The scans of a row of logits, written out for AVX-512 and AVX2 (GCC does not vectorise the max of
 * floats or an early exit by itself); each gives the same result as the plain loop after them. */

/* vmax (cpu.h) of X[0..n): lane l keeps x > acc ? x : acc, as _mm512_max_ps(x, acc) does; four
 * accumulators (a maximum is the same in any order), so that the loop is not one chain of maxima. */
ISA_AVX512 static float max_avx512(const float *x, int64_t n)
{
    __m512 acc = _mm512_set1_ps(x[0]), a1 = acc, a2 = acc, a3 = acc;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        acc = _mm512_max_ps(_mm512_loadu_ps(x + i), acc);
        a1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_max_ps(_mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_max_ps(_mm512_loadu_ps(x + i + 48), a3);
    }
    acc = _mm512_max_ps(_mm512_max_ps(a1, acc), _mm512_max_ps(a3, a2));
    for (; i + 16 <= n; i += 16)
        acc = _mm512_max_ps(_mm512_loadu_ps(x + i), acc);
    float a[16];
    _mm512_storeu_ps(a, acc);
    for (int l = 0; i < n; i++, l++)
        a[l] = x[i] > a[l] ? x[i] : a[l];
    float m = a[0];
    for (int l = 1; l < 16; l++)
        m = a[l] > m ? a[l] : m;
    return m;
}

/* The first index j >= FROM with X[j] > THR, or N. */
ISA_AVX512 static int64_t above_avx512(const float *x, int64_t from, int64_t n, float thr)
{
    __m512 t = _mm512_set1_ps(thr);
    int64_t j = from;
    for (; j + 16 <= n; j += 16) {
        __mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + j), t, _CMP_GT_OQ);
        if (m)
            return j + __builtin_ctz(m);
    }
    for (; j < n && !(x[j] > thr); j++)
        ;
    return j;
}


/* max_avx512 on AVX2: lane l keeps x > acc ? x : acc, as _mm256_max_ps(x, acc) does. */
ISA_AVX2 static float max_avx2(const float *x, int64_t n)
{
    __m256 acc = _mm256_set1_ps(x[0]), a1 = acc, a2 = acc, a3 = acc;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc = _mm256_max_ps(_mm256_loadu_ps(x + i), acc);
        a1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_max_ps(_mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_max_ps(_mm256_loadu_ps(x + i + 24), a3);
    }
    acc = _mm256_max_ps(_mm256_max_ps(a1, acc), _mm256_max_ps(a3, a2));
    for (; i + 8 <= n; i += 8)
        acc = _mm256_max_ps(_mm256_loadu_ps(x + i), acc);
    float a[8];
    _mm256_storeu_ps(a, acc);
    for (int l = 0; i < n; i++, l++)
        a[l] = x[i] > a[l] ? x[i] : a[l];
    float m = a[0];
    for (int l = 1; l < 8; l++)
        m = a[l] > m ? a[l] : m;
    return m;
}

/* above_avx512 on AVX2. */
ISA_AVX2 static int64_t above_avx2(const float *x, int64_t from, int64_t n, float thr)
{
    __m256 t = _mm256_set1_ps(thr);
    int64_t j = from;
    for (; j + 8 <= n; j += 8) {
        int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), t, _CMP_GT_OQ));
        if (m)
            return j + __builtin_ctz((unsigned)m);
    }
    for (; j < n && !(x[j] > thr); j++)
        ;
    return j;
}

static int64_t above_plain(const float *x, int64_t from, int64_t n, float thr)
{
    int64_t j = from;
    while (j < n && !(x[j] > thr))
        j++;
    return j;
}

/* The log-sum-exp of the V logits Z, on the scans of ISA. */
static inline __attribute__((always_inline)) float row_lse(const float *z, int V, int isa)
{
    float mx = isa >= CPU_ISA_AVX512 ? max_avx512(z, V) : isa >= CPU_ISA_AVX2 ? max_avx2(z, V) : vmax(z, V);
    return mx + logf(sum_exp(z, V, mx));
}

CPU_VEC_BODY(topk_body)
{
    struct topk *t = arg;
    int V = t->V, K = t->K;
    for (int64_t n = lo; n < hi; n++) {
        const float *z = t->logits + n * V;
        float *val = t->values + n * K;
        int32_t *id = t->idx + n * K;
        float lse = t->norm ? row_lse(z, V, t->isa) : 0;
        int j;
        /* insertion into a sorted list; scanning in index order and inserting after equal
         * values keeps ties in index order. Once the list is full, only values above the last
         * kept one are looked at (a scan for the next such index). */
        int have = 0;
        for (j = 0; j < V; j++) {
            if (have == K) {
                j = (int)(t->isa >= CPU_ISA_AVX512 ? above_avx512(z, j, V, val[K - 1])
                          : t->isa >= CPU_ISA_AVX2 ? above_avx2(z, j, V, val[K - 1])
                                                   : above_plain(z, j, V, val[K - 1]));
                if (j == V)
                    break;
            }
            float x = z[j];
            int at = have < K ? have : K - 1;
            while (at > 0 && x > val[at - 1]) {
                val[at] = val[at - 1];
                id[at] = id[at - 1];
                at--;
            }
            val[at] = x;
            id[at] = j;
            if (have < K)
                have++;
        }
        for (int k = 0; k < K && t->norm; k++)
            val[k] -= lse;
    }
}

/* topk_logsoftmax (NORM) or topk_logits (not), named WHAT in errors. */
static int topk_rows(nmt_bctx *ctx, float *values, int32_t *indices, const float *logits, int N, int V, int K,
                     int norm, const char *what)
{
    if (N < 0 || V <= 0 || K < 1 || K > V)
        return cpu_err(ctx, "%s: invalid size N=%d V=%d K=%d", what, N, V, K);
    struct topk t = { .values = values, .idx = indices, .logits = logits, .V = V, .K = K,
                      .isa = cpu_isa(), .norm = norm };
    pool_for(ctx->pool, N, 1, topk_body, &t);
    return 0;
}

int cpu_topk_logsoftmax(nmt_bctx *ctx, float *values, int32_t *indices, const float *logits, int N, int V, int K)
{
    return topk_rows(ctx, values, indices, logits, N, V, K, 1, "topk_logsoftmax");
}

int cpu_topk_logits(nmt_bctx *ctx, float *values, int32_t *indices, const float *logits, int N, int V, int K)
{
    return topk_rows(ctx, values, indices, logits, N, V, K, 0, "topk_logits");
}

struct gather {
    float *dst;
    const float *src;
    const int32_t *idx;
    int64_t row;
};

static void gather_body(void *arg, int64_t lo, int64_t hi, int tid)
{
    struct gather *g = arg;
    for (int64_t i = lo; i < hi; i++)
        memcpy(g->dst + i * g->row, g->src + (int64_t)g->idx[i] * g->row, (size_t)g->row * sizeof(float));
}

int cpu_gather_rows(nmt_bctx *ctx, float *dst, const float *src, const int32_t *idx, int N, int64_t row)
{
    if (N < 0 || row < 0)
        return cpu_err(ctx, "gather_rows: invalid size N=%d row=%lld", N, (long long)row);
    for (int i = 0; i < N; i++)
        if (idx[i] < 0)
            return cpu_err(ctx, "gather_rows: negative index %d at %d", idx[i], i);
    struct gather g = { .dst = dst, .src = src, .idx = idx, .row = row };
    pool_for(ctx->pool, N, row ? EW_GRAIN / row + 1 : N, gather_body, &g);
    return 0;
}
