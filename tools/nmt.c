/* nmt: dispatcher. "nmt NAME ARGS" runs nmt-NAME ARGS, found beside this executable or on PATH. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/opt.h"

/* Directory of the running executable into BUF; returns 0 or -1. */
static int exe_dir(char *buf, size_t size)
{
    ssize_t n = readlink("/proc/self/exe", buf, size - 1);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Collects the nmt-* tool names in DIR into LIST (no duplicates). */
static void scan_dir(const char *dir, char **list, size_t *n, size_t max)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && *n < max) {
        if (strncmp(e->d_name, "nmt-", 4) != 0 || strchr(e->d_name, '.'))
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (access(path, X_OK) != 0)
            continue;
        int dup = 0;
        for (size_t i = 0; i < *n; i++)
            dup |= strcmp(list[i], e->d_name + 4) == 0;
        if (!dup)
            list[(*n)++] = strdup(e->d_name + 4);
    }
    closedir(d);
}

struct args {
    int backends;
};

static const struct opt_spec OPTIONS[] = {
    {OPTION(OT_HELP, "help", 'h', NULL, 0, "show this help and the commands found, and exit")},
    {OPTION(OT_VERSION, "version", 0, NULL, 0, "show version information and exit")},
    {OPTION(OT_FLAG, "backends", 0, NULL, offsetof(struct args, backends),
            "list the backend plugins found (runs nmt-backends)")},
    {.type = OT_END}};

static void usage(FILE *f)
{
    char dir[PATH_MAX];
    char *tools[256];
    size_t n = 0;
    if (exe_dir(dir, sizeof dir) == 0)
        scan_dir(dir, tools, &n, 256);
    const char *path = getenv("PATH");
    if (path) {
        char *copy = strdup(path), *save = NULL;
        for (char *p = strtok_r(copy, ":", &save); p; p = strtok_r(NULL, ":", &save))
            scan_dir(p, tools, &n, 256);
        free(copy);
    }
    qsort(tools, n, sizeof *tools, cmp_str);
    opt_help(f,
             "Usage: nmt COMMAND [ARGS...]\n"
             "Run the nmt tool nmt-COMMAND with ARGS (e.g. 'nmt cat x.ids').\n"
             "\n",
             OPTIONS, "\nCommands found:");
    for (size_t i = 0; i < n; i++) {
        fprintf(f, " %s", tools[i]);
        free(tools[i]);
    }
    fprintf(f, "%s\nSee nmt(7) for an overview and nmt-COMMAND(1) for each command.\n", n ? "" : " (none)");
}

int main(int argc, char **argv)
{
    nmt_start(argv);
    if (argc < 2)
        return nmt_usage_error("missing command");
    const char *cmd = argv[1];
    struct args a = {0};
    /* only the first argument is nmt's: the rest belongs to the command */
    int rc = cmd[0] == '-' && strcmp(cmd, "--") ? opt_parse(OPTIONS, 2, argv, &a) : OPT_OK;
    if (rc == OPT_GOT_HELP || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return nmt_close_stdout() == 0 ? 0 : 1;
    }
    if (rc == OPT_GOT_VERSION) {
        nmt_print_version();
        return nmt_close_stdout() == 0 ? 0 : 1;
    }
    if (rc == OPT_USAGE)
        return NMT_EXIT_USAGE;
    if (a.backends)
        cmd = "backends";
    else if (cmd[0] == '-')
        return nmt_usage_error("unknown option '%s'", cmd);
    if (strchr(cmd, '/') || strlen(cmd) > 64)
        return nmt_usage_error("invalid command name '%s'", cmd);
    char name[80];
    snprintf(name, sizeof name, "nmt-%s", cmd);
    argv[1] = name;
    char dir[PATH_MAX], path[PATH_MAX + 80];
    if (exe_dir(dir, sizeof dir) == 0) {
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (access(path, X_OK) == 0) {
            execv(path, argv + 1);
            nmt_error("cannot run '%s': %s", path, strerror(errno));
            return NMT_EXIT_DATA;
        }
    }
    execvp(name, argv + 1);
    if (errno == ENOENT)
        return nmt_usage_error("'%s' is not an nmt command (no %s found)", cmd, name);
    nmt_error("cannot run '%s': %s", name, strerror(errno));
    return NMT_EXIT_DATA;
}
