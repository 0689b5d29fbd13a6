/* text.c: UTF-8 validation and normalisation through libutf8proc (see text.h). */
#include "text/normalize.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/util.h"

int text_norm_parse(const char *name)
{
    if (!name)
        return -1;
    if (strcmp(name, "none") == 0)
        return TEXT_NORM_NONE;
    if (strcmp(name, "nfkc") == 0)
        return TEXT_NORM_NFKC;
    if (strcmp(name, "nfkc_cf") == 0)
        return TEXT_NORM_NFKC_CF;
    return -1;
}

const char *text_norm_name(enum text_norm mode)
{
    switch (mode) {
    case TEXT_NORM_NONE: return "none";
    case TEXT_NORM_NFKC: return "nfkc";
    case TEXT_NORM_NFKC_CF: return "nfkc_cf";
    }
    return "?";
}

int text_utf8_next(const unsigned char *s, size_t len, int32_t *cp)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = (int32_t)c;
        return 1;
    }
    int n;
    int32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2; v = c & 0x1F; min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3; v = c & 0x0F; min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4; v = c & 0x07; min = 0x10000;
    } else {
        *cp = -1;
        return 1;
    }
    if ((size_t)n > len) {
        *cp = -1;
        return 1;
    }
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *cp = -1;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        *cp = -1;
        return 1;
    }
    *cp = v;
    return n;
}

int text_utf8_check(const char *s, size_t len, size_t *bad)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        int32_t cp;
        int n = text_utf8_next(p + i, len - i, &cp);
        if (cp < 0) {
            *bad = i;
            return -1;
        }
        i += (size_t)n;
    }
    return 0;
}

int text_put_utf8(struct nmt_buf *out, int32_t cp)
{
    unsigned char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp; n = 1;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | (cp >> 6)); b[1] = (unsigned char)(0x80 | (cp & 0x3F)); n = 2;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (cp >> 12)); b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        b[0] = (unsigned char)(0xF0 | (cp >> 18)); b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); b[3] = (unsigned char)(0x80 | (cp & 0x3F)); n = 4;
    }
    return nmt_buf_append(out, b, n);
}

int text_normalize(enum text_norm mode, const char *s, size_t len, struct nmt_buf *out)
{
    out->len = 0;
    int ascii = 1, upper = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            ascii = 0;
            break;
        }
        if (c >= 'A' && c <= 'Z')
            upper = 1;
    }
    if (mode == TEXT_NORM_NONE || (ascii && mode == TEXT_NORM_NFKC)) /* ASCII is NFKC already */
        return nmt_buf_append(out, s, len);
    if (ascii) { /* case folding of ASCII is tolower */
        if (nmt_buf_append(out, s, len) < 0)
            return -1;
        if (upper)
            for (size_t i = 0; i < len; i++)
                if (out->data[i] >= 'A' && out->data[i] <= 'Z')
                    out->data[i] = (unsigned char)(out->data[i] + 32);
        return 0;
    }
    utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    if (mode == TEXT_NORM_NFKC_CF)
        opt |= UTF8PROC_CASEFOLD;
    utf8proc_uint8_t *res = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &res, opt);
    if (n < 0)
        return nmt_seterr("normalisation failed: %s", utf8proc_errmsg(n));
    int rc = nmt_buf_append(out, res, (size_t)n);
    free(res);
    return rc;
}
