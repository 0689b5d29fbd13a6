/* unigram.h: learning a SentencePiece unigram language model vocabulary as spm_train does
 * (unigram_model_trainer.cc, trainer_interface.cc of sentencepiece 0.1.97): sentences normalised
 * (a character map, or none, then the whitespace rules), the characters covering the asked fraction of all kept
 * (the others become U+2585 and never join a piece), seed pieces from the frequent substrings of
 * words, EM rounds with forward-backward expected counts and the digamma update, pruning by loss of
 * likelihood down to the size in stages, and the final pieces' log-probability scores. */
#ifndef NMT_UNIGRAM_H
#define NMT_UNIGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "base/strtab.h"

#define UNIGRAM_MAX_SENTENCE 4192  /* spm_train's max_sentence_length: longer lines are skipped */
#define UNIGRAM_MAX_PIECE_CHARS 16 /* max_sentencepiece_length */
#define UNIGRAM_SEED_SIZE 1000000  /* seed_sentencepiece_size */
#define UNIGRAM_SUB_ITERATIONS 2   /* num_sub_iterations */
#define UNIGRAM_SHRINKING 0.75     /* shrinking_factor */

struct unigram_opts {
    uint32_t size;          /* pieces of the model, its 3 specials (<unk>, <s>, </s>) included */
    double char_coverage;   /* (0, 1]: the fraction of character occurrences the kept ones cover */
    uint32_t threads;       /* E-step threads (1 or more); the model does not depend on them */
    void (*progress)(const char *line, void *arg); /* when not NULL, told each step in a line */
    void *progress_arg;
};

struct unigram_stats {
    uint64_t sentences, skipped_long, skipped_unk; /* kept, longer than UNIGRAM_MAX_SENTENCE, with U+2585 */
    uint32_t nchar, nchar_seen, nseed, nwords, rounds;
    double objective;       /* the last E-step's negative log-likelihood per word occurrence */
};

struct unigram_learner;

/* A learner with no sentences normalising with the precompiled character map CHARSMAP (LEN bytes,
 * from spm_charsmap_nfkc, kept, not copied; NULL: identity); NULL when out of memory (error set). */
struct unigram_learner *unigram_new(const void *charsmap, size_t len);
/* Frees L; unigram_free(NULL) is a no-op. */
void unigram_free(struct unigram_learner *l);
/* Normalises the sentence S (LEN bytes) and keeps it, "<unk>", "<s>" and "</s>" in it written as a
 * tab (never in a piece), as spm_train does; skips (0) an empty one, one longer than
 * UNIGRAM_MAX_SENTENCE bytes and one holding U+2585, as spm_train does. 0, or -1 with the error set
 * (a NUL byte, memory). */
int unigram_add(struct unigram_learner *l, const char *s, size_t len);
/* Learns the model: the normal pieces into PIECES (initialised here, freed by the caller) and their
 * scores into *SCORE (malloc'd, PIECES->n), best score first. STATS may be NULL. 0, or -1 with the
 * error set (no sentence, O->size below the kept characters + 3, memory). */
int unigram_learn(struct unigram_learner *l, const struct unigram_opts *o, struct strtab *pieces, float **score,
                  struct unigram_stats *stats);

#endif
