/* attention.cu: masked multi-head attention, forward and backward (contract in plugins/backend.h,
 * struct nmt_attn_args), in the flash-attention manner: a block takes WARPS queries (or keys) of
 * one (batch item, head), streams tiles of 32 keys (or queries) through shared memory, and never
 * materialises a score matrix in global memory beyond the P the ABI asks for.
 *
 * Forward without P (inference): one pass with the online softmax (running max and sum, the
 * output rescaled as the max grows). Forward with P (training): the ABI saves the probabilities
 * for backward, so a first pass finds each row's max and sum and a second writes P and the output.
 * Backward uses the saved P: one kernel per query row computes dot_i = sum_j P_ij dP_ij and dQ;
 * one kernel per key computes dK and dV. Each output element is written by one thread, in a fixed
 * order: deterministic. Lane l of a warp owns head columns l, l+32, ... (NPL of them).
 *
 * The ABI 2.2 slots (attention_forward_lse, attention_backward_lse) keep no P at all: the forward
 * is the one-pass online softmax that also writes each row's final max m and sum l; the backward
 * takes dot_i = dO_i . O_i, recomputes P_ij = exp(s_ij - m_i) / l_i tile by tile in both the dQ
 * kernel (a warp per query, key tiles streamed) and the dK/dV kernel (a warp per key, query tiles
 * streamed): no (Tq, Tk) tensor in global memory, no atomics, same kernels otherwise (LSE template
 * argument). */
#include <math.h>
#include <stdio.h>

#include "cuda.h"

#define WARPS 8   /* queries (or keys) per block */
#define TILE 32   /* keys (or queries) per shared-memory tile: one per lane */
#define MAX_DH 256

/* Number of keys visible to query I of batch item B (a prefix), with klen already clamped. */
__device__ __forceinline__ int visible(const struct nmt_attn_args &a, int klen_b, int i)
{
    int n = klen_b;
    if (a.causal) {
        long long c = (long long)i + a.causal_shift + 1;
        if (c < n)
            n = c < 0 ? 0 : (int)c;
    }
    return n;
}

/* klen[b] clamped to [0, Tk]; a bad value is flagged (reported at the next wait). */
__device__ __forceinline__ int key_count(const struct nmt_attn_args &a, int b, struct cu_flag *flag)
{
    if (!a.klen)
        return a.Tk;
    int n = a.klen[b];
    if (n < 0 || n > a.Tk) {
        if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0)
            cu_report(flag, CU_BAD_KLEN, b, n, a.Tk);
        n = n < 0 ? 0 : a.Tk;
    }
    return n;
}

/* Dropout multiplier of element (row R = (b*H + h)*Tq + i, key J): 0 or 1/(1-p); 1 without dropout. */
__device__ __forceinline__ float drop_mult(const struct nmt_attn_args &a, long long r, int j)
{
    if (a.dropout <= 0)
        return 1.0f;
    uint64_t ctr = a.offset + (uint64_t)r * (uint64_t)a.Tk + (uint64_t)j;
    return cu_rng_uniform(a.seed, ctr) >= a.dropout ? 1.0f / (1.0f - a.dropout) : 0.0f;
}

/* Loads rows [t0, t0+TILE) of a strided (rows, H*dh) tensor's head H into DST (TILE, dh+1); rows
 * at or past NROWS read as 0. Called by the whole block. */
__device__ __forceinline__ void load_tile(float *dst, const float *base, int64_t ld, int t0, int nrows, int dh)
{
    for (int e = threadIdx.x; e < TILE * dh; e += blockDim.x) {
        int r = e / dh, d = e % dh;
        dst[r * (dh + 1) + d] = t0 + r < nrows ? base[(int64_t)(t0 + r) * ld + d] : 0.0f;
    }
}

/* Dot product of a dh-vector in shared memory (broadcast) with row R of a tile. */
__device__ __forceinline__ float dot_row(const float *vec, const float *tile, int r, int dh)
{
    const float *t = tile + r * (dh + 1);
    float s = 0;
    for (int d = 0; d < dh; d++)
        s += vec[d] * t[d];
    return s;
}

/* Largest visible-key count over the block's queries (whole block). */
__device__ __forceinline__ int block_max_int(int v, int *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    int m = 0;
    for (int k = 0; k < WARPS; k++)
        m = max(m, sh[k]);
    __syncthreads();
    return m;
}

/* grid (ceil(Tq/WARPS), H, B), block 32*WARPS, shared: K tile, V tile, WARPS query rows. */
template <int NPL, bool WRITE_P>
__global__ void k_attn_fwd(float *out, float *P, float *lse, const float *q, const float *k, const float *v,
                           struct nmt_attn_args a, struct cu_flag *flag)
{
    extern __shared__ float smem[];
    __shared__ int shi[WARPS];
    const int dh = a.dh, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.z, h = blockIdx.y, i = blockIdx.x * WARPS + w;
    float *ks = smem, *vs = ks + TILE * (dh + 1), *qs = vs + TILE * (dh + 1) + w * dh;
    const int kl = key_count(a, b, flag);
    const int n = i < a.Tq ? visible(a, kl, i) : 0;
    const long long r = ((long long)b * a.H + h) * a.Tq + i;
    const float *kb = k + b * a.k_bs + h * dh, *vb = v + b * a.v_bs + h * dh;
    if (i < a.Tq)
        for (int d = lane; d < dh; d += 32)
            qs[d] = q[b * a.q_bs + (int64_t)i * a.q_ld + h * dh + d];
    const int nmax = block_max_int(n, shi); /* its barrier also publishes qs */
    float o[NPL], m = -INFINITY, l = 0;
    for (int c = 0; c < NPL; c++)
        o[c] = 0;

    if (WRITE_P) { /* pass 1: row max and sum */
        for (int t0 = 0; t0 < nmax; t0 += TILE) {
            load_tile(ks, kb, a.k_ld, t0, a.Tk, dh);
            __syncthreads();
            int j = t0 + lane;
            float s = j < n ? dot_row(qs, ks, lane, dh) * a.scale : -INFINITY;
            float mn = fmaxf(m, cu_warp_max(s));
            if (mn > -INFINITY) {
                l = l * expf(m - mn) + cu_warp_sum(j < n ? expf(s - mn) : 0.0f);
                m = mn;
            }
            __syncthreads();
        }
    }
    const float inv = l > 0 ? 1.0f / l : 0.0f;
    for (int t0 = 0; t0 < nmax; t0 += TILE) {
        load_tile(ks, kb, a.k_ld, t0, a.Tk, dh);
        load_tile(vs, vb, a.v_ld, t0, a.Tk, dh);
        __syncthreads();
        int j = t0 + lane;
        float s = j < n ? dot_row(qs, ks, lane, dh) * a.scale : -INFINITY, e;
        if (WRITE_P) {
            float p = j < n ? expf(s - m) * inv : 0.0f;
            if (i < a.Tq && j < a.Tk)
                P[r * a.Tk + j] = p;
            e = p;
        } else { /* online softmax: rescale what was summed under the old max */
            float mn = fmaxf(m, cu_warp_max(s));
            float corr = mn > -INFINITY && m > -INFINITY ? expf(m - mn) : (mn > -INFINITY ? 0.0f : 1.0f);
            e = j < n ? expf(s - mn) : 0.0f;
            l = l * corr + cu_warp_sum(e);
            for (int c = 0; c < NPL; c++)
                o[c] *= corr;
            m = mn;
        }
        if (j < n)
            e *= drop_mult(a, r, j);
        for (int jj = 0; jj < TILE; jj++) {
            float pj = __shfl_sync(0xffffffffu, e, jj);
            const float *vr = vs + jj * (dh + 1);
            for (int c = 0; c < NPL; c++) {
                int d = lane + 32 * c;
                if (d < dh)
                    o[c] += pj * vr[d];
            }
        }
        __syncthreads();
    }
    if (i >= a.Tq)
        return;
    if (!WRITE_P && lse && lane == 0) { /* the row statistics of attention_forward_lse */
        lse[2 * r] = n > 0 ? m : 0.0f;
        lse[2 * r + 1] = n > 0 ? l : 0.0f;
    }
    if (WRITE_P) /* P is dense (B,H,Tq,Tk): keys past every query's visible prefix are zeros */
        for (int j = (nmax + TILE - 1) / TILE * TILE + lane; j < a.Tk; j += 32)
            P[r * a.Tk + j] = 0;
    float f = WRITE_P ? 1.0f : (l > 0 ? 1.0f / l : 0.0f);
    float *orow = out + b * a.o_bs + (int64_t)i * a.o_ld + h * dh;
    for (int c = 0; c < NPL; c++) {
        int d = lane + 32 * c;
        if (d < dh)
            orow[d] = n > 0 ? o[c] * f : 0.0f;
    }
}

/* P_ij recomputed from the saved row statistics (m, l) of row R and the score S. */
__device__ __forceinline__ float lse_prob(const float *lse, long long r, float s)
{
    return expf(s - lse[2 * r]) * (1.0f / lse[2 * r + 1]);
}

/* dQ and dot_i. grid (ceil(Tq/WARPS), H, B); shared: K tile, V tile, WARPS rows of dO (and, with
 * LSE, WARPS rows of Q). With LSE, P is recomputed from Q, K and LSE, and dot_i = dO_i . O_i. */
template <int NPL, bool LSE>
__global__ void k_attn_bwd_q(float *dq, float *dots, const float *dout, const float *q, const float *k,
                             const float *v, const float *P, const float *out, const float *lse,
                             struct nmt_attn_args a, struct cu_flag *flag)
{
    extern __shared__ float smem[];
    __shared__ int shi[WARPS];
    const int dh = a.dh, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.z, h = blockIdx.y, i = blockIdx.x * WARPS + w;
    float *ks = smem, *vs = ks + TILE * (dh + 1), *gs = vs + TILE * (dh + 1) + w * dh;
    float *qs = vs + TILE * (dh + 1) + WARPS * dh + w * dh; /* LSE only */
    const int kl = key_count(a, b, flag);
    const int n = i < a.Tq ? visible(a, kl, i) : 0;
    const long long r = ((long long)b * a.H + h) * a.Tq + i;
    const float *kb = k + b * a.k_bs + h * dh, *vb = v + b * a.v_bs + h * dh;
    float acc = 0;
    if (i < a.Tq)
        for (int d = lane; d < dh; d += 32) {
            float g = dout[b * a.o_bs + (int64_t)i * a.o_ld + h * dh + d];
            gs[d] = g;
            if (LSE) {
                qs[d] = q[b * a.q_bs + (int64_t)i * a.q_ld + h * dh + d];
                acc += g * out[b * a.o_bs + (int64_t)i * a.o_ld + h * dh + d];
            }
        }
    const int nmax = block_max_int(n, shi); /* its barrier also publishes gs and qs */
    if (!LSE)
        for (int t0 = 0; t0 < nmax; t0 += TILE) {
            load_tile(vs, vb, a.v_ld, t0, a.Tk, dh);
            __syncthreads();
            int j = t0 + lane;
            if (j < n)
                acc += P[r * a.Tk + j] * (dot_row(gs, vs, lane, dh) * drop_mult(a, r, j));
            __syncthreads();
        }
    const float dot = cu_warp_sum(acc);
    float g[NPL];
    for (int c = 0; c < NPL; c++)
        g[c] = 0;
    for (int t0 = 0; t0 < nmax; t0 += TILE) {
        load_tile(ks, kb, a.k_ld, t0, a.Tk, dh);
        load_tile(vs, vb, a.v_ld, t0, a.Tk, dh);
        __syncthreads();
        int j = t0 + lane;
        float ds = 0;
        if (j < n) {
            float dp = dot_row(gs, vs, lane, dh) * drop_mult(a, r, j);
            float p = LSE ? lse_prob(lse, r, dot_row(qs, ks, lane, dh) * a.scale) : P[r * a.Tk + j];
            ds = p * (dp - dot) * a.scale;
        }
        for (int jj = 0; jj < TILE; jj++) {
            float dj = __shfl_sync(0xffffffffu, ds, jj);
            const float *kr = ks + jj * (dh + 1);
            for (int c = 0; c < NPL; c++) {
                int d = lane + 32 * c;
                if (d < dh)
                    g[c] += dj * kr[d];
            }
        }
        __syncthreads();
    }
    if (i >= a.Tq)
        return;
    if (lane == 0)
        dots[r] = dot;
    float *row = dq + b * a.q_bs + (int64_t)i * a.q_ld + h * dh;
    for (int c = 0; c < NPL; c++) {
        int d = lane + 32 * c;
        if (d < dh)
            row[d] = g[c];
    }
}

/* dK and dV. grid (ceil(Tk/WARPS), H, B), warp per key; shared: Q tile, dO tile, WARPS rows of V
 * (and, with LSE, WARPS rows of K: P is recomputed from Q, K and LSE). */
template <int NPL, bool LSE>
__global__ void k_attn_bwd_kv(float *dk, float *dv, const float *dout, const float *q, const float *k,
                              const float *v, const float *P, const float *lse, const float *dots,
                              struct nmt_attn_args a, struct cu_flag *flag)
{
    extern __shared__ float smem[];
    const int dh = a.dh, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.z, h = blockIdx.y, j = blockIdx.x * WARPS + w;
    float *qs = smem, *gs = qs + TILE * (dh + 1), *vj = gs + TILE * (dh + 1) + w * dh;
    float *kj = gs + TILE * (dh + 1) + WARPS * dh + w * dh; /* LSE only */
    const int kl = key_count(a, b, flag);
    if (j < a.Tk)
        for (int d = lane; d < dh; d += 32) {
            vj[d] = v[b * a.v_bs + (int64_t)j * a.v_ld + h * dh + d];
            if (LSE)
                kj[d] = k[b * a.k_bs + (int64_t)j * a.k_ld + h * dh + d];
        }
    float gk[NPL], gv[NPL];
    for (int c = 0; c < NPL; c++)
        gk[c] = gv[c] = 0;
    const float *qb = q + b * a.q_bs + h * dh, *ob = dout + b * a.o_bs + h * dh;
    const long long r0 = ((long long)b * a.H + h) * a.Tq;
    for (int t0 = 0; t0 < a.Tq; t0 += TILE) {
        __syncthreads(); /* previous tile consumed; vj published */
        load_tile(qs, qb, a.q_ld, t0, a.Tq, dh);
        load_tile(gs, ob, a.o_ld, t0, a.Tq, dh);
        __syncthreads();
        int i = t0 + lane;
        float ds = 0, pd = 0;
        if (i < a.Tq && j < a.Tk && j < visible(a, kl, i)) {
            long long r = r0 + i;
            float mult = drop_mult(a, r, j);
            float p = LSE ? lse_prob(lse, r, dot_row(kj, qs, lane, dh) * a.scale) : P[r * a.Tk + j];
            float dp = dot_row(vj, gs, lane, dh) * mult;
            ds = p * (dp - dots[r]) * a.scale;
            pd = p * mult;
        }
        for (int ii = 0; ii < TILE; ii++) {
            float si = __shfl_sync(0xffffffffu, ds, ii), pi = __shfl_sync(0xffffffffu, pd, ii);
            const float *qr = qs + ii * (dh + 1), *gr = gs + ii * (dh + 1);
            for (int c = 0; c < NPL; c++) {
                int d = lane + 32 * c;
                if (d < dh) {
                    gk[c] += si * qr[d];
                    gv[c] += pi * gr[d];
                }
            }
        }
    }
    if (j >= a.Tk)
        return;
    float *krow = dk + b * a.k_bs + (int64_t)j * a.k_ld + h * dh, *vrow = dv + b * a.v_bs + (int64_t)j * a.v_ld + h * dh;
    for (int c = 0; c < NPL; c++) {
        int d = lane + 32 * c;
        if (d < dh) {
            krow[d] = gk[c];
            vrow[d] = gv[c];
        }
    }
}

static int check(nmt_bctx *ctx, const char *what, const struct nmt_attn_args *a)
{
    if (a->B < 0 || a->Tq < 0 || a->Tk < 0 || a->H <= 0 || a->dh <= 0)
        return cu_err(ctx, "%s: invalid size B=%d Tq=%d Tk=%d H=%d dh=%d", what, a->B, a->Tq, a->Tk, a->H, a->dh);
    if (a->dh > MAX_DH)
        return cu_err(ctx, "%s: head width %d is larger than the cuda backend's %d", what, a->dh, MAX_DH);
    if (a->H > 65535 || a->B > 65535)
        return cu_err(ctx, "%s: %d heads x %d batch items is more than the cuda backend's grid allows", what, a->H,
                      a->B);
    int64_t w = (int64_t)a->H * a->dh;
    if (a->q_ld < w || a->k_ld < w || a->v_ld < w || a->o_ld < w)
        return cu_err(ctx, "%s: row stride smaller than H*dh=%lld", what, (long long)w);
    if (!(a->dropout >= 0 && a->dropout < 1))
        return cu_err(ctx, "%s: dropout %g outside [0, 1)", what, (double)a->dropout);
    return 0;
}

/* Shared memory of a block: two (TILE, dh+1) tiles and ROWS x WARPS rows of dh. */
static size_t smem_bytes(int dh, int rows = 1)
{
    return (2 * (size_t)TILE * (dh + 1) + (size_t)rows * WARPS * dh) * sizeof(float);
}

/* Raises a kernel's dynamic shared memory limit when the head is wide (past the 48 KiB default). */
template <typename F> static int allow_smem(nmt_bctx *ctx, F kernel, size_t bytes)
{
    if (bytes <= 48 * 1024)
        return 0;
    return cu_check(ctx, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
                    "attention: cudaFuncSetAttribute (shared memory)");
}

template <int NPL>
static int fwd(nmt_bctx *ctx, float *out, float *P, float *lse, const float *q, const float *k, const float *v,
               const struct nmt_attn_args *a)
{
    dim3 grid((unsigned)((a->Tq + WARPS - 1) / WARPS), (unsigned)a->H, (unsigned)a->B);
    size_t sm = smem_bytes(a->dh);
    if (P) {
        if (allow_smem(ctx, k_attn_fwd<NPL, true>, sm) < 0)
            return -1;
        k_attn_fwd<NPL, true><<<grid, 32 * WARPS, sm, ctx->stream>>>(out, P, NULL, q, k, v, *a, ctx->flag);
    } else {
        if (allow_smem(ctx, k_attn_fwd<NPL, false>, sm) < 0)
            return -1;
        k_attn_fwd<NPL, false><<<grid, 32 * WARPS, sm, ctx->stream>>>(out, NULL, lse, q, k, v, *a, ctx->flag);
    }
    return cu_launched(ctx, lse ? "attention_forward_lse" : "attention_forward");
}

/* attention_forward (P given or NULL) and attention_forward_lse (P NULL, LSE given or NULL). */
static int forward(nmt_bctx *ctx, const char *what, float *out, float *P, float *lse, const float *q, const float *k,
                   const float *v, const struct nmt_attn_args *a)
{
    if (check(ctx, what, a) < 0)
        return -1;
    if (!a->B || !a->Tq)
        return 0;
    cu_enter(ctx);
    int npl = (a->dh + 31) / 32;
    if (npl <= 1)
        return fwd<1>(ctx, out, P, lse, q, k, v, a);
    if (npl <= 2)
        return fwd<2>(ctx, out, P, lse, q, k, v, a);
    if (npl <= 4)
        return fwd<4>(ctx, out, P, lse, q, k, v, a);
    return fwd<8>(ctx, out, P, lse, q, k, v, a);
}

int cu_attention_forward(nmt_bctx *ctx, float *out, float *P, const float *q, const float *k, const float *v,
                         const struct nmt_attn_args *a)
{
    return forward(ctx, "attention_forward", out, P, NULL, q, k, v, a);
}

int cu_attention_forward_lse(nmt_bctx *ctx, float *out, float *lse, const float *q, const float *k, const float *v,
                             const struct nmt_attn_args *a)
{
    return forward(ctx, "attention_forward_lse", out, NULL, lse, q, k, v, a);
}

/* The backward kernels: from P (LSE false) or from OUT and LSE (LSE true). */
template <int NPL, bool LSE>
static int bwd(nmt_bctx *ctx, float *dq, float *dk, float *dv, const float *dout, const float *out, const float *q,
               const float *k, const float *v, const float *P, const float *lse, const struct nmt_attn_args *a)
{
    const char *name = LSE ? "attention_backward_lse" : "attention_backward";
    float *dots = (float *)cu_scratch(ctx, (size_t)a->B * a->H * (a->Tq ? a->Tq : 1) * sizeof(float));
    if (!dots)
        return -1;
    size_t sm = smem_bytes(a->dh, LSE ? 2 : 1);
    if (allow_smem(ctx, k_attn_bwd_q<NPL, LSE>, sm) < 0 || allow_smem(ctx, k_attn_bwd_kv<NPL, LSE>, sm) < 0)
        return -1;
    char call[64];
    if (a->Tq) {
        dim3 gq((unsigned)((a->Tq + WARPS - 1) / WARPS), (unsigned)a->H, (unsigned)a->B);
        k_attn_bwd_q<NPL, LSE><<<gq, 32 * WARPS, sm, ctx->stream>>>(dq, dots, dout, q, k, v, P, out, lse, *a, ctx->flag);
        snprintf(call, sizeof call, "%s (dq)", name);
        if (cu_launched(ctx, call) < 0)
            return -1;
    }
    if (a->Tk) {
        dim3 gk((unsigned)((a->Tk + WARPS - 1) / WARPS), (unsigned)a->H, (unsigned)a->B);
        k_attn_bwd_kv<NPL, LSE><<<gk, 32 * WARPS, sm, ctx->stream>>>(dk, dv, dout, q, k, v, P, lse, dots, *a, ctx->flag);
        snprintf(call, sizeof call, "%s (dk, dv)", name);
        if (cu_launched(ctx, call) < 0)
            return -1;
    }
    return 0;
}

template <bool LSE>
static int backward(nmt_bctx *ctx, float *dq, float *dk, float *dv, const float *dout, const float *out,
                    const float *q, const float *k, const float *v, const float *P, const float *lse,
                    const struct nmt_attn_args *a)
{
    if (check(ctx, LSE ? "attention_backward_lse" : "attention_backward", a) < 0)
        return -1;
    if (LSE ? !lse : !P)
        return cu_err(ctx, LSE ? "attention_backward_lse: no saved statistics"
                               : "attention_backward: no saved probabilities");
    if (LSE && !out)
        return cu_err(ctx, "attention_backward_lse: no forward output");
    if (!a->B)
        return 0;
    cu_enter(ctx);
    int npl = (a->dh + 31) / 32;
    if (npl <= 1)
        return bwd<1, LSE>(ctx, dq, dk, dv, dout, out, q, k, v, P, lse, a);
    if (npl <= 2)
        return bwd<2, LSE>(ctx, dq, dk, dv, dout, out, q, k, v, P, lse, a);
    if (npl <= 4)
        return bwd<4, LSE>(ctx, dq, dk, dv, dout, out, q, k, v, P, lse, a);
    return bwd<8, LSE>(ctx, dq, dk, dv, dout, out, q, k, v, P, lse, a);
}

int cu_attention_backward(nmt_bctx *ctx, float *dq, float *dk, float *dv, const float *dout, const float *q,
                          const float *k, const float *v, const float *P, const struct nmt_attn_args *a)
{
    return backward<false>(ctx, dq, dk, dv, dout, NULL, q, k, v, P, NULL, a);
}

int cu_attention_backward_lse(nmt_bctx *ctx, float *dq, float *dk, float *dv, const float *dout, const float *out,
                              const float *lse, const float *q, const float *k, const float *v,
                              const struct nmt_attn_args *a)
{
    return backward<true>(ctx, dq, dk, dv, dout, out, q, k, v, NULL, lse, a);
}
