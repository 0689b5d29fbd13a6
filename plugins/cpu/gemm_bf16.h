/* gemm_bf16.h: the bf16 matrix products of gemm and gemm_ex under set_precision(BF16) on CPUs
 * that multiply bf16 (mixed.c picks the path): the operands rounded and packed once
 * (gemm_bf16.c), then multiplied by the AMX tiles (gemm_bf16_amx.c) or by AVX512-BF16's vdpbf16ps
 * (gemm_bf16_dp.c).
 *
 * op(A) (M,K) and op(B) (K,N) are rounded to bfloat16 (float32 values below the normal range, which
 * the instructions read as 0, as 0; the others as f32_to_bf16 in bf16.h rounds them; bf16 operands
 * as they are) into packed copies:
 *   - A as Mp / 16 row tiles (M rounded up to 32, zero rows past M), each Kp / 32 A tiles in
 *     turn (K rounded up to 32, zeros past K): 16 rows of 32 values, 1 KB, read as one stream;
 *     packed a row tile at a time where op(A) = A, a step of K at a time from whole rows of A
 *     where op(A) = A^T (transposed in registers), so that A is always read along its rows;
 *   - B as Np / 16 panels (N rounded up to 32) of 16 columns, each Kp / 2 rows of 64 bytes: row g
 *     holds, for c = 0..15, op(B)[2g][c] and op(B)[2g+1][c]. 16 such rows are a B tile: 32 values
 *     of K by 16 columns, the pairs tdpbf16ps multiplies; one row is the pairs vdpbf16ps
 *     multiplies by a broadcast pair of A.
 * Each path sums every element of C by itself, from its own row of op(A) and column of op(B)
 * only, in an order fixed by K: the same bits whatever M, N, its place or the thread count
 * (threads split the columns). Then C = alpha * sum, + beta * C where beta is not 0 (as gemm.c's
 * put). */
#ifndef NMT_CPU_GEMM_BF16_H
#define NMT_CPU_GEMM_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "cpu.h"

#define BF16_STEP 32 /* K values of a packed A tile; columns of a block of C */

/* One product and its packed operands (the argument of the bodies below). */
struct bf16_gemm {
    const void *A, *B;
    int a_bf16, b_bf16, transA, transB, lda, ldb;
    uint16_t *pa, *pb; /* the packed copies */
    int M, N, K, Kp;   /* Kp: K rounded up to BF16_STEP */
    float alpha, beta;
    float *C;
    int ldc;
};

/* The bytes of work cpu_gemm_bf16 needs for M, N, K (the two packed copies). */
size_t cpu_gemm_bf16_bytes(int M, int N, int K);
/* C = alpha * op(A) op(B) + beta * C with the operands (bf16 where A_BF16, B_BF16, else float32)
 * rounded to bf16 and packed into WORK, then BODY (one of the two below) run by the pool over C's
 * blocks of 32 columns. NE (only where the CPU has AVX512-BF16) rounds with vcvtne2ps2bf16, else
 * integer instructions compute the same. Sizes checked by the caller, M, N, K > 0 and alpha != 0.
 * Returns 0. */
int cpu_gemm_bf16(nmt_bctx *ctx, void *work, pool_fn body, int ne, int transA, int transB, int M, int N, int K,
                  float alpha, const void *A, int a_bf16, int lda, const void *B, int b_bf16, int ldb, float beta, float *C,
                  int ldc);
/* Column blocks [lo, hi) of C (32 columns each) from the packed operands of ARG (a struct
 * bf16_gemm): on the AMX tiles (only where cpu_isa() is CPU_ISA_AMX; gemm_bf16_amx.c states the
 * order of the sums) or with vdpbf16ps (only where cpu_bf16(); gemm_bf16_dp.c). */
void cpu_gemm_bf16_amx_body(void *arg, int64_t lo, int64_t hi, int tid);
void cpu_gemm_bf16_dp_body(void *arg, int64_t lo, int64_t hi, int tid);

#endif
