/* model_config.h: the shape and regularisation of a Transformer (struct model_config), its presets, checks
 * and checkpoint metadata, and the one parameter tensor of the layout (struct model_param). */
#ifndef NMT_MODEL_CONFIG_H
#define NMT_MODEL_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"

/* The position encoding (model_config.positions). */
enum model_positions { MODEL_POS_PAPER = 0, MODEL_POS_MARIAN = 1 };
/* The FFN activation (model_config.activation). */
enum model_activation { MODEL_ACT_RELU = 0, MODEL_ACT_SWISH = 1 };
/* Which of the source embedding, target embedding and output projection are one matrix
 * (model_config.tie). */
enum model_tie { MODEL_TIE_ALL = 0, MODEL_TIE_TARGET = 1, MODEL_TIE_NONE = 2 };

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
    int positions;         /* MODEL_POS_PAPER: the paper's sinusoid PE(p,2i) = sin(p/10000^(2i/D)),
                            * PE(p,2i+1) = cos(same); MODEL_POS_MARIAN: sines in dims [0, D/2), cosines
                            * in [D/2, D): PE(p,i) = sin(p*exp(-i*ln(10000)/(D/2-1))), PE(p,D/2+i) = cos(same) */
    int start_zero;        /* 0: the decoder's first input is <s>'s embedding; 1: a zero vector (plus the
                            * position encoding of position 0), in training and in every decoding */
    int activation;        /* FFN activation: MODEL_ACT_RELU or MODEL_ACT_SWISH (x * sigmoid(x)) */
    int tie;               /* MODEL_TIE_ALL: one (V,D) matrix for source embedding, target embedding and
                            * output projection; MODEL_TIE_TARGET: a separate source embedding, the target
                            * embedding shared with the output projection; MODEL_TIE_NONE: three matrices */
    int output_bias;       /* 1: a bias (V) added to the output logits */
};

/* Fills C with preset NAME ("tiny", "small", "base", "big") and defaults for the rest (dropout 0.1,
 * label smoothing 0.1, post-norm, max_len 1024); VOCAB is left 0. Returns 0, or -1 for an unknown name. */
int model_preset(struct model_config *c, const char *name);
/* The names of the values of the options above, as checkpoints and nmt-train spell them: "paper" or
 * "marian"; "bos" or "zero"; "relu" or "swish"; "all", "target" or "none". NULL for a value out of range. */
const char *model_positions_name(int v);
const char *model_start_name(int v);
const char *model_activation_name(int v);
const char *model_tie_name(int v);
/* The value of NAME for the option of KEY ("model.positions", "model.start_embedding",
 * "model.activation", "model.tied_embeddings"), into *OUT. 0, or -1 with the error naming the key and
 * the value. */
int model_option_parse(const char *key, const char *name, int *out);
/* Whether C needs the backend's position-table embedding (a Marian position table or a zero start):
 * 1 or 0. */
int model_needs_pe_table(const struct model_config *c);
/* Fills PE (MAX_LEN, D) with the position encoding of C's formula (C->positions), row p for position p. */
void model_position_table(const struct model_config *c, float *pe);
/* Fills PE (N, D) with rows P0 .. P0 + N - 1 of model_position_table's. */
void model_position_rows(const struct model_config *c, float *pe, int p0, int n);

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
