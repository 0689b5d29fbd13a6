/* lines.c: line reading with every failure told apart from the end, pairs of files and tables
 * (see lines.h). */
#include "io/lines.h"

#include <csv.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "io/file.h"

int line_reader_fdopen(struct line_reader *r, int fd, const char *name, size_t max)
{
    memset(r, 0, sizeof *r);
    r->name = name;
    r->max = max ? max : LINES_DEFAULT_MAX;
    if (fd == STDIN_FILENO) {
        r->f = stdin;
        return 0;
    }
    r->f = fdopen(fd, "r");
    if (!r->f) {
        int e = errno;
        close(fd);
        return nmt_seterr("cannot open '%s': %s", name, strerror(e));
    }
    r->own = 1;
    return 0;
}

int line_reader_open(struct line_reader *r, const char *path, size_t max)
{
    memset(r, 0, sizeof *r);
    r->name = nmt_path_name(path, 0);
    int fd = nmt_open_in(path);
    if (fd < 0)
        return -1;
    return line_reader_fdopen(r, fd, nmt_path_name(path, 0), max);
}

/* Reads line LINENO of R into its buffer without the newline: its length, 0 with *END set at the
 * end of input, or -1 with the error set. */
static long long get_line(struct line_reader *r, uint64_t lineno, int *end)
{
    *end = 0;
    errno = 0;
    ssize_t n = getline(&r->buf, &r->cap, r->f);
    if (n < 0) {
        if (!ferror(r->f) && feof(r->f)) {
            *end = 1;
            return 0;
        }
        if (errno == ENOMEM || errno == EOVERFLOW)
            return nmt_seterr("%s: line %llu: out of memory (a line longer than this machine can hold)", r->name,
                              (unsigned long long)lineno);
        return nmt_seterr("cannot read '%s': %s", r->name, strerror(errno ? errno : EIO));
    }
    if (n > 0 && r->buf[n - 1] == '\n')
        r->buf[--n] = '\0';
    if ((size_t)n > r->max)
        return nmt_seterr("%s: line %llu: longer than %zu bytes (--max-line-bytes)", r->name,
                          (unsigned long long)lineno, r->max);
    return n;
}

int line_next(struct line_reader *r, char **line, size_t *len)
{
    int end;
    long long n = get_line(r, r->line + 1, &end);
    if (n < 0)
        return -1;
    if (end)
        return 0;
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

int line_pair_next(struct line_reader *a, struct line_reader *b, char **la, size_t *na, char **lb, size_t *nb)
{
    int ra = line_next(a, la, na);
    if (ra < 0)
        return -1;
    int rb = line_next(b, lb, nb);
    if (rb < 0)
        return -1;
    if (ra == rb)
        return ra;
    const struct line_reader *longer = ra ? a : b, *shorter = ra ? b : a;
    nmt_seterr("%s: line %llu: no matching line in '%s', which has %llu lines", longer->name,
               (unsigned long long)longer->line, shorter->name, (unsigned long long)shorter->line);
    return LINES_UNPAIRED;
}

/* ---- tables ---- */

static int no_space(unsigned char ch) { return 0; } /* blanks around a field are data */

static int csv_start(struct table_reader *t)
{
    if (csv_init(t->p, CSV_STRICT | CSV_STRICT_FINI) != 0)
        return nmt_seterr("out of memory");
    csv_set_delim(t->p, t->delim);
    csv_set_space_func(t->p, no_space);
    return 0;
}

int table_open(struct table_reader *t, const char *path, enum table_kind kind, unsigned char delim, size_t max)
{
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->delim = kind == TABLE_TSV ? '\t' : delim;
    if (kind == TABLE_CSV) {
        if (!(t->p = nmt_malloc(sizeof *t->p)))
            return -1;
        if (csv_start(t) < 0) {
            free(t->p);
            t->p = NULL;
            return -1;
        }
    }
    if (line_reader_open(&t->lr, path, max) < 0) {
        table_close(t);
        return -1;
    }
    return 0;
}

/* Makes room for field N of the row: 0, or -1 with the error set. */
static int table_room(struct table_reader *t, size_t n)
{
    return NMT_GROW(t->f, t->fcap, n + 1) < 0 || (t->kind == TABLE_CSV && NMT_GROW(t->off, t->ocap, n + 1) < 0)
               ? -1 : 0;
}

/* libcsv's callback for a field: stored in DATA, NUL-terminated. */
static void table_field_cb(void *data, size_t len, void *arg)
{
    struct table_reader *t = arg;
    if (t->failed)
        return;
    if (table_room(t, t->n) < 0 || NMT_GROW(t->data, t->dcap, t->dlen + len + 1) < 0) {
        t->failed = 1;
        return;
    }
    if (len)
        memcpy(t->data + t->dlen, data, len);
    t->data[t->dlen + len] = '\0';
    t->off[t->n] = t->dlen;
    t->f[t->n++].len = len;
    t->dlen += len + 1;
}

static void table_row_cb(int term, void *arg) { ((struct table_reader *)arg)->row_done = 1; }

/* Hands out the CSV row just completed: 1. */
static int csv_row(struct table_reader *t)
{
    for (size_t i = 0; i < t->n; i++)
        t->f[i].text = (const char *)t->data + t->off[i];
    t->line = t->lr.line;
    t->row++;
    return 1;
}

/* Drops the row being read and restarts the parser after an error libcsv reports; TABLE_MALFORMED,
 * or -1 if the parser cannot restart. */
static int csv_malformed(struct table_reader *t, const char *where)
{
    int err = csv_error(t->p);
    csv_free(t->p);
    t->n = t->dlen = 0;
    t->pos = t->end;
    t->line = t->lr.line;
    if (csv_start(t) < 0)
        return -1;
    return nmt_seterr("%s: line %llu: malformed CSV%s (%s)", t->lr.name, (unsigned long long)t->lr.line, where,
                      csv_strerror(err)), TABLE_MALFORMED;
}

/* The next CSV row: each line is fed to libcsv up to each CR or LF in turn, so that at most one row
 * ends in each piece and rows come out one at a time. */
static int csv_next(struct table_reader *t)
{
    for (;;) {
        if (t->pos < t->end) {
            const char *s = t->text + t->pos;
            size_t k = 0, avail = t->end - t->pos;
            while (k < avail && s[k] != '\n' && s[k] != '\r')
                k++;
            k += k < avail;
            size_t used = csv_parse(t->p, s, k, table_field_cb, table_row_cb, t);
            if (t->failed)
                return -1;
            if (used != k)
                return csv_malformed(t, "");
            t->pos += k;
            if (t->row_done)
                return csv_row(t);
            continue;
        }
        if (t->ended)
            return 0;
        char *line;
        size_t len;
        int rc = line_next(&t->lr, &line, &len);
        if (rc < 0)
            return -1;
        if (rc == 0) {
            t->ended = 1;
            if (csv_fini(t->p, table_field_cb, table_row_cb, t) != 0)
                return csv_malformed(t, " at the end");
            if (t->failed)
                return -1;
            return t->row_done ? csv_row(t) : 0;
        }
        line[len] = '\n'; /* the reader's buffer holds the NUL after the line: the newline goes back */
        t->text = line;
        t->pos = 0;
        t->end = len + 1;
    }
}

/* The next TSV row: the fields point into the line, each tab replaced by a NUL. */
static int tsv_next(struct table_reader *t)
{
    for (;;) {
        char *line;
        size_t len;
        int rc = line_next(&t->lr, &line, &len);
        if (rc <= 0)
            return rc;
        if (len > 0 && line[len - 1] == '\r')
            line[--len] = '\0';
        if (len == 0)
            continue;
        for (char *f = line, *end = line + len;;) {
            char *tab = memchr(f, '\t', (size_t)(end - f));
            if (table_room(t, t->n) < 0)
                return -1;
            t->f[t->n].text = f;
            t->f[t->n++].len = (size_t)((tab ? tab : end) - f);
            if (!tab)
                break;
            *tab = '\0';
            f = tab + 1;
        }
        t->line = t->lr.line;
        t->row++;
        return 1;
    }
}

int table_next(struct table_reader *t)
{
    t->n = 0; /* no row is ever left half read between calls */
    if (t->kind == TABLE_TSV)
        return tsv_next(t);
    t->row_done = 0;
    t->dlen = 0;
    return csv_next(t);
}

void table_close(struct table_reader *t)
{
    if (t->p)
        csv_free(t->p);
    free(t->p);
    free(t->f);
    free(t->off);
    free(t->data);
    line_reader_close(&t->lr);
    memset(t, 0, sizeof *t);
}
