/* cuda.cu: the cuda backend: probing, context, device memory, errors, matrix products through
 * cuBLAS, and the table. The kernels are in kernels.cu and attention.cu.
 *
 * The CUDA runtime is linked statically and loads the driver (libcuda.so.1) only when first used;
 * cuBLAS is loaded by open(). So the plugin loads on a machine without a GPU or driver, and score()
 * returns 0 there without touching the runtime. All work is queued on one stream per context;
 * download, cross_entropy and sumsq wait for it. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"

struct cu_blas cu_blas;

static thread_local char open_err[512];

int cu_err(struct nmt_bctx *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx ? ctx->err : open_err, ctx ? sizeof ctx->err : sizeof open_err, fmt, ap);
    va_end(ap);
    return -1;
}

int cu_check(struct nmt_bctx *ctx, cudaError_t rc, const char *what)
{
    if (rc == cudaSuccess)
        return 0;
    cudaGetLastError(); /* clear a non-sticky error so later calls are not blamed for it */
    return cu_err(ctx, "%s: %s (%s)", what, cudaGetErrorString(rc), cudaGetErrorName(rc));
}

int cu_launched(struct nmt_bctx *ctx, const char *kernel)
{
    cudaError_t rc = cudaGetLastError();
    if (rc == cudaSuccess)
        return 0;
    return cu_err(ctx, "%s: kernel launch failed: %s (%s)", kernel, cudaGetErrorString(rc), cudaGetErrorName(rc));
}

/* Out-of-memory text: what was asked, what is free, and the usual remedy. */
static int oom(struct nmt_bctx *ctx, const char *call, size_t bytes)
{
    size_t fr = 0, tot = 0;
    cudaGetLastError();
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
        fr = tot = 0, cudaGetLastError();
    return cu_err(ctx,
                  "%s: out of device memory: %zu bytes (%.1f MiB) asked, %.1f MiB free of %.1f MiB on %s; "
                  "try a smaller --max-tokens",
                  call, bytes, bytes / 1048576.0, fr / 1048576.0, tot / 1048576.0, ctx->devname);
}

void *cu_scratch(struct nmt_bctx *ctx, size_t bytes)
{
    if (bytes <= ctx->scratch_bytes)
        return ctx->scratch;
    bytes = (bytes + 4095) & ~(size_t)4095;
    if (ctx->scratch_bytes && bytes < 2 * ctx->scratch_bytes)
        bytes = 2 * ctx->scratch_bytes;
    void *p = NULL;
    /* the kernels queued so far may still use the old scratch */
    if (ctx->scratch && (cu_check(ctx, cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize (scratch)") < 0 ||
                         cu_check(ctx, cudaFree(ctx->scratch), "cudaFree (scratch)") < 0))
        return NULL;
    ctx->scratch = NULL;
    ctx->scratch_bytes = 0;
    cudaError_t rc = cudaMalloc(&p, bytes);
    if (rc == cudaErrorMemoryAllocation)
        return oom(ctx, "cudaMalloc (scratch)", bytes), (void *)NULL;
    if (cu_check(ctx, rc, "cudaMalloc (scratch)") < 0)
        return NULL;
    ctx->scratch = p;
    ctx->scratch_bytes = bytes;
    return p;
}

static const char *flag_what(int code)
{
    switch (code) {
    case CU_BAD_EMB_ID: return "embedding_forward: token id";
    case CU_BAD_EMB_BWD_ID: return "embedding_backward: token id";
    case CU_BAD_TARGET: return "cross_entropy: target";
    case CU_BAD_GATHER: return "gather_rows: index";
    case CU_BAD_KLEN: return "attention: key length";
    default: return "kernel: value";
    }
}

int cu_wait(struct nmt_bctx *ctx, const char *what)
{
    char call[160];
    snprintf(call, sizeof call, "%s: cudaStreamSynchronize", what);
    if (cu_check(ctx, cudaStreamSynchronize(ctx->stream), call) < 0)
        return -1;
    if (cu_check(ctx, cudaMemcpyAsync(ctx->hflag, ctx->flag, sizeof *ctx->flag, cudaMemcpyDeviceToHost, ctx->stream),
                 "cudaMemcpyAsync (error flag)") < 0 ||
        cu_check(ctx, cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize (error flag)") < 0)
        return -1;
    if (ctx->hflag->code == CU_BAD_NONE)
        return 0;
    struct cu_flag f = *ctx->hflag;
    if (cu_check(ctx, cudaMemsetAsync(ctx->flag, 0, sizeof *ctx->flag, ctx->stream), "cudaMemsetAsync (error flag)") < 0)
        return -1;
    if (f.code == CU_BAD_KLEN)
        return cu_err(ctx, "%s %d of batch item %d outside [0, %d] (reported at %s)", flag_what(f.code), f.value, f.row,
                      f.limit, what);
    if (f.code == CU_BAD_GATHER)
        return cu_err(ctx, "%s %d at %d is negative (reported at %s)", flag_what(f.code), f.value, f.row, what);
    return cu_err(ctx, "%s %d at row %d outside [0, %d) (reported at %s)", flag_what(f.code), f.value, f.row, f.limit,
                  what);
}

/* ---------------- probing ---------------- */

/* Lowest compute capability this build has code for (sm_80 binaries run on every 8.x device; the
 * compute_90 PTX is compiled by the driver for newer ones). */
#define CU_MIN_MAJOR 8

/* Scores the machine; on 0 the reason is left for last_error(NULL). */
static int cu_score(void)
{
    /* no driver library: no GPU; do not start the runtime at all */
    void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!drv) {
        const char *e = dlerror();
        cu_err(NULL, "no NVIDIA driver: %s", e ? e : "libcuda.so.1 not found");
        return 0;
    }
    dlclose(drv);
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess || n <= 0) {
        cu_err(NULL, "no CUDA device: %s", rc != cudaSuccess ? cudaGetErrorString(rc) : "the driver found none");
        cudaGetLastError();
        return 0;
    }
    int best = 0, seen_major = 0, seen_minor = 0;
    for (int d = 0; d < n; d++) {
        int major = 0, minor = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) != cudaSuccess) {
            cudaGetLastError();
            continue;
        }
        seen_major = major, seen_minor = minor;
        if (major >= CU_MIN_MAJOR && 100 + major * 10 + minor > best)
            best = 100 + major * 10 + minor;
    }
    if (!best)
        cu_err(NULL, "no device of compute capability %d.0 or newer (found %d.%d; this build has code for sm_80 and up)",
               CU_MIN_MAJOR, seen_major, seen_minor);
    return best;
}

/* ---------------- cuBLAS, loaded once ---------------- */

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static char blas_err[256];

#define CU_STR2(x) #x
#define CU_STR(x) CU_STR2(x)

static void blas_load(void)
{
    const char *lib = "libcublas.so." CU_STR(CUBLAS_VER_MAJOR);
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(blas_err, sizeof blas_err, "cannot load %s: %s", lib, e ? e : "dlopen failed");
        return;
    }
    struct {
        const char *name;
        void **slot;
    } syms[] = {
        { "cublasCreate_v2", (void **)&cu_blas.create },
        { "cublasDestroy_v2", (void **)&cu_blas.destroy },
        { "cublasSetStream_v2", (void **)&cu_blas.set_stream },
        { "cublasSetMathMode", (void **)&cu_blas.set_math_mode },
        { "cublasGetStatusString", (void **)&cu_blas.status_string },
        { "cublasSgemm_v2", (void **)&cu_blas.sgemm },
        { "cublasGemmEx", (void **)&cu_blas.gemm_ex },
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *p = dlsym(h, syms[i].name);
        if (!p) {
            snprintf(blas_err, sizeof blas_err, "%s has no symbol %s", lib, syms[i].name);
            memset(&cu_blas, 0, sizeof cu_blas);
            return; /* the library stays loaded: unloading cuBLAS is not supported */
        }
        *syms[i].slot = p;
    }
}

static int blas_check(struct nmt_bctx *ctx, cublasStatus_t st, const char *what)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return 0;
    if (st == CUBLAS_STATUS_ALLOC_FAILED)
        return oom(ctx, what, 0);
    return cu_err(ctx, "%s: %s (cublas status %d)", what, cu_blas.status_string ? cu_blas.status_string(st) : "error",
                  (int)st);
}

/* ---------------- context ---------------- */

static void cu_close(nmt_bctx *ctx);

static nmt_bctx *cu_open(const struct nmt_backend_opts *opts)
{
    int device = 0;
    if (opts && opts->size >= offsetof(struct nmt_backend_opts, device) + sizeof opts->device)
        device = opts->device;
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess)
        return cu_check(NULL, rc, "cudaGetDeviceCount"), (nmt_bctx *)NULL;
    if (device < 0 || device >= n)
        return cu_err(NULL, "cuda device %d does not exist (%d device%s found)", device, n, n == 1 ? "" : "s"),
               (nmt_bctx *)NULL;
    cudaDeviceProp prop;
    if (cu_check(NULL, cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties") < 0)
        return NULL;
    if (prop.major < CU_MIN_MAJOR)
        return cu_err(NULL,
                      "cuda device %d (%s) has compute capability %d.%d; this build of the plugin needs %d.0 or "
                      "newer (rebuild with CUDA_ARCH naming sm_%d%d)",
                      device, prop.name, prop.major, prop.minor, CU_MIN_MAJOR, prop.major, prop.minor),
               (nmt_bctx *)NULL;
    pthread_once(&blas_once, blas_load);
    if (!cu_blas.sgemm)
        return cu_err(NULL, "%s", blas_err), (nmt_bctx *)NULL;
    nmt_bctx *ctx = (nmt_bctx *)calloc(1, sizeof *ctx);
    if (!ctx)
        return cu_err(NULL, "out of memory"), (nmt_bctx *)NULL;
    ctx->device = device;
    snprintf(ctx->devname, sizeof ctx->devname, "%.95s", prop.name);
    char call[64];
    snprintf(call, sizeof call, "cudaSetDevice(%d)", device);
    if (cu_check(ctx, cudaSetDevice(device), call) < 0 ||
        cu_check(ctx, cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking), "cudaStreamCreate") < 0 ||
        cu_check(ctx, cudaMalloc((void **)&ctx->flag, sizeof *ctx->flag), "cudaMalloc (error flag)") < 0 ||
        cu_check(ctx, cudaMemset(ctx->flag, 0, sizeof *ctx->flag), "cudaMemset (error flag)") < 0 ||
        cu_check(ctx, cudaMallocHost((void **)&ctx->hflag, sizeof *ctx->hflag), "cudaMallocHost") < 0 ||
        cu_check(ctx, cudaMallocHost((void **)&ctx->hres, 4 * sizeof *ctx->hres), "cudaMallocHost") < 0 ||
        blas_check(ctx, cu_blas.create(&ctx->blas), "cublasCreate") < 0 ||
        blas_check(ctx, cu_blas.set_stream(ctx->blas, ctx->stream), "cublasSetStream") < 0 ||
        /* float32 reference mode: no TF32 tensor-core rounding in sgemm */
        blas_check(ctx, cu_blas.set_math_mode(ctx->blas, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode") < 0) {
        cu_err(NULL, "%s", ctx->err);
        cu_close(ctx);
        return NULL;
    }
    return ctx;
}

static void cu_close(nmt_bctx *ctx)
{
    if (!ctx)
        return;
    cu_enter(ctx);
    if (ctx->stream)
        cudaStreamSynchronize(ctx->stream);
    for (size_t i = 0; i < ctx->nbufs; i++)
        cudaFree(ctx->bufs[i]);
    free(ctx->bufs);
    cudaFree(ctx->scratch);
    cudaFree(ctx->flag);
    cudaFreeHost(ctx->hflag);
    cudaFreeHost(ctx->hres);
    if (ctx->blas)
        cu_blas.destroy(ctx->blas);
    if (ctx->stream)
        cudaStreamDestroy(ctx->stream);
    cudaGetLastError();
    free(ctx);
}

static const char *cu_last_error(nmt_bctx *ctx) { return ctx ? ctx->err : open_err; }

static int cu_props(nmt_bctx *ctx, struct nmt_backend_props *out)
{
    memset(out, 0, sizeof *out);
    cu_enter(ctx);
    cudaDeviceProp p;
    if (cu_check(ctx, cudaGetDeviceProperties(&p, ctx->device), "cudaGetDeviceProperties") < 0)
        return -1;
    snprintf(out->device, sizeof out->device, "cuda: %.80s (device %d, sm_%d%d, %d SMs)", p.name, ctx->device, p.major,
             p.minor, p.multiProcessorCount);
    out->memory_bytes = p.totalGlobalMem;
    out->dtypes = NMT_DTYPE_F32 | NMT_DTYPE_BF16; /* bf16: the products of set_precision / gemm_ex */
    out->threads = 0;
    return 0;
}

/* ---------------- memory ---------------- */

static void *cu_alloc(nmt_bctx *ctx, size_t bytes)
{
    if (bytes == 0 || bytes > SIZE_MAX - 256)
        return cu_err(ctx, "invalid allocation size %zu", bytes), (void *)NULL;
    cu_enter(ctx);
    if (ctx->nbufs == ctx->capbufs) {
        size_t cap = ctx->capbufs ? 2 * ctx->capbufs : 16;
        void **nb = (void **)realloc(ctx->bufs, cap * sizeof *nb);
        if (!nb)
            return cu_err(ctx, "out of memory"), (void *)NULL;
        ctx->bufs = nb;
        ctx->capbufs = cap;
    }
    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, bytes); /* 256-byte aligned */
    if (rc == cudaErrorMemoryAllocation)
        return oom(ctx, "cudaMalloc", bytes), (void *)NULL;
    if (cu_check(ctx, rc, "cudaMalloc") < 0)
        return NULL;
    ctx->bufs[ctx->nbufs++] = p;
    return p;
}

static void cu_free(nmt_bctx *ctx, void *buf)
{
    if (!buf)
        return;
    cu_enter(ctx);
    for (size_t i = 0; i < ctx->nbufs; i++)
        if (ctx->bufs[i] == buf) {
            ctx->bufs[i] = ctx->bufs[--ctx->nbufs];
            cu_check(ctx, cudaFree(buf), "cudaFree");
            return;
        }
    cu_err(ctx, "free of a pointer not returned by alloc");
}

static int cu_upload(nmt_bctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return 0;
    if (!dst || !src)
        return cu_err(ctx, "upload: NULL pointer");
    cu_enter(ctx);
    /* from pageable memory the copy is staged before the call returns, so SRC may be reused */
    char call[96];
    snprintf(call, sizeof call, "cudaMemcpyAsync (upload of %zu bytes)", bytes);
    return cu_check(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream), call);
}

static int cu_download(nmt_bctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return 0;
    if (!dst || !src)
        return cu_err(ctx, "download: NULL pointer");
    cu_enter(ctx);
    char call[96];
    snprintf(call, sizeof call, "cudaMemcpyAsync (download of %zu bytes)", bytes);
    if (cu_check(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream), call) < 0)
        return -1;
    return cu_wait(ctx, "download");
}

static int cu_memset_zero(nmt_bctx *ctx, void *dst, size_t bytes)
{
    if (!bytes)
        return 0;
    if (!dst)
        return cu_err(ctx, "memset_zero: NULL pointer");
    cu_enter(ctx);
    return cu_check(ctx, cudaMemsetAsync(dst, 0, bytes, ctx->stream), "cudaMemsetAsync");
}

static int cu_copy(nmt_bctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return 0;
    if (!dst || !src)
        return cu_err(ctx, "copy: NULL pointer");
    cu_enter(ctx);
    return cu_check(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx->stream),
                    "cudaMemcpyAsync (device to device)");
}

/* ---------------- matrix products ---------------- */

static int check_gemm(nmt_bctx *ctx, const char *what, int transA, int transB, int M, int N, int K, int lda, int ldb,
                      int ldc)
{
    if (M < 0 || N < 0 || K < 0)
        return cu_err(ctx, "%s: negative size M=%d N=%d K=%d", what, M, N, K);
    int acols = transA ? M : K, bcols = transB ? K : N;
    if (lda < (acols > 1 ? acols : 1) || ldb < (bcols > 1 ? bcols : 1) || ldc < (N > 1 ? N : 1))
        return cu_err(ctx, "%s: leading dimension too small (lda=%d ldb=%d ldc=%d for M=%d N=%d K=%d)", what, lda, ldb,
                      ldc, M, N, K);
    return 0;
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets B first, M and N
 * swapped, and the same leading dimensions. */
static int gemm_mixed(nmt_bctx *ctx, const char *what, int transA, int transB, int M, int N, int K, float alpha,
                      const void *A, uint32_t a_dtype, int lda, const void *B, uint32_t b_dtype, int ldb, float beta,
                      float *C, int ldc);

static int cu_gemm(nmt_bctx *ctx, int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc)
{
    if (ctx->precision == NMT_DTYPE_BF16)
        return gemm_mixed(ctx, "gemm", transA, transB, M, N, K, alpha, A, NMT_DTYPE_F32, lda, B, NMT_DTYPE_F32, ldb, beta,
                          C, ldc);
    if (check_gemm(ctx, "gemm", transA, transB, M, N, K, lda, ldb, ldc) < 0)
        return -1;
    if (M == 0 || N == 0)
        return 0;
    cu_enter(ctx);
    if (K == 0 || alpha == 0)
        return cu_scale_matrix(ctx, C, M, N, ldc, beta);
    char call[128];
    snprintf(call, sizeof call, "cublasSgemm (M=%d N=%d K=%d)", M, N, K);
    return blas_check(ctx,
                      cu_blas.sgemm(ctx->blas, transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc),
                      call);
}

/* ---------------- mixed precision (ABI 2.2) ---------------- */

static int cu_set_precision(nmt_bctx *ctx, uint32_t dtype)
{
    if (dtype != NMT_DTYPE_F32 && dtype != NMT_DTYPE_BF16)
        return cu_err(ctx, "set_precision: dtype %u not supported (float32 %d or bf16 %d)", (unsigned)dtype,
                      NMT_DTYPE_F32, NMT_DTYPE_BF16);
    ctx->precision = dtype;
    return 0;
}

/* gemm and gemm_ex in the context's precision, operands of either dtype. Under bf16, float32
 * operands are rounded into bf16 copies in the scratch and cublasGemmEx multiplies bf16 by bf16
 * with float32 accumulation (CUBLAS_COMPUTE_32F) on the tensor cores (math mode CUBLAS_DEFAULT_MATH
 * for that call; the context stays in CUBLAS_PEDANTIC_MATH for sgemm). Under float32, bf16
 * operands are widened into float32 copies and cublasSgemm multiplies. */
static int gemm_mixed(nmt_bctx *ctx, const char *what, int transA, int transB, int M, int N, int K, float alpha,
                      const void *A, uint32_t a_dtype, int lda, const void *B, uint32_t b_dtype, int ldb, float beta,
                      float *C, int ldc)
{
    if ((a_dtype != NMT_DTYPE_F32 && a_dtype != NMT_DTYPE_BF16) || (b_dtype != NMT_DTYPE_F32 && b_dtype != NMT_DTYPE_BF16))
        return cu_err(ctx, "%s: operand dtypes %u and %u not supported (float32 %d or bf16 %d)", what,
                      (unsigned)a_dtype, (unsigned)b_dtype, NMT_DTYPE_F32, NMT_DTYPE_BF16);
    if (check_gemm(ctx, what, transA, transB, M, N, K, lda, ldb, ldc) < 0)
        return -1;
    if (M == 0 || N == 0)
        return 0;
    cu_enter(ctx);
    if (K == 0 || alpha == 0)
        return cu_scale_matrix(ctx, C, M, N, ldc, beta);
    uint32_t want = ctx->precision == NMT_DTYPE_BF16 ? NMT_DTYPE_BF16 : NMT_DTYPE_F32;
    size_t es = want == NMT_DTYPE_BF16 ? 2 : 4;
    int ar = transA ? K : M, ac = transA ? M : K, br = transB ? N : K, bc = transB ? K : N;
    size_t na = a_dtype == want ? 0 : ((size_t)ar * ac * es + 255) & ~(size_t)255;
    size_t nb = b_dtype == want ? 0 : ((size_t)br * bc * es + 255) & ~(size_t)255;
    char *scr = NULL;
    if (na + nb && !(scr = (char *)cu_scratch(ctx, na + nb)))
        return -1;
    if (na) {
        if (cu_cast_2d(ctx, scr, want, A, a_dtype, ar, ac, lda) < 0)
            return -1;
        A = scr, lda = ac;
    }
    if (nb) {
        if (cu_cast_2d(ctx, scr + na, want, B, b_dtype, br, bc, ldb) < 0)
            return -1;
        B = scr + na, ldb = bc;
    }
    char call[128];
    cublasOperation_t ob = transB ? CUBLAS_OP_T : CUBLAS_OP_N, oa = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (want == NMT_DTYPE_F32) {
        snprintf(call, sizeof call, "%s: cublasSgemm (M=%d N=%d K=%d)", what, M, N, K);
        return blas_check(ctx, cu_blas.sgemm(ctx->blas, ob, oa, N, M, K, &alpha, (const float *)B, ldb, (const float *)A,
                                             lda, &beta, C, ldc),
                          call);
    }
    snprintf(call, sizeof call, "%s: cublasGemmEx bf16 (M=%d N=%d K=%d)", what, M, N, K);
    if (blas_check(ctx, cu_blas.set_math_mode(ctx->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode (default)") < 0)
        return -1;
    int rc = blas_check(ctx,
                        cu_blas.gemm_ex(ctx->blas, ob, oa, N, M, K, &alpha, B, CUDA_R_16BF, ldb, A, CUDA_R_16BF, lda,
                                        &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                        call);
    if (blas_check(ctx, cu_blas.set_math_mode(ctx->blas, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode (pedantic)") < 0)
        return -1;
    return rc;
}

static int cu_gemm_ex(nmt_bctx *ctx, int transA, int transB, int M, int N, int K, float alpha, const void *A,
                      uint32_t a_dtype, int lda, const void *B, uint32_t b_dtype, int ldb, float beta, float *C, int ldc)
{
    return gemm_mixed(ctx, "gemm_ex", transA, transB, M, N, K, alpha, A, a_dtype, lda, B, b_dtype, ldb, beta, C, ldc);
}

/* gemm_rowinv: C (M,N) = alpha * A (M,K) @ B^T + beta * C, B stored (N,K). Each element is one
 * fixed chain: s = 0, then s = fmaf(A[i][k], B[j][k], s) for k = 0, 1, ..., K-1, then alpha * s
 * (+ beta * C), so its bits depend only on its row of A, its row of B and K: never on M, the tile
 * shape, the grid or the other rows. Tiles of BM x BN outputs, TM x TN a thread (rows ty + i BM/TM,
 * columns tx + j BN/TN), K staged through shared memory BK at a time, the next slice's loads in
 * flight while the current one is summed. The tile shape follows M (few rows: narrow tiles, more
 * blocks); the chain, hence every bit, is the same for all of them. */
template <int BM, int BN, int TM, int TN, int BK>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    k_gemm_rowinv(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                  float *C, int ldc)
{
    constexpr int NT = (BM / TM) * (BN / TN), RA = BM * BK / NT, RB = BN * BK / NT;
    static_assert(RA * NT == BM * BK && RB * NT == BN * BK, "tile loads must divide among the threads");
    __shared__ float as[BK][BM + 1], bs[BK][BN + 1];
    const int t = threadIdx.x, tx = t % (BN / TN), ty = t / (BN / TN);
    const int i0 = blockIdx.y * BM, j0 = blockIdx.x * BN;
    float ra[RA], rb[RB], acc[TM][TN];
    for (int i = 0; i < TM; i++)
        for (int j = 0; j < TN; j++)
            acc[i][j] = 0.0f;
    auto load = [&](int k0) { /* the slice k0 .. k0+BK-1 of the tile's rows of A and B, 0 outside */
        for (int q = 0; q < RA; q++) {
            int e = t + q * NT, r = e / BK, c = e % BK;
            ra[q] = i0 + r < M && k0 + c < K ? A[(size_t)(i0 + r) * lda + k0 + c] : 0.0f;
        }
        for (int q = 0; q < RB; q++) {
            int e = t + q * NT, r = e / BK, c = e % BK;
            rb[q] = j0 + r < N && k0 + c < K ? B[(size_t)(j0 + r) * ldb + k0 + c] : 0.0f;
        }
    };
    if (K > 0)
        load(0);
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int q = 0; q < RA; q++)
            as[(t + q * NT) % BK][(t + q * NT) / BK] = ra[q];
        for (int q = 0; q < RB; q++)
            bs[(t + q * NT) % BK][(t + q * NT) / BK] = rb[q];
        __syncthreads();
        if (k0 + BK < K)
            load(k0 + BK);
        const int kn = K - k0 < BK ? K - k0 : BK;
        for (int k = 0; k < kn; k++) {
            float a[TM], b[TN];
            for (int i = 0; i < TM; i++)
                a[i] = as[k][ty + i * (BM / TM)];
            for (int j = 0; j < TN; j++)
                b[j] = bs[k][tx + j * (BN / TN)];
            for (int i = 0; i < TM; i++)
                for (int j = 0; j < TN; j++)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    for (int i = 0; i < TM; i++) {
        int r = i0 + ty + i * (BM / TM);
        for (int j = 0; j < TN; j++) {
            int c = j0 + tx + j * (BN / TN);
            if (r < M && c < N) {
                float v = alpha * acc[i][j];
                if (beta != 0.0f)
                    v = v + beta * C[(size_t)r * ldc + c];
                C[(size_t)r * ldc + c] = v;
            }
        }
    }
}

/* Launches the tile shape TILE (BM, BN, TM, TN, BK) over C. */
#define RI_LAUNCH(BM, BN, TM, TN, BK)                                                                           \
    k_gemm_rowinv<BM, BN, TM, TN, BK>                                                                           \
        <<<dim3((unsigned)((N + BN - 1) / BN), (unsigned)((M + BM - 1) / BM)), (BM / TM) * (BN / TN), 0,          \
           ctx->stream>>>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)

static int cu_gemm_rowinv(nmt_bctx *ctx, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                          int ldb, float beta, float *C, int ldc)
{
    if (check_gemm(ctx, "gemm_rowinv", 0, 1, M, N, K, lda, ldb, ldc) < 0)
        return -1;
    if (M == 0 || N == 0)
        return 0;
    cu_enter(ctx);
    if (K == 0 || alpha == 0.0f)
        K = 0, alpha = 0.0f;
    if (M <= 8)
        RI_LAUNCH(8, 32, 1, 1, 32);
    else if (M <= 32)
        RI_LAUNCH(32, 64, 2, 4, 16);
    else
        RI_LAUNCH(64, 64, 4, 4, 16);
    return cu_launched(ctx, "gemm_rowinv");
}

/* ---------------- the table ---------------- */

static const struct nmt_backend cuda_table = {
    .abi_major = NMT_BACKEND_ABI_MAJOR,
    .abi_minor = NMT_BACKEND_ABI_MINOR,
    .size = sizeof(struct nmt_backend),
    .name = "cuda",
    .description = "NVIDIA GPUs: cuBLAS sgemm (bf16 GemmEx on tensor cores with --precision bf16) + CUDA C kernels",
    .score = cu_score,
    .open = cu_open,
    .close = cu_close,
    .last_error = cu_last_error,
    .props = cu_props,
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .memset_zero = cu_memset_zero,
    .copy = cu_copy,
    .gemm = cu_gemm,
    .bias_add = cu_bias_add,
    .bias_grad = cu_bias_grad,
    .embedding_forward = cu_embedding_forward,
    .embedding_backward = cu_embedding_backward,
    .attention_forward = cu_attention_forward,
    .attention_backward = cu_attention_backward,
    .layernorm_forward = cu_layernorm_forward,
    .layernorm_backward = cu_layernorm_backward,
    .add = cu_add,
    .relu_forward = cu_relu_forward,
    .relu_backward = cu_relu_backward,
    .dropout_forward = cu_dropout_forward,
    .dropout_backward = cu_dropout_backward,
    .cross_entropy = cu_cross_entropy,
    .adam_update = cu_adam_update,
    .sumsq = cu_sumsq,
    .topk_logsoftmax = cu_topk_logsoftmax,
    .gather_rows = cu_gather_rows,
    .gemm_rowinv = cu_gemm_rowinv,
    /* the optional linear_pack / linear_rowinv are not provided: the host decodes with gemm_rowinv,
     * bias_add and relu. */
    .linear_packed_bytes = NULL,
    .linear_pack = NULL,
    .linear_rowinv = NULL,
    /* nor the reduced-precision weights of ABI 2.1: nmt-decode --precision int8 names this backend
     * in its error */
    .linear_packed_bytes_q = NULL,
    .linear_pack_q = NULL,
    .attention_forward_lse = cu_attention_forward_lse,
    .attention_backward_lse = cu_attention_backward_lse,
    .set_precision = cu_set_precision,
    .cast = cu_cast,
    .gemm_ex = cu_gemm_ex,
    /* nor share (ABI 2.3): each decoding context loads its own copy of the weights (nmt-decode
     * runs one context on an accelerator unless --jobs says otherwise) */
    .share = NULL,
    /* nor discard (ABI 2.4): device memory is given back only by free */
    .discard = NULL,
    .embedding_table_forward = cu_embedding_table_forward,
    .embedding_table_backward = cu_embedding_table_backward,
    .swish_forward = cu_swish_forward,
    .swish_backward = cu_swish_backward,
    /* nor alloc_sparse (ABI 2.6): cudaMalloc commits a whole buffer either way */
    .alloc_sparse = NULL,
    .topk_logits = cu_topk_logits,
    /* nor attention_forward_rows (ABI 2.8): beam search moves its cache rows (gather_rows) */
    .attention_forward_rows = NULL,
    /* nor linear_rows (ABI 2.9): an embedding tied to the output projection keeps its float32 copy */
    .linear_rows = NULL,
};

extern "C" __attribute__((visibility("default"))) const struct nmt_backend *nmt_backend_entry(void)
{
    return &cuda_table;
}
