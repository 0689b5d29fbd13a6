/* linear.c: the cpu backend's row-invariant linear layer for inference (see plugins/backend.h):
 * linear_pack copies a weight W (N,K) once into panels, and linear_rowinv computes
 * C (M,N) = A (M,K) @ W^T + bias, then ReLU if asked. linear_pack_q packs in int8 and bf16 too
 * (linear_q.c and linear_bf16.c compute with them); the header of a packed weight (struct lin_hdr)
 * says which.
 *
 * Packed float32 layout, after the header: panel p holds output columns 16p..16p+15 as K rows of 16 floats (row k: W[16p+c][k]
 * for c = 0..15, zeros past N); panels follow each other. So one step k of a register tile reads
 * 64 contiguous bytes per panel, and every code path reads the same layout.
 *
 * Outer-product form: a register tile of rows of A by vectors of columns of C is swept over
 * k = 0, 1, ..., K-1, each step adding A[i,k] * W[j,k] to every element with one fused multiply-add.
 * So every output element is the same chain of K fused multiply-adds in increasing k, starting from
 * 0, then + bias[j], then max(., 0): the tile shape, the vector width and the thread split change
 * which elements are computed together, never how one is. A row's bits do not depend on M, on the
 * other rows or on the thread count, and the AVX-512 and AVX2 paths give identical bits (the
 * portable path, with a separate multiply and add, may differ from them in the last bits). No
 * horizontal sums. Threads split the columns (never K). */
#include <immintrin.h>
#include <stdlib.h>

#include "cpu.h"
#include "prefetch.h"

#define PW 16             /* columns per panel */
#define GROUP 4           /* panels per column group of the thread split */
#define WORK_GRAIN 131072 /* multiply-adds per thread chunk, at least */

struct lin {
    const float *A, *Wp, *bias;
    float *C;
    int M, N, K, lda, ldc, relu;
    int pf_shift; /* the spacing of the requests for the next group's lines (cpu_pf_shift) */
};

/* The first float of panel P's row K. */
static inline __attribute__((always_inline)) const float *panel_row(const struct lin *g, int p, int k)
{
    return g->Wp + ((size_t)p * (size_t)g->K + (size_t)k) * PW;
}

size_t cpu_linear_packed_bytes(nmt_bctx *ctx, int N, int K)
{
    if (N <= 0 || K <= 0)
        return 0;
    return LIN_HDR + (size_t)((N + PW - 1) / PW) * PW * (size_t)K * sizeof(float);
}

/* The bits of the activations' grid of the int8 dtype DT (12, 8 or 7); 0 for any other dtype. */
static int q_abits(uint32_t dt)
{
    return dt == NMT_DTYPE_INT8 ? 12 : dt == NMT_DTYPE_INT8A8 ? 8 : dt == NMT_DTYPE_INT8A7 ? 7 : 0;
}

size_t cpu_linear_packed_bytes_q(nmt_bctx *ctx, int N, int K, uint32_t dtype)
{
    if (dtype == NMT_DTYPE_F32)
        return cpu_linear_packed_bytes(ctx, N, K);
    if (dtype == NMT_DTYPE_BF16 && !cpu_bf16())
        return cpu_err(ctx, "bf16 needs AVX512-BF16, which this CPU lacks or NMT_CPU_ISA turns off"), 0;
    if (dtype == NMT_DTYPE_BF16)
        return N <= 0 || K <= 0 ? 0 : LIN_HDR + cpu_linear_bf16_bytes(N, K);
    if (!q_abits(dtype))
        return cpu_err(ctx, "the cpu backend packs weights in float32, int8 or bf16 only (dtype %u)", dtype), 0;
    if (K > LIN_Q_MAXK)
        return cpu_err(ctx, "int8 linear layer: K=%d above %d", K, LIN_Q_MAXK), 0;
    return N <= 0 || K <= 0 ? 0 : LIN_HDR + cpu_linear_q_bytes(N, K, q_abits(dtype) <= 8);
}

int cpu_linear_pack_q(nmt_bctx *ctx, void *dst, const float *W, int N, int K, int ldw, uint32_t dtype)
{
    if (dtype == NMT_DTYPE_F32)
        return cpu_linear_pack(ctx, dst, W, N, K, ldw);
    int a8 = q_abits(dtype) && q_abits(dtype) <= 8; /* packed with the compensations */
    if (!q_abits(dtype) && dtype != NMT_DTYPE_BF16)
        return cpu_err(ctx, "linear_pack_q: the cpu backend packs weights in float32, int8 or bf16 only (dtype %u)",
                       dtype);
    if (dtype == NMT_DTYPE_BF16 && !cpu_bf16())
        return cpu_err(ctx, "linear_pack_q: bf16 needs AVX512-BF16, which this CPU lacks or NMT_CPU_ISA turns off");
    if (N < 0 || K < 0 || ldw < (K > 1 ? K : 1) || (dtype != NMT_DTYPE_BF16 && K > LIN_Q_MAXK))
        return cpu_err(ctx, "linear_pack_q: bad shape N=%d K=%d ldw=%d", N, K, ldw);
    struct lin_hdr h = { LIN_MAGIC, dtype, N, K, { 0 } };
    memcpy(dst, &h, sizeof h);
    if (dtype == NMT_DTYPE_BF16)
        return cpu_linear_bf16_pack(ctx, (char *)dst + LIN_HDR, W, N, K, ldw);
    return cpu_linear_q_pack(ctx, (char *)dst + LIN_HDR, W, N, K, ldw, a8);
}

int cpu_linear_pack(nmt_bctx *ctx, void *dst, const float *W, int N, int K, int ldw)
{
    if (N < 0 || K < 0 || ldw < (K > 1 ? K : 1))
        return cpu_err(ctx, "linear_pack: bad shape N=%d K=%d ldw=%d", N, K, ldw);
    struct lin_hdr h = { LIN_MAGIC, NMT_DTYPE_F32, N, K, { 0 } };
    memcpy(dst, &h, sizeof h);
    float *o = (float *)((char *)dst + LIN_HDR);
    for (int p = 0; p < (N + PW - 1) / PW; p++)
        for (int k = 0; k < K; k++)
            for (int c = 0; c < PW; c++) {
                int j = p * PW + c;
                *o++ = j < N ? W[(size_t)j * (size_t)ldw + (size_t)k] : 0.0f;
            }
    return 0;
}

int cpu_linear_rows(nmt_bctx *ctx, float *out, const void *packed, const int32_t *rows, int n)
{
    struct lin_hdr h;
    if (!packed || n < 0)
        return cpu_err(ctx, "linear_rows: no packed weight, or n = %d", n);
    memcpy(&h, packed, sizeof h);
    if (h.magic != LIN_MAGIC || h.dtype != NMT_DTYPE_F32)
        return cpu_err(ctx, "linear_rows: the weight was not packed in float32 by linear_pack");
    const float *wp = (const float *)((const char *)packed + LIN_HDR);
    size_t K = (size_t)h.K;
    for (int i = 0; i < n; i++) {
        float *o = out + (size_t)i * K;
        int j = rows[i];
        if (j >= h.N)
            return cpu_err(ctx, "linear_rows: row %d of a weight of %d rows", j, h.N);
        if (j < 0) {
            memset(o, 0, K * sizeof *o);
            continue;
        }
        const float *w = wp + (size_t)(j / PW) * K * PW + (size_t)(j % PW); /* panel_row's layout */
        for (size_t k = 0; k < K; k++)
            o[k] = w[k * PW];
    }
    return 0;
}

/* ---------------- AVX-512: tiles of up to 6 rows by 4 panels ---------------- */

#define MR16 6

/* Rows i..i+mr-1, panels p..p+nv-1, of which the last keeps the lanes in LAST; step k makes PF's
 * request k (prefetch.h). */
static inline __attribute__((always_inline)) ISA_AVX512 void tile16(const struct lin *g, int i, int p, int mr, int nv,
                                                                 __mmask16 last, const char *pf)
{
    const float *a = g->A + (size_t)i * (size_t)g->lda;
    size_t lda = (size_t)g->lda, pstride = (size_t)g->K * PW;
    const float *w = panel_row(g, p, 0);
    __m512 acc[MR16][GROUP];
    for (int r = 0; r < mr; r++)
        for (int c = 0; c < nv; c++)
            acc[r][c] = _mm512_setzero_ps();
    for (int k = 0; k < g->K; k++, w += PW) {
        CPU_PF_TOUCH(pf, k, g->pf_shift);
        __m512 wv[GROUP];
        for (int c = 0; c < nv; c++)
            wv[c] = _mm512_load_ps(w + (size_t)c * pstride);
        for (int r = 0; r < mr; r++) {
            __m512 av = _mm512_set1_ps(a[(size_t)r * lda + (size_t)k]);
            for (int c = 0; c < nv; c++)
                acc[r][c] = _mm512_fmadd_ps(av, wv[c], acc[r][c]);
        }
    }
    for (int c = 0; c < nv; c++) {
        int j = (p + c) * PW;
        __mmask16 m = c == nv - 1 ? last : (__mmask16)0xFFFF;
        __m512 b = g->bias ? _mm512_maskz_loadu_ps(m, g->bias + j) : _mm512_setzero_ps();
        for (int r = 0; r < mr; r++) {
            __m512 v = g->bias ? _mm512_add_ps(acc[r][c], b) : acc[r][c];
            if (g->relu)
                v = _mm512_max_ps(v, _mm512_setzero_ps());
            _mm512_mask_storeu_ps(g->C + (size_t)(i + r) * (size_t)g->ldc + (size_t)j, m, v);
        }
    }
}

/* mr <= 6 rows by nv <= 4 panels, through a tile16 inlined with constant sizes (accumulators in
 * registers) */
static inline __attribute__((always_inline)) ISA_AVX512 void tile16_sizes(const struct lin *g, int i, int p, int mr,
                                                                       int nv, __mmask16 last, const char *pf)
{
    switch (mr * 8 + nv) {
    case 6 * 8 + 4: tile16(g, i, p, 6, 4, last, pf); break;
    case 6 * 8 + 3: tile16(g, i, p, 6, 3, last, pf); break;
    case 6 * 8 + 2: tile16(g, i, p, 6, 2, last, pf); break;
    case 6 * 8 + 1: tile16(g, i, p, 6, 1, last, pf); break;
    case 5 * 8 + 4: tile16(g, i, p, 5, 4, last, pf); break;
    case 5 * 8 + 3: tile16(g, i, p, 5, 3, last, pf); break;
    case 5 * 8 + 2: tile16(g, i, p, 5, 2, last, pf); break;
    case 5 * 8 + 1: tile16(g, i, p, 5, 1, last, pf); break;
    case 4 * 8 + 4: tile16(g, i, p, 4, 4, last, pf); break;
    case 4 * 8 + 3: tile16(g, i, p, 4, 3, last, pf); break;
    case 4 * 8 + 2: tile16(g, i, p, 4, 2, last, pf); break;
    case 4 * 8 + 1: tile16(g, i, p, 4, 1, last, pf); break;
    case 3 * 8 + 4: tile16(g, i, p, 3, 4, last, pf); break;
    case 3 * 8 + 3: tile16(g, i, p, 3, 3, last, pf); break;
    case 3 * 8 + 2: tile16(g, i, p, 3, 2, last, pf); break;
    case 3 * 8 + 1: tile16(g, i, p, 3, 1, last, pf); break;
    case 2 * 8 + 4: tile16(g, i, p, 2, 4, last, pf); break;
    case 2 * 8 + 3: tile16(g, i, p, 2, 3, last, pf); break;
    case 2 * 8 + 2: tile16(g, i, p, 2, 2, last, pf); break;
    case 2 * 8 + 1: tile16(g, i, p, 2, 1, last, pf); break;
    case 1 * 8 + 4: tile16(g, i, p, 1, 4, last, pf); break;
    case 1 * 8 + 3: tile16(g, i, p, 1, 3, last, pf); break;
    case 1 * 8 + 2: tile16(g, i, p, 1, 2, last, pf); break;
    default: tile16(g, i, p, 1, 1, last, pf); break;
    }
}

/* tile16_sizes, whose loop makes requests only when PF has some */
ISA_AVX512 static void tile16_any(const struct lin *g, int i, int p, int mr, int nv, __mmask16 last, const char *pf)
{
    if (pf)
        tile16_sizes(g, i, p, mr, nv, last, pf);
    else
        tile16_sizes(g, i, p, mr, nv, last, NULL);
}

/* ---------------- AVX2 + FMA: tiles of up to 6 rows by one panel (12 accumulators) ---------------- */

/* A panel is two vectors of 8 columns. Six rows by one panel is the register tile (12 accumulators,
 * 2 weight vectors and a broadcast: 15 of the 16 registers), and every k reads one 64-byte line of
 * the panel. Fewer rows take more panels at once (3 or 2 rows: 2 panels; 1 row: 4), so that at least
 * 8 independent chains of fused multiply-adds hide their latency. The loops over rows and vectors
 * are unrolled by pragma: left to itself GCC keeps the accumulators of the masked tiles in memory. */
#define MR8 6
#define NP8 4

static const int32_t lane_tab[16] = { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0 };

/* The mask of the first N lanes of 8 (N clamped to 0..8). */
static inline __attribute__((always_inline)) ISA_AVX2 __m256i lanes8(int n)
{
    n = n < 0 ? 0 : n > 8 ? 8 : n;
    return _mm256_loadu_si256((const __m256i *)(lane_tab + 8 - n));
}

/* Rows i..i+mr-1, panels p..p+np-1, of which the last keeps its first LASTN columns; step k makes
 * PF's request k. */
static inline __attribute__((always_inline)) ISA_AVX2 void tile8(const struct lin *g, int i, int p, int mr, int np,
                                                              int lastn, const char *pf)
{
    const float *a = g->A + (size_t)i * (size_t)g->lda;
    size_t lda = (size_t)g->lda, pstride = (size_t)g->K * PW;
    const float *w = panel_row(g, p, 0);
    __m256 acc[MR8][2 * NP8];
    #pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
        #pragma GCC unroll 8
        for (int c = 0; c < 2 * np; c++)
            acc[r][c] = _mm256_setzero_ps();
    for (int k = 0; k < g->K; k++, w += PW) {
        CPU_PF_TOUCH(pf, k, g->pf_shift);
        __m256 wv[2 * NP8];
        #pragma GCC unroll 8
        for (int c = 0; c < 2 * np; c++)
            wv[c] = _mm256_load_ps(w + (size_t)(c / 2) * pstride + (size_t)(c % 2) * 8);
        #pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            __m256 av = _mm256_broadcast_ss(a + (size_t)r * lda + (size_t)k);
            #pragma GCC unroll 8
            for (int c = 0; c < 2 * np; c++)
                acc[r][c] = _mm256_fmadd_ps(av, wv[c], acc[r][c]);
        }
    }
    #pragma GCC unroll 8
    for (int c = 0; c < 2 * np; c++) {
        int j = p * PW + 8 * c;
        __m256i m = c >= 2 * np - 2 ? lanes8(lastn - 8 * (c % 2)) : lanes8(8);
        __m256 b = g->bias ? _mm256_maskload_ps(g->bias + j, m) : _mm256_setzero_ps();
        #pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            __m256 v = g->bias ? _mm256_add_ps(acc[r][c], b) : acc[r][c];
            if (g->relu)
                v = _mm256_max_ps(v, _mm256_setzero_ps());
            _mm256_maskstore_ps(g->C + (size_t)(i + r) * (size_t)g->ldc + (size_t)j, m, v);
        }
    }
}

/* mr <= 6 rows by np <= 4 panels (np as the row count asks for, or fewer at the group's end), through
 * a tile8 inlined with constant sizes (accumulators in registers) */
static inline __attribute__((always_inline)) ISA_AVX2 void tile8_sizes(const struct lin *g, int i, int p, int mr, int np,
                                                                     int lastn, const char *pf)
{
    switch (mr * 8 + np) {
    case 6 * 8 + 1: tile8(g, i, p, 6, 1, lastn, pf); break;
    case 5 * 8 + 1: tile8(g, i, p, 5, 1, lastn, pf); break;
    case 4 * 8 + 1: tile8(g, i, p, 4, 1, lastn, pf); break;
    case 3 * 8 + 2: tile8(g, i, p, 3, 2, lastn, pf); break;
    case 3 * 8 + 1: tile8(g, i, p, 3, 1, lastn, pf); break;
    case 2 * 8 + 2: tile8(g, i, p, 2, 2, lastn, pf); break;
    case 2 * 8 + 1: tile8(g, i, p, 2, 1, lastn, pf); break;
    case 1 * 8 + 4: tile8(g, i, p, 1, 4, lastn, pf); break;
    case 1 * 8 + 3: tile8(g, i, p, 1, 3, lastn, pf); break;
    case 1 * 8 + 2: tile8(g, i, p, 1, 2, lastn, pf); break;
    default: tile8(g, i, p, 1, 1, lastn, pf); break;
    }
}

/* tile8_sizes, whose loop makes requests only when PF has some */
ISA_AVX2 static void tile8_any(const struct lin *g, int i, int p, int mr, int np, int lastn, const char *pf)
{
    if (pf)
        tile8_sizes(g, i, p, mr, np, lastn, pf);
    else
        tile8_sizes(g, i, p, mr, np, lastn, NULL);
}

/* Rows i..i+mr-1 (mr <= 6) of the NP panels from P0 holding N columns: as tiles of the panels a row
 * count takes at once, the first making the requests from PF. */
ISA_AVX2 static void rows8(const struct lin *g, int i, int mr, int p0, int np, int n, const char *pf)
{
    int step = mr >= 4 ? 1 : mr >= 2 ? 2 : 4;
    for (int p = p0; p < p0 + np; p += step) {
        int k = p0 + np - p < step ? p0 + np - p : step;
        int lastn = p + k == p0 + np ? n - PW * (np - 1) : PW; /* columns of the tile's last panel */
        tile8_any(g, i, p, mr, k, lastn, p == p0 ? pf : NULL);
    }
}

/* ---------------- portable: tiles of up to 4 rows by one panel, multiply then add ---------------- */

#define MRP 4

static void tile_plain(const struct lin *g, int i, int p, int mr)
{
    float acc[MRP][PW];
    int n = g->N - p * PW < PW ? g->N - p * PW : PW;
    for (int r = 0; r < mr; r++)
        for (int c = 0; c < PW; c++)
            acc[r][c] = 0;
    for (int k = 0; k < g->K; k++) {
        const float *wk = panel_row(g, p, k);
        for (int r = 0; r < mr; r++) {
            float a = g->A[(size_t)(i + r) * (size_t)g->lda + (size_t)k];
            for (int c = 0; c < PW; c++)
                acc[r][c] = acc[r][c] + a * wk[c];
        }
    }
    for (int r = 0; r < mr; r++)
        for (int c = 0; c < n; c++) {
            int j = p * PW + c;
            float v = g->bias ? acc[r][c] + g->bias[j] : acc[r][c];
            if (g->relu)
                v = v > 0 ? v : 0;
            g->C[(size_t)(i + r) * (size_t)g->ldc + (size_t)j] = v;
        }
}

/* ---------------- driver ---------------- */

struct lin_job {
    struct lin g;
    int isa;
};

/* Column groups [lo, hi) of GROUP panels: each group's panels are swept by every row tile of A. */
static void linear_body(void *arg, int64_t lo, int64_t hi, int tid)
{
    const struct lin_job *job = arg;
    const struct lin *g = &job->g;
    int panels = (g->N + PW - 1) / PW;
    for (int64_t q = lo; q < hi; q++) {
        int p0 = (int)q * GROUP, np = panels - p0 < GROUP ? panels - p0 : GROUP;
        int j0 = p0 * PW, n = g->N - j0 < GROUP * PW ? g->N - j0 : GROUP * PW; /* columns of the group */
        int nn = panels - p0 - np < GROUP ? panels - p0 - np : GROUP; /* panels of the next group */
        const float *next = nn > 0 ? panel_row(g, p0 + np, 0) : NULL;
        size_t lines = nn > 0 ? (size_t)nn * (size_t)g->K : 0; /* 64 bytes a panel's step (prefetch.h) */
        for (int i = 0; i < g->M; i += MR16) {
            int mr = g->M - i < MR16 ? g->M - i : MR16, t = i / MR16;
            if (job->isa >= CPU_ISA_AVX512) {
                int rem = n - PW * (np - 1);
                tile16_any(g, i, p0, mr, np, (__mmask16)((1u << rem) - 1),
                           cpu_pf_plan(next, lines, t, (size_t)g->K >> g->pf_shift));
            } else if (job->isa == CPU_ISA_AVX2) {
                rows8(g, i, mr, p0, np, n, cpu_pf_plan(next, lines, t, (size_t)g->K >> g->pf_shift));
            } else {
                for (int r = i; r < i + mr; r += MRP)
                    for (int p = p0; p < p0 + np; p++)
                        tile_plain(g, r, p, i + mr - r < MRP ? i + mr - r : MRP);
            }
        }
    }
}

int cpu_linear_rowinv(nmt_bctx *ctx, int M, int N, int K, const float *A, int lda, const void *Wp,
                      const float *bias, int relu, float *C, int ldc)
{
    if (M < 0 || N < 0 || K < 0)
        return cpu_err(ctx, "linear_rowinv: negative size M=%d N=%d K=%d", M, N, K);
    if (lda < (K > 1 ? K : 1) || ldc < (N > 1 ? N : 1))
        return cpu_err(ctx, "linear_rowinv: leading dimension too small (lda=%d ldc=%d for M=%d N=%d K=%d)", lda,
                       ldc, M, N, K);
    struct lin_hdr h;
    if (!Wp)
        return cpu_err(ctx, "linear_rowinv: no packed weight");
    memcpy(&h, Wp, sizeof h);
    if (h.magic != LIN_MAGIC || (h.dtype != NMT_DTYPE_F32 && !q_abits(h.dtype) && h.dtype != NMT_DTYPE_BF16))
        return cpu_err(ctx, "linear_rowinv: the weight was not packed by linear_pack");
    if (h.N != N || h.K != K)
        return cpu_err(ctx, "linear_rowinv: the weight was packed as %d x %d, used as %d x %d", h.N, h.K, N, K);
    if (M == 0 || N == 0)
        return 0;
    if (K == 0) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float v = bias ? bias[j] : 0.0f;
                C[(size_t)i * (size_t)ldc + (size_t)j] = relu && !(v > 0) ? 0.0f : v;
            }
        return 0;
    }
    if (q_abits(h.dtype))
        return cpu_linear_q_run(ctx, M, N, K, A, lda, (const char *)Wp + LIN_HDR, q_abits(h.dtype), bias, relu, C,
                                ldc);
    if (h.dtype == NMT_DTYPE_BF16)
        return cpu_linear_bf16_run(ctx, M, N, K, A, lda, (const char *)Wp + LIN_HDR, bias, relu, C, ldc);
    int tiles = (M + MR16 - 1) / MR16; /* the row tiles of every path but the portable one */
    struct lin_job job = { { A, (const float *)((const char *)Wp + LIN_HDR), bias, C, M, N, K, lda, ldc, relu != 0,
                             cpu_pf_shift(tiles, (size_t)K, (size_t)GROUP * (size_t)K) },
                           cpu_isa() };
    int64_t groups = (N + GROUP * PW - 1) / (GROUP * PW), per = (int64_t)M * (K > 0 ? K : 1) * GROUP * PW;
    pool_for(ctx->pool, groups, (WORK_GRAIN + per - 1) / per, linear_body, &job);
    return 0;
}
