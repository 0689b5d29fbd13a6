/* buf.h: a growable byte buffer, the output of every encoder. */
#ifndef NMT_BUF_H
#define NMT_BUF_H

#include <stddef.h>
#include <stdint.h>

/* A growable byte buffer. Zero-initialise; free with nmt_buf_free. */
struct nmt_buf {
    unsigned char *data;
    size_t len, cap;
};
/* Ensures room for N more bytes; 0 or -1 (out of memory). */
int nmt_buf_reserve(struct nmt_buf *b, size_t n);
/* Appends N bytes; 0 or -1. */
int nmt_buf_append(struct nmt_buf *b, const void *p, size_t n);
/* Appends a u32le / u64le; 0 or -1. */
int nmt_buf_put32(struct nmt_buf *b, uint32_t v);
int nmt_buf_put64(struct nmt_buf *b, uint64_t v);
/* Frees the buffer's memory and zeroes it. */
void nmt_buf_free(struct nmt_buf *b);

#endif
