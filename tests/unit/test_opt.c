/* test_opt: cli/opt.h's option table: defaults, every argument type with its range and its errors
 * (exit status and message), short and long names, --help and --version found, the help text's
 * columns, --dump-config's lines (unset values as comments) read back through cli/config.h to the
 * same options. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/config.h"
#include "cli/opt.h"
#include "test.h"

struct opts {
    const char *out, *name;
    int flag, n, mode;
    uint64_t big, unset;
    double rate, time, scale;
    int custom, level;
};

static int parse_twice(const char *opt, const char *arg, void *field)
{
    int v;
    if (opt_int(opt, arg, 0, 10, &v) < 0)
        return -1;
    *(int *)field = 2 * v;
    return 0;
}

/* --level[=N]: N, or 1 when left out */
static int parse_level(const char *opt, const char *arg, void *field)
{
    if (!arg)
        return *(int *)field = 1, 0;
    return opt_int(opt, arg, 0, 9, field);
}

static const char *show_custom(const void *field) { return *(const int *)field ? "set" : NULL; }

static const char *const MODES[] = {"fast", "ordered", "exact", NULL};
#define OFF(f) offsetof(struct opts, f)
static const struct opt_spec SPEC[] = {
    {.type = OT_TEXT, .help = "Section:"},
    {OPTION(OT_STR, "output", 'o', "FILE", OFF(out),
            "where\nsecond line"),
     .def.s = "-"},
    {OPTION(OT_STR, "name", 0, "S", OFF(name),
            "a name"),
     .alias = "nm"},
    {OPTION(OT_FLAG, "flag", 'f', NULL, OFF(flag),
            "a flag")},
    {OPTION(OT_INT, "n", 0, "N", OFF(n),
            "a count"),
     .imin = 1, .imax = 9, .def.i = 3},
    {OPTION(OT_CHOICE, "mode", 0, "M", OFF(mode),
            "a mode"),
     .choices = MODES, .def.i = 1},
    {OPTION(OT_U64, "big", 0, "N", OFF(big),
            "big"),
     .imin = 0, .imax = UINT64_MAX, .def.u = 7},
    {OPTION(OT_U64, "unset", 0, "N", OFF(unset),
            "0: unset"),
     .flags = OF_ZERO_UNSET, .imin = 1, .imax = 100},
    {OPTION(OT_DOUBLE, "rate", 0, "R", OFF(rate),
            "a rate"),
     .flags = OF_MIN_OPEN | OF_MAX_OPEN, .dmin = 0, .dmax = 1, .def.d = 0.5},
    {OPTION(OT_DURATION, "time", 0, "DUR", OFF(time),
            "a time"),
     .flags = OF_ZERO_UNSET | OF_MIN_OPEN, .dmin = 0, .dmax = INFINITY},
    {OPTION(OT_DOUBLE, "scale", 0, "X", OFF(scale),
            "a scale"),
     .flags = OF_MIN_OPEN, .dmin = 0, .dmax = INFINITY, .def.d = NAN},
    {OPTION(OT_CUSTOM, "custom", 0, "K", OFF(custom),
            "twice K"),
     .parse = parse_twice, .show = show_custom},
    {OPTION(OT_SET, "exact", 'x', NULL, OFF(mode),
            "--mode exact"),
     .imin = 2},
    {OPTION(OT_CUSTOM, "level", 0, "N", OFF(level),
            "a level"),
     .flags = OF_OPTIONAL_ARG, .parse = parse_level},
    {OPTION(OT_CONFIG, "config", 0, "FILE", 0,
            "read options")},
    {OPTION(OT_FLAG, "hidden", 0, NULL, OFF(flag),
            NULL),
     .flags = OF_NO_CONFIG},
    {OPTION(OT_HELP, "help", 'h', NULL, 0,
            "help")},
    {OPTION(OT_VERSION, "version", 0, NULL, 0,
            "version")},
    {.type = OT_END}};

static char errpath[64];
static int parse_how; /* opt_parse_with's HOW for parse() */

/* Parses the NULL-terminated arguments after the program name into O with stderr captured; returns
 * opt_parse's result, the captured text in ERR. */
static int parse(struct opts *o, char *err, size_t n, ...)
{
    char *argv[32] = {"nmt-test"};
    int argc = 1;
    va_list ap;
    va_start(ap, n);
    for (char *a; argc < 31 && (a = va_arg(ap, char *));)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(errpath, "w+");
    dup2(fileno(f), 2);
    optind = 0;
    *o = (struct opts){0};
    opt_defaults(SPEC, o);
    int rc = opt_parse_with(SPEC, argc, argv, o, parse_how);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    size_t got = fread(err, 1, n - 1, f);
    err[got] = 0;
    fclose(f);
    return rc;
}

static void test_parse(void)
{
    struct opts o;
    char err[512];
    test_ok(parse(&o, err, sizeof err, NULL) == OPT_OK && !strcmp(o.out, "-") && !o.name && o.n == 3 &&
                o.mode == 1 && o.big == 7 && o.rate == 0.5 && isnan(o.scale) && optind == 1,
            "no options: the defaults");
    test_ok(parse(&o, err, sizeof err, "-o", "x", "--name=y", "-f", "--n", "9", "--mode", "exact", "--big",
                  "18446744073709551615", "--rate", "0.25", "--time", "2m", "--custom", "4", "in", NULL) == OPT_OK &&
                !strcmp(o.out, "x") && !strcmp(o.name, "y") && o.flag && o.n == 9 && o.mode == 2 &&
                o.big == UINT64_MAX && o.rate == 0.25 && o.time == 120 && o.custom == 8 && optind == 17,
            "every type stored; the operand left at optind");
    test_ok(parse(&o, err, sizeof err, "--mode", "fast", "-x", NULL) == OPT_OK && o.mode == 2,
            "OT_SET stores its value in the field it shares");
    test_ok(parse(&o, err, sizeof err, "--level", "x", NULL) == OPT_OK && o.level == 1 && optind == 2,
            "an optional argument left out: the parser gets NULL; the next word is an operand");
    test_ok(parse(&o, err, sizeof err, "--level=7", NULL) == OPT_OK && o.level == 7, "an optional argument given");
    test_ok(parse(&o, err, sizeof err, "--n", "10", NULL) == OPT_USAGE &&
                strstr(err, "nmt-test: invalid --n '10' (expected an integer from 1 to 9)\n") &&
                strstr(err, "Try 'nmt-test --help'"),
            "an int out of range: the usage error and the hint (%s)", err);
    test_ok(parse(&o, err, sizeof err, "--mode", "slow", NULL) == OPT_USAGE &&
                strstr(err, "invalid --mode 'slow' (expected fast, ordered or exact)"),
            "an unknown choice lists the choices (%s)", err);
    test_ok(parse(&o, err, sizeof err, "--rate", "1", NULL) == OPT_USAGE &&
                strstr(err, "invalid --rate '1' (expected a number in (0, 1))"),
            "open ends of a range are excluded (%s)", err);
    test_ok(parse(&o, err, sizeof err, "--scale", "0", NULL) == OPT_USAGE &&
                strstr(err, "invalid --scale '0' (expected a positive number)"),
            "an unbounded range reads as a positive number (%s)", err);
    test_ok(parse(&o, err, sizeof err, "--time", "0", NULL) == OPT_USAGE && strstr(err, "invalid --time '0'"),
            "a duration in its range (%s)", err);
    test_ok(parse(&o, err, sizeof err, "--custom", "11", NULL) == OPT_USAGE && strstr(err, "invalid --custom '11'"),
            "a custom parser's error (%s)", err);
    test_ok(parse(&o, err, sizeof err, "--bogus", NULL) == OPT_USAGE && strstr(err, "'--bogus'") &&
                strstr(err, "Try 'nmt-test --help'"),
            "an unknown option (%s)", err);
    test_ok(parse(&o, err, sizeof err, "--n", NULL) == OPT_USAGE && strstr(err, "'--n' requires an argument"),
            "a missing argument (%s)", err);
    test_ok(parse(&o, err, sizeof err, "--flag=1", NULL) == OPT_USAGE, "a flag given a value");
    test_ok(parse(&o, err, sizeof err, "-f", "--help", "--n", "0", NULL) == OPT_GOT_HELP && !*err,
            "--help is reported before later options are read");
    test_ok(parse(&o, err, sizeof err, "--version", NULL) == OPT_GOT_VERSION, "--version is reported");
}

/* OPT_LONG_ONLY and OPT_OWN_ERRORS: sacreBLEU's way. */
static void test_long_only(void)
{
    struct opts o;
    char err[512];
    test_ok(parse(&o, err, sizeof err, "-nm", "a", "-flag", NULL) == OPT_USAGE, "without OPT_LONG_ONLY, -nm is -n -m");
    parse_how = OPT_LONG_ONLY | OPT_OWN_ERRORS;
    test_ok(parse(&o, err, sizeof err, "-nm", "a", "-flag", "--mode", "exact", NULL) == OPT_OK && !strcmp(o.name, "a") &&
                o.flag && o.mode == 2,
            "long options and aliases after one dash");
    test_ok(parse(&o, err, sizeof err, "--bogus", NULL) == OPT_USAGE &&
                !strcmp(err, "nmt-test: unknown option '--bogus'\nTry 'nmt-test --help' for more information.\n"),
            "an unknown option in the own words (%s)", err);
    test_ok(parse(&o, err, sizeof err, "-o", NULL) == OPT_USAGE && strstr(err, "nmt-test: option '-o' needs a value\n"),
            "a missing value in the own words (%s)", err);
    parse_how = 0;
}

static void test_help(void)
{
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    opt_help(f, "Usage: t\n", SPEC, "End.\n");
    fclose(f);
    test_ok(!strncmp(text, "Usage: t\nSection:\n  -o, --output FILE       where\n", 47), "head, section, first option");
    test_ok(strstr(text, "\n      --level[=N]         a level\n") != NULL, "an optional argument in brackets");
    test_ok(strstr(text, "\n  -nm, --name S           a name\n") && !strstr(text, "--hidden"),
            "an alias before the long name; an option without help not listed");
    test_ok(strstr(text, "\n                          second line\n") != NULL, "a continuation line under the column");
    test_ok(strstr(text, "\n      --mode M            a mode\n") && strstr(text, "\n  -h, --help              help\n") &&
                !strcmp(text + strlen(text) - 5, "End.\n"),
            "long-only and short options in one column; the tail");
    free(text);
}

static void test_dump(void)
{
    struct opts o;
    char err[512];
    parse(&o, err, sizeof err, "--name", "a b", "--mode", "fast", "--custom", "1", NULL);
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    opt_dump(f, SPEC, &o);
    fclose(f);
    const char *want = "output: -\nname: a b\nflag: false\nn: 3\nmode: fast\nbig: 7\n# unset:\nrate: 0.5\n"
                       "# time:\n# scale:\ncustom: set\nexact: false\n# level:\n";
    test_ok(!strcmp(text, want), "the dump: table order, unset values as comments, no hidden option (%s)", text);
    /* read back through a configuration file */
    char conf[80];
    snprintf(conf, sizeof conf, "%s.conf", errpath);
    FILE *c = fopen(conf, "w");
    fputs("n: 5\n", c);
    fclose(c);
    char *argv[] = {"nmt-test", "--config", conf, "--rate", "0.75", NULL};
    int nargc;
    char **nargv;
    test_ok(config_args(5, argv, SPEC, &nargc, &nargv) == 0 && nargc == 4 && !strcmp(nargv[1], "--n=5") &&
                !strcmp(nargv[2], "--rate"),
            "config_args puts the file's options first");
    optind = 0;
    test_ok(opt_parse(SPEC, nargc, nargv, &o) == OPT_OK && o.n == 5 && o.rate == 0.75, "and they parse");
    config_args_free(nargc, nargv);
    c = fopen(conf, "w");
    fputs("hidden: true\n", c);
    fclose(c);
    test_ok(config_args(3, argv, SPEC, &nargc, &nargv) < 0 &&
                strstr(nmt_errmsg(), ":1: 'hidden' is not an option of the configuration"),
            "an OF_NO_CONFIG option is refused in a file (%s)", nmt_errmsg());
    c = fopen(conf, "w");
    fputs("help: true\n", c);
    fclose(c);
    test_ok(config_args(3, argv, SPEC, &nargc, &nargv) < 0, "so is --help");
    unlink(conf);
    free(text);
}

int main(void)
{
    nmt_set_progname("nmt-test");
    snprintf(errpath, sizeof errpath, "/tmp/test_opt.%d", (int)getpid());
    test_parse();
    test_long_only();
    test_help();
    test_dump();
    unlink(errpath);
    return test_done();
}
