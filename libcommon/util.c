/* util.c: error text, messages, file helpers (see util.h). */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rec.h"

static _Thread_local char err_buf[1024];
static const char *progname = "nmt";

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

void nmt_set_progname(const char *argv0)
{
    const char *slash = argv0 ? strrchr(argv0, '/') : NULL;
    progname = slash ? slash + 1 : (argv0 && *argv0 ? argv0 : "nmt");
}

const char *nmt_progname(void) { return progname; }

static void vmsg(const char *prefix, const char *fmt, va_list ap)
{
    char line[2048];
    vsnprintf(line, sizeof line, fmt, ap);
    fprintf(stderr, "%s: %s%s\n", progname, prefix, line);
}

void nmt_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
}

void nmt_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("warning: ", fmt, ap);
    va_end(ap);
}

int nmt_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
    fprintf(stderr, "Try '%s --help' for more information.\n", progname);
    return NMT_EXIT_USAGE;
}

void nmt_print_version(void)
{
    printf("%s (nmt) %s\nrecord stream format %d.%d\n", progname, NMT_VERSION, REC_MAJOR, REC_MINOR);
}

const char *nmt_path_name(const char *path, int output)
{
    if (!path || strcmp(path, "-") == 0)
        return output ? "stdout" : "stdin";
    return path;
}

int nmt_open_in(const char *path)
{
    if (!path || strcmp(path, "-") == 0)
        return STDIN_FILENO;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return nmt_seterr("cannot open '%s': %s", path, strerror(errno));
    return fd;
}

int nmt_open_out(const char *path, int binary)
{
    if (!path || strcmp(path, "-") == 0) {
        if (binary && isatty(STDOUT_FILENO))
            return nmt_seterr("refusing to write binary data to a terminal (use -o FILE or a pipe)");
        return STDOUT_FILENO;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        return nmt_seterr("cannot open '%s' for writing: %s", path, strerror(errno));
    return fd;
}

int nmt_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return nmt_seterr("write failed: %s", strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int nmt_close_stdout(void)
{
    int bad = ferror(stdout);
    if (fflush(stdout) != 0)
        bad = 1;
    int saved = errno;
    if (fclose(stdout) != 0 || bad) {
        if (!saved)
            saved = errno;
        return nmt_seterr("error writing to stdout: %s", saved ? strerror(saved) : "write error");
    }
    return 0;
}

void *nmt_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        nmt_seterr("out of memory (%zu bytes)", n);
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

int nmt_json_string(FILE *f, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    putc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned c = p[i];
        if (c == '"' || c == '\\') {
            putc('\\', f);
            putc((int)c, f);
        } else if (c < 0x20 || c == 0x7f) {
            switch (c) {
            case '\n': fputs("\\n", f); break;
            case '\t': fputs("\\t", f); break;
            case '\r': fputs("\\r", f); break;
            default: fprintf(f, "\\u%04x", c);
            }
        } else if (c < 0x80) {
            putc((int)c, f);
        } else {
            /* copy a well-formed UTF-8 sequence, else emit U+FFFD */
            size_t len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
            int ok = len > 0 && i + len <= n;
            for (size_t k = 1; ok && k < len; k++)
                ok = (p[i + k] & 0xC0) == 0x80;
            if (ok && len == 3) {
                unsigned cp = ((c & 0x0F) << 12) | ((p[i + 1] & 0x3F) << 6);
                ok = cp >= 0x800 && !(cp >= 0xD800 && cp <= 0xDFFF);
            }
            if (ok && len == 4) {
                unsigned cp = ((c & 0x07) << 18) | ((p[i + 1] & 0x3F) << 12);
                ok = cp >= 0x10000 && cp <= 0x10FFFF;
            }
            if (ok) {
                fwrite(p + i, 1, len, f);
                i += len - 1;
            } else {
                fputs("\\ufffd", f);
            }
        }
    }
    putc('"', f);
    return ferror(f) ? -1 : 0;
}

void nmt_put_token(FILE *f, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\')
            fputs("\\\\", f);
        else if (c == ' ')
            fputs("\\s", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\x%02x", c);
        else
            putc(c, f);
    }
}
