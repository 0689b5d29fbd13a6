/* linear_q.c: the cpu backend's int8 linear layer for inference (linear_pack_q with NMT_DTYPE_INT8,
 * then linear_rowinv; see plugins/backend.h): int8 weights, activations on a 12-bit grid.
 *
 * Quantisation. A weight row j (an output channel) gets the scale s_j = max_k |W[j,k]| / 127 and
 * the values q = rint(W[j,k] * (127 / max_k |W[j,k]|)) in [-127, 127] (round to nearest even;
 * quant_row.h). Each row i of A is quantised when the layer runs, the same way on a 12-bit grid:
 * scale a_i = max_k |A[i,k]| / 2047, values rint(A[i,k] * (2047 / max)) in [-2047, 2047], held as
 * int16 (a row with a non-finite value gets the scale NaN, so its outputs are NaN as in float32;
 * a row whose largest magnitude is 0, or so small that 2047 / max overflows, is all zeros with
 * scale 0). Twelve bits rather than eight for the activations: on the Multi30k recipe's model,
 * 8-bit activations alone change about 4.5% of the greedy translations, 12-bit ones almost none
 * (bench/RESULTS.md, bench/quant_sim.py).
 *
 * With 8-bit activations (NMT_DTYPE_INT8A8) the rows of A go on the int8 grid instead: scale
 * a_i = max_k |A[i,k]| / 127, values in [-127, 127]; the weights as above. Where VNNI runs, each
 * value travels as the unsigned byte qA + 128, four to a 32-bit word in column order, and one
 * vpdpbusd multiplies 64 byte pairs: the sum of (qA + 128) * qW, less 128 * sum_k qW[j,k] (a
 * column's compensation, kept with the packed weights), is S exactly. On AVX2 the weights stay
 * in bytes too (not widened to 16 bits): vpsignb gives them the activations' signs, vpmaddubsw
 * multiplies them by the magnitudes and adds pairs (at most 2 * 127 * 127, so no saturation), and
 * vpmaddwd by ones adds the pairs: the same exact sums in half the weight bytes. The portable path
 * runs the 12-bit code on these values. Twice the products per instruction of the 12-bit layer on
 * VNNI; translations about as far from float32 as CTranslate2's int8.
 *
 * With 7-bit activations (NMT_DTYPE_INT8A7) the rows of A go on the grid -63..63 (scale a_i =
 * max_k |A[i,k]| / 63); the weights, their packing and compensations are those of 8-bit
 * activations. On AVX2 each value travels as the unsigned byte qA + 64 (1..127), and vpmaddubsw
 * multiplies it by the weight bytes as packed, adding pairs (at most 2 * 127 * 127: no
 * saturation), vpmaddwd by ones the two pairs; the sum of (qA + 64) * qW less 64 * sum_k qW[j,k]
 * (half the packed compensation) is S exactly: 2 instructions on the vector multiply ports for 32
 * products where 8-bit activations need 3. The other paths run their 8-bit code on these values
 * (a 7-bit value is an 8-bit one).
 *
 * Result. C[i,j] = ((float)S * s_j) * a_i, + bias[j], then max(., 0) if asked, where
 * S = sum_k qA[i,k] * qW[j,k] is an exact 32-bit integer sum (|S| <= 2047 * 127 * K < 2^31 for
 * K <= LIN_Q_MAXK). Integer sums do not depend on their order, and the float epilogue is the same
 * sequence of operations on every path, so every path (AVX-512 VNNI, AVX2, portable) gives the
 * same bits, and a row's bits depend only on that row, never on M, the other rows or the thread
 * count.
 *
 * Packed layout after the header (struct lin_hdr), for Np = N rounded up to 16 columns and
 * Kp = K rounded up to 4: float s[Np] (0 past N); with 8-bit activations int32 comp[Np] (128 *
 * sum_k qW[j,k]); then panel p (columns 16p..16p+15) as Kp/4
 * groups of 64 bytes: group g holds, for c = 0..15, the 4 bytes qW[16p+c][4g..4g+3] (zeros past N
 * and K). The quantised rows of A hold each group of 4 columns in the order 0, 2, 1, 3, so that
 * one 32-bit word of A pairs with the even bytes of a weight word and the next with the odd ones.
 * Where the AVX2 path runs (q_wide: no VNNI) with 12-bit activations, the weights are held sign-extended to 16 bits
 * instead, each group as 64 int16 in four vectors of 8 columns (c = 0..7, then 8..15): first the
 * pairs (qW[c][4g], qW[c][4g+2]) of both halves, then the pairs (qW[c][4g+1], qW[c][4g+3]), so
 * that the layer reads its operands as they multiply (twice the bytes, no widening each call).
 *
 * Paths (per group of 4 columns, each 32-bit lane of a weight vector being one output column):
 *   AMX (AMX-TILE and AMX-INT8, where Kp is a multiple of 64 and M is at least AMX_MIN_ROWS; else
 *     the VNNI path): tile products of the activations split into bytes, linear_q_amx.c. Tiles of
 *     16 rows by 2 panels; with 8-bit activations, of their signed bytes (tdpbssd), 16 rows by 4
 *     panels, or 32 rows by 2 where there are more than 16.
 *   VNNI with 8-bit activations: vpdpbusd of the broadcast unsigned activation words against the
 *     weight bytes as packed. Tiles of up to 6 rows by 4 panels.
 *   VNNI (AVX512-VNNI): the weight bytes sign-extended in place to 16 bits, even bytes
 *     (shift left then arithmetic shift right by 8) and odd bytes (arithmetic shift by 8), and
 *     two vpdpwssd against the broadcast activation pairs (a0, a2) and (a1, a3). Tiles of up to
 *     6 rows by 4 panels.
 *   AVX2 with 8-bit activations: vpsignb, vpmaddubsw and vpmaddwd on the weight bytes (above).
 *     Tiles of up to 4 rows by one panel.
 *   AVX2 (and AVX-512 without VNNI): the 16-bit weights packed so (above), vpmaddwd against the
 *     same broadcast pairs and vpaddd (no saturation: each pair sum is at most 2 * 2047 * 127).
 *     Tiles of up to 4 rows by one panel.
 *   portable: int32 multiply-adds in C. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>

#include "cpu.h"
#include "linear_q.h"
#include "prefetch.h"
#include "quant_row.h"

#define GROUP 4           /* panels per column group of the thread split */
#define WORK_GRAIN 262144 /* multiply-adds per thread chunk, at least */
#define QGRAIN 16384      /* values quantised per thread chunk, at least */
#define AMX_MIN_ROWS 8    /* fewer rows take the VNNI path: a tile of 16 rows would be mostly padding */

static int pad16(int n) { return (n + QPW - 1) / QPW * QPW; }
static int pad4(int k) { return (k + 3) / 4 * 4; }

/* Whether the int8 layer takes the AVX2 path on ISA, its weights held in 16 bits (see above). */
static int q_wide(int isa) { return isa == CPU_ISA_AVX2 || isa == CPU_ISA_AVX512; }

size_t cpu_linear_q_bytes(int N, int K, int a8)
{
    size_t np = (size_t)pad16(N);
    return np * sizeof(float) * (a8 ? 2 : 1) + np * (size_t)pad4(K) * (q_wide(cpu_isa()) && !a8 ? sizeof(int16_t) : 1);
}

/* Where weight byte T (0..3) of column C (0..15) of a group of 4 columns goes among the group's
 * 64 int16 of the 16-bit layout. */
static int wide_pos(int c, int t) { return ((t & 1) * 2 + c / 8) * 16 + (c % 8) * 2 + (t >> 1); }

#define QA_MAX 2047 /* the activations' grid: -2047..2047 */
#define QA8_MAX 127 /* with 8-bit activations: -127..127 */
#define QA8_BIAS 128 /* what makes them unsigned bytes on the VNNI path */
#define QA7_MAX 63   /* with 7-bit activations: -63..63 */
#define QA7_BIAS 64  /* what makes them unsigned bytes (1..127) on the AVX2 path */

/* Where column k of a row of A is held: each group of 4 in the order 0, 2, 1, 3 (an involution). */
static inline int act_pos(int k) { return (k & ~3) | ((k & 1) << 1) | ((k & 2) >> 1); }

/* Quantises the K values X into Q (Kp int16, zeros past K, in act_pos order) on the grid
 * -TOP..TOP; returns the scale. */
static float quant_act_plain(int16_t *q, const float *x, int K, int Kp, int top)
{
    int finite;
    float amax = row_absmax_plain(x, K, &finite), inv, s = quant_scale_top(amax, finite, (float)top, &inv);
    for (int k = 0; k < Kp; k++) {
        float r = k < K && s > 0 ? rintf(x[k] * inv) : 0.0f; /* to nearest even */
        r = r > (float)top ? (float)top : r < -(float)top ? -(float)top : r;
        q[act_pos(k)] = (int16_t)r;
    }
    return s;
}

/* quant_act_plain with AVX2 on blocks of 8 values, the tail in C: the same max, products and
 * rounding (vcvtps2dq rounds to nearest even, the default mode), so the same bits. */
ISA_AVX2 static float quant_act_avx2(int16_t *q, const float *x, int K, int Kp, int top)
{
    int finite, k = 0;
    float amax = row_absmax_avx2(x, K, &finite), inv, s = quant_scale_top(amax, finite, (float)top, &inv);
    __m256 vinv = _mm256_set1_ps(inv);
    __m256i lo = _mm256_set1_epi32(-top), hi = _mm256_set1_epi32(top);
    for (; s > 0 && k + 8 <= K; k += 8) {
        __m256i r = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k), vinv));
        r = _mm256_min_epi32(_mm256_max_epi32(r, lo), hi);
        r = _mm256_shuffle_epi32(r, 0xD8); /* each group of 4 as 0, 2, 1, 3 */
        _mm_storeu_si128((__m128i *)(q + k), _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
    }
    for (; k < Kp; k++) {
        float r = k < K && s > 0 ? rintf(x[k] * inv) : 0.0f;
        r = r > (float)top ? (float)top : r < -(float)top ? -(float)top : r;
        q[act_pos(k)] = (int16_t)r;
    }
    return s;
}

/* Quantises the K values X into Q (Kp int16) on the grid -TOP..TOP, on the widest path this CPU has. */
static float quant_act(int16_t *q, const float *x, int K, int Kp, int top, int isa)
{
    return isa >= CPU_ISA_AVX2 ? quant_act_avx2(q, x, K, Kp, top) : quant_act_plain(q, x, K, Kp, top);
}

/* Quantises the K values X on the grid -TOP..TOP (as quant_act; TOP at most 127) into U: Kp
 * unsigned bytes q + BIAS in column order (BIAS past K); returns the scale. AVX2 on blocks of 8
 * values: the same bits as quant_act_plain. */
ISA_AVX2 static float quant_act_u8(uint8_t *u, const float *x, int K, int Kp, int top, int bias)
{
    int finite, k = 0;
    float amax = row_absmax_avx2(x, K, &finite), inv, s = quant_scale_top(amax, finite, (float)top, &inv);
    __m256 vinv = _mm256_set1_ps(inv);
    __m256i lo = _mm256_set1_epi32(-top), hi = _mm256_set1_epi32(top);
    const __m128i vbias = _mm_set1_epi8((char)bias); /* q + bias, modulo 256: in 0..255 */
    for (; s > 0 && k + 8 <= K; k += 8) {
        __m256i r = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k), vinv));
        r = _mm256_min_epi32(_mm256_max_epi32(r, lo), hi);
        __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storel_epi64((__m128i *)(u + k), _mm_add_epi8(_mm_packs_epi16(w, w), vbias));
    }
    for (; k < Kp; k++) {
        float r = k < K && s > 0 ? rintf(x[k] * inv) : 0.0f;
        r = r > (float)top ? (float)top : r < -(float)top ? -(float)top : r;
        u[k] = (uint8_t)((int)r + bias);
    }
    return s;
}

int cpu_linear_q_pack(nmt_bctx *ctx, void *data, const float *W, int N, int K, int ldw, int a8)
{
    int np = pad16(N), kp = pad4(K);
    float *s = data;
    int32_t *comp = (int32_t *)(s + np); /* a8 only */
    uint8_t *panels = (uint8_t *)(s + (a8 ? 2 : 1) * np);
    int8_t *row = malloc((size_t)kp);
    if (!row)
        return cpu_err(ctx, "out of memory");
    memset(data, 0, cpu_linear_q_bytes(N, K, a8));
    int isa = cpu_isa();
    for (int j = 0; j < N; j++) {
        const float *wj = W + (size_t)j * (size_t)ldw;
        s[j] = isa >= CPU_ISA_AVX2 ? quant_row_avx2(row, wj, K, kp) : quant_row_plain(row, wj, K, kp);
        if (s[j] != s[j]) {
            free(row);
            return cpu_err(ctx, "linear_pack_q: row %d of the weight has a non-finite value", j);
        }
        int32_t sum = 0;
        for (int k = 0; a8 && k < kp; k++)
            sum += row[k];
        if (a8)
            comp[j] = QA8_BIAS * sum;
        if (q_wide(isa) && !a8) {
            int16_t *pw = (int16_t *)panels + (size_t)(j / QPW) * (size_t)kp * QPW;
            for (int k = 0; k < kp; k++)
                pw[(size_t)(k / 4) * 64 + (size_t)wide_pos(j % QPW, k % 4)] = row[k];
            continue;
        }
        uint8_t *pj = panels + (size_t)(j / QPW) * (size_t)kp * QPW + (size_t)(j % QPW) * 4;
        for (int k = 0; k < kp; k += 4)
            memcpy(pj + (size_t)(k / 4) * 64, row + k, 4);
    }
    free(row);
    return 0;
}

/* The epilogue every path shares, for one element: C = ((float)S * s_j) * a_i + bias, ReLU. */
static inline float qfinish(const struct qlin *g, int32_t S, int i, int j)
{
    float v = (float)S * g->sw[j];
    v = v * g->sa[i];
    if (g->bias)
        v = v + g->bias[j];
    if (g->relu)
        v = v > 0 ? v : 0;
    return v;
}

/* ---------------- AVX-512 VNNI: tiles of up to 6 rows by 4 panels ---------------- */

#define MRV 6

/* The even and the odd bytes of each 16-bit half of W, sign-extended to 16 bits. */
#define EVEN16(w) _mm512_srai_epi16(_mm512_slli_epi16((w), 8), 8)
#define ODD16(w) _mm512_srai_epi16((w), 8)

/* One accumulator per (row r, panel c) as a named variable: GCC 12 keeps an array of vpdpwssd
 * accumulators in memory (stored every step); named ones stay in registers. The rows and panels
 * past MR and NV (constants after inlining) are dropped by the compiler. HALF 0 takes the pair
 * (a0, a2) against the even weight bytes, HALF 1 the pair (a1, a3) against the odd ones. */
#define QSTEP(r, half)                                                                                                 \
    if (mr > r) {                                                                                                      \
        int32_t a2;                                                                                                    \
        memcpy(&a2, a + (size_t)(r) * ldq + (size_t)k + 2 * (half), 4);                                                \
        __m512i av = _mm512_set1_epi32(a2);                                                                            \
        a##r##0 = _mm512_dpwssd_epi32(a##r##0, av, w0);                                                                \
        if (nv > 1)                                                                                                    \
            a##r##1 = _mm512_dpwssd_epi32(a##r##1, av, w1);                                                            \
        if (nv > 2)                                                                                                    \
            a##r##2 = _mm512_dpwssd_epi32(a##r##2, av, w2);                                                            \
        if (nv > 3)                                                                                                    \
            a##r##3 = _mm512_dpwssd_epi32(a##r##3, av, w3);                                                            \
    }

static inline __attribute__((always_inline)) ISA_AVX512_VNNI void qtile16(const struct qlin *g, int i, int p, int mr, int nv,
                                                                __mmask16 last, const char *pf)
{
    size_t ldq = (size_t)g->ldq, pstride = (size_t)g->Kp * QPW;
    const int16_t *a = g->A + (size_t)i * ldq;
    const uint8_t *w = qpanel(g, p, 0);
    const __m512i z = _mm512_setzero_si512();
    __m512i a00 = z, a01 = z, a02 = z, a03 = z, a10 = z, a11 = z, a12 = z, a13 = z, a20 = z, a21 = z, a22 = z, a23 = z;
    __m512i a30 = z, a31 = z, a32 = z, a33 = z, a40 = z, a41 = z, a42 = z, a43 = z, a50 = z, a51 = z, a52 = z, a53 = z;
    for (int k = 0; k < g->Kp; k += 4, w += 64) {
        CPU_PF_TOUCH(pf, k / 4, g->pf_shift);
        __m512i x0 = _mm512_loadu_si512((const void *)w);
        __m512i x1 = nv > 1 ? _mm512_loadu_si512((const void *)(w + pstride)) : z;
        __m512i x2 = nv > 2 ? _mm512_loadu_si512((const void *)(w + 2 * pstride)) : z;
        __m512i x3 = nv > 3 ? _mm512_loadu_si512((const void *)(w + 3 * pstride)) : z;
        __m512i w0 = EVEN16(x0), w1 = EVEN16(x1), w2 = EVEN16(x2), w3 = EVEN16(x3);
        QSTEP(0, 0) QSTEP(1, 0) QSTEP(2, 0) QSTEP(3, 0) QSTEP(4, 0) QSTEP(5, 0)
        w0 = ODD16(x0), w1 = ODD16(x1), w2 = ODD16(x2), w3 = ODD16(x3);
        QSTEP(0, 1) QSTEP(1, 1) QSTEP(2, 1) QSTEP(3, 1) QSTEP(4, 1) QSTEP(5, 1)
    }
    const __m512i acc[MRV][GROUP] = { { a00, a01, a02, a03 }, { a10, a11, a12, a13 }, { a20, a21, a22, a23 },
                                      { a30, a31, a32, a33 }, { a40, a41, a42, a43 }, { a50, a51, a52, a53 } };
    for (int c = 0; c < nv; c++)
        for (int r = 0; r < mr; r++)
            qstore16(g, i + r, (p + c) * QPW, c == nv - 1 ? last : (__mmask16)0xFFFF, acc[r][c]);
}

/* NAME(g, i, p, mr, nv, last, pf): mr <= 6 rows by nv <= 4 panels, through TILE (a VNNI tile of this
 * file) inlined with constant sizes; step k (of 4 columns) makes PF's request k (prefetch.h), the
 * loop having none when PF has none. */
#define TILE16_ANY(NAME, TILE)                                                                                         \
    static inline __attribute__((always_inline)) ISA_AVX512_VNNI void NAME##_sizes(                                    \
        const struct qlin *g, int i, int p, int mr, int nv, __mmask16 last, const char *pf)                            \
    {                                                                                                                  \
        switch (mr * 8 + nv) {                                                                                         \
            TILE16_ROWS(TILE, 6) TILE16_ROWS(TILE, 5) TILE16_ROWS(TILE, 4)                                             \
            TILE16_ROWS(TILE, 3) TILE16_ROWS(TILE, 2) TILE16_ROWS(TILE, 1)                                             \
        }                                                                                                              \
    }                                                                                                                  \
    ISA_AVX512_VNNI static void NAME(const struct qlin *g, int i, int p, int mr, int nv, __mmask16 last,               \
                                     const char *pf)                                                                   \
    {                                                                                                                  \
        if (pf)                                                                                                        \
            NAME##_sizes(g, i, p, mr, nv, last, pf);                                                                   \
        else                                                                                                           \
            NAME##_sizes(g, i, p, mr, nv, last, NULL);                                                                 \
    }
#define TILE16_ROWS(TILE, R)                                                                                           \
    case R * 8 + 4: TILE(g, i, p, R, 4, last, pf); break;                                                              \
    case R * 8 + 3: TILE(g, i, p, R, 3, last, pf); break;                                                              \
    case R * 8 + 2: TILE(g, i, p, R, 2, last, pf); break;                                                              \
    case R * 8 + 1: TILE(g, i, p, R, 1, last, pf); break;

TILE16_ANY(qtile16_any, qtile16)
#undef QSTEP
#undef EVEN16
#undef ODD16

/* ---------------- AVX-512 VNNI, 8-bit activations: tiles of up to 6 rows by 4 panels ---------------- */

/* Row R's word of 4 activation bytes against the weight bytes of each panel (the accumulator
 * variables as in qtile16). */
#define BSTEP(r)                                                                                                       \
    if (mr > r) {                                                                                                      \
        int32_t a4;                                                                                                    \
        memcpy(&a4, a + (size_t)(r) * ld8 + (size_t)k, 4);                                                             \
        __m512i av = _mm512_set1_epi32(a4);                                                                            \
        a##r##0 = _mm512_dpbusd_epi32(a##r##0, av, x0);                                                                \
        if (nv > 1)                                                                                                    \
            a##r##1 = _mm512_dpbusd_epi32(a##r##1, av, x1);                                                            \
        if (nv > 2)                                                                                                    \
            a##r##2 = _mm512_dpbusd_epi32(a##r##2, av, x2);                                                            \
        if (nv > 3)                                                                                                    \
            a##r##3 = _mm512_dpbusd_epi32(a##r##3, av, x3);                                                            \
    }

static inline __attribute__((always_inline)) ISA_AVX512_VNNI void btile16(const struct qlin *g, int i, int p, int mr,
                                                                          int nv, __mmask16 last, const char *pf)
{
    size_t ld8 = (size_t)g->ld8, pstride = (size_t)g->Kp * QPW;
    const uint8_t *a = g->Au8 + (size_t)i * ld8;
    const uint8_t *w = qpanel(g, p, 0);
    const __m512i z = _mm512_setzero_si512();
    __m512i a00 = z, a01 = z, a02 = z, a03 = z, a10 = z, a11 = z, a12 = z, a13 = z, a20 = z, a21 = z, a22 = z, a23 = z;
    __m512i a30 = z, a31 = z, a32 = z, a33 = z, a40 = z, a41 = z, a42 = z, a43 = z, a50 = z, a51 = z, a52 = z, a53 = z;
    for (int k = 0; k < g->Kp; k += 4, w += 64) {
        CPU_PF_TOUCH(pf, k / 4, g->pf_shift);
        __m512i x0 = _mm512_loadu_si512((const void *)w);
        __m512i x1 = nv > 1 ? _mm512_loadu_si512((const void *)(w + pstride)) : z;
        __m512i x2 = nv > 2 ? _mm512_loadu_si512((const void *)(w + 2 * pstride)) : z;
        __m512i x3 = nv > 3 ? _mm512_loadu_si512((const void *)(w + 3 * pstride)) : z;
        BSTEP(0) BSTEP(1) BSTEP(2) BSTEP(3) BSTEP(4) BSTEP(5)
    }
    const __m512i acc[MRV][GROUP] = { { a00, a01, a02, a03 }, { a10, a11, a12, a13 }, { a20, a21, a22, a23 },
                                      { a30, a31, a32, a33 }, { a40, a41, a42, a43 }, { a50, a51, a52, a53 } };
    for (int c = 0; c < nv; c++) {
        __m512i comp = _mm512_loadu_si512((const void *)(g->comp + (p + c) * QPW)); /* Np entries: no mask */
        for (int r = 0; r < mr; r++)
            qstore16(g, i + r, (p + c) * QPW, c == nv - 1 ? last : (__mmask16)0xFFFF, _mm512_sub_epi32(acc[r][c], comp));
    }
}

TILE16_ANY(btile16_any, btile16)
#undef TILE16_ANY
#undef TILE16_ROWS
#undef BSTEP

/* ---------------- AVX2: tiles of up to 4 rows by one panel (two vectors of 8 columns) ---------------- */

#define MR8 4

static const int32_t lane_tab[16] = { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0 };

/* The epilogue of rows I..I+MR-1 of panel P (its first N columns in C) from the exact sums ACC
 * (two vectors of 8 columns a row): the operations of qfinish, 8 columns at a time. */
static inline __attribute__((always_inline)) ISA_AVX2 void qstore8(const struct qlin *g, int i, int p, int mr, int n,
                                                                  __m256i acc[MR8][2])
{
    for (int h = 0; h < 2; h++) {
        int j = p * QPW + 8 * h, nh = n - 8 * h;
        if (nh <= 0)
            break;
        __m256i m = _mm256_loadu_si256((const __m256i *)(lane_tab + 8 - (nh < 8 ? nh : 8)));
        __m256 sw = _mm256_loadu_ps(g->sw + j);
        __m256 b = g->bias ? _mm256_maskload_ps(g->bias + j, m) : _mm256_setzero_ps();
        for (int r = 0; r < mr; r++) {
            __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][h]), sw);
            v = _mm256_mul_ps(v, _mm256_set1_ps(g->sa[i + r]));
            if (g->bias)
                v = _mm256_add_ps(v, b);
            if (g->relu)
                v = _mm256_max_ps(v, _mm256_setzero_ps());
            _mm256_maskstore_ps(g->C + (size_t)(i + r) * (size_t)g->ldc + (size_t)j, m, v);
        }
    }
}

static inline __attribute__((always_inline)) ISA_AVX2 void qtile8(const struct qlin *g, int i, int p, int mr, int n,
                                                                 const char *pf)
{
    size_t ldq = (size_t)g->ldq;
    const int16_t *a = g->A + (size_t)i * ldq;
    const int16_t *w = (const int16_t *)g->Wp + (size_t)p * (size_t)g->Kp * QPW; /* 16-bit layout */
    __m256i acc[MR8][2];
    for (int r = 0; r < mr; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    for (int k = 0; k < g->Kp; k += 4, w += 64) {
        CPU_PF_TOUCH(pf, k / 4, g->pf_shift);
        /* the pairs (w0, w2) of columns 0..7 and 8..15, then the pairs (w1, w3) */
        __m256i e0 = _mm256_loadu_si256((const __m256i *)w), e1 = _mm256_loadu_si256((const __m256i *)(w + 16));
        __m256i o0 = _mm256_loadu_si256((const __m256i *)(w + 32)), o1 = _mm256_loadu_si256((const __m256i *)(w + 48));
        for (int r = 0; r < mr; r++) {
            int32_t p02, p13;
            memcpy(&p02, a + (size_t)r * ldq + (size_t)k, 4);     /* (a0, a2) */
            memcpy(&p13, a + (size_t)r * ldq + (size_t)k + 2, 4); /* (a1, a3) */
            __m256i v02 = _mm256_set1_epi32(p02), v13 = _mm256_set1_epi32(p13);
            acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(e0, v02));
            acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(e1, v02));
            acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(o0, v13));
            acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(o1, v13));
        }
    }
    qstore8(g, i, p, mr, n, acc);
}

/* NAME(g, i, p, mr, n, pf): mr <= 4 rows of panel P, whose first N columns are in C, through TILE (an
 * AVX2 tile of this file) inlined with a constant row count; step k (of 4 columns) makes PF's
 * request k, the loop having none when PF has none. */
#define TILE8_ANY(NAME, TILE)                                                                                          \
    static inline __attribute__((always_inline)) ISA_AVX2 void NAME##_sizes(const struct qlin *g, int i, int p, int mr, \
                                                                           int n, const char *pf)                      \
    {                                                                                                                  \
        switch (mr) {                                                                                                  \
        case 4: TILE(g, i, p, 4, n, pf); break;                                                                        \
        case 3: TILE(g, i, p, 3, n, pf); break;                                                                        \
        case 2: TILE(g, i, p, 2, n, pf); break;                                                                        \
        default: TILE(g, i, p, 1, n, pf); break;                                                                       \
        }                                                                                                              \
    }                                                                                                                  \
    ISA_AVX2 static void NAME(const struct qlin *g, int i, int p, int mr, int n, const char *pf)                       \
    {                                                                                                                  \
        if (pf)                                                                                                        \
            NAME##_sizes(g, i, p, mr, n, pf);                                                                          \
        else                                                                                                           \
            NAME##_sizes(g, i, p, mr, n, NULL);                                                                        \
    }

TILE8_ANY(qtile8_any, qtile8)

/* AVX2 with 8- or 7-bit activations (U7 0 or 1, a constant after inlining), the weight bytes as
 * packed (8 columns a vector, 4 bytes of k a column), each word of 4 activation bytes broadcast.
 * 8-bit: with the word of their magnitudes (quantised with them, once a call); vpsignb gives the
 * weights the activations' signs and vpmaddubsw multiplies them by the magnitudes (at most 127),
 * adding pairs (at most 2 * 127 * 127: no saturation), vpmaddwd by ones the two pairs: the exact
 * sums of qtile8, in half its weight bytes. 7-bit: the unsigned bytes qA + 64 (1..127) multiplied
 * by the weight bytes as they are (pairs at most 2 * 127 * 127 again), 64 * sum_k qW[j,k] (half
 * the packed compensation) taken off at the end: the same exact sums with one instruction on the
 * multiply ports fewer. Tiles of up to 4 rows by one panel; the accumulators are named variables
 * cR0, cR1 (as in qtile16: GCC keeps an array of them in memory). */
#define BSTEP8(r)                                                                                                      \
    if (mr > r) {                                                                                                      \
        int32_t a4, m4;                                                                                                \
        memcpy(&a4, a + (size_t)(r) * ld8 + (size_t)k, 4);                                                             \
        __m256i av = _mm256_set1_epi32(a4), s0, s1;                                                                    \
        if (u7) {                                                                                                      \
            s0 = _mm256_maddubs_epi16(av, w0);                                                                         \
            s1 = _mm256_maddubs_epi16(av, w1);                                                                         \
        } else {                                                                                                       \
            memcpy(&m4, am + (size_t)(r) * ld8 + (size_t)k, 4);                                                        \
            __m256i mag = _mm256_set1_epi32(m4);                                                                       \
            s0 = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(w0, av));                                                  \
            s1 = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(w1, av));                                                  \
        }                                                                                                              \
        c##r##0 = _mm256_add_epi32(c##r##0, _mm256_madd_epi16(s0, ones));                                             \
        c##r##1 = _mm256_add_epi32(c##r##1, _mm256_madd_epi16(s1, ones));                                             \
    }

static inline __attribute__((always_inline)) ISA_AVX2 void btile8(const struct qlin *g, int i, int p, int mr, int n,
                                                                 const char *pf, int u7)
{
    size_t ld8 = (size_t)g->ld8;
    const uint8_t *a = (u7 ? g->Au7 : (const uint8_t *)g->As8) + (size_t)i * ld8, *w = qpanel(g, p, 0);
    const uint8_t *am = u7 ? NULL : g->Am8 + (size_t)i * ld8;
    const __m256i ones = _mm256_set1_epi16(1), z = _mm256_setzero_si256();
    __m256i c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z;
    for (int k = 0; k < g->Kp; k += 4, w += 64) {
        CPU_PF_TOUCH(pf, k / 4, g->pf_shift);
        __m256i w0 = _mm256_loadu_si256((const __m256i *)w), w1 = _mm256_loadu_si256((const __m256i *)(w + 32));
        BSTEP8(0) BSTEP8(1) BSTEP8(2) BSTEP8(3)
    }
    __m256i acc[MR8][2] = { { c00, c01 }, { c10, c11 }, { c20, c21 }, { c30, c31 } };
    for (int h = 0; u7 && h < 2; h++) {
        __m256i comp = _mm256_srai_epi32(_mm256_loadu_si256((const __m256i *)(g->comp + p * QPW + 8 * h)), 1);
        for (int r = 0; r < mr; r++)
            acc[r][h] = _mm256_sub_epi32(acc[r][h], comp);
    }
    qstore8(g, i, p, mr, n, acc);
}
#undef BSTEP8

static inline __attribute__((always_inline)) ISA_AVX2 void stile8(const struct qlin *g, int i, int p, int mr, int n,
                                                                 const char *pf)
{
    btile8(g, i, p, mr, n, pf, 0);
}

static inline __attribute__((always_inline)) ISA_AVX2 void utile8(const struct qlin *g, int i, int p, int mr, int n,
                                                                 const char *pf)
{
    btile8(g, i, p, mr, n, pf, 1);
}

TILE8_ANY(stile8_any, stile8)
TILE8_ANY(utile8_any, utile8)
#undef TILE8_ANY

/* ---------------- portable: tiles of up to 4 rows by one panel ---------------- */

#define MRP 4

static void qtile_plain(const struct qlin *g, int i, int p, int mr)
{
    int32_t acc[MRP][QPW] = { { 0 } };
    int n = g->N - p * QPW < QPW ? g->N - p * QPW : QPW;
    for (int k = 0; k < g->Kp; k += 4) {
        const uint8_t *wk = qpanel(g, p, k);
        for (int r = 0; r < mr; r++) {
            const int16_t *a = g->A + (size_t)(i + r) * (size_t)g->ldq + (size_t)k;
            for (int c = 0; c < QPW; c++)
                for (int t = 0; t < 4; t++)
                    acc[r][c] += (int32_t)a[act_pos(t)] * (int32_t)(int8_t)wk[4 * c + t];
        }
    }
    for (int r = 0; r < mr; r++)
        for (int c = 0; c < n; c++)
            g->C[(size_t)(i + r) * (size_t)g->ldc + (size_t)(p * QPW + c)] = qfinish(g, acc[r][c], i + r, p * QPW + c);
}

/* ---------------- driver ---------------- */

struct qlin_job {
    struct qlin g;
    const float *Af; /* (M, lda) the float rows, quantised into qa and qs (= g.A and g.sa) */
    int16_t *qa;
    float *qs;
    uint8_t *lo; /* AMX: the split rows (g.Alo, g.Ahi); 8- and 7-bit activations: their bytes (g.Au8, As8, Au7) */
    int8_t *hi;
    int lda, K, isa; /* isa: CPU_ISA_AMX only when Kp is a multiple of 64 */
    int top;         /* the activations' grid: QA_MAX, QA8_MAX or QA7_MAX */
};

/* The magnitudes |Q[k]| of the N bytes Q (values -127..127) into M. */
ISA_AVX2 static void abs_bytes_avx2(uint8_t *m, const int8_t *q, int n)
{
    int k = 0;
    for (; k + 32 <= n; k += 32)
        _mm256_storeu_si256((__m256i *)(m + k), _mm256_abs_epi8(_mm256_loadu_si256((const __m256i *)(q + k))));
    for (; k < n; k++)
        m[k] = (uint8_t)(q[k] < 0 ? -q[k] : q[k]);
}

/* Quantises rows [lo, hi) of A. */
static void quant_body(void *arg, int64_t lo, int64_t hi, int tid)
{
    struct qlin_job *job = arg;
    for (int64_t i = lo; i < hi; i++) {
        if (job->g.Au8 || job->g.Au7) { /* VNNI with 8- or 7-bit activations, AVX2 with 7: their bytes only */
            job->qs[i] = quant_act_u8(job->lo + i * job->g.ld8, job->Af + i * job->lda, job->K, job->g.Kp, job->top,
                                      job->g.Au8 ? QA8_BIAS : QA7_BIAS);
            continue;
        }
        if (job->g.As8) { /* AVX2 with 8-bit activations, AMX with 8 or 7: their values (AVX2: and magnitudes) */
            int8_t *q = (int8_t *)job->lo + i * job->g.ld8;
            job->qs[i] = quant_row_top_avx2(q, job->Af + i * job->lda, job->K, job->g.Kp, job->top);
            if (job->g.Am8)
                abs_bytes_avx2((uint8_t *)job->g.Am8 + i * job->g.ld8, q, job->g.Kp);
            continue;
        }
        int16_t *q = job->qa + i * job->g.ldq;
        job->qs[i] = quant_act(q, job->Af + i * job->lda, job->K, job->g.Kp, job->top, job->isa);
        if (job->isa == CPU_ISA_AMX)
            cpu_q_amx_split(job->lo + i * job->g.ld8, job->hi + i * job->g.ld8, q, job->g.Kp);
    }
}

/* Column groups [lo, hi) of GROUP panels, each swept by every row tile of A. */
static void qlinear_body(void *arg, int64_t lo, int64_t hi, int tid)
{
    const struct qlin_job *job = arg;
    const struct qlin *g = &job->g;
    int panels = (g->N + QPW - 1) / QPW;
    if (job->isa == CPU_ISA_AMX)
        cpu_q_amx_begin();
    for (int64_t q = lo; q < hi; q++) {
        int p0 = (int)q * GROUP, np = panels - p0 < GROUP ? panels - p0 : GROUP;
        int n = g->N - p0 * QPW < GROUP * QPW ? g->N - p0 * QPW : GROUP * QPW; /* columns of the group */
        __mmask16 last = (__mmask16)((1u << (n - QPW * (np - 1))) - 1); /* the last panel's columns */
        if (job->isa == CPU_ISA_AMX)
            cpu_q_amx_group(g, p0, np, last);
        /* the next group's NN panels (prefetch.h), of STRIDE bytes a step of 4 columns */
        int nn = panels - p0 - np < GROUP ? panels - p0 - np : GROUP, steps = g->Kp / 4;
        size_t stride = q_wide(job->isa) && !g->comp ? 128 : 64; /* the 16-bit layout: 12-bit activations on AVX2 */
        const uint8_t *next = nn > 0 ? g->Wp + (size_t)(p0 + np) * (size_t)steps * stride : NULL;
        size_t lines = nn > 0 ? (size_t)nn * (size_t)steps * (stride / 64) : 0;
        for (int i = 0; job->isa == CPU_ISA_VNNI && i < g->M; i += MRV) {
            const char *pf = cpu_pf_plan(next, lines, i / MRV, (size_t)steps >> g->pf_shift);
            if (g->Au8)
                btile16_any(g, i, p0, g->M - i < MRV ? g->M - i : MRV, np, last, pf);
            else
                qtile16_any(g, i, p0, g->M - i < MRV ? g->M - i : MRV, np, last, pf);
        }
        for (int i = 0; job->isa < CPU_ISA_VNNI && i < g->M; i += MR8) {
            int rows = g->M - i < MR8 ? g->M - i : MR8;
            const char *pf = cpu_pf_plan(next, lines, i / MR8, (size_t)steps >> g->pf_shift);
            for (int p = p0; p < p0 + np; p++) {
                const char *pp = p == p0 ? pf : NULL; /* the first panel's loop makes the requests */
                if (g->Au7)
                    utile8_any(g, i, p, rows, n - (p - p0) * QPW, pp);
                else if (g->As8)
                    stile8_any(g, i, p, rows, n - (p - p0) * QPW, pp);
                else if (q_wide(job->isa))
                    qtile8_any(g, i, p, rows, n - (p - p0) * QPW, pp);
                else
                    qtile_plain(g, i, p, rows);
            }
        }
    }
    if (job->isa == CPU_ISA_AMX)
        cpu_q_amx_end();
}

int cpu_qbuf_reserve(nmt_bctx *ctx, size_t bytes)
{
    if (bytes <= ctx->qcap)
        return 0;
    size_t want = (bytes + bytes / 4 + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, want);
    if (!p)
        return cpu_err(ctx, "out of memory (%zu bytes for the converted rows of A)", want);
    free(ctx->qbuf);
    ctx->qbuf = p;
    ctx->qcap = want;
    return 0;
}

int cpu_linear_q_run(nmt_bctx *ctx, int M, int N, int K, const float *A, int lda, const void *data, int abits,
                     const float *bias, int relu, float *C, int ldc)
{
    int np = pad16(N), kp = pad4(K), ldq = (kp + 31) & ~31; /* int16 rows of 64-byte multiples */
    int isa = cpu_isa(), m16 = (M + 15) & ~15, a8 = abits <= 8;
    if (isa == CPU_ISA_AMX && (kp % 64 || M < AMX_MIN_ROWS))
        isa = CPU_ISA_VNNI; /* the same bits: the paths differ in speed only */
    /* the byte rows' stride: AMX's tiles read 16 rows at once, which a stride of a large power of
     * two (Kp = 2048) would put in a few sets of the first level cache */
    int ld8 = isa == CPU_ISA_AMX ? kp + 64 : kp;
    /* qbuf: the int16 rows, their scales (to a 64-byte boundary), then for AMX the split rows,
     * M rounded up to 16 (rows past M are zero); with 8- or 7-bit activations their scales and
     * bytes only (AMX: M rounded up to 16 rows likewise) */
    int amx8 = a8 && isa == CPU_ISA_AMX, u7 = abits == 7 && q_wide(isa);
    int mag8 = a8 && !u7 && q_wide(isa); /* the AVX2 tiles of 8-bit activations read the magnitudes too */
    size_t bytes8 = a8 && (isa == CPU_ISA_VNNI || q_wide(isa)) ? (size_t)M * (size_t)kp
                    : amx8                                    ? (size_t)m16 * (size_t)ld8
                                                              : 0;
    size_t qbytes = bytes8 ? 0 : (size_t)M * (size_t)ldq * sizeof(int16_t);
    size_t sbytes = ((size_t)M * sizeof(float) + 63) & ~(size_t)63;
    size_t splitbytes = isa == CPU_ISA_AMX && !a8 ? (size_t)m16 * (size_t)ld8 : 0;
    if (cpu_qbuf_reserve(ctx, qbytes + sbytes + 2 * splitbytes + (mag8 ? 2 : 1) * bytes8) < 0)
        return -1;
    const float *sw = data;
    int16_t *qa = ctx->qbuf;
    float *qs = (float *)((char *)ctx->qbuf + qbytes);
    uint8_t *lo = (uint8_t *)ctx->qbuf + qbytes + sbytes;
    int8_t *hi = (int8_t *)(lo + splitbytes);
    const int32_t *comp = a8 ? (const int32_t *)(sw + np) : NULL;
    size_t steps = (size_t)kp / 4, stride = q_wide(isa) && !a8 ? 128 : 64; /* qlinear_body's requests */
    int pf_shift = cpu_pf_shift(isa == CPU_ISA_VNNI ? (M + MRV - 1) / MRV : (M + MR8 - 1) / MR8, steps,
                                GROUP * steps * (stride / 64));
    struct qlin_job job = { { qa, qs, sw, (const uint8_t *)(sw + (a8 ? 2 : 1) * np), bias, C, M, N, kp, ldq, ldc,
                              relu != 0, lo, hi, ld8, bytes8 && isa == CPU_ISA_VNNI ? lo : NULL, comp,
                              mag8 || amx8 ? (const int8_t *)lo : NULL, mag8 ? lo + bytes8 : NULL, u7 ? lo : NULL,
                              pf_shift },
                            A, qa, qs, lo, hi, lda, K, isa, abits == 7 ? QA7_MAX : a8 ? QA8_MAX : QA_MAX };
    if (amx8)
        memset(lo + (size_t)M * (size_t)ld8, 0, (size_t)(m16 - M) * (size_t)ld8);
    if (splitbytes) {
        memset(lo + (size_t)M * (size_t)ld8, 0, (size_t)(m16 - M) * (size_t)ld8);
        memset(hi + (size_t)M * (size_t)ld8, 0, (size_t)(m16 - M) * (size_t)ld8);
    }
    pool_for(ctx->pool, M, (QGRAIN + K - 1) / K, quant_body, &job);
    int64_t groups = (N + GROUP * QPW - 1) / (GROUP * QPW), per = (int64_t)M * kp * GROUP * QPW;
    pool_for(ctx->pool, groups, (WORK_GRAIN + per - 1) / per, qlinear_body, &job);
    return 0;
}
