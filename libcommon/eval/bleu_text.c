/* bleu_text.c: Python-compatible Unicode helpers and sacreBLEU's tokenizers (13a, intl, zh,
 * char, none). Everything works on arrays of code points; Unicode properties come from
 * utf8proc. */
#include "eval/bleu.h"
#include "eval/bleu_impl.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/util.h"

/* ---- buffers ---- */

int bleu_cps_reserve(bleu_cps *b, size_t n)
{
    if (b->n + n <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + n)
        cap *= 2;
    int32_t *p = nmt_realloc(b->p, cap * sizeof *p);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

void bleu_cps_free(bleu_cps *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

void bleu_tokws_free(bleu_tokws *w)
{
    bleu_cps_free(&w->a);
    bleu_cps_free(&w->b);
}

void bleu_toks_free(bleu_toks *t)
{
    free(t->start);
    free(t->len);
    t->start = t->len = NULL;
    t->n = t->cap = 0;
}

/* ---- UTF-8 ---- */

int bleu_utf8_check(const char *str, size_t len, size_t *bad)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            while (i + 8 <= len) { /* ASCII eight bytes at a time */
                uint64_t w;
                memcpy(&w, s + i, 8);
                if (w & 0x8080808080808080ULL)
                    break;
                i += 8;
            }
            continue;
        }
        size_t need;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            need = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F; /* no surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
        } else {
            *bad = i;
            return -1;
        }
        if (i + need >= len) { /* truncated sequence */
            *bad = i;
            return -1;
        }
        if (s[i + 1] < lo || s[i + 1] > hi) {
            *bad = i;
            return -1;
        }
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80) {
                *bad = i;
                return -1;
            }
        i += need + 1;
    }
    return 0;
}

int bleu_decode(const char *str, size_t len, bleu_cps *out)
{
    const unsigned char *s = (const unsigned char *)str;
    out->n = 0;
    if (bleu_cps_reserve(out, len + 1) < 0)
        return -1;
    int32_t *o = out->p;
    size_t i = 0, n = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            o[n++] = (int32_t)c;
            i++;
        } else if (c < 0xE0) {
            o[n++] = (int32_t)(((c & 0x1F) << 6) | (s[i + 1] & 0x3F));
            i += 2;
        } else if (c < 0xF0) {
            o[n++] = (int32_t)(((c & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F));
            i += 3;
        } else {
            o[n++] = (int32_t)(((c & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6)
                               | (s[i + 3] & 0x3F));
            i += 4;
        }
    }
    out->n = n;
    return 0;
}

size_t bleu_encode1(int32_t cp, char *out)
{
    unsigned c = (unsigned)cp;
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

static char *encode_all(const bleu_cps *b, size_t *out_len)
{
    char *s = nmt_malloc(b->n * 4 + 1);
    if (!s)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < b->n; i++)
        k += bleu_encode1(b->p[i], s + k);
    s[k] = 0;
    *out_len = k;
    return s;
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
        utf8proc_int32_t cp;
        if (utf8proc_iterate(s + st, (utf8proc_ssize_t)(len - st), &cp) < 0 || !bleu_isspace(cp))
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
        r = encode_all(&b, out_len);
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
        if (t->n == t->cap) {
            size_t cap = t->cap ? t->cap * 2 : 64;
            uint32_t *a = nmt_realloc(t->start, cap * sizeof *a);
            if (!a)
                return -1;
            t->start = a;
            uint32_t *b = nmt_realloc(t->len, cap * sizeof *b);
            if (!b)
                return -1;
            t->len = b;
            t->cap = cap;
        }
        t->start[t->n] = (uint32_t)st;
        t->len[t->n] = (uint32_t)(i - st);
        t->n++;
    }
    return 0;
}

/* ---- tokenizers ---- */

/* Replaces every non-overlapping occurrence of the ASCII string FROM in IN by TO into OUT. */
static int replace_str(const bleu_cps *in, const char *from, const char *to, bleu_cps *out)
{
    size_t fl = strlen(from), tl = strlen(to);
    out->n = 0;
    if (bleu_cps_reserve(out, in->n + 1) < 0) /* TO is never longer than FROM here */
        return -1;
    size_t i = 0, k = 0;
    while (i < in->n) {
        if (in->p[i] == from[0] && i + fl <= in->n) {
            size_t j = 1;
            while (j < fl && in->p[i + j] == (unsigned char)from[j])
                j++;
            if (j == fl) {
                for (size_t q = 0; q < tl; q++)
                    out->p[k++] = (unsigned char)to[q];
                i += fl;
                continue;
            }
        }
        out->p[k++] = in->p[i++];
    }
    out->n = k;
    return 0;
}

static void swap_cps(bleu_cps *a, bleu_cps *b)
{
    bleu_cps t = *a;
    *a = *b;
    *b = t;
}

static inline int is_digit(int32_t c) { return c >= '0' && c <= '9'; }

/* The first regex of the 13a post-tokenizer: [\{-\~\[-\` -\&\(-\+\:-\@\/] */
static const unsigned char re13a_tab[128] = {
    [0x20] = 1, [0x21] = 1, [0x22] = 1, [0x23] = 1, [0x24] = 1, [0x25] = 1, [0x26] = 1,
    [0x28] = 1, [0x29] = 1, [0x2A] = 1, [0x2B] = 1, [0x2F] = 1,
    [0x3A] = 1, [0x3B] = 1, [0x3C] = 1, [0x3D] = 1, [0x3E] = 1, [0x3F] = 1, [0x40] = 1,
    [0x5B] = 1, [0x5C] = 1, [0x5D] = 1, [0x5E] = 1, [0x5F] = 1, [0x60] = 1,
    [0x7B] = 1, [0x7C] = 1, [0x7D] = 1, [0x7E] = 1,
};
static inline int re13a_sym(int32_t c) { return c >= 0 && c < 128 && re13a_tab[c]; }

/* One regex substitution "(c) -> ' c '" for every code point C of IN with PAD(C), IN -> OUT. */
static int pad_chars(const bleu_cps *in, bleu_cps *out, int (*pad)(int32_t))
{
    size_t k = 0;
    out->n = 0;
    if (bleu_cps_reserve(out, in->n * 3 + 1) < 0)
        return -1;
    for (size_t i = 0; i < in->n; i++) {
        int32_t c = in->p[i];
        if (pad(c))
            out->p[k++] = ' ';
        out->p[k++] = c;
        if (pad(c))
            out->p[k++] = ' ';
    }
    out->n = k;
    return 0;
}

/* One regex substitution "(L)(R)" -> "\1 \2 " (or " \1 \2" when SPACE_FIRST), scanning IN left to
 * right without overlaps as re.sub does: a pair is two code points a, b with LEFT(a) and RIGHT(b). */
static int split_pairs(const bleu_cps *in, bleu_cps *out, int (*left)(int32_t), int (*right)(int32_t),
                       int space_first)
{
    size_t n = in->n, k = 0;
    out->n = 0;
    if (bleu_cps_reserve(out, n * 2 + 1) < 0)
        return -1;
    for (size_t i = 0; i < n;) {
        if (i + 1 < n && left(in->p[i]) && right(in->p[i + 1])) {
            if (space_first)
                out->p[k++] = ' ';
            out->p[k++] = in->p[i];
            out->p[k++] = ' ';
            out->p[k++] = in->p[i + 1];
            if (!space_first)
                out->p[k++] = ' ';
            i += 2;
        } else
            out->p[k++] = in->p[i++];
    }
    out->n = k;
    return 0;
}

static int not_digit(int32_t c) { return !is_digit(c); }
static int digit(int32_t c) { return is_digit(c); }
static int dot_comma(int32_t c) { return c == '.' || c == ','; }
static int dash(int32_t c) { return c == '-'; }
static int sym13a(int32_t c) { return re13a_sym(c); }

/* sacreBLEU's TokenizerRegexp (shared by 13a and zh): four regex substitutions applied in turn,
 * each scanning left to right without overlaps. IN -> OUT, W as scratch. */
static int tok_regexp(const bleu_cps *in, bleu_cps *out, bleu_cps *w, int ter_s)
{
    int punct = 0, has_dash = 0;
    for (size_t i = 0; i < in->n; i++) {
        punct |= dot_comma(in->p[i]);
        has_dash |= dash(in->p[i]);
    }
    /* 1: symbol -> " c " */
    if (pad_chars(in, w, sym13a) < 0)
        return -1;
    if (ter_s) { /* Tercom: "'s " -> " 's " */
        size_t n = w->n, k = 0;
        out->n = 0;
        if (bleu_cps_reserve(out, n * 2 + 1) < 0)
            return -1;
        for (size_t i = 0; i < n;) {
            if (i + 2 < n && w->p[i] == '\'' && w->p[i + 1] == 's' && w->p[i + 2] == ' ') {
                out->p[k++] = ' ';
                out->p[k++] = '\'';
                out->p[k++] = 's';
                out->p[k++] = ' ';
                i += 3;
            } else
                out->p[k++] = w->p[i++];
        }
        out->n = k;
        swap_cps(out, w);
    }
    if (!punct && !has_dash) { /* regexes 2-4 cannot match */
        swap_cps(out, w);
        return 0;
    }
    /* 2: ([^0-9])([\.,]) -> "\1 \2 ";  3: ([\.,])([^0-9]) -> " \1 \2";  4: ([0-9])(-) -> "\1 \2 " */
    if (split_pairs(w, out, not_digit, dot_comma, 0) < 0 || split_pairs(out, w, dot_comma, not_digit, 1) < 0 ||
        split_pairs(w, out, digit, dash, 0) < 0)
        return -1;
    return 0;
}

static int tok_13a(const bleu_cps *in, bleu_cps *out, bleu_tokws *ws)
{
    bleu_cps *a = &ws->a, *b = &ws->b;
    const bleu_cps *cur = in;
    int lt = 0, nl = 0, amp = 0;
    for (size_t i = 0; i < in->n; i++) {
        int32_t c = in->p[i];
        lt |= c == '<';
        nl |= c == '\n';
        amp |= c == '&';
    }
    if (lt || nl) { /* the replacements can only apply when these characters occur */
        if (replace_str(in, "<skipped>", "", a) < 0 || replace_str(a, "-\n", "", b) < 0
            || replace_str(b, "\n", " ", a) < 0)
            return -1;
        cur = a;
    }
    if (amp) {
        if (replace_str(cur, "&quot;", "\"", b) < 0 || replace_str(b, "&amp;", "&", a) < 0
            || replace_str(a, "&lt;", "<", b) < 0 || replace_str(b, "&gt;", ">", a) < 0)
            return -1;
        cur = a;
    }
    /* f" {line} " */
    if (cur == a) {
        b->n = 0;
        if (bleu_cps_reserve(b, a->n + 2) < 0)
            return -1;
        b->p[0] = ' ';
        memcpy(b->p + 1, a->p, a->n * sizeof *a->p);
        b->p[a->n + 1] = ' ';
        b->n = a->n + 2;
        return tok_regexp(b, out, a, 0);
    }
    a->n = 0;
    if (bleu_cps_reserve(a, in->n + 2) < 0)
        return -1;
    a->p[0] = ' ';
    memcpy(a->p + 1, in->p, in->n * sizeof *in->p);
    a->p[in->n + 1] = ' ';
    a->n = in->n + 2;
    return tok_regexp(a, out, b, 0);
}

/* sacreBLEU's _is_chinese_char, including the effect of its two malformed range ends
 * ('\u20000' and '\u2f800' are two-character strings compared as strings): the ranges
 * "\u20000".."\u2a6d6" and "\u2f800".."\u2fa1d" admit U+2001..U+2A6D and U+2F81..U+2FA1. */
static int is_chinese(int32_t c)
{
    static const int32_t r[][2] = {
        {0x3400, 0x4DB5}, {0x4E00, 0x9FA5}, {0x9FA6, 0x9FBB}, {0xF900, 0xFA2D}, {0xFA30, 0xFA6A},
        {0xFA70, 0xFAD9}, {0x2001, 0x2A6D}, {0x2F81, 0x2FA1}, {0xFF00, 0xFFEF}, {0x2E80, 0x2EFF},
        {0x3000, 0x303F}, {0x31C0, 0x31EF}, {0x2F00, 0x2FDF}, {0x2FF0, 0x2FFF}, {0x3100, 0x312F},
        {0x31A0, 0x31BF}, {0xFE10, 0xFE1F}, {0xFE30, 0xFE4F}, {0x2600, 0x26FF}, {0x2700, 0x27BF},
        {0x3200, 0x32FF}, {0x3300, 0x33FF},
    };
    if (c < 0x2001)
        return 0;
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        if (c >= r[i][0] && c <= r[i][1])
            return 1;
    return 0;
}

static int tok_zh(const bleu_cps *in, bleu_cps *out, bleu_tokws *ws)
{
    size_t st = 0, en = in->n;
    while (st < en && bleu_isspace_fast(in->p[st]))
        st++;
    while (en > st && bleu_isspace_fast(in->p[en - 1]))
        en--;
    bleu_cps *a = &ws->a;
    a->n = 0;
    if (bleu_cps_reserve(a, (en - st) * 3 + 1) < 0)
        return -1;
    size_t k = 0;
    for (size_t i = st; i < en; i++) {
        int32_t c = in->p[i];
        if (is_chinese(c)) {
            a->p[k++] = ' ';
            a->p[k++] = c;
            a->p[k++] = ' ';
        } else
            a->p[k++] = c;
    }
    a->n = k;
    return tok_regexp(a, out, &ws->b, 0);
}

int bleu_tok_ter_norm(const bleu_cps *in, bleu_cps *out, bleu_tokws *ws)
{
    bleu_cps *a = &ws->a, *b = &ws->b;
    if (replace_str(in, "\n-", "", a) < 0 || replace_str(a, "\n", " ", b) < 0
        || replace_str(b, "&quot;", "\"", a) < 0 || replace_str(a, "&amp;", "&", b) < 0
        || replace_str(b, "&lt;", "<", a) < 0 || replace_str(a, "&gt;", ">", b) < 0)
        return -1;
    a->n = 0;
    if (bleu_cps_reserve(a, b->n + 2) < 0)
        return -1;
    a->p[0] = ' ';
    memcpy(a->p + 1, b->p, b->n * sizeof *b->p);
    a->p[b->n + 1] = ' ';
    a->n = b->n + 2;
    return tok_regexp(a, out, b, 1);
}

static int cat_is(int32_t c, char major)
{
    if (c > 0x10FFFF)
        return 0;
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE: case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
        return major == 'P';
    case UTF8PROC_CATEGORY_SM: case UTF8PROC_CATEGORY_SC: case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO:
        return major == 'S';
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return major == 'N';
    default:
        return 0;
    }
}

static int not_number(int32_t c) { return !cat_is(c, 'N'); }
static int punctuation(int32_t c) { return cat_is(c, 'P'); }
static int symbol(int32_t c) { return cat_is(c, 'S'); }

/* mteval-v14 "international" tokenization: (\P{N})(\p{P}) -> "\1 \2 ", (\p{P})(\P{N}) ->
 * " \1 \2", (\p{S}) -> " \1 ". */
static int tok_intl(const bleu_cps *in, bleu_cps *out, bleu_tokws *ws)
{
    if (split_pairs(in, &ws->a, not_number, punctuation, 0) < 0 ||
        split_pairs(&ws->a, &ws->b, punctuation, not_number, 1) < 0 || pad_chars(&ws->b, out, symbol) < 0)
        return -1;
    return 0;
}

int bleu_tok_apply(int tok, const bleu_cps *in, bleu_cps *out, bleu_tokws *w)
{
    switch (tok) {
    case BLEU_TOK_13A:
        return tok_13a(in, out, w);
    case BLEU_TOK_INTL:
        return tok_intl(in, out, w);
    case BLEU_TOK_ZH:
        return tok_zh(in, out, w);
    case BLEU_TOK_CHAR: /* " ".join(line): every non-space code point is a token */
        out->n = 0;
        if (bleu_cps_reserve(out, in->n * 2 + 1) < 0)
            return -1;
        for (size_t i = 0; i < in->n; i++) {
            out->p[out->n++] = in->p[i];
            out->p[out->n++] = ' ';
        }
        return 0;
    default:
        out->n = 0;
        if (bleu_cps_reserve(out, in->n + 1) < 0)
            return -1;
        memcpy(out->p, in->p, in->n * sizeof *in->p);
        out->n = in->n;
        return 0;
    }
}

char *bleu_tokenize(int tok, int lowercase, const char *s, size_t len, size_t *out_len)
{
    bleu_cps a = {0}, b = {0}, c = {0};
    bleu_tokws w = {0};
    bleu_toks t = {0};
    char *r = NULL;
    if (bleu_decode(s, len, &a) < 0)
        goto done;
    if (lowercase) {
        if (bleu_cps_lower(&a, &b) < 0)
            goto done;
        swap_cps(&a, &b);
    }
    a.n = bleu_cps_rstrip(a.p, a.n);
    if (bleu_tok_apply(tok, &a, &b, &w) < 0 || bleu_split(b.p, b.n, &t) < 0)
        goto done;
    c.n = 0;
    if (bleu_cps_reserve(&c, b.n + 1) < 0)
        goto done;
    for (size_t i = 0; i < t.n; i++) {
        if (i)
            c.p[c.n++] = ' ';
        memcpy(c.p + c.n, b.p + t.start[i], t.len[i] * sizeof *c.p);
        c.n += t.len[i];
    }
    r = encode_all(&c, out_len);
done:
    bleu_cps_free(&a);
    bleu_cps_free(&b);
    bleu_cps_free(&c);
    bleu_tokws_free(&w);
    bleu_toks_free(&t);
    return r;
}

int bleu_tokenizer_parse(const char *name)
{
    static const char *names[] = {"13a", "intl", "zh", "char", "none"};
    for (int i = 0; i < 5; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

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
    memset(t, 0, sizeof *t);
}

/* Makes room for N tokens (a text of N bytes has at most N). */
static int btoks_reserve(bleu_btoks *t, size_t n)
{
    if (n <= t->cap)
        return 0;
    size_t cap = t->cap ? t->cap : 256;
    while (cap < n)
        cap *= 2;
    const char **a = nmt_realloc(t->p, cap * sizeof *a);
    if (!a)
        return -1;
    t->p = a;
    uint32_t *b = nmt_realloc(t->len, cap * sizeof *b);
    if (!b)
        return -1;
    t->len = b;
    t->cap = cap;
    return 0;
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
    size_t w;
    if (s[0] < 0xE0) {
        cp = (int32_t)(((s[0] & 0x1F) << 6) | (s[1] & 0x3F));
        w = 2;
    } else {
        cp = (int32_t)(((s[0] & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F));
        w = 3;
    }
    return bleu_isspace_slow(cp) ? w : 0;
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
        if (i + 1 < n && !is_digit(a[i]) && (a[i + 1] == '.' || a[i + 1] == ',')) {
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
        if (i + 1 < n && (b[i] == '.' || b[i] == ',') && !is_digit(b[i + 1])) {
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
        if (i + 1 < n && is_digit(a[i]) && a[i + 1] == '-') {
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

int bleu_tok13a_bytes(const char *str, size_t len, int lowercase, bleu_btoks *t)
{
    t->end = str + len;
    t->n = 0;
    if (lowercase) {
        int ascii = 1;
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)str[i] >= 0x80) {
                ascii = 0;
                break;
            }
        if (ascii) {
            if (btoks_buf(t, len + 1) < 0)
                return -1;
            for (size_t i = 0; i < len; i++) {
                char c = str[i];
                t->buf[i] = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
            }
        } else {
            if (bleu_decode(str, len, &t->a) < 0 || bleu_cps_lower(&t->a, &t->b) < 0
                || btoks_buf(t, t->b.n * 4 + 1) < 0)
                return -1;
            size_t k = 0;
            for (size_t i = 0; i < t->b.n; i++)
                k += bleu_encode1(t->b.p[i], t->buf + k);
            len = k;
        }
        len = bleu_rstrip_len(t->buf, len);
        str = t->buf;
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
            if (!pre) { /* 13a's string replacements (none makes the text longer), then again */
                if (btoks_buf(t, len + 1) < 0)
                    return -1;
                char *x = t->buf, *y = t->buf2;
                if (str != x)
                    memcpy(x, str, len);
                len = replace_bytes(x, len, "<skipped>", "", y);
                len = replace_bytes(y, len, "-\n", "", x);
                len = replace_bytes(x, len, "\n", " ", y);
                len = replace_bytes(y, len, "&quot;", "\"", x);
                len = replace_bytes(x, len, "&amp;", "&", y);
                len = replace_bytes(y, len, "&lt;", "<", x);
                len = replace_bytes(x, len, "&gt;", ">", y);
                memcpy(x, y, len);
                str = x;
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
