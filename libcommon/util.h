/* util.h: error text, messages, file helpers and CLI conventions shared by every nmt tool.
 *
 * Library code never prints or exits: it returns an error code (negative, or NULL) and leaves
 * a one-line description in a per-thread buffer read with nmt_errmsg(). Tools print it with
 * nmt_error(), which prefixes the program name: "nmt-cat: cannot open 'x': No such file".
 * Exit codes: NMT_EXIT_OK 0, NMT_EXIT_DATA 1 (bad data, runtime failure), NMT_EXIT_USAGE 2. */
#ifndef NMT_UTIL_H
#define NMT_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { NMT_EXIT_OK = 0, NMT_EXIT_DATA = 1, NMT_EXIT_USAGE = 2 };

/* Records the error text for the calling thread (printf-style); always returns -1. */
int nmt_seterr(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Returns the calling thread's last error text ("" if none). */
const char *nmt_errmsg(void);

/* Sets the program name used as the message prefix (basename of argv[0]). */
void nmt_set_progname(const char *argv0);
/* Returns the program name set by nmt_set_progname ("nmt" before). */
const char *nmt_progname(void);
/* Prints "PROG: message\n" on stderr. */
void nmt_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "PROG: warning: message\n" on stderr. */
void nmt_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "PROG VERSION" and the stream format version on stdout. */
void nmt_print_version(void);
/* Prints "PROG: MSG\nTry 'PROG --help' for more information.\n" on stderr; returns NMT_EXIT_USAGE. */
int nmt_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Opens PATH for reading ("-" or NULL = stdin); returns an fd or -1 with the error set. */
int nmt_open_in(const char *path);
/* Opens PATH for writing ("-" or NULL = stdout, refused when BINARY and stdout is a terminal);
 * returns an fd or -1 with the error set. */
int nmt_open_out(const char *path, int binary);
/* Returns a printable name for PATH: "stdin"/"stdout" for "-" or NULL, else PATH. */
const char *nmt_path_name(const char *path, int output);
/* Writes all LEN bytes to FD, retrying short writes and EINTR; 0 or -1 with the error set. */
int nmt_write_all(int fd, const void *buf, size_t len);
/* Flushes and closes stdout, reporting a failed write (disk full, closed pipe); 0 or -1. */
int nmt_close_stdout(void);

/* Allocation that never returns NULL for a non-zero size: on failure returns NULL with the error
 * set, so callers still check. Provided to give a uniform "out of memory" message. */
void *nmt_malloc(size_t n);
void *nmt_realloc(void *p, size_t n);
void *nmt_calloc(size_t n, size_t size);
/* Returns a malloc'ed copy of S, or NULL with the error set. */
char *nmt_strdup(const char *s);

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

#ifndef NMT_UTIL_JSON
#define NMT_UTIL_JSON
/* Writes S (N bytes) to F as a JSON string literal with quotes; invalid UTF-8 bytes become
 * U+FFFD. Returns 0, or -1 if the stream is in error. */
int nmt_json_string(FILE *f, const char *s, size_t n);
/* Writes token S (N bytes) to F for space-separated text: backslash, space, tab, newline and other
 * control bytes become \\ \s \t \n \xHH (the escapes of nmt-cat and nmt-tokenize --text). */
void nmt_put_token(FILE *f, const char *s, size_t n);
#endif
