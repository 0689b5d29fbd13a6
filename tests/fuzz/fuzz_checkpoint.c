/* fuzz_checkpoint.c: libFuzzer target for the safetensors reader, the checkpoint config loader and
 * the int8 weights' checks and conversion (checkpoint_dequantize) and the vocabulary shortlist's
 * checks (shortlist_read, then a sentence's candidates). Any input must either parse into
 * tensors that lie inside the input (or, once converted to float32, inside the bytes the file owns
 * for them), or fail with an error text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nn/checkpoint.h"
#include "nn/model.h"
#include "nn/shortlist.h"
#include "io/safetensors.h"
#include "cli/cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    struct st_file *f = st_parse(copy, size, 1, "fuzz");
    if (!f) {
        if (!*nmt_errmsg())
            abort(); /* a failure must say why */
        return 0;
    }
    volatile unsigned sum = 0;
    for (size_t i = 0; i < f->nt; i++) {
        const struct st_tensor *t = &f->t[i];
        const unsigned char *p = t->data;
        if (p < f->buf || p + t->nbytes > f->buf + f->len)
            abort();
        for (uint64_t j = 0; j < t->nbytes; j++)
            sum += p[j];
        if (st_find(f, t->name) == NULL)
            abort();
        if (t->nbytes <= 4096) {
            unsigned char out[4096];
            size_t es = st_dtype_size(t->dtype);
            (void)st_get(f, t->name, t->dtype, out, es ? t->nbytes / es : 0);
        }
    }
    for (size_t i = 0; i < f->nmeta; i++)
        if (st_meta(f, f->meta_key[i]) == NULL)
            abort();
    struct model_config c;
    if (model_config_load(&c, f) == 0 && shortlist_present(f)) {
        nmt_seterr("%s", "");
        struct shortlist *sl = shortlist_read(f, "fuzz", c.vocab);
        if (!sl && !*nmt_errmsg())
            abort();
        int32_t *out = sl ? malloc((size_t)c.vocab * sizeof *out) : NULL;
        unsigned char *mark = sl ? calloc((size_t)c.vocab, 1) : NULL;
        if (out && mark) {
            uint32_t src[4] = {0, 3, (uint32_t)c.vocab - 1, (uint32_t)c.vocab};
            int n = shortlist_candidates(sl, src, 4, 8, out, mark);
            for (int i = 0; i < n; i++)
                if (out[i] < 0 || out[i] >= c.vocab || (i && out[i] <= out[i - 1]) || mark[out[i]])
                    abort();
        }
        free(out);
        free(mark);
        shortlist_free(sl);
    }
    if (checkpoint_check_finite(f, "fuzz") == 0) {
        nmt_seterr("%s", "");
        if (checkpoint_dequantize(f, "fuzz") < 0 && !*nmt_errmsg())
            abort();
        for (size_t i = 0; i < f->nt; i++) { /* in the input, or in the float32 values added (st_extra) */
            const unsigned char *p = f->t[i].data;
            uint64_t n = f->t[i].nbytes;
            if ((p < f->buf || p + n > f->buf + f->len) &&
                (!f->extra || p < f->extra || p + n > f->extra + f->extra_len))
                abort();
            for (uint64_t j = 0; j < f->t[i].nbytes; j++)
                sum += p[j];
        }
    }
    st_free(f);
    return 0;
}
