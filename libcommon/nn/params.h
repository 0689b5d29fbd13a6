/* params.h: the one parameter layout of the Transformer. Every tensor the model has is a field of
 * struct model_weights below, with its shape and checkpoint name; model_weights_layout places them,
 * in this order, over one buffer of floats (parameters, their gradients, or nothing, to count).
 * Training (model.c), checkpoints and incremental decoding (infer.c) all read the same view.
 * Shapes: V vocabulary, D model width, F FFN width, Le/Ld encoder/decoder layers; the layer index
 * L in a name is the layer's. */
#ifndef NMT_PARAMS_H
#define NMT_PARAMS_H

#include <stddef.h>

#include "nn/model_config.h"

/* One encoder layer ("enc.L." names). */
struct enc_layer_weights {
    float *qkv_w, *qkv_b;  /* (3D, D), (3D)  att.qkv.weight, att.qkv.bias: queries, keys, values */
    float *o_w, *o_b;      /* (D, D), (D)    att.o.weight, att.o.bias */
    float *w1, *b1;        /* (F, D), (F)    ffn.w1.weight, ffn.w1.bias */
    float *w2, *b2;        /* (D, F), (D)    ffn.w2.weight, ffn.w2.bias */
    float *ln1_g, *ln1_b;  /* (D), (D)       ln1.weight, ln1.bias: around the attention */
    float *ln2_g, *ln2_b;  /* (D), (D)       ln2.weight, ln2.bias: around the FFN */
};

/* One decoder layer ("dec.L." names). */
struct dec_layer_weights {
    float *sqkv_w, *sqkv_b; /* (3D, D), (3D) self_att.qkv.weight, self_att.qkv.bias */
    float *so_w, *so_b;     /* (D, D), (D)   self_att.o.weight, self_att.o.bias */
    float *cq_w, *cq_b;     /* (D, D), (D)   cross_att.q.weight, cross_att.q.bias: encoder-decoder queries */
    float *ckv_w, *ckv_b;   /* (2D, D), (2D) cross_att.kv.weight, cross_att.kv.bias: keys, values of the memory */
    float *co_w, *co_b;     /* (D, D), (D)   cross_att.o.weight, cross_att.o.bias */
    float *w1, *b1;         /* (F, D), (F)   ffn.w1.weight, ffn.w1.bias */
    float *w2, *b2;         /* (D, F), (D)   ffn.w2.weight, ffn.w2.bias */
    float *ln1_g, *ln1_b;   /* (D), (D)      ln1.weight, ln1.bias: around the self-attention */
    float *ln2_g, *ln2_b;   /* (D), (D)      ln2.weight, ln2.bias: around the encoder-decoder attention */
    float *ln3_g, *ln3_b;   /* (D), (D)      ln3.weight, ln3.bias: around the FFN */
};

struct model_weights {
    float *emb;                     /* (V, D) emb.weight: the source embedding; with MODEL_TIE_ALL also the
                                     * target embedding and the output projection */
    struct enc_layer_weights *enc;  /* (Le) */
    struct dec_layer_weights *dec;  /* (Ld) */
    float *enc_ln_g, *enc_ln_b;     /* (D) enc_ln.weight, enc_ln.bias: pre-norm only, final encoder layer norm */
    float *dec_ln_g, *dec_ln_b;     /* (D) dec_ln.weight, dec_ln.bias: pre-norm only, final decoder layer norm */
    float *dec_emb;                 /* (V, D) dec_emb.weight: the target embedding, a tensor of its own unless
                                     * MODEL_TIE_ALL (then = emb) */
    float *out_w;                   /* (V, D) out.weight: the output projection, a tensor of its own with
                                     * MODEL_TIE_NONE (else = dec_emb) */
    float *out_b;                   /* (V) out.bias: the output bias (output_bias only), else NULL */
};

/* Allocates W's per-layer arrays for configuration C (pointers left NULL). 0, or -1 with the error set. */
int model_weights_alloc(struct model_weights *w, const struct model_config *c);
/* Frees W's per-layer arrays; W zeroed or allocated by model_weights_alloc. */
void model_weights_free(struct model_weights *w);

/* Lays out the parameters of configuration C over BASE: points W's fields (when W is not NULL; its
 * arrays from model_weights_alloc) at consecutive slices of BASE (the tensors of the options of
 * model_config.h last: dec_emb.weight, out.weight, out.bias, each when the configuration has it) (NULL pointers when BASE is NULL)
 * and, when TAB is not NULL, writes each tensor's name, shape, offset and size into TAB. Returns the
 * number of tensors; *NFLOATS (when not NULL) receives the floats they take in all. */
size_t model_weights_layout(const struct model_config *c, float *base, struct model_param *tab,
                            struct model_weights *w, size_t *nfloats);

#endif
