/* mixed.c: the cpu backend's reduced-precision matrix products (ABI 2.2: set_precision, cast,
 * gemm_ex) and the bf16 path of gemm. Under set_precision(BF16) each operand is rounded to
 * bfloat16 (round to nearest even). On CPUs that multiply bf16 (AMX tiles, or AVX512-BF16) they
 * multiply the rounded operands (gemm_bf16.h). Elsewhere bf16 is emulated exactly: the rounded
 * values go into float32 copies, which OpenBLAS sgemm multiplies. The product of two bfloat16
 * values (8-bit significands) is exact in float32, so all three are what a tensor core computes
 * (bf16 inputs, float32 accumulation), up to the order of the sums (and, on the bf16 instructions,
 * values below float32's normal range read as 0): the numbers of bf16 training on any CPU, at the
 * instructions' speed where they exist. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "bf16.h"
#include "cpu.h"
#include "gemm_bf16.h"

/* X rounded to the nearest bfloat16 value, as a float. */
static inline float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

int cpu_set_precision(nmt_bctx *ctx, uint32_t dtype)
{
    if (dtype != NMT_DTYPE_F32 && dtype != NMT_DTYPE_BF16)
        return cpu_err(ctx, "set_precision: dtype %u not supported (float32 %d or bf16 %d)", (unsigned)dtype,
                       NMT_DTYPE_F32, NMT_DTYPE_BF16);
    ctx->precision = dtype;
    return 0;
}

int cpu_cast(nmt_bctx *ctx, void *dst, uint32_t dst_dtype, const void *src, uint32_t src_dtype, size_t n)
{
    int ok_d = dst_dtype == NMT_DTYPE_F32 || dst_dtype == NMT_DTYPE_BF16;
    int ok_s = src_dtype == NMT_DTYPE_F32 || src_dtype == NMT_DTYPE_BF16;
    if (!ok_d || !ok_s)
        return cpu_err(ctx, "cast: dtype %u to %u not supported (float32 %d and bf16 %d)", (unsigned)src_dtype,
                       (unsigned)dst_dtype, NMT_DTYPE_F32, NMT_DTYPE_BF16);
    if (!n)
        return 0;
    if (!dst || !src)
        return cpu_err(ctx, "cast: NULL pointer");
    if (dst_dtype == src_dtype) {
        memcpy(dst, src, n * (dst_dtype == NMT_DTYPE_F32 ? 4 : 2));
    } else if (dst_dtype == NMT_DTYPE_BF16) {
        uint16_t *d = dst;
        const float *s = src;
        for (size_t i = 0; i < n; i++)
            d[i] = f32_to_bf16(s[i]);
    } else {
        float *d = dst;
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++)
            d[i] = bf16_to_f32(s[i]);
    }
    return 0;
}

/* Makes ctx->mbuf hold FLOATS floats; 0 or -1. */
static int mbuf_reserve(nmt_bctx *ctx, size_t floats)
{
    if (floats <= ctx->mcap)
        return 0;
    float *p = aligned_alloc(64, (floats * sizeof(float) + 63) & ~(size_t)63);
    if (!p)
        return cpu_err(ctx, "gemm: out of memory (%zu bytes for the bf16 operands)", floats * sizeof(float));
    free(ctx->mbuf);
    ctx->mbuf = p;
    ctx->mcap = floats;
    return 0;
}

/* The operand stored as ROWS rows of COLS elements, LD apart, of DTYPE, into DST (dense, COLS
 * apart) as float32: bf16 values widened; float32 ones copied, or rounded to bf16 when ROUND. */
static void operand(float *dst, const void *src, uint32_t dtype, int rows, int cols, int ld, int round)
{
    for (int r = 0; r < rows; r++) {
        float *d = dst + (size_t)r * (size_t)cols;
        if (dtype == NMT_DTYPE_BF16) {
            const uint16_t *s = (const uint16_t *)src + (size_t)r * (size_t)ld;
            for (int c = 0; c < cols; c++)
                d[c] = bf16_to_f32(s[c]);
        } else {
            const float *s = (const float *)src + (size_t)r * (size_t)ld;
            for (int c = 0; c < cols; c++)
                d[c] = round ? round_bf16(s[c]) : s[c];
        }
    }
}

int cpu_gemm_ex(nmt_bctx *ctx, int transA, int transB, int M, int N, int K, float alpha, const void *A,
                uint32_t a_dtype, int lda, const void *B, uint32_t b_dtype, int ldb, float beta, float *C, int ldc)
{
    if ((a_dtype != NMT_DTYPE_F32 && a_dtype != NMT_DTYPE_BF16) || (b_dtype != NMT_DTYPE_F32 && b_dtype != NMT_DTYPE_BF16))
        return cpu_err(ctx, "gemm_ex: operand dtypes %u and %u not supported (float32 %d or bf16 %d)", (unsigned)a_dtype,
                       (unsigned)b_dtype, NMT_DTYPE_F32, NMT_DTYPE_BF16);
    int round = ctx->precision == NMT_DTYPE_BF16;
    if (!round && a_dtype == NMT_DTYPE_F32 && b_dtype == NMT_DTYPE_F32)
        return cpu_gemm_f32(ctx, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (cpu_check_gemm(ctx, "gemm_ex", transA, transB, M, N, K, lda, ldb, ldc) < 0)
        return -1;
    if (M == 0 || N == 0 || K == 0 || alpha == 0)
        return cpu_gemm_f32(ctx, transA, transB, M, N, K, alpha, NULL, lda, NULL, ldb, beta, C, ldc);
    int tiles = cpu_isa() == CPU_ISA_AMX;
    if (round && (tiles || cpu_bf16()) && K <= INT_MAX - BF16_STEP) { /* the bf16 instructions (gemm_bf16.h) */
        if (mbuf_reserve(ctx, (cpu_gemm_bf16_bytes(M, N, K) + sizeof(float) - 1) / sizeof(float)) < 0)
            return -1;
        return cpu_gemm_bf16(ctx, ctx->mbuf, tiles ? cpu_gemm_bf16_amx_body : cpu_gemm_bf16_dp_body, cpu_bf16(), transA,
                             transB, M, N, K, alpha, A, a_dtype == NMT_DTYPE_BF16, lda, B, b_dtype == NMT_DTYPE_BF16, ldb,
                             beta, C, ldc);
    }
    int ar = transA ? K : M, ac = transA ? M : K, br = transB ? N : K, bc = transB ? K : N;
    size_t na = (size_t)ar * (size_t)ac, nb = (size_t)br * (size_t)bc;
    if (mbuf_reserve(ctx, na + nb) < 0)
        return -1;
    float *a = ctx->mbuf, *b = ctx->mbuf + na;
    operand(a, A, a_dtype, ar, ac, lda, round);
    operand(b, B, b_dtype, br, bc, ldb, round);
    return cpu_gemm_f32(ctx, transA, transB, M, N, K, alpha, a, ac, b, bc, beta, C, ldc);
}
