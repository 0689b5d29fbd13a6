/* gemm_bf16_amx.c: the bf16 matrix products of gemm and gemm_ex under set_precision(BF16) on CPUs
 * with AMX (AMX-TILE and AMX-BF16: Sapphire Rapids and later); mixed.c picks this path where
 * cpu_isa() is CPU_ISA_AMX, and the exact emulation on sgemm elsewhere.
 *
 * op(A) (M,K) and op(B) (K,N) are rounded to bfloat16 (f32_to_bf16, bf16.h; bf16 operands as they
 * are) into packed copies:
 *   - A as Mp / 16 row tiles (M rounded up to 32, zero rows past M), each Kp / 32 A tiles in
 *     turn (K rounded up to 32, zeros past K): 16 rows of 32 values, 1 KB, read as one stream;
 *     packed a row tile at a time where op(A) = A, a step of K at a time from whole rows of A
 *     where op(A) = A^T (transposed in registers), so that A is always read along its rows;
 *   - B as Np / 16 panels (N rounded up to 32) of 16 columns, each Kp / 2 rows of 64 bytes: row g
 *     holds, for c = 0..15, op(B)[2g][c] and op(B)[2g+1][c]. 16 such rows are a B tile: 32 values
 *     of K by 16 columns, the pairs tdpbf16ps multiplies. Packed a panel at a time where
 *     op(B) = B^T, a step of K at a time from whole rows of B where op(B) = B.
 * Tiles, all 16 rows by 64 bytes: 0..3 the sums of a block of 32 rows by 32 columns of C, 4 and 5
 * its rows of A, 6 and 7 its columns of B. Each tdpbf16ps adds to an element's sum the 32 products
 * of one step of K (amx.h states the order). So an element's sum depends on K and on its own row
 * of op(A) and column of op(B) only: the same bits whatever M, N, its place or the thread count
 * (threads split the columns, each element summed by one). Then C = alpha * sum, + beta * C where
 * beta is not 0 (as gemm.c's put). */
#include <immintrin.h>
#include <string.h>

#include "amx.h"
#include "bf16.h"
#include "cpu.h"

#define STEP 32                    /* K values of a tile step; rows and columns of a block */
#define B_SWEPT ((size_t)1 << 20)  /* bytes of packed B swept by every row block in turn: half the L2 */
#define PACK_GRAIN 4               /* row blocks or panels per thread chunk, at least */
#define WORK_GRAIN ((int64_t)1 << 23) /* multiply-adds per thread chunk, at least */

struct bfg {
    const void *A, *B;
    int a_bf16, b_bf16, transA, transB, lda, ldb;
    uint16_t *pa, *pb; /* the packed copies */
    int M, N, K, Kp;
    float alpha, beta;
    float *C;
    int ldc;
};

static size_t up32(size_t x) { return (x + STEP - 1) / STEP * STEP; }

size_t cpu_gemm_bf16_amx_bytes(int M, int N, int K)
{
    size_t kp = up32((size_t)K);
    return (up32((size_t)M) + up32((size_t)N)) * kp * sizeof(uint16_t);
}

/* The first N values (0 to 16) of X (bf16, or float32 rounded to bf16 as f32_to_bf16 does) as 16
 * bf16, zeros after them. Reads nothing past them (nothing at all when N is 0). */
static inline __attribute__((always_inline)) ISA_AMX __m256i cvt16(const void *x, int bf16, int n)
{
    if (n <= 0)
        return _mm256_setzero_si256();
    __mmask16 m = (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1);
    if (bf16)
        return _mm256_maskz_loadu_epi16(m, x);
    __m512i u = _mm512_maskz_loadu_epi32(m, x), hi = _mm512_srli_epi32(u, 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1))));
    r = _mm512_mask_mov_epi32(_mm512_srli_epi32(r, 16), nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}

/* Address of element I of operand X (bf16 or float32). */
static const void *at(const void *x, int bf16, size_t i)
{
    return bf16 ? (const void *)((const uint16_t *)x + i) : (const void *)((const float *)x + i);
}

/* Row tiles [lo, hi) of the packed A (16 rows each) where op(A) = A: each tile's 16 rows read
 * along K. */
ISA_AMX static void pack_a_rows(void *arg, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const struct bfg *g = arg;
    size_t kp = (size_t)g->Kp;
    for (int64_t rt = lo; rt < hi; rt++) {
        int r0 = (int)rt * 16, rows = g->M - r0 < 16 ? g->M - r0 : 16;
        uint16_t *d = g->pa + (size_t)r0 * kp;
        for (size_t k0 = 0; k0 < kp; k0 += STEP) { /* one tile: 16 rows by 32 values */
            int kn = g->K - (int)k0 < STEP ? g->K - (int)k0 : STEP;
            for (int r = 0; r < 16; r++) {
                const void *x = at(g->A, g->a_bf16, (size_t)(r0 + r) * (size_t)g->lda + k0);
                int lo16 = r < rows ? (kn < 16 ? kn : 16) : 0, hi16 = r < rows && kn > 16 ? kn - 16 : 0;
                _mm256_storeu_si256((__m256i *)(d + k0 * 16 + (size_t)r * STEP), cvt16(x, g->a_bf16, lo16));
                _mm256_storeu_si256((__m256i *)(d + k0 * 16 + (size_t)r * STEP + 16),
                                    cvt16(at(x, g->a_bf16, 16), g->a_bf16, hi16));
            }
        }
    }
}

/* The 16 by 16 matrix of 32-bit values in R (R[i] its row i) transposed in place. */
static inline __attribute__((always_inline)) ISA_AMX void transpose16(__m512i r[16])
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
static inline __attribute__((always_inline)) ISA_AMX __m512i pairs16(__m256i e, __m256i o)
{
    return _mm512_or_si512(_mm512_cvtepu16_epi32(e), _mm512_slli_epi32(_mm512_cvtepu16_epi32(o), 16));
}

/* Steps of K [lo, hi) (32 values each) of the packed A where op(A) = A^T: row k of A holds column
 * k of op(A); for each row tile, 32 such rows of 16 values (read along A's rows) become 16 rows of
 * pairs, transposed into the tile's 16 rows. */
ISA_AMX static void pack_a_cols(void *arg, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const struct bfg *g = arg;
    size_t kp = (size_t)g->Kp, mp = up32((size_t)g->M), K = (size_t)g->K;
    for (int64_t ks = lo; ks < hi; ks++) {
        size_t k0 = (size_t)ks * STEP;
        for (size_t r0 = 0; r0 < mp; r0 += 16) {
            int n = (size_t)g->M > r0 ? ((size_t)g->M - r0 < 16 ? (int)((size_t)g->M - r0) : 16) : 0;
            __m512i v[16];
            for (size_t q = 0; q < 16; q++) {
                size_t k = k0 + 2 * q;
                const void *x = at(g->A, g->a_bf16, k * (size_t)g->lda + r0);
                v[q] = pairs16(cvt16(x, g->a_bf16, k < K ? n : 0),
                               cvt16(at(x, g->a_bf16, (size_t)g->lda), g->a_bf16, k + 1 < K ? n : 0));
            }
            transpose16(v);
            uint16_t *d = g->pa + r0 * kp + k0 * 16;
            for (int r = 0; r < 16; r++)
                _mm512_storeu_si512(d + (size_t)r * STEP, v[r]);
        }
    }
}

/* Panels [lo, hi) of the packed B (16 columns each) where op(B) = B^T: row n of B holds column n
 * of op(B); per step of K its 32 values are 16 pairs, and the panel's 16 columns of pairs are
 * transposed into the step's 16 rows of pairs. */
ISA_AMX static void pack_b_rows(void *arg, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const struct bfg *g = arg;
    size_t kp = (size_t)g->Kp;
    for (int64_t p = lo; p < hi; p++) {
        int c0 = (int)p * 16, cols = g->N - c0 < 16 ? g->N - c0 : 16;
        uint16_t *d = g->pb + (size_t)p * kp * 16;
        for (size_t k0 = 0; k0 < kp; k0 += STEP) {
            int kn = g->K - (int)k0 < STEP ? g->K - (int)k0 : STEP;
            __m512i v[16];
            for (int c = 0; c < 16; c++) {
                const void *x = at(g->B, g->b_bf16, (size_t)(c0 + c) * (size_t)g->ldb + k0);
                int n0 = c < cols ? (kn < 16 ? kn : 16) : 0, n1 = c < cols && kn > 16 ? kn - 16 : 0;
                v[c] = _mm512_inserti64x4(_mm512_castsi256_si512(cvt16(x, g->b_bf16, n0)),
                                          cvt16(at(x, g->b_bf16, 16), g->b_bf16, n1), 1);
            }
            transpose16(v);
            for (int q = 0; q < 16; q++)
                _mm512_storeu_si512(d + k0 * 16 + (size_t)q * 32, v[q]);
        }
    }
}

/* Steps of K [lo, hi) (32 values each) of the packed B where op(B) = B: rows k and k + 1 of B read
 * whole, interleaved into the pair rows of every panel. */
ISA_AMX static void pack_b_cols(void *arg, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const struct bfg *g = arg;
    size_t kp = (size_t)g->Kp, np = up32((size_t)g->N);
    for (int64_t ks = lo; ks < hi; ks++) {
        size_t k0 = (size_t)ks * STEP;
        for (size_t k = k0; k < k0 + STEP; k += 2)
            for (size_t c0 = 0; c0 < np; c0 += 16) {
                int n = (size_t)g->N > c0 ? ((size_t)g->N - c0 < 16 ? (int)((size_t)g->N - c0) : 16) : 0;
                __m256i e = cvt16(at(g->B, g->b_bf16, k * (size_t)g->ldb + c0), g->b_bf16, k < (size_t)g->K ? n : 0);
                __m256i o = cvt16(at(g->B, g->b_bf16, (k + 1) * (size_t)g->ldb + c0), g->b_bf16, k + 1 < (size_t)g->K ? n : 0);
                _mm512_storeu_si512(g->pb + (c0 / 16) * kp * 16 + (k / 2) * 32, pairs16(e, o));
            }
    }
}

static const struct amx_cfg bf_config = {
    .palette = 1,
    .colsb = { 64, 64, 64, 64, 64, 64, 64, 64 },
    .rows = { 16, 16, 16, 16, 16, 16, 16, 16 },
};

/* The 16 by 16 sums S of C's rows R0.. and columns C0.. into C, on the rows and columns that exist:
 * alpha * S, + beta * C where beta is not 0 (the same roundings as gemm.c's put). */
ISA_AMX static void epilogue(const struct bfg *g, const float *s, int r0, int c0)
{
    int rows = g->M - r0 < 16 ? g->M - r0 : 16, cols = g->N - c0 < 16 ? g->N - c0 : 16;
    __mmask16 m = (__mmask16)(cols >= 16 ? 0xFFFF : cols > 0 ? (1u << cols) - 1 : 0);
    __m512 alpha = _mm512_set1_ps(g->alpha), beta = _mm512_set1_ps(g->beta);
    for (int r = 0; r < rows; r++) {
        float *c = g->C + (size_t)(r0 + r) * (size_t)g->ldc + (size_t)c0;
        __m512 v = _mm512_mul_ps(alpha, _mm512_loadu_ps(s + 16 * r));
        if (g->beta != 0)
            v = _mm512_add_ps(v, _mm512_mul_ps(beta, _mm512_maskz_loadu_ps(m, c)));
        _mm512_mask_storeu_ps(c, m, v);
    }
}

/* Sum tile T (0..3) of the block at rows I, columns 32J into C: stored straight into C when it
 * is whole and C = 1 * sum, else through the epilogue. */
#define BLOCK_OUT(t)                                                                                        \
    do {                                                                                                    \
        int r0_ = i + 16 * ((t) >> 1), c0_ = 32 * j + 16 * ((t) & 1);                                      \
        if (direct && r0_ + 16 <= g->M && c0_ + 16 <= g->N) {                                               \
            AMX_STORE(t, g->C + (size_t)r0_ * (size_t)g->ldc + (size_t)c0_, (size_t)g->ldc * sizeof(float)); \
        } else if (r0_ < g->M && c0_ < g->N) {                                                              \
            AMX_STORE(t, s, 64);                                                                            \
            epilogue(g, s, r0_, c0_);                                                                       \
        }                                                                                                   \
    } while (0)

/* C's rows I..I+31 by columns 32J..32J+31 (panels 2J and 2J+1): the sums in tiles 0..3 (a tile
 * wholly past M or N stays 0 and is not stored). */
ISA_AMX static void block(const struct bfg *g, int i, int j)
{
    const uint16_t *a0 = g->pa + (size_t)i * (size_t)g->Kp, *a1 = a0 + (size_t)g->Kp * 16;
    const uint16_t *b0 = g->pb + (size_t)(2 * j) * (size_t)g->Kp * 16, *b1 = b0 + (size_t)g->Kp * 16;
    int whole = i + 16 < g->M && 32 * j + 16 < g->N; /* the second row tile and column tile exist */
    AMX_ZERO(0);
    AMX_ZERO(1);
    AMX_ZERO(2);
    AMX_ZERO(3);
    if (whole)
        for (size_t k = 0; k < (size_t)g->Kp; k += STEP) {
            AMX_LOAD(4, a0 + k * 16, 64);
            AMX_LOAD(6, b0 + k * 16, 64);
            AMX_LOAD(5, a1 + k * 16, 64);
            AMX_LOAD(7, b1 + k * 16, 64);
            AMX_DPBF16PS(0, 4, 6);
            AMX_DPBF16PS(1, 4, 7);
            AMX_DPBF16PS(2, 5, 6);
            AMX_DPBF16PS(3, 5, 7);
        }
    else /* the edge: only the tiles with rows below M and columns below N */
        for (size_t k = 0; k < (size_t)g->Kp; k += STEP) {
            AMX_LOAD(4, a0 + k * 16, 64);
            AMX_LOAD(6, b0 + k * 16, 64);
            AMX_DPBF16PS(0, 4, 6);
            if (32 * j + 16 < g->N) {
                AMX_LOAD(7, b1 + k * 16, 64);
                AMX_DPBF16PS(1, 4, 7);
            }
            if (i + 16 < g->M) {
                AMX_LOAD(5, a1 + k * 16, 64);
                AMX_DPBF16PS(2, 5, 6);
            }
        }
    int direct = g->alpha == 1 && g->beta == 0;
    float s[16 * 16];
    BLOCK_OUT(0);
    BLOCK_OUT(1);
    BLOCK_OUT(2);
    BLOCK_OUT(3);
}

/* Column blocks [lo, hi) of C (32 columns each): groups of blocks whose packed B fits B_SWEPT,
 * each group swept by every row block. */
ISA_AMX static void compute_body(void *arg, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const struct bfg *g = arg;
    int64_t per = (int64_t)(B_SWEPT / ((size_t)g->Kp * 64));
    per = per < 1 ? 1 : per;
    AMX_LOADCONFIG(&bf_config);
    for (int64_t jc = lo; jc < hi; jc += per) {
        int64_t je = hi - jc < per ? hi : jc + per;
        for (int i = 0; i < g->M; i += STEP)
            for (int64_t j = jc; j < je; j++)
                block(g, i, (int)j);
    }
    AMX_RELEASE();
}

int cpu_gemm_bf16_amx(nmt_bctx *ctx, void *work, int transA, int transB, int M, int N, int K, float alpha,
                      const void *A, int a_bf16, int lda, const void *B, int b_bf16, int ldb, float beta, float *C,
                      int ldc)
{
    size_t kp = up32((size_t)K), mp = up32((size_t)M), np = up32((size_t)N);
    struct bfg g = { A, B, a_bf16, b_bf16, transA, transB, lda, ldb, work, (uint16_t *)work + mp * kp,
                     M, N, K, (int)kp, alpha, beta, C, ldc };
    if (transA)
        pool_for(ctx->pool, (int64_t)(kp / STEP), PACK_GRAIN, pack_a_cols, &g);
    else
        pool_for(ctx->pool, (int64_t)(mp / 16), PACK_GRAIN, pack_a_rows, &g);
    if (transB)
        pool_for(ctx->pool, (int64_t)(np / 16), PACK_GRAIN, pack_b_rows, &g);
    else
        pool_for(ctx->pool, (int64_t)(kp / STEP), PACK_GRAIN, pack_b_cols, &g);
    int64_t per = (int64_t)mp * (int64_t)kp * STEP;
    pool_for(ctx->pool, (int64_t)(np / STEP), (WORK_GRAIN + per - 1) / per, compute_body, &g);
    return 0;
}
