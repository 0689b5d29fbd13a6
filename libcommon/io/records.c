/* records.c: typed record payloads (see records.h and formats/stream.md §6). */
#include "io/records.h"

#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "base/util.h"

static int put_prefix(struct nmt_buf *out, uint64_t index, unsigned nsides)
{
    unsigned char p[12];
    nmt_put64(p, index);
    p[8] = (unsigned char)nsides;
    p[9] = p[10] = p[11] = 0;
    return nmt_buf_append(out, p, sizeof p);
}

static int get_prefix(const char *what, const unsigned char *p, size_t len, uint64_t *index, unsigned *nsides)
{
    if (len < 12)
        return nmt_seterr("%s record: %zu bytes is too short", what, len);
    *index = nmt_le64(p);
    *nsides = p[8];
    if (p[9] || p[10] || p[11])
        return nmt_seterr("%s record: reserved bytes are not zero", what);
    if (*nsides != 1 && *nsides != 2)
        return nmt_seterr("%s record: %u sides (expected 1 or 2)", what, *nsides);
    return 0;
}

int tok_record_encode(struct nmt_buf *out, uint64_t index, unsigned nsides, const uint32_t *ntok,
                      const char *const *const *tok, const uint32_t *const *len)
{
    if (nsides != 1 && nsides != 2)
        return nmt_seterr("tok record: %u sides (expected 1 or 2)", nsides);
    if (put_prefix(out, index, nsides) < 0)
        return -1;
    for (unsigned s = 0; s < nsides; s++) {
        if (nmt_buf_put32(out, ntok[s]) < 0)
            return -1;
        for (uint32_t i = 0; i < ntok[s]; i++)
            if (nmt_buf_put32(out, len[s][i]) < 0 || nmt_buf_append(out, tok[s][i], len[s][i]) < 0)
                return -1;
    }
    return 0;
}

int tok_record_decode(struct tok_record *r, const unsigned char *p, size_t len)
{
    if (get_prefix("tok", p, len, &r->index, &r->nsides) < 0)
        return -1;
    size_t off = 12, used = 0;
    for (unsigned s = 0; s < r->nsides; s++) {
        if (len - off < 4)
            return nmt_seterr("tok record: truncated token count");
        uint32_t n = nmt_le32(p + off);
        off += 4;
        if (n > (len - off) / 4)
            return nmt_seterr("tok record: %u tokens cannot fit in %zu bytes", n, len - off);
        if (NMT_GROW2(r->tok_store, r->len_store, r->store_cap, used + n) < 0)
            return -1;
        /* pointers are fixed up after the loop, since the store may move */
        for (uint32_t i = 0; i < n; i++) {
            if (len - off < 4)
                return nmt_seterr("tok record: truncated token length");
            uint32_t l = nmt_le32(p + off);
            off += 4;
            if (l > len - off)
                return nmt_seterr("tok record: token of %u bytes overruns the record", l);
            size_t bad;
            if (utf8_check((const char *)p + off, l, &bad) < 0)
                return nmt_seterr("tok record: token %u of side %u is not valid UTF-8 (its byte %zu)", i + 1, s + 1,
                                  bad);
            r->tok_store[used + i] = (const char *)p + off;
            r->len_store[used + i] = l;
            off += l;
        }
        r->side[s].ntok = n;
        used += n;
    }
    if (off != len)
        return nmt_seterr("tok record: %zu trailing bytes", len - off);
    used = 0;
    for (unsigned s = 0; s < r->nsides; s++) {
        r->side[s].tok = r->tok_store + used;
        r->side[s].len = r->len_store + used;
        used += r->side[s].ntok;
    }
    return 0;
}

void tok_record_free(struct tok_record *r)
{
    free(r->tok_store);
    free(r->len_store);
    r->tok_store = NULL;
    r->len_store = NULL;
    r->store_cap = 0;
}

int ids_record_encode(struct nmt_buf *out, uint64_t index, unsigned nsides, const uint32_t *n,
                      const uint32_t *const *ids)
{
    if (nsides != 1 && nsides != 2)
        return nmt_seterr("ids record: %u sides (expected 1 or 2)", nsides);
    if (put_prefix(out, index, nsides) < 0)
        return -1;
    for (unsigned s = 0; s < nsides; s++) {
        if (nmt_buf_put32(out, n[s]) < 0 || nmt_buf_reserve(out, (size_t)n[s] * 4) < 0)
            return -1;
        for (uint32_t i = 0; i < n[s]; i++) {
            nmt_put32(out->data + out->len, ids[s][i]);
            out->len += 4;
        }
    }
    return 0;
}

int ids_record_decode(struct ids_record *r, const unsigned char *p, size_t len)
{
    if (get_prefix("ids", p, len, &r->index, &r->nsides) < 0)
        return -1;
    size_t off = 12;
    for (unsigned s = 0; s < r->nsides; s++) {
        if (len - off < 4)
            return nmt_seterr("ids record: truncated length of side %u", s + 1);
        uint32_t n = nmt_le32(p + off);
        off += 4;
        if (n > (len - off) / 4)
            return nmt_seterr("ids record: %u ids cannot fit in %zu bytes", n, len - off);
        if (n > r->cap[s]) {
            uint32_t *q = nmt_realloc(r->ids[s], (size_t)n * sizeof *q);
            if (!q)
                return -1;
            r->ids[s] = q;
            r->cap[s] = n;
        }
        for (uint32_t i = 0; i < n; i++)
            r->ids[s][i] = nmt_le32(p + off + 4 * (size_t)i);
        off += 4 * (size_t)n;
        r->n[s] = n;
    }
    if (r->nsides == 1)
        r->n[1] = 0;
    if (off != len)
        return nmt_seterr("ids record: %zu trailing bytes", len - off);
    return 0;
}

void ids_record_free(struct ids_record *r)
{
    for (int s = 0; s < 2; s++) {
        free(r->ids[s]);
        r->ids[s] = NULL;
        r->cap[s] = r->n[s] = 0;
    }
}

int batch_record_resize(struct batch_record *r, uint32_t B, uint32_t S, uint32_t T)
{
    size_t cells = (size_t)B * ((size_t)S + T);
    if (B > (1u << 24) || S > (1u << 24) || T > (1u << 24) || cells > ((size_t)1 << 28))
        return nmt_seterr("batch of %u x (%u + %u) is too large", B, S, T);
    size_t need = (size_t)B * (8 + 4 + 4) + cells * 4;
    if (need > r->cap) {
        unsigned char *p = nmt_realloc(r->store, need);
        if (!p)
            return -1;
        r->store = p;
        r->cap = need;
    }
    r->B = B;
    r->S = S;
    r->T = T;
    unsigned char *q = r->store;
    r->index = (uint64_t *)(void *)q;
    q += (size_t)B * 8;
    r->src_len = (uint32_t *)(void *)q;
    q += (size_t)B * 4;
    r->tgt_len = (uint32_t *)(void *)q;
    q += (size_t)B * 4;
    r->src = (uint32_t *)(void *)q;
    q += (size_t)B * S * 4;
    r->tgt = (uint32_t *)(void *)q;
    return 0;
}

int batch_record_encode(struct nmt_buf *out, const struct batch_record *r)
{
    size_t cells = (size_t)r->B * ((size_t)r->S + r->T);
    if (nmt_buf_reserve(out, 16 + (size_t)r->B * 16 + cells * 4) < 0)
        return -1;
    unsigned char *p = out->data + out->len;
    nmt_put32(p, r->B);
    nmt_put32(p + 4, r->S);
    nmt_put32(p + 8, r->T);
    nmt_put32(p + 12, 0);
    p += 16;
    for (uint32_t b = 0; b < r->B; b++, p += 8)
        nmt_put64(p, r->index[b]);
    for (uint32_t b = 0; b < r->B; b++, p += 4)
        nmt_put32(p, r->src_len[b]);
    for (uint32_t b = 0; b < r->B; b++, p += 4)
        nmt_put32(p, r->tgt_len[b]);
    for (size_t i = 0; i < (size_t)r->B * r->S; i++, p += 4)
        nmt_put32(p, r->src[i]);
    for (size_t i = 0; i < (size_t)r->B * r->T; i++, p += 4)
        nmt_put32(p, r->tgt[i]);
    out->len = (size_t)(p - out->data);
    return 0;
}

/* Checks row B of one side: LEN ids, the last of them EOS and none before it PAD, BOS or EOS,
 * then PAD up to COLS columns (an empty row is all PAD); 0 or -1 with the error set. */
static int check_row(const char *side, uint32_t b, const uint32_t *row, uint32_t len, uint32_t cols)
{
    if (len > 0 && row[len - 1] != NMT_EOS)
        return nmt_seterr("batch record: row %u: the %s does not end with </s> (id %u at column %u)", b, side,
                          row[len - 1], len);
    for (uint32_t i = 0; i + 1 < len; i++)
        if (row[i] == NMT_PAD || row[i] == NMT_BOS || row[i] == NMT_EOS)
            return nmt_seterr("batch record: row %u: %s id %u at column %u is a special token inside the sentence",
                              b, side, row[i], i + 1);
    for (uint32_t i = len; i < cols; i++)
        if (row[i] != NMT_PAD)
            return nmt_seterr("batch record: row %u: %s column %u past its length %u is not <pad>", b, side, i + 1,
                              len);
    return 0;
}

int batch_record_decode(struct batch_record *r, const unsigned char *p, size_t len)
{
    if (len < 16)
        return nmt_seterr("batch record: %zu bytes is too short", len);
    uint32_t B = nmt_le32(p), S = nmt_le32(p + 4), T = nmt_le32(p + 8);
    if (nmt_le32(p + 12) != 0)
        return nmt_seterr("batch record: reserved flags are not zero");
    if (B == 0 || S == 0)
        return nmt_seterr("batch record: empty batch (%u rows, %u source columns)", B, S);
    uint64_t need = 16 + (uint64_t)B * 16 + (uint64_t)B * ((uint64_t)S + T) * 4;
    if (need != len)
        return nmt_seterr("batch record: %u x (%u + %u) needs %llu bytes, record has %zu", B, S, T,
                          (unsigned long long)need, len);
    if (batch_record_resize(r, B, S, T) < 0)
        return -1;
    p += 16;
    for (uint32_t b = 0; b < B; b++, p += 8)
        r->index[b] = nmt_le64(p);
    for (uint32_t b = 0; b < B; b++, p += 4) {
        r->src_len[b] = nmt_le32(p);
        if (r->src_len[b] < 1 || r->src_len[b] > S)
            return nmt_seterr("batch record: row %u has source length %u (columns %u)", b, r->src_len[b], S);
    }
    for (uint32_t b = 0; b < B; b++, p += 4) {
        r->tgt_len[b] = nmt_le32(p);
        if (r->tgt_len[b] > T)
            return nmt_seterr("batch record: row %u has target length %u (columns %u)", b, r->tgt_len[b], T);
    }
    for (size_t i = 0; i < (size_t)B * S; i++, p += 4)
        r->src[i] = nmt_le32(p);
    for (size_t i = 0; i < (size_t)B * T; i++, p += 4)
        r->tgt[i] = nmt_le32(p);
    for (uint32_t b = 0; b < B; b++)
        if (check_row("source", b, r->src + (size_t)b * S, r->src_len[b], S) < 0 ||
            check_row("target", b, r->tgt + (size_t)b * T, r->tgt_len[b], T) < 0)
            return -1;
    return 0;
}

void batch_record_free(struct batch_record *r)
{
    free(r->store);
    memset(r, 0, sizeof *r);
}

int hyp_record_encode(struct nmt_buf *out, uint64_t index, uint32_t rank, float score, uint32_t n,
                      const uint32_t *ids)
{
    unsigned char p[20];
    uint32_t bits;
    memcpy(&bits, &score, 4);
    nmt_put64(p, index);
    nmt_put32(p + 8, rank);
    nmt_put32(p + 12, bits);
    nmt_put32(p + 16, n);
    if (nmt_buf_append(out, p, sizeof p) < 0 || nmt_buf_reserve(out, (size_t)n * 4) < 0)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        nmt_put32(out->data + out->len, ids[i]);
        out->len += 4;
    }
    return 0;
}

int hyp_record_append_alignment(struct nmt_buf *out, uint32_t npairs, const uint32_t *pairs)
{
    if (nmt_buf_reserve(out, 4 + (size_t)npairs * 8) < 0)
        return -1;
    nmt_put32(out->data + out->len, npairs);
    out->len += 4;
    for (size_t i = 0; i < 2 * (size_t)npairs; i++) {
        nmt_put32(out->data + out->len, pairs[i]);
        out->len += 4;
    }
    return 0;
}

/* Decodes the alignment section of NB bytes at P of a hyp record of N ids into R. 0 or -1. */
static int hyp_alignment_decode(struct hyp_record *r, const unsigned char *p, size_t nb, uint32_t n)
{
    uint32_t np = nb >= 4 ? nmt_le32(p) : 0;
    if (nb < 4 || (uint64_t)np * 8 != nb - 4)
        return nmt_seterr("hyp record: %zu bytes after the %u ids are not an alignment", nb, n);
    if (np > r->pairs_cap) {
        uint32_t *q = nmt_realloc(r->pairs, (size_t)np * 2 * sizeof *q);
        if (!q)
            return -1;
        r->pairs = q;
        r->pairs_cap = np;
    }
    for (size_t i = 0; i < 2 * (size_t)np; i++) {
        r->pairs[i] = nmt_le32(p + 4 + 4 * i);
        if (i % 2 && r->pairs[i] >= n)
            return nmt_seterr("hyp record: alignment pair %zu names output token %u of %u", i / 2 + 1, r->pairs[i], n);
    }
    r->npairs = np;
    r->aligned = 1;
    return 0;
}

int hyp_record_decode(struct hyp_record *r, const unsigned char *p, size_t len)
{
    if (len < 20)
        return nmt_seterr("hyp record: %zu bytes is too short", len);
    uint32_t n = nmt_le32(p + 16);
    if ((uint64_t)n * 4 > len - 20 || (len - 20 - (size_t)n * 4 > 0 && len - 20 - (size_t)n * 4 < 4))
        return nmt_seterr("hyp record: %u ids do not match %zu payload bytes", n, len - 20);
    r->index = nmt_le64(p);
    r->rank = nmt_le32(p + 8);
    uint32_t bits = nmt_le32(p + 12);
    memcpy(&r->score, &bits, 4);
    if (n > r->cap) {
        uint32_t *q = nmt_realloc(r->ids, (size_t)n * sizeof *q);
        if (!q)
            return -1;
        r->ids = q;
        r->cap = n;
    }
    for (uint32_t i = 0; i < n; i++)
        r->ids[i] = nmt_le32(p + 20 + 4 * (size_t)i);
    r->n = n;
    r->aligned = 0;
    r->npairs = 0;
    size_t rest = len - 20 - (size_t)n * 4;
    return rest ? hyp_alignment_decode(r, p + 20 + (size_t)n * 4, rest, n) : 0;
}

void hyp_record_free(struct hyp_record *r)
{
    free(r->ids);
    free(r->pairs);
    r->ids = NULL;
    r->pairs = NULL;
    r->cap = r->n = r->npairs = r->pairs_cap = 0;
    r->aligned = 0;
}
