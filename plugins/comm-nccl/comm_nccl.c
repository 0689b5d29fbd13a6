/* comm_nccl.c: the NCCL device communication module (bin/nmt-comm-nccl.so, ABI in ../devcomm.h).
 * libnccl.so.2 (or $NMT_NCCL_LIBRARY) and the driver, libcuda.so.1, are opened with dlopen on the
 * first probe, so the module loads on any machine and says in one line what is missing. The driver
 * API gives the device's primary context (the one the cuda backend's runtime uses, so device
 * pointers are shared) and the module's stream; NCCL runs the collectives on that stream.
 *
 * UNVERIFIED ON A GPU: written against nccl.h and the driver API's documentation; on machines
 * without a GPU only the loading and the refusals are tested (tests/unit/test_gpu_comm.c).
 * tests/gpu/run_gpu_tests.sh runs it on a GPU machine. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "../devcomm.h"

/* The driver API's types and the few calls used (cuda.h's, without its versioning macros). */
typedef int cu_result;
typedef int cu_device;
typedef struct CUctx_st *cu_context;
#define CU_STREAM_NON_BLOCKING 1u

static struct {
    int loaded;
    void *nccl, *cuda;
    cu_result (*init)(unsigned);
    cu_result (*device_get_count)(int *);
    cu_result (*device_get)(cu_device *, int);
    cu_result (*primary_retain)(cu_context *, cu_device);
    cu_result (*primary_release)(cu_device);
    cu_result (*ctx_set_current)(cu_context);
    cu_result (*ctx_synchronize)(void);
    cu_result (*stream_create)(cudaStream_t *, unsigned);
    cu_result (*stream_synchronize)(cudaStream_t);
    cu_result (*stream_destroy)(cudaStream_t);
    cu_result (*error_string)(cu_result, const char **);
    __typeof__(ncclGetVersion) *get_version;
    __typeof__(ncclGetUniqueId) *get_unique_id;
    __typeof__(ncclCommInitRank) *comm_init_rank;
    __typeof__(ncclCommDestroy) *comm_destroy;
    __typeof__(ncclGetErrorString) *error;
    __typeof__(ncclAllGather) *all_gather;
    __typeof__(ncclAllReduce) *all_reduce;
    __typeof__(ncclSend) *send;
    __typeof__(ncclRecv) *recv;
    __typeof__(ncclGroupStart) *group_start;
    __typeof__(ncclGroupEnd) *group_end;
} lib;

struct nmt_dctx {
    ncclComm_t comm;
    cudaStream_t stream;
    cu_context pctx;
    cu_device dev;
    int rank, size;
    char err[512];
};

static _Thread_local char open_err[512];

static int seterr(char *buf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, 512, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *cu_str(cu_result rc)
{
    const char *s = NULL;
    if (lib.error_string && lib.error_string(rc, &s) == 0 && s)
        return s;
    return "unknown CUDA driver error";
}

/* Looks up NAME (or ALT, a versioned name) in H into *FN; 0 or -1 with the error in open_err. */
static int sym(void *h, const char *lib_name, const char *name, const char *alt, void *fn)
{
    void *p = alt ? dlsym(h, alt) : NULL;
    if (!p)
        p = dlsym(h, name);
    if (!p)
        return seterr(open_err, "%s has no %s (too old?)", lib_name, name);
    memcpy(fn, &p, sizeof p);
    return 0;
}

/* Opens libnccl and the driver and initialises the driver, once. 0, or -1 with open_err set. */
static int load(void)
{
    if (lib.loaded)
        return 0;
    const char *nccl = getenv("NMT_NCCL_LIBRARY");
    if (!nccl || !*nccl)
        nccl = "libnccl.so.2";
    if (!lib.nccl && !(lib.nccl = dlopen(nccl, RTLD_NOW | RTLD_LOCAL)))
        return seterr(open_err, "cannot load NCCL (%s); install libnccl2 or name it in NMT_NCCL_LIBRARY", dlerror());
    const char *n = "libnccl";
    if (sym(lib.nccl, n, "ncclGetVersion", NULL, &lib.get_version) < 0 ||
        sym(lib.nccl, n, "ncclGetUniqueId", NULL, &lib.get_unique_id) < 0 ||
        sym(lib.nccl, n, "ncclCommInitRank", NULL, &lib.comm_init_rank) < 0 ||
        sym(lib.nccl, n, "ncclCommDestroy", NULL, &lib.comm_destroy) < 0 ||
        sym(lib.nccl, n, "ncclGetErrorString", NULL, &lib.error) < 0 ||
        sym(lib.nccl, n, "ncclAllGather", NULL, &lib.all_gather) < 0 ||
        sym(lib.nccl, n, "ncclAllReduce", NULL, &lib.all_reduce) < 0 || sym(lib.nccl, n, "ncclSend", NULL, &lib.send) < 0 ||
        sym(lib.nccl, n, "ncclRecv", NULL, &lib.recv) < 0 ||
        sym(lib.nccl, n, "ncclGroupStart", NULL, &lib.group_start) < 0 ||
        sym(lib.nccl, n, "ncclGroupEnd", NULL, &lib.group_end) < 0)
        return -1;
    if (!lib.cuda && !(lib.cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)))
        return seterr(open_err, "no NVIDIA driver: %s", dlerror());
    const char *d = "libcuda.so.1";
    if (sym(lib.cuda, d, "cuInit", NULL, &lib.init) < 0 || sym(lib.cuda, d, "cuGetErrorString", NULL, &lib.error_string) < 0 ||
        sym(lib.cuda, d, "cuDeviceGetCount", NULL, &lib.device_get_count) < 0 ||
        sym(lib.cuda, d, "cuDeviceGet", NULL, &lib.device_get) < 0 ||
        sym(lib.cuda, d, "cuDevicePrimaryCtxRetain", NULL, &lib.primary_retain) < 0 ||
        sym(lib.cuda, d, "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2", &lib.primary_release) < 0 ||
        sym(lib.cuda, d, "cuCtxSetCurrent", NULL, &lib.ctx_set_current) < 0 ||
        sym(lib.cuda, d, "cuCtxSynchronize", NULL, &lib.ctx_synchronize) < 0 ||
        sym(lib.cuda, d, "cuStreamCreate", NULL, &lib.stream_create) < 0 ||
        sym(lib.cuda, d, "cuStreamSynchronize", NULL, &lib.stream_synchronize) < 0 ||
        sym(lib.cuda, d, "cuStreamDestroy", "cuStreamDestroy_v2", &lib.stream_destroy) < 0)
        return -1;
    cu_result rc = lib.init(0);
    if (rc != 0)
        return seterr(open_err, "no CUDA device: cuInit: %s", cu_str(rc));
    lib.loaded = 1;
    return 0;
}

static int dev_probe(int device)
{
    if (load() < 0)
        return -1;
    int n = 0;
    cu_result rc = lib.device_get_count(&n);
    if (rc != 0)
        return seterr(open_err, "no CUDA device: cuDeviceGetCount: %s", cu_str(rc));
    if (n == 0)
        return seterr(open_err, "no CUDA device: the driver found none");
    if (device < 0 || device >= n)
        return seterr(open_err, "cuda device %d does not exist (%d device%s found)", device, n, n == 1 ? "" : "s");
    return 0;
}

static int dev_unique_id(void *id, size_t cap, size_t *len)
{
    if (load() < 0)
        return -1;
    ncclUniqueId u;
    if (cap < sizeof u)
        return seterr(open_err, "room for %zu bytes of NCCL id, %zu needed", cap, sizeof u);
    ncclResult_t rc = lib.get_unique_id(&u);
    if (rc != ncclSuccess)
        return seterr(open_err, "ncclGetUniqueId: %s", lib.error(rc));
    memcpy(id, &u, sizeof u);
    *len = sizeof u;
    return 0;
}

static void dev_close(nmt_dctx *c)
{
    if (!c)
        return;
    if (c->comm)
        lib.comm_destroy(c->comm);
    if (c->stream)
        lib.stream_destroy(c->stream);
    if (c->pctx)
        lib.primary_release(c->dev);
    free(c);
}

static nmt_dctx *dev_open(const void *id, size_t len, int rank, int size, int device)
{
    ncclUniqueId u;
    if (dev_probe(device) < 0)
        return NULL;
    if (len != sizeof u)
        return seterr(open_err, "an NCCL id has %zu bytes, not %zu", sizeof u, len), NULL;
    memcpy(&u, id, sizeof u);
    nmt_dctx *c = calloc(1, sizeof *c);
    if (!c)
        return seterr(open_err, "out of memory"), NULL;
    c->rank = rank, c->size = size;
    cu_result rc = lib.device_get(&c->dev, device);
    if (rc == 0 && (rc = lib.primary_retain(&c->pctx, c->dev)) != 0)
        c->pctx = NULL;
    if (rc == 0)
        rc = lib.ctx_set_current(c->pctx);
    if (rc == 0 && (rc = lib.stream_create(&c->stream, CU_STREAM_NON_BLOCKING)) != 0)
        c->stream = NULL;
    if (rc != 0) {
        seterr(open_err, "cuda device %d: %s", device, cu_str(rc));
        dev_close(c);
        return NULL;
    }
    ncclResult_t nr = lib.comm_init_rank(&c->comm, size, u, rank);
    if (nr != ncclSuccess) {
        c->comm = NULL;
        seterr(open_err, "ncclCommInitRank (rank %d of %d, device %d): %s", rank, size, device, lib.error(nr));
        dev_close(c);
        return NULL;
    }
    return c;
}

static const char *dev_last_error(nmt_dctx *c) { return c ? c->err : open_err; }

/* Before a collective: the device's queued work (the backend's stream) has completed. */
static int begin(nmt_dctx *c, const char *what)
{
    cu_result rc = lib.ctx_set_current(c->pctx);
    if (rc == 0)
        rc = lib.ctx_synchronize();
    return rc == 0 ? 0 : seterr(c->err, "%s: waiting for the device: %s", what, cu_str(rc));
}

/* After a collective queued with result NR: waits for it. */
static int end(nmt_dctx *c, ncclResult_t nr, const char *what)
{
    if (nr != ncclSuccess)
        return seterr(c->err, "%s: %s", what, lib.error(nr));
    cu_result rc = lib.stream_synchronize(c->stream);
    return rc == 0 ? 0 : seterr(c->err, "%s: %s", what, cu_str(rc));
}

static int dev_alltoall(nmt_dctx *c, const void *send, void *recv, size_t bytes)
{
    if (begin(c, "ncclSend/ncclRecv") < 0)
        return -1;
    ncclResult_t nr = lib.group_start();
    for (int j = 0; nr == ncclSuccess && j < c->size; j++) {
        nr = lib.send((const char *)send + (size_t)j * bytes, bytes, ncclInt8, j, c->comm, c->stream);
        if (nr == ncclSuccess)
            nr = lib.recv((char *)recv + (size_t)j * bytes, bytes, ncclInt8, j, c->comm, c->stream);
    }
    ncclResult_t ge = lib.group_end();
    return end(c, nr != ncclSuccess ? nr : ge, "all-to-all (ncclSend/ncclRecv)");
}

static int dev_allgather(nmt_dctx *c, const void *send, void *recv, size_t bytes)
{
    if (begin(c, "ncclAllGather") < 0)
        return -1;
    return end(c, lib.all_gather(send, recv, bytes, ncclInt8, c->comm, c->stream), "ncclAllGather");
}

static int dev_allreduce_f32(nmt_dctx *c, float *buf, size_t n)
{
    if (begin(c, "ncclAllReduce") < 0)
        return -1;
    return end(c, lib.all_reduce(buf, buf, n, ncclFloat32, ncclSum, c->comm, c->stream), "ncclAllReduce");
}

static struct nmt_devcomm table = {
    .abi_major = NMT_DEVCOMM_ABI_MAJOR,
    .abi_minor = NMT_DEVCOMM_ABI_MINOR,
    .name = "nccl",
    .description = "NCCL (libnccl.so.2, opened at run time)",
    .probe = dev_probe,
    .unique_id = dev_unique_id,
    .open = dev_open,
    .close = dev_close,
    .last_error = dev_last_error,
    .alltoall = dev_alltoall,
    .allgather = dev_allgather,
    .allreduce_f32 = dev_allreduce_f32,
};

__attribute__((visibility("default"))) const struct nmt_devcomm *nmt_devcomm_entry(void)
{
    static char desc[96];
    int v = 0;
    if (lib.get_version && lib.get_version(&v) == ncclSuccess && v) {
        snprintf(desc, sizeof desc, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
        table.description = desc;
    }
    return &table;
}
