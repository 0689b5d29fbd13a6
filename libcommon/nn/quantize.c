/* quantize.c: int8 weights rounded to nearest or by GPTQ, and the input statistics GPTQ needs
 * (see quantize.h). */
#include "nn/quantize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* The grid of row W (COLS values): returns its scale (1 for a zero row, or one so small that 127 /
 * max overflows) and sets *INV to 127 / max |w| (0 for such a row, whose integers are all 0) and
 * *ARGMAX to the column of its largest |value| (the first one). */
static float row_grid(const float *w, uint64_t cols, float *inv, uint64_t *argmax)
{
    float amax = 0;
    *argmax = 0;
    for (uint64_t c = 0; c < cols; c++)
        if (fabsf(w[c]) > amax) {
            amax = fabsf(w[c]);
            *argmax = c;
        }
    *inv = amax > 0 ? 127.0f / amax : 0.0f;
    if (amax > 0 && *inv <= 3.40282347e38f)
        return amax / 127.0f;
    *inv = 0;
    return 1.0f;
}

/* X rounded to nearest even, clamped to [-127, 127]. */
static int8_t clamp_q(float x)
{
    float v = rintf(x);
    return (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
}

void quant_int8_rtn(const float *W, uint64_t rows, uint64_t cols, int8_t *q, float *scale)
{
    for (uint64_t r = 0; r < rows; r++) {
        const float *w = W + r * cols;
        float inv;
        uint64_t am;
        scale[r] = row_grid(w, cols, &inv, &am);
        for (uint64_t c = 0; c < cols; c++)
            q[r * cols + c] = clamp_q(w[c] * inv);
    }
}

/* Factors the symmetric N x N matrix A (row-major, lower triangle read) as L L^T in place (L in the
 * lower triangle). 0, or -1 when A is not positive definite. */
static int cholesky(double *a, int n)
{
    for (int j = 0; j < n; j++) {
        double s = a[(size_t)j * n + j];
        for (int k = 0; k < j; k++)
            s -= a[(size_t)j * n + k] * a[(size_t)j * n + k];
        if (!(s > 0))
            return -1;
        double d = sqrt(s);
        a[(size_t)j * n + j] = d;
        for (int i = j + 1; i < n; i++) {
            double t = a[(size_t)i * n + j];
            for (int k = 0; k < j; k++)
                t -= a[(size_t)i * n + k] * a[(size_t)j * n + k];
            a[(size_t)i * n + j] = t / d;
        }
    }
    return 0;
}

/* From L (lower, N x N, A = L L^T) makes U (upper, N x N) with A^-1 = U^T U, the factor GPTQ's
 * error feedback reads; T is scratch (N x N). 0, or -1 when A^-1 is not positive definite in
 * floating point. */
static int inverse_upper_factor(const double *L, int n, double *U, double *T)
{
    /* T = L^-1 (lower), by forward substitution column by column */
    memset(T, 0, (size_t)n * n * sizeof *T);
    for (int c = 0; c < n; c++) {
        T[(size_t)c * n + c] = 1.0 / L[(size_t)c * n + c];
        for (int i = c + 1; i < n; i++) {
            double s = 0;
            for (int k = c; k < i; k++)
                s += L[(size_t)i * n + k] * T[(size_t)k * n + c];
            T[(size_t)i * n + c] = -s / L[(size_t)i * n + i];
        }
    }
    /* U <- A^-1 = T^T T (lower triangle), then its Cholesky factor, transposed into the upper one */
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            double s = 0;
            for (int k = i; k < n; k++)
                s += T[(size_t)k * n + i] * T[(size_t)k * n + j];
            U[(size_t)i * n + j] = s;
        }
    if (cholesky(U, n) < 0)
        return -1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) {
            U[(size_t)j * n + i] = U[(size_t)i * n + j];
            U[(size_t)i * n + j] = 0;
        }
    return 0;
}

/* A column and its diagonal element of H, for GPTQ's column order: decreasing diagonal, ties by
 * column. */
struct col_diag {
    double d;
    int c;
};
static int cmp_diag(const void *a, const void *b)
{
    const struct col_diag *x = a, *y = b;
    return x->d > y->d ? -1 : x->d < y->d ? 1 : (x->c > y->c) - (x->c < y->c);
}

/* H permuted by PERM and damped into HP (N x N): dead columns (zero diagonal) get 1 there, then
 * every diagonal element 1% of the mean diagonal more. */
static void damped_permuted(const double *H, const int *perm, int n, double *hp)
{
    double mean = 0;
    for (int i = 0; i < n; i++)
        mean += H[(size_t)perm[i] * n + perm[i]];
    mean = mean > 0 ? mean / n : 1.0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            hp[(size_t)i * n + j] = H[(size_t)perm[i] * n + perm[j]];
    for (int i = 0; i < n; i++) {
        double *d = &hp[(size_t)i * n + i];
        *d = (*d > 0 ? *d : 1.0) + 0.01 * mean;
    }
}

/* GPTQ on one row: W (N values, original order) on the grid of scale S / INV, its largest value at
 * column AM kept at +-127; U (N x N, upper) in the order PERM; WP (N) scratch. */
static void gptq_row(const float *w, int n, float s, float inv, uint64_t am, const int *perm, const double *U,
                     double *wp, int8_t *q)
{
    for (int i = 0; i < n; i++)
        wp[i] = w[perm[i]];
    for (int i = 0; i < n; i++) {
        int c = perm[i];
        int8_t v = (uint64_t)c == am && inv > 0 ? (w[c] > 0 ? 127 : -127) : clamp_q((float)(wp[i] * inv));
        q[c] = v;
        double err = (wp[i] - (double)v * s) / U[(size_t)i * n + i];
        const double *u = U + (size_t)i * n;
        for (int j = i + 1; j < n; j++)
            wp[j] -= err * u[j];
    }
}

int quant_int8_gptq(const float *W, int rows, int cols, const double *H, int8_t *q, float *scale)
{
    size_t n = (size_t)cols;
    struct col_diag *order = nmt_malloc(n * sizeof *order);
    int *perm = nmt_malloc(n * sizeof *perm);
    double *hp = nmt_malloc(n * n * sizeof *hp), *U = nmt_malloc(n * n * sizeof *U);
    double *T = nmt_malloc(n * n * sizeof *T), *wp = nmt_malloc(n * sizeof *wp);
    int rc = -1;
    if (!order || !perm || !hp || !U || !T || !wp)
        goto done;
    for (size_t i = 0; i < n; i++)
        order[i] = (struct col_diag){H[i * n + i], (int)i};
    qsort(order, n, sizeof *order, cmp_diag);
    for (size_t i = 0; i < n; i++)
        perm[i] = order[i].c;
    damped_permuted(H, perm, cols, hp);
    if (cholesky(hp, cols) < 0 || inverse_upper_factor(hp, cols, U, T) < 0) {
        nmt_seterr("GPTQ: the input statistics are not positive definite after damping");
        goto done;
    }
    for (int r = 0; r < rows; r++) {
        float inv;
        uint64_t am;
        const float *w = W + (size_t)r * n;
        scale[r] = row_grid(w, n, &inv, &am);
        gptq_row(w, cols, scale[r], inv, am, perm, U, wp, q + (size_t)r * n);
    }
    rc = 0;
done:
    free(order);
    free(perm);
    free(hp);
    free(U);
    free(T);
    free(wp);
    return rc;
}

int quant_is_linear_weight(const char *name, int ndim)
{
    size_t n = strlen(name);
    return ndim == 2 && n > 7 && !strcmp(name + n - 7, ".weight") && strcmp(name, "emb.weight") != 0 &&
           strcmp(name, "dec_emb.weight") != 0 && strcmp(name, "out.weight") != 0;
}

/* The running sum of one linear weight's inputs. */
struct calib_weight {
    const char *name;   /* the model's parameter name */
    size_t offset;      /* floats into the parameter buffer */
    int cols;           /* input width */
    double *sum;        /* (cols, cols) */
    uint64_t rows;      /* input rows added */
};

struct quant_calib {
    struct model *m;
    struct calib_weight *w;
    size_t nw;
    int maxcols;
    float *dev, *host;  /* (maxcols, maxcols) device and host scratch */
};

/* The model's observer: adds x^T x of a linear layer's input (N, IN) to its weight's sum. */
static int calib_seen(void *arg, const float *W, const float *x, int N, int out, int in)
{
    struct quant_calib *c = arg;
    struct backend *be = model_backend(c->m);
    size_t off = (size_t)(W - model_param_data(c->m));
    struct calib_weight *cw = NULL;
    for (size_t i = 0; i < c->nw && !cw; i++)
        if (c->w[i].offset == off)
            cw = &c->w[i];
    (void)out;
    if (!cw || N <= 0)
        return 0;
    if (in != cw->cols)
        return nmt_seterr("calibration: the input of '%s' has %d columns, not %d", cw->name, in, cw->cols);
    size_t bytes = (size_t)in * (size_t)in * sizeof(float);
    if (be->ops.gemm(be->ctx, 1, 0, in, in, N, 1.0f, x, in, x, in, 0.0f, c->dev, in) < 0 ||
        be->ops.download(be->ctx, c->host, c->dev, bytes) < 0)
        return nmt_seterr("backend %s: calibration: %s", be->ops.name, be->ops.last_error(be->ctx));
    for (size_t e = 0; e < (size_t)in * (size_t)in; e++)
        cw->sum[e] += c->host[e];
    cw->rows += (uint64_t)N;
    return 0;
}

struct quant_calib *quant_calib_new(struct model *m)
{
    struct quant_calib *c = nmt_calloc(1, sizeof *c);
    const struct model_param *tab;
    size_t np = model_params(m, &tab);
    if (!c || !(c->w = nmt_calloc(np, sizeof *c->w)))
        goto fail;
    c->m = m;
    for (size_t i = 0; i < np; i++) {
        if (!quant_is_linear_weight(tab[i].name, tab[i].ndim))
            continue;
        struct calib_weight *cw = &c->w[c->nw++];
        cw->name = tab[i].name;
        cw->offset = tab[i].offset;
        cw->cols = (int)tab[i].shape[1];
        if (!(cw->sum = nmt_calloc((size_t)cw->cols * (size_t)cw->cols, sizeof *cw->sum)))
            goto fail;
        c->maxcols = cw->cols > c->maxcols ? cw->cols : c->maxcols;
    }
    struct backend *be = model_backend(m);
    size_t bytes = (size_t)c->maxcols * (size_t)c->maxcols * sizeof(float);
    if (!(c->host = nmt_malloc(bytes)))
        goto fail;
    if (bytes && !(c->dev = be->ops.alloc(be->ctx, bytes))) {
        nmt_seterr("backend %s: calibration buffer: %s", be->ops.name, be->ops.last_error(be->ctx));
        goto fail;
    }
    model_set_linear_observer(m, calib_seen, c);
    return c;
fail:
    quant_calib_free(c);
    return NULL;
}

int quant_calib_batch(struct quant_calib *c, const struct batch_record *br)
{
    struct model_loss loss;
    return model_step(c->m, br, 0, 0, 0, &loss, NULL);
}

const double *quant_calib_sum(const struct quant_calib *c, const char *name, uint64_t *rows_seen)
{
    for (size_t i = 0; i < c->nw; i++)
        if (!strcmp(c->w[i].name, name)) {
            *rows_seen = c->w[i].rows;
            return c->w[i].sum;
        }
    return NULL;
}

void quant_calib_free(struct quant_calib *c)
{
    if (!c)
        return;
    if (c->m) {
        struct backend *be = model_backend(c->m);
        model_set_linear_observer(c->m, NULL, NULL);
        if (c->dev)
            be->ops.free(be->ctx, c->dev);
    }
    for (size_t i = 0; i < c->nw; i++)
        free(c->w[i].sum);
    free(c->w);
    free(c->host);
    free(c);
}
