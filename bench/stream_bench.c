/* stream_bench: GF/s of linear_rowinv as a decoder step uses it, each weight read once a step: the
 * weights of LAYERS decoder layers of the BASE model (d 512, ff 2048: the self-attention's 1536 and
 * 512 columns, the cross-attention's two of 512, the feed-forward's 2048 and 512) and the output
 * projection (8000 columns), packed once in PRECISION, swept in turn for M rows, so that each
 * comes from memory (or the last-level cache, where they fit), as they do in nmt-decode, not from
 * the L2 cache as in rowinv_bench. M is the number of rows of a step (sentences of a greedy batch).
 * Usage: stream_bench [BACKEND [THREADS [float32|int8|int8-a8|int8-a7 [LAYERS]]]]   (defaults: cpu, 1,
 * float32, 6) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "run/backend_loader.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    struct nmt_backend_opts o = {.size = sizeof o, .threads = argc > 2 ? atoi(argv[2]) : 1};
    struct backend *be = backend_open(argc > 1 ? argv[1] : "cpu", &o);
    if (!be) {
        fprintf(stderr, "stream_bench: %s\n", nmt_errmsg());
        return 1;
    }
    const struct nmt_backend *k = &be->ops;
    const char *prec = argc > 3 ? argv[3] : "float32";
    uint32_t dtype = !strcmp(prec, "int8") ? NMT_DTYPE_INT8 : !strcmp(prec, "int8-a8") ? NMT_DTYPE_INT8A8
                     : !strcmp(prec, "int8-a7") ? NMT_DTYPE_INT8A7 : NMT_DTYPE_F32;
    int layers = argc > 4 ? atoi(argv[4]) : 6;
    if (!k->linear_rowinv || !k->linear_packed_bytes_q || !k->linear_pack_q || layers < 1 || layers > 64) {
        fprintf(stderr, "stream_bench: backend %s lacks linear_pack_q, or LAYERS outside 1..64\n", k->name);
        return 1;
    }
    static const int layer_nk[][2] = {{1536, 512}, {512, 512}, {512, 512}, {512, 512}, {2048, 512}, {512, 2048}};
    int nw = layers * 6 + 1, maxn = 8000, maxk = 2048;
    int(*nk)[2] = malloc((size_t)nw * sizeof *nk);
    void **wp = malloc((size_t)nw * sizeof *wp);
    float *h = malloc((size_t)maxn * maxk * sizeof *h);
    float *W = k->alloc(be->ctx, (size_t)maxn * maxk * sizeof(float));
    float *A = k->alloc(be->ctx, (size_t)256 * maxk * sizeof(float));
    float *C = k->alloc(be->ctx, (size_t)256 * maxn * sizeof(float));
    if (!nk || !wp || !h || !W || !A || !C)
        return fprintf(stderr, "stream_bench: out of memory\n"), 1;
    for (size_t i = 0; i < (size_t)maxn * maxk; i++)
        h[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    k->upload(be->ctx, A, h, (size_t)256 * maxk * sizeof *h);
    double bytes = 0, flop_row = 0;
    for (int w = 0; w < nw; w++) {
        nk[w][0] = w == nw - 1 ? 8000 : layer_nk[w % 6][0];
        nk[w][1] = w == nw - 1 ? 512 : layer_nk[w % 6][1];
        size_t n = (size_t)nk[w][0] * (size_t)nk[w][1];
        k->upload(be->ctx, W, h + w * 4099 % 1000, n * sizeof *h);
        size_t b = k->linear_packed_bytes_q(be->ctx, nk[w][0], nk[w][1], dtype);
        wp[w] = b ? k->alloc(be->ctx, b) : NULL;
        if (!wp[w] || k->linear_pack_q(be->ctx, wp[w], W, nk[w][0], nk[w][1], nk[w][1], dtype) < 0)
            return fprintf(stderr, "stream_bench: %s\n", k->last_error(be->ctx)), 1;
        bytes += (double)b;
        flop_row += 2.0 * (double)n;
    }
    printf("%s, %d thread(s), %s, %d layers + output: %.1f MB of packed weights a step\n", k->name, o.threads, prec,
           layers, bytes / 1e6);
    printf("%5s %10s %10s\n", "M", "GF/s", "ms/step");
    static const int Ms[] = {1, 4, 8, 16, 32, 64, 128};
    for (size_t m = 0; m < sizeof Ms / sizeof Ms[0]; m++) {
        int M = Ms[m], steps = 0;
        double t0 = now(), t;
        do {
            for (int w = 0; w < nw; w++)
                if (k->linear_rowinv(be->ctx, M, nk[w][0], nk[w][1], A, nk[w][1], wp[w], NULL, 0, C, nk[w][0]) < 0)
                    return fprintf(stderr, "stream_bench: %s\n", k->last_error(be->ctx)), 1;
            steps++;
        } while ((t = now() - t0) < 1.0);
        float last;
        k->download(be->ctx, &last, C, sizeof last); /* waits for queued work */
        t = now() - t0;
        printf("%5d %10.1f %10.2f\n", M, flop_row * M * steps / t * 1e-9, t / steps * 1e3);
        fflush(stdout);
    }
    for (int w = 0; w < nw; w++)
        k->free(be->ctx, wp[w]);
    k->free(be->ctx, W);
    k->free(be->ctx, A);
    k->free(be->ctx, C);
    free(h);
    free(wp);
    free(nk);
    backend_close(be);
    return 0;
}
