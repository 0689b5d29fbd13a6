/* bf16_spec.h: what the cpu plugin's bf16 products (plugins/cpu/gemm_bf16.h) compute, restated
 * from the instruction set reference for tests: each float32 operand's values below the normal
 * range made 0 (as vcvtne2ps2bf16 does), then rounded to bf16 (to nearest even; NaN quieted);
 * inputs and results below float32's normal range are 0 (DAZ, FTZ); then C = alpha * sum, + beta
 * * C where beta is not 0. The sums:
 *   - on the AMX tiles (gemm_bf16_amx.c; test_gemm_bf16 on the tile emulation, test_cpu_reduced on
 *     real tiles): for each element of C and each step of 32 values of K (zeros past K), two sums
 *     from 0 of the products of the even and of the odd values of K in increasing order, each a
 *     fused multiply-add; the element's sum += (even + odd);
 *   - with vdpbf16ps (gemm_bf16_dp.c; test_gemm_bf16, test_cpu_reduced): one sum from 0; for each
 *     pair of K (zeros past K, up to a multiple of 32) in increasing order, the odd product, then
 *     the even one, each a fused multiply-add. */
#ifndef NMT_TEST_BF16_SPEC_H
#define NMT_TEST_BF16_SPEC_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* X with DAZ and FTZ: 0 of its sign below the normal range. */
static float spec_flush(float x)
{
    return x != 0 && fabsf(x) < 1.17549435e-38f ? copysignf(0.0f, x) : x;
}

/* X rounded to bf16 (nearest even, NaN quieted), as a float32. */
static float spec_round_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if (isnan(x))
        u = (u >> 16 | 0x40) << 16;
    else
        u = (u + 0x7fffu + (u >> 16 & 1)) >> 16 << 16;
    memcpy(&x, &u, 4);
    return x;
}

/* Element (R, C) of op(X) for a stored X with leading dimension LD, rounded and flushed; 0 past K. */
static float spec_op(const float *X, int trans, int ld, int r, int c, int K, int c_is_k)
{
    int k = c_is_k ? c : r;
    if (k >= K)
        return 0;
    float v = trans ? X[(size_t)c * (size_t)ld + (size_t)r] : X[(size_t)r * (size_t)ld + (size_t)c];
    return spec_flush(spec_round_bf16(spec_flush(v)));
}

/* SUM as C's element *C: alpha * sum, + beta * C where beta is not 0. */
static void spec_put(float *c, float sum, float alpha, float beta)
{
    float v = alpha * sum;
    if (beta != 0)
        v = v + beta * *c;
    *c = v;
}

/* C (M,N) = alpha * op(A) op(B) + beta * C as the tiles compute it. */
static void spec_amx_bf16_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                               int ldb, float beta, float *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0;
            for (int k0 = 0; k0 < K; k0 += 32) {
                float e = 0, o = 0;
                for (int k = k0; k < k0 + 32; k += 2) {
                    e = spec_flush(fmaf(spec_op(A, ta, lda, i, k, K, 1), spec_op(B, tb, ldb, k, j, K, 0), e));
                    o = spec_flush(fmaf(spec_op(A, ta, lda, i, k + 1, K, 1), spec_op(B, tb, ldb, k + 1, j, K, 0), o));
                }
                acc = spec_flush(acc + spec_flush(e + o));
            }
            spec_put(C + (size_t)i * (size_t)ldc + (size_t)j, acc, alpha, beta);
        }
}

/* C (M,N) = alpha * op(A) op(B) + beta * C as vdpbf16ps computes it. */
static void spec_dp_bf16_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                              int ldb, float beta, float *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0;
            for (int k = 0; k < (K + 31) / 32 * 32; k += 2) { /* the zeros past K too (the sign of a zero sum) */
                acc = spec_flush(fmaf(spec_op(A, ta, lda, i, k + 1, K, 1), spec_op(B, tb, ldb, k + 1, j, K, 0), acc));
                acc = spec_flush(fmaf(spec_op(A, ta, lda, i, k, K, 1), spec_op(B, tb, ldb, k, j, K, 0), acc));
            }
            spec_put(C + (size_t)i * (size_t)ldc + (size_t)j, acc, alpha, beta);
        }
}

#endif
