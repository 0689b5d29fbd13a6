/* minor_old: a usable table cut off before the optional slots (as a plugin built before they were
 * appended): the loader accepts it and reads the optional slots as NULL. Its kernels are never run. */
#include "common.h"

static struct nmt_backend table;
static int score(void) { return 1; }

const struct nmt_backend *nmt_backend_entry(void)
{
    fill_slots(&table);
    table.name = "minor_old";
    table.score = score;
    table.abi_minor = 0;
    table.size = offsetof(struct nmt_backend, gemm_rowinv);
    return &table;
}
