/* test_cpu_kernels: every kernel of the cpu plugin against a naive double-precision reference on
 * random inputs of awkward sizes (1, primes, not multiples of 8); every backward against central
 * finite differences of the double reference; the results independent of the thread count.
 * Prints the max relative error of each check. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "run/backend_loader.h"
#include "test.h"
#include "cli/cli.h"

static struct backend *be, *be1; /* 2 threads, 1 thread */
#define OPS (be->ops)
#define CTX (be->ctx)

static uint64_t rng_state = 12345;
static double urand(void) /* uniform [0, 1) */
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}
/* 1 when this CPU has the kernel path ISA ("avx512", "avx2", "portable"), as the plugin decides
 * (the float32 kernels take their AVX-512 path under avx512vnni too);
 * a cap of NMT_CPU_ISA above the CPU's widest path falls back to it, so a path the CPU lacks is
 * reported as skipped, not as tested. */
static int cpu_has(const char *isa)
{
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (!strcmp(isa, "avx512"))
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    return !strcmp(isa, "avx2") ? avx2 : 1;
}

static float *frand(size_t n, double lo, double hi)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(lo + (hi - lo) * urand());
    return x;
}
static double *todouble(const float *x, size_t n)
{
    double *d = malloc((n ? n : 1) * sizeof *d);
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}
static float *fcopy(const float *x, size_t n)
{
    float *y = malloc((n ? n : 1) * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

/* max |a - r| / max(max |r|, floor): a normwise relative error. */
static double relerr(const float *a, const double *r, size_t n, double floor)
{
    double num = 0, den = floor;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - r[i]);
        if (!(d <= num)) /* NaN counts */
            num = isnan(d) ? INFINITY : d;
        if (fabs(r[i]) > den)
            den = fabs(r[i]);
    }
    return num / den;
}

static void report(const char *what, double err, double tol)
{
    test_ok(err <= tol, "%s: max relative error %.3g (tolerance %.0e)", what, err, tol);
}

/* Central finite differences of F (a scalar function of the double array X of N elements, with
 * ARG) compared with the analytic gradient ANA; returns the normwise relative error. */
typedef double (*scalar_fn)(void *arg);
static double fd_check(double *x, size_t n, scalar_fn f, void *arg, const float *ana)
{
    double num = 0, den = 1e-6;
    for (size_t i = 0; i < n; i++) {
        double h = 1e-5 * (fabs(x[i]) > 1 ? fabs(x[i]) : 1), x0 = x[i];
        x[i] = x0 + h;
        double fp = f(arg);
        x[i] = x0 - h;
        double fm = f(arg);
        x[i] = x0;
        double g = (fp - fm) / (2 * h);
        if (fabs(g - ana[i]) > num || isnan(ana[i]))
            num = isnan(ana[i]) ? INFINITY : fabs(g - ana[i]);
        if (fabs(g) > den)
            den = fabs(g);
    }
    return num / den;
}

/* ---------------- gemm ---------------- */

static void ref_gemm(double *C, int ta, int tb, int M, int N, int K, double alpha, const float *A, int lda,
                     const float *B, int ldb, double beta, const float *C0, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                     (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
            C[(size_t)i * ldc + j] = alpha * s + (beta == 0 ? 0 : beta * C0[(size_t)i * ldc + j]);
        }
}

static void test_gemm(void)
{
    static const int shapes[][3] = { { 1, 1, 1 }, { 7, 13, 5 }, { 31, 17, 64 }, { 3, 1, 97 }, { 64, 33, 9 } };
    double worst = 0;
    int nanok = 1;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
                float *A = frand((size_t)(ta ? K : M) * lda, -1, 1), *B = frand((size_t)(tb ? N : K) * ldb, -1, 1);
                float *C = frand((size_t)M * ldc, -1, 1);
                double *R = malloc((size_t)M * ldc * sizeof *R);
                float beta = (s % 2) ? 0.5f : 0.0f;
                if (beta == 0)
                    for (size_t i = 0; i < (size_t)M * ldc; i++)
                        C[i] = NAN; /* beta == 0 must not read C */
                ref_gemm(R, ta, tb, M, N, K, 1.5, A, lda, B, ldb, beta, C, ldc);
                int rc = OPS.gemm(CTX, ta, tb, M, N, K, 1.5f, A, lda, B, ldb, beta, C, ldc);
                for (int i = 0; i < M; i++) {
                    double e = relerr(C + (size_t)i * ldc, R + (size_t)i * ldc, (size_t)N, 1);
                    if (rc != 0 || e > worst)
                        worst = rc ? INFINITY : e;
                    for (int j = 0; j < N; j++)
                        nanok &= !isnan(C[(size_t)i * ldc + j]);
                }
                free(A), free(B), free(C), free(R);
            }
    report("gemm (all transposes, padded ld, alpha, beta)", worst, 1e-5);
    test_ok(nanok, "gemm with beta 0 ignores NaN in C");
    test_ok(OPS.gemm(CTX, 0, 0, 2, 2, 2, 1, (float[4]){ 0 }, 1, (float[4]){ 0 }, 2, 0, (float[4]){ 0 }, 2) < 0 &&
                strstr(OPS.last_error(CTX), "leading dimension"),
            "gemm refuses lda < K: '%s'", OPS.last_error(CTX));
}

/* ---------------- gemm_rowinv ---------------- */

static void test_gemm_rowinv_paths(const char *path)
{
    static const int shapes[][3] = { { 1, 1, 1 }, { 5, 7, 8 }, { 13, 17, 9 }, { 4, 3, 33 }, { 9, 50, 256 },
                                     { 31, 4, 7 }, { 2, 2, 1 }, { 66, 41, 100 } };
    double worst = 0;
    int nanok = 1;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        int lda = K + 3, ldb = K + 1, ldc = N + 2;
        float *A = frand((size_t)M * lda, -1, 1), *B = frand((size_t)N * ldb, -1, 1);
        float *C = frand((size_t)M * ldc, -1, 1);
        double *R = malloc((size_t)M * ldc * sizeof *R);
        float beta = (s % 2) ? 0.5f : 0.0f;
        if (beta == 0)
            for (size_t i = 0; i < (size_t)M * ldc; i++)
                C[i] = NAN;
        ref_gemm(R, 0, 1, M, N, K, 1.5, A, lda, B, ldb, beta, C, ldc);
        int rc = OPS.gemm_rowinv(CTX, M, N, K, 1.5f, A, lda, B, ldb, beta, C, ldc);
        for (int i = 0; i < M; i++) {
            double e = relerr(C + (size_t)i * ldc, R + (size_t)i * ldc, (size_t)N, 1);
            if (rc != 0 || e > worst)
                worst = rc ? INFINITY : e;
            for (int j = 0; j < N; j++)
                nanok &= !isnan(C[(size_t)i * ldc + j]);
        }
        free(A), free(B), free(C), free(R);
    }
    char what[96];
    snprintf(what, sizeof what, "gemm_rowinv, %s path (awkward shapes, padded ld, alpha, beta)", path);
    report(what, worst, 1e-5);
    test_ok(nanok, "gemm_rowinv, %s path: beta 0 ignores NaN in C", path);

    /* row invariance: one row of A placed at different positions inside products of M rows, on
     * 1 and 2 threads, always gives the same bits as that row alone */
    static const int Ms[] = { 1, 2, 7, 8, 9, 31, 64, 200 };
    static const int NK[][2] = { { 37, 45 }, { 256, 256 }, { 1000, 64 } };
    int quick = getenv("NMT_TEST_QUICK") != NULL;
    for (size_t s = 0; s < sizeof NK / sizeof NK[0]; s++) {
        int N = NK[s][0], K = NK[s][1], maxM = quick ? 31 : 200;
        float *A = frand((size_t)maxM * K, -1, 1), *B = frand((size_t)N * K, -1, 1), *x = frand((size_t)K, -1, 1);
        float *C = malloc((size_t)maxM * N * sizeof *C), *y = malloc((size_t)N * sizeof *y);
        int same = OPS.gemm_rowinv(CTX, 1, N, K, 1.0f, x, K, B, K, 0.0f, y, N) == 0, tried = 0;
        for (size_t m = 0; m < sizeof Ms / sizeof Ms[0]; m++) {
            int M = Ms[m];
            if (M > maxM)
                continue;
            int where[3] = { 0, M / 2, M - 1 };
            for (int w = 0; w < 3; w++)
                for (int t = 0; t < 2; t++) {
                    struct backend *c = t ? be : be1;
                    float *Am = fcopy(A, (size_t)M * K);
                    memcpy(Am + (size_t)where[w] * K, x, (size_t)K * sizeof *x);
                    same &= c->ops.gemm_rowinv(c->ctx, M, N, K, 1.0f, Am, K, B, K, 0.0f, C, N) == 0 &&
                            !memcmp(C + (size_t)where[w] * N, y, (size_t)N * sizeof *y);
                    tried++;
                    free(Am);
                }
        }
        test_ok(same, "gemm_rowinv, %s path: a row gives identical bits alone and at %d positions inside products of "
                      "M = 1..%d rows on 1 and 2 threads (N=%d K=%d)", path, tried, maxM, N, K);
        free(A), free(B), free(x), free(C), free(y);
    }
}

static void test_gemm_rowinv(void)
{
    test_ok(OPS.gemm_rowinv != NULL, "cpu plugin has the optional gemm_rowinv slot (ABI %u.%u)", OPS.abi_major,
            OPS.abi_minor);
    if (!OPS.gemm_rowinv)
        return;
    /* every path this CPU has: NMT_CPU_ISA caps the path (a cap above the CPU's gives the CPU's) */
    static const char *const isas[] = { "avx512", "avx2", "portable" };
    for (size_t p = 0; p < sizeof isas / sizeof isas[0]; p++) {
        if (!cpu_has(isas[p])) {
            test_ok(1, "gemm_rowinv: NMT_CPU_ISA=%s # SKIP this CPU lacks the %s path", isas[p], isas[p]);
            continue;
        }
        setenv("NMT_CPU_ISA", isas[p], 1);
        char label[32];
        snprintf(label, sizeof label, "NMT_CPU_ISA=%s", isas[p]);
        test_gemm_rowinv_paths(label);
    }
    unsetenv("NMT_CPU_ISA");
    test_ok(OPS.gemm_rowinv(CTX, 2, 2, 3, 1, (float[6]){ 0 }, 2, (float[6]){ 0 }, 3, 0, (float[4]){ 0 }, 2) < 0 &&
                strstr(OPS.last_error(CTX), "leading dimension"),
            "gemm_rowinv refuses lda < K: '%s'", OPS.last_error(CTX));
    float c[4] = { 1, 2, 3, 4 };
    test_ok(OPS.gemm_rowinv(CTX, 2, 2, 0, 1, c, 1, c, 1, 0.5f, c, 2) == 0 && c[0] == 0.5f && c[3] == 2.0f,
            "gemm_rowinv with K = 0 scales C by beta");
}

/* ---------------- linear_pack, linear_rowinv ---------------- */

/* R (M,N) = A (M,K) @ W^T + bias, ReLU if relu, in double; W (N,K) */
static void ref_linear(double *R, int M, int N, int K, const float *A, int lda, const float *W, int ldw,
                       const float *bias, int relu, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = bias ? bias[j] : 0;
            for (int k = 0; k < K; k++)
                s += (double)A[(size_t)i * lda + k] * W[(size_t)j * ldw + k];
            R[(size_t)i * ldc + j] = relu && s < 0 ? 0 : s;
        }
}

/* W (N,K) as linear_pack leaves it, in a buffer from malloc (aligned_alloc), or NULL */
static void *pack(struct backend *c, const float *W, int N, int K, int ldw)
{
    size_t bytes = c->ops.linear_packed_bytes(c->ctx, N, K);
    void *p = aligned_alloc(64, (bytes + 64) & ~(size_t)63);
    if (p && c->ops.linear_pack(c->ctx, p, W, N, K, ldw) < 0) {
        free(p);
        return NULL;
    }
    return p;
}

/* linear_rowinv on rows X (M,K) with the packed weight WP (N,K), dense leading dimensions */
static int run_linear(struct backend *c, int M, int N, int K, const float *X, const void *Wp, const float *bias,
                      int relu, float *Y)
{
    return c->ops.linear_rowinv(c->ctx, M, N, K, X, K, Wp, bias, relu, Y, N);
}

static void test_linear_rowinv_paths(const char *path)
{
    static const int shapes[][3] = { { 1, 1, 1 }, { 5, 7, 8 }, { 13, 17, 9 }, { 4, 3, 33 }, { 9, 50, 256 },
                                     { 31, 4, 7 }, { 2, 2, 1 }, { 66, 41, 100 }, { 7, 130, 5 }, { 3, 0, 4 },
                                     { 6, 64, 0 }, { 8, 200, 3 } };
    double worst = 0;
    int padok = 1;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        int lda = K + 3, ldw = K + 5, ldc = N + 2, relu = (int)(s % 2);
        float *A = frand((size_t)M * lda, -1, 1), *W = frand((size_t)(N ? N : 1) * ldw, -1, 1);
        float *bias = s % 3 ? frand((size_t)N, -1, 1) : NULL, *C = frand((size_t)M * ldc, -1, 1);
        float *C0 = fcopy(C, (size_t)M * ldc);
        double *R = malloc(((size_t)M * ldc + 1) * sizeof *R);
        ref_linear(R, M, N, K, A, lda, W, ldw, bias, relu, ldc);
        void *Wp = pack(be, W, N, K, ldw);
        int rc = !Wp || OPS.linear_rowinv(CTX, M, N, K, A, lda, Wp, bias, relu, C, ldc);
        for (int i = 0; i < M; i++) {
            double e = N ? relerr(C + (size_t)i * ldc, R + (size_t)i * ldc, (size_t)N, 1) : 0;
            if (rc != 0 || e > worst)
                worst = rc ? INFINITY : e;
            for (int j = N; j < ldc; j++) /* the padding of each row of C is left alone */
                padok &= C[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j];
        }
        free(A), free(W), free(Wp), free(bias), free(C), free(C0), free(R);
    }
    char what[112];
    snprintf(what, sizeof what, "linear_rowinv, %s path (awkward shapes, padded ld, bias, ReLU)", path);
    report(what, worst, 1e-5);
    test_ok(padok, "linear_rowinv, %s path: writes no column of C past N", path);

    /* row invariance, as for gemm_rowinv */
    static const int Ms[] = { 1, 2, 5, 6, 7, 13, 64, 200 };
    static const int NK[][2] = { { 37, 45 }, { 256, 256 }, { 1000, 64 }, { 130, 128 } };
    int quick = getenv("NMT_TEST_QUICK") != NULL;
    for (size_t s = 0; s < sizeof NK / sizeof NK[0]; s++) {
        int N = NK[s][0], K = NK[s][1], maxM = quick ? 31 : 200;
        float *A = frand((size_t)maxM * K, -1, 1), *W = frand((size_t)N * K, -1, 1), *x = frand((size_t)K, -1, 1);
        float *bias = frand((size_t)N, -1, 1);
        float *C = malloc((size_t)maxM * N * sizeof *C), *y = malloc((size_t)N * sizeof *y);
        void *Wp = pack(be, W, N, K, K);
        int same = Wp && run_linear(be, 1, N, K, x, Wp, bias, 1, y) == 0, tried = 0;
        for (size_t m = 0; m < sizeof Ms / sizeof Ms[0] && Wp; m++) {
            int M = Ms[m];
            if (M > maxM)
                continue;
            int where[3] = { 0, M / 2, M - 1 };
            for (int w = 0; w < 3; w++)
                for (int t = 0; t < 2; t++) {
                    float *Am = fcopy(A, (size_t)M * K);
                    memcpy(Am + (size_t)where[w] * K, x, (size_t)K * sizeof *x);
                    same &= run_linear(t ? be : be1, M, N, K, Am, Wp, bias, 1, C) == 0 &&
                            !memcmp(C + (size_t)where[w] * N, y, (size_t)N * sizeof *y);
                    tried++;
                    free(Am);
                }
        }
        test_ok(same, "linear_rowinv, %s path: a row gives identical bits alone and at %d positions inside products "
                      "of M = 1..%d rows on 1 and 2 threads (N=%d K=%d)", path, tried, maxM, N, K);
        free(A), free(W), free(Wp), free(x), free(bias), free(C), free(y);
    }
}

static void test_linear_rowinv(void)
{
    int has = OPS.linear_packed_bytes && OPS.linear_pack && OPS.linear_rowinv;
    test_ok(has, "cpu plugin has the optional linear_pack and linear_rowinv slots (ABI %u.%u)", OPS.abi_major,
            OPS.abi_minor);
    if (!has)
        return;
    test_ok(OPS.linear_packed_bytes(CTX, 17, 3) == 64 + 32 * 3 * sizeof(float) && OPS.linear_packed_bytes(CTX, 0, 3) == 0,
            "linear_packed_bytes: a 64-byte header, then panels of 16 columns (17 x 3 -> %zu bytes)",
            OPS.linear_packed_bytes(CTX, 17, 3));
    static const char *const isas[] = { "avx512", "avx2", "portable" };
    for (size_t p = 0; p < sizeof isas / sizeof isas[0]; p++) {
        if (!cpu_has(isas[p])) {
            test_ok(1, "linear_rowinv: NMT_CPU_ISA=%s # SKIP this CPU lacks the %s path", isas[p], isas[p]);
            continue;
        }
        setenv("NMT_CPU_ISA", isas[p], 1);
        char label[32];
        snprintf(label, sizeof label, "NMT_CPU_ISA=%s", isas[p]);
        test_linear_rowinv_paths(label);
    }
    /* the AVX-512 and AVX2 paths run the same chain of fused multiply-adds per element */
    setenv("NMT_CPU_ISA", "avx512", 1);
    struct nmt_backend_props props;
    const char *wide = OPS.props(CTX, &props) == 0 ? props.device : "?";
    int M = 29, N = 1000, K = 128;
    float *A = frand((size_t)M * K, -1, 1), *W = frand((size_t)N * K, -1, 1), *bias = frand((size_t)N, -1, 1);
    float *C1 = malloc((size_t)M * N * sizeof *C1), *C2 = malloc((size_t)M * N * sizeof *C2);
    void *Wp = pack(be, W, N, K, K);
    int rc = !Wp || run_linear(be, M, N, K, A, Wp, bias, 0, C1);
    setenv("NMT_CPU_ISA", "avx2", 1);
    rc |= !Wp || run_linear(be, M, N, K, A, Wp, bias, 0, C2);
    unsetenv("NMT_CPU_ISA");
    if (cpu_has("avx512"))
        test_ok(rc == 0 && !memcmp(C1, C2, (size_t)M * N * sizeof *C1),
                "linear_rowinv: the widest path (%s) and the AVX2 path give identical bits", wide);
    else
        test_ok(1, "linear_rowinv: AVX-512 and AVX2 paths identical # SKIP this CPU lacks the avx512 path");
    free(A), free(W), free(Wp), free(bias), free(C1), free(C2);
    test_ok(OPS.linear_rowinv(CTX, 2, 4, 3, (float[6]){ 0 }, 2, (float[64]){ 0 }, NULL, 0, (float[8]){ 0 }, 4) < 0 &&
                strstr(OPS.last_error(CTX), "leading dimension"),
            "linear_rowinv refuses lda < K: '%s'", OPS.last_error(CTX));
    test_ok(OPS.linear_rowinv(CTX, -1, 4, 3, NULL, 3, NULL, NULL, 0, NULL, 4) < 0 &&
                strstr(OPS.last_error(CTX), "negative"),
            "linear_rowinv refuses a negative size: '%s'", OPS.last_error(CTX));
    test_ok(OPS.linear_pack(CTX, (float[16]){ 0 }, (float[4]){ 0 }, 2, 2, 1) < 0 && strstr(OPS.last_error(CTX), "ldw"),
            "linear_pack refuses ldw < K: '%s'", OPS.last_error(CTX));
}

/* ---------------- bias ---------------- */

static void test_bias(void)
{
    int M = 13, N = 37;
    float *out = frand((size_t)M * N, -1, 1), *b = frand(N, -1, 1), *db = frand(N, -1, 1);
    double *r = todouble(out, (size_t)M * N), *rdb = todouble(db, N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            r[i * N + j] += b[j];
            rdb[j] += out[i * N + j];
        }
    int rc = OPS.bias_grad(CTX, db, out, M, N); /* before bias_add changes out */
    report("bias_grad accumulates column sums", rc ? INFINITY : relerr(db, rdb, N, 1), 1e-6);
    rc = OPS.bias_add(CTX, out, b, M, N);
    report("bias_add", rc ? INFINITY : relerr(out, r, (size_t)M * N, 1), 1e-6);
    free(out), free(b), free(db), free(r), free(rdb);
}

/* ---------------- embedding ---------------- */

struct emb_case {
    int N, D, V;
    int32_t *ids, *pos;
    double *emb, *w, scale;
};

static void ref_embedding(double *out, const struct emb_case *c)
{
    for (int n = 0; n < c->N; n++)
        for (int j = 0; j < c->D; j++) {
            if (c->pos[n] < 0) {
                out[n * c->D + j] = 0;
                continue;
            }
            int i2 = j - j % 2;
            double ang = c->pos[n] / pow(10000.0, (double)i2 / c->D);
            out[n * c->D + j] = c->emb[c->ids[n] * c->D + j] * c->scale + (j % 2 ? cos(ang) : sin(ang));
        }
}

static double emb_loss(void *arg)
{
    struct emb_case *c = arg;
    double *out = malloc((size_t)c->N * c->D * sizeof *out), s = 0;
    ref_embedding(out, c);
    for (int i = 0; i < c->N * c->D; i++)
        s += out[i] * c->w[i];
    free(out);
    return s;
}

static void test_embedding(void)
{
    struct emb_case c = { .N = 11, .D = 6, .V = 5, .scale = 2.449 };
    c.ids = malloc(c.N * sizeof *c.ids);
    c.pos = malloc(c.N * sizeof *c.pos);
    for (int n = 0; n < c.N; n++) {
        c.ids[n] = (int32_t)(urand() * c.V);
        c.pos[n] = n == 4 ? -1 : n * 7; /* a padding row; positions up to 70 */
    }
    float *emb = frand((size_t)c.V * c.D, -1, 1), *out = frand((size_t)c.N * c.D, -1, 1);
    float *w = frand((size_t)c.N * c.D, -1, 1), *demb = frand((size_t)c.V * c.D, -1, 1);
    float *demb0 = fcopy(demb, (size_t)c.V * c.D);
    c.emb = todouble(emb, (size_t)c.V * c.D);
    c.w = todouble(w, (size_t)c.N * c.D);
    double *r = malloc((size_t)c.N * c.D * sizeof *r);
    ref_embedding(r, &c);
    int rc = OPS.embedding_forward(CTX, out, c.ids, c.pos, emb, c.N, c.D, c.V, (float)c.scale);
    report("embedding_forward (scale, sinusoid, padding row)", rc ? INFINITY : relerr(out, r, (size_t)c.N * c.D, 1), 1e-6);
    rc = OPS.embedding_backward(CTX, demb, w, c.ids, c.pos, c.N, c.D, c.V, (float)c.scale);
    for (int i = 0; i < c.V * c.D; i++)
        demb[i] -= demb0[i]; /* the accumulated part */
    report("embedding_backward (+=) vs finite differences",
           rc ? INFINITY : fd_check(c.emb, (size_t)c.V * c.D, emb_loss, &c, demb), 1e-5);
    c.ids[2] = c.V;
    rc = OPS.embedding_forward(CTX, out, c.ids, c.pos, emb, c.N, c.D, c.V, 1);
    test_ok(rc < 0 && strstr(OPS.last_error(CTX), "token id 5 at row 2"), "embedding refuses id out of range: '%s'",
            OPS.last_error(CTX));
    free(c.ids), free(c.pos), free(emb), free(out), free(w), free(demb), free(demb0), free(c.emb), free(c.w), free(r);
}

/* ---------------- attention ---------------- */

struct attn_case {
    struct nmt_attn_args a;
    int32_t klen[3];
    double *q, *k, *v, *w; /* w: weights of out in the scalar loss */
    size_t nq, nk, nv, no;
};

static void ref_attention(double *out, double *P, const struct attn_case *c)
{
    const struct nmt_attn_args *a = &c->a;
    double *s = malloc((size_t)(a->Tk + 1) * sizeof *s);
    memset(out, 0, c->no * sizeof *out);
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < a->H; h++)
            for (int i = 0; i < a->Tq; i++) {
                int64_t r = ((int64_t)b * a->H + h) * a->Tq + i;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < a->Tk; j++) {
                    int vis = j < c->klen[b] && (!a->causal || j <= i + a->causal_shift);
                    s[j] = -INFINITY;
                    if (!vis)
                        continue;
                    double d = 0;
                    for (int e = 0; e < a->dh; e++)
                        d += c->q[b * a->q_bs + i * a->q_ld + h * a->dh + e] * c->k[b * a->k_bs + j * a->k_ld + h * a->dh + e];
                    s[j] = d * a->scale;
                    if (s[j] > mx)
                        mx = s[j];
                }
                for (int j = 0; j < a->Tk; j++)
                    sum += s[j] == -INFINITY ? 0 : exp(s[j] - mx);
                for (int j = 0; j < a->Tk; j++) {
                    double p = s[j] == -INFINITY ? 0 : exp(s[j] - mx) / sum;
                    if (P)
                        P[r * a->Tk + j] = p;
                    if (a->dropout > 0)
                        p = nmt_rng_uniform(a->seed, a->offset + (uint64_t)(r * a->Tk + j)) >= a->dropout ? p / (1 - a->dropout) : 0;
                    for (int e = 0; e < a->dh; e++)
                        out[b * a->o_bs + i * a->o_ld + h * a->dh + e] += p * c->v[b * a->v_bs + j * a->v_ld + h * a->dh + e];
                }
            }
    free(s);
}

static double attn_loss(void *arg)
{
    struct attn_case *c = arg;
    double *out = malloc(c->no * sizeof *out), s = 0;
    ref_attention(out, NULL, c);
    for (size_t i = 0; i < c->no; i++)
        s += out[i] * c->w[i];
    free(out);
    return s;
}

static void run_attention(const char *name, int B, int Tq, int Tk, int H, int dh, int causal, int shift, float drop,
                          const int *klen, int fused)
{
    struct attn_case c = { 0 };
    struct nmt_attn_args *a = &c.a;
    a->B = B, a->Tq = Tq, a->Tk = Tk, a->H = H, a->dh = dh, a->causal = causal, a->causal_shift = shift;
    a->scale = (float)(1 / sqrt(dh)), a->dropout = drop, a->seed = 99, a->offset = 1000;
    int D = H * dh;
    /* fused: q, k, v are column blocks of one (B*T, 3D) buffer (Tq == Tk); else separate, padded rows */
    a->q_ld = a->k_ld = a->v_ld = fused ? 3 * D : D + 1;
    a->q_bs = (int64_t)Tq * a->q_ld;
    a->k_bs = a->v_bs = (int64_t)(Tk + (fused ? 0 : 2)) * a->k_ld; /* a cache with spare rows */
    a->o_ld = D, a->o_bs = (int64_t)Tq * D;
    for (int b = 0; b < B; b++)
        c.klen[b] = klen ? klen[b] : Tk;
    a->klen = klen ? c.klen : NULL;
    size_t nbuf = fused ? (size_t)B * Tq * 3 * D : (size_t)B * a->k_bs;
    c.nq = c.nk = c.nv = fused ? nbuf : (size_t)B * (a->q_bs > a->k_bs ? a->q_bs : a->k_bs);
    c.no = (size_t)B * Tq * D;
    float *qkv = frand(fused ? nbuf : 1, -1.5, 1.5);
    float *q = fused ? qkv : frand(c.nq, -1.5, 1.5), *k = fused ? qkv + D : frand(c.nk, -1.5, 1.5);
    float *v = fused ? qkv + 2 * D : frand(c.nv, -1.5, 1.5);
    size_t span = fused ? nbuf - 2 * D : c.nq; /* elements addressable from q, k or v */
    c.nq = c.nk = c.nv = span;
    c.q = todouble(q, span), c.k = todouble(k, span), c.v = todouble(v, span);
    float *out = frand(c.no, -1, 1), *P = frand((size_t)B * H * Tq * Tk, -1, 1), *w = frand(c.no, -1, 1);
    c.w = todouble(w, c.no);
    double *rout = malloc(c.no * sizeof *rout), *rP = malloc((size_t)B * H * Tq * Tk * sizeof *rP);
    ref_attention(rout, rP, &c);
    int rc = OPS.attention_forward(CTX, out, P, q, k, v, a);
    int finite = 1;
    for (size_t i = 0; i < c.no; i++)
        finite &= isfinite(out[i]);
    test_ok(rc == 0 && finite, "attention %s: forward runs, output finite (%s)", name, rc ? OPS.last_error(CTX) : "ok");
    report("attention forward out", relerr(out, rout, c.no, 1), 2e-6);
    report("attention forward P", relerr(P, rP, (size_t)B * H * Tq * Tk, 1), 2e-6);
    /* thread-count independence */
    float *out1 = frand(c.no, -1, 1), *P1 = frand((size_t)B * H * Tq * Tk, -1, 1);
    be1->ops.attention_forward(be1->ctx, out1, P1, q, k, v, a);
    test_ok(!memcmp(out, out1, c.no * sizeof *out) && !memcmp(P, P1, (size_t)B * H * Tq * Tk * sizeof *P),
            "attention %s: 1 thread and 2 threads give identical bits", name);
    if (drop == 0) {
        /* the forward of inference (no probabilities kept): its own AVX-512 path for dh a multiple
         * of 16 up to 64 and AVX2 path for a multiple of 8, on 1 and 2 threads */
        float *oi = frand(c.no, -1, 1), *oi1 = frand(c.no, -1, 1);
        rc = OPS.attention_forward(CTX, oi, NULL, q, k, v, a) |
             be1->ops.attention_forward(be1->ctx, oi1, NULL, q, k, v, a);
        char what[112];
        snprintf(what, sizeof what, "attention %s: forward without P (inference)", name);
        report(what, rc ? INFINITY : relerr(oi, rout, c.no, 1), 2e-6);
        test_ok(rc == 0 && !memcmp(oi, oi1, c.no * sizeof *oi),
                "attention %s: forward without P, 1 thread and 2 threads give identical bits", name);
        free(oi), free(oi1);
    }

    float *g = calloc(fused ? nbuf : 3 * span, sizeof *g);
    float *dq = g, *dk = fused ? g + D : g + span, *dv = fused ? g + 2 * D : g + 2 * span;
    rc = OPS.attention_backward(CTX, dq, dk, dv, w, q, k, v, P, a);
    test_ok(rc == 0, "attention %s: backward runs", name);
    /* FD only at the head columns of valid rows: gather the analytic gradient into dense arrays */
    double eq, ek, ev;
    {
        /* with a fused buffer, only the first D columns of each 3D-wide row belong to each view */
        float *aq = fcopy(dq, span), *ak = fcopy(dk, span), *av = fcopy(dv, span);
        if (fused)
            for (size_t i = 0; i < span; i++)
                if (i % (3 * (size_t)D) >= (size_t)D)
                    aq[i] = ak[i] = av[i] = 0;
        eq = fd_check(c.q, span, attn_loss, &c, aq);
        ek = fd_check(c.k, span, attn_loss, &c, ak);
        ev = fd_check(c.v, span, attn_loss, &c, av);
        free(aq), free(ak), free(av);
    }
    report("attention backward dq vs finite differences", eq, 1e-5);
    report("attention backward dk vs finite differences", ek, 1e-5);
    report("attention backward dv vs finite differences", ev, 1e-5);
    free(qkv);
    if (!fused)
        free(q), free(k), free(v);
    free(c.q), free(c.k), free(c.v), free(c.w), free(out), free(P), free(w), free(rout), free(rP), free(g), free(out1),
        free(P1);
}

/* One batch's attention, forward and backward, both ways (saved probabilities; saved statistics,
 * the probabilities recomputed), heads of width DH: every output in one buffer (OUT, room for
 * count floats), on the path NMT_CPU_ISA allows now. */
static float *attention_bits(int dh, int causal, float drop, size_t *count)
{
    enum { B = 2, Tq = 19, Tk = 37, H = 2 };
    static const int32_t klen[B] = { 37, 21 };
    int D = H * dh;
    struct nmt_attn_args a = { .B = B, .Tq = Tq, .Tk = Tk, .H = H, .dh = dh, .causal = causal, .causal_shift = 18,
                               .scale = (float)(1 / sqrt(dh)), .dropout = drop, .seed = 7, .offset = 11,
                               .klen = klen };
    a.q_ld = a.k_ld = a.v_ld = D + 1; /* rows that are not a multiple of 16 floats apart */
    a.q_bs = (int64_t)Tq * a.q_ld, a.k_bs = a.v_bs = (int64_t)Tk * a.k_ld;
    a.o_ld = D, a.o_bs = (int64_t)Tq * D;
    size_t nq = (size_t)B * a.q_bs, nk = (size_t)B * a.k_bs, no = (size_t)B * Tq * D, np = (size_t)B * H * Tq * Tk;
    rng_state = 5; /* the same inputs on every call */
    float *q = frand(nq, -2, 2), *k = frand(nk, -2, 2), *v = frand(nk, -2, 2), *dout = frand(no, -1, 1);
    *count = 2 * (no + np + 2 * no + 2 * nk + 2 * np) + 4 * nk;
    float *all = calloc(*count, sizeof *all), *o = all, *P = o + no, *lse = P + np;
    float *o2 = lse + 2 * np, *dq = o2 + no, *dk = dq + nq, *dv = dk + nk, *dq2 = dv + nk, *dk2 = dq2 + nq,
          *dv2 = dk2 + nk;
    int rc = OPS.attention_forward(CTX, o, P, q, k, v, &a) | OPS.attention_backward(CTX, dq, dk, dv, dout, q, k, v, P, &a);
    if (OPS.attention_forward_lse)
        rc |= OPS.attention_forward_lse(CTX, o2, lse, q, k, v, &a) |
              OPS.attention_backward_lse(CTX, dq2, dk2, dv2, dout, o2, lse, q, k, v, &a);
    free(q), free(k), free(v), free(dout);
    if (rc) {
        free(all);
        return NULL;
    }
    *count = (size_t)(dv2 + nk - all);
    return all;
}

/* The scores of 16 or 8 keys at a time from the keys transposed, two query rows side by side, and
 * the weighted sums held in registers (AVX-512, AVX2) give the bits of the portable path's one key
 * at a time: key lengths, causal masks, dropout, tails of both widths (37 keys), an odd number of
 * query rows (19), and widths that take them (16 .. 128) or not (40). */
static void test_attention_paths(void)
{
    static const char *const isas[] = { "avx512", "avx2" };
    static const int dhs[] = { 16, 32, 64, 128, 40 };
    for (size_t p = 0; p < sizeof isas / sizeof isas[0]; p++) {
        if (!cpu_has(isas[p])) {
            test_ok(1, "attention, NMT_CPU_ISA=%s # SKIP this CPU lacks the %s path", isas[p], isas[p]);
            continue;
        }
        int same = 1, cases = 0;
        for (size_t d = 0; d < sizeof dhs / sizeof *dhs; d++)
            for (int var = 0; var < 3; var++) {
                size_t n1 = 0, n2 = 0;
                setenv("NMT_CPU_ISA", "portable", 1);
                float *ref = attention_bits(dhs[d], var == 1, var == 2 ? 0.25f : 0, &n1);
                setenv("NMT_CPU_ISA", isas[p], 1);
                float *got = attention_bits(dhs[d], var == 1, var == 2 ? 0.25f : 0, &n2);
                same &= ref && got && n1 == n2 && !memcmp(ref, got, n1 * sizeof *ref);
                cases++;
                free(ref), free(got);
            }
        unsetenv("NMT_CPU_ISA");
        test_ok(same, "attention forward and backward (with P, and from saved statistics), NMT_CPU_ISA=%s: the bits "
                      "of the portable path in %d cases (dh 16 .. 128 and 40; key lengths, causal, dropout; 37 keys)",
                isas[p], cases);
    }
}

static void test_attention(void)
{
    int kl[3] = { 3, 0, 5 }; /* item 1 has no visible key: its output must be zeros */
    run_attention("padding mask, no key for one item", 3, 2, 5, 2, 3, 0, 0, 0, kl, 0);
    run_attention("causal self-attention, fused qkv", 2, 5, 5, 3, 4, 1, 0, 0, NULL, 1);
    run_attention("causal with shift, dropout", 2, 3, 7, 1, 5, 1, 4, 0.3f, (int[]){ 7, 6 }, 0);
    run_attention("one query, one key", 1, 1, 1, 1, 1, 0, 0, 0, NULL, 0);
    run_attention("cross-attention, dropout, dh 17", 2, 3, 4, 2, 17, 0, 0, 0.2f, (int[]){ 4, 2 }, 0);
    /* head widths of the inference path, with an item that sees no key */
    run_attention("cross-attention, dh 16", 3, 4, 9, 2, 16, 0, 0, 0, (int[]){ 9, 0, 4 }, 0);
    run_attention("decoder self-attention, dh 32", 2, 1, 23, 4, 32, 1, 22, 0, NULL, 0);
    run_attention("causal, fused qkv, dh 64", 2, 6, 6, 2, 64, 1, 0, 0, NULL, 1);
    run_attention("cross-attention over 3 blocks of 16 keys, dh 32", 2, 2, 41, 2, 32, 0, 0, 0, (int[]){ 41, 32 }, 0);
    if (!cpu_has("avx512")) /* the cases above ran the AVX2 path */
        test_ok(1, "attention on the AVX-512 path # SKIP this CPU lacks the avx512 path");
    /* the AVX2 inference path (dh a multiple of 8 up to 64; on an AVX-512 CPU also dh 8, 24, 40, 56),
     * and the generic loops under NMT_CPU_ISA=portable */
    if (!cpu_has("avx2")) {
        test_ok(1, "attention on the AVX2 path # SKIP this CPU lacks the avx2 path");
    } else {
        setenv("NMT_CPU_ISA", "avx2", 1);
        run_attention("dh 32 on the AVX2 path", 2, 3, 11, 4, 32, 0, 0, 0, (int[]){ 11, 5 }, 0);
        run_attention("dh 8 on the AVX2 path, an item without keys", 3, 2, 9, 2, 8, 0, 0, 0, (int[]){ 9, 0, 8 }, 0);
        run_attention("decoder self-attention, dh 64 on the AVX2 path", 2, 1, 17, 2, 64, 1, 16, 0, NULL, 0);
        unsetenv("NMT_CPU_ISA");
        run_attention("cross-attention, dh 24 (the AVX2 path on every CPU)", 2, 3, 13, 3, 24, 0, 0, 0, (int[]){ 13, 7 }, 0);
    }
    setenv("NMT_CPU_ISA", "portable", 1);
    run_attention("dh 32 on the portable path", 2, 3, 11, 4, 32, 0, 0, 0, (int[]){ 11, 5 }, 0);
    unsetenv("NMT_CPU_ISA");
}

/* ---------------- layer norm ---------------- */

struct ln_case {
    int N, D;
    double *x, *g, *b, *w, eps;
};

static void ref_ln(double *out, double *mean, double *rstd, const struct ln_case *c)
{
    for (int n = 0; n < c->N; n++) {
        double m = 0, v = 0;
        for (int j = 0; j < c->D; j++)
            m += c->x[n * c->D + j];
        m /= c->D;
        for (int j = 0; j < c->D; j++)
            v += (c->x[n * c->D + j] - m) * (c->x[n * c->D + j] - m);
        v /= c->D;
        double rs = 1 / sqrt(v + c->eps);
        if (mean)
            mean[n] = m, rstd[n] = rs;
        for (int j = 0; j < c->D; j++)
            out[n * c->D + j] = (c->x[n * c->D + j] - m) * rs * c->g[j] + c->b[j];
    }
}

static double ln_loss(void *arg)
{
    struct ln_case *c = arg;
    double *out = malloc((size_t)c->N * c->D * sizeof *out), s = 0;
    ref_ln(out, NULL, NULL, c);
    for (int i = 0; i < c->N * c->D; i++)
        s += out[i] * c->w[i];
    free(out);
    return s;
}

static void test_layernorm(int N, int D)
{
    struct ln_case c = { .N = N, .D = D, .eps = 1e-5 };
    size_t nd = (size_t)N * D;
    float *x = frand(nd, -2, 3), *g = frand(D, 0.5, 1.5), *b = frand(D, -1, 1), *w = frand(nd, -1, 1);
    c.x = todouble(x, nd), c.g = todouble(g, D), c.b = todouble(b, D), c.w = todouble(w, nd);
    float *out = frand(nd, 0, 1), *mean = frand(N, 0, 1), *rstd = frand(N, 0, 1);
    double *r = malloc(nd * sizeof *r), *rm = malloc(N * sizeof *rm), *rr = malloc(N * sizeof *rr);
    ref_ln(r, rm, rr, &c);
    int rc = OPS.layernorm_forward(CTX, out, mean, rstd, x, g, b, N, D, (float)c.eps);
    char what[80];
    snprintf(what, sizeof what, "layernorm_forward N=%d D=%d", N, D);
    report(what, rc ? INFINITY : fmax(relerr(out, r, nd, 1), fmax(relerr(mean, rm, N, 1), relerr(rstd, rr, N, 1))), 5e-6);
    float *dx = frand(nd, 0, 1), *dg = frand(D, -1, 1), *db = frand(D, -1, 1);
    float *dg0 = fcopy(dg, D), *db0 = fcopy(db, D);
    rc = OPS.layernorm_backward(CTX, dx, dg, db, w, x, mean, rstd, g, N, D);
    for (int j = 0; j < D; j++)
        dg[j] -= dg0[j], db[j] -= db0[j];
    snprintf(what, sizeof what, "layernorm_backward N=%d D=%d dx", N, D);
    report(what, rc ? INFINITY : fd_check(c.x, nd, ln_loss, &c, dx), 1e-4);
    snprintf(what, sizeof what, "layernorm_backward N=%d D=%d dgamma (+=)", N, D);
    report(what, fd_check(c.g, D, ln_loss, &c, dg), 1e-5);
    snprintf(what, sizeof what, "layernorm_backward N=%d D=%d dbeta (+=)", N, D);
    report(what, fd_check(c.b, D, ln_loss, &c, db), 1e-5);
    /* dx aliasing dout */
    float *alias = fcopy(w, nd), *dg2 = calloc(D, sizeof *dg2), *db2 = calloc(D, sizeof *db2);
    OPS.layernorm_backward(CTX, alias, dg2, db2, alias, x, mean, rstd, g, N, D);
    test_ok(!memcmp(alias, dx, nd * sizeof *dx), "layernorm_backward with dx aliasing dout gives the same dx");
    free(alias), free(dg2), free(db2);
    free(x), free(g), free(b), free(w), free(c.x), free(c.g), free(c.b), free(c.w), free(out), free(mean), free(rstd);
    free(r), free(rm), free(rr), free(dx), free(dg), free(db), free(dg0), free(db0);
}

/* ---------------- elementwise ---------------- */

struct ew_case {
    size_t n;
    double *x, *w;
};

static double ew_loss(void *arg)
{
    struct ew_case *c = arg;
    double s = 0;
    for (size_t i = 0; i < c->n; i++) {
        double x = c->x[i];
        s += c->w[i] * (x > 0 ? x : 0);
    }
    return s;
}

static void test_elementwise(void)
{
    size_t n = 40009; /* prime, more than one chunk */
    float *a = frand(n, -2, 2), *b = frand(n, -2, 2), *out = frand(n, 0, 1);
    double *r = malloc(n * sizeof *r);
    for (size_t i = 0; i < n; i++)
        r[i] = (double)a[i] + b[i];
    OPS.add(CTX, out, a, b, n);
    report("add", relerr(out, r, n, 1), 1e-7);
    for (size_t i = 0; i < n; i++)
        r[i] = a[i] > 0 ? a[i] : 0;
    OPS.relu_forward(CTX, out, a, n);
    report("relu_forward", relerr(out, r, n, 1), 0);

    size_t m = 101;
    struct ew_case c = { .n = m };
    float *x = frand(m, -2, 2), *w = frand(m, -1, 1), *dx = frand(m, 0, 1), *y = frand(m, 0, 1);
    for (size_t i = 0; i < m; i++)
        if (fabsf(x[i]) < 1e-3f)
            x[i] = 0.5f; /* keep away from the kink of relu */
    c.x = todouble(x, m), c.w = todouble(w, m);
    OPS.relu_forward(CTX, y, x, m);
    OPS.relu_backward(CTX, dx, w, y, m);
    report("relu_backward vs finite differences", fd_check(c.x, m, ew_loss, &c, dx), 1e-6);
    free(c.x), free(c.w), free(x), free(w), free(dx), free(y);

    /* dropout */
    float p = 0.3f;
    int okmask = 1;
    size_t kept = 0;
    int rc = OPS.dropout_forward(CTX, out, a, n, p, 7, 123);
    for (size_t i = 0; i < n; i++) {
        int keep = nmt_rng_uniform(7, 123 + i) >= p;
        kept += keep;
        okmask &= out[i] == (keep ? a[i] * (1.0f / (1.0f - p)) : 0.0f);
    }
    test_ok(rc == 0 && okmask, "dropout_forward applies the normative counter-based mask");
    test_ok(fabs((double)kept / n - 0.7) < 0.01, "dropout keeps %.4f of the elements (p = 0.3)", (double)kept / n);
    float *dd = frand(n, 0, 1);
    OPS.dropout_backward(CTX, dd, b, n, p, 7, 123);
    okmask = 1;
    for (size_t i = 0; i < n; i++)
        okmask &= (out[i] == 0) == (dd[i] == 0 || b[i] == 0);
    test_ok(okmask, "dropout_backward regenerates the forward mask");
    float *o1 = frand(n, 0, 1);
    be1->ops.dropout_forward(be1->ctx, o1, a, n, p, 7, 123);
    test_ok(!memcmp(o1, out, n * sizeof *o1), "dropout: 1 thread and 2 threads give identical bits");
    test_ok(OPS.dropout_forward(CTX, out, a, n, 1.0f, 7, 0) < 0, "dropout refuses p = 1: '%s'", OPS.last_error(CTX));
    free(a), free(b), free(out), free(r), free(dd), free(o1);
}

/* ---------------- cross-entropy ---------------- */

struct xent_case {
    int N, V;
    int32_t *tgt;
    double *z, eps;
};

static double ref_xent(const struct xent_case *c, double *nll_out)
{
    double loss = 0, nll = 0;
    for (int n = 0; n < c->N; n++) {
        if (c->tgt[n] == 0)
            continue;
        const double *z = c->z + (size_t)n * c->V;
        double mx = z[0], s = 0, lpsum = 0;
        for (int j = 0; j < c->V; j++)
            mx = z[j] > mx ? z[j] : mx;
        for (int j = 0; j < c->V; j++)
            s += exp(z[j] - mx);
        double lse = mx + log(s);
        for (int j = 0; j < c->V; j++)
            lpsum += z[j] - lse;
        nll += lse - z[c->tgt[n]];
        loss += (1 - c->eps) * (lse - z[c->tgt[n]]) - c->eps / c->V * lpsum;
    }
    if (nll_out)
        *nll_out = nll;
    return loss;
}

static double xent_loss(void *arg) { return ref_xent(arg, NULL); }

static void test_xent(int N, int V)
{
    struct xent_case c = { .N = N, .V = V, .eps = 0.1 };
    size_t nv = (size_t)N * V;
    float *z = frand(nv, -4, 4), *d = frand(nv, 0, 1), *rn = frand(N, 0, 1);
    c.tgt = malloc(N * sizeof *c.tgt);
    int64_t cnt = 0;
    for (int n = 0; n < N; n++) {
        c.tgt[n] = n % 4 == 3 ? 0 : (int32_t)(urand() * V); /* every 4th a pad; some real targets may be 0 too */
        cnt += c.tgt[n] != 0;
    }
    c.z = todouble(z, nv);
    double rnll, rloss = ref_xent(&c, &rnll);
    struct nmt_xent_result res = { 0 };
    float gs = 0.37f;
    int rc = OPS.cross_entropy(CTX, &res, d, rn, z, c.tgt, N, V, (float)c.eps, 0, gs);
    char what[96];
    snprintf(what, sizeof what, "cross_entropy N=%d V=%d loss, nll, count", N, V);
    double e = fmax(fabs(res.loss - rloss) / fmax(1, fabs(rloss)), fabs(res.nll - rnll) / fmax(1, fabs(rnll)));
    report(what, rc || res.count != cnt ? INFINITY : e, 2e-6);
    for (size_t i = 0; i < nv; i++)
        d[i] /= gs;
    snprintf(what, sizeof what, "cross_entropy N=%d V=%d dlogits vs finite differences", N, V);
    report(what, fd_check(c.z, nv, xent_loss, &c, d), 1e-5);
    /* in place: dlogits aliasing logits */
    float *zz = fcopy(z, nv), *d2 = frand(nv, 0, 1);
    struct nmt_xent_result r2;
    OPS.cross_entropy(CTX, &r2, d2, NULL, z, c.tgt, N, V, (float)c.eps, 0, gs);
    OPS.cross_entropy(CTX, &r2, zz, NULL, zz, c.tgt, N, V, (float)c.eps, 0, gs);
    test_ok(!memcmp(zz, d2, nv * sizeof *zz), "cross_entropy in place gives the same gradient");
    free(z), free(d), free(rn), free(c.tgt), free(c.z), free(zz), free(d2);
}

/* ---------------- optimizer, norm ---------------- */

static void test_adam(void)
{
    size_t n = 20011;
    float *p = frand(n, -1, 1), *m = calloc(n, sizeof *m), *v = calloc(n, sizeof *v);
    double *rp = todouble(p, n), *rm = calloc(n, sizeof *rm), *rv = calloc(n, sizeof *rv);
    double b1 = 0.9, b2 = 0.98, eps = 1e-9, lr = 7e-4, gsc = 0.5;
    double worst = 0;
    for (int t = 1; t <= 3; t++) {
        float *g = frand(n, -1, 1);
        OPS.adam_update(CTX, p, m, v, g, n, (float)lr, (float)b1, (float)b2, (float)eps, t, (float)gsc);
        for (size_t i = 0; i < n; i++) {
            double gi = g[i] * gsc;
            rm[i] = b1 * rm[i] + (1 - b1) * gi;
            rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
            rp[i] -= lr / (1 - pow(b1, t)) * rm[i] / (sqrt(rv[i]) / sqrt(1 - pow(b2, t)) + eps);
        }
        free(g);
        worst = fmax(worst, relerr(p, rp, n, 1));
    }
    report("adam_update, 3 steps, bias correction", worst, 1e-6);
    free(p), free(m), free(v), free(rp), free(rm), free(rv);

    size_t ns[] = { 1, 4097, 100003 };
    for (int i = 0; i < 3; i++) {
        float *x = frand(ns[i], -1, 1);
        double s = 0, r = 0, s1 = 0;
        for (size_t j = 0; j < ns[i]; j++)
            r += (double)x[j] * x[j];
        int rc = OPS.sumsq(CTX, &s, x, ns[i]);
        be1->ops.sumsq(be1->ctx, &s1, x, ns[i]);
        char what[64];
        snprintf(what, sizeof what, "sumsq n=%zu", ns[i]);
        report(what, rc ? INFINITY : fabs(s - r) / r, 1e-6);
        test_ok(s == s1, "sumsq n=%zu: 1 thread and 2 threads give identical bits", ns[i]);
        free(x);
    }
}

/* ---------------- decoding ---------------- */

/* topk_logsoftmax against a selection in double, on the path ISA (NULL: the CPU's widest), V
 * columns (past 16 so that the vector scans run, with a tail). */
static void topk_case(const char *isa, int V)
{
    if (isa && !cpu_has(isa)) {
        test_ok(1, "topk_logsoftmax NMT_CPU_ISA=%s # SKIP this CPU lacks the %s path", isa, isa);
        return;
    }
    if (isa)
        setenv("NMT_CPU_ISA", isa, 1);
    int N = 5, K = 7;
    float *z = frand((size_t)N * V, -3, 3);
    z[1 * V + 4] = z[1 * V + 9] = z[1 * V + 2] = 5.0f; /* a three-way tie at the top of row 1 */
    z[2 * V + V - 1] = 6.0f;                            /* the largest in the tail of row 2 */
    float *val = frand((size_t)N * K, 0, 1);
    int32_t *idx = malloc((size_t)N * K * sizeof *idx);
    int rc = OPS.topk_logsoftmax(CTX, val, idx, z, N, V, K);
    double worst = 0;
    int order = rc == 0;
    for (int n = 0; n < N; n++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < V; j++)
            mx = fmax(mx, z[n * V + j]);
        for (int j = 0; j < V; j++)
            s += exp(z[n * V + j] - mx);
        double lse = mx + log(s);
        /* reference: selection with ties by lower index */
        int used[64] = { 0 };
        for (int k = 0; k < K; k++) {
            int best = -1;
            for (int j = 0; j < V; j++)
                if (!used[j] && (best < 0 || z[n * V + j] > z[n * V + best]))
                    best = j;
            used[best] = 1;
            order &= idx[n * K + k] == best;
            worst = fmax(worst, fabs(val[n * K + k] - (z[n * V + best] - lse)) / fmax(1, fabs(z[n * V + best] - lse)));
        }
    }
    test_ok(order, "topk_logsoftmax NMT_CPU_ISA=%s V=%d: indices sorted descending, ties by lower index (row 1: %d %d %d)",
            isa ? isa : "(widest)", V, idx[K], idx[K + 1], idx[K + 2]);
    char what[96];
    snprintf(what, sizeof what, "topk_logsoftmax NMT_CPU_ISA=%s V=%d values", isa ? isa : "(widest)", V);
    report(what, worst, 1e-6);
    /* topk_logits: the same indices, the logits themselves as values */
    float *rv = frand((size_t)N * K, 0, 1);
    int32_t *ri = malloc((size_t)N * K * sizeof *ri);
    int same = OPS.topk_logits && OPS.topk_logits(CTX, rv, ri, z, N, V, K) == 0;
    for (int i = 0; same && i < N * K; i++)
        same = ri[i] == idx[i] && rv[i] == z[(i / K) * V + ri[i]];
    test_ok(same, "topk_logits NMT_CPU_ISA=%s V=%d: topk_logsoftmax's indices, the logits as values",
            isa ? isa : "(widest)", V);
    free(z), free(val), free(idx), free(rv), free(ri);
    unsetenv("NMT_CPU_ISA");
}

static void test_topk(void)
{
    topk_case(NULL, 23);
    topk_case("avx512", 61);
    topk_case("avx2", 61);
    topk_case("portable", 61);

    int32_t gi[4] = { 2, 0, 2, 1 };
    float *src = frand(3 * 5, -1, 1), *dst = frand(4 * 5, 0, 1);
    int rc = OPS.gather_rows(CTX, dst, src, gi, 4, 5);
    int ok = rc == 0;
    for (int i = 0; i < 4; i++)
        ok &= !memcmp(dst + i * 5, src + gi[i] * 5, 5 * sizeof *dst);
    test_ok(ok, "gather_rows");
    free(src), free(dst);
}

static void test_memory(void)
{
    float *buf = OPS.alloc(CTX, 1000 * sizeof(float));
    test_ok(buf && ((uintptr_t)buf & 63) == 0, "alloc returns 64-byte aligned memory");
    float h[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }, back[10];
    int rc = OPS.upload(CTX, buf + 100, h, sizeof h) | OPS.copy(CTX, buf + 200, buf + 100, sizeof h) |
             OPS.download(CTX, back, buf + 200, sizeof back);
    test_ok(rc == 0 && !memcmp(h, back, sizeof h), "upload, copy at an offset, download");
    OPS.memset_zero(CTX, buf + 200, sizeof h);
    OPS.download(CTX, back, buf + 200, sizeof back);
    test_ok(back[0] == 0 && back[9] == 0, "memset_zero");
    test_ok(OPS.alloc(CTX, 0) == NULL && *OPS.last_error(CTX), "alloc(0) fails with a message: '%s'",
            OPS.last_error(CTX));
    OPS.free(CTX, buf);
    OPS.alloc(CTX, 64); /* left for close() to free */
    struct nmt_backend_props p;
    test_ok(OPS.props(CTX, &p) == 0 && p.threads == 2 && (p.dtypes & NMT_DTYPE_F32), "props: %s", p.device);
}


/* ---------------- thread-count independence of the remaining kernels ---------------- */

static void test_threads(void)
{
    int N = 301, D = 96, V = 211;
    size_t nd = (size_t)N * D, nv = (size_t)N * V;
    float *x = frand(nd, -2, 2), *g = frand(D, 0.5, 1.5), *b = frand(D, -1, 1), *dout = frand(nd, -1, 1);
    float *z = frand(nv, -3, 3), *emb = frand((size_t)V * D, -1, 1);
    int32_t *ids = malloc(N * sizeof *ids), *pos = malloc(N * sizeof *pos), *tgt = malloc(N * sizeof *tgt);
    for (int n = 0; n < N; n++)
        ids[n] = (int32_t)(urand() * V), pos[n] = n % 40, tgt[n] = n % 9 ? ids[n] : 0;
    struct backend *bs[2] = { be, be1 };
    float *res[2];
    size_t nres = 3 * nd + 2 * N + 4 * D + nv + N + (size_t)V * D + D + 2;
    for (int k = 0; k < 2; k++) {
        struct backend *c = bs[k];
        float *r = res[k] = calloc(nres, sizeof *r), *o = r;
        c->ops.layernorm_forward(c->ctx, o, o + nd, o + nd + N, x, g, b, N, D, 1e-5f);
        c->ops.layernorm_backward(c->ctx, o + nd + 2 * N, o + 2 * nd + 2 * N, o + 2 * nd + 2 * N + D, dout, x, o + nd,
                                  o + nd + N, g, N, D);
        o += 2 * nd + 2 * N + 2 * D;
        c->ops.bias_grad(c->ctx, o, dout, N, D);
        o += D;
        c->ops.embedding_forward(c->ctx, o, ids, pos, emb, N, D, V, 1.5f);
        o += nd;
        c->ops.embedding_backward(c->ctx, o, dout, ids, pos, N, D, V, 1.5f);
        o += (size_t)V * D;
        struct nmt_xent_result xr;
        c->ops.cross_entropy(c->ctx, &xr, o, o + nv, z, tgt, N, V, 0.1f, 0, 1.0f);
        o += nv + N;
        o[0] = (float)xr.loss, o[1] = (float)(xr.loss - o[0]);
        float *p = fcopy(x, nd), *m = calloc(nd, sizeof *m), *v = calloc(nd, sizeof *v);
        c->ops.adam_update(c->ctx, p, m, v, dout, nd, 1e-3f, 0.9f, 0.98f, 1e-9f, 3, 0.5f);
        memcpy(o + 2, p, D * sizeof *p); /* a sample of the result */
        free(p), free(m), free(v);
    }
    test_ok(!memcmp(res[0], res[1], nres * sizeof *res[0]),
            "layernorm, bias_grad, embedding, cross_entropy, adam: 1 thread and 2 threads give identical bits");
    free(res[0]), free(res[1]), free(x), free(g), free(b), free(dout), free(z), free(emb), free(ids), free(pos), free(tgt);
}

/* ---------------- PyTorch fixtures (tests/fixtures/backend/gen_torch.py) ---------------- */

struct fixture {
    char name[32];
    double *v;
    int n;
};
static struct fixture fx[32];
static int nfx;

static int load_fixtures(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/backend/torch_ref.txt", test_srcdir());
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while (nfx < 32 && fscanf(f, "%31s %d", fx[nfx].name, &fx[nfx].n) == 2) {
        fx[nfx].v = malloc((size_t)fx[nfx].n * sizeof(double));
        for (int i = 0; i < fx[nfx].n; i++)
            if (fscanf(f, "%lf", &fx[nfx].v[i]) != 1) {
                fclose(f);
                return -1;
            }
        nfx++;
    }
    fclose(f);
    return 0;
}

static const double *fxget(const char *name, int *n)
{
    for (int i = 0; i < nfx; i++)
        if (!strcmp(fx[i].name, name)) {
            if (n)
                *n = fx[i].n;
            return fx[i].v;
        }
    static const double none[64];
    if (n)
        *n = 0;
    return none;
}

static float *fxfloat(const char *name)
{
    int n;
    const double *d = fxget(name, &n);
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    for (int i = 0; i < n; i++)
        f[i] = (float)d[i];
    return f;
}

static void test_torch(void)
{
    int ok = load_fixtures() == 0;
    test_ok(ok && nfx >= 10, "PyTorch fixtures read (%d tensors)", nfx);
    if (!ok)
        return;
    /* cross-entropy, label smoothing 0.1, ignore_index 0, reduction sum */
    int nz, nt;
    const double *tgtd = fxget("xent_tgt", &nt);
    fxget("xent_logits", &nz);
    int N = nt, V = nt ? nz / nt : 1;
    float *z = fxfloat("xent_logits"), *d = malloc((size_t)nz * sizeof *d);
    int32_t *tgt = malloc((size_t)(N ? N : 1) * sizeof *tgt);
    for (int i = 0; i < N; i++)
        tgt[i] = (int32_t)tgtd[i];
    struct nmt_xent_result res;
    int rc = OPS.cross_entropy(CTX, &res, d, NULL, z, tgt, N, V, 0.1f, 0, 1.0f);
    double rl = fxget("xent_loss", NULL)[0], rn = fxget("xent_nll", NULL)[0];
    report("cross_entropy loss vs PyTorch F.cross_entropy(label_smoothing=0.1, ignore_index=0, sum)",
           rc ? INFINITY : fmax(fabs(res.loss - rl) / fabs(rl), fabs(res.nll - rn) / fabs(rn)), 1e-6);
    report("cross_entropy dlogits vs PyTorch autograd", relerr(d, fxget("xent_grad", NULL), (size_t)nz, 1e-3), 1e-6);
    free(z), free(d), free(tgt);

    /* Adam, 3 steps */
    int np;
    fxget("adam_p0", &np);
    float *p = fxfloat("adam_p0"), *g = fxfloat("adam_grads"), *m = calloc((size_t)np, sizeof *m),
          *v = calloc((size_t)np, sizeof *v);
    const double *rp = fxget("adam_params", NULL);
    double worst = 0;
    for (int t = 0; t < 3; t++) {
        OPS.adam_update(CTX, p, m, v, g + t * np, (size_t)np, 1e-3f, 0.9f, 0.98f, 1e-9f, t + 1, 1.0f);
        worst = fmax(worst, relerr(p, rp + t * np, (size_t)np, 1e-3));
    }
    report("adam_update vs torch.optim.Adam, 3 steps", worst, 1e-6);
    free(p), free(g), free(m), free(v);

    /* layer norm */
    int nx, D;
    fxget("ln_x", &nx);
    fxget("ln_gamma", &D);
    int Nl = D ? nx / D : 0;
    float *x = fxfloat("ln_x"), *ga = fxfloat("ln_gamma"), *be_ = fxfloat("ln_beta"), *dout = fxfloat("ln_dout");
    float *y = malloc((size_t)nx * sizeof *y), *mean = malloc((size_t)Nl * sizeof *mean), *rstd = malloc((size_t)Nl * sizeof *rstd);
    float *dx = malloc((size_t)nx * sizeof *dx), *dg = calloc((size_t)D, sizeof *dg), *db = calloc((size_t)D, sizeof *db);
    OPS.layernorm_forward(CTX, y, mean, rstd, x, ga, be_, Nl, D, 1e-5f);
    OPS.layernorm_backward(CTX, dx, dg, db, dout, x, mean, rstd, ga, Nl, D);
    report("layernorm_forward vs PyTorch F.layer_norm", relerr(y, fxget("ln_y", NULL), (size_t)nx, 1e-3), 1e-6);
    report("layernorm_backward vs PyTorch autograd",
           fmax(relerr(dx, fxget("ln_dx", NULL), (size_t)nx, 1e-3),
                fmax(relerr(dg, fxget("ln_dgamma", NULL), (size_t)D, 1e-3), relerr(db, fxget("ln_dbeta", NULL), (size_t)D, 1e-3))),
           1e-6);
    free(x), free(ga), free(be_), free(dout), free(y), free(mean), free(rstd), free(dx), free(dg), free(db);

    for (int i = 0; i < nfx; i++)
        free(fx[i].v);
}

int main(void)
{
    struct nmt_backend_opts o2 = { .size = sizeof o2, .threads = 2 }, o1 = { .size = sizeof o1, .threads = 1 };
    be = backend_open("cpu", &o2);
    be1 = backend_open("cpu", &o1);
    test_ok(be && be1, "cpu backend opens (%s)", be ? be->path : nmt_errmsg());
    if (!be || !be1)
        return test_done();
    test_memory();
    test_gemm();
    test_gemm_rowinv();
    test_linear_rowinv();
    test_bias();
    test_embedding();
    test_attention();
    test_attention_paths();
    test_layernorm(1, 1);
    test_layernorm(7, 37);
    test_layernorm(3, 512);
    test_elementwise();
    test_xent(9, 13);
    test_xent(5, 97);
    test_adam();
    test_topk();
    test_threads();
    test_torch();
    backend_close(be);
    backend_close(be1);
    return test_done();
}
