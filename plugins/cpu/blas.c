/* blas.c: OpenBLAS, opened at run time, and the float32 matrix product of gemm through it. */
#include <cblas.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu.h"

/* OpenBLAS reads its settings from the environment once, when it is loaded. One of them hurts
 * here: idle worker threads spin on sched_yield for 2^28 cycles (OPENBLAS_THREAD_TIMEOUT=28)
 * before sleeping, so between two products they take cores from this plugin's own threads (a
 * quarter of a training step's CPU time went to sched_yield). So the plugin opens OpenBLAS itself,
 * after setting the shortest spin (4) where the user has not set one.
 *
 * Another: OpenBLAS picks its kernels by the CPU's model number, and on a model newer than its
 * table it falls back to its SSE3 kernels ("Prescott"): on a 5th-generation Xeon (model 207) the
 * Debian build (0.3.21) did, and a training step took 2.7 times as long. So where the user has not
 * named a core (OPENBLAS_CORETYPE), the plugin names the one that its own kernels' instruction set
 * calls for: SkylakeX (AVX-512) or Haswell (AVX2 and FMA). NMT_CPU_ISA then caps OpenBLAS as it caps
 * the plugin, and machines with one instruction set run the same sgemm kernel. */

typedef void (*blas_sgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint, blasint,
                              float, const float *, blasint, const float *, blasint, float, float *, blasint);
static struct {
    blas_sgemm_fn sgemm;
    void (*set_threads)(int);
    int (*get_threads)(void);
    char *(*corename)(void);
    char err[400];
} blas;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_load(void)
{
    if (!getenv("OPENBLAS_THREAD_TIMEOUT") && !getenv("GOTO_THREAD_TIMEOUT"))
        setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
    int isa = cpu_isa();
    const char *core = isa >= CPU_ISA_AVX512 ? "SkylakeX" : isa == CPU_ISA_AVX2 ? "Haswell" : NULL;
    if (core && !getenv("OPENBLAS_CORETYPE"))
        setenv("OPENBLAS_CORETYPE", core, 0);
    static const char *const names[] = { "libopenblas.so.0", "libopenblas.so" };
    void *lib = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++)
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(blas.err, sizeof blas.err, "cannot load OpenBLAS (libopenblas.so.0): %s", e ? e : "not found");
        return;
    }
    /* dlsym returns object pointers; converting them to function pointers is what POSIX requires */
    *(void **)&blas.sgemm = dlsym(lib, "cblas_sgemm");
    *(void **)&blas.set_threads = dlsym(lib, "openblas_set_num_threads");
    *(void **)&blas.get_threads = dlsym(lib, "openblas_get_num_threads");
    *(void **)&blas.corename = dlsym(lib, "openblas_get_corename");
    if (!blas.sgemm || !blas.set_threads || !blas.get_threads) {
        snprintf(blas.err, sizeof blas.err, "%s lacks cblas_sgemm or openblas_set_num_threads", names[0]);
        blas.sgemm = NULL;
    }
}

const char *cpu_blas_open(void)
{
    pthread_once(&blas_once, blas_load);
    return blas.sgemm ? NULL : blas.err;
}

void cpu_blas_set_threads(int threads) { blas.set_threads(threads); }

const char *cpu_blas_corename(void) { return blas.corename ? blas.corename() : "?"; }

int cpu_check_gemm(nmt_bctx *ctx, const char *what, int transA, int transB, int M, int N, int K, int lda, int ldb,
                   int ldc)
{
    if (M < 0 || N < 0 || K < 0)
        return cpu_err(ctx, "%s: negative size M=%d N=%d K=%d", what, M, N, K);
    int acols = transA ? M : K, bcols = transB ? K : N;
    if (lda < (acols > 1 ? acols : 1) || ldb < (bcols > 1 ? bcols : 1) || ldc < (N > 1 ? N : 1))
        return cpu_err(ctx, "%s: leading dimension too small (lda=%d ldb=%d ldc=%d for M=%d N=%d K=%d)", what, lda,
                       ldb, ldc, M, N, K);
    return 0;
}

static void scale_c(float *C, int M, int N, int ldc, float beta)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            C[(size_t)i * ldc + j] = beta == 0 ? 0 : beta * C[(size_t)i * ldc + j];
}

int cpu_gemm_f32(nmt_bctx *ctx, int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc)
{
    if (cpu_check_gemm(ctx, "gemm", transA, transB, M, N, K, lda, ldb, ldc) < 0)
        return -1;
    if (M == 0 || N == 0)
        return 0;
    if (K == 0 || alpha == 0) {
        scale_c(C, M, N, ldc, beta);
        return 0;
    }
    if (blas.get_threads() != ctx->threads) /* process-global: follow this context */
        blas.set_threads(ctx->threads);
    pool_set_spin(ctx->pool, 0); /* from now on OpenBLAS's threads need the cores between the pool's jobs */
    blas.sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K, alpha,
                A, lda, B, ldb, beta, C, ldc);
    return 0;
}
