/* test_cpu_reduced: the cpu plugin's linear layer in reduced precision. int8: the int8 linear layer (linear_pack_q with NMT_DTYPE_INT8, then
 * linear_rowinv) on every kernel path the CPU has (NMT_CPU_ISA = amx, avx512vnni, avx512, avx2,
 * portable; the AMX tile kernel is also checked without AMX, emulated, by test_amx):
 *   - bit for bit against the quantisation spec of plugins/cpu/linear_q.c restated here
 *     (per-channel int8 weight scales, per-row activation scales on a 12-bit grid, exact integer
 *     sums, the float epilogue ((float)S * s_j) * a_i + bias), so the paths give identical bits;
 *   - against the float32 product in double precision within a stated normwise bound;
 *   - row invariance (a row alone or anywhere in M rows, 1 or 2 threads);
 *   - the extremes of the integer range (the largest K, every product at its largest), zero and
 *     non-finite rows, and the errors (bad dtype, non-finite weight, shape mismatch).
 * The same for int8-a8 (NMT_DTYPE_INT8A8: activations on the int8 grid; on VNNI as unsigned bytes
 * through vpdpbusd, less each column's compensation) and int8-a7 (NMT_DTYPE_INT8A7: on the grid
 * -63..63; on AVX2 as unsigned bytes qA + 64 through vpmaddubsw, less half the compensation).
 * bf16 (where the CPU has AVX512-BF16): bit for bit against vdpbf16ps's documented arithmetic
 * restated here (inputs rounded to bf16 to nearest even, each pair's products added to the float32
 * sum odd element first, k ascending), against float32 within a bound, row invariance, and the
 * refusal when NMT_CPU_ISA turns AVX-512 off.
 * bf16 products (gemm_ex under set_precision(BF16)) on CPUs with AMX: bit for bit the tiles'
 * arithmetic (tests/unit/bf16_spec.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_spec.h"
#include "run/backend_loader.h"
#include "test.h"
#include "cli/cli.h"

static struct backend *be, *be1; /* 2 threads, 1 thread */
/* The int8 layer under test: NMT_DTYPE_INT8 (activations on the 12-bit grid) or NMT_DTYPE_INT8A8
 * (on the int8 grid), its activations' grid and its name in messages. */
static uint32_t qdt = NMT_DTYPE_INT8;
static int qtop = 2047;
static const char *qname = "int8";
#define OPS (be->ops)
#define CTX (be->ctx)

static const char *const isas[] = { "amx", "avx512vnni", "avx512", "avx2", "portable" };
#define NISA (int)(sizeof isas / sizeof isas[0])

static uint64_t rng_state = 2024;
static double urand(void) /* uniform [0, 1) */
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}

static float *frand(size_t n, double lo, double hi)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(lo + (hi - lo) * urand());
    return x;
}

/* 1 when this CPU has the kernel path ISA, as the plugin decides (a path it lacks is skipped;
 * AMX also needs the kernel's grant, so the plugin is asked which path it takes). */
static int cpu_has(const char *isa)
{
    if (!strcmp(isa, "amx")) {
        struct nmt_backend_props pr;
        setenv("NMT_CPU_ISA", "amx", 1);
        int amx = OPS.props(CTX, &pr) == 0 && strstr(pr.device, ", amx,") != NULL;
        unsetenv("NMT_CPU_ISA");
        return amx;
    }
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                 __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    if (!strcmp(isa, "avx512vnni"))
        return avx512 && __builtin_cpu_supports("avx512vnni");
    if (!strcmp(isa, "avx512"))
        return avx512;
    return !strcmp(isa, "avx2") ? avx2 : 1;
}

/* ---- the spec, restated ---- */

/* Quantises X (K) into Q on the grid -TOP..TOP (weights 127, activations 2047); returns the
 * scale (0 for a zero row, NaN for a non-finite one). */
static float spec_quant(int16_t *q, const float *x, int K, int top)
{
    float amax = 0;
    int finite = 1;
    for (int k = 0; k < K; k++) {
        finite &= isfinite(x[k]) != 0;
        if (fabsf(x[k]) > amax)
            amax = fabsf(x[k]);
    }
    float inv = (float)top / amax;
    if (!finite || amax == 0 || isinf(inv)) {
        for (int k = 0; k < K; k++)
            q[k] = 0;
        return finite ? 0.0f : NAN;
    }
    for (int k = 0; k < K; k++) {
        float r = rintf(x[k] * inv);
        q[k] = (int16_t)(r > top ? top : r < -top ? -top : r);
    }
    return amax / (float)top;
}

/* C (M,N) by the spec from A (M,K) lda, W (N,K) ldw. */
static void spec_linear(float *C, int M, int N, int K, const float *A, int lda, const float *W, int ldw,
                        const float *bias, int relu, int ldc)
{
    int16_t *qa = malloc((size_t)(K ? K : 1) * sizeof *qa), *qw = malloc(((size_t)N * (K ? K : 1) + 1) * sizeof *qw);
    float *sw = malloc((size_t)(N ? N : 1) * sizeof *sw);
    for (int j = 0; j < N; j++)
        sw[j] = spec_quant(qw + (size_t)j * K, W + (size_t)j * ldw, K, 127);
    for (int i = 0; i < M; i++) {
        float sa = spec_quant(qa, A + (size_t)i * lda, K, qtop);
        for (int j = 0; j < N; j++) {
            int32_t s = 0;
            for (int k = 0; k < K; k++)
                s += (int32_t)qa[k] * qw[(size_t)j * K + k];
            volatile float v = (float)s * sw[j]; /* one rounding per operation, as the spec */
            v = v * sa;
            if (bias)
                v = v + bias[j];
            C[(size_t)i * ldc + j] = relu && !(v > 0) ? 0.0f : v; /* NaN too, as max(v, 0) */
        }
    }
    free(qa), free(qw), free(sw);
}

/* W (N,K) packed in DTYPE into a malloc'ed buffer, or NULL (also when the CPU cannot compute in it) */
static void *pack_as(struct backend *c, const float *W, int N, int K, int ldw, uint32_t dtype)
{
    size_t bytes = c->ops.linear_packed_bytes_q(c->ctx, N, K, dtype);
    void *p = bytes ? aligned_alloc(64, (bytes + 63) & ~(size_t)63) : NULL;
    if (p && c->ops.linear_pack_q(c->ctx, p, W, N, K, ldw, dtype) < 0) {
        free(p);
        return NULL;
    }
    return p;
}

/* Column independence on the current path (the vocabulary shortlist's union relies on it): the
 * columns of W's rows J (a subset, increasing) computed alone give the bits they have in the whole
 * product, in float32, int8 and bf16 (where the CPU has it). */
static void test_columns(const char *path)
{
    static const uint32_t dts[] = { NMT_DTYPE_F32, NMT_DTYPE_INT8, NMT_DTYPE_INT8A8, NMT_DTYPE_BF16 };
    static const char *const names[] = { "float32", "int8", "int8-a8", "bf16" };
    enum { M = 5, N = 203, K = 77 };
    float *A = frand((size_t)M * K, -1, 1), *W = frand((size_t)N * K, -1, 1), *bias = frand((size_t)N, -1, 1);
    float *Ws = malloc((size_t)N * K * sizeof *Ws), *bs = malloc((size_t)N * sizeof *bs);
    float *C = malloc((size_t)M * N * sizeof *C), *Cs = malloc((size_t)M * N * sizeof *Cs);
    int J[N], n = 0;
    for (int j = 0; j < N; j++)
        if (j % 3 == 1 || j % 7 == 0 || j == N - 1) {
            J[n] = j;
            memcpy(Ws + (size_t)n * K, W + (size_t)j * K, (size_t)K * sizeof *W);
            bs[n++] = bias[j];
        }
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        void *Wp = pack_as(be, W, N, K, K, dts[d]), *Wsp = pack_as(be, Ws, n, K, K, dts[d]);
        if (!Wp && dts[d] == NMT_DTYPE_BF16) {
            test_ok(1, "%s linear, %s: column independence # SKIP no bf16 here", names[d], path);
            continue;
        }
        int same = Wp && Wsp && OPS.linear_rowinv(CTX, M, N, K, A, K, Wp, bias, 0, C, N) == 0 &&
                   OPS.linear_rowinv(CTX, M, n, K, A, K, Wsp, bs, 0, Cs, n) == 0;
        for (int i = 0; same && i < M; i++)
            for (int c = 0; c < n; c++)
                same &= !memcmp(&Cs[(size_t)i * n + c], &C[(size_t)i * N + J[c]], sizeof *C);
        test_ok(same, "%s linear, %s: %d of %d columns computed alone give the bits of the whole product", names[d],
                path, n, N);
        free(Wp), free(Wsp);
    }
    free(A), free(W), free(bias), free(Ws), free(bs), free(C), free(Cs);
}

/* W (N,K) packed for the int8 layer under test (qdt) into a malloc'ed buffer, or NULL */
static void *pack_q(struct backend *c, const float *W, int N, int K, int ldw)
{
    return pack_as(c, W, N, K, ldw, qdt);
}

/* The bits of C and R agree on the M x N block (ldc), NaN for NaN. */
static int same_bits(const float *C, const float *R, int M, int N, int ldc)
{
    for (int i = 0; i < M; i++)
        if (memcmp(C + (size_t)i * ldc, R + (size_t)i * ldc, (size_t)N * sizeof *C))
            return 0;
    return 1;
}

/* ---- per path ---- */

static const int shapes[][3] = { { 1, 1, 1 },   { 5, 7, 8 },    { 13, 17, 9 }, { 4, 3, 33 },  { 9, 50, 256 },
                                 { 31, 4, 7 },  { 2, 2, 1 },    { 66, 41, 100 }, { 7, 130, 5 }, { 8, 200, 3 },
                                 { 6, 64, 128 }, { 12, 96, 515 }, { 3, 1000, 64 } };
#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])

/* Runs every shape on the current path; the outputs go to OUT[s] (M x ldc each); returns 1 when
 * each matched the spec bit for bit, and the largest normwise error against float32 in *ERR. */
static int run_shapes(float **out, double *err, int *padok)
{
    int exact = 1;
    *err = 0;
    rng_state = 2024;
    for (int s = 0; s < NSHAPES; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        int lda = K + 3, ldw = K + 5, ldc = N + 2, relu = s % 2;
        float *A = frand((size_t)M * lda, -1, 1), *W = frand((size_t)N * ldw, -1, 1);
        float *bias = s % 3 ? frand((size_t)N, -1, 1) : NULL, *R = malloc((size_t)M * ldc * sizeof *R);
        float *C = out[s];
        for (size_t e = 0; e < (size_t)M * ldc; e++)
            C[e] = 12345.0f;
        spec_linear(R, M, N, K, A, lda, W, ldw, bias, relu, ldc);
        void *Wp = pack_q(be, W, N, K, ldw);
        int rc = !Wp || OPS.linear_rowinv(CTX, M, N, K, A, lda, Wp, bias, relu, C, ldc);
        exact &= rc == 0 && same_bits(C, R, M, N, ldc);
        double num = 0, den = 1;
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < N; j++) {
                double r = bias ? bias[j] : 0;
                for (int k = 0; k < K; k++)
                    r += (double)A[(size_t)i * lda + k] * W[(size_t)j * ldw + k];
                r = relu && r < 0 ? 0 : r;
                double d = fabs(C[(size_t)i * ldc + j] - r);
                num = d > num || isnan(d) ? d : num;
                den = fabs(r) > den ? fabs(r) : den;
            }
            for (int j = N; j < ldc; j++)
                *padok &= C[(size_t)i * ldc + j] == 12345.0f;
        }
        *err = rc ? INFINITY : num / den > *err || isnan(num) ? num / den : *err;
        free(A), free(W), free(bias), free(R), free(Wp);
    }
    return exact;
}

/* Row invariance on the current path: a row alone and inside M rows, on 1 and 2 threads. */
static void test_rows(const char *path)
{
    static const int Ms[] = { 1, 2, 5, 6, 7, 13, 64, 200 };
    static const int NK[][2] = { { 37, 45 }, { 256, 256 }, { 1000, 64 }, { 130, 128 } };
    for (size_t s = 0; s < sizeof NK / sizeof NK[0]; s++) {
        int N = NK[s][0], K = NK[s][1], maxM = 200;
        float *A = frand((size_t)maxM * K, -1, 1), *W = frand((size_t)N * K, -1, 1), *x = frand((size_t)K, -1, 1);
        float *bias = frand((size_t)N, -1, 1);
        float *C = malloc((size_t)maxM * N * sizeof *C), *y = malloc((size_t)N * sizeof *y);
        void *Wp = pack_q(be, W, N, K, K);
        int same = Wp && OPS.linear_rowinv(CTX, 1, N, K, x, K, Wp, bias, 1, y, N) == 0, tried = 0;
        for (size_t m = 0; m < sizeof Ms / sizeof Ms[0] && Wp; m++) {
            int M = Ms[m], where[3] = { 0, M / 2, M - 1 };
            for (int w = 0; w < 3; w++)
                for (int t = 0; t < 2; t++) {
                    struct backend *c = t ? be : be1;
                    memcpy(A + (size_t)where[w] * K, x, (size_t)K * sizeof *x);
                    same &= c->ops.linear_rowinv(c->ctx, M, N, K, A, K, Wp, bias, 1, C, N) == 0 &&
                            !memcmp(C + (size_t)where[w] * N, y, (size_t)N * sizeof *y);
                    tried++;
                }
        }
        test_ok(same, "%s linear, %s: a row gives identical bits alone and at %d positions inside products of "
                      "M = 1..%d rows on 1 and 2 threads (N=%d K=%d)", qname, path, tried, maxM, N, K);
        free(A), free(W), free(Wp), free(x), free(bias), free(C), free(y);
    }
}

/* The extremes: every product +-top * +-127 at the largest K (8192: with 12-bit activations the
 * sum's magnitude 2047 * 127 * 8192 just below 2^31), a zero row and a row with a NaN. */
static void test_extremes(const char *path)
{
    int M = 4, N = 19, K = 8192;
    float *A = malloc((size_t)M * K * sizeof *A), *W = malloc((size_t)N * K * sizeof *W);
    for (int k = 0; k < K; k++) {
        A[k] = 1.0f;                      /* q = top */
        A[K + k] = -1.0f;                 /* q = -top */
        A[2 * K + k] = 0.0f;              /* a zero row */
        A[3 * K + k] = k % 2 ? 2.0f : -2.0f;
    }
    A[3 * K + 5] = NAN; /* a non-finite row */
    for (int j = 0; j < N; j++)
        for (int k = 0; k < K; k++)
            W[(size_t)j * K + k] = j % 3 == 0 ? -3.0f : j % 3 == 1 ? 3.0f : (k % 2 ? 0.5f : -0.5f);
    float *bias = frand((size_t)N, -1, 1), *C = malloc((size_t)M * N * sizeof *C), *R = malloc((size_t)M * N * sizeof *R);
    spec_linear(R, M, N, K, A, K, W, K, bias, 0, N);
    void *Wp = pack_q(be, W, N, K, K);
    int rc = !Wp || OPS.linear_rowinv(CTX, M, N, K, A, K, Wp, bias, 0, C, N);
    double want = -3.0 * K;
    test_ok(rc == 0 && same_bits(C, R, 3, N, N) && fabs(C[0] - bias[0] - want) < 1e-5 * -want &&
                fabs(C[N + 1] - bias[1] - want) < 1e-5 * -want,
            "%s linear, %s: products of +-%d x +-127 summed over K=%d are exact (%.0f, want %.0f)", qname, path, qtop,
            K, rc ? 0.0 : (double)C[0], want + bias[0]);
    int zero = 1, nan = 1;
    for (int j = 0; j < N; j++) {
        zero &= C[2 * N + j] == bias[j];
        nan &= isnan(C[3 * N + j]);
    }
    test_ok(rc == 0 && zero && nan, "%s linear, %s: a zero row gives the bias, a row with a NaN gives NaN", qname,
            path);
    free(A), free(W), free(bias), free(C), free(R), free(Wp);
}

static void test_errors(void)
{
    float W[12] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 }, A[8] = { 0 }, C[8];
    size_t b = OPS.linear_packed_bytes_q(CTX, 17, 3, NMT_DTYPE_INT8);
    /* the AVX2 path (also avx512 without VNNI) holds the weights in 16 bits */
    struct nmt_backend_props pr;
    int wide = OPS.props(CTX, &pr) == 0 && (strstr(pr.device, ", avx2,") || strstr(pr.device, ", avx512,"));
    test_ok(b == 64 + 32 * 4 + 32 * 4 * (wide ? 2u : 1u), "linear_packed_bytes_q: int8 17 x 3 -> %zu bytes (header, "
            "scales, 2 panels of K rounded up to 4%s)", b, wide ? " in 16 bits: the AVX2 path" : "");
    test_ok(OPS.linear_packed_bytes_q(CTX, 17, 3, NMT_DTYPE_INT8A8) == 64 + 32 * 4 * 2 + 32 * 4,
            "linear_packed_bytes_q: int8-a8 17 x 3 -> %zu bytes (header, scales, compensations, 2 panels of bytes "
            "on every path)", OPS.linear_packed_bytes_q(CTX, 17, 3, NMT_DTYPE_INT8A8));
    test_ok(OPS.linear_packed_bytes_q(CTX, 17, 3, NMT_DTYPE_F32) == OPS.linear_packed_bytes(CTX, 17, 3),
            "linear_packed_bytes_q: float32 is linear_packed_bytes");
    test_ok(OPS.linear_packed_bytes_q(CTX, 17, 3, NMT_DTYPE_F16) == 0 && strstr(OPS.last_error(CTX), "float32, int8 or bf16"),
            "linear_packed_bytes_q: a dtype the plugin lacks gives 0: '%s'", OPS.last_error(CTX));
    test_ok(OPS.linear_packed_bytes_q(CTX, 4, 8193, NMT_DTYPE_INT8) == 0 && strstr(OPS.last_error(CTX), "K=8193"),
            "linear_packed_bytes_q: K beyond the exact int32 range gives 0: '%s'", OPS.last_error(CTX));
    void *p = aligned_alloc(64, 4096);
    W[4] = INFINITY;
    test_ok(OPS.linear_pack_q(CTX, p, W, 4, 3, 3, NMT_DTYPE_INT8) < 0 && strstr(OPS.last_error(CTX), "row 1"),
            "linear_pack_q refuses a non-finite weight, naming its row: '%s'", OPS.last_error(CTX));
    W[4] = 5;
    test_ok(OPS.linear_pack_q(CTX, p, W, 4, 3, 3, NMT_DTYPE_INT8) == 0 &&
                OPS.linear_rowinv(CTX, 2, 3, 4, A, 4, p, NULL, 0, C, 4) < 0 && strstr(OPS.last_error(CTX), "4 x 3"),
            "linear_rowinv refuses a weight used with another shape: '%s'", OPS.last_error(CTX));
    memset(p, 0, 64);
    test_ok(OPS.linear_rowinv(CTX, 2, 4, 3, A, 3, p, NULL, 0, C, 4) < 0 && strstr(OPS.last_error(CTX), "not packed"),
            "linear_rowinv refuses memory that linear_pack did not write: '%s'", OPS.last_error(CTX));
    free(p);
}

/* ---- bf16 ---- */

/* X as bf16 (round to nearest even; NaN quieted; a denormal input gives a signed zero), as
 * vcvtneps2bf16. */
static uint16_t spec_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if (isnan(x))
        return (uint16_t)(u >> 16 | 0x40);
    if ((u & 0x7f800000u) == 0)
        return (uint16_t)(u >> 16 & 0x8000);
    return (uint16_t)((u + 0x7fffu + (u >> 16 & 1)) >> 16);
}
static float from_bf16(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* C (M,N) by vdpbf16ps's arithmetic (products of bf16 values are exact in float32 here: the test
 * data has no denormals). */
static void spec_bf16_linear(float *C, int M, int N, int K, const float *A, int lda, const float *W, int ldw,
                             const float *bias, int relu, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            volatile float acc = 0;
            for (int k = 0; k < K; k += 2) {
                float a1 = k + 1 < K ? from_bf16(spec_bf16(A[(size_t)i * lda + k + 1])) : 0;
                float w1 = k + 1 < K ? from_bf16(spec_bf16(W[(size_t)j * ldw + k + 1])) : 0;
                acc = acc + a1 * w1;
                acc = acc + from_bf16(spec_bf16(A[(size_t)i * lda + k])) * from_bf16(spec_bf16(W[(size_t)j * ldw + k]));
            }
            float v = bias ? acc + bias[j] : acc;
            C[(size_t)i * ldc + j] = relu && !(v > 0) ? 0.0f : v;
        }
}

static void test_bf16(void)
{
    __builtin_cpu_init();
    if (!cpu_has("avx512") || !__builtin_cpu_supports("avx512bf16")) {
        test_ok(OPS.linear_packed_bytes_q(CTX, 4, 4, NMT_DTYPE_BF16) == 0 && strstr(OPS.last_error(CTX), "AVX512-BF16"),
                "bf16: refused on this CPU without AVX512-BF16: '%s'", OPS.last_error(CTX));
        test_ok(1, "bf16 linear # SKIP this CPU lacks AVX512-BF16");
        return;
    }
    int exact = 1, padok = 1;
    double worst = 0;
    rng_state = 77;
    for (int s = 0; s < NSHAPES; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        int lda = K + 3, ldw = K + 5, ldc = N + 2, relu = s % 2;
        float *A = frand((size_t)M * lda, -1, 1), *W = frand((size_t)N * ldw, -1, 1);
        float *bias = s % 3 ? frand((size_t)N, -1, 1) : NULL, *R = malloc((size_t)M * ldc * sizeof *R);
        float *C = malloc((size_t)M * ldc * sizeof *C);
        for (size_t e = 0; e < (size_t)M * ldc; e++)
            C[e] = 12345.0f;
        spec_bf16_linear(R, M, N, K, A, lda, W, ldw, bias, relu, ldc);
        size_t bytes = OPS.linear_packed_bytes_q(CTX, N, K, NMT_DTYPE_BF16);
        void *Wp = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        int rc = !Wp || OPS.linear_pack_q(CTX, Wp, W, N, K, ldw, NMT_DTYPE_BF16) < 0 ||
                 OPS.linear_rowinv(CTX, M, N, K, A, lda, Wp, bias, relu, C, ldc) < 0;
        exact &= rc == 0 && same_bits(C, R, M, N, ldc);
        double num = 0, den = 1;
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < N; j++) {
                double r = bias ? bias[j] : 0;
                for (int k = 0; k < K; k++)
                    r += (double)A[(size_t)i * lda + k] * W[(size_t)j * ldw + k];
                r = relu && r < 0 ? 0 : r;
                double d = fabs(C[(size_t)i * ldc + j] - r);
                num = d > num || isnan(d) ? d : num;
                den = fabs(r) > den ? fabs(r) : den;
            }
            for (int j = N; j < ldc; j++)
                padok &= C[(size_t)i * ldc + j] == 12345.0f;
        }
        worst = rc ? INFINITY : num / den > worst || isnan(num) ? num / den : worst;
        free(A), free(W), free(bias), free(R), free(C), free(Wp);
    }
    test_ok(exact, "bf16 linear: bit for bit vdpbf16ps's arithmetic (awkward shapes, odd K, padded ld, bias, ReLU)");
    test_ok(worst <= 2e-2, "bf16 linear: against float32: max normwise relative error %.3g (bound 2e-2)", worst);
    test_ok(padok, "bf16 linear: writes no column of C past N");
    /* row invariance: a row alone and inside M rows, 1 and 2 threads */
    int N = 130, K = 129, same = 1;
    float *A = frand((size_t)200 * K, -1, 1), *W = frand((size_t)N * K, -1, 1), *b = frand((size_t)N, -1, 1);
    float *C = malloc((size_t)200 * N * sizeof *C), *y = malloc((size_t)N * sizeof *y);
    void *Wp = aligned_alloc(64, (OPS.linear_packed_bytes_q(CTX, N, K, NMT_DTYPE_BF16) + 63) & ~(size_t)63);
    same = OPS.linear_pack_q(CTX, Wp, W, N, K, K, NMT_DTYPE_BF16) == 0 &&
           OPS.linear_rowinv(CTX, 1, N, K, A + (size_t)77 * K, K, Wp, b, 0, y, N) == 0;
    static const int Ms[] = { 78, 79, 100, 200 };
    for (int m = 0; m < 4; m++)
        for (int t = 0; t < 2; t++) {
            struct backend *c = t ? be : be1;
            same &= c->ops.linear_rowinv(c->ctx, Ms[m], N, K, A, K, Wp, b, 0, C, N) == 0 &&
                    !memcmp(C + (size_t)77 * N, y, (size_t)N * sizeof *y);
        }
    test_ok(same, "bf16 linear: row 77 gives identical bits alone and inside 78..200 rows on 1 and 2 threads");
    W[5 * K + 3] = NAN;
    test_ok(OPS.linear_pack_q(CTX, Wp, W, N, K, K, NMT_DTYPE_BF16) < 0 && strstr(OPS.last_error(CTX), "row 5"),
            "bf16: linear_pack_q refuses a non-finite weight, naming its row: '%s'", OPS.last_error(CTX));
    setenv("NMT_CPU_ISA", "avx2", 1);
    test_ok(OPS.linear_packed_bytes_q(CTX, N, K, NMT_DTYPE_BF16) == 0 && strstr(OPS.last_error(CTX), "AVX512-BF16") &&
                OPS.linear_rowinv(CTX, 1, N, K, A, K, Wp, b, 0, y, N) < 0,
            "bf16: NMT_CPU_ISA=avx2 turns it off, with the reason: '%s'", OPS.last_error(CTX));
    unsetenv("NMT_CPU_ISA");
    free(A), free(W), free(b), free(C), free(y), free(Wp);
}

typedef void (*spec_gemm_fn)(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                             int ldb, float beta, float *C, int ldc);

/* The bf16 products of gemm_ex under set_precision(BF16) with NMT_CPU_ISA=ISA (NAME in messages)
 * bit for bit SPEC (tests/unit/bf16_spec.h, which test_gemm_bf16 checks the bodies against), on 1
 * and 2 threads, float32 and bf16 operands, the four transpositions. */
static void test_bf16_products(const char *isa, const char *name, spec_gemm_fn spec)
{
    static const int cases[][5] = { { 37, 29, 67, 0, 1 }, { 64, 48, 96, 0, 0 }, { 19, 70, 33, 1, 0 },
                                    { 100, 17, 130, 1, 1 }, { 1, 1, 1, 0, 1 }, { 33, 200, 64, 0, 0 } };
    int exact = 1, n = 0;
    rng_state = 5;
    setenv("NMT_CPU_ISA", isa, 1);
    for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        int M = cases[c][0], N = cases[c][1], K = cases[c][2], ta = cases[c][3], tb = cases[c][4];
        int lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2, ldc = N + 3;
        size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
        float *A = frand(na, -2, 2), *B = frand(nb, -1, 1), *C0 = frand(nc, -1, 1), *C = malloc(nc * 4), *R = malloc(nc * 4);
        uint16_t *B16 = malloc(nb * 2);
        for (int t = 0; t < 2; t++)
            for (int b16 = 0; b16 < 2; b16++, n++) {
                struct backend *x = t ? be : be1;
                float beta = b16 ? 0.5f : 0.0f;
                memcpy(C, C0, nc * 4);
                memcpy(R, C0, nc * 4);
                int rc = x->ops.set_precision(x->ctx, NMT_DTYPE_BF16) < 0 ||
                         x->ops.cast(x->ctx, B16, NMT_DTYPE_BF16, B, NMT_DTYPE_F32, nb) < 0 ||
                         x->ops.gemm_ex(x->ctx, ta, tb, M, N, K, 0.75f, A, NMT_DTYPE_F32, lda, b16 ? (void *)B16 : B,
                                        b16 ? NMT_DTYPE_BF16 : NMT_DTYPE_F32, ldb, beta, C, ldc) < 0 ||
                         x->ops.set_precision(x->ctx, NMT_DTYPE_F32) < 0;
                spec(ta, tb, M, N, K, 0.75f, A, lda, B, ldb, beta, R, ldc);
                exact &= rc == 0 && !memcmp(C, R, nc * 4);
            }
        free(A), free(B), free(C0), free(C), free(R), free(B16);
    }
    unsetenv("NMT_CPU_ISA");
    test_ok(exact, "bf16 products %s (gemm_ex under set_precision bf16, NMT_CPU_ISA=%s): %d products bit for bit "
            "its spec (four transpositions, awkward shapes, float32 and bf16 operands, 1 and 2 threads)", name, isa, n);
}

/* The bf16 products on real tiles (plugins/cpu/gemm_bf16_amx.c), and with vdpbf16ps
 * (gemm_bf16_dp.c: on AVX512-BF16 without tiles, or with them turned off by NMT_CPU_ISA). */
static void test_bf16_gemm(void)
{
    if (!cpu_has("amx"))
        test_ok(1, "bf16 products on AMX tiles # SKIP this CPU lacks the amx path");
    else
        test_bf16_products("amx", "on AMX tiles", spec_amx_bf16_gemm);
    if (!cpu_has("avx512vnni") || !__builtin_cpu_supports("avx512bf16"))
        test_ok(1, "bf16 products with vdpbf16ps # SKIP this CPU lacks AVX512-BF16");
    else
        test_bf16_products("avx512vnni", "with vdpbf16ps", spec_dp_bf16_gemm);
}

/* The int8 layer in DTYPE (activations on the grid -TOP..TOP; NAME in messages) on every path this
 * CPU has: the spec bit for bit, within BOUND of float32, row invariance, the extremes, and
 * identical bits across the paths. */
static void test_int8(uint32_t dtype, int top, const char *name, double bound)
{
    qdt = dtype, qtop = top, qname = name;
    float *out[NISA][NSHAPES];
    int ran[NISA] = { 0 };
    for (int p = 0; p < NISA; p++) {
        for (int s = 0; s < NSHAPES; s++)
            out[p][s] = malloc((size_t)shapes[s][0] * (shapes[s][1] + 2) * sizeof(float));
        if (!cpu_has(isas[p])) {
            test_ok(1, "%s linear: NMT_CPU_ISA=%s # SKIP this CPU lacks the %s path", name, isas[p], isas[p]);
            continue;
        }
        setenv("NMT_CPU_ISA", isas[p], 1);
        char path[40];
        snprintf(path, sizeof path, "NMT_CPU_ISA=%s", isas[p]);
        double err;
        int padok = 1;
        test_ok(run_shapes(out[p], &err, &padok),
                "%s linear, %s: bit for bit the spec (awkward shapes, padded ld, bias, ReLU)", name, path);
        test_ok(err <= bound, "%s linear, %s: against float32: max normwise relative error %.3g (bound %g)", name,
                path, err, bound);
        test_ok(padok, "%s linear, %s: writes no column of C past N", name, path);
        test_rows(path);
        if (dtype == NMT_DTYPE_INT8) /* every precision */
            test_columns(path);
        test_extremes(path);
        ran[p] = 1;
    }
    unsetenv("NMT_CPU_ISA");
    int w = 0; /* the widest path this CPU has */
    while (!ran[w])
        w++;
    for (int p = w + 1; p < NISA; p++)
        if (ran[p]) {
            int same = 1;
            for (int s = 0; s < NSHAPES; s++)
                same &= same_bits(out[w][s], out[p][s], shapes[s][0], shapes[s][1], shapes[s][1] + 2);
            test_ok(same, "%s linear: the %s and %s paths give identical bits on every shape", name, isas[w], isas[p]);
        }
    for (int p = 0; p < NISA; p++)
        for (int s = 0; s < NSHAPES; s++)
            free(out[p][s]);
}

int main(void)
{
    struct nmt_backend_opts o2 = { .size = sizeof o2, .threads = 2 }, o1 = { .size = sizeof o1, .threads = 1 };
    be = backend_open("cpu", &o2);
    be1 = backend_open("cpu", &o1);
    test_ok(be && be1, "cpu backend opens (%s)", be ? be->path : nmt_errmsg());
    if (!be || !be1)
        return test_done();
    int has = OPS.linear_packed_bytes_q && OPS.linear_pack_q;
    test_ok(has, "cpu plugin has the optional linear_packed_bytes_q and linear_pack_q slots (ABI %u.%u)",
            OPS.abi_major, OPS.abi_minor);
    if (!has)
        return test_done();
    test_errors();
    test_int8(NMT_DTYPE_INT8, 2047, "int8", 6e-3);
    /* 8-bit activations: the weights' rounding and the activations' (0.70% above) */
    test_int8(NMT_DTYPE_INT8A8, 127, "int8-a8", 1e-2);
    /* 7-bit activations: half the 8-bit grid's resolution */
    test_int8(NMT_DTYPE_INT8A7, 63, "int8-a7", 2e-2);
    test_bf16();
    test_bf16_gemm();
    backend_close(be);
    backend_close(be1);
    return test_done();
}
