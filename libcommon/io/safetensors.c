/* safetensors.c: bounded safetensors reader and atomic writer (see safetensors.h). */
#include "io/safetensors.h"
#include "base/util.h"
#include "io/file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const dtype_names[ST_NDTYPES] = {
    "F32", "F64", "F16", "BF16", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL"};
static const size_t dtype_sizes[ST_NDTYPES] = {4, 8, 2, 2, 8, 4, 2, 1, 8, 4, 2, 1, 1};

const char *st_dtype_name(int dt)
{
    return dt >= 0 && dt < ST_NDTYPES ? dtype_names[dt] : "?";
}

size_t st_dtype_size(int dt)
{
    return dt >= 0 && dt < ST_NDTYPES ? dtype_sizes[dt] : 0;
}

/* ---------------------------------------------------------------------------------------------
 * JSON header parser: a cursor over the header bytes; every error names the byte offset in the file
 * (the header starts at byte 8). */
struct jp {
    const char *s;
    size_t n, i;
    const char *name;
};

static int jp_err(struct jp *p, const char *what)
{
    return nmt_seterr("%s: safetensors header: %s at byte %zu", p->name, what, p->i + 8);
}

static void jp_ws(struct jp *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static int jp_expect(struct jp *p, char c)
{
    jp_ws(p);
    if (p->i >= p->n || p->s[p->i] != c) {
        char msg[32];
        snprintf(msg, sizeof msg, "expected '%c'", c);
        return jp_err(p, msg);
    }
    p->i++;
    return 0;
}

/* Peeks the next non-space character (0 at the end). */
static char jp_peek(struct jp *p)
{
    jp_ws(p);
    return p->i < p->n ? p->s[p->i] : 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int jp_hex4(struct jp *p, unsigned *out)
{
    if (p->n - p->i < 4)
        return jp_err(p, "truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(p->s[p->i + k]);
        if (h < 0)
            return jp_err(p, "bad \\u escape");
        v = v * 16 + (unsigned)h;
    }
    p->i += 4;
    *out = v;
    return 0;
}

/* Parses a JSON string into a new NUL-terminated UTF-8 string (*OUT, malloc'ed). Strings holding
 * a NUL byte are refused (names and metadata are C strings). */
/* The code point of a \\u escape whose "\\u" is consumed (a surrogate pair read whole) into *CP;
 * 0, or -1 with the error set on a bad hex digit, an unpaired surrogate or NUL. */
static int jp_unicode_escape(struct jp *p, unsigned *cp)
{
    if (jp_hex4(p, cp) < 0)
        return -1;
    if (*cp >= 0xD800 && *cp < 0xDC00) {
        unsigned lo;
        if (p->n - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
            return jp_err(p, "unpaired surrogate");
        p->i += 2;
        if (jp_hex4(p, &lo) < 0)
            return -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return jp_err(p, "unpaired surrogate");
        *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (*cp >= 0xDC00 && *cp < 0xE000) {
        return jp_err(p, "unpaired surrogate");
    }
    if (*cp == 0)
        return jp_err(p, "NUL in string");
    return 0;
}

/* Writes code point CP (< 0x110000) as UTF-8 at O; returns the number of bytes (1-4). */
static size_t utf8_put(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int jp_string(struct jp *p, char **out)
{
    *out = NULL;
    if (jp_expect(p, '"') < 0)
        return -1;
    size_t start = p->i, end = start;
    /* first pass: find the end, bounding the output size by the input size */
    while (end < p->n && p->s[end] != '"') {
        if (p->s[end] == '\\')
            end++;
        end++;
    }
    if (end >= p->n) {
        p->i = p->n;
        return jp_err(p, "unterminated string");
    }
    char *o = nmt_malloc(end - start + 1);
    if (!o)
        return -1;
    size_t k = 0;
    while (p->s[p->i] != '"') {
        unsigned char c = (unsigned char)p->s[p->i];
        if (c < 0x20) {
            free(o);
            return jp_err(p, "control character in string");
        }
        if (c != '\\') {
            o[k++] = (char)c;
            p->i++;
            continue;
        }
        p->i++;
        char e = p->s[p->i++];
        unsigned cp;
        switch (e) {
        case '"': o[k++] = '"'; break;
        case '\\': o[k++] = '\\'; break;
        case '/': o[k++] = '/'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'u':
            if (jp_unicode_escape(p, &cp) < 0) {
                free(o);
                return -1;
            }
            /* an escape of >= 6 input bytes yields at most 4 output bytes: stays within the bound */
            k += utf8_put(o + k, cp);
            break;
        default:
            p->i--;
            free(o);
            return jp_err(p, "bad escape");
        }
    }
    p->i++; /* closing quote */
    o[k] = 0;
    *out = o;
    return 0;
}

/* An object's key and the ':' after it: the key (malloc'ed) in *OUT; 0, or -1 with the error set
 * and nothing allocated. */
static int jp_key(struct jp *p, char **out)
{
    if (jp_string(p, out) < 0)
        return -1;
    if (jp_expect(p, ':') < 0) {
        free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

/* Parses a non-negative integer without sign, fraction or exponent, at most 2^53. */
static int jp_uint(struct jp *p, uint64_t *out)
{
    jp_ws(p);
    size_t st = p->i;
    uint64_t v = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        v = v * 10 + (uint64_t)(p->s[p->i] - '0');
        if (v > (1ULL << 53))
            return jp_err(p, "integer too large");
        p->i++;
    }
    if (p->i == st)
        return jp_err(p, "expected a non-negative integer");
    if (p->i - st > 1 && p->s[st] == '0')
        return jp_err(p, "leading zero in integer");
    if (p->i < p->n && (p->s[p->i] == '.' || p->s[p->i] == 'e' || p->s[p->i] == 'E'))
        return jp_err(p, "expected an integer");
    *out = v;
    return 0;
}

/* Parses "[u, u, ...]" into V (at most MAX entries); *N gets the count. */
static int jp_uint_array(struct jp *p, uint64_t *v, int max, int *n)
{
    *n = 0;
    if (jp_expect(p, '[') < 0)
        return -1;
    if (jp_peek(p) == ']') {
        p->i++;
        return 0;
    }
    for (;;) {
        if (*n >= max)
            return jp_err(p, "too many entries in array");
        if (jp_uint(p, &v[(*n)++]) < 0)
            return -1;
        char c = jp_peek(p);
        if (c == ',') {
            p->i++;
            continue;
        }
        if (c == ']') {
            p->i++;
            return 0;
        }
        return jp_err(p, "expected ',' or ']'");
    }
}

static void file_free_parts(struct st_file *f)
{
    for (size_t i = 0; i < f->nt; i++)
        free(f->t[i].name);
    free(f->t);
    for (size_t i = 0; i < f->nmeta; i++) {
        free(f->meta_key[i]);
        free(f->meta_val[i]);
    }
    free(f->meta_key);
    free(f->meta_val);
}

void st_free(struct st_file *f)
{
    if (!f)
        return;
    file_free_parts(f);
    if (f->mapped)
        munmap(f->buf, f->len);
    else
        free(f->buf);
    free(f->extra);
    free(f);
}

static int parse_metadata(struct jp *p, struct st_file *f)
{
    if (f->meta_key)
        return jp_err(p, "duplicate __metadata__");
    size_t cap = 0;
    if (jp_expect(p, '{') < 0)
        return -1;
    if (jp_peek(p) == '}') {
        p->i++;
        f->meta_key = nmt_calloc(1, sizeof(char *));
        f->meta_val = nmt_calloc(1, sizeof(char *));
        return f->meta_key && f->meta_val ? 0 : -1;
    }
    for (;;) {
        if (NMT_GROW2(f->meta_key, f->meta_val, cap, f->nmeta + 1) < 0)
            return -1;
        char *key, *val;
        if (jp_key(p, &key) < 0)
            return -1;
        if ((jp_peek(p) != '"' ? (jp_err(p, "metadata values must be strings"), 1) : 0) || jp_string(p, &val) < 0) {
            free(key);
            return -1;
        }
        f->meta_key[f->nmeta] = key;
        f->meta_val[f->nmeta++] = val;
        char c = jp_peek(p);
        if (c == ',') {
            p->i++;
            continue;
        }
        if (c == '}') {
            p->i++;
            return 0;
        }
        return jp_err(p, "expected ',' or '}'");
    }
}

static int parse_dtype(const char *s)
{
    for (int d = 0; d < ST_NDTYPES; d++)
        if (!strcmp(s, dtype_names[d]))
            return d;
    return -1;
}

/* Parses one tensor object into T (name already set); DATALEN bounds the offsets. */
static int parse_tensor(struct jp *p, struct st_tensor *t, uint64_t *off0, uint64_t datalen)
{
    int have_dt = 0, have_shape = 0, have_off = 0;
    uint64_t off[2] = {0, 0};
    if (jp_expect(p, '{') < 0)
        return -1;
    if (jp_peek(p) != '}') {
        for (;;) {
            char *key;
            if (jp_key(p, &key) < 0)
                return -1;
            int r = 0;
            if (!strcmp(key, "dtype") && !have_dt) {
                char *dt;
                if (jp_string(p, &dt) < 0) {
                    r = -1;
                } else {
                    t->dtype = parse_dtype(dt);
                    if (t->dtype < 0)
                        r = nmt_seterr("%s: tensor '%s': unknown dtype '%.20s'", p->name, t->name, dt);
                    free(dt);
                }
                have_dt = 1;
            } else if (!strcmp(key, "shape") && !have_shape) {
                r = jp_uint_array(p, t->shape, ST_MAX_DIMS, &t->ndim);
                have_shape = 1;
            } else if (!strcmp(key, "data_offsets") && !have_off) {
                int n;
                r = jp_uint_array(p, off, 2, &n);
                if (r == 0 && n != 2)
                    r = jp_err(p, "data_offsets needs two entries");
                have_off = 1;
            } else {
                r = jp_err(p, "unknown or repeated tensor field");
            }
            free(key);
            if (r < 0)
                return -1;
            char c = jp_peek(p);
            if (c == ',') {
                p->i++;
                continue;
            }
            if (c == '}')
                break;
            return jp_err(p, "expected ',' or '}'");
        }
    }
    p->i++;
    if (!have_dt || !have_shape || !have_off)
        return nmt_seterr("%s: tensor '%s': missing dtype, shape or data_offsets", p->name, t->name);
    uint64_t count = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] && count > UINT64_MAX / 16 / t->shape[d])
            return nmt_seterr("%s: tensor '%s': shape too large", p->name, t->name);
        count *= t->shape[d];
    }
    t->nbytes = count * st_dtype_size(t->dtype);
    if (off[0] > off[1] || off[1] > datalen)
        return nmt_seterr("%s: tensor '%s': data_offsets [%llu, %llu] outside the %llu data bytes", p->name,
                          t->name, (unsigned long long)off[0], (unsigned long long)off[1],
                          (unsigned long long)datalen);
    if (off[1] - off[0] != t->nbytes)
        return nmt_seterr("%s: tensor '%s': data_offsets span %llu bytes, shape needs %llu", p->name, t->name,
                          (unsigned long long)(off[1] - off[0]), (unsigned long long)t->nbytes);
    *off0 = off[0];
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads one "name": {...} entry of the header object (P after the key's quote) into F, its offset in
 * the data area into the array *OFFS of capacity *CAP; 0 or -1 with the error set. */
static int parse_entry(struct jp *p, struct st_file *f, uint64_t **offs, size_t *cap,
                       const unsigned char *data, uint64_t datalen)
{
    char *key;
    if (jp_key(p, &key) < 0)
        return -1;
    if (!strcmp(key, "__metadata__")) {
        free(key);
        return parse_metadata(p, f);
    }
    if (f->nt >= ST_MAX_TENSORS) {
        free(key);
        return nmt_seterr("%s: more than %u tensors", p->name, ST_MAX_TENSORS);
    }
    if (NMT_GROW2(f->t, *offs, *cap, f->nt + 1) < 0) {
        free(key);
        return -1;
    }
    struct st_tensor *t = &f->t[f->nt++];
    memset(t, 0, sizeof *t);
    t->name = key;
    if (parse_tensor(p, t, &(*offs)[f->nt - 1], datalen) < 0)
        return -1;
    t->data = data + (*offs)[f->nt - 1];
    return 0;
}

/* Reads the header object (P at its start) into F's tensors; 0 or -1 with the error set. */
static int parse_header_object(struct jp *p, struct st_file *f, const unsigned char *data, uint64_t datalen)
{
    size_t cap = 0;
    uint64_t *offs = NULL;
    int rc = jp_expect(p, '{');
    if (rc == 0 && jp_peek(p) != '}') {
        for (;;) {
            if ((rc = parse_entry(p, f, &offs, &cap, data, datalen)) < 0)
                break;
            char c = jp_peek(p);
            if (c == ',') {
                p->i++;
                continue;
            }
            if (c != '}')
                rc = jp_err(p, "expected ',' or '}'");
            break;
        }
    }
    free(offs);
    if (rc < 0)
        return -1;
    p->i++;
    jp_ws(p);
    if (p->i != p->n)
        return jp_err(p, "trailing bytes after the header object");
    return 0;
}

/* Refuses a tensor name that F holds twice; 0 or -1 with the error set. */
static int check_unique_names(const struct st_file *f, const char *name)
{
    if (f->nt < 2)
        return 0;
    char **names = nmt_malloc(f->nt * sizeof *names);
    if (!names)
        return -1;
    for (size_t i = 0; i < f->nt; i++)
        names[i] = f->t[i].name;
    qsort(names, f->nt, sizeof *names, cmp_str);
    int rc = 0;
    for (size_t i = 1; i < f->nt && rc == 0; i++)
        if (!strcmp(names[i - 1], names[i]))
            rc = nmt_seterr("%s: duplicate tensor '%s'", name, names[i]);
    free(names);
    return rc;
}

struct st_file *st_parse(unsigned char *buf, size_t len, int own, const char *name)
{
    struct st_file *f = nmt_calloc(1, sizeof *f);
    if (!f) {
        if (own)
            free(buf);
        return NULL;
    }
    if (own)
        f->buf = buf;
    f->len = len;
    if (len < 8) {
        nmt_seterr("%s: not a safetensors file (%zu bytes, too short)", name, len);
        goto fail;
    }
    uint64_t hlen = nmt_le64(buf);
    if (hlen > ST_MAX_HEADER || hlen > len - 8) {
        nmt_seterr("%s: not a safetensors file or truncated (header length %llu, file %zu bytes)", name,
                   (unsigned long long)hlen, len);
        goto fail;
    }
    struct jp p = {(const char *)buf + 8, (size_t)hlen, 0, name};
    if (parse_header_object(&p, f, buf + 8 + hlen, len - 8 - hlen) < 0 || check_unique_names(f, name) < 0)
        goto fail;
    return f;
fail:
    st_free(f);
    return NULL;
}

/* Opens PATH, a regular file, for reading: its descriptor, and its size in *LEN; -1 with the error set. */
static int open_regular(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return nmt_seterr("cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        nmt_seterr("cannot read '%s': %s", path, S_ISDIR(sb.st_mode) ? "is a directory" : "not a regular file");
        close(fd);
        return -1;
    }
    *len = (size_t)sb.st_size;
    return fd;
}

/* Reads the N bytes at offset OFF of FD (PATH) into DST; 0, or -1 with the error set. */
static int read_at(int fd, const char *path, unsigned char *dst, size_t n, size_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, dst + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return nmt_seterr("cannot read '%s': %s", path, r < 0 ? strerror(errno) : "file shrank while reading");
        got += (size_t)r;
    }
    return 0;
}

struct st_file *st_read(const char *path) { return st_read_skip(path, NULL); }

/* Whether tensor NAME is left out by SKIP (a prefix, or NULL). */
static int skipped(const char *name, const char *skip) { return skip && !strncmp(name, skip, strlen(skip)); }

/* Reads the file FD (PATH) of LEN bytes into memory: the header, then the tensors not left out by
 * SKIP. Returns the st_file, or NULL with the error set. */
static struct st_file *read_into_memory(int fd, const char *path, size_t len, const char *skip)
{
    unsigned char *buf = nmt_malloc_large(len ? len : 1);
    if (!buf) {
        nmt_seterr("cannot read '%s': out of memory (%zu bytes)", path, len);
        return NULL;
    }
    /* the header first (st_parse checks its length against the file's), then each tensor kept */
    size_t head = len < 8 ? len : 8;
    int rc = read_at(fd, path, buf, head, 0);
    if (rc == 0 && head == 8) {
        uint64_t hlen = nmt_le64(buf);
        rc = read_at(fd, path, buf + 8, hlen <= len - 8 ? (size_t)hlen : 0, 8);
        head = 8 + (hlen <= len - 8 ? (size_t)hlen : 0);
    }
    if (rc == 0 && !skip)
        rc = read_at(fd, path, buf + head, len - head, head);
    if (rc < 0) {
        free(buf);
        return NULL;
    }
    struct st_file *f = st_parse(buf, len, 1, path);
    for (size_t i = 0; f && skip && i < f->nt; i++) {
        const struct st_tensor *t = &f->t[i];
        size_t at = (size_t)((const unsigned char *)t->data - buf);
        if (!skipped(t->name, skip) && read_at(fd, path, buf + at, (size_t)t->nbytes, at) < 0) {
            st_free(f);
            f = NULL;
        }
    }
    return f;
}

/* Maps the file FD (PATH) of LEN bytes read-only and parses it; NULL (errno set by mmap) when it
 * cannot be mapped, NULL with the error set when it is not a safetensors file. */
static struct st_file *map_file(int fd, const char *path, size_t len, int *mapped)
{
    *mapped = 0;
    long psz = sysconf(_SC_PAGESIZE);
    if (len < (size_t)(psz > 0 ? psz : 4096))
        return NULL;
    unsigned char *buf = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (buf == MAP_FAILED)
        return NULL;
    *mapped = 1;
    struct st_file *f = st_parse(buf, len, 0, path);
    if (!f) {
        munmap(buf, len);
        return NULL;
    }
    f->buf = buf;
    f->mapped = 1;
    return f;
}

/* Leaves the tensors whose names start with SKIP out of F's table. */
static void drop_skipped(struct st_file *f, const char *skip)
{
    size_t kept = 0;
    for (size_t i = 0; i < f->nt; i++) {
        if (skipped(f->t[i].name, skip))
            free(f->t[i].name);
        else
            f->t[kept++] = f->t[i];
    }
    f->nt = kept;
}

struct st_file *st_read_skip(const char *path, const char *skip)
{
    size_t len = 0;
    int fd = open_regular(path, &len);
    if (fd < 0)
        return NULL;
    int mapped = 0;
    struct st_file *f = map_file(fd, path, len, &mapped);
    if (!f && !mapped) /* not mapped (a file system without mmap): read */
        f = read_into_memory(fd, path, len, skip);
    close(fd);
    if (f && skip)
        drop_skipped(f, skip);
    return f;
}

/* Whether the N bytes at AT lie in the LEN bytes at BASE (a buffer F owns; NULL: none). */
static int within(const unsigned char *base, size_t len, uintptr_t at, size_t n)
{
    uintptr_t b = (uintptr_t)base;
    return base && at >= b && at - b <= len && n <= len - (at - b);
}

int st_discard(struct st_file *f, const void *p, size_t n)
{
    uintptr_t at = (uintptr_t)p;
    if (!within(f->buf, f->len, at, n) && !within(f->extra, f->extra_len, at, n))
        return nmt_seterr("st_discard: %zu bytes that are not in an image this file owns", n);
    long psz = sysconf(_SC_PAGESIZE);
    uintptr_t page = psz > 0 ? (uintptr_t)psz : 4096, lo = (at + page - 1) / page * page;
    uintptr_t hi = (at + (uintptr_t)n) / page * page;
    if (hi > lo && madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0)
        return nmt_seterr("st_discard: %s", strerror(errno));
    return 0;
}

void *st_extra(struct st_file *f, size_t n)
{
    if (f->extra)
        return nmt_seterr("st_extra: the file has its extra bytes already"), NULL;
    if (!(f->extra = nmt_malloc_large(n ? n : 1)))
        return NULL;
    f->extra_len = n;
    return f->extra;
}

const struct st_tensor *st_find(const struct st_file *f, const char *name)
{
    for (size_t i = 0; i < f->nt; i++)
        if (!strcmp(f->t[i].name, name))
            return &f->t[i];
    return NULL;
}

const char *st_meta(const struct st_file *f, const char *key)
{
    for (size_t i = 0; i < f->nmeta; i++)
        if (!strcmp(f->meta_key[i], key))
            return f->meta_val[i];
    return NULL;
}

int st_get(const struct st_file *f, const char *name, int dt, void *dst, uint64_t count)
{
    const struct st_tensor *t = st_find(f, name);
    if (!t)
        return nmt_seterr("tensor '%s' missing", name);
    if (t->dtype != dt)
        return nmt_seterr("tensor '%s' has dtype %s, expected %s", name, st_dtype_name(t->dtype), st_dtype_name(dt));
    if (t->nbytes != count * st_dtype_size(dt))
        return nmt_seterr("tensor '%s' has %llu elements, expected %llu", name,
                          (unsigned long long)(t->nbytes / st_dtype_size(dt)), (unsigned long long)count);
    if (count)
        memcpy(dst, t->data, (size_t)t->nbytes);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * writer */
struct st_fill {
    int (*fn)(void *arg, void *dst, uint64_t offset, size_t n);
    void *arg;
};

struct st_writer {
    struct st_fill *fill;      /* (cap) per tensor, fn NULL when data is given */
    struct st_tensor *t;
    size_t nt, cap;
    char **mk, **mv;
    size_t nm, mcap;
};

struct st_writer *st_writer_new(void)
{
    return nmt_calloc(1, sizeof(struct st_writer));
}

void st_writer_free(struct st_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->nt; i++)
        free(w->t[i].name);
    free(w->t);
    free(w->fill);
    for (size_t i = 0; i < w->nm; i++) {
        free(w->mk[i]);
        free(w->mv[i]);
    }
    free(w->mk);
    free(w->mv);
    free(w);
}

int st_writer_meta(struct st_writer *w, const char *key, const char *value)
{
    if (NMT_GROW2(w->mk, w->mv, w->mcap, w->nm + 1) < 0)
        return -1;
    char *k = nmt_strdup(key), *v = k ? nmt_strdup(value) : NULL;
    if (!v) {
        free(k);
        return -1;
    }
    w->mk[w->nm] = k;
    w->mv[w->nm++] = v;
    return 0;
}

int st_writer_add(struct st_writer *w, const char *name, int dt, int ndim, const uint64_t *shape, const void *data)
{
    if (dt < 0 || dt >= ST_NDTYPES || ndim < 0 || ndim > ST_MAX_DIMS || !*name || !strcmp(name, "__metadata__"))
        return nmt_seterr("safetensors: invalid tensor '%s'", name);
    for (size_t i = 0; i < w->nt; i++)
        if (!strcmp(w->t[i].name, name))
            return nmt_seterr("safetensors: duplicate tensor '%s'", name);
    if (NMT_GROW2(w->t, w->fill, w->cap, w->nt + 1) < 0)
        return -1;
    w->fill[w->nt].fn = NULL;
    w->fill[w->nt].arg = NULL;
    struct st_tensor *t = &w->t[w->nt];
    memset(t, 0, sizeof *t);
    t->name = nmt_strdup(name);
    if (!t->name)
        return -1;
    t->dtype = dt;
    t->ndim = ndim;
    uint64_t count = 1;
    for (int d = 0; d < ndim; d++) {
        t->shape[d] = shape[d];
        count *= shape[d];
    }
    t->nbytes = count * st_dtype_size(dt);
    t->data = data;
    w->nt++;
    return 0;
}

int st_writer_add_fn(struct st_writer *w, const char *name, int dt, int ndim, const uint64_t *shape,
                     int (*fill)(void *arg, void *dst, uint64_t offset, size_t n), void *arg)
{
    if (st_writer_add(w, name, dt, ndim, shape, NULL) < 0)
        return -1;
    w->fill[w->nt - 1].fn = fill;
    w->fill[w->nt - 1].arg = arg;
    return 0;
}

struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
};

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (NMT_GROW(b->p, b->cap, b->len + n + 1) < 0) {
        b->oom = 1;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_puts(struct sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_json(struct sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char e[8];
        if (c == '"' || c == '\\') {
            e[0] = '\\';
            e[1] = (char)c;
            sb_put(b, e, 2);
        } else if (c < 0x20) {
            snprintf(e, sizeof e, "\\u%04x", c);
            sb_put(b, e, 6);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

#define ST_FILL_CHUNK ((size_t)8 << 20)

static int write_all_fd(int fd, const void *p, size_t n, const char *tmp)
{
    if (nmt_write_all(fd, p, n) < 0)
        return nmt_seterr("cannot write '%s': %s", tmp, nmt_errmsg());
    return 0;
}

/* Appends the JSON header of W's metadata and tensors to H, padded to 8 bytes; 0 or -1. */
static int header_json(const struct st_writer *w, struct sbuf *h)
{
    char num[64];
    uint64_t off = 0;
    sb_puts(h, "{");
    if (w->nm) {
        sb_puts(h, "\"__metadata__\":{");
        for (size_t i = 0; i < w->nm; i++) {
            if (i)
                sb_puts(h, ",");
            sb_json(h, w->mk[i]);
            sb_puts(h, ":");
            sb_json(h, w->mv[i]);
        }
        sb_puts(h, "}");
    }
    for (size_t i = 0; i < w->nt; i++) {
        const struct st_tensor *t = &w->t[i];
        if (i || w->nm)
            sb_puts(h, ",");
        sb_json(h, t->name);
        sb_puts(h, ":{\"dtype\":\"");
        sb_puts(h, dtype_names[t->dtype]);
        sb_puts(h, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            snprintf(num, sizeof num, "%s%llu", d ? "," : "", (unsigned long long)t->shape[d]);
            sb_puts(h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + t->nbytes));
        sb_puts(h, num);
        off += t->nbytes;
    }
    sb_puts(h, "}");
    while (h->len % 8)
        sb_puts(h, " "); /* tensor data starts 8-byte aligned */
    return h->oom ? nmt_seterr("out of memory") : 0;
}

/* Writes tensor I of W to FD (from memory, or through its fill callback in chunks); 0 or -1. */
static int write_tensor(const struct st_writer *w, size_t i, int fd, const char *path, unsigned char **chunk)
{
    const struct st_tensor *t = &w->t[i];
    if (!w->fill[i].fn)
        return write_all_fd(fd, t->data, (size_t)t->nbytes, path);
    if (!*chunk && !(*chunk = nmt_malloc(ST_FILL_CHUNK)))
        return -1;
    for (uint64_t o = 0; o < t->nbytes; o += ST_FILL_CHUNK) {
        size_t n = t->nbytes - o < ST_FILL_CHUNK ? (size_t)(t->nbytes - o) : ST_FILL_CHUNK;
        if (w->fill[i].fn(w->fill[i].arg, *chunk, o, n) < 0)
            return nmt_seterr("cannot write '%s': tensor '%s': %s", path, t->name, nmt_errmsg());
        if (write_all_fd(fd, *chunk, n, path) < 0)
            return -1;
    }
    return 0;
}

int st_writer_write(struct st_writer *w, const char *path)
{
    struct sbuf h = {0};
    struct out_file out;
    if (header_json(w, &h) < 0 || out_file_open(&out, path) < 0) {
        free(h.p);
        return -1;
    }
    unsigned char len8[8], *chunk = NULL;
    nmt_put64(len8, h.len);
    int rc = write_all_fd(out.fd, len8, 8, path) < 0 || write_all_fd(out.fd, h.p, h.len, path) < 0 ? -1 : 0;
    for (size_t i = 0; i < w->nt && rc == 0; i++)
        if (w->t[i].nbytes)
            rc = write_tensor(w, i, out.fd, path, &chunk);
    free(chunk);
    free(h.p);
    if (rc < 0) {
        out_file_abort(&out);
        return -1;
    }
    return out_file_commit(&out);
}
