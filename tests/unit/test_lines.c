/* test_lines: io/lines.h: lines with and without a final newline, empty lines, NUL bytes inside a
 * line, the length limit, a read error and a missing file, each told apart from the end of input;
 * pairs of files that end together or not; TSV and CSV rows (quoted fields over lines, a CR inside
 * a line, malformed rows and what follows them, the limit). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "io/lines.h"
#include "test.h"

static char path[64], path2[64];

static void put_to(const char *p, const char *bytes, size_t n)
{
    FILE *f = fopen(p, "wb");
    fwrite(bytes, 1, n, f);
    fclose(f);
}

static void put(const char *bytes, size_t n) { put_to(path, bytes, n); }

static void test_lines(void)
{
    put("ab\n\nc\0d\nlast", 12);
    struct line_reader r;
    char *s;
    size_t n;
    test_ok(line_reader_open(&r, path, 0) == 0, "open");
    int ok = line_next(&r, &s, &n) == 1 && n == 2 && !memcmp(s, "ab", 2) && r.line == 1;
    ok &= line_next(&r, &s, &n) == 1 && n == 0;
    ok &= line_next(&r, &s, &n) == 1 && n == 3 && !memcmp(s, "c\0d", 3);
    ok &= line_next(&r, &s, &n) == 1 && n == 4 && !memcmp(s, "last", 4) && r.line == 4;
    test_ok(ok, "four lines: plain, empty, with a NUL byte, without a final newline");
    test_ok(line_next(&r, &s, &n) == 0 && line_next(&r, &s, &n) == 0, "then the end, again and again");
    line_reader_close(&r);
}

static void test_limit(void)
{
    put("12345\n123456\n", 13);
    struct line_reader r;
    char *s;
    size_t n;
    line_reader_open(&r, path, 5);
    test_ok(line_next(&r, &s, &n) == 1 && n == 5, "a line of exactly the limit is read");
    int rc = line_next(&r, &s, &n);
    test_ok(rc == -1 && strstr(nmt_errmsg(), ": line 2: longer than 5 bytes (--max-line-bytes)") &&
                strstr(nmt_errmsg(), path), "a longer line is an error naming the file and line: %s", nmt_errmsg());
    line_reader_close(&r);
}

static void test_errors(void)
{
    struct line_reader r;
    char *s;
    size_t n;
    test_ok(line_reader_open(&r, "/nonexistent/x", 0) == -1 && strstr(nmt_errmsg(), "cannot open '/nonexistent/x'"),
            "a missing file: %s", nmt_errmsg());
    test_ok(line_reader_open(&r, "/", 0) == 0, "a directory opens");
    test_ok(line_next(&r, &s, &n) == -1 && strstr(nmt_errmsg(), "cannot read '/'"),
            "and reading it is an error, not the end: %s", nmt_errmsg());
    line_reader_close(&r);
}


static void test_pairs(void)
{
    put("a\nb\nc\n", 6);
    put_to(path2, "x\ny\n", 4);
    struct line_reader a, b;
    char *la, *lb;
    size_t na, nb;
    line_reader_open(&a, path, 0);
    line_reader_open(&b, path2, 0);
    int ok = line_pair_next(&a, &b, &la, &na, &lb, &nb) == 1 && na == 1 && *la == 'a' && nb == 1 && *lb == 'x';
    ok &= line_pair_next(&a, &b, &la, &na, &lb, &nb) == 1 && *la == 'b' && *lb == 'y';
    test_ok(ok, "two pairs");
    int rc = line_pair_next(&a, &b, &la, &na, &lb, &nb);
    char want[256];
    snprintf(want, sizeof want, "%s: line 3: no matching line in '%s', which has 2 lines", path, path2);
    test_ok(rc == LINES_UNPAIRED && !strcmp(nmt_errmsg(), want), "a line without a partner: %s", nmt_errmsg());
    test_ok(line_pair_next(&a, &b, &la, &na, &lb, &nb) == 0, "then the end of both");
    line_reader_close(&a);
    line_reader_close(&b);

    put_to(path2, "x\n0123456\n", 10);
    line_reader_open(&a, path, 0);
    line_reader_open(&b, path2, 5);
    line_pair_next(&a, &b, &la, &na, &lb, &nb);
    rc = line_pair_next(&a, &b, &la, &na, &lb, &nb);
    snprintf(want, sizeof want, "%s: line 2: longer than 5 bytes (--max-line-bytes)", path2);
    test_ok(rc == -1 && !strcmp(nmt_errmsg(), want), "a long line in the second file: %s", nmt_errmsg());
    line_reader_close(&a);
    line_reader_close(&b);
}

/* Reads every row of the table at PATH into OUT as "field|field;" per row, "!N" for a malformed
 * row at line N, "E" for an error, a newline in a field as "\\n"; returns the last table_next status. */
static int rows(enum table_kind kind, unsigned char delim, size_t max, char *out, size_t cap)
{
    struct table_reader t;
    size_t o = 0;
    out[0] = 0;
    if (table_open(&t, path, kind, delim, max) < 0)
        return -1;
    int rc;
    while ((rc = table_next(&t)) != 0 && o + 64 < cap) {
        if (rc == TABLE_MALFORMED) {
            o += (size_t)snprintf(out + o, cap - o, "!%llu;", (unsigned long long)t.line);
            continue;
        }
        if (rc < 0) {
            o += (size_t)snprintf(out + o, cap - o, "E");
            break;
        }
        for (size_t i = 0; i < t.n && o + 64 < cap; i++) {
            if (strlen(t.f[i].text) != t.f[i].len) /* NUL-terminated, no NUL inside in these tests */
                o += (size_t)snprintf(out + o, cap - o, "?");
            if (i)
                out[o++] = '|';
            for (const char *c = t.f[i].text; *c && o + 8 < cap; c++) /* a newline shown as \n */
                o += (size_t)snprintf(out + o, cap - o, *c == '\n' ? "\\n" : "%c", *c);
        }
        o += (size_t)snprintf(out + o, cap - o, "@%llu#%llu;", (unsigned long long)t.line,
                              (unsigned long long)t.row);
    }
    table_close(&t);
    return rc;
}

static void test_tables(void)
{
    char out[512];
    const char tsv[] = "a\tb\n\n\"q\tc\r\n\t\nlast\tno newline";
    put(tsv, sizeof tsv - 1);
    int rc = rows(TABLE_TSV, 0, 0, out, sizeof out);
    test_ok(rc == 0 && !strcmp(out, "a|b@1#1;\"q|c@3#2;|@4#3;last|no newline@5#4;"),
            "TSV: split at tabs, quotes are data, CR and blank lines dropped: %s", out);

    const char csv[] = "a,b\n\"multi\nline\",  x  \r\n\"q\"\"\",c\rcr,mid\n\n\"x\"y,bad\nz,\"w\"";
    put(csv, sizeof csv - 1);
    rc = rows(TABLE_CSV, ',', 0, out, sizeof out);
    test_ok(rc == 0 && !strcmp(out, "a|b@1#1;multi\\nline|  x  @3#2;q\"|c@4#3;cr|mid@4#4;!6;z|w@7#5;"),
            "CSV: quoted fields over lines, blanks kept, a CR ends a row, a malformed row is dropped: %s", out);

    put("a;b\n\"x;y\";z\n", 12);
    rc = rows(TABLE_CSV, ';', 0, out, sizeof out);
    test_ok(rc == 0 && !strcmp(out, "a|b@1#1;x;y|z@2#2;"), "CSV with another delimiter: %s", out);

    put("a,b\n\"open,c\n", 12);
    rc = rows(TABLE_CSV, ',', 0, out, sizeof out);
    test_ok(rc == 0 && !strcmp(out, "a|b@1#1;!2;"), "an open quote at the end is one malformed row: %s", out);
    struct table_reader t;
    table_open(&t, path, TABLE_CSV, ',', 0);
    table_next(&t);
    char want[256];
    snprintf(want, sizeof want, "%s: line 2: malformed CSV at the end (", path);
    test_ok(table_next(&t) == TABLE_MALFORMED && !strncmp(nmt_errmsg(), want, strlen(want)),
            "its message names the file and line: %s", nmt_errmsg());
    test_ok(table_next(&t) == 0, "and then the end");
    table_close(&t);

    for (int k = 0; k < 2; k++) {
        put(k ? "a,\"b\n0123456\n\"\n" : "a\tb\n0123456\n", k ? 15 : 12);
        table_open(&t, path, k ? TABLE_CSV : TABLE_TSV, ',', 5);
        rc = table_next(&t);
        if (!k)
            rc = table_next(&t);
        snprintf(want, sizeof want, "%s: line 2: longer than 5 bytes (--max-line-bytes)", path);
        test_ok(rc == -1 && !strcmp(nmt_errmsg(), want), "%s: a line over the limit%s: %s", k ? "CSV" : "TSV",
                k ? " inside a quoted field" : "", nmt_errmsg());
        table_close(&t);
    }
    test_ok(table_open(&t, "/nonexistent/x", TABLE_CSV, ',', 0) == -1 &&
                strstr(nmt_errmsg(), "cannot open '/nonexistent/x'"), "a missing table: %s", nmt_errmsg());
    table_close(&t);
}

int main(void)
{
    snprintf(path, sizeof path, "/tmp/test_lines.%d", (int)getpid());
    snprintf(path2, sizeof path2, "/tmp/test_lines2.%d", (int)getpid());
    test_lines();
    test_limit();
    test_errors();
    test_pairs();
    test_tables();
    unlink(path);
    unlink(path2);
    return test_done();
}
