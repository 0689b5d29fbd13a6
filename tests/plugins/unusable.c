/* unusable: a complete table whose score() is 0 here, leaving its reason for last_error(NULL), as
 * the cuda plugin does on a machine without a GPU. The loader lists it with the reason and refuses
 * to open it; its kernels are never run. */
#include "common.h"

static struct nmt_backend table;
static int score(void) { return 0; }
static const char *last_error(nmt_bctx *ctx)
{
    return ctx ? "" : "no test accelerator: /dev/nmt-test0 is missing";
}

const struct nmt_backend *nmt_backend_entry(void)
{
    fill_slots(&table);
    table.name = "unusable";
    table.score = score;
    table.last_error = last_error;
    return &table;
}
