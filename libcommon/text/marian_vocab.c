/* marian_vocab.c: Marian's vocabulary files (see marian_vocab.h). The .yml form is read through
 * text/yaml.h; its ids are checked to be a permutation of 0..N-1 before the pieces are stored in
 * id order. */
#include "text/marian_vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "base/util.h"
#include "io/file.h"
#include "text/spm.h"
#include "text/yaml.h"

struct mvocab *mvocab_new(void)
{
    struct mvocab *v = nmt_calloc(1, sizeof *v);
    if (v)
        strtab_init(&v->pieces);
    return v;
}

void mvocab_free(struct mvocab *v)
{
    if (!v)
        return;
    strtab_free(&v->pieces);
    free(v);
}

uint32_t mvocab_size(const struct mvocab *v) { return v->pieces.n; }

int64_t mvocab_find(const struct mvocab *v, const char *s, size_t len) { return strtab_find(&v->pieces, s, len); }

const char *mvocab_piece(const struct mvocab *v, uint32_t id, uint32_t *len)
{
    return id < v->pieces.n ? strtab_get(&v->pieces, id, len) : NULL;
}

int64_t mvocab_add(struct mvocab *v, const char *s, size_t len)
{
    size_t bad;
    if (len == 0)
        return nmt_seterr("empty piece");
    if (memchr(s, 0, len) || memchr(s, '\n', len) || memchr(s, '\r', len))
        return nmt_seterr("a piece holds a NUL or a line break");
    if (utf8_check(s, len, &bad) < 0)
        return nmt_seterr("piece '%.*s' is not valid UTF-8 (byte %zu)", (int)(len < 40 ? len : 40), s, bad);
    if (v->pieces.n >= MVOCAB_MAX_SIZE)
        return nmt_seterr("more than %u pieces", MVOCAB_MAX_SIZE);
    int added;
    int64_t id = strtab_intern(&v->pieces, s, len, &added);
    if (id >= 0 && !added)
        return nmt_seterr("piece '%.*s' appears twice", (int)(len < 40 ? len : 40), s);
    return id;
}

/* The id VALUE of an entry, below MVOCAB_MAX_SIZE, into *ID. 0, or -1 (no error set). */
static int parse_id(const char *value, uint32_t *id)
{
    uint64_t x;
    if (!value || nmt_parse_u64(value, MVOCAB_MAX_SIZE - 1, &x) < 0)
        return -1;
    *id = (uint32_t)x;
    return 0;
}

/* Stores the pieces of M (their ids checked) into V in id order. 0, or -1 with the error set. */
static int yml_pieces(struct mvocab *v, const struct yaml_map *m, const char *name)
{
    if (m->n > MVOCAB_MAX_SIZE)
        return nmt_seterr("%s: more than %u pieces", name, MVOCAB_MAX_SIZE);
    int64_t *at = nmt_malloc((m->n ? m->n : 1) * sizeof *at); /* (n) the entry of each id */
    if (!at)
        return -1;
    for (size_t i = 0; i < m->n; i++)
        at[i] = -1;
    int rc = 0;
    for (size_t i = 0; i < m->n && rc == 0; i++) {
        uint32_t id;
        if (parse_id(m->item[i].value, &id) < 0 || id >= m->n)
            rc = nmt_seterr("%s: line %u: the value of '%s' is not an id below %zu (the number of pieces)", name,
                            m->item[i].line, m->item[i].key, m->n);
        else if (at[id] >= 0)
            rc = nmt_seterr("%s: line %u: id %u given twice (also at line %u)", name, m->item[i].line, id,
                            m->item[at[id]].line);
        else
            at[id] = (int64_t)i;
    }
    for (size_t id = 0; id < m->n && rc == 0; id++) {
        const struct yaml_item *it = &m->item[at[id]];
        if (mvocab_add(v, it->key, strlen(it->key)) < 0)
            rc = nmt_seterr("%s: line %u: %s", name, it->line, nmt_errmsg());
    }
    free(at);
    return rc;
}

struct mvocab *mvocab_parse_yml(const char *data, size_t len, const char *name)
{
    struct yaml_map m;
    if (yaml_parse(data, len, name, &m) < 0)
        return NULL;
    struct mvocab *v = mvocab_new();
    if (v && yml_pieces(v, &m, name) < 0) {
        mvocab_free(v);
        v = NULL;
    }
    yaml_free(&m);
    return v;
}

struct mvocab *mvocab_parse_txt(const char *data, size_t len, const char *name)
{
    struct mvocab *v = mvocab_new();
    uint32_t line = 0;
    for (size_t at = 0; v && at < len;) {
        const char *nl = memchr(data + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - data) : len, n = end - at;
        line++;
        if (n > 0 && data[end - 1] == '\r')
            n--;
        if (n == 0 || mvocab_add(v, data + at, n) < 0) {
            nmt_seterr("%s: line %u: %s", name, line, n == 0 ? "empty line (a piece a line)" : nmt_errmsg());
            mvocab_free(v);
            return NULL;
        }
        at = end + 1;
    }
    return v;
}

int mvocab_is_yml(const char *path)
{
    size_t n = path ? strlen(path) : 0;
    return (n >= 4 && !strcmp(path + n - 4, ".yml")) || (n >= 5 && !strcmp(path + n - 5, ".yaml"));
}

struct mvocab *mvocab_load(const char *path)
{
    struct nmt_buf b = {0};
    struct mvocab *v = NULL;
    const char *name = nmt_path_name(path, 0);
    if (nmt_read_whole(path, YAML_MAX_FILE, &b) == 0)
        v = mvocab_is_yml(path) ? mvocab_parse_yml((const char *)b.data, b.len, name)
                                : mvocab_parse_txt((const char *)b.data, b.len, name);
    nmt_buf_free(&b);
    return v;
}

int mvocab_format_yml(const struct mvocab *v, struct nmt_buf *out)
{
    out->len = 0;
    for (uint32_t id = 0; id < v->pieces.n; id++) {
        uint32_t len;
        const char *s = strtab_get(&v->pieces, id, &len);
        char num[16];
        if (yaml_put_scalar(out, s, len) < 0 ||
            nmt_buf_append(out, num, (size_t)snprintf(num, sizeof num, ": %u\n", id)) < 0)
            return -1;
    }
    return 0;
}

/* Replaces OUT's content with V as plain text, a piece a line. 0 or -1. */
static int format_txt(const struct mvocab *v, struct nmt_buf *out)
{
    out->len = 0;
    for (uint32_t id = 0; id < v->pieces.n; id++) {
        uint32_t len;
        const char *s = strtab_get(&v->pieces, id, &len);
        if (nmt_buf_append(out, s, len) < 0 || nmt_buf_append(out, "\n", 1) < 0)
            return -1;
    }
    return 0;
}

int mvocab_save(const struct mvocab *v, const char *path)
{
    struct nmt_buf b = {0};
    int rc = mvocab_is_yml(path) ? mvocab_format_yml(v, &b) : format_txt(v, &b);
    if (rc == 0)
        rc = nmt_write_whole(path, b.data, b.len);
    nmt_buf_free(&b);
    return rc;
}

struct vocab *mvocab_to_vocab(const struct mvocab *mv)
{
    int64_t eos = mvocab_find(mv, MVOCAB_EOS, strlen(MVOCAB_EOS)), unk = mvocab_find(mv, MVOCAB_UNK, strlen(MVOCAB_UNK));
    if (eos < 0 || unk < 0) {
        nmt_seterr("the vocabulary lacks '%s' (Marian needs '" MVOCAB_EOS "' and '" MVOCAB_UNK "')",
                   eos < 0 ? MVOCAB_EOS : MVOCAB_UNK);
        return NULL;
    }
    struct strtab words;
    struct nmt_buf w = {0}, model = {0};
    struct vocab *v = NULL;
    strtab_init(&words);
    int rc = 0;
    for (uint32_t id = 0; id < mvocab_size(mv) && rc == 0; id++) {
        uint32_t len;
        const char *s = mvocab_piece(mv, id, &len);
        w.len = 0;
        if (id != eos && id != unk)
            rc = nmt_buf_append(&w, "\xE2\x96\x81", 3);
        rc = rc < 0 || nmt_buf_append(&w, s, len) < 0 || strtab_intern(&words, w.data, w.len, NULL) < 0 ? -1 : 0;
    }
    if (rc == 0 && spm_format_word_model(&words, unk, eos, &model) == 0)
        v = vocab_parse((const char *)model.data, model.len, "marian-vocabulary");
    strtab_free(&words);
    nmt_buf_free(&w);
    nmt_buf_free(&model);
    return v;
}

struct mvocab *mvocab_from_vocab(const struct vocab *v)
{
    struct mvocab *mv = mvocab_new();
    for (uint32_t id = NMT_EOS; mv && id < v->n; id++) {
        uint32_t len;
        const char *s = id == NMT_EOS ? MVOCAB_EOS : id == NMT_UNK ? MVOCAB_UNK : vocab_piece(v, id, &len);
        if (id <= NMT_UNK)
            len = (uint32_t)strlen(s);
        else if (v->spm && v->spm->type == SPM_WORD && len > 3 && !memcmp(s, "\xE2\x96\x81", 3))
            s += 3, len -= 3; /* a word model's piece is U+2581 + the word */
        if (mvocab_add(mv, s, len) < 0) {
            nmt_seterr("piece %u: %s", id, nmt_errmsg());
            mvocab_free(mv);
            return NULL;
        }
    }
    return mv;
}
