/* valid_bleu.h: BLEU of a model's translations of a validation batch stream, the metric of
 * nmt-train --valid-bleu: each batch's sources are translated (nn/search.h, beam K, K = 1 greedy),
 * hypotheses and references (the batch's targets) are turned back into text with the vocabulary
 * (text/tokenizer.h) and scored as sacreBLEU scores detokenized text by default (eval/bleu.h:
 * 13a tokenisation, mixed case, exponential smoothing). */
#ifndef NMT_VALID_BLEU_H
#define NMT_VALID_BLEU_H

#include "data/batch_file.h"
#include "run/backend_loader.h"
#include "nn/model.h"
#include "text/vocab.h"

/* Translates every batch of VALID (BR: scratch record) with model M on backend BE, beam BEAM and
 * length penalty 0.6, and stores the corpus BLEU (0 to 100) of the translations against the
 * targets in *BLEU. 0, or -1 with the error set (naming the batch). */
int valid_bleu(struct backend *be, struct model *m, const struct vocab *v, struct batch_file *valid,
               struct batch_record *br, int beam, double *bleu);

#endif
