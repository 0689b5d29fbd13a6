/* marian.c: Marian transformer models (see marian.h and formats/marian.md). The weights of both
 * sides are linked by one table (Marian's name, the nmt tensor slice, its shape, whether Marian
 * stores it transposed), built from the configuration and the parameter layout of nn/params.h;
 * export and import walk the same table. The embeddings, whose rows follow the vocabulary, and the
 * options of special:model.yml are mapped apart. */
#include "nn/marian.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "io/file.h"
#include "io/npz.h"
#include "nn/params.h"
#include "text/marian_vocab.h"
#include "text/spm.h"
#include "text/yaml.h"

#define MARIAN_YML "special:model.yml"

/* One weight: Marian's array NAME is nmt's (ROWS, COLS) floats at NMT, stored [COLS, ROWS] when
 * TRANSPOSED (a linear layer's weight), else [1, COLS] (a bias, a layer norm's scale or bias). */
struct link {
    char name[64];
    float *nmt;
    int rows, cols, transposed;
};

struct links {
    struct link *l;
    size_t n, cap;
};

/* Appends a link: NAME is a printf format of the layer number (from 1). 0 or -1. */
static int link_add(struct links *t, const char *fmt, int layer, float *nmt, int rows, int cols, int transposed)
{
    if (NMT_GROW(t->l, t->cap, t->n + 1) < 0)
        return -1;
    struct link *k = &t->l[t->n++];
    snprintf(k->name, sizeof k->name, fmt, layer);
    k->nmt = nmt, k->rows = rows, k->cols = cols, k->transposed = transposed;
    return 0;
}

/* The links of an attention block PRE ("encoder_l%d_self", ...) of layer L: queries from Q (D, D)
 * and QB, keys and values from KV (2D, D) and KVB, the output projection O and OB. 0 or -1. */
static int link_attention(struct links *t, const char *pre, int L, int D, float *q, float *qb, float *kv,
                          float *kvb, float *o, float *ob)
{
    static const char *const sfx[] = {"Wq", "bq", "Wk", "bk", "Wv", "bv", "Wo", "bo"};
    float *w[4] = {q, kv, kv + (size_t)D * D, o}, *b[4] = {qb, kvb, kvb + D, ob};
    char fmt[48];
    for (int k = 0; k < 4; k++) {
        snprintf(fmt, sizeof fmt, "%s_%s", pre, sfx[2 * k]);
        if (link_add(t, fmt, L, w[k], D, D, 1) < 0)
            return -1;
        snprintf(fmt, sizeof fmt, "%s_%s", pre, sfx[2 * k + 1]);
        if (link_add(t, fmt, L, b[k], 1, D, 0) < 0)
            return -1;
    }
    return 0;
}

/* The links of a layer norm PRE ("encoder_l%d_self_Wo") with scale G and bias B; pre-norm ones
 * carry Marian's "_pre" suffix. 0 or -1. */
static int link_norm(struct links *t, const char *pre, int L, int pre_norm, int D, float *g, float *b)
{
    char fmt[64];
    snprintf(fmt, sizeof fmt, "%s_ln_scale%s", pre, pre_norm ? "_pre" : "");
    if (link_add(t, fmt, L, g, 1, D, 0) < 0)
        return -1;
    snprintf(fmt, sizeof fmt, "%s_ln_bias%s", pre, pre_norm ? "_pre" : "");
    return link_add(t, fmt, L, b, 1, D, 0);
}

/* The links of an FFN PRE ("encoder_l%d_ffn") of layer L. 0 or -1. */
static int link_ffn(struct links *t, const char *pre, int L, int D, int F, float *w1, float *b1, float *w2, float *b2)
{
    char fmt[48];
    int rc = 0;
    snprintf(fmt, sizeof fmt, "%s_W1", pre);
    rc |= link_add(t, fmt, L, w1, F, D, 1);
    snprintf(fmt, sizeof fmt, "%s_b1", pre);
    rc |= link_add(t, fmt, L, b1, 1, F, 0);
    snprintf(fmt, sizeof fmt, "%s_W2", pre);
    rc |= link_add(t, fmt, L, w2, D, F, 1);
    snprintf(fmt, sizeof fmt, "%s_b2", pre);
    rc |= link_add(t, fmt, L, b2, 1, D, 0);
    return rc ? -1 : 0;
}

/* The links of every weight of W (configuration C) but the embeddings and the output layer. 0 or -1. */
static int build_links(struct links *t, const struct model_config *c, const struct model_weights *w)
{
    int D = c->d_model, F = c->ff, p = c->pre_norm, rc = 0;
    for (int i = 0; i < c->enc_layers && rc == 0; i++) {
        const struct enc_layer_weights *e = &w->enc[i];
        rc = link_attention(t, "encoder_l%d_self", i + 1, D, e->qkv_w, e->qkv_b, e->qkv_w + (size_t)D * D,
                            e->qkv_b + D, e->o_w, e->o_b) |
             link_norm(t, "encoder_l%d_self_Wo", i + 1, p, D, e->ln1_g, e->ln1_b) |
             link_ffn(t, "encoder_l%d_ffn", i + 1, D, F, e->w1, e->b1, e->w2, e->b2) |
             link_norm(t, "encoder_l%d_ffn_ffn", i + 1, p, D, e->ln2_g, e->ln2_b);
    }
    for (int i = 0; i < c->dec_layers && rc == 0; i++) {
        const struct dec_layer_weights *d = &w->dec[i];
        rc = link_attention(t, "decoder_l%d_self", i + 1, D, d->sqkv_w, d->sqkv_b, d->sqkv_w + (size_t)D * D,
                            d->sqkv_b + D, d->so_w, d->so_b) |
             link_norm(t, "decoder_l%d_self_Wo", i + 1, p, D, d->ln1_g, d->ln1_b) |
             link_attention(t, "decoder_l%d_context", i + 1, D, d->cq_w, d->cq_b, d->ckv_w, d->ckv_b, d->co_w,
                            d->co_b) |
             link_norm(t, "decoder_l%d_context_Wo", i + 1, p, D, d->ln2_g, d->ln2_b) |
             link_ffn(t, "decoder_l%d_ffn", i + 1, D, F, d->w1, d->b1, d->w2, d->b2) |
             link_norm(t, "decoder_l%d_ffn_ffn", i + 1, p, D, d->ln3_g, d->ln3_b);
    }
    if (p && rc == 0) /* the top layer norms of "transformer-postprocess-top: n" */
        rc = link_add(t, "encoder_top_ln_scale", 0, w->enc_ln_g, 1, D, 0) |
             link_add(t, "encoder_top_ln_bias", 0, w->enc_ln_b, 1, D, 0) |
             link_add(t, "decoder_top_ln_scale", 0, w->dec_ln_g, 1, D, 0) |
             link_add(t, "decoder_top_ln_bias", 0, w->dec_ln_b, 1, D, 0);
    return rc ? -1 : 0;
}

/* The embedding and output arrays of configuration C: their Marian names and nmt tensors (V, D);
 * the output projection's is "decoder_ff_logit_out_W", stored [D, V]. Returns how many (1 to 3). */
static int embedding_arrays(const struct model_config *c, const struct model_weights *w, const char **names,
                            float **nmt)
{
    if (c->tie == MODEL_TIE_ALL) {
        names[0] = "Wemb", nmt[0] = w->emb;
        return 1;
    }
    names[0] = "encoder_Wemb", nmt[0] = w->emb;
    names[1] = "decoder_Wemb", nmt[1] = w->dec_emb;
    names[2] = "decoder_ff_logit_out_W", nmt[2] = w->out_w;
    return c->tie == MODEL_TIE_TARGET ? 2 : 3;
}

char *marian_vocab_path(const char *npz)
{
    size_t n = strlen(npz);
    if (n > 4 && !strcmp(npz + n - 4, ".npz"))
        n -= 4;
    char *p = nmt_malloc(n + 11);
    if (p) {
        memcpy(p, npz, n);
        memcpy(p + n, ".vocab.yml", 11);
    }
    return p;
}

int marian_check_config(const struct model_config *c)
{
    if (c->positions != MODEL_POS_MARIAN)
        return nmt_seterr("model.positions '%s' has no Marian equivalent (Marian's sinusoids: train with "
                          "--positions marian)", model_positions_name(c->positions));
    if (!c->start_zero)
        return nmt_seterr("model.start_embedding '%s' has no Marian equivalent (Marian starts the decoder from a "
                          "zero vector: train with --start-embedding zero)", model_start_name(c->start_zero));
    if (fabsf(c->ln_eps - MARIAN_LN_EPS) > 1e-9f)
        return nmt_seterr("model.ln_eps %g has no Marian equivalent (Marian's layer norm epsilon is 1e-6: train "
                          "with --ln-eps 1e-6)", c->ln_eps);
    if (c->vocab < 4)
        return nmt_seterr("model.vocab %d: no pieces besides the specials", c->vocab);
    return 0;
}

/* Copies the weight of link K from nmt's tensor into the Marian array M (TO_MARIAN), or back. */
static void link_copy(const struct link *k, float *m, int to_marian)
{
    size_t rows = (size_t)k->rows, cols = (size_t)k->cols;
    if (!k->transposed) {
        memcpy(to_marian ? m : k->nmt, to_marian ? k->nmt : m, rows * cols * sizeof *m);
        return;
    }
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++) {
            if (to_marian)
                m[j * rows + i] = k->nmt[i * cols + j];
            else
                k->nmt[i * cols + j] = m[j * rows + i];
        }
}

/* Copies the rows of an embedding between nmt's (V, D) tensor E and Marian's array M of VM rows
 * (TRANSPOSED: [D, VM], the output projection): Marian row k is nmt row MAP[k]. */
static void rows_copy(float *e, float *m, const uint32_t *map, size_t vm, size_t D, int transposed, int to_marian)
{
    for (size_t k = 0; k < vm; k++)
        for (size_t d = 0; d < D; d++) {
            float *x = &e[(size_t)map[k] * D + d], *y = transposed ? &m[d * vm + k] : &m[k * D + d];
            if (to_marian)
                *y = *x;
            else
                *x = *y;
        }
}

/* The layout of configuration C: *W pointed into *HOST (malloc'ed, zeroed) and the table of its
 * tensors in *TAB (malloc'ed, *NTAB of them). 0, or -1 with the error set (nothing allocated). */
static int layout(const struct model_config *c, float **host, struct model_weights *w, struct model_param **tab,
                  size_t *ntab)
{
    size_t nf;
    *ntab = model_weights_layout(c, NULL, NULL, NULL, &nf);
    *host = nmt_calloc(nf ? nf : 1, sizeof **host);
    *tab = nmt_calloc(*ntab, sizeof **tab);
    memset(w, 0, sizeof *w);
    if (!*host || !*tab || model_weights_alloc(w, c) < 0) {
        free(*host);
        free(*tab);
        model_weights_free(w);
        return -1;
    }
    model_weights_layout(c, *host, *tab, w, NULL);
    return 0;
}

/* ---- export ---- */

/* Adds the Marian array NAME: a copy of link-shaped data (ROWS, COLS as Marian stores them). */
static int add_array(struct npz *z, const char *name, uint64_t rows, uint64_t cols, const float *data)
{
    uint64_t shape[2] = {rows, cols};
    return npz_add(z, name, NPZ_F32, 2, shape, data) ? 0 : -1;
}

/* Adds special:model.yml, the options of C for a vocabulary of VM pieces. 0 or -1. */
static int add_options(struct npz *z, const struct model_config *c, uint32_t vm)
{
    char num[7][16];
    const char *dims[2] = {num[0], num[0]};
    snprintf(num[0], sizeof num[0], "%u", vm);
    snprintf(num[1], sizeof num[1], "%d", c->d_model);
    snprintf(num[2], sizeof num[2], "%d", c->enc_layers);
    snprintf(num[3], sizeof num[3], "%d", c->dec_layers);
    snprintf(num[4], sizeof num[4], "%d", c->heads);
    snprintf(num[5], sizeof num[5], "%d", c->ff);
    const char *kv[][2] = {
        {"type", "transformer"}, {"dim-emb", num[1]}, {"enc-depth", num[2]}, {"dec-depth", num[3]},
        {"transformer-heads", num[4]}, {"transformer-dim-ffn", num[5]}, {"transformer-decoder-dim-ffn", "0"},
        {"transformer-ffn-depth", "2"}, {"transformer-decoder-ffn-depth", "0"},
        {"transformer-ffn-activation", c->activation == MODEL_ACT_SWISH ? "swish" : "relu"},
        {"transformer-preprocess", c->pre_norm ? "n" : ""}, {"transformer-postprocess", c->pre_norm ? "da" : "dan"},
        {"transformer-postprocess-top", c->pre_norm ? "n" : ""}, {"transformer-postprocess-emb", "d"},
        {"tied-embeddings", c->tie == MODEL_TIE_TARGET ? "true" : "false"},
        {"tied-embeddings-all", c->tie == MODEL_TIE_ALL ? "true" : "false"}, {"tied-embeddings-src", "false"},
        {"output-omit-bias", c->output_bias ? "false" : "true"}, {"transformer-decoder-autoreg", "self-attention"},
        {"transformer-train-position-embeddings", "false"}, {"transformer-no-projection", "false"},
        {"right-left", "false"}};
    struct yaml_map m = {0};
    struct nmt_buf text = {0};
    int rc = yaml_set_list(&m, "dim-vocabs", dims, 2);
    for (size_t i = 0; i < sizeof kv / sizeof kv[0] && rc == 0; i++)
        rc = yaml_set(&m, kv[i][0], kv[i][1]);
    if (rc == 0 && yaml_format(&m, &text) == 0 && nmt_buf_append(&text, "", 1) == 0) {
        uint64_t shape[1] = {text.len};
        rc = npz_add(z, MARIAN_YML, NPZ_I8, 1, shape, text.data) ? 0 : -1;
    } else {
        rc = -1;
    }
    yaml_free(&m);
    nmt_buf_free(&text);
    return rc;
}

/* Adds every array of the model in W (configuration C) to Z, for a vocabulary of VM pieces whose
 * Marian id k is nmt id k + 2. 0 or -1. */
static int add_arrays(struct npz *z, const struct model_config *c, const struct model_weights *w, uint32_t vm)
{
    struct links t = {0};
    size_t D = (size_t)c->d_model, most = vm > (size_t)c->ff ? vm : (size_t)c->ff, big = (most > D ? most : D) * D;
    float *buf = nmt_malloc(big * sizeof *buf);
    uint32_t *map = nmt_malloc(vm * sizeof *map);
    int rc = buf && map ? build_links(&t, c, w) : -1;
    for (size_t i = 0; i < t.n && rc == 0; i++) {
        const struct link *k = &t.l[i];
        link_copy(k, buf, 1);
        rc = add_array(z, k->name, k->transposed ? (uint64_t)k->cols : 1,
                       k->transposed ? (uint64_t)k->rows : (uint64_t)k->cols, buf);
    }
    for (uint32_t k = 0; map && k < vm; k++)
        map[k] = k + NMT_EOS;
    const char *names[3];
    float *nmt[3];
    int ne = embedding_arrays(c, w, names, nmt);
    for (int e = 0; e < ne && rc == 0; e++) {
        rows_copy(nmt[e], buf, map, vm, D, e == 2, 1);
        rc = e == 2 ? add_array(z, names[e], D, vm, buf) : add_array(z, names[e], vm, D, buf);
    }
    if (rc == 0 && c->output_bias) {
        rows_copy(w->out_b, buf, map, vm, 1, 0, 1);
        rc = add_array(z, "decoder_ff_logit_out_b", 1, vm, buf);
    }
    free(t.l);
    free(buf);
    free(map);
    return rc;
}

/* Writes archive Z to NPZ and vocabulary MV to VOCAB_OUT (.yml), each atomically; when the second
 * fails the first (a regular file) is removed. 0 or -1. */
static int write_both(const struct npz *z, const char *npz, const struct mvocab *mv, const char *vocab_out)
{
    struct nmt_buf a = {0}, b = {0};
    int rc = npz_format(z, &a) < 0 || mvocab_format_yml(mv, &b) < 0 ? -1 : 0;
    if (rc == 0)
        rc = nmt_write_whole(npz, a.data, a.len);
    struct stat st;
    if (rc == 0 && (rc = nmt_write_whole(vocab_out, b.data, b.len)) < 0 && lstat(npz, &st) == 0 && S_ISREG(st.st_mode))
        unlink(npz);
    nmt_buf_free(&a);
    nmt_buf_free(&b);
    return rc;
}

int marian_export(const struct st_file *f, const struct model_config *c, const struct vocab *v, const char *npz,
                  const char *vocab_out)
{
    if (marian_check_config(c) < 0)
        return -1;
    struct mvocab *mv = mvocab_from_vocab(v);
    if (!mv)
        return nmt_seterr("the vocabulary cannot be Marian's: %s", nmt_errmsg());
    float *host = NULL;
    struct model_param *tab = NULL;
    struct model_weights w;
    size_t ntab = 0;
    struct npz *z = NULL;
    int rc = layout(c, &host, &w, &tab, &ntab);
    for (size_t i = 0; i < ntab && rc == 0; i++)
        rc = st_get(f, tab[i].name, ST_F32, host + tab[i].offset, tab[i].size);
    if (rc == 0)
        rc = (z = npz_new()) ? 0 : -1;
    if (rc == 0)
        rc = add_arrays(z, c, &w, mvocab_size(mv)) | add_options(z, c, mvocab_size(mv));
    if (rc == 0)
        rc = write_both(z, npz, mv, vocab_out);
    npz_free(z);
    if (host)
        model_weights_free(&w);
    free(host);
    free(tab);
    mvocab_free(mv);
    return rc ? -1 : 0;
}

/* ---- import ---- */

/* The options of special:model.yml that do not change what a transformer computes (recurrent
 * models', training's, provenance). */
static const char *const IGNORED[] = {
    "bert-train-type-embeddings", "bert-type-vocab-size", "dec-cell", "dec-cell-base-depth", "dec-cell-high-depth",
    "dim-rnn", "enc-cell", "enc-cell-depth", "enc-type", "factors-combine", "factors-dim-emb",
    "layer-normalization", "lemma-dependency", "lemma-dim-emb", "separator-symbol", "skip",
    "transformer-aan-activation", "transformer-aan-depth", "transformer-aan-nogate", "transformer-dim-aan",
    "transformer-guided-alignment-layer", "transformer-depth-scaling", "ulr-dim-emb",
    "ulr-trainable-transformation", "version"};
/* The options nmt lacks: each must be false. */
static const char *const MUST_BE_FALSE[] = {
    "right-left", "ulr", "tied-embeddings-src", "transformer-no-projection", "transformer-rnn-projection",
    "transformer-train-position-embeddings", "transformer-disable-position-embeddings", "transformer-no-affine",
    "transformer-no-bias", "transformer-pool", "transformer-alibi-shift", "transformer-alibi-trainable"};
/* The options read into the configuration, or checked to have the one value nmt has. */
static const char *const READ[] = {
    "type", "dim-vocabs", "dim-emb", "enc-depth", "dec-depth", "transformer-heads", "transformer-dim-ffn",
    "transformer-decoder-dim-ffn", "transformer-ffn-depth", "transformer-decoder-ffn-depth",
    "transformer-ffn-activation", "transformer-preprocess", "transformer-postprocess",
    "transformer-postprocess-top", "transformer-postprocess-emb", "tied-embeddings", "tied-embeddings-all",
    "output-omit-bias", "transformer-decoder-autoreg", "transformer-attention-mask", "input-types",
    "transformer-tied-layers"};

static int listed(const char *key, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(key, list[i]))
            return 1;
    return 0;
}
#define LISTED(key, list) listed(key, list, sizeof list / sizeof list[0])

/* The scalar option KEY of M, or DEF when absent; NULL (error set) when it is a list. */
static const char *opt_str(const struct yaml_map *m, const char *key, const char *def)
{
    const struct yaml_item *it = yaml_get(m, key);
    if (it && it->is_list) {
        nmt_seterr("model.yml: line %u: option %s is a list, not a value", it->line, key);
        return NULL;
    }
    return it ? it->value : def;
}

/* The integer option KEY of M (DEF when absent), in LO..HI, into *OUT. 0, or -1 with the error set. */
static int opt_int(const struct yaml_map *m, const char *key, int def, int lo, int hi, int *out)
{
    const char *s = opt_str(m, key, NULL);
    uint64_t v = (uint64_t)def;
    if (s && (nmt_parse_u64(s, (uint64_t)hi, &v) < 0 || v < (uint64_t)lo))
        return nmt_seterr("model.yml: option %s '%s' is not a number in %d..%d", key, s, lo, hi);
    if (!s && !yaml_get(m, key) && def < 0)
        return nmt_seterr("model.yml: option %s is missing", key);
    *out = (int)v;
    return 0;
}

/* Whether the boolean option KEY of M is true (absent: false); -1 with the error set when it is
 * not a boolean. */
static int opt_bool(const struct yaml_map *m, const char *key)
{
    const char *s = opt_str(m, key, "false");
    if (!s)
        return -1;
    if (!strcmp(s, "true"))
        return 1;
    if (!strcmp(s, "false"))
        return 0;
    return nmt_seterr("model.yml: option %s '%s' is not true or false", key, s);
}

/* The option KEY of M (DEF when absent) without its 'd' (dropout) operations into OUT (16 bytes). */
static int opt_ops(const struct yaml_map *m, const char *key, const char *def, char *out)
{
    const char *s = opt_str(m, key, def);
    size_t n = 0;
    if (!s)
        return -1;
    for (; *s; s++)
        if (*s != 'd' && n < 15)
            out[n++] = *s;
    out[n] = 0;
    return 0;
}

/* Checks every option of M against the three tables: 0, or -1 naming the first nmt cannot express. */
static int check_options(const struct yaml_map *m)
{
    for (size_t i = 0; i < m->n; i++) {
        const struct yaml_item *it = &m->item[i];
        if (LISTED(it->key, IGNORED) || LISTED(it->key, READ))
            continue;
        if (!LISTED(it->key, MUST_BE_FALSE))
            return nmt_seterr("model.yml: line %u: option %s is not known to nmt-import", it->line, it->key);
        int b = opt_bool(m, it->key);
        if (b < 0)
            return -1;
        if (b)
            return nmt_seterr("model.yml: line %u: option %s: true has no nmt equivalent", it->line, it->key);
    }
    static const char *const empty[] = {"input-types", "transformer-tied-layers"};
    for (int k = 0; k < 2; k++) {
        const struct yaml_item *it = yaml_get(m, empty[k]);
        if (it && (!it->is_list || it->nlist > 0))
            return nmt_seterr("model.yml: line %u: option %s: only an empty list has an nmt equivalent", it->line,
                              empty[k]);
    }
    static const char *const fixed[][2] = {{"type", "transformer"},
                                           {"transformer-decoder-autoreg", "self-attention"},
                                           {"transformer-attention-mask", "default"}};
    for (int k = 0; k < 3; k++) {
        const char *s = opt_str(m, fixed[k][0], k == 0 ? NULL : fixed[k][1]);
        if (!s && k == 0 && !yaml_get(m, "type"))
            return nmt_seterr("model.yml: option type is missing");
        if (!s || strcmp(s, fixed[k][1]))
            return nmt_seterr("model.yml: option %s '%s' has no nmt equivalent (only %s)", fixed[k][0],
                              s ? s : "(a list)", fixed[k][1]);
    }
    return 0;
}

/* The layer structure and FFN of M into C. 0, or -1 with the error set. */
static int read_structure(const struct yaml_map *m, struct model_config *c)
{
    char pre[16], post[16], top[16], emb[16];
    if (opt_ops(m, "transformer-preprocess", "", pre) < 0 || opt_ops(m, "transformer-postprocess", "dan", post) < 0 ||
        opt_ops(m, "transformer-postprocess-top", "", top) < 0 || opt_ops(m, "transformer-postprocess-emb", "d", emb) < 0)
        return -1;
    if (!strcmp(pre, "") && !strcmp(post, "an") && !strcmp(top, ""))
        c->pre_norm = 0;
    else if (!strcmp(pre, "n") && !strcmp(post, "a") && !strcmp(top, "n"))
        c->pre_norm = 1;
    else
        return nmt_seterr("model.yml: transformer-preprocess '%s', transformer-postprocess '%s', "
                          "transformer-postprocess-top '%s' (dropout 'd' aside) have no nmt equivalent: nmt has "
                          "post-norm ('', 'an', '') and pre-norm ('n', 'a', 'n')", pre, post, top);
    if (*emb)
        return nmt_seterr("model.yml: transformer-postprocess-emb '%s' has no nmt equivalent (only dropout)", emb);
    int depth, ddepth, dff;
    const char *act = opt_str(m, "transformer-ffn-activation", "swish");
    if (opt_int(m, "transformer-ffn-depth", 2, 1, 64, &depth) < 0 ||
        opt_int(m, "transformer-decoder-ffn-depth", 0, 0, 64, &ddepth) < 0 ||
        opt_int(m, "transformer-decoder-dim-ffn", 0, 0, 1 << 20, &dff) < 0 || !act)
        return -1;
    if (depth != 2 || (ddepth != 0 && ddepth != 2))
        return nmt_seterr("model.yml: an FFN of depth %d (decoder %d) has no nmt equivalent (only 2)", depth, ddepth);
    if (dff != 0 && dff != c->ff)
        return nmt_seterr("model.yml: transformer-decoder-dim-ffn %d differs from transformer-dim-ffn %d (nmt "
                          "has one FFN width)", dff, c->ff);
    if (strcmp(act, "relu") && strcmp(act, "swish"))
        return nmt_seterr("model.yml: transformer-ffn-activation '%s' has no nmt equivalent (relu, swish)", act);
    c->activation = !strcmp(act, "swish") ? MODEL_ACT_SWISH : MODEL_ACT_RELU;
    return 0;
}

/* The configuration of the options M into C (C->vocab left for the caller), Marian's vocabulary
 * size into *VM and whether it has an output bias into *BIAS. 0, or -1 with the error set. */
static int read_config(const struct yaml_map *m, struct model_config *c, int *vm, int *bias)
{
    model_preset(c, "tiny");
    if (check_options(m) < 0 || opt_int(m, "dim-emb", -1, 2, 1 << 16, &c->d_model) < 0 ||
        opt_int(m, "enc-depth", -1, 1, 1024, &c->enc_layers) < 0 ||
        opt_int(m, "dec-depth", -1, 1, 1024, &c->dec_layers) < 0 ||
        opt_int(m, "transformer-heads", -1, 1, 1 << 16, &c->heads) < 0 ||
        opt_int(m, "transformer-dim-ffn", -1, 1, 1 << 20, &c->ff) < 0 || read_structure(m, c) < 0)
        return -1;
    const struct yaml_item *dv = yaml_get(m, "dim-vocabs");
    uint64_t a, b;
    if (!dv || !dv->is_list || dv->nlist != 2 || nmt_parse_u64(dv->list[0], MVOCAB_MAX_SIZE, &a) < 0 ||
        nmt_parse_u64(dv->list[1], MVOCAB_MAX_SIZE, &b) < 0)
        return nmt_seterr("model.yml: option dim-vocabs is not a list of two sizes");
    if (a != b)
        return nmt_seterr("model.yml: dim-vocabs %llu and %llu differ (nmt has one vocabulary for both sides)",
                          (unsigned long long)a, (unsigned long long)b);
    int all = opt_bool(m, "tied-embeddings-all"), tgt = opt_bool(m, "tied-embeddings"),
        omit = opt_bool(m, "output-omit-bias");
    if (all < 0 || tgt < 0 || omit < 0)
        return -1;
    c->tie = all ? MODEL_TIE_ALL : tgt ? MODEL_TIE_TARGET : MODEL_TIE_NONE;
    c->positions = MODEL_POS_MARIAN;
    c->start_zero = 1;
    c->ln_eps = MARIAN_LN_EPS;
    c->output_bias = 1; /* also when Marian has none: it keeps <pad> and <s> out of the outputs */
    *vm = (int)a;
    *bias = !omit;
    return 0;
}

/* The vocabulary file PATH as an nmt vocabulary, with the nmt id of each of its *VM Marian ids in
 * *MAP (malloc'ed). Returns it, or NULL with the error set. */
static struct vocab *read_vocab(const char *path, uint32_t **map, uint32_t *vm)
{
    struct nmt_buf b = {0};
    struct vocab *v = NULL;
    const char *name = nmt_path_name(path, 0);
    if (nmt_read_whole(path, SPM_MAX_FILE, &b) < 0)
        return NULL;
    if (spm_sniff(b.data, b.len)) {
        v = vocab_parse((const char *)b.data, b.len, name);
    } else {
        struct mvocab *mv = mvocab_is_yml(path) ? mvocab_parse_yml((const char *)b.data, b.len, name)
                                                : mvocab_parse_txt((const char *)b.data, b.len, name);
        if (mv && !(v = mvocab_to_vocab(mv)))
            nmt_seterr("%s: %s", name, nmt_errmsg());
        mvocab_free(mv);
    }
    nmt_buf_free(&b);
    if (v && !v->spm) {
        nmt_seterr("%s: an nmt BPE vocabulary, not Marian's (a .yml, a piece a line, or a SentencePiece model)", name);
        vocab_free(v);
        return NULL;
    }
    if (v && !(*map = nmt_malloc(v->spm->n * sizeof **map))) {
        vocab_free(v);
        return NULL;
    }
    for (uint32_t k = 0; v && k < v->spm->n; k++)
        (*map)[k] = v->spm->to_nmt[k];
    if (v)
        *vm = v->spm->n;
    return v;
}

/* The float32 array NAME of Z, of shape [ROWS, COLS] ([COLS] read too when ROWS is 1), marked in
 * USED. Returns its data, or NULL with the error set (missing, misshapen, another type). */
static float *take_array(const struct npz *z, const char *file, const char *name, uint64_t rows, uint64_t cols,
                         unsigned char *used)
{
    const struct npz_array *a = npz_find(z, name);
    if (!a) {
        nmt_seterr("%s: array '%s' is missing", file, name);
        return NULL;
    }
    int ok = a->dtype == NPZ_F32 && ((a->ndim == 2 && a->shape[0] == rows && a->shape[1] == cols) ||
                                     (a->ndim == 1 && rows == 1 && a->shape[0] == cols));
    if (!ok) {
        nmt_seterr("%s: array '%s' is not float32 of shape (%llu, %llu)", file, name, (unsigned long long)rows,
                   (unsigned long long)cols);
        return NULL;
    }
    used[a - z->a] = 1;
    return a->data;
}

/* Fills W (configuration C) from the arrays of Z, whose Marian id k is nmt id MAP[k] (VM ids);
 * BIAS: Z has an output bias. 0, or -1 with the error set. */
static int fill_weights(const struct npz *z, const char *file, const struct model_config *c,
                        const struct model_weights *w, const uint32_t *map, uint32_t vm, int bias)
{
    unsigned char *used = nmt_calloc(z->n ? z->n : 1, 1);
    struct links t = {0};
    int rc = used ? build_links(&t, c, w) : -1;
    for (size_t i = 0; i < t.n && rc == 0; i++) {
        const struct link *k = &t.l[i];
        float *m = take_array(z, file, k->name, k->transposed ? (uint64_t)k->cols : 1,
                              k->transposed ? (uint64_t)k->rows : (uint64_t)k->cols, used);
        if (!m)
            rc = -1;
        else
            link_copy(k, m, 0);
    }
    const char *names[3];
    float *nmt[3];
    size_t D = (size_t)c->d_model;
    int ne = embedding_arrays(c, w, names, nmt);
    for (int e = 0; e < ne && rc == 0; e++) {
        float *m = take_array(z, file, names[e], e == 2 ? D : vm, e == 2 ? vm : D, used);
        if (!m)
            rc = -1;
        else
            rows_copy(nmt[e], m, map, vm, D, e == 2, 0);
    }
    for (int i = 0; i < c->vocab && rc == 0; i++)
        w->out_b[i] = MARIAN_ABSENT_BIAS;
    for (uint32_t k = 0; k < vm && rc == 0; k++)
        w->out_b[map[k]] = 0;
    if (rc == 0 && bias) {
        float *m = take_array(z, file, "decoder_ff_logit_out_b", 1, vm, used);
        if (!m)
            rc = -1;
        else
            rows_copy(w->out_b, m, map, vm, 1, 0, 0);
    }
    for (size_t i = 0; i < z->n && rc == 0; i++)
        if (!used[i] && strcmp(z->a[i].name, MARIAN_YML))
            rc = nmt_seterr("%s: array '%s' has no nmt equivalent", file, z->a[i].name);
    free(t.l);
    free(used);
    return rc;
}

int marian_read_options(const char *text, size_t len, struct model_config *c, int *vocab, int *bias)
{
    struct yaml_map m;
    if (yaml_parse(text, len, "model.yml", &m) < 0)
        return -1;
    int rc = read_config(&m, c, vocab, bias);
    yaml_free(&m);
    return rc;
}

/* The options of archive Z (its special:model.yml) into C, *VM and *BIAS. 0 or -1. */
static int archive_config(const struct npz *z, const char *file, struct model_config *c, int *vm, int *bias)
{
    const struct npz_array *y = npz_find(z, MARIAN_YML);
    if (!y || y->dtype != NPZ_I8 || y->ndim != 1)
        return nmt_seterr("%s: no int8 array '" MARIAN_YML "' (the model's options)", file);
    if (marian_read_options(y->data, y->count, c, vm, bias) < 0)
        return nmt_seterr("%s: %s", file, nmt_errmsg());
    return 0;
}

int marian_import(const char *npz, const char *vocab, struct model_config *c, float **params, struct vocab **v)
{
    const char *file = nmt_path_name(npz, 0);
    struct npz *z = npz_load(npz);
    uint32_t *map = NULL, vm = 0;
    int dim = 0, bias = 0, rc = -1;
    struct model_weights w = {0};
    struct model_param *tab = NULL;
    size_t ntab;
    *params = NULL;
    *v = NULL;
    if (z && archive_config(z, file, c, &dim, &bias) == 0 && (*v = read_vocab(vocab, &map, &vm))) {
        c->vocab = (int)(*v)->n;
        if ((uint32_t)dim != vm)
            nmt_seterr("%s: the model's vocabulary has %d pieces, '%s' %u", file, dim, nmt_path_name(vocab, 0), vm);
        else if (model_config_check(c) == 0 && layout(c, params, &w, &tab, &ntab) == 0)
            rc = fill_weights(z, file, c, &w, map, vm, bias);
    }
    if (*params)
        model_weights_free(&w);
    if (rc < 0) {
        free(*params);
        *params = NULL;
        vocab_free(*v);
        *v = NULL;
    }
    free(tab);
    free(map);
    npz_free(z);
    return rc;
}
