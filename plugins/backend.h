/* backend.h: the binary interface between nmt and its compute backends (plugins).
 *
 * This is the only header shared by the host (libcommon/, tools/) and the plugins (plugins/NAME/).
 * A plugin is a shared object nmt-backend-NAME.so exporting exactly one symbol:
 *
 *     const struct nmt_backend *nmt_backend_entry(void);
 *
 * which returns a pointer to a constant, statically allocated table (struct nmt_backend below).
 * The host loads it with libcommon/run/backend_loader.h (backend_open), which checks the table and copies it.
 *
 * VERSIONING
 *   abi_major  changes when an existing slot changes meaning or signature; the host refuses a plugin
 *              whose abi_major differs from NMT_BACKEND_ABI_MAJOR.
 *   abi_minor  grows when slots are appended at the end of the table. Slots are never reordered or
 *              removed within a major version.
 *   size       sizeof(struct nmt_backend) as the plugin was compiled. The host reads only the first
 *              `size` bytes and treats every slot past them as absent (NULL); so an old plugin runs
 *              under a newer host, and a newer plugin's extra slots are ignored by an older host.
 *   Required slots (all slots of ABI 2.0 unless marked OPTIONAL) must be non-NULL, otherwise the host
 *   refuses the plugin. OPTIONAL slots may be NULL; the host checks before calling them.
 *   Every slot is one the host calls: a kernel no host code uses is not part of the interface.
 *
 * DEVICE MEMORY
 *   The plugin owns device memory; the host decides the layout. The host allocates a few large
 *   buffers with alloc() (e.g. one for parameters, one for gradients, one for the Adam moments, one
 *   for activations) and places tensors inside them itself.
 *   A device pointer is a `void *` (or `float *`, `int32_t *`) that the host never dereferences. It
 *   MAY do pointer arithmetic on it: `(float *)buf + off` addresses the element `off` floats into the
 *   buffer (valid for the cpu plugin, where device memory is host memory, and for CUDA, where it is a
 *   device address). Every pointer argument of a kernel is a device pointer unless its comment says
 *   "host". alloc() returns memory aligned to at least 64 bytes; contents are undefined until written
 *   (use memset_zero). Tensor offsets the host chooses need only be aligned to sizeof(float).
 *
 * TENSORS AND NAMING
 *   float32, row-major, densely packed unless a leading dimension (ld*, in elements) or a batch
 *   stride (bs*, in elements) is given. Shapes use the fixed letters: B batch (sentences), T/Tq/Tk
 *   time steps, N rows (= B*T tokens as laid out by the host), D model width, H heads, dh = D/H head
 *   width, V vocabulary, K inner dimension of a product. Token ids, targets, positions and lengths
 *   are int32_t arrays in device memory (uploaded by the host).
 *   Outputs come first in every argument list, then inputs, then sizes, then scalars.
 *
 * GRADIENTS
 *   Parameter gradients ACCUMULATE (+=): embedding_backward's demb, bias_grad's dbias,
 *   layernorm_backward's dgamma/dbeta (and weight gradients computed by the host with gemm and
 *   beta = 1). The host zeroes them once per optimizer step (memset_zero).
 *   Activation gradients are ASSIGNED (=): dx, dq, dk, dv, dlogits. Where a gradient must be summed
 *   with another (a residual branch), the host uses add.
 *
 * ALIASING
 *   Unless a kernel says "may alias", outputs must not overlap inputs or each other.
 *
 * ERRORS
 *   Every kernel and memory function returns 0 on success or a negative value on error, and leaves a
 *   one-line, lowercase description (no trailing newline) readable with last_error(ctx) until the next
 *   failing call on that context. A plugin never prints, never exits, never aborts on bad input, and
 *   never installs signal handlers. Kernels need not validate data values (e.g. a token id out of
 *   range) if that is costly on the device, but the cpu plugin does and returns an error.
 *
 * THREADING AND ORDERING
 *   A context is used by one host thread at a time. Kernels run in call order. A backend may execute
 *   kernels asynchronously; download() and the kernels that return a value into host memory
 *   (cross_entropy, sumsq) wait for all earlier work. The cpu plugin is synchronous and threaded
 *   internally (opts.threads); its results do not depend on the thread count (reductions are split
 *   into fixed-size blocks summed in a fixed order), except for the reassociation BLAS itself does.
 *
 * RANDOM NUMBERS
 *   Dropout is counter-based: element number i of a call with (seed, offset) is kept iff
 *   nmt_rng_uniform(seed, offset + i) >= p, and kept elements are scaled by 1/(1-p). Backward
 *   regenerates the same mask from the same (seed, offset); no mask is stored. The host advances
 *   `offset` by the number of elements of each call so that no two calls share counters.
 *   nmt_rng_uniform (below) is normative: every backend must produce the same mask.
 */
#ifndef NMT_BACKEND_H
#define NMT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#define NMT_BACKEND_ABI_MAJOR 2
#define NMT_BACKEND_ABI_MINOR 10
#define NMT_BACKEND_ENTRY "nmt_backend_entry"

/* Data types a backend can hold (bit mask in nmt_backend_props.dtypes). ABI 2 kernels are F32;
 * linear_pack_q (ABI 2.1) also takes INT8 and BF16 as the precision of a packed weight (ABI 2.8:
 * INT8A8, int8 weights with 8-bit activations, which only linear_pack_q takes; ABI 2.10: INT8A7,
 * with 7-bit activations, likewise); cast,
 * gemm_ex and set_precision (ABI 2.2) take BF16 for matrix products. A BF16 tensor holds bfloat16
 * values as uint16_t bit patterns (the top half of a float32), 2 bytes an element. */
enum { NMT_DTYPE_F32 = 1, NMT_DTYPE_F16 = 2, NMT_DTYPE_BF16 = 4, NMT_DTYPE_INT8 = 8, NMT_DTYPE_INT8A8 = 16,
       NMT_DTYPE_INT8A7 = 32 };

/* Options for open(). The host zero-fills the struct and sets size = sizeof(struct
 * nmt_backend_opts); a plugin reads only fields within `size` and takes defaults for the rest. */
struct nmt_backend_opts {
    size_t size;  /* sizeof(struct nmt_backend_opts) as the host compiled it */
    int threads;  /* worker threads for the cpu plugin; 0 = all online cores */
    int device;   /* device index for accelerator plugins; 0 = the first */
};

/* Filled by props(). Strings are NUL-terminated. */
struct nmt_backend_props {
    char device[128];      /* human-readable device, e.g. "cpu: AMD EPYC (2 threads, avx2)" */
    uint64_t memory_bytes; /* device memory in bytes (cpu: physical RAM), 0 if unknown */
    uint32_t dtypes;       /* NMT_DTYPE_* mask */
    int threads;           /* worker threads in use (cpu), 0 for accelerators */
};

/* Arguments of the fused multi-head attention (host memory; the pointers inside are not in it).
 * Q row (b, t) starts at q + b*q_bs + t*q_ld; head h of that row is the dh floats at + h*dh.
 * The same holds for k, v (Tk rows), out and the gradients (which use the strides of their
 * forward counterpart: dq uses q_ld/q_bs, dk k_ld/k_bs, dv v_ld/v_bs, dout o_ld/o_bs).
 * So Q, K, V may be column blocks of one fused (N, 3D) projection (ld = 3*D, bs = T*3*D), and K, V
 * may be a key/value cache (B, Tmax, D) filled up to Tk (ld = D, bs = Tmax*D).
 * Key j is visible to query i of batch item b iff j < klen[b] (klen NULL: all Tk keys) and, when
 * causal, j <= i + causal_shift (causal_shift = 0 for training self-attention; Tk - Tq when the
 * queries are the last Tq positions of the keys). A query with no visible key yields zeros (out,
 * P and gradients), never NaN. Scores are (q.k) * scale; softmax over visible keys gives P; with
 * dropout p > 0, P' = P * keep / (1-p) where element (b,h,i,j) uses counter
 * offset + ((b*H + h)*Tq + i)*Tk + j; out = P' V. */
struct nmt_attn_args {
    int B, Tq, Tk, H, dh;
    int64_t q_ld, q_bs, k_ld, k_bs, v_ld, v_bs, o_ld, o_bs; /* in floats */
    const int32_t *klen;   /* device (B) visible key count per batch item, or NULL */
    int causal;            /* non-zero: causal mask */
    int causal_shift;      /* see above */
    float scale;           /* score scale, normally 1/sqrt(dh) */
    float dropout;         /* attention dropout probability p in [0, 1) */
    uint64_t seed, offset; /* dropout RNG */
};

/* Result of cross_entropy, in host memory. */
struct nmt_xent_result {
    double loss;   /* sum over non-pad rows of the label-smoothed loss (the training objective) */
    double nll;    /* sum over non-pad rows of -log p(target) (for perplexity) */
    int64_t count; /* number of non-pad rows */
};

typedef struct nmt_bctx nmt_bctx; /* a plugin's context: opaque to the host */

struct nmt_backend {
    /* ---- header: present in every ABI version ---- */
    uint32_t abi_major;      /* NMT_BACKEND_ABI_MAJOR the plugin was built with */
    uint32_t abi_minor;      /* NMT_BACKEND_ABI_MINOR the plugin was built with */
    size_t size;             /* sizeof(struct nmt_backend) the plugin was built with */
    const char *name;        /* short name, [a-z0-9_]+, e.g. "cpu", "cuda" */
    const char *description; /* one line, e.g. "OpenBLAS sgemm + threaded vectorised C" */

    /* Returns how well this plugin suits the machine: 0 = unusable here (no device, missing CPU
     * feature), higher is preferred by --backend auto (cpu: 10..19, accelerators: 100+). Must be
     * cheap and must not keep resources. After 0, last_error(NULL) says why in a line ("no NVIDIA
     * driver: ...", "no CUDA device: ..."), or is "" if the plugin does not say. */
    int (*score)(void);
    /* Opens a context with OPTS (NULL = defaults); returns it, or NULL with the reason readable via
     * last_error(NULL). */
    nmt_bctx *(*open)(const struct nmt_backend_opts *opts);
    /* Frees every buffer still allocated and the context; close(NULL) is a no-op. */
    void (*close)(nmt_bctx *ctx);
    /* Returns the text of the last error on CTX ("" if none); with CTX NULL, the last failed open()
     * or score() of 0 on this thread. Never NULL; valid until the next call on CTX. */
    const char *(*last_error)(nmt_bctx *ctx);
    /* Fills *OUT (host); returns 0 or negative. */
    int (*props)(nmt_bctx *ctx, struct nmt_backend_props *out);

    /* ---- memory ---- */
    /* Returns a device buffer of BYTES (> 0) bytes, aligned to 64 bytes, or NULL with the error set. */
    void *(*alloc)(nmt_bctx *ctx, size_t bytes);
    /* Frees a buffer returned by alloc (not an offset pointer into it); free(ctx, NULL) is a no-op. */
    void (*free)(nmt_bctx *ctx, void *buf);
    /* Copies BYTES from host SRC to device DST; 0 or negative. */
    int (*upload)(nmt_bctx *ctx, void *dst, const void *src, size_t bytes);
    /* Copies BYTES from device SRC to host DST after all earlier work; 0 or negative. */
    int (*download)(nmt_bctx *ctx, void *dst, const void *src, size_t bytes);
    /* Sets BYTES of device memory at DST to zero bits; 0 or negative. */
    int (*memset_zero)(nmt_bctx *ctx, void *dst, size_t bytes);
    /* Copies BYTES from device SRC to device DST (may not overlap); 0 or negative. */
    int (*copy)(nmt_bctx *ctx, void *dst, const void *src, size_t bytes);

    /* ---- matrix products ---- */
    /* C (M,N) = alpha * op(A) @ op(B) + beta * C, row-major, as cblas_sgemm(CblasRowMajor, ...):
     * op(A) is A (M,K) with lda >= K, or A^T when TRANSA (A stored (K,M), lda >= M); likewise op(B)
     * is B (K,N) ldb >= N, or B^T (B stored (N,K), ldb >= K) when TRANSB. ldc >= N. When beta == 0,
     * C is not read (it may hold NaN). M, N, K >= 0 (any zero: only the beta scaling of C happens).
     * A linear layer y = x W^T + b with W (out, in) is gemm(0, 1, N_rows, out, in, 1, x, in, W, in,
     * 0, y, out) then bias_add; its backward: dx = dy W (gemm 0,0), dW += dy^T x (gemm 1,0, beta 1),
     * db += column sums of dy (bias_grad). */
    int (*gemm)(nmt_bctx *ctx, int transA, int transB, int M, int N, int K, float alpha,
                const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
    /* out (M,N) += bias (N) broadcast over rows; 0 or negative. */
    int (*bias_add)(nmt_bctx *ctx, float *out, const float *bias, int M, int N);
    /* dbias (N) += column sums of dout (M,N); 0 or negative. */
    int (*bias_grad)(nmt_bctx *ctx, float *dbias, const float *dout, int M, int N);

    /* ---- embedding ---- */
    /* out (N,D) = emb[ids[n]] * scale + PE(pos[n]) for each row n; a row with pos[n] < 0 is a
     * padding row and is set to zeros (its id is not read). PE is the paper's sinusoid:
     * PE(p, 2i) = sin(p / 10000^(2i/D)), PE(p, 2i+1) = cos(p / 10000^(2i/D)); D even.
     * ids (N) in [0, V); pos (N) is the position of the token within its sentence (0-based).
     * Returns 0, or negative (cpu: id out of range, odd D). */
    int (*embedding_forward)(nmt_bctx *ctx, float *out, const int32_t *ids, const int32_t *pos,
                             const float *emb, int N, int D, int V, float scale);
    /* demb (V,D) += scale * dout[n] scattered to row ids[n], for rows with pos[n] >= 0. No gradient
     * flows to the positions. Deterministic (no dependence on thread count). */
    int (*embedding_backward)(nmt_bctx *ctx, float *demb, const float *dout, const int32_t *ids,
                              const int32_t *pos, int N, int D, int V, float scale);

    /* ---- attention (see struct nmt_attn_args) ---- */
    /* out (B,Tq,H,dh) strided; P (B,H,Tq,Tk) dense: the softmax probabilities before dropout, saved
     * for backward, or NULL when no backward will follow (inference). 0 or negative. */
    int (*attention_forward)(nmt_bctx *ctx, float *out, float *P, const float *q, const float *k,
                             const float *v, const struct nmt_attn_args *a);
    /* dq, dk, dv (assigned, with the strides of q, k, v) from dout and the P saved by forward with
     * the same args (same seed/offset). Only the dh-wide head columns are written, so dq/dk/dv may
     * be column blocks of one (N, 3D) buffer. 0 or negative. */
    int (*attention_backward)(nmt_bctx *ctx, float *dq, float *dk, float *dv, const float *dout,
                              const float *q, const float *k, const float *v, const float *P,
                              const struct nmt_attn_args *a);

    /* ---- layer norm ---- */
    /* out (N,D) = (x - mean) * rstd * gamma + beta per row, with the biased variance (as PyTorch):
     * rstd = 1/sqrt(var + eps). mean, rstd (N) are saved for backward, or NULL. out may alias x. */
    int (*layernorm_forward)(nmt_bctx *ctx, float *out, float *mean, float *rstd, const float *x,
                             const float *gamma, const float *beta, int N, int D, float eps);
    /* dx (N,D) assigned; dgamma, dbeta (D) accumulated; from dout, x and the saved mean/rstd.
     * dx may alias dout. */
    int (*layernorm_backward)(nmt_bctx *ctx, float *dx, float *dgamma, float *dbeta,
                              const float *dout, const float *x, const float *mean,
                              const float *rstd, const float *gamma, int N, int D);

    /* ---- elementwise (n elements; outputs may alias inputs) ---- */
    /* out = a + b (residual add). */
    int (*add)(nmt_bctx *ctx, float *out, const float *a, const float *b, size_t n);
    /* out = max(x, 0). */
    int (*relu_forward)(nmt_bctx *ctx, float *out, const float *x, size_t n);
    /* dx = dout where y > 0, else 0; Y is the forward output (or input: same sign). */
    int (*relu_backward)(nmt_bctx *ctx, float *dx, const float *dout, const float *y, size_t n);
    /* out = dropout(x): kept elements x / (1-p), others x * 0 (0 for finite x, as PyTorch's x * mask)
     * (see RANDOM NUMBERS); p in [0,1); p = 0 copies. out may alias x. */
    int (*dropout_forward)(nmt_bctx *ctx, float *out, const float *x, size_t n, float p,
                           uint64_t seed, uint64_t offset);
    /* dx = dout masked and scaled by the same mask as the forward with (p, seed, offset). */
    int (*dropout_backward)(nmt_bctx *ctx, float *dx, const float *dout, size_t n, float p,
                            uint64_t seed, uint64_t offset);

    /* ---- loss ---- */
    /* Softmax cross-entropy over V classes for each row of logits (N,V) with targets tgt (N) in
     * [0, V); rows whose target == pad_id are ignored. Per row, with lp = log_softmax(logits):
     *   loss = (1 - eps) * (-lp[tgt]) + (eps / V) * sum_c (-lp[c])
     * exactly PyTorch's F.cross_entropy(logits, tgt, ignore_index=pad_id, label_smoothing=eps,
     * reduction='sum'). Writes the sums to *RES (host). If DLOGITS (N,V) is not NULL, assigns the
     * gradient of the summed loss times GRAD_SCALE: grad_scale * (softmax - (1-eps)*onehot - eps/V),
     * zero rows for pad targets; DLOGITS may alias LOGITS (in place). If ROW_NLL (N) is not NULL it
     * receives -lp[tgt] per row (0 for pad rows), e.g. to score given sentence pairs. 0 or negative. */
    int (*cross_entropy)(nmt_bctx *ctx, struct nmt_xent_result *res, float *dlogits,
                         float *row_nll, const float *logits, const int32_t *tgt, int N, int V,
                         float eps, int pad_id, float grad_scale);

    /* ---- optimizer ---- */
    /* Adam (Kingma & Ba; torch.optim.Adam without weight decay) on n floats, step t >= 1:
     *   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     *   param -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
     * grad_scale carries gradient clipping (and 1/tokens normalisation if the host wants it). */
    int (*adam_update)(nmt_bctx *ctx, float *param, float *m, float *v, const float *grad,
                       size_t n, float lr, float beta1, float beta2, float eps, int64_t t,
                       float grad_scale);
    /* *OUT (host) = sum of x[i]^2 over n floats, accumulated in double, in a fixed order (the global
     * gradient norm is sqrt of it); 0 or negative. */
    int (*sumsq)(nmt_bctx *ctx, double *out, const float *x, size_t n);

    /* ---- decoding ---- */
    /* For each row of logits (N,V): the K largest log_softmax values, sorted descending (ties: lower
     * index first), into values (N,K) and their class indices into indices (N,K). 1 <= K <= V. */
    int (*topk_logsoftmax)(nmt_bctx *ctx, float *values, int32_t *indices, const float *logits,
                           int N, int V, int K);
    /* dst row i (ROW floats) = src row idx[i], for i < N: reorders beams of a key/value cache or of
     * any row-major tensor. idx (N) device ints in [0, rows of src). dst must not overlap src. */
    int (*gather_rows)(nmt_bctx *ctx, float *dst, const float *src, const int32_t *idx, int N,
                       int64_t row);

    /* ---- OPTIONAL (may be NULL) ---- */
    /* Row-invariant product for inference: C (M,N) = alpha * A (M,K) @ B^T + beta * C, row-major,
     * with A (M,K) lda >= K and B stored (N,K) ldb >= K (a linear layer's weight (out, in), i.e.
     * gemm with transA 0, transB 1); ldc >= N; beta == 0: C is not read. M, N, K >= 0.
     * Contract: the bits of output row i depend only on row i of A, on B, on row i of C and on
     * N, K, alpha, beta; never on M, on the other rows, on where row i sits in the batch, or on
     * the thread count. So a sentence decoded in a batch gets the same numbers as decoded alone.
     * (Results may differ in the last bits from gemm, and between a plugin's code paths for
     * different CPUs or devices.) The host uses gemm on fixed row blocks when this is absent. */
    int (*gemm_rowinv)(nmt_bctx *ctx, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                       int ldb, float beta, float *C, int ldc);

    /* ---- OPTIONAL (the three slots or none) ---- */
    /* Bytes of device memory that linear_pack needs for a weight of N rows by K columns (0 when
     * N or K is not positive). */
    size_t (*linear_packed_bytes)(nmt_bctx *ctx, int N, int K);
    /* Copies a linear layer's weight W (N,K) (device, row-major, ldw >= K: the layer's (out, in))
     * into DST (device, linear_packed_bytes(N, K) bytes, 64-byte aligned) in the backend's own layout
     * for linear_rowinv; the host packs each weight once and never reads DST. 0 or negative. */
    int (*linear_pack)(nmt_bctx *ctx, void *dst, const float *W, int N, int K, int ldw);
    /* Row-invariant linear layer for inference: C (M,N) = A (M,K) @ W^T + bias, then ReLU when relu
     * is non-zero; WP is W (N,K) as linear_pack (or linear_pack_q, below) left it, bias (N) or NULL, lda >= K, ldc >= N;
     * M, N, K >= 0. Contract as gemm_rowinv's: the bits of row i depend only on row i of A, on W,
     * bias, relu, N and K; never on M, the other rows or the thread count. Moreover the bits of
     * C[i][j] depend only on row i of A, row j of W, bias[j], relu and K, never on N or the other
     * columns (the vocabulary shortlist computes a sentence's columns inside a batch's). The result equals
     * gemm_rowinv + bias_add + relu_forward up to rounding, not bit for bit (the host uses those
     * when these slots are absent). */
    int (*linear_rowinv)(nmt_bctx *ctx, int M, int N, int K, const float *A, int lda, const void *Wp,
                         const float *bias, int relu, float *C, int ldc);

    /* ---- OPTIONAL, ABI 2.1 (both slots or none; they need the three above) ---- */
    /* Reduced-precision weights for linear_rowinv. Bytes of device memory that linear_pack_q needs
     * for a weight of N rows by K columns held in DTYPE (NMT_DTYPE_INT8, NMT_DTYPE_BF16, or
     * NMT_DTYPE_F32, which packs as linear_pack does); 0 when N or K is not positive, or when the
     * plugin cannot compute in DTYPE here (e.g. the CPU lacks the instructions), with the reason
     * readable via last_error. */
    size_t (*linear_packed_bytes_q)(nmt_bctx *ctx, int N, int K, uint32_t dtype);
    /* Copies W (N,K) (device, row-major, ldw >= K) into DST (linear_packed_bytes_q(N, K, DTYPE)
     * bytes, 64-byte aligned) in DTYPE; the packed copy records its precision, and linear_rowinv
     * computes with it. INT8: symmetric per output row j, scale s_j = max_k |W[j,k]| / 127 and
     * q = round-to-nearest-even(W * (127 / max_k |W[j,k]|)) in [-127, 127]; linear_rowinv then
     * quantises each row i of A the same way on a 12-bit grid (scale a_i = max_k |A[i,k]| / 2047,
     * values in [-2047, 2047]), sums the integer products exactly in 32 bits (so K <= 8192) and
     * returns sum * s_j * a_i + bias. So a row's result still depends only
     * on that row (the linear_rowinv contract holds), and it is the same on every code path of a
     * plugin. INT8A8 (ABI 2.8; a plugin may refuse it): the same weights, the rows of A on the
     * int8 grid instead (a_i = max_k |A[i,k]| / 127, values in [-127, 127]), the same exact sums
     * and epilogue: what 8-bit integer dot products (VNNI's vpdpbusd) compute fastest. INT8A7
     * (ABI 2.10; a plugin may refuse it): the same weights, the rows of A on a 7-bit grid (a_i =
     * max_k |A[i,k]| / 63, values in [-63, 63]), the same exact sums and epilogue: what AVX2's
     * vpmaddubsw multiplies exactly as unsigned bytes qA + 64, without saturating. BF16: W and each
     * row of A rounded to bfloat16 (to nearest even), products summed in float32 in a fixed order. 0 or negative (DTYPE not supported, bad shape, non-finite weight). */
    int (*linear_pack_q)(nmt_bctx *ctx, void *dst, const float *W, int N, int K, int ldw, uint32_t dtype);

    /* ---- OPTIONAL, ABI 2.2: attention without P (both slots or none) ---- */
    /* As attention_forward, but instead of the probabilities P (B,H,Tq,Tk) it saves two numbers per
     * query row r = (b*H + h)*Tq + i into LSE (B,H,Tq,2): lse[2r] = m, the row's largest visible
     * score, and lse[2r+1] = l, the sum over its visible keys of exp(score - m) (so the row's
     * log-sum-exp is m + log l); a row with no visible key gets (0, 0). Backward recomputes
     * P_ij = exp(score_ij - m) / l tile by tile, so no (Tq, Tk) tensor lives in device memory.
     * LSE may be NULL (inference). OUT and dropout exactly as attention_forward's (same counters,
     * and the same bits as attention_forward with P given, in the cpu plugin). 0 or negative. */
    int (*attention_forward_lse)(nmt_bctx *ctx, float *out, float *lse, const float *q, const float *k,
                                 const float *v, const struct nmt_attn_args *a);
    /* dq, dk, dv (assigned, with the strides of q, k, v, as attention_backward's) from dout, and
     * the OUT and LSE of attention_forward_lse with the same args (same seed/offset): the gradient
     * attention_backward computes from P, up to rounding (the cpu plugin: bit for bit, because it
     * recomputes P as its forward did). A backend may use dot_i = dO_i . O_i (equal to
     * sum_j P_ij dP_ij, dropout included). 0 or negative. */
    int (*attention_backward_lse)(nmt_bctx *ctx, float *dq, float *dk, float *dv, const float *dout,
                                  const float *out, const float *lse, const float *q, const float *k,
                                  const float *v, const struct nmt_attn_args *a);

    /* ---- OPTIONAL, ABI 2.2: reduced-precision matrix products (the three slots or none) ---- */
    /* Sets the precision of the products of gemm and gemm_ex on CTX from now on: NMT_DTYPE_F32 (the
     * default: float32 throughout) or NMT_DTYPE_BF16: both operands rounded to bfloat16 (to nearest
     * even), their products summed in float32 (or wider), alpha, beta and C float32 (mixed precision
     * as on tensor cores). Every other kernel stays float32. 0, or negative when the plugin cannot
     * compute in DTYPE (CTX keeps its precision). */
    int (*set_precision)(nmt_bctx *ctx, uint32_t dtype);
    /* DST (N elements of DST_DTYPE) = SRC (N elements of SRC_DTYPE) converted; F32 and BF16 either
     * way: F32 to BF16 rounds to nearest even (a NaN stays a NaN, infinities stay), BF16 to F32 is
     * exact, equal dtypes copy. DST must not overlap SRC. 0 or negative (another dtype). */
    int (*cast)(nmt_bctx *ctx, void *dst, uint32_t dst_dtype, const void *src, uint32_t src_dtype, size_t n);
    /* gemm (same arguments and contract) with A and B each in its own dtype, A_DTYPE and B_DTYPE
     * NMT_DTYPE_F32 or NMT_DTYPE_BF16, leading dimensions in elements; C float32. Products as
     * set_precision says: under BF16 a F32 operand is rounded to bfloat16 first; under F32 a BF16
     * operand is widened (exactly). Lets the host keep a bfloat16 copy of its weights (made by cast
     * after each optimizer step) instead of rounding them in every product. 0 or negative. */
    int (*gemm_ex)(nmt_bctx *ctx, int transA, int transB, int M, int N, int K, float alpha, const void *A,
                   uint32_t a_dtype, int lda, const void *B, uint32_t b_dtype, int ldb, float beta, float *C,
                   int ldc);

    /* ---- OPTIONAL, ABI 2.3: buffers read across contexts ---- */
    /* Whether CTX's kernels may read the buffers allocated on OWNER, another open context of this
     * plugin in this process (e.g. weights loaded and packed once for several decoding contexts):
     * 0 when they may (the cpu plugin: always), negative with the error set when not. After 0 the
     * host passes OWNER's buffers to CTX's kernels as inputs only, once OWNER's writes to them are
     * done (a download or a value-returning kernel on OWNER has waited for them), never writes them
     * again while CTX may read them, never frees them on CTX, and closes CTX before OWNER. */
    int (*share)(nmt_bctx *ctx, nmt_bctx *owner);

    /* ---- OPTIONAL, ABI 2.4: memory given back ---- */
    /* The BYTES bytes at P, inside one buffer from alloc on CTX, will not be read again before they
     * are written: the backend may give their memory back to the system (e.g. weights whose packed
     * copy is all that is read). Afterwards they read as unspecified values until written; writing
     * them is allowed (their memory comes back); the rest of the buffer keeps its contents. The cpu
     * plugin gives back the whole pages inside the range. 0, or negative with the error set. */
    int (*discard)(nmt_bctx *ctx, void *p, size_t bytes);

    /* ---- OPTIONAL, ABI 2.5: position tables and zero start embeddings (both slots or none) ---- */
    /* As embedding_forward, but the positions come from the table PE (device, (P, D) row-major, row p
     * the encoding of position p; pos[n] < P), computed by the host for the model's formula, and a row
     * with ids[n] < 0 (and pos[n] >= 0) gets a zero embedding: out[n] = PE(pos[n]) only. Rows with
     * pos[n] < 0 are padding (zeros). 0 or negative (cpu: id >= V, position past P). */
    int (*embedding_table_forward)(nmt_bctx *ctx, float *out, const int32_t *ids, const int32_t *pos,
                                   const float *emb, const float *pe, int N, int D, int V, int P, float scale);
    /* As embedding_backward, skipping the rows with ids[n] < 0 as well as those with pos[n] < 0. */
    int (*embedding_table_backward)(nmt_bctx *ctx, float *demb, const float *dout, const int32_t *ids,
                                    const int32_t *pos, int N, int D, int V, float scale);

    /* ---- OPTIONAL, ABI 2.5: the swish activation (both slots or none) ---- */
    /* out = x * sigmoid(x) = x / (1 + exp(-x)); out may alias x. */
    int (*swish_forward)(nmt_bctx *ctx, float *out, const float *x, size_t n);
    /* dx = dout * (s + x s (1 - s)), s = sigmoid(x), from the forward's INPUT x (not its output:
     * swish is not monotonic); dx may alias dout. */
    int (*swish_backward)(nmt_bctx *ctx, float *dx, const float *dout, const float *x, size_t n);

    /* ---- OPTIONAL, ABI 2.6: memory the host touches in part ---- */
    /* As alloc, for a buffer laid out for the largest of several uses, of which each use touches only
     * parts (the decoding arena): the backend backs it so that untouched parts cost no memory, without
     * rounding touched parts up to large pages (the cpu plugin: no transparent huge pages). Freed by
     * free. NULL with the error set. Without the slot the host uses alloc. */
    void *(*alloc_sparse)(nmt_bctx *ctx, size_t bytes);

    /* ---- OPTIONAL, ABI 2.7: the ranking of logits without their normalisation ---- */
    /* As topk_logsoftmax, with the K largest logits themselves as the values: the same indices in the
     * same order, without the log-sum-exp of each row (for a search that needs the ranking only).
     * Without the slot the host uses topk_logsoftmax. */
    int (*topk_logits)(nmt_bctx *ctx, float *values, int32_t *indices, const float *logits, int N, int V, int K);

    /* ---- OPTIONAL, ABI 2.8: attention whose keys each batch item names ---- */
    /* As attention_forward without P (inference), except that key and value j of batch item b are
     * read at k + rows[b * rows_ld + j] * k_bs + j * k_ld and v + rows[b * rows_ld + j] * v_bs +
     * j * v_ld (ROWS: device, int32, each entry a batch row in [0, B) or beyond B if the caller's
     * buffers hold more rows; k_ld and v_ld may be 0, the rows then naming each key's row alone),
     * where attention_forward reads row b: the results attention_forward gives on the keys and
     * values so gathered, bit for bit. Beam search reads each hypothesis's
     * self-attention cache through the rows of its ancestors, where without the slot it copies
     * the cache rows of every surviving hypothesis at each step (gather_rows); the cross-attention
     * of decoding reads each sentence's encoder keys and values where the encoder computed them,
     * where without the slot they are padded to the batch's longest source and copied when
     * sentences end. */
    int (*attention_forward_rows)(nmt_bctx *ctx, float *out, const float *q, const float *k, const float *v,
                                  const struct nmt_attn_args *a, const int32_t *rows, int64_t rows_ld);

    /* ---- OPTIONAL, ABI 2.9: the rows of a packed weight ---- */
    /* out[i*K .. i*K+K-1] (device, row-major) = row rows[i] of the weight W (N,K) that PACKED holds in
     * float32 (linear_pack, or linear_pack_q with NMT_DTYPE_F32), each value exactly as W had it, for
     * i < n; zeros for rows[i] < 0 (rows: device). The host reads an embedding tied to the output
     * projection through it, so the embedding's float32 copy need not stay in memory. 0, or negative
     * (PACKED not a float32 packed weight, rows[i] >= N). */
    int (*linear_rows)(nmt_bctx *ctx, float *out, const void *packed, const int32_t *rows, int n);

    /* ABI 2.10 adds no slot: linear_pack_q's NMT_DTYPE_INT8A7 (above). */
    /* New slots are appended here, bumping NMT_BACKEND_ABI_MINOR. */
};

/* The one exported symbol of a plugin. */
typedef const struct nmt_backend *(*nmt_backend_entry_fn)(void);
const struct nmt_backend *nmt_backend_entry(void);

/* The normative dropout RNG: a uniform float in [0, 1) from (seed, counter), a SplitMix64 finaliser
 * of the counter keyed by a finalised seed. Uses the top 24 bits, so values are multiples of 2^-24. */
static inline uint64_t nmt_rng_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static inline float nmt_rng_uniform(uint64_t seed, uint64_t counter)
{
    uint64_t z = nmt_rng_mix64(counter * 0x9E3779B97F4A7C15ULL + nmt_rng_mix64(seed + 0x632BE59BD9B4E019ULL));
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

#endif
