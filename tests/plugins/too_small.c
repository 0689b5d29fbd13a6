/* too_small: a plugin whose table ends before the last required slot; refused. */
#include "common.h"

static struct nmt_backend table;

const struct nmt_backend *nmt_backend_entry(void)
{
    fill_slots(&table);
    table.name = "too_small";
    table.size = offsetof(struct nmt_backend, gemm);
    return &table;
}
