/* opt.h: the range-checked parsers of option arguments every tool uses. Each parses ARG, the
 * argument of option OPT ("--max-tokens"), stores it and returns 0; on junk or a value out of
 * range it prints the usage error "PROG: invalid OPT 'ARG' (expected ...)" with the --help hint
 * and returns -1, so a tool does `if (opt_u64(...) < 0) return NMT_EXIT_USAGE;`. */
#ifndef NMT_OPT_H
#define NMT_OPT_H

#include <stdint.h>

/* An integer in [MIN, MAX]. */
int opt_u64(const char *opt, const char *arg, uint64_t min, uint64_t max, uint64_t *out);
/* An int in [MIN, MAX] (MIN >= 0). */
int opt_int(const char *opt, const char *arg, int min, int max, int *out);
/* A finite number in [MIN, MAX] (MAX_OPEN: MAX itself excluded). */
int opt_double(const char *opt, const char *arg, double min, double max, int max_open, double *out);
/* A probability in [0, 1). */
int opt_prob(const char *opt, const char *arg, double *out);
/* A duration: seconds, or a number with the suffix s, m or h; stored in seconds. */
int opt_duration(const char *opt, const char *arg, double *out);

#endif
