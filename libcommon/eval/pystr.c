/* pystr.c: Python 3 string semantics on code points (see pystr.h) and the public text helpers of
 * bleu.h. Unicode properties come from utf8proc; UTF-8 goes through base/utf8. */
#include "eval/pystr.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/buf.h"
#include "base/utf8.h"
#include "base/util.h"
#include "eval/bleu.h"

/* ---- buffers ---- */
int bleu_cps_reserve(bleu_cps *b, size_t n)
{
    return NMT_GROW(b->p, b->cap, b->n + n);
}

void bleu_cps_free(bleu_cps *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

void bleu_toks_free(bleu_toks *t)
{
    free(t->start);
    free(t->len);
    t->start = t->len = NULL;
    t->n = t->cap = 0;
}


/* ---- UTF-8 ---- */

int bleu_decode(const char *str, size_t len, bleu_cps *out)
{
    const unsigned char *s = (const unsigned char *)str;
    out->n = 0;
    if (bleu_cps_reserve(out, len + 1) < 0)
        return -1;
    int32_t *o = out->p;
    size_t i = 0, n = 0;
    while (i < len) {
        if (s[i] < 0x80)
            o[n++] = s[i++];
        else
            i += (size_t)utf8_next(s + i, len - i, &o[n++]);
    }
    out->n = n;
    return 0;
}

int bleu_encode_buf(const bleu_cps *b, struct nmt_buf *out)
{
    out->len = 0;
    if (nmt_buf_reserve(out, b->n * 4 + 1) < 0) /* room for the longest encoding */
        return nmt_seterr("out of memory");
    for (size_t i = 0; i < b->n; i++) {
        if (b->p[i] < 0x80)
            out->data[out->len++] = (unsigned char)b->p[i];
        else if (utf8_put(out, b->p[i]) < 0)
            return nmt_seterr("out of memory");
    }
    return 0;
}

char *bleu_encode(const bleu_cps *b, size_t *out_len)
{
    struct nmt_buf out = {0};
    if (bleu_encode_buf(b, &out) < 0 || nmt_buf_append(&out, "", 1) < 0) {
        nmt_buf_free(&out);
        nmt_seterr("out of memory");
        return NULL;
    }
    *out_len = out.len - 1;
    return (char *)out.data;
}
/* ---- Python character classes ---- */

int bleu_isspace(int32_t cp) { return bleu_isspace_fast(cp); }

int bleu_isspace_slow(int32_t cp)
{
    if (cp > 0x10FFFF)
        return 0;
    const utf8proc_property_t *p = utf8proc_get_property(cp);
    /* Python: bidirectional class WS, B or S, or general category Zs */
    return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS
           || p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

size_t bleu_cps_rstrip(const int32_t *p, size_t n)
{
    while (n > 0 && bleu_isspace_fast(p[n - 1]))
        n--;
    return n;
}

size_t bleu_rstrip_len(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    while (len > 0) {
        size_t st = len - 1;
        while (st > 0 && (s[st] & 0xC0) == 0x80)
            st--;
        int32_t cp;
        utf8_next(s + st, len - st, &cp);
        if (cp < 0 || !bleu_isspace(cp))
            break;
        len = st;
    }
    return len;
}

static int is_cased(int32_t c)
{
    utf8proc_category_t cat = utf8proc_category(c);
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT
           || utf8proc_islower(c) || utf8proc_isupper(c);
}

static int is_case_ignorable(int32_t c)
{
    switch (c) { /* Word_Break MidLetter, MidNumLet, Single_Quote */
    case 0x27: case 0x2E: case 0x3A: case 0xB7: case 0x387: case 0x55F: case 0x5F4: case 0x2018:
    case 0x2019: case 0x2024: case 0x2027: case 0xFE13: case 0xFE52: case 0xFE55: case 0xFF07:
    case 0xFF0E: case 0xFF1A:
        return 1;
    default:
        break;
    }
    utf8proc_category_t cat = utf8proc_category(c);
    return cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_ME || cat == UTF8PROC_CATEGORY_CF
           || cat == UTF8PROC_CATEGORY_LM || cat == UTF8PROC_CATEGORY_SK;
}

/* Python's handle_capital_sigma: U+03A3 lowers to final sigma after a cased letter (skipping
 * case-ignorables) when no cased letter follows (skipping case-ignorables). */
static int32_t lower_sigma(const int32_t *p, size_t n, size_t i)
{
    size_t j = i;
    int32_t c = 0;
    int found = 0;
    while (j > 0) {
        c = p[--j];
        if (!is_case_ignorable(c)) {
            found = 1;
            break;
        }
    }
    int final = found && is_cased(c);
    if (final && i + 1 < n) {
        size_t k;
        for (k = i + 1; k < n; k++) {
            c = p[k];
            if (!is_case_ignorable(c))
                break;
        }
        final = k == n || !is_cased(c);
    }
    return final ? 0x3C2 : 0x3C3;
}

int bleu_cps_lower(const bleu_cps *in, bleu_cps *out)
{
    out->n = 0;
    if (bleu_cps_reserve(out, in->n * 2 + 1) < 0)
        return -1;
    int32_t *o = out->p;
    size_t k = 0;
    for (size_t i = 0; i < in->n; i++) {
        int32_t c = in->p[i];
        if (c < 0x80)
            o[k++] = (c >= 'A' && c <= 'Z') ? c + 32 : c;
        else if (c == 0x130) {
            o[k++] = 'i';
            o[k++] = 0x307;
        } else if (c == 0x3A3)
            o[k++] = lower_sigma(in->p, in->n, i);
        else
            o[k++] = utf8proc_tolower(c);
    }
    out->n = k;
    return 0;
}

char *bleu_lower(const char *s, size_t len, size_t *out_len)
{
    bleu_cps a = {0}, b = {0};
    char *r = NULL;
    if (bleu_decode(s, len, &a) == 0 && bleu_cps_lower(&a, &b) == 0)
        r = bleu_encode(&b, out_len);
    bleu_cps_free(&a);
    bleu_cps_free(&b);
    return r;
}

int bleu_split(const int32_t *p, size_t n, bleu_toks *t)
{
    t->n = 0;
    size_t i = 0;
    while (i < n) {
        while (i < n && bleu_isspace_fast(p[i]))
            i++;
        if (i == n)
            break;
        size_t st = i;
        while (i < n && !bleu_isspace_fast(p[i]))
            i++;
        if (NMT_GROW2(t->start, t->len, t->cap, t->n + 1) < 0)
            return -1;
        t->start[t->n] = (uint32_t)st;
        t->len[t->n] = (uint32_t)(i - st);
        t->n++;
    }
    return 0;
}
