/* attention.c: fused masked multi-head attention, forward and backward (contract in
 * plugins/backend.h, struct nmt_attn_args). Plain loops over (batch, head, query): scores, a
 * softmax over the visible prefix of the keys, optional counter-based dropout, weighted sum. */
#include <immintrin.h>
#include <math.h>

#include "cpu.h"
#include "kernels.h"

struct attn {
    float *out, *P, *dq, *dk, *dv;
    float *lse;           /* (B,H,Tq,2) forward statistics to save, or NULL */
    const float *q, *k, *v, *dout, *Pin;
    const float *lsein;   /* (B,H,Tq,2) saved statistics: backward recomputes P from them (Pin NULL) */
    const struct nmt_attn_args *a;
    nmt_bctx *ctx;
    const int32_t *rows;  /* attention_forward_rows: the row of each batch item's key j, or NULL */
    int64_t rows_ld;
};

/* Where key (or value) J of batch item B starts, from BASE (with the head's offset) and the
 * strides BS, LD: in row B, or in the row t->rows names for it. */
static inline __attribute__((always_inline)) const float *key_at(const struct attn *t, const float *base, int b, int j,
                                                                 int64_t bs, int64_t ld)
{
    int64_t r = t->rows ? t->rows[(int64_t)b * t->rows_ld + j] : b;
    return base + r * bs + (int64_t)j * ld;
}

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

/* Checks A's sizes and strides; with ROWS (attention_forward_rows) the key and value strides k_ld
 * and v_ld may be 0 (the rows then name each key's row alone). 0, or -1 with the error set. */
static int check_rows(nmt_bctx *ctx, const char *what, const struct nmt_attn_args *a, int rows)
{
    if (a->B < 0 || a->Tq < 0 || a->Tk < 0 || a->H <= 0 || a->dh <= 0)
        return cpu_err(ctx, "%s: invalid size B=%d Tq=%d Tk=%d H=%d dh=%d", what, a->B, a->Tq, a->Tk, a->H, a->dh);
    int64_t w = (int64_t)a->H * a->dh;
    if (a->q_ld < w || (a->k_ld < w && !(rows && a->k_ld == 0)) || (a->v_ld < w && !(rows && a->v_ld == 0)) ||
        a->o_ld < w)
        return cpu_err(ctx, "%s: row stride smaller than H*dh=%lld", what, (long long)w);
    if (!(a->dropout >= 0 && a->dropout < 1))
        return cpu_err(ctx, "%s: dropout %g outside [0, 1)", what, (double)a->dropout);
    if (a->klen)
        for (int b = 0; b < a->B; b++)
            if (a->klen[b] < 0 || a->klen[b] > a->Tk)
                return cpu_err(ctx, "%s: key length %d of batch item %d outside [0, %d]", what, a->klen[b], b, a->Tk);
    return 0;
}

static int check(nmt_bctx *ctx, const char *what, const struct nmt_attn_args *a) { return check_rows(ctx, what, a, 0); }

/* R[c] lane j becomes R[j] lane c, j, c < 16. */
static inline __attribute__((always_inline)) ISA_AVX512 void transpose16(__m512 *r)
{
    __m512 t[16];
    for (int i = 0; i < 8; i++) { /* block k: r2i[4k], r2i+1[4k], r2i[4k+1], r2i+1[4k+1]; then 4k+2, 4k+3 */
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) { /* r[4i + m], block k: rows 4i .. 4i+3 at column 4k + m */
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
        __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
    }
    for (int m = 0; m < 4; m++) t[m] = r[m], t[4 + m] = r[4 + m], t[8 + m] = r[8 + m], t[12 + m] = r[12 + m];
    for (int m = 0; m < 4; m++) { /* column 4k + m: block k of r[m], r[4 + m], r[8 + m], r[12 + m] */
        __m512 a0 = _mm512_shuffle_f32x4(t[m], t[4 + m], 0x44), a1 = _mm512_shuffle_f32x4(t[m], t[4 + m], 0xEE);
        __m512 b0 = _mm512_shuffle_f32x4(t[8 + m], t[12 + m], 0x44), b1 = _mm512_shuffle_f32x4(t[8 + m], t[12 + m], 0xEE);
        r[m] = _mm512_shuffle_f32x4(a0, b0, 0x88);
        r[4 + m] = _mm512_shuffle_f32x4(a0, b0, 0xDD);
        r[8 + m] = _mm512_shuffle_f32x4(a1, b1, 0x88);
        r[12 + m] = _mm512_shuffle_f32x4(a1, b1, 0xDD);
    }
}

/* OUT[j] = vdot(X, row j, dh) for the rows j < N of batch item B (key_at from BASE with strides
 * BS, LD), on AVX-512 with dh a multiple of 16 up to 128: 16 rows at a time, each row's 16 lane
 * sums (vdot's accumulator, without its leading +0, which changes no sum below), transposed and
 * added lane after lane from +0 as vdot adds them, so that each result has vdot's bits. */
ISA_AVX512 static void dots16(float *out, const float *x, const struct attn *t, const float *base, int b, int n,
                              int64_t bs, int64_t ld)
{
    int nv = t->a->dh / 16;
    __m512 xv[8];
    for (int c = 0; c < nv; c++)
        xv[c] = _mm512_loadu_ps(x + 16 * c);
    for (int j0 = 0; j0 < n; j0 += 16) {
        __m512 acc[16];
        for (int j = 0; j < 16; j++) {
            if (j0 + j >= n) {
                acc[j] = _mm512_setzero_ps();
                continue;
            }
            const float *row = key_at(t, base, b, j0 + j, bs, ld);
            __m512 a = _mm512_mul_ps(xv[0], _mm512_loadu_ps(row));
            for (int c = 1; c < nv; c++)
                a = _mm512_add_ps(a, _mm512_mul_ps(xv[c], _mm512_loadu_ps(row + 16 * c)));
            acc[j] = a;
        }
        transpose16(acc);
        __m512 sum = _mm512_add_ps(_mm512_setzero_ps(), acc[0]);
        for (int l = 1; l < 16; l++)
            sum = _mm512_add_ps(sum, acc[l]);
        _mm512_mask_storeu_ps(out + j0, n - j0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j0)) - 1), sum);
    }
}

/* R[c] lane j becomes R[j] lane c, j, c < 8. */
static inline __attribute__((always_inline)) ISA_AVX2 void transpose8(__m256 *r)
{
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) { /* per 128-bit half: r2i[0], r2i+1[0], r2i[1], r2i+1[1]; then [2], [3] */
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 2; g++) { /* u[4g + m]: rows 4g .. 4g+3 at column m (low half) and m + 4 (high) */
        u[4 * g] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    for (int m = 0; m < 4; m++) {
        r[m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x20);
        r[4 + m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x31);
    }
}

/* dots16 on AVX2, 8 rows at a time: vdot's 16 lane sums of a row are two vectors, each transposed
 * with the other rows', and added lane after lane from +0 as vdot adds them. */
ISA_AVX2 static void dots8(float *out, const float *x, const struct attn *t, const float *base, int b, int n,
                           int64_t bs, int64_t ld)
{
    int nv = t->a->dh / 16;
    for (int j0 = 0; j0 < n; j0 += 8) {
        __m256 lo[8], hi[8]; /* lanes 0-7 and 8-15 of each row's sums */
        for (int j = 0; j < 8; j++) {
            if (j0 + j >= n) {
                lo[j] = hi[j] = _mm256_setzero_ps();
                continue;
            }
            const float *row = key_at(t, base, b, j0 + j, bs, ld);
            __m256 l = _mm256_mul_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(row));
            __m256 h = _mm256_mul_ps(_mm256_loadu_ps(x + 8), _mm256_loadu_ps(row + 8));
            for (int c = 1; c < nv; c++) {
                l = _mm256_add_ps(l, _mm256_mul_ps(_mm256_loadu_ps(x + 16 * c), _mm256_loadu_ps(row + 16 * c)));
                h = _mm256_add_ps(h, _mm256_mul_ps(_mm256_loadu_ps(x + 16 * c + 8), _mm256_loadu_ps(row + 16 * c + 8)));
            }
            lo[j] = l;
            hi[j] = h;
        }
        transpose8(lo);
        transpose8(hi);
        __m256 sum = _mm256_add_ps(_mm256_setzero_ps(), lo[0]);
        for (int l = 1; l < 8; l++)
            sum = _mm256_add_ps(sum, lo[l]);
        for (int l = 0; l < 8; l++)
            sum = _mm256_add_ps(sum, hi[l]);
        if (n - j0 >= 8) {
            _mm256_storeu_ps(out + j0, sum);
        } else {
            float tail[8];
            _mm256_storeu_ps(tail, sum);
            memcpy(out + j0, tail, (size_t)(n - j0) * sizeof *tail);
        }
    }
}

/* The path dots takes for heads of width DH: 2 dots16, 1 dots8 (dh a multiple of 16 up to 128,
 * the ISA allowing), 0 a vdot a row. */
static int dots_wide(int dh)
{
    if (dh % 16 || dh > 128)
        return 0;
    int isa = cpu_isa();
    return isa >= CPU_ISA_AVX512 ? 2 : isa == CPU_ISA_AVX2 ? 1 : 0;
}

/* OUT[j] = vdot(X, row j, dh) for the rows j < N of batch item B (key_at from BASE with strides BS,
 * LD): dots16 or dots8 as WIDE says (dots_wide), else one vdot a row; the same bits either way. */
static inline __attribute__((always_inline)) void dots(float *out, const float *x, const struct attn *t,
                                                       const float *base, int b, int n, int64_t bs, int64_t ld,
                                                       int wide)
{
    if (wide == 2) {
        dots16(out, x, t, base, b, n, bs, ld);
        return;
    }
    if (wide == 1) {
        dots8(out, x, t, base, b, n, bs, ld);
        return;
    }
    for (int j = 0; j < n; j++)
        out[j] = vdot(x, key_at(t, base, b, j, bs, ld), t->a->dh);
}

CPU_VEC_BODY(fwd_body)
{
    struct attn *t = arg;
    const struct nmt_attn_args *a = t->a;
    int dh = a->dh, Tk = a->Tk;
    float *s = cpu_scratch_of(t->ctx, tid); /* (Tk) */
    float keep = 1.0f / (1.0f - a->dropout);
    uint64_t key = rng_key(a->seed);
    int wide = dots_wide(dh);
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
        const float *kh = t->k + h * dh, *vh = t->v + h * dh;
        dots(s, qi, t, kh, b, n, a->k_bs, a->k_ld, wide);
        for (int j = 0; j < n; j++)
            s[j] *= a->scale;
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
            vaxpy(o, p, key_at(t, vh, b, j, a->v_bs, a->v_ld), dh);
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
#define INFER_MAX_VEC 4
#define INFER_GROUP_VECS 8 /* accumulators of a group's weighted sums: heads of a group x dh / 16 */

/* Lane j of the result = the sum of the 16 lanes of X[j], j < 16, always in the same order. */
static inline __attribute__((always_inline)) ISA_AVX512 __m512 sum16x16(const __m512 *x)
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

/* The lanes of Y, and X's where X is a NaN. */
static inline __attribute__((always_inline)) ISA_AVX512 __m512 keep_nan16(__m512 x, __m512 y)
{
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_ORD_Q), x, y);
}

/* MX, with the lanes below LIVE raised to SC's where larger. */
static inline __attribute__((always_inline)) ISA_AVX512 __m512 max_live16(__m512 mx, __m512 sc, int live)
{
    return _mm512_mask_max_ps(mx, live >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << live) - 1), sc, mx);
}

/* Templates of the inference paths' parts, one instance per vector width: VEC holds W floats,
 * VECI W int32, PFX is the prefix of their intrinsics (_mm512, _mm256). */

/* NAME(X0): vexp (cpu.h) of each lane of X0, bit for bit: the same operations in the same order
 * (the clamps of max/min take -87 for a NaN, as vexp's comparisons do). */
#define INFER_EXP(NAME, TARGET, VEC, VECI, PFX, AS_FLOAT, KEEP_NAN)                                     \
    static inline __attribute__((always_inline)) TARGET VEC NAME(VEC x0)                              \
    {                                                                                                   \
        VEC x = PFX##_min_ps(PFX##_max_ps(x0, PFX##_set1_ps(-87.0f)), PFX##_set1_ps(88.0f));          \
        VEC magic = PFX##_set1_ps(12582912.0f);                                                         \
        VEC n = PFX##_sub_ps(PFX##_add_ps(PFX##_mul_ps(x, PFX##_set1_ps(1.44269504088896341f)), magic), magic); \
        VEC r = PFX##_sub_ps(PFX##_sub_ps(x, PFX##_mul_ps(n, PFX##_set1_ps(0.693145751953125f))),       \
                             PFX##_mul_ps(n, PFX##_set1_ps(1.42860682030941723e-06f)));                 \
        static const float c[6] = {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};                  \
        VEC p = PFX##_set1_ps(1.0f / 720);                                                              \
        for (int k = 0; k < 6; k++)                                                                     \
            p = PFX##_add_ps(PFX##_set1_ps(c[k]), PFX##_mul_ps(r, p));                                  \
        VECI e = PFX##_slli_epi32(PFX##_add_epi32(PFX##_cvttps_epi32(n), PFX##_set1_epi32(127)), 23);   \
        return KEEP_NAN(x0, PFX##_mul_ps(p, AS_FLOAT(e)));                                              \
    }

/* NAME(S, QI, T, KH, B, N, NV, SCALE): the softmax weights of a head's query row QI (NV vectors)
 * over the N keys of batch item B from KH (key_at) into S (N rounded up to 16), unnormalised; returns 1 /
 * their sum (0 without keys). W keys at a time: W vector dot products whose lanes SUM adds
 * together in a fixed order; their largest (MAX_LIVE, HMAX), EXP of each minus it, their sum in
 * key order. */
#define INFER_SCORES(NAME, TARGET, VEC, W, MAXV, PFX, SUM, MAX_LIVE, HMAX, EXP)                         \
    static inline __attribute__((always_inline)) TARGET float NAME(float *s, const float *qi, const struct attn *t, \
                                                                   const float *kh, int b, int n, int nv, float scale_) \
    {                                                                                                   \
        VEC qv[MAXV];                                                                                   \
        for (int c = 0; c < nv; c++)                                                                    \
            qv[c] = PFX##_loadu_ps(qi + (W) * c);                                                       \
        VEC mxv = PFX##_set1_ps(-INFINITY), scale = PFX##_set1_ps(scale_);                              \
        for (int j0 = 0; j0 < n; j0 += (W)) {                                                           \
            VEC acc[W];                                                                                 \
            for (int j = 0; j < (W); j++) {                                                             \
                if (j0 + j >= n) {                                                                      \
                    acc[j] = PFX##_setzero_ps();                                                        \
                    continue;                                                                           \
                }                                                                                       \
                const float *kj = key_at(t, kh, b, j0 + j, t->a->k_bs, t->a->k_ld);                     \
                acc[j] = PFX##_mul_ps(qv[0], PFX##_loadu_ps(kj));                                       \
                for (int c = 1; c < nv; c++)                                                            \
                    acc[j] = PFX##_fmadd_ps(qv[c], PFX##_loadu_ps(kj + (W) * c), acc[j]);               \
            }                                                                                           \
            VEC sc = PFX##_mul_ps(SUM(acc), scale);                                                     \
            PFX##_storeu_ps(s + j0, sc);                                                                \
            mxv = MAX_LIVE(mxv, sc, n - j0);                                                            \
        }                                                                                               \
        VEC mx = PFX##_set1_ps(HMAX(mxv));                                                              \
        for (int j0 = 0; j0 < n; j0 += (W))                                                             \
            PFX##_storeu_ps(s + j0, EXP(PFX##_sub_ps(PFX##_loadu_ps(s + j0), mx)));                    \
        float sum = 0;                                                                                  \
        for (int j = 0; j < n; j++)                                                                     \
            sum += s[j];                                                                                \
        return n ? 1.0f / sum : 0.0f;                                                                   \
    }

INFER_EXP(exp16, ISA_AVX512, __m512, __m512i, _mm512, _mm512_castsi512_ps, keep_nan16)
INFER_SCORES(scores16, ISA_AVX512, __m512, 16, INFER_MAX_VEC, _mm512, sum16x16, max_live16, _mm512_reduce_max_ps, exp16)

/* The body of an inference path, NAME: one query row with all its heads per work item; per group
 * of heads, each head's softmax weights over its visible keys (SCORES, unnormalised, and 1 / their
 * sum), then the group's weighted sums over the keys in order, their chains of fused multiply-adds
 * side by side. VEC holds W floats; PFX is the prefix of its intrinsics (_mm512, _mm256). */
#define INFER_BODY(NAME, TARGET, VEC, W, PFX, SCORES)                                                  \
    TARGET static void NAME(void *arg, int64_t lo, int64_t hi, int tid)                                 \
    {                                                                                                   \
        struct attn *t = arg;                                                                           \
        const struct nmt_attn_args *a = t->a;                                                           \
        int dh = a->dh, nv = dh / (W), G = INFER_GROUP_VECS / nv, stride = (a->Tk + 15) / 16 * 16;     \
        float *s = cpu_scratch_of(t->ctx, tid); /* (G, stride) */                                       \
        for (int64_t r = lo; r < hi; r++) {     /* r = b*Tq + i */                                      \
            int i = (int)(r % a->Tq), b = (int)(r / a->Tq), n = visible(a, b, i);                       \
            for (int h0 = 0; h0 < a->H; h0 += G) {                                                      \
                int g = a->H - h0 < G ? a->H - h0 : G;                                                  \
                float inv[INFER_GROUP_VECS];                                                            \
                VEC ov[INFER_GROUP_VECS];                                                               \
                for (int u = 0; u < g; u++)                                                             \
                    inv[u] = SCORES(s + u * stride, t->q + b * a->q_bs + i * a->q_ld + (h0 + u) * dh, t, \
                                    t->k + (h0 + u) * dh, b, n, nv, a->scale);                          \
                for (int c = 0; c < g * nv; c++)                                                        \
                    ov[c] = PFX##_setzero_ps();                                                         \
                for (int j = 0; j < n; j++) {                                                           \
                    const float *vr = key_at(t, t->v + h0 * dh, b, j, a->v_bs, a->v_ld);                \
                    for (int u = 0; u < g; u++) {                                                       \
                        const float *vj = vr + u * dh;                                                  \
                        VEC p = PFX##_set1_ps(s[u * stride + j] * inv[u]);                              \
                        for (int c = 0; c < nv; c++)                                                    \
                            ov[u * nv + c] = PFX##_fmadd_ps(p, PFX##_loadu_ps(vj + (W) * c), ov[u * nv + c]); \
                    }                                                                                   \
                }                                                                                       \
                float *o = t->out + b * a->o_bs + i * a->o_ld + h0 * dh;                                \
                for (int u = 0; u < g; u++)                                                             \
                    for (int c = 0; c < nv; c++)                                                        \
                        PFX##_storeu_ps(o + u * dh + (W) * c, ov[u * nv + c]);                          \
            }                                                                                           \
        }                                                                                               \
    }

INFER_BODY(fwd_infer_body, ISA_AVX512, __m512, 16, _mm512, scores16)

/* The same on AVX2 when dh is a multiple of 8 up to 64: 8 keys at a time, their dot products' lanes
 * summed together by a fixed tree of horizontal adds (sum8x8), exp 8 scores at a time (exp8). */
#define INFER_MAX_VEC8 8

/* Lane j of the result = the sum of the 8 lanes of X[j], j < 8, always in the same order:
 * ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)) by lane index of X[j]. */
static inline __attribute__((always_inline)) ISA_AVX2 __m256 sum8x8(const __m256 *x)
{
    __m256 t0 = _mm256_hadd_ps(x[0], x[1]), t1 = _mm256_hadd_ps(x[2], x[3]);
    __m256 t2 = _mm256_hadd_ps(x[4], x[5]), t3 = _mm256_hadd_ps(x[6], x[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3); /* per 128-bit half: keys 0-3, 4-7 */
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* Largest of the 8 lanes of V. */
static inline __attribute__((always_inline)) ISA_AVX2 float max8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* The lanes of Y, and X's where X is a NaN. */
static inline __attribute__((always_inline)) ISA_AVX2 __m256 keep_nan8(__m256 x, __m256 y)
{
    return _mm256_blendv_ps(x, y, _mm256_cmp_ps(x, x, _CMP_ORD_Q));
}

/* MX, with the lanes below LIVE raised to SC's where larger. */
static inline __attribute__((always_inline)) ISA_AVX2 __m256 max_live8(__m256 mx, __m256 sc, int live)
{
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 m = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(live), lane));
    return _mm256_blendv_ps(mx, _mm256_max_ps(sc, mx), m);
}

INFER_EXP(exp8, ISA_AVX2, __m256, __m256i, _mm256, _mm256_castsi256_ps, keep_nan8)
INFER_SCORES(scores8, ISA_AVX2, __m256, 8, INFER_MAX_VEC8, _mm256, sum8x8, max_live8, max8, exp8)
#undef INFER_EXP
#undef INFER_SCORES

INFER_BODY(fwd_infer_body8, ISA_AVX2, __m256, 8, _mm256, scores8)
#undef INFER_BODY

/* attention_forward, or with ROWS attention_forward_rows (no P then). */
static int forward(nmt_bctx *ctx, const char *what, float *out, float *P, const float *q, const float *k,
                   const float *v, const struct nmt_attn_args *a, const int32_t *rows, int64_t rows_ld)
{
    /* the inference paths keep the scores of a group of up to INFER_GROUP_VECS heads */
    if (check_rows(ctx, what, a, rows != NULL) < 0 ||
        cpu_scratch(ctx, (size_t)INFER_GROUP_VECS * (size_t)(a->Tk + 16) * sizeof(float)) < 0)
        return -1;
    if (rows && (P || a->dropout != 0 || rows_ld < a->Tk))
        return cpu_err(ctx, "%s: for inference only (no P, no dropout), and rows_ld %lld below Tk %d", what,
                       (long long)rows_ld, a->Tk);
    struct attn t = { .out = out, .P = P, .q = q, .k = k, .v = v, .a = a, .ctx = ctx, .rows = rows,
                      .rows_ld = rows_ld };
    int64_t nq = (int64_t)a->B * a->Tq; /* the inference paths: a query row with all its heads */
    int isa = cpu_isa(), infer = !P && a->dropout == 0;
    pool_fn body = infer && isa >= CPU_ISA_AVX512 && a->dh % 16 == 0 && a->dh <= 16 * INFER_MAX_VEC ? fwd_infer_body
                   : infer && isa >= CPU_ISA_AVX2 && a->dh % 8 == 0 && a->dh <= 8 * INFER_MAX_VEC8 ? fwd_infer_body8
                                                                                                   : NULL;
    if (body)
        pool_for(ctx->pool, nq, 1, body, &t);
    else
        pool_for(ctx->pool, nq * a->H, 4, fwd_body, &t);
    return 0;
}

int cpu_attention_forward(nmt_bctx *ctx, float *out, float *P, const float *q, const float *k, const float *v,
                          const struct nmt_attn_args *a)
{
    return forward(ctx, "attention_forward", out, P, q, k, v, a, NULL, 0);
}

int cpu_attention_forward_rows(nmt_bctx *ctx, float *out, const float *q, const float *k, const float *v,
                               const struct nmt_attn_args *a, const int32_t *rows, int64_t rows_ld)
{
    return forward(ctx, "attention_forward_rows", out, NULL, q, k, v, a, rows, rows_ld);
}

/* One (b, h) pair per index: dk and dv of that pair are owned by one chunk, queries in order. */
CPU_VEC_BODY(bwd_body)
{
    struct attn t0 = *(struct attn *)arg, *t = &t0;
    const struct nmt_attn_args *a = t->a;
    int dh = a->dh, Tk = a->Tk, Tq = a->Tq;
    float *dp = cpu_scratch_of(t->ctx, tid); /* (Tk) */
    float *pr = dp + Tk;                     /* (Tk) the recomputed row of P (lse path) */
    float keep = 1.0f / (1.0f - a->dropout);
    uint64_t key = rng_key(a->seed);
    int wide = dots_wide(dh);
    for (int64_t bh = lo; bh < hi; bh++) {
        int b = (int)(bh / a->H), h = (int)(bh % a->H);
        const float *kb = t->k + b * a->k_bs + h * dh;
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
                dots(pr, qi, t, t->k + h * dh, b, n, a->k_bs, a->k_ld, wide);
                for (int j = 0; j < n; j++)
                    pr[j] *= a->scale;
                for (int j = 0; j < n; j++)
                    pr[j] = vexp(pr[j] - mx);
                for (int j = 0; j < n; j++)
                    pr[j] *= inv;
            }
            uint64_t ctr = a->offset + (uint64_t)r * (uint64_t)Tk;
            float dot = 0;
            dots(dp, go, t, t->v + h * dh, b, n, a->v_bs, a->v_ld, wide); /* dO_i . V_j */
            for (int j = 0; j < n; j++) {
                float m = a->dropout > 0 ? (rng_uniform_keyed(key, ctr + (uint64_t)j) >= a->dropout ? keep : 0.0f)
                                         : 1.0f;
                /* dV_j += P'_ij dO_i ; dP_ij = (dO_i . V_j) * m */
                vaxpy(dvb + j * a->v_ld, prow[j] * m, go, dh);
                dp[j] *= m;
                dot += prow[j] * dp[j];
            }
            for (int j = 0; j < n; j++) {
                float ds = prow[j] * (dp[j] - dot) * a->scale;
                vaxpy(dqi, ds, kb + j * a->k_ld, dh);
                vaxpy(dkb + j * a->k_ld, ds, qi, dh);
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
