/* bpe.h: byte-pair encoding: learning merges from word counts, and encoding words to piece ids
 * (with optional BPE-dropout). Words are pre-tokenised pieces (pretok.h). */
#ifndef NMT_BPE_H
#define NMT_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "base/strtab.h"
#include "text/vocab.h"

/* ---- word counts ---- */
struct bpe_counts {
    struct strtab words;       /* distinct words */
    uint64_t *count;           /* (words.n) occurrences */
    size_t cap;
};
/* Initialises C as empty. */
void bpe_counts_init(struct bpe_counts *c);
/* Frees C's memory. */
void bpe_counts_free(struct bpe_counts *c);
/* Adds N occurrences of word S (LEN bytes of valid UTF-8); 0 or -1 (memory). */
int bpe_counts_add(struct bpe_counts *c, const char *s, size_t len, uint64_t n);

/* ---- learning ---- */
struct bpe_learn_opts {
    uint32_t size;             /* target vocabulary size, specials and byte pieces counted */
    uint64_t min_freq;         /* a merge needs a pair seen at least this often (>= 1) */
    double char_coverage;      /* fraction of character occurrences the char pieces must cover (0, 1] */
    enum text_norm normalize;  /* recorded in the vocabulary */
};
/* Statistics of a learning run (for messages). */
struct bpe_learn_stats {
    uint32_t nchar;            /* char pieces kept */
    uint32_t nchar_seen;       /* distinct characters in the input */
    uint32_t nmerge;           /* merges learnt */
    uint64_t stop_count;       /* count of the last merge */
};
/* Learns a vocabulary from C: the most frequent characters up to the coverage, then merges by the
 * incremental pair-count algorithm (highest count first; ties: smaller left id, then smaller right
 * id) until SIZE pieces or no pair reaches MIN_FREQ. Returns the vocabulary (STATS filled when not
 * NULL) or NULL with the error set. */
struct vocab *bpe_learn(const struct bpe_counts *c, const struct bpe_learn_opts *opts, struct bpe_learn_stats *stats);

/* ---- encoding ---- */
struct bpe_encoder;
/* Creates an encoder for V (which must outlive it); NULL with the error set on failure. */
struct bpe_encoder *bpe_encoder_new(const struct vocab *v);
/* Frees E; bpe_encoder_free(NULL) is a no-op. */
void bpe_encoder_free(struct bpe_encoder *e);
/* Sets BPE-dropout: each applicable merge is skipped with probability P at every step, drawing
 * from a generator seeded with SEED (reseed per sentence with bpe_encoder_reseed). P = 0 turns
 * dropout off (and enables the word cache). */
void bpe_encoder_dropout(struct bpe_encoder *e, double p, uint64_t seed);
/* Reseeds the dropout generator from the dropout seed and KEY (a sentence index), so results do
 * not depend on what was encoded before. */
void bpe_encoder_reseed(struct bpe_encoder *e, uint64_t key);
/* Appends the ids of word S (LEN bytes of valid UTF-8) to *IDS (growing the array and its capacity CAP; N updated).
 * Characters without a piece become their byte pieces. Returns 0 or -1 (memory). */
int bpe_encode_word(struct bpe_encoder *e, const char *s, size_t len, uint32_t **ids, uint32_t *n, uint32_t *cap);

#endif
