/* cuda.h: internals of the cuda backend plugin (context, error helpers, device-side helpers shared
 * by cuda.cu, kernels.cu and attention.cu). Compiled as CUDA C++ by nvcc; see plugins/backend.h for
 * the contract of every kernel. */
#ifndef NMT_CUDA_H
#define NMT_CUDA_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "../backend.h"
}

/* cuBLAS is loaded by open() (dlopen), not linked: loading libcublas costs about a second and
 * hundreds of megabytes of mappings, which every `--backend auto` on a machine without a GPU would
 * otherwise pay. These are the few entry points used, typed from cuBLAS's own header. */
struct cu_blas {
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasGetStatusString) status_string;
    decltype(&cublasSgemm_v2) sgemm;
    /* bf16 products (set_precision, gemm_ex): the C entry point of cublasGemmEx (C++ overloads it) */
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                              const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                              cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
};

/* First data error seen by a kernel (an id or target out of range), reported at the next point
 * where the host waits (download, cross_entropy, sumsq): device kernels cannot return. */
struct cu_flag {
    int code;  /* CU_BAD_* or 0 */
    int row;   /* row or element where it was seen */
    int value; /* the offending value */
    int limit; /* the bound it broke */
};
enum { CU_BAD_NONE, CU_BAD_EMB_ID, CU_BAD_EMB_BWD_ID, CU_BAD_TARGET, CU_BAD_GATHER, CU_BAD_KLEN };

struct nmt_bctx {
    int device;
    char devname[96];
    cudaStream_t stream;
    cublasHandle_t blas;
    char err[512];
    void **bufs; /* live allocations, freed by close */
    size_t nbufs, capbufs;
    void *scratch; /* device scratch, grown on demand (cu_scratch) */
    size_t scratch_bytes;
    struct cu_flag *flag;   /* device */
    struct cu_flag *hflag;  /* pinned host copy */
    double *hres;           /* pinned host results (cross_entropy, sumsq) */
    uint32_t precision;     /* of gemm and gemm_ex: NMT_DTYPE_F32 (0 reads as F32) or NMT_DTYPE_BF16 */
};

extern struct cu_blas cu_blas;

/* Sets CTX's error text (CTX NULL: the open() error of this thread); returns -1. */
int cu_err(struct nmt_bctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Returns 0 if RC is cudaSuccess, else -1 with "WHAT: <cuda error text>" set. */
int cu_check(struct nmt_bctx *ctx, cudaError_t rc, const char *what);
/* After a kernel launch: 0, or -1 naming the kernel if the launch failed. */
int cu_launched(struct nmt_bctx *ctx, const char *kernel);
/* Makes sure the scratch has BYTES bytes; returns it, or NULL with the error set. */
void *cu_scratch(struct nmt_bctx *ctx, size_t bytes);
/* Waits for the stream, then reports any data error flagged by a kernel; 0 or -1. */
int cu_wait(struct nmt_bctx *ctx, const char *what);
/* Makes CTX's device current on this host thread (a context may move between threads). */
static inline void cu_enter(struct nmt_bctx *ctx)
{
    if (ctx->device != 0)
        cudaSetDevice(ctx->device);
}
/* Number of blocks of THREADS threads for N independent items, capped for grid-stride loops. */
static inline unsigned cu_blocks(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    if (b > 65535u * 8u)
        b = 65535u * 8u;
    return b ? (unsigned)b : 1u;
}

#ifdef __CUDACC__
/* Launch geometry of a ROWS x COLS loop (CU_FOR_ROWS_COLS): grid y strides the rows, grid x times
 * THREADS the columns, so no thread divides an element index by the row length. */
static inline dim3 cu_grid_2d(size_t rows, size_t cols, unsigned threads)
{
    return dim3(cu_blocks(cols, threads), rows < 65535u ? (unsigned)rows : 65535u);
}
/* Visits (R, C) for R < ROWS, C < COLS in a kernel launched with cu_grid_2d. */
#define CU_FOR_ROWS_COLS(R, C, ROWS, COLS)                                                                    \
    for (size_t R = blockIdx.y; R < (size_t)(ROWS); R += gridDim.y)                                         \
        for (size_t C = (size_t)blockIdx.x * blockDim.x + threadIdx.x; C < (size_t)(COLS);                  \
             C += (size_t)gridDim.x * blockDim.x)

/* The normative dropout RNG of plugins/backend.h (nmt_rng_mix64, nmt_rng_uniform), for the device:
 * must stay identical to it (the op test compares masks with the cpu plugin's). */
__device__ __forceinline__ uint64_t cu_rng_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
__device__ __forceinline__ float cu_rng_uniform(uint64_t seed, uint64_t counter)
{
    uint64_t z = cu_rng_mix64(counter * 0x9E3779B97F4A7C15ULL + cu_rng_mix64(seed + 0x632BE59BD9B4E019ULL));
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

/* Records the first data error (later ones are dropped). */
__device__ __forceinline__ void cu_report(struct cu_flag *f, int code, int row, int value, int limit)
{
    if (atomicCAS(&f->code, 0, code) == 0) {
        f->row = row;
        f->value = value;
        f->limit = limit;
    }
}

__device__ __forceinline__ float cu_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float cu_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Sum of V over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
 * SH: 32 floats of shared memory. Fixed order: deterministic. */
__device__ __forceinline__ float cu_block_sum(float v, float *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_sum(v);
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return cu_warp_sum(v);
}
__device__ __forceinline__ float cu_block_max(float v, float *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_max(v);
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return cu_warp_max(v);
}
#endif

/* kernels.cu, attention.cu (signatures of plugins/backend.h) */
int cu_scale_matrix(nmt_bctx *ctx, float *C, int M, int N, int ldc, float beta);
int cu_bias_add(nmt_bctx *ctx, float *out, const float *bias, int M, int N);
int cu_bias_grad(nmt_bctx *ctx, float *dbias, const float *dout, int M, int N);
int cu_embedding_forward(nmt_bctx *ctx, float *out, const int32_t *ids, const int32_t *pos, const float *emb, int N,
                         int D, int V, float scale);
int cu_embedding_backward(nmt_bctx *ctx, float *demb, const float *dout, const int32_t *ids, const int32_t *pos, int N,
                          int D, int V, float scale);
int cu_embedding_table_forward(nmt_bctx *ctx, float *out, const int32_t *ids, const int32_t *pos, const float *emb,
                               const float *pe, int N, int D, int V, int P, float scale);
int cu_embedding_table_backward(nmt_bctx *ctx, float *demb, const float *dout, const int32_t *ids, const int32_t *pos,
                                int N, int D, int V, float scale);
int cu_attention_forward(nmt_bctx *ctx, float *out, float *P, const float *q, const float *k, const float *v,
                         const struct nmt_attn_args *a);
int cu_attention_backward(nmt_bctx *ctx, float *dq, float *dk, float *dv, const float *dout, const float *q,
                          const float *k, const float *v, const float *P, const struct nmt_attn_args *a);
int cu_layernorm_forward(nmt_bctx *ctx, float *out, float *mean, float *rstd, const float *x, const float *gamma,
                         const float *beta, int N, int D, float eps);
int cu_layernorm_backward(nmt_bctx *ctx, float *dx, float *dgamma, float *dbeta, const float *dout, const float *x,
                          const float *mean, const float *rstd, const float *gamma, int N, int D);
int cu_add(nmt_bctx *ctx, float *out, const float *a, const float *b, size_t n);
int cu_relu_forward(nmt_bctx *ctx, float *out, const float *x, size_t n);
int cu_relu_backward(nmt_bctx *ctx, float *dx, const float *dout, const float *y, size_t n);
int cu_swish_forward(nmt_bctx *ctx, float *out, const float *x, size_t n);
int cu_swish_backward(nmt_bctx *ctx, float *dx, const float *dout, const float *x, size_t n);
int cu_dropout_forward(nmt_bctx *ctx, float *out, const float *x, size_t n, float p, uint64_t seed, uint64_t offset);
int cu_dropout_backward(nmt_bctx *ctx, float *dx, const float *dout, size_t n, float p, uint64_t seed,
                        uint64_t offset);
int cu_cross_entropy(nmt_bctx *ctx, struct nmt_xent_result *res, float *dlogits, float *row_nll, const float *logits,
                     const int32_t *tgt, int N, int V, float eps, int pad_id, float grad_scale);
int cu_adam_update(nmt_bctx *ctx, float *param, float *m, float *v, const float *grad, size_t n, float lr,
                   float beta1, float beta2, float eps, int64_t t, float grad_scale);
int cu_sumsq(nmt_bctx *ctx, double *out, const float *x, size_t n);
int cu_topk_logsoftmax(nmt_bctx *ctx, float *values, int32_t *indices, const float *logits, int N, int V, int K);
int cu_topk_logits(nmt_bctx *ctx, float *values, int32_t *indices, const float *logits, int N, int V, int K);
int cu_gather_rows(nmt_bctx *ctx, float *dst, const float *src, const int32_t *idx, int N, int64_t row);
/* ABI 2.2 (attention.cu, kernels.cu) */
int cu_attention_forward_lse(nmt_bctx *ctx, float *out, float *lse, const float *q, const float *k, const float *v,
                             const struct nmt_attn_args *a);
int cu_attention_backward_lse(nmt_bctx *ctx, float *dq, float *dk, float *dv, const float *dout, const float *out,
                              const float *lse, const float *q, const float *k, const float *v,
                              const struct nmt_attn_args *a);
int cu_cast(nmt_bctx *ctx, void *dst, uint32_t dst_dtype, const void *src, uint32_t src_dtype, size_t n);
/* DST (ROWS, COLS) dense of DST_DTYPE = SRC (ROWS rows of COLS elements, LD apart) of SRC_DTYPE,
 * converted as cast does (F32 or BF16 each); queued on the stream. 0 or -1. */
int cu_cast_2d(nmt_bctx *ctx, void *dst, uint32_t dst_dtype, const void *src, uint32_t src_dtype, int rows, int cols,
               int ld);

#endif
