/* kernels.cu: the cuda backend's kernels except attention and the matrix products (contracts in
 * plugins/backend.h). Every reduction is done in a fixed order that depends only on the sizes, so
 * results are reproducible run to run (no floating-point atomics). Data errors the cpu plugin
 * checks on the host (ids, targets, indices out of range) are flagged by the kernels and reported at
 * the next point where the host waits (see cu_wait). */
#include <cuda_bf16.h>
#include <math.h>

#include "cuda.h"

#define THREADS 256
#define SUMSQ_BLOCK 4096 /* elements per partial sum, as the cpu plugin */
#define COL_ROWS 64      /* rows per partial column sum (at most COL_MAX_CHUNKS chunks) */
#define COL_MAX_CHUNKS 1024

/* Grid-stride loops: first index of this thread, and the step. */
__device__ __forceinline__ size_t gidx(void) { return blockIdx.x * (size_t)blockDim.x + threadIdx.x; }
__device__ __forceinline__ size_t gstep(void) { return (size_t)gridDim.x * blockDim.x; }

/* ---------------- elementwise ---------------- */

__global__ void k_add(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = gidx(); i < n; i += gstep())
        out[i] = a[i] + b[i];
}

__global__ void k_relu(float *out, const float *x, size_t n)
{
    for (size_t i = gidx(); i < n; i += gstep())
        out[i] = x[i] > 0 ? x[i] : 0.0f;
}

__global__ void k_relu_back(float *dx, const float *dout, const float *y, size_t n)
{
    for (size_t i = gidx(); i < n; i += gstep())
        dx[i] = y[i] > 0 ? dout[i] : 0.0f;
}

__global__ void k_dropout(float *out, const float *x, size_t n, float p, uint64_t seed, uint64_t offset)
{
    float keep = 1.0f / (1.0f - p);
    for (size_t i = gidx(); i < n; i += gstep())
        out[i] = x[i] * (cu_rng_uniform(seed, offset + (uint64_t)i) >= p ? keep : 0.0f); /* x * 0: NaN stays NaN */
}

__global__ void k_swish(float *out, const float *x, size_t n)
{
    for (size_t i = gidx(); i < n; i += gstep())
        out[i] = x[i] / (1.0f + expf(-x[i]));
}

__global__ void k_swish_back(float *dx, const float *dout, const float *x, size_t n)
{
    for (size_t i = gidx(); i < n; i += gstep()) {
        float v = x[i], s = 1.0f / (1.0f + expf(-v));
        dx[i] = dout[i] * (s + v * s * (1.0f - s));
    }
}

int cu_add(nmt_bctx *ctx, float *out, const float *a, const float *b, size_t n)
{
    if (!n)
        return 0;
    cu_enter(ctx);
    k_add<<<cu_blocks(n, THREADS), THREADS, 0, ctx->stream>>>(out, a, b, n);
    return cu_launched(ctx, "add");
}

int cu_relu_forward(nmt_bctx *ctx, float *out, const float *x, size_t n)
{
    if (!n)
        return 0;
    cu_enter(ctx);
    k_relu<<<cu_blocks(n, THREADS), THREADS, 0, ctx->stream>>>(out, x, n);
    return cu_launched(ctx, "relu_forward");
}

int cu_relu_backward(nmt_bctx *ctx, float *dx, const float *dout, const float *y, size_t n)
{
    if (!n)
        return 0;
    cu_enter(ctx);
    k_relu_back<<<cu_blocks(n, THREADS), THREADS, 0, ctx->stream>>>(dx, dout, y, n);
    return cu_launched(ctx, "relu_backward");
}

int cu_swish_forward(nmt_bctx *ctx, float *out, const float *x, size_t n)
{
    if (!n)
        return 0;
    cu_enter(ctx);
    k_swish<<<cu_blocks(n, THREADS), THREADS, 0, ctx->stream>>>(out, x, n);
    return cu_launched(ctx, "swish_forward");
}

int cu_swish_backward(nmt_bctx *ctx, float *dx, const float *dout, const float *x, size_t n)
{
    if (!n)
        return 0;
    cu_enter(ctx);
    k_swish_back<<<cu_blocks(n, THREADS), THREADS, 0, ctx->stream>>>(dx, dout, x, n);
    return cu_launched(ctx, "swish_backward");
}

int cu_dropout_forward(nmt_bctx *ctx, float *out, const float *x, size_t n, float p, uint64_t seed, uint64_t offset)
{
    if (!(p >= 0 && p < 1))
        return cu_err(ctx, "dropout: probability %g outside [0, 1)", (double)p);
    if (!n)
        return 0;
    cu_enter(ctx);
    if (p == 0)
        return out == x ? 0
                        : cu_check(ctx, cudaMemcpyAsync(out, x, n * sizeof *out, cudaMemcpyDeviceToDevice, ctx->stream),
                                   "dropout: cudaMemcpyAsync");
    k_dropout<<<cu_blocks(n, THREADS), THREADS, 0, ctx->stream>>>(out, x, n, p, seed, offset);
    return cu_launched(ctx, "dropout");
}

int cu_dropout_backward(nmt_bctx *ctx, float *dx, const float *dout, size_t n, float p, uint64_t seed,
                        uint64_t offset)
{
    return cu_dropout_forward(ctx, dx, dout, n, p, seed, offset);
}

/* C (M,N) with ldc: C = beta*C, or 0 when beta == 0 (C not read). */
__global__ void k_scale_matrix(float *C, int M, int N, int ldc, float beta)
{
    CU_FOR_ROWS_COLS(r, c, M, N) {
        float *p = C + r * (size_t)ldc + c;
        *p = beta == 0 ? 0.0f : beta * *p;
    }
}

int cu_scale_matrix(nmt_bctx *ctx, float *C, int M, int N, int ldc, float beta)
{
    size_t n = (size_t)M * N;
    if (!n || beta == 1)
        return 0;
    k_scale_matrix<<<cu_grid_2d((size_t)M, (size_t)N, THREADS), THREADS, 0, ctx->stream>>>(C, M, N, ldc, beta);
    return cu_launched(ctx, "gemm (beta scaling)");
}

/* ---------------- bias, and column sums ---------------- */

__global__ void k_bias_add(float *out, const float *bias, size_t M, int N)
{
    CU_FOR_ROWS_COLS(r, c, M, N)
        out[r * (size_t)N + c] += bias[c];
}

int cu_bias_add(nmt_bctx *ctx, float *out, const float *bias, int M, int N)
{
    if (M < 0 || N < 0)
        return cu_err(ctx, "bias_add: negative size M=%d N=%d", M, N);
    if (!M || !N)
        return 0;
    cu_enter(ctx);
    k_bias_add<<<cu_grid_2d((size_t)M, (size_t)N, THREADS), THREADS, 0, ctx->stream>>>(out, bias, (size_t)M, N);
    return cu_launched(ctx, "bias_add");
}

enum { COL_BIAS, COL_LN };

/* Partial column sums over a chunk of rows. Block (32, 8): 32 columns, 8 row lanes; grid (column
 * tiles, chunks). COL_BIAS: part0 = sum of g. COL_LN: part0 = sum of g * (x - mean) * rstd,
 * part1 = sum of g. part (chunks, N). */
template <int MODE>
__global__ void k_colsum_partial(float *part0, float *part1, const float *g, const float *x, const float *mean,
                                 const float *rstd, int M, int N, int rows)
{
    __shared__ float s0[8][33], s1[8][33];
    int tx = threadIdx.x, ty = threadIdx.y, col = blockIdx.x * 32 + tx, chunk = blockIdx.y;
    int r0 = chunk * rows, r1 = min(M, r0 + rows);
    float a0 = 0, a1 = 0;
    if (col < N)
        for (int r = r0 + ty; r < r1; r += 8) {
            float gv = g[(int64_t)r * N + col];
            if (MODE == COL_LN) {
                a0 += gv * ((x[(int64_t)r * N + col] - mean[r]) * rstd[r]);
                a1 += gv;
            } else {
                a0 += gv;
            }
        }
    s0[ty][tx] = a0;
    s1[ty][tx] = a1;
    __syncthreads();
    if (ty == 0 && col < N) {
        for (int k = 1; k < 8; k++) {
            a0 += s0[k][tx];
            a1 += s1[k][tx];
        }
        part0[(int64_t)chunk * N + col] = a0;
        if (MODE == COL_LN)
            part1[(int64_t)chunk * N + col] = a1;
    }
}

/* out0 (N) += sum over chunks of part0, in chunk order; likewise out1 if not NULL. */
__global__ void k_colsum_final(float *out0, float *out1, const float *part0, const float *part1, int chunks, int N)
{
    for (size_t c = gidx(); c < (size_t)N; c += gstep()) {
        float a0 = 0, a1 = 0;
        for (int k = 0; k < chunks; k++) {
            a0 += part0[(int64_t)k * N + c];
            if (out1)
                a1 += part1[(int64_t)k * N + c];
        }
        out0[c] += a0;
        if (out1)
            out1[c] += a1;
    }
}

/* Column sums of an (M,N) gradient into OUT0 (and OUT1 for layer norm): two deterministic passes. */
static int colsum(nmt_bctx *ctx, const char *what, int mode, float *out0, float *out1, const float *g,
                  const float *x, const float *mean, const float *rstd, int M, int N)
{
    int rows = COL_ROWS, chunks = (M + rows - 1) / rows;
    if (chunks > COL_MAX_CHUNKS) {
        chunks = COL_MAX_CHUNKS;
        rows = (M + chunks - 1) / chunks;
        chunks = (M + rows - 1) / rows;
    }
    float *part = (float *)cu_scratch(ctx, 2 * (size_t)chunks * N * sizeof(float));
    if (!part)
        return -1;
    dim3 grid((unsigned)((N + 31) / 32), (unsigned)chunks), block(32, 8);
    if (mode == COL_LN)
        k_colsum_partial<COL_LN><<<grid, block, 0, ctx->stream>>>(part, part + (size_t)chunks * N, g, x, mean, rstd, M,
                                                                  N, rows);
    else
        k_colsum_partial<COL_BIAS><<<grid, block, 0, ctx->stream>>>(part, NULL, g, NULL, NULL, NULL, M, N, rows);
    if (cu_launched(ctx, what) < 0)
        return -1;
    k_colsum_final<<<cu_blocks((size_t)N, THREADS), THREADS, 0, ctx->stream>>>(out0, out1, part,
                                                                                part + (size_t)chunks * N, chunks, N);
    return cu_launched(ctx, what);
}

int cu_bias_grad(nmt_bctx *ctx, float *dbias, const float *dout, int M, int N)
{
    if (M < 0 || N < 0)
        return cu_err(ctx, "bias_grad: negative size M=%d N=%d", M, N);
    if (!M || !N)
        return 0;
    cu_enter(ctx);
    return colsum(ctx, "bias_grad", COL_BIAS, dbias, NULL, dout, NULL, NULL, NULL, M, N);
}

/* ---------------- embedding ---------------- */

/* Row n per block: out = emb[id] * scale + PE(pos), the sinusoid computed in double as the cpu
 * plugin's table is. */
__global__ void k_emb_fwd(float *out, const int32_t *ids, const int32_t *pos, const float *emb, int D, int V,
                          float scale, struct cu_flag *flag)
{
    int n = blockIdx.x, p = pos[n];
    float *o = out + (int64_t)n * D;
    int id = p >= 0 ? ids[n] : 0;
    if (p < 0 || id < 0 || id >= V) {
        if (p >= 0 && threadIdx.x == 0)
            cu_report(flag, CU_BAD_EMB_ID, n, id, V);
        for (int j = threadIdx.x; j < D; j += blockDim.x)
            o[j] = 0;
        return;
    }
    const float *e = emb + (int64_t)id * D;
    for (int i = 2 * threadIdx.x; i < D; i += 2 * blockDim.x) {
        double ang = p / pow(10000.0, (double)i / D), s, c;
        sincos(ang, &s, &c);
        o[i] = e[i] * scale + (float)s;
        o[i + 1] = e[i + 1] * scale + (float)c;
    }
}

/* Row n per block: out = emb[id] * scale + pe[pos] (just pe[pos] for id < 0), zeros for pos < 0. */
__global__ void k_emb_tab_fwd(float *out, const int32_t *ids, const int32_t *pos, const float *emb, const float *pe,
                              int D, int V, int P, float scale, struct cu_flag *flag)
{
    int n = blockIdx.x, p = pos[n];
    float *o = out + (int64_t)n * D;
    int id = p >= 0 ? ids[n] : 0;
    if (p < 0 || id >= V || p >= P) {
        if (p >= 0 && threadIdx.x == 0)
            cu_report(flag, CU_BAD_EMB_ID, n, p >= P ? p : id, p >= P ? P : V);
        for (int j = threadIdx.x; j < D; j += blockDim.x)
            o[j] = 0;
        return;
    }
    const float *t = pe + (int64_t)p * D;
    if (id < 0) {
        for (int j = threadIdx.x; j < D; j += blockDim.x)
            o[j] = t[j];
        return;
    }
    const float *e = emb + (int64_t)id * D;
    for (int j = threadIdx.x; j < D; j += blockDim.x)
        o[j] = e[j] * scale + t[j];
}

static int check_emb(nmt_bctx *ctx, const char *what, int N, int D, int V)
{
    if (N < 0 || D <= 0 || V <= 0)
        return cu_err(ctx, "%s: invalid size N=%d D=%d V=%d", what, N, D, V);
    if (D % 2)
        return cu_err(ctx, "%s: model width %d is odd", what, D);
    return 0;
}

int cu_embedding_forward(nmt_bctx *ctx, float *out, const int32_t *ids, const int32_t *pos, const float *emb, int N,
                         int D, int V, float scale)
{
    if (check_emb(ctx, "embedding_forward", N, D, V) < 0)
        return -1;
    if (!N)
        return 0;
    cu_enter(ctx);
    int threads = D / 2 < THREADS ? ((D / 2 + 31) / 32) * 32 : THREADS;
    k_emb_fwd<<<N, threads, 0, ctx->stream>>>(out, ids, pos, emb, D, V, scale, ctx->flag);
    return cu_launched(ctx, "embedding_forward");
}

int cu_embedding_table_forward(nmt_bctx *ctx, float *out, const int32_t *ids, const int32_t *pos, const float *emb,
                               const float *pe, int N, int D, int V, int P, float scale)
{
    if (check_emb(ctx, "embedding_table_forward", N, D, V) < 0)
        return -1;
    if (!N)
        return 0;
    cu_enter(ctx);
    int threads = D < THREADS ? ((D + 31) / 32) * 32 : THREADS;
    k_emb_tab_fwd<<<N, threads, 0, ctx->stream>>>(out, ids, pos, emb, pe, D, V, P, scale, ctx->flag);
    return cu_launched(ctx, "embedding_table_forward");
}

/* The rows of the same token form a list in row order: next[n] is the next row m > n with the same
 * id (-1 if none). Each block scans tiles of ids in shared memory; rows with pos < 0 or a bad id
 * take no part (key -1). */
__global__ void k_emb_next(int32_t *next, const int32_t *ids, const int32_t *pos, int N, int V, int zero_ok,
                           struct cu_flag *flag)
{
    __shared__ int32_t tile[THREADS];
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    int key = -1;
    if (n < N && pos[n] >= 0) {
        key = ids[n];
        if (key < 0 && zero_ok) {
            key = -1; /* a zero embedding (embedding_table_backward): no part */
        } else if (key < 0 || key >= V) {
            cu_report(flag, CU_BAD_EMB_BWD_ID, n, key, V);
            key = -1;
        }
    }
    int found = -1, searching = key >= 0;
    for (int t0 = blockIdx.x * blockDim.x; t0 < N; t0 += blockDim.x) {
        if (!__syncthreads_or(searching))
            break;
        int m = t0 + threadIdx.x;
        tile[threadIdx.x] = m < N && pos[m] >= 0 ? ids[m] : -1;
        __syncthreads();
        if (searching)
            for (int k = 0; k < (int)blockDim.x && t0 + k < N; k++)
                if (t0 + k > n && tile[k] == key) {
                    found = t0 + k;
                    searching = 0;
                    break;
                }
    }
    if (n < N)
        next[n] = key >= 0 ? (found >= 0 ? found : -1) : -2; /* -2: row takes no part */
}

__global__ void k_emb_mark(int32_t *isnext, const int32_t *next, int N)
{
    for (size_t n = gidx(); n < (size_t)N; n += gstep())
        if (next[n] >= 0)
            isnext[next[n]] = 1;
}

/* Block per row: the first row of each token walks its list in row order, so demb gets exactly the
 * cpu plugin's sequence of additions. */
__global__ void k_emb_acc(float *demb, const float *dout, const int32_t *ids, const int32_t *next,
                          const int32_t *isnext, int D, float scale)
{
    int n = blockIdx.x;
    if (next[n] == -2 || isnext[n])
        return;
    float *g = demb + (int64_t)ids[n] * D;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        float acc = g[j];
        for (int m = n; m >= 0; m = next[m])
            acc += scale * dout[(int64_t)m * D + j];
        g[j] = acc;
    }
}

/* embedding_backward, and embedding_table_backward with ZERO_OK (rows of negative ids skipped). */
static int emb_backward(nmt_bctx *ctx, float *demb, const float *dout, const int32_t *ids, const int32_t *pos, int N,
                        int D, int V, float scale, int zero_ok)
{
    if (check_emb(ctx, "embedding_backward", N, D, V) < 0)
        return -1;
    if (!N)
        return 0;
    cu_enter(ctx);
    int32_t *next = (int32_t *)cu_scratch(ctx, 2 * (size_t)N * sizeof(int32_t));
    if (!next)
        return -1;
    int32_t *isnext = next + N;
    k_emb_next<<<(N + THREADS - 1) / THREADS, THREADS, 0, ctx->stream>>>(next, ids, pos, N, V, zero_ok, ctx->flag);
    if (cu_launched(ctx, "embedding_backward (lists)") < 0 ||
        cu_check(ctx, cudaMemsetAsync(isnext, 0, (size_t)N * sizeof *isnext, ctx->stream),
                 "embedding_backward: cudaMemsetAsync") < 0)
        return -1;
    k_emb_mark<<<cu_blocks((size_t)N, THREADS), THREADS, 0, ctx->stream>>>(isnext, next, N);
    if (cu_launched(ctx, "embedding_backward (heads)") < 0)
        return -1;
    int threads = D < THREADS ? ((D + 31) / 32) * 32 : THREADS;
    k_emb_acc<<<N, threads, 0, ctx->stream>>>(demb, dout, ids, next, isnext, D, scale);
    return cu_launched(ctx, "embedding_backward");
}

int cu_embedding_backward(nmt_bctx *ctx, float *demb, const float *dout, const int32_t *ids, const int32_t *pos, int N,
                          int D, int V, float scale)
{
    return emb_backward(ctx, demb, dout, ids, pos, N, D, V, scale, 0);
}

int cu_embedding_table_backward(nmt_bctx *ctx, float *demb, const float *dout, const int32_t *ids, const int32_t *pos,
                                int N, int D, int V, float scale)
{
    return emb_backward(ctx, demb, dout, ids, pos, N, D, V, scale, 1);
}

/* ---------------- layer norm ---------------- */

#define LN_WARPS 8

/* One warp per row; each lane reads and writes only its own columns, so out may alias x. */
__global__ void k_ln_fwd(float *out, float *mean, float *rstd, const float *x, const float *gamma, const float *beta,
                         int N, int D, float eps)
{
    int row = blockIdx.x * LN_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N)
        return;
    const float *xr = x + (int64_t)row * D;
    float *o = out + (int64_t)row * D;
    float s = 0;
    for (int j = lane; j < D; j += 32)
        s += xr[j];
    float mu = cu_warp_sum(s) / D;
    float v = 0;
    for (int j = lane; j < D; j += 32)
        v += (xr[j] - mu) * (xr[j] - mu);
    float rs = 1.0f / sqrtf(cu_warp_sum(v) / D + eps);
    if (lane == 0) {
        if (mean)
            mean[row] = mu;
        if (rstd)
            rstd[row] = rs;
    }
    for (int j = lane; j < D; j += 32)
        o[j] = (xr[j] - mu) * rs * gamma[j] + beta[j];
}

/* One warp per row; dx may alias dout (each lane rereads its own columns before writing them). */
__global__ void k_ln_bwd_x(float *dx, const float *dout, const float *x, const float *mean, const float *rstd,
                           const float *gamma, int N, int D)
{
    int row = blockIdx.x * LN_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N)
        return;
    const float *g = dout + (int64_t)row * D, *xr = x + (int64_t)row * D;
    float *d = dx + (int64_t)row * D;
    float mu = mean[row], rs = rstd[row], a1 = 0, a2 = 0;
    for (int j = lane; j < D; j += 32) {
        float dxh = g[j] * gamma[j];
        a1 += dxh;
        a2 += dxh * ((xr[j] - mu) * rs);
    }
    float m1 = cu_warp_sum(a1) / D, m2 = cu_warp_sum(a2) / D;
    for (int j = lane; j < D; j += 32)
        d[j] = rs * (g[j] * gamma[j] - m1 - (xr[j] - mu) * rs * m2);
}

int cu_layernorm_forward(nmt_bctx *ctx, float *out, float *mean, float *rstd, const float *x, const float *gamma,
                         const float *beta, int N, int D, float eps)
{
    if (N < 0 || D <= 0)
        return cu_err(ctx, "layernorm_forward: invalid size N=%d D=%d", N, D);
    if (!N)
        return 0;
    cu_enter(ctx);
    k_ln_fwd<<<(N + LN_WARPS - 1) / LN_WARPS, 32 * LN_WARPS, 0, ctx->stream>>>(out, mean, rstd, x, gamma, beta, N, D,
                                                                                eps);
    return cu_launched(ctx, "layernorm_forward");
}

int cu_layernorm_backward(nmt_bctx *ctx, float *dx, float *dgamma, float *dbeta, const float *dout, const float *x,
                          const float *mean, const float *rstd, const float *gamma, int N, int D)
{
    if (N < 0 || D <= 0)
        return cu_err(ctx, "layernorm_backward: invalid size N=%d D=%d", N, D);
    if (!N)
        return 0;
    cu_enter(ctx);
    /* the parameter gradients first: dx may overwrite dout */
    if (colsum(ctx, "layernorm_backward (dgamma, dbeta)", COL_LN, dgamma, dbeta, dout, x, mean, rstd, N, D) < 0)
        return -1;
    k_ln_bwd_x<<<(N + LN_WARPS - 1) / LN_WARPS, 32 * LN_WARPS, 0, ctx->stream>>>(dx, dout, x, mean, rstd, gamma, N, D);
    return cu_launched(ctx, "layernorm_backward");
}

/* ---------------- reductions in double ---------------- */

/* One block: out[c] = sum over i < n of in[c*n + i] for c < COLS, in double, in a fixed order
 * (strided per thread, then a tree). */
__global__ void k_sum_double(double *out, const double *in, size_t n, int cols)
{
    __shared__ double sh[1024];
    for (int c = 0; c < cols; c++) {
        double s = 0;
        for (size_t i = threadIdx.x; i < n; i += blockDim.x)
            s += in[(size_t)c * n + i];
        sh[threadIdx.x] = s;
        __syncthreads();
        for (int w = blockDim.x / 2; w > 0; w >>= 1) {
            if ((int)threadIdx.x < w)
                sh[threadIdx.x] += sh[threadIdx.x + w];
            __syncthreads();
        }
        if (threadIdx.x == 0)
            out[c] = sh[0];
        __syncthreads();
    }
}

/* Runs k_sum_double on IN (COLS columns of N doubles) into the pinned ctx->hres and waits. */
static int sum_to_host(nmt_bctx *ctx, const char *what, double *in, size_t n, int cols, double *dres)
{
    k_sum_double<<<1, 1024, 0, ctx->stream>>>(dres, in, n, cols);
    if (cu_launched(ctx, what) < 0 ||
        cu_check(ctx, cudaMemcpyAsync(ctx->hres, dres, (size_t)cols * sizeof(double), cudaMemcpyDeviceToHost,
                                      ctx->stream),
                 "cudaMemcpyAsync (result)") < 0)
        return -1;
    return cu_wait(ctx, what);
}

/* ---------------- cross-entropy ---------------- */

/* Block per row. Every thread reads z[t] and its share of the row before the last reduction's
 * barrier, then writes only its own columns: dlogits may alias logits. */
__global__ void k_xent(float *dl, float *row_nll, const float *logits, const int32_t *tgt, int V, float eps, int pad,
                       float gs, double *loss_row, double *nll_row, double *cnt_row, struct cu_flag *flag)
{
    __shared__ float sh[32];
    int n = blockIdx.x, t = tgt[n];
    const float *z = logits + (int64_t)n * V;
    float *d = dl ? dl + (int64_t)n * V : NULL;
    if (t == pad || t < 0 || t >= V) {
        if (t != pad && threadIdx.x == 0)
            cu_report(flag, CU_BAD_TARGET, n, t, V);
        if (threadIdx.x == 0) {
            loss_row[n] = nll_row[n] = cnt_row[n] = 0;
            if (row_nll)
                row_nll[n] = 0;
        }
        if (d)
            for (int j = threadIdx.x; j < V; j += blockDim.x)
                d[j] = 0;
        return;
    }
    float zt = z[t], mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        mx = fmaxf(mx, z[j]);
    mx = cu_block_max(mx, sh);
    float se = 0, sz = 0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        se += expf(z[j] - mx);
        sz += z[j];
    }
    se = cu_block_sum(se, sh);
    sz = cu_block_sum(sz, sh);
    double lse = mx + log((double)se), nll = lse - zt;
    if (threadIdx.x == 0) {
        nll_row[n] = nll;
        loss_row[n] = (1 - (double)eps) * nll + (double)eps * (lse - (double)sz / V);
        cnt_row[n] = 1;
        if (row_nll)
            row_nll[n] = (float)nll;
    }
    if (d) {
        float flse = (float)lse, sm = eps / V;
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            float g = gs * (expf(z[j] - flse) - sm);
            if (j == t)
                g = gs * (expf(zt - flse) - sm - (1 - eps));
            d[j] = g;
        }
    }
}

int cu_cross_entropy(nmt_bctx *ctx, struct nmt_xent_result *res, float *dlogits, float *row_nll, const float *logits,
                     const int32_t *tgt, int N, int V, float eps, int pad_id, float grad_scale)
{
    if (N < 0 || V <= 0)
        return cu_err(ctx, "cross_entropy: invalid size N=%d V=%d", N, V);
    if (!(eps >= 0 && eps <= 1))
        return cu_err(ctx, "cross_entropy: label smoothing %g outside [0, 1]", (double)eps);
    cu_enter(ctx);
    double *rows = (double *)cu_scratch(ctx, (3 * (size_t)N + 3) * sizeof(double));
    if (!rows)
        return -1;
    if (N) {
        k_xent<<<N, THREADS, 0, ctx->stream>>>(dlogits, row_nll, logits, tgt, V, eps, pad_id, grad_scale, rows,
                                               rows + N, rows + 2 * (size_t)N, ctx->flag);
        if (cu_launched(ctx, "cross_entropy") < 0)
            return -1;
    }
    if (sum_to_host(ctx, "cross_entropy", rows, (size_t)N, 3, rows + 3 * (size_t)N) < 0)
        return -1;
    if (res) {
        res->loss = ctx->hres[0];
        res->nll = ctx->hres[1];
        res->count = (int64_t)ctx->hres[2];
    }
    return 0;
}

/* ---------------- optimizer ---------------- */

__global__ void k_adam(float *p, float *m, float *v, const float *grad, size_t n, float b1, float b2, float eps,
                       float step, float rbc2, float gs)
{
    for (size_t i = gidx(); i < n; i += gstep()) {
        float g = grad[i] * gs;
        float mi = b1 * m[i] + (1 - b1) * g;
        float vi = b2 * v[i] + (1 - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        p[i] -= step * mi / (sqrtf(vi) * rbc2 + eps);
    }
}

int cu_adam_update(nmt_bctx *ctx, float *param, float *m, float *v, const float *grad, size_t n, float lr,
                   float beta1, float beta2, float eps, int64_t t, float grad_scale)
{
    if (t < 1)
        return cu_err(ctx, "adam_update: step %lld < 1", (long long)t);
    double bc1 = 1 - pow(beta1, (double)t), bc2 = 1 - pow(beta2, (double)t);
    if (!(bc1 > 0 && bc2 > 0))
        return cu_err(ctx, "adam_update: betas %g, %g must be in [0, 1)", (double)beta1, (double)beta2);
    if (!n)
        return 0;
    cu_enter(ctx);
    k_adam<<<cu_blocks(n, THREADS), THREADS, 0, ctx->stream>>>(param, m, v, grad, n, beta1, beta2, eps,
                                                               (float)(lr / bc1), (float)(1 / sqrt(bc2)), grad_scale);
    return cu_launched(ctx, "adam_update");
}

/* Block b sums the squares of elements [b*SUMSQ_BLOCK, (b+1)*SUMSQ_BLOCK) in float. */
__global__ void k_sumsq(double *part, const float *x, size_t n)
{
    __shared__ float sh[32];
    size_t i0 = (size_t)blockIdx.x * SUMSQ_BLOCK, i1 = i0 + SUMSQ_BLOCK < n ? i0 + SUMSQ_BLOCK : n;
    float s = 0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x)
        s += x[i] * x[i];
    s = cu_block_sum(s, sh);
    if (threadIdx.x == 0)
        part[blockIdx.x] = s;
}

int cu_sumsq(nmt_bctx *ctx, double *out, const float *x, size_t n)
{
    cu_enter(ctx);
    size_t nb = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
    if (nb > 0x7fffffffu)
        return cu_err(ctx, "sumsq: %zu elements is too many", n);
    double *part = (double *)cu_scratch(ctx, (nb + 1) * sizeof(double));
    if (!part)
        return -1;
    if (nb) {
        k_sumsq<<<(unsigned)nb, THREADS, 0, ctx->stream>>>(part, x, n);
        if (cu_launched(ctx, "sumsq") < 0)
            return -1;
    }
    if (sum_to_host(ctx, "sumsq", part, nb, 1, part + nb) < 0)
        return -1;
    *out = ctx->hres[0];
    return 0;
}

/* ---------------- decoding ---------------- */

/* Is (va, ia) before (vb, ib) in the order of top-k: larger value first, then lower index?
 * ib < 0 means "nothing yet". */
__device__ __forceinline__ bool topk_before(float va, int ia, float vb, int ib)
{
    return ia >= 0 && (ib < 0 || va > vb || (va == vb && ia < ib));
}

/* Block per row: log-sum-exp (NORM; else 0), then K rounds each picking the first element (in top-k
 * order) after the previous pick. O(K*V) per row, exact, and ties go to the lower index as on the cpu. */
__global__ void k_topk(float *values, int32_t *indices, const float *logits, int V, int K, int norm)
{
    __shared__ float sh[32], shv[32];
    __shared__ int shi[32];
    int n = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const float *z = logits + (int64_t)n * V;
    float lse = 0;
    if (norm) { /* the same for every thread of the block */
        float mx = -INFINITY;
        for (int j = threadIdx.x; j < V; j += blockDim.x)
            mx = fmaxf(mx, z[j]);
        mx = cu_block_max(mx, sh);
        float se = 0;
        for (int j = threadIdx.x; j < V; j += blockDim.x)
            se += expf(z[j] - mx);
        lse = mx + logf(cu_block_sum(se, sh));
    }
    float pv = INFINITY;
    int pi = -1;
    for (int k = 0; k < K; k++) {
        float bv = 0;
        int bi = -1;
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            float x = z[j];
            bool after = pi < 0 || x < pv || (x == pv && j > pi);
            if (after && topk_before(x, j, bv, bi))
                bv = x, bi = j;
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (topk_before(ov, oi, bv, bi))
                bv = ov, bi = oi;
        }
        __syncthreads();
        if (lane == 0)
            shv[w] = bv, shi[w] = bi;
        __syncthreads();
        bv = lane < nw ? shv[lane] : 0.0f;
        bi = lane < nw ? shi[lane] : -1;
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (topk_before(ov, oi, bv, bi))
                bv = ov, bi = oi;
        }
        if (threadIdx.x == 0) {
            values[(int64_t)n * K + k] = bi >= 0 ? bv - lse : -INFINITY;
            indices[(int64_t)n * K + k] = bi;
        }
        pv = bv;
        pi = bi;
    }
}

/* cu_topk_logsoftmax (NORM) or cu_topk_logits (not), named WHAT in errors. */
static int topk_rows(nmt_bctx *ctx, float *values, int32_t *indices, const float *logits, int N, int V, int K,
                     int norm, const char *what)
{
    if (N < 0 || V <= 0 || K < 1 || K > V)
        return cu_err(ctx, "%s: invalid size N=%d V=%d K=%d", what, N, V, K);
    if (!N)
        return 0;
    cu_enter(ctx);
    k_topk<<<N, THREADS, 0, ctx->stream>>>(values, indices, logits, V, K, norm);
    return cu_launched(ctx, what);
}

int cu_topk_logsoftmax(nmt_bctx *ctx, float *values, int32_t *indices, const float *logits, int N, int V, int K)
{
    return topk_rows(ctx, values, indices, logits, N, V, K, 1, "topk_logsoftmax");
}

int cu_topk_logits(nmt_bctx *ctx, float *values, int32_t *indices, const float *logits, int N, int V, int K)
{
    return topk_rows(ctx, values, indices, logits, N, V, K, 0, "topk_logits");
}

__global__ void k_gather(float *dst, const float *src, const int32_t *idx, int N, int64_t row, struct cu_flag *flag)
{
    CU_FOR_ROWS_COLS(i, c, N, row) {
        int id = idx[i];
        size_t e = i * (size_t)row + c;
        if (id < 0) {
            if (c == 0)
                cu_report(flag, CU_BAD_GATHER, (int)i, id, 0);
            dst[e] = 0;
        } else {
            dst[e] = src[(int64_t)id * row + (int64_t)c];
        }
    }
}

int cu_gather_rows(nmt_bctx *ctx, float *dst, const float *src, const int32_t *idx, int N, int64_t row)
{
    if (N < 0 || row < 0)
        return cu_err(ctx, "gather_rows: invalid size N=%d row=%lld", N, (long long)row);
    if (!N || !row)
        return 0;
    cu_enter(ctx);
    k_gather<<<cu_grid_2d((size_t)N, (size_t)row, THREADS), THREADS, 0, ctx->stream>>>(dst, src, idx, N, row,
                                                                                        ctx->flag);
    return cu_launched(ctx, "gather_rows");
}

/* ---------------- casts (ABI 2.2) ---------------- */

/* Element (r, c) of a ROWS x COLS matrix, LD apart in SRC, dense in DST: float32 <-> bf16 (round to
 * nearest even, exact widening) or a copy; launched with cu_grid_2d. */
template <typename D, typename S> __device__ __forceinline__ D cast_one(S x);
template <> __device__ __forceinline__ __nv_bfloat16 cast_one(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ float cast_one(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float cast_one(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 cast_one(__nv_bfloat16 x) { return x; }

template <typename D, typename S>
__global__ void k_cast_2d(D *dst, const S *src, long long rows, long long cols, long long ld)
{
    CU_FOR_ROWS_COLS(r, c, rows, cols)
        dst[r * (size_t)cols + c] = cast_one<D, S>(src[r * (size_t)ld + c]);
}

static int dtype_ok(uint32_t t) { return t == NMT_DTYPE_F32 || t == NMT_DTYPE_BF16; }

int cu_cast_2d(nmt_bctx *ctx, void *dst, uint32_t dst_dtype, const void *src, uint32_t src_dtype, int rows, int cols,
               int ld)
{
    if (!dtype_ok(dst_dtype) || !dtype_ok(src_dtype))
        return cu_err(ctx, "cast: dtype %u to %u not supported (float32 %d and bf16 %d)", (unsigned)src_dtype,
                      (unsigned)dst_dtype, NMT_DTYPE_F32, NMT_DTYPE_BF16);
    if (rows <= 0 || cols <= 0)
        return 0;
    dim3 g = cu_grid_2d((size_t)rows, (size_t)cols, 256);
    int db = dst_dtype == NMT_DTYPE_BF16, sb = src_dtype == NMT_DTYPE_BF16;
    if (db && !sb)
        k_cast_2d<__nv_bfloat16, float><<<g, 256, 0, ctx->stream>>>((__nv_bfloat16 *)dst, (const float *)src, rows, cols, ld);
    else if (!db && sb)
        k_cast_2d<float, __nv_bfloat16><<<g, 256, 0, ctx->stream>>>((float *)dst, (const __nv_bfloat16 *)src, rows, cols, ld);
    else if (db)
        k_cast_2d<__nv_bfloat16, __nv_bfloat16>
            <<<g, 256, 0, ctx->stream>>>((__nv_bfloat16 *)dst, (const __nv_bfloat16 *)src, rows, cols, ld);
    else
        k_cast_2d<float, float><<<g, 256, 0, ctx->stream>>>((float *)dst, (const float *)src, rows, cols, ld);
    return cu_launched(ctx, "cast");
}

int cu_cast(nmt_bctx *ctx, void *dst, uint32_t dst_dtype, const void *src, uint32_t src_dtype, size_t n)
{
    if (!dtype_ok(dst_dtype) || !dtype_ok(src_dtype))
        return cu_err(ctx, "cast: dtype %u to %u not supported (float32 %d and bf16 %d)", (unsigned)src_dtype,
                      (unsigned)dst_dtype, NMT_DTYPE_F32, NMT_DTYPE_BF16);
    if (!n)
        return 0;
    if (!dst || !src)
        return cu_err(ctx, "cast: NULL pointer");
    cu_enter(ctx);
    /* as rows of at most 2^30 elements, so the 2-d kernel's int sizes hold any N */
    const size_t row = (size_t)1 << 30;
    size_t es_d = dst_dtype == NMT_DTYPE_BF16 ? 2 : 4, es_s = src_dtype == NMT_DTYPE_BF16 ? 2 : 4;
    for (size_t off = 0; off < n; off += row) {
        size_t m = n - off < row ? n - off : row;
        if (cu_cast_2d(ctx, (char *)dst + off * es_d, dst_dtype, (const char *)src + off * es_s, src_dtype, 1, (int)m,
                       (int)m) < 0)
            return -1;
    }
    return 0;
}
