/* records.h: typed payloads of the record kinds carried by nmt streams (formats/stream.md §6).
 * All integers little-endian. Encoders append to a growable byte buffer; decoders validate every
 * length against the payload size and return 0, or -1 with nmt_errmsg() set ("ids record: ..."). */
#ifndef NMT_RECORDS_H
#define NMT_RECORDS_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

/* Special token ids fixed by the vocabulary format. */
enum { NMT_PAD = 0, NMT_BOS = 1, NMT_EOS = 2, NMT_UNK = 3 };

/* ---- tok: token strings of one sentence (one side) or of a pair (two sides) ----
 * payload: u64 index | u8 nsides (1 or 2) | u8 reserved[3] = 0 |
 *          per side: u32 ntok | per token: u32 len | len bytes (UTF-8) */
struct tok_side {
    uint32_t ntok;
    const char **tok;          /* (ntok) pointers into the payload, not NUL-terminated */
    const uint32_t *len;       /* (ntok) byte lengths */
};
struct tok_record {
    uint64_t index;            /* 0-based line number of the input */
    unsigned nsides;
    struct tok_side side[2];
    /* decoder scratch, owned by the record: release with tok_record_free */
    const char **tok_store;
    uint32_t *len_store;
    size_t store_cap;
};
/* Encodes a tok record: NSIDES sides, side s has NTOK[s] tokens TOK[s][i] of LEN[s][i] bytes. */
int tok_record_encode(struct nmt_buf *out, uint64_t index, unsigned nsides, const uint32_t *ntok,
                      const char *const *const *tok, const uint32_t *const *len);
/* Decodes PAYLOAD into R (pointers into PAYLOAD, valid while it is). 0 or -1. */
int tok_record_decode(struct tok_record *r, const unsigned char *payload, size_t len);
/* Frees R's scratch arrays (not R itself). */
void tok_record_free(struct tok_record *r);

/* ---- ids: token ids of one sentence or a source/target pair ----
 * payload: u64 index | u8 nsides (1 or 2) | u8 reserved[3] = 0 |
 *          per side: u32 n | u32 id[n]
 * Ids exclude BOS/EOS; side 0 is the source, side 1 the target. */
struct ids_record {
    uint64_t index;
    unsigned nsides;
    uint32_t n[2];
    uint32_t *ids[2];          /* (n[s]) owned by the record, grown as needed */
    uint32_t cap[2];
};
/* Encodes an ids record. */
int ids_record_encode(struct nmt_buf *out, uint64_t index, unsigned nsides, const uint32_t *n,
                      const uint32_t *const *ids);
/* Decodes PAYLOAD into R (copies ids into R's arrays). 0 or -1. */
int ids_record_decode(struct ids_record *r, const unsigned char *payload, size_t len);
/* Frees R's arrays (not R itself). */
void ids_record_free(struct ids_record *r);

/* ---- batch: padded source and target id matrices ----
 * payload: u32 B | u32 S | u32 T | u32 flags = 0 |
 *          u64 index[B] | u32 src_len[B] | u32 tgt_len[B] | u32 src[B*S] | u32 tgt[B*T]
 * Row b of src holds src_len[b] ids ending with EOS, then PAD; tgt likewise (the decoder input
 * is BOS followed by tgt without its last column). 1 <= src_len[b] <= S, 0 <= tgt_len[b] <= T. */
struct batch_record {
    uint32_t B, S, T;
    uint64_t *index;           /* (B) */
    uint32_t *src_len;         /* (B) */
    uint32_t *tgt_len;         /* (B) */
    uint32_t *src;             /* (B, S) */
    uint32_t *tgt;             /* (B, T) */
    size_t cap;                /* bytes allocated in store */
    unsigned char *store;      /* owned storage behind the arrays */
};
/* Encodes a batch record from R's fields. */
int batch_record_encode(struct nmt_buf *out, const struct batch_record *r);
/* Decodes PAYLOAD into R (copies). Checks B, S, T, lengths and that B*(S+T) fits the payload. */
int batch_record_decode(struct batch_record *r, const unsigned char *payload, size_t len);
/* Sizes R for B rows of S and T columns (contents unspecified); 0 or -1. */
int batch_record_resize(struct batch_record *r, uint32_t B, uint32_t S, uint32_t T);
/* Frees R's storage (not R itself). */
void batch_record_free(struct batch_record *r);

/* ---- hyp: one translation hypothesis ----
 * payload: u64 index | u32 rank | f32 score | u32 n | u32 id[n]   (ids exclude BOS/EOS)
 *          [ | u32 npairs | npairs x (u32 source index, u32 output index) ]   (format 1.2: an
 * alignment, in a stream whose header has REC_FLAG_ALIGN; without it the payload ends at the ids) */
struct hyp_record {
    uint64_t index;
    uint32_t rank;
    float score;
    uint32_t n;
    uint32_t *ids;             /* (n) owned */
    uint32_t cap;
    int aligned;               /* the record holds an alignment (possibly of 0 pairs) */
    uint32_t npairs;
    uint32_t *pairs;           /* (2 * npairs) owned: source, output index of each pair */
    uint32_t pairs_cap;        /* pairs allocated */
};
/* Encodes a hyp record without an alignment. 0 or -1 (memory). */
int hyp_record_encode(struct nmt_buf *out, uint64_t index, uint32_t rank, float score, uint32_t n,
                      const uint32_t *ids);
/* Appends the alignment section to the hyp record that OUT holds (just encoded, without one):
 * NPAIRS pairs, PAIRS[2k] the source and PAIRS[2k+1] the output index of pair k. 0 or -1 (memory). */
int hyp_record_append_alignment(struct nmt_buf *out, uint32_t npairs, const uint32_t *pairs);
/* Decodes PAYLOAD into R (copies), with or without an alignment; an alignment's output indices
 * must be below n. 0 or -1. */
int hyp_record_decode(struct hyp_record *r, const unsigned char *payload, size_t len);
/* Frees R's arrays (not R itself). */
void hyp_record_free(struct hyp_record *r);

#endif
