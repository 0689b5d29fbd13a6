/* missing_slot: a plugin whose required attention_backward slot is NULL; the loader must refuse it. */
#include "common.h"

static struct nmt_backend table;

const struct nmt_backend *nmt_backend_entry(void)
{
    fill_slots(&table);
    table.name = "missing_slot";
    table.attention_backward = NULL;
    return &table;
}
