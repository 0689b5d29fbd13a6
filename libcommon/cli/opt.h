/* opt.h: the options of a tool, declared once in a table, and the range-checked parsers of their
 * arguments.
 *
 * The parsers parse ARG, the argument of option OPT ("--max-tokens"), store it and return 0; on
 * junk or a value out of range they print the usage error "PROG: invalid OPT 'ARG' (expected ...)"
 * with the --help hint and return -1, so a tool does `if (opt_u64(...) < 0) return NMT_EXIT_USAGE;`.
 *
 * The table (an array of struct opt_spec ended by OT_END) names each option once: its
 * long and short names, the type and range of its argument, its default, its help line and whether
 * a configuration file holds it. From it come the --help text (opt_help), getopt_long's parsing
 * into the tool's options struct (opt_parse), the keys of `--config FILE` (cli/config.h) and the
 * text of --dump-config (opt_dump). Each entry stores into the field at byte offset OFF of the
 * options struct (offsetof), of the C type its type (OT_...) names; its flags are OF_... */
#ifndef NMT_OPT_H
#define NMT_OPT_H

#include <getopt.h> /* optind, where the operands start after opt_parse */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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
/* One of CHOICES (NULL-terminated): stores its index in *OUT. */
int opt_choice(const char *opt, const char *arg, const char *const *choices, int *out);

enum opt_type {
    OT_END,      /* ends the table */
    OT_TEXT,     /* no option: HELP is a line of the --help text (a section heading) */
    OT_FLAG,     /* no argument; int field set to 1 (in a configuration: true or false) */
    OT_SET,      /* no argument; int field set to IMIN (options that share a field: a mode) */
    OT_STR,      /* const char * field: the argument itself (NULL: not given) */
    OT_INT,      /* int field in [IMIN, IMAX] (IMIN >= 0) */
    OT_U64,      /* uint64_t field in [IMIN, IMAX] */
    OT_DOUBLE,   /* double field in [DMIN, DMAX], ends excluded by OF_MIN_OPEN, OF_MAX_OPEN */
    OT_DURATION, /* double field: seconds, or with s, m, h; in [DMIN, DMAX] as OT_DOUBLE */
    OT_CHOICE,   /* int field: the index of the argument in CHOICES (a negative default: not given) */
    OT_CUSTOM,   /* the entry's PARSE stores the argument (none when ARG is NULL), SHOW writes it
                  * for --dump-config */
    OT_HELP,     /* --help: opt_parse returns OPT_GOT_HELP */
    OT_VERSION,  /* --version: opt_parse returns OPT_GOT_VERSION */
    OT_CONFIG,   /* --config FILE, expanded by config_args (cli/config.h) before opt_parse */
};

enum {
    OF_MIN_OPEN = 1,  /* numbers: DMIN itself excluded */
    OF_MAX_OPEN = 2,  /* numbers: DMAX itself excluded */
    OF_ZERO_UNSET = 4, /* numbers: 0 means "not given" (--dump-config writes it as a comment) */
    OF_NO_CONFIG = 8, /* never in a configuration file (--dump-config itself) */
    OF_NO_DUMP = 16,  /* a configuration file may hold it, --dump-config does not write it */
    OF_OPTIONAL_ARG = 32, /* OT_CUSTOM: the argument may be left out (--text or --text=ids); PARSE
                           * then gets NULL */
};

/* One option of a tool. */
struct opt_spec {
    enum opt_type type;
    const char *name;     /* long name without the dashes; the key in a configuration file */
    const char *alias;    /* NULL, or a second long name, shown with one dash ("-nr, --num-refs N")
                           * for opt_parse_with's OPT_LONG_ONLY */
    char short_name;      /* 0: none */
    const char *arg;      /* the argument's name in --help ("N", "FILE"); NULL for a flag */
    const char *help;     /* its help text; '\n' starts a line under the first; NULL: not in --help */
    size_t off;           /* offsetof the field in the options struct */
    int flags;            /* OF_MIN_OPEN ... */
    uint64_t imin, imax;  /* OT_INT, OT_U64 */
    double dmin, dmax;    /* OT_DOUBLE, OT_DURATION */
    const char *const *choices; /* OT_CHOICE: NULL-terminated */
    union {
        const char *s;
        uint64_t u;
        double d;
        int i;
    } def;                /* stored by opt_defaults: .s, .u, .d or .i after the field's type */
    /* OT_CUSTOM: stores ARG of OPT (NULL: none given) into FIELD: 0, or -1 after a usage error */
    int (*parse)(const char *opt, const char *arg, void *field);
    /* OT_CUSTOM: the text of FIELD for --dump-config (NULL: not given); may be NULL */
    const char *(*show)(const void *field);
};

/* The first fields of an entry, in the order a table reads best:
 *   {OPTION(OT_U64, "max-steps", 0, "N", offsetof(struct opts, max_steps), "total steps"), .imin = 1, .imax = 99}
 * (the others by designator). */
#define OPTION(type_, name_, short_, arg_, off_, help_)                                                          \
    .type = (type_), .name = (name_), .short_name = (short_), .arg = (arg_), .off = (off_), .help = (help_)

/* The last entries of most tables: -h/--help, --version and the end. */
#define OPT_HELP_VERSION_END                                                                                     \
    {OPTION(OT_HELP, "help", 'h', NULL, 0, "show this help and exit")},                                          \
        {OPTION(OT_VERSION, "version", 0, NULL, 0, "show version information and exit")}, {.type = OT_END}

/* What opt_parse found. */
enum { OPT_USAGE = -1, OPT_OK = 0, OPT_GOT_HELP = 1, OPT_GOT_VERSION = 2 };

/* Stores the default of every entry of SPEC into the options struct at O (fields of no entry are
 * left as they are). */
void opt_defaults(const struct opt_spec *spec, void *o);
/* Parses ARGV's options (ARGC entries) with getopt_long into O (the fields of options not given
 * are left as they are: opt_defaults first stores the table's); the operands then start at
 * argv[optind]. Returns OPT_OK; OPT_GOT_HELP or OPT_GOT_VERSION at the first --help
 * or --version (the tool prints them); or OPT_USAGE after printing the usage error (getopt's own
 * message, or opt's, and the --help hint). */
int opt_parse(const struct opt_spec *spec, int argc, char **argv, void *o);
/* opt_parse with what most tools do at --help (opt_help on stdout from HEAD, SPEC and TAIL) and
 * --version (nmt_print_version). Returns OPT_PROCEED when the tool goes on, else its exit status:
 * 0 after --help or --version, 1 when stdout failed, 2 after a usage error. */
enum { OPT_PROCEED = -1 };
int opt_parse_tool(const struct opt_spec *spec, int argc, char **argv, void *o, const char *head,
                   const char *tail);
/* How opt_parse_with parses. */
enum {
    OPT_LONG_ONLY = 1,   /* long options after one dash too (-tok 13a), as Python's argparse */
    OPT_OWN_ERRORS = 2,  /* "unknown option 'ARG'" and "option 'ARG' needs a value" instead of
                          * getopt's messages */
};
/* opt_parse, the parsing chosen by HOW (OPT_LONG_ONLY | OPT_OWN_ERRORS; 0 is opt_parse). */
int opt_parse_with(const struct opt_spec *spec, int argc, char **argv, void *o, int how);
/* Writes to F the help text: HEAD, the options of SPEC with their help from column 26, then TAIL. */
void opt_help(FILE *f, const char *head, const struct opt_spec *spec, const char *tail);
/* Prints opt_help on stdout and closes it: the exit status of --help (0, or 1 if stdout failed). */
int opt_help_exit(const char *head, const struct opt_spec *spec, const char *tail);
/* Writes to F the options of O that a configuration holds, one "name: value" a line in the order
 * of SPEC; one not given (a NULL string, 0 with OF_ZERO_UNSET, NaN) as the comment "# name:". */
void opt_dump(FILE *f, const struct opt_spec *spec, const void *o);
/* The entry of SPEC with long name NAME, or NULL. */
const struct opt_spec *opt_find(const struct opt_spec *spec, const char *name);
/* Whether a configuration file may hold entry S (an option, not --help, --version, --config or
 * one with OF_NO_CONFIG); 1 or 0. */
int opt_in_config(const struct opt_spec *s);
/* Whether entry S takes an argument; 1 or 0. */
int opt_has_arg(const struct opt_spec *s);

#endif
