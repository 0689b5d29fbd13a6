/* spm_charsmap.c: building the precompiled character map of a SentencePiece normaliser (see spm.h,
 * formats/sentencepiece.md): the NFKC rules as spm_train's builder.cc derives them (each character's
 * NFKC, then every sequence that decomposes as a character does, the rules that shorter ones already
 * give dropped), from utf8proc's NFKC instead of ICU's, the nmt_nfkc additions, and the Darts
 * double-array trie with its replacement strings, laid out as spm_encode reads them, nodes of the same
 * subtree sharing their children as in Darts-clone's DAWG. */
#include "text/spm.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/u64map.h"
#include "base/utf8.h"
#include "base/util.h"

#define MAX_RULES 1000000
#define SEQ_MAX 64 /* longest decomposition handled (code points) */
#define DA_WINDOW 1024 /* free slots searched behind the end of the trie */

/* The rules: key and replacement as code points, in a strtab of their int32 arrays. */
struct rules {
    struct strtab key;         /* (n) key code points, 4 bytes each */
    struct strtab val;         /* replacement code point strings */
    uint32_t *val_of;          /* (key.n) replacement id, UINT32_MAX when erased */
    size_t cap;
};

static int rules_set(struct rules *r, const int32_t *k, size_t nk, const int32_t *v, size_t nv)
{
    int64_t id = strtab_intern(&r->key, k, nk * 4, NULL), vid = strtab_intern(&r->val, v, nv * 4, NULL);
    if (id < 0 || vid < 0 || NMT_GROW(r->val_of, r->cap, r->key.n) < 0)
        return -1;
    if (r->key.n > MAX_RULES)
        return nmt_seterr("character map: over %u rules", MAX_RULES);
    r->val_of[id] = (uint32_t)vid;
    return 0;
}

static void rules_free(struct rules *r)
{
    strtab_free(&r->key);
    strtab_free(&r->val);
    free(r->val_of);
}

/* NFKC (COMPOSE) or NFKD of the N code points CP into OUT (at most SEQ_MAX): their count, or -1. */
static int normalize_seq(const int32_t *cp, size_t n, int compose, int32_t *out)
{
    unsigned char s[SEQ_MAX * 4];
    size_t len = 0;
    for (size_t i = 0; i < n && len + 4 <= sizeof s; i++)
        len += (size_t)utf8proc_encode_char(cp[i], s + len);
    utf8proc_option_t o = UTF8PROC_STABLE | UTF8PROC_COMPAT | (compose ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE);
    utf8proc_ssize_t k = utf8proc_decompose(s, (utf8proc_ssize_t)len, out, SEQ_MAX, o);
    if (k < 0 || k > SEQ_MAX)
        return -1;
    if (compose)
        k = utf8proc_normalize_utf32(out, k, o);
    return (int)k;
}

static int same_seq(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    return na == nb && memcmp(a, b, na * 4) == 0;
}

/* (decomposition, original) pairs: the characters whose NFKD is one character D. */
struct orig {
    int32_t d, cp;
};

static int orig_cmp(const void *a, const void *b)
{
    const struct orig *x = a, *y = b;
    return x->d != y->d ? (x->d > y->d) - (x->d < y->d) : (x->cp > y->cp) - (x->cp < y->cp);
}

/* The character map's rules as spm's BuildMapInternal makes them with NFKC: each character to its
 * NFKC when that differs; then each sequence that decomposes (NFKD) as some character does, written
 * with any characters of the same one-character decompositions, to its NFKC. 0, or -1. */
static int build_nfkc(struct rules *r)
{
    struct orig *o = NULL;
    size_t no = 0, ocap = 0;
    struct strtab dec;
    strtab_init(&dec);
    int32_t out[SEQ_MAX], seq[SEQ_MAX], nfkc[SEQ_MAX];
    int rc = 0;
    for (int32_t cp = 1; cp <= 0x10FFFF && rc == 0; cp++) {
        if ((cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0xFDD0 && cp <= 0xFDEF) || (cp & 0xFFFE) == 0xFFFE ||
            utf8proc_category(cp) == UTF8PROC_CATEGORY_CN)
            continue; /* not a character, or unassigned: its own NFKC and NFKD */
        int n = normalize_seq(&cp, 1, 1, out);
        if (n < 0)
            rc = nmt_seterr("character map: U+%04X does not normalise", (unsigned)cp);
        else if (!same_seq(out, (size_t)n, &cp, 1))
            rc = rules_set(r, &cp, 1, out, (size_t)n);
        if (rc == 0 && (n = normalize_seq(&cp, 1, 0, out)) < 0)
            rc = nmt_seterr("character map: U+%04X does not decompose", (unsigned)cp);
        else if (rc == 0 && n == 1 && NMT_GROW(o, ocap, no + 1) == 0)
            o[no++] = (struct orig){out[0], cp};
        else if (rc == 0 && n == 1)
            rc = -1;
        else if (rc == 0 && strtab_intern(&dec, out, (size_t)n * 4, NULL) < 0)
            rc = -1;
    }
    if (rc == 0)
        qsort(o, no, sizeof *o, orig_cmp);
    for (uint32_t id = 0; rc == 0 && id < dec.n; id++) {
        uint32_t len;
        const char *s = strtab_get(&dec, id, &len);
        size_t n = len / 4, lo[SEQ_MAX], hi[SEQ_MAX], at[SEQ_MAX];
        memcpy(seq, s, len);
        int nk = normalize_seq(seq, n, 1, nfkc);
        if (nk < 0 || same_seq(nfkc, (size_t)nk, seq, n))
            continue;
        int found = 1;
        for (size_t i = 0; i < n && found; i++) { /* the originals of each character: [lo, hi) of o */
            size_t a = 0, b = no;
            while (a < b) {
                size_t m = (a + b) / 2;
                if (o[m].d < seq[i])
                    a = m + 1;
                else
                    b = m;
            }
            lo[i] = at[i] = a;
            for (hi[i] = a; hi[i] < no && o[hi[i]].d == seq[i]; hi[i]++)
                ;
            found = hi[i] > lo[i];
        }
        while (found && rc == 0) { /* every combination, the last position fastest */
            for (size_t i = 0; i < n; i++)
                out[i] = o[at[i]].cp;
            if (!same_seq(out, n, nfkc, (size_t)nk))
                rc = rules_set(r, out, n, nfkc, (size_t)nk);
            size_t i = n;
            while (i > 0 && ++at[i - 1] == hi[i - 1])
                at[i - 1] = lo[i - 1], i--;
            found = i > 0;
        }
    }
    free(o);
    strtab_free(&dec);
    return rc;
}

/* Normalises the N code points SRC with R's rules of at most MAX_LEN characters, longest first,
 * into OUT (capacity CAP): the count, or -1 when it does not fit. */
static int apply_rules(const struct rules *r, const int32_t *src, size_t n, size_t max_len, int32_t *out, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t len = n - i < max_len ? n - i : max_len;
        int64_t id = -1;
        for (; len > 0; len--)
            if ((id = strtab_find(&r->key, src + i, len * 4)) >= 0 && r->val_of[id] != UINT32_MAX)
                break;
        if (len == 0) {
            if (k >= cap)
                return -1;
            out[k++] = src[i++];
            continue;
        }
        uint32_t vl;
        const char *v = strtab_get(&r->val, r->val_of[id], &vl);
        if (k + vl / 4 > cap)
            return -1;
        memcpy(out + k, v, vl);
        k += vl / 4;
        i += len;
    }
    return (int)k;
}

/* OUT (empty) gets R's rules less those the shorter ones already give (RemoveRedundantMap). */
static int remove_redundant(const struct rules *r, struct rules *out)
{
    size_t max_len = 0;
    for (uint32_t id = 0; id < r->key.n; id++)
        if (r->val_of[id] != UINT32_MAX && r->key.len[id] / 4 > max_len)
            max_len = r->key.len[id] / 4;
    int32_t norm[SEQ_MAX * 4];
    int rc = 0;
    for (size_t len = 1; len <= max_len && rc == 0; len++) {
        for (uint32_t id = 0; id < r->key.n && rc == 0; id++) {
            if (r->val_of[id] == UINT32_MAX || r->key.len[id] / 4 != len)
                continue;
            uint32_t kl, vl;
            const int32_t *k = (const int32_t *)(const void *)strtab_get(&r->key, id, &kl);
            const int32_t *v = (const int32_t *)(const void *)strtab_get(&r->val, r->val_of[id], &vl);
            int n = len == 1 ? -1 : apply_rules(out, k, len, len - 1, norm, sizeof norm / sizeof norm[0]);
            if (n < 0 || !same_seq(norm, (size_t)n, v, vl / 4))
                rc = rules_set(out, k, len, v, vl / 4);
        }
    }
    return rc;
}

/* spm's MergeNmtMap: more spaces, control characters dropped, the full-width tilde kept. */
static int merge_nmt(struct rules *r)
{
    static const int32_t space[] = {0x09, 0x0A, 0x0C, 0x0D, 0x1680, 0x200B, 0x200E, 0x200F,
                                    0x2028, 0x2029, 0x2581, 0xFEFF, 0xFFFD, 0x200C};
    static const int32_t drop[] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x0B, 0x0E, 0x0F,
                                   0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1A,
                                   0x1B, 0x1C, 0x1D, 0x1E, 0x1F, 0x7F, 0x8F, 0x9F};
    const int32_t sp = 0x20, tilde = 0xFF5E;
    int rc = 0;
    for (size_t i = 0; i < sizeof space / sizeof space[0] && rc == 0; i++)
        rc = rules_set(r, &space[i], 1, &sp, 1);
    for (size_t i = 0; i < sizeof drop / sizeof drop[0] && rc == 0; i++)
        rc = rules_set(r, &drop[i], 1, NULL, 0);
    int64_t id = strtab_find(&r->key, &tilde, 4);
    if (id >= 0)
        r->val_of[id] = UINT32_MAX;
    return rc;
}

/* ---- the double-array trie (Darts-clone's units, as spm.c reads them) ---- */

struct da_key {
    const unsigned char *s;
    uint32_t len, value;
};

static int da_key_cmp(const void *a, const void *b)
{
    const struct da_key *x = a, *y = b;
    int c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* A placed node's subtree: its keys [lo, hi) below DEPTH and its children's base, so that a node of
 * the same subtree reuses the base (Darts-clone shares them too: a DAWG). */
struct da_shape {
    uint32_t lo, hi, depth, base;
};

struct da {
    uint32_t *unit;
    uint8_t *used, *base_used;
    size_t cap, size, cursor;
    struct u64map seen;        /* subtree hash -> index in shape */
    struct da_shape *shape;
    size_t nshape, shape_cap;
};

/* The hash of the subtree of keys [LO, HI) below DEPTH: their suffixes and values. */
static uint64_t da_hash(const struct da_key *k, size_t lo, size_t hi, uint32_t depth)
{
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = lo; i < hi; i++) {
        uint32_t tail[2] = {k[i].len - depth, k[i].value};
        h = nmt_fnv1a(h, tail, sizeof tail);
        h = nmt_fnv1a(h, k[i].s + depth, k[i].len - depth);
    }
    return h & ~(1ULL << 63); /* never U64MAP_EMPTY */
}

/* Whether the subtrees [LO, HI) below DEPTH and SH's hold the same suffixes with the same values. */
static int da_same(const struct da_key *k, size_t lo, size_t hi, uint32_t depth, const struct da_shape *sh)
{
    if (hi - lo != sh->hi - sh->lo)
        return 0;
    for (size_t i = 0; i < hi - lo; i++) {
        const struct da_key *a = &k[lo + i], *b = &k[sh->lo + i];
        if (a->len - depth != b->len - sh->depth || a->value != b->value ||
            memcmp(a->s + depth, b->s + sh->depth, a->len - depth) != 0)
            return 0;
    }
    return 1;
}

static int da_room(struct da *d, size_t need)
{
    if (need <= d->cap)
        return 0;
    size_t c = d->cap, c2 = d->cap, c3 = d->cap;
    if (need > (1u << 21))
        return nmt_seterr("character map: trie too large");
    if (NMT_GROW(d->unit, c, need) < 0 || NMT_GROW(d->used, c2, need) < 0 || NMT_GROW(d->base_used, c3, need) < 0)
        return -1;
    memset(d->unit + d->cap, 0, (c - d->cap) * sizeof *d->unit);
    memset(d->used + d->cap, 0, c - d->cap);
    memset(d->base_used + d->cap, 0, c - d->cap);
    d->cap = c < c2 ? (c < c3 ? c : c3) : (c2 < c3 ? c2 : c3);
    return 0;
}

/* Places the node at slot P over keys [LO, HI) sharing DEPTH bytes: its leaf value and children at
 * base B (slot B ^ label), B unused and its whole block of 256 inside the array. 0, or -1. */
static int da_place(struct da *d, const struct da_key *k, uint32_t p, size_t lo, size_t hi, uint32_t depth,
                    uint32_t **stack, size_t *nstack, size_t *scap)
{
    int leaf = lo < hi && k[lo].len == depth;
    uint64_t h = da_hash(k, lo, hi, depth), *seen = u64map_get(&d->seen, h);
    if (!seen)
        return -1;
    if (*seen && da_same(k, lo, hi, depth, &d->shape[*seen - 1])) { /* the same subtree: share its base */
        d->unit[p] |= (p ^ d->shape[*seen - 1].base) << 10 | (uint32_t)leaf << 8;
        return 0;
    }
    size_t shape_lo = lo;
    uint32_t value = leaf ? k[lo++].value : 0;
    unsigned char label[256];
    size_t from[257], n = 0;
    for (size_t i = lo; i < hi; i++)
        if (n == 0 || k[i].s[depth] != label[n - 1])
            from[n] = i, label[n++] = k[i].s[depth];
    from[n] = hi;
    uint32_t first = n ? label[0] : 0, b;
    while (d->cursor < d->cap && d->used[d->cursor])
        d->cursor++;
    if (d->cursor + DA_WINDOW < d->size) /* holes further back are given up: a bounded search */
        d->cursor = d->size - DA_WINDOW;
    for (size_t s = d->cursor > 256 ? d->cursor : 256;; s++) {
        if (da_room(d, (s | 255) + 257) < 0)
            return -1;
        b = (uint32_t)s ^ first;
        if (d->used[s] || b < 256 || d->base_used[b] || (leaf && d->used[b]))
            continue;
        size_t i = 0;
        while (i < n && !d->used[b ^ label[i]])
            i++;
        if (i == n)
            break;
    }
    uint32_t off = p ^ b;
    d->base_used[b] = 1;
    if (!*seen) { /* the first subtree of its hash is the one shared */
        if (NMT_GROW(d->shape, d->shape_cap, d->nshape + 1) < 0)
            return -1;
        d->shape[d->nshape++] = (struct da_shape){(uint32_t)shape_lo, (uint32_t)hi, depth, b};
        *(u64map_find(&d->seen, h)) = d->nshape;
    }
    d->unit[p] |= off << 10 | (uint32_t)leaf << 8;
    if (leaf)
        d->used[b] = 1, d->unit[b] = value | 1u << 31;
    if (NMT_GROW(*stack, *scap, *nstack + 4 * n) < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = b ^ label[i];
        d->used[c] = 1;
        d->unit[c] = label[i];
        (*stack)[(*nstack)++] = c, (*stack)[(*nstack)++] = (uint32_t)from[i];
        (*stack)[(*nstack)++] = (uint32_t)from[i + 1], (*stack)[(*nstack)++] = depth + 1;
    }
    if ((b | 255) + 1 > d->size)
        d->size = (b | 255) + 1;
    return 0;
}

/* Appends to OUT the trie of the N sorted keys K: its units, little-endian. 0, or -1. */
static int da_build(const struct da_key *k, size_t n, struct nmt_buf *out, uint32_t *nunit)
{
    struct da d = {0};
    u64map_init(&d.seen);
    uint32_t *stack = NULL;
    size_t nstack = 0, scap = 0;
    int rc = da_room(&d, 512);
    if (rc == 0) {
        d.used[0] = 1;
        d.size = 256;
        rc = da_place(&d, k, 0, 0, n, 0, &stack, &nstack, &scap);
    }
    while (rc == 0 && nstack) {
        nstack -= 4;
        uint32_t *j = stack + nstack;
        rc = da_place(&d, k, j[0], j[1], j[2], j[3], &stack, &nstack, &scap);
    }
    for (size_t i = 0; rc == 0 && i < d.size; i++)
        rc = nmt_buf_put32(out, d.unit[i]);
    *nunit = (uint32_t)d.size;
    free(d.unit);
    free(d.used);
    free(d.base_used);
    free(d.shape);
    u64map_free(&d.seen);
    free(stack);
    return rc;
}

/* ---- the blob ---- */

struct val_sort {
    uint32_t id, off, len;     /* replacement id; its UTF-8 at OFF, LEN bytes of the scratch */
    const unsigned char *s;
};

static int val_sort_cmp(const void *a, const void *b)
{
    const struct val_sort *x = a, *y = b;
    int c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static int put_utf8(struct nmt_buf *b, const char *cps, uint32_t len)
{
    for (uint32_t i = 0; i < len; i += 4) {
        int32_t cp;
        memcpy(&cp, cps + i, 4);
        if (utf8_put(b, cp) < 0)
            return -1;
    }
    return 0;
}

/* Appends R's live rules to OUT as spm's CompileCharsMap lays them out: the trie's size in bytes
 * (u32le), its units, then the distinct replacements in order, each NUL-terminated. 0, or -1. */
static int compile(const struct rules *r, struct nmt_buf *out)
{
    struct nmt_buf u = {0}, norm = {0}, trie = {0};
    struct val_sort *v = nmt_calloc((size_t)r->val.n + 1, sizeof *v);
    uint32_t *val_off = nmt_calloc((size_t)r->val.n + 1, sizeof *val_off), *key_off = NULL;
    struct da_key *k = nmt_calloc((size_t)r->key.n + 1, sizeof *k);
    uint8_t *live = nmt_calloc((size_t)r->val.n + 1, 1);
    size_t nv = 0, nk = 0, nunit_bytes;
    uint32_t nunit = 0;
    int rc = v && val_off && k && live ? 0 : -1;
    if (rc == 0 && !(key_off = nmt_calloc((size_t)r->key.n + 1, sizeof *key_off)))
        rc = -1;
    for (uint32_t id = 0; rc == 0 && id < r->key.n; id++)
        if (r->val_of[id] != UINT32_MAX)
            live[r->val_of[id]] = 1;
    for (uint32_t id = 0; rc == 0 && id < r->val.n; id++) {
        if (!live[id])
            continue;
        uint32_t len;
        const char *s = strtab_get(&r->val, id, &len);
        v[nv] = (struct val_sort){id, (uint32_t)u.len, 0, NULL};
        rc = put_utf8(&u, s, len);
        v[nv].len = (uint32_t)u.len - v[nv].off;
        nv++;
    }
    for (size_t i = 0; i < nv; i++)
        v[i].s = u.data + v[i].off;
    if (rc == 0)
        qsort(v, nv, sizeof *v, val_sort_cmp);
    for (size_t i = 0; rc == 0 && i < nv; i++) {
        val_off[v[i].id] = (uint32_t)norm.len;
        rc = nmt_buf_append(&norm, v[i].s, v[i].len) < 0 || nmt_buf_append(&norm, "", 1) < 0 ? -1 : 0;
    }
    u.len = 0;
    for (uint32_t id = 0; rc == 0 && id < r->key.n; id++) {
        if (r->val_of[id] == UINT32_MAX)
            continue;
        uint32_t len;
        const char *s = strtab_get(&r->key, id, &len);
        key_off[nk] = (uint32_t)u.len;
        rc = put_utf8(&u, s, len);
        k[nk] = (struct da_key){NULL, (uint32_t)u.len - key_off[nk], val_off[r->val_of[id]]};
        nk++;
    }
    for (size_t i = 0; i < nk; i++)
        k[i].s = u.data + key_off[i];
    if (rc == 0) {
        qsort(k, nk, sizeof *k, da_key_cmp);
        rc = da_build(k, nk, &trie, &nunit);
    }
    nunit_bytes = (size_t)nunit * 4;
    if (rc == 0 && (nmt_buf_put32(out, (uint32_t)nunit_bytes) < 0 || nmt_buf_append(out, trie.data, trie.len) < 0 ||
                    nmt_buf_append(out, norm.data, norm.len) < 0))
        rc = -1;
    nmt_buf_free(&u);
    nmt_buf_free(&norm);
    nmt_buf_free(&trie);
    free(v);
    free(val_off);
    free(key_off);
    free(k);
    free(live);
    return rc;
}

static void rules_init(struct rules *r)
{
    memset(r, 0, sizeof *r);
    strtab_init(&r->key);
    strtab_init(&r->val);
}

int spm_charsmap_nfkc(struct nmt_buf *out, int nmt)
{
    struct rules a, b, c;
    rules_init(&a), rules_init(&b), rules_init(&c);
    int rc = build_nfkc(&a);
    rc = rc ? rc : remove_redundant(&a, &b);
    if (nmt) {
        rc = rc ? rc : merge_nmt(&b);
        rc = rc ? rc : remove_redundant(&b, &c);
    }
    rc = rc ? rc : compile(nmt ? &c : &b, out);
    rules_free(&a), rules_free(&b), rules_free(&c);
    return rc;
}
