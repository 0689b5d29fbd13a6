/* test_quantize.c: int8 weights (nn/quantize.h): round to nearest against its formula, GPTQ against
 * round to nearest (the same grid, a smaller output error on correlated inputs, the same integers
 * when the inputs are uncorrelated, integers that requantise to themselves), and the calibration
 * statistics gathered from a model's forward pass on the cpu backend. */
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "run/backend_loader.h"
#include "nn/model.h"
#include "nn/quantize.h"

static uint64_t rng = 88172645463325252ULL;
static double uniform(void) /* in [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

static void check_rtn(void)
{
    float w[3 * 4] = {0.5f, -1.0f, 0.25f, 0.126f, 0, 0, 0, 0, 1e-40f, -3e-39f, 0, 1e-39f};
    int8_t q[12];
    float s[3];
    quant_int8_rtn(w, 3, 4, q, s);
    test_ok(s[0] == 1.0f / 127.0f && q[0] == 64 && q[1] == -127 && q[2] == 32 && q[3] == 16,
            "round to nearest: scale max/127, values rint(w * 127 / max) (%d %d %d %d)", q[0], q[1], q[2], q[3]);
    test_ok(s[1] == 1.0f && !q[4] && !q[5] && !q[6] && !q[7], "a zero row: scale 1, integers 0");
    test_ok(s[2] == 1.0f && !q[8] && !q[9] && !q[10] && !q[11],
            "a row so small that 127 / max overflows: scale 1, integers 0 (scale %g)", (double)s[2]);
}

/* W (R, C) random; X (N, C) inputs whose columns are correlated (mixtures of a few sources) unless
 * INDEPENDENT, where they are scaled independent values; H = X^T X. */
static void make_layer(int R, int C, int N, int independent, float *W, double *X, double *H)
{
    for (int i = 0; i < R * C; i++)
        W[i] = (float)(0.3 * uniform() + (i % 7 == 0 ? 0.2 * uniform() : 0));
    for (int n = 0; n < N; n++) {
        double z[4] = {uniform(), uniform(), uniform(), uniform()};
        for (int c = 0; c < C; c++)
            X[n * C + c] = independent ? uniform() * (1 + c % 3) : z[c % 4] + 0.7 * z[(c / 4) % 4] + 0.1 * uniform();
    }
    for (int i = 0; i < C; i++)
        for (int j = 0; j < C; j++) {
            double s = 0;
            for (int n = 0; n < N; n++)
                s += X[n * C + i] * X[n * C + j];
            H[i * C + j] = s;
        }
    if (independent) /* exactly diagonal: what uncorrelated inputs tend to */
        for (int i = 0; i < C; i++)
            for (int j = 0; j < C; j++)
                if (i != j)
                    H[i * C + j] = 0;
}

/* sum over inputs and rows of (x . (w - q s))^2 */
static double output_error(const float *W, const int8_t *q, const float *s, const double *X, int R, int C, int N)
{
    double e = 0;
    for (int n = 0; n < N; n++)
        for (int r = 0; r < R; r++) {
            double d = 0;
            for (int c = 0; c < C; c++)
                d += X[n * C + c] * ((double)W[r * C + c] - (double)q[r * C + c] * s[r]);
            e += d * d;
        }
    return e;
}

static void check_gptq(void)
{
    enum { R = 24, C = 32, N = 300 };
    static float W[R * C], sr[R], sg[R], deq[R * C], s2[R];
    static double X[N * C], H[C * C];
    static int8_t qr[R * C], qg[R * C], q2[R * C];
    make_layer(R, C, N, 0, W, X, H);
    quant_int8_rtn(W, R, C, qr, sr);
    int rc = quant_int8_gptq(W, R, C, H, qg, sg);
    test_ok(rc == 0, "GPTQ runs: %s", rc ? nmt_errmsg() : "");
    double er = output_error(W, qr, sr, X, R, C, N), eg = output_error(W, qg, sg, X, R, C, N);
    test_ok(eg < 0.7 * er, "GPTQ: output error on correlated inputs %.4g, round to nearest %.4g", eg, er);
    int same_grid = !memcmp(sr, sg, sizeof sr), top = 1, moved = 0;
    for (int r = 0; r < R; r++) {
        int m = 0;
        for (int c = 0; c < C; c++) {
            m = abs(qg[r * C + c]) > m ? abs(qg[r * C + c]) : m;
            moved += qg[r * C + c] != qr[r * C + c];
        }
        top &= m == 127;
    }
    test_ok(same_grid && top, "GPTQ: the scales of round to nearest, +-127 in every row");
    test_ok(moved > R * C / 20, "GPTQ: chooses other integers than round to nearest (%d of %d)", moved, R * C);
    for (int i = 0; i < R * C; i++)
        deq[i] = (float)qg[i] * sg[i / C];
    quant_int8_rtn(deq, R, C, q2, s2);
    test_ok(!memcmp(q2, qg, sizeof qg) && !memcmp(s2, sg, sizeof sg),
            "GPTQ: its values quantised again give the same integers and scales (what the cpu plugin does)");

    make_layer(R, C, N, 1, W, X, H);
    quant_int8_rtn(W, R, C, qr, sr);
    rc = quant_int8_gptq(W, R, C, H, qg, sg);
    test_ok(rc == 0 && !memcmp(qr, qg, sizeof qr) && !memcmp(sr, sg, sizeof sr),
            "GPTQ with uncorrelated inputs (diagonal H) is round to nearest, bit for bit");

    make_layer(R, C, N, 0, W, X, H);
    for (int i = 0; i < C; i++) /* column 5 never sees an input: a zero row and column of H */
        H[5 * C + i] = H[i * C + 5] = 0;
    memset(W, 0, C * sizeof *W); /* and a zero row */
    quant_int8_rtn(W, R, C, qr, sr);
    rc = quant_int8_gptq(W, R, C, H, qg, sg);
    int zero_row = sg[0] == 1.0f, ok5 = 1;
    for (int c = 0; c < C; c++)
        zero_row &= qg[c] == 0;
    test_ok(rc == 0 && zero_row, "GPTQ: a zero row stays zero with scale 1");
    for (int r = 0; r < R; r++)
        ok5 &= abs(qg[r * C + 5] - qr[r * C + 5]) <= 1;
    test_ok(ok5, "GPTQ: a column no input touched is rounded near its value");
}

/* The statistics of a model's forward pass: symmetric sums with a non-negative diagonal for every
 * linear weight and none for the embedding, the model's loss unchanged by the observer. */
static void check_calib(struct backend *be)
{
    struct model_config c = {.vocab = 40, .d_model = 16, .heads = 2, .ff = 32, .enc_layers = 2, .dec_layers = 2,
                             .max_len = 32, .label_smoothing = 0.1f, .ln_eps = 1e-5f};
    struct model *m = model_new(be, &c, 0);
    struct batch_record br = {0};
    batch_record_resize(&br, 2, 5, 4);
    for (uint32_t b = 0; b < 2; b++) {
        br.index[b] = b;
        br.src_len[b] = b ? 3 : 5;
        br.tgt_len[b] = b ? 2 : 4;
        for (uint32_t j = 0; j < 5; j++)
            br.src[b * 5 + j] = j + 1 < br.src_len[b] ? 4 + (b * 7 + j * 3) % 36 : j + 1 == br.src_len[b] ? NMT_EOS : 0;
        for (uint32_t j = 0; j < 4; j++)
            br.tgt[b * 4 + j] = j + 1 < br.tgt_len[b] ? 4 + (b * 5 + j * 11) % 36 : j + 1 == br.tgt_len[b] ? NMT_EOS : 0;
    }
    struct model_loss l0, l1;
    int ok = m && model_init(m, 3) == 0 && model_step(m, &br, 0, 0, 0, &l0, NULL) == 0;
    struct quant_calib *qc = ok ? quant_calib_new(m) : NULL;
    ok = qc && quant_calib_batch(qc, &br) == 0 && model_step(m, &br, 0, 0, 0, &l1, NULL) == 0;
    test_ok(ok, "calibration runs: %s", ok ? "" : nmt_errmsg());
    if (!ok)
        goto done;
    test_ok(l0.loss == l1.loss && l0.nll == l1.nll, "the observer leaves the forward pass's loss as it was");
    const struct model_param *tab;
    size_t np = model_params(m, &tab);
    int nw = 0, good = 1;
    uint64_t rows;
    for (size_t p = 0; p < np; p++) {
        const double *h = quant_calib_sum(qc, tab[p].name, &rows);
        if (!quant_is_linear_weight(tab[p].name, tab[p].ndim)) {
            good &= h == NULL;
            continue;
        }
        nw++;
        int n = (int)tab[p].shape[1];
        good &= h != NULL && rows >= 2 * 2; /* two forward passes over at least the 2 sentences */
        for (int i = 0; h && i < n; i++) {
            good &= h[i * n + i] >= 0;
            for (int j = 0; j < n; j++)
                good &= fabs(h[i * n + j] - h[j * n + i]) <= 1e-4 * (1 + fabs(h[i * n + j]));
        }
    }
    test_ok(good && nw == 2 * 4 + 2 * 7, "a symmetric sum for each of the %d linear weights, none for the others", nw);
    const double *e0 = quant_calib_sum(qc, "enc.0.att.qkv.weight", &rows);
    test_ok(e0 && rows == 2 * 10, "the first encoder layer saw the batch's 10 source positions twice (%llu rows)",
            (unsigned long long)rows);
done:
    quant_calib_free(qc);
    batch_record_free(&br);
    model_free(m);
}

int main(void)
{
    check_rtn();
    check_gptq();
    struct nmt_backend_opts o = {sizeof o, 1, 0};
    struct backend *be = backend_open("cpu", &o);
    test_ok(be != NULL, "cpu backend loads: %s", be ? "" : nmt_errmsg());
    if (be) {
        check_calib(be);
        backend_close(be);
    }
    return test_done();
}
