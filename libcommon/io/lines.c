/* lines.c: line reading with every failure told apart from the end (see lines.h). */
#include "io/lines.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "io/file.h"

int line_reader_open(struct line_reader *r, const char *path, size_t max)
{
    memset(r, 0, sizeof *r);
    r->name = nmt_path_name(path, 0);
    r->max = max ? max : LINES_DEFAULT_MAX;
    int fd = nmt_open_in(path);
    if (fd < 0)
        return -1;
    if (fd == 0) {
        r->f = stdin;
        return 0;
    }
    r->f = fdopen(fd, "r");
    if (!r->f) {
        int e = errno;
        close(fd);
        return nmt_seterr("cannot open '%s': %s", r->name, strerror(e));
    }
    r->own = 1;
    return 0;
}

long long lines_get(FILE *f, const char *name, uint64_t lineno, size_t max, char **buf, size_t *cap)
{
    errno = 0;
    ssize_t n = getline(buf, cap, f);
    if (n < 0) {
        if (!ferror(f) && feof(f))
            return LINES_END;
        if (errno == ENOMEM || errno == EOVERFLOW)
            return nmt_seterr("%s: line %llu: out of memory (a line longer than this machine can hold)", name,
                              (unsigned long long)lineno), LINES_ERROR;
        return nmt_seterr("cannot read '%s': %s", name, strerror(errno ? errno : EIO)), LINES_ERROR;
    }
    if (n > 0 && (*buf)[n - 1] == '\n')
        (*buf)[--n] = '\0';
    if ((size_t)n > max)
        return nmt_seterr("%s: line %llu: longer than %zu bytes (--max-line-bytes)", name, (unsigned long long)lineno,
                          max), LINES_ERROR;
    return n;
}

int line_next(struct line_reader *r, char **line, size_t *len)
{
    long long n = lines_get(r->f, r->name, r->line + 1, r->max, &r->buf, &r->cap);
    if (n == LINES_END)
        return 0;
    if (n < 0)
        return -1;
    r->line++;
    *line = r->buf;
    *len = (size_t)n;
    return 1;
}

void line_reader_close(struct line_reader *r)
{
    if (r->own && r->f)
        fclose(r->f);
    free(r->buf);
    memset(r, 0, sizeof *r);
}
