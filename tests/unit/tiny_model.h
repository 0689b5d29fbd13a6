/* tiny_model.h: the small random model the search and sampling unit tests decode with. */
#ifndef NMT_TEST_TINY_MODEL_H
#define NMT_TEST_TINY_MODEL_H

#include <stdint.h>
#include <string.h>

#include "nn/model.h"

/* A randomly initialised model of 2+2 layers, d 32, heads 4, ff 48, on BE; NULL with the error set. */
static inline struct model *tiny_model(struct backend *be, int pre_norm, int vocab, int max_len, uint64_t seed)
{
    struct model_config c;
    memset(&c, 0, sizeof c);
    c.vocab = vocab;
    c.d_model = 32;
    c.heads = 4;
    c.ff = 48;
    c.enc_layers = 2;
    c.dec_layers = 2;
    c.pre_norm = pre_norm;
    c.max_len = max_len;
    c.ln_eps = 1e-5f;
    struct model *m = model_new(be, &c, 0);
    if (m && model_init(m, seed) < 0) {
        model_free(m);
        m = NULL;
    }
    return m;
}

#endif
