/* config.c: configuration files of long options (see config.h). */
#include "cli/config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "io/lines.h"

/* A growing argument vector. */
struct argv_buf {
    char **v;
    int n, cap;
};

static int push(struct argv_buf *a, char *s)
{
    if (!s)
        return nmt_seterr("out of memory");
    if (a->n + 2 > a->cap) {
        int cap = a->cap ? 2 * a->cap : 16;
        char **v = realloc(a->v, (size_t)cap * sizeof *v);
        if (!v) {
            free(s);
            return nmt_seterr("out of memory");
        }
        a->v = v, a->cap = cap;
    }
    a->v[a->n++] = s;
    a->v[a->n] = NULL;
    return 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = 0;
    return s;
}

/* The truth of VALUE for an option without argument: 1, 0, or -1 when it is neither. */
static int truth(const char *v)
{
    if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "1"))
        return 1;
    if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "0"))
        return 0;
    return -1;
}

/* Adds the option of line LINE (number LN of PATH) to A; SEEN holds the keys met so far. 0 or -1. */
static int config_line(struct argv_buf *a, struct argv_buf *seen, const char *path, int ln, char *line,
                       const struct opt_spec *spec)
{
    char *s = trim(line);
    if (!*s || *s == '#')
        return 0;
    size_t k = strcspn(s, ":=");
    if (!s[k])
        return nmt_seterr("%s:%d: expected 'key: value' or 'key = value'", path, ln);
    char *value = trim(s + k + 1);
    s[k] = 0;
    char *key = trim(s);
    const struct opt_spec *o = opt_find(spec, key);
    if (!*key || !o || !opt_in_config(o))
        return nmt_seterr("%s:%d: '%s' is not an option of the configuration", path, ln, key);
    for (int i = 0; i < seen->n; i++)
        if (!strcmp(seen->v[i], key))
            return nmt_seterr("%s:%d: '%s' is given twice", path, ln, key);
    if (push(seen, strdup(key)) < 0)
        return -1;
    char *arg = NULL;
    if (!opt_has_arg(o)) {
        int t = truth(value);
        if (t < 0)
            return nmt_seterr("%s:%d: '%s' takes true or false, not '%s'", path, ln, key, value);
        if (!t)
            return 0;
        if (asprintf(&arg, "--%s", key) < 0)
            arg = NULL;
    } else {
        if (!*value)
            return nmt_seterr("%s:%d: '%s' needs a value", path, ln, key);
        if (asprintf(&arg, "--%s=%s", key, value) < 0)
            arg = NULL;
    }
    return push(a, arg);
}

/* Adds the options of the file PATH to A. 0 or -1. */
static int config_file(struct argv_buf *a, const char *path, const struct opt_spec *spec)
{
    struct line_reader r;
    if (line_reader_open(&r, path, 0) < 0)
        return nmt_seterr("cannot open the configuration '%s': %s", path, strerror(errno));
    struct argv_buf seen = {0};
    char *line;
    size_t len;
    int rc = 0, got;
    while (rc == 0 && (got = line_next(&r, &line, &len)) == 1) {
        if (memchr(line, 0, len))
            rc = nmt_seterr("%s:%llu: a NUL byte: not a configuration file", path, (unsigned long long)r.line);
        else
            rc = config_line(a, &seen, path, (int)r.line, line, spec);
    }
    if (rc == 0 && got < 0)
        rc = nmt_seterr("cannot read the configuration: %s", nmt_errmsg());
    config_args_free(seen.n, seen.v);
    line_reader_close(&r);
    return rc;
}

int config_args(int argc, char **argv, const struct opt_spec *spec, int *nargc, char ***nargv)
{
    struct argv_buf a = {0}, rest = {0};
    int rc = push(&a, strdup(argc > 0 ? argv[0] : "nmt"));
    for (int i = 1; rc == 0 && i < argc; i++) {
        const char *path = NULL;
        if (!strcmp(argv[i], "--"))
            for (; rc == 0 && i < argc; i++)
                rc = push(&rest, strdup(argv[i]));
        else if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc)
                rc = nmt_seterr("option '--config' requires an argument");
            else
                path = argv[++i];
        } else if (!strncmp(argv[i], "--config=", 9))
            path = argv[i] + 9;
        else
            rc = push(&rest, strdup(argv[i]));
        if (rc == 0 && path)
            rc = config_file(&a, path, spec);
    }
    for (int i = 0; rc == 0 && i < rest.n; i++) {
        rc = push(&a, rest.v[i]);
        rest.v[i] = NULL;
    }
    config_args_free(rest.n, rest.v);
    if (rc < 0) {
        config_args_free(a.n, a.v);
        return -1;
    }
    *nargc = a.n, *nargv = a.v;
    return 0;
}

void config_args_free(int argc, char **argv)
{
    for (int i = 0; argv && i < argc; i++)
        free(argv[i]);
    free(argv);
}
