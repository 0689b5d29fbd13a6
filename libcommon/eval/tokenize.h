/* tokenize.h: sacreBLEU's tokenizers (13a, intl, zh, char, none) and Tercom's normalisation on
 * code points, and 13a straight on UTF-8 bytes (internal to eval/). */
#ifndef NMT_TOKENIZE_H
#define NMT_TOKENIZE_H

#include <stddef.h>
#include <stdint.h>

#include "eval/pystr.h"

/* Returns 1 for an ASCII digit. */
static inline int bleu_is_digit(int32_t c) { return c >= '0' && c <= '9'; }

/* Scratch buffers for the tokenizers. */
typedef struct {
    bleu_cps a, b;
} bleu_tokws;
/* Frees W's buffers. */
void bleu_tokws_free(bleu_tokws *w);

/* Applies BLEU tokenizer TOK to IN (already lowercased and rstripped as wanted), leaving the
 * output text in OUT (tokens separated by Python whitespace, not yet split). 0 or -1. */
int bleu_tok_apply(int tok, const bleu_cps *in, bleu_cps *out, bleu_tokws *w);

/* Tercom's western normalisation (TER --ter-normalized) of IN into OUT. 0 or -1. */
int bleu_tok_ter_norm(const bleu_cps *in, bleu_cps *out, bleu_tokws *w);

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
    struct nmt_buf low; /* the lowercased non-ASCII text */
} bleu_btoks;
/* Frees T's memory and leaves it empty. */
void bleu_btoks_free(bleu_btoks *t);
/* sacreBLEU's 13a tokenization (after optional lowercasing and rstrip) of valid UTF-8
 * S[0..LEN) straight on its bytes: the tokens of tokenize_13a(...).split(). 0 or -1. */
int bleu_tok13a_bytes(const char *s, size_t len, int lowercase, bleu_btoks *t);

#endif
