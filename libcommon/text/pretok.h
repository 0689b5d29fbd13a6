/* pretok.h: reversible pre-tokenisation of normalised text into word pieces (formats/vocab.md §2).
 *
 * The text is escaped first: a space becomes U+2581 '▁', a literal U+2581 becomes U+241B U+2581
 * ("␛▁") and a literal U+241B becomes "␛␛"; every non-empty line gets one leading '▁' (the dummy
 * prefix, so a word looks the same at the start of a line and inside it). The escaped text is cut
 * into pieces: before every '▁' and where the character class changes (letters, digits,
 * punctuation and symbols, other characters; combining marks stay with what precedes them).
 * Concatenating the pieces (or any later split of them) and applying pretok_detok gives the
 * normalised line back, byte for byte. */
#ifndef NMT_PRETOK_H
#define NMT_PRETOK_H

#include <stddef.h>
#include <stdint.h>

#include "io/records.h"

#define PRETOK_SPACE "\xE2\x96\x81"   /* U+2581 LOWER ONE EIGHTH BLOCK */
#define PRETOK_ESC "\xE2\x90\x9B"     /* U+241B SYMBOL FOR ESCAPE */

/* The pieces of one line: piece i is text.data[off[i] .. off[i]+len[i]). */
struct pretok {
    struct nmt_buf text;       /* escaped line, all pieces back to back */
    uint32_t *off;             /* (n) */
    uint32_t *len;             /* (n) */
    uint32_t n;
    size_t cap;
};

/* Splits S (LEN bytes of valid UTF-8, normalised) into P's pieces, replacing its content.
 * Returns 0, or -1 with the error set (invalid UTF-8, line over 4 GiB, out of memory). */
int pretok_run(struct pretok *p, const char *s, size_t len);
/* Frees P's memory (not P). */
void pretok_free(struct pretok *p);
/* Replaces OUT's content with the text that the concatenated pieces S (LEN bytes) stand for:
 * drops one leading '▁', turns '▁' into a space and "␛c" into c. Each byte that does not start a
 * valid UTF-8 sequence (possible only for made-up id sequences, e.g. a model's output) becomes
 * U+FFFD, so the text is always valid UTF-8. Returns 0 or -1 (memory). */
int pretok_detok(const char *s, size_t len, struct nmt_buf *out);

#endif
