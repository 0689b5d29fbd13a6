/* gemm_bf16_dp.c: the bf16 products of gemm_bf16.h with AVX512-BF16's vdpbf16ps (Zen 4, Cooper
 * Lake; mixed.c's path where cpu_bf16() holds and there are no tiles).
 *
 * Each element of C has one float32 sum, from 0. For each pair of K, 2g and 2g + 1 (zeros past K,
 * up to the packed Kp), in increasing g, vdpbf16ps adds the odd product, then the even one, each
 * a fused multiply-add (exact product, one rounding to nearest even); inputs and results below
 * float32's normal range are 0 (DAZ, FTZ). tests/unit/bf16_spec.h restates it; test_gemm_bf16
 * checks it bit for bit.
 *
 * A block of 8 rows of C by 32 columns (two panels of the packed B) holds its 16 sums in
 * registers: per pair of K, two rows of the packed B and eight broadcast pairs of A. */
#include <immintrin.h>
#include <string.h>

#include "cpu.h"
#include "gemm_bf16.h"

#define ROWS 8                       /* rows of C a block sums at once */
#define DP_B_SWEPT ((size_t)1 << 22) /* bytes of packed B swept by every row strip in turn (from the L3) */

/* The pair of packed A at P (two bf16) in every 32-bit lane. */
static inline __attribute__((always_inline)) ISA_AVX512_BF16 __m512bh pair_of(const uint16_t *p)
{
    uint32_t u;
    memcpy(&u, p, sizeof u);
    return (__m512bh)_mm512_set1_epi32((int)u);
}

/* SUM (16 columns from C0, row R) into C: alpha * sum, + beta * C where beta is not 0, on the
 * columns below N (the same roundings as gemm.c's put). */
static inline __attribute__((always_inline)) ISA_AVX512_BF16 void put16(const struct bf16_gemm *g, __m512 sum, int r,
                                                                        int c0)
{
    int cols = g->N - c0;
    if (cols <= 0)
        return;
    __mmask16 m = (__mmask16)(cols >= 16 ? 0xFFFF : (1u << cols) - 1);
    float *c = g->C + (size_t)r * (size_t)g->ldc + (size_t)c0;
    __m512 v = _mm512_mul_ps(_mm512_set1_ps(g->alpha), sum);
    if (g->beta != 0)
        v = _mm512_add_ps(v, _mm512_mul_ps(_mm512_set1_ps(g->beta), _mm512_maskz_loadu_ps(m, c)));
    _mm512_mask_storeu_ps(c, m, v);
}

/* C's rows R0..R0+7 (R0 a multiple of 8, below M) by columns 32J..32J+31. */
ISA_AVX512_BF16 static void dp_block(const struct bf16_gemm *g, int r0, int j)
{
    size_t kp = (size_t)g->Kp;
    const uint16_t *a = g->pa + (size_t)(r0 / 16) * 16 * kp + (size_t)(r0 % 16) * BF16_STEP;
    const uint16_t *b0 = g->pb + (size_t)(2 * j) * kp * 16, *b1 = b0 + kp * 16;
    __m512 s[ROWS][2];
#pragma GCC unroll 8
    for (int r = 0; r < ROWS; r++)
        s[r][0] = s[r][1] = _mm512_setzero_ps();
    for (size_t k0 = 0; k0 < kp; k0 += BF16_STEP) { /* one A tile: 16 pairs of each row */
        const uint16_t *at = a + k0 * 16, *p0 = b0 + k0 * 16, *p1 = b1 + k0 * 16;
        for (int q = 0; q < BF16_STEP / 2; q++) {
            __m512bh x0 = (__m512bh)_mm512_loadu_si512(p0 + 32 * q), x1 = (__m512bh)_mm512_loadu_si512(p1 + 32 * q);
#pragma GCC unroll 8
            for (int r = 0; r < ROWS; r++) {
                __m512bh y = pair_of(at + r * BF16_STEP + 2 * q);
                s[r][0] = _mm512_dpbf16_ps(s[r][0], y, x0);
                s[r][1] = _mm512_dpbf16_ps(s[r][1], y, x1);
            }
        }
    }
    int rows = g->M - r0 < ROWS ? g->M - r0 : ROWS;
#pragma GCC unroll 8
    for (int r = 0; r < ROWS; r++)
        if (r < rows) {
            put16(g, s[r][0], r0 + r, 32 * j);
            put16(g, s[r][1], r0 + r, 32 * j + 16);
        }
}

/* Groups of column blocks whose packed B fits DP_B_SWEPT, each swept by every strip of 8 rows. */
ISA_AVX512_BF16 void cpu_gemm_bf16_dp_body(void *arg, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const struct bf16_gemm *g = arg;
    int64_t per = (int64_t)(DP_B_SWEPT / ((size_t)g->Kp * 64));
    per = per < 1 ? 1 : per;
    for (int64_t jc = lo; jc < hi; jc += per) {
        int64_t je = hi - jc < per ? hi : jc + per;
        for (int i = 0; i < g->M; i += ROWS)
            for (int64_t j = jc; j < je; j++)
                dp_block(g, i, (int)j);
    }
}
