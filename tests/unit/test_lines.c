/* test_lines: io/lines.h: lines with and without a final newline, empty lines, NUL bytes inside a
 * line, the length limit, a read error and a missing file, each told apart from the end of input. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "io/lines.h"
#include "test.h"

static char path[64];

static void put(const char *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(bytes, 1, n, f);
    fclose(f);
}

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

int main(void)
{
    snprintf(path, sizeof path, "/tmp/test_lines.%d", (int)getpid());
    test_lines();
    test_limit();
    test_errors();
    unlink(path);
    return test_done();
}
