/* nmt-backends: lists the compute backend plugins found on the search path, or loads one. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "run/backend_loader.h"
#include "cli/cli.h"
#include "cli/opt.h"

struct args {
    const char *spec;
    int threads;
};

#define OFF(field) offsetof(struct args, field)
static const struct opt_spec OPTIONS[] = {
    {OPTION(OT_STR, "backend", 0, "SPEC", OFF(spec),
            "load and open SPEC (a name such as cpu, a path to a .so, or auto)\n"
            "and print its properties; exit 1 if it is refused")},
    {OPTION(OT_INT, "threads", 0, "N", OFF(threads), "worker threads for --backend (default: all cores)"),
     .imin = 0, .imax = 1024},
    OPT_HELP_VERSION_END};

static const char USAGE_HEAD[] =
    "Usage: nmt-backends [OPTION]...\n"
    "List the compute backend plugins found (name, score, ABI, path, status) and the one\n"
    "that would be used by default; or load one backend and print its properties.\n"
    "\n";
static const char USAGE_TAIL[] =
    "\n"
    "Plugins are searched in $NMT_PLUGIN_PATH, then the installed plugin directory, then the\n"
    "directory of this program. $NMT_BACKEND names the default backend (else auto).\n";

static int show_one(const char *spec, int threads)
{
    struct nmt_backend_opts opts = { .size = sizeof opts, .threads = threads };
    struct backend *be = backend_open(spec, &opts);
    if (!be) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    struct nmt_backend_props p;
    if (be->ops.props(be->ctx, &p) < 0) {
        nmt_error("backend '%s': cannot read properties: %s", be->path, be->ops.last_error(be->ctx));
        backend_close(be);
        return NMT_EXIT_DATA;
    }
    printf("name\t%s\npath\t%s\nabi\t%u.%u\nscore\t%d\ndescription\t%s\ndevice\t%s\nmemory\t%llu\n", be->ops.name,
           be->path, be->ops.abi_major, be->ops.abi_minor, be->score, be->ops.description ? be->ops.description : "",
           p.device, (unsigned long long)p.memory_bytes);
    printf("dtypes\t%s%s%s\n", p.dtypes & NMT_DTYPE_F32 ? "f32" : "", p.dtypes & NMT_DTYPE_F16 ? " f16" : "",
           p.dtypes & NMT_DTYPE_BF16 ? " bf16" : "");
    backend_close(be);
    return NMT_EXIT_OK;
}

static int list_all(void)
{
    struct backend_info *list;
    int n = backend_list(&list);
    if (n < 0) {
        nmt_error("cannot list backends: %s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    printf("NAME\tSCORE\tABI\tPATH\tSTATUS\n");
    for (int i = 0; i < n; i++) {
        if (list[i].error)
            printf("%s\t-\t-\t%s\t%s\n", list[i].name, list[i].path, list[i].error);
        else
            printf("%s\t%d\t%u.%u\t%s\t%s%s\n", list[i].name, list[i].score, list[i].abi_major, list[i].abi_minor,
                   list[i].path, list[i].score > 0 ? "ok" : "unusable here: ",
                   list[i].score > 0 ? "" : list[i].reason ? list[i].reason : "it scores 0");
    }
    backend_list_free(list, n);
    struct nmt_backend_opts opts = { .size = sizeof opts, .threads = 1 };
    struct backend *be = backend_open(NULL, &opts);
    if (be)
        printf("default: %s (%s)\n", be->ops.name, be->path);
    else
        printf("default: none (%s)\n", nmt_errmsg());
    backend_close(be);
    return NMT_EXIT_OK;
}

int main(int argc, char **argv)
{
    nmt_start(argv);
    struct args a = {0};
    int parsed = opt_parse_tool(OPTIONS, argc, argv, &a, USAGE_HEAD, USAGE_TAIL);
    if (parsed != OPT_PROCEED)
        return parsed;
    const char *spec = a.spec;
    int threads = a.threads;
    if (optind < argc)
        return nmt_usage_error("unexpected argument '%s'", argv[optind]);
    int rc = spec ? show_one(spec, threads) : list_all();
    if (nmt_close_stdout() < 0) {
        nmt_error("cannot write stdout: %s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    return rc;
}
