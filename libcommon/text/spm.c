/* spm.c: SentencePiece normalisation, segmentation and decoding (see spm.h), following
 * sentencepiece 0.1.97 (normalizer.cc, unigram_model.cc EncodeOptimized, bpe_model.cc,
 * sentencepiece_processor.cc) step by step, so that ties fall the same way. */
#include "text/spm.h"

#include <math.h>
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
    e->words_max = SPM_CACHE_WORDS, e->units_max = SPM_CACHE_UNITS;
    for (unsigned char c = 0; c < 128; c++) {
        unsigned char cb[2] = {c, 0};
        uint32_t value;
        if (!m->ncharsmap || !charsmap_path(m, cb, 1)) {
            e->plain[c] = SPM_PLAIN;
            continue;
        }
        int before_ascii = charsmap_match(m, cb, 1, &value) == 0;
        for (cb[1] = 0; cb[1] < 128 && before_ascii; cb[1]++)
            before_ascii = !charsmap_path(m, cb, 2);
        e->plain[c] = before_ascii ? SPM_PLAIN_BEFORE_ASCII : 0;
    }
    e->graph_plain = 1;
    for (unsigned c = 0x21; c < 0x7F; c++)
        e->graph_plain &= e->plain[c] != 0;
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
    free(e->words);
    free(e->word_slot);
    free(e->line_words);
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
    if (e->plain[c] == SPM_PLAIN || (e->plain[c] && (len == 1 || (unsigned char)s[1] < 0x80))) {
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
        const uint8_t *plain = e->plain;
        unsigned a = (unsigned char)s[0], kind = plain[a];
        if (kind == SPM_PLAIN || (kind && (len == 1 || (unsigned char)s[1] < 0x80))) {
            /* a run of ASCII that the map leaves as it is (normalize_prefix's first case), in one
             * loop, spaces without a branch: 4 bytes written, 1 (a byte), 3 (an escaped space), or
             * 0 (an extra space) kept */
            if (o->cap - o->len < len * 3 + 4 && nmt_buf_reserve(o, len * 3 + 4) < 0)
                return -1;
            unsigned char *d = o->data + o->len;
            const uint32_t space = m->escape_whitespaces ? 0x8196E2u : 0x20u; /* little-endian bytes */
            const unsigned space_len = m->escape_whitespaces ? 3 : 1, rew = (unsigned)m->remove_extra_whitespaces;
            unsigned prev = (unsigned)prev_space;
            for (;;) {
                if (e->graph_plain && len > 8) {
                    /* up to 8 bytes from 0x21 to 0x7E at once: up to the first other one, less the
                     * byte before a non-ASCII one (which a rule may start with) */
                    uint64_t x = nmt_le64((const unsigned char *)s), y = x ^ 0x7F7F7F7F7F7F7F7FULL;
                    uint64_t other = (x | ((x - 0x2121212121212121ULL) & ~x) | ((y - 0x0101010101010101ULL) & ~y)) &
                                     0x8080808080808080ULL; /* exact up to its lowest byte */
                    size_t k = other ? (size_t)__builtin_ctzll(other) / 8 : 8;
                    k -= k && (unsigned char)s[k] >= 0x80;
                    if (k) {
                        memcpy(d, s, 8);
                        d += k, s += k, len -= k;
                        prev = 0;
                        a = (unsigned char)s[0], kind = plain[a];
                        if (!(kind == SPM_PLAIN || (kind && (len == 1 || (unsigned char)s[1] < 0x80))))
                            break;
                        continue;
                    }
                }
                unsigned sp = a == ' ';
                uint32_t v = sp ? space : a;
                unsigned char b4[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), 0};
                memcpy(d, b4, 4);
                d += sp ? (prev ? 0 : space_len) : 1;
                prev = sp & rew;
                s++;
                if (!--len)
                    break;
                a = (unsigned char)s[0], kind = plain[a];
                if (!(kind == SPM_PLAIN || (kind && (len == 1 || (unsigned char)s[1] < 0x80))))
                    break;
            }
            prev_space = (int)prev;
            o->len = (size_t)(d - o->data);
            continue;
        }
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
    if (o->cap - o->len < 8 && nmt_buf_reserve(o, 8) < 0)
        return -1;
    memset(o->data + o->len, 0, 8); /* (word_hash and word_probe read 8 bytes at once) */
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

/* Makes positions (FROM, TO] of BEST reached by no path yet. */
static void lattice_clear(struct best_node *best, size_t from, size_t to)
{
    for (size_t i = from + 1; i <= to; i++)
        best[i] = (struct best_node){0, -1, 0};
}

/* The pieces of a model that begin at one character start of a text, in the order of their ends:
 * each from the trie walk, then, when none ends with the character, the unknown piece over it. */
struct piece_walk {
    const struct spm_model *m;
    const unsigned char *t;
    size_t len, k, char_end; /* the text's bytes, the next byte of the walk, the character's end */
    int32_t node;            /* the trie node of the piece given last (-1: the walk is over) */
    int single;              /* a piece given ends with the character (or the unknown one was given) */
};

/* Starts W over the pieces of M beginning at byte START of T (LEN bytes), a character start. */
static inline void piece_walk_init(struct piece_walk *w, const struct spm_model *m, const unsigned char *t,
                                   size_t len, size_t start)
{
    size_t mblen = one_char_len((const char *)t + start);
    *w = (struct piece_walk){m, t, len, start, start + (mblen < len - start ? mblen : len - start), 0, 0};
}

/* The next piece of W: 1 with its end in *END and its id in *ID (-1: the unknown piece, over the
 * character; else the piece's trie node is W->node); 0 when there is none left. */
static inline int piece_walk_next(struct piece_walk *w, size_t *end, int32_t *id)
{
    while (w->node >= 0 && w->k < w->len && (w->node = spm_trie_next(w->m, w->node, w->t[w->k])) >= 0) {
        int32_t piece = w->m->trie[w->node].piece;
        w->k++;
        if (piece >= 0) {
            w->single |= w->k == w->char_end;
            *end = w->k, *id = piece;
            return 1;
        }
    }
    w->node = -1;
    if (w->single)
        return 0;
    w->single = 1;
    *end = w->char_end, *id = -1;
    return 1;
}

/* spm's EncodeOptimized over the characters starting in bytes [FROM, TO) of the normalised line
 * (SIZE bytes; FROM and TO character starts, best[FROM] final): from each, the pieces its trie walk
 * finds, each tried as the last piece of the best path to its end, then the unknown piece over the
 * character when no single-character piece is known. */
static void viterbi_direct(const struct spm_model *m, const unsigned char *t, size_t size, size_t from, size_t to,
                           struct best_node *best)
{
    const uint32_t unk = (uint32_t)m->unk;
    const float unk_score = m->min_score - 10.0f;
    for (size_t start = from; start < to;) {
        const float here = best[start].score;
        struct piece_walk pw;
        size_t end;
        int32_t id;
        piece_walk_init(&pw, m, t, size, start);
        while (piece_walk_next(&pw, &end, &id)) {
            struct best_node *b = &best[end];
            if (id >= 0) {
                /* in double, compared with the float kept, as spm (its score is a double there) */
                double cand = (double)m->trie[pw.node].score + here;
                if (b->start < 0 || cand > b->score)
                    *b = (struct best_node){(float)cand, (int32_t)start, (uint32_t)id};
            } else {
                float cand = unk_score + here;
                if (b->start < 0 || cand > b->score)
                    *b = (struct best_node){cand, (int32_t)start, unk};
            }
        }
        start = pw.char_end;
    }
}

/* ---- the unigram search word by word ----
 *
 * Where no normal piece spans a word's start (spm_model.unigram_words), what viterbi_direct does over
 * a word (from one U+2581 to the next) depends on the word's text and on S, the float score of the
 * best path to the word's start, alone: the pieces it finds from each of the word's characters (its
 * steps) are the word's, tried in the same order. An encoder keeps each word's steps (a record of
 * its cache): replayed from S, they are the very sums and comparisons of the search of the whole
 * line, so give its outcome, ties and float roundings included.
 *
 * Most often the steps need not all be replayed. S enters the outcome only through roundings: with
 * exact sums from 0, the best candidate at each character start is the same whatever S. The record
 * keeps that exact search's best path through the word, the smallest margin M by which, at any
 * character start, its best candidate beats the next (0: a tie), and R, the largest magnitude of a
 * candidate's exact sum. From S, the float score the search keeps at a character start differs from
 * S plus its exact sum by the roundings along its path, half an ulp at most each, an ulp being at
 * most u = (|S| + R) 2^-22 (+ 2^-140 below the normal floats), the path LEN pieces at most (a byte
 * each at least). When M > (LEN + 3) u then, by induction over the character starts, the best exact
 * candidate at each has the only largest float sum, which the search keeps whatever the order of its
 * comparisons (of a double with the float kept), and each score kept is the float sum of its path:
 * the search's outcome in the word is that path, and replaying its pieces alone computes the scores
 * the search keeps along it. Otherwise (ties, near ties, scores not finite or huge) every step is
 * replayed. */

/* One step of the unigram search in a word: piece ID found from byte S to byte E of the word, or
 * the unknown piece over the character at S (ID the model's unknown one). */
struct spm_step {
    uint8_t s, e;
    uint16_t id;
};

/* A record of the cache: the word's byte length, its steps, the pieces of its path, a pad, then M
 * and R (doubles), the word's bytes (padded to 4), the path's pieces, the steps. */
enum { REC_LEN, REC_NSTEP, REC_NPATH, REC_M = 4, REC_R = 6, REC_TEXT = 8 };

static const struct spm_step *rec_path(const uint32_t *rec) { return (const struct spm_step *)(rec + REC_TEXT + (rec[REC_LEN] + 3) / 4); }
static const struct spm_step *rec_steps(const uint32_t *rec) { return rec_path(rec) + rec[REC_NPATH]; }

/* A word of the line being searched: bytes [FROM, TO) of the normalised line, the hash of its text,
 * the offset of its record in the cache (-1: searched directly, uncached). */
struct line_word {
    uint32_t from, to;
    uint64_t hash;
    int64_t rec;
};

/* The first LEN (< 8) bytes of 8 loaded little-endian. */
static inline uint64_t low_bytes(uint64_t x, size_t len)
{
    return len ? x & (~0ULL >> (64 - 8 * len)) : 0;
}

/* The hash of the LEN bytes at W (the unigram cache's), read 8 bytes at a time: up to 7 bytes after
 * them are read (E->norm's zero bytes at its end). */
static uint64_t word_hash(const unsigned char *w, size_t len)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL * (len + 1), x;
    for (; len >= 8; w += 8, len -= 8) {
        x = nmt_le64(w);
        h = (h ^ x) * 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 31;
    }
    h = (h ^ low_bytes(nmt_le64(w), len)) * 0x94d049bb133111ebULL;
    return h ^ (h >> 29);
}

/* The most 4-byte units the record of a word of LEN bytes takes: at most one step a byte from each
 * character start and one more, at most a piece a byte on its path. */
static size_t word_room(size_t len)
{
    return REC_TEXT + (len + 3) / 4 + len * (len + 3) / 2 + len;
}

/* Empties E's cache of unigram words, keeping its memory. */
static void words_forget(struct spm_encoder *e)
{
    if (e->nword_slot)
        memset(e->word_slot, 0, e->nword_slot * sizeof *e->word_slot);
    e->nwords = e->words_len = 0;
}

/* Where word W (LEN bytes, hash H) is or goes in E's slots; *FOUND whether it is there. */
static size_t word_probe(const struct spm_encoder *e, const unsigned char *w, size_t len, uint64_t h, int *found)
{
    size_t mask = e->nword_slot - 1, slot = (size_t)(h >> 32) & mask;
    for (uint64_t v; (v = e->word_slot[slot]) != 0; slot = (slot + 1) & mask) {
        const uint32_t *rec = e->words + (uint32_t)v - 1;
        if (v >> 32 != h >> 32 || rec[REC_LEN] != len)
            continue;
        /* the first 8 bytes at once (a record has 8 after its text's start: a step at least) */
        uint64_t a = nmt_le64((const unsigned char *)(rec + REC_TEXT)), b = nmt_le64(w);
        if (len < 8 ? low_bytes(a ^ b, len) == 0 : a == b && memcmp(rec + REC_TEXT + 2, w + 8, len - 8) == 0) {
            *found = 1;
            return slot;
        }
    }
    *found = 0;
    return slot;
}

/* The search of the N steps ST of a word of LEN bytes with exact sums from 0 (in double): its best
 * path to LEN into PATH (its pieces in order; their count returned), the smallest margin at a
 * character start in *M and the largest magnitude of a candidate's sum in *R (M -1 when the path
 * cannot stand for the search: a score not finite, a character start without a candidate). */
static uint32_t word_path(const struct spm_model *m, const struct spm_step *st, uint32_t n, size_t len,
                          struct spm_step *path, double *margin, double *rmax)
{
    double top[SPM_CACHE_WORD_BYTES + 1], second[SPM_CACHE_WORD_BYTES + 1];
    int32_t win[SPM_CACHE_WORD_BYTES + 1]; /* the step of the best candidate, -1 none */
    const float unk_score = m->min_score - 10.0f;
    double mg = INFINITY, r = 0;
    for (size_t i = 0; i <= len; i++)
        win[i] = -1, top[i] = second[i] = -INFINITY;
    top[0] = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (st[i].s && win[st[i].s] < 0) /* no candidate reached the start */
            mg = -1;
        double c = top[st[i].s] + (st[i].id == (uint32_t)m->unk ? (double)unk_score : (double)m->score[st[i].id]);
        if (!(c > -INFINITY && c < INFINITY))
            mg = -1;
        else if ((c < 0 ? -c : c) > r)
            r = c < 0 ? -c : c;
        size_t e = st[i].e;
        if (win[e] < 0) {
            top[e] = c, win[e] = (int32_t)i;
        } else if (c > top[e]) {
            second[e] = top[e];
            top[e] = c, win[e] = (int32_t)i;
        } else if (c > second[e]) {
            second[e] = c; /* (c == top[e]: a tie, margin 0) */
        }
    }
    /* the character starts are the steps' starts and LEN */
    for (uint32_t i = 0; i <= n; i++) {
        size_t at = i < n ? st[i].s : len;
        if (at && (i == 0 || st[i - 1].s != at) && !(top[at] - second[at] >= mg))
            mg = top[at] - second[at];
    }
    uint32_t np = 0;
    for (size_t e = len; e > 0 && win[e] >= 0; e = st[win[e]].s)
        np++;
    uint32_t k = np;
    for (size_t e = len; e > 0 && win[e] >= 0; e = st[win[e]].s)
        path[--k] = st[win[e]];
    if (win[len] < 0 || !(mg == mg))
        mg = -1;
    *margin = mg, *rmax = r;
    return np;
}

/* Adds to E's cache the record of word W (LEN <= SPM_CACHE_WORD_BYTES bytes, hash H): the steps of
 * viterbi_direct over it, in its order, and its exact best path (spm_model.unigram_words: no piece
 * spans the word's end). Returns the record's offset in E->words, or -1 with the error set. */
static int64_t word_add(struct spm_encoder *e, const unsigned char *w, size_t len, uint64_t h)
{
    const struct spm_model *m = e->m;
    if (e->nwords + 1 > e->nword_slot / 2) { /* twice the slots */
        size_t n = e->nword_slot ? 2 * e->nword_slot : 1024;
        uint64_t *t = nmt_calloc(n, sizeof *t);
        if (!t)
            return -1;
        for (size_t i = 0; i < e->nword_slot; i++)
            if (e->word_slot[i]) {
                size_t j = (size_t)(e->word_slot[i] >> 32) & (n - 1);
                while (t[j])
                    j = (j + 1) & (n - 1);
                t[j] = e->word_slot[i];
            }
        free(e->word_slot);
        e->word_slot = t;
        e->nword_slot = n;
    }
    /* the steps first, at the end of the room, then moved behind the path */
    size_t room = word_room(len), maxsteps = len * (len + 3) / 2;
    if (NMT_GROW(e->words, e->words_cap, e->words_len + room) < 0)
        return -1;
    uint32_t *rec = e->words + e->words_len;
    struct spm_step *st = (struct spm_step *)(rec + room - maxsteps), *p = st;
    for (size_t start = 0; start < len;) {
        struct piece_walk pw;
        size_t end;
        int32_t id;
        piece_walk_init(&pw, m, w, len, start);
        while (piece_walk_next(&pw, &end, &id))
            *p++ = (struct spm_step){(uint8_t)start, (uint8_t)end, (uint16_t)(id >= 0 ? id : m->unk)};
        start = pw.char_end;
    }
    uint32_t nstep = (uint32_t)(p - st);
    struct spm_step *path = (struct spm_step *)(rec + REC_TEXT + (len + 3) / 4);
    double margin, rmax;
    uint32_t npath = word_path(m, st, nstep, len, path, &margin, &rmax);
    memmove(path + npath, st, nstep * sizeof *st);
    rec[REC_LEN] = (uint32_t)len, rec[REC_NSTEP] = nstep, rec[REC_NPATH] = npath, rec[3] = 0;
    memcpy(rec + REC_M, &margin, sizeof margin);
    memcpy(rec + REC_R, &rmax, sizeof rmax);
    if (len % 4)
        rec[REC_TEXT + len / 4] = 0; /* the padding */
    memcpy(rec + REC_TEXT, w, len);
    size_t off = e->words_len;
    e->words_len += REC_TEXT + (len + 3) / 4 + npath + nstep;
    int found;
    size_t slot = word_probe(e, w, len, h, &found);
    e->word_slot[slot] = (h >> 32) << 32 | (uint64_t)(off + 1);
    e->nwords++;
    return (int64_t)off;
}

/* Tries piece ST (a step or a path's piece) at the word from FROM as viterbi_direct does. */
static inline void try_step(const struct spm_step *st, const float *score, uint32_t unk, float unk_score,
                            size_t from, struct best_node *bw)
{
    const float here = bw[st->s].score;
    struct best_node *b = &bw[st->e];
    if (st->id != unk) {
        /* in double, compared with the float kept, as spm (its score is a double there) */
        double cand = (double)score[st->id] + here;
        if (b->start < 0 || cand > b->score)
            *b = (struct best_node){(float)cand, (int32_t)(from + st->s), st->id};
    } else {
        float cand = unk_score + here;
        if (b->start < 0 || cand > b->score)
            *b = (struct best_node){cand, (int32_t)(from + st->s), unk};
    }
}

/* The search over the word at FROM of the normalised line (best[FROM] final, the word's positions
 * not yet cleared) from its record REC: its path's pieces where the margin allows (each the one
 * candidate the search keeps at its end, so set as the search leaves it), else its steps (see above). */
static void viterbi_record(const struct spm_model *m, const uint32_t *rec, size_t from, struct best_node *best)
{
    const uint32_t unk = (uint32_t)m->unk;
    const float unk_score = m->min_score - 10.0f, *score = m->score;
    struct best_node *bw = best + from;
    double margin, rmax;
    memcpy(&margin, rec + REC_M, sizeof margin);
    memcpy(&rmax, rec + REC_R, sizeof rmax);
    double u = (fabs((double)bw[0].score) + rmax) * 0x1p-22 + 0x1p-140;
    if (margin > (rec[REC_LEN] + 3) * u && u < 0x1p100) {
        for (const struct spm_step *st = rec_path(rec), *end = st + rec[REC_NPATH]; st < end; st++) {
            const float here = bw[st->s].score;
            if (st->id != unk)
                bw[st->e] = (struct best_node){(float)((double)score[st->id] + here), (int32_t)(from + st->s), st->id};
            else
                bw[st->e] = (struct best_node){unk_score + here, (int32_t)(from + st->s), unk};
        }
        return;
    }
    lattice_clear(best, from, from + rec[REC_LEN]);
    for (const struct spm_step *st = rec_steps(rec), *end = st + rec[REC_NSTEP]; st < end; st++)
        try_step(st, score, unk, unk_score, from, bw);
}

/* Splits the normalised line T (SIZE bytes) into E's line words, each from one character U+2581 to
 * the next as spm's search meets the characters (one_char_len's steps), hashed; their count in *NW.
 * 0, or -1 with the error set. */
static int line_split(struct spm_encoder *e, const unsigned char *t, size_t size, size_t *nw)
{
    size_t n = 0, word = 0;
    for (size_t off = 0;;) {
        /* ASCII (one byte a character) 8 bytes at a time */
        while (off + 8 <= size) {
            uint64_t x = nmt_le64(t + off) & 0x8080808080808080ULL;
            if (!x) {
                off += 8;
                continue;
            }
            off += (size_t)__builtin_ctzll(x) / 8;
            break;
        }
        while (off < size && t[off] < 0x80)
            off++;
        int boundary = off == size || (off > word && size - off >= 3 && t[off] == 0xE2 && t[off + 1] == 0x96 &&
                                       t[off + 2] == 0x81);
        if (boundary) {
            if (NMT_GROW(*(struct line_word **)&e->line_words, e->line_words_cap, n + 1) < 0)
                return -1;
            struct line_word *lw = (struct line_word *)e->line_words + n++;
            lw->from = (uint32_t)word, lw->to = (uint32_t)off;
            lw->hash = off - word <= SPM_CACHE_WORD_BYTES ? word_hash(t + word, off - word) : 0;
            lw->rec = -1;
            if (e->nword_slot && off - word <= SPM_CACHE_WORD_BYTES)
                __builtin_prefetch(&e->word_slot[(size_t)(lw->hash >> 32) & (e->nword_slot - 1)]);
            word = off;
        }
        if (off == size)
            break;
        size_t l = one_char_len((const char *)t + off);
        off += l < size - off ? l : size - off;
    }
    *nw = n;
    return 0;
}

/* The line's search word by word through E's cache (spm_model.unigram_words). 0, or -1 with the error set. */
static int viterbi_words(struct spm_encoder *e, const unsigned char *t, size_t size, struct best_node *best)
{
    const struct spm_model *m = e->m;
    size_t nw, room = 0;
    if (line_split(e, t, size, &nw) < 0)
        return -1;
    struct line_word *lw = e->line_words;
    for (size_t i = 0; i < nw; i++)
        if (lw[i].to - lw[i].from <= SPM_CACHE_WORD_BYTES)
            room += word_room(lw[i].to - lw[i].from);
    if (e->nwords + nw > e->words_max || e->words_len + room > e->units_max)
        words_forget(e); /* start afresh */
    for (size_t i = 0; i < nw; i++) {
        size_t len = lw[i].to - lw[i].from;
        const unsigned char *w = t + lw[i].from;
        if (len > SPM_CACHE_WORD_BYTES)
            continue;
        int found = 0;
        size_t slot = e->nword_slot ? word_probe(e, w, len, lw[i].hash, &found) : 0;
        if (found)
            lw[i].rec = (int64_t)(uint32_t)e->word_slot[slot] - 1;
        else if (e->nwords < e->words_max && e->words_len + word_room(len) <= e->units_max &&
                 (lw[i].rec = word_add(e, w, len, lw[i].hash)) < 0)
            return -1;
        if (lw[i].rec >= 0)
            __builtin_prefetch(e->words + lw[i].rec + REC_M);
    }
    for (size_t i = 0; i < nw; i++) {
        if (lw[i].rec >= 0) {
            viterbi_record(m, e->words + lw[i].rec, lw[i].from, best);
        } else {
            lattice_clear(best, lw[i].from, lw[i].to);
            viterbi_direct(m, t, size, lw[i].from, lw[i].to, best);
        }
    }
    return 0;
}

/* Unigram: spm's EncodeOptimized, Viterbi over the pieces' scores on the fly, into E's raw
 * pieces (*N of them, in order). Where no piece spans a word's start (spm_model.unigram_words) the
 * line is searched word by word, each word's steps cached: the same steps in the same order, so the
 * same float sums and ties as spm's search of the whole line. */
static int encode_unigram(struct spm_encoder *e, uint32_t *nraw)
{
    const struct spm_model *m = e->m;
    const unsigned char *t = e->norm.data;
    const size_t size = e->norm.len;
    if (NMT_GROW(*(struct best_node **)&e->lattice, e->lattice_cap, size + 1) < 0 ||
        NMT_GROW(e->raw, e->raw_cap, size) < 0 || NMT_GROW(e->raw_end, e->raw_end_cap, size) < 0)
        return -1;
    struct best_node *best = e->lattice;
    best[0] = (struct best_node){0, -1, 0};
    if (!m->unigram_words) {
        lattice_clear(best, 0, size);
        viterbi_direct(m, t, size, 0, size, best);
    } else if (viterbi_words(e, t, size, best) < 0) {
        return -1;
    }
    /* backtrack: count the pieces, then write them from the last */
    uint32_t n = 0;
    for (size_t end = size; end > 0; end = (size_t)best[end].start)
        n++;
    uint32_t i = n;
    for (size_t end = size; end > 0; end = (size_t)best[end].start) {
        e->raw[--i] = best[end].id;
        e->raw_end[i] = (uint32_t)end;
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

/* Grows *IDS (capacity *CAP) to hold NEED ids. 0, or -1 with the error set. */
static int reserve_ids(uint32_t **ids, uint32_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap;
    if (NMT_GROW(*ids, c, need) < 0)
        return -1;
    *cap = c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
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
     * them as one (a word model keeps each unknown word, as Marian's vocabularies do); at most
     * one id a byte of the normalised line */
    if (reserve_ids(ids, cap, m->byte_fallback && e->norm.len > nraw ? e->norm.len : nraw) < 0)
        return -1;
    uint32_t *out = *ids, k = 0;
    const uint32_t *to_nmt = m->to_nmt;
    const uint32_t unk_id = (uint32_t)m->unk;
    int prev_unk = 0;
    for (uint32_t i = 0, start = 0; i < nraw; start = e->raw_end[i++]) {
        uint32_t id = e->raw[i];
        int unk = id == unk_id;
        if (unk && m->byte_fallback) {
            for (uint32_t b = start; b < e->raw_end[i]; b++)
                out[k++] = to_nmt[m->byte_piece[e->norm.data[b]]];
        } else if (!(unk && prev_unk && m->type != SPM_WORD)) {
            out[k++] = to_nmt[id];
        }
        prev_unk = unk;
    }
    *n = k;
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
