/* spm.h: SentencePiece models (`.model` files of spm_train) as nmt vocabularies: the model's
 * protobuf read by a small wire-format reader (formats/sentencepiece.md), its normalisation (the
 * precompiled character map and the whitespace rules) and its segmentation (unigram Viterbi or BPE
 * merges, unknown runs and byte fallback), giving the pieces spm_encode gives.
 *
 * Ids are nmt's: 0 <pad>, 1 <s>, 2 </s>, 3 <unk> are the model's pad, bos, eos and unknown pieces
 * (trainer_spec pad_id, bos_id, eos_id; the UNKNOWN piece), whichever it has; every other piece
 * follows from 4 in the model's order. */
#ifndef NMT_SPM_H
#define NMT_SPM_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/strtab.h"

#define SPM_MAX_FILE (1u << 30)   /* largest model a reader accepts */
#define SPM_CACHE_WORDS (1u << 18) /* words an encoder remembers (then it starts afresh) */
#define SPM_CACHE_UNITS (1u << 22) /* 4-byte units of unigram words an encoder remembers (then it starts afresh) */
#define SPM_CACHE_WORD_BYTES 255u  /* longest unigram word an encoder remembers */

enum { SPM_PLAIN = 1, SPM_PLAIN_BEFORE_ASCII = 2 }; /* spm_encoder.plain */
enum spm_type { SPM_UNIGRAM = 1, SPM_BPE = 2, SPM_WORD = 3 };
/* piece types of sentencepiece_model.proto */
enum spm_piece_type { SPM_NORMAL = 1, SPM_UNKNOWN = 2, SPM_CONTROL = 3, SPM_USER_DEFINED = 4, SPM_UNUSED = 5, SPM_BYTE = 6 };

struct spm_model {
    char *name;                /* the file's name, in errors */
    unsigned char *bytes;      /* (nbytes) the model file, kept for the fingerprint and checkpoints */
    size_t nbytes;
    enum spm_type type;
    uint32_t n;                /* pieces of the model */
    struct strtab text;        /* piece texts: strtab id = model id */
    float *score;              /* (n) */
    uint8_t *ptype;            /* (n) enum spm_piece_type */
    int bpe_words;             /* BPE whose normal pieces have U+2581 only at their start: merges never
                                * cross a word's start, so words can be segmented apart and cached */
    int unigram_words;         /* unigram, U+2581 escaped, whose normal pieces hold U+2581 only at their
                                * start (and end with no part of it): no piece spans a word's start, so
                                * the pieces found in a word (from one U+2581 to the next) depend on the
                                * word alone and can be cached */
    uint32_t *to_nmt;          /* (n) nmt id of each model id */
    int64_t *to_model;         /* (n_nmt) model id of each nmt id, -1 for a special the model lacks */
    uint32_t n_nmt;            /* pieces in nmt's numbering (n, plus the specials the model lacks) */
    int64_t unk, bos, eos, pad;/* model ids, -1 when absent */
    int32_t byte_piece[256];   /* model ids of <0x00>..<0xFF> with byte fallback, else -1 */
    int byte_fallback;
    float min_score;           /* lowest score of the normal pieces (unigram unknown penalty) */
    char *unk_surface;         /* what decoding writes for <unk> (default " \u2047 ") */
    /* normalizer_spec */
    int add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces;
    const unsigned char *charsmap; /* (4 ncharsmap) double-array trie units, little-endian, in bytes */
    uint32_t ncharsmap;
    const char *normalized;    /* (nnormalized) NUL-terminated replacement strings */
    uint32_t nnormalized;
    /* the trie of the normal and unused pieces, a double array: from node s (the root 0) byte c leads
     * to t = trie[s].base + c when trie[t].check == s; trie[t].piece is the normal piece ending there
     * and score its score, or -1 (an unused piece too: segmentation passes over those) (side by
     * side: a step reads one cache line) */
    struct spm_trie_unit { int32_t base, check, piece; float score; } *trie;
    uint32_t ntrie;
};

/* The node byte C leads to from node S of M's trie, or -1. */
static inline int32_t spm_trie_next(const struct spm_model *m, int32_t s, unsigned char c)
{
    uint32_t t = (uint32_t)m->trie[s].base + c;
    return t < m->ntrie && m->trie[t].check == s ? (int32_t)t : -1;
}

/* The scratch of one encoding thread (any number per model). */
struct spm_encoder {
    const struct spm_model *m;
    struct nmt_buf norm;       /* the normalised line */
    void *lattice;             /* unigram: best path per byte position */
    size_t lattice_cap;
    void *sym, *heap;          /* BPE: symbols and candidate merges */
    size_t sym_cap, heap_cap;
    uint32_t *raw;             /* model ids before unknown runs and byte fallback */
    size_t raw_cap;
    uint32_t *raw_end;         /* (raw) end offset in norm of each piece */
    size_t raw_end_cap;
    uint8_t plain[256];        /* SPM_PLAIN: ASCII bytes no rule of the character map starts with;
                                * SPM_PLAIN_BEFORE_ASCII: no rule is, nor starts with followed by ASCII;
                                * else 0 (every byte from 0x80) */
    int graph_plain;           /* every byte from 0x21 to 0x7E has a kind of plain */
    /* BPE on a model whose pieces have U+2581 only at their start (spm_model.bpe_words): the words
     * (from one U+2581 to the next) already segmented, at most SPM_CACHE_WORDS */
    struct strtab cache;
    uint32_t *cache_first;     /* (cache.n + 1) word k's pieces are [first[k], first[k + 1]) of: */
    uint32_t *cache_id, *cache_end; /* model id, end offset in the word */
    size_t cache_first_cap, cache_id_cap, cache_end_cap, cache_pieces;
    /* unigram on a model no piece of which spans a word's start (spm_model.unigram_words): the steps
     * of the search in each word met (the pieces found from each of its characters, in the search's
     * order), not its outcome, which depends on the float sums of what precedes the word; at most
     * words_max words and units_max units */
    uint32_t *words;           /* (words_len) the words' records (spm.c: their text, steps and path) */
    size_t words_len, words_cap;
    uint64_t *word_slot;       /* (nword_slot, a power of two) hash >> 32 << 32 | (record offset + 1); 0 empty */
    size_t nword_slot, nwords;
    size_t words_max, units_max; /* the bounds (SPM_CACHE_WORDS, SPM_CACHE_UNITS; tests lower them) */
    void *line_words;          /* (line_words_cap) the words of the line being searched */
    size_t line_words_cap;
};

/* Parses the SentencePiece model in DATA (LEN bytes, copied); NAME names it in errors. Returns the
 * model, or NULL with the error set ("NAME: byte N: what"; unsupported features refused by name). */
struct spm_model *spm_parse(const void *data, size_t len, const char *name);
/* (Re)builds M's trie of segmentation from its N pieces' TEXT, PTYPE and SCORE: the normal and
 * unused pieces, as a double array. 0, or -1 with the error set (memory, a trie over 2^30 units). */
int spm_build_trie(struct spm_model *m);
/* Frees M; spm_free(NULL) is a no-op. */
void spm_free(struct spm_model *m);
/* Whether DATA (LEN bytes) starts like a model file (a protobuf whose first field is a piece). */
int spm_sniff(const void *data, size_t len);
/* Returns the text of nmt id ID (the model's piece, or nmt's name of a special the model lacks) and
 * its length in *LEN; NULL when ID is out of range. */
const char *spm_piece(const struct spm_model *m, uint32_t id, uint32_t *len);
/* Returns the nmt id of the piece whose text is S (LEN bytes), or -1. */
int64_t spm_find(const struct spm_model *m, const char *s, size_t len);

/* Makes E encode with M (kept, not owned). */
void spm_encoder_init(struct spm_encoder *e, const struct spm_model *m);
/* Frees E's scratch. */
void spm_encoder_free(struct spm_encoder *e);
/* Normalises S (LEN bytes) as the model does into E->norm (followed by 8 zero bytes it does not
 * count, when not empty). 0, or -1 with the error set (a rule of the character map outside its
 * strings, out of memory). */
int spm_normalize(struct spm_encoder *e, const char *s, size_t len);
/* Segments S (LEN bytes) as spm_encode does: *N nmt ids in *IDS (capacity *CAP, grown as needed).
 * 0, or -1 with the error set. */
int spm_encode(struct spm_encoder *e, const char *s, size_t len, uint32_t **ids, uint32_t *n, uint32_t *cap);
/* Appends the text of the N nmt ids at IDS to OUT as spm_decode does (whitespace restored, byte
 * pieces joined, specials dropped, unknown pieces as the unk surface). 0, or -1 (id out of range,
 * memory) with the error set. */
int spm_decode(const struct spm_model *m, const uint32_t *ids, size_t n, struct nmt_buf *out);

/* Appends to OUT the precompiled character map of spm's "nfkc" rule (NMT 0) or "nmt_nfkc" (NMT 1:
 * also the other spaces as a space, control characters dropped, U+FF5E kept), made as spm_train's
 * builder makes it but from utf8proc's NFKC: the u32le size of the trie, its units, the replacement
 * strings. 0, or -1 with the error set (memory). */
int spm_charsmap_nfkc(struct nmt_buf *out, int nmt);

/* What a learnt unigram model's trainer_spec and normalizer_spec say (spm_train's names). */
struct spm_train_spec {
    const char *const *input;  /* (ninput) the training files' names */
    size_t ninput;
    const char *model_prefix;  /* the output's name without ".model" ("" when none) */
    float character_coverage, shrinking;
    uint32_t seed_size, threads, sub_iterations, max_sentence_length, max_piece_chars;
    const char *normalization; /* the normalizer's name: "identity", "nfkc", "nmt_nfkc" */
    const void *charsmap;      /* (ncharsmap bytes) its precompiled character map (spm_charsmap_nfkc), or none */
    size_t ncharsmap;
};
/* Appends to OUT the model file of a unigram model: <unk> 0, <s> 1, </s> 2 (score 0), then the
 * PIECES (strtab id order) with their SCOREs, SPEC's trainer_spec and normalizer_spec (its map, add_dummy_prefix,
 * remove_extra_whitespaces and escape_whitespaces on). 0, or -1 with the error set (memory). */
int spm_write_unigram(struct nmt_buf *out, const struct strtab *pieces, const float *score,
                      const struct spm_train_spec *spec);
/* Replaces OUT's content with a SentencePiece model file of type WORD whose pieces are those of
 * PIECES in order (score 0), piece UNK the unknown one and piece EOS (or -1: none) the end of
 * sentence (a CONTROL piece, trainer_spec eos_id), without bos and pad; its normaliser has no
 * character map nor dummy prefix, removes extra spaces and keeps them unescaped, so that each
 * space-separated word of a line is the piece U+2581 + word, or unknown (decoded as " <unk>", the
 * way Marian writes it). 0, or -1 with the error set. */
int spm_format_word_model(const struct strtab *pieces, int64_t unk, int64_t eos, struct nmt_buf *out);

#endif
