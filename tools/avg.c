/* nmt-avg: average the parameters of several checkpoints (e.g. the last K of a run), as in the
 * paper, into one checkpoint for decoding. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "nn/checkpoint.h"
#include "cli/cli.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: nmt-avg -o OUT CHECKPOINT...\n"
            "Average the float32 parameters of the CHECKPOINTs (same model shape) into OUT, for decoding.\n"
            "Vocabulary and configuration come from the last CHECKPOINT; optimizer moments and training\n"
            "state are left out, so OUT cannot be resumed from.\n"
            "\n"
            "  -o, --output FILE   checkpoint to write (atomically)\n"
            "      --quantize      store the weights of the linear layers (not the embedding) in int8 with\n"
            "                      a float32 scale a row: a smaller file, which nmt-decode reads as float32\n"
            "  -h, --help          show this help and exit\n"
            "      --version       show version information and exit\n"
            "\n"
            "Exit status: 0 success, 1 unreadable or mismatched checkpoints, 2 usage error.\n");
}

/* Tensors that describe training state rather than the model. */
static int is_training_state(const char *name)
{
    return strncmp(name, "optim.", 6) == 0 || strncmp(name, CKPT_TRAIN_PREFIX, strlen(CKPT_TRAIN_PREFIX)) == 0;
}

/* Whether --quantize stores tensor T in int8: the weights of the linear layers (matrices named
 * *.weight), not the embedding, which is also the output projection. */
static int quantized_here(const struct st_tensor *t)
{
    size_t n = strlen(t->name);
    return t->ndim == 2 && n > 7 && !strcmp(t->name + n - 7, ".weight") && strcmp(t->name, "emb.weight") != 0;
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

/* Averages the inputs into OUT, the linear layers' weights in int8 when QUANTIZE; returns 0 or -1
 * with the error set. */
static int avg_checkpoints(char **paths, int n, const char *out, int quantize)
{
    struct st_file **in = nmt_calloc((size_t)n, sizeof *in);
    if (!in)
        return -1;
    struct st_writer *w = NULL;
    void **bufs = NULL;
    size_t nbufs = 0;
    int rc = -1;
    for (int i = 0; i < n; i++)
        if (!(in[i] = st_read(paths[i])) || checkpoint_check_finite(in[i], paths[i]) < 0 ||
            check_float(in[i], paths[i]) < 0)
            goto done;
    const struct st_file *last = in[n - 1];
    /* the model configuration must agree */
    for (int i = 0; i < n - 1; i++)
        for (size_t k = 0; k < last->nmeta; k++) {
            const char *key = last->meta_key[k];
            if (strncmp(key, CKPT_MODEL_PREFIX, strlen(CKPT_MODEL_PREFIX)) != 0 && strcmp(key, CKPT_VOCAB_FINGERPRINT) != 0)
                continue;
            const char *v = st_meta(in[i], key);
            if (!v || strcmp(v, last->meta_val[k]) != 0) {
                nmt_seterr("%s: %s is %s, but %s in %s", paths[i], key, v ? v : "absent", last->meta_val[k],
                           paths[n - 1]);
                goto done;
            }
        }
    w = st_writer_new();
    bufs = nmt_calloc(3 * last->nt, sizeof *bufs);
    if (!w || !bufs)
        goto done;
    for (size_t k = 0; k < last->nmeta; k++)
        if (strncmp(last->meta_key[k], CKPT_TRAIN_PREFIX, strlen(CKPT_TRAIN_PREFIX)) != 0 && st_writer_meta(w, last->meta_key[k], last->meta_val[k]) < 0)
            goto done;
    char count[32];
    snprintf(count, sizeof count, "%d", n);
    if (st_writer_meta(w, CKPT_AVG_COUNT, count) < 0 || (quantize && st_writer_meta(w, CKPT_QUANTIZED, "int8") < 0))
        goto done;
    size_t nparams = 0;
    for (size_t t = 0; t < last->nt; t++) {
        const struct st_tensor *lt = &last->t[t];
        if (is_training_state(lt->name))
            continue;
        if (lt->dtype != ST_F32) {
            if (st_writer_add(w, lt->name, lt->dtype, lt->ndim, lt->shape, lt->data) < 0)
                goto done;
            continue;
        }
        uint64_t count_el = lt->nbytes / 4;
        double *acc = nmt_calloc(count_el ? count_el : 1, sizeof *acc);
        float *tmp = nmt_malloc((count_el ? count_el : 1) * sizeof *tmp);
        bufs[nbufs++] = tmp;
        if (!acc || !tmp) {
            free(acc);
            goto done;
        }
        for (int i = 0; i < n; i++) {
            const struct st_tensor *it = st_find(in[i], lt->name);
            int same = it && it->dtype == ST_F32 && it->ndim == lt->ndim &&
                       memcmp(it->shape, lt->shape, sizeof it->shape[0] * (size_t)lt->ndim) == 0;
            if (!same) {
                nmt_seterr("%s: tensor %s is %s in %s", paths[i], lt->name, it ? "of another shape or type" : "missing",
                           paths[i]);
                free(acc);
                goto done;
            }
            if (st_get(in[i], lt->name, ST_F32, tmp, count_el) < 0) {
                free(acc);
                goto done;
            }
            for (uint64_t e = 0; e < count_el; e++)
                acc[e] += tmp[e];
        }
        for (uint64_t e = 0; e < count_el; e++)
            tmp[e] = (float)(acc[e] / n);
        free(acc);
        if (quantize && quantized_here(lt)) {
            int8_t *q = bufs[nbufs++] = nmt_malloc(count_el ? count_el : 1);
            float *sc = bufs[nbufs++] = nmt_malloc((size_t)lt->shape[0] * sizeof *sc + 1);
            if (!q || !sc || checkpoint_put_int8(w, lt->name, lt->shape[0], lt->shape[1], tmp, q, sc) < 0)
                goto done;
        } else if (st_writer_add(w, lt->name, ST_F32, lt->ndim, lt->shape, tmp) < 0) {
            goto done;
        }
        nparams += count_el;
    }
    if (nparams == 0) {
        nmt_seterr("%s: no float32 parameters to average", paths[n - 1]);
        goto done;
    }
    rc = st_writer_write(w, out);
done:
    for (size_t b = 0; b < nbufs; b++)
        free(bufs[b]);
    free(bufs);
    st_writer_free(w);
    for (int i = 0; i < n; i++)
        st_free(in[i]);
    free(in);
    return rc;
}

int main(int argc, char **argv)
{
    nmt_start(argv);
    const char *out = NULL;
    int quantize = 0;
    static const struct option longopts[] = {{"output", required_argument, NULL, 'o'},
                                             {"quantize", no_argument, NULL, 'Q'},
                                             {"help", no_argument, NULL, 'h'},
                                             {"version", no_argument, NULL, 'V'},
                                             {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'Q': quantize = 1; break;
        case 'h': usage(stdout); return nmt_close_stdout() == 0 ? 0 : 1;
        case 'V': nmt_print_version(); return nmt_close_stdout() == 0 ? 0 : 1;
        default: return nmt_usage_hint();
        }
    }
    if (!out)
        return nmt_usage_error("missing -o OUT");
    if (optind >= argc)
        return nmt_usage_error("no checkpoints to average");
    if (avg_checkpoints(argv + optind, argc - optind, out, quantize) < 0) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    return NMT_EXIT_OK;
}
