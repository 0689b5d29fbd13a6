/* cpu.c: the cpu backend: opening and closing contexts, memory, gemm, and the table of the plugin;
 * nothing else in the plugin calls into this file. */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <sys/mman.h>

#include "cpu.h"
#include "kernels.h"

static int cpu_score(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 15 : 10;
}

static nmt_bctx *cpu_open(const struct nmt_backend_opts *opts)
{
    int threads = 0;
    if (opts && opts->size >= offsetof(struct nmt_backend_opts, threads) + sizeof opts->threads)
        threads = opts->threads;
    if (threads < 0)
        return cpu_err(NULL, "invalid thread count %d", threads), NULL;
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    if (threads > 1024)
        threads = 1024;
    const char *isa_err = cpu_isa_env_error();
    if (isa_err)
        return cpu_err(NULL, "%s", isa_err), NULL;
    const char *blas_err = cpu_blas_open();
    if (blas_err)
        return cpu_err(NULL, "%s", blas_err), NULL;
    nmt_bctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return cpu_err(NULL, "out of memory"), NULL;
    ctx->threads = threads;
    ctx->pool = pool_new(threads);
    if (!ctx->pool) {
        free(ctx);
        return cpu_err(NULL, "cannot start %d threads", threads), NULL;
    }
    cpu_blas_set_threads(threads);
    return ctx;
}

static void cpu_close(nmt_bctx *ctx)
{
    if (!ctx)
        return;
    for (size_t i = 0; i < ctx->nbufs; i++)
        free(ctx->bufs[i]);
    free(ctx->bufs);
    free(ctx->pe);
    free(ctx->scratch);
    free(ctx->qbuf);
    free(ctx->mbuf);
    pool_free(ctx->pool);
    free(ctx);
}

static const char *cpu_last_error(nmt_bctx *ctx) { return cpu_err_text(ctx); }

static int cpu_props(nmt_bctx *ctx, struct nmt_backend_props *out)
{
    memset(out, 0, sizeof *out);
    char model[96] = "unknown cpu";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10)) {
                char *c = strchr(line, ':');
                if (c) {
                    c += 1 + (c[1] == ' ');
                    c[strcspn(c, "\n")] = 0;
                    snprintf(model, sizeof model, "%s", c);
                }
                break;
            }
        fclose(f);
    }
    snprintf(out->device, sizeof out->device, "cpu: %s (%d thread%s, %s, OpenBLAS %s)", model, ctx->threads,
             ctx->threads == 1 ? "" : "s", cpu_isa_name(), cpu_blas_corename());
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    out->memory_bytes = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
    out->dtypes = NMT_DTYPE_F32 | NMT_DTYPE_BF16; /* bf16 matrix products (emulated exactly, mixed.c) */
    out->threads = ctx->threads;
    return 0;
}

/* BYTES (> 0) aligned to 64 bytes; with HUGE, a buffer of HUGE_MIN bytes or more is aligned to
 * 2 MiB and asked to be backed by transparent huge pages (where the kernel allows them on request),
 * so that faulting in the packed weights takes one fault per 2 MiB instead of one per 4 KiB. NULL
 * when out of memory. */
#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_MIN ((size_t)4 << 20)
static void *alloc_pages(size_t bytes, int huge)
{
    if (!huge || bytes < HUGE_MIN || bytes > SIZE_MAX - HUGE_PAGE)
        return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    size_t len = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    void *p = aligned_alloc(HUGE_PAGE, len);
    if (p)
        madvise(p, len, MADV_HUGEPAGE); /* advice only: without huge pages the buffer works the same */
    return p;
}

/* A buffer of BYTES recorded in CTX (alloc_pages' HUGE), or NULL with the error set. */
static void *buf_alloc(nmt_bctx *ctx, size_t bytes, int huge)
{
    if (bytes == 0 || bytes > SIZE_MAX - 64)
        return cpu_err(ctx, "invalid allocation size %zu", bytes), NULL;
    if (ctx->nbufs == ctx->capbufs) {
        size_t cap = ctx->capbufs ? 2 * ctx->capbufs : 16;
        void **nb = realloc(ctx->bufs, cap * sizeof *nb);
        if (!nb)
            return cpu_err(ctx, "out of memory"), NULL;
        ctx->bufs = nb;
        ctx->capbufs = cap;
    }
    void *p = alloc_pages(bytes, huge);
    if (!p)
        return cpu_err(ctx, "out of memory (%zu bytes)", bytes), NULL;
    ctx->bufs[ctx->nbufs++] = p;
    return p;
}

static void *cpu_alloc(nmt_bctx *ctx, size_t bytes) { return buf_alloc(ctx, bytes, 1); }

/* Small pages: a huge page would fault in 2 MiB around each touched byte of a sparse buffer. */
static void *cpu_alloc_sparse(nmt_bctx *ctx, size_t bytes) { return buf_alloc(ctx, bytes, 0); }

static void cpu_free(nmt_bctx *ctx, void *buf)
{
    if (!buf)
        return;
    for (size_t i = 0; i < ctx->nbufs; i++)
        if (ctx->bufs[i] == buf) {
            ctx->bufs[i] = ctx->bufs[--ctx->nbufs];
            free(buf);
            return;
        }
    cpu_err(ctx, "free of a pointer not returned by alloc");
}

static int cpu_upload(nmt_bctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (bytes && (!dst || !src))
        return cpu_err(ctx, "upload: NULL pointer");
    if (bytes)
        memcpy(dst, src, bytes);
    return 0;
}

static int cpu_memset_zero(nmt_bctx *ctx, void *dst, size_t bytes)
{
    if (bytes && !dst)
        return cpu_err(ctx, "memset_zero: NULL pointer");
    if (bytes)
        memset(dst, 0, bytes);
    return 0;
}

/* gemm: float32, or with both operands rounded to bf16 after set_precision(BF16) (mixed.c). */
static int cpu_gemm(nmt_bctx *ctx, int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc)
{
    if (ctx->precision == NMT_DTYPE_BF16)
        return cpu_gemm_ex(ctx, transA, transB, M, N, K, alpha, A, NMT_DTYPE_F32, lda, B, NMT_DTYPE_F32, ldb, beta, C,
                           ldc);
    return cpu_gemm_f32(ctx, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* Device memory is this process's memory: any context's kernels may read any other's buffers. */
static int cpu_share(nmt_bctx *ctx, nmt_bctx *owner)
{
    if (!ctx || !owner || ctx == owner)
        return cpu_err(ctx, "share: two distinct open contexts are needed");
    return 0;
}

/* Gives the whole pages inside [P, P + BYTES) back to the system (madvise MADV_DONTNEED: they read
 * as zeros afterwards, a write faults a fresh page in); a range within one page gives nothing back. */
static int cpu_discard(nmt_bctx *ctx, void *p, size_t bytes)
{
    if (!p && bytes)
        return cpu_err(ctx, "discard: NULL pointer with %zu bytes", bytes);
    long psz = sysconf(_SC_PAGESIZE);
    uintptr_t page = psz > 0 ? (uintptr_t)psz : 4096, lo = ((uintptr_t)p + page - 1) / page * page;
    uintptr_t hi = ((uintptr_t)p + bytes) / page * page;
    if (hi > lo && madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0)
        return cpu_err(ctx, "discard: madvise of %zu bytes: %s", (size_t)(hi - lo), strerror(errno));
    return 0;
}

static const struct nmt_backend cpu_table = {
    .abi_major = NMT_BACKEND_ABI_MAJOR,
    .abi_minor = NMT_BACKEND_ABI_MINOR,
    .size = sizeof(struct nmt_backend),
    .name = "cpu",
    .description = "OpenBLAS sgemm + threaded, vectorised C kernels (the reference backend)",
    .score = cpu_score,
    .open = cpu_open,
    .close = cpu_close,
    .last_error = cpu_last_error,
    .props = cpu_props,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_upload,
    .memset_zero = cpu_memset_zero,
    .copy = cpu_upload,
    .gemm = cpu_gemm,
    .bias_add = cpu_bias_add,
    .bias_grad = cpu_bias_grad,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .add = cpu_add,
    .relu_forward = cpu_relu_forward,
    .relu_backward = cpu_relu_backward,
    .dropout_forward = cpu_dropout_forward,
    .dropout_backward = cpu_dropout_backward,
    .cross_entropy = cpu_cross_entropy,
    .adam_update = cpu_adam_update,
    .sumsq = cpu_sumsq,
    .topk_logsoftmax = cpu_topk_logsoftmax,
    .gather_rows = cpu_gather_rows,
    .gemm_rowinv = cpu_gemm_rowinv,
    .linear_packed_bytes = cpu_linear_packed_bytes,
    .linear_pack = cpu_linear_pack,
    .linear_rowinv = cpu_linear_rowinv,
    .linear_packed_bytes_q = cpu_linear_packed_bytes_q,
    .linear_pack_q = cpu_linear_pack_q,
    .attention_forward_lse = cpu_attention_forward_lse,
    .attention_backward_lse = cpu_attention_backward_lse,
    .set_precision = cpu_set_precision,
    .cast = cpu_cast,
    .gemm_ex = cpu_gemm_ex,
    .share = cpu_share,
    .discard = cpu_discard,
    .embedding_table_forward = cpu_embedding_table_forward,
    .embedding_table_backward = cpu_embedding_table_backward,
    .swish_forward = cpu_swish_forward,
    .swish_backward = cpu_swish_backward,
    .alloc_sparse = cpu_alloc_sparse,
    .topk_logits = cpu_topk_logits,
    .attention_forward_rows = cpu_attention_forward_rows,
    .linear_rows = cpu_linear_rows,
};

__attribute__((visibility("default"))) const struct nmt_backend *nmt_backend_entry(void) { return &cpu_table; }
