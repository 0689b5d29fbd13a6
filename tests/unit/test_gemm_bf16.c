/* test_gemm_bf16: the cpu plugin's bf16 products (plugins/cpu/gemm_bf16.h): the packing, the AMX
 * body on the tile emulation of plugins/cpu/amx.h (so that it is checked on CPUs without AMX) and
 * the vdpbf16ps body where the CPU has AVX512-BF16:
 *   - the emulated tdpbf16ps on hand-worked values: the even and odd products summed apart, then
 *     added to C; inputs and results below float32's normal range read as 0;
 *   - vdpbf16ps on hand-worked values: the odd product of a pair added before the even one;
 *   - the rounding of float32 operands to bf16 (32 at a time, or fewer: zeros after them; integer
 *     instructions, and vcvtne2ps2bf16 where the CPU has it) against f32_to_bf16, 0 below the
 *     normal range, on special values and random bit patterns;
 *   - the whole product, each body and each packing, bit for bit against tests/unit/bf16_spec.h on
 *     awkward M, N and K (the first row of A below float32's normal range), the four
 *     transpositions, float32 and bf16 operands, alpha and beta (beta 0 never reads C, even NaN),
 *     no element of C past M rows or N columns written, whatever the thread split.
 * The packing is AVX-512 code: the checks need a CPU with it (and are skipped elsewhere). On CPUs
 * with AMX, test_cpu_reduced runs the real tiles against the same spec, and both bodies through
 * the plugin. */
#define CPU_AMX_EMULATE 1
#include "cpu/gemm_bf16.c"
#include "cpu/gemm_bf16_amx.c"
#include "cpu/gemm_bf16_dp.c"

#include <stdlib.h>

#include "bf16_spec.h"
#include "test.h"

/* The thread pool of the plugin, replaced: [0, N) in test_chunks pieces, run one after another as
 * threads 0, 1, ... (the kernel's results may not depend on the split). */
static int test_chunks = 1;
void pool_for(struct pool *p, int64_t n, int64_t grain, pool_fn fn, void *arg)
{
    (void)p, (void)grain;
    for (int t = 0; t < test_chunks; t++) {
        int64_t lo = n * t / test_chunks, hi = n * (t + 1) / test_chunks;
        if (hi > lo)
            fn(arg, lo, hi, t);
    }
}

static uint64_t rng_state = 7;
static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33);
}
static float urand(void) { return (float)(rnd() % 2000001) / 1000000.0f - 1.0f; }

static uint16_t bits_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}

/* One row of A by one column of B, hand-worked. Even products 1 and 0, odd 2^-24 and 2^-24: the
 * odd sum is 2^-23 and 1 + 2^-23 is a float32; one running sum would round 1 + 2^-24 to 1 twice.
 * Then a denormal input (2^-130 as bf16) reads as 0, and a result below the normal range is 0. */
static void test_emulation(void)
{
    /* tiles: 0 A (one row, two pairs), 1 B (two rows of one pair), 2 C (one element) */
    static const struct amx_cfg cfg2 = { .palette = 1, .colsb = { 8, 4, 4 }, .rows = { 1, 2, 1 } };
    static const struct amx_cfg cfg = { .palette = 1, .colsb = { 4, 4, 4 }, .rows = { 1, 1, 1 } };
    const float two24 = 1.0f / 16777216.0f;
    uint16_t a[4] = { bits_bf16(1.0f), bits_bf16(1.0f), bits_bf16(1.0f), bits_bf16(1.0f) };
    uint16_t b[4] = { bits_bf16(1.0f), bits_bf16(two24), 0, bits_bf16(two24) }; /* rows k = 0, 1 */
    float c = 0, want = 1.0f + 2 * two24;
    AMX_LOADCONFIG(&cfg2);
    AMX_LOAD(0, a, 8);
    AMX_LOAD(1, b, 4);
    AMX_LOAD(2, &c, 4);
    AMX_DPBF16PS(2, 0, 1);
    AMX_STORE(2, &c, 4);
    AMX_RELEASE();
    test_ok(c == want, "emulated tdpbf16ps sums the even and odd products apart: %.9g (want %.9g)", c, want);

    const float tiny = 7.34683969e-40f; /* 2^-130: a float32 denormal, exactly a bf16 one */
    uint16_t da[2] = { bits_bf16(tiny), bits_bf16(1.0f) }, db[2] = { bits_bf16(1e30f), 0 };
    uint16_t sa[2] = { bits_bf16(1e-20f), 0 }, sb[2] = { bits_bf16(1e-20f), 0 }; /* 1e-40: below normal */
    float d = 0, s = 0;
    AMX_LOADCONFIG(&cfg);
    AMX_LOAD(0, da, 4);
    AMX_LOAD(1, db, 4);
    AMX_ZERO(2);
    AMX_DPBF16PS(2, 0, 1);
    AMX_STORE(2, &d, 4);
    AMX_LOAD(0, sa, 4);
    AMX_LOAD(1, sb, 4);
    AMX_ZERO(2);
    AMX_DPBF16PS(2, 0, 1);
    AMX_STORE(2, &s, 4);
    AMX_RELEASE();
    test_ok(d == 0 && s == 0, "emulated tdpbf16ps: a denormal input reads as 0 (%g), a denormal result is 0 (%g)", d, s);
}

/* The packing's conversions of the first M of 32 float32 values at X into GOT[32]: cvt32_int, or
 * cvt32_ne where NE. */
ISA_AVX512 static void convert32_int(uint16_t *got, const float *x, int m)
{
    _mm512_storeu_si512(got, cvt32_int(x, 0, m));
}
ISA_AVX512_BF16 static void convert32_ne(uint16_t *got, const float *x, int m)
{
    _mm512_storeu_si512(got, cvt32_ne(x, 0, m));
}

/* What the packing makes of X: f32_to_bf16, but 0 of its sign below float32's normal range. */
static uint16_t packed_bf16(float x)
{
    return x != 0 && fabsf(x) < 1.17549435e-38f ? (uint16_t)(signbit(x) ? 0x8000 : 0) : f32_to_bf16(x);
}

static void test_rounding(int ne)
{
    enum { N = 4099 };
    static float x[N];
    uint16_t got[32];
    static const uint32_t special[] = { 0x00000000u, 0x80000000u, 0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu,
                                        0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00001u, 0xffa00000u,
                                        0x7f800001u, 0x00000001u, 0x807fffffu, 0x00800000u, 0x7f7f8000u, 0x807f8000u,
                                        0x007fffffu, 0x007f8000u, 0x007f7fffu, 0x80000001u };
    int ns = (int)(sizeof special / sizeof special[0]);
    for (int i = 0; i < N; i++) {
        uint32_t u = i < ns ? special[i] : rnd() << 1 ^ rnd();
        memcpy(&x[i], &u, 4);
    }
    int bad = 0;
    for (int i = 0; i < N; i += 32) { /* every count 0..32 of values from each place */
        int n = N - i < 32 ? N - i : 32;
        for (int m = 0; m <= n; m++) {
            (ne ? convert32_ne : convert32_int)(got, x + i, m);
            for (int q = 0; q < 32; q++)
                bad += got[q] != (q >= m ? 0 : packed_bf16(x[i + q]));
        }
    }
    test_ok(bad == 0, "float32 to bf16 in the packing (%s): as f32_to_bf16, 0 below the normal range, on %d special and "
            "random values (%d differ)", ne ? "vcvtne2ps2bf16" : "integer rounding", N, bad);
}

/* One product by body DP (vdpbf16ps) or the emulated tiles, packed with vcvtne2ps2bf16 where NE,
 * against its spec; TEST_CHUNKS splits; returns differing elements (C checked whole: the sentinel
 * columns past N must be unchanged). */
static int one_case(int dp, int ne, int ta, int tb, int M, int N, int K, int a16, int b16, float alpha, float beta, int chunks)
{
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 5;
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = malloc(na * 4), *B = malloc(nb * 4), *C = malloc(nc * 4), *R = malloc(nc * 4);
    uint16_t *A16 = malloc(na * 2), *B16 = malloc(nb * 2);
    for (size_t i = 0; i < na; i++) {
        A[i] = urand() * (rnd() % 9 == 0 ? 300.0f : 1.0f);
        if ((ta ? i % (size_t)lda : i / (size_t)lda) == 0) { /* row 0 of op(A): float32 values below the normal range */
            uint32_t u = 0x007f0000u + rnd() % 0x10000u + (rnd() % 2 ? 0x80000000u : 0); /* some round up to 2^-126 */
            memcpy(&A[i], &u, 4);
        }
        if (a16) { /* the bf16 operand and its float32 value, so the spec reads the same number */
            A16[i] = f32_to_bf16(A[i]);
            A[i] = bf16_to_f32(A16[i]);
        }
    }
    for (size_t i = 0; i < nb; i++) {
        B[i] = urand() * (rnd() % 7 == 0 ? 1048576.0f : 1.0f); /* 2^20 x 2^-126: products in the normal range */
        if (b16) {
            B16[i] = f32_to_bf16(B[i]);
            B[i] = bf16_to_f32(B16[i]);
        }
    }
    for (size_t i = 0; i < nc; i++)
        C[i] = R[i] = (int)(i % (size_t)ldc) >= N ? -777.0f : beta == 0 ? NAN : urand();
    void *work = aligned_alloc(64, (cpu_gemm_bf16_bytes(M, N, K) + 63) / 64 * 64);
    nmt_bctx ctx;
    memset(&ctx, 0, sizeof ctx);
    test_chunks = chunks;
    cpu_gemm_bf16(&ctx, work, dp ? cpu_gemm_bf16_dp_body : cpu_gemm_bf16_amx_body, ne, ta, tb, M, N, K, alpha,
                  a16 ? (const void *)A16 : A, a16, lda, b16 ? (const void *)B16 : B, b16, ldb, beta, C, ldc);
    (dp ? spec_dp_bf16_gemm : spec_amx_bf16_gemm)(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc);
    int bad = 0;
    for (size_t i = 0; i < nc; i++)
        bad += memcmp(&C[i], &R[i], 4) != 0;
    free(A), free(B), free(C), free(R), free(A16), free(B16), free(work);
    return bad;
}

/* op(A) (1 x K) times op(B) (K x 1), both bf16 (given as float32 values), by the vdpbf16ps body. */
static float dp_dot(const float *a, const float *b, int K)
{
    uint16_t a16[4], b16[4];
    for (int k = 0; k < K; k++)
        a16[k] = bits_bf16(a[k]), b16[k] = bits_bf16(b[k]);
    void *work = aligned_alloc(64, (cpu_gemm_bf16_bytes(1, 1, K) + 63) / 64 * 64);
    nmt_bctx ctx;
    memset(&ctx, 0, sizeof ctx);
    test_chunks = 1;
    float c = NAN;
    cpu_gemm_bf16(&ctx, work, cpu_gemm_bf16_dp_body, 1, 0, 0, 1, 1, K, 1.0f, a16, 1, K, b16, 1, 1, 0.0f, &c, 1);
    free(work);
    return c;
}

/* vdpbf16ps on hand-worked values. Products 0 and 2^24 (the first pair), then 1 and -2^24: the odd
 * product first makes 0 + 1 = 1; the even one first, or one running sum in K's order, would round
 * 2^24 + 1 to 2^24 and end at 0. Then a denormal input and a result below the normal range are 0. */
static void test_dp_order(void)
{
    const float two24 = 16777216.0f, tiny = 7.34683969e-40f; /* 2^-130: a float32 denormal, exactly a bf16 one */
    const float ones[4] = { 1, 1, 1, 1 }, b[4] = { 0, two24, 1, -two24 };
    float c = dp_dot(ones, b, 4);
    test_ok(c == 1.0f, "vdpbf16ps adds a pair's odd product before its even one: %.9g (want 1)", c);
    const float da[2] = { tiny, 1 }, db[2] = { 1e30f, 0 }, sa[2] = { 1e-20f, 0 };
    float d = dp_dot(da, db, 2), u = dp_dot(sa, sa, 2);
    test_ok(d == 0 && u == 0, "vdpbf16ps: a denormal input reads as 0 (%g), a denormal result is 0 (%g)", d, u);
}

static void test_products(int dp, int ne)
{
    const char *name = dp ? (ne ? "vdpbf16ps, vcvtne2ps2bf16 packing" : "vdpbf16ps, integer packing")
                          : (ne ? "emulated tiles, vcvtne2ps2bf16 packing" : "emulated tiles, integer packing");
    static const int shapes[][3] = { { 1, 1, 1 },   { 16, 16, 32 }, { 32, 32, 64 }, { 17, 33, 31 }, { 5, 70, 97 },
                                     { 48, 20, 33 }, { 33, 16, 200 }, { 3, 40, 512 }, { 65, 47, 66 } };
    int ns = (int)(sizeof shapes / sizeof shapes[0]);
    for (int t = 0; t < 4; t++) {
        int bad = 0, cases = 0;
        for (int s = 0; s < ns; s++)
            for (int v = 0; v < 4; v++, cases++) {
                const int *d = shapes[s];
                float alpha = v == 2 ? -0.5f : 1.0f, beta = v == 1 ? 0.25f : v == 3 ? -1.0f : 0.0f;
                bad += one_case(dp, ne, t >> 1, t & 1, d[0], d[1], d[2], v == 2, v == 3, alpha, beta, 1 + (s + v) % 3) != 0;
            }
        test_ok(bad == 0, "%s, transA %d transB %d: %d products (float32 and bf16 operands, alpha, beta 0 on NaN C, "
                "1-3 thread chunks) bit for bit the spec, nothing written past N (%d differ)", name, t >> 1, t & 1, cases,
                bad);
    }
    int split = 0;
    for (int chunks = 1; chunks <= 4; chunks++)
        split += one_case(dp, ne, 0, 1, 70, 100, 130, 0, 0, 1.0f, 0.0f, chunks) != 0;
    test_ok(split == 0, "%s: 70 x 100 x 130 split into 1, 2, 3, 4 chunks of columns: the spec each time (%d differ)", name,
            split);
}

int main(void)
{
    __builtin_cpu_init();
    test_emulation();
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))) {
        test_ok(1, "AMX bf16 packing and kernel (emulated) # SKIP they are AVX-512 code, which this CPU lacks");
        return test_done();
    }
    test_rounding(0);
    test_products(0, 0);
    if (!__builtin_cpu_supports("avx512bf16")) {
        test_ok(1, "the vdpbf16ps body and the vcvtne2ps2bf16 packing # SKIP this CPU lacks AVX512-BF16");
        return test_done();
    }
    test_rounding(1);
    test_products(0, 1);
    test_dp_order();
    test_products(1, 0);
    test_products(1, 1);
    return test_done();
}
