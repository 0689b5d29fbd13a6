/* rowinv_bench: GFLOP/s of the products of decoding (C = A W^T, A (M,K) activations, W (N,K) a
 * weight) at the SMALL model's shapes, four ways through a backend plugin: gemm on all M rows
 * (OpenBLAS: fast, not row-invariant), gemm on blocks of 8 rows (the host's row-invariant
 * fallback), gemm_rowinv (the row-invariant slot of ABI 1.1) and linear_rowinv on the weight
 * packed once by linear_pack (ABI 1.2, what nmt-decode uses), with the ratios of the two
 * row-invariant slots to the full gemm; and, where the backend has linear_pack_q (ABI 2.1),
 * linear_rowinv on the weight packed in int8 (nmt-decode --precision int8; its "GF/s" count the
 * same 2MNK operations), with its ratio to the float32 linear_rowinv.
 * Usage: rowinv_bench [BACKEND [THREADS [tiny|base|small [int8|int8-a8|int8-a7]]]]   (defaults: cpu, 2, small,
 * int8; tiny: the TINY model's shapes, d 128, ff 256, a vocabulary of 8000; base: the BASE model's,
 * d 512, ff 2048; int8-a8: the int8 column with 8-bit activations, --precision int8-a8) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "run/backend_loader.h"
#include "cli/cli.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Mode 0: gemm on M rows; 1: gemm on 8-row blocks (M a multiple of 8 here); 2: gemm_rowinv;
 * 3: linear_rowinv on WP, W packed; 4: linear_rowinv on WQ, W packed in int8. */
static int run(struct backend *be, int mode, int M, int N, int K, const float *A, const float *W, const void *Wp,
               const void *Wq, float *C)
{
    const struct nmt_backend *k = &be->ops;
    if (mode == 0)
        return k->gemm(be->ctx, 0, 1, M, N, K, 1, A, K, W, K, 0, C, N);
    if (mode == 1) {
        for (int r = 0; r < M; r += 8)
            if (k->gemm(be->ctx, 0, 1, 8, N, K, 1, A + (size_t)r * K, K, W, K, 0, C + (size_t)r * N, N) < 0)
                return -1;
        return 0;
    }
    if (mode == 2)
        return k->gemm_rowinv(be->ctx, M, N, K, 1, A, K, W, K, 0, C, N);
    return k->linear_rowinv(be->ctx, M, N, K, A, K, mode == 3 ? Wp : Wq, NULL, 0, C, N);
}

int main(int argc, char **argv)
{
    struct nmt_backend_opts o = { .size = sizeof o, .threads = argc > 2 ? atoi(argv[2]) : 2 };
    struct backend *be = backend_open(argc > 1 ? argv[1] : "cpu", &o);
    if (!be) {
        fprintf(stderr, "rowinv_bench: %s\n", nmt_errmsg());
        return 1;
    }
    if (!be->ops.gemm_rowinv || !be->ops.linear_rowinv) {
        fprintf(stderr, "rowinv_bench: backend %s lacks gemm_rowinv or linear_rowinv\n", be->ops.name);
        return 1;
    }
    static const int Ms[] = { 8, 32, 64, 128, 256 };
    static const int small[][2] = { { 256, 256 }, { 768, 256 }, { 1024, 256 }, { 256, 1024 }, { 8000, 256 } };
    static const int tiny[][2] = { { 128, 128 }, { 384, 128 }, { 256, 128 }, { 128, 256 }, { 8000, 128 } };
    static const int base[][2] = { { 512, 512 }, { 1536, 512 }, { 2048, 512 }, { 512, 2048 }, { 8000, 512 } };
    const int(*NK)[2] = argc > 3 && !strcmp(argv[3], "tiny") ? tiny : argc > 3 && !strcmp(argv[3], "base") ? base : small;
    int q = be->ops.linear_packed_bytes_q && be->ops.linear_pack_q; /* int8 too */
    uint32_t qtype = argc > 4 && !strcmp(argv[4], "int8-a8")   ? NMT_DTYPE_INT8A8
                     : argc > 4 && !strcmp(argv[4], "int8-a7") ? NMT_DTYPE_INT8A7
                                                               : NMT_DTYPE_INT8;
    printf("%5s %5s %5s %12s %12s %12s %12s %8s %8s %12s %10s\n", "M", "N", "K", "gemm GF/s", "8-row GF/s",
           "rowinv GF/s", "linear GF/s", "ratio", "ratio", "int8 GF/s", "int8/lin");
    for (size_t s = 0; s < sizeof small / sizeof small[0]; s++)
        for (size_t m = 0; m < sizeof Ms / sizeof Ms[0]; m++) {
            int M = Ms[m], N = NK[s][0], K = NK[s][1];
            float *A = be->ops.alloc(be->ctx, (size_t)M * K * sizeof(float));
            float *W = be->ops.alloc(be->ctx, (size_t)N * K * sizeof(float));
            float *C = be->ops.alloc(be->ctx, (size_t)M * N * sizeof(float));
            size_t rows = (size_t)(M > N ? M : N); /* h fills both W (N rows) and A (M rows) */
            float *h = malloc(rows * K * sizeof *h);
            for (size_t i = 0; i < rows * K; i++)
                h[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
            be->ops.upload(be->ctx, W, h, (size_t)N * K * sizeof *h);
            be->ops.upload(be->ctx, A, h, (size_t)M * K * sizeof *h);
            void *Wp = be->ops.alloc(be->ctx, be->ops.linear_packed_bytes(be->ctx, N, K));
            be->ops.linear_pack(be->ctx, Wp, W, N, K, K);
            void *Wq = q ? be->ops.alloc(be->ctx, be->ops.linear_packed_bytes_q(be->ctx, N, K, qtype)) : NULL;
            if (Wq)
                be->ops.linear_pack_q(be->ctx, Wq, W, N, K, K, qtype);
            double gf[5] = { 0 };
            for (int mode = 0; mode < (Wq ? 5 : 4); mode++) {
                double flop = 2.0 * M * N * K, t0, t;
                int reps = 0;
                run(be, mode, M, N, K, A, W, Wp, Wq, C);
                t0 = now();
                do {
                    run(be, mode, M, N, K, A, W, Wp, Wq, C);
                    reps++;
                } while ((t = now() - t0) < 0.2);
                float last;
                be->ops.download(be->ctx, &last, C, sizeof last); /* waits for the queued products */
                t = now() - t0;
                gf[mode] = flop * reps / t * 1e-9;
            }
            printf("%5d %5d %5d %12.1f %12.1f %12.1f %12.1f %8.2f %8.2f %12.1f %10.2f\n", M, N, K, gf[0], gf[1], gf[2],
                   gf[3], gf[2] / gf[0], gf[3] / gf[0], gf[4], gf[4] / gf[3]);
            fflush(stdout);
            free(h);
            be->ops.free(be->ctx, A);
            be->ops.free(be->ctx, W);
            be->ops.free(be->ctx, Wp);
            be->ops.free(be->ctx, Wq);
            be->ops.free(be->ctx, C);
        }
    backend_close(be);
    return 0;
}
