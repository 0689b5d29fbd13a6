/* cli.c: messages, usage errors, version text and text output helpers of the tools (see cli.h). */
#include "cli/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "base/utf8.h"
#include "io/stream.h"

static const char *progname = "nmt";

void nmt_set_progname(const char *argv0)
{
    const char *slash = argv0 ? strrchr(argv0, '/') : NULL;
    progname = slash ? slash + 1 : (argv0 && *argv0 ? argv0 : "nmt");
}

void nmt_start(char **argv)
{
    nmt_set_progname(argv[0]);
    argv[0] = (char *)progname;
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

int nmt_usage_hint(void)
{
    fprintf(stderr, "Try '%s --help' for more information.\n", progname);
    return NMT_EXIT_USAGE;
}

void nmt_print_version(void)
{
    printf("%s (nmt) %s\nrecord stream format %d.%d\n", progname, NMT_VERSION, REC_MAJOR, REC_MINOR);
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
            int32_t cp;
            int len = utf8_next(p + i, n - i, &cp);
            if (cp >= 0) {
                fwrite(p + i, 1, (size_t)len, f);
                i += (size_t)len - 1;
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
