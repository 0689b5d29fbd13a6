/* opt.c: option argument parsers (see opt.h). */
#include "cli/opt.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

int opt_u64(const char *opt, const char *arg, uint64_t min, uint64_t max, uint64_t *out)
{
    uint64_t v;
    if (nmt_parse_u64(arg, max, &v) < 0 || v < min)
        return nmt_usage_error("invalid %s '%s' (expected an integer from %llu to %llu)", opt, arg,
                               (unsigned long long)min, (unsigned long long)max), -1;
    *out = v;
    return 0;
}

int opt_int(const char *opt, const char *arg, int min, int max, int *out)
{
    uint64_t v;
    if (opt_u64(opt, arg, (uint64_t)min, (uint64_t)max, &v) < 0)
        return -1;
    *out = (int)v;
    return 0;
}

int opt_double(const char *opt, const char *arg, double min, double max, int max_open, double *out)
{
    double v;
    if (nmt_parse_double(arg, &v) < 0 || !(v >= min) || (max_open ? !(v < max) : !(v <= max)))
        return nmt_usage_error("invalid %s '%s' (expected a number in [%g, %g%s)", opt, arg, min, max,
                               max_open ? ")" : "]"), -1;
    *out = v;
    return 0;
}

int opt_prob(const char *opt, const char *arg, double *out) { return opt_double(opt, arg, 0, 1, 1, out); }

int opt_duration(const char *opt, const char *arg, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(arg, &end);
    double unit = !strcmp(end, "h") ? 3600 : !strcmp(end, "m") ? 60 : (!*end || !strcmp(end, "s")) ? 1 : 0;
    if (end == arg || errno || !(v >= 0) || !isfinite(v) || unit == 0)
        return nmt_usage_error("invalid %s '%s' (expected seconds, or a number with s, m or h)", opt, arg), -1;
    *out = v * unit;
    return 0;
}
