/* util.c: error text, allocation, number parsing and hashing (see util.h). */
#include "base/util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static _Thread_local char err_buf[1024];

int nmt_seterr(const char *fmt, ...)
{
    char tmp[sizeof err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap); /* fmt may mention nmt_errmsg() itself */
    va_end(ap);
    memcpy(err_buf, tmp, sizeof err_buf);
    return -1;
}

const char *nmt_errmsg(void) { return err_buf; }

void *nmt_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        nmt_seterr("out of memory (%zu bytes)", n);
    return p;
}

void *nmt_malloc_large(size_t n)
{
    const size_t huge = (size_t)2 << 20;
    if (n < 2 * huge || n > SIZE_MAX - huge)
        return nmt_malloc(n);
    size_t len = (n + huge - 1) & ~(huge - 1);
    void *p = aligned_alloc(huge, len);
    if (!p)
        return nmt_seterr("out of memory (%zu bytes)", n), NULL;
    madvise(p, len, MADV_HUGEPAGE); /* advice only: without huge pages the buffer works the same */
    return p;
}

void *nmt_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        nmt_seterr("out of memory (%zu bytes)", n);
    return q;
}

void *nmt_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        nmt_seterr("out of memory (%zu x %zu bytes)", n, size);
    return p;
}

char *nmt_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = nmt_malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

int nmt_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    if (!s || !*s)
        return -1;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (v > max)
        return -1;
    *out = v;
    return 0;
}

int nmt_parse_double(const char *s, double *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno == ERANGE || v != v || v - v != 0)
        return -1;
    *out = v;
    return 0;
}

uint64_t nmt_fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* The capacity nmt_grow gives an array of CAP elements that must hold NEED, into *N; 0 or -1 with
 * the error set (overflow for elements of SIZE bytes). */
static int grown_capacity(size_t cap, size_t need, size_t size, size_t *n)
{
    *n = cap < 16 ? 16 : cap;
    while (*n < need) {
        if (*n > SIZE_MAX / 2)
            return nmt_seterr("out of memory (array of %zu elements)", need);
        *n *= 2;
    }
    if (*n > SIZE_MAX / size)
        return nmt_seterr("out of memory (array of %zu elements of %zu bytes)", need, size);
    return 0;
}

/* Reallocates the array whose pointer is at PTRP to N elements of SIZE bytes; 0 or -1 with the
 * error set, the array unchanged. */
static int resize_array(void *ptrp, size_t n, size_t size)
{
    void *old;
    memcpy(&old, ptrp, sizeof old);
    void *p = nmt_realloc(old, n * size);
    if (!p)
        return -1;
    memcpy(ptrp, &p, sizeof p);
    return 0;
}

int nmt_grow(void *ptrp, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t n;
    if (grown_capacity(*cap, need, size, &n) < 0 || resize_array(ptrp, n, size) < 0)
        return -1;
    *cap = n;
    return 0;
}

int nmt_grow2(void *ptrp_a, size_t size_a, void *ptrp_b, size_t size_b, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t n;
    if (grown_capacity(*cap, need, size_a > size_b ? size_a : size_b, &n) < 0 ||
        resize_array(ptrp_a, n, size_a) < 0 || resize_array(ptrp_b, n, size_b) < 0)
        return -1;
    *cap = n;
    return 0;
}
