/* text.h: UTF-8 validation and Unicode normalisation (NFKC, NFKC with case folding) of lines. */
#ifndef NMT_TEXT_H
#define NMT_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "io/records.h"

enum text_norm { TEXT_NORM_NONE = 0, TEXT_NORM_NFKC = 1, TEXT_NORM_NFKC_CF = 2 };

/* Parses "none", "nfkc" or "nfkc_cf"; returns the mode, or -1 for anything else. */
int text_norm_parse(const char *name);
/* Returns the name of MODE ("none", "nfkc", "nfkc_cf"). */
const char *text_norm_name(enum text_norm mode);

/* Checks that S (LEN bytes) is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
 * Returns 0, or -1 with *BAD set to the byte offset of the first invalid sequence. */
int text_utf8_check(const char *s, size_t len, size_t *bad);

/* Decodes one code point of valid UTF-8 at S (LEN > 0 bytes left); returns its byte length and
 * stores the code point. Invalid input gives length 1 and code point -1. */
int text_utf8_next(const unsigned char *s, size_t len, int32_t *cp);

/* Appends the UTF-8 encoding of code point CP to OUT; 0 or -1 (out of memory). */
int text_put_utf8(struct nmt_buf *out, int32_t cp);

/* Replaces OUT's content with S (LEN bytes of valid UTF-8) normalised by MODE.
 * Returns 0, or -1 with the error set (invalid input, out of memory). */
int text_normalize(enum text_norm mode, const char *s, size_t len, struct nmt_buf *out);

#endif
