/* opt.c: a tool's option table (--help, parsing, --dump-config) and the parsers of option arguments (opt.h). */
#include "cli/opt.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* Describes [MIN, MAX] (ends excluded by OF_MIN_OPEN, OF_MAX_OPEN of FLAGS) into BUF: "a positive
 * number", "a number in [0, 1)". */
static void describe_range(double min, double max, int flags, char *buf, size_t n)
{
    int lo = flags & OF_MIN_OPEN, hi = flags & OF_MAX_OPEN;
    if (isinf(max) && min == 0)
        snprintf(buf, n, "a %s number", lo ? "positive" : "non-negative");
    else if (isinf(max))
        snprintf(buf, n, "a number %s %g", lo ? "above" : "at least", min);
    else
        snprintf(buf, n, "a number in %c%g, %g%c", lo ? '(' : '[', min, max, hi ? ')' : ']');
}

/* 1 when V lies in [MIN, MAX] (ends excluded by OF_MIN_OPEN, OF_MAX_OPEN of FLAGS; NaN never does). */
static int in_range(double v, double min, double max, int flags)
{
    return (flags & OF_MIN_OPEN ? v > min : v >= min) && (flags & OF_MAX_OPEN ? v < max : v <= max);
}

/* Stores V, read from ARG of option OPT, into *OUT when in_range: 0, or -1 after the usage error. */
static int store_in_range(const char *opt, const char *arg, double v, double min, double max, int flags,
                          double *out)
{
    if (!in_range(v, min, max, flags)) {
        char range[96];
        describe_range(min, max, flags, range, sizeof range);
        return nmt_usage_error("invalid %s '%s' (expected %s)", opt, arg, range), -1;
    }
    *out = v;
    return 0;
}

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
    if (nmt_parse_double(arg, &v) < 0)
        v = NAN;
    return store_in_range(opt, arg, v, min, max, max_open ? OF_MAX_OPEN : 0, out);
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

int opt_choice(const char *opt, const char *arg, const char *const *choices, int *out)
{
    int n = 0;
    for (; choices[n]; n++)
        if (!strcmp(arg, choices[n])) {
            *out = n;
            return 0;
        }
    char list[512];
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ",
                                choices[i]);
    return nmt_usage_error("invalid %s '%s' (expected %s)", opt, arg, list), -1;
}

/* ---- the table ---- */

#define FIELD(o, s, type) ((type *)(void *)((char *)(o) + (s)->off))
#define CFIELD(o, s, type) ((const type *)(const void *)((const char *)(o) + (s)->off))

int opt_has_arg(const struct opt_spec *s)
{
    if (s->type == OT_CUSTOM)
        return s->arg != NULL;
    return s->type != OT_FLAG && s->type != OT_SET && s->type != OT_HELP && s->type != OT_VERSION && s->type != OT_TEXT;
}

int opt_in_config(const struct opt_spec *s)
{
    return s->name && s->type != OT_HELP && s->type != OT_VERSION && s->type != OT_CONFIG &&
           s->type != OT_TEXT && !(s->flags & OF_NO_CONFIG);
}

const struct opt_spec *opt_find(const struct opt_spec *spec, const char *name)
{
    for (; spec->type != OT_END; spec++)
        if (spec->name && !strcmp(spec->name, name))
            return spec;
    return NULL;
}

void opt_defaults(const struct opt_spec *spec, void *o)
{
    for (const struct opt_spec *s = spec; s->type != OT_END; s++) {
        switch (s->type) {
        case OT_FLAG: case OT_INT: case OT_CHOICE: *FIELD(o, s, int) = s->def.i; break;
        case OT_STR: *FIELD(o, s, const char *) = s->def.s; break;
        case OT_U64: *FIELD(o, s, uint64_t) = s->def.u; break;
        case OT_DOUBLE: case OT_DURATION: *FIELD(o, s, double) = s->def.d; break;
        default: break; /* custom fields keep the struct's initial value */
        }
    }
}

/* Parses the number ARG of entry S (option OPT): 0, or -1 after the usage error. */
static int parse_real(const struct opt_spec *s, const char *opt, const char *arg, double *out)
{
    double v;
    if (s->type != OT_DURATION) {
        if (nmt_parse_double(arg, &v) < 0)
            v = NAN;
        return store_in_range(opt, arg, v, s->dmin, s->dmax, s->flags, out);
    }
    if (opt_duration(opt, arg, &v) < 0)
        return -1;
    if (!in_range(v, s->dmin, s->dmax, s->flags))
        return nmt_usage_error("invalid %s '%s' (expected seconds, or a number with s, m or h)", opt, arg), -1;
    *out = v;
    return 0;
}

/* Stores ARG (NULL for a flag) of entry S into O: 0, or -1 after the usage error. */
static int store(const struct opt_spec *s, const char *arg, void *o)
{
    char opt[64];
    snprintf(opt, sizeof opt, "--%s", s->name);
    switch (s->type) {
    case OT_FLAG: *FIELD(o, s, int) = 1; return 0;
    case OT_SET: *FIELD(o, s, int) = (int)s->imin; return 0;
    case OT_STR: *FIELD(o, s, const char *) = arg; return 0;
    case OT_INT: return opt_int(opt, arg, (int)s->imin, (int)s->imax, FIELD(o, s, int));
    case OT_U64: return opt_u64(opt, arg, s->imin, s->imax, FIELD(o, s, uint64_t));
    case OT_DOUBLE: case OT_DURATION: return parse_real(s, opt, arg, FIELD(o, s, double));
    case OT_CHOICE: return opt_choice(opt, arg, s->choices, FIELD(o, s, int));
    case OT_CUSTOM: return s->parse(opt, arg, FIELD(o, s, void));
    default: return 0;
    }
}

/* The getopt value of entry I of SPEC: its short name, else 256 + I. */
static int opt_val(const struct opt_spec *spec, int i)
{
    return spec[i].short_name ? (unsigned char)spec[i].short_name : 256 + i;
}

/* The number of entries of SPEC. */
static int opt_count(const struct opt_spec *spec)
{
    int n = 0;
    while (spec[n].type != OT_END)
        n++;
    return n;
}

/* Builds getopt_long's tables for SPEC (N entries): LO (2N + 1 entries, aliases included) and
 * SHORTS (3N + 2 bytes, starting with ':' under OPT_OWN_ERRORS of HOW). */
static void getopt_tables(const struct opt_spec *spec, int n, struct option *lo, char *shorts, int how)
{
    int k = 0, j = 0;
    if (how & OPT_OWN_ERRORS)
        shorts[j++] = ':';
    for (int i = 0; i < n; i++) {
        if (!spec[i].name)
            continue;
        int has = !opt_has_arg(&spec[i])                 ? no_argument
                  : spec[i].flags & OF_OPTIONAL_ARG ? optional_argument
                                                    : required_argument;
        lo[k++] = (struct option){spec[i].name, has, NULL, opt_val(spec, i)};
        if (spec[i].alias)
            lo[k++] = (struct option){spec[i].alias, has, NULL, opt_val(spec, i)};
        if (spec[i].short_name) {
            shorts[j++] = spec[i].short_name;
            if (opt_has_arg(&spec[i]))
                shorts[j++] = ':';
            if (opt_has_arg(&spec[i]) && (spec[i].flags & OF_OPTIONAL_ARG))
                shorts[j++] = ':';
        }
    }
    lo[k] = (struct option){NULL, 0, NULL, 0};
    shorts[j] = 0;
}

/* The index of the entry of SPEC (N entries) whose getopt value is CH, or -1. */
static int entry_of(const struct opt_spec *spec, int n, int ch)
{
    for (int i = 0; i < n; i++)
        if (spec[i].name && opt_val(spec, i) == ch)
            return i;
    return -1;
}

/* The usage error of getopt's answer CH ('?' or ':') under OPT_OWN_ERRORS, naming the argument
 * getopt stopped at in ARGV; OPT_USAGE. */
static int own_error(int ch, char **argv)
{
    const char *what = argv[optind > 0 ? optind - 1 : 0];
    if (ch == ':')
        nmt_usage_error("option '%s' needs a value", what);
    else
        nmt_usage_error("unknown option '%s'", what);
    return OPT_USAGE;
}

int opt_parse_tool(const struct opt_spec *spec, int argc, char **argv, void *o, const char *head, const char *tail)
{
    switch (opt_parse(spec, argc, argv, o)) {
    case OPT_GOT_HELP: return opt_help_exit(head, spec, tail);
    case OPT_GOT_VERSION: nmt_print_version(); return nmt_close_stdout() < 0 ? NMT_EXIT_DATA : NMT_EXIT_OK;
    case OPT_USAGE: return NMT_EXIT_USAGE;
    default: return OPT_PROCEED;
    }
}

int opt_parse(const struct opt_spec *spec, int argc, char **argv, void *o)
{
    return opt_parse_with(spec, argc, argv, o, 0);
}

int opt_parse_with(const struct opt_spec *spec, int argc, char **argv, void *o, int how)
{
    int n = opt_count(spec), ch, rc = OPT_OK;
    struct option *lo = malloc((2 * (size_t)n + 1) * sizeof *lo);
    char *shorts = malloc(3 * (size_t)n + 2);
    if (!lo || !shorts) {
        free(lo), free(shorts);
        nmt_error("out of memory");
        return OPT_USAGE;
    }
    getopt_tables(spec, n, lo, shorts, how);
    opterr = !(how & OPT_OWN_ERRORS);
    while (rc == OPT_OK && (ch = (how & OPT_LONG_ONLY ? getopt_long_only : getopt_long)(argc, argv, shorts, lo,
                                                                                        NULL)) != -1) {
        int i = entry_of(spec, n, ch);
        if (i < 0)
            rc = how & OPT_OWN_ERRORS ? own_error(ch, argv) : (nmt_usage_hint(), OPT_USAGE);
        else if (spec[i].type == OT_HELP || spec[i].type == OT_VERSION)
            rc = spec[i].type == OT_HELP ? OPT_GOT_HELP : OPT_GOT_VERSION;
        else if (store(&spec[i], optarg, o) < 0)
            rc = OPT_USAGE;
    }
    free(lo);
    free(shorts);
    return rc;
}

/* Writes the left column of entry S ("  -o, --output FILE") into BUF (N bytes); returns its width. */
static int help_left(const struct opt_spec *s, char *buf, size_t n)
{
    char shortpart[32] = "    ";
    if (s->short_name)
        snprintf(shortpart, sizeof shortpart, "-%c, ", s->short_name);
    else if (s->alias)
        snprintf(shortpart, sizeof shortpart, "-%s, ", s->alias);
    int optional = s->type == OT_CUSTOM && (s->flags & OF_OPTIONAL_ARG);
    int w = snprintf(buf, n, "  %s--%s%s%s%s", shortpart, s->name, !s->arg ? "" : optional ? "[=" : " ",
                     s->arg ? s->arg : "", s->arg && optional ? "]" : "");
    return w < (int)n ? w : (int)n - 1;
}

void opt_help(FILE *f, const char *head, const struct opt_spec *spec, const char *tail)
{
    enum { col = 26 }; /* where the help texts start; a longer option is followed by two blanks */
    fputs(head, f);
    for (const struct opt_spec *s = spec; s->type != OT_END; s++) {
        if (!s->name || !s->help) { /* a heading; an option not listed */
            if (!s->name)
                fprintf(f, "%s\n", s->help);
            continue;
        }
        char left[128];
        int w = help_left(s, left, sizeof left);
        fputs(left, f);
        const char *h = s->help ? s->help : "";
        if (!*h)
            fputc('\n', f);
        for (int first = 1; *h; first = 0) {
            size_t len = strcspn(h, "\n");
            if (!first)
                w = 0;
            fprintf(f, "%*s%.*s\n", w < col - 1 ? col - w : 2, "", (int)len, h);
            h += len + (h[len] == '\n');
        }
    }
    fputs(tail, f);
}

int opt_help_exit(const char *head, const struct opt_spec *spec, const char *tail)
{
    opt_help(stdout, head, spec, tail);
    return nmt_close_stdout() < 0 ? 1 : 0;
}

/* Writes the value of entry S of O to F as "name: value", or "# name:" when not given. */
static void dump_one(FILE *f, const struct opt_spec *s, const void *o)
{
    char buf[64];
    const char *v = buf;
    switch (s->type) {
    case OT_FLAG: v = *CFIELD(o, s, int) ? "true" : "false"; break;
    case OT_SET: v = *CFIELD(o, s, int) == (int)s->imin ? "true" : "false"; break;
    case OT_STR: v = *CFIELD(o, s, const char *); break;
    case OT_CHOICE: v = *CFIELD(o, s, int) >= 0 ? s->choices[*CFIELD(o, s, int)] : NULL; break;
    case OT_CUSTOM: v = s->show ? s->show(CFIELD(o, s, void)) : NULL; break;
    case OT_INT: {
        int x = *CFIELD(o, s, int);
        snprintf(buf, sizeof buf, "%d", x);
        v = x == 0 && (s->flags & OF_ZERO_UNSET) ? NULL : buf;
        break;
    }
    case OT_U64: {
        uint64_t x = *CFIELD(o, s, uint64_t);
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)x);
        v = x == 0 && (s->flags & OF_ZERO_UNSET) ? NULL : buf;
        break;
    }
    default: {
        double x = *CFIELD(o, s, double);
        snprintf(buf, sizeof buf, "%.7g", x);
        v = isnan(x) || (x == 0 && (s->flags & OF_ZERO_UNSET)) ? NULL : buf;
        break;
    }
    }
    if (v)
        fprintf(f, "%s: %s\n", s->name, v);
    else
        fprintf(f, "# %s:\n", s->name);
}

void opt_dump(FILE *f, const struct opt_spec *spec, const void *o)
{
    for (const struct opt_spec *s = spec; s->type != OT_END; s++)
        if (opt_in_config(s) && !(s->flags & OF_NO_DUMP))
            dump_one(f, s, o);
}
