/* utf8.h: the UTF-8 codec: decode one code point, validate a string, encode a code point. */
#ifndef NMT_UTF8_H
#define NMT_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

/* Checks that S (LEN bytes) is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
 * Returns 0, or -1 with *BAD set to the byte offset of the first invalid sequence. */
int utf8_check(const char *s, size_t len, size_t *bad);

/* Decodes one code point of valid UTF-8 at S (LEN > 0 bytes left); returns its byte length and
 * stores the code point. Invalid input gives length 1 and code point -1. */
int utf8_next(const unsigned char *s, size_t len, int32_t *cp);

/* Appends the UTF-8 encoding of code point CP to OUT; 0 or -1 (out of memory). */
int utf8_put(struct nmt_buf *out, int32_t cp);

#endif
