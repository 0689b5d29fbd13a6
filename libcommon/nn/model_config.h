/* model_config.h: the shape and regularisation of a Transformer (struct model_config), its presets, checks
 * and checkpoint metadata, and the one parameter tensor of the layout (struct model_param). */
#ifndef NMT_MODEL_CONFIG_H
#define NMT_MODEL_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"

struct model_config {
    int vocab;             /* V: shared source/target vocabulary size */
    int d_model;           /* D */
    int heads;             /* H; D % H == 0 */
    int ff;                /* F: FFN inner width */
    int enc_layers, dec_layers;
    int pre_norm;          /* 0: post-norm (the paper), 1: pre-norm (with final layer norms) */
    int max_len;           /* longest sentence (tokens incl. EOS) the model accepts */
    float dropout;         /* on embeddings and sublayer outputs (residual dropout) */
    float attn_dropout;    /* on attention probabilities */
    float act_dropout;     /* on the FFN's ReLU activation */
    float label_smoothing; /* eps of the label-smoothed cross-entropy */
    float ln_eps;          /* layer norm epsilon (1e-5, as PyTorch) */
};

/* Fills C with preset NAME ("tiny", "small", "base", "big") and defaults for the rest (dropout 0.1,
 * label smoothing 0.1, post-norm, max_len 1024); VOCAB is left 0. Returns 0, or -1 for an unknown name. */
int model_preset(struct model_config *c, const char *name);
/* Returns 0 if C is a usable configuration, or -1 with the error naming the bad field. */
int model_config_check(const struct model_config *c);
/* Adds C's fields to checkpoint metadata W ("model.d_model" = "512", ...). 0 or -1. */
int model_config_save(const struct model_config *c, struct st_writer *w);
/* Reads C from the metadata of checkpoint F. 0, or -1 with the error naming the missing key. */
int model_config_load(struct model_config *c, const struct st_file *f);

/* One parameter tensor of the layout. */
struct model_param {
    char name[64];
    int ndim;
    int64_t shape[2];
    size_t offset;         /* in floats from the start of the parameter buffer */
    size_t size;           /* elements */
};

#endif
