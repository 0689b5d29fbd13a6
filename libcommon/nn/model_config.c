/* model_config.c: model configurations: presets, checks, and their checkpoint metadata. */
#include "nn/model_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

int model_preset(struct model_config *c, const char *name)
{
    memset(c, 0, sizeof *c);
    c->dropout = 0.1f;
    c->label_smoothing = 0.1f;
    c->ln_eps = 1e-5f;
    c->max_len = 1024;
    if (!strcmp(name, "tiny")) {
        c->d_model = 128, c->heads = 4, c->ff = 256, c->enc_layers = c->dec_layers = 4;
    } else if (!strcmp(name, "small")) {
        c->d_model = 256, c->heads = 4, c->ff = 1024, c->enc_layers = c->dec_layers = 3;
    } else if (!strcmp(name, "base")) {
        c->d_model = 512, c->heads = 8, c->ff = 2048, c->enc_layers = c->dec_layers = 6;
    } else if (!strcmp(name, "big")) {
        c->d_model = 1024, c->heads = 16, c->ff = 4096, c->enc_layers = c->dec_layers = 6;
    } else {
        return nmt_seterr("unknown preset '%s' (tiny, small, base, big)", name);
    }
    return 0;
}

/* The names of each option's values, indexed by value, NULL-terminated. */
static const char *const pos_names[] = {"paper", "marian", NULL};
static const char *const start_names[] = {"bos", "zero", NULL};
static const char *const act_names[] = {"relu", "swish", NULL};
static const char *const tie_names[] = {"all", "target", "none", NULL};

static const char *name_of(const char *const *names, int n, int v)
{
    return v >= 0 && v < n ? names[v] : NULL;
}

const char *model_positions_name(int v) { return name_of(pos_names, 2, v); }
const char *model_start_name(int v) { return name_of(start_names, 2, v); }
const char *model_activation_name(int v) { return name_of(act_names, 2, v); }
const char *model_tie_name(int v) { return name_of(tie_names, 3, v); }

int model_option_parse(const char *key, const char *name, int *out)
{
    static const struct { const char *key; const char *const *names; } opts[] = {
        {"model.positions", pos_names}, {"model.start_embedding", start_names},
        {"model.activation", act_names}, {"model.tied_embeddings", tie_names}};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        if (strcmp(opts[i].key, key))
            continue;
        for (int v = 0; opts[i].names[v]; v++)
            if (!strcmp(opts[i].names[v], name)) {
                *out = v;
                return 0;
            }
        return nmt_seterr("unknown value '%.40s' for '%s'", name, key);
    }
    return nmt_seterr("unknown model option '%s'", key);
}

int model_needs_pe_table(const struct model_config *c)
{
    return c->positions != MODEL_POS_PAPER || c->start_zero;
}

void model_position_table(const struct model_config *c, float *pe) { model_position_rows(c, pe, 0, c->max_len); }

void model_position_rows(const struct model_config *c, float *pe, int p0, int n)
{
    int D = c->d_model, h = D / 2;
    for (int p = p0; p < p0 + n; p++) {
        float *row = pe + (size_t)(p - p0) * (size_t)D;
        for (int i = 0; i < h; i++) {
            if (c->positions == MODEL_POS_MARIAN) {
                double ang = p * exp(-i * log(10000.0) / (h > 1 ? h - 1 : 1));
                row[i] = (float)sin(ang);
                row[h + i] = (float)cos(ang);
            } else {
                double ang = p / pow(10000.0, (double)(2 * i) / D);
                row[2 * i] = (float)sin(ang);
                row[2 * i + 1] = (float)cos(ang);
            }
        }
    }
}

int model_config_check(const struct model_config *c)
{
    if (c->vocab < 4 || c->vocab > (1 << 24))
        return nmt_seterr("vocabulary size %d out of range [4, 16777216]", c->vocab);
    if (c->d_model < 2 || c->d_model > 16384 || c->d_model % 2)
        return nmt_seterr("model width %d must be even and in [2, 16384]", c->d_model);
    if (c->heads < 1 || c->d_model % c->heads)
        return nmt_seterr("%d heads do not divide the model width %d", c->heads, c->d_model);
    if (c->ff < 1 || c->ff > 65536)
        return nmt_seterr("FFN width %d out of range [1, 65536]", c->ff);
    if (c->enc_layers < 1 || c->enc_layers > 64 || c->dec_layers < 1 || c->dec_layers > 64)
        return nmt_seterr("layer counts %d+%d out of range [1, 64]", c->enc_layers, c->dec_layers);
    if (c->max_len < 2 || c->max_len > 65536)
        return nmt_seterr("maximum length %d out of range [2, 65536]", c->max_len);
    const float p[3] = {c->dropout, c->attn_dropout, c->act_dropout};
    for (int i = 0; i < 3; i++)
        if (!(p[i] >= 0 && p[i] < 1))
            return nmt_seterr("dropout %g out of range [0, 1)", p[i]);
    if (!(c->label_smoothing >= 0 && c->label_smoothing < 1))
        return nmt_seterr("label smoothing %g out of range [0, 1)", c->label_smoothing);
    if (!(c->ln_eps > 0 && c->ln_eps < 1))
        return nmt_seterr("layer norm epsilon %g out of range (0, 1)", c->ln_eps);
    if (!model_positions_name(c->positions) || !model_start_name(c->start_zero) ||
        !model_activation_name(c->activation) || !model_tie_name(c->tie) || (c->output_bias != 0 && c->output_bias != 1))
        return nmt_seterr("model options out of range (positions %d, start %d, activation %d, tie %d, output bias %d)",
                          c->positions, c->start_zero, c->activation, c->tie, c->output_bias);
    return 0;
}

int model_config_save(const struct model_config *c, struct st_writer *w)
{
    char v[64];
    const struct { const char *k; int v; } ints[] = {
        {"model.vocab", c->vocab},           {"model.d_model", c->d_model},       {"model.heads", c->heads},
        {"model.ff", c->ff},                 {"model.enc_layers", c->enc_layers}, {"model.dec_layers", c->dec_layers},
        {"model.pre_norm", c->pre_norm},     {"model.max_len", c->max_len}};
    const struct { const char *k; float v; } fl[] = {
        {"model.dropout", c->dropout},     {"model.attn_dropout", c->attn_dropout},
        {"model.act_dropout", c->act_dropout}, {"model.label_smoothing", c->label_smoothing},
        {"model.ln_eps", c->ln_eps}};
    if (st_writer_meta(w, "format", "nmt-checkpoint 1.0") < 0 || st_writer_meta(w, "model.arch", "transformer") < 0)
        return -1;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        snprintf(v, sizeof v, "%d", ints[i].v);
        if (st_writer_meta(w, ints[i].k, v) < 0)
            return -1;
    }
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) {
        snprintf(v, sizeof v, "%.9g", fl[i].v);
        if (st_writer_meta(w, fl[i].k, v) < 0)
            return -1;
    }
    if (st_writer_meta(w, "model.positions", model_positions_name(c->positions)) < 0 ||
        st_writer_meta(w, "model.start_embedding", model_start_name(c->start_zero)) < 0 ||
        st_writer_meta(w, "model.activation", model_activation_name(c->activation)) < 0 ||
        st_writer_meta(w, "model.tied_embeddings", model_tie_name(c->tie)) < 0 ||
        st_writer_meta(w, "model.output_bias", c->output_bias ? "1" : "0") < 0)
        return -1;
    return 0;
}

static int meta_int(const struct st_file *f, const char *k, int *out)
{
    const char *s = st_meta(f, k);
    uint64_t v;
    if (!s)
        return nmt_seterr("checkpoint lacks '%s'", k);
    if (nmt_parse_u64(s, 1u << 30, &v) < 0)
        return nmt_seterr("checkpoint: bad value '%.40s' for '%s'", s, k);
    *out = (int)v;
    return 0;
}

static int meta_float(const struct st_file *f, const char *k, float *out)
{
    const char *s = st_meta(f, k);
    double v;
    if (!s)
        return nmt_seterr("checkpoint lacks '%s'", k);
    if (nmt_parse_double(s, &v) < 0)
        return nmt_seterr("checkpoint: bad value '%.40s' for '%s'", s, k);
    *out = (float)v;
    return 0;
}

/* The options of Marian models from F's metadata into C; a key absent (a checkpoint older than
 * them) leaves the default. 0, or -1 with the error naming the key and value. */
static int meta_options(struct model_config *c, const struct st_file *f)
{
    const struct { const char *k; int *v; } named[] = {
        {"model.positions", &c->positions}, {"model.start_embedding", &c->start_zero},
        {"model.activation", &c->activation}, {"model.tied_embeddings", &c->tie}};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        const char *s = st_meta(f, named[i].k);
        if (s && model_option_parse(named[i].k, s, named[i].v) < 0)
            return nmt_seterr("checkpoint: %s", nmt_errmsg());
    }
    const char *s = st_meta(f, "model.output_bias");
    if (s && strcmp(s, "0") && strcmp(s, "1"))
        return nmt_seterr("checkpoint: unknown value '%.40s' for 'model.output_bias'", s);
    c->output_bias = s && !strcmp(s, "1");
    return 0;
}

int model_config_load(struct model_config *c, const struct st_file *f)
{
    memset(c, 0, sizeof *c);
    const char *fmt = st_meta(f, "format");
    if (fmt && strncmp(fmt, "nmt-checkpoint 1.", 17))
        return nmt_seterr("unsupported checkpoint format '%.40s' (this reader knows nmt-checkpoint 1.x)", fmt);
    const char *arch = st_meta(f, "model.arch");
    if (!arch || strcmp(arch, "transformer"))
        return nmt_seterr("not an nmt model checkpoint (model.arch is %s)", arch ? arch : "missing");
    if (meta_int(f, "model.vocab", &c->vocab) < 0 || meta_int(f, "model.d_model", &c->d_model) < 0 ||
        meta_int(f, "model.heads", &c->heads) < 0 || meta_int(f, "model.ff", &c->ff) < 0 ||
        meta_int(f, "model.enc_layers", &c->enc_layers) < 0 || meta_int(f, "model.dec_layers", &c->dec_layers) < 0 ||
        meta_int(f, "model.pre_norm", &c->pre_norm) < 0 || meta_int(f, "model.max_len", &c->max_len) < 0 ||
        meta_float(f, "model.dropout", &c->dropout) < 0 || meta_float(f, "model.attn_dropout", &c->attn_dropout) < 0 ||
        meta_float(f, "model.act_dropout", &c->act_dropout) < 0 ||
        meta_float(f, "model.label_smoothing", &c->label_smoothing) < 0 ||
        meta_float(f, "model.ln_eps", &c->ln_eps) < 0 || meta_options(c, f) < 0)
        return -1;
    if (model_config_check(c) < 0)
        return nmt_seterr("checkpoint: %s", nmt_errmsg());
    return 0;
}
