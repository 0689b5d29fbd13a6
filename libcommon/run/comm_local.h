/* comm_local.h: the ranks of a job on one machine without MPI: processes forked from the caller,
 * whose collectives move bytes through one shared memory area, a socket pair between rank 0 and
 * each other rank marking the turns (a rank that ends closes its socket, so the others fail rather
 * than wait). The table has the slots of plugins/comm.h (ABI 1.0: no non-blocking collectives), is built
 * into the programs rather than loaded, and is reached through run/ranks.h (comm_open_local). */
#ifndef NMT_COMM_LOCAL_H
#define NMT_COMM_LOCAL_H

#include "../../plugins/comm.h"

/* The table (its open slot fails: comm_local_fork starts the job). */
const struct nmt_comm *comm_local_table(void);
/* Forks N - 1 copies of the calling process (2 <= N <= 256); returns in every rank, rank 0 being the
 * caller, with its context, or NULL with *ERR set (static text) when nothing could be started (the
 * children already forked are ended). Call it before the process starts any thread. Each child
 * ends when rank 0 does (a parent-death signal). */
nmt_cctx *comm_local_fork(int n, const char **err);
/* Leaves the job: in rank 0, waits for the other ranks to end; 0, or -1 when one of them ended with
 * a non-zero status or a signal (the reason in *WHY, of WHY_LEN bytes). Frees CTX. */
int comm_local_close(nmt_cctx *ctx, char *why, size_t why_len);

#endif
