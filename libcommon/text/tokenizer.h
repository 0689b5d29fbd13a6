/* tokenizer.h: the one way text becomes subword ids and ids become text, used by every tool:
 * normalisation (the vocabulary's mode), reversible pre-tokenisation, BPE (with optional
 * BPE-dropout); and back: the pieces of the ids concatenated and un-escaped. A SentencePiece model
 * as the vocabulary does all of it its own way (text/spm.h). Without a vocabulary
 * it stops at the pre-tokenised pieces (what nmt-vocab learns from). */
#ifndef NMT_TOKENIZER_H
#define NMT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "text/bpe.h"
#include "text/normalize.h"
#include "text/pretok.h"
#include "text/spm.h"
#include "text/vocab.h"

#define TOKENIZER_EBADTEXT (-2) /* the text cannot be normalised or pre-tokenised (error set) */

struct tokenizer {
    const struct vocab *v;     /* NULL: pieces only */
    enum text_norm norm;
    struct bpe_encoder *enc;   /* (with an nmt vocabulary) */
    struct spm_encoder spm;    /* (with a SentencePiece model) */
    struct pretok pt;          /* the pieces of the last line */
    struct nmt_buf norm_buf, cat;
    struct nmt_buf text;       /* the text of the last tokenizer_decode */
};

/* Makes T turn text into V's ids, normalising by V's mode; with V NULL, into pieces normalised by
 * NORM. T keeps V (not owned). 0, or -1 with the error set. */
int tokenizer_init(struct tokenizer *t, const struct vocab *v, enum text_norm norm);
/* Frees what T holds (not V). */
void tokenizer_free(struct tokenizer *t);
/* BPE-dropout: skips each merge with probability P, from SEED (see bpe_encoder_dropout). */
void tokenizer_dropout(struct tokenizer *t, double p, uint64_t seed);
/* Re-keys the dropout draws for one sentence (KEY: its index and side), so a sentence's pieces do
 * not depend on what was tokenized before it. */
void tokenizer_reseed(struct tokenizer *t, uint64_t key);
/* Normalises and pre-tokenises S (LEN bytes of valid UTF-8) into T->pt. 0, TOKENIZER_EBADTEXT, or
 * -1 (out of memory), with the error set. */
int tokenizer_pieces(struct tokenizer *t, const char *s, size_t len);
/* Turns S (LEN bytes of valid UTF-8) into ids: *N of them in *IDS (capacity *CAP, grown as needed;
 * ids excluding BOS/EOS). 0, TOKENIZER_EBADTEXT, or -1 (out of memory), with the error set. */
int tokenizer_encode(struct tokenizer *t, const char *s, size_t len, uint32_t **ids, uint32_t *n, uint32_t *cap);
/* Turns the N ids at IDS back into text, left in T->text (not NUL-terminated). 0, or -1 with the
 * error set (an id outside the vocabulary, out of memory). */
int tokenizer_decode(struct tokenizer *t, const uint32_t *ids, size_t n);
/* Numbers the words of the N pieces IDS of vocabulary V: WORD[i] (N entries) gets the 0-based index
 * of the word of piece i, a word being a piece that begins with an unescaped '▁' (pretok.h) and the
 * pieces after it up to the next such piece; the first piece begins word 0 whatever its text.
 * Returns the number of words (0 when N is 0). Ids outside V count as continuations. */
uint32_t tokenizer_word_index(const struct vocab *v, const uint32_t *ids, size_t n, uint32_t *word);

#endif
