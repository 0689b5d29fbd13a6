/* infer.c: inference (see infer.h): the encoder and incremental decoder steps over the shared
 * blocks of nn/blocks.h and the model's weights (nn/params.h), with the key/value caches and the
 * row-invariant linear layer of decoding. */
#include "nn/infer.h"
#include "io/records.h"
#include "io/safetensors.h"
#include "base/util.h"
#include "nn/blocks.h"
#include "nn/params.h"
#include "nn/shortlist.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A linear layer's weight W (out, kin) and its copy packed by the backend's linear_pack, which
 * linear_rowinv reads (made only when the backend has those slots). */
struct wt_entry {
    const float *w;
    const void *packed;
    int out, kin;
    uint32_t dtype; /* the precision it is packed in (NMT_DTYPE_*) */
};

struct infer {
    struct backend *be;
    struct nn_exec run;              /* how the blocks run: linear is infer_linear, no dropout */
    const struct nmt_backend *k;
    nmt_bctx *ctx;
    struct model *m;
    struct model_config c;
    int invariant;
    uint32_t precision;              /* NMT_DTYPE_*: of the packed layers */
    uint32_t out_precision;          /* of the output projection: float32 unless INFER_OUTPUT_TOO */
    const struct model_weights *w;   /* the model's */
    struct wt_entry *wts;            /* (nwt) packed weights, in wt_buf */
    int nwt;
    char *wt_buf;                    /* device buffer of the packed weights (NULL when shared) */
    float *emb_scratch;              /* device (EMB_CHUNK, D): rows of a packed embedding (run.emb_packed) */
    int32_t *emb_iota;               /* device 0, 1, ..., EMB_CHUNK - 1 */
    int shares;                      /* wts and the model are another state's (infer_new_shared) */
    uint64_t rows_stepped;           /* infer_rows_stepped */
    int out_gone;                    /* the output projection's float32 weights are not in the model
                                      * (given back once packed, or never loaded): no shortlist */

    /* device arena, laid out for the largest extents of the batches so far (struct extents), so that
     * every batch works in the same regions, each in a prefix of its own: the pages a batch faults
     * in are those the batches before it did, unless it is larger in some extent */
    char *arena;
    size_t arena_cap;
    struct extents {
        size_t Ns, B, R, TR, Rk;     /* B*S, B, B*K, tmax*B*K, B*K*topk_cap */
        size_t RS;                   /* B*K*S */
        size_t En;                   /* rows of the encoder's buffers: enc_sentences(B, S) * S */
    } ext;
    int B, S, K, tmax, Rcap;         /* batch shape (K: rows per live sentence now) */
    int Kcap;                        /* rows per sentence prepared for (Rcap = B * Kcap) */
    float *ex, *et, *eq, *eatt, *esub, *eh;   /* encoder (B*S, D|3D|F) */
    struct nn_encoder_acts enc;      /* the encoder's views: every layer on the buffers above */
    int32_t *src_ids, *src_pos, *src_len;     /* (B*S) by encoder chunk (enc_chunk), (B*S), (B) */
    int ckv_by_rows;                 /* the cross keys and values by encoder chunk, read through ckv_rows
                                      * (the backend's attention_forward_rows), not padded to S */
    int32_t *ckv_rows;               /* device (B, S): with ckv_by_rows, the row in ckv of each live
                                      * sentence's key j; else the row of the key in the output of its
                                      * encoder chunk (enc_layout) */
    int32_t *host_ckv_rows;          /* with ckv_by_rows, the host copy of ckv_rows */
    size_t host_ckv_cap;
    float **ckv;                     /* (Ld) cross keys/values of the live sentences: (B, S, 2D), or by
                                      * encoder chunk with ckv_by_rows */
    float *ckv_spare;                /* (B, S, 2D); NULL with ckv_by_rows */
    float **kv;                      /* (Ld) self keys/values (t, R, 2D) of the live rows; where the
                                      * backend reads them through rows (attention_forward_rows),
                                      * rows of 2D appended a step at a time (kv_used of tmax * Rcap),
                                      * row r's step j at the row kv_rows names */
    float *kv_spare;                 /* (tmax, Rcap, 2D); NULL with kv_rows */
    int32_t *kv_rows;                /* device (Rcap, tmax): the cache row of each live row's step j */
    int32_t *host_rows, *host_rows_new; /* host copies of kv_rows (Rcap, tmax), and a spare */
    size_t host_rows_cap;
    int kv_used;                     /* rows of the caches written in this batch (with kv_rows) */
    int kv_tk;                       /* in a stream, the most keys a live row has at this step */
    /* a stream (infer_open_stream): sentences admitted as others end, each at a step of its own and
     * with rows of its own number, its cross keys in the slot of S rows of ckv it was given (each
     * row reads them through xrows), each row's self keys and values of each step in a free row of
     * the caches, copied there from kv_stage (the encoder's buffers over the step's: admissions
     * come between steps) */
    int stream;
    int32_t *sent_rows;              /* host (B) each live sentence's rows, in order */
    int32_t *sent_off;               /* host (B + 1) infer_reorder_rows' scratch: where they start */
    int32_t *sent_kn;                /* host (B) infer_reorder's scratch */
    int32_t *xrows, *xlen;           /* device (Rcap, S), (Rcap): each live row's cross keys and their count */
    int32_t *host_xrows, *host_xlen; /* host copies, made again by the step after an admission or reorder */
    int x_stale;
    int32_t *row_step;               /* host (Rcap) each live row's step */
    int32_t *row_step_new;           /* host (Rcap) infer_reorder's */
    int32_t *klen;                   /* device (Rcap) each live row's keys at this step */
    float *kv_stage;                 /* device (Rcap, 2D) the keys and values of a step */
    int32_t *slot_free;              /* host (B) the free slots, a stack */
    int nslot_free;
    int32_t *kv_free;                /* host (tmax * Rcap) the free rows of the caches, a stack */
    int nkv_free;
    int32_t *kv_ref;                 /* host (tmax * Rcap) the live rows that read each row of the
                                      * caches (beam search's hypotheses share their parents') */
    unsigned char *sent_kept;        /* host (B) infer_reorder's scratch */
    int32_t *iota;                   /* device (max(En, Rcap)) 0, 1, 2, ... */
    float *x, *t, *q, *att, *sub, *h, *logits, *vals;  /* decoder (Rcap, D|F|V|topk) */
    float *logits_few;               /* (logits_rows, V) the logits of topk_by_rows */
    int32_t *idx, *tok, *pos, *tgt;  /* (tmax*Rcap), (Rcap) x3 */
    float *lp;                       /* (Rcap) */
    float *padx, *pady;              /* (INFER_BLOCK, max(D, F)), (INFER_BLOCK, max(3D, F, V)) */
    int topk_cap;

    /* decoder state */
    int ns, R, time;                 /* live sentences, live rows, step */
    int32_t *host_len;               /* (B) source lengths of the live sentences (with EOS) */
    int32_t *host_ints;              /* (max(B*S*2, tmax*Rcap)) staging */
    size_t host_cap;

    /* infer_logits_at: device flat indices and gathered logits */
    int32_t *at_idx;
    float *at_val;
    size_t at_cap;

    /* the vocabulary shortlist (infer_set_shortlist): the output layer of a step computes each live
     * sentence's candidates only; its K rows' logits lie at in->logits + K * (candidates of the live
     * sentences before it), one row of its candidates each */
    const struct shortlist *sl;
    int32_t *cand;                   /* host: sentence b's candidates at cand + coff[b], increasing */
    size_t *coff;                    /* (B + 1) */
    size_t *woff;                    /* (B) offset of sentence b's output weights in sl_w */
    int *live;                       /* (B) live sentence -> sentence of the batch */
    size_t *loff;                    /* (B + 1) offset of each live sentence's logits in in->logits */
    size_t cand_cap, sent_cap;
    unsigned char *mark;             /* (V) shortlist_candidates' scratch */
    char *sl_w;                      /* device: the output weights of each sentence, packed as the
                                      * model's output projection, or its gathered rows */
    size_t sl_wcap;
    float *sl_rows;                  /* device: rows of the output projection to pack (grown to the most asked) */
    size_t sl_rowscap;
    float *sl_b;                     /* device: the output bias of each sentence's candidates (at coff[b]),
                                      * or of the union (at 0); NULL without an output bias */
    size_t sl_bcap;
    int32_t *sl_ids;                 /* device (V) */
    float *host_logits;              /* host (sum of the live rows' candidates): infer_logits(_at) */
    size_t host_logits_cap;
    /* the batch's union of candidates, when one product over it is cheaper than one a sentence */
    int union_n;                     /* its size; 0: a product a sentence */
    int32_t *union_ids;              /* host (V) its ids, increasing */
    int32_t *union_at;               /* host (V) an id's position in it */
    int32_t *upos;                   /* host: cand[i]'s position in it */
    float *sl_u;                     /* device (R, union_n) logits of the union */
    /* infer_keep_attention: the last decoder layer's encoder-decoder attention of the last step */
    int keep_att;
    int keep_logits;                 /* infer_keep_logits */
    int topk_raw;                    /* infer_topk_raw */
    int logits_kept;                 /* the last step's logits are all in in->logits */
    float *catt;                     /* device (live sentences, H, K, S) */
    size_t catt_cap;                 /* floats */
    float *catt_host;                /* host, the same */
    size_t catt_hcap;
    int32_t *sl_flat;                /* device: where each live row's candidates lie in sl_u */
    int32_t *flat_host;              /* host: the same */
    size_t sl_ucap, sl_flatcap;
};

/* Frees the host arrays of a stream (stream_arrays). */
static void stream_arrays_free(struct infer *in)
{
    free(in->row_step);
    free(in->row_step_new);
    free(in->slot_free);
    free(in->kv_free);
    free(in->kv_ref);
    free(in->sent_kept);
    free(in->sent_rows);
    free(in->sent_off);
    free(in->sent_kn);
    free(in->host_xrows);
    free(in->host_xlen);
}

void infer_free(struct infer *in)
{
    if (!in)
        return;
    if (in->k) {
        in->k->free(in->ctx, in->arena);
        in->k->free(in->ctx, in->wt_buf);
        in->k->free(in->ctx, in->at_idx);
        in->k->free(in->ctx, in->at_val);
        in->k->free(in->ctx, in->sl_w);
        in->k->free(in->ctx, in->sl_rows);
        in->k->free(in->ctx, in->sl_b);
        in->k->free(in->ctx, in->emb_scratch);
        in->k->free(in->ctx, in->emb_iota);
        in->k->free(in->ctx, in->sl_ids);
        in->k->free(in->ctx, in->sl_u);
        in->k->free(in->ctx, in->sl_flat);
        in->k->free(in->ctx, in->catt);
    }
    free(in->catt_host);
    free(in->cand);
    free(in->coff);
    free(in->woff);
    free(in->live);
    free(in->loff);
    free(in->mark);
    free(in->host_logits);
    free(in->union_ids);
    free(in->union_at);
    free(in->upos);
    free(in->flat_host);
    if (!in->shares)
        free(in->wts);
    free(in->enc.layer);
    free(in->ckv);
    free(in->kv);
    free(in->host_len);
    free(in->host_ints);
    free(in->host_ckv_rows);
    free(in->host_rows);
    free(in->host_rows_new);
    stream_arrays_free(in);
    free(in);
}

/* Whether the backend has the three slots of its own linear layer for inference. */
static int has_linear_rowinv(const struct nmt_backend *k)
{
    return k->linear_packed_bytes && k->linear_pack && k->linear_rowinv;
}

/* Adds W (out, kin) to the table of weights to pack in DTYPE (filled in by pack_weights). */
static void wt_add_as(struct infer *in, const float *w, int out, int kin, uint32_t dtype)
{
    in->wts[in->nwt++] = (struct wt_entry){ w, NULL, out, kin, dtype };
}

/* Adds W (out, kin) to the table of weights to pack in the precision of the run. */
static void wt_add(struct infer *in, const float *w, int out, int kin)
{
    wt_add_as(in, w, out, kin, in->precision);
}

/* Bytes of the packed copy of E (0 with the backend's error when it cannot pack it). */
static size_t wt_bytes(const struct infer *in, const struct wt_entry *e)
{
    const struct nmt_backend *k = in->k;
    if (e->dtype == NMT_DTYPE_F32)
        return k->linear_packed_bytes(in->ctx, e->out, e->kin);
    return k->linear_packed_bytes_q(in->ctx, e->out, e->kin, e->dtype);
}

/* Packs E into DST; 0 or -1 with the error set. */
static int wt_pack(struct infer *in, void *dst, const struct wt_entry *e)
{
    const struct nmt_backend *k = in->k;
    if (e->dtype == NMT_DTYPE_F32)
        return nn_bk(&in->run, k->linear_pack(in->ctx, dst, e->w, e->out, e->kin, e->kin), "linear_pack");
    return nn_bk(&in->run, k->linear_pack_q(in->ctx, dst, e->w, e->out, e->kin, e->kin, e->dtype), "linear_pack_q");
}

/* W (out, kin) as linear_pack left it, or NULL when it has no packed copy. */
static const void *wt_find(const struct infer *in, const float *w, int out)
{
    for (int i = 0; i < in->nwt; i++)
        if (in->wts[i].w == w && in->wts[i].out == out)
            return in->wts[i].packed;
    return NULL;
}

/* Lists every weight the products of inference read, to be packed (pack_weights). 0, or -1 with
 * the error set. */
static int wt_table(struct infer *in)
{
    const struct model_config *c = &in->c;
    int D = c->d_model, F = c->ff, Le = c->enc_layers, Ld = c->dec_layers;
    in->wts = calloc((size_t)(4 * Le + 8 * Ld + 1), sizeof *in->wts);
    if (!in->wts)
        return nmt_seterr("out of memory");
    for (int l = 0; l < Le; l++) {
        const struct enc_layer_weights *e = &in->w->enc[l];
        wt_add(in, e->qkv_w, 3 * D, D);
        wt_add(in, e->o_w, D, D);
        wt_add(in, e->w1, F, D);
        wt_add(in, e->w2, D, F);
    }
    for (int l = 0; l < Ld; l++) {
        const struct dec_layer_weights *d = &in->w->dec[l];
        wt_add(in, d->sqkv_w, D, D);                             /* the queries' rows of qkv */
        wt_add(in, d->sqkv_w + (size_t)D * (size_t)D, 2 * D, D); /* the keys' and values' rows */
        wt_add(in, d->so_w, D, D);
        wt_add(in, d->cq_w, D, D);
        wt_add(in, d->ckv_w, 2 * D, D);
        wt_add(in, d->co_w, D, D);
        wt_add(in, d->w1, F, D);
        wt_add(in, d->w2, D, F);
    }
    wt_add_as(in, in->w->out_w, c->vocab, D, in->out_precision); /* the output projection */
    return 0;
}

/* Whether the embedding tied to E's weight (the output projection) is read from E's packed copy
 * (linear_rows: float32 packs hold the weight's exact values) rather than from its float32 copy. */
static int emb_from_packed(const struct infer *in, const struct wt_entry *e)
{
    return in->k->linear_rows && e->dtype == NMT_DTYPE_F32;
}

/* Whether E's weight is read by more than the products (an embedding tied to it, which the input
 * reads too, unless from the packed copy; the output projection, whose rows a shortlist gathers):
 * its float32 copy stays in the model. */
static int wt_read_elsewhere(const struct infer *in, const struct wt_entry *e)
{
    if (e->w == in->w->out_w && in->sl)
        return 1;
    return (e->w == in->w->emb || e->w == in->w->dec_emb) && !emb_from_packed(in, e);
}

/* Rows of a packed embedding gathered at a time (struct nn_exec's emb_chunk). */
#define EMB_CHUNK 256

/* Points IN's blocks at the packed copy of the output projection for the embedding tied to it,
 * where emb_from_packed says so (after pack_weights, or with an owner's table). 0, or -1 with the
 * error set. */
static int emb_setup(struct infer *in)
{
    const struct wt_entry *e = NULL;
    for (int i = 0; i < in->nwt; i++)
        if (in->wts[i].w == in->w->out_w)
            e = &in->wts[i];
    if (!e || !e->packed || !emb_from_packed(in, e) || (e->w != in->w->emb && e->w != in->w->dec_emb))
        return 0;
    int32_t iota[EMB_CHUNK];
    for (int i = 0; i < EMB_CHUNK; i++)
        iota[i] = i;
    in->emb_scratch = in->k->alloc(in->ctx, (size_t)EMB_CHUNK * (size_t)in->c.d_model * sizeof(float));
    in->emb_iota = in->k->alloc(in->ctx, sizeof iota);
    if (!in->emb_scratch || !in->emb_iota)
        return nmt_seterr("cannot allocate the embedding's rows on backend %s: %s", in->k->name,
                          in->k->last_error(in->ctx));
    if (nn_bk(&in->run, in->k->upload(in->ctx, in->emb_iota, iota, sizeof iota), "upload") < 0)
        return -1;
    in->run.emb_table = e->w;
    in->run.emb_packed = e->packed;
    in->run.emb_scratch = in->emb_scratch;
    in->run.emb_iota = in->emb_iota;
    in->run.emb_chunk = EMB_CHUNK;
    return 0;
}

/* The ranges of the model's weights that only the products read (wt_read_elsewhere), for
 * model_load_except: (in->nwt) entries, or NULL with the error set. *NR is set to their number. */
static struct model_range *wt_ranges(const struct infer *in, size_t *nr)
{
    struct model_range *r = calloc((size_t)in->nwt + 1, sizeof *r);
    if (!r)
        return nmt_seterr("out of memory"), NULL;
    *nr = 0;
    for (int i = 0; i < in->nwt; i++)
        if (!wt_read_elsewhere(in, &in->wts[i]))
            r[(*nr)++] = (struct model_range){ in->wts[i].w, (size_t)in->wts[i].out * (size_t)in->wts[i].kin };
    return r;
}

/* Packs every weight of the table (wt_table) with the backend's linear_pack, once, into one device
 * buffer. With DISCARD, gives back each float32 weight of DISCARD_MIN bytes or more once packed
 * (but those read elsewhere; a smaller one has too few whole pages to be worth a system call).
 * With FILE (the checkpoint, from model_load_except over wt_ranges), the weights left out of the
 * model are packed from FILE's bytes, through one device buffer the size of the largest, and
 * those bytes given back when CONSUME. 0, or -1 with the error set. */
#define DISCARD_MIN ((size_t)64 << 10)
static int pack_weights(struct infer *in, int discard, struct st_file *file, int consume)
{
    const struct nmt_backend *k = in->k;
    size_t total = 0, stage_n = 0;
    for (int i = 0; i < in->nwt; i++) {
        size_t b = wt_bytes(in, &in->wts[i]), n = (size_t)in->wts[i].out * (size_t)in->wts[i].kin;
        if (b == 0)
            return nmt_seterr("backend %s cannot compute linear layers in %s here: %s", k->name,
                              infer_precision_name(in->wts[i].dtype), k->last_error(in->ctx));
        total += (b + 63) & ~(size_t)63;
        if (file && !wt_read_elsewhere(in, &in->wts[i]) && n > stage_n)
            stage_n = n;
    }
    in->wt_buf = k->alloc(in->ctx, total);
    float *stage = stage_n ? k->alloc(in->ctx, stage_n * sizeof(float)) : NULL;
    /* weights the file stores as int8 are read as float32 on the host first, one at a time */
    size_t int8_n = file ? model_file_int8_max(in->m, file) : 0;
    float *host = int8_n ? malloc((int8_n < stage_n ? int8_n : stage_n) * sizeof *host) : NULL;
    int rc = 0;
    if (!in->wt_buf || (stage_n && !stage))
        rc = nmt_seterr("cannot allocate %zu MB for the packed weights on backend %s: %s", total >> 20, k->name,
                        k->last_error(in->ctx));
    else if (int8_n && stage_n && !host)
        rc = nmt_seterr("out of memory");
    size_t off = 0;
    for (int i = 0; rc == 0 && i < in->nwt; i++) {
        struct wt_entry *e = &in->wts[i];
        size_t n = (size_t)e->out * (size_t)e->kin;
        struct wt_entry from = *e;
        const void *bytes = NULL, *values;
        size_t nbytes = 0;
        if (file && !wt_read_elsewhere(in, e)) { /* left out of the model: from the file's bytes */
            if (!(values = model_file_floats(in->m, file, e->w, n, host, &bytes, &nbytes)) ||
                nn_bk(&in->run, k->upload(in->ctx, stage, values, n * sizeof(float)), "upload") < 0)
                rc = -1;
            from.w = stage;
        }
        int give = !bytes && discard && !wt_read_elsewhere(in, e) && n * sizeof(float) >= DISCARD_MIN;
        if (rc == 0 && wt_pack(in, in->wt_buf + off, &from) < 0)
            rc = -1;
        else if (rc == 0 && bytes && consume && st_discard(file, bytes, nbytes) < 0)
            rc = -1;
        else if (rc == 0 && give && model_discard_weight(in->m, e->w, n) < 0)
            rc = -1;
        if (e->w == in->w->out_w && (bytes || give))
            in->out_gone = 1;
        e->packed = in->wt_buf + off;
        off += (wt_bytes(in, e) + 63) & ~(size_t)63;
    }
    if (stage)
        k->free(in->ctx, stage);
    free(host);
    return rc;
}

static int infer_linear(struct nn_exec *e, float *y, const float *x, const float *W, const float *bias, int relu,
                        int N, int out, int kin);

/* The names of the precisions of --precision: the layers' dtype, with INFER_OUTPUT_TOO or not. */
static const struct {
    const char *name;
    uint32_t dtype;
} precisions[] = {
    {"float32", NMT_DTYPE_F32},
    {"int8", NMT_DTYPE_INT8},
    {"int8-all", NMT_DTYPE_INT8 | INFER_OUTPUT_TOO},
    {"int8-a8", NMT_DTYPE_INT8A8},
    {"int8-a8-all", NMT_DTYPE_INT8A8 | INFER_OUTPUT_TOO},
    {"int8-a7", NMT_DTYPE_INT8A7},
    {"int8-a7-all", NMT_DTYPE_INT8A7 | INFER_OUTPUT_TOO},
    {"bf16", NMT_DTYPE_BF16},
    {"bf16-all", NMT_DTYPE_BF16 | INFER_OUTPUT_TOO},
};

const char *infer_precision_name(uint32_t dtype)
{
    for (size_t i = 0; i < sizeof precisions / sizeof precisions[0]; i++)
        if (precisions[i].dtype == dtype)
            return precisions[i].name;
    return "float32";
}

int infer_precision_parse(const char *name, uint32_t *dtype)
{
    for (size_t i = 0; i < sizeof precisions / sizeof precisions[0]; i++)
        if (!strcmp(name, precisions[i].name)) {
            *dtype = precisions[i].dtype;
            return 0;
        }
    return nmt_seterr("invalid precision '%s' (float32, int8, int8-all, int8-a8, int8-a8-all, int8-a7, int8-a7-all, "
                      "bf16 or bf16-all)",
                      name);
}

/* The bytes of the weights one decoder step of model C reads (its layers' products and the output
 * projection) in PRECISION. */
static double step_weight_bytes(const struct model_config *c, uint32_t precision)
{
    double d = c->d_model, layers = c->dec_layers * (6 * d * d + 2 * d * c->ff), out = (double)c->vocab * d;
    uint32_t dt = precision & ~INFER_OUTPUT_TOO;
    int int8 = dt == NMT_DTYPE_INT8 || dt == NMT_DTYPE_INT8A8 || dt == NMT_DTYPE_INT8A7;
    double wb = int8 ? 1 : dt == NMT_DTYPE_BF16 ? 2 : 4;
    return layers * wb + out * (precision & INFER_OUTPUT_TOO ? wb : 4);
}

/* See infer.h: below CACHED_WEIGHTS bytes a step, BATCH_SENTENCES; above, STREAM_ROWS rows. */
#define CACHED_WEIGHTS (32.0 * 1024 * 1024)
#define BATCH_SENTENCES 16
#define STREAM_ROWS 128
#define STREAM_SENTENCES 64

int infer_host_batch_sentences(const struct model_config *c, int nmodels, uint32_t precision, int beam)
{
    double bytes = 0;
    for (int i = 0; i < nmodels; i++)
        bytes += step_weight_bytes(&c[i], precision);
    if (bytes <= CACHED_WEIGHTS)
        return BATCH_SENTENCES;
    int n = STREAM_ROWS / (beam > 0 ? beam : 1);
    return n < BATCH_SENTENCES ? BATCH_SENTENCES : n > STREAM_SENTENCES ? STREAM_SENTENCES : n;
}

int infer_host_stream_sentences(int batch, int jobs)
{
    if (jobs < 2 || batch <= BATCH_SENTENCES)
        return batch;
    return batch / 2 < BATCH_SENTENCES ? BATCH_SENTENCES : batch / 2;
}

/* Whether the backend can take weights in reduced precision; 0, or -1 with the error set. */
static int check_precision(const struct infer *in)
{
    const struct nmt_backend *k = in->k;
    if (in->precision == NMT_DTYPE_F32)
        return 0;
    if (!has_linear_rowinv(k) || !k->linear_packed_bytes_q || !k->linear_pack_q)
        return nmt_seterr("backend %s has no %s linear layer (its plugin lacks the linear_pack_q slot of ABI 2.1)",
                          k->name, infer_precision_name(in->precision));
    return 0;
}

/* An inference state for M on BE without packed weights: what infer_new and infer_new_shared
 * share. Returns it, or NULL with the error set. */
static struct infer *infer_alloc(struct backend *be, struct model *m, int invariant, uint32_t precision)
{
    struct infer *in = calloc(1, sizeof *in);
    if (!in)
        return nmt_seterr("out of memory"), NULL;
    in->be = be;
    in->k = &be->ops;
    in->ctx = be->ctx;
    in->m = m;
    in->c = *model_config(m);
    in->run = (struct nn_exec){.k = in->k, .ctx = in->ctx, .c = &in->c, .linear = infer_linear, .owner = in};
    in->invariant = invariant;
    in->keep_logits = 1;
    in->precision = precision & ~(uint32_t)INFER_OUTPUT_TOO;
    in->out_precision = precision & INFER_OUTPUT_TOO ? in->precision : NMT_DTYPE_F32;
    in->w = model_weights(m);
    int Le = in->c.enc_layers, Ld = in->c.dec_layers;
    in->enc.layer = calloc((size_t)Le, sizeof *in->enc.layer);
    in->ckv = calloc((size_t)Ld, sizeof *in->ckv);
    in->kv = calloc((size_t)Ld, sizeof *in->kv);
    int err = !in->enc.layer || !in->ckv || !in->kv ? nmt_seterr("out of memory") : 0;
    if (err == 0 && (check_precision(in) < 0 || nn_check_backend(in->k, &in->c) < 0))
        err = -1;
    in->run.pe = model_pe_table(m); /* read as the model's weights are, also by a shared state */
    if (err < 0) {
        infer_free(in);
        return NULL;
    }
    return in;
}

/* Whether IN computes its products from packed weights (pack_weights). */
static int packs(const struct infer *in)
{
    return in->precision != NMT_DTYPE_F32 || (in->invariant && has_linear_rowinv(in->k));
}

struct infer *infer_new(struct backend *be, struct model *m, unsigned flags, uint32_t precision)
{
    if (model_weights_discarded(m))
        return nmt_seterr("cannot decode with a model whose weights were partly given back (by an earlier "
                          "inference state): load them again"),
               NULL;
    struct infer *in = infer_alloc(be, m, (flags & INFER_INVARIANT) != 0, precision);
    if (!in)
        return NULL;
    if (packs(in) && (wt_table(in) < 0 || pack_weights(in, (flags & INFER_DISCARD) != 0, NULL, 0) < 0 ||
                      emb_setup(in) < 0)) {
        infer_free(in);
        return NULL;
    }
    return in;
}

struct infer *infer_new_shared(struct backend *be, const struct infer *owner)
{
    if (!backend_can_share(be, owner->be))
        return nmt_seterr("backend %s cannot read the buffers of another of its contexts", be->ops.name), NULL;
    uint32_t precision = owner->precision | (owner->out_precision != NMT_DTYPE_F32 ? INFER_OUTPUT_TOO : 0);
    struct infer *in = infer_alloc(be, owner->m, owner->invariant, precision);
    if (!in)
        return NULL;
    in->wts = owner->wts; /* wt_buf stays NULL: the owner's, freed by it */
    in->nwt = owner->nwt;
    in->shares = 1;
    in->out_gone = owner->out_gone;
    if (emb_setup(in) < 0) {
        infer_free(in);
        return NULL;
    }
    return in;
}

/* ---------------------------------------------------------------------------------------------
 * arena */

/* Rows of logits a step that does not keep them computes at a time (topk_by_rows): about 2 MiB of
 * them, in whole blocks of INFER_BLOCK rows. */
static int logits_rows(int V)
{
    size_t n = ((size_t)2 << 20) / ((size_t)V * sizeof(float));
    n -= n % INFER_BLOCK;
    return n < INFER_BLOCK ? INFER_BLOCK : n > (1u << 20) ? 1 << 20 : (int)n;
}

/* Source tokens (rows) the encoder computes at a time in invariant mode, where a sentence's
 * encoding depends on no other sentence: its buffers then take ENC_ROWS rows (or one sentence), not
 * the batch's. 256 rows keep the products as fast as 512 did, and their buffers (22 KB a row for
 * `base`) below the decoder's at nmt-decode's batches. */
#define ENC_ROWS 256

/* The sentences of a batch of B, of S rows each, that infer_encode encodes at a time. */
static int enc_sentences(const struct infer *in, int B, int S)
{
    int n = in->invariant ? ENC_ROWS / S : B;
    return n < 1 ? 1 : n > B ? B : n;
}

/* Whether the self-attention caches are read through rows (the backend's attention_forward_rows), for
 * a batch of several rows a sentence (beam search, sampling): the reordering of each step then moves
 * indices, not cache rows. With one row a sentence (greedy search) rows move only when sentences end,
 * and the caches stay compact as they do. */
static int rows_mode(const struct infer *in)
{
    return in->k->attention_forward_rows != NULL && (in->Kcap > 1 || in->stream);
}

/* The encoder's buffers, dead once a batch is encoded. */
static void arena_encoder(struct infer *in, struct nn_bump *b)
{
    size_t D = (size_t)in->c.d_model, F = (size_t)in->c.ff, Ns = in->ext.En;
    in->ex = nn_bump_f(b, Ns * D);
    in->et = nn_bump_f(b, Ns * D);
    in->eq = nn_bump_f(b, Ns * 3 * D);
    in->eatt = nn_bump_f(b, Ns * D);
    in->esub = nn_bump_f(b, Ns * D);
    in->eh = nn_bump_f(b, Ns * F);
    /* nothing is kept for backward: every encoder layer works in the same buffers */
    struct nn_sub sa = {.t = in->et, .x = in->ex, .q = in->eq, .att = in->eatt},
                  ff = {.t = in->et, .x = in->ex, .h = in->eh};
    for (int l = 0; l < in->c.enc_layers; l++)
        in->enc.layer[l] = (struct nn_enc_act){sa, ff};
    in->enc.x = in->ex;
    in->enc.sub = in->esub;
    in->enc.fl = in->et;
}

/* The self-attention caches and the rows they are read through. */
static void arena_caches(struct infer *in, struct nn_bump *b)
{
    size_t D = (size_t)in->c.d_model, TR = in->ext.TR;
    for (int l = 0; l < in->c.dec_layers; l++)
        in->kv[l] = nn_bump_f(b, TR * 2 * D);
    in->kv_spare = rows_mode(in) ? NULL : nn_bump_f(b, TR * 2 * D);
    in->kv_rows = rows_mode(in) ? nn_bump_i(b, TR) : NULL;
}

/* The decoder's buffers, unused until a batch is encoded: the step's (first, the pages every batch
 * touches in full), then the caches, of which a batch touches the steps it makes, then the logits
 * of all rows, which only the steps that keep them touch (infer_keep_logits). */
static void arena_decoder(struct infer *in, struct nn_bump *b)
{
    size_t D = (size_t)in->c.d_model, F = (size_t)in->c.ff, V = (size_t)in->c.vocab;
    size_t R = in->ext.R, TR = in->ext.TR;
    in->x = nn_bump_f(b, R * D);
    in->t = nn_bump_f(b, R * D);
    in->q = nn_bump_f(b, R * D);
    in->att = nn_bump_f(b, R * D);
    in->sub = nn_bump_f(b, R * D);
    in->h = nn_bump_f(b, R * F);
    in->tok = nn_bump_i(b, R);
    in->pos = nn_bump_i(b, R);
    in->tgt = nn_bump_i(b, R);
    in->lp = nn_bump_f(b, R);
    in->klen = in->stream ? nn_bump_i(b, R) : NULL;
    in->xlen = in->stream ? nn_bump_i(b, R) : NULL;
    in->xrows = in->stream ? nn_bump_i(b, in->ext.RS) : NULL;
    in->kv_stage = in->stream ? nn_bump_f(b, R * 2 * D) : NULL;
    in->vals = nn_bump_f(b, in->ext.Rk);
    in->logits_few = nn_bump_f(b, (size_t)logits_rows(in->c.vocab) * V);
    in->idx = nn_bump_i(b, TR > in->ext.Rk ? TR : in->ext.Rk);
    in->ckv_spare = in->ckv_by_rows ? NULL : nn_bump_f(b, in->ext.Ns * 2 * D);
    if (!in->stream)
        arena_caches(in, b);
    in->logits = nn_bump_f(b, R * V);
}

/* Lays the arena out from B (a NULL base measures it): what lives through a batch (the source, the
 * cross keys and values, the padding blocks; in a stream, where sentences are encoded between
 * the steps of others, the self-attention caches too), then the encoder's buffers and the
 * decoder's over the same bytes, the one phase's being dead in the other (arena_prepare lays the
 * arena out again before each batch, which undoes infer_reorder's swaps of buffers). */
static void arena_layout(struct infer *in, struct nn_bump *b)
{
    size_t D = (size_t)in->c.d_model, F = (size_t)in->c.ff, V = (size_t)in->c.vocab, Ns = in->ext.Ns;
    in->src_ids = nn_bump_i(b, Ns);
    in->src_pos = nn_bump_i(b, Ns);
    in->ckv_rows = nn_bump_i(b, Ns);
    in->src_len = nn_bump_i(b, in->ext.B);
    for (int l = 0; l < in->c.dec_layers; l++)
        in->ckv[l] = nn_bump_f(b, Ns * 2 * D);
    size_t win = D > F ? D : F, wout = 3 * D;
    if (F > wout)
        wout = F;
    if (V > wout)
        wout = V;
    in->padx = nn_bump_f(b, INFER_BLOCK * win);
    in->pady = nn_bump_f(b, INFER_BLOCK * wout);
    if (in->stream) { /* a step's buffers are dead while sentences are admitted, the caches are not */
        arena_caches(in, b);
        in->iota = nn_bump_i(b, in->ext.En > in->ext.R ? in->ext.En : in->ext.R);
    }
    size_t phase = b->off;
    arena_encoder(in, b);
    size_t enc_end = b->off;
    b->off = phase;
    arena_decoder(in, b);
    if (enc_end > b->off)
        b->off = enc_end;
}

static int arena_prepare(struct infer *in)
{
    struct nn_bump b = {NULL, 0};
    arena_layout(in, &b);
    if (b.off > in->arena_cap) {
        in->k->free(in->ctx, in->arena);
        in->arena = NULL;
        in->arena_cap = 0;
        size_t want = b.off + b.off / 4;
        /* a batch touches a prefix of each region: huge pages would round each up to 2 MiB */
        in->arena = in->k->alloc_sparse ? in->k->alloc_sparse(in->ctx, want) : in->k->alloc(in->ctx, want);
        if (!in->arena)
            return nmt_seterr("cannot allocate decoder memory (%zu MB) on backend %s: %s", want >> 20, in->k->name,
                              in->k->last_error(in->ctx));
        in->arena_cap = want;
    }
    b = (struct nn_bump){in->arena, 0};
    arena_layout(in, &b);
    return 0;
}

/* Makes the host copies of kv_rows hold N entries; 0 or -1. */
static int host_rows(struct infer *in, size_t n)
{
    if (n <= in->host_rows_cap)
        return 0;
    free(in->host_rows);
    free(in->host_rows_new);
    in->host_rows = malloc(n * sizeof *in->host_rows);
    in->host_rows_new = malloc(n * sizeof *in->host_rows_new);
    in->host_rows_cap = in->host_rows && in->host_rows_new ? n : 0;
    return in->host_rows_cap ? 0 : nmt_seterr("out of memory");
}

/* Makes host_ckv_rows hold N entries; 0 or -1. */
static int host_ckv_room(struct infer *in, size_t n)
{
    if (n <= in->host_ckv_cap)
        return 0;
    free(in->host_ckv_rows);
    in->host_ckv_rows = malloc(n * sizeof *in->host_ckv_rows);
    in->host_ckv_cap = in->host_ckv_rows ? n : 0;
    return in->host_ckv_cap ? 0 : nmt_seterr("out of memory");
}

static int host_ints(struct infer *in, size_t n)
{
    if (n <= in->host_cap)
        return 0;
    int32_t *p = realloc(in->host_ints, n * sizeof *p);
    if (!p)
        return nmt_seterr("out of memory");
    in->host_ints = p;
    in->host_cap = n;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * the linear layer of decoding */

/* y (N, out) = x (N, kin) W^T on fixed blocks of INFER_BLOCK rows (the last one padded through
 * scratch), so that each row's result is the same whatever N is. 0 or -1. */
static int gemm_blocks(struct infer *in, float *y, const float *x, const float *W, int N, int out, int kin)
{
    const struct nmt_backend *k = in->k;
    const int P = INFER_BLOCK;
    for (int r = 0; r < N; r += P) {
        int n = N - r < P ? N - r : P;
        const float *xr = x + (size_t)r * (size_t)kin;
        float *yr = y + (size_t)r * (size_t)out;
        if (n == P) {
            if (nn_bk(&in->run, k->gemm(in->ctx, 0, 1, P, out, kin, 1.0f, xr, kin, W, kin, 0.0f, yr, out), "gemm") < 0)
                return -1;
            continue;
        }
        if (nn_bk(&in->run, k->copy(in->ctx, in->padx, xr, (size_t)n * (size_t)kin * sizeof(float)), "copy") < 0 ||
            nn_bk(&in->run, k->gemm(in->ctx, 0, 1, P, out, kin, 1.0f, in->padx, kin, W, kin, 0.0f, in->pady, out),
                  "gemm") < 0 ||
            nn_bk(&in->run, k->copy(in->ctx, yr, in->pady, (size_t)n * (size_t)out * sizeof(float)), "copy") < 0)
            return -1;
    }
    return 0;
}

/* The nn_linear_fn of decoding: y (N, out) = x (N, kin) W^T + b, W (out, kin), then ReLU if RELU.
 * Invariant mode: the backend's row-invariant linear layer (linear_rowinv, on W as linear_pack left
 * it) or product (gemm_rowinv) when it has one, else gemm_blocks; either way each row's result is
 * the same whatever N is. Otherwise the plain gemm of training. */
static int infer_linear(struct nn_exec *e, float *y, const float *x, const float *W, const float *bias, int relu,
                        int N, int out, int kin)
{
    struct infer *in = e->owner;
    const struct nmt_backend *k = in->k;
    if (!in->invariant && in->precision == NMT_DTYPE_F32)
        return nn_linear_gemm(e, y, x, W, bias, relu, N, out, kin);
    const void *wp = wt_find(in, W, out);
    if (wp)
        return nn_bk(e, k->linear_rowinv(in->ctx, N, out, kin, x, kin, wp, bias, relu, y, out), "linear_rowinv");
    if (k->gemm_rowinv) {
        if (nn_bk(e, k->gemm_rowinv(in->ctx, N, out, kin, 1.0f, x, kin, W, kin, 0.0f, y, out), "gemm_rowinv") < 0)
            return -1;
    } else if (gemm_blocks(in, y, x, W, N, out, kin) < 0) {
        return -1;
    }
    if (bias && nn_bk(e, k->bias_add(in->ctx, y, bias, N, out), "bias_add") < 0)
        return -1;
    return relu ? nn_bk(e, k->relu_forward(in->ctx, y, y, (size_t)N * (size_t)out), "relu") : 0;
}

/* ---------------------------------------------------------------------------------------------
 * the vocabulary shortlist */

int infer_set_shortlist(struct infer *in, const struct shortlist *sl)
{
    const struct nmt_backend *k = in->k;
    int V = in->c.vocab;
    if (sl && sl->vocab != V)
        return nmt_seterr("shortlist of a vocabulary of %d pieces for a model of %d", sl->vocab, V);
    if (sl && in->out_gone)
        return nmt_seterr("a shortlist reads the output projection's float32 weights, given back once packed: "
                          "load the model with the shortlist (infer_load)");
    in->sl = sl;
    in->ns = in->R = 0; /* no batch is under way until the next infer_encode */
    if (!sl || in->mark)
        return 0;
    in->mark = nmt_calloc((size_t)V, 1);
    in->union_ids = in->mark ? nmt_malloc((size_t)V * sizeof *in->union_ids) : NULL;
    in->union_at = in->union_ids ? nmt_malloc((size_t)V * sizeof *in->union_at) : NULL;
    if (!in->union_at)
        return -1;
    in->sl_ids = k->alloc(in->ctx, (size_t)V * sizeof(int32_t));
    return in->sl_ids ? 0 : nmt_seterr("backend %s: alloc: %s", k->name, k->last_error(in->ctx));
}

/* Grows the host arrays of the shortlist to B sentences. 0 or -1. */
static int short_grow(struct infer *in, int B)
{
    if ((size_t)B <= in->sent_cap)
        return 0;
    size_t n = (size_t)B;
    free(in->coff);
    free(in->woff);
    free(in->live);
    free(in->loff);
    in->coff = nmt_malloc((n + 1) * sizeof *in->coff);
    in->woff = nmt_malloc(n * sizeof *in->woff);
    in->live = nmt_malloc(n * sizeof *in->live);
    in->loff = nmt_malloc((n + 1) * sizeof *in->loff);
    in->sent_cap = in->coff && in->woff && in->live && in->loff ? n : 0;
    return in->sent_cap ? 0 : -1;
}

/* Makes room for N candidates in all, keeping those there (doubling). 0 or -1. */
static int short_cand_room(struct infer *in, size_t n)
{
    if (n <= in->cand_cap)
        return 0;
    size_t want = n > 2 * in->cand_cap ? n : 2 * in->cand_cap;
    int32_t *c = realloc(in->cand, want * sizeof *c);
    if (c)
        in->cand = c;
    int32_t *u = c ? realloc(in->upos, want * sizeof *u) : NULL;
    if (!u)
        return nmt_seterr("out of memory");
    in->upos = u;
    in->cand_cap = want;
    return 0;
}

/* The number of candidates of live sentence S. */
static int short_n(const struct infer *in, int s)
{
    int b = in->live[s];
    return (int)(in->coff[b + 1] - in->coff[b]);
}

/* The output weights of N candidates, as the model's output projection keeps them. */
static struct wt_entry short_entry(const struct infer *in, int n)
{
    return (struct wt_entry){in->sl_rows, NULL, n, in->c.d_model, in->out_precision};
}

/* Bytes of the output weights of N candidates in sl_w (packed, or gathered rows), 64-aligned. */
static size_t short_wbytes(const struct infer *in, int n)
{
    struct wt_entry e = short_entry(in, n);
    size_t b = in->nwt ? wt_bytes(in, &e) : (size_t)n * (size_t)in->c.d_model * sizeof(float);
    return (b + 63) & ~(size_t)63;
}

/* Grows device buffer *P of *CAP bytes to at least N, doubling (few buffers, whose pages are
 * faulted in once). 0, or -1 with the error set. */
static int short_dev_grow(struct infer *in, void **p, size_t *cap, size_t n, const char *what)
{
    if (n <= *cap)
        return 0;
    size_t want = n > 2 * *cap ? n : 2 * *cap;
    in->k->free(in->ctx, *p);
    *cap = 0;
    if (!(*p = in->k->alloc(in->ctx, want)))
        return nmt_seterr("cannot allocate %zu MB for the shortlist's %s on backend %s: %s", want >> 20, what,
                          in->k->name, in->k->last_error(in->ctx));
    *cap = want;
    return 0;
}

/* A weight read by a product costs about as many multiply-adds as this many rows do with it: the
 * union of the batch's candidates is taken when rows x union costs less than this many rows per
 * sentence's candidates (greedy batches: a product over the union; beams: one a sentence). */
#define SHORT_READ_ROWS 8

/* Sets the union of the B sentences' candidates (in->union_*, in->upos) and returns whether one
 * product over it costs less than one product a sentence (only with the backend's linear layer,
 * whose results for a column do not depend on the others: plugins/backend.h). */
static int short_union(struct infer *in, int B)
{
    int V = in->c.vocab, n = 0;
    in->union_n = 0;
    if (!in->nwt)
        return 0;
    for (size_t i = 0; i < in->coff[B]; i++)
        in->mark[in->cand[i]] = 1;
    for (int v = 0; v < V; v++)
        if (in->mark[v]) {
            in->mark[v] = 0;
            in->union_at[v] = n;
            in->union_ids[n++] = v;
        }
    for (size_t i = 0; i < in->coff[B]; i++)
        in->upos[i] = in->union_at[in->cand[i]];
    double rows = (double)B * (double)in->K, per_sentence = (double)in->coff[B];
    int cheaper = rows * n < per_sentence * (in->K > SHORT_READ_ROWS ? in->K : SHORT_READ_ROWS);
    in->union_n = cheaper && rows * n <= (double)INT32_MAX ? n : 0; /* sl_u is indexed in int32 */
    return in->union_n;
}

/* Packs (or, without packed weights, gathers) into DST the output projection's rows of the N ids IDS
 * (host), and their output biases into in->sl_b + BOFF when the model has them. 0 or -1. */
static int short_weights(struct infer *in, void *dst, const int32_t *ids, int n, size_t boff)
{
    const struct nmt_backend *k = in->k;
    size_t bytes = (size_t)n * (size_t)in->c.d_model * sizeof(float);
    if (in->nwt && short_dev_grow(in, (void **)&in->sl_rows, &in->sl_rowscap, bytes, "rows") < 0)
        return -1;
    float *rows = in->nwt ? in->sl_rows : (float *)dst;
    struct wt_entry e = short_entry(in, n);
    if (nn_bk(&in->run, k->upload(in->ctx, in->sl_ids, ids, (size_t)n * sizeof(int32_t)), "upload") < 0 ||
        nn_bk(&in->run, k->gather_rows(in->ctx, rows, in->w->out_w, in->sl_ids, n, in->c.d_model), "gather_rows") < 0 ||
        (in->w->out_b &&
         nn_bk(&in->run, k->gather_rows(in->ctx, in->sl_b + boff, in->w->out_b, in->sl_ids, n, 1), "gather_rows") < 0))
        return -1;
    return in->nwt ? wt_pack(in, dst, &e) : 0;
}

/* Makes the candidates of the B sentences SRC/LEN of infer_encode and the output weights of the
 * batch: those of the union of the candidates, or of each sentence's. 0, or -1 with the error set. */
static int short_prepare(struct infer *in, int B, const uint32_t *const *src, const int *len)
{
    const struct nmt_backend *k = in->k;
    int V = in->c.vocab;
    if (short_grow(in, B) < 0)
        return -1;
    size_t wtotal = 0;
    in->coff[0] = 0;
    for (int b = 0; b < B; b++) {
        if (short_cand_room(in, in->coff[b] + (size_t)V) < 0)
            return -1;
        int n = shortlist_candidates(in->sl, src[b], len[b], in->topk_cap, in->cand + in->coff[b], in->mark);
        if (n < in->topk_cap)
            return nmt_seterr("shortlist: %d candidates, fewer than the %d best asked", n, in->topk_cap);
        in->coff[b + 1] = in->coff[b] + (size_t)n;
        in->live[b] = b;
    }
    int nu = short_union(in, B);
    for (int b = 0; b < (nu ? 1 : B); b++) {
        size_t wb = short_wbytes(in, nu ? nu : (int)(in->coff[b + 1] - in->coff[b]));
        if (wb == 0)
            return nmt_seterr("backend %s cannot pack the shortlist's weights: %s", k->name, k->last_error(in->ctx));
        in->woff[b] = wtotal;
        wtotal += wb;
    }
    if (short_dev_grow(in, (void **)&in->sl_w, &in->sl_wcap, wtotal, "weights") < 0 ||
        (in->w->out_b && short_dev_grow(in, (void **)&in->sl_b, &in->sl_bcap, in->coff[B] * sizeof(float), "biases") < 0))
        return -1;
    if (nu)
        return short_dev_grow(in, (void **)&in->sl_u, &in->sl_ucap, (size_t)B * (size_t)in->K * (size_t)nu * 4,
                              "logits") < 0 ||
                       short_weights(in, in->sl_w, in->union_ids, nu, 0) < 0
                   ? -1
                   : 0;
    for (int b = 0; b < B; b++)
        if (short_weights(in, in->sl_w + in->woff[b], in->cand + in->coff[b], (int)(in->coff[b + 1] - in->coff[b]),
                          in->coff[b]) < 0)
            return -1;
    return 0;
}

/* The output layer over the batch's union: Y (R, D) times its weights into sl_u, then each live
 * row's candidates gathered into its place in in->logits. 0 or -1. */
static int short_project_union(struct infer *in, const float *y)
{
    struct nn_exec *e = &in->run;
    const struct nmt_backend *k = in->k;
    int K = in->K, R = in->R, nu = in->union_n;
    size_t total = 0;
    for (int s = 0; s < in->ns; s++)
        total += (size_t)K * (size_t)short_n(in, s);
    if (total > in->sl_flatcap / sizeof(int32_t)) { /* the host copy has the device buffer's size */
        free(in->flat_host);
        in->flat_host = NULL;
        if (short_dev_grow(in, (void **)&in->sl_flat, &in->sl_flatcap, 2 * total * sizeof(int32_t), "indices") < 0 ||
            !(in->flat_host = nmt_malloc(in->sl_flatcap))) {
            in->k->free(in->ctx, in->sl_flat);
            in->sl_flat = NULL;
            in->sl_flatcap = 0;
            return -1;
        }
    }
    int32_t *f = in->flat_host;
    for (int r = 0; r < R; r++) {
        int b = in->live[r / K];
        for (size_t i = in->coff[b]; i < in->coff[b + 1]; i++)
            *f++ = r * nu + in->upos[i];
    }
    const float *bias = in->w->out_b ? in->sl_b : NULL;
    return nn_bk(e, k->linear_rowinv(in->ctx, R, nu, in->c.d_model, y, in->c.d_model, in->sl_w, bias, 0, in->sl_u, nu),
                 "linear_rowinv") < 0 ||
                   nn_bk(e, k->upload(in->ctx, in->sl_flat, in->flat_host, total * sizeof(int32_t)), "upload") < 0 ||
                   nn_bk(e, k->gather_rows(in->ctx, in->logits, in->sl_u, in->sl_flat, (int)total, 1), "gather_rows") < 0
               ? -1
               : 0;
}

/* The output layer on the candidates: live sentence s's K rows of Y (R, D) times its candidates'
 * weights into its block of in->logits. 0 or -1. */
static int short_project(struct infer *in, const float *y)
{
    struct nn_exec *e = &in->run;
    if (in->union_n)
        return short_project_union(in, y);
    int K = in->K, D = in->c.d_model;
    float *out = in->logits;
    for (int s = 0; s < in->ns; s++) {
        int b = in->live[s], n = short_n(in, s);
        const float *x = y + (size_t)s * (size_t)K * (size_t)D;
        const void *w = in->sl_w + in->woff[b];
        const float *bias = in->w->out_b ? in->sl_b + in->coff[b] : NULL;
        int rc = in->nwt ? nn_bk(e, in->k->linear_rowinv(in->ctx, K, n, D, x, D, w, bias, 0, out, n), "linear_rowinv")
                         : e->linear(e, out, x, (const float *)w, bias, 0, K, n, D);
        if (rc < 0)
            return -1;
        out += (size_t)K * (size_t)n;
    }
    return 0;
}

/* The backend's top-k of N rows of V logits into VALS/IDX (device): log-probabilities, or the logits
 * themselves (infer_topk_raw, where the backend has topk_logits). */
static int topk_call(struct infer *in, float *vals, int32_t *idx, const float *logits, int N, int V, int K)
{
    const struct nmt_backend *k = in->k;
    if (in->topk_raw && k->topk_logits)
        return nn_bk(&in->run, k->topk_logits(in->ctx, vals, idx, logits, N, V, K), "topk_logits");
    return nn_bk(&in->run, k->topk_logsoftmax(in->ctx, vals, idx, logits, N, V, K), "topk_logsoftmax");
}

/* The TOPK best log-probabilities of each live row over its sentence's candidates into VALS/IDX
 * (host, R x TOPK), as step_outputs'. 0 or -1. */
static int short_topk(struct infer *in, int topk, float *vals, int32_t *idx)
{
    struct nn_exec *e = &in->run;
    const struct nmt_backend *k = in->k;
    int K = in->K, R = in->R;
    const float *l = in->logits;
    for (int s = 0; s < in->ns; s++) {
        int n = short_n(in, s);
        size_t o = (size_t)s * (size_t)K * (size_t)topk;
        if (topk_call(in, in->vals + o, in->idx + o, l, K, n, topk) < 0)
            return -1;
        l += (size_t)K * (size_t)n;
    }
    if (nn_bk(e, k->download(in->ctx, vals, in->vals, (size_t)R * (size_t)topk * sizeof(float)), "download") < 0 ||
        nn_bk(e, k->download(in->ctx, idx, in->idx, (size_t)R * (size_t)topk * sizeof(int32_t)), "download") < 0)
        return -1;
    for (int r = 0; r < R; r++) {
        const int32_t *c = in->cand + in->coff[in->live[r / K]];
        for (int j = 0; j < topk; j++)
            idx[(size_t)r * (size_t)topk + (size_t)j] = c[idx[(size_t)r * (size_t)topk + (size_t)j]];
    }
    return 0;
}

/* Downloads the live rows' logits over their candidates into in->host_logits, live sentence s's at
 * in->loff[s]. 0 or -1. */
static int short_logits_host(struct infer *in)
{
    in->loff[0] = 0;
    for (int s = 0; s < in->ns; s++)
        in->loff[s + 1] = in->loff[s] + (size_t)in->K * (size_t)short_n(in, s);
    size_t total = in->loff[in->ns];
    if (total > in->host_logits_cap) {
        free(in->host_logits);
        in->host_logits = nmt_malloc(total * sizeof *in->host_logits);
        in->host_logits_cap = in->host_logits ? total : 0;
        if (!in->host_logits)
            return -1;
    }
    return nn_bk(&in->run, in->k->download(in->ctx, in->host_logits, in->logits, total * sizeof(float)), "download");
}

/* The logit of live row R at token ID from in->host_logits (short_logits_host): -infinity for a
 * token outside its sentence's candidates. */
static float short_logit_at(const struct infer *in, int r, int32_t id)
{
    int s = r / in->K, n = short_n(in, s);
    const int32_t *c = in->cand + in->coff[in->live[s]];
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (c[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t row = in->loff[s] + (size_t)(r % in->K) * (size_t)n;
    return lo < n && c[lo] == id ? in->host_logits[row + (size_t)lo] : -INFINITY;
}

/* ---------------------------------------------------------------------------------------------
 * encoder */

static void grow(size_t *e, size_t n) { *e = n > *e ? n : *e; }

/* Sets the batch shape and grows the extents the arena is laid out for to cover it. */
static void set_shape(struct infer *in, int B, int S, int K, int tmax)
{
    in->B = B;
    in->S = S;
    in->K = in->Kcap = K;
    /* the kept attention is attention_forward's P, over keys padded to S */
    in->ckv_by_rows = in->k->attention_forward_rows != NULL && !in->keep_att;
    in->tmax = tmax;
    in->Rcap = B * K;
    in->topk_cap = 4 * K; /* beam search's 2K, and an ensemble's members' 4K */
    if (in->topk_cap > in->c.vocab)
        in->topk_cap = in->c.vocab;
    size_t R = (size_t)in->Rcap;
    grow(&in->ext.Ns, (size_t)B * (size_t)S);
    grow(&in->ext.En, (size_t)enc_sentences(in, B, S) * (size_t)S);
    grow(&in->ext.B, (size_t)B);
    grow(&in->ext.R, R);
    grow(&in->ext.TR, (size_t)tmax * R);
    grow(&in->ext.Rk, R * (size_t)in->topk_cap);
    grow(&in->ext.RS, R * (size_t)S);
}

int infer_reserve(struct infer *in, int B, int S, int K, int tmax)
{
    if (B < 1 || S < 1 || K < 1 || tmax < 1)
        return nmt_seterr("reserve: empty batch shape (B=%d S=%d K=%d T=%d)", B, S, K, tmax);
    in->stream = 0;
    set_shape(in, B, S, K, tmax);
    in->ns = in->R = 0; /* no batch is under way until the next infer_encode */
    return arena_prepare(in);
}

/* The encoder chunk of a batch that starts at sentence B0 of NB, whose lengths (with EOS) are LEN:
 * the most sentences from B0 whose rows, each sentence padded to the longest of them, fit in CAP
 * rows (one sentence at least). Returns their count, and that longest length in *SC. nmt-decode's
 * batches come sorted by length, so a chunk pads far fewer rows than the batch's longest would. */
static int enc_chunk(const int32_t *len, int b0, int nb, int cap, int *sc)
{
    int n = 1, s = len[b0];
    while (b0 + n < nb) {
        int s2 = len[b0 + n] > s ? len[b0 + n] : s;
        if ((int64_t)(n + 1) * s2 > cap)
            break;
        s = s2;
        n++;
    }
    *sc = s;
    return n;
}

/* Lays the batch's source out on the host by encoder chunk (enc_chunk of at most CAP rows): each
 * chunk's sentences padded to its own longest, one after the other, in IDS and POS; ROWS (B*S) gives
 * row j of sentence b (b*S + j, padded to the batch's S) its row in all the chunks' outputs one
 * after the other with ckv_by_rows, else in its chunk's output (for padding, the row of the
 * sentence's last one). Returns the rows of IDS and POS, or -1 with the error set. */
static int64_t enc_layout(const struct infer *in, const uint32_t *const *src, const int *len, int cap, int32_t *ids,
                          int32_t *pos, int32_t *rows)
{
    int B = in->B, S = in->S, V = in->c.vocab;
    size_t off = 0;
    for (int b = 0; b < B;) {
        int sc, n = enc_chunk(in->host_len, b, B, cap, &sc);
        for (int i = 0; i < n; i++, b++)
            for (int j = 0; j < S; j++) {
                if (j < sc) {
                    size_t r = off + (size_t)i * (size_t)sc + (size_t)j;
                    if (j < len[b] && src[b][j] >= (uint32_t)V)
                        return nmt_seterr("source id %u outside the vocabulary of %d", src[b][j], V);
                    ids[r] = j < len[b] ? (int32_t)src[b][j] : j == len[b] ? NMT_EOS : 0;
                    pos[r] = j <= len[b] ? j : -1;
                }
                rows[(size_t)b * (size_t)S + (size_t)j] =
                    (int32_t)((in->ckv_by_rows ? off : 0) + (size_t)i * (size_t)sc + (size_t)(j < sc ? j : sc - 1));
            }
        off += (size_t)n * (size_t)sc;
    }
    return (int64_t)off;
}

/* Encodes the batch chunk by chunk (enc_layout's) and writes each decoder layer's cross keys and
 * values of its sentences in ckv: as the chunks lie with ckv_by_rows, else padded to the batch's S.
 * 0 or -1 with the error set. */
static int enc_chunks(struct infer *in, int cap)
{
    const struct model_config *c = &in->c;
    const struct nmt_backend *k = in->k;
    int B = in->B, S = in->S;
    size_t D2 = 2 * (size_t)c->d_model, off = 0;
    for (int b = 0; b < B;) {
        int sc, n = enc_chunk(in->host_len, b, B, cap, &sc);
        const float *mem;
        if (nn_encoder(&in->run, in->w, &in->enc, in->src_ids + off, in->src_pos + off, in->src_len + b, n, sc,
                       &mem) < 0)
            return -1;
        size_t o = (size_t)b * (size_t)S;
        for (int l = 0; l < c->dec_layers; l++) {
            /* as the chunk lies, or padded to S already: straight into place; else through eq (dead
             * once encoded) */
            int direct = in->ckv_by_rows || sc == S;
            float *kv = in->ckv_by_rows ? in->ckv[l] + off * D2 : sc == S ? in->ckv[l] + o * D2 : in->eq;
            if (infer_linear(&in->run, kv, mem, in->w->dec[l].ckv_w, in->w->dec[l].ckv_b, 0, n * sc, (int)D2,
                             c->d_model) < 0 ||
                (!direct && nn_bk(&in->run, k->gather_rows(in->ctx, in->ckv[l] + o * D2, kv, in->ckv_rows + o,
                                                           n * S, (int64_t)D2), "gather_rows") < 0))
                return -1;
        }
        off += (size_t)n * (size_t)sc;
        b += n;
    }
    return 0;
}

int infer_encode(struct infer *in, int B, const uint32_t *const *src, const int *len, int K, int tmax)
{
    const struct model_config *c = &in->c;
    int S = 1;
    if (B < 1 || K < 1 || tmax < 1)
        return nmt_seterr("empty batch");
    for (int b = 0; b < B; b++) {
        if (len[b] < 0 || len[b] + 1 > c->max_len)
            return nmt_seterr("sentence of %d tokens exceeds the model's maximum length %d", len[b] + 1, c->max_len);
        if (len[b] + 1 > S)
            S = len[b] + 1;
    }
    /* the context may be shared with a model training in bf16 (validation): gemm is float32 here */
    if (in->run.k->set_precision &&
        nn_bk(&in->run, in->run.k->set_precision(in->run.ctx, NMT_DTYPE_F32), "set_precision") < 0)
        return -1;
    in->stream = 0;
    set_shape(in, B, S, K, tmax);
    if (arena_prepare(in) < 0)
        return -1;
    size_t Ns_ = (size_t)B * (size_t)S;
    if (host_ints(in, 3 * Ns_) < 0 || host_ints(in, (size_t)tmax * (size_t)in->Rcap) < 0 ||
        (rows_mode(in) && host_rows(in, (size_t)tmax * (size_t)in->Rcap) < 0))
        return -1;
    free(in->host_len);
    in->host_len = malloc((size_t)B * sizeof *in->host_len);
    if (!in->host_len)
        return nmt_seterr("out of memory");
    for (int b = 0; b < B; b++)
        in->host_len[b] = len[b] + 1;
    /* a chunk takes as many rows as enc_sentences gives the batch's S */
    int cap = enc_sentences(in, B, S) * S;
    int32_t *ids = in->host_ints, *pos = ids + Ns_, *rows = pos + Ns_;
    int64_t er = enc_layout(in, src, len, cap, ids, pos, rows);
    if (er < 0)
        return -1;
    if (in->ckv_by_rows) { /* infer_reorder keeps the live sentences' rows */
        if (host_ckv_room(in, Ns_) < 0)
            return -1;
        memcpy(in->host_ckv_rows, rows, Ns_ * sizeof *rows);
    }
    const struct nmt_backend *k = in->k;
    if (nn_bk(&in->run, k->upload(in->ctx, in->src_ids, ids, (size_t)er * sizeof(int32_t)), "upload") < 0 ||
        nn_bk(&in->run, k->upload(in->ctx, in->src_pos, pos, (size_t)er * sizeof(int32_t)), "upload") < 0 ||
        nn_bk(&in->run, k->upload(in->ctx, in->ckv_rows, rows, Ns_ * sizeof(int32_t)), "upload") < 0 ||
        nn_bk(&in->run, k->upload(in->ctx, in->src_len, in->host_len, (size_t)B * sizeof(int32_t)), "upload") < 0 ||
        enc_chunks(in, cap) < 0)
        return -1;
    if (in->sl && short_prepare(in, B, src, len) < 0)
        return -1;
    in->ns = B;
    in->R = B * K;
    in->time = 0;
    return 0;
}

/* Makes the host arrays of a stream of B sentences (infer_open_stream), every slot free, and the
 * device's iota. 0 or -1. */
static int stream_arrays(struct infer *in)
{
    int B = in->B, R = in->Rcap, TR = in->tmax * in->Rcap;
    size_t Ns = (size_t)B * (size_t)in->S;
    stream_arrays_free(in);
    free(in->host_len);
    in->sent_rows = malloc((size_t)B * sizeof *in->sent_rows);
    in->sent_kn = malloc((size_t)B * sizeof *in->sent_kn);
    in->sent_off = malloc(((size_t)B + 1) * sizeof *in->sent_off);
    in->host_xrows = malloc((size_t)R * (size_t)in->S * sizeof *in->host_xrows);
    in->host_xlen = malloc((size_t)R * sizeof *in->host_xlen);
    in->row_step = calloc((size_t)R, sizeof *in->row_step);
    in->row_step_new = calloc((size_t)R, sizeof *in->row_step_new);
    in->kv_free = malloc((size_t)TR * sizeof *in->kv_free);
    in->kv_ref = calloc((size_t)TR, sizeof *in->kv_ref);
    in->slot_free = malloc((size_t)B * sizeof *in->slot_free);
    in->sent_kept = malloc((size_t)B);
    in->host_len = malloc((size_t)B * sizeof *in->host_len);
    if (!in->sent_rows || !in->sent_off || !in->sent_kn || !in->host_xrows || !in->host_xlen || !in->row_step || !in->row_step_new ||
        !in->kv_free || !in->kv_ref || !in->slot_free || !in->sent_kept ||
        !in->host_len || host_ints(in, 3 * Ns) < 0 || host_ints(in, (size_t)TR) < 0 || host_ints(in, (size_t)R) < 0 ||
        host_rows(in, (size_t)TR) < 0 || host_ckv_room(in, Ns) < 0)
        return nmt_seterr("out of memory");
    for (int i = 0; i < B; i++) /* popped from the top: slot 0 first */
        in->slot_free[i] = B - 1 - i;
    in->nslot_free = B;
    in->nkv_free = TR;
    for (int i = 0; i < TR; i++)
        in->kv_free[i] = TR - 1 - i;
    size_t n = in->ext.En > (size_t)R ? in->ext.En : (size_t)R;
    int32_t *h = in->host_ints;
    for (size_t i = 0; i < n; i++)
        h[i] = (int32_t)i;
    return nn_bk(&in->run, in->k->upload(in->ctx, in->iota, h, n * sizeof(int32_t)), "upload");
}

int infer_can_stream(const struct infer *in) { return in->k->attention_forward_rows != NULL && !in->sl; }

int infer_open_stream(struct infer *in, int B, int S, int K, int tmax)
{
    if (B < 1 || S < 1 || K < 1 || tmax < 1)
        return nmt_seterr("stream: empty shape (B=%d S=%d K=%d T=%d)", B, S, K, tmax);
    if ((size_t)B * (size_t)K * (size_t)tmax > INT32_MAX || (size_t)B * (size_t)S > INT32_MAX)
        return nmt_seterr("stream: %d sentences of %d rows, %d steps and %d source tokens are too many to index", B, K,
                          tmax, S);
    if (!in->k->attention_forward_rows)
        return nmt_seterr("backend %s cannot decode a stream: it has no attention_forward_rows", in->k->name);
    if (in->keep_att || in->sl)
        return nmt_seterr("a stream keeps no attention and has no shortlist");
    if (in->run.k->set_precision &&
        nn_bk(&in->run, in->run.k->set_precision(in->run.ctx, NMT_DTYPE_F32), "set_precision") < 0)
        return -1;
    in->stream = 1;
    set_shape(in, B, S, K, tmax);
    in->K = 1; /* unused in a stream: sent_rows */
    in->ns = in->R = 0;
    in->time = 0;
    if (arena_prepare(in) < 0 || stream_arrays(in) < 0) {
        in->stream = 0;
        return -1;
    }
    return 0;
}

/* Lays the M sentences of an admitted chunk (SRC, LEN; padded to SC) out on the host in IDS and POS,
 * and the rows of their keys in the cross-key slots they take (live sentences NS0 on) in
 * host_ckv_rows. 0, or -1 with the error set. */
static int admit_layout(struct infer *in, int ns0, int m, int sc, const uint32_t *const *src, const int *len,
                        int32_t *ids, int32_t *pos)
{
    size_t S = (size_t)in->S;
    for (int a = 0; a < m; a++) {
        int32_t slot = in->slot_free[--in->nslot_free];
        for (int j = 0; j < sc; j++) {
            size_t r = (size_t)a * (size_t)sc + (size_t)j;
            if (j < len[a] && src[a][j] >= (uint32_t)in->c.vocab)
                return nmt_seterr("source id %u outside the vocabulary of %d", src[a][j], in->c.vocab);
            ids[r] = j < len[a] ? (int32_t)src[a][j] : j == len[a] ? NMT_EOS : 0;
            pos[r] = j <= len[a] ? j : -1;
        }
        for (size_t j = 0; j < S; j++)
            in->host_ckv_rows[(size_t)(ns0 + a) * S + j] = (int32_t)((size_t)slot * S + (j <= (size_t)len[a] ? j : (size_t)len[a]));
    }
    return 0;
}

/* Encodes the M admitted sentences SRC, LEN (live sentences NS0 on, padded to SC) and copies each
 * decoder layer's cross keys and values of each into its slot. 0 or -1. */
static int admit_chunk(struct infer *in, int ns0, int m, int sc, const uint32_t *const *src, const int *len)
{
    const struct nmt_backend *k = in->k;
    size_t D2 = 2 * (size_t)in->c.d_model, rows = (size_t)m * (size_t)sc, S = (size_t)in->S;
    int32_t *ids = in->host_ints, *pos = ids + rows;
    if (admit_layout(in, ns0, m, sc, src, len, ids, pos) < 0)
        return -1;
    const float *mem;
    if (nn_bk(&in->run, k->upload(in->ctx, in->src_ids, ids, rows * sizeof(int32_t)), "upload") < 0 ||
        nn_bk(&in->run, k->upload(in->ctx, in->src_pos, pos, rows * sizeof(int32_t)), "upload") < 0 ||
        nn_encoder(&in->run, in->w, &in->enc, in->src_ids, in->src_pos, in->src_len + ns0, m, sc, &mem) < 0)
        return -1;
    for (int l = 0; l < in->c.dec_layers; l++) {
        if (infer_linear(&in->run, in->eq, mem, in->w->dec[l].ckv_w, in->w->dec[l].ckv_b, 0, (int)rows, (int)D2,
                         in->c.d_model) < 0)
            return -1;
        for (int a = 0; a < m; a++) {
            size_t slot0 = (size_t)in->host_ckv_rows[(size_t)(ns0 + a) * S]; /* the slot's row 0 */
            if (nn_bk(&in->run, k->gather_rows(in->ctx, in->ckv[l] + slot0 * D2, in->eq + (size_t)a * (size_t)sc * D2,
                                               in->iota, len[a] + 1, (int64_t)D2), "gather_rows") < 0)
                return -1;
        }
    }
    return 0;
}

int infer_admit(struct infer *in, int n, const uint32_t *const *src, const int *len)
{
    const struct nmt_backend *k = in->k;
    int ns0 = in->ns, S = in->S;
    if (!in->stream)
        return nmt_seterr("no stream to admit sentences to (infer_open_stream)");
    if (n < 0 || ns0 + n > in->B)
        return nmt_seterr("stream: %d sentences admitted to %d live, %d at most", n, ns0, in->B);
    for (int b = 0; b < n; b++) {
        if (len[b] < 0 || len[b] + 1 > in->c.max_len)
            return nmt_seterr("sentence of %d tokens exceeds the model's maximum length %d", len[b] + 1, in->c.max_len);
        if (len[b] + 1 > S)
            return nmt_seterr("stream: sentence of %d tokens, %d at most prepared", len[b] + 1, S);
        in->host_len[ns0 + b] = len[b] + 1;
        in->sent_rows[ns0 + b] = 1;
        in->row_step[in->R + b] = 0;
    }
    if (n == 0)
        return 0;
    if (nn_bk(&in->run, k->upload(in->ctx, in->src_len + ns0, in->host_len + ns0, (size_t)n * sizeof(int32_t)),
              "upload") < 0)
        return -1;
    int cap = enc_sentences(in, in->B, S) * S;
    for (int b = 0; b < n;) { /* chunk by chunk, as infer_encode's */
        int sc, m = enc_chunk(in->host_len + ns0, b, n, cap, &sc);
        if (admit_chunk(in, ns0 + b, m, sc, src + b, len + b) < 0)
            return -1;
        b += m;
    }
    in->ns += n; /* their rows read the cross keys through xrows (stream_xrows) */
    in->R += n;
    in->x_stale = 1;
    return 0;
}

const struct model_config *infer_config(const struct infer *in) { return &in->c; }
int infer_rows(const struct infer *in) { return in->R; }
int infer_time(const struct infer *in) { return in->time; }
int infer_src_len(const struct infer *in) { return in->S; }

/* ---------------------------------------------------------------------------------------------
 * decoder */

/* In a stream: each live row's keys and values of this step, in kv_stage, go to its row of CACHE. 0 or -1. */
static int kv_scatter(struct infer *in, float *cache)
{
    size_t T = (size_t)in->tmax, D2 = 2 * (size_t)in->c.d_model;
    for (int r = 0; r < in->R; r++) {
        size_t at = (size_t)in->host_rows[(size_t)r * T + (size_t)in->row_step[r]];
        if (nn_bk(&in->run, in->k->gather_rows(in->ctx, cache + at * D2, in->kv_stage, in->iota + r, 1, (int64_t)D2),
                  "gather_rows") < 0)
            return -1;
    }
    return 0;
}

/* Self-attention of decoder layer D at step T: the step's keys and values (the last 2D rows of the
 * qkv weight) go into row block T of CACHE (steps, R, 2D), the queries attend to steps 0..T of it;
 * S->q and S->att are the working buffers, OUT (R, D) receives the projection. 0 or -1. */
static int self_attention_step(struct infer *in, struct nn_sub *s, float *out, const float *sin,
                               const struct dec_layer_weights *d, float *cache, int t)
{
    struct nn_exec *e = &in->run;
    int D = in->c.d_model, R = in->R, rows = rows_mode(in);
    size_t slot = (size_t)R * 2 * (size_t)D; /* floats per time step of a cache */
    /* with kv_rows, this step's rows go where kv_rows_step says; in a stream through kv_stage */
    float *at = in->stream ? in->kv_stage : cache + (rows ? (size_t)(in->kv_used - R) * 2 * (size_t)D : (size_t)t * slot);
    if (e->linear(e, s->q, sin, d->sqkv_w, d->sqkv_b, 0, R, D, D) < 0 ||
        e->linear(e, at, sin, d->sqkv_w + (size_t)D * (size_t)D, d->sqkv_b + D, 0, R, 2 * D, D) < 0 ||
        (in->stream && kv_scatter(in, cache) < 0))
        return -1;
    /* in a stream row r attends to its own steps, klen[r] of them */
    struct nmt_attn_args a = nn_attn_args(e, R, 1, in->stream ? in->kv_tk : t + 1, D, (int64_t)slot,
                                          in->stream ? in->klen : NULL, 0);
    a.k_bs = a.v_bs = 2 * D; /* row r's keys and values at step j: cache + j * slot + r * 2D */
    if (rows)                /* or at cache + kv_rows[r][j] * 2D */
        a.k_ld = a.v_ld = 0;
    int rc = rows ? in->k->attention_forward_rows(in->ctx, s->att, s->q, cache, cache + D, &a, in->kv_rows, in->tmax)
                  : in->k->attention_forward(in->ctx, s->att, s->P, s->q, cache, cache + D, &a);
    if (nn_bk(e, rc, rows ? "attention_forward_rows" : "attention_forward") < 0)
        return -1;
    return e->linear(e, out, s->att, d->so_w, d->so_b, 0, R, D, D);
}

/* The probabilities of the encoder-decoder attention just computed (its queries left in in->q, its
 * keys and values KV) into in->catt: computed again apart (its output into in->att, already
 * projected), so that the step's results are those of attention without them, bit for bit. 0 or -1. */
static int keep_attention(struct infer *in, const float *kv)
{
    int D = in->c.d_model;
    if (in->ckv_by_rows)
        return nmt_seterr("attention kept from a batch encoded without it (infer_keep_attention comes before infer_encode)");
    struct nmt_attn_args a = nn_attn_args(&in->run, in->ns, in->K, in->S, D, 2 * D, in->src_len, 0);
    return nn_bk(&in->run, in->k->attention_forward(in->ctx, in->att, in->catt, in->q, kv, kv + D, &a),
                 "attention_forward");
}

/* The decoder layers at step T on the embedded rows in->x; in->x receives the last layer's stream.
 * In encoder-decoder attention the K rows of a sentence are its K queries. 0 or -1. */
static int decoder_layers(struct infer *in, int t)
{
    struct nn_exec *e = &in->run;
    int R = in->R;
    struct nn_sub s = {.t = in->t, .x = in->x, .q = in->q, .att = in->att, .h = in->h};
    for (int l = 0; l < in->c.dec_layers; l++) {
        const struct dec_layer_weights *d = &in->w->dec[l];
        const float *sin = nn_res_begin(e, &s, in->x, d->ln1_g, d->ln1_b, R);
        if (!sin || self_attention_step(in, &s, in->sub, sin, d, in->kv[l], t) < 0 ||
            nn_res_end(e, &s, in->x, in->sub, d->ln1_g, d->ln1_b, R) < 0)
            return -1;
        sin = nn_res_begin(e, &s, in->x, d->ln2_g, d->ln2_b, R);
        /* in a stream each row reads its sentence's keys through xrows */
        int cb = in->stream ? R : in->ns, cq = in->stream ? 1 : in->K;
        const int32_t *crows = in->stream ? in->xrows : in->ckv_by_rows ? in->ckv_rows : NULL;
        if (!sin || nn_cross_attention(e, &s, in->sub, sin, in->ckv[l], d, cb, cq, in->S, in->stream ? in->xlen : in->src_len,
                                       crows) < 0 ||
            (in->keep_att && l == in->c.dec_layers - 1 && keep_attention(in, in->ckv[l]) < 0) ||
            nn_res_end(e, &s, in->x, in->sub, d->ln2_g, d->ln2_b, R) < 0)
            return -1;
        sin = nn_res_begin(e, &s, in->x, d->ln3_g, d->ln3_b, R);
        if (!sin || nn_ffn(e, &s, in->sub, NULL, sin, d->w1, d->b1, d->w2, d->b2, R) < 0 ||
            nn_res_end(e, &s, in->x, in->sub, d->ln3_g, d->ln3_b, R) < 0)
            return -1;
    }
    return 0;
}

/* The outputs of a step from in->logits: TOPK best log-probabilities into VALS/IDX, log p(TGT)
 * into LP (as infer_step's). 0 or -1. */
static int step_outputs(struct infer *in, int topk, float *vals, int32_t *idx, const int32_t *tgt, float *lp)
{
    const struct nmt_backend *k = in->k;
    struct nn_exec *e = &in->run;
    int R = in->R, V = in->c.vocab;
    if (in->sl && tgt)
        return nmt_seterr("forced decoding scores over the whole vocabulary: not with a shortlist");
    if (topk > 0 && in->sl) {
        if (short_topk(in, topk, vals, idx) < 0)
            return -1;
    } else if (topk > 0) {
        if (topk_call(in, in->vals, in->idx, in->logits, R, V, topk) < 0 ||
            nn_bk(e, k->download(in->ctx, vals, in->vals, (size_t)R * (size_t)topk * sizeof(float)), "download") < 0 ||
            nn_bk(e, k->download(in->ctx, idx, in->idx, (size_t)R * (size_t)topk * sizeof(int32_t)), "download") < 0)
            return -1;
    }
    if (tgt) {
        struct nmt_xent_result xr;
        for (int r = 0; r < R; r++)
            if (tgt[r] < 0 || tgt[r] >= V)
                return nmt_seterr("target id %d outside the vocabulary of %d", tgt[r], V);
        if (nn_bk(e, k->upload(in->ctx, in->tgt, tgt, (size_t)R * sizeof(int32_t)), "upload") < 0 ||
            nn_bk(e, k->cross_entropy(in->ctx, &xr, NULL, in->lp, in->logits, in->tgt, R, V, 0.0f, NMT_PAD, 1.0f),
                  "cross_entropy") < 0 ||
            nn_bk(e, k->download(in->ctx, lp, in->lp, (size_t)R * sizeof(float)), "download") < 0)
            return -1;
        for (int r = 0; r < R; r++)
            lp[r] = -lp[r];
    }
    return 0;
}

/* The output layer from Y (R, D) and the TOPK best log-probabilities of each row into VALS/IDX
 * (host, R x TOPK), as step_outputs', on logits_rows rows at a time in in->logits_few: the same
 * values, the logits not kept. 0 or -1. */
static int topk_by_rows(struct infer *in, const float *y, int topk, float *vals, int32_t *idx)
{
    struct nn_exec *e = &in->run;
    const struct nmt_backend *k = in->k;
    int R = in->R, V = in->c.vocab, D = in->c.d_model, n = logits_rows(V);
    for (int r = 0; r < R; r += n) {
        int m = R - r < n ? R - r : n;
        size_t o = (size_t)r * (size_t)topk;
        if (e->linear(e, in->logits_few, y + (size_t)r * (size_t)D, in->w->out_w, in->w->out_b, 0, m, V, D) < 0 ||
            topk_call(in, in->vals + o, in->idx + o, in->logits_few, m, V, topk) < 0)
            return -1;
    }
    if (nn_bk(e, k->download(in->ctx, vals, in->vals, (size_t)R * (size_t)topk * sizeof(float)), "download") < 0 ||
        nn_bk(e, k->download(in->ctx, idx, in->idx, (size_t)R * (size_t)topk * sizeof(int32_t)), "download") < 0)
        return -1;
    return 0;
}

/* Grows in->catt to the live rows' attention probabilities (live sentences, H, K, S). 0 or -1. */
static int att_room(struct infer *in)
{
    size_t n = (size_t)in->R * (size_t)in->c.heads * (size_t)in->S;
    if (n <= in->catt_cap)
        return 0;
    in->k->free(in->ctx, in->catt);
    in->catt_cap = 0;
    if (!(in->catt = in->k->alloc(in->ctx, n * sizeof(float))))
        return nmt_seterr("backend %s: alloc: %s", in->k->name, in->k->last_error(in->ctx));
    in->catt_cap = n;
    return 0;
}

void infer_keep_attention(struct infer *in, int on) { in->keep_att = on != 0; }
void infer_topk_raw(struct infer *in, int raw) { in->topk_raw = raw != 0; }
void infer_keep_logits(struct infer *in, int on) { in->keep_logits = on != 0; }

int infer_attention(struct infer *in, float *att)
{
    int H = in->c.heads, K = in->K, S = in->S, R = in->R;
    if (!in->keep_att || in->time == 0 || R == 0)
        return nmt_seterr("no decoder step with its attention kept");
    size_t n = (size_t)R * (size_t)H * (size_t)S;
    if (n > in->catt_hcap) {
        float *h = realloc(in->catt_host, n * sizeof *h);
        if (!h)
            return nmt_seterr("out of memory");
        in->catt_host = h;
        in->catt_hcap = n;
    }
    if (nn_bk(&in->run, in->k->download(in->ctx, in->catt_host, in->catt, n * sizeof(float)), "download") < 0)
        return -1;
    for (int r = 0; r < R; r++) { /* row r = s * K + j is query j of live sentence s */
        int s = r / K, j = r % K;
        float *o = att + (size_t)r * (size_t)S;
        for (int k = 0; k < S; k++) {
            double sum = 0;
            for (int h = 0; h < H; h++)
                sum += (double)in->catt_host[(((size_t)s * (size_t)H + (size_t)h) * (size_t)K + (size_t)j) * (size_t)S +
                                             (size_t)k];
            o[k] = (float)(sum / H);
        }
    }
    return 0;
}

uint64_t infer_rows_stepped(const struct infer *in) { return in->rows_stepped; }

/* In a stream: each live row's cross keys (its sentence's) and their count to the device, when
 * sentences came or went since. 0 or -1. */
static int stream_xrows(struct infer *in)
{
    if (!in->x_stale)
        return 0;
    size_t S = (size_t)in->S;
    for (int s = 0, r = 0; s < in->ns; s++)
        for (int j = 0; j < in->sent_rows[s]; j++, r++) {
            memcpy(in->host_xrows + (size_t)r * S, in->host_ckv_rows + (size_t)s * S, S * sizeof(int32_t));
            in->host_xlen[r] = in->host_len[s];
        }
    size_t R = (size_t)in->R;
    if (nn_bk(&in->run, in->k->upload(in->ctx, in->xrows, in->host_xrows, R * S * sizeof(int32_t)), "upload") < 0 ||
        nn_bk(&in->run, in->k->upload(in->ctx, in->xlen, in->host_xlen, R * sizeof(int32_t)), "upload") < 0)
        return -1;
    in->x_stale = 0;
    return 0;
}

/* In a stream: row r's keys and values of its step go to a free row of the caches (from kv_stage:
 * kv_scatter), the rows of every live row's steps so far and its key count (staged in KL, host, R)
 * to the device. The rows last freed are taken first, so the caches' pages in use stay those of
 * the most keys live at once. 0 or -1. */
static int kv_row_step(struct infer *in, int32_t *kl)
{
    size_t T = (size_t)in->tmax;
    int R = in->R;
    in->kv_tk = 0;
    if (in->nkv_free < R) /* a live row has at most tmax steps: never */
        return nmt_seterr("stream: %d rows of the caches free, %d wanted", in->nkv_free, R);
    for (int r = 0; r < R; r++) {
        int j = in->row_step[r];
        int32_t row = in->kv_free[--in->nkv_free];
        in->host_rows[(size_t)r * T + (size_t)j] = row;
        in->kv_ref[row] = 1;
        kl[r] = j + 1;
        in->kv_tk = j + 1 > in->kv_tk ? j + 1 : in->kv_tk;
    }
    size_t n = (size_t)(R - 1) * T + (size_t)in->row_step[R - 1] + 1;
    return nn_bk(&in->run, in->k->upload(in->ctx, in->kv_rows, in->host_rows, n * sizeof(int32_t)), "upload") < 0 ||
                   nn_bk(&in->run, in->k->upload(in->ctx, in->klen, kl, (size_t)R * sizeof(int32_t)), "upload") < 0
               ? -1
               : 0;
}

/* With kv_rows: step T's keys and values of row r go to cache row kv_used + r, after the rows
 * written so far (in a stream: kv_row_step, staging in KL), and the rows of every live row's
 * steps so far go to the device. 0 or -1. */
static int kv_rows_step(struct infer *in, int t, int32_t *kl)
{
    if (!rows_mode(in) || in->R == 0)
        return 0;
    if (in->stream)
        return kv_row_step(in, kl);
    size_t T = (size_t)in->tmax;
    if (t == 0)
        in->kv_used = 0;
    for (int r = 0; r < in->R; r++)
        in->host_rows[(size_t)r * T + (size_t)t] = in->kv_used + r;
    in->kv_used += in->R;
    return nn_bk(&in->run, in->k->upload(in->ctx, in->kv_rows, in->host_rows, ((size_t)(in->R - 1) * T + (size_t)t + 1) *
                                                                                 sizeof(int32_t)),
                 "upload");
}

int infer_step(struct infer *in, const int32_t *tok, int topk, float *vals, int32_t *idx, const int32_t *tgt,
               float *lp)
{
    const struct model_config *c = &in->c;
    struct nn_exec *e = &in->run;
    int D = c->d_model, V = c->vocab, R = in->R, t = in->time;
    if (t >= in->tmax && !in->stream)
        return nmt_seterr("decoder step %d past the prepared length %d", t, in->tmax);
    in->rows_stepped += (uint64_t)R;
    if (topk > in->topk_cap)
        return nmt_seterr("top-%d asked, at most %d prepared", topk, in->topk_cap);
    if (in->keep_att && att_room(in) < 0)
        return -1;
    if (host_ints(in, 3 * (size_t)R) < 0)
        return -1;
    int32_t *hp = in->host_ints, *ht = hp + R;
    for (int r = 0; r < R; r++) {
        int rt = in->stream ? in->row_step[r] : t; /* the row's own step */
        if (tok[r] < 0 || tok[r] >= V)
            return nmt_seterr("token id %d outside the vocabulary of %d", tok[r], V);
        if (rt >= in->tmax)
            return nmt_seterr("decoder step %d past the prepared length %d", rt, in->tmax);
        hp[r] = rt;
        ht[r] = rt == 0 && c->start_zero ? -1 : tok[r]; /* the zero start: no embedding */
    }
    if ((in->stream && stream_xrows(in) < 0) || kv_rows_step(in, t, ht + R) < 0 ||
        nn_bk(e, in->k->upload(in->ctx, in->tok, ht, (size_t)R * sizeof(int32_t)), "upload") < 0 ||
        nn_bk(e, in->k->upload(in->ctx, in->pos, hp, (size_t)R * sizeof(int32_t)), "upload") < 0 ||
        nn_embed(e, in->x, in->tok, in->pos, in->w->dec_emb, R, NULL) < 0 || decoder_layers(in, t) < 0)
        return -1;
    const float *y = in->x;
    if (c->pre_norm) {
        if (nn_layernorm(e, in->t, NULL, NULL, in->x, in->w->dec_ln_g, in->w->dec_ln_b, R) < 0)
            return -1;
        y = in->t;
    }
    /* rows are independent (invariant products, a softmax a row): the top-k a few rows at a time */
    int by_rows = topk > 0 && !tgt && !in->sl && !in->keep_logits && in->invariant;
    in->logits_kept = 0;
    if (by_rows) {
        if (topk_by_rows(in, y, topk, vals, idx) < 0)
            return -1;
    } else if ((in->sl ? short_project(in, y) : e->linear(e, in->logits, y, in->w->out_w, in->w->out_b, 0, R, V, D)) < 0 ||
               step_outputs(in, topk, vals, idx, tgt, lp) < 0) {
        return -1;
    }
    in->logits_kept = !by_rows;
    in->time = t + 1;
    for (int r = 0; in->stream && r < R; r++)
        in->row_step[r]++;
    return 0;
}

int infer_logits(struct infer *in, float *logits)
{
    if (in->time == 0 || in->R == 0)
        return nmt_seterr("no decoder step to read the logits of");
    if (!in->logits_kept)
        return nmt_seterr("the logits of the last step were not kept (infer_keep_logits)");
    if (in->sl) {
        if (short_logits_host(in) < 0)
            return -1;
        size_t V = (size_t)in->c.vocab;
        for (int r = 0; r < in->R; r++) {
            int s = r / in->K, n = short_n(in, s);
            const int32_t *c = in->cand + in->coff[in->live[s]];
            const float *l = in->host_logits + in->loff[s] + (size_t)(r % in->K) * (size_t)n;
            float *o = logits + (size_t)r * V;
            for (size_t v = 0; v < V; v++)
                o[v] = -INFINITY;
            for (int j = 0; j < n; j++)
                o[c[j]] = l[j];
        }
        return 0;
    }
    return nn_bk(&in->run,
                 in->k->download(in->ctx, logits, in->logits, (size_t)in->R * (size_t)in->c.vocab * sizeof(float)),
                 "download");
}

int infer_logits_at(struct infer *in, int n, const int32_t *ids, int32_t *flat, float *out)
{
    const struct nmt_backend *k = in->k;
    int R = in->R, V = in->c.vocab;
    size_t N = (size_t)R * (size_t)n;
    if (in->time == 0 || R == 0)
        return nmt_seterr("no decoder step to read the logits of");
    if (!in->logits_kept)
        return nmt_seterr("the logits of the last step were not kept (infer_keep_logits)");
    if (N == 0)
        return 0;
    if (in->sl) {
        if (short_logits_host(in) < 0)
            return -1;
        for (int r = 0; r < R; r++)
            for (int j = 0; j < n; j++) {
                int32_t id = ids[(size_t)r * (size_t)n + (size_t)j];
                if (id < 0 || id >= V)
                    return nmt_seterr("token id %d outside the vocabulary of %d", id, V);
                out[(size_t)r * (size_t)n + (size_t)j] = short_logit_at(in, r, id);
            }
        return 0;
    }
    if ((size_t)R * (size_t)V > (size_t)INT32_MAX)
        return nmt_seterr("%d rows of %d logits are too many to index", R, V);
    if (N > in->at_cap) {
        k->free(in->ctx, in->at_idx);
        k->free(in->ctx, in->at_val);
        in->at_cap = 0;
        in->at_idx = k->alloc(in->ctx, N * sizeof(int32_t));
        in->at_val = in->at_idx ? k->alloc(in->ctx, N * sizeof(float)) : NULL;
        if (!in->at_idx || !in->at_val)
            return nmt_seterr("backend %s: alloc: %s", k->name, k->last_error(in->ctx));
        in->at_cap = N;
    }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < n; j++) {
            int32_t id = ids[(size_t)r * (size_t)n + (size_t)j];
            if (id < 0 || id >= V)
                return nmt_seterr("token id %d outside the vocabulary of %d", id, V);
            flat[(size_t)r * (size_t)n + (size_t)j] = r * V + id;
        }
    if (nn_bk(&in->run, k->upload(in->ctx, in->at_idx, flat, N * sizeof(int32_t)), "upload") < 0 ||
        nn_bk(&in->run, k->gather_rows(in->ctx, in->at_val, in->logits, in->at_idx, (int)N, 1), "gather_rows") < 0 ||
        nn_bk(&in->run, k->download(in->ctx, out, in->at_val, N * sizeof(float)), "download") < 0)
        return -1;
    return 0;
}

/* Checks infer_reorder_rows' arguments: sentence s of the NS kept (KEEP, increasing) has NROWS[s]
 * rows, each continuing a row of its own sentence (PARENT); sets in->sent_off to where the live
 * sentences' rows start now. Returns the kept rows, or -1 with the error set. */
static int stream_check(struct infer *in, int ns, const int *keep, const int *nrows, const int *parent)
{
    if (!in->stream)
        return nmt_seterr("reorder: rows of their own number a sentence in a stream only");
    if (ns < 0 || ns > in->ns)
        return nmt_seterr("reorder: %d sentences kept of %d", ns, in->ns);
    in->sent_off[0] = 0;
    for (int s = 0; s < in->ns; s++)
        in->sent_off[s + 1] = in->sent_off[s] + in->sent_rows[s];
    int Rn = 0;
    for (int s = 0; s < ns; s++) {
        if (keep[s] < 0 || keep[s] >= in->ns || (s && keep[s] <= keep[s - 1]))
            return nmt_seterr("reorder: bad sentence index %d", keep[s]);
        if (nrows[s] < 1 || nrows[s] > in->Kcap)
            return nmt_seterr("reorder: %d rows a sentence, 1 to %d prepared", nrows[s], in->Kcap);
        for (int j = 0; j < nrows[s]; j++, Rn++)
            if (parent[Rn] < in->sent_off[keep[s]] || parent[Rn] >= in->sent_off[keep[s] + 1])
                return nmt_seterr("reorder: row %d continues row %d, not one of its sentence's", Rn, parent[Rn]);
    }
    return Rn;
}

int infer_reorder_rows(struct infer *in, int ns, const int *keep, const int *nrows, const int *parent)
{
    size_t S = (size_t)in->S, T = (size_t)in->tmax;
    int Rn = stream_check(in, ns, keep, nrows, parent);
    if (Rn < 0)
        return -1;
    memset(in->sent_kept, 0, (size_t)in->ns);
    for (int s = 0; s < ns; s++)
        in->sent_kept[keep[s]] = 1;
    for (int s = 0; s < in->ns; s++)
        if (!in->sent_kept[s])
            in->slot_free[in->nslot_free++] = (int32_t)((size_t)in->host_ckv_rows[(size_t)s * S] / S);
    /* each new row reads its parent's rows of the caches (counted); the old rows' counts go */
    for (int i = 0; i < Rn; i++) {
        const int32_t *from = in->host_rows + (size_t)parent[i] * T;
        int n = in->row_step_new[i] = in->row_step[parent[i]];
        memcpy(in->host_rows_new + (size_t)i * T, from, (size_t)n * sizeof *from);
        for (int j = 0; j < n; j++)
            in->kv_ref[from[j]]++;
    }
    for (int r = 0; r < in->R; r++)
        for (int j = in->row_step[r] - 1; j >= 0; j--) {
            int32_t row = in->host_rows[(size_t)r * T + (size_t)j];
            if (--in->kv_ref[row] == 0)
                in->kv_free[in->nkv_free++] = row;
        }
    int32_t *tmp = in->host_rows;
    in->host_rows = in->host_rows_new;
    in->host_rows_new = tmp;
    memcpy(in->row_step, in->row_step_new, (size_t)Rn * sizeof *in->row_step);
    for (int s = 0; s < ns; s++) { /* keep increases: in place */
        memmove(in->host_ckv_rows + (size_t)s * S, in->host_ckv_rows + (size_t)keep[s] * S, S * sizeof(int32_t));
        in->host_len[s] = in->host_len[keep[s]];
        in->sent_rows[s] = nrows[s];
    }
    in->ns = ns;
    in->R = Rn;
    in->x_stale = 1;
    return 0;
}

int infer_reorder(struct infer *in, int ns, int kn, const int *keep, const int *parent)
{
    const struct nmt_backend *k = in->k;
    int R = in->R, t = in->time, D = in->c.d_model;
    if (in->stream) { /* KN rows each */
        for (int s = 0; s < ns && s < in->B; s++)
            in->sent_kn[s] = kn;
        return ns > in->B ? nmt_seterr("reorder: %d sentences kept of %d", ns, in->ns)
                          : infer_reorder_rows(in, ns, keep, in->sent_kn, parent);
    }
    if (ns < 0 || ns > in->ns)
        return nmt_seterr("reorder: %d sentences kept of %d", ns, in->ns);
    if (kn < 1 || kn > in->Kcap)
        return nmt_seterr("reorder: %d rows a sentence, 1 to %d prepared", kn, in->Kcap);
    int Rn = ns * kn, same_sent = ns == in->ns, same_rows = Rn == R;
    for (int s = 0; s < ns; s++) {
        if (keep[s] < 0 || keep[s] >= in->ns || (s && keep[s] <= keep[s - 1]))
            return nmt_seterr("reorder: bad sentence index %d", keep[s]);
        same_sent &= keep[s] == s;
    }
    for (int i = 0; i < Rn; i++) {
        if (parent[i] < 0 || parent[i] >= R)
            return nmt_seterr("reorder: bad parent row %d", parent[i]);
        same_rows &= parent[i] == i;
    }
    in->K = kn;
    if (ns == 0) {
        in->ns = in->R = 0;
        return 0;
    }
    int32_t *h = in->host_ints;
    if (!same_sent) {
        for (int s = 0; s < ns; s++)
            h[s] = keep[s];
        for (int s = 0; in->sl && s < ns; s++) /* keep increases: in place */
            in->live[s] = in->live[keep[s]];
        size_t S = (size_t)in->S;
        if (in->ckv_by_rows) { /* no key moves: the kept sentences' rows (keep increases: in place) */
            for (int s = 0; s < ns; s++)
                memmove(in->host_ckv_rows + (size_t)s * S, in->host_ckv_rows + (size_t)keep[s] * S, S * sizeof(int32_t));
            if (nn_bk(&in->run, k->upload(in->ctx, in->ckv_rows, in->host_ckv_rows, (size_t)ns * S * sizeof(int32_t)),
                      "upload") < 0)
                return -1;
        } else if (nn_bk(&in->run, k->upload(in->ctx, in->idx, h, (size_t)ns * sizeof(int32_t)), "upload") < 0) {
            return -1;
        }
        int64_t row = (int64_t)S * 2 * D;
        for (int l = 0; !in->ckv_by_rows && l < in->c.dec_layers; l++) {
            if (nn_bk(&in->run, k->gather_rows(in->ctx, in->ckv_spare, in->ckv[l], in->idx, ns, row),
                      "gather_rows") < 0)
                return -1;
            float *tmp = in->ckv[l];
            in->ckv[l] = in->ckv_spare;
            in->ckv_spare = tmp;
        }
        for (int s = 0; s < ns; s++)
            h[s] = in->host_len[keep[s]];
        for (int s = 0; s < ns; s++)
            in->host_len[s] = h[s];
        if (nn_bk(&in->run, k->upload(in->ctx, in->src_len, in->host_len, (size_t)ns * sizeof(int32_t)), "upload") < 0)
            return -1;
    }
    if ((same_rows && same_sent) || t == 0) {
        /* nothing moves */
    } else if (rows_mode(in)) {
        /* row i reads its steps where row parent[i] did: no cache row moves */
        size_t T = (size_t)in->tmax;
        for (int i = 0; i < Rn; i++)
            memcpy(in->host_rows_new + (size_t)i * T, in->host_rows + (size_t)parent[i] * T, (size_t)t * sizeof(int32_t));
        int32_t *tmp = in->host_rows;
        in->host_rows = in->host_rows_new;
        in->host_rows_new = tmp;
    } else {
        /* cache row (j, i) of the new layout = row (j, parent[i]) of the old one */
        for (int j = 0; j < t; j++)
            for (int i = 0; i < Rn; i++)
                h[(size_t)j * (size_t)Rn + (size_t)i] = (int32_t)((size_t)j * (size_t)R + (size_t)parent[i]);
        if (nn_bk(&in->run, k->upload(in->ctx, in->idx, h, (size_t)t * (size_t)Rn * sizeof(int32_t)), "upload") < 0)
            return -1;
        for (int l = 0; l < in->c.dec_layers; l++) {
            if (nn_bk(&in->run, k->gather_rows(in->ctx, in->kv_spare, in->kv[l], in->idx, t * Rn, 2 * D),
                      "gather_rows") < 0)
                return -1;
            float *tmp = in->kv[l];
            in->kv[l] = in->kv_spare;
            in->kv_spare = tmp;
        }
    }
    in->ns = ns;
    in->R = Rn;
    return 0;
}

/* infer_load's state over the new model M, read from CKPT (CONSUME: given back as read). When the
 * weights are packed and M is read by no one else (INFER_DISCARD), the packed weights are made
 * from CKPT's bytes (pack_weights), never uploaded whole into M: the model's memory for them is
 * never touched. NULL with the error set. */
static struct infer *load_model(struct backend *be, struct model *m, struct st_file *ckpt, int consume,
                                const struct infer_load_opts *o)
{
    if (!(o->flags & INFER_DISCARD)) {
        if ((consume ? model_load_consume(m, ckpt) : model_load(m, ckpt, 0)) < 0)
            return nmt_seterr("'%s': %s", o->path, nmt_errmsg()), NULL;
        return infer_new(be, m, o->flags, o->precision);
    }
    struct infer *in = infer_alloc(be, m, (o->flags & INFER_INVARIANT) != 0, o->precision);
    if (!in)
        return NULL;
    int direct = packs(in);
    in->sl = o->sl; /* the shortlist reads the output projection: kept in the model (wt_read_elsewhere) */
    size_t nr = 0;
    struct model_range *r = NULL;
    if (direct && (wt_table(in) < 0 || !(r = wt_ranges(in, &nr)))) {
        infer_free(in);
        return NULL;
    }
    int rc = model_load_except(m, ckpt, consume, r, nr);
    free(r);
    if (rc < 0)
        nmt_seterr("'%s': %s", o->path, nmt_errmsg());
    else if (direct && (rc = pack_weights(in, 1, ckpt, consume)) == 0)
        rc = emb_setup(in);
    if (rc < 0) {
        infer_free(in);
        return NULL;
    }
    return in;
}

struct infer *infer_load(struct backend *be, const struct infer *owner, struct st_file **ckpt, int consume,
                         const struct infer_load_opts *o, struct model **m)
{
    struct infer *in = NULL;
    if (owner) {
        in = infer_new_shared(be, owner);
    } else {
        /* with INFER_DISCARD the products' weights are packed from *CKPT: the model holds the rest */
        if (!(*m = model_new(be, o->cfg, o->flags & INFER_DISCARD ? MODEL_SPARSE : 0)))
            return NULL;
        in = load_model(be, *m, *ckpt, consume, o);
        if (consume) {
            st_free(*ckpt);
            *ckpt = NULL;
        }
    }
    if (in && infer_set_shortlist(in, o->sl) < 0) {
        infer_free(in);
        in = NULL;
    }
    return in;
}
