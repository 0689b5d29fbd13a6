/* gemm.c: the cpu backend's row-invariant product gemm_rowinv (see plugins/backend.h):
 * C (M,N) = alpha * A (M,K) @ B^T + beta * C with B stored (N,K).
 *
 * Every output element is one dot product of a row of A and a row of B computed the same way
 * wherever it sits: W lanes (8, or 16 on the AVX-512 path) accumulate A[k]*B[k] for k = lane,
 * lane+W, ... in increasing k (the last partial group through a mask), then the lanes are summed in
 * a fixed order (16 lanes: l+l8 first, then as 8: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))), then
 * alpha (and beta * C) applied. Register blocking
 * (4 rows of A by 6 rows of B, 24 accumulators, on AVX-512; 4 by 3, 12 accumulators, on AVX2), cache panels and the thread split change which
 * elements are computed together, never how one is computed: a row's bits do not depend on M, on
 * the other rows or on the thread count. Threads split the N columns (never K).
 *
 * Three code paths, picked at run time by what the CPU supports: AVX-512 (16 lanes, fused
 * multiply-add), AVX2+FMA (8 lanes, fused) and a portable one (8 lanes, separate multiply and add).
 * They may differ in the last bits from each other (and from the OpenBLAS gemm); each is
 * row-invariant. No packing: both operands are read along K, which is contiguous for A (M,K) and
 * for the weight B (N,K). */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "kernels.h"
#include "linear_q.h"

#define MR 4              /* rows of A per register tile */
#define NR 6              /* output columns per step of the driver: one AVX-512 tile, two AVX2 tiles */
#define NR_AVX2 3         /* output columns per AVX2 register tile (12 accumulators of 16 registers) */
#define PANEL_FLOATS 32768 /* B rows of one cache panel: about 128 KB (L2) */
#define WORK_GRAIN 131072  /* multiply-adds per thread chunk, at least */

struct ri {
    const float *A, *B;
    float *C;
    int M, N, K, lda, ldb, ldc;
    float alpha, beta;
    int isa; /* CPU_ISA_PORTABLE, CPU_ISA_AVX2, or CPU_ISA_AVX512 and above */
};

/* Stores one finished element: the same expression for every element of every path. */
static inline __attribute__((always_inline)) void put(const struct ri *g, int i, int j, float s)
{
    float *c = g->C + (size_t)i * (size_t)g->ldc + (size_t)j;
    float v = g->alpha * s;
    if (g->beta != 0)
        v = v + g->beta * *c;
    *c = v;
}

/* ---------------- AVX2 + FMA ---------------- */


static const int32_t tail_tab[16] = { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0 };

static inline __attribute__((always_inline)) ISA_AVX2 float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); /* l0+l4 .. l3+l7 */
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));                                      /* (0+4)+(2+6), (1+5)+(3+7) */
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The MRxNR_AVX2 tile (mr <= MR rows from row i, nr <= NR_AVX2 columns from column j); inlined with
 * constant mr, nr so the accumulators live in registers. */
static inline __attribute__((always_inline)) ISA_AVX2 void tile_avx2(const struct ri *g, int i, int j, int mr, int nr)
{
    const float *a = g->A + (size_t)i * (size_t)g->lda, *b = g->B + (size_t)j * (size_t)g->ldb;
    size_t lda = (size_t)g->lda, ldb = (size_t)g->ldb;
    int K = g->K, k = 0;
    __m256 acc[MR][NR_AVX2];
    for (int r = 0; r < mr; r++)
        for (int c = 0; c < nr; c++)
            acc[r][c] = _mm256_setzero_ps();
    for (; k + 8 <= K; k += 8) {
        __m256 bv[NR_AVX2];
        for (int c = 0; c < nr; c++)
            bv[c] = _mm256_loadu_ps(b + c * ldb + k);
        for (int r = 0; r < mr; r++) {
            __m256 av = _mm256_loadu_ps(a + r * lda + k);
            for (int c = 0; c < nr; c++)
                acc[r][c] = _mm256_fmadd_ps(av, bv[c], acc[r][c]);
        }
    }
    if (k < K) {
        __m256i m = _mm256_loadu_si256((const __m256i *)(tail_tab + 8 - (K - k)));
        __m256 bv[NR_AVX2];
        for (int c = 0; c < nr; c++)
            bv[c] = _mm256_maskload_ps(b + c * ldb + k, m);
        for (int r = 0; r < mr; r++) {
            __m256 av = _mm256_maskload_ps(a + r * lda + k, m);
            for (int c = 0; c < nr; c++)
                acc[r][c] = _mm256_fmadd_ps(av, bv[c], acc[r][c]);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int c = 0; c < nr; c++)
            put(g, i + r, j + c, hsum8(acc[r][c]));
}

ISA_AVX2 static void tile_avx2_3(const struct ri *g, int i, int j, int mr, int nr)
{
    switch (mr * 4 + nr) {
    case 4 * 4 + 3: tile_avx2(g, i, j, 4, 3); break;
    case 4 * 4 + 2: tile_avx2(g, i, j, 4, 2); break;
    case 4 * 4 + 1: tile_avx2(g, i, j, 4, 1); break;
    case 3 * 4 + 3: tile_avx2(g, i, j, 3, 3); break;
    case 3 * 4 + 2: tile_avx2(g, i, j, 3, 2); break;
    case 3 * 4 + 1: tile_avx2(g, i, j, 3, 1); break;
    case 2 * 4 + 3: tile_avx2(g, i, j, 2, 3); break;
    case 2 * 4 + 2: tile_avx2(g, i, j, 2, 2); break;
    case 2 * 4 + 1: tile_avx2(g, i, j, 2, 1); break;
    case 1 * 4 + 3: tile_avx2(g, i, j, 1, 3); break;
    case 1 * 4 + 2: tile_avx2(g, i, j, 1, 2); break;
    default: tile_avx2(g, i, j, 1, 1); break;
    }
}

/* mr <= MR rows by nr <= NR columns, as tiles of up to NR_AVX2 columns */
ISA_AVX2 static void tile_avx2_any(const struct ri *g, int i, int j, int mr, int nr)
{
    for (int c = 0; c < nr; c += NR_AVX2)
        tile_avx2_3(g, i, j + c, mr, nr - c < NR_AVX2 ? nr - c : NR_AVX2);
}

/* ---------------- AVX-512 ---------------- */


static inline __attribute__((always_inline)) ISA_AVX512 float hsum16(__m512 v)
{
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); /* l0+l8 .. l7+l15 */
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __attribute__((always_inline)) ISA_AVX512 void tile_avx512(const struct ri *g, int i, int j, int mr, int nr)
{
    const float *a = g->A + (size_t)i * (size_t)g->lda, *b = g->B + (size_t)j * (size_t)g->ldb;
    size_t lda = (size_t)g->lda, ldb = (size_t)g->ldb;
    int K = g->K, k = 0;
    __m512 acc[MR][NR];
    for (int r = 0; r < mr; r++)
        for (int c = 0; c < nr; c++)
            acc[r][c] = _mm512_setzero_ps();
    for (; k + 16 <= K; k += 16) {
        __m512 bv[NR];
        for (int c = 0; c < nr; c++)
            bv[c] = _mm512_loadu_ps(b + c * ldb + k);
        for (int r = 0; r < mr; r++) {
            __m512 av = _mm512_loadu_ps(a + r * lda + k);
            for (int c = 0; c < nr; c++)
                acc[r][c] = _mm512_fmadd_ps(av, bv[c], acc[r][c]);
        }
    }
    if (k < K) {
        __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
        __m512 bv[NR];
        for (int c = 0; c < nr; c++)
            bv[c] = _mm512_maskz_loadu_ps(m, b + c * ldb + k);
        for (int r = 0; r < mr; r++) {
            __m512 av = _mm512_maskz_loadu_ps(m, a + r * lda + k);
            for (int c = 0; c < nr; c++)
                acc[r][c] = _mm512_fmadd_ps(av, bv[c], acc[r][c]);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int c = 0; c < nr; c++)
            put(g, i + r, j + c, hsum16(acc[r][c]));
}

/* mr <= MR rows by nr <= NR columns: full-width tiles, or single columns at the right edge */
ISA_AVX512 static void tile_avx512_any(const struct ri *g, int i, int j, int mr, int nr)
{
    if (nr == NR) {
        switch (mr) {
        case 4: tile_avx512(g, i, j, 4, NR); break;
        case 3: tile_avx512(g, i, j, 3, NR); break;
        case 2: tile_avx512(g, i, j, 2, NR); break;
        default: tile_avx512(g, i, j, 1, NR); break;
        }
        return;
    }
    for (int c = 0; c < nr; c++)
        switch (mr) {
        case 4: tile_avx512(g, i, j + c, 4, 1); break;
        case 3: tile_avx512(g, i, j + c, 3, 1); break;
        case 2: tile_avx512(g, i, j + c, 2, 1); break;
        default: tile_avx512(g, i, j + c, 1, 1); break;
        }
}

/* ---------------- portable ---------------- */

static void tile_plain(const struct ri *g, int i, int j, int mr, int nr)
{
    for (int r = 0; r < mr; r++)
        for (int c = 0; c < nr; c++) {
            const float *a = g->A + (size_t)(i + r) * (size_t)g->lda, *b = g->B + (size_t)(j + c) * (size_t)g->ldb;
            float l[8] = { 0 };
            int k = 0;
            for (; k + 8 <= g->K; k += 8)
                for (int q = 0; q < 8; q++)
                    l[q] = l[q] + a[k + q] * b[k + q];
            for (int q = 0; k + q < g->K; q++)
                l[q] = l[q] + a[k + q] * b[k + q];
            put(g, i + r, j + c, ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])));
        }
}

/* ---------------- driver ---------------- */

/* Columns [lo*NR, hi*NR) of C: B panels of `nc` rows, each swept by all row tiles of A. */
static void rowinv_body(void *arg, int64_t lo, int64_t hi, int tid)
{
    const struct ri *g = arg;
    int j0 = (int)(lo * NR), j1 = (int)(hi * NR) < g->N ? (int)(hi * NR) : g->N;
    int nc = PANEL_FLOATS / (g->K > 0 ? g->K : 1);
    nc = nc < NR ? NR : nc - nc % NR;
    for (int jc = j0; jc < j1; jc += nc) {
        int je = j1 - jc < nc ? j1 : jc + nc;
        for (int i = 0; i < g->M; i += MR) {
            int mr = g->M - i < MR ? g->M - i : MR;
            for (int j = jc; j < je; j += NR) {
                int nr = je - j < NR ? je - j : NR;
                if (g->isa >= CPU_ISA_AVX512)
                    tile_avx512_any(g, i, j, mr, nr);
                else if (g->isa == CPU_ISA_AVX2)
                    tile_avx2_any(g, i, j, mr, nr);
                else
                    tile_plain(g, i, j, mr, nr);
            }
        }
    }
}

int cpu_gemm_rowinv(nmt_bctx *ctx, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc)
{
    if (M < 0 || N < 0 || K < 0)
        return cpu_err(ctx, "gemm_rowinv: negative size M=%d N=%d K=%d", M, N, K);
    if (lda < (K > 1 ? K : 1) || ldb < (K > 1 ? K : 1) || ldc < (N > 1 ? N : 1))
        return cpu_err(ctx, "gemm_rowinv: leading dimension too small (lda=%d ldb=%d ldc=%d for M=%d N=%d K=%d)",
                       lda, ldb, ldc, M, N, K);
    if (M == 0 || N == 0)
        return 0;
    if (K == 0 || alpha == 0) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float *c = C + (size_t)i * (size_t)ldc + (size_t)j;
                *c = beta == 0 ? 0 : beta * *c;
            }
        return 0;
    }
    struct ri g = { A, B, C, M, N, K, lda, ldb, ldc, alpha, beta, cpu_isa() };
    int64_t groups = (N + NR - 1) / NR, per = (int64_t)M * K * NR;
    pool_for(ctx->pool, groups, (WORK_GRAIN + per - 1) / per, rowinv_body, &g);
    return 0;
}
