/* linear_bf16.c: the cpu backend's bf16 linear layer for inference (linear_pack_q with
 * NMT_DTYPE_BF16, then linear_rowinv; see plugins/backend.h), on CPUs with AVX512-BF16 only.
 *
 * The weight is rounded to bf16 when packed, each row of A when the layer runs (vcvtneps2bf16:
 * round to nearest even, NaN stays NaN). vdpbf16ps then adds, per output element, the products of
 * pairs of bf16 values to a float32 accumulator, the pairs k = 0-1, 2-3, ... in increasing order,
 * starting from 0; then + bias[j] and max(., 0) if asked. Every element is that one chain, whatever
 * the tile shape, M or the thread count, so a row's bits depend only on that row.
 *
 * Packed layout after the header (struct lin_hdr), Kh = K rounded up to 2, halved: panel p (output
 * columns 16p..16p+15) as Kh groups of 64 bytes; group g holds, for c = 0..15, the two bf16
 * values W[16p+c][2g], W[16p+c][2g+1] (zeros past N and K): the dword vdpbf16ps multiplies by a
 * broadcast pair of A. Tiles of up to 6 rows by 4 panels. */
#include <immintrin.h>
#include <stdlib.h>

#include "cpu.h"

#define PW 16             /* columns per panel */
#define GROUP 4           /* panels per column group of the thread split */
#define WORK_GRAIN 262144 /* multiply-adds per thread chunk, at least */
#define CGRAIN 16384      /* values converted per thread chunk, at least */
#define MRB 6


int cpu_bf16(void)
{
    static int has = -1;
    if (has < 0) {
        __builtin_cpu_init();
        has = __builtin_cpu_supports("avx512bf16") != 0;
    }
    return has && cpu_isa() >= CPU_ISA_AVX512;
}

static int halves(int K) { return (K + 1) / 2; }

size_t cpu_linear_bf16_bytes(int N, int K)
{
    return (size_t)((N + PW - 1) / PW) * PW * (size_t)halves(K) * 4;
}

/* X (K floats) as bf16 into Q (2 * Kh values, zeros past K). */
ISA_AVX512_BF16 static void to_bf16(uint16_t *q, const float *x, int K)
{
    int kp = 2 * halves(K);
    for (int k = 0; k < kp; k += 16) {
        __mmask16 m = K - k >= 16 ? (__mmask16)0xFFFF : K > k ? (__mmask16)((1u << (K - k)) - 1) : 0;
        __mmask16 st = kp - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (kp - k)) - 1);
        __m256bh b = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + k));
        _mm256_mask_storeu_epi16(q + k, st, (__m256i)b);
    }
}

ISA_AVX512_BF16 int cpu_linear_bf16_pack(nmt_bctx *ctx, void *data, const float *W, int N, int K, int ldw)
{
    int kh = halves(K), np = (N + PW - 1) / PW * PW;
    uint16_t *row = malloc((size_t)kh * 2 * sizeof *row);
    if (!row)
        return cpu_err(ctx, "out of memory");
    uint32_t *o = data;
    memset(o, 0, (size_t)np * (size_t)kh * 4);
    for (int j = 0; j < N; j++) {
        const float *wj = W + (size_t)j * (size_t)ldw;
        for (int k = 0; k < K; k++)
            if (!(wj[k] - wj[k] == 0)) { /* NaN or an infinity */
                free(row);
                return cpu_err(ctx, "linear_pack_q: row %d of the weight has a non-finite value", j);
            }
        to_bf16(row, wj, K);
        uint32_t *pj = o + (size_t)(j / PW) * (size_t)kh * PW + (size_t)(j % PW);
        for (int g = 0; g < kh; g++)
            pj[(size_t)g * PW] = (uint32_t)row[2 * g] | (uint32_t)row[2 * g + 1] << 16;
    }
    free(row);
    return 0;
}

struct blin {
    const uint32_t *A;  /* (M, lda2) rows as bf16 pairs */
    const uint32_t *Wp; /* the panels */
    const float *bias;
    float *C;
    int M, N, Kh, lda2, ldc, relu;
};

/* One accumulator per (row, panel) as a named variable, as in linear_q.c (GCC 12 would keep an
 * array of them in memory); rows and panels past MR and NV are dropped after inlining. */
#define BSTEP(r)                                                                                                       \
    if (mr > r) {                                                                                                      \
        __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[(size_t)(r) * lda2 + (size_t)k]);                            \
        a##r##0 = _mm512_dpbf16_ps(a##r##0, av, w0);                                                                   \
        if (nv > 1)                                                                                                    \
            a##r##1 = _mm512_dpbf16_ps(a##r##1, av, w1);                                                               \
        if (nv > 2)                                                                                                    \
            a##r##2 = _mm512_dpbf16_ps(a##r##2, av, w2);                                                               \
        if (nv > 3)                                                                                                    \
            a##r##3 = _mm512_dpbf16_ps(a##r##3, av, w3);                                                               \
    }

static inline __attribute__((always_inline)) ISA_AVX512_BF16 void btile(const struct blin *g, int i, int p, int mr, int nv,
                                                              __mmask16 last)
{
    size_t lda2 = (size_t)g->lda2, pstride = (size_t)g->Kh * PW;
    const uint32_t *a = g->A + (size_t)i * lda2, *w = g->Wp + (size_t)p * pstride;
    const __m512 z = _mm512_setzero_ps();
    const __m512bh zb = (__m512bh)_mm512_setzero_si512();
    __m512 a00 = z, a01 = z, a02 = z, a03 = z, a10 = z, a11 = z, a12 = z, a13 = z, a20 = z, a21 = z, a22 = z, a23 = z;
    __m512 a30 = z, a31 = z, a32 = z, a33 = z, a40 = z, a41 = z, a42 = z, a43 = z, a50 = z, a51 = z, a52 = z, a53 = z;
    for (int k = 0; k < g->Kh; k++, w += PW) {
        __m512bh w0 = (__m512bh)_mm512_loadu_si512((const void *)w);
        __m512bh w1 = nv > 1 ? (__m512bh)_mm512_loadu_si512((const void *)(w + pstride)) : zb;
        __m512bh w2 = nv > 2 ? (__m512bh)_mm512_loadu_si512((const void *)(w + 2 * pstride)) : zb;
        __m512bh w3 = nv > 3 ? (__m512bh)_mm512_loadu_si512((const void *)(w + 3 * pstride)) : zb;
        BSTEP(0) BSTEP(1) BSTEP(2) BSTEP(3) BSTEP(4) BSTEP(5)
    }
    const __m512 acc[MRB][GROUP] = { { a00, a01, a02, a03 }, { a10, a11, a12, a13 }, { a20, a21, a22, a23 },
                                     { a30, a31, a32, a33 }, { a40, a41, a42, a43 }, { a50, a51, a52, a53 } };
    for (int c = 0; c < nv; c++) {
        int j = (p + c) * PW;
        __mmask16 m = c == nv - 1 ? last : (__mmask16)0xFFFF;
        __m512 b = g->bias ? _mm512_maskz_loadu_ps(m, g->bias + j) : z;
        for (int r = 0; r < mr; r++) {
            __m512 v = g->bias ? _mm512_add_ps(acc[r][c], b) : acc[r][c];
            if (g->relu)
                v = _mm512_max_ps(v, z);
            _mm512_mask_storeu_ps(g->C + (size_t)(i + r) * (size_t)g->ldc + (size_t)j, m, v);
        }
    }
}
#undef BSTEP

/* mr <= 6 rows by nv <= 4 panels, through a btile inlined with constant sizes */
ISA_AVX512_BF16 static void btile_any(const struct blin *g, int i, int p, int mr, int nv, __mmask16 last)
{
#define BT(R)                                                                                                          \
    case R * 8 + 4: btile(g, i, p, R, 4, last); break;                                                                 \
    case R * 8 + 3: btile(g, i, p, R, 3, last); break;                                                                 \
    case R * 8 + 2: btile(g, i, p, R, 2, last); break;                                                                 \
    case R * 8 + 1: btile(g, i, p, R, 1, last); break;
    switch (mr * 8 + nv) {
        BT(6)
        BT(5)
        BT(4)
        BT(3)
        BT(2)
        BT(1)
    }
#undef BT
}

struct blin_job {
    struct blin g;
    const float *Af; /* (M, lda) the float rows, converted into qa (= g.A) */
    uint32_t *qa;
    int lda, K;
};

/* Converts rows [lo, hi) of A. */
static void conv_body(void *arg, int64_t lo, int64_t hi, int tid)
{
    struct blin_job *job = arg;
    for (int64_t i = lo; i < hi; i++)
        to_bf16((uint16_t *)(job->qa + i * job->g.lda2), job->Af + i * job->lda, job->K);
}

/* Column groups [lo, hi) of GROUP panels, each swept by every row tile of A. */
static void blinear_body(void *arg, int64_t lo, int64_t hi, int tid)
{
    const struct blin *g = &((const struct blin_job *)arg)->g;
    int panels = (g->N + PW - 1) / PW;
    for (int64_t q = lo; q < hi; q++) {
        int p0 = (int)q * GROUP, np = panels - p0 < GROUP ? panels - p0 : GROUP;
        int n = g->N - p0 * PW < GROUP * PW ? g->N - p0 * PW : GROUP * PW, rem = n - PW * (np - 1);
        for (int i = 0; i < g->M; i += MRB)
            btile_any(g, i, p0, g->M - i < MRB ? g->M - i : MRB, np, (__mmask16)((1u << rem) - 1));
    }
}

int cpu_linear_bf16_run(nmt_bctx *ctx, int M, int N, int K, const float *A, int lda, const void *data,
                        const float *bias, int relu, float *C, int ldc)
{
    if (!cpu_bf16())
        return cpu_err(ctx, "linear_rowinv: a bf16 weight needs AVX512-BF16, which this CPU lacks or NMT_CPU_ISA "
                            "turns off");
    int kh = halves(K), lda2 = (kh + 15) & ~15;
    if (cpu_qbuf_reserve(ctx, (size_t)M * (size_t)lda2 * 4) < 0)
        return -1;
    struct blin_job job = { { ctx->qbuf, data, bias, C, M, N, kh, lda2, ldc, relu != 0 }, A, ctx->qbuf, lda, K };
    pool_for(ctx->pool, M, (CGRAIN + K - 1) / K, conv_body, &job);
    int64_t groups = (N + GROUP * PW - 1) / (GROUP * PW), per = (int64_t)M * K * GROUP * PW;
    pool_for(ctx->pool, groups, (WORK_GRAIN + per - 1) / per, blinear_body, &job);
    return 0;
}
