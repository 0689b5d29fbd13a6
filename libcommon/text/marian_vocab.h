/* marian_vocab.h: Marian's vocabulary files (formats/marian.md): a .yml (or .yaml) mapping of
 * pieces to ids ("</s>: 0"), as Marian's DefaultVocab writes it, or a plain text file of one piece
 * a line whose id is its line number (from 0). Marian's own ids are kept: its models need "</s>"
 * (its end of sentence) and "<unk>" (unknown) in them. */
#ifndef NMT_MARIAN_VOCAB_H
#define NMT_MARIAN_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/strtab.h"
#include "text/vocab.h"

#define MVOCAB_MAX_SIZE (1u << 24)   /* most pieces a reader accepts */
#define MVOCAB_EOS "</s>"
#define MVOCAB_UNK "<unk>"

/* A vocabulary: piece I (its text: strtab id I) has Marian id I. */
struct mvocab {
    struct strtab pieces;
};

/* Returns a new empty vocabulary, or NULL (memory). */
struct mvocab *mvocab_new(void);
/* Frees V; mvocab_free(NULL) is a no-op. */
void mvocab_free(struct mvocab *v);
/* Returns the number of pieces of V. */
uint32_t mvocab_size(const struct mvocab *v);
/* Appends piece S (LEN bytes) with the next id; returns the id, or -1 with the error set (empty,
 * not valid UTF-8, holding a NUL or a line break, already present, vocabulary full, memory). */
int64_t mvocab_add(struct mvocab *v, const char *s, size_t len);
/* Returns the id of piece S (LEN bytes), or -1 when absent. */
int64_t mvocab_find(const struct mvocab *v, const char *s, size_t len);
/* Returns the text of piece ID and its length in *LEN, or NULL when ID is out of range. */
const char *mvocab_piece(const struct mvocab *v, uint32_t id, uint32_t *len);

/* Parses a .yml vocabulary held in DATA (LEN bytes); NAME names it in errors. Every value must be
 * an id, the ids exactly 0..N-1. Returns the vocabulary, or NULL with the error set ("NAME: line
 * N: what", "NAME: id 7 is missing"). */
struct mvocab *mvocab_parse_yml(const char *data, size_t len, const char *name);
/* Parses a plain text vocabulary (one piece a line, no empty lines nor duplicates; a final newline
 * optional, a CR before each newline dropped). Returns it, or NULL with the error set. */
struct mvocab *mvocab_parse_txt(const char *data, size_t len, const char *name);
/* Reads the vocabulary file PATH: .yml or .yaml as YAML, anything else as plain text. Returns it,
 * or NULL with the error set. */
struct mvocab *mvocab_load(const char *path);
/* Whether PATH names a YAML vocabulary (ends in .yml or .yaml). */
int mvocab_is_yml(const char *path);
/* Replaces OUT's content with V as a .yml vocabulary, one "piece: id" line per piece in id order,
 * quoted where YAML needs it. 0, or -1 with the error set. */
int mvocab_format_yml(const struct mvocab *v, struct nmt_buf *out);
/* Writes V to PATH atomically, as .yml when mvocab_is_yml(PATH), else as plain text. 0 or -1. */
int mvocab_save(const struct mvocab *v, const char *path);

/* The nmt vocabulary of Marian vocabulary MV, as Marian reads its input: each space-separated word
 * of a line is one piece, or <unk> (a SentencePiece word model, text/spm.h, whose pieces are
 * U+2581 + each piece of MV, but "</s>" and "<unk>", which are its end of sentence and unknown
 * pieces). Marian id k is nmt id v->spm->to_nmt[k]. Returns it, or NULL with the error set (MV
 * lacks "</s>" or "<unk>"). */
struct vocab *mvocab_to_vocab(const struct mvocab *mv);
/* The Marian vocabulary of nmt vocabulary V: "</s>" (nmt id 2) is id 0, "<unk>" (3) id 1, and nmt
 * id i >= 4 is id i - 2 (nmt's <pad> and <s> have none); the pieces' texts as vocab_piece gives
 * them (a word model's without their leading U+2581: mvocab_to_vocab's inverse). Returns it, or NULL with the error set (a piece Marian's files cannot hold: empty, with a
 * NUL or line break, or the same text twice). */
struct mvocab *mvocab_from_vocab(const struct vocab *v);

#endif
