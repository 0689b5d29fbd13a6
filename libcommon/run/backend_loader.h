/* backend_loader.h: finds, checks, loads and opens compute backend plugins.
 *
 * A backend is named by a SPEC: a NAME ("cpu", "cuda") loads nmt-backend-NAME.so from the first
 * directory of the search path that has it; a SPEC containing '/' loads that file; "auto" loads
 * every plugin found and keeps the one with the highest score() (the first found on a tie). A NULL
 * or empty SPEC means $NMT_BACKEND, or "auto" when that is unset.
 * Search path, in order: the colon-separated directories of $NMT_PLUGIN_PATH, the installed plugin
 * directory (NMT_PLUGINDIR), the directory of the running executable, then lib/nmt beside that
 * directory (EXEDIR/../lib/nmt: an installed tree found wherever it was installed or moved).
 * A plugin is refused, with a one-line message naming its path and the reason, when it cannot be
 * dlopen'ed, lacks the nmt_backend_entry symbol, has another ABI major version, has a table too
 * small for ABI 2.0 or a NULL required slot. */
#ifndef NMT_BACKEND_LOADER_H
#define NMT_BACKEND_LOADER_H

#include "../../plugins/backend.h"

struct backend {
    struct nmt_backend ops; /* the plugin's table, copied; slots past its size read as NULL */
    nmt_bctx *ctx;          /* the open context, passed as the first argument of every slot */
    int score;              /* what ops.score() returned at load time */
    char *path;             /* the file it was loaded from */
    void *dl;               /* dlopen handle */
};

/* One plugin file found on the search path (backend_list). */
struct backend_info {
    char *name;       /* the table's name, or the name from the file name if refused */
    char *path;       /* the file */
    int score;        /* score(), or -1 if refused */
    unsigned abi_major, abi_minor;
    char *error;      /* why it was refused, or NULL if usable */
    char *reason;     /* with score 0: why it is unusable here, as the plugin says (NULL: no reason) */
};

/* Loads the backend SPEC (see above) and opens a context with OPTS (NULL = defaults); returns it,
 * or NULL with the error set (nmt_errmsg) naming the plugin path and the reason. */
struct backend *backend_open(const char *spec, const struct nmt_backend_opts *opts);
/* Closes the context, unloads the plugin and frees BE; backend_close(NULL) is a no-op. */
void backend_close(struct backend *be);
/* Whether BE's kernels may read the buffers of OWNER (backend.h, share): 1 when OWNER is another
 * open context of the same plugin file and the plugin allows it, else 0 (no error set). */
int backend_can_share(struct backend *be, const struct backend *owner);

/* Checks a plugin table read from PATH (PATH is only used in messages): 0 if the host can use it,
 * -1 with the error set (other ABI major, table too small, NULL required slot). */
int backend_check_table(const struct nmt_backend *t, const char *path);

/* Returns the number of plugin files found on the search path (nmt-backend-*.so, each real file
 * once) and sets *OUT to a malloc'ed array of them, in search order; -1 with the error set. */
int backend_list(struct backend_info **out);
/* Frees an array returned by backend_list; NULL is a no-op. */
void backend_list_free(struct backend_info *list, int n);

/* Returns the search path as a malloc'ed colon-separated string (for messages), or NULL. */
char *backend_search_path(void);
/* Returns the path of the first file named FILE (e.g. "nmt-comm-mpi.so") in the plugin search
 * directories (malloc'ed), or NULL with the error naming the directories searched. */
char *plugin_find(const char *file);

#endif
