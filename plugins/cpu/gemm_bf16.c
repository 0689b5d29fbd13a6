/* gemm_bf16.c: the operands of the bf16 products (gemm_bf16.h) rounded to bf16 and packed, then
 * the product run: the packing is AVX-512 code, shared by the tiles and vdpbf16ps. */
#include <immintrin.h>
#include <string.h>

#include "bf16.h"
#include "cpu.h"
#include "gemm_bf16.h"

#define PACK_GRAIN 4                  /* row blocks or panels per thread chunk, at least */
#define WORK_GRAIN ((int64_t)1 << 23) /* multiply-adds per thread chunk, at least */

static size_t up32(size_t x) { return (x + BF16_STEP - 1) / BF16_STEP * BF16_STEP; }

size_t cpu_gemm_bf16_bytes(int M, int N, int K)
{
    size_t kp = up32((size_t)K);
    return (up32((size_t)M) + up32((size_t)N)) * kp * sizeof(uint16_t);
}

/* The first N values (0 to 16) of X as 16 bf16, zeros after them: bf16 as they are; float32 values
 * below the normal range as 0 of their sign, the others rounded as f32_to_bf16 does (what
 * vcvtne2ps2bf16 computes). Reads nothing past them (nothing at all when N is 0). */
static inline __attribute__((always_inline)) ISA_AVX512 __m256i cvt16(const void *x, int bf16, int n)
{
    if (n <= 0)
        return _mm256_setzero_si256();
    __mmask16 m = (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1);
    if (bf16)
        return _mm256_maskz_loadu_epi16(m, x);
    __m512i u = _mm512_maskz_loadu_epi32(m, x), hi = _mm512_srli_epi32(u, 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    __mmask16 sub = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000)); /* zero exponent */
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1))));
    r = _mm512_mask_mov_epi32(_mm512_srli_epi32(r, 16), nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    r = _mm512_mask_mov_epi32(r, sub, _mm512_and_si512(hi, _mm512_set1_epi32(0x8000)));
    return _mm512_cvtepi32_epi16(r);
}

/* Address of element I of operand X (bf16 or float32). */
static const void *at(const void *x, int bf16, size_t i)
{
    return bf16 ? (const void *)((const uint16_t *)x + i) : (const void *)((const float *)x + i);
}

/* The 16 by 16 matrix of 32-bit values in R (R[i] its row i) transposed in place. */
static inline __attribute__((always_inline)) ISA_AVX512 void transpose16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) { /* in each 128-bit lane: pairs of rows interleaved */
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* r[4g + c], lane L: rows 4g..4g+3 of column 4L + c */
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int c = 0; c < 4; c++) { /* the 4 by 4 lanes of r[c], r[4 + c], r[8 + c], r[12 + c] transposed */
        __m512i a = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44), b = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xEE);
        __m512i e = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44), f = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xEE);
        t[c] = _mm512_shuffle_i32x4(a, e, 0x88);
        t[4 + c] = _mm512_shuffle_i32x4(a, e, 0xDD);
        t[8 + c] = _mm512_shuffle_i32x4(b, f, 0x88);
        t[12 + c] = _mm512_shuffle_i32x4(b, f, 0xDD);
    }
    for (int i = 0; i < 16; i++)
        r[i] = t[i];
}

/* Two rows of 16 bf16 as 16 pairs: E's value in the low half of each, O's in the high. */
static inline __attribute__((always_inline)) ISA_AVX512 __m512i pairs16(__m256i e, __m256i o)
{
    return _mm512_or_si512(_mm512_cvtepu16_epi32(e), _mm512_slli_epi32(_mm512_cvtepu16_epi32(o), 16));
}

/* The first N values (0 to 32) of X as 32 bf16, zeros after them, through cvt16. */
static inline __attribute__((always_inline)) ISA_AVX512 __m512i cvt32_int(const void *x, int bf16, int n)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(cvt16(x, bf16, n < 16 ? n : 16)), cvt16(at(x, bf16, 16), bf16, n - 16),
                              1);
}

/* The first N values (0 to 16) of rows E and O as 16 pairs (E's value low), through cvt16. */
static inline __attribute__((always_inline)) ISA_AVX512 __m512i pairs_int(const void *e, const void *o, int bf16, int ne,
                                                                          int no)
{
    return pairs16(cvt16(e, bf16, ne), cvt16(o, bf16, no));
}

/* The first N values (0 to 16) of X as 16 float32, zeros after them; reads nothing past them. */
static inline __attribute__((always_inline)) ISA_AVX512_BF16 __m512 load16(const float *x, int n)
{
    if (n <= 0)
        return _mm512_setzero_ps();
    return _mm512_maskz_loadu_ps((__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1), x);
}

/* cvt32_int with vcvtne2ps2bf16: the same values. */
static inline __attribute__((always_inline)) ISA_AVX512_BF16 __m512i cvt32_ne(const void *x, int bf16, int n)
{
    if (bf16)
        return n <= 0 ? _mm512_setzero_si512()
                      : _mm512_maskz_loadu_epi16(n >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << n) - 1, x);
    const float *f = x;
    return (__m512i)_mm512_cvtne2ps_pbh(load16(f + 16, n - 16), load16(f, n));
}

/* pairs_int with vcvtne2ps2bf16: both rows converted at once, then interleaved; the same values. */
static inline __attribute__((always_inline)) ISA_AVX512_BF16 __m512i pairs_ne(const void *e, const void *o, int bf16, int ne,
                                                                              int no)
{
    if (bf16)
        return pairs_int(e, o, bf16, ne, no);
    const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5,
                                           20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    __m512i v = (__m512i)_mm512_cvtne2ps_pbh(load16(o, no), load16(e, ne)); /* E's 16 values, then O's */
    return _mm512_permutexvar_epi16(order, v);
}

/* The four packing bodies, defined as NAME_FLAVOUR for the instruction set ISA with the conversions
 * CVT32 (32 values of a row) and PAIRS (two rows of 16 as pairs):
 *   - pack_a_rows: row tiles [lo, hi) of the packed A (16 rows each) where op(A) = A, each tile's
 *     16 rows read along K;
 *   - pack_a_cols: steps of K [lo, hi) (32 values each) of the packed A where op(A) = A^T: row k of
 *     A holds column k of op(A); for each row tile, 32 such rows of 16 values (read along A's
 *     rows) become 16 rows of pairs, transposed into the tile's 16 rows;
 *   - pack_b_rows: panels [lo, hi) of the packed B (16 columns each) where op(B) = B^T: row n of B
 *     holds column n of op(B); per step of K its 32 values are 16 pairs, and the panel's 16
 *     columns of pairs are transposed into the step's 16 rows of pairs;
 *   - pack_b_cols: steps of K [lo, hi) of the packed B where op(B) = B: rows k and k + 1 of B read
 *     whole, interleaved into the pair rows of every panel. */
#define BF16_PACKERS(FLAVOUR, ISA, CVT32, PAIRS)                                                             \
    ISA static void pack_a_rows_##FLAVOUR(void *arg, int64_t lo, int64_t hi, int tid)                        \
    {                                                                                                        \
        (void)tid;                                                                                           \
        const struct bf16_gemm *g = arg;                                                                     \
        size_t kp = (size_t)g->Kp;                                                                           \
        for (int64_t rt = lo; rt < hi; rt++) {                                                               \
            int r0 = (int)rt * 16, rows = g->M - r0 < 16 ? g->M - r0 : 16;                                   \
            uint16_t *d = g->pa + (size_t)r0 * kp;                                                           \
            for (size_t k0 = 0; k0 < kp; k0 += BF16_STEP) { /* one tile: 16 rows by 32 values */            \
                int kn = g->K - (int)k0 < BF16_STEP ? g->K - (int)k0 : BF16_STEP;                            \
                for (int r = 0; r < 16; r++) {                                                               \
                    const void *x = at(g->A, g->a_bf16, (size_t)(r0 + r) * (size_t)g->lda + k0);             \
                    _mm512_storeu_si512(d + k0 * 16 + (size_t)r * BF16_STEP, CVT32(x, g->a_bf16, r < rows ? kn : 0)); \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    }                                                                                                        \
    ISA static void pack_a_cols_##FLAVOUR(void *arg, int64_t lo, int64_t hi, int tid)                        \
    {                                                                                                        \
        (void)tid;                                                                                           \
        const struct bf16_gemm *g = arg;                                                                     \
        size_t kp = (size_t)g->Kp, mp = up32((size_t)g->M), K = (size_t)g->K;                                \
        for (int64_t ks = lo; ks < hi; ks++) {                                                               \
            size_t k0 = (size_t)ks * BF16_STEP;                                                              \
            for (size_t r0 = 0; r0 < mp; r0 += 16) {                                                         \
                int n = (size_t)g->M > r0 ? ((size_t)g->M - r0 < 16 ? (int)((size_t)g->M - r0) : 16) : 0;    \
                __m512i v[16];                                                                               \
                for (size_t q = 0; q < 16; q++) {                                                            \
                    size_t k = k0 + 2 * q;                                                                   \
                    const void *x = at(g->A, g->a_bf16, k * (size_t)g->lda + r0);                            \
                    v[q] = PAIRS(x, at(x, g->a_bf16, (size_t)g->lda), g->a_bf16, k < K ? n : 0, k + 1 < K ? n : 0); \
                }                                                                                            \
                transpose16(v);                                                                              \
                uint16_t *d = g->pa + r0 * kp + k0 * 16;                                                     \
                for (int r = 0; r < 16; r++)                                                                 \
                    _mm512_storeu_si512(d + (size_t)r * BF16_STEP, v[r]);                                    \
            }                                                                                                \
        }                                                                                                    \
    }                                                                                                        \
    ISA static void pack_b_rows_##FLAVOUR(void *arg, int64_t lo, int64_t hi, int tid)                        \
    {                                                                                                        \
        (void)tid;                                                                                           \
        const struct bf16_gemm *g = arg;                                                                     \
        size_t kp = (size_t)g->Kp;                                                                           \
        for (int64_t p = lo; p < hi; p++) {                                                                  \
            int c0 = (int)p * 16, cols = g->N - c0 < 16 ? g->N - c0 : 16;                                    \
            uint16_t *d = g->pb + (size_t)p * kp * 16;                                                       \
            for (size_t k0 = 0; k0 < kp; k0 += BF16_STEP) {                                                  \
                int kn = g->K - (int)k0 < BF16_STEP ? g->K - (int)k0 : BF16_STEP;                            \
                __m512i v[16];                                                                               \
                for (int c = 0; c < 16; c++)                                                                 \
                    v[c] = CVT32(at(g->B, g->b_bf16, (size_t)(c0 + c) * (size_t)g->ldb + k0), g->b_bf16,     \
                                 c < cols ? kn : 0);                                                         \
                transpose16(v);                                                                              \
                for (int q = 0; q < 16; q++)                                                                 \
                    _mm512_storeu_si512(d + k0 * 16 + (size_t)q * 32, v[q]);                                 \
            }                                                                                                \
        }                                                                                                    \
    }                                                                                                        \
    ISA static void pack_b_cols_##FLAVOUR(void *arg, int64_t lo, int64_t hi, int tid)                        \
    {                                                                                                        \
        (void)tid;                                                                                           \
        const struct bf16_gemm *g = arg;                                                                     \
        size_t kp = (size_t)g->Kp, np = up32((size_t)g->N), K = (size_t)g->K;                                \
        for (int64_t ks = lo; ks < hi; ks++) {                                                               \
            size_t k0 = (size_t)ks * BF16_STEP;                                                              \
            for (size_t c0 = 0; c0 < np; c0 += 16) { /* a panel's 16 pair rows: 1 KB written in turn */     \
                int n = (size_t)g->N > c0 ? ((size_t)g->N - c0 < 16 ? (int)((size_t)g->N - c0) : 16) : 0;    \
                for (size_t k = k0; k < k0 + BF16_STEP; k += 2) {                                            \
                    const void *e = at(g->B, g->b_bf16, k * (size_t)g->ldb + c0);                            \
                    _mm512_storeu_si512(g->pb + (c0 / 16) * kp * 16 + (k / 2) * 32,                          \
                                        PAIRS(e, at(e, g->b_bf16, (size_t)g->ldb), g->b_bf16, k < K ? n : 0, \
                                              k + 1 < K ? n : 0));                                           \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    }

BF16_PACKERS(int, ISA_AVX512, cvt32_int, pairs_int)
BF16_PACKERS(ne, ISA_AVX512_BF16, cvt32_ne, pairs_ne)

int cpu_gemm_bf16(nmt_bctx *ctx, void *work, pool_fn body, int ne, int transA, int transB, int M, int N, int K,
                  float alpha, const void *A, int a_bf16, int lda, const void *B, int b_bf16, int ldb, float beta, float *C,
                  int ldc)
{
    size_t kp = up32((size_t)K), mp = up32((size_t)M), np = up32((size_t)N);
    struct bf16_gemm g = { A, B, a_bf16, b_bf16, transA, transB, lda, ldb, work, (uint16_t *)work + mp * kp,
                           M, N, K, (int)kp, alpha, beta, C, ldc };
    if (transA)
        pool_for(ctx->pool, (int64_t)(kp / BF16_STEP), PACK_GRAIN, ne ? pack_a_cols_ne : pack_a_cols_int, &g);
    else
        pool_for(ctx->pool, (int64_t)(mp / 16), PACK_GRAIN, ne ? pack_a_rows_ne : pack_a_rows_int, &g);
    if (transB)
        pool_for(ctx->pool, (int64_t)(np / 16), PACK_GRAIN, ne ? pack_b_rows_ne : pack_b_rows_int, &g);
    else
        pool_for(ctx->pool, (int64_t)(kp / BF16_STEP), PACK_GRAIN, ne ? pack_b_cols_ne : pack_b_cols_int, &g);
    int64_t per = (int64_t)mp * (int64_t)kp * BF16_STEP;
    pool_for(ctx->pool, (int64_t)(np / BF16_STEP), (WORK_GRAIN + per - 1) / per, body, &g);
    return 0;
}
