/* test.h: a minimal TAP producer for the C unit tests. Each check prints "ok N - what" or
 * "not ok N - what"; test_done() prints the plan and returns the exit status for main. */
#ifndef NMT_TEST_H
#define NMT_TEST_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int test_n, test_failed;

/* Records one check: passes when COND is non-zero; WHAT is a printf format naming it. */
static void test_ok(int cond, const char *what, ...) __attribute__((format(printf, 2, 3), unused));
static void test_ok(int cond, const char *what, ...)
{
    va_list ap;
    va_start(ap, what);
    printf("%sok %d - ", cond ? "" : "not ", ++test_n);
    vprintf(what, ap);
    printf("\n");
    va_end(ap);
    if (!cond)
        test_failed++;
    fflush(stdout);
}

/* Prints the TAP plan; returns 0 when every check passed, 1 otherwise. */
static int test_done(void) __attribute__((unused));
static int test_done(void)
{
    printf("1..%d\n", test_n);
    return test_failed ? 1 : 0;
}

/* Directory of the source tree (for fixtures), from NMT_SRCDIR or ".". */
static const char *test_srcdir(void) __attribute__((unused));
static const char *test_srcdir(void)
{
    const char *d = getenv("NMT_SRCDIR");
    return d && *d ? d : ".";
}

#endif
