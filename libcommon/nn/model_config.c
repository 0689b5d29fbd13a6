/* model_config.c: model configurations: presets, checks, and their checkpoint metadata. */
#include "nn/model_config.h"

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
        meta_float(f, "model.ln_eps", &c->ln_eps) < 0)
        return -1;
    if (model_config_check(c) < 0)
        return nmt_seterr("checkpoint: %s", nmt_errmsg());
    return 0;
}
