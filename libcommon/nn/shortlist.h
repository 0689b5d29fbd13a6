/* shortlist.h: the vocabulary shortlist of decoding (as Marian's lexical shortlist and CTranslate2's
 * vocabulary map). For each source piece it lists the target pieces most associated with it in
 * training pairs; with the most frequent target pieces and EOS, the pieces listed for a sentence's
 * source pieces are its candidates, and the output layer computes only their logits (the softmax is
 * over them). Every set is a function of the sentence alone, so translations stay batch-invariant.
 *
 * Association of source piece s with target piece t over N pairs: c(s,t), the pairs holding both,
 * scored by the Dice coefficient 2 c(s,t) / (c(s) + c(t)) (c(x): the pairs holding x); a source
 * piece lists its PER_SOURCE best targets that are not among the frequent ones (ties by lower id).
 * Checkpoints store it as tensors (formats/checkpoint.md; nn/checkpoint.h names them). */
#ifndef NMT_SHORTLIST_H
#define NMT_SHORTLIST_H

#include <stdint.h>

#include "io/safetensors.h"

struct shortlist {
    int vocab;                 /* V: ids are < V */
    int per_source;            /* columns of table */
    int nfreq;                 /* length of freq */
    int32_t *table;            /* (V, per_source) targets of each source piece, best first, -1 after the last */
    int32_t *freq;             /* (nfreq) the most frequent target pieces, most frequent first */
};

struct shortlist_counts;

/* Returns empty counts for a vocabulary of VOCAB pieces, or NULL with the error set. */
struct shortlist_counts *shortlist_counts_new(int vocab);
/* Frees C; NULL is a no-op. */
void shortlist_counts_free(struct shortlist_counts *c);
/* Counts one pair: source SRC (SLEN ids) and target TGT (TLEN ids), without BOS or EOS. 0, or -1
 * with the error set (an id outside the vocabulary, out of memory). */
int shortlist_counts_add(struct shortlist_counts *c, const uint32_t *src, int slen, const uint32_t *tgt, int tlen);
/* Returns the pairs counted so far. */
uint64_t shortlist_counts_pairs(const struct shortlist_counts *c);
/* Builds the shortlist of C (at least one pair): PER_SOURCE targets a source piece (>= 1), the
 * NFREQ most frequent target pieces (>= 0, at most the vocabulary). Returns it, or NULL with the
 * error set. */
struct shortlist *shortlist_build(const struct shortlist_counts *c, int per_source, int nfreq);
/* Frees S; NULL is a no-op. */
void shortlist_free(struct shortlist *s);

/* Writes S's tensors to W (S must outlive the write). 0, or -1 with the error set. */
int shortlist_put(struct st_writer *w, const struct shortlist *s);
/* Whether F holds a shortlist. */
int shortlist_present(const struct st_file *f);
/* Reads and checks the shortlist of F (read from NAME) for a vocabulary of VOCAB pieces. Returns it,
 * or NULL with the error set naming the file, the tensor and the element (F has none, wrong type or
 * shape, an id outside the vocabulary, an entry after a -1, a repeated id). */
struct shortlist *shortlist_read(const struct st_file *f, const char *name, int vocab);

/* The candidates of a sentence of LEN source ids SRC: EOS, the frequent pieces, the pieces listed
 * for each source id (ids outside the vocabulary are skipped), and, while fewer than MIN, the
 * lowest ids not yet in; written to OUT (room for the vocabulary) in increasing order. MARK is
 * scratch of one byte a piece, zero on entry and left zero. Returns their number. */
int shortlist_candidates(const struct shortlist *s, const uint32_t *src, int len, int min, int32_t *out,
                         unsigned char *mark);

#endif
