/* test_amx: the int8 linear layer's AMX path (plugins/cpu/linear_q_amx.c) run through the AMX
 * emulation of plugins/cpu/amx.h, which restates the tile instructions' pseudo-code from Intel's
 * instruction set reference, so that the tile kernel is checked on CPUs without AMX:
 *   - the emulated tdpbusd / tdpbssd on hand-worked bytes (A unsigned or signed, B signed);
 *   - the split of 12-bit activations into bytes, on every value -2047..2047;
 *   - the kernel bit for bit against the int8 spec of plugins/cpu/linear_q.c restated here (exact
 *     integer sums, the epilogue ((float)S * s_j) * a_i + bias, ReLU) on awkward M and N, with
 *     bias and ReLU, no element of C past M rows or N columns written;
 *   - the extremes: K = 8192 with every product at its largest, both signs;
 *   - the same with 8-bit activations (-127..127, one tdpbssd on their signed bytes).
 * The split and the epilogue are AVX-512: the checks need a CPU with it (and are skipped elsewhere). On CPUs with
 * AMX, test_cpu_reduced runs the real instructions against the same spec. */
#define CPU_AMX_EMULATE 1
#include "cpu/linear_q_amx.c"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

static uint64_t rng_state = 99;
static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33);
}

/* Where column k of a quantised row is held (linear_q.c: each group of 4 as 0, 2, 1, 3). */
static int act_pos(int k) { return (k & ~3) | ((k & 1) << 1) | ((k & 2) >> 1); }

/* The emulated instructions on hand-worked bytes: one row of A, one group of 4, one column. */
static void test_emulation(void)
{
    static const struct amx_cfg cfg = { .palette = 1, .colsb = { 4, 4, 4 }, .rows = { 1, 1, 1 } };
    const uint8_t a[4] = { 255, 2, 0x80, 1 }, b[4] = { 255, 3, 2, 0x81 }; /* b: -1, 3, 2, -127 */
    int32_t us, ss;
    AMX_LOADCONFIG(&cfg);
    AMX_LOAD(0, a, 4);
    AMX_LOAD(1, b, 4);
    AMX_ZERO(2);
    AMX_DPBUSD(2, 0, 1);
    AMX_STORE(2, &us, 4);
    AMX_ZERO(2);
    AMX_DPBSSD(2, 0, 1);
    AMX_DPBSSD(2, 0, 1); /* accumulates */
    AMX_STORE(2, &ss, 4);
    AMX_RELEASE();
    /* unsigned A: 255*-1 + 2*3 + 128*2 + 1*-127 = -120; signed A: -1*-1 + 6 - 256 - 127 = -376, twice */
    test_ok(us == -120 && ss == -752, "emulated tdpbusd %d (want -120), tdpbssd twice %d (want -752)", us, ss);
}

static void test_split(void)
{
    int16_t q[4096];
    uint8_t lo[4096];
    int8_t hi[4096];
    for (int k = 0; k < 4096; k++)
        q[act_pos(k)] = (int16_t)(k < 4095 ? k - 2047 : 0);
    cpu_q_amx_split(lo, hi, q, 4096);
    int ok = 1, bad = -1;
    for (int k = 0; k < 4095 && ok; k++) {
        ok = 256 * hi[k] + lo[k] == k - 2047 && hi[k] >= -8 && hi[k] <= 7;
        bad = k - 2047;
    }
    test_ok(ok, "split: 256 * hi + lo gives back every activation -2047..2047, hi in -8..7%s",
            ok ? "" : " (wrong at one value)");
    if (!ok)
        printf("# first wrong value %d\n", bad);
}

/* One problem: int8 weights W (N x Kp), activations QA (M x Kp, natural order; on the 8-bit grid
 * when A8), scales. */
struct prob {
    int M, N, Kp, ldc, relu, bias, a8;
    int8_t *W;
    int16_t *QA;
    float *sw, *sa, *b;
};

static void prob_fill(struct prob *p, int extreme)
{
    p->W = malloc((size_t)p->N * p->Kp);
    p->QA = malloc((size_t)p->M * p->Kp * sizeof *p->QA);
    p->sw = calloc((size_t)(p->N + 15) / 16 * 16, sizeof *p->sw);
    p->sa = malloc((size_t)p->M * sizeof *p->sa);
    p->b = malloc((size_t)p->N * sizeof *p->b);
    for (size_t x = 0; x < (size_t)p->N * p->Kp; x++)
        p->W[x] = extreme ? (int8_t)(x / p->Kp % 2 ? 127 : -127) : (int8_t)((int)(rnd() % 255) - 127);
    for (size_t x = 0; x < (size_t)p->M * p->Kp; x++)
        p->QA[x] = p->a8 ? (int16_t)(extreme ? (x / p->Kp % 2 ? 127 : -127) : (int)(rnd() % 255) - 127)
                   : (int16_t)(extreme ? (x / p->Kp % 2 ? 2047 : -2047) : (int)(rnd() % 4095) - 2047);
    for (int j = 0; j < p->N; j++) {
        p->sw[j] = extreme ? 1.0f : (float)(rnd() % 1000 + 1) * 1e-5f;
        p->b[j] = (float)((int)(rnd() % 2001) - 1000) * 1e-3f;
    }
    for (int i = 0; i < p->M; i++)
        p->sa[i] = extreme ? 1.0f : (float)(rnd() % 1000 + 1) * 1e-4f;
}

static void prob_free(struct prob *p)
{
    free(p->W), free(p->QA), free(p->sw), free(p->sa), free(p->b);
}

/* Runs the AMX path on P as linear_q.c's driver does (the operands packed as it packs them: panels
 * of 16 columns by groups of 4 bytes; rows of A in act_pos order, then split, or with 8-bit
 * activations their signed bytes in order; M rounded up to 16 rows of zeros) into C (M x ldc,
 * filled with a sentinel first). */
static void run_amx(const struct prob *p, float *C)
{
    int np = (p->N + 15) / 16, m16 = (p->M + 15) / 16 * 16;
    uint8_t *Wp = calloc((size_t)np * 16 * p->Kp, 1);
    for (int j = 0; j < p->N; j++)
        for (int k = 0; k < p->Kp; k++)
            Wp[(size_t)(j / 16) * p->Kp * 16 + (size_t)(k / 4) * 64 + (size_t)(j % 16) * 4 + k % 4] =
                (uint8_t)p->W[(size_t)j * p->Kp + k];
    int16_t *row = malloc((size_t)p->Kp * sizeof *row);
    size_t ld8 = (size_t)p->Kp + 64; /* as the driver pads them */
    uint8_t *lo = calloc((size_t)m16 * ld8, 1);
    int8_t *hi = calloc((size_t)m16 * ld8, 1), *s8 = calloc((size_t)m16 * ld8, 1);
    for (int i = 0; i < p->M; i++) {
        for (int k = 0; k < p->Kp; k++) {
            row[act_pos(k)] = p->QA[(size_t)i * p->Kp + k];
            s8[(size_t)i * ld8 + (size_t)k] = (int8_t)p->QA[(size_t)i * p->Kp + k];
        }
        cpu_q_amx_split(lo + (size_t)i * ld8, hi + (size_t)i * ld8, row, p->Kp);
    }
    for (size_t x = 0; x < (size_t)p->M * p->ldc; x++)
        C[x] = -12345.0f;
    struct qlin g = { NULL, p->sa, p->sw, Wp, p->bias ? p->b : NULL, C, p->M, p->N, p->Kp, 0, p->ldc, p->relu,
                      p->a8 ? NULL : lo, p->a8 ? NULL : hi, (int)ld8, NULL, NULL, p->a8 ? s8 : NULL, NULL, NULL, 0 };
    cpu_q_amx_begin();
    for (int p0 = 0; p0 < np; p0 += 4) { /* the driver's column groups of 4 panels */
        int n = p->N - p0 * 16 < 64 ? p->N - p0 * 16 : 64, gp = (n + 15) / 16;
        __mmask16 last = (__mmask16)((1u << (n - 16 * (gp - 1))) - 1);
        cpu_q_amx_group(&g, p0, gp, last);
    }
    cpu_q_amx_end();
    free(Wp), free(row), free(lo), free(hi), free(s8);
}

/* The spec: exact sums, then the float epilogue in the stated order. Returns the mismatches. */
static int check(const struct prob *p, const float *C, int64_t *maxabs)
{
    int bad = 0;
    *maxabs = 0;
    for (int i = 0; i < p->M; i++) {
        for (int j = 0; j < p->N; j++) {
            int64_t S = 0;
            for (int k = 0; k < p->Kp; k++)
                S += (int64_t)p->QA[(size_t)i * p->Kp + k] * p->W[(size_t)j * p->Kp + k];
            *maxabs = llabs(S) > *maxabs ? llabs(S) : *maxabs;
            float v = (float)S * p->sw[j];
            v = v * p->sa[i];
            if (p->bias)
                v = v + p->b[j];
            if (p->relu)
                v = v > 0 ? v : 0;
            float got = C[(size_t)i * p->ldc + j];
            bad += memcmp(&v, &got, sizeof v) != 0;
        }
        for (int j = p->N; j < p->ldc; j++)
            bad += C[(size_t)i * p->ldc + j] != -12345.0f;
    }
    return bad;
}

static void test_shapes(void)
{
    static const int shapes[][3] = { { 1, 1, 64 },   { 5, 16, 64 },   { 16, 17, 128 }, { 17, 33, 64 },
                                     { 33, 64, 192 }, { 40, 100, 128 }, { 3, 130, 320 }, { 64, 48, 512 } };
    int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    for (int s = 0; s < 2 * nshapes; s++) {
        int a8 = s >= nshapes, x = s % nshapes;
        struct prob p = { shapes[x][0], shapes[x][1], shapes[x][2], shapes[x][1] + 3, s % 2, s % 3 != 0, a8,
                          NULL, NULL, NULL, NULL, NULL };
        prob_fill(&p, 0);
        float *C = malloc((size_t)p.M * p.ldc * sizeof *C);
        run_amx(&p, C);
        int64_t mx;
        int bad = check(&p, C, &mx);
        test_ok(bad == 0, "AMX (emulated, %s activations) M=%d N=%d Kp=%d%s%s: bit for bit the int8 spec, nothing past N (%d wrong)",
                a8 ? "8-bit" : "12-bit", p.M, p.N, p.Kp, p.bias ? ", bias" : "", p.relu ? ", ReLU" : "", bad);
        free(C);
        prob_free(&p);
    }
}

static void test_extremes(void)
{
    for (int t = 0; t < 4; t++) {
        int neg = t % 2, a8 = t / 2, top = a8 ? 127 : 2047;
        struct prob p = { 18, 20, 8192, 20, 0, 0, a8, NULL, NULL, NULL, NULL, NULL };
        prob_fill(&p, 1);
        if (neg)
            for (size_t x = 0; x < (size_t)p.N * p.Kp; x++)
                p.W[x] = (int8_t)-p.W[x];
        float *C = malloc((size_t)p.M * p.ldc * sizeof *C);
        run_amx(&p, C);
        int64_t mx;
        int bad = check(&p, C, &mx);
        test_ok(bad == 0 && mx == top * 127LL * 8192,
                "AMX (emulated) K=8192, every product +-%d x 127 (|S| up to %lld, %s signs): exact (%d wrong)", top,
                (long long)mx, neg ? "flipped" : "both", bad);
        free(C);
        prob_free(&p);
    }
}

int main(void)
{
    __builtin_cpu_init();
    test_emulation();
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl"))) {
        test_ok(1, "AMX split and kernel (emulated) # SKIP they are AVX-512 code, which this CPU lacks");
        return test_done();
    }
    test_split();
    test_shapes();
    test_extremes();
    return test_done();
}
