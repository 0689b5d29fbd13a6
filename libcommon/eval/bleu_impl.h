/* bleu_impl.h: internals shared by bleu_text.c and bleu.c (not a public API). */
#ifndef NMT_BLEU_IMPL_H
#define NMT_BLEU_IMPL_H

#include <stddef.h>
#include <stdint.h>

int bleu_isspace_slow(int32_t cp); /* non-ASCII part of bleu_isspace */
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
void bleu_cps_free(bleu_cps *b);
/* Decodes valid UTF-8 S into OUT (replacing its content); 0 or -1. */
int bleu_decode(const char *s, size_t len, bleu_cps *out);
/* Python str.lower() of IN into OUT; 0 or -1. */
int bleu_cps_lower(const bleu_cps *in, bleu_cps *out);
/* Length of IN after Python's rstrip(). */
size_t bleu_cps_rstrip(const int32_t *p, size_t n);

/* Scratch buffers for the tokenizers. */
typedef struct {
    bleu_cps a, b;
} bleu_tokws;
void bleu_tokws_free(bleu_tokws *w);

/* Applies BLEU tokenizer TOK to IN (already lowercased and rstripped as wanted), leaving the
 * output text in OUT (tokens separated by Python whitespace, not yet split). 0 or -1. */
int bleu_tok_apply(int tok, const bleu_cps *in, bleu_cps *out, bleu_tokws *w);

/* Tercom's western normalisation (TER --ter-normalized) of IN into OUT. 0 or -1. */
int bleu_tok_ter_norm(const bleu_cps *in, bleu_cps *out, bleu_tokws *w);

/* Token spans into a code point array. */
typedef struct {
    uint32_t *start, *len;
    size_t n, cap;
} bleu_toks;
int bleu_split(const int32_t *p, size_t n, bleu_toks *t); /* Python str.split(); 0 or -1 */
void bleu_toks_free(bleu_toks *t);

/* Tokens as byte spans (13a on UTF-8 bytes). The spans point into the caller's text or into
 * buf (the preprocessed text when lowercasing or 13a's replacements changed it). */
typedef struct {
    const char **p;
    uint32_t *len;
    size_t n, cap;
    const char *end; /* end of the text the spans point into */
    char *buf, *buf2, *chunk; /* preprocessed text, its scratch, chunk scratch */
    size_t buf_cap, chunk_cap;
    bleu_cps a, b; /* lowercasing of non-ASCII text */
} bleu_btoks;
void bleu_btoks_free(bleu_btoks *t);
/* sacreBLEU's 13a tokenization (after optional lowercasing and rstrip) of valid UTF-8
 * S[0..LEN) straight on its bytes: the tokens of tokenize_13a(...).split(). 0 or -1. */
int bleu_tok13a_bytes(const char *s, size_t len, int lowercase, bleu_btoks *t);

/* Appends an encoded code point to a byte buffer of capacity >= 4 free bytes; returns bytes. */
size_t bleu_encode1(int32_t cp, char *out);

#endif
