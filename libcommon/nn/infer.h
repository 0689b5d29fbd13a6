/* infer.h: inference with a trained model (model.h) on its backend: the encoder for a batch of
 * source sentences, and an incremental decoder step over rows of hypotheses with per-layer
 * self-attention key/value caches and encoder-decoder keys/values computed once per batch.
 *
 * Rows are grouped by sentence: with K rows per sentence, rows s*K .. s*K+K-1 belong to live
 * sentence s. The forward blocks are training's own (nn/blocks.h, no dropout) on the model's
 * weights (nn/params.h), so a forced decode reproduces the training model's log-probabilities.
 *
 * Batch invariance: every computation is per row or per sentence (masked attention, row-wise layer
 * norm), except matrix products, whose BLAS results may depend on the number of rows. In
 * invariant mode (the default) products run through the backend's row-invariant gemm_rowinv slot,
 * or, when the backend lacks it, on fixed blocks of INFER_BLOCK rows (the last block padded), so a
 * row's result depends only on that row: a sentence translates the same in any batch. */
#ifndef NMT_INFER_H
#define NMT_INFER_H

#include <stdint.h>

#include "run/backend_loader.h"
#include "nn/model.h"

#define INFER_BLOCK 8

struct infer;
struct shortlist;

/* OR'ed into infer_new's PRECISION: the output projection in that precision too. */
#define INFER_OUTPUT_TOO 0x10000u

/* infer_new's FLAGS. INFER_INVARIANT: products row-invariant (see above). INFER_DISCARD: once a
 * layer's weight of 64 KiB or more is packed, its float32 copy in M is given back
 * (model_discard_weight, where the backend has the discard slot): M is then read only by this
 * state and the states sharing it, and refuses other uses until its weights are set again
 * (infer_load: the packed weights are never in M). */
#define INFER_INVARIANT 1u
#define INFER_DISCARD 2u

/* Creates the inference state for model M (not owned) on its backend BE (not owned), with FLAGS
 * (above; M must not have weights given back). PRECISION is that of the linear layers of the
 * encoder and decoder: NMT_DTYPE_F32, NMT_DTYPE_INT8 (weights quantised per output channel when
 * packed, activations per row when the layer runs: row-invariant too, whatever INVARIANT says),
 * NMT_DTYPE_INT8A8 (the same with 8-bit activations: faster where VNNI runs, further from float32),
 * NMT_DTYPE_INT8A7 (7-bit activations: faster on AVX2 without VNNI, further still) or
 * NMT_DTYPE_BF16 (weights and activations rounded to bf16, float32 sums; likewise);
 * the output projection stays float32 unless INFER_OUTPUT_TOO is OR'ed in. Returns it, or NULL
 * with the error set (a backend without the linear_pack_q slot, or one that cannot compute in
 * PRECISION on this machine). */
struct infer *infer_new(struct backend *be, struct model *m, unsigned flags, uint32_t precision);
/* Creates an inference state on BE that computes with OWNER's model and packed weights, read from
 * OWNER's backend context (backend_can_share must allow it), as infer_new with OWNER's arguments
 * would, without copies of them; its own decoding memory. OWNER must be freed after it. Returns it,
 * or NULL with the error set. */
struct infer *infer_new_shared(struct backend *be, const struct infer *owner);
/* What infer_load reads and how: the one way nmt-decode's engines and nmt-serve's workers get a state. */
struct st_file;
struct infer_load_opts {
    const struct model_config *cfg;  /* the checkpoint's configuration */
    const char *path;                /* its name, for messages */
    unsigned flags;                  /* infer_new's */
    uint32_t precision;              /* infer_new's */
    const struct shortlist *sl;      /* infer_set_shortlist's (NULL: the whole vocabulary) */
};
/* Returns an inference state on BE as O says, limited to O->sl: over OWNER's weights when OWNER is
 * given (infer_new_shared), else over a new model in *M (which the caller frees after the state)
 * read from *CKPT; with CONSUME the tensors are moved out of *CKPT as they are read
 * (model_load_consume), which is then freed and set NULL. With INFER_DISCARD the weights the state
 * packs are packed from *CKPT's bytes and never copied into *M (model_load_except). NULL with the
 * error set (free a *M set). */
struct infer *infer_load(struct backend *be, const struct infer *owner, struct st_file **ckpt, int consume,
                         const struct infer_load_opts *o, struct model **m);
/* Sets *DTYPE to the precision named NAME: "float32", "int8" (NMT_DTYPE_INT8), "int8-all"
 * (NMT_DTYPE_INT8 | INFER_OUTPUT_TOO), "int8-a8" (NMT_DTYPE_INT8A8), "int8-a8-all", "int8-a7"
 * (NMT_DTYPE_INT8A7), "int8-a7-all", "bf16" or "bf16-all" (likewise); 0, or -1 with the error set. */
int infer_precision_parse(const char *name, uint32_t *dtype);
/* Returns the name of the precision DTYPE, as infer_precision_parse takes it. */
const char *infer_precision_name(uint32_t dtype);
/* The sentences a batch holds by default on a backend with worker threads (the cpu), for the
 * NMODELS models C decoded together in PRECISION with BEAM hypotheses a sentence: 16 while the
 * weights one decoder step reads (its layers and the output projection) fit in 32 MiB and stay in
 * the CPU's caches from step to step; else, as they stream from memory at every step, 128 decoder
 * rows (sentences x beam) that share each pass, 16 to 64 sentences (bench/RESULTS.md,
 * "nmt-decode's batches on the cpu"). */
int infer_host_batch_sentences(const struct model_config *c, int nmodels, uint32_t precision, int beam);
/* The sentences each of JOBS jobs keeps under way at once by default when sentences join the batch
 * under way (search_stream), from BATCH, infer_host_batch_sentences' figure: with several jobs,
 * which read the same weights, half of it and 16 at least (bench/RESULTS.md, "Several jobs'
 * windows"); with one, BATCH. */
int infer_host_stream_sentences(int batch, int jobs);
/* Makes the output layer of the steps of the next batches compute only the candidates of each
 * sentence that shortlist SL (nn/shortlist.h; not owned, on the model's vocabulary) gives it, the
 * softmax over them: top-k ids, infer_logits and infer_logits_at answer in vocabulary ids, with
 * -infinity at the others; forced decoding (infer_step's TGT) is refused. NULL: the whole
 * vocabulary again. Ends any batch under way. 0, or -1 with the error set (also when the output
 * projection's float32 weights were given back by INFER_DISCARD: infer_load with SL keeps them). */
int infer_set_shortlist(struct infer *in, const struct shortlist *sl);
/* Frees IN and its device buffers; infer_free(NULL) is a no-op. */
void infer_free(struct infer *in);

/* Returns the model configuration. */
const struct model_config *infer_config(const struct infer *in);

/* Grows the decoding memory to fit a batch of B sentences of at most S source tokens (EOS
 * included), K rows each and TMAX decoder steps, without touching it: reserving for every batch
 * of a run first makes one allocation, laid out for the largest of them in each extent, in which
 * every batch touches a prefix of the same regions (the pages in use are the largest batch's).
 * Ends any batch under way. 0, or -1 with the error set. */
int infer_reserve(struct infer *in, int B, int S, int K, int tmax);
/* Encodes B sentences: sentence b has LEN[b] ids SRC[b] (without EOS, which is appended; LEN[b] + 1
 * <= the model's max_len). Prepares K decoder rows per sentence for at most TMAX steps and resets
 * the decoder to step 0. Returns 0, or -1 with the error set (id out of range, backend failure). */
int infer_encode(struct infer *in, int B, const uint32_t *const *src, const int *len, int K, int tmax);

/* A stream (continuous batching): a batch that takes sentences in as others end, each at a step
 * of its own, so that a decoder step keeps many rows where a batch's last sentences would step
 * alone. Every computation stays per row, so each sentence's results are those of infer_encode's
 * batches, bit for bit. The encoder's buffers lie over the step's (sentences are admitted between
 * steps); each row's keys and values of a step take a free row of the caches, a hypothesis reads
 * its parents' (infer_reorder), and a row of the caches is free again once no live row reads it. */
/* Prepares an empty stream of at most B live sentences of at most S source tokens (EOS included),
 * with at most K rows and TMAX decoder steps each. Ends any batch under way. 0, or -1 with the error set (a backend without
 * attention_forward_rows, attention kept, a shortlist). */
int infer_open_stream(struct infer *in, int B, int S, int K, int tmax);
/* Whether IN can decode a stream: its backend has attention_forward_rows and it has no shortlist. */
int infer_can_stream(const struct infer *in);
/* Encodes N sentences (SRC[b], LEN[b] ids without EOS, as infer_encode's) and appends them to the
 * live sentences of the stream, one row each, at their step 0 (infer_step's token NMT_BOS). In a
 * stream infer_reorder (or infer_reorder_rows) takes each new row's parent from its own sentence;
 * the sentences it does not keep give their memory back. 0, or -1 with the error set (no
 * stream, more than B live, a source longer than S or with an id out of range; the stream must
 * then be opened again). */
int infer_admit(struct infer *in, int n, const uint32_t *const *src, const int *len);

/* infer_reorder in a stream, where sentences may have rows of different numbers: keeps the NS
 * live sentences KEEP (increasing), sentence s now with NROWS[s] rows (1 to the K of
 * infer_open_stream), the new rows in the order of their sentences, row i continuing row
 * PARENT[i], a row of its own sentence. 0, or -1 with the error set (no stream, bad arguments). */
int infer_reorder_rows(struct infer *in, int ns, const int *keep, const int *nrows, const int *parent);

/* Returns the number of live rows (live sentences times their rows, K or fewer: infer_reorder) and
 * the current step. */
int infer_rows(const struct infer *in);
int infer_time(const struct infer *in);

/* One decoder step for all live rows: TOK (host, rows) is each row's input token at the current
 * step (NMT_BOS at step 0). With 0 < TOPK <= 4K, VALS/IDX (host, rows x TOPK) receive each row's TOPK
 * best log-probabilities (descending, ties by lower id) and their ids. With TGT (host, rows) not
 * NULL, LP (host, rows) receives log p(TGT[r]) of each row (0 where TGT[r] is NMT_PAD). Advances
 * the step. Returns 0, or -1 with the error set. */
int infer_step(struct infer *in, const int32_t *tok, int topk, float *vals, int32_t *idx, const int32_t *tgt,
               float *lp);
/* Decoder rows that infer_step has computed since IN was made (the live rows of each step, summed):
 * the work of the searches run with it. */
uint64_t infer_rows_stepped(const struct infer *in);

/* Copies the output logits (rows x vocab, before the softmax) of the last infer_step into LOGITS
 * (host). Returns 0, or -1 with the error set (no step taken since infer_encode). */
int infer_logits(struct infer *in, float *logits);

/* OUT[r * N + j] (host) receives the logit of the last infer_step's row r at token IDS[r * N + j]
 * (host, rows x N), for every live row r; FLAT (host, rows x N) is scratch. Returns 0, or -1 with
 * the error set (an id outside the vocabulary, no step taken since infer_encode). */
int infer_logits_at(struct infer *in, int n, const int32_t *ids, int32_t *flat, float *out);

/* Makes the next steps keep the last decoder layer's encoder-decoder attention (ON) or not (0, the
 * default, which spares computing it); set before infer_encode (a batch encoded without it keeps
 * its cross keys in a layout that attention cannot be kept from: infer_step then fails). */
void infer_keep_attention(struct infer *in, int on);
/* Makes the top-k of the next steps (infer_step's VALS) the logits themselves (RAW), not their
 * log-probabilities (0, the default): the same ids in the same order, without each row's
 * log-sum-exp, for a search that needs the ranking only (where the backend has topk_logits). */
void infer_topk_raw(struct infer *in, int raw);
/* Makes the next steps keep every row's logits for infer_logits and infer_logits_at (ON, the
 * default) or not (0): a step that takes the top-k (without TGT or a shortlist, in invariant mode)
 * then computes them a few rows at a time, sparing the memory of rows x vocab floats, and
 * infer_logits and infer_logits_at refuse it. */
void infer_keep_logits(struct infer *in, int on);
/* ATT (host, rows x S, S the batch's longest source with EOS) receives each live row's attention over
 * its sentence's source tokens (EOS last; 0 past them) at the last infer_step: the last decoder
 * layer's encoder-decoder attention probabilities, averaged over the heads. Returns 0, or -1 with the
 * error set (attention not kept, no step taken since infer_encode). */
int infer_attention(struct infer *in, float *att);
/* Returns S, the longest source of the batch with EOS (the columns of infer_attention). */
int infer_src_len(const struct infer *in);

/* Reorders the decoder state after a step (or before the first): keeps the NS live sentences
 * KEEP[0..NS) (indices among the current live sentences, increasing), each now with KN rows (1 to
 * the K of infer_encode); new row i continues old row PARENT[i] (host, NS*KN rows, each a row of a
 * kept sentence). Returns 0, or -1 with the error set. */
int infer_reorder(struct infer *in, int ns, int kn, const int *keep, const int *parent);

#endif
