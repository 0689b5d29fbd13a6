/* tokenize_13a.c: sacreBLEU's 13a tokenizer straight on UTF-8 bytes (see tokenize.h), the fast
 * path of BLEU's default tokenizer; tests/unit/test_bleu_tok.c checks it against tokenize.c. */
#include "eval/tokenize.h"

#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "base/util.h"
#include "eval/bleu.h"

/* ---- 13a on UTF-8 bytes ----
 * The 13a rules only name ASCII characters, so they can run on the bytes: a multi-byte
 * character is a run of non-ASCII bytes that no rule matches except as "[^0-9]", and the bytes
 * of one character stay together. The first rule puts spaces around every symbol of its class,
 * so symbols and whitespace cut the text into chunks that the three later rules (which look at
 * '.', ',', '-' and digits, and only insert spaces) treat independently: a chunk is seen as if
 * padded by one space on each side. Chunks without '.', ',' or '-' are single tokens. */

/* B13_PLAIN: letters, digits, other bytes no rule names */
enum { B13_PLAIN, B13_SPACE, B13_SYM, B13_PUNCT, B13_DASH, B13_LEAD, B13_PRE };

static const unsigned char b13_class[256] = {
    [0x09] = B13_SPACE, [0x0A] = B13_PRE, /* '\n', '&', '<': 13a's replacements may apply */ [0x0B] = B13_SPACE, [0x0C] = B13_SPACE,
    [0x0D] = B13_SPACE, [0x1C] = B13_SPACE, [0x1D] = B13_SPACE, [0x1E] = B13_SPACE,
    [0x1F] = B13_SPACE, [0x20] = B13_SPACE,
    [0x21] = B13_SYM, [0x22] = B13_SYM, [0x23] = B13_SYM, [0x24] = B13_SYM, [0x25] = B13_SYM,
    [0x26] = B13_PRE, [0x28] = B13_SYM, [0x29] = B13_SYM, [0x2A] = B13_SYM, [0x2B] = B13_SYM,
    [0x2F] = B13_SYM, [0x3A] = B13_SYM, [0x3B] = B13_SYM, [0x3C] = B13_PRE, [0x3D] = B13_SYM,
    [0x3E] = B13_SYM, [0x3F] = B13_SYM, [0x40] = B13_SYM, [0x5B] = B13_SYM, [0x5C] = B13_SYM,
    [0x5D] = B13_SYM, [0x5E] = B13_SYM, [0x5F] = B13_SYM, [0x60] = B13_SYM, [0x7B] = B13_SYM,
    [0x7C] = B13_SYM, [0x7D] = B13_SYM, [0x7E] = B13_SYM,
    [0x2C] = B13_PUNCT, [0x2E] = B13_PUNCT, [0x2D] = B13_DASH,
    /* lead bytes of the non-ASCII whitespace (U+0085, U+00A0, U+1680, U+2000.., U+3000) */
    [0xC2] = B13_LEAD, [0xE1] = B13_LEAD, [0xE2] = B13_LEAD, [0xE3] = B13_LEAD,
};

void bleu_btoks_free(bleu_btoks *t)
{
    free(t->p);
    free(t->len);
    free(t->buf);
    free(t->buf2);
    free(t->chunk);
    bleu_cps_free(&t->a);
    bleu_cps_free(&t->b);
    nmt_buf_free(&t->low);
    memset(t, 0, sizeof *t);
}

/* Makes room for N tokens (a text of N bytes has at most N). */
static int btoks_reserve(bleu_btoks *t, size_t n)
{
    return NMT_GROW2(t->p, t->len, t->cap, n);
}

static inline void btoks_push(bleu_btoks *t, const char *p, size_t len)
{
    t->p[t->n] = p;
    t->len[t->n++] = (uint32_t)len;
}

/* Width of the whitespace character at S (valid UTF-8, lead byte of class B13_LEAD), or 0. */
static inline size_t b13_uspace(const unsigned char *s)
{
    int32_t cp;
    int w = utf8_next(s, 3, &cp);
    return bleu_isspace_slow(cp) ? (size_t)w : 0;
}

/* Rules 2-4 of the 13a post-tokenizer on one chunk P[0..M) (no whitespace, no rule-1 symbol),
 * padded by a space on each side; pushes the resulting tokens as spans of P. */
static int b13_chunk(bleu_btoks *t, const char *p, size_t m)
{
    size_t need = 8 * (m + 2);
    if (need > t->chunk_cap) {
        char *c = nmt_realloc(t->chunk, need);
        if (!c)
            return -1;
        t->chunk = c;
        t->chunk_cap = need;
    }
    char *a = t->chunk, *b = t->chunk + 4 * (m + 2); /* each holds 4 (m + 2) bytes */
    size_t n = m + 2, k = 0;
    a[0] = ' ';
    memcpy(a + 1, p, m);
    a[m + 1] = ' ';
    /* 2: ([^0-9])([\.,]) -> "\1 \2 " */
    for (size_t i = 0; i < n;) {
        if (i + 1 < n && !bleu_is_digit(a[i]) && (a[i + 1] == '.' || a[i + 1] == ',')) {
            b[k++] = a[i];
            b[k++] = ' ';
            b[k++] = a[i + 1];
            b[k++] = ' ';
            i += 2;
        } else
            b[k++] = a[i++];
    }
    /* 3: ([\.,])([^0-9]) -> " \1 \2" */
    n = k;
    k = 0;
    for (size_t i = 0; i < n;) {
        if (i + 1 < n && (b[i] == '.' || b[i] == ',') && !bleu_is_digit(b[i + 1])) {
            a[k++] = ' ';
            a[k++] = b[i];
            a[k++] = ' ';
            a[k++] = b[i + 1];
            i += 2;
        } else
            a[k++] = b[i++];
    }
    /* 4: ([0-9])(-) -> "\1 \2 " */
    n = k;
    k = 0;
    for (size_t i = 0; i < n;) {
        if (i + 1 < n && bleu_is_digit(a[i]) && a[i + 1] == '-') {
            b[k++] = a[i];
            b[k++] = ' ';
            b[k++] = '-';
            b[k++] = ' ';
            i += 2;
        } else
            b[k++] = a[i++];
    }
    /* split on the inserted spaces; the tokens are consecutive pieces of P */
    size_t cur = 0;
    for (size_t i = 0; i < k;) {
        while (i < k && b[i] == ' ')
            i++;
        size_t st = i;
        while (i < k && b[i] != ' ')
            i++;
        if (i > st) {
            btoks_push(t, p + cur, i - st);
            cur += i - st;
        }
    }
    return 0;
}

/* Replaces every non-overlapping FROM in S[0..N) by TO (not longer) into OUT; returns the
 * new length. */
static size_t replace_bytes(const char *s, size_t n, const char *from, const char *to, char *out)
{
    size_t fl = strlen(from), tl = strlen(to), k = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] == from[0] && i + fl <= n && memcmp(s + i, from, fl) == 0) {
            memcpy(out + k, to, tl);
            k += tl;
            i += fl;
        } else
            out[k++] = s[i++];
    }
    return k;
}

static int btoks_buf(bleu_btoks *t, size_t need)
{
    if (need <= t->buf_cap)
        return 0;
    char *a = nmt_realloc(t->buf, need), *b;
    if (!a)
        return -1;
    t->buf = a;
    if (!(b = nmt_realloc(t->buf2, need)))
        return -1;
    t->buf2 = b;
    t->buf_cap = need;
    return 0;
}

/* Lowercases *STR[0..*LEN) (valid UTF-8) as Python's str.lower() and rstrips it, into T's
 * buffers; *STR and *LEN then describe the result. 0 or -1 with the error set. */
static int lower_text(bleu_btoks *t, const char **str, size_t *len)
{
    const char *s = *str;
    size_t n = *len;
    int ascii = 1;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) {
            ascii = 0;
            break;
        }
    if (ascii) {
        if (btoks_buf(t, n + 1) < 0)
            return -1;
        for (size_t i = 0; i < n; i++) {
            char c = s[i];
            t->buf[i] = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
        }
        s = t->buf;
    } else {
        if (bleu_decode(s, n, &t->a) < 0 || bleu_cps_lower(&t->a, &t->b) < 0 || bleu_encode_buf(&t->b, &t->low) < 0)
            return -1;
        s = (const char *)t->low.data;
        n = t->low.len;
    }
    *str = s;
    *len = bleu_rstrip_len(s, n);
    return 0;
}

/* Applies 13a's string replacements (none makes the text longer) to *STR[0..*LEN) into t->buf;
 * *STR and *LEN then describe the result. 0 or -1 with the error set. */
static int replace_13a(bleu_btoks *t, const char **str, size_t *len)
{
    size_t n = *len;
    if (btoks_buf(t, n + 1) < 0)
        return -1;
    char *x = t->buf, *y = t->buf2;
    if (*str != x)
        memcpy(x, *str, n);
    n = replace_bytes(x, n, "<skipped>", "", y);
    n = replace_bytes(y, n, "-\n", "", x);
    n = replace_bytes(x, n, "\n", " ", y);
    n = replace_bytes(y, n, "&quot;", "\"", x);
    n = replace_bytes(x, n, "&amp;", "&", y);
    n = replace_bytes(y, n, "&lt;", "<", x);
    n = replace_bytes(x, n, "&gt;", ">", y);
    memcpy(x, y, n);
    *str = x;
    *len = n;
    return 0;
}

int bleu_tok13a_bytes(const char *str, size_t len, int lowercase, bleu_btoks *t)
{
    t->end = str + len;
    t->n = 0;
    if (lowercase) {
        if (lower_text(t, &str, &len) < 0)
            return -1;
        t->end = str + len;
    }
    if (len == 0 || btoks_reserve(t, len) < 0)
        return len == 0 ? 0 : -1;
    int pre = 0;
    const unsigned char *s;
    size_t i, w;
again:
    s = (const unsigned char *)str;
    i = 0;
    while (i < len) {
        int k = b13_class[s[i]];
        if (k == B13_SPACE) {
            i++;
            continue;
        }
        if (k == B13_PRE) {
            if (!pre) { /* 13a's string replacements, then again */
                if (replace_13a(t, &str, &len) < 0)
                    return -1;
                t->end = str + len;
                pre = 1;
                t->n = 0;
                goto again;
            }
            if (s[i] != '\n') /* '&' and '<' are rule-1 symbols */
                btoks_push(t, str + i, 1);
            i++;
            continue;
        }
        if (k == B13_SYM) {
            btoks_push(t, str + i, 1);
            i++;
            continue;
        }
        if (k == B13_LEAD && (w = b13_uspace(s + i)) > 0) {
            i += w;
            continue;
        }
        size_t st = i;
        int special = 0;
        while (i < len) {
            while (i < len && b13_class[s[i]] == B13_PLAIN)
                i++;
            if (i == len)
                break;
            k = b13_class[s[i]];
            if (k == B13_SPACE || k == B13_SYM || k == B13_PRE)
                break;
            if (k == B13_LEAD) {
                if (b13_uspace(s + i))
                    break;
                i++;
                continue;
            }
            special = 1; /* '.', ',' or '-' */
            i++;
        }
        if (!special)
            btoks_push(t, str + st, i - st);
        else if (b13_chunk(t, str + st, i - st) < 0)
            return -1;
    }
    return 0;
}
