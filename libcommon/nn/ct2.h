/* ct2.h: the writer of CTranslate2 model directories (formats/ctranslate2.md): an nmt model as
 * CTranslate2's TransformerSpec (model.bin, binary version 6, spec revision 7), its config.json
 * and shared_vocabulary.json, so that CTranslate2 translates as nmt-decode does. */
#ifndef NMT_CT2_H
#define NMT_CT2_H

#include "io/safetensors.h"
#include "nn/model.h"
#include "text/vocab.h"

#define CT2_BINARY_VERSION 6      /* model.bin layout version written */
#define CT2_SPEC_REVISION 7       /* revision of TransformerSpec written */

/* How the weights are stored. */
enum ct2_quant {
    CT2_FLOAT32 = 0,              /* every weight in float32 */
    CT2_INT8 = 1                  /* embedding and linear weights in int8 with a float32 scale a row */
};

/* Checks that every model option in checkpoint F's metadata ("model.*") has a CTranslate2
 * equivalent: 0, or -1 with the error naming the first one that has none. */
int ct2_check_options(const struct st_file *f);

/* Writes the model of checkpoint F (configuration C, vocabulary V, float32 weights: as
 * checkpoint_open_model returns them) as a CTranslate2 model directory DIR, with weights stored as
 * Q says. The files are written into a temporary directory beside DIR (".NAME.tmpXXXXXX"), which
 * is renamed to DIR at the end: DIR must not exist, or be an empty directory. 0, or -1 with the
 * error set (an option CTranslate2 cannot express, a missing tensor, I/O) and nothing left behind. */
int ct2_export(const struct st_file *f, const struct model_config *c, const struct vocab *v, const char *dir,
               enum ct2_quant q);

#endif
