/* test_prefetch: the cpu plugin's plan of requests for the next column group's weights
 * (plugins/cpu/prefetch.h), simulated as the linear layers' row tiles make them: for tile counts,
 * loop lengths and group sizes of every kind, every line of the next group is asked for, tile 0 asks
 * for none, no line more than twice, and the requests are as far apart as still covers them. */
#include <stdlib.h>
#include <string.h>

#include "cpu/prefetch.h"
#include "test.h"

/* Counts into HITS (LINES + STEPS entries) the lines the NTILES tiles of STEPS steps ask for, as
 * linear.c's tiles do; returns the requests outside [0, LINES + STEPS). */
static long simulate(int ntiles, size_t steps, size_t lines, int sh, int *hits)
{
    static const char base[1];
    long outside = 0;
    for (int t = 0; t < ntiles; t++) {
        const char *pf = cpu_pf_plan(base, lines, t, steps >> sh);
        for (size_t k = 0; pf && k < steps; k++)
            if (!(k & (((size_t)1 << sh) - 1))) {
                size_t line = (size_t)(pf - base) / 64 + (k >> sh);
                if (line < lines + steps)
                    hits[line]++;
                else
                    outside++;
            }
    }
    return outside;
}

int main(void)
{
    static const int tiles[] = {1, 2, 3, 5, 6, 11, 22, 43};
    static const size_t steps[] = {1, 3, 128, 129, 512, 2048};
    static const size_t lines[] = {1, 64, 512, 513, 2048, 8192};
    int bad_cover = 0, bad_first = 0, bad_twice = 0, bad_spread = 0, cases = 0;
    for (size_t a = 0; a < sizeof tiles / sizeof *tiles; a++)
        for (size_t b = 0; b < sizeof steps / sizeof *steps; b++)
            for (size_t c = 0; c < sizeof lines / sizeof *lines; c++) {
                int nt = tiles[a];
                size_t st = steps[b], ln = lines[c];
                int sh = cpu_pf_shift(nt, st, ln);
                int *hits = calloc(ln + st, sizeof *hits);
                if (!hits)
                    return test_ok(0, "out of memory"), test_done();
                long outside = simulate(nt, st, ln, sh, hits);
                cases++;
                int covered = 1, twice = 0;
                for (size_t l = 0; l < ln; l++) {
                    covered &= hits[l] > 0;
                    twice |= hits[l] > 2;
                }
                /* every line when the tiles that ask have a step each for it */
                if ((size_t)(nt - 1) * st >= ln && !covered)
                    bad_cover++;
                if (twice || outside)
                    bad_twice++;
                /* one step further apart would leave lines out */
                if ((st >> (sh + 1)) > 0 && (size_t)(nt - 1) * (st >> (sh + 1)) >= ln && nt > 1)
                    bad_spread++;
                /* tile 0 asks for nothing */
                if (cpu_pf_plan((const char *)hits, ln, 0, st >> sh))
                    bad_first++;
                free(hits);
            }
    test_ok(bad_cover == 0, "every line of the next group asked for (%d of %d cases short)", bad_cover, cases);
    test_ok(bad_first == 0, "tile 0 asks for no line (%d cases)", bad_first);
    test_ok(bad_twice == 0, "no line asked for more than twice, none far past the group (%d cases)", bad_twice);
    test_ok(bad_spread == 0, "the requests as far apart as still covers the lines (%d cases)", bad_spread);
    test_ok(cpu_pf_shift(11, 512, 2048) == 1 && cpu_pf_shift(6, 512, 2048) == 0 && cpu_pf_shift(22, 512, 2048) == 2,
            "a float32 group of 512 columns deep: 64 rows ask every 2nd step, 32 rows every step, 128 every 4th");
    test_ok(cpu_pf_plan(NULL, 100, 3, 10) == NULL, "no requests without a next group");
    return test_done();
}
