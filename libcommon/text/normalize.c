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
