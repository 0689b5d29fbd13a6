/* attention.c: fused masked multi-head attention, forward and backward (contract in
 * plugins/backend.h, struct nmt_attn_args). Plain loops over (batch, head, query): scores, a
 * softmax over the visible prefix of the keys, optional counter-based dropout, weighted sum. */
#include <immintrin.h>
#include <math.h>

#include "cpu.h"

struct attn {
    float *out, *P, *dq, *dk, *dv;
    float *lse;           /* (B,H,Tq,2) forward statistics to save, or NULL */
    const float *q, *k, *v, *dout, *Pin;
    const float *lsein;   /* (B,H,Tq,2) saved statistics: backward recomputes P from them (Pin NULL) */
    const struct nmt_attn_args *a;
    nmt_bctx *ctx;
};

/* Number of keys visible to query I of batch item B: a prefix [0, n) of the keys. */
static int visible(const struct nmt_attn_args *a, int b, int i)
{
    int n = a->klen ? a->klen[b] : a->Tk;
    if (a->causal) {
        int64_t c = (int64_t)i + a->causal_shift + 1;
        if (c < n)
            n = c < 0 ? 0 : (int)c;
    }
    return n;
}

static int check(nmt_bctx *ctx, const char *what, const struct nmt_attn_args *a)
{
    if (a->B < 0 || a->Tq < 0 || a->Tk < 0 || a->H <= 0 || a->dh <= 0)
        return cpu_err(ctx, "%s: invalid size B=%d Tq=%d Tk=%d H=%d dh=%d", what, a->B, a->Tq, a->Tk, a->H, a->dh);
    int64_t w = (int64_t)a->H * a->dh;
    if (a->q_ld < w || a->k_ld < w || a->v_ld < w || a->o_ld < w)
        return cpu_err(ctx, "%s: row stride smaller than H*dh=%lld", what, (long long)w);
    if (!(a->dropout >= 0 && a->dropout < 1))
        return cpu_err(ctx, "%s: dropout %g outside [0, 1)", what, (double)a->dropout);
    if (a->klen)
        for (int b = 0; b < a->B; b++)
            if (a->klen[b] < 0 || a->klen[b] > a->Tk)
                return cpu_err(ctx, "%s: key length %d of batch item %d outside [0, %d]", what, a->klen[b], b, a->Tk);
    return 0;
}

CPU_VEC static void fwd_body(void *arg, int64_t lo, int64_t hi, int tid)
{
    struct attn *t = arg;
    const struct nmt_attn_args *a = t->a;
    int dh = a->dh, Tk = a->Tk;
    float *s = cpu_scratch_of(t->ctx, tid); /* (Tk) */
    float keep = 1.0f / (1.0f - a->dropout);
    uint64_t key = rng_key(a->seed);
    for (int64_t r = lo; r < hi; r++) { /* r = (b*H + h)*Tq + i */
        int i = (int)(r % a->Tq), h = (int)(r / a->Tq % a->H), b = (int)(r / a->Tq / a->H);
        const float *qi = t->q + b * a->q_bs + i * a->q_ld + h * dh;
        float *o = t->out + b * a->o_bs + i * a->o_ld + h * dh;
        float *prow = t->P ? t->P + r * Tk : NULL;
        int n = visible(a, b, i);
        for (int d = 0; d < dh; d++)
            o[d] = 0;
        if (t->lse)
            t->lse[2 * r] = t->lse[2 * r + 1] = 0;
        if (n == 0) {
            if (prow)
                memset(prow, 0, (size_t)Tk * sizeof *prow);
            continue;
        }
        const float *kb = t->k + b * a->k_bs + h * dh, *vb = t->v + b * a->v_bs + h * dh;
        for (int j = 0; j < n; j++)
            s[j] = vdot(qi, kb + j * a->k_ld, dh) * a->scale;
        float mx = vmax(s, n), sum = 0;
        for (int j = 0; j < n; j++) {
            s[j] = vexp(s[j] - mx);
            sum += s[j];
        }
        float inv = 1.0f / sum;
        for (int j = 0; j < n; j++)
            s[j] *= inv;
        if (t->lse) {
            t->lse[2 * r] = mx;
            t->lse[2 * r + 1] = sum;
        }
        if (prow)
            for (int j = 0; j < Tk; j++)
                prow[j] = j < n ? s[j] : 0.0f;
        uint64_t ctr = a->offset + (uint64_t)r * (uint64_t)Tk;
        for (int j = 0; j < n; j++) {
            float p = s[j];
            if (a->dropout > 0)
                p = rng_uniform_keyed(key, ctr + (uint64_t)j) >= a->dropout ? p * keep : 0.0f;
            const float *vj = vb + j * a->v_ld;
            for (int d = 0; d < dh; d++)
                o[d] += p * vj[d];
        }
    }
}

/* The forward of inference (no probabilities kept, no dropout) on AVX-512 when a head's width dh is
 * a multiple of 16 up to 64. One work item is a query row with all its heads (the keys it sees are
 * the same for every head), taken in groups of heads whose weighted sums run together, so that their
 * chains of fused multiply-adds overlap. Per head: the query and the output row stay in registers;
 * the scores of 16 keys at a time are 16 vector dot products whose lanes are summed together by a
 * fixed tree of shuffles and adds (sum16x16); exp 16 scores at a time (exp16); the softmax's sum
 * and the weighted sum over the keys in order. Each row and head is computed alone, as in fwd_body,
 * whose results it equals up to rounding. */
#define AVX512F __attribute__((target("avx512f")))
#define INFER_MAX_VEC 4
#define INFER_GROUP_VECS 8 /* accumulators of a group's weighted sums: heads of a group x dh / 16 */

/* Lane j of the result = the sum of the 16 lanes of X[j], j < 16, always in the same order. */
static inline __attribute__((always_inline)) AVX512F __m512 sum16x16(const __m512 *x)
{
    __m512 t[8], u[4];
    for (int p = 0; p < 8; p++) /* per 128-bit block: x2p[0]+x2p[2], x2p+1[0]+x2p+1[2], x2p[1]+x2p[3], ... */
        t[p] = _mm512_add_ps(_mm512_unpacklo_ps(x[2 * p], x[2 * p + 1]), _mm512_unpackhi_ps(x[2 * p], x[2 * p + 1]));
    for (int p = 0; p < 4; p++) { /* per block: the block's sums of keys 4p..4p+3 */
        __m512d a = _mm512_castps_pd(t[2 * p]), b = _mm512_castps_pd(t[2 * p + 1]);
        u[p] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    __m512 w01 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
    __m512 w23 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88), _mm512_shuffle_f32x4(w01, w23, 0xDD));
}

/* vexp (cpu.h) of each of the 16 lanes of X0, bit for bit: the same operations in the same order. */
static inline __attribute__((always_inline)) AVX512F __m512 exp16(__m512 x0)
{
    __m512 x = _mm512_min_ps(_mm512_max_ps(x0, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f)); /* NaN: -87 */
    __m512 magic = _mm512_set1_ps(12582912.0f);
    __m512 n = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), magic), magic);
    __m512 r = _mm512_sub_ps(_mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(0.693145751953125f))),
                             _mm512_mul_ps(n, _mm512_set1_ps(1.42860682030941723e-06f)));
    static const float c[6] = {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
    __m512 p = _mm512_set1_ps(1.0f / 720);
    for (int k = 0; k < 6; k++)
        p = _mm512_add_ps(_mm512_set1_ps(c[k]), _mm512_mul_ps(r, p));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    __mmask16 ord = _mm512_cmp_ps_mask(x0, x0, _CMP_ORD_Q);
    return _mm512_mask_blend_ps(ord, x0, _mm512_mul_ps(p, _mm512_castsi512_ps(e)));
}

/* The softmax weights of head row QI over the N keys at KB (row stride K_LD) into S (N rounded
 * up to 16), unnormalised; returns 1 / their sum (0 without keys). */
static inline __attribute__((always_inline)) AVX512F float scores16(float *s, const float *qi, const float *kb,
                                                                      int64_t k_ld, int n, int nv, float scale_)
{
    __m512 qv[INFER_MAX_VEC];
    for (int c = 0; c < nv; c++)
        qv[c] = _mm512_loadu_ps(qi + 16 * c);
    __m512 mxv = _mm512_set1_ps(-INFINITY), scale = _mm512_set1_ps(scale_);
    for (int j0 = 0; j0 < n; j0 += 16) {
        __m512 acc[16];
        for (int j = 0; j < 16; j++) {
            if (j0 + j >= n) {
                acc[j] = _mm512_setzero_ps();
                continue;
            }
            const float *kj = kb + (j0 + j) * k_ld;
            acc[j] = _mm512_mul_ps(qv[0], _mm512_loadu_ps(kj));
            for (int c = 1; c < nv; c++)
                acc[j] = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(kj + 16 * c), acc[j]);
        }
        __mmask16 live = n - j0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j0)) - 1);
        __m512 sc = _mm512_mul_ps(sum16x16(acc), scale);
        _mm512_storeu_ps(s + j0, sc);
        mxv = _mm512_mask_max_ps(mxv, live, sc, mxv);
    }
    __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(mxv));
    for (int j0 = 0; j0 < n; j0 += 16)
        _mm512_storeu_ps(s + j0, exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j0), mx)));
    float sum = 0;
    for (int j = 0; j < n; j++)
        sum += s[j];
    return n ? 1.0f / sum : 0.0f;
}

AVX512F static void fwd_infer_body(void *arg, int64_t lo, int64_t hi, int tid)
{
    struct attn *t = arg;
    const struct nmt_attn_args *a = t->a;
    int dh = a->dh, nv = dh / 16, G = INFER_GROUP_VECS / nv, stride = (a->Tk + 15) / 16 * 16;
    float *s = cpu_scratch_of(t->ctx, tid); /* (G, stride) */
    for (int64_t r = lo; r < hi; r++) {     /* r = b*Tq + i */
        int i = (int)(r % a->Tq), b = (int)(r / a->Tq), n = visible(a, b, i);
        for (int h0 = 0; h0 < a->H; h0 += G) {
            int g = a->H - h0 < G ? a->H - h0 : G;
            float inv[INFER_GROUP_VECS];
            __m512 ov[INFER_GROUP_VECS];
            for (int u = 0; u < g; u++) {
                int h = h0 + u;
                inv[u] = scores16(s + u * stride, t->q + b * a->q_bs + i * a->q_ld + h * dh,
                                  t->k + b * a->k_bs + h * dh, a->k_ld, n, nv, a->scale);
            }
            for (int c = 0; c < g * nv; c++)
                ov[c] = _mm512_setzero_ps();
            const float *vb = t->v + b * a->v_bs + h0 * dh;
            for (int j = 0; j < n; j++)
                for (int u = 0; u < g; u++) {
                    const float *vj = vb + j * a->v_ld + u * dh;
                    __m512 p = _mm512_set1_ps(s[u * stride + j] * inv[u]);
                    for (int c = 0; c < nv; c++)
                        ov[u * nv + c] = _mm512_fmadd_ps(p, _mm512_loadu_ps(vj + 16 * c), ov[u * nv + c]);
                }
            float *o = t->out + b * a->o_bs + i * a->o_ld + h0 * dh;
            for (int u = 0; u < g; u++)
                for (int c = 0; c < nv; c++)
                    _mm512_storeu_ps(o + u * dh + 16 * c, ov[u * nv + c]);
        }
    }
}

/* The same on AVX2 when dh is a multiple of 8 up to 64: 8 keys at a time, their dot products' lanes
 * summed together by a fixed tree of horizontal adds (sum8x8), exp 8 scores at a time (exp8). */
#define AVX2F __attribute__((target("avx2,fma")))
#define INFER_MAX_VEC8 8

/* Lane j of the result = the sum of the 8 lanes of X[j], j < 8, always in the same order:
 * ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)) by lane index of X[j]. */
static inline __attribute__((always_inline)) AVX2F __m256 sum8x8(const __m256 *x)
{
    __m256 t0 = _mm256_hadd_ps(x[0], x[1]), t1 = _mm256_hadd_ps(x[2], x[3]);
    __m256 t2 = _mm256_hadd_ps(x[4], x[5]), t3 = _mm256_hadd_ps(x[6], x[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3); /* per 128-bit half: keys 0-3, 4-7 */
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* Largest of the 8 lanes of V. */
static inline __attribute__((always_inline)) AVX2F float max8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* vexp (cpu.h) of each of the 8 lanes of X0, bit for bit: the same operations in the same order. */
static inline __attribute__((always_inline)) AVX2F __m256 exp8(__m256 x0)
{
    __m256 x = _mm256_min_ps(_mm256_max_ps(x0, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f)); /* NaN: -87 */
    __m256 magic = _mm256_set1_ps(12582912.0f);
    __m256 n = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), magic), magic);
    __m256 r = _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(0.693145751953125f))),
                             _mm256_mul_ps(n, _mm256_set1_ps(1.42860682030941723e-06f)));
    static const float c[6] = {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
    __m256 p = _mm256_set1_ps(1.0f / 720);
    for (int k = 0; k < 6; k++)
        p = _mm256_add_ps(_mm256_set1_ps(c[k]), _mm256_mul_ps(r, p));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 ord = _mm256_cmp_ps(x0, x0, _CMP_ORD_Q);
    return _mm256_blendv_ps(x0, _mm256_mul_ps(p, _mm256_castsi256_ps(e)), ord);
}

/* scores16 with 8 keys at a time. */
static inline __attribute__((always_inline)) AVX2F float scores8(float *s, const float *qi, const float *kb,
                                                                   int64_t k_ld, int n, int nv, float scale_)
{
    __m256 qv[INFER_MAX_VEC8];
    for (int c = 0; c < nv; c++)
        qv[c] = _mm256_loadu_ps(qi + 8 * c);
    __m256 mxv = _mm256_set1_ps(-INFINITY), scale = _mm256_set1_ps(scale_);
    for (int j0 = 0; j0 < n; j0 += 8) {
        __m256 acc[8];
        for (int j = 0; j < 8; j++) {
            if (j0 + j >= n) {
                acc[j] = _mm256_setzero_ps();
                continue;
            }
            const float *kj = kb + (j0 + j) * k_ld;
            acc[j] = _mm256_mul_ps(qv[0], _mm256_loadu_ps(kj));
            for (int c = 1; c < nv; c++)
                acc[j] = _mm256_fmadd_ps(qv[c], _mm256_loadu_ps(kj + 8 * c), acc[j]);
        }
        __m256 sc = _mm256_mul_ps(sum8x8(acc), scale);
        _mm256_storeu_ps(s + j0, sc);
        __m256 live = _mm256_castsi256_ps(
            _mm256_cmpgt_epi32(_mm256_set1_epi32(n - j0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
        mxv = _mm256_blendv_ps(mxv, _mm256_max_ps(sc, mxv), live);
    }
    __m256 mx = _mm256_set1_ps(max8(mxv));
    for (int j0 = 0; j0 < n; j0 += 8)
        _mm256_storeu_ps(s + j0, exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j0), mx)));
    float sum = 0;
    for (int j = 0; j < n; j++)
        sum += s[j];
    return n ? 1.0f / sum : 0.0f;
}

AVX2F static void fwd_infer_body8(void *arg, int64_t lo, int64_t hi, int tid)
{
    struct attn *t = arg;
    const struct nmt_attn_args *a = t->a;
    int dh = a->dh, nv = dh / 8, G = INFER_GROUP_VECS / nv, stride = (a->Tk + 15) / 16 * 16;
    float *s = cpu_scratch_of(t->ctx, tid); /* (G, stride) */
    for (int64_t r = lo; r < hi; r++) {     /* r = b*Tq + i */
        int i = (int)(r % a->Tq), b = (int)(r / a->Tq), n = visible(a, b, i);
        for (int h0 = 0; h0 < a->H; h0 += G) {
            int g = a->H - h0 < G ? a->H - h0 : G;
            float inv[INFER_GROUP_VECS];
            __m256 ov[INFER_GROUP_VECS];
            for (int u = 0; u < g; u++) {
                int h = h0 + u;
                inv[u] = scores8(s + u * stride, t->q + b * a->q_bs + i * a->q_ld + h * dh,
                                 t->k + b * a->k_bs + h * dh, a->k_ld, n, nv, a->scale);
            }
            for (int c = 0; c < g * nv; c++)
                ov[c] = _mm256_setzero_ps();
            const float *vb = t->v + b * a->v_bs + h0 * dh;
            for (int j = 0; j < n; j++)
                for (int u = 0; u < g; u++) {
                    const float *vj = vb + j * a->v_ld + u * dh;
                    __m256 p = _mm256_set1_ps(s[u * stride + j] * inv[u]);
                    for (int c = 0; c < nv; c++)
                        ov[u * nv + c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vj + 8 * c), ov[u * nv + c]);
                }
            float *o = t->out + b * a->o_bs + i * a->o_ld + h0 * dh;
            for (int u = 0; u < g; u++)
                for (int c = 0; c < nv; c++)
                    _mm256_storeu_ps(o + u * dh + 8 * c, ov[u * nv + c]);
        }
    }
}

int cpu_attention_forward(nmt_bctx *ctx, float *out, float *P, const float *q, const float *k, const float *v,
                          const struct nmt_attn_args *a)
{
    /* the inference paths keep the scores of a group of up to INFER_GROUP_VECS heads */
    if (check(ctx, "attention_forward", a) < 0 ||
        cpu_scratch(ctx, (size_t)INFER_GROUP_VECS * (size_t)(a->Tk + 16) * sizeof(float)) < 0)
        return -1;
    struct attn t = { .out = out, .P = P, .q = q, .k = k, .v = v, .a = a, .ctx = ctx };
    int64_t rows = (int64_t)a->B * a->Tq; /* the inference paths: a query row with all its heads */
    int isa = cpu_isa(), infer = !P && a->dropout == 0;
    pool_fn body = infer && isa >= CPU_ISA_AVX512 && a->dh % 16 == 0 && a->dh <= 16 * INFER_MAX_VEC ? fwd_infer_body
                   : infer && isa >= CPU_ISA_AVX2 && a->dh % 8 == 0 && a->dh <= 8 * INFER_MAX_VEC8 ? fwd_infer_body8
                                                                                                   : NULL;
    if (body)
        pool_for(ctx->pool, rows, 1, body, &t);
    else
        pool_for(ctx->pool, rows * a->H, 4, fwd_body, &t);
    return 0;
}

/* One (b, h) pair per index: dk and dv of that pair are owned by one chunk, queries in order. */
CPU_VEC static void bwd_body(void *arg, int64_t lo, int64_t hi, int tid)
{
    struct attn t0 = *(struct attn *)arg, *t = &t0;
    const struct nmt_attn_args *a = t->a;
    int dh = a->dh, Tk = a->Tk, Tq = a->Tq;
    float *dp = cpu_scratch_of(t->ctx, tid); /* (Tk) */
    float *pr = dp + Tk;                     /* (Tk) the recomputed row of P (lse path) */
    float keep = 1.0f / (1.0f - a->dropout);
    uint64_t key = rng_key(a->seed);
    for (int64_t bh = lo; bh < hi; bh++) {
        int b = (int)(bh / a->H), h = (int)(bh % a->H);
        const float *kb = t->k + b * a->k_bs + h * dh, *vb = t->v + b * a->v_bs + h * dh;
        float *dkb = t->dk + b * a->k_bs + h * dh, *dvb = t->dv + b * a->v_bs + h * dh;
        for (int j = 0; j < Tk; j++) {
            memset(dkb + j * a->k_ld, 0, (size_t)dh * sizeof(float));
            memset(dvb + j * a->v_ld, 0, (size_t)dh * sizeof(float));
        }
        for (int i = 0; i < Tq; i++) {
            int64_t r = bh * Tq + i;
            const float *qi = t->q + b * a->q_bs + i * a->q_ld + h * dh;
            const float *go = t->dout + b * a->o_bs + i * a->o_ld + h * dh;
            float *dqi = t->dq + b * a->q_bs + i * a->q_ld + h * dh;
            const float *prow = t->Pin ? t->Pin + r * Tk : pr;
            int n = visible(a, b, i);
            for (int d = 0; d < dh; d++)
                dqi[d] = 0;
            if (n == 0)
                continue;
            if (!t->Pin) { /* P as fwd_body computed it: the same operations on the same values */
                float mx = t->lsein[2 * r], inv = 1.0f / t->lsein[2 * r + 1];
                for (int j = 0; j < n; j++)
                    pr[j] = vdot(qi, kb + j * a->k_ld, dh) * a->scale;
                for (int j = 0; j < n; j++)
                    pr[j] = vexp(pr[j] - mx);
                for (int j = 0; j < n; j++)
                    pr[j] *= inv;
            }
            uint64_t ctr = a->offset + (uint64_t)r * (uint64_t)Tk;
            float dot = 0;
            for (int j = 0; j < n; j++) {
                float m = a->dropout > 0 ? (rng_uniform_keyed(key, ctr + (uint64_t)j) >= a->dropout ? keep : 0.0f)
                                         : 1.0f;
                /* dV_j += P'_ij dO_i ; dP_ij = (dO_i . V_j) * m */
                float pp = prow[j] * m;
                float *dvj = dvb + j * a->v_ld;
                for (int d = 0; d < dh; d++)
                    dvj[d] += pp * go[d];
                dp[j] = vdot(go, vb + j * a->v_ld, dh) * m;
                dot += prow[j] * dp[j];
            }
            for (int j = 0; j < n; j++) {
                float ds = prow[j] * (dp[j] - dot) * a->scale;
                const float *kj = kb + j * a->k_ld;
                float *dkj = dkb + j * a->k_ld;
                for (int d = 0; d < dh; d++) {
                    dqi[d] += ds * kj[d];
                    dkj[d] += ds * qi[d];
                }
            }
        }
    }
}

int cpu_attention_backward(nmt_bctx *ctx, float *dq, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const float *P, const struct nmt_attn_args *a)
{
    if (check(ctx, "attention_backward", a) < 0 || cpu_scratch(ctx, (size_t)(a->Tk + 1) * sizeof(float)) < 0)
        return -1;
    if (!P)
        return cpu_err(ctx, "attention_backward: no saved probabilities");
    struct attn t = { .dq = dq, .dk = dk, .dv = dv, .dout = dout, .q = q, .k = k, .v = v, .Pin = P, .a = a,
                      .ctx = ctx };
    pool_for(ctx->pool, (int64_t)a->B * a->H, 1, bwd_body, &t);
    return 0;
}

int cpu_attention_forward_lse(nmt_bctx *ctx, float *out, float *lse, const float *q, const float *k, const float *v,
                              const struct nmt_attn_args *a)
{
    if (!lse) /* inference: attention_forward's own paths */
        return cpu_attention_forward(ctx, out, NULL, q, k, v, a);
    if (check(ctx, "attention_forward_lse", a) < 0 || cpu_scratch(ctx, (size_t)(a->Tk + 16) * sizeof(float)) < 0)
        return -1;
    struct attn t = { .out = out, .lse = lse, .q = q, .k = k, .v = v, .a = a, .ctx = ctx };
    pool_for(ctx->pool, (int64_t)a->B * a->H * a->Tq, 4, fwd_body, &t);
    return 0;
}

int cpu_attention_backward_lse(nmt_bctx *ctx, float *dq, float *dk, float *dv, const float *dout, const float *out,
                               const float *lse, const float *q, const float *k, const float *v,
                               const struct nmt_attn_args *a)
{
    if (check(ctx, "attention_backward_lse", a) < 0 || cpu_scratch(ctx, (size_t)(2 * a->Tk + 1) * sizeof(float)) < 0)
        return -1;
    if (!lse)
        return cpu_err(ctx, "attention_backward_lse: no saved statistics");
    struct attn t = { .dq = dq, .dk = dk, .dv = dv, .dout = dout, .q = q, .k = k, .v = v, .lsein = lse, .a = a,
                      .ctx = ctx };
    pool_for(ctx->pool, (int64_t)a->B * a->H, 1, bwd_body, &t);
    return 0;
}
