/* text.h: UTF-8 validation and Unicode normalisation (NFKC, NFKC with case folding) of lines. */
#ifndef NMT_TEXT_H
#define NMT_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/utf8.h"

enum text_norm { TEXT_NORM_NONE = 0, TEXT_NORM_NFKC = 1, TEXT_NORM_NFKC_CF = 2 };

/* Parses "none", "nfkc" or "nfkc_cf"; returns the mode, or -1 for anything else. */
int text_norm_parse(const char *name);
/* Returns the name of MODE ("none", "nfkc", "nfkc_cf"). */
const char *text_norm_name(enum text_norm mode);

/* Replaces OUT's content with S (LEN bytes of valid UTF-8) normalised by MODE.
 * Returns 0, or -1 with the error set (invalid input, out of memory). */
int text_normalize(enum text_norm mode, const char *s, size_t len, struct nmt_buf *out);

#endif
