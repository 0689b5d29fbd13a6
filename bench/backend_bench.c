/* backend_bench: sgemm GFLOP/s through a backend plugin at the BASE model's shapes (d=512,
 * ff=2048, 4096 tokens, vocabulary V) next to OpenBLAS's own cblas_sgemm at 2048^3 in the same
 * process, then the time of one BASE training step's worth of calls of every other kernel, and
 * an estimate of the whole step (every gemm shape timed once and multiplied by its count).
 * PRECISION bf16 runs the plugin's products under set_precision(BF16) (operands rounded to bf16).
 * Usage: backend_bench [BACKEND [THREADS [V [PRECISION]]]]   (defaults: cpu, all cores, 37000, float32) */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "run/backend_loader.h"
#include "cli/cli.h"

static struct backend *be;
#define OP(f, ...) be->ops.f(be->ctx, __VA_ARGS__)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static float *dev(size_t n)
{
    float *d = be->ops.alloc(be->ctx, n * sizeof *d);
    if (!d) {
        fprintf(stderr, "backend_bench: %s\n", be->ops.last_error(be->ctx));
        exit(1);
    }
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    be->ops.upload(be->ctx, d, h, n * sizeof *h);
    free(h);
    return d;
}

/* A float of device memory that wait_all downloads. */
static float *wait_buf;

/* Waits for every queued kernel: a download waits for all earlier work. */
static void wait_all(void)
{
    float h;
    be->ops.download(be->ctx, &h, wait_buf, sizeof h);
}

/* Seconds for one gemm (M,N,K) with the transposes given, best of REPS after a warm-up. */
static double time_gemm(int ta, int tb, int M, int N, int K, int reps)
{
    float *A = dev((size_t)M * K), *B = dev((size_t)K * N), *C = dev((size_t)M * N);
    double best = INFINITY;
    for (int r = 0; r <= reps; r++) {
        double t0 = now();
        OP(gemm, ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, r ? 1.0f : 0.0f, C, N);
        wait_all();
        double t = now() - t0;
        if (r && t < best)
            best = t;
    }
    be->ops.free(be->ctx, A), be->ops.free(be->ctx, B), be->ops.free(be->ctx, C);
    return best;
}

int main(int argc, char **argv)
{
    const char *spec = argc > 1 ? argv[1] : "cpu";
    int threads = argc > 2 ? atoi(argv[2]) : 0;
    int V = argc > 3 ? atoi(argv[3]) : 37000;
    struct nmt_backend_opts o = { .size = sizeof o, .threads = threads };
    be = backend_open(spec, &o);
    if (!be) {
        fprintf(stderr, "backend_bench: %s\n", nmt_errmsg());
        return 1;
    }
    const char *precision = argc > 4 ? argv[4] : "float32";
    if (strcmp(precision, "float32") && strcmp(precision, "bf16")) {
        fprintf(stderr, "backend_bench: precision '%s' is not float32 or bf16\n", precision);
        return 2;
    }
    if (!strcmp(precision, "bf16") && (!be->ops.set_precision || be->ops.set_precision(be->ctx, NMT_DTYPE_BF16) < 0)) {
        fprintf(stderr, "backend_bench: %s: no bf16 products\n", spec);
        return 1;
    }
    wait_buf = dev(1);
    struct nmt_backend_props p;
    be->ops.props(be->ctx, &p);
    printf("backend %s (%s), %s, products in %s\n\n", be->ops.name, be->path, p.device, precision);

    /* ---- sgemm ---- */
    int Ntok = 4096, D = 512, F = 2048;
    double peak;
    {
        int n = 2048;
        float *A = dev((size_t)n * n), *B = dev((size_t)n * n), *C = dev((size_t)n * n);
        double best = INFINITY;
        for (int r = 0; r < 4; r++) {
            double t0 = now();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, A, n, B, n, 0, C, n);
            double t = now() - t0;
            if (r && t < best)
                best = t;
        }
        peak = 2.0 * n * n * n / best / 1e9;
        be->ops.free(be->ctx, A), be->ops.free(be->ctx, B), be->ops.free(be->ctx, C);
    }
    static const struct { const char *what; int ta, tb, M, N, K; } sh[] = {
        { "2048^3 (through the plugin)", 0, 0, 2048, 2048, 2048 },
        { "linear d->d fwd: 4096x512x512 (x W^T)", 0, 1, 4096, 512, 512 },
        { "ffn in fwd: 4096x2048x512", 0, 1, 4096, 2048, 512 },
        { "ffn out fwd: 4096x512x2048", 0, 1, 4096, 512, 2048 },
        { "ffn in dW: 2048x512x4096 (dy^T x)", 1, 0, 2048, 512, 4096 },
        { "vocab projection fwd: 4096xVx512", 0, 1, 4096, -1, 512 },
        { "vocab projection dx: 4096x512xV", 0, 0, 4096, 512, -1 },
    };
    printf("%-42s %10s %10s %8s\n", "sgemm shape (M x N x K)", "ms", "GFLOP/s", "of peak");
    printf("%-42s %10s %10.1f %8s\n", "OpenBLAS cblas_sgemm 2048^3 (direct)", "", peak, "100%");
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
        int M = sh[i].M, N = sh[i].N < 0 ? V : sh[i].N, K = sh[i].K < 0 ? V : sh[i].K;
        double t = time_gemm(sh[i].ta, sh[i].tb, M, N, K, 2);
        double gf = 2.0 * M * N * K / t / 1e9;
        printf("%-42s %10.2f %10.1f %7.0f%%\n", sh[i].what, t * 1e3, gf, 100 * gf / peak);
    }

    /* ---- one BASE training step: 6+6 layers, B=128 sentences of T=32 (4096 tokens each side) ---- */
    int L = 6, B = 128, T = 32, H = 8, dh = 64;
    /* gemm time of a step: every linear layer (rows, out, in) costs a forward, a dx and a dW gemm */
    struct { int out, in, count; } lin[] = {
        { 3 * D, D, L }, { D, D, L }, { F, D, L }, { D, F, L },           /* encoder: qkv, o, ff1, ff2 */
        { 3 * D, D, L }, { D, D, 2 * L }, { 2 * D, D, L }, { F, D, L }, /* decoder: qkv, self o + cross q, cross kv, ff1 */
        { D, F, L }, { D, D, L },                                         /* decoder: ff2, cross o */
        { V, D, 1 },                                                       /* vocabulary projection (tied) */
    };
    double tg = 0;
    for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
        double t = time_gemm(0, 1, Ntok, lin[i].out, lin[i].in, 1) + time_gemm(0, 0, Ntok, lin[i].in, lin[i].out, 1) +
                   time_gemm(1, 0, lin[i].out, lin[i].in, Ntok, 1);
        tg += t * lin[i].count;
    }

    size_t nparam = (size_t)V * D + (size_t)L * (4 * D * D + 2 * D * F + 9 * D + F) +
                    (size_t)L * (8 * D * D + 2 * D * F + 15 * D + F) + 2 * D;
    float *x = dev((size_t)Ntok * F), *y = dev((size_t)Ntok * F), *z = dev((size_t)Ntok * F);
    float *qkv = dev((size_t)Ntok * 3 * D), *dqkv = dev((size_t)Ntok * 3 * D), *att = dev((size_t)Ntok * D);
    float *P = dev((size_t)B * H * T * T), *g = dev(F), *bt = dev(F), *mu = dev(Ntok), *rs = dev(Ntok);
    float *logits = dev((size_t)Ntok * V), *emb = dev((size_t)V * D), *demb = dev((size_t)V * D);
    float *param = dev(nparam), *grad = dev(nparam), *m1 = dev(nparam), *m2 = dev(nparam);
    int32_t *ids = (int32_t *)dev(Ntok), *pos = (int32_t *)dev(Ntok), *klen = (int32_t *)dev(B);
    {
        int32_t *h = malloc(Ntok * sizeof *h);
        for (int i = 0; i < Ntok; i++)
            h[i] = 1 + (i * 7919) % (V - 1);
        be->ops.upload(be->ctx, ids, h, Ntok * sizeof *h);
        for (int i = 0; i < Ntok; i++)
            h[i] = i % T;
        be->ops.upload(be->ctx, pos, h, Ntok * sizeof *h);
        for (int i = 0; i < B; i++)
            h[i] = T - i % 5;
        be->ops.upload(be->ctx, klen, h, B * sizeof *h);
        free(h);
    }
    struct nmt_attn_args a = { .B = B, .Tq = T, .Tk = T, .H = H, .dh = dh, .q_ld = 3 * D, .q_bs = (int64_t)T * 3 * D,
                               .k_ld = 3 * D, .k_bs = (int64_t)T * 3 * D, .v_ld = 3 * D, .v_bs = (int64_t)T * 3 * D,
                               .o_ld = D, .o_bs = (int64_t)T * D, .klen = klen, .scale = 0.125f, .dropout = 0.1f,
                               .seed = 1 };
    struct nmt_attn_args ac = a;
    ac.causal = 1, ac.klen = NULL;
    size_t nd = (size_t)Ntok * D, nf = (size_t)Ntok * F;
    int natt = 3 * L, nln = 5 * L, nadd = 2 * 5 * L, ndrop = 5 * L + 2, nrelu = 2 * L;
    int nbias_d = 11 * L, nbias_f = 2 * L; /* bias adds/grads on d-wide (approx.) and ff-wide outputs */
    struct { const char *what; int calls; double t; } k[12];
    int nk = 0;
    for (int rep = 0; rep < 2; rep++) {
        nk = 0;
        double t0;
#define TIME(name, ncalls, stmt)                                                                   \
    do {                                                                                           \
        t0 = now();                                                                                \
        for (int c_ = 0; c_ < (ncalls); c_++)                                                      \
            stmt;                                                                                  \
        wait_all();                                                                                \
        double t_ = now() - t0;                                                                    \
        if (rep == 0 || t_ < k[nk].t)                                                              \
            k[nk].t = t_;                                                                          \
        k[nk].what = name, k[nk].calls = ncalls, nk++;                                             \
    } while (0)
        TIME("attention forward (T=32, H=8, dh=64)", natt, (OP(attention_forward, att, P, qkv, qkv + D, qkv + 2 * D, c_ % 3 == 1 ? &ac : &a)));
        TIME("attention backward", natt, (OP(attention_backward, dqkv, dqkv + D, dqkv + 2 * D, att, qkv, qkv + D, qkv + 2 * D, P, c_ % 3 == 1 ? &ac : &a)));
        TIME("layernorm forward (4096x512)", nln, (OP(layernorm_forward, y, mu, rs, x, g, bt, Ntok, D, 1e-5f)));
        TIME("layernorm backward", nln, (OP(layernorm_backward, z, g, bt, y, x, mu, rs, g, Ntok, D)));
        TIME("residual add + gradient adds (4096x512)", nadd, (OP(add, y, x, z, nd)));
        TIME("dropout forward+backward (4096x512)", 2 * ndrop, (OP(dropout_forward, y, x, nd, 0.1f, 1, (uint64_t)c_ * nd)));
        TIME("relu forward+backward (4096x2048)", nrelu, (c_ % 2 ? OP(relu_backward, y, z, x, nf) : OP(relu_forward, y, x, nf)));
        TIME("bias add + bias grad", 2 * (nbias_d + nbias_f), (c_ % 2 ? OP(bias_grad, g, x, Ntok, c_ % 4 == 1 ? F : D) : OP(bias_add, x, g, Ntok, c_ % 4 == 0 ? F : D)));
        TIME("embedding forward+backward (src, tgt)", 4, (c_ % 2 ? OP(embedding_backward, demb, x, ids, pos, Ntok, D, V, 22.6f) : OP(embedding_forward, x, ids, pos, emb, Ntok, D, V, 22.6f)));
        struct nmt_xent_result res;
        TIME("cross-entropy + dlogits in place (4096xV)", 1, (OP(cross_entropy, &res, logits, NULL, logits, ids, Ntok, V, 0.1f, 0, 1.0f / Ntok)));
        TIME("grad norm + Adam + zero grads (all params)", 1, (OP(sumsq, &(double){ 0 }, grad, nparam), OP(adam_update, param, m1, m2, grad, nparam, 1e-4f, 0.9f, 0.98f, 1e-9f, 10, 1.0f), OP(memset_zero, grad, nparam * sizeof(float))));
    }
    double tk = 0;
    printf("\none BASE training step (6+6 layers, d=512, ff=2048, h=8, 4096+4096 tokens, V=%d, %.1fM params):\n",
           V, nparam / 1e6);
    printf("%-46s %6s %10s\n", "kernel", "calls", "ms");
    for (int i = 0; i < nk; i++) {
        printf("%-46s %6d %10.1f\n", k[i].what, k[i].calls, k[i].t * 1e3);
        tk += k[i].t;
    }
    printf("%-46s %6s %10.1f\n", "all non-matmul kernels", "", tk * 1e3);
    printf("%-46s %6s %10.1f\n", "gemm (every linear: fwd, dx, dW; shapes x counts)", "", tg * 1e3);
    printf("non-matmul share of the step: %.1f%% (attention: %.1f%%)\n", 100 * tk / (tk + tg),
           100 * (k[0].t + k[1].t) / (tk + tg));
    backend_close(be);
    return 0;
}
