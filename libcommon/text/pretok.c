/* pretok.c: reversible pre-tokenisation (see pretok.h). */
#include "text/pretok.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/normalize.h"
#include "base/util.h"

#define CP_SPACE 0x2581
#define CP_ESC 0x241B

enum { CL_LETTER, CL_DIGIT, CL_PUNCT, CL_OTHER, CL_MARK };

static int char_class(int32_t cp)
{
    if (cp < 0x80) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z'))
            return CL_LETTER;
        if (cp >= '0' && cp <= '9')
            return CL_DIGIT;
        if (cp > 0x20 && cp < 0x7F)
            return CL_PUNCT;
        return CL_OTHER;
    }
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        return CL_LETTER;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
        return CL_MARK;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return CL_DIGIT;
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE: case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: case UTF8PROC_CATEGORY_SM: case UTF8PROC_CATEGORY_SC:
    case UTF8PROC_CATEGORY_SK: case UTF8PROC_CATEGORY_SO:
        return CL_PUNCT;
    default:
        return CL_OTHER;
    }
}

static int add_piece(struct pretok *p, size_t off)
{
    if (p->n == UINT32_MAX)
        return nmt_seterr("too many pieces in one line");
    if (NMT_GROW2(p->off, p->len, p->cap, (size_t)p->n + 1) < 0)
        return -1;
    p->off[p->n] = (uint32_t)off;
    p->len[p->n] = 0;
    p->n++;
    return 0;
}

int pretok_run(struct pretok *p, const char *s, size_t len)
{
    p->text.len = 0;
    p->n = 0;
    if (len > UINT32_MAX / 4)
        return nmt_seterr("line too long (%zu bytes)", len);
    if (len == 0)
        return 0;
    if (nmt_buf_reserve(&p->text, len + 16) < 0)
        return -1;
    const unsigned char *u = (const unsigned char *)s;
    /* dummy prefix: the line starts like a word after a space */
    if (nmt_buf_append(&p->text, PRETOK_SPACE, 3) < 0 || add_piece(p, 0) < 0)
        return -1;
    int after_space = 1, prev = -1;
    size_t i = 0;
    while (i < len) {
        int32_t cp;
        int n = utf8_next(u + i, len - i, &cp);
        if (cp < 0)
            return nmt_seterr("invalid UTF-8 at byte %zu", i);
        if (cp == ' ') {
            if (add_piece(p, p->text.len) < 0 || nmt_buf_append(&p->text, PRETOK_SPACE, 3) < 0)
                return -1;
            after_space = 1;
            i += (size_t)n;
            continue;
        }
        int cl = (cp == CP_SPACE || cp == CP_ESC) ? CL_PUNCT : char_class(cp);
        if (!after_space && cl != CL_MARK && cl != prev && add_piece(p, p->text.len) < 0)
            return -1;
        if (cl != CL_MARK || prev < 0)
            prev = cl == CL_MARK ? CL_LETTER : cl;
        after_space = 0;
        if ((cp == CP_SPACE || cp == CP_ESC) && nmt_buf_append(&p->text, PRETOK_ESC, 3) < 0)
            return -1;
        if (nmt_buf_append(&p->text, u + i, (size_t)n) < 0)
            return -1;
        i += (size_t)n;
    }
    for (uint32_t k = 0; k < p->n; k++)
        p->len[k] = (k + 1 < p->n ? p->off[k + 1] : (uint32_t)p->text.len) - p->off[k];
    return 0;
}

void pretok_free(struct pretok *p)
{
    if (!p)
        return;
    nmt_buf_free(&p->text);
    free(p->off);
    free(p->len);
    memset(p, 0, sizeof *p);
}

/* Appends the character at U (N bytes left) to OUT, or U+FFFD for a byte that does not start a valid
 * UTF-8 sequence; returns the bytes consumed, or -1 (memory). */
static int detok_put_char(const unsigned char *u, size_t n, struct nmt_buf *out)
{
    int32_t cp;
    int k = utf8_next(u, n, &cp);
    if (cp < 0)
        return nmt_buf_append(out, "\xEF\xBF\xBD", 3) < 0 ? -1 : 1;
    return nmt_buf_append(out, u, (size_t)k) < 0 ? -1 : k;
}

int pretok_detok(const char *s, size_t len, struct nmt_buf *out)
{
    out->len = 0;
    if (nmt_buf_reserve(out, len) < 0)
        return -1;
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    if (len >= 3 && memcmp(s, PRETOK_SPACE, 3) == 0)
        i = 3; /* the dummy prefix */
    while (i < len) {
        if (u[i] == 0xE2 && i + 3 <= len) {
            if (memcmp(u + i, PRETOK_SPACE, 3) == 0) {
                if (nmt_buf_append(out, " ", 1) < 0)
                    return -1;
                i += 3;
                continue;
            }
            if (memcmp(u + i, PRETOK_ESC, 3) == 0 && i + 3 < len)
                i += 3; /* the escaped character follows */
        }
        int k = detok_put_char(u + i, len - i, out);
        if (k < 0)
            return -1;
        i += (size_t)k;
    }
    return 0;
}
