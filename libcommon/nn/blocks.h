/* blocks.h: the Transformer's forward blocks, written once for training (model.c) and incremental
 * decoding (infer.c): embedding, residual sublayer with layer norm, self- and encoder-decoder
 * attention, FFN and the encoder stack, with the backend-call checker and the bump arena both use.
 *
 * A block runs in a struct nn_exec, which says how a linear layer is computed (training: gemm; decoding
 * may substitute the backend's row-invariant product) and whether dropout is on (training only).
 * Decoding keeps no activations for backward: its layers' views share buffers and leave the layer
 * norm statistics and attention probabilities NULL. */
#ifndef NMT_BLOCKS_H
#define NMT_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "run/backend_loader.h"
#include "nn/model_config.h"
#include "nn/params.h"

struct nn_exec;

/* A linear layer: Y (N, out) = X (N, in) W^T + BIAS (BIAS may be NULL), then ReLU when RELU,
 * W (out, in). Returns 0, or -1 with the error set. */
typedef int (*nn_linear_fn)(struct nn_exec *e, float *y, const float *x, const float *W, const float *bias, int relu,
                            int N, int out, int in);

/* Where and how the blocks run. */
struct nn_exec {
    const struct nmt_backend *k;
    nmt_bctx *ctx;
    const struct model_config *c;
    nn_linear_fn linear;
    void *owner;            /* the model or decoder that runs the blocks (for LINEAR) */
    int train;              /* dropout on (at the configured rates) */
    uint64_t seed, ctr;     /* dropout seed and counter of the current step */
    /* bf16 mixed precision (training): the weights W = WBASE + i (a parameter buffer) have a
     * bfloat16 copy at WBF + i (the backend's cast of the buffer), which the products read through
     * gemm_ex; NULL: float32 weights through gemm. */
    const float *wbase;
    const void *wbf;
    /* the position table (max_len, D) of the model's formula, through the backend's
     * embedding_table_forward (nn_pe_table); NULL: the paper's sinusoid of embedding_forward */
    const float *pe;
    /* an embedding table whose float32 copy may be gone, read instead from the packed weight that
     * holds it (the output projection it is tied to) through the backend's linear_rows: nn_embed
     * given EMB_TABLE (compared, never read) gathers EMB_CHUNK rows at a time from EMB_PACKED into
     * EMB_SCRATCH (EMB_CHUNK x d_model floats), then embeds them as rows 0, 1, ... (EMB_IOTA);
     * EMB_PACKED NULL: none */
    const float *emb_table;
    const void *emb_packed;
    float *emb_scratch;
    const int32_t *emb_iota;
    int emb_chunk;
};

/* The bfloat16 copy of weight W (a pointer into E->wbase's buffer); E->wbf must be set. */
static inline const void *nn_wbf(const struct nn_exec *e, const float *W)
{
    return (const uint16_t *)e->wbf + (W - e->wbase);
}

/* Returns 0 when RC (a backend call's result) is not negative, else -1 with the error naming the
 * backend, WHAT and the backend's message. */
static inline int nn_bk(const struct nn_exec *e, int rc, const char *what)
{
    if (rc < 0)
        return nmt_seterr("backend %s: %s: %s", e->k->name, what, e->k->last_error(e->ctx));
    return 0;
}

/* A bump arena over device memory: a first pass with BASE NULL measures (OFF bytes), a second hands
 * out the same slices of a buffer of that size. Slices are 64-byte aligned. */
struct nn_bump {
    char *base;
    size_t off;             /* bytes */
};

/* Returns the next slice of BYTES (NULL when measuring). */
static inline void *nn_bump(struct nn_bump *b, size_t bytes)
{
    void *p = b->base ? b->base + b->off : NULL;
    b->off += (bytes + 63) & ~(size_t)63;
    return p;
}
/* Returns the next slice of N floats / N int32 values. */
static inline float *nn_bump_f(struct nn_bump *b, size_t n) { return nn_bump(b, n * sizeof(float)); }
static inline int32_t *nn_bump_i(struct nn_bump *b, size_t n) { return nn_bump(b, n * sizeof(int32_t)); }

/* One residual sublayer's activations on N rows. Post-norm: r = x_in + drop(sub(x_in)), x = LN(r),
 * T holds r. Pre-norm: T = LN(x_in), x = x_in + drop(sub(T)). X may be x_in itself (in place). */
struct nn_sub {
    float *t;               /* (N, D) */
    float *x;               /* (N, D) the stream after the sublayer */
    float *mean, *rstd;     /* (N) layer norm statistics, or NULL when not kept */
    float *q;               /* (N, 3D) self-attention queries/keys/values, or (N, D) cross-attention queries */
    float *P;               /* (B, H, Tq, Tk) attention probabilities, or NULL when not kept */
    float *lse;             /* (B, H, Tq, 2) their row statistics instead (attention_forward_lse), or NULL */
    float *att;             /* (N, D) attention output before its projection */
    float *h;               /* (N, F) the FFN's activation output */
    float *u;               /* (N, F) the FFN's pre-activation, kept for the swish backward (training), or
                             * NULL (swish in place) */
    uint64_t drop_off, attn_off, act_off; /* dropout counter offsets (residual, attention, activation) */
};

/* One encoder layer's activations. */
struct nn_enc_act {
    struct nn_sub sa, ff;
};

/* The encoder's activations for a batch of B sentences of S columns. */
struct nn_encoder_acts {
    float *x;               /* (B*S, D) embeddings, the input of layer 0 */
    uint64_t x_drop_off;
    struct nn_enc_act *layer; /* (Le) */
    float *sub;             /* (B*S, D) scratch: a sublayer's output */
    float *act;             /* (B*S, F) scratch: the FFN's dropped activation (training) */
    float *fl, *fl_mean, *fl_rstd; /* (B*S, D), (B*S), (B*S) pre-norm final layer norm (statistics may be NULL) */
};

/* The plain linear layer: gemm (gemm_ex on W's bfloat16 copy when E->wbf is set), bias_add when
 * BIAS, relu_forward when RELU (an nn_linear_fn). */
int nn_linear_gemm(struct nn_exec *e, float *y, const float *x, const float *W, const float *bias, int relu, int N,
                   int out, int in);

/* Returns 0 when backend K has the optional slots configuration C needs (the position-table
 * embedding, swish), else -1 with the error naming the option the backend cannot run. */
int nn_check_backend(const struct nmt_backend *k, const struct model_config *c);
/* Returns a device buffer (max_len, D) on CTX holding C's position table when C needs one
 * (model_needs_pe_table), which the caller frees with K->free; NULL with *ERR 0 when C needs none,
 * NULL with *ERR -1 and the error set on failure. */
float *nn_pe_table(const struct nmt_backend *k, nmt_bctx *ctx, const struct model_config *c, int *err);

/* Takes N counters of the dropout stream; returns the first. */
uint64_t nn_take_ctr(struct nn_exec *e, size_t n);
/* X (N floats) = dropout(X) in place at rate P when training (else nothing); *OFF (when not NULL)
 * receives the counter offset. 0 or -1. */
int nn_dropout(struct nn_exec *e, float *x, size_t n, float p, uint64_t *off);

/* X (N, D) = embedding of IDS at positions POS, scaled by sqrt(D), then residual dropout; with E->pe
 * the positions come from that table and an id < 0 embeds as zeros (the zero start). 0 or -1. */
int nn_embed(struct nn_exec *e, float *x, const int32_t *ids, const int32_t *pos, const float *emb, int N,
             uint64_t *drop_off);

/* Y (N, D) = LN(X) with gain G and bias B; MEAN, RSTD (N) receive the statistics unless NULL. 0 or -1. */
int nn_layernorm(struct nn_exec *e, float *y, float *mean, float *rstd, const float *x, const float *g,
                 const float *b, int N);
/* Start of a residual sublayer on XIN (N, D): returns its input (XIN, or LN(XIN) into S->t in
 * pre-norm), or NULL with the error set. */
const float *nn_res_begin(struct nn_exec *e, struct nn_sub *s, const float *xin, const float *g, const float *b,
                          int N);
/* End of a residual sublayer: SUB (N, D) is the sublayer's output (clobbered by dropout); S->x
 * receives the stream. 0 or -1. */
int nn_res_end(struct nn_exec *e, struct nn_sub *s, const float *xin, float *sub, const float *g, const float *b,
               int N);

/* Attention arguments for B items of TQ queries (rows Q_LD floats apart) over TK keys and values
 * (rows KV_LD apart), dense per item; output rows D apart. Dropout as E says. */
struct nmt_attn_args nn_attn_args(const struct nn_exec *e, int B, int Tq, int Tk, int64_t q_ld, int64_t kv_ld,
                                  const int32_t *klen, int causal);
/* Self-attention sublayer on SIN (B*T, D) into OUT (B*T, D), keys limited to KLEN, causal when
 * CAUSAL; keeps S->q, S->att (and S->P when not NULL, or else S->lse through the backend's
 * attention_forward_lse when not NULL). 0 or -1. */
int nn_self_attention(struct nn_exec *e, struct nn_sub *s, float *out, const float *sin, const float *qkv_w,
                      const float *qkv_b, const float *o_w, const float *o_b, int B, int T, const int32_t *klen,
                      int causal);
/* Encoder-decoder attention: queries from SIN (B*Tq, D) over the keys/values KV (B*Tk, 2D) of the
 * memory, KLEN of them visible per item; into OUT (B*Tq, D). With ROWS (device (B, Tk); inference
 * only, on a backend with attention_forward_rows), key j of item b is row ROWS[b*Tk + j] of KV
 * instead, with the same results bit for bit. 0 or -1. */
int nn_cross_attention(struct nn_exec *e, struct nn_sub *s, float *out, const float *sin, const float *kv,
                       const struct dec_layer_weights *w, int B, int Tq, int Tk, const int32_t *klen,
                       const int32_t *rows);
/* FFN sublayer: OUT (N, D) = W2 drop(act(W1 SIN + b1)) + b2, act the configuration's ReLU or swish;
 * the activation's output stays in S->h (swish: its input in S->u when not NULL), the dropped one goes
 * through ACT (N, F) scratch. 0 or -1. */
int nn_ffn(struct nn_exec *e, struct nn_sub *s, float *out, float *act, const float *sin, const float *w1,
           const float *b1, const float *w2, const float *b2, int N);

/* The encoder: embeds IDS/POS (B*S) and runs every layer of W on them with LEN (B) visible keys per
 * sentence; *MEM receives the output (B*S, D): the last layer's stream, or its final layer norm in
 * pre-norm. 0 or -1. */
int nn_encoder(struct nn_exec *e, const struct model_weights *w, struct nn_encoder_acts *a, const int32_t *ids,
               const int32_t *pos, const int32_t *len, int B, int S, const float **mem);

#endif
