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
    __m512 u[16]; /* a third array, not a copy back into T: GCC made such a copy a call to memcpy */
    for (int i = 0; i < 4; i++) { /* u[4i + m], block k: rows 4i .. 4i+3 at column 4k + m */
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
        __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
    }
    for (int m = 0; m < 4; m++) { /* column 4k + m: block k of u[m], u[4 + m], u[8 + m], u[12 + m] */
        __m512 a0 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x44), a1 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xEE);
        __m512 b0 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x44), b1 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xEE);
        r[m] = _mm512_shuffle_f32x4(a0, b0, 0x88);
        r[4 + m] = _mm512_shuffle_f32x4(a0, b0, 0xDD);
        r[8 + m] = _mm512_shuffle_f32x4(a1, b1, 0x88);
        r[12 + m] = _mm512_shuffle_f32x4(a1, b1, 0xDD);
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

/* NAME(KT, LDT, T, BASE, B, N, BS, LD): the keys of one batch item and head, transposed for the dot
 * products of many queries with them: KT[c * ldt + j] = element c of key j (key_at from BASE with
 * strides BS, LD), j < N, c < dh; the columns from N to LDT (N rounded up to 16) are zero. W x W
 * blocks (VEC holds W floats) through TRANSPOSE. */
#define KEYS_T(NAME, TARGET, VEC, W, PFX, TRANSPOSE)                                                    \
    TARGET static void NAME(float *kt, int ldt, const struct attn *t, const float *base, int b, int n, int64_t bs, \
                            int64_t ld)                                                                 \
    {                                                                                                   \
        int dh = t->a->dh;                                                                              \
        for (int j0 = 0; j0 < ldt; j0 += (W))                                                           \
            for (int c0 = 0; c0 < dh; c0 += (W)) {                                                      \
                VEC r[W];                                                                               \
                for (int j = 0; j < (W); j++)                                                           \
                    r[j] = j0 + j < n ? PFX##_loadu_ps(key_at(t, base, b, j0 + j, bs, ld) + c0) : PFX##_setzero_ps(); \
                TRANSPOSE(r);                                                                           \
                for (int c = 0; c < (W); c++)                                                           \
                    PFX##_storeu_ps(kt + (int64_t)(c0 + c) * ldt + j0, r[c]);                           \
            }                                                                                           \
    }
KEYS_T(keys_t16, ISA_AVX512, __m512, 16, _mm512, transpose16)
KEYS_T(keys_t8, ISA_AVX2, __m256, 8, _mm256, transpose8)
#undef KEYS_T

/* Lane j of the result: vdot(X, key j0 + j, dh) from the transposed keys at K (KT + j0, row stride
 * LDT), NV = dh / 16. vdot's lane l holds the products of elements l, 16 + l, ... added in that
 * order, and its result is +0 plus lane 0, lane 1, ... in turn; here lane l's products of a
 * vector's keys at once (16 or 8) are the vector P, added to the sum in the same turn, so each
 * lane has vdot's bits. */
#define DOTS_T(NAME, TARGET, VEC, PFX)                                                                  \
    static inline __attribute__((always_inline)) TARGET VEC NAME(const float *x, const float *k, int64_t ldt, int nv) \
    {                                                                                                   \
        VEC sum = PFX##_setzero_ps();                                                                   \
        for (int l = 0; l < 16; l++) {                                                                  \
            VEC p = PFX##_mul_ps(PFX##_set1_ps(x[l]), PFX##_loadu_ps(k + l * ldt));                     \
            for (int c = 1; c < nv; c++)                                                                \
                p = PFX##_add_ps(p, PFX##_mul_ps(PFX##_set1_ps(x[16 * c + l]), PFX##_loadu_ps(k + (16 * c + l) * ldt))); \
            sum = PFX##_add_ps(sum, p);                                                                 \
        }                                                                                               \
        return sum;                                                                                     \
    }
DOTS_T(dots_t16_block, ISA_AVX512, __m512, _mm512)
DOTS_T(dots_t8_block, ISA_AVX2, __m256, _mm256)
#undef DOTS_T

/* The lanes below N of V stored at OUT, N <= 16 (none when N <= 0). */
static inline __attribute__((always_inline)) ISA_AVX512 void store16(float *out, __m512 v, int n)
{
    if (n > 0)
        _mm512_mask_storeu_ps(out, n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1), v);
}

/* The same for N <= 8. */
static inline __attribute__((always_inline)) ISA_AVX2 void store8(float *out, __m256 v, int n)
{
    if (n >= 8) {
        _mm256_storeu_ps(out, v);
    } else if (n > 0) {
        float tail[8];
        _mm256_storeu_ps(tail, v);
        for (int j = 0; j < n; j++)
            out[j] = tail[j];
    }
}

/* NAME(OUT, X, KT, LDT, DH, N): OUT[j] = vdot(X, key j, dh) for j < N from the keys transposed by
 * keys_t16 or keys_t8 into KT (stride LDT), dh a multiple of 16: W keys at a time (BLOCK), two
 * blocks side by side where there are. */
#define DOTS1(NAME, TARGET, VEC, W, PFX, BLOCK, STORE)                                                  \
    TARGET static void NAME(float *out, const float *x, const float *kt, int ldt, int dh, int n)        \
    {                                                                                                   \
        int nv = dh / 16, j0 = 0;                                                                       \
        for (; j0 + 2 * (W) <= n; j0 += 2 * (W)) {                                                      \
            VEC s0 = BLOCK(x, kt + j0, ldt, nv), s1 = BLOCK(x, kt + j0 + (W), ldt, nv);                 \
            PFX##_storeu_ps(out + j0, s0);                                                              \
            PFX##_storeu_ps(out + j0 + (W), s1);                                                        \
        }                                                                                               \
        for (; j0 < n; j0 += (W))                                                                       \
            STORE(out + j0, BLOCK(x, kt + j0, ldt, nv), n - j0);                                        \
    }
DOTS1(dots_t16, ISA_AVX512, __m512, 16, _mm512, dots_t16_block, store16)
DOTS1(dots_t8, ISA_AVX2, __m256, 8, _mm256, dots_t8_block, store8)
#undef DOTS1

/* The path of the training paths' dot products for heads of width DH: 2 the keys transposed on
 * AVX-512, 1 on AVX2 (dh a multiple of 16 up to 128, the ISA allowing), 0 a vdot a row. */
static int dots_wide(int dh)
{
    if (dh % 16 || dh > 128)
        return 0;
    int isa = cpu_isa();
    return isa >= CPU_ISA_AVX512 ? 2 : isa == CPU_ISA_AVX2 ? 1 : 0;
}

/* The floats of one head's keys as keys_t transposes them, for TK keys at most. */
static size_t keys_t_floats(const struct nmt_attn_args *a) { return (size_t)a->dh * (size_t)((a->Tk + 15) / 16 * 16); }

/* The keys j < N of batch item B (key_at from BASE with strides BS, LD), for dots: transposed into
 * KT by keys_t16 or keys_t8 as WIDE says (dots_wide); nothing when WIDE is 0. Returns KT's stride. */
static int keys_t(float *kt, const struct attn *t, const float *base, int b, int n, int64_t bs, int64_t ld, int wide)
{
    int ldt = (n + 15) / 16 * 16;
    if (wide == 2)
        keys_t16(kt, ldt, t, base, b, n, bs, ld);
    else if (wide == 1)
        keys_t8(kt, ldt, t, base, b, n, bs, ld);
    return ldt;
}

/* OUT[j] = vdot(X, key j, dh) for the keys j < N of batch item B: from KT (stride LDT, keys_t) when
 * WIDE, else one vdot a row (key_at from BASE with strides BS, LD); the same bits either way. */
static inline __attribute__((always_inline)) void dots(float *out, const float *x, const float *kt, int ldt,
                                                       const struct attn *t, const float *base, int b, int n,
                                                       int64_t bs, int64_t ld, int wide)
{
    if (wide == 2) {
        dots_t16(out, x, kt, ldt, t->a->dh, n);
        return;
    }
    if (wide == 1) {
        dots_t8(out, x, kt, ldt, t->a->dh, n);
        return;
    }
    for (int j = 0; j < n; j++)
        out[j] = vdot(x, key_at(t, base, b, j, bs, ld), t->a->dh);
}

/* Lanes j of *S0 and *S1: the dot products of X0 and X1 with key j0 + j from the transposed keys
 * at K, as the block of DOTS_T computes each; the two chains of additions side by side, each key's
 * elements read once for both. */
#define DOTS2_T(NAME, TARGET, VEC, PFX)                                                                 \
    static inline __attribute__((always_inline)) TARGET void NAME(VEC *s0, VEC *s1, const float *x0, const float *x1, \
                                                                  const float *k, int64_t ldt, int nv)  \
    {                                                                                                   \
        VEC a0 = PFX##_setzero_ps(), a1 = PFX##_setzero_ps();                                           \
        for (int l = 0; l < 16; l++) {                                                                  \
            VEC kl = PFX##_loadu_ps(k + l * ldt);                                                       \
            VEC p0 = PFX##_mul_ps(PFX##_set1_ps(x0[l]), kl), p1 = PFX##_mul_ps(PFX##_set1_ps(x1[l]), kl); \
            for (int c = 1; c < nv; c++) {                                                              \
                VEC kc = PFX##_loadu_ps(k + (16 * c + l) * ldt);                                        \
                p0 = PFX##_add_ps(p0, PFX##_mul_ps(PFX##_set1_ps(x0[16 * c + l]), kc));                 \
                p1 = PFX##_add_ps(p1, PFX##_mul_ps(PFX##_set1_ps(x1[16 * c + l]), kc));                 \
            }                                                                                           \
            a0 = PFX##_add_ps(a0, p0);                                                                  \
            a1 = PFX##_add_ps(a1, p1);                                                                  \
        }                                                                                               \
        *s0 = a0;                                                                                       \
        *s1 = a1;                                                                                       \
    }
DOTS2_T(dots2_t16_block, ISA_AVX512, __m512, _mm512)
DOTS2_T(dots2_t8_block, ISA_AVX2, __m256, _mm256)
#undef DOTS2_T

/* NAME(OUT0, OUT1, X0, X1, KT, LDT, DH, N0, N1): dots_t16 or dots_t8 for two queries X0, X1 over
 * their N0 and N1 keys at once, W keys at a time (BLOCK), stored by STORE. */
#define DOTS2(NAME, TARGET, VEC, W, BLOCK, STORE)                                                       \
    TARGET static void NAME(float *out0, float *out1, const float *x0, const float *x1, const float *kt, int ldt, \
                            int dh, int n0, int n1)                                                     \
    {                                                                                                   \
        int n = n0 > n1 ? n0 : n1;                                                                      \
        for (int j0 = 0; j0 < n; j0 += (W)) {                                                           \
            VEC s0, s1;                                                                                 \
            BLOCK(&s0, &s1, x0, x1, kt + j0, ldt, dh / 16);                                             \
            STORE(out0 + j0, s0, n0 - j0);                                                              \
            STORE(out1 + j0, s1, n1 - j0);                                                              \
        }                                                                                               \
    }
DOTS2(dots2_t16, ISA_AVX512, __m512, 16, dots2_t16_block, store16)
DOTS2(dots2_t8, ISA_AVX2, __m256, 8, dots2_t8_block, store8)
#undef DOTS2

/* dots for two queries X0, X1 of batch item B over their N0 and N1 keys: OUT0, OUT1. */
static inline __attribute__((always_inline)) void dots2(float *out0, float *out1, const float *x0, const float *x1,
                                                        const float *kt, int ldt, const struct attn *t,
                                                        const float *base, int b, int n0, int n1, int64_t bs,
                                                        int64_t ld, int wide)
{
    if (wide == 2) {
        dots2_t16(out0, out1, x0, x1, kt, ldt, t->a->dh, n0, n1);
        return;
    }
    if (wide == 1) {
        dots2_t8(out0, out1, x0, x1, kt, ldt, t->a->dh, n0, n1);
        return;
    }
    dots(out0, x0, kt, ldt, t, base, b, n0, bs, ld, wide);
    dots(out1, x1, kt, ldt, t, base, b, n1, bs, ld, wide);
}

/* NAME(O, W, T, BASE, B, N, BS, LD, DH): O (DH floats) = +0 + W[0] row 0 + W[1] row 1 + ... over
 * the rows j < N of batch item B (key_at from BASE with strides BS, LD), as vaxpy adds them into a
 * zeroed O, the DH / VW sums of VW floats held in registers (DH a multiple of 16 up to 128). */
#define WSUM(NAME, TARGET, VEC, VW, PFX)                                                                \
    static inline __attribute__((always_inline)) TARGET void NAME##_n(float *o, const float *w, const struct attn *t, \
                                                                      const float *base, int b, int n, int64_t bs, \
                                                                      int64_t ld, const int nvec)        \
    {                                                                                                   \
        VEC acc[16];                                                                                    \
        for (int c = 0; c < nvec; c++)                                                                  \
            acc[c] = PFX##_setzero_ps();                                                                \
        for (int j = 0; j < n; j++) {                                                                   \
            const float *row = key_at(t, base, b, j, bs, ld);                                           \
            VEC wj = PFX##_set1_ps(w[j]);                                                               \
            for (int c = 0; c < nvec; c++)                                                              \
                acc[c] = PFX##_add_ps(acc[c], PFX##_mul_ps(wj, PFX##_loadu_ps(row + (VW) * c)));        \
        }                                                                                               \
        for (int c = 0; c < nvec; c++)                                                                  \
            PFX##_storeu_ps(o + (VW) * c, acc[c]);                                                      \
    }                                                                                                   \
    TARGET static void NAME(float *o, const float *w, const struct attn *t, const float *base, int b, int n, \
                            int64_t bs, int64_t ld, int dh)                                             \
    {                                                                                                   \
        switch (dh / 16) {                                                                              \
        case 1: NAME##_n(o, w, t, base, b, n, bs, ld, 16 / (VW)); break;                                \
        case 2: NAME##_n(o, w, t, base, b, n, bs, ld, 32 / (VW)); break;                                \
        case 3: NAME##_n(o, w, t, base, b, n, bs, ld, 48 / (VW)); break;                                \
        case 4: NAME##_n(o, w, t, base, b, n, bs, ld, 64 / (VW)); break;                                \
        case 5: NAME##_n(o, w, t, base, b, n, bs, ld, 80 / (VW)); break;                                \
        case 6: NAME##_n(o, w, t, base, b, n, bs, ld, 96 / (VW)); break;                                \
        case 7: NAME##_n(o, w, t, base, b, n, bs, ld, 112 / (VW)); break;                               \
        default: NAME##_n(o, w, t, base, b, n, bs, ld, 128 / (VW)); break;                              \
        }                                                                                               \
    }
WSUM(wsum16, ISA_AVX512, __m512, 16, _mm512)
WSUM(wsum8, ISA_AVX2, __m256, 8, _mm256)
#undef WSUM

/* O (DH floats) = +0 + W[0] row 0 + W[1] row 1 + ... over the rows j < N of batch item B (key_at
 * from BASE with strides BS, LD): through wsum16 or wsum8 as WIDE says (dots_wide), else vaxpy
 * into a zeroed O; the same bits either way. */
static inline __attribute__((always_inline)) void wsum(float *o, const float *w, const struct attn *t,
                                                       const float *base, int b, int n, int64_t bs, int64_t ld, int dh,
                                                       int wide)
{
    if (wide == 2) {
        wsum16(o, w, t, base, b, n, bs, ld, dh);
        return;
    }
    if (wide == 1) {
        wsum8(o, w, t, base, b, n, bs, ld, dh);
        return;
    }
    for (int d = 0; d < dh; d++)
        o[d] = 0;
    for (int j = 0; j < n; j++)
        vaxpy(o, w[j], key_at(t, base, b, j, bs, ld), dh);
}

CPU_VEC_BODY(fwd_body)
{
    struct attn *t = arg;
    const struct nmt_attn_args *a = t->a;
    int dh = a->dh, Tk = a->Tk;
    float *s = cpu_scratch_of(t->ctx, tid); /* (Tk + 16) the row's scores, then weights */
    float *s_next = s + Tk + 16;            /* (Tk + 16) the next row's scores, computed with the row's */
    float *kt = s_next + Tk + 16;           /* (keys_t_floats) the keys of (b, h), transposed */
    float keep = 1.0f / (1.0f - a->dropout);
    uint64_t key = rng_key(a->seed);
    int wide = dots_wide(dh), ldt = 0;
    int64_t kt_bh = -1, next = -1; /* the (b, h) whose keys kt holds; the row whose scores s_next holds */
    for (int64_t r = lo; r < hi; r++) { /* r = (b*H + h)*Tq + i */
        int i = (int)(r % a->Tq), h = (int)(r / a->Tq % a->H), b = (int)(r / a->Tq / a->H);
        if (wide && r / a->Tq != kt_bh) {
            kt_bh = r / a->Tq;
            ldt = keys_t(kt, t, t->k + h * dh, b, visible(a, b, a->Tq - 1), a->k_bs, a->k_ld, wide);
        }
        const float *qi = t->q + b * a->q_bs + i * a->q_ld + h * dh;
        float *o = t->out + b * a->o_bs + i * a->o_ld + h * dh;
        float *prow = t->P ? t->P + r * Tk : NULL;
        int n = visible(a, b, i);
        if (t->lse)
            t->lse[2 * r] = t->lse[2 * r + 1] = 0;
        if (n == 0) {
            for (int d = 0; d < dh; d++)
                o[d] = 0;
            if (prow)
                memset(prow, 0, (size_t)Tk * sizeof *prow);
            continue;
        }
        const float *kh = t->k + h * dh, *vh = t->v + h * dh;
        if (r == next) { /* computed with the last row's */
            float *x = s;
            s = s_next, s_next = x;
        } else if (wide && r + 1 < hi && i + 1 < a->Tq) {
            dots2(s, s_next, qi, qi + a->q_ld, kt, ldt, t, kh, b, n, visible(a, b, i + 1), a->k_bs, a->k_ld, wide);
            next = r + 1;
        } else {
            dots(s, qi, kt, ldt, t, kh, b, n, a->k_bs, a->k_ld, wide);
        }
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
        if (a->dropout > 0) {
            uint64_t ctr = a->offset + (uint64_t)r * (uint64_t)Tk;
            for (int j = 0; j < n; j++)
                s[j] = rng_uniform_keyed(key, ctr + (uint64_t)j) >= a->dropout ? s[j] * keep : 0.0f;
        }
        wsum(o, s, t, vh, b, n, a->v_bs, a->v_ld, dh, wide);
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
#define INFER_SCORES(NAME, TARGET, VEC, W, PFX, SUM, MAX_LIVE, HMAX, EXP)                               \
    static inline __attribute__((always_inline)) TARGET float NAME(float *s, const float *qi, const struct attn *t, \
                                                                   const float *kh, int b, int n, int nv, float scale_) \
    {                                                                                                   \
        VEC mxv = PFX##_set1_ps(-INFINITY), scale = PFX##_set1_ps(scale_);                              \
        for (int j0 = 0; j0 < n; j0 += (W)) {                                                           \
            const float *kj[W]; /* past N: key j0 again, its products then zeroed */                   \
            for (int j = 0; j < (W); j++)                                                               \
                kj[j] = key_at(t, kh, b, j0 + j < n ? j0 + j : j0, t->a->k_bs, t->a->k_ld);            \
            VEC acc[W], qc = PFX##_loadu_ps(qi); /* the W keys' chains side by side, a part at a time */ \
            for (int j = 0; j < (W); j++)                                                               \
                acc[j] = PFX##_mul_ps(qc, PFX##_loadu_ps(kj[j]));                                       \
            for (int c = 1; c < nv; c++) {                                                              \
                qc = PFX##_loadu_ps(qi + (W) * c);                                                      \
                for (int j = 0; j < (W); j++)                                                           \
                    acc[j] = PFX##_fmadd_ps(qc, PFX##_loadu_ps(kj[j] + (W) * c), acc[j]);               \
            }                                                                                           \
            for (int j = n - j0; j < (W); j++)                                                          \
                acc[j] = PFX##_setzero_ps();                                                            \
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
INFER_SCORES(scores16, ISA_AVX512, __m512, 16, _mm512, sum16x16, max_live16, _mm512_reduce_max_ps, exp16)

/* The body of an inference path, NAME: one query row with all its heads per work item; per group
 * of heads, each head's softmax weights over its visible keys (SCORES, unnormalised, and 1 / their
 * sum), then the group's weighted sums over the keys in order, their chains of fused multiply-adds
 * side by side. VEC holds W floats; PFX is the prefix of its intrinsics (_mm512, _mm256). */
#define INFER_BODY(NAME, TARGET, VEC, W, PFX, SCORES)                                                  \
    /* O (GN vectors: the group's heads side by side) = the weighted sums over the keys j < N, in      \
     * order, of the values from VG (key_at); vector k's weights are S's row k / NV (stride STRIDE). */ \
    static inline __attribute__((always_inline)) TARGET void NAME##_wsum(float *o, const float *s, int stride, int nv, \
                                                                         const struct attn *t, const float *vg, \
                                                                         int b, int n, const int gn)    \
    {                                                                                                   \
        const float *w[INFER_GROUP_VECS];                                                               \
        VEC acc[INFER_GROUP_VECS];                                                                      \
        for (int k = 0; k < gn; k++) {                                                                  \
            w[k] = s + k / nv * stride;                                                                 \
            acc[k] = PFX##_setzero_ps();                                                                \
        }                                                                                               \
        for (int j = 0; j < n; j++) {                                                                   \
            const float *vr = key_at(t, vg, b, j, t->a->v_bs, t->a->v_ld);                              \
            for (int k = 0; k < gn; k++)                                                                \
                acc[k] = PFX##_fmadd_ps(PFX##_set1_ps(w[k][j]), PFX##_loadu_ps(vr + (W) * k), acc[k]);  \
        }                                                                                               \
        for (int k = 0; k < gn; k++)                                                                    \
            PFX##_storeu_ps(o + (W) * k, acc[k]);                                                       \
    }                                                                                                   \
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
                for (int u = 0; u < g; u++) { /* the weights: each score times 1 / its head's sum */    \
                    float inv = SCORES(s + u * stride, t->q + b * a->q_bs + i * a->q_ld + (h0 + u) * dh, t, \
                                       t->k + (h0 + u) * dh, b, n, nv, a->scale);                       \
                    for (int j = 0; j < n; j++)                                                         \
                        s[u * stride + j] *= inv;                                                       \
                }                                                                                       \
                float *o = t->out + b * a->o_bs + i * a->o_ld + h0 * dh;                                \
                const float *vg = t->v + h0 * dh;                                                       \
                switch (g * nv) { /* the group's accumulators in registers: a constant count */          \
                case 1: NAME##_wsum(o, s, stride, nv, t, vg, b, n, 1); break;                            \
                case 2: NAME##_wsum(o, s, stride, nv, t, vg, b, n, 2); break;                            \
                case 3: NAME##_wsum(o, s, stride, nv, t, vg, b, n, 3); break;                            \
                case 4: NAME##_wsum(o, s, stride, nv, t, vg, b, n, 4); break;                            \
                case 5: NAME##_wsum(o, s, stride, nv, t, vg, b, n, 5); break;                            \
                case 6: NAME##_wsum(o, s, stride, nv, t, vg, b, n, 6); break;                            \
                case 7: NAME##_wsum(o, s, stride, nv, t, vg, b, n, 7); break;                            \
                default: NAME##_wsum(o, s, stride, nv, t, vg, b, n, INFER_GROUP_VECS); break;            \
                }                                                                                       \
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
INFER_SCORES(scores8, ISA_AVX2, __m256, 8, _mm256, sum8x8, max_live8, max8, exp8)
#undef INFER_EXP
#undef INFER_SCORES

INFER_BODY(fwd_infer_body8, ISA_AVX2, __m256, 8, _mm256, scores8)
#undef INFER_BODY

/* attention_forward, or with ROWS attention_forward_rows (no P then). */
static int forward(nmt_bctx *ctx, const char *what, float *out, float *P, const float *q, const float *k,
                   const float *v, const struct nmt_attn_args *a, const int32_t *rows, int64_t rows_ld)
{
    /* the inference paths keep the scores of a group of up to INFER_GROUP_VECS heads, fwd_body one
     * head's scores and its keys transposed */
    size_t infer_floats = (size_t)INFER_GROUP_VECS * (size_t)(a->Tk + 16), body_floats = 2 * ((size_t)a->Tk + 16);
    if (check_rows(ctx, what, a, rows != NULL) < 0)
        return -1;
    body_floats += keys_t_floats(a);
    if (cpu_scratch(ctx, (infer_floats > body_floats ? infer_floats : body_floats) * sizeof(float)) < 0)
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

/* The dot products of query row I's (the P row recomputed from the keys (lse path), with
 * the output's gradient from the values), into the row's scratch PR, DP; with NEXT the next row's
 * too, into PR1, DP1, the rows side by side. */
static inline __attribute__((always_inline)) void bwd_dots(const struct attn *t, int b, int h, int i, int next,
                                                           const float *kt, const float *vt, int ldt, int wide,
                                                           float *pr, float *dp, float *pr1, float *dp1)
{
    const struct nmt_attn_args *a = t->a;
    int dh = a->dh, n = visible(a, b, i);
    const float *qi = t->q + b * a->q_bs + i * a->q_ld + h * dh, *go = t->dout + b * a->o_bs + i * a->o_ld + h * dh;
    const float *kh = t->k + h * dh, *vh = t->v + h * dh;
    if (next) {
        int n1 = visible(a, b, i + 1);
        if (!t->Pin)
            dots2(pr, pr1, qi, qi + a->q_ld, kt, ldt, t, kh, b, n, n1, a->k_bs, a->k_ld, wide);
        dots2(dp, dp1, go, go + a->o_ld, vt, ldt, t, vh, b, n, n1, a->v_bs, a->v_ld, wide);
        return;
    }
    if (!t->Pin)
        dots(pr, qi, kt, ldt, t, kh, b, n, a->k_bs, a->k_ld, wide);
    dots(dp, go, vt, ldt, t, vh, b, n, a->v_bs, a->v_ld, wide);
}

/* One (b, h) pair per index: dk and dv of that pair are owned by one chunk, queries in order. */
CPU_VEC_BODY(bwd_body)
{
    struct attn t0 = *(struct attn *)arg, *t = &t0;
    const struct nmt_attn_args *a = t->a;
    int dh = a->dh, Tk = a->Tk, Tq = a->Tq;
    float *dp = cpu_scratch_of(t->ctx, tid); /* (Tk + 16) dO_i . V_j, then dS_ij */
    float *pr = dp + Tk + 16;                /* (Tk + 16) the recomputed row of P (lse path) */
    float *dp1 = pr + Tk + 16, *pr1 = dp1 + Tk + 16; /* the same of the next row */
    float *kt = pr1 + Tk + 16;               /* (keys_t_floats) the keys of (b, h), transposed */
    float *vt = kt + keys_t_floats(a);       /* (keys_t_floats) its values, transposed */
    float keep = 1.0f / (1.0f - a->dropout);
    uint64_t key = rng_key(a->seed);
    int wide = dots_wide(dh), ldt = 0;
    for (int64_t bh = lo; bh < hi; bh++) {
        int b = (int)(bh / a->H), h = (int)(bh % a->H);
        if (wide && Tq) {
            int nmax = visible(a, b, Tq - 1);
            if (!t->Pin)
                keys_t(kt, t, t->k + h * dh, b, nmax, a->k_bs, a->k_ld, wide);
            ldt = keys_t(vt, t, t->v + h * dh, b, nmax, a->v_bs, a->v_ld, wide);
        }
        float *dkb = t->dk + b * a->k_bs + h * dh, *dvb = t->dv + b * a->v_bs + h * dh;
        for (int j = 0; j < Tk; j++) {
            memset(dkb + j * a->k_ld, 0, (size_t)dh * sizeof(float));
            memset(dvb + j * a->v_ld, 0, (size_t)dh * sizeof(float));
        }
        int next = -1; /* the row whose dot products dp1, pr1 hold */
        for (int i = 0; i < Tq; i++) {
            int64_t r = bh * Tq + i;
            const float *qi = t->q + b * a->q_bs + i * a->q_ld + h * dh;
            const float *go = t->dout + b * a->o_bs + i * a->o_ld + h * dh;
            float *dqi = t->dq + b * a->q_bs + i * a->q_ld + h * dh;
            int n = visible(a, b, i);
            if (n == 0) {
                for (int d = 0; d < dh; d++)
                    dqi[d] = 0;
                continue;
            }
            if (i == next) { /* computed with the last row's */
                float *x = dp;
                dp = dp1, dp1 = x, x = pr, pr = pr1, pr1 = x;
            } else {
                int pair = wide && i + 1 < Tq;
                bwd_dots(t, b, h, i, pair, kt, vt, ldt, wide, pr, dp, pr1, dp1);
                next = pair ? i + 1 : -1;
            }
            const float *prow = t->Pin ? t->Pin + r * Tk : pr;
            if (!t->Pin) { /* P as fwd_body computed it: the same operations on the same values */
                float mx = t->lsein[2 * r], inv = 1.0f / t->lsein[2 * r + 1];
                for (int j = 0; j < n; j++)
                    pr[j] *= a->scale;
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
                vaxpy(dvb + j * a->v_ld, prow[j] * m, go, dh);
                dp[j] *= m;
                dot += prow[j] * dp[j];
            }
            for (int j = 0; j < n; j++) { /* dS_ij; dK_j += dS_ij Q_i */
                dp[j] = prow[j] * (dp[j] - dot) * a->scale;
                vaxpy(dkb + j * a->k_ld, dp[j], qi, dh);
            }
            wsum(dqi, dp, t, t->k + h * dh, b, n, a->k_bs, a->k_ld, dh, wide); /* dQ_i = sum_j dS_ij K_j */
        }
    }
}

int cpu_attention_backward(nmt_bctx *ctx, float *dq, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const float *P, const struct nmt_attn_args *a)
{
    if (check(ctx, "attention_backward", a) < 0 ||
        cpu_scratch(ctx, (4 * ((size_t)a->Tk + 16) + 2 * keys_t_floats(a)) * sizeof(float)) < 0)
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
    if (check(ctx, "attention_forward_lse", a) < 0 ||
        cpu_scratch(ctx, (2 * ((size_t)a->Tk + 16) + keys_t_floats(a)) * sizeof(float)) < 0)
        return -1;
    struct attn t = { .out = out, .lse = lse, .q = q, .k = k, .v = v, .a = a, .ctx = ctx };
    pool_for(ctx->pool, (int64_t)a->B * a->H * a->Tq, 4, fwd_body, &t);
    return 0;
}

int cpu_attention_backward_lse(nmt_bctx *ctx, float *dq, float *dk, float *dv, const float *dout, const float *out,
                               const float *lse, const float *q, const float *k, const float *v,
                               const struct nmt_attn_args *a)
{
    if (check(ctx, "attention_backward_lse", a) < 0 ||
        cpu_scratch(ctx, (4 * ((size_t)a->Tk + 16) + 2 * keys_t_floats(a)) * sizeof(float)) < 0)
        return -1;
    if (!lse)
        return cpu_err(ctx, "attention_backward_lse: no saved statistics");
    struct attn t = { .dq = dq, .dk = dk, .dv = dv, .dout = dout, .q = q, .k = k, .v = v, .lsein = lse, .a = a,
                      .ctx = ctx };
    pool_for(ctx->pool, (int64_t)a->B * a->H, 1, bwd_body, &t);
    return 0;
}
