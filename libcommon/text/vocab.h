/* vocab.h: BPE vocabularies and their text file format (formats/vocab.md, nmt-vocab(5)).
 *
 * Piece ids are fixed by kind: 0..3 are the special tokens <pad> <s> </s> <unk> (NMT_PAD, NMT_BOS,
 * NMT_EOS, NMT_UNK in records.h), 4..259 the byte pieces <0x00>..<0xFF>, then the character pieces
 * (one code point each), then the merge pieces in the order they were learnt: merge piece i joins
 * pieces left[i] and right[i] (both smaller ids), and its id is its rank when encoding. */
#ifndef NMT_VOCAB_H
#define NMT_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "io/records.h"
#include "base/strtab.h"
#include "text/normalize.h"
#include "text/spm.h"

#define VOCAB_MAJOR 1
#define VOCAB_MINOR 0
#define VOCAB_FIRST_BYTE 4
#define VOCAB_FIRST_CHAR 260
#define VOCAB_MAX_SIZE (1u << 24)        /* largest vocabulary a reader accepts */
#define VOCAB_MAX_FILE (1u << 30)        /* largest vocabulary file a reader accepts */

enum vocab_kind { VOCAB_SPECIAL = 0, VOCAB_BYTE = 1, VOCAB_CHAR = 2, VOCAB_MERGE = 3 };

struct vocab {
    uint32_t n;                /* pieces, specials and bytes included */
    uint32_t cap;
    uint8_t *kind;             /* (n) enum vocab_kind */
    uint32_t *left, *right;    /* (n) parents of merge pieces, 0 for the others */
    struct strtab text;        /* texts of char and merge pieces: strtab id k is piece VOCAB_FIRST_CHAR + k */
    enum text_norm normalize;  /* normalisation the pieces were learnt under */
    char *options;             /* learning options, free text for provenance (may be NULL) */
    char byte_text[256][7];    /* "<0x00>".."<0xFF>" */
    struct spm_model *spm;     /* a SentencePiece model (text/spm.h): then its pieces, normalisation and
                                * segmentation are the vocabulary's, and kind, left, right and text unused */
};

/* Returns a new vocabulary holding the 4 specials and 256 byte pieces, or NULL (memory). */
struct vocab *vocab_new(enum text_norm normalize);
/* Frees V; vocab_free(NULL) is a no-op. */
void vocab_free(struct vocab *v);
/* Sets the free-text options line (copied); 0 or -1. */
int vocab_set_options(struct vocab *v, const char *options);
/* Appends a character piece for code point CP; returns its id, or -1 (duplicate, no merges may
 * precede it, memory) with the error set. */
int64_t vocab_add_char(struct vocab *v, int32_t cp);
/* Appends the merge of pieces LEFT and RIGHT (char or merge pieces); returns its id, or -1 with
 * the error set (bad parents, its text already a piece, vocabulary full, memory). */
int64_t vocab_add_merge(struct vocab *v, uint32_t left, uint32_t right);
/* Returns the id of the char or merge piece whose text is S (LEN bytes), or -1 when none (with a
 * SentencePiece model, of any of its pieces). */
int64_t vocab_find(const struct vocab *v, const char *s, size_t len);
/* Returns the displayed text of piece ID ("<pad>", "<0x41>", or the piece's text) and its length
 * in *LEN; NULL when ID is out of range. */
const char *vocab_piece(const struct vocab *v, uint32_t id, uint32_t *len);
/* Appends the bytes that ids IDS[0..N) stand for to OUT (byte pieces give their byte, specials
 * nothing, except <unk> which gives U+2047 '⁇'; with a SentencePiece model, the text spm_decode
 * gives). Returns 0, or -1 (id out of range, memory). */
int vocab_concat(const struct vocab *v, const uint32_t *ids, size_t n, struct nmt_buf *out);

/* Returns the fingerprint: FNV-1a 64 of the canonical content (normalisation and pieces). */
uint64_t vocab_fingerprint(const struct vocab *v);
/* Writes the fingerprint of V as 16 lowercase hex digits and a NUL into HEX. */
void vocab_fingerprint_hex(const struct vocab *v, char hex[17]);

/* Replaces OUT's content with V in the vocabulary file format (a SentencePiece model: its model
 * file); 0 or -1 (memory). */
int vocab_format(const struct vocab *v, struct nmt_buf *out);
/* Parses a vocabulary file held in DATA (LEN bytes), or a SentencePiece model (spm_sniff); NAME
 * names it in errors. Returns the vocabulary, or NULL with the error set ("NAME: line N: what",
 * "NAME: byte N: what"). */
struct vocab *vocab_parse(const char *data, size_t len, const char *name);
/* Reads and parses the vocabulary file PATH. Returns the vocabulary or NULL with the error set. */
struct vocab *vocab_load(const char *path);

#endif
