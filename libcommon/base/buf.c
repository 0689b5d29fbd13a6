/* buf.c: the growable byte buffer (see buf.h). */
#include "base/buf.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

int nmt_buf_reserve(struct nmt_buf *b, size_t n)
{
    if (n <= b->cap - b->len)
        return 0;
    if (n > SIZE_MAX / 2 - b->len)
        return nmt_seterr("out of memory (buffer of %zu bytes)", n);
    return NMT_GROW(b->data, b->cap, b->len + n);
}

int nmt_buf_append(struct nmt_buf *b, const void *p, size_t n)
{
    if (nmt_buf_reserve(b, n) < 0)
        return -1;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

int nmt_buf_put32(struct nmt_buf *b, uint32_t v)
{
    if (nmt_buf_reserve(b, 4) < 0)
        return -1;
    nmt_put32(b->data + b->len, v);
    b->len += 4;
    return 0;
}

int nmt_buf_put64(struct nmt_buf *b, uint64_t v)
{
    if (nmt_buf_reserve(b, 8) < 0)
        return -1;
    nmt_put64(b->data + b->len, v);
    b->len += 8;
    return 0;
}

void nmt_buf_free(struct nmt_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* Writes the common prefix: u64 index | u8 nsides | 3 reserved zero bytes. */
