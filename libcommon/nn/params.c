/* params.c: the parameter layout of the Transformer (see params.h). */
#include "nn/params.h"
#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>

int model_weights_alloc(struct model_weights *w, const struct model_config *c)
{
    w->enc = nmt_calloc((size_t)c->enc_layers, sizeof *w->enc);
    w->dec = w->enc ? nmt_calloc((size_t)c->dec_layers, sizeof *w->dec) : NULL;
    if (!w->dec) {
        model_weights_free(w);
        return -1;
    }
    return 0;
}

void model_weights_free(struct model_weights *w)
{
    free(w->enc);
    free(w->dec);
    w->enc = NULL;
    w->dec = NULL;
}

/* Layout walker: hands out consecutive slices of BASE and records the table when it has one. */
struct walk {
    float *base;
    size_t off;
    struct model_param *tab;
    size_t n;
    int layer;              /* the L of "%d" in names */
};

/* Takes the next tensor of shape (R) when C is 0, else (R, C), named FMT with the layer index. */
static float *take(struct walk *L, const char *fmt, int64_t r, int64_t c)
{
    size_t size = (size_t)(r * (c ? c : 1));
    if (L->tab) {
        struct model_param *p = &L->tab[L->n];
        snprintf(p->name, sizeof p->name, fmt, L->layer);
        p->ndim = c ? 2 : 1;
        p->shape[0] = r;
        p->shape[1] = c;
        p->offset = L->off;
        p->size = size;
    }
    L->n++;
    float *out = L->base ? L->base + L->off : NULL;
    L->off += size;
    return out;
}

static void enc_layer(struct walk *L, struct enc_layer_weights *e, int64_t D, int64_t F)
{
    e->qkv_w = take(L, "enc.%d.att.qkv.weight", 3 * D, D);
    e->qkv_b = take(L, "enc.%d.att.qkv.bias", 3 * D, 0);
    e->o_w = take(L, "enc.%d.att.o.weight", D, D);
    e->o_b = take(L, "enc.%d.att.o.bias", D, 0);
    e->w1 = take(L, "enc.%d.ffn.w1.weight", F, D);
    e->b1 = take(L, "enc.%d.ffn.w1.bias", F, 0);
    e->w2 = take(L, "enc.%d.ffn.w2.weight", D, F);
    e->b2 = take(L, "enc.%d.ffn.w2.bias", D, 0);
    e->ln1_g = take(L, "enc.%d.ln1.weight", D, 0);
    e->ln1_b = take(L, "enc.%d.ln1.bias", D, 0);
    e->ln2_g = take(L, "enc.%d.ln2.weight", D, 0);
    e->ln2_b = take(L, "enc.%d.ln2.bias", D, 0);
}

static void dec_layer(struct walk *L, struct dec_layer_weights *d, int64_t D, int64_t F)
{
    d->sqkv_w = take(L, "dec.%d.self_att.qkv.weight", 3 * D, D);
    d->sqkv_b = take(L, "dec.%d.self_att.qkv.bias", 3 * D, 0);
    d->so_w = take(L, "dec.%d.self_att.o.weight", D, D);
    d->so_b = take(L, "dec.%d.self_att.o.bias", D, 0);
    d->cq_w = take(L, "dec.%d.cross_att.q.weight", D, D);
    d->cq_b = take(L, "dec.%d.cross_att.q.bias", D, 0);
    d->ckv_w = take(L, "dec.%d.cross_att.kv.weight", 2 * D, D);
    d->ckv_b = take(L, "dec.%d.cross_att.kv.bias", 2 * D, 0);
    d->co_w = take(L, "dec.%d.cross_att.o.weight", D, D);
    d->co_b = take(L, "dec.%d.cross_att.o.bias", D, 0);
    d->w1 = take(L, "dec.%d.ffn.w1.weight", F, D);
    d->b1 = take(L, "dec.%d.ffn.w1.bias", F, 0);
    d->w2 = take(L, "dec.%d.ffn.w2.weight", D, F);
    d->b2 = take(L, "dec.%d.ffn.w2.bias", D, 0);
    d->ln1_g = take(L, "dec.%d.ln1.weight", D, 0);
    d->ln1_b = take(L, "dec.%d.ln1.bias", D, 0);
    d->ln2_g = take(L, "dec.%d.ln2.weight", D, 0);
    d->ln2_b = take(L, "dec.%d.ln2.bias", D, 0);
    d->ln3_g = take(L, "dec.%d.ln3.weight", D, 0);
    d->ln3_b = take(L, "dec.%d.ln3.bias", D, 0);
}

size_t model_weights_layout(const struct model_config *c, float *base, struct model_param *tab,
                            struct model_weights *w, size_t *nfloats)
{
    int64_t D = c->d_model, F = c->ff, V = c->vocab;
    struct walk L = {base, 0, tab, 0, 0};
    struct model_weights none = {0};
    struct enc_layer_weights enc_none;
    struct dec_layer_weights dec_none;
    if (!w)
        w = &none;
    w->emb = take(&L, "emb.weight", V, D);
    for (L.layer = 0; L.layer < c->enc_layers; L.layer++)
        enc_layer(&L, w->enc ? &w->enc[L.layer] : &enc_none, D, F);
    for (L.layer = 0; L.layer < c->dec_layers; L.layer++)
        dec_layer(&L, w->dec ? &w->dec[L.layer] : &dec_none, D, F);
    if (c->pre_norm) {
        w->enc_ln_g = take(&L, "enc_ln.weight", D, 0);
        w->enc_ln_b = take(&L, "enc_ln.bias", D, 0);
        w->dec_ln_g = take(&L, "dec_ln.weight", D, 0);
        w->dec_ln_b = take(&L, "dec_ln.bias", D, 0);
    }
    w->dec_emb = c->tie != MODEL_TIE_ALL ? take(&L, "dec_emb.weight", V, D) : w->emb;
    w->out_w = c->tie == MODEL_TIE_NONE ? take(&L, "out.weight", V, D) : w->dec_emb;
    w->out_b = c->output_bias ? take(&L, "out.bias", V, 0) : NULL;
    if (nfloats)
        *nfloats = L.off;
    return L.n;
}
