/* test_gpu_comm: the host side of GPU ranks (run/gpu_comm.h) without a GPU: which gradient path a
 * run takes (cuda under several ranks: NCCL; cpu: MPI; asked NCCL without cuda: refused), and the
 * ordered device sum run on the cpu backend as one rank, bit for bit the host's ordered sum
 * (run/ranks.h comm_sum) and the sequential sum. The module's refusals are in tests/bats/nccl.bats. */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "run/backend_loader.h"
#include "run/gpu_comm.h"
#include "run/ranks.h"
#include "test.h"

static void test_choose(void)
{
    const char *s;
    test_ok((s = gpu_comm_choose(NULL, "cuda", 2)) && !strcmp(s, "nccl"), "auto: cuda with 2 ranks takes NCCL");
    test_ok((s = gpu_comm_choose("auto", "cuda", 8)) && !strcmp(s, "nccl"), "auto: cuda with 8 ranks takes NCCL");
    test_ok((s = gpu_comm_choose("auto", "cuda", 1)) && !strcmp(s, "mpi"), "auto: one cuda process needs no NCCL");
    test_ok((s = gpu_comm_choose(NULL, "cpu", 4)) && !strcmp(s, "mpi"), "auto: cpu ranks take MPI");
    test_ok((s = gpu_comm_choose("mpi", "cuda", 4)) && !strcmp(s, "mpi"), "mpi asked: host copies even on cuda");
    test_ok((s = gpu_comm_choose("nccl", "cuda", 1)) && !strcmp(s, "nccl"), "nccl asked: one rank too");
    test_ok(gpu_comm_choose("nccl", "cpu", 2) == NULL && strstr(nmt_errmsg(), "needs --backend cuda, not cpu"),
            "nccl with the cpu backend is refused: %s", nmt_errmsg());
    test_ok(gpu_comm_choose("gloo", "cuda", 2) == NULL && strstr(nmt_errmsg(), "unknown GPU communication 'gloo'"),
            "an unknown name is refused: %s", nmt_errmsg());
}

static void test_device_sum(struct backend *be)
{
    enum { N = 1003, ROUNDS = 4 };
    struct gpu_sum gs;
    struct comm_sum hs;
    float *x = malloc(N * sizeof *x), *ref = malloc(N * sizeof *ref), *host = malloc(N * sizeof *host),
          *dev_out = malloc(N * sizeof *dev_out);
    float *dx = be->ops.alloc(be->ctx, N * sizeof(float)), *dout = be->ops.alloc(be->ctx, N * sizeof(float));
    test_ok(gpu_sum_init(&gs, NULL, be, N) == 0 && comm_sum_init(&hs, NULL, N, NULL, 0) == 0 && gs.slice == N,
            "a one-rank device sum on the cpu backend");
    unsigned seed = 99;
    int ok = 1;
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < N; i++) {
            seed = seed * 1103515245u + 12345u;
            x[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * (float)(1 << (round * 4));
            ref[i] = round == 0 ? x[i] : ref[i] + x[i];
        }
        ok &= be->ops.upload(be->ctx, dx, x, N * sizeof *x) == 0 && gpu_sum_add(&gs, NULL, dx, 1) == 0 &&
              comm_sum_add(&hs, NULL, x, 1) == 0;
    }
    ok &= gpu_sum_add(&gs, NULL, dx, 0) == 0; /* a round without micro-batches adds nothing */
    ok &= gpu_sum_result(&gs, NULL, dout) == 0 && be->ops.download(be->ctx, dev_out, dout, N * sizeof *dout) == 0 &&
          comm_sum_result(&hs, NULL, host) == 0;
    test_ok(ok, "4 rounds added and read back");
    test_ok(!memcmp(dev_out, ref, N * sizeof *ref) && !memcmp(dev_out, host, N * sizeof *host),
            "the device sum has the bits of the sequential sum and of the host's ordered sum");
    gpu_sum_reset(&gs);
    test_ok(gpu_sum_result(&gs, NULL, dout) == 0 && be->ops.download(be->ctx, dev_out, dout, N * sizeof *dout) == 0 &&
                dev_out[0] == 0 && dev_out[N - 1] == 0,
            "after a reset, an empty sum is zero");
    test_ok(gpu_comm_allreduce_f32(NULL, dout, N) == 0 && gpu_comm_size(NULL) == 1 && gpu_comm_rank(NULL) == 0 &&
                !strcmp(gpu_comm_description(NULL), ""),
            "one rank: all-reduce leaves the buffer, rank 0 of 1");
    gpu_sum_free(&gs);
    gpu_sum_free(&gs); /* freeing twice is harmless */
    comm_sum_free(&hs);
    be->ops.free(be->ctx, dx);
    be->ops.free(be->ctx, dout);
    free(x);
    free(ref);
    free(host);
    free(dev_out);
}

int main(void)
{
    test_choose();
    struct nmt_backend_opts o = {sizeof o, 1, 0};
    struct backend *be = backend_open("cpu", &o);
    test_ok(be != NULL, "cpu backend loads: %s", be ? "" : nmt_errmsg());
    if (be)
        test_device_sum(be);
    backend_close(be);
    return test_done();
}
