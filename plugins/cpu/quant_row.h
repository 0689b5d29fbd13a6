/* quant_row.h: the per-row int8 quantisation of the cpu plugin's int8 weights (linear_q.c, which
 * states the scheme; its activations have 12 bits), shared with bench/onednn_bench.c, whose oneDNN
 * figures quantise activations with it to 8 bits. Header-only: static inline functions, the AVX2 one compiled for AVX2 by attribute
 * (call it only where the CPU has AVX2). Every path gives the same bits. */
#ifndef NMT_CPU_QUANT_ROW_H
#define NMT_CPU_QUANT_ROW_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "isa.h"

/* The scale of K values whose largest magnitude is AMAX on the grid -TOP..TOP: 0 for a zero row
 * (or one so small that TOP / max overflows), NaN for a row with a non-finite value, else
 * max / TOP; *INV receives TOP / max. Each path finds the same max (a max is exact), so they agree. */
static inline float quant_scale_top(float amax, int finite, float top, float *inv)
{
    *inv = top / amax;
    if (!finite)
        return NAN;
    if (amax == 0 || !(*inv <= 3.40282347e38f))
        return 0.0f;
    return amax / top;
}

/* quant_scale_top on the int8 grid, -127..127. */
static inline float quant_scale(float amax, int finite, float *inv) { return quant_scale_top(amax, finite, 127.0f, inv); }

/* The largest |x| of the K values X; *FINITE becomes 0 when one is NaN or infinite. */
static inline float row_absmax_plain(const float *x, int K, int *finite)
{
    float amax = 0;
    int ok = 1;
    for (int k = 0; k < K; k++) {
        float a = fabsf(x[k]);
        ok &= a <= 3.40282347e38f; /* false for NaN and infinities */
        amax = a > amax ? a : amax;
    }
    *finite = ok;
    return amax;
}

/* row_absmax_plain with AVX2 on blocks of 8 values (32 a step in four running maxima, so that no
 * one chain of dependent maxima sets the pace), the tail in C: the same max, which does not depend
 * on the order. */
ISA_AVX2 static inline float row_absmax_avx2(const float *x, int K, int *finite)
{
    __m256 big = _mm256_set1_ps(3.40282347e38f), sign = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 mx[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    __m256 bad[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    int k = 0;
    for (; k + 32 <= K; k += 32)
        for (int j = 0; j < 4; j++) {
            __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + k + 8 * j), sign);
            bad[j] = _mm256_or_ps(bad[j], _mm256_cmp_ps(a, big, _CMP_NLE_UQ)); /* NaN and infinities */
            mx[j] = _mm256_max_ps(a, mx[j]);
        }
    for (; k + 8 <= K; k += 8) {
        __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + k), sign);
        bad[0] = _mm256_or_ps(bad[0], _mm256_cmp_ps(a, big, _CMP_NLE_UQ));
        mx[0] = _mm256_max_ps(a, mx[0]);
    }
    __m256 m = _mm256_max_ps(_mm256_max_ps(mx[0], mx[1]), _mm256_max_ps(mx[2], mx[3]));
    __m256 b = _mm256_or_ps(_mm256_or_ps(bad[0], bad[1]), _mm256_or_ps(bad[2], bad[3]));
    float lane[8], amax = 0;
    _mm256_storeu_ps(lane, m);
    for (int l = 0; l < 8; l++)
        amax = lane[l] > amax ? lane[l] : amax;
    int ok;
    float tail = row_absmax_plain(x + k, K - k, &ok);
    *finite = ok && !_mm256_movemask_ps(b);
    return tail > amax ? tail : amax;
}

/* Quantises the K values X into Q (Kp bytes, zeros past K); returns the scale (quant_scale). */
static inline float quant_row_plain(int8_t *q, const float *x, int K, int Kp)
{
    int finite;
    float amax = row_absmax_plain(x, K, &finite), inv, s = quant_scale(amax, finite, &inv);
    for (int k = 0; k < Kp; k++) {
        float r = k < K && s > 0 ? rintf(x[k] * inv) : 0.0f; /* to nearest even */
        r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
        q[k] = (int8_t)r;
    }
    return s;
}

/* quant_row_plain on the grid -TOP..TOP (TOP at most 127) with AVX2 on blocks of 8 values, the
 * tail in C: the same bits as quant_row_plain where TOP is 127. */
ISA_AVX2 static inline float quant_row_top_avx2(int8_t *q, const float *x, int K, int Kp, int top)
{
    int finite, k = 0;
    float amax = row_absmax_avx2(x, K, &finite), inv, s = quant_scale_top(amax, finite, (float)top, &inv);
    __m256 vinv = _mm256_set1_ps(inv);
    __m256i lo = _mm256_set1_epi32(-top), hi = _mm256_set1_epi32(top);
    for (; s > 0 && k + 8 <= K; k += 8) {
        __m256i r = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k), vinv));
        r = _mm256_min_epi32(_mm256_max_epi32(r, lo), hi);
        __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storel_epi64((__m128i *)(q + k), _mm_packs_epi16(w, w));
    }
    for (; k < Kp; k++) {
        float r = k < K && s > 0 ? rintf(x[k] * inv) : 0.0f;
        r = r > (float)top ? (float)top : r < -(float)top ? -(float)top : r;
        q[k] = (int8_t)r;
    }
    return s;
}

/* quant_row_plain with AVX2: the same bits. */
ISA_AVX2 static inline float quant_row_avx2(int8_t *q, const float *x, int K, int Kp)
{
    return quant_row_top_avx2(q, x, K, Kp, 127);
}

#endif
