/* nccl_open: starts a one-rank NCCL job through run/gpu_comm.h, as nmt-train does, and says how it
 * went, for tests/bats/nccl.bats:
 *   nccl_open [DEVICE]   prints "started: DESCRIPTION" (exit 0), or the error line (exit 1) */
#include <stdio.h>
#include <stdlib.h>

#include "base/util.h"
#include "run/gpu_comm.h"

int main(int argc, char **argv)
{
    int device = argc > 1 ? atoi(argv[1]) : 0;
    struct gpu_comm *g = NULL;
    if (gpu_comm_open(NULL, device, &g) < 0) {
        printf("%s\n", nmt_errmsg());
        return 1;
    }
    printf("started: %s, rank %d of %d\n", gpu_comm_description(g), gpu_comm_rank(g), gpu_comm_size(g));
    gpu_comm_close(g);
    return 0;
}
