/* spm.c: SentencePiece normalisation, segmentation and decoding (see spm.h), following
 * sentencepiece 0.1.97 (normalizer.cc, unigram_model.cc EncodeOptimized, bpe_model.cc,
 * sentencepiece_processor.cc) step by step, so that ties fall the same way. */
#include "text/spm.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

static const char space_symbol[3] = {'\xE2', '\x96', '\x81'}; /* U+2581 */

/* The length of the UTF-8 character at S as spm counts it (by its first byte only). */
static size_t one_char_len(const char *s)
{
    return (size_t)"\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4"[(unsigned char)*s >> 4];
}

static int charsmap_path(const struct spm_model *m, const unsigned char *s, size_t len);
static size_t charsmap_match(const struct spm_model *m, const unsigned char *s, size_t len, uint32_t *value);

void spm_encoder_init(struct spm_encoder *e, const struct spm_model *m)
{
    memset(e, 0, sizeof *e);
    e->m = m;
    strtab_init(&e->cache);
    for (unsigned char c = 0; c < 128; c++) {
        unsigned char cb[2] = {c, 0};
        uint32_t value;
        e->plain[c] = !m->ncharsmap || !charsmap_path(m, cb, 1);
        e->plain_before_ascii[c] = e->plain[c] || charsmap_match(m, cb, 1, &value) == 0;
        for (cb[1] = 0; cb[1] < 128 && !e->plain[c] && e->plain_before_ascii[c]; cb[1]++)
            e->plain_before_ascii[c] = !charsmap_path(m, cb, 2);
    }
}

void spm_encoder_free(struct spm_encoder *e)
{
    nmt_buf_free(&e->norm);
    free(e->lattice);
    free(e->sym);
    free(e->heap);
    free(e->raw);
    free(e->raw_end);
    strtab_free(&e->cache);
    free(e->cache_first);
    free(e->cache_id);
    free(e->cache_end);
    memset(e, 0, sizeof *e);
}

/* ---- normalisation ---- */

/* spm's DecodeUTF8 validity: the length of a valid character at S (LEN bytes left), or 0. */
static size_t valid_char_len(const unsigned char *s, size_t len)
{
    uint32_t cp;
    if (s[0] < 0x80)
        return 1;
    if (len >= 2 && (s[0] & 0xE0) == 0xC0 && (s[1] & 0xC0) == 0x80) {
        cp = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
        return cp >= 0x80 ? 2 : 0;
    }
    if (len >= 3 && (s[0] & 0xF0) == 0xE0 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80) {
        cp = (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
        return cp >= 0x800 && (cp < 0xD800 || cp >= 0xE000) ? 3 : 0;
    }
    if (len >= 4 && (s[0] & 0xF8) == 0xF0 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80 && (s[3] & 0xC0) == 0x80) {
        cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
        return cp >= 0x10000 && cp <= 0x10FFFF ? 4 : 0;
    }
    return 0;
}

/* The double-array trie's longest match of the character map at S (LEN bytes): its length (0 for
 * none) and the offset of its replacement in *VALUE. Like Darts' commonPrefixSearch with spm's 32
 * results. */
static size_t charsmap_match(const struct spm_model *m, const unsigned char *s, size_t len, uint32_t *value)
{
    const unsigned char *a = m->charsmap;
    uint32_t n = m->ncharsmap, unit = nmt_le32(a), id = 0, found = 0;
    size_t longest = 0;
#define DA_OFFSET(u) (((u) >> 10) << (((u) & (1u << 9)) >> 6))
    id ^= DA_OFFSET(unit);
    for (size_t i = 0; i < len; i++) {
        id ^= s[i];
        if (id >= n)
            break;
        unit = nmt_le32(a + 4 * (size_t)id);
        if ((unit & ((1u << 31) | 0xFF)) != s[i])
            break;
        id ^= DA_OFFSET(unit);
        if ((unit >> 8) & 1) {
            if (id >= n)
                break;
            if (found++ < 32) {
                longest = i + 1;
                *value = nmt_le32(a + 4 * (size_t)id) & 0x7FFFFFFFu;
            }
        }
    }
#undef DA_OFFSET
    return longest;
}

/* Whether a rule of the character map starts with the LEN bytes at S (the trie has their path). */
static int charsmap_path(const struct spm_model *m, const unsigned char *s, size_t len)
{
    const unsigned char *a = m->charsmap;
    uint32_t unit = nmt_le32(a), id = ((unit >> 10) << ((unit & (1u << 9)) >> 6));
    for (size_t i = 0; i < len; i++) {
        id ^= s[i];
        if (id >= m->ncharsmap)
            return 0;
        unit = nmt_le32(a + 4 * (size_t)id);
        if ((unit & ((1u << 31) | 0xFF)) != s[i])
            return 0;
        id ^= ((unit >> 10) << ((unit & (1u << 9)) >> 6));
    }
    return 1;
}

/* spm's NormalizePrefix: the replacement of the longest rule at S (LEN > 0 bytes) in *OUT, *OUTLEN,
 * returning the bytes it consumes; 0 with the error set for a rule outside the strings. */
static size_t normalize_prefix(const struct spm_encoder *e, const char *s, size_t len, const char **out, size_t *outlen)
{
    const struct spm_model *m = e->m;
    unsigned char c = (unsigned char)s[0];
    if (c < 0x80 && (e->plain[c] || (e->plain_before_ascii[c] && (len == 1 || (unsigned char)s[1] < 0x80)))) {
        *out = s;
        *outlen = 1;
        return 1;
    }
    uint32_t value = 0;
    size_t n = m->ncharsmap ? charsmap_match(m, (const unsigned char *)s, len, &value) : 0;
    if (n) {
        if (value >= m->nnormalized)
            return (size_t)nmt_seterr("%s: precompiled_charsmap: rule %u outside the strings", m->name, value) + 1;
        *out = m->normalized + value;
        *outlen = strlen(*out);
        return n;
    }
    n = valid_char_len((const unsigned char *)s, len);
    if (n == 0) { /* a malformed byte: U+FFFD for one byte */
        *out = "\xEF\xBF\xBD";
        *outlen = 3;
        return 1;
    }
    *out = s;
    *outlen = n;
    return n;
}

static int put_space(struct nmt_buf *o, int escape)
{
    return escape ? nmt_buf_append(o, space_symbol, 3) : nmt_buf_append(o, " ", 1);
}

int spm_normalize(struct spm_encoder *e, const char *s, size_t len)
{
    const struct spm_model *m = e->m;
    struct nmt_buf *o = &e->norm;
    const char *r;
    size_t rl, c;
    o->len = 0;
    while (m->remove_extra_whitespaces && len) { /* heading spaces */
        if (!(c = normalize_prefix(e, s, len, &r, &rl)))
            return -1;
        if (rl != 1 || r[0] != ' ')
            break;
        s += c, len -= c;
    }
    if (!len)
        return 0;
    if (nmt_buf_reserve(o, len * 3 + 3) < 0 || (m->add_dummy_prefix && put_space(o, m->escape_whitespaces) < 0))
        return -1;
    int prev_space = m->remove_extra_whitespaces;
    while (len) {
        if (!(c = normalize_prefix(e, s, len, &r, &rl)))
            return -1;
        while (prev_space && rl && r[0] == ' ')
            r++, rl--;
        if (rl) {
            if (o->cap - o->len < rl * 3 && nmt_buf_reserve(o, rl * 3) < 0)
                return -1;
            unsigned char *d = o->data + o->len;
            for (size_t k = 0; k < rl; k++) {
                if (m->escape_whitespaces && r[k] == ' ')
                    memcpy(d, space_symbol, 3), d += 3;
                else
                    *d++ = (unsigned char)r[k];
            }
            o->len = (size_t)(d - o->data);
            prev_space = r[rl - 1] == ' ';
        }
        s += c, len -= c;
        if (!m->remove_extra_whitespaces)
            prev_space = 0;
    }
    if (m->remove_extra_whitespaces) { /* trailing spaces */
        size_t sl = m->escape_whitespaces ? 3 : 1;
        const char *sp = m->escape_whitespaces ? space_symbol : " ";
        while (o->len >= sl && memcmp(o->data + o->len - sl, sp, sl) == 0)
            o->len -= sl;
    }
    return 0;
}

/* ---- segmentation ---- */

/* Appends model id ID ending at byte END of the normalised line to E's raw pieces. */
static int raw_push(struct spm_encoder *e, uint32_t *n, uint32_t id, uint32_t end)
{
    if (NMT_GROW(e->raw, e->raw_cap, (size_t)*n + 1) < 0 || NMT_GROW(e->raw_end, e->raw_end_cap, (size_t)*n + 1) < 0)
        return -1;
    e->raw[*n] = id;
    e->raw_end[*n] = end;
    ++*n;
    return 0;
}

struct best_node {
    float score;               /* of the best path ending here */
    int32_t start;             /* its last piece's start, -1 when no path ends here */
    uint32_t id;               /* its last piece */
};

/* Unigram: spm's EncodeOptimized, Viterbi over the pieces' scores on the fly, into E's raw
 * pieces (*N of them, in order). */
static int encode_unigram(struct spm_encoder *e, uint32_t *nraw)
{
    const struct spm_model *m = e->m;
    const char *t = (const char *)e->norm.data;
    size_t size = e->norm.len;
    if (NMT_GROW(*(struct best_node **)&e->lattice, e->lattice_cap, size + 1) < 0)
        return -1;
    struct best_node *best = e->lattice;
    for (size_t i = 0; i <= size; i++)
        best[i] = (struct best_node){0, -1, 0};
    const float unk_score = m->min_score - 10.0f;
    for (size_t start = 0; start < size;) {
        const float here = best[start].score;
        size_t mblen = one_char_len(t + start);
        if (mblen > size - start)
            mblen = size - start;
        int single = 0;
        int32_t node = 0;
        for (size_t k = start; k < size; k++) {
            if ((node = spm_trie_next(m, node, (unsigned char)t[k])) < 0)
                break;
            int32_t id = m->trie[node].piece;
            if (id < 0)
                continue;
            /* in double, compared with the float kept, as spm (its score is a double there) */
            double cand = (double)m->trie[node].score + here;
            struct best_node *b = &best[k + 1];
            if (b->start < 0 || cand > b->score)
                *b = (struct best_node){(float)cand, (int32_t)start, (uint32_t)id};
            if (k + 1 - start == mblen)
                single = 1;
        }
        if (!single) {
            float cand = unk_score + here;
            struct best_node *b = &best[start + mblen];
            if (b->start < 0 || cand > b->score)
                *b = (struct best_node){cand, (int32_t)start, (uint32_t)m->unk};
        }
        start += mblen;
    }
    uint32_t n = 0;
    for (size_t end = size; end > 0; end = (size_t)best[end].start)
        if (raw_push(e, &n, best[end].id, (uint32_t)end) < 0)
            return -1;
    for (uint32_t i = 0; i < n / 2; i++) { /* backtracked: reverse */
        uint32_t id = e->raw[i], end = e->raw_end[i];
        e->raw[i] = e->raw[n - 1 - i], e->raw_end[i] = e->raw_end[n - 1 - i];
        e->raw[n - 1 - i] = id, e->raw_end[n - 1 - i] = end;
    }
    *nraw = n;
    return 0;
}

struct bpe_sym {
    int32_t prev, next;        /* neighbours, -1 at the ends */
    uint32_t off, len;         /* bytes of the normalised line; len 0 once merged away */
    int32_t node;              /* the trie node of its text, -1 when no piece starts with it */
};

struct bpe_pair {
    float score;
    int32_t left, right;
    uint32_t len;              /* bytes of the merged piece when the pair was seen */
    int32_t node;              /* the merged piece's trie node */
};

/* Whether pair A is merged before pair B: the higher score, then the leftmost (spm's agenda). */
static int pair_before(const struct bpe_pair *a, const struct bpe_pair *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

/* Pushes the pair of symbols LEFT and RIGHT when their concatenation is a normal piece. */
static int bpe_maybe_push(struct spm_encoder *e, size_t *nheap, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return 0;
    const struct spm_model *m = e->m;
    const struct bpe_sym *sym = e->sym;
    uint32_t len = sym[left].len + sym[right].len;
    const unsigned char *s = e->norm.data + sym[right].off;
    int32_t node = sym[left].node; /* the left symbol's node, then on with the right's bytes */
    for (uint32_t k = 0; k < sym[right].len && node >= 0; k++)
        node = spm_trie_next(m, node, s[k]);
    int32_t id = node < 0 ? -1 : m->trie[node].piece;
    if (id < 0)
        return 0;
    if (NMT_GROW(*(struct bpe_pair **)&e->heap, e->heap_cap, *nheap + 1) < 0)
        return -1;
    struct bpe_pair *h = e->heap, p = {m->trie[node].score, left, right, len, node};
    size_t i = (*nheap)++;
    for (; i > 0 && pair_before(&p, &h[(i - 1) / 2]); i = (i - 1) / 2)
        h[i] = h[(i - 1) / 2];
    h[i] = p;
    return 0;
}

static struct bpe_pair bpe_pop(struct bpe_pair *h, size_t *nheap)
{
    struct bpe_pair top = h[0], last = h[--*nheap];
    size_t i = 0, n = *nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && pair_before(&h[c + 1], &h[c]))
            c++;
        if (!pair_before(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (n)
        h[i] = last;
    return top;
}

/* Splits bytes [FROM, SIZE) of the normalised line into characters as spm does; their count in *NSYM. */
static int bpe_split(struct spm_encoder *e, size_t from, size_t size, size_t *nsym)
{
    const char *t = (const char *)e->norm.data;
    size_t n = 0;
    if (NMT_GROW(*(struct bpe_sym **)&e->sym, e->sym_cap, size - from + 1) < 0)
        return -1;
    struct bpe_sym *sym = e->sym;
    for (size_t off = from; off < size; n++) {
        size_t l = one_char_len(t + off);
        if (l > size - off)
            l = size - off;
        int32_t node = 0;
        for (size_t k = 0; k < l && node >= 0; k++)
            node = spm_trie_next(e->m, node, (unsigned char)t[off + k]);
        sym[n] = (struct bpe_sym){(int32_t)n - 1, off + l < size ? (int32_t)n + 1 : -1, (uint32_t)off, (uint32_t)l, node};
        off += l;
    }
    *nsym = n;
    return 0;
}

/* BPE: spm's merges of the best-scored adjacent pair in bytes [FROM, TO) of the normalised line,
 * into E's raw pieces from *NRAW on. */
static int bpe_segment(struct spm_encoder *e, size_t from, size_t to, uint32_t *nraw)
{
    const struct spm_model *m = e->m;
    size_t nsym, nheap = 0;
    if (bpe_split(e, from, to, &nsym) < 0)
        return -1;
    for (size_t i = 1; i < nsym; i++)
        if (bpe_maybe_push(e, &nheap, (int32_t)i - 1, (int32_t)i) < 0)
            return -1;
    struct bpe_sym *sym = e->sym;
    while (nheap) {
        struct bpe_pair top = bpe_pop(e->heap, &nheap);
        struct bpe_sym *l = &sym[top.left], *r = &sym[top.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != top.len)
            continue;
        l->len += r->len;
        l->node = top.node;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = top.left;
        r->len = 0;
        if (bpe_maybe_push(e, &nheap, l->prev, top.left) < 0 || bpe_maybe_push(e, &nheap, top.left, l->next) < 0)
            return -1;
    }
    for (int32_t i = nsym ? 0 : -1; i >= 0; i = sym[i].next) {
        int64_t id = strtab_find(&m->text, e->norm.data + sym[i].off, sym[i].len);
        if (raw_push(e, nraw, id < 0 ? (uint32_t)m->unk : (uint32_t)id, sym[i].off + sym[i].len) < 0)
            return -1;
    }
    return 0;
}

/* bpe_segment of the word [FROM, TO) through E's cache of words. */
static int bpe_cached(struct spm_encoder *e, size_t from, size_t to, uint32_t *nraw)
{
    const unsigned char *w = e->norm.data + from;
    int64_t k = strtab_find(&e->cache, w, to - from);
    if (k >= 0) {
        for (uint32_t j = e->cache_first[k]; j < e->cache_first[k + 1]; j++)
            if (raw_push(e, nraw, e->cache_id[j], (uint32_t)from + e->cache_end[j]) < 0)
                return -1;
        return 0;
    }
    uint32_t before = *nraw;
    if (bpe_segment(e, from, to, nraw) < 0)
        return -1;
    if (e->cache.n >= SPM_CACHE_WORDS) { /* start afresh */
        strtab_free(&e->cache);
        strtab_init(&e->cache);
        e->cache_pieces = 0;
    }
    size_t np = e->cache_pieces + (*nraw - before);
    if (NMT_GROW(e->cache_first, e->cache_first_cap, (size_t)e->cache.n + 2) < 0 ||
        NMT_GROW(e->cache_id, e->cache_id_cap, np) < 0 || NMT_GROW(e->cache_end, e->cache_end_cap, np) < 0 ||
        (k = strtab_intern(&e->cache, w, to - from, NULL)) < 0)
        return -1;
    for (uint32_t j = before; j < *nraw; j++) {
        e->cache_id[e->cache_pieces] = e->raw[j];
        e->cache_end[e->cache_pieces++] = e->raw_end[j] - (uint32_t)from;
    }
    e->cache_first[k] = (uint32_t)(e->cache_pieces - (*nraw - before));
    e->cache_first[k + 1] = (uint32_t)e->cache_pieces;
    return 0;
}

/* BPE of the whole normalised line: word by word through the cache when the model allows
 * (spm_model.bpe_words), words starting at each character U+2581. */
static int encode_bpe(struct spm_encoder *e, uint32_t *nraw)
{
    const char *t = (const char *)e->norm.data;
    size_t size = e->norm.len, word = 0;
    *nraw = 0;
    if (!e->m->bpe_words)
        return bpe_segment(e, 0, size, nraw);
    for (size_t off = 0; off < size;) {
        size_t l = one_char_len(t + off);
        if (l > size - off)
            l = size - off;
        if (l == 3 && off > word && memcmp(t + off, space_symbol, 3) == 0) {
            if (bpe_cached(e, word, off, nraw) < 0)
                return -1;
            word = off;
        }
        off += l;
    }
    return bpe_cached(e, word, size, nraw);
}

/* Word model: each word of the normalised line is the normal piece of that text, or the unknown
 * piece, into E's raw pieces (*NRAW). With escaped whitespace a word runs from one U+2581 to the
 * next (as spm splits words); without, a word is a run of non-spaces, looked up as U+2581 + word
 * (the models of spm_format_word_model: Marian's words, which may hold U+2581 themselves). */
static int encode_word(struct spm_encoder *e, uint32_t *nraw)
{
    const struct spm_model *m = e->m;
    const char *t = (const char *)e->norm.data;
    size_t size = e->norm.len;
    struct nmt_buf key = {0};
    int rc = 0;
    *nraw = 0;
    for (size_t at = 0, end; at < size && rc == 0; at = end) {
        key.len = 0;
        if (m->escape_whitespaces) {
            end = at + (size - at >= 3 && !memcmp(t + at, space_symbol, 3) ? 3 : 1);
            while (end < size && !(size - end >= 3 && !memcmp(t + end, space_symbol, 3)))
                end++;
            rc = nmt_buf_append(&key, t + at, end - at);
        } else {
            if (t[at] == ' ') {
                end = at + 1;
                continue;
            }
            for (end = at; end < size && t[end] != ' '; end++)
                ;
            rc = nmt_buf_append(&key, space_symbol, 3) < 0 || nmt_buf_append(&key, t + at, end - at) < 0 ? -1 : 0;
        }
        int64_t id = rc < 0 ? -1 : strtab_find(&m->text, key.data, key.len);
        if (id < 0 || m->ptype[id] != SPM_NORMAL)
            id = m->unk;
        if (rc == 0)
            rc = raw_push(e, nraw, (uint32_t)id, (uint32_t)end);
    }
    nmt_buf_free(&key);
    return rc;
}

static int push_id(uint32_t **ids, uint32_t *n, uint32_t *cap, uint32_t id)
{
    if (*n == *cap) {
        size_t c = *cap;
        if (NMT_GROW(*ids, c, (size_t)*n + 1) < 0)
            return -1;
        if (c > UINT32_MAX)
            c = UINT32_MAX;
        *cap = (uint32_t)c;
    }
    (*ids)[(*n)++] = id;
    return 0;
}

int spm_encode(struct spm_encoder *e, const char *s, size_t len, uint32_t **ids, uint32_t *n, uint32_t *cap)
{
    const struct spm_model *m = e->m;
    uint32_t nraw = 0;
    *n = 0;
    if (spm_normalize(e, s, len) < 0)
        return -1;
    if (e->norm.len > INT32_MAX)
        return nmt_seterr("%s: a line of more than 2^31 bytes", m->name);
    if (e->norm.len == 0)
        return 0;
    if ((m->type == SPM_BPE ? encode_bpe(e, &nraw) : m->type == SPM_WORD ? encode_word(e, &nraw)
                                                                        : encode_unigram(e, &nraw)) < 0)
        return -1;
    /* spm's PopulateSentencePieceText: unknown pieces as their bytes (byte fallback), or a run of
     * them as one (a word model keeps each unknown word, as Marian's vocabularies do) */
    int prev_unk = 0;
    for (uint32_t i = 0, start = 0; i < nraw; start = e->raw_end[i++]) {
        uint32_t id = e->raw[i];
        int unk = id == m->unk;
        int rc = 0;
        if (unk && m->byte_fallback) {
            for (uint32_t k = start; k < e->raw_end[i] && rc == 0; k++)
                rc = push_id(ids, n, cap, m->to_nmt[m->byte_piece[e->norm.data[k]]]);
        } else if (!(unk && prev_unk && m->type != SPM_WORD)) {
            rc = push_id(ids, n, cap, m->to_nmt[id]);
        }
        if (rc < 0)
            return -1;
        prev_unk = unk;
    }
    return 0;
}

/* ---- decoding ---- */

/* Appends the bytes B[0..N) as spm does for a run of byte pieces: valid UTF-8 as it is, each
 * byte of an invalid sequence as U+FFFD. */
static int put_bytes(struct nmt_buf *out, const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t l = valid_char_len(b + i, n - i);
        if (l == 0 && nmt_buf_append(out, "\xEF\xBF\xBD", 3) < 0)
            return -1;
        if (l && nmt_buf_append(out, b + i, l) < 0)
            return -1;
        i += l ? l : 1;
    }
    return 0;
}

/* Appends piece text S (LEN bytes) with U+2581 as spaces, without a leading one when STRIP. */
static int put_piece(struct nmt_buf *out, const char *s, size_t len, int strip)
{
    if (strip && len >= 3 && memcmp(s, space_symbol, 3) == 0)
        s += 3, len -= 3;
    for (size_t i = 0; i < len; i++) {
        int sp = i + 3 <= len && memcmp(s + i, space_symbol, 3) == 0;
        if (nmt_buf_append(out, sp ? " " : s + i, 1) < 0)
            return -1;
        i += sp ? 2 : 0;
    }
    return 0;
}

int spm_decode(const struct spm_model *m, const uint32_t *ids, size_t n, struct nmt_buf *out)
{
    unsigned char bytes[256];
    size_t nbytes = 0, start = out->len;
    int strip_ok = m->add_dummy_prefix || m->remove_extra_whitespaces;
    for (size_t i = 0; i <= n; i++) {
        int64_t mid = -1;
        if (i < n) {
            if (ids[i] >= m->n_nmt)
                return nmt_seterr("id %u out of range (vocabulary has %u pieces)", ids[i], m->n_nmt);
            mid = m->to_model[ids[i]];
        }
        int byte = mid >= 0 && m->ptype[mid] == SPM_BYTE;
        if ((!byte || nbytes == sizeof bytes) && nbytes) {
            /* a full buffer is written up to its last character start, which no character before it
             * runs over, so the bytes are read as one run would be */
            size_t cut = nbytes;
            for (size_t k = nbytes - 1; byte && k + 4 > nbytes; k--)
                if ((bytes[k] & 0xC0) != 0x80) {
                    cut = k;
                    break;
                }
            if (put_bytes(out, bytes, cut) < 0)
                return -1;
            memmove(bytes, bytes + cut, nbytes - cut);
            nbytes -= cut;
        }
        if (mid < 0 || m->ptype[mid] == SPM_CONTROL)
            continue;
        uint32_t len;
        const char *s = strtab_get(&m->text, (uint32_t)mid, &len);
        int rc = 0;
        if (byte)
            bytes[nbytes++] = (unsigned char)strtol(s + 3, NULL, 16);
        else if (m->ptype[mid] == SPM_UNKNOWN)
            rc = nmt_buf_append(out, m->unk_surface, strlen(m->unk_surface));
        else
            rc = put_piece(out, s, len, strip_ok && out->len == start);
        if (rc < 0)
            return -1;
    }
    return 0;
}
