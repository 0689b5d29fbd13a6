/* model.h: the Transformer encoder-decoder ("Attention Is All You Need"), written once on top of the
 * backend kernel table (plugins/backend.h), with its parameter layout and checkpoint I/O.
 *
 * Parameters live in one contiguous device buffer (gradients and Adam moments in three more of the
 * same size), laid out by the one parameter layout of nn/params.h; each tensor has a name (the same
 * names as the PyTorch reference, e.g. "enc.0.att.qkv.weight") under which it is stored in a
 * checkpoint. Activations for a batch live in one more device buffer sized for the largest batch
 * seen so far. The forward blocks (nn/blocks.h) are the same ones incremental decoding (nn/infer.h)
 * runs.
 *
 * Token rows are laid out padded (B, S) for the source and (B, T) for the target; padding rows are
 * masked out of attention, and the output projection and loss run only on the non-padding target
 * rows (gathered into a packed matrix), so most of the padding costs no FLOPs where it matters. */
#ifndef NMT_MODEL_H
#define NMT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "io/records.h"
#include "io/safetensors.h"
#include "nn/model_config.h"
#include "run/backend_loader.h"

struct model;
struct model_weights;

/* Creates a model with configuration C on backend BE (not owned). With TRAINING 1 also allocates
 * gradients and Adam moments; with MODEL_SPARSE OR'ed in, the parameters live in memory that costs
 * nothing where never written, without large pages (the backend's alloc_sparse): for a model most
 * of whose weights stay out of it (model_load_except). Parameters are uninitialised: call
 * model_init or model_load. Returns the model, or NULL with the error set. */
#define MODEL_SPARSE 2
struct model *model_new(struct backend *be, const struct model_config *c, int training);
/* Frees M and its device buffers; model_free(NULL) is a no-op. */
void model_free(struct model *m);
/* Returns M's configuration. */
const struct model_config *model_config(const struct model *m);
/* Returns the backend M runs on (not owned by M). */
struct backend *model_backend(const struct model *m);
/* Returns the number of parameter floats (P). */
size_t model_num_params(const struct model *m);
/* Returns the number of parameter tensors and sets *PARAMS to the layout table (owned by M). */
size_t model_params(const struct model *m, const struct model_param **params);
/* Returns the device pointer of the parameter buffer (P floats; tensor i at + params[i].offset). */
float *model_param_data(struct model *m);
/* Returns M's parameters as named fields (nn/params.h; device pointers, owned by M). */
const struct model_weights *model_weights(const struct model *m);
/* Returns M's position table (nn_pe_table: a device buffer owned by M), or NULL when its
 * configuration needs none. */
const float *model_pe_table(const struct model *m);
/* Gives back the memory of the N weights at W (inside M's parameters; e.g. a linear layer whose
 * packed copy is all that inference reads) with the backend's discard slot (plugins/backend.h).
 * Until model_set_params, model_init or model_load set all weights again, M refuses what reads
 * them all (model_step, model_score, model_get_params, model_save, model_adam,
 * model_params_finite), and only code that never reads those N weights may use M. 1 when given
 * back, 0 when the backend has no discard slot (nothing changes), -1 with the error set (W not in
 * M's parameters, the backend's error). */
int model_discard_weight(struct model *m, const float *w, size_t n);
/* 1 when part of M's weights were given back by model_discard_weight since they were last set. */
int model_weights_discarded(const struct model *m);

/* Returns 1 when M's backend can compute in bf16 (the set_precision, cast and gemm_ex slots of ABI
 * 2.2), else 0. */
int model_has_bf16(const struct model *m);
/* Sets the precision of M's matrix products: NMT_DTYPE_F32 (the default) or NMT_DTYPE_BF16 (mixed
 * precision: the backend's products round both operands to bfloat16 and sum in float32; the
 * weights are read from a bfloat16 copy of the parameters, refreshed whenever they change:
 * model_init, model_set_params, model_load, model_adam; parameters, gradients, Adam moments,
 * activations, softmax, layer norm and the loss stay float32). 0, or -1 with the error set (a
 * backend without those slots, out of device memory). */
int model_set_precision(struct model *m, uint32_t dtype);
/* Returns the precision set by model_set_precision (NMT_DTYPE_F32 by default). */
uint32_t model_precision(const struct model *m);

/* Initialises the parameters from SEED: Xavier-uniform weight matrices, zero biases, unit layer norm
 * gains, N(0, D^-1/2) embedding with a zero PAD row (as the PyTorch reference); zeroes the Adam
 * moments. 0 or -1. */
int model_init(struct model *m, uint64_t seed);
/* Copies all P parameters to host memory HOST (P floats) / from HOST to the device. 0 or -1. */
int model_get_params(struct model *m, float *host);
int model_set_params(struct model *m, const float *host);
/* Copies the gradient buffer (P floats) to HOST / from HOST. 0 or -1. */
int model_get_grads(struct model *m, float *host);
int model_set_grads(struct model *m, const float *host);

/* Copies N gradient floats starting OFF floats into the gradient buffer to HOST. 0 or -1. */
int model_get_grads_range(struct model *m, float *host, size_t off, size_t n);
/* Returns the device pointer of the gradient buffer (P floats, laid out as the parameters), or
 * NULL when M was not created for training. */
float *model_grad_data(struct model *m);

/* Gradient buckets: one per layer, the embedding, and (pre-norm) each final layer norm. Returns
 * their number and sets *RANGES (owned by M) to their (offset, length) pairs in floats, in the
 * order the backward pass finishes them: the decoder's final layer norm, the decoder layers from
 * the last, the encoder's final layer norm, the encoder layers from the last, the embedding (whose
 * gradient the output projection and both embeddings add to), and last, when the model has them, the
 * tensors after the layer norms (dec_emb.weight, out.weight, out.bias). They cover the P floats once each. */
int model_grad_buckets(const struct model *m, const size_t **ranges);
/* Called by model_step's backward pass with B = 0, 1, ... as bucket B's gradient becomes final
 * (written by every kernel that adds to it); returns 0, or -1 with the error set, which fails the
 * model_step. */
typedef int (*model_grad_ready_fn)(void *arg, int b);
/* Makes model_step call FN(ARG, b) as each bucket's gradient becomes final (FN NULL: no calls). */
void model_set_grad_ready(struct model *m, model_grad_ready_fn fn, void *arg);

/* Called by the forward pass before each linear layer of the encoder and decoder (not the output
 * projection) with the layer's weight W (device, (out, in), inside model_param_data), its input X
 * (device, N rows of IN floats, ready to read) and OUT; returns 0, or -1 with the error set, which
 * fails the forward pass. */
typedef int (*model_linear_seen_fn)(void *arg, const float *W, const float *x, int N, int out, int in);
/* Makes the forward passes of M call FN(ARG, ...) before each linear layer (FN NULL: no calls). */
void model_set_linear_observer(struct model *m, model_linear_seen_fn fn, void *arg);

/* Result of one forward (and backward) pass over a batch. */
struct model_loss {
    double loss;           /* summed label-smoothed cross-entropy over target tokens */
    double nll;            /* summed negative log-likelihood (perplexity = exp(nll / tokens)) */
    int64_t tokens;        /* target tokens (non-padding) */
    int64_t src_tokens;    /* source tokens (non-padding) */
};

/* Runs the model on batch BR: forward, loss and, when BACKWARD, the backward pass, ACCUMULATING the
 * summed-loss gradients into the gradient buffer (call model_zero_grad before the first batch of an
 * update). Dropout uses the configured rates when TRAIN is non-zero (else none), with random numbers
 * from DROPOUT_SEED. If LOGITS (host, tokens x V) is not NULL it receives the logits of the
 * non-padding target rows in row-major batch order (for tests). Returns 0, or -1 with the error set
 * (bad batch: id out of range, sentence longer than max_len; backend failure). */
int model_step(struct model *m, const struct batch_record *br, int train, int backward, uint64_t dropout_seed,
               struct model_loss *out, float *logits);
/* Forced decoding: runs the model on batch BR without dropout and writes each sentence's negative
 * log-likelihood of its target (summed over its tokens, EOS included, natural log) into SENT_NLL
 * (host, B); *OUT gets the totals. 0 or -1. */
int model_score(struct model *m, const struct batch_record *br, double *sent_nll, struct model_loss *out);
/* Grows the activation memory to fit batch BR (call it for every batch of a file before training so
 * that memory is allocated once, not as batch shapes vary). Optional. 0 or -1 (out of memory). */
int model_reserve(struct model *m, const struct batch_record *br);
/* Returns 1 when every parameter is finite, 0 when one is not, -1 on a backend error. */
int model_params_finite(struct model *m);
/* Zeroes the gradient buffer. 0 or -1. */
int model_zero_grad(struct model *m);
/* Sets *OUT to the sum of squared gradients (times SCALE^2). 0 or -1. */
int model_grad_sumsq(struct model *m, double *out);
/* The constants of Adam (the trainer's are in train/trainer.h). */
struct adam_opts {
    float beta1, beta2, eps;
};

/* One Adam step number T >= 1 with learning rate LR and constants BETA1, BETA2, EPS on gradients
 * times GRAD_SCALE. 0 or -1. */
int model_adam(struct model *m, float lr, int64_t t, float grad_scale, float beta1, float beta2, float eps);

/* Freezes the parameter tensors whose names start with one of the N prefixes PREFIXES (e.g. "emb."):
 * their Adam moments are zeroed now and model_update zeroes their gradients before the norm and the
 * Adam step, so that they keep their bits. Returns the number of tensors frozen (0: no name matched),
 * or -1 with the error set. */
int model_freeze(struct model *m, const char *const *prefixes, int n);

/* One optimizer update from the accumulated gradients of TOKENS target tokens: gradients are
 * divided by TOKENS, clipped to global norm CLIP (<= 0: no clipping; PyTorch's clip_grad_norm_
 * formula), then Adam step T with rate LR and the constants ADAM. *GNORM receives the gradient
 * norm before clipping; when it is not finite no update happens and 1 is returned. 0, 1, or -1. */
int model_update(struct model *m, const struct adam_opts *adam, float lr, int64_t t, int64_t tokens, double clip,
                 double *gnorm);

/* Adds M's configuration (metadata) and parameters (tensors) to W, and with OPT the Adam moments
 * ("optim.adam_m", "optim.adam_v"). The tensors are read from the device in pieces while W is
 * written (no host copy of the model), so W must be written before M changes, the next
 * model_save, or model_free. 0 or -1. */
int model_save(struct model *m, struct st_writer *w, int opt);
/* Loads parameters (and with OPT the Adam moments) from checkpoint F, whose configuration must equal
 * M's; weights F stores as int8 (nn/checkpoint.h) are read as float32 one tensor at a time. 0, or
 * -1 with the error naming the first missing or mis-shaped tensor. */
int model_load(struct model *m, const struct st_file *f, int opt);
/* model_load without the optimizer state, for the last reader of F: each tensor's bytes in F are
 * given back once on the device (st_discard; F must own its image), so that the file and the model
 * are not both whole in memory. Afterwards F's model tensors read as zeros: only free F. 0 or -1. */
int model_load_consume(struct model *m, struct st_file *f);
/* A range of M's parameters: N floats from device address W. */
struct model_range {
    const float *w;
    size_t n;
};
/* model_load (CONSUME 0) or model_load_consume (CONSUME 1), but the tensors that the NR ranges
 * R (not overlapping) cover whole are left out: not uploaded, and with CONSUME not given back in
 * F, for the caller to read there (model_file_floats); M then counts as having given them back
 * (model_discard_weight), and refuses what reads them all. For a reader that makes its own copy of
 * those weights. 0 or -1. */
int model_load_except(struct model *m, struct st_file *f, int consume, const struct model_range *r, size_t nr);
/* The N parameters of M at device address W (within one tensor) as model_load reads them from F:
 * float32 values (little-endian), F's own bytes when it stores them so, else written to TMP (N
 * floats; int8 weights times their row scales, nn/checkpoint.h). *FILE_BYTES and *FILE_LEN are set
 * to the bytes of F they come from (to give back with st_discard). NULL with the error set. */
const void *model_file_floats(const struct model *m, const struct st_file *f, const float *w, size_t n, float *tmp,
                              const void **file_bytes, size_t *file_len);
/* The elements of the largest of M's tensors that F stores as int8 (0: none), the floats TMP of
 * model_file_floats must hold for them. */
size_t model_file_int8_max(const struct model *m, const struct st_file *f);

/* Returns the matrix-product FLOPs of one training step (forward + backward = 3 x forward) on batch
 * BR, counting only non-padding tokens: with Ns/Nt the source/target tokens and s_b/t_b the lengths,
 *   forward = 2 Ns Le (4d^2 + 2 d ff) + 2 Nt Ld (6d^2 + 2 d ff) + 2 Ns Ld 2d^2 + 2 Nt d V
 *           + 2 d sum_b (2 Le s_b^2 + 2 Ld t_b^2 + 2 Ld t_b s_b)     (attention QK^T and PV, unmasked). */
double model_step_flops(const struct model_config *c, const struct batch_record *br);

#endif
