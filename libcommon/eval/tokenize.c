/* tokenize.c: sacreBLEU's tokenizers (13a, intl, zh, char, none) and Tercom's normalisation on
 * arrays of code points (see tokenize.h), and bleu_tokenize()/bleu_tokenizer_parse() of bleu.h. */
#include "eval/tokenize.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/util.h"
#include "eval/bleu.h"

void bleu_tokws_free(bleu_tokws *w)
{
    bleu_cps_free(&w->a);
    bleu_cps_free(&w->b);
}

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

static int not_digit(int32_t c) { return !bleu_is_digit(c); }
static int digit(int32_t c) { return bleu_is_digit(c); }
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
    r = bleu_encode(&c, out_len);
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
