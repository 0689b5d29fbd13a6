/* backend.c: finding, checking and loading backend plugins (see backend.h). */
#include "run/backend_loader.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

#define PREFIX "nmt-backend-"
#define SUFFIX ".so"

/* The required slots of ABI 2.0, by name, for the "lacks required slot" message. */
#define SLOT(f) { #f, offsetof(struct nmt_backend, f) }
static const struct { const char *name; size_t off; } required_slots[] = {
    SLOT(score), SLOT(open), SLOT(close), SLOT(last_error), SLOT(props),
    SLOT(alloc), SLOT(free), SLOT(upload), SLOT(download), SLOT(memset_zero), SLOT(copy),
    SLOT(gemm), SLOT(bias_add), SLOT(bias_grad),
    SLOT(embedding_forward), SLOT(embedding_backward),
    SLOT(attention_forward), SLOT(attention_backward),
    SLOT(layernorm_forward), SLOT(layernorm_backward),
    SLOT(add), SLOT(relu_forward), SLOT(relu_backward),
    SLOT(dropout_forward), SLOT(dropout_backward), SLOT(cross_entropy),
    SLOT(adam_update), SLOT(sumsq), SLOT(topk_logsoftmax), SLOT(gather_rows),
};
#undef SLOT
/* ABI 2.0 tables end with the last required slot (the optional ones may be cut off by size). */
#define MIN_TABLE_SIZE (offsetof(struct nmt_backend, gather_rows) + sizeof(void (*)(void)))
#define HEADER_SIZE (offsetof(struct nmt_backend, description) + sizeof(const char *))

int backend_check_table(const struct nmt_backend *t, const char *path)
{
    if (t->size < HEADER_SIZE)
        return nmt_seterr("refusing backend '%s': table of %zu bytes has no complete header", path, t->size);
    if (t->abi_major != NMT_BACKEND_ABI_MAJOR)
        return nmt_seterr("refusing backend '%s': ABI %u.%u, this program needs ABI %d.x", path,
                          t->abi_major, t->abi_minor, NMT_BACKEND_ABI_MAJOR);
    if (t->size < MIN_TABLE_SIZE)
        return nmt_seterr("refusing backend '%s': table of %zu bytes is smaller than ABI %d.0's %zu", path,
                          t->size, NMT_BACKEND_ABI_MAJOR, (size_t)MIN_TABLE_SIZE);
    if (!t->name || !*t->name)
        return nmt_seterr("refusing backend '%s': table has no name", path);
    for (size_t i = 0; i < sizeof required_slots / sizeof required_slots[0]; i++) {
        void (*fp)(void);
        memcpy(&fp, (const char *)t + required_slots[i].off, sizeof fp);
        if (!fp)
            return nmt_seterr("refusing backend '%s': required slot '%s' is missing", path,
                              required_slots[i].name);
    }
    return 0;
}

/* Loads the plugin file PATH and checks its table; returns a backend not yet opened, or NULL. */
static struct backend *load_file(const char *path)
{
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *e = dlerror();
        if (access(path, F_OK) != 0)
            nmt_seterr("cannot load backend '%s': %s", path, strerror(errno));
        else
            nmt_seterr("refusing backend '%s': not a loadable shared object (%s)", path, e ? e : "dlopen failed");
        return NULL;
    }
    nmt_backend_entry_fn entry;
    void *sym = dlsym(dl, NMT_BACKEND_ENTRY);
    memcpy(&entry, &sym, sizeof entry);
    if (!sym) {
        nmt_seterr("refusing backend '%s': not an nmt backend plugin (no symbol %s)", path, NMT_BACKEND_ENTRY);
        dlclose(dl);
        return NULL;
    }
    const struct nmt_backend *t = entry();
    if (!t) {
        nmt_seterr("refusing backend '%s': %s returned NULL", path, NMT_BACKEND_ENTRY);
        dlclose(dl);
        return NULL;
    }
    if (backend_check_table(t, path) < 0) {
        dlclose(dl);
        return NULL;
    }
    struct backend *be = nmt_calloc(1, sizeof *be);
    char *p = nmt_strdup(path);
    if (!be || !p) {
        free(be);
        free(p);
        dlclose(dl);
        return NULL;
    }
    memcpy(&be->ops, t, t->size < sizeof be->ops ? t->size : sizeof be->ops);
    be->ops.size = sizeof be->ops;
    be->dl = dl;
    be->path = p;
    be->score = be->ops.score();
    return be;
}

static void unload(struct backend *be)
{
    if (!be)
        return;
    if (be->ctx)
        be->ops.close(be->ctx);
    if (be->dl)
        dlclose(be->dl);
    free(be->path);
    free(be);
}

void backend_close(struct backend *be) { unload(be); }

int backend_can_share(struct backend *be, const struct backend *owner)
{
    return be && owner && be != owner && be->ctx && owner->ctx && be->dl == owner->dl && be->ops.share &&
           be->ops.share(be->ctx, owner->ctx) == 0;
}

/* Appends directory D (length N) to the list DIRS (*ND entries) unless empty; 0 or -1. */
static int add_dir(char ***dirs, int *nd, const char *d, size_t n)
{
    if (n == 0)
        return 0;
    char **nw = nmt_realloc(*dirs, (size_t)(*nd + 1) * sizeof *nw);
    if (!nw)
        return -1;
    *dirs = nw;
    if (!(nw[*nd] = nmt_calloc(1, n + 1)))
        return -1;
    memcpy(nw[*nd], d, n);
    (*nd)++;
    return 0;
}

static void free_dirs(char **dirs, int nd)
{
    for (int i = 0; i < nd; i++)
        free(dirs[i]);
    free(dirs);
}

/* Returns the search directories in order (*ND of them), or NULL with *ND = -1 on error. */
static char **search_dirs(int *nd)
{
    char **dirs = NULL;
    *nd = 0;
    const char *env = getenv("NMT_PLUGIN_PATH");
    for (const char *s = env; s && *s;) {
        const char *c = strchr(s, ':');
        size_t n = c ? (size_t)(c - s) : strlen(s);
        if (add_dir(&dirs, nd, s, n) < 0)
            goto fail;
        s += n + (c != NULL);
    }
    if (add_dir(&dirs, nd, NMT_PLUGINDIR, strlen(NMT_PLUGINDIR)) < 0)
        goto fail;
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        char *slash = strrchr(exe, '/');
        if (slash && add_dir(&dirs, nd, exe, slash == exe ? 1 : (size_t)(slash - exe)) < 0)
            goto fail;
        /* an installed tree: PREFIX/bin/nmt-x finds PREFIX/lib/nmt, wherever PREFIX was moved */
        char lib[PATH_MAX + 16];
        int n = snprintf(lib, sizeof lib, "%.*s/../lib/nmt", (int)(slash ? slash - exe : 0), exe);
        if (slash && slash != exe && add_dir(&dirs, nd, lib, (size_t)n) < 0)
            goto fail;
    }
    return dirs;
fail:
    free_dirs(dirs, *nd);
    *nd = -1;
    return NULL;
}

char *backend_search_path(void)
{
    int nd;
    char **dirs = search_dirs(&nd);
    if (nd < 0)
        return NULL;
    size_t len = 1;
    for (int i = 0; i < nd; i++)
        len += strlen(dirs[i]) + 1;
    char *s = nmt_calloc(1, len);
    if (s)
        for (int i = 0; i < nd; i++) {
            if (i)
                strcat(s, ":");
            strcat(s, dirs[i]);
        }
    free_dirs(dirs, nd);
    return s;
}

char *plugin_find(const char *file)
{
    int nd;
    char **dirs = search_dirs(&nd);
    if (nd < 0)
        return NULL;
    char *found = NULL;
    for (int i = 0; i < nd && !found; i++) {
        size_t n = strlen(dirs[i]) + strlen(file) + 2;
        char *p = nmt_malloc(n);
        if (!p)
            break;
        snprintf(p, n, "%s/%s", dirs[i], file);
        if (access(p, R_OK) == 0)
            found = p;
        else
            free(p);
    }
    free_dirs(dirs, nd);
    if (!found) {
        char *sp = backend_search_path();
        nmt_seterr("no %s found (searched %s)", file, sp ? sp : "?");
        free(sp);
    }
    return found;
}

static int is_plugin_name(const char *f)
{
    size_t n = strlen(f), pl = strlen(PREFIX), sl = strlen(SUFFIX);
    return n > pl + sl && !strncmp(f, PREFIX, pl) && !strcmp(f + n - sl, SUFFIX);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Returns the malloc'ed paths of every plugin file on the search path, each real file once, in
 * search order (sorted by name within a directory); *N gets the count, -1 on error. */
static char **find_plugins(int *n)
{
    int nd;
    char **dirs = search_dirs(&nd), **paths = NULL, **reals = NULL;
    *n = 0;
    if (nd < 0)
        return NULL;
    for (int i = 0; i < nd; i++) {
        DIR *d = opendir(dirs[i]);
        if (!d)
            continue;
        char **names = NULL;
        int nn = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!is_plugin_name(e->d_name))
                continue;
            if (add_dir(&names, &nn, e->d_name, strlen(e->d_name)) < 0) {
                free_dirs(names, nn);
                closedir(d);
                goto fail;
            }
        }
        closedir(d);
        if (nn > 1)
            qsort(names, (size_t)nn, sizeof *names, cmp_str);
        for (int j = 0; j < nn; j++) {
            char full[PATH_MAX], real[PATH_MAX];
            snprintf(full, sizeof full, "%s/%s", dirs[i], names[j]);
            if (!realpath(full, real))
                continue;
            int dup = 0;
            for (int k = 0; k < *n && !dup; k++)
                dup = !strcmp(reals[k], real);
            if (dup)
                continue;
            int n2 = *n;
            if (add_dir(&paths, n, full, strlen(full)) < 0 || add_dir(&reals, &n2, real, strlen(real)) < 0) {
                free_dirs(names, nn);
                goto fail;
            }
        }
        free_dirs(names, nn);
    }
    free_dirs(reals, *n);
    free_dirs(dirs, nd);
    return paths;
fail:
    free_dirs(paths, *n);
    free_dirs(reals, *n);
    free_dirs(dirs, nd);
    *n = -1;
    return NULL;
}

/* Loads the plugin SPEC names (not opened); NULL with the error set. */
/* Writes the backend names of the N plugin files PATHS, comma-separated and each once, into OUT. */
static void names_of(char **paths, int n, char *out, size_t size)
{
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        const char *base = strrchr(paths[i], '/') + 1;
        int bl = (int)(strlen(base) - strlen(PREFIX) - strlen(SUFFIX));
        char name[256];
        snprintf(name, sizeof name, "%.*s", bl, base + strlen(PREFIX));
        int seen = 0;
        for (const char *p = out; !seen && (p = strstr(p, name)); p += strlen(name))
            seen = (p == out || p[-1] == ' ') && (p[strlen(name)] == ',' || !p[strlen(name)]);
        if (!seen && len < size)
            len += (size_t)snprintf(out + len, size - len, "%s%s", len ? ", " : "", name);
    }
}

static struct backend *load_spec(const char *spec)
{
    if (strchr(spec, '/'))
        return load_file(spec);
    int n;
    char **paths = find_plugins(&n);
    if (n < 0)
        return NULL;
    struct backend *best = NULL;
    char firsterr[1024] = "", found[512] = "";
    int nfound = 0;
    if (!strcmp(spec, "auto")) {
        for (int i = 0; i < n; i++) {
            nfound++;
            struct backend *be = load_file(paths[i]);
            if (!be) {
                if (!*firsterr)
                    snprintf(firsterr, sizeof firsterr, "%s", nmt_errmsg());
                continue;
            }
            if (be->score > 0 && (!best || be->score > best->score)) {
                unload(best);
                best = be;
            } else {
                unload(be);
            }
        }
    } else {
        names_of(paths, n, found, sizeof found);
        for (int i = 0; i < n; i++) {
            const char *base = strrchr(paths[i], '/') + 1;
            size_t bl = strlen(base) - strlen(PREFIX) - strlen(SUFFIX);
            if (strlen(spec) != bl || strncmp(base + strlen(PREFIX), spec, bl))
                continue;
            best = load_file(paths[i]);
            free_dirs(paths, n);
            return best;
        }
    }
    free_dirs(paths, n);
    if (!best) {
        char *sp = backend_search_path();
        if (nfound == 0 && n > 0 && strcmp(spec, "auto") != 0)
            nmt_seterr("no backend plugin '%s' found (searched %s); the backends found: %s", spec, sp ? sp : "?", found);
        else if (nfound == 0)
            nmt_seterr("no backend plugin %s%s%s found (searched %s)", strcmp(spec, "auto") ? "'" : "nmt-backend-*.so",
                       strcmp(spec, "auto") ? spec : "", strcmp(spec, "auto") ? "'" : "", sp ? sp : "?");
        else if (*firsterr)
            nmt_seterr("no usable backend plugin: %s", firsterr);
        else
            nmt_seterr("no usable backend plugin: every one found scores 0 on this machine");
        free(sp);
    }
    return best;
}

struct backend *backend_open(const char *spec, const struct nmt_backend_opts *opts)
{
    if (!spec || !*spec)
        spec = getenv("NMT_BACKEND");
    if (!spec || !*spec)
        spec = "auto";
    struct backend *be = load_spec(spec);
    if (!be)
        return NULL;
    if (be->score <= 0) {
        const char *why = be->ops.last_error(NULL);
        nmt_seterr("backend '%s' (%s) is not usable on this machine: %s", be->ops.name, be->path,
                   why && *why ? why : "it scores 0 (the plugin gives no reason)");
        unload(be);
        return NULL;
    }
    struct nmt_backend_opts def = { .size = sizeof def };
    be->ctx = be->ops.open(opts ? opts : &def);
    if (!be->ctx) {
        const char *e = be->ops.last_error(NULL);
        nmt_seterr("cannot open backend '%s' (%s): %s", be->ops.name, be->path, e && *e ? e : "unknown error");
        unload(be);
        return NULL;
    }
    return be;
}

int backend_list(struct backend_info **out)
{
    int n;
    char **paths = find_plugins(&n);
    *out = NULL;
    if (n < 0)
        return -1;
    struct backend_info *list = n ? nmt_calloc((size_t)n, sizeof *list) : NULL;
    if (n && !list) {
        free_dirs(paths, n);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        struct backend_info *bi = &list[i];
        bi->path = paths[i];
        paths[i] = NULL;
        struct backend *be = load_file(bi->path);
        if (be) {
            bi->name = nmt_strdup(be->ops.name);
            bi->score = be->score;
            const char *why = be->score <= 0 ? be->ops.last_error(NULL) : NULL;
            bi->reason = why && *why ? nmt_strdup(why) : NULL; /* out of memory: no reason shown */
            bi->abi_major = be->ops.abi_major;
            bi->abi_minor = be->ops.abi_minor;
            unload(be);
        } else {
            const char *base = strrchr(bi->path, '/') + 1;
            size_t bl = strlen(base) - strlen(PREFIX) - strlen(SUFFIX);
            bi->error = nmt_strdup(nmt_errmsg());
            bi->name = nmt_calloc(1, bl + 1);
            if (bi->name)
                memcpy(bi->name, base + strlen(PREFIX), bl);
            bi->score = -1;
        }
        if (!bi->name) {
            free_dirs(paths, n);
            backend_list_free(list, n);
            return -1;
        }
    }
    free_dirs(paths, n);
    *out = list;
    return n;
}

void backend_list_free(struct backend_info *list, int n)
{
    if (!list)
        return;
    for (int i = 0; i < n; i++) {
        free(list[i].name);
        free(list[i].path);
        free(list[i].error);
        free(list[i].reason);
    }
    free(list);
}
