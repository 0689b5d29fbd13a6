/* pystr.h: Python 3 string semantics on arrays of code points, as sacreBLEU's text handling needs
 * them: str.isspace()/split()/rstrip() whitespace and str.lower() (internal to eval/). */
#ifndef NMT_PYSTR_H
#define NMT_PYSTR_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

/* Returns 1 if the non-ASCII code point CP is Python whitespace (the slow half of bleu_isspace). */
int bleu_isspace_slow(int32_t cp);
/* Returns 1 if code point CP is Python whitespace (str.isspace()). */
static inline int bleu_isspace_fast(int32_t cp)
{
    if (cp < 0x80)
        return (cp >= 9 && cp <= 13) || (cp >= 0x1C && cp <= 0x20);
    return bleu_isspace_slow(cp);
}

/* A growable array of code points. */
typedef struct {
    int32_t *p;
    size_t n, cap;
} bleu_cps;

/* Ensures room for N more code points; 0 or -1 with the error set. */
int bleu_cps_reserve(bleu_cps *b, size_t n);
/* Frees B's memory and leaves it empty. */
void bleu_cps_free(bleu_cps *b);
/* Decodes valid UTF-8 S into OUT (replacing its content); 0 or -1 with the error set. */
int bleu_decode(const char *s, size_t len, bleu_cps *out);
/* Encodes B as UTF-8 into OUT (replacing its content); 0 or -1 with the error set. */
int bleu_encode_buf(const bleu_cps *b, struct nmt_buf *out);
/* Encodes B as UTF-8; returns a malloc'ed NUL-terminated string with its length in *OUT_LEN, or
 * NULL with the error set. */
char *bleu_encode(const bleu_cps *b, size_t *out_len);
/* Python str.lower() of IN into OUT; 0 or -1 with the error set. */
int bleu_cps_lower(const bleu_cps *in, bleu_cps *out);
/* Returns the length of P[0..N) after Python's rstrip(). */
size_t bleu_cps_rstrip(const int32_t *p, size_t n);

/* Token spans into a code point array. */
typedef struct {
    uint32_t *start, *len;
    size_t n, cap;
} bleu_toks;
/* Python str.split() of P[0..N) into T (replacing its content); 0 or -1 with the error set. */
int bleu_split(const int32_t *p, size_t n, bleu_toks *t);
/* Frees T's memory and leaves it empty. */
void bleu_toks_free(bleu_toks *t);

#endif
