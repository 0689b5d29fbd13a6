/* marian.h: Marian transformer models (formats/marian.md): an nmt model as a Marian .npz archive
 * with its .yml vocabulary, and a Marian .npz with its vocabulary as an nmt model. The tensors map
 * one to one (Marian's weights are [in, out], nmt's (out, in); nmt's fused QKV and KV are Marian's
 * separate Wq, Wk, Wv); vocabulary ids are permuted (Marian has no <pad> nor <s>: its </s> 0 and
 * <unk> 1 are nmt's 2 and 3). An option the other side cannot express is refused by name. */
#ifndef NMT_MARIAN_H
#define NMT_MARIAN_H

#include <stddef.h>

#include "io/safetensors.h"
#include "nn/model_config.h"
#include "text/vocab.h"

#define MARIAN_LN_EPS 1e-6f          /* Marian's layer norm epsilon */
#define MARIAN_ABSENT_BIAS (-1e4f)   /* output bias of the nmt ids Marian lacks (<pad>, <s>) on import:
                                      * exp(-1e4) is 0 in float, so scores are Marian's exactly */

/* Checks that every option of configuration C has a Marian equivalent: 0, or -1 with the error
 * naming the first that has none (Marian's positions, zero start embedding and epsilon 1e-6 are
 * required). */
int marian_check_config(const struct model_config *c);
/* Returns the path of the vocabulary written beside the archive NPZ ("DIR/x.npz" gives
 * "DIR/x.vocab.yml"), malloc'ed, or NULL (memory). */
char *marian_vocab_path(const char *npz);
/* Writes the model of checkpoint F (configuration C, vocabulary V, float32 weights: as
 * checkpoint_open_model returns them) as the Marian archive NPZ and its vocabulary VOCAB_OUT
 * (.yml), each atomically. 0, or -1 with the error set (an inexpressible option, a missing
 * tensor, a piece Marian cannot hold, I/O). */
int marian_export(const struct st_file *f, const struct model_config *c, const struct vocab *v, const char *npz,
                  const char *vocab_out);
/* Reads the options of a Marian model, the text of its special:model.yml (LEN bytes, NUL padding
 * allowed), into *C (C->vocab left 0), Marian's vocabulary size into *VOCAB and whether it has an
 * output bias into *BIAS. 0, or -1 with the error set (an option nmt lacks or does not know, named;
 * "model.yml: line N: ..." for text outside the YAML subset). */
int marian_read_options(const char *text, size_t len, struct model_config *c, int *vocab, int *bias);
/* Reads the Marian archive NPZ with its vocabulary VOCAB (.yml or .yaml; a SentencePiece model,
 * recognised by its content; else plain text, a piece a line) as an nmt model: its configuration
 * into *C, its weights into *PARAMS (malloc'ed, laid out as nn/params.h places them for *C) and its
 * vocabulary into *V. 0, or -1 with the error set (an option nmt lacks, named; a missing, extra or
 * misshapen array; a vocabulary that does not fit) and nothing allocated. */
int marian_import(const char *npz, const char *vocab, struct model_config *c, float **params, struct vocab **v);

#endif
