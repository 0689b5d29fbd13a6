/* test_grow.c: the growth rule of growable arrays (nmt_grow, nmt_grow2): capacities double from 16,
 * contents survive, overflow is refused with the arrays unchanged. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "test.h"

static void test_grow_one(void)
{
    int *a = NULL;
    size_t cap = 0;
    test_ok(NMT_GROW(a, cap, 0) == 0 && a == NULL && cap == 0, "grow to 0 leaves an empty array alone");
    test_ok(NMT_GROW(a, cap, 5) == 0 && a && cap == 16, "first growth gives 16 elements");
    for (int i = 0; i < 16; i++)
        a[i] = i;
    test_ok(NMT_GROW(a, cap, 100) == 0 && cap == 128, "growth to 100 doubles to 128");
    int same = 1;
    for (int i = 0; i < 16; i++)
        same &= a[i] == i;
    test_ok(same, "contents survive growth");
    int *before = a;
    test_ok(NMT_GROW(a, cap, SIZE_MAX / 2) < 0 && a == before && cap == 128, "overflow refused, array unchanged");
    free(a);
}

static void test_grow_two(void)
{
    double *x = NULL;
    char *c = NULL;
    size_t cap = 0;
    test_ok(NMT_GROW2(x, c, cap, 17) == 0 && x && c && cap == 32, "two arrays grow to one capacity");
    for (int i = 0; i < 32; i++) {
        x[i] = i * 0.5;
        c[i] = (char)('a' + i % 26);
    }
    test_ok(NMT_GROW2(x, c, cap, 33) == 0 && cap == 64, "and double together");
    int same = 1;
    for (int i = 0; i < 32; i++)
        same &= x[i] == i * 0.5 && c[i] == (char)('a' + i % 26);
    test_ok(same, "both contents survive growth");
    test_ok(NMT_GROW2(x, c, cap, 10) == 0 && cap == 64, "a smaller need changes nothing");
    test_ok(NMT_GROW2(x, c, cap, SIZE_MAX / 4) < 0 && cap == 64, "overflow refused, capacity unchanged");
    free(x);
    free(c);
}

int main(void)
{
    test_grow_one();
    test_grow_two();
    return test_done();
}
