/* onednn_bench: nmt's hand-written linear layers against oneDNN (issue 24: "decide by measurement
 * between hand-written kernels and a maintained library"), at rowinv_bench's shapes: C = A W^T,
 * A (M,K) activations, W (N,K) a weight, M = 8..256 rows, the TINY or SMALL model's (N,K) including
 * the 8000-word output projection. GF/s count 2MNK operations, as rowinv_bench's.
 *
 * Modes (one library per process, so that oneDNN's OpenMP threads, which spin for a while after
 * each parallel region, never compete with nmt's pool):
 *   nmt     linear_rowinv through the cpu plugin exactly as rowinv_bench does: the weight packed
 *           once by linear_pack (float32) and linear_pack_q (int8); the int8 figure includes the
 *           per-row activation quantisation, which linear_rowinv does inside (to 12 bits, int16
 *           products with vpdpwssd / vpmaddwd, where oneDNN's s8 below multiplies 8-bit ones). NMT_CPU_ISA=avx2 forces
 *           the AVX2 path. Columns: f32, int8.
 *   onednn  oneDNN matmul (oneDNN 2.x C API): s8 activations x s8 weights -> f32, the weights
 *           quantised per output channel exactly as nmt does (symmetric, scale max|w|/127, round to
 *           nearest even) with the per-column scales as output scales (mask 1 << 1, on N); weights
 *           reordered once, outside the timing, into the layout the primitive asks for (format
 *           "any"), one primitive per (M,N,K) made outside the timing. The per-row activation scales
 *           a_i are applied by a loop after the call (C[i,j] *= a_i, so C = ((float)S * s_j) * a_i as
 *           in nmt): oneDNN 2.6 has no JIT kernel for them, as a binary multiply post-op on an (M,1)
 *           tensor (the per-row broadcast) falls back to its reference code ref_int8, about 1000
 *           times slower; per-N scales and (1,N) or (M,N) post-ops stay on brgemm / gemm:jit.
 *           Columns: s8 (the oneDNN call alone, on activations already quantised, without the row
 *           scales), s8+q (the whole layer as nmt's int8 figure: quantising the M float rows with
 *           nmt's AVX2 quantise loop, copied below, the oneDNN call and the row-scale loop, both
 *           loops split over the OpenMP threads as nmt splits them over its pool), f32 (float32
 *           matmul, weights reordered once as well), then the implementation names oneDNN chose
 *           (s8, f32). ONEDNN_MAX_CPU_ISA=AVX2 forces oneDNN's AVX2 code (read by the library).
 *   check   oneDNN only, no timing: its int8 result against a scalar reference (exact int32 sums,
 *           the same float epilogue) and its float32 result against a double reference, on one
 *           shape; then batch invariance, which nmt's contract requires (a row's bits do not depend
 *           on M, the other rows or the thread count): every row of an M=64 product against the same
 *           row computed alone (M=1) and inside M=256, and M=64 on 1 thread against THREADS threads,
 *           for s8 and f32, at several (N,K); and oneDNN's int8 bits against nmt's int8 bits.
 * Threads: THREADS for both; Debian's libdnnl2 2.6.3 is built with DNNL_CPU_RUNTIME=OMP (GNU
 * libgomp), so the program calls omp_set_num_threads(THREADS) on the libgomp that libdnnl uses;
 * bench/onednn.sh also exports OMP_NUM_THREADS.
 *
 * Usage: onednn_bench MODE [THREADS [tiny|small [SECONDS]]]   (defaults: 2, small, 0.2 s a figure)
 *
 * Not built by make (it needs libdnnl-dev, which nmt does not depend on; the Makefile leaves it out
 * of bench-built); bench/onednn.sh builds and runs it. By hand, from the source root after `make`
 * (-O3 as the cpu plugin's kernels, for the copied quantise loop):
 *   apt-get install libdnnl-dev
 *   cc -std=c11 -O3 -g -D_GNU_SOURCE -Ilibcommon -Iplugins -Wall -Wextra -Werror -Wshadow \
 *      -Wstrict-prototypes -Wno-unused-parameter -fopenmp -rdynamic bench/onednn_bench.c \
 *      build/libnmt.a -ldnnl -lzstd -lcsv -lutf8proc -lm -ldl -lpthread -o build/bench/onednn_bench
 *   NMT_PLUGIN_PATH=$PWD/bin build/bench/onednn_bench nmt 2 tiny */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

#include "cli/cli.h"
#include "cpu/quant_row.h"
#include "run/backend_loader.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *xalloc(size_t n)
{
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "onednn_bench: out of memory\n");
        exit(1);
    }
    return p;
}

#define DNNL(call)                                                                                                    \
    do {                                                                                                              \
        dnnl_status_t st_ = (call);                                                                                   \
        if (st_ != dnnl_success) {                                                                                    \
            fprintf(stderr, "onednn_bench: %s failed (status %d) at line %d\n", #call, (int)st_, __LINE__);          \
            exit(1);                                                                                                  \
        }                                                                                                             \
    } while (0)

/* ---- nmt's quantisation (plugins/cpu/quant_row.h, the cpu plugin's own code) ---- */

static int have_avx2;

static float quant_one(int8_t *q, const float *x, int K)
{
    return have_avx2 ? quant_row_avx2(q, x, K, K) : quant_row_plain(q, x, K, K);
}

/* Quantises the M rows of A (M,K) into Q and their scales into S, rows split over the OpenMP
 * threads when there are at least 2 x 16384 values (nmt's QGRAIN a thread). Not "#pragma omp
 * parallel if (...)": an inactive parallel region still costs libgomp about 2 us. */
static void quantise(int8_t *q, float *s, const float *A, int M, int K)
{
    if ((size_t)M * K >= 2 * 16384 && M > 1 && omp_get_max_threads() > 1) {
#pragma omp parallel for schedule(static)
        for (int i = 0; i < M; i++)
            s[i] = quant_one(q + (size_t)i * K, A + (size_t)i * K, K);
    } else
        for (int i = 0; i < M; i++)
            s[i] = quant_one(q + (size_t)i * K, A + (size_t)i * K, K);
}

/* C (M,N) row i *= RS[i], split as quantise. */
static void scale_rows(float *restrict C, const float *restrict rs, int M, int N)
{
    if ((size_t)M * N >= 2 * 16384 && M > 1 && omp_get_max_threads() > 1) {
#pragma omp parallel for schedule(static)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C[(size_t)i * N + j] *= rs[i];
    } else
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C[(size_t)i * N + j] *= rs[i];
}

/* ---- the test data, as rowinv_bench's ---- */

static void fill(float *x, size_t n, unsigned salt)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(((i + salt) * 2654435761u) % 1000) / 1000.0f - 0.5f;
}

/* ---- oneDNN ---- */

static dnnl_engine_t eng;
static dnnl_stream_t strm;

/* One matmul C (M,N) f32 = A (M,K) x W^T, W given as (N,K) row-major (oneDNN's (K,N) weights in
 * "ba"), in s8 (Q) or f32: the primitive, its weights in the layout it chose, the memories. */
struct mm {
    int q, M, N, K;
    dnnl_primitive_t prim;
    dnnl_memory_t src, wei, dst;
    float *rs; /* the M row scales (Q only) */
    char impl[64];
};

static void md2(dnnl_memory_desc_t *md, int64_t d0, int64_t d1, dnnl_data_type_t t, dnnl_format_tag_t tag)
{
    dnnl_dims_t d = { d0, d1 };
    DNNL(dnnl_memory_desc_init_by_tag(md, 2, d, t, tag));
}

static void exec1(dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args)
{
    DNNL(dnnl_primitive_execute(p, strm, nargs, args));
}

/* W: (N,K) float if !Q, else int8 with the per-column scales SW. */
static void mm_init(struct mm *m, int q, int M, int N, int K, const void *W, const float *sw)
{
    memset(m, 0, sizeof *m);
    m->q = q, m->M = M, m->N = N, m->K = K;
    dnnl_data_type_t t = q ? dnnl_s8 : dnnl_f32;
    dnnl_memory_desc_t a_md, w_any, w_user, c_md;
    md2(&a_md, M, K, t, dnnl_ab);
    md2(&w_any, K, N, t, dnnl_format_tag_any);
    md2(&w_user, K, N, t, dnnl_ba);
    md2(&c_md, M, N, dnnl_f32, dnnl_ab);
    dnnl_matmul_desc_t d;
    DNNL(dnnl_matmul_desc_init(&d, &a_md, &w_any, NULL, &c_md));
    dnnl_primitive_attr_t attr;
    DNNL(dnnl_primitive_attr_create(&attr));
    if (q)
        DNNL(dnnl_primitive_attr_set_output_scales(attr, N, 1 << 1, sw));
    dnnl_primitive_desc_t pd;
    DNNL(dnnl_primitive_desc_create(&pd, &d, attr, eng, NULL));
    const char *impl = "?";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    snprintf(m->impl, sizeof m->impl, "%s", impl);
    const dnnl_memory_desc_t *w_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    DNNL(dnnl_memory_create(&m->src, &a_md, eng, DNNL_MEMORY_ALLOCATE));
    DNNL(dnnl_memory_create(&m->dst, &c_md, eng, DNNL_MEMORY_ALLOCATE));
    DNNL(dnnl_memory_create(&m->wei, w_md, eng, DNNL_MEMORY_ALLOCATE));
    if (q)
        m->rs = xalloc((size_t)M * sizeof *m->rs);
    /* the weights, reordered once into the primitive's layout (with the s8 compensation it needs) */
    dnnl_memory_t wu;
    DNNL(dnnl_memory_create(&wu, &w_user, eng, (void *)W));
    dnnl_primitive_desc_t rpd;
    DNNL(dnnl_reorder_primitive_desc_create(&rpd, &w_user, eng, w_md, eng, NULL));
    dnnl_primitive_t r;
    DNNL(dnnl_primitive_create(&r, rpd));
    dnnl_exec_arg_t ra[2] = { { DNNL_ARG_FROM, wu }, { DNNL_ARG_TO, m->wei } };
    exec1(r, 2, ra);
    DNNL(dnnl_stream_wait(strm));
    dnnl_primitive_destroy(r);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_memory_destroy(wu);
    DNNL(dnnl_primitive_create(&m->prim, pd));
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
}

static void *handle(dnnl_memory_t mem)
{
    void *p;
    DNNL(dnnl_memory_get_data_handle(mem, &p));
    return p;
}

/* The oneDNN call alone. */
static void mm_run(struct mm *m)
{
    dnnl_exec_arg_t a[3] = { { DNNL_ARG_SRC, m->src }, { DNNL_ARG_WEIGHTS, m->wei }, { DNNL_ARG_DST, m->dst } };
    exec1(m->prim, 3, a);
    DNNL(dnnl_stream_wait(strm));
}

/* The whole layer on the M float rows A (M,K): for Q, quantises them (nmt's loop) into the
 * primitive's source and their scales into RS, calls oneDNN, multiplies row i of C by RS[i]. */
static void mm_rows(struct mm *m, const float *A)
{
    if (!m->q) {
        memcpy(handle(m->src), A, (size_t)m->M * m->K * sizeof(float));
        mm_run(m);
        return;
    }
    quantise(handle(m->src), m->rs, A, m->M, m->K);
    mm_run(m);
    scale_rows(handle(m->dst), m->rs, m->M, m->N);
}

static void mm_free(struct mm *m)
{
    dnnl_primitive_destroy(m->prim);
    dnnl_memory_destroy(m->src);
    dnnl_memory_destroy(m->wei);
    dnnl_memory_destroy(m->dst);
    free(m->rs);
}

static const char *isa_name(dnnl_cpu_isa_t i)
{
    switch ((int)i) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
    }
}

static void onednn_open(int threads)
{
    omp_set_num_threads(threads);
    DNNL(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DNNL(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
    const dnnl_version_t *v = dnnl_version();
    printf("# oneDNN %d.%d.%d, cpu runtime %s, effective ISA %s, OpenMP threads %d\n", v->major, v->minor, v->patch,
           v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other", isa_name(dnnl_get_effective_cpu_isa()),
           omp_get_max_threads());
}

/* Quantises each row of the float weight W (N,K) as nmt's linear_pack_q does: values WQ, scales SW. */
static void quant_weights(int8_t *wq, float *sw, const float *W, int N, int K)
{
    for (int j = 0; j < N; j++)
        sw[j] = quant_row_plain(wq + (size_t)j * K, W + (size_t)j * K, K, K);
}

static double timeit(void (*f)(void *), void *arg, double secs)
{
    f(arg); /* warm */
    int reps = 0;
    double t0 = now(), t;
    do {
        f(arg);
        reps++;
    } while ((t = now() - t0) < secs);
    return t / reps;
}

struct job {
    struct mm *m;
    const float *A;
};
static void job_run(void *p) { mm_run(((struct job *)p)->m); }
static void job_rows(void *p) { mm_rows(((struct job *)p)->m, ((struct job *)p)->A); }

static const int Ms[] = { 8, 32, 64, 128, 256 };
static const int small_nk[][2] = { { 256, 256 }, { 768, 256 }, { 1024, 256 }, { 256, 1024 }, { 8000, 256 } };
static const int tiny_nk[][2] = { { 128, 128 }, { 384, 128 }, { 256, 128 }, { 128, 256 }, { 8000, 128 } };
#define NSHAPES 5

static int bench_onednn(int threads, const int (*NK)[2], double secs)
{
    onednn_open(threads);
    printf("%5s %5s %5s %10s %10s %10s  %s\n", "M", "N", "K", "s8", "s8+q", "f32", "impl s8 / f32");
    for (int s = 0; s < NSHAPES; s++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            int M = Ms[mi], N = NK[s][0], K = NK[s][1];
            float *W = xalloc((size_t)N * K * sizeof *W), *A = xalloc((size_t)M * K * sizeof *A);
            float *sw = xalloc((size_t)N * sizeof *sw);
            int8_t *wq = xalloc((size_t)N * K);
            fill(W, (size_t)N * K, 0);
            fill(A, (size_t)M * K, 0);
            quant_weights(wq, sw, W, N, K);
            struct mm mq, mf;
            mm_init(&mq, 1, M, N, K, wq, sw);
            mm_init(&mf, 0, M, N, K, W, NULL);
            mm_rows(&mq, A); /* leaves the quantised A in mq for the s8-only figure */
            double flop = 2.0 * M * N * K;
            struct job jq = { &mq, A }, jf = { &mf, A };
            double t_s8 = timeit(job_run, &jq, secs), t_s8q = timeit(job_rows, &jq, secs);
            mm_rows(&mf, A);
            double t_f32 = timeit(job_run, &jf, secs);
            printf("%5d %5d %5d %10.1f %10.1f %10.1f  %s / %s\n", M, N, K, flop / t_s8 * 1e-9, flop / t_s8q * 1e-9,
                   flop / t_f32 * 1e-9, mq.impl, mf.impl);
            fflush(stdout);
            mm_free(&mq);
            mm_free(&mf);
            free(W), free(A), free(sw), free(wq);
        }
    return 0;
}

/* ---- nmt through the plugin, as rowinv_bench modes 3 and 4 ---- */

struct njob {
    struct backend *be;
    int M, N, K;
    const float *A;
    const void *Wp;
    float *C;
};
static void njob_run(void *p)
{
    struct njob *j = p;
    if (j->be->ops.linear_rowinv(j->be->ctx, j->M, j->N, j->K, j->A, j->K, j->Wp, NULL, 0, j->C, j->N) < 0) {
        fprintf(stderr, "onednn_bench: linear_rowinv: %s\n", nmt_errmsg());
        exit(1);
    }
}

static struct backend *nmt_open(int threads)
{
    struct nmt_backend_opts o = { .size = sizeof o, .threads = threads };
    struct backend *be = backend_open("cpu", &o);
    if (!be) {
        fprintf(stderr, "onednn_bench: %s\n", nmt_errmsg());
        exit(1);
    }
    if (!be->ops.linear_rowinv || !be->ops.linear_pack_q || !be->ops.linear_packed_bytes_q) {
        fprintf(stderr, "onednn_bench: backend %s lacks linear_rowinv or linear_pack_q\n", be->ops.name);
        exit(1);
    }
    return be;
}

/* Packs the float weight W (N,K) in float32 (INT8 0) or int8 on BE; returns the packed copy. */
static void *nmt_pack(struct backend *be, const float *W, int N, int K, int int8)
{
    const struct nmt_backend *k = &be->ops;
    size_t n = int8 ? k->linear_packed_bytes_q(be->ctx, N, K, NMT_DTYPE_INT8) : k->linear_packed_bytes(be->ctx, N, K);
    void *Wp = k->alloc(be->ctx, n);
    if (!Wp || (int8 ? k->linear_pack_q(be->ctx, Wp, W, N, K, K, NMT_DTYPE_INT8) : k->linear_pack(be->ctx, Wp, W, N, K, K)) < 0) {
        fprintf(stderr, "onednn_bench: packing: %s\n", nmt_errmsg());
        exit(1);
    }
    return Wp;
}

static int bench_nmt(int threads, const int (*NK)[2], double secs)
{
    struct backend *be = nmt_open(threads);
    const char *isa = getenv("NMT_CPU_ISA");
    printf("# nmt cpu plugin %s, NMT_CPU_ISA=%s, threads %d\n", be->path, isa && *isa ? isa : "(default)", threads);
    printf("%5s %5s %5s %10s %10s\n", "M", "N", "K", "f32", "int8");
    const struct nmt_backend *k = &be->ops;
    for (int s = 0; s < NSHAPES; s++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            int M = Ms[mi], N = NK[s][0], K = NK[s][1];
            float *A = k->alloc(be->ctx, (size_t)M * K * sizeof(float));
            float *W = k->alloc(be->ctx, (size_t)N * K * sizeof(float));
            float *C = k->alloc(be->ctx, (size_t)M * N * sizeof(float));
            size_t nh = (size_t)(N > M ? N : M) * K; /* A is the first M x K values, W the first N x K */
            float *h = malloc(nh * sizeof *h);
            if (!h)
                return 1;
            fill(h, nh, 0);
            k->upload(be->ctx, W, h, (size_t)N * K * sizeof *h);
            k->upload(be->ctx, A, h, (size_t)M * K * sizeof *h);
            void *Wp = nmt_pack(be, W, N, K, 0), *Wq = nmt_pack(be, W, N, K, 1);
            struct njob jf = { be, M, N, K, A, Wp, C }, jq = { be, M, N, K, A, Wq, C };
            double flop = 2.0 * M * N * K;
            double t_f = timeit(njob_run, &jf, secs), t_q = timeit(njob_run, &jq, secs);
            float last;
            k->download(be->ctx, &last, C, sizeof last);
            printf("%5d %5d %5d %10.1f %10.1f\n", M, N, K, flop / t_f * 1e-9, flop / t_q * 1e-9);
            fflush(stdout);
            free(h);
            k->free(be->ctx, A), k->free(be->ctx, W), k->free(be->ctx, C), k->free(be->ctx, Wp), k->free(be->ctx, Wq);
        }
    backend_close(be);
    return 0;
}

/* ---- check: correctness and batch invariance of oneDNN ---- */

/* Rows of X and Y (R rows of N floats) whose bits differ; *MAXD the largest |x - y| / max(|y|, 1e-30). */
static int rows_differ(const float *x, const float *y, int R, int N, double *maxd)
{
    int bad = 0;
    for (int i = 0; i < R; i++) {
        if (!memcmp(x + (size_t)i * N, y + (size_t)i * N, (size_t)N * sizeof *x))
            continue;
        bad++;
        for (int j = 0; j < N; j++) {
            double a = x[(size_t)i * N + j], b = y[(size_t)i * N + j];
            double d = fabs(a - b) / (fabs(b) > 1e-30 ? fabs(b) : 1e-30);
            *maxd = d > *maxd ? d : *maxd;
        }
    }
    return bad;
}

/* C (M,N) for the M float rows A0, in blocks of B rows (B divides M) through one primitive made
 * for B rows; IMPL (64 bytes) receives its implementation name. */
static void mm_blocks(float *C, char *impl, int q, int M, int B, int N, int K, const void *W, const float *sw,
                      const float *A0)
{
    struct mm m;
    mm_init(&m, q, B, N, K, W, sw);
    for (int r = 0; r < M; r += B) {
        mm_rows(&m, A0 + (size_t)r * K);
        memcpy(C + (size_t)r * N, handle(m.dst), (size_t)B * N * sizeof *C);
    }
    memcpy(impl, m.impl, sizeof m.impl);
    mm_free(&m);
}

static int check(int threads)
{
    onednn_open(threads);
    int fails = 0;
    /* 1. correctness on one shape (M 64, N 384, K 128: the TINY model's fused QKV projection) */
    {
        int M = 64, N = 384, K = 128;
        float *W = xalloc((size_t)N * K * 4), *A = xalloc((size_t)M * K * 4), *sw = xalloc((size_t)N * 4);
        float *sa = xalloc((size_t)M * 4), *C = xalloc((size_t)M * N * 4), *Cf = xalloc((size_t)M * N * 4);
        int8_t *wq = xalloc((size_t)N * K), *aq = xalloc((size_t)M * K);
        fill(W, (size_t)N * K, 0);
        fill(A, (size_t)M * K, 12345);
        quant_weights(wq, sw, W, N, K);
        char iq[64], ifl[64];
        mm_blocks(C, iq, 1, M, M, N, K, wq, sw, A);
        mm_blocks(Cf, ifl, 0, M, M, N, K, W, NULL, A);
        for (int i = 0; i < M; i++)
            sa[i] = quant_row_plain(aq + (size_t)i * K, A + (size_t)i * K, K, K);
        long exact = 0;
        double qerr = 0, ferr = 0, qvsf = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                int32_t S = 0;
                double f = 0;
                for (int kk = 0; kk < K; kk++) {
                    S += (int32_t)aq[(size_t)i * K + kk] * wq[(size_t)j * K + kk];
                    f += (double)A[(size_t)i * K + kk] * W[(size_t)j * K + kk];
                }
                float ref = ((float)S * sw[j]) * sa[i]; /* nmt's epilogue */
                float c = C[(size_t)i * N + j], cf = Cf[(size_t)i * N + j];
                exact += !memcmp(&c, &ref, sizeof c);
                double e = fabs(c - ref) / (fabs(ref) > 1e-6 ? fabs(ref) : 1e-6);
                qerr = e > qerr ? e : qerr;
                e = fabs(cf - f) / (fabs(f) > 1e-6 ? fabs(f) : 1e-6);
                ferr = e > ferr ? e : ferr;
                e = fabs(c - f);
                qvsf = e > qvsf ? e : qvsf;
            }
        int ok = qerr < 1e-5 && ferr < 1e-4;
        fails += !ok;
        /* the same with 7-bit weights (levels [-63, 63], scale max|w| / 63): oneDNN's non-VNNI int8
         * code adds 128 to s8 activations and multiplies u8 by s8 with vpmaddubsw, whose int16 pair
         * sums saturate for 8-bit weights (2 * 255 * 127 > 32767); 7-bit weights keep them exact */
        int8_t *wq7 = xalloc((size_t)N * K);
        float *sw7 = xalloc((size_t)N * 4), *C7 = xalloc((size_t)M * N * 4);
        for (int j = 0; j < N; j++) {
            float amax = 0;
            for (int kk = 0; kk < K; kk++)
                amax = fabsf(W[(size_t)j * K + kk]) > amax ? fabsf(W[(size_t)j * K + kk]) : amax;
            sw7[j] = amax / 63.0f;
            for (int kk = 0; kk < K; kk++)
                wq7[(size_t)j * K + kk] = (int8_t)rintf(W[(size_t)j * K + kk] * (63.0f / amax));
        }
        char i7[64];
        mm_blocks(C7, i7, 1, M, M, N, K, wq7, sw7, A);
        long exact7 = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                int32_t S = 0;
                for (int kk = 0; kk < K; kk++)
                    S += (int32_t)aq[(size_t)i * K + kk] * wq7[(size_t)j * K + kk];
                float ref = ((float)S * sw7[j]) * sa[i], c = C7[(size_t)i * N + j];
                exact7 += !memcmp(&c, &ref, sizeof c);
            }
        free(wq7), free(sw7), free(C7);
        printf("correctness M %d N %d K %d: s8 against the exact int32 reference: %ld/%d bit-identical, max rel "
               "err %.2g; f32 against double: max rel err %.2g; s8 against the float product: max abs err %.3g "
               "(quantisation); implementations %s, %s -> %s\n"
               "  the same with 7-bit weights ([-63, 63]): %ld/%d bit-identical to the exact reference%s\n",
               M, N, K, exact, M * N, qerr, ferr, qvsf, iq, ifl, ok ? "ok" : "FAIL", exact7, M * N,
               !ok && exact7 == (long)M * N ? " (so the errors above are oneDNN's int16 saturation)" : "");
        /* oneDNN's int8 bits against nmt's (same quantisation, same epilogue formula) */
        struct backend *be = backend_open("cpu", &(struct nmt_backend_opts){ .size = sizeof(struct nmt_backend_opts),
                                                                            .threads = threads });
        if (be && be->ops.linear_pack_q) {
            float *Wd = be->ops.alloc(be->ctx, (size_t)N * K * 4), *Ad = be->ops.alloc(be->ctx, (size_t)M * K * 4);
            float *Cd = be->ops.alloc(be->ctx, (size_t)M * N * 4), *Cn = xalloc((size_t)M * N * 4);
            be->ops.upload(be->ctx, Wd, W, (size_t)N * K * 4);
            be->ops.upload(be->ctx, Ad, A, (size_t)M * K * 4);
            void *Wq = nmt_pack(be, Wd, N, K, 1);
            struct njob j = { be, M, N, K, Ad, Wq, Cd };
            njob_run(&j);
            be->ops.download(be->ctx, Cn, Cd, (size_t)M * N * 4);
            long same = 0;
            for (size_t i = 0; i < (size_t)M * N; i++)
                same += !memcmp(&Cn[i], &C[i], 4);
            printf("oneDNN s8 against nmt int8 (linear_rowinv, NMT_CPU_ISA=%s): %ld/%d bit-identical\n",
                   getenv("NMT_CPU_ISA") ? getenv("NMT_CPU_ISA") : "(default)", same, M * N);
            be->ops.free(be->ctx, Wd), be->ops.free(be->ctx, Ad), be->ops.free(be->ctx, Cd), be->ops.free(be->ctx, Wq);
            free(Cn);
            backend_close(be);
        } else
            printf("oneDNN s8 against nmt int8: skipped (%s)\n", be ? "no linear_pack_q" : nmt_errmsg());
        free(W), free(A), free(sw), free(sa), free(C), free(Cf), free(wq), free(aq);
    }
    /* 2. batch invariance: rows 0..63 alone (M 1), as M 64, inside M 256; M 64 on 1 thread; the
     * shapes of the TINY and SMALL models and BASE's feed-forward output (512, 2048) */
    static const int nk[][2] = { { 384, 128 }, { 8000, 128 }, { 1024, 256 }, { 256, 1024 }, { 8000, 256 },
                                 { 512, 2048 } };
    for (size_t s = 0; s < sizeof nk / sizeof nk[0]; s++)
        for (int q = 1; q >= 0; q--) {
            int N = nk[s][0], K = nk[s][1], R = 64, BIG = 256;
            float *W = xalloc((size_t)N * K * 4), *A = xalloc((size_t)BIG * K * 4), *sw = xalloc((size_t)N * 4);
            int8_t *wq = xalloc((size_t)N * K);
            float *c64 = xalloc((size_t)R * N * 4), *c1 = xalloc((size_t)R * N * 4);
            float *c256 = xalloc((size_t)BIG * N * 4), *c64t1 = xalloc((size_t)R * N * 4);
            fill(W, (size_t)N * K, 0);
            fill(A, (size_t)BIG * K, 777);
            quant_weights(wq, sw, W, N, K);
            const void *w = q ? (const void *)wq : (const void *)W;
            char i64[64], i1[64], i256[64], it1[64];
            mm_blocks(c64, i64, q, R, R, N, K, w, q ? sw : NULL, A);
            mm_blocks(c1, i1, q, R, 1, N, K, w, q ? sw : NULL, A);
            mm_blocks(c256, i256, q, BIG, BIG, N, K, w, q ? sw : NULL, A);
            omp_set_num_threads(1);
            mm_blocks(c64t1, it1, q, R, R, N, K, w, q ? sw : NULL, A);
            omp_set_num_threads(threads);
            double d1 = 0, d256 = 0, dt = 0;
            int b1 = rows_differ(c1, c64, R, N, &d1), b256 = rows_differ(c256, c64, R, N, &d256);
            int bt = rows_differ(c64t1, c64, R, N, &dt);
            printf("batch invariance %-3s N %4d K %4d: rows (of 64) whose bits differ from M=64: alone (M=1) %2d "
                   "(max rel diff %.2g), inside M=256 %2d (%.2g); M=64 on 1 thread vs %d: %2d (%.2g) [%s; M=1 %s; "
                   "M=256 %s; 1 thread %s]\n",
                   q ? "s8" : "f32", N, K, b1, d1, b256, d256, threads, bt, dt, i64, i1, i256, it1);
            free(W), free(A), free(sw), free(wq), free(c64), free(c1), free(c256), free(c64t1);
        }
    return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    const int(*NK)[2] = argc > 3 && !strcmp(argv[3], "tiny") ? tiny_nk : small_nk;
    double secs = argc > 4 ? atof(argv[4]) : 0.2;
    if (threads < 1 || (argc > 3 && strcmp(argv[3], "tiny") && strcmp(argv[3], "small")) || !(secs >= 0)) {
        fprintf(stderr, "usage: onednn_bench nmt|onednn|check [THREADS [tiny|small [SECONDS]]]\n");
        return 2;
    }
    __builtin_cpu_init();
    have_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (!strcmp(mode, "nmt"))
        return bench_nmt(threads, NK, secs);
    if (!strcmp(mode, "onednn"))
        return bench_onednn(threads, NK, secs);
    if (!strcmp(mode, "check"))
        return check(threads);
    fprintf(stderr, "usage: onednn_bench nmt|onednn|check [THREADS [tiny|small [SECONDS]]]\n");
    return 2;
}
