/* cpu.h: internals of the cpu backend plugin (context, thread pool, vector helpers). */
#ifndef NMT_CPU_H
#define NMT_CPU_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../backend.h"
#include "isa.h"

/* A body run by the pool on the index range [lo, hi) by worker TID (0 = the calling thread). */
typedef void (*pool_fn)(void *arg, int64_t lo, int64_t hi, int tid);

struct pool;
/* Starts NTHREADS-1 workers (the caller is thread 0); returns the pool or NULL. */
struct pool *pool_new(int nthreads);
/* Joins the workers and frees POOL; NULL is a no-op. */
void pool_free(struct pool *p);
/* Whether idle threads spin briefly before sleeping (the default) or sleep at once; P may be NULL. */
void pool_set_spin(struct pool *p, int spin);
/* Runs FN over [0, N) split into at most nthreads contiguous chunks of at least GRAIN indices;
 * returns when all are done. Results must not depend on the split. */
void pool_for(struct pool *p, int64_t n, int64_t grain, pool_fn fn, void *arg);

struct nmt_bctx {
    int threads;
    struct pool *pool;
    char err[512];
    void **bufs; /* live allocations, freed by close */
    size_t nbufs, capbufs;
    float *pe;   /* (pe_rows, pe_d) sinusoidal position table */
    int pe_rows, pe_d;
    void *scratch; /* threads * scratch_per bytes of per-thread scratch */
    size_t scratch_per;
    void *qbuf;    /* the rows of A converted by the int8 and bf16 linear layers (linear_q.c, linear_bf16.c) */
    size_t qcap;   /* bytes of qbuf */
    uint32_t precision; /* of gemm and gemm_ex: NMT_DTYPE_F32 (0 reads as F32) or NMT_DTYPE_BF16 */
    float *mbuf;   /* the bf16-rounded operands of gemm and gemm_ex (mixed.c) */
    size_t mcap;   /* floats of mbuf */
};

/* linear_packed_bytes, linear_pack, linear_rowinv, linear_packed_bytes_q, linear_pack_q and
 * linear_rows (plugins/backend.h), in linear.c. */
size_t cpu_linear_packed_bytes(nmt_bctx *ctx, int N, int K);
int cpu_linear_pack(nmt_bctx *ctx, void *dst, const float *W, int N, int K, int ldw);
int cpu_linear_rowinv(nmt_bctx *ctx, int M, int N, int K, const float *A, int lda, const void *Wp,
                      const float *bias, int relu, float *C, int ldc);
size_t cpu_linear_packed_bytes_q(nmt_bctx *ctx, int N, int K, uint32_t dtype);
int cpu_linear_pack_q(nmt_bctx *ctx, void *dst, const float *W, int N, int K, int ldw, uint32_t dtype);
int cpu_linear_rows(nmt_bctx *ctx, float *out, const void *packed, const int32_t *rows, int n);

/* Every weight packed by linear_pack or linear_pack_q starts with this header (one cache line);
 * its data follow (linear.c, linear_q.c). */
struct lin_hdr {
    uint32_t magic; /* LIN_MAGIC */
    uint32_t dtype; /* NMT_DTYPE_F32, NMT_DTYPE_INT8, NMT_DTYPE_INT8A8, NMT_DTYPE_INT8A7 or NMT_DTYPE_BF16 */
    int32_t N, K;   /* the weight's shape */
    uint8_t pad[48];
};
#define LIN_MAGIC 0x504d4e4eu /* "NNMP" */
#define LIN_HDR sizeof(struct lin_hdr)
/* The largest K of the int8 layer: 2047 * 127 * K stays below 2^31 (linear_q.c). */
#define LIN_Q_MAXK 8192

/* int8 weights (linear_q.c), for 12-bit activations or, A8 non-zero, for 8- or 7-bit ones
 * (NMT_DTYPE_INT8A8, NMT_DTYPE_INT8A7: the same packing, with compensations): bytes after the
 * header for W (N,K); packs W into DATA (after the header; 0, or -1 with the error set: a
 * non-finite weight, K too large); the int8 linear layer on such a weight with activations on a
 * grid of ABITS bits (12, 8 or 7; 8 and 7 on a weight packed with A8; arguments as linear_rowinv's,
 * checked by the caller; 0 or -1). */
size_t cpu_linear_q_bytes(int N, int K, int a8);
int cpu_linear_q_pack(nmt_bctx *ctx, void *data, const float *W, int N, int K, int ldw, int a8);
int cpu_linear_q_run(nmt_bctx *ctx, int M, int N, int K, const float *A, int lda, const void *data, int abits,
                     const float *bias, int relu, float *C, int ldc);
/* Makes ctx->qbuf hold BYTES (the rows of A converted by the int8 and bf16 layers); 0 or -1. */
int cpu_qbuf_reserve(nmt_bctx *ctx, size_t bytes);

/* bf16 weights (linear_bf16.c), as the int8 ones above; only where cpu_bf16() says so. */
size_t cpu_linear_bf16_bytes(int N, int K);
int cpu_linear_bf16_pack(nmt_bctx *ctx, void *data, const float *W, int N, int K, int ldw);
int cpu_linear_bf16_run(nmt_bctx *ctx, int M, int N, int K, const float *A, int lda, const void *data,
                        const float *bias, int relu, float *C, int ldc);
/* 1 when the bf16 layer can run: the CPU has AVX512-BF16 and NMT_CPU_ISA allows AVX-512. */
int cpu_bf16(void);
/* mixed.c: set_precision, cast and gemm_ex (plugins/backend.h, ABI 2.2). */
int cpu_set_precision(nmt_bctx *ctx, uint32_t dtype);
int cpu_cast(nmt_bctx *ctx, void *dst, uint32_t dst_dtype, const void *src, uint32_t src_dtype, size_t n);
int cpu_gemm_ex(nmt_bctx *ctx, int transA, int transB, int M, int N, int K, float alpha, const void *A,
                uint32_t a_dtype, int lda, const void *B, uint32_t b_dtype, int ldb, float beta, float *C, int ldc);
/* blas.c: opens OpenBLAS once per process (setting OPENBLAS_THREAD_TIMEOUT first where unset);
 * NULL, or the reason it cannot be used. */
const char *cpu_blas_open(void);
/* blas.c: OpenBLAS's thread count (process-wide); only after cpu_blas_open succeeded. */
void cpu_blas_set_threads(int threads);
/* blas.c: OpenBLAS's name of the CPU core it tuned for, or "?". */
const char *cpu_blas_corename(void);
/* blas.c: the float32 product of gemm (OpenBLAS sgemm; A and B are read only when M, N, K > 0 and
 * alpha != 0), whatever the context's precision; 0 or -1. */
int cpu_gemm_f32(nmt_bctx *ctx, int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc);
/* blas.c: 0 if gemm's sizes and leading dimensions are valid, else -1 with the error naming WHAT. */
int cpu_check_gemm(nmt_bctx *ctx, const char *what, int transA, int transB, int M, int N, int K, int lda, int ldb,
                   int ldc);
/* attention.c: attention_forward_rows (ABI 2.8). */
int cpu_attention_forward_rows(nmt_bctx *ctx, float *out, const float *q, const float *k, const float *v,
                               const struct nmt_attn_args *a, const int32_t *rows, int64_t rows_ld);
/* attention.c: attention_forward_lse and attention_backward_lse (ABI 2.2). */
int cpu_attention_forward_lse(nmt_bctx *ctx, float *out, float *lse, const float *q, const float *k, const float *v,
                              const struct nmt_attn_args *a);
int cpu_attention_backward_lse(nmt_bctx *ctx, float *dq, float *dk, float *dv, const float *dout, const float *out,
                               const float *lse, const float *q, const float *k, const float *v,
                               const struct nmt_attn_args *a);
/* ctx.c: sets CTX's error text (a thread's own when CTX is NULL: a failed open); returns -1. */
int cpu_err(struct nmt_bctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* ctx.c: the last error text of CTX, or of this thread's failed open when CTX is NULL. */
const char *cpu_err_text(const struct nmt_bctx *ctx);
/* ctx.c: makes sure each thread has PER bytes of scratch (64-byte aligned); 0 or -1 with the error set. */
int cpu_scratch(struct nmt_bctx *ctx, size_t per);
/* Returns thread TID's scratch area. */
static inline void *cpu_scratch_of(struct nmt_bctx *ctx, int tid)
{
    return (char *)ctx->scratch + (size_t)tid * ctx->scratch_per;
}

/* ---- vector helpers: multi-lane accumulators so the compiler vectorises without reassociating
 * anything the C source does not say; the order of operations is fixed. The products over a row
 * (vdot, vaxpy) are written on GCC's vector type of LANES floats, so that every clone of a loop
 * (isa.h) and every build, sanitizers included (whose checks stop GCC from vectorising plain
 * loops), computes LANES lanes an instruction or a few; each lane's operations are those of the
 * plain loop, so the bits are too. ---- */
#define LANES 16
typedef float vlanes __attribute__((vector_size(LANES * sizeof(float))));
/* the same, read and written at any float's address */
typedef float vlanes_at __attribute__((vector_size(LANES * sizeof(float)), aligned(sizeof(float)), may_alias));

static inline __attribute__((always_inline)) float vsum(const float *x, int64_t n)
{
    float acc[LANES] = { 0 };
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] += x[i + l];
    for (int l = 0; i < n; i++, l++)
        acc[l] += x[i];
    float s = 0;
    for (int l = 0; l < LANES; l++)
        s += acc[l];
    return s;
}

/* sum of a[i] * b[i], i < n: lane l sums the products i = l mod LANES in order (the last n mod
 * LANES products in lanes 0, 1, ...), then the lanes are added in order */
static inline __attribute__((always_inline)) float vdot(const float *a, const float *b, int64_t n)
{
    vlanes acc = { 0 };
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        acc += *(const vlanes_at *)(a + i) * *(const vlanes_at *)(b + i);
    if (i < n) { /* the other lanes add +0: a -0 among them turns +0, which leaves the sum below as it is */
        float t[LANES] = { 0 };
        for (int l = 0; i < n; i++, l++)
            t[l] = a[i] * b[i];
        acc += *(const vlanes_at *)t;
    }
    float s = 0;
    #pragma GCC unroll 16
    for (int l = 0; l < LANES; l++)
        s += acc[l];
    return s;
}

/* y[i] += s * x[i], i < n (a product, then a sum); y and x do not overlap */
static inline __attribute__((always_inline)) void vaxpy(float *y, float s, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        *(vlanes_at *)(y + i) += s * *(const vlanes_at *)(x + i);
    for (; i < n; i++)
        y[i] += s * x[i];
}

static inline __attribute__((always_inline)) float vmax(const float *x, int64_t n)
{
    float acc[LANES];
    int64_t i = 0;
    for (int l = 0; l < LANES; l++)
        acc[l] = x[0];
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
    for (int l = 0; i < n; i++, l++)
        acc[l] = x[i] > acc[l] ? x[i] : acc[l];
    float m = acc[0];
    for (int l = 1; l < LANES; l++)
        m = acc[l] > m ? acc[l] : m;
    return m;
}

/* exp(x) for x <= 0 region and moderate positives, relative error about 2e-7; vectorisable
 * (range reduction by a round-to-nearest magic constant, degree-6 polynomial, exponent bits). */
static inline __attribute__((always_inline)) float vexp(float x)
{
    float x0 = x;                                   /* a NaN input gives a NaN result */
    x = x > -87.0f ? x : -87.0f;                     /* NaN becomes -87 here: no undefined cast below */
    x = x < 88.0f ? x : 88.0f;
    float t = x * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    float r = x - n * 0.693145751953125f - n * 1.42860682030941723e-06f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    union { float f; int32_t i; } u;
    u.i = (int32_t)((uint32_t)((int32_t)n + 127) << 23);
    return x0 == x0 ? p * u.f : x0;
}

/* nmt_rng_uniform (backend.h), restated so that it is always inlined into the vectorised clones;
 * tests check that both give the same masks. */
static inline __attribute__((always_inline)) uint64_t rng_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
/* The keyed seed rng_mix(seed + 0x632BE59BD9B4E019) is computed once per call by the caller. */
static inline __attribute__((always_inline)) float rng_uniform_keyed(uint64_t key, uint64_t counter)
{
    return (float)(int32_t)(rng_mix(counter * 0x9E3779B97F4A7C15ULL + key) >> 40) * (1.0f / 16777216.0f);
}
static inline uint64_t rng_key(uint64_t seed) { return rng_mix(seed + 0x632BE59BD9B4E019ULL); }

#endif
