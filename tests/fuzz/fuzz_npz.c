/* fuzz_npz: libFuzzer target for the .npz reader (io/npz.h). Any input must parse or give an
 * error, never a crash, hang or unbounded allocation; an archive that parses must write back to
 * one that parses to the same arrays. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/npz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct npz *z = npz_parse(data, size, "fuzz");
    if (!z)
        return 0;
    struct nmt_buf f = {0};
    if (npz_format(z, &f) == 0) {
        struct npz *r = npz_parse(f.data, f.len, "again");
        if (!r || r->n != z->n)
            abort();
        for (size_t i = 0; i < z->n; i++) {
            const struct npz_array *a = &z->a[i], *b = &r->a[i];
            if (strcmp(a->name, b->name) || a->dtype != b->dtype || a->ndim != b->ndim || a->count != b->count ||
                memcmp(a->shape, b->shape, sizeof a->shape) ||
                memcmp(a->data, b->data, (size_t)a->count * npz_dtype_size(a->dtype)))
                abort();
        }
        npz_free(r);
    }
    nmt_buf_free(&f);
    npz_free(z);
    return 0;
}
