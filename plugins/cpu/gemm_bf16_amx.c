/* gemm_bf16_amx.c: the bf16 products of gemm_bf16.h on the AMX tiles (AMX-TILE and AMX-BF16:
 * Sapphire Rapids and later), where cpu_isa() is CPU_ISA_AMX.
 *
 * Tiles, all 16 rows by 64 bytes: 0..3 the sums of a block of 32 rows by 32 columns of C, 4 and 5
 * its rows of the packed A, 6 and 7 its columns of the packed B. Each tdpbf16ps adds to an
 * element's sum the 32 products of one step of K (amx.h states the order). */
#include <immintrin.h>
#include <string.h>

#include "amx.h"
#include "cpu.h"
#include "gemm_bf16.h"

#define B_SWEPT ((size_t)1 << 20) /* bytes of packed B swept by every row block in turn: half the L2 */

static const struct amx_cfg bf_config = {
    .palette = 1,
    .colsb = { 64, 64, 64, 64, 64, 64, 64, 64 },
    .rows = { 16, 16, 16, 16, 16, 16, 16, 16 },
};

/* The 16 by 16 sums S of C's rows R0.. and columns C0.. into C, on the rows and columns that exist:
 * alpha * S, + beta * C where beta is not 0 (the same roundings as gemm.c's put). */
ISA_AMX static void epilogue(const struct bf16_gemm *g, const float *s, int r0, int c0)
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
ISA_AMX static void block(const struct bf16_gemm *g, int i, int j)
{
    const uint16_t *a0 = g->pa + (size_t)i * (size_t)g->Kp, *a1 = a0 + (size_t)g->Kp * 16;
    const uint16_t *b0 = g->pb + (size_t)(2 * j) * (size_t)g->Kp * 16, *b1 = b0 + (size_t)g->Kp * 16;
    int whole = i + 16 < g->M && 32 * j + 16 < g->N; /* the second row tile and column tile exist */
    AMX_ZERO(0);
    AMX_ZERO(1);
    AMX_ZERO(2);
    AMX_ZERO(3);
    if (whole)
        for (size_t k = 0; k < (size_t)g->Kp; k += BF16_STEP) {
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
        for (size_t k = 0; k < (size_t)g->Kp; k += BF16_STEP) {
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

/* Groups of column blocks whose packed B fits B_SWEPT, each swept by every row block. */
ISA_AMX void cpu_gemm_bf16_amx_body(void *arg, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const struct bf16_gemm *g = arg;
    int64_t per = (int64_t)(B_SWEPT / ((size_t)g->Kp * 64));
    per = per < 1 ? 1 : per;
    AMX_LOADCONFIG(&bf_config);
    for (int64_t jc = lo; jc < hi; jc += per) {
        int64_t je = hi - jc < per ? hi : jc + per;
        for (int i = 0; i < g->M; i += BF16_STEP)
            for (int64_t j = jc; j < je; j++)
                block(g, i, (int)j);
    }
    AMX_RELEASE();
}
