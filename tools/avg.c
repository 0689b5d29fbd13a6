/* nmt-avg: average the parameters of several checkpoints (e.g. the last K of a run), as in the
 * paper, into one checkpoint for decoding. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opt.h"
#include "data/batch_file.h"
#include "io/safetensors.h"
#include "run/backend_loader.h"
#include "nn/checkpoint.h"
#include "nn/model.h"
#include "nn/quantize.h"
#include "nn/shortlist.h"

struct opts {
    const char *out;
    int quantize;
    const char *calibrate;  /* batches for GPTQ, or NULL: round to nearest */
    const char *shortlist;  /* batches to count the shortlist on, or NULL: none */
    int sl_targets, sl_frequent; /* -1: not given (50 and 300) */
    const char *backend;
    int threads;
};

#define OFF(field) offsetof(struct opts, field)
static const struct opt_spec OPTIONS[] = {
    {OPTION(OT_STR, "output", 'o', "FILE", OFF(out), "checkpoint to write (atomically)")},
    {OPTION(OT_FLAG, "quantize", 0, NULL, OFF(quantize),
            "store the weights of the linear layers (not the embeddings) in int8 with\n"
            "a float32 scale a row: a smaller file, which nmt-decode reads as float32")},
    {OPTION(OT_STR, "calibrate", 0, "FILE", OFF(calibrate),
            "with --quantize: round the int8 weights by GPTQ, fitted to the inputs\n"
            "the layers get on FILE's batches (nmt-batch, the model's vocabulary;\n"
            "say the validation set), instead of to nearest")},
    {OPTION(OT_STR, "shortlist", 0, "FILE", OFF(shortlist),
            "add a vocabulary shortlist for nmt-decode --shortlist, counted on the\n"
            "pairs of FILE's batches (nmt-batch, the model's vocabulary; the\n"
            "training set)")},
    {OPTION(OT_INT, "shortlist-targets", 0, "N", OFF(sl_targets),
            "target pieces listed for each source piece (default 50)"),
     .imin = 1, .imax = 1 << 20, .def.i = -1},
    {OPTION(OT_INT, "shortlist-frequent", 0, "N", OFF(sl_frequent),
            "the most frequent target pieces, always candidates (default 300)"),
     .imin = 0, .imax = 1 << 20, .def.i = -1},
    {OPTION(OT_STR, "backend", 0, "NAME", OFF(backend),
            "compute backend of the calibration (default: $NMT_BACKEND, else auto)")},
    {OPTION(OT_INT, "threads", 0, "N", OFF(threads), "its threads (default: all cores)"), .imin = 0, .imax = 1024},
    OPT_HELP_VERSION_END};

static const char USAGE_HEAD[] =
    "Usage: nmt-avg -o OUT CHECKPOINT...\n"
    "Average the float32 parameters of the CHECKPOINTs (same model shape) into OUT, for decoding.\n"
    "Vocabulary and configuration come from the last CHECKPOINT; optimizer moments and training\n"
    "state are left out, so OUT cannot be resumed from.\n"
    "\n";
static const char USAGE_TAIL[] =
    "\nExit status: 0 success, 1 unreadable or mismatched checkpoints, 2 usage error.\n";

/* Tensors that describe training state rather than the model, and a shortlist that --shortlist replaces. */
static int left_out(const char *name, const struct opts *o)
{
    return strncmp(name, "optim.", 6) == 0 || strncmp(name, CKPT_TRAIN_PREFIX, strlen(CKPT_TRAIN_PREFIX)) == 0 ||
           (o->shortlist && (!strcmp(name, CKPT_SHORTLIST_TABLE) || !strcmp(name, CKPT_SHORTLIST_FREQUENT)));
}

/* Refuses an input whose weights are stored in int8: averages need the float32 values. */
static int check_float(const struct st_file *f, const char *path)
{
    for (size_t i = 0; i < f->nt; i++)
        if (f->t[i].dtype == ST_I8)
            return nmt_seterr("%s: tensor %s is stored in int8 (nmt-avg --quantize): average float32 checkpoints",
                              path, f->t[i].name);
    return 0;
}

/* Reads the N checkpoints PATHS into IN (N, NULL-filled): finite, float32, with the model
 * configuration and vocabulary of the last one. 0, or -1 with the error set. */
static int read_inputs(char **paths, int n, struct st_file **in)
{
    for (int i = 0; i < n; i++)
        if (!(in[i] = st_read(paths[i])) || checkpoint_check_finite(in[i], paths[i]) < 0 ||
            check_float(in[i], paths[i]) < 0)
            return -1;
    const struct st_file *last = in[n - 1];
    for (int i = 0; i < n - 1; i++)
        for (size_t k = 0; k < last->nmeta; k++) {
            const char *key = last->meta_key[k];
            if (strncmp(key, CKPT_MODEL_PREFIX, strlen(CKPT_MODEL_PREFIX)) != 0 && strcmp(key, CKPT_VOCAB_FINGERPRINT) != 0)
                continue;
            const char *v = st_meta(in[i], key);
            if (!v || strcmp(v, last->meta_val[k]) != 0)
                return nmt_seterr("%s: %s is %s, but %s in %s", paths[i], key, v ? v : "absent", last->meta_val[k],
                                  paths[n - 1]);
        }
    return 0;
}

/* DST (the elements of LT, a float32 tensor of the last input) receives the mean of that tensor
 * over the N inputs IN, summed in double. 0, or -1 with the error set. */
static int average_tensor(struct st_file **in, char **paths, int n, const struct st_tensor *lt, float *dst)
{
    uint64_t count = lt->nbytes / 4;
    double *acc = nmt_calloc(count ? count : 1, sizeof *acc);
    if (!acc)
        return -1;
    for (int i = 0; i < n; i++) {
        const struct st_tensor *it = st_find(in[i], lt->name);
        int same = it && it->dtype == ST_F32 && it->ndim == lt->ndim &&
                   memcmp(it->shape, lt->shape, sizeof it->shape[0] * (size_t)lt->ndim) == 0;
        if (!same || st_get(in[i], lt->name, ST_F32, dst, count) < 0) {
            if (!same)
                nmt_seterr("%s: tensor %s is %s in %s", paths[i], lt->name, it ? "of another shape or type" : "missing",
                           paths[i]);
            free(acc);
            return -1;
        }
        for (uint64_t e = 0; e < count; e++)
            acc[e] += dst[e];
    }
    for (uint64_t e = 0; e < count; e++)
        dst[e] = (float)(acc[e] / n);
    free(acc);
    return 0;
}

/* The calibration run of --calibrate: a model on a backend with the averaged weights, and the
 * statistics of its linear layers' inputs on the calibration batches. */
struct calib_run {
    struct backend *be;
    struct model *m;
    struct quant_calib *qc;
};

static void calib_run_free(struct calib_run *r)
{
    quant_calib_free(r->qc);
    model_free(r->m);
    if (r->be)
        backend_close(r->be);
}

/* Loads the averaged tensors AVG (one per tensor of LAST, NULL where not float32) into a model of
 * LAST's configuration, on the backend of O. 0, or -1 with the error set. */
static int calib_model(struct calib_run *r, const struct st_file *last, float **avg, const struct opts *o)
{
    struct model_config cfg;
    struct nmt_backend_opts bo = {.size = sizeof bo, .threads = o->threads};
    if (model_config_load(&cfg, last) < 0 || !(r->be = backend_open(o->backend, &bo)) ||
        !(r->m = model_new(r->be, &cfg, 0)))
        return -1;
    const struct model_param *tab;
    size_t np = model_params(r->m, &tab);
    float *host = nmt_malloc(model_num_params(r->m) * sizeof *host);
    if (!host)
        return -1;
    for (size_t p = 0; p < np; p++) {
        const struct st_tensor *t = st_find(last, tab[p].name);
        size_t i = t ? (size_t)(t - last->t) : 0;
        if (!t || !avg[i] || t->nbytes != tab[p].size * sizeof(float)) {
            free(host);
            return nmt_seterr("tensor '%s' %s", tab[p].name, t ? "is not of the model's shape" : "missing");
        }
        memcpy(host + tab[p].offset, avg[i], tab[p].size * sizeof *host);
    }
    int rc = model_set_params(r->m, host);
    free(host);
    return rc;
}

/* Runs the averaged model over the batches of O->calibrate (no dropout), gathering the inputs of
 * its linear layers. 0, or -1 with the error set (naming the file and batch). */
static int calibrate(struct calib_run *r, const struct st_file *last, float **avg, const struct opts *o)
{
    if (calib_model(r, last, avg, o) < 0 || !(r->qc = quant_calib_new(r->m)))
        return -1;
    struct batch_file bf;
    struct batch_record br = {0};
    int rc = batch_file_open(&bf, o->calibrate, 0, st_meta(last, CKPT_VOCAB_FINGERPRINT));
    for (uint64_t i = 0; rc == 0; i++) {
        int got = batch_file_get(&bf, 0, i, 0, 0, &br);
        if (got == REC_END)
            break;
        if (got < 0 || model_reserve(r->m, &br) < 0 || quant_calib_batch(r->qc, &br) < 0)
            rc = nmt_seterr("%s: batch %llu: %s", o->calibrate, (unsigned long long)i, nmt_errmsg());
    }
    batch_record_free(&br);
    batch_file_close(&bf);
    return rc;
}

/* Counts the pairs of the batches of O->shortlist (vocabulary of LAST) into a new shortlist *SL.
 * 0, or -1 with the error set (naming the file and batch). */
static int count_shortlist(const struct st_file *last, const struct opts *o, struct shortlist **sl)
{
    const char *vs = st_meta(last, CKPT_MODEL_PREFIX "vocab");
    long V = vs ? strtol(vs, NULL, 10) : 0;
    if (V < 4 || V > INT32_MAX)
        return nmt_seterr("%s: model.vocab missing or invalid", o->shortlist);
    struct shortlist_counts *c = shortlist_counts_new((int)V);
    struct batch_file bf;
    struct batch_record br = {0};
    int rc = c ? batch_file_open(&bf, o->shortlist, 0, st_meta(last, CKPT_VOCAB_FINGERPRINT)) : -1;
    for (uint64_t i = 0; rc == 0; i++) {
        int got = batch_file_get(&bf, 0, i, 0, 0, &br);
        if (got == REC_END)
            break;
        for (uint32_t b = 0; got >= 0 && b < br.B; b++) /* the rows end with EOS */
            if (shortlist_counts_add(c, br.src + (size_t)b * br.S, (int)br.src_len[b] - 1,
                                     br.tgt + (size_t)b * br.T, (int)br.tgt_len[b] - 1) < 0)
                got = -1;
        if (got < 0)
            rc = nmt_seterr("%s: batch %llu: %s", o->shortlist, (unsigned long long)i, nmt_errmsg());
    }
    if (c)
        batch_file_close(&bf);
    batch_record_free(&br);
    if (rc == 0 && shortlist_counts_pairs(c) == 0)
        rc = nmt_seterr("%s: no pairs to count a shortlist on", o->shortlist);
    if (rc == 0 && o->sl_frequent > V)
        rc = nmt_seterr("--shortlist-frequent %d exceeds the vocabulary of %ld pieces", o->sl_frequent, V);
    if (rc == 0 && !(*sl = shortlist_build(c, o->sl_targets, o->sl_frequent)))
        rc = -1;
    shortlist_counts_free(c);
    return rc;
}

/* Adds the averaged float32 tensor LT (values X) to W: in int8 when O->quantize and it is a linear
 * weight, rounded by GPTQ when QC has its inputs, else to nearest; buffers it needs go to BUFS. */
static int put_tensor(struct st_writer *w, const struct st_tensor *lt, float *x, const struct opts *o,
                      const struct quant_calib *qc, void **bufs, size_t *nbufs)
{
    if (!o->quantize || !quant_is_linear_weight(lt->name, lt->ndim))
        return st_writer_add(w, lt->name, ST_F32, lt->ndim, lt->shape, x);
    uint64_t rows = lt->shape[0], cols = lt->shape[1], seen = 0;
    int8_t *q = bufs[(*nbufs)++] = nmt_malloc(rows * cols + 1);
    float *sc = bufs[(*nbufs)++] = nmt_malloc(rows * sizeof *sc + 1);
    if (!q || !sc)
        return -1;
    const double *h = qc ? quant_calib_sum(qc, lt->name, &seen) : NULL;
    if (h && seen > 0) {
        if (quant_int8_gptq(x, (int)rows, (int)cols, h, q, sc) < 0)
            return nmt_seterr("%s: %s", lt->name, nmt_errmsg());
    } else {
        quant_int8_rtn(x, rows, cols, q, sc);
    }
    return checkpoint_put_int8(w, lt->name, rows, cols, q, sc);
}

/* Averages the N checkpoints PATHS into O->out (see usage). 0, or -1 with the error set. */
static int avg_checkpoints(char **paths, int n, const struct opts *o)
{
    struct st_file **in = nmt_calloc((size_t)n, sizeof *in);
    struct st_writer *w = NULL;
    struct calib_run cr = {0};
    struct shortlist *sl = NULL;
    float **avg = NULL;
    void **bufs = NULL;
    size_t nbufs = 0, nt = 0, nparams = 0;
    int rc = -1;
    if (!in || read_inputs(paths, n, in) < 0)
        goto done;
    const struct st_file *last = in[n - 1];
    nt = last->nt;
    if (!(w = st_writer_new()) || !(avg = nmt_calloc(nt, sizeof *avg)) || !(bufs = nmt_calloc(2 * nt, sizeof *bufs)))
        goto done;
    for (size_t t = 0; t < nt; t++) {
        const struct st_tensor *lt = &last->t[t];
        if (lt->dtype != ST_F32 || left_out(lt->name, o))
            continue;
        if (!(avg[t] = nmt_malloc(lt->nbytes + 1)) || average_tensor(in, paths, n, lt, avg[t]) < 0)
            goto done;
        nparams += lt->nbytes / 4;
    }
    if (nparams == 0) {
        nmt_seterr("%s: no float32 parameters to average", paths[n - 1]);
        goto done;
    }
    if ((o->calibrate && calibrate(&cr, last, avg, o) < 0) || (o->shortlist && count_shortlist(last, o, &sl) < 0))
        goto done;
    for (size_t k = 0; k < last->nmeta; k++)
        if (strncmp(last->meta_key[k], CKPT_TRAIN_PREFIX, strlen(CKPT_TRAIN_PREFIX)) != 0 &&
            st_writer_meta(w, last->meta_key[k], last->meta_val[k]) < 0)
            goto done;
    char count[32];
    snprintf(count, sizeof count, "%d", n);
    if (st_writer_meta(w, CKPT_AVG_COUNT, count) < 0 ||
        (o->quantize && (st_writer_meta(w, CKPT_QUANTIZED, "int8") < 0 ||
                         st_writer_meta(w, CKPT_QUANT_ROUNDING, o->calibrate ? "gptq" : "nearest") < 0)))
        goto done;
    for (size_t t = 0; t < nt; t++) {
        const struct st_tensor *lt = &last->t[t];
        if (left_out(lt->name, o))
            continue;
        if (lt->dtype != ST_F32 ? st_writer_add(w, lt->name, lt->dtype, lt->ndim, lt->shape, lt->data) < 0
                                : put_tensor(w, lt, avg[t], o, cr.qc, bufs, &nbufs) < 0)
            goto done;
    }
    if (sl && shortlist_put(w, sl) < 0)
        goto done;
    rc = st_writer_write(w, o->out);
done:
    shortlist_free(sl);
    calib_run_free(&cr);
    for (size_t b = 0; b < nbufs; b++)
        free(bufs[b]);
    free(bufs);
    for (size_t t = 0; avg && t < nt; t++)
        free(avg[t]);
    free(avg);
    st_writer_free(w);
    for (int i = 0; in && i < n; i++)
        st_free(in[i]);
    free(in);
    return rc;
}

int main(int argc, char **argv)
{
    nmt_start(argv);
    struct opts o = {0};
    opt_defaults(OPTIONS, &o);
    int parsed = opt_parse_tool(OPTIONS, argc, argv, &o, USAGE_HEAD, USAGE_TAIL);
    if (parsed != OPT_PROCEED)
        return parsed;
    int sl_opts = o.sl_targets >= 0 || o.sl_frequent >= 0;
    if (o.sl_targets < 0)
        o.sl_targets = 50;
    if (o.sl_frequent < 0)
        o.sl_frequent = 300;
    if (!o.out)
        return nmt_usage_error("missing -o OUT");
    if (optind >= argc)
        return nmt_usage_error("no checkpoints to average");
    if (sl_opts && !o.shortlist)
        return nmt_usage_error("--shortlist-targets and --shortlist-frequent go with --shortlist FILE");
    if (o.calibrate && !o.quantize)
        return nmt_usage_error("--calibrate rounds int8 weights: it needs --quantize");
    if (avg_checkpoints(argv + optind, argc - optind, &o) < 0) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    return NMT_EXIT_OK;
}
