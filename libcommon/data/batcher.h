/* batcher.h: token-budget batching of ids streams into batch streams (nmt-batch(1)).
 *
 * Pairs are read a window at a time (at most `window` pairs in memory). Inside a window the pairs
 * are sorted by length (source, then target in "snake" order: ascending for odd source lengths,
 * descending for even ones, then a random key) so that neighbours have similar lengths on both
 * sides, cut greedily into batches whose padded size stays within the budget, and the batches
 * are shuffled. Randomness comes from a seeded xoshiro256** generator: the same input, options and
 * seed give the same batches in the same order. Epoch e uses the seed seed+e. */
#ifndef NMT_BATCHER_H
#define NMT_BATCHER_H

#include <stddef.h>
#include <stdint.h>

#include "io/stream.h"

#define BATCHER_MAX_TOKENS (1u << 24)   /* largest --max-tokens accepted */
#define BATCHER_MAX_WINDOW (1u << 28)   /* largest --window accepted */

/* Options; initialise with batcher_opts_init. Lengths count the EOS that ends every row. */
struct batcher_opts {
    uint64_t max_tokens;       /* padded cells of the larger side of a batch (B*S and B*T) <= this */
    uint64_t max_sentences;    /* rows per batch; 0 = no limit */
    uint64_t max_len;          /* longest row (ids + EOS) kept; 0 = no limit besides max_tokens */
    int truncate;              /* cut rows longer than the limit instead of dropping the pair */
    double max_ratio;          /* drop pairs with longer/shorter row length > this; 0 = off */
    uint64_t window;           /* pairs held in memory and bucketed together */
    uint64_t seed;             /* epoch e uses seed + e */
    uint64_t shard_k, shard_n; /* emit batch j of an epoch when j % shard_n == shard_k */
};

/* Counters over all epochs run so far. Tokens and cells count both sides, EOS included. */
struct batcher_stats {
    uint64_t epochs;
    uint64_t pairs;            /* records read */
    uint64_t dropped_len;      /* dropped: a row longer than the length limit */
    uint64_t dropped_ratio;    /* dropped: length ratio above max_ratio */
    uint64_t truncated;        /* pairs cut to the length limit (--truncate) */
    uint64_t batches;          /* batches written (this shard) */
    uint64_t rows;             /* rows written (this shard) */
    uint64_t tokens;           /* real tokens written (this shard) */
    uint64_t cells;            /* padded cells written, B*S + B*T summed (this shard) */
};

/* Fills O with the defaults: max_tokens 4096, window 100000, seed 1, shard 0/1, the rest off. */
void batcher_opts_init(struct batcher_opts *o);
/* Returns 0 when O is consistent, or -1 with nmt_errmsg() naming the bad option. */
int batcher_opts_check(const struct batcher_opts *o);

/* The provenance recorded in the output header: the input's vocab (when present) and the options.
 * Filled by batcher_header_kv; KV points into STORE. */
struct batcher_kv {
    struct rec_kv kv[12];
    size_t nkv;
    char store[1024];
};
/* Fills OUT for O, EPOCHS and the input's VOCAB fingerprint (NULL when the input has none). */
void batcher_header_kv(struct batcher_kv *out, const struct batcher_opts *o, uint64_t epochs,
                       const char *vocab);

struct batcher;
/* Creates a batcher for O (copied); returns NULL with nmt_errmsg() set on bad options or no memory. */
struct batcher *batcher_new(const struct batcher_opts *o);
/* Frees B; batcher_free(NULL) is a no-op. */
void batcher_free(struct batcher *b);
/* Reads every record of IN (an ids stream named IN_NAME in messages) as epoch EPOCH and writes the
 * batches to OUT, flushing it at the end of each window. Returns 0, or -1 with nmt_errmsg() set
 * ("IN_NAME: ..." for bad input); on failure the batches of earlier windows have been written. */
int batcher_epoch(struct batcher *b, uint64_t epoch, struct rec_reader *in, const char *in_name,
                  struct rec_writer *out);
/* Returns the counters accumulated over the epochs run so far. */
const struct batcher_stats *batcher_stats(const struct batcher *b);

/* Summary styles for batcher_stats_format. */
enum batcher_style { BATCHER_TEXT, BATCHER_JSON, BATCHER_CSV_HEADER, BATCHER_CSV_ROW };
/* Writes S as one line without newline into BUF (N bytes): human text, a JSON object, or a CSV
 * header or row. Returns the length written (truncated to N-1). */
size_t batcher_stats_format(const struct batcher_stats *s, enum batcher_style style, char *buf, size_t n);
/* Returns the padding fraction of S: 1 - tokens/cells (0 when nothing was written). */
double batcher_padding(const struct batcher_stats *s);

#endif
