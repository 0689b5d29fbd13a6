/* rec.h: nmt record streams (formats/stream.md, nmt-stream(5)).
 *
 * A stream is a sequence of zstd frames: a header (skippable frame: kind, version, producer,
 * key=value provenance), chunks (ordinary zstd frames with content checksums, each holding whole
 * records "u32le length | payload"), and a trailer (skippable frame with the record and chunk
 * counts), which is the end marker. Streams of the same kind may be concatenated.
 *
 * Writers and readers work on file descriptors with their own buffers (no stdio), so a reader at
 * the far end of a pipe sees a record as soon as the writer flushes it. */
#ifndef NMT_REC_H
#define NMT_REC_H

#include <stddef.h>
#include <stdint.h>

#define REC_MAJOR 1
#define REC_MINOR 2
/* Header flags (format 1.2): a reader refuses a stream with a flag it does not know. */
#define REC_FLAG_ALIGN 1u             /* hyp records may hold an alignment (records.h) */
#define REC_FLAGS_KNOWN REC_FLAG_ALIGN

#define REC_MAGIC_HEADER 0x184D2A5EU  /* zstd skippable frame magic, variant 0xE */
#define REC_MAGIC_TRAILER 0x184D2A5FU /* variant 0xF */
#define REC_MAGIC_ZSTD 0xFD2FB528U
#define REC_HEADER_TAG "NMTS"
#define REC_TRAILER_TAG "NMTE"

#define REC_MAX_RECORD (256u << 20)   /* largest record payload a reader accepts: 256 MiB */
#define REC_MAX_HEADER (64u << 10)    /* largest header frame payload: 64 KiB */
#define REC_MAX_KIND 15               /* kind names: 1..15 chars of [a-z0-9_] */
#define REC_MAX_KV 256                /* provenance entries */
#define REC_CHUNK_BOUND (1u << 20)    /* a writer ends a chunk once it holds this much payload */

/* Results of rec_read (and error codes of the other calls). */
enum rec_status {
    REC_OK = 1,          /* a record was read */
    REC_END = 0,         /* clean end: the last stream's trailer was read, then end of input */
    REC_ETRUNC = -1,     /* input ended inside a stream (no trailer) */
    REC_ECORRUPT = -2,   /* checksum mismatch, bad frame, impossible length, reserved bits set */
    REC_EIO = -3,        /* read or write error from the system */
    REC_EVERSION = -4,   /* stream major version this reader does not support */
    REC_EKIND = -5,      /* stream kind other than the one expected */
    REC_EMAGIC = -6,     /* input does not start like an nmt stream */
    REC_ENOMEM = -7,     /* allocation failed */
    REC_EUSAGE = -8,     /* invalid argument from the caller */
    REC_EMIXED = -9      /* a concatenated stream differs from the first in version or origin */
};

/* The provenance keys that give a stream's records their meaning: the vocabulary fingerprint of
 * ids, the normalisation of text. Concatenated streams must agree on each (present in both with
 * the same value, or absent from both), and on the major version. */
#define REC_ORIGIN_KEYS {"vocab", "normalize"}

/* Returns a short name for a status ("truncated", "corrupt", ...). */
const char *rec_status_name(int status);

/* One key=value provenance pair. */
struct rec_kv {
    char *key;
    char *value;
};

/* A stream header. Owned by the reader or writer that holds it. */
struct rec_header {
    char kind[REC_MAX_KIND + 1];
    unsigned major, minor;
    uint32_t flags;            /* REC_FLAG_* */
    char *producer;            /* "nmt-tokenize 0.1.0" */
    struct rec_kv *kv;
    size_t nkv;
};

/* Returns the value of KEY in H, or NULL when absent. */
const char *rec_header_get(const struct rec_header *h, const char *key);

/* ---- writer ---- */
struct rec_writer;

/* Options for rec_writer_open. Zero-initialise and set what you need. */
struct rec_writer_opts {
    int level;                 /* zstd level; 0 means the default (1) */
    size_t chunk_bound;        /* payload bytes per chunk; 0 means REC_CHUNK_BOUND */
    uint32_t flags;            /* header flags, REC_FLAG_* */
};

/* Creates a writer on FD (not closed by the writer), writes the header frame and flushes it.
 * KIND is the record kind, PRODUCER the tool and version, KV the NKV provenance pairs (copied).
 * NAME names the output in error messages. Returns NULL with nmt_errmsg() set on failure. */
struct rec_writer *rec_writer_open(int fd, const char *name, const char *kind, const char *producer,
                                   const struct rec_kv *kv, size_t nkv, const struct rec_writer_opts *opts);
/* Appends one record of LEN bytes; ends the chunk when it reaches the bound. 0 or a negative status. */
int rec_write(struct rec_writer *w, const void *data, size_t len);
/* Ends the current chunk (if it holds records) and writes it out, so a reader receives every
 * record written so far. 0 or a negative status. */
int rec_flush(struct rec_writer *w);
/* Ends the last chunk, writes the trailer and frees W (also on error). 0 or a negative status.
 * The fd stays open: the caller closes it and checks that close. */
int rec_writer_close(struct rec_writer *w);
/* Frees W without writing a trailer (the stream stays truncated, as it should after a failure). */
void rec_writer_abort(struct rec_writer *w);
/* Returns the number of records written so far. */
uint64_t rec_writer_count(const struct rec_writer *w);

/* ---- reader ---- */
struct rec_reader;

/* Creates a reader on FD (not closed by the reader) and reads the first header. NAME names the
 * input in messages. EXPECT_KIND is the kind required, or NULL for any. On failure returns NULL,
 * stores the status in *STATUS (if given) and sets nmt_errmsg(). */
struct rec_reader *rec_reader_open(int fd, const char *name, const char *expect_kind, int *status);
/* Returns the header of the first stream read. */
const struct rec_header *rec_reader_header(const struct rec_reader *r);
/* Reads the next record: REC_OK with *DATA and *LEN set (valid until the next call), REC_END at a clean
 * end, or a negative status with nmt_errmsg() naming the input and the byte offset. */
int rec_read(struct rec_reader *r, const unsigned char **data, size_t *len);
/* Returns the number of records read so far (over all concatenated streams). */
uint64_t rec_reader_count(const struct rec_reader *r);
/* Returns the number of concatenated streams whose header has been read. */
uint64_t rec_reader_streams(const struct rec_reader *r);
/* Returns the byte offset of the input consumed so far. */
uint64_t rec_reader_offset(const struct rec_reader *r);
/* Frees R; rec_reader_free(NULL) is a no-op. */
void rec_reader_free(struct rec_reader *r);

#endif
