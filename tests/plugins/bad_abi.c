/* bad_abi: a plugin built for another ABI major version; the loader must refuse it. */
#include "common.h"

static struct nmt_backend table;

const struct nmt_backend *nmt_backend_entry(void)
{
    fill_slots(&table);
    table.name = "bad_abi";
    table.abi_major = NMT_BACKEND_ABI_MAJOR + 1;
    table.abi_minor = 0;
    return &table;
}
