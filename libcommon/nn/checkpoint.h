/* checkpoint.h: the one module that reads and writes checkpoints (formats/checkpoint.md): the
 * model (nn/model.h writes its configuration and tensors), the vocabulary it was trained with, and
 * the training state a --resume continues from. Every metadata key is named here. */
#ifndef NMT_CHECKPOINT_H
#define NMT_CHECKPOINT_H

#include <stdint.h>

#include "base/buf.h"
#include "io/safetensors.h"
#include "nn/model.h"
#include "text/vocab.h"

#define CKPT_VOCAB_FILE "vocab.file"               /* tensor: the vocabulary file's bytes (U8) */
#define CKPT_VOCAB_FINGERPRINT "vocab.fingerprint" /* metadata: its fingerprint, 16 hex digits */
#define CKPT_PRODUCER "producer"                   /* metadata: the writing tool and version */
#define CKPT_MODEL_PREFIX "model."                 /* metadata keys of the model configuration */
#define CKPT_TRAIN_PREFIX "train."                 /* metadata keys of the training state */
#define CKPT_TRAIN_CONFIG "train.config"           /* metadata: nmt-train's configuration (--dump-config) */
#define CKPT_EMA "optim.ema"                       /* tensor (P): the moving average of the weights (--ema) */
#define CKPT_WEIGHTS "weights"                     /* metadata: "ema" when the weights are that average */
#define CKPT_AVG_COUNT "avg.checkpoints"           /* metadata: how many checkpoints were averaged */
#define CKPT_QUANTIZED "quantized"                 /* metadata: "int8" when linear weights are stored so */
#define CKPT_QUANT_ROUNDING "quantized.rounding"   /* metadata: "nearest", or "gptq" (nmt-avg --calibrate) */
#define CKPT_SCALE_SUFFIX ".scale"                 /* tensor NAME.scale: the row scales of int8 NAME */
#define CKPT_SHORTLIST_TABLE "shortlist.table"       /* tensor (I32): each source piece's targets (nn/shortlist.h) */
#define CKPT_SHORTLIST_FREQUENT "shortlist.frequent" /* tensor (I32): the most frequent target pieces */

/* Where training stands: what a checkpoint holds besides the model, and all a resume needs. */
struct train_state {
    uint64_t step, epoch, pos;  /* completed steps; position of the next batch */
    uint64_t tokens;            /* target tokens trained on */
    double best_valid;          /* best validation nll per token (INFINITY: none) */
    double best_bleu;           /* best validation BLEU (-INFINITY: none; nmt-train --valid-bleu) */
    uint64_t bad_valid;         /* validations since the best (by BLEU with --valid-bleu, else nll) */
    uint64_t skipped;           /* non-finite steps skipped in total */
};

/* The training options a checkpoint records beside the state (informative; a resume takes its own). */
struct train_record {
    uint64_t seed, warmup, update_freq;
    double lr;
    const char *schedule;       /* its name (nn/model.h) */
    double ema;                 /* decay of the moving average of the weights (0: none) */
    const char *fingerprint;    /* the vocabulary's, 16 hex digits */
    const struct nmt_buf *vocab_text; /* the vocabulary file */
    const char *producer;       /* "nmt-train 0.1.0" */
    const char *config;         /* the configuration as nmt-train --dump-config prints it, or NULL */
};

/* Writes M (parameters and optimizer moments), the state S, the record R and, when EMA (host, P
 * floats laid out as the parameters) is not NULL, the moving average of the weights to PATH,
 * atomically. A model whose parameters are not finite is never written. 0, or -1 with the error set. */
int checkpoint_save(struct model *m, const struct train_state *s, const struct train_record *r, const float *ema,
                    const char *path);
/* Writes a checkpoint of configuration C whose weights are PARAMS (host floats laid out as
 * nn/params.h places them) and vocabulary V, without training state: a model to decode or to start
 * a run from (nmt-train --init-from), as a converter makes one. PRODUCER names the writer. Weights
 * that are not finite are refused. 0, or -1 with the error set. */
int checkpoint_save_host(const struct model_config *c, const float *params, const struct vocab *v,
                         const char *producer, const char *path);
/* Writes M's parameters without the optimizer's state, with S and R as metadata, to PATH, atomically:
 * a checkpoint to decode or to start a run from, not to resume. With EMA_WEIGHTS non-zero it says
 * that they are a moving average (CKPT_WEIGHTS). 0, or -1 with the error set. */
int checkpoint_save_weights(struct model *m, const struct train_state *s, const struct train_record *r,
                            int ema_weights, const char *path);
/* Reads the moving average of the weights (CKPT_EMA) of F into EMA (host, N floats): 1 when read,
 * 0 when F has none, -1 with the error set (another type or size). */
int checkpoint_get_ema(const struct st_file *f, float *ema, size_t n);
/* Reads the training state of F into S; 0, or -1 with the error set (missing or malformed keys). */
int checkpoint_train_state(const struct st_file *f, struct train_state *s);
/* Parses the vocabulary inside F (NAME for messages); returns it, or NULL with the error set. */
struct vocab *checkpoint_vocab(const struct st_file *f, const char *name);
/* Checks that every float tensor of F (read from NAME) is finite; 0, or -1 with the error set
 * naming the tensor and element (a checkpoint of a diverged or damaged model). */
int checkpoint_check_finite(const struct st_file *f, const char *name);
/* Adds the int8 matrix NAME (ROWS, COLS) of values Q and row scales SCALE (ROWS) to W as tensors
 * NAME (I8) and NAME.scale (F32) (formats/checkpoint.md; nn/quantize.h chooses them); Q and SCALE
 * must live until W is written. 0, or -1 with the error set. */
int checkpoint_put_int8(struct st_writer *w, const char *name, uint64_t rows, uint64_t cols, const int8_t *q,
                        const float *scale);
/* Checks every int8 tensor of F (read from NAME: 2-D, values in -127..127, with NAME.scale: F32, one
 * positive finite scale a row) and replaces it in F by its float32 values q * scale. 0, or -1 with
 * the error set naming the tensor. */
int checkpoint_dequantize(struct st_file *f, const char *name);
/* Writes to DST the N float32 values (little-endian) from element FIRST of the tensor T of F, as
 * a model reads them: T's bytes when it is float32, its int8 values times their row scales
 * (NAME.scale) when int8, the same values checkpoint_dequantize makes. 0, or -1 with the error set
 * (another type, a range outside T, no scales). */
int checkpoint_read_f32(const struct st_file *f, const struct st_tensor *t, uint64_t first, size_t n, void *dst);
/* Reads PATH for decoding (without the optimizer's state, "optim." tensors, which is not read):
 * the file (kept open for the tensors), its configuration into *CFG and its vocabulary into *V,
 * checked against each other, its weights checked finite and its int8 weights checked (as
 * checkpoint_dequantize does) but left int8: model_load reads them as float32 one tensor at a time
 * (checkpoint_read_f32), and checkpoint_dequantize turns them all. 0, or -1 with the error set (*F
 * and *V NULL). */
int checkpoint_open_model(const char *path, struct st_file **f, struct model_config *cfg, struct vocab **v);

#endif
