/* ct2.c: CTranslate2 model directories (see ct2.h and formats/ctranslate2.md). The variables of
 * model.bin are gathered in a table (name, type, shape, bytes), sorted by name and written; the
 * tied embeddings and the position table are stored once under their first names and aliased. */
#include "nn/ct2.h"
#include "base/buf.h"
#include "base/util.h"
#include "io/file.h"
#include "nn/params.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* CTranslate2's data type ids (its DataType enum). */
enum { CT2_T_F32 = 0, CT2_T_I8 = 1, CT2_T_I16 = 2 };

#define CT2_NAME_MAX 96

/* One variable of model.bin. */
struct var {
    char name[CT2_NAME_MAX];
    int type;                  /* CT2_T_* */
    int ndim;                  /* 0 (a scalar), 1 or 2 */
    uint32_t shape[2];
    const void *data;          /* little-endian elements (in the checkpoint, or in owned memory);
                                * NULL for a scalar, whose bytes are in SCALAR */
    uint64_t nbytes;
    unsigned char scalar[4];   /* a scalar's bytes */
    int quantize;              /* an embedding or linear weight: int8 with CT2_INT8 */
};

struct table {
    struct var *v;
    size_t n, cap;
    void **owned;              /* memory to free with the table */
    size_t nowned, owned_cap;
    const struct model_config *c; /* the model's (its ties decide the aliases) */
};

static void table_free(struct table *t)
{
    for (size_t i = 0; i < t->nowned; i++)
        free(t->owned[i]);
    free(t->owned);
    free(t->v);
}

/* Keeps P (allocated) to be freed with T; returns P, or NULL (P freed) with the error set. */
static void *table_own(struct table *t, void *p)
{
    if (!p)
        return NULL;
    if (nmt_grow(&t->owned, &t->owned_cap, t->nowned + 1, sizeof *t->owned) < 0) {
        free(p);
        return NULL;
    }
    t->owned[t->nowned++] = p;
    return p;
}

/* Appends a variable called NAME; returns it (zeroed but for the name), or NULL with the error set. */
static struct var *table_add(struct table *t, const char *name)
{
    if (nmt_grow(&t->v, &t->cap, t->n + 1, sizeof *t->v) < 0)
        return NULL;
    struct var *v = &t->v[t->n];
    memset(v, 0, sizeof *v);
    if ((size_t)snprintf(v->name, sizeof v->name, "%s", name) >= sizeof v->name) {
        nmt_seterr("variable name '%s' too long", name);
        return NULL;
    }
    t->n++;
    return v;
}

/* Adds the int8 (BITS 8) or int16 (BITS 16) scalar NAME = X. 0 or -1. */
static int add_scalar(struct table *t, const char *name, int bits, int x)
{
    struct var *v = table_add(t, name);
    if (!v)
        return -1;
    v->type = bits == 8 ? CT2_T_I8 : CT2_T_I16;
    v->nbytes = (uint64_t)bits / 8;
    nmt_put16(v->scalar, (uint16_t)(int16_t)x);
    return 0;
}

/* The scalar attributes of the encoder (SIDE "encoder") or the decoder ("decoder"). 0 or -1. */
static int add_attributes(struct table *t, const char *side, const struct model_config *c)
{
    int dec = side[0] == 'd';
    char name[CT2_NAME_MAX];
    const struct { const char *k; int bits, x, dec_only, enc_only; } attrs[] = {
        {"num_heads", 16, c->heads, 0, 0},          {"pre_norm", 8, c->pre_norm != 0, 0, 0},
        {"activation", 8, c->activation == MODEL_ACT_SWISH ? 2 : 0, 0, 0}, /* CTranslate2's RELU 0, SWISH 2 */
        {"scale_embeddings", 8, 1, 0, 0},
        {"embeddings_merge", 8, 0, 0, 1},           {"multi_query_attention", 8, 0, 0, 1},
        {"alignment_layer", 16, -1, 1, 0},          {"alignment_heads", 16, 1, 1, 0},
        {"alibi", 8, 0, 1, 0},                      {"alibi_use_positive_positions", 8, 0, 1, 0},
        {"scale_alibi", 8, 0, 1, 0},                {"start_from_zero_embedding", 8, c->start_zero != 0, 1, 0}};
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
        if ((attrs[i].dec_only && !dec) || (attrs[i].enc_only && dec))
            continue;
        snprintf(name, sizeof name, "%s/%s", side, attrs[i].k);
        if (add_scalar(t, name, attrs[i].bits, attrs[i].x) < 0)
            return -1;
    }
    return 0;
}

/* Adds the float32 tensor NAME with the data of checkpoint tensor P (layout entry), checked in F. */
static int add_tensor(struct table *t, const struct st_file *f, const struct model_param *p, const char *name)
{
    const struct st_tensor *s = st_find(f, p->name);
    if (!s)
        return nmt_seterr("checkpoint lacks tensor %s", p->name);
    if (s->dtype != ST_F32 || s->nbytes != (uint64_t)p->size * 4)
        return nmt_seterr("checkpoint tensor %s is not float32 of %zu elements", p->name, p->size);
    if (s->nbytes > UINT32_MAX)
        return nmt_seterr("tensor %s is too large for model.bin (over 4 GiB)", p->name);
    struct var *v = table_add(t, name);
    if (!v)
        return -1;
    v->type = CT2_T_F32;
    v->ndim = p->ndim;
    for (int d = 0; d < p->ndim; d++)
        v->shape[d] = (uint32_t)p->shape[d];
    v->data = s->data;
    v->nbytes = s->nbytes;
    size_t len = strlen(name);
    v->quantize = p->ndim == 2 && len >= 7 && strcmp(name + len - 7, "/weight") == 0;
    return 0;
}

/* How the checkpoint names of a layer (after "enc.L." / "dec.L.") map to CTranslate2's (after
 * "encoder/layer_L/" / "decoder/layer_L/"). */
static const char *const enc_map[][2] = {
    {"ln1.weight", "self_attention/layer_norm/gamma"}, {"ln1.bias", "self_attention/layer_norm/beta"},
    {"att.qkv.weight", "self_attention/linear_0/weight"}, {"att.qkv.bias", "self_attention/linear_0/bias"},
    {"att.o.weight", "self_attention/linear_1/weight"}, {"att.o.bias", "self_attention/linear_1/bias"},
    {"ln2.weight", "ffn/layer_norm/gamma"}, {"ln2.bias", "ffn/layer_norm/beta"},
    {"ffn.w1.weight", "ffn/linear_0/weight"}, {"ffn.w1.bias", "ffn/linear_0/bias"},
    {"ffn.w2.weight", "ffn/linear_1/weight"}, {"ffn.w2.bias", "ffn/linear_1/bias"}};
static const char *const dec_map[][2] = {
    {"ln1.weight", "self_attention/layer_norm/gamma"}, {"ln1.bias", "self_attention/layer_norm/beta"},
    {"self_att.qkv.weight", "self_attention/linear_0/weight"}, {"self_att.qkv.bias", "self_attention/linear_0/bias"},
    {"self_att.o.weight", "self_attention/linear_1/weight"}, {"self_att.o.bias", "self_attention/linear_1/bias"},
    {"ln2.weight", "attention/layer_norm/gamma"}, {"ln2.bias", "attention/layer_norm/beta"},
    {"cross_att.q.weight", "attention/linear_0/weight"}, {"cross_att.q.bias", "attention/linear_0/bias"},
    {"cross_att.kv.weight", "attention/linear_1/weight"}, {"cross_att.kv.bias", "attention/linear_1/bias"},
    {"cross_att.o.weight", "attention/linear_2/weight"}, {"cross_att.o.bias", "attention/linear_2/bias"},
    {"ln3.weight", "ffn/layer_norm/gamma"}, {"ln3.bias", "ffn/layer_norm/beta"},
    {"ffn.w1.weight", "ffn/linear_0/weight"}, {"ffn.w1.bias", "ffn/linear_0/bias"},
    {"ffn.w2.weight", "ffn/linear_1/weight"}, {"ffn.w2.bias", "ffn/linear_1/bias"}};
static const char *const top_map[][2] = {
    {"emb.weight", "decoder/embeddings/weight"}, /* MODEL_TIE_ALL; else encoder/embeddings_0/weight */
    {"dec_emb.weight", "decoder/embeddings/weight"},
    {"out.weight", "decoder/projection/weight"}, {"out.bias", "decoder/projection/bias"},
    {"enc_ln.weight", "encoder/layer_norm/gamma"}, {"enc_ln.bias", "encoder/layer_norm/beta"},
    {"dec_ln.weight", "decoder/layer_norm/gamma"}, {"dec_ln.bias", "decoder/layer_norm/beta"}};

/* Writes into OUT (CT2_NAME_MAX) the CTranslate2 name of checkpoint tensor NAME of a model of
 * configuration C; 0, or -1 with the error set when it has none. */
static int ct2_name(const char *name, const struct model_config *c, char *out)
{
    if (!strcmp(name, "emb.weight") && c->tie != MODEL_TIE_ALL) { /* a source embedding of its own */
        snprintf(out, CT2_NAME_MAX, "encoder/embeddings_0/weight");
        return 0;
    }
    for (size_t i = 0; i < sizeof top_map / sizeof top_map[0]; i++)
        if (!strcmp(name, top_map[i][0])) {
            snprintf(out, CT2_NAME_MAX, "%s", top_map[i][1]);
            return 0;
        }
    int dec = !strncmp(name, "dec.", 4), layer, off = 0;
    if ((dec || !strncmp(name, "enc.", 4)) && sscanf(name + 4, "%d.%n", &layer, &off) == 1 && off > 0) {
        const char *const(*map)[2] = dec ? dec_map : enc_map;
        size_t n = dec ? sizeof dec_map / sizeof dec_map[0] : sizeof enc_map / sizeof enc_map[0];
        for (size_t i = 0; i < n; i++)
            if (!strcmp(name + 4 + off, map[i][0])) {
                snprintf(out, CT2_NAME_MAX, "%s/layer_%d/%s", dec ? "decoder" : "encoder", layer, map[i][1]);
                return 0;
            }
    }
    return nmt_seterr("tensor %s has no CTranslate2 equivalent", name);
}

/* Adds the position table (MAX_LEN, D): the sinusoid of nmt's embedding (plugins/backend.h), computed
 * as the cpu backend computes it, or C's other formula (model_position_table). 0 or -1. */
static int add_positions(struct table *t, const struct model_config *c)
{
    int D = c->d_model, P = c->max_len;
    float *pe = table_own(t, nmt_malloc((size_t)P * (size_t)D * sizeof *pe));
    if (!pe)
        return -1;
    if (c->positions != MODEL_POS_PAPER) {
        model_position_table(c, pe);
    } else {
        for (int p = 0; p < P; p++)
            for (int i = 0; i < D; i += 2) {
                double ang = p / pow(10000.0, (double)i / D);
                pe[(size_t)p * D + i] = (float)sin(ang);
                pe[(size_t)p * D + i + 1] = (float)cos(ang);
            }
    }
    struct var *v = table_add(t, "decoder/position_encodings/encodings");
    if (!v)
        return -1;
    v->type = CT2_T_F32;
    v->ndim = 2;
    v->shape[0] = (uint32_t)P;
    v->shape[1] = (uint32_t)D;
    v->data = pe;
    v->nbytes = (uint64_t)P * (uint64_t)D * 4;
    return 0;
}

/* Replaces the weight V (rows, cols) by its int8 values q = rint(w * s) with s = 127 / max|w| of
 * its row (127 for a zero row), and adds NAME_scale (rows) = s, as CTranslate2's own converter
 * quantizes. 0 or -1. */
static int quantize_var(struct table *t, size_t k)
{
    uint32_t rows = t->v[k].shape[0], cols = t->v[k].shape[1];
    int8_t *q = table_own(t, nmt_malloc((size_t)rows * cols + 1));
    float *scale = q ? table_own(t, nmt_malloc((size_t)rows * sizeof *scale)) : NULL;
    float *row = scale ? nmt_malloc((size_t)cols * sizeof *row) : NULL;
    if (!row)
        return -1;
    const unsigned char *src = t->v[k].data;
    for (uint32_t r = 0; r < rows; r++) {
        float amax = 0;
        for (uint32_t j = 0; j < cols; j++) {
            uint32_t bits = nmt_le32(src + ((size_t)r * cols + j) * 4);
            memcpy(&row[j], &bits, 4);
            amax = fmaxf(amax, fabsf(row[j]));
        }
        float s = amax == 0 ? 127.0f : 127.0f / amax;
        for (uint32_t j = 0; j < cols; j++)
            q[(size_t)r * cols + j] = (int8_t)rintf(row[j] * s);
        scale[r] = s;
    }
    free(row);
    char name[CT2_NAME_MAX + 8];
    snprintf(name, sizeof name, "%s_scale", t->v[k].name);
    struct var *v = table_add(t, name); /* may move t->v */
    if (!v)
        return -1;
    v->type = CT2_T_F32;
    v->ndim = 1;
    v->shape[0] = rows;
    v->data = scale;
    v->nbytes = (uint64_t)rows * 4;
    struct var *w = &t->v[k];
    w->type = CT2_T_I8;
    w->data = q;
    w->nbytes = (uint64_t)rows * cols;
    return 0;
}

static int var_cmp(const void *a, const void *b)
{
    return strcmp(((const struct var *)a)->name, ((const struct var *)b)->name);
}

/* Fills T with every variable of the model: checkpoint F's tensors under CTranslate2's names,
 * the attributes and the position table, quantized as Q says, sorted by name. 0 or -1. */
static int build_table(struct table *t, const struct st_file *f, const struct model_config *c, enum ct2_quant q)
{
    size_t np = model_weights_layout(c, NULL, NULL, NULL, NULL);
    struct model_param *tab = nmt_calloc(np, sizeof *tab);
    if (!tab)
        return -1;
    model_weights_layout(c, NULL, tab, NULL, NULL);
    char name[CT2_NAME_MAX];
    int rc = 0;
    for (size_t i = 0; i < np && rc == 0; i++)
        rc = ct2_name(tab[i].name, c, name) < 0 || add_tensor(t, f, &tab[i], name) < 0 ? -1 : 0;
    free(tab);
    if (rc < 0 || add_attributes(t, "encoder", c) < 0 || add_attributes(t, "decoder", c) < 0 ||
        add_positions(t, c) < 0)
        return -1;
    size_t n = t->n;
    for (size_t k = 0; q == CT2_INT8 && k < n; k++)
        if (t->v[k].quantize && quantize_var(t, k) < 0)
            return -1;
    qsort(t->v, t->n, sizeof *t->v, var_cmp);
    return 0;
}

/* ---- writing ---- */

/* A buffered writer over a file descriptor; the first error sticks. */
struct bw {
    int fd;
    struct nmt_buf b;
    int err;
};

static void bw_flush(struct bw *w)
{
    if (!w->err && w->b.len && nmt_write_all(w->fd, w->b.data, w->b.len) < 0)
        w->err = -1;
    w->b.len = 0;
}

static void bw_put(struct bw *w, const void *p, size_t n)
{
    if (w->err)
        return;
    if (w->b.len + n > (1u << 20))
        bw_flush(w);
    if (n > (1u << 20)) {
        if (!w->err && nmt_write_all(w->fd, p, n) < 0)
            w->err = -1;
        return;
    }
    if (nmt_buf_append(&w->b, p, n) < 0)
        w->err = -1;
}

static void bw_u8(struct bw *w, unsigned x)
{
    unsigned char c = (unsigned char)x;
    bw_put(w, &c, 1);
}

static void bw_u32(struct bw *w, uint32_t x)
{
    unsigned char b[4];
    nmt_put32(b, x);
    bw_put(w, b, 4);
}

/* A string of model.bin: u16 length with the NUL, the bytes, the NUL. */
static void bw_str(struct bw *w, const char *s)
{
    unsigned char b[2];
    size_t n = strlen(s) + 1;
    nmt_put16(b, (uint16_t)n);
    bw_put(w, b, 2);
    bw_put(w, s, n);
}

/* Writes model.bin into W: the header, the variables of T, and the aliases of the tied embeddings
 * (as configuration C ties them) and the shared position table. */
static void write_model(struct bw *w, const struct table *t, const struct model_config *c)
{
    static const char *const all[][2] = {
        {"decoder/projection/weight", "decoder/embeddings/weight"},
        {"encoder/embeddings_0/weight", "decoder/embeddings/weight"},
        {"encoder/position_encodings/encodings", "decoder/position_encodings/encodings"}};
    /* the projection unless MODEL_TIE_NONE, the source embedding with MODEL_TIE_ALL, the position table */
    const int keep[3] = {c->tie != MODEL_TIE_NONE, c->tie == MODEL_TIE_ALL, 1};
    uint32_t naliases = (uint32_t)(keep[0] + keep[1] + keep[2]);
    bw_u32(w, CT2_BINARY_VERSION);
    bw_str(w, "TransformerSpec");
    bw_u32(w, CT2_SPEC_REVISION);
    bw_u32(w, (uint32_t)t->n);
    for (size_t i = 0; i < t->n; i++) {
        const struct var *v = &t->v[i];
        bw_str(w, v->name);
        bw_u8(w, (unsigned)v->ndim);
        for (int d = 0; d < v->ndim; d++)
            bw_u32(w, v->shape[d]);
        bw_u8(w, (unsigned)v->type);
        bw_u32(w, (uint32_t)v->nbytes);
        bw_put(w, v->data ? v->data : v->scalar, v->nbytes);
    }
    bw_u32(w, naliases);
    for (size_t i = 0; i < 3; i++)
        if (keep[i]) {
            bw_str(w, all[i][0]);
            bw_str(w, all[i][1]);
        }
}

/* Writes X with the fewest significant digits that read back as the same float. */
static void put_float(char *out, size_t n, float x)
{
    for (int p = 1; p <= 9; p++) {
        snprintf(out, n, "%.*g", p, (double)x);
        if (strtof(out, NULL) == x)
            return;
    }
}

/* Writes config.json into W: the special tokens, the source's end token, the layer norm epsilon. */
static void write_config(struct bw *w, const struct model_config *c)
{
    char eps[32], s[512];
    put_float(eps, sizeof eps, c->ln_eps);
    int n = snprintf(s, sizeof s,
                     "{\n  \"add_source_bos\": false,\n  \"add_source_eos\": true,\n  \"bos_token\": \"<s>\",\n"
                     "  \"decoder_start_token\": \"<s>\",\n  \"eos_token\": \"</s>\",\n"
                     "  \"layer_norm_epsilon\": %s,\n  \"multi_query_attention\": false,\n"
                     "  \"unk_token\": \"<unk>\"\n}\n",
                     eps);
    bw_put(w, s, (size_t)n);
}

/* Writes shared_vocabulary.json into W: a JSON array of V's pieces in id order, each as
 * nmt-tokenize --text=pieces prints it (backslash, space, tab, newline, other control bytes
 * escaped as \\ \s \t \n \xhh), so that its output is what CTranslate2 reads. */
static void write_vocab(struct bw *w, const struct vocab *v)
{
    bw_put(w, "[\n", 2);
    for (uint32_t id = 0; id < v->n; id++) {
        uint32_t len;
        const char *p = vocab_piece(v, id, &len);
        bw_put(w, "  \"", 3);
        for (uint32_t i = 0; i < len; i++) {
            unsigned char ch = (unsigned char)p[i];
            char e[8];
            if (ch == '\\')
                bw_put(w, "\\\\\\\\", 4); /* \\ in the piece, JSON-escaped */
            else if (ch == ' ')
                bw_put(w, "\\\\s", 3);
            else if (ch == '\t')
                bw_put(w, "\\\\t", 3);
            else if (ch == '\n')
                bw_put(w, "\\\\n", 3);
            else if (ch < 0x20 || ch == 0x7f)
                bw_put(w, e, (size_t)snprintf(e, sizeof e, "\\\\x%02x", ch));
            else if (ch == '"')
                bw_put(w, "\\\"", 2);
            else
                bw_put(w, &ch, 1);
        }
        bw_put(w, id + 1 < v->n ? "\",\n" : "\"\n", id + 1 < v->n ? 3 : 2);
    }
    bw_put(w, "]\n", 2);
}

/* Writes file NAME in directory DIR with FILL(W, ARG), synced. 0, or -1 with the error set. */
static int write_file(const char *dir, const char *name, void (*fill)(struct bw *, const void *), const void *arg)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *path = nmt_malloc(n);
    if (!path)
        return -1;
    snprintf(path, n, "%s/%s", dir, name);
    struct bw w = {.fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)};
    int rc = -1;
    if (w.fd < 0) {
        nmt_seterr("cannot create '%s': %s", path, strerror(errno));
        goto done;
    }
    fill(&w, arg);
    bw_flush(&w);
    nmt_buf_free(&w.b);
    if (w.err || fsync(w.fd) < 0) {
        if (!w.err)
            nmt_seterr("cannot write '%s': %s", path, strerror(errno));
        close(w.fd);
        goto done;
    }
    if (close(w.fd) < 0) {
        nmt_seterr("cannot write '%s': %s", path, strerror(errno));
        goto done;
    }
    rc = 0;
done:
    free(path);
    return rc;
}

static void write_model_cb(struct bw *w, const void *arg)
{
    const struct table *t = arg;
    write_model(w, t, t->c);
}
static void write_config_cb(struct bw *w, const void *arg) { write_config(w, arg); }
static void write_vocab_cb(struct bw *w, const void *arg) { write_vocab(w, arg); }

static const char *const files[] = {"model.bin", "config.json", "shared_vocabulary.json"};

/* Removes the temporary directory TMP and the files written into it. */
static void remove_tmp(const char *tmp)
{
    char path[4096];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if ((size_t)snprintf(path, sizeof path, "%s/%s", tmp, files[i]) < sizeof path)
            unlink(path);
    rmdir(tmp);
}

/* Makes the temporary directory beside DIR (".NAME.tmpXXXXXX" in DIR's parent) into TMP (4096). */
static int make_tmp(const char *dir, char *tmp)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    size_t base = len;
    while (base > 0 && dir[base - 1] != '/')
        base--;
    if (len == 0 || (len - base == 1 && dir[base] == '.') || (len - base == 2 && !strncmp(dir + base, "..", 2)) ||
        base == len)
        return nmt_seterr("'%s' cannot name a new model directory", dir);
    if ((size_t)snprintf(tmp, 4096, "%.*s.%.*s.tmpXXXXXX", (int)base, dir, (int)(len - base), dir + base) >= 4096)
        return nmt_seterr("output path '%.60s...' too long", dir);
    if (!mkdtemp(tmp))
        return nmt_seterr("cannot create a directory beside '%s': %s", dir, strerror(errno));
    if (chmod(tmp, 0755) < 0) {
        int e = errno;
        rmdir(tmp);
        return nmt_seterr("cannot set the mode of '%s': %s", tmp, strerror(e));
    }
    return 0;
}

int ct2_check_options(const struct st_file *f)
{
    static const char *const known[] = {"arch", "vocab", "d_model", "heads", "ff", "enc_layers", "dec_layers",
                                        "pre_norm", "max_len", "dropout", "attn_dropout", "act_dropout",
                                        "label_smoothing", "ln_eps", "positions", "start_embedding",
                                        "activation", "tied_embeddings", "output_bias"};
    for (size_t k = 0; k < f->nmeta; k++) {
        const char *key = f->meta_key[k];
        if (strncmp(key, "model.", 6) != 0)
            continue;
        size_t i = 0;
        while (i < sizeof known / sizeof known[0] && strcmp(key + 6, known[i]) != 0)
            i++;
        if (i == sizeof known / sizeof known[0])
            return nmt_seterr("model option %s (%.40s) has no CTranslate2 equivalent", key, f->meta_val[k]);
    }
    return 0;
}

int ct2_export(const struct st_file *f, const struct model_config *c, const struct vocab *v, const char *dir,
               enum ct2_quant q)
{
    if (ct2_check_options(f) < 0 || model_config_check(c) < 0)
        return -1;
    if (v->n != (uint32_t)c->vocab)
        return nmt_seterr("vocabulary has %u pieces, the model %d", v->n, c->vocab);
    struct table t = {.c = c};
    char tmp[4096];
    int rc = -1;
    if (build_table(&t, f, c, q) < 0 || make_tmp(dir, tmp) < 0)
        goto done;
    if (write_file(tmp, files[0], write_model_cb, &t) < 0 || write_file(tmp, files[1], write_config_cb, c) < 0 ||
        write_file(tmp, files[2], write_vocab_cb, v) < 0) {
        remove_tmp(tmp);
        goto done;
    }
    if (rename(tmp, dir) < 0) {
        int e = errno;
        remove_tmp(tmp);
        if (e == ENOTEMPTY || e == EEXIST)
            nmt_seterr("'%s' exists and is not an empty directory", dir);
        else
            nmt_seterr("cannot rename '%s' to '%s': %s", tmp, dir, strerror(e));
        goto done;
    }
    rc = 0;
done:
    table_free(&t);
    return rc;
}
