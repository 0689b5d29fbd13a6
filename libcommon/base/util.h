/* util.h: error text, allocation, number parsing, hashing and little-endian helpers: the
 * primitives every layer of libcommon uses.
 *
 * Library code never prints or exits: it returns an error code (negative, or NULL) and leaves
 * a one-line description in a per-thread buffer read with nmt_errmsg(). Tools print it with
 * nmt_error() (cli/cli.h), which prefixes the program name: "nmt-cat: cannot open 'x': No such file".
 * Exit codes: NMT_EXIT_OK 0, NMT_EXIT_DATA 1 (bad data, runtime failure), NMT_EXIT_USAGE 2. */
#ifndef NMT_UTIL_H
#define NMT_UTIL_H

#include <stddef.h>
#include <stdint.h>

enum { NMT_EXIT_OK = 0, NMT_EXIT_DATA = 1, NMT_EXIT_USAGE = 2 };

/* Records the error text for the calling thread (printf-style); always returns -1. */
int nmt_seterr(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Returns the calling thread's last error text ("" if none). */
const char *nmt_errmsg(void);



/* Allocation that never returns NULL for a non-zero size: on failure returns NULL with the error
 * set, so callers still check. Provided to give a uniform "out of memory" message. */
void *nmt_malloc(size_t n);
void *nmt_realloc(void *p, size_t n);
/* nmt_malloc for a large buffer about to be filled (a file read whole): from 4 MiB on, aligned to
 * 2 MiB and backed by transparent huge pages where the kernel grants them on request, so that it
 * takes one page fault per 2 MiB rather than per 4 KiB. Freed with free(). */
void *nmt_malloc_large(size_t n);
void *nmt_calloc(size_t n, size_t size);
/* Returns a malloc'ed copy of S, or NULL with the error set. */
char *nmt_strdup(const char *s);
/* The one growth rule of growable arrays: makes the array whose pointer is at PTRP (an object
 * pointer, NULL when empty) of *CAP elements of SIZE bytes hold at least NEED elements, doubling
 * from at least 16; updates the pointer and *CAP. Returns 0, or -1 with the error set (out of
 * memory, overflow); the array is unchanged on failure. Use through NMT_GROW. */
int nmt_grow(void *ptrp, size_t *cap, size_t need, size_t size);
#define NMT_GROW(arr, cap, need) nmt_grow(&(arr), &(cap), (need), sizeof *(arr))
/* nmt_grow for two arrays that share one capacity (parallel arrays): both hold at least NEED
 * elements on success; 0, or -1 with the error set, *CAP then unchanged (either array may have
 * grown, harmlessly). Use through NMT_GROW2. */
int nmt_grow2(void *ptrp_a, size_t size_a, void *ptrp_b, size_t size_b, size_t *cap, size_t need);
#define NMT_GROW2(a, b, cap, need) nmt_grow2(&(a), sizeof *(a), &(b), sizeof *(b), &(cap), (need))

/* Parses a non-negative decimal integer no larger than MAX; 0 on success, -1 on junk/overflow. */
int nmt_parse_u64(const char *s, uint64_t max, uint64_t *out);
/* Parses a finite double; 0 on success, -1 on junk. */
int nmt_parse_double(const char *s, double *out);

/* Little-endian load/store helpers: the only way formats touch multi-byte integers. */
static inline uint16_t nmt_le16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t nmt_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t nmt_le64(const unsigned char *p)
{
    return (uint64_t)nmt_le32(p) | ((uint64_t)nmt_le32(p + 4) << 32);
}
static inline void nmt_put16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
static inline void nmt_put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); p[2] = (unsigned char)(v >> 16); p[3] = (unsigned char)(v >> 24);
}
static inline void nmt_put64(unsigned char *p, uint64_t v) { nmt_put32(p, (uint32_t)v); nmt_put32(p + 4, (uint32_t)(v >> 32)); }

/* 64-bit FNV-1a hash of LEN bytes, continuing from H (start with NMT_FNV_INIT). */
#define NMT_FNV_INIT 0xcbf29ce484222325ULL
uint64_t nmt_fnv1a(uint64_t h, const void *data, size_t len);

#endif

