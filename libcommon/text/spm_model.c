/* spm_model.c: reading a SentencePiece model file (see spm.h, formats/sentencepiece.md): the
 * protobuf wire format of sentencepiece_model.proto, read by hand for the few fields nmt needs,
 * every length and count checked against the bytes that remain. */
#include "text/spm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* ---- protobuf wire format ---- */

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

struct pb {
    const unsigned char *p;
    size_t off, end;           /* the message being read: [off, end) of p */
    const char *name;
};

static int pb_err(const struct pb *b, size_t at, const char *what, const char *detail)
{
    return nmt_seterr("%s: byte %zu: %s%s", b->name, at, what, detail ? detail : "");
}

static int pb_varint(struct pb *b, uint64_t *v)
{
    size_t at = b->off;
    *v = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
        if (b->off >= b->end)
            return pb_err(b, at, "truncated varint", NULL);
        unsigned char c = b->p[b->off++];
        if (shift == 63 && c > 1)
            return pb_err(b, at, "varint does not fit 64 bits", NULL);
        *v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80))
            return 0;
    }
    return pb_err(b, at, "varint longer than 10 bytes", NULL);
}

/* Reads a field key: 1 (*FIELD, *WT and *AT, its offset, set), 0 at the end, -1 on error. */
static int pb_key(struct pb *b, uint32_t *field, int *wt, size_t *at)
{
    if (b->off >= b->end)
        return 0;
    *at = b->off;
    uint64_t k;
    if (pb_varint(b, &k) < 0)
        return -1;
    *field = (uint32_t)(k >> 3);
    *wt = (int)(k & 7);
    if (k >> 3 == 0 || k >> 3 > 536870911u)
        return pb_err(b, *at, "bad field number", NULL);
    return 1;
}

/* Reads the length of a length-delimited field: its bytes are [*START, *START + *LEN). */
static int pb_len(struct pb *b, size_t at, size_t *start, size_t *len)
{
    uint64_t n;
    if (pb_varint(b, &n) < 0)
        return -1;
    if (n > b->end - b->off) {
        char d[64];
        snprintf(d, sizeof d, " (%llu bytes, %zu left)", (unsigned long long)n, b->end - b->off);
        return pb_err(b, at, "field longer than its message", d);
    }
    *start = b->off;
    *len = (size_t)n;
    b->off += (size_t)n;
    return 0;
}

static int pb_skip(struct pb *b, int wt, size_t at)
{
    uint64_t v;
    size_t s, l;
    switch (wt) {
    case WT_VARINT: return pb_varint(b, &v);
    case WT_LEN: return pb_len(b, at, &s, &l);
    case WT_I64:
    case WT_I32: {
        size_t n = wt == WT_I64 ? 8 : 4;
        if (b->end - b->off < n)
            return pb_err(b, at, "truncated fixed-size field", NULL);
        b->off += n;
        return 0;
    }
    default: {
        char d[32];
        snprintf(d, sizeof d, " %d", wt);
        return pb_err(b, at, "unsupported wire type", d);
    }
    }
}

static int pb_want(const struct pb *b, size_t at, uint32_t field, int wt, int want)
{
    if (wt == want)
        return 0;
    char d[64];
    snprintf(d, sizeof d, " %u has wire type %d, expected %d", field, wt, want);
    return pb_err(b, at, "field", d);
}

/* Reads a varint field's value (the key already read): 0 or -1. */
static int pb_u64(struct pb *b, size_t at, uint32_t field, int wt, uint64_t *v)
{
    return pb_want(b, at, field, wt, WT_VARINT) < 0 ? -1 : pb_varint(b, v);
}

/* ---- the messages ---- */

/* SentencePiece { piece = 1; score = 2; type = 3 } in [START, START + LEN): the piece's text into
 * M->text (model id ID), its score and type. */
static int parse_piece(struct spm_model *m, struct pb *top, size_t start, size_t len, uint32_t id)
{
    struct pb b = {top->p, start, start + len, top->name};
    size_t at, ts = 0, tl = 0;
    uint32_t field;
    int wt, rc, have_text = 0;
    uint64_t v;
    m->score[id] = 0;
    m->ptype[id] = SPM_NORMAL;
    while ((rc = pb_key(&b, &field, &wt, &at)) == 1) {
        if (field == 1) {
            if (pb_want(&b, at, field, wt, WT_LEN) < 0 || pb_len(&b, at, &ts, &tl) < 0)
                return -1;
            have_text = 1;
        } else if (field == 2) {
            if (pb_want(&b, at, field, wt, WT_I32) < 0 || pb_skip(&b, wt, at) < 0)
                return -1;
            uint32_t u = nmt_le32(b.p + b.off - 4);
            memcpy(&m->score[id], &u, sizeof u);
        } else if (field == 3) {
            if (pb_u64(&b, at, field, wt, &v) < 0)
                return -1;
            if (v < SPM_NORMAL || v > SPM_BYTE)
                return pb_err(&b, at, "unknown piece type", NULL);
            m->ptype[id] = (uint8_t)v;
        } else if (pb_skip(&b, wt, at) < 0) {
            return -1;
        }
    }
    if (rc < 0)
        return -1;
    if (!have_text || tl == 0)
        return pb_err(&b, start, "piece without text", NULL);
    int added;
    if (strtab_intern(&m->text, b.p + ts, tl, &added) < 0)
        return -1;
    if (!added)
        return nmt_seterr("%s: byte %zu: piece '%.*s' defined twice", b.name, ts, (int)(tl > 40 ? 40 : tl),
                          (const char *)b.p + ts);
    return 0;
}

/* TrainerSpec: model_type 3, treat_whitespace_as_suffix 24, byte_fallback 35, unk/bos/eos/pad ids
 * 40..43, unk_surface 44. */
static int parse_trainer(struct spm_model *m, struct pb *top, size_t start, size_t len)
{
    struct pb b = {top->p, start, start + len, top->name};
    size_t at, s, l;
    uint32_t field;
    int wt, rc;
    uint64_t v;
    while ((rc = pb_key(&b, &field, &wt, &at)) == 1) {
        if (field == 3 || field == 24 || field == 35 || (field >= 40 && field <= 43)) {
            if (pb_u64(&b, at, field, wt, &v) < 0)
                return -1;
            int64_t i32 = (int32_t)(uint32_t)v;
            if (field == 3 && v != SPM_UNIGRAM && v != SPM_BPE && v != SPM_WORD)
                return pb_err(&b, at, "model_type is not unigram, bpe or word (char models are not supported)", NULL);
            if (field == 3)
                m->type = (enum spm_type)v;
            else if (field == 24 && v)
                return pb_err(&b, at, "treat_whitespace_as_suffix is not supported", NULL);
            else if (field == 35)
                m->byte_fallback = v != 0;
            else if (field == 40)
                ; /* the unknown piece is the one of type UNKNOWN */
            else
                *(field == 41 ? &m->bos : field == 42 ? &m->eos : &m->pad) = i32;
        } else if (field == 44) {
            if (pb_want(&b, at, field, wt, WT_LEN) < 0 || pb_len(&b, at, &s, &l) < 0)
                return -1;
            char *u = nmt_malloc(l + 1);
            if (!u)
                return -1;
            memcpy(u, b.p + s, l);
            u[l] = 0;
            free(m->unk_surface);
            m->unk_surface = u;
        } else if (pb_skip(&b, wt, at) < 0) {
            return -1;
        }
    }
    return rc;
}

/* The precompiled character map: u32le size of the trie, the trie's units, then the replacement
 * strings, each NUL-terminated. */
static int parse_charsmap(struct spm_model *m, struct pb *b, size_t at, size_t s, size_t l)
{
    if (l == 0)
        return 0;
    if (l <= 4)
        return pb_err(b, at, "precompiled_charsmap shorter than its header", NULL);
    uint32_t tsize = nmt_le32(b->p + s);
    if (tsize >= l - 4 || tsize % 4)
        return pb_err(b, at, "precompiled_charsmap: bad trie size", NULL);
    m->charsmap = b->p + s + 4;
    m->ncharsmap = tsize / 4;
    m->normalized = (const char *)b->p + s + 4 + tsize;
    m->nnormalized = (uint32_t)(l - 4 - tsize);
    if (m->ncharsmap == 0 || m->normalized[m->nnormalized - 1] != '\0')
        return pb_err(b, at, "precompiled_charsmap: strings not NUL-terminated or trie empty", NULL);
    return 0;
}

/* NormalizerSpec: precompiled_charsmap 2, add_dummy_prefix 3, remove_extra_whitespaces 4,
 * escape_whitespaces 5 (the flags true by default). */
static int parse_normalizer(struct spm_model *m, struct pb *top, size_t start, size_t len)
{
    struct pb b = {top->p, start, start + len, top->name};
    size_t at, s, l;
    uint32_t field;
    int wt, rc;
    uint64_t v;
    while ((rc = pb_key(&b, &field, &wt, &at)) == 1) {
        if (field == 2) {
            if (pb_want(&b, at, field, wt, WT_LEN) < 0 || pb_len(&b, at, &s, &l) < 0 ||
                parse_charsmap(m, &b, at, s, l) < 0)
                return -1;
        } else if (field >= 3 && field <= 5) {
            if (pb_u64(&b, at, field, wt, &v) < 0)
                return -1;
            *(field == 3 ? &m->add_dummy_prefix : field == 4 ? &m->remove_extra_whitespaces : &m->escape_whitespaces) =
                v != 0;
        } else if (pb_skip(&b, wt, at) < 0) {
            return -1;
        }
    }
    return rc;
}

/* Reads the top-level ModelProto: pieces (1), trainer_spec (2), normalizer_spec (3). */
static int parse_top(struct spm_model *m, struct pb *b)
{
    size_t at, s, l, tr_s = 0, tr_l = 0, no_s = 0, no_l = 0;
    uint32_t field, count = 0;
    int wt, rc;
    while ((rc = pb_key(b, &field, &wt, &at)) == 1) {
        if (field >= 1 && field <= 3) {
            if (pb_want(b, at, field, wt, WT_LEN) < 0 || pb_len(b, at, &s, &l) < 0)
                return -1;
            if (field == 1 && ++count > (1u << 24))
                return pb_err(b, at, "more than 2^24 pieces", NULL);
            if (field == 2)
                tr_s = s, tr_l = l;
            if (field == 3)
                no_s = s, no_l = l;
        } else if (pb_skip(b, wt, at) < 0) {
            return -1;
        }
    }
    if (rc < 0)
        return -1;
    if (count == 0)
        return nmt_seterr("%s: no pieces (not a SentencePiece model)", b->name);
    m->score = nmt_malloc(count * sizeof *m->score);
    m->ptype = nmt_malloc(count);
    if (!m->score || !m->ptype)
        return -1;
    b->off = 0;
    while ((rc = pb_key(b, &field, &wt, &at)) == 1) {
        if (field == 1) {
            if (pb_len(b, at, &s, &l) < 0 || parse_piece(m, b, s, l, m->n) < 0)
                return -1;
            m->n++;
        } else if (pb_skip(b, wt, at) < 0) {
            return -1;
        }
    }
    if (rc < 0 || (tr_l && parse_trainer(m, b, tr_s, tr_l) < 0) || (no_l && parse_normalizer(m, b, no_s, no_l) < 0))
        return -1;
    return 0;
}

/* ---- what the pieces mean ---- */

static const char *const nmt_special[4] = {"<pad>", "<s>", "</s>", "<unk>"};

/* Checks the pieces' types against the options and finds the unknown and byte pieces. */
static int check_pieces(struct spm_model *m)
{
    for (int b = 0; b < 256; b++)
        m->byte_piece[b] = -1;
    m->unk = -1;
    m->min_score = 3.402823466e38f;
    for (uint32_t i = 0; i < m->n; i++) {
        uint32_t len;
        const char *s = strtab_get(&m->text, i, &len);
        switch (m->ptype[i]) {
        case SPM_NORMAL:
            if (m->score[i] < m->min_score)
                m->min_score = m->score[i];
            break;
        case SPM_UNKNOWN:
            if (m->unk >= 0)
                return nmt_seterr("%s: piece %u: a second unknown piece", m->name, i);
            m->unk = i;
            break;
        case SPM_USER_DEFINED:
            return nmt_seterr("%s: piece %u '%.*s': user-defined pieces are not supported", m->name, i, (int)len, s);
        case SPM_UNUSED:
            if (m->type == SPM_BPE)
                return nmt_seterr("%s: piece %u: unused pieces in a BPE model are not supported", m->name, i);
            break;
        case SPM_BYTE: {
            unsigned v;
            char tail;
            if (!m->byte_fallback)
                return nmt_seterr("%s: piece %u: a byte piece without byte_fallback", m->name, i);
            char canon[8], text[7] = {0}; /* (the piece's text is not NUL-terminated) */
            if (len == 6)
                memcpy(text, s, 6);
            if (len != 6 || sscanf(text, "<0x%2X%c", &v, &tail) != 2 || tail != '>' || v > 255 ||
                (snprintf(canon, sizeof canon, "<0x%02X>", v), memcmp(canon, s, 6) != 0) || m->byte_piece[v] >= 0)
                return nmt_seterr("%s: piece %u: bad or repeated byte piece '%.*s'", m->name, i, (int)len, s);
            m->byte_piece[v] = (int32_t)i;
            break;
        }
        default: break;
        }
    }
    if (m->unk < 0)
        return nmt_seterr("%s: no unknown piece", m->name);
    m->bpe_words = m->type == SPM_BPE && m->escape_whitespaces;
    for (uint32_t i = 0; i < m->n && m->bpe_words; i++) {
        uint32_t len;
        const char *s = strtab_get(&m->text, i, &len);
        for (uint32_t k = 1; m->ptype[i] == SPM_NORMAL && k + 3 <= len; k++)
            if (memcmp(s + k, "\xE2\x96\x81", 3) == 0)
                m->bpe_words = 0;
    }
    /* unigram: no normal piece holds the bytes of U+2581 after its first byte, nor ends with its
     * first one or two bytes (a piece that starts within a word then ends within it) */
    m->unigram_words = m->type == SPM_UNIGRAM && m->escape_whitespaces && m->n <= 65536; /* ids in 16 bits */
    for (uint32_t i = 0; i < m->n && m->unigram_words; i++) {
        uint32_t len;
        const unsigned char *s = (const unsigned char *)strtab_get(&m->text, i, &len);
        for (uint32_t k = 1; m->ptype[i] == SPM_NORMAL && k < len; k++)
            if (s[k] == 0xE2 && (k + 3 > len || (s[k + 1] == 0x96 && s[k + 2] == 0x81)))
                m->unigram_words = 0;
    }
    for (int b = 0; m->byte_fallback && b < 256; b++)
        if (m->byte_piece[b] < 0)
            return nmt_seterr("%s: byte_fallback without the byte piece <0x%02X>", m->name, b);
    return 0;
}

/* Numbers the pieces in nmt's way (spm.h): the specials first, the others in order from 4. */
static int map_ids(struct spm_model *m)
{
    int64_t special[4] = {m->pad, m->bos, m->eos, m->unk};
    static const char *const what[3] = {"pad_id", "bos_id", "eos_id"};
    for (int k = 0; k < 3; k++) {
        if (special[k] >= (int64_t)m->n)
            return nmt_seterr("%s: trainer_spec %s %lld outside the %u pieces", m->name, what[k], (long long)special[k], m->n);
        if (special[k] < 0)
            special[k] = -1;
        else if (m->ptype[special[k]] != SPM_CONTROL)
            return nmt_seterr("%s: trainer_spec %s %lld names a piece that is not a control piece", m->name, what[k],
                              (long long)special[k]);
        for (int j = 0; j < k + 1 && special[k] >= 0; j++)
            if (j != k && special[j] == special[k])
                return nmt_seterr("%s: trainer_spec %s names the piece of %s", m->name, what[k], what[j]);
        if (special[k] == m->unk)
            return nmt_seterr("%s: trainer_spec %s names the unknown piece", m->name, what[k]);
    }
    m->pad = special[0], m->bos = special[1], m->eos = special[2];
    uint32_t present = 0;
    for (int k = 0; k < 4; k++)
        present += special[k] >= 0;
    m->n_nmt = m->n - present + 4;
    m->to_nmt = nmt_malloc((size_t)m->n * sizeof *m->to_nmt);
    m->to_model = nmt_malloc((size_t)m->n_nmt * sizeof *m->to_model);
    if (!m->to_nmt || !m->to_model)
        return -1;
    for (uint32_t k = 0; k < 4; k++) {
        m->to_model[k] = special[k];
        if (special[k] >= 0)
            m->to_nmt[special[k]] = k;
    }
    uint32_t next = 4;
    for (uint32_t i = 0; i < m->n; i++) {
        if (i == m->pad || i == m->bos || i == m->eos || i == m->unk)
            continue;
        m->to_nmt[i] = next;
        m->to_model[next++] = i;
    }
    return 0;
}

struct trie_key {
    const unsigned char *s;
    uint32_t len, id;
};

static int key_cmp(const void *a, const void *b)
{
    const struct trie_key *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

struct trie_job {
    int32_t node;
    uint32_t lo, hi, depth;    /* the sorted keys [lo, hi) below NODE, sharing DEPTH bytes */
};

/* The building double array's free slots: skip[i] == i for a free slot, else a slot after i from
 * which to search on (path-halved, so finding the next free slot is nearly constant time). */
struct trie_free {
    uint32_t *skip;
    size_t cap;
};

/* The first free slot at I or after it (a slot past the arrays is free). */
static uint32_t free_from(struct trie_free *f, uint32_t i)
{
    while (i < f->cap && f->skip[i] != i) {
        uint32_t j = f->skip[i];
        if (j < f->cap)
            f->skip[i] = f->skip[j];
        i = j;
    }
    return i;
}

/* Makes room for slots up to NEED in M's double array (new slots free: check -1). */
static int trie_room(struct spm_model *m, struct trie_free *f, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap, c4 = f->cap;
    if (need > (1u << 30))
        return nmt_seterr("%s: piece trie too large", m->name);
    if (NMT_GROW(m->trie, c, need) < 0 || NMT_GROW(f->skip, c4, c) < 0)
        return -1;
    for (size_t i = *cap; i < c; i++) {
        m->trie[i] = (struct spm_trie_unit){0, -1, -1, 0};
        f->skip[i] = (uint32_t)i;
    }
    *cap = f->cap = c;
    return 0;
}

/* Places the children of job J (the keys' distinct bytes at its depth) at the first free base, and
 * queues them. */
static int trie_place(struct spm_model *m, const struct trie_key *k, struct trie_job j, struct trie_job **stack,
                      size_t *nstack, size_t *stack_cap, size_t *cap, struct trie_free *f)
{
    if (j.lo < j.hi && k[j.lo].len == j.depth) {
        uint32_t id = k[j.lo++].id;
        if (m->ptype[id] == SPM_NORMAL)
            m->trie[j.node].piece = (int32_t)id, m->trie[j.node].score = m->score[id];
    }
    if (j.lo == j.hi)
        return 0;
    unsigned char label[256];
    uint32_t from[257], n = 0;
    for (uint32_t i = j.lo; i < j.hi; i++)
        if (n == 0 || k[i].s[j.depth] != label[n - 1])
            from[n] = i, label[n++] = k[i].s[j.depth];
    from[n] = j.hi;
    uint32_t b, slot = free_from(f, (uint32_t)label[0] + 1); /* b >= 1 */
    for (;; slot = free_from(f, slot + 1)) {
        b = slot - label[0];
        if (trie_room(m, f, cap, (size_t)b + 256) < 0)
            return -1;
        uint32_t i = 1;
        while (i < n && m->trie[b + label[i]].check < 0)
            i++;
        if (i == n)
            break;
    }
    m->trie[j.node].base = (int32_t)b;
    if (NMT_GROW(*stack, *stack_cap, *nstack + n) < 0)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        m->trie[b + label[i]].check = j.node;
        f->skip[b + label[i]] = b + label[i] + 1;
        if (b + label[i] + 1 > m->ntrie)
            m->ntrie = b + label[i] + 1;
        (*stack)[(*nstack)++] = (struct trie_job){(int32_t)(b + label[i]), from[i], from[i + 1], j.depth + 1};
    }
    return 0;
}

int spm_build_trie(struct spm_model *m)
{
    free(m->trie);
    m->trie = NULL;
    m->ntrie = 0;
    struct trie_key *k = nmt_malloc(((size_t)m->n + 1) * sizeof *k);
    struct trie_job *stack = NULL;
    size_t nk = 0, nstack = 0, stack_cap = 0, cap = 0;
    struct trie_free f = {NULL, 0};
    int rc = k ? trie_room(m, &f, &cap, 256) : -1;
    for (uint32_t i = 0; rc == 0 && i < m->n; i++) {
        if (m->ptype[i] == SPM_NORMAL || m->ptype[i] == SPM_UNUSED) {
            k[nk] = (struct trie_key){NULL, 0, i};
            k[nk].s = (const unsigned char *)strtab_get(&m->text, i, &k[nk].len);
            nk++;
        }
    }
    if (rc == 0) {
        qsort(k, nk, sizeof *k, key_cmp);
        m->trie[0].check = 0;
        f.skip[0] = 1;
        m->ntrie = 1;
        rc = NMT_GROW(stack, stack_cap, 1);
    }
    if (rc == 0)
        stack[nstack++] = (struct trie_job){0, 0, (uint32_t)nk, 0};
    while (rc == 0 && nstack) {
        struct trie_job j = stack[--nstack];
        rc = trie_place(m, k, j, &stack, &nstack, &stack_cap, &cap, &f);
    }
    free(f.skip);
    free(stack);
    free(k);
    return rc;
}

int spm_sniff(const void *data, size_t len)
{
    return len >= 2 && ((const unsigned char *)data)[0] == 0x0A;
}

struct spm_model *spm_parse(const void *data, size_t len, const char *name)
{
    if (len > SPM_MAX_FILE)
        return nmt_seterr("%s: larger than %u bytes, not a SentencePiece model", name, SPM_MAX_FILE), NULL;
    struct spm_model *m = nmt_calloc(1, sizeof *m);
    if (!m)
        return NULL;
    strtab_init(&m->text);
    m->type = SPM_UNIGRAM;
    m->bos = 1, m->eos = 2, m->pad = -1;
    m->add_dummy_prefix = m->remove_extra_whitespaces = m->escape_whitespaces = 1;
    m->name = nmt_strdup(name);
    m->unk_surface = nmt_strdup(" \xE2\x81\x87 ");
    m->bytes = nmt_malloc(len ? len : 1);
    if (!m->name || !m->unk_surface || !m->bytes) {
        spm_free(m);
        return NULL;
    }
    if (len)
        memcpy(m->bytes, data, len);
    m->nbytes = len;
    struct pb b = {m->bytes, 0, len, m->name};
    if (parse_top(m, &b) < 0 || check_pieces(m) < 0 || map_ids(m) < 0 || spm_build_trie(m) < 0) {
        spm_free(m);
        return NULL;
    }
    return m;
}

void spm_free(struct spm_model *m)
{
    if (!m)
        return;
    free(m->name);
    free(m->bytes);
    strtab_free(&m->text);
    free(m->score);
    free(m->ptype);
    free(m->to_nmt);
    free(m->to_model);
    free(m->unk_surface);
    free(m->trie);
    free(m);
}

const char *spm_piece(const struct spm_model *m, uint32_t id, uint32_t *len)
{
    if (id >= m->n_nmt)
        return NULL;
    if (m->to_model[id] < 0) {
        *len = (uint32_t)strlen(nmt_special[id]);
        return nmt_special[id];
    }
    return strtab_get(&m->text, (uint32_t)m->to_model[id], len);
}

int64_t spm_find(const struct spm_model *m, const char *s, size_t len)
{
    int64_t k = strtab_find(&m->text, s, len);
    if (k >= 0)
        return m->to_nmt[k];
    for (uint32_t id = 0; id < 4; id++)
        if (m->to_model[id] < 0 && strlen(nmt_special[id]) == len && memcmp(nmt_special[id], s, len) == 0)
            return id;
    return -1;
}
