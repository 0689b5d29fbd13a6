/* kernels.h: the slots of the backend table (plugins/backend.h, which states each one's contract)
 * that the cpu plugin computes outside cpu.c: the element-wise, normalisation, loss, optimizer and
 * decoding kernels (kernels.c), attention (attention.c) and the row-invariant product (gemm.c).
 * Each returns 0, or -1 with the context's error set. */
#ifndef NMT_CPU_KERNELS_H
#define NMT_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "cpu.h"

int cpu_bias_add(nmt_bctx *ctx, float *out, const float *bias, int M, int N);
int cpu_bias_grad(nmt_bctx *ctx, float *dbias, const float *dout, int M, int N);
int cpu_embedding_forward(nmt_bctx *ctx, float *out, const int32_t *ids, const int32_t *pos, const float *emb,
                          int N, int D, int V, float scale);
int cpu_embedding_backward(nmt_bctx *ctx, float *demb, const float *dout, const int32_t *ids, const int32_t *pos,
                           int N, int D, int V, float scale);
int cpu_embedding_table_forward(nmt_bctx *ctx, float *out, const int32_t *ids, const int32_t *pos, const float *emb,
                                const float *pe, int N, int D, int V, int P, float scale);
int cpu_embedding_table_backward(nmt_bctx *ctx, float *demb, const float *dout, const int32_t *ids,
                                 const int32_t *pos, int N, int D, int V, float scale);
int cpu_attention_forward(nmt_bctx *ctx, float *out, float *P, const float *q, const float *k, const float *v,
                          const struct nmt_attn_args *a);
int cpu_attention_backward(nmt_bctx *ctx, float *dq, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const float *P, const struct nmt_attn_args *a);
int cpu_layernorm_forward(nmt_bctx *ctx, float *out, float *mean, float *rstd, const float *x, const float *gamma,
                          const float *beta, int N, int D, float eps);
int cpu_layernorm_backward(nmt_bctx *ctx, float *dx, float *dgamma, float *dbeta, const float *dout, const float *x,
                           const float *mean, const float *rstd, const float *gamma, int N, int D);
int cpu_add(nmt_bctx *ctx, float *out, const float *a, const float *b, size_t n);
int cpu_relu_forward(nmt_bctx *ctx, float *out, const float *x, size_t n);
int cpu_relu_backward(nmt_bctx *ctx, float *dx, const float *dout, const float *y, size_t n);
int cpu_swish_forward(nmt_bctx *ctx, float *out, const float *x, size_t n);
int cpu_swish_backward(nmt_bctx *ctx, float *dx, const float *dout, const float *x, size_t n);
int cpu_dropout_forward(nmt_bctx *ctx, float *out, const float *x, size_t n, float p, uint64_t seed, uint64_t offset);
int cpu_dropout_backward(nmt_bctx *ctx, float *dx, const float *dout, size_t n, float p, uint64_t seed,
                         uint64_t offset);
int cpu_cross_entropy(nmt_bctx *ctx, struct nmt_xent_result *res, float *dlogits, float *row_nll, const float *logits,
                      const int32_t *tgt, int N, int V, float eps, int pad_id, float grad_scale);
int cpu_adam_update(nmt_bctx *ctx, float *param, float *m, float *v, const float *grad, size_t n, float lr,
                    float beta1, float beta2, float eps, int64_t t, float grad_scale);
int cpu_sumsq(nmt_bctx *ctx, double *out, const float *x, size_t n);
int cpu_topk_logsoftmax(nmt_bctx *ctx, float *values, int32_t *indices, const float *logits, int N, int V, int K);
int cpu_topk_logits(nmt_bctx *ctx, float *values, int32_t *indices, const float *logits, int N, int V, int K);
int cpu_gather_rows(nmt_bctx *ctx, float *dst, const float *src, const int32_t *idx, int N, int64_t row);
int cpu_gemm_rowinv(nmt_bctx *ctx, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc);

#endif
