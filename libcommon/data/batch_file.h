/* batch_file.h: the training batches of a batch stream: a whole file held in memory and served in
 * a seeded order each epoch, or a stream (a pipe) read once in its own order. */
#ifndef NMT_BATCH_FILE_H
#define NMT_BATCH_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "io/records.h"
#include "io/stream.h"

struct batch_file {
    const char *name;          /* for messages */
    int fd;
    struct rec_reader *r;
    int streaming;             /* read once, in stream order */
    int has_vocab;             /* the stream's header names its vocabulary */
    struct nmt_buf data;       /* payloads back to back (in memory) */
    size_t *off, *len;         /* (n) */
    size_t n, cap;
    uint32_t *perm;            /* (n) order of the current epoch */
    uint64_t perm_epoch;
};

/* Opens PATH ("-": stdin) as batches: read whole into memory unless STREAMING. A stream naming a
 * vocabulary other than FP is refused (one naming none is accepted: see has_vocab). 0, or -1 with
 * the error set; batch_file_close frees B in both cases. */
int batch_file_open(struct batch_file *b, const char *path, int streaming, const char *fp);
/* Frees B's memory and closes its file. */
void batch_file_close(struct batch_file *b);
/* Decodes batch POS of EPOCH (0-based) into BR: in the file's order, or with SHUFFLE in an order
 * drawn from SEED and EPOCH (unbiased Fisher-Yates); a stream serves its next batch. Returns REC_OK,
 * REC_END past the epoch's end, or < 0 with the error set. */
int batch_file_get(struct batch_file *b, uint64_t epoch, uint64_t pos, int shuffle, uint64_t seed,
                   struct batch_record *br);
/* Sizes the model's memory: calls RESERVE(ARG, BR) with every batch held in memory; 0, or -1 with
 * the error set (naming the batch) when a batch is bad or RESERVE fails. */
int batch_file_each(struct batch_file *b, struct batch_record *br, int (*reserve)(void *arg, const struct batch_record *br),
                    void *arg);
/* The three-way key of the training's random streams (shuffles, dropout): a mix of A, B and C. */
uint64_t batch_file_key(uint64_t a, uint64_t b, uint64_t c);

#endif
