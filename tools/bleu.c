/* nmt-bleu: BLEU, chrF/chrF++ and TER with sacreBLEU 2.6.0's numbers, options and output.
 * main parses options, reads the files and calls libcommon/eval/bleu.h. */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/utf8.h"
#include "eval/bleu.h"
#include "cli/cli.h"
#include "cli/opt.h"
#include "io/lines.h"

#define BLEU_TOOL_VERSION "nmt-bleu-" NMT_VERSION "+sacrebleu-" BLEU_SACREBLEU_VERSION


struct text_lines {
    char *data;        /* the lines, each followed by a newline (malloc'ed) */
    const char **line; /* rstripped lines (pointers into data) */
    size_t *len;
    size_t n;
};

static void lines_free(struct text_lines *l)
{
    free(l->data);
    free(l->line);
    free(l->len);
    memset(l, 0, sizeof *l);
}

static int lines_push(struct text_lines *l, size_t *cap, const char *p, size_t len)
{
    if (NMT_GROW2(l->line, l->len, *cap, l->n + 1) < 0)
        return -1;
    l->line[l->n] = p;
    l->len[l->n++] = len;
    return 0;
}

/* Reads PATH ("-" = stdin) into lines of at most MAX bytes split on '\n', each checked for UTF-8
 * and rstripped as Python does. Returns 0, or -1 with the error printed. */
static int read_lines(const char *path, size_t max, struct text_lines *l)
{
    memset(l, 0, sizeof *l);
    struct line_reader r;
    if (line_reader_open(&r, path, max) < 0) {
        nmt_error("%s", nmt_errmsg());
        return -1;
    }
    struct nmt_buf data = {0};
    size_t *start = NULL, scap = 0, lcap = 0, nl = 0;
    struct stat sb;
    if (fstat(fileno(r.f), &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0 &&
        nmt_buf_reserve(&data, (size_t)sb.st_size + 1) < 0) /* a file's lines fit without regrowth */
        goto fail;
    char *line;
    size_t len;
    int rc;
    while ((rc = line_next(&r, &line, &len)) == 1) {
        size_t bad;
        if (utf8_check(line, len, &bad) < 0) {
            nmt_seterr("invalid UTF-8 in '%s' line %llu (byte offset %zu)", r.name, (unsigned long long)r.line,
                       data.len + bad);
            goto fail;
        }
        if (NMT_GROW(start, scap, nl + 1) < 0 || nmt_buf_append(&data, line, len) < 0 ||
            nmt_buf_append(&data, "\n", 1) < 0)
            goto fail;
        start[nl++] = data.len - len - 1;
    }
    if (rc < 0)
        goto fail;
    l->data = (char *)data.data;
    for (size_t i = 0; i < nl; i++) {
        const char *p = l->data + start[i];
        size_t n = (i + 1 < nl ? start[i + 1] : data.len) - start[i] - 1;
        if (lines_push(l, &lcap, p, bleu_rstrip_len(p, n)) < 0) {
            free(start);
            line_reader_close(&r);
            nmt_error("%s", nmt_errmsg());
            lines_free(l);
            return -1;
        }
    }
    free(start);
    line_reader_close(&r);
    return 0;
fail:
    nmt_error("%s", nmt_errmsg());
    free(start);
    nmt_buf_free(&data);
    line_reader_close(&r);
    return -1;
}

/* Splits each line of L on tabs into exactly K fields (after sacreBLEU: the line is rstripped,
 * split at most K-1 times). FIELDS[k] receives the k-th column. Returns the line number of a bad
 * line (1-based) and its field count in *GOT, or 0. */
static size_t split_tabs(const struct text_lines *l, int k, struct text_lines *fields, int *got, int strip_fields)
{
    size_t *caps = nmt_calloc((size_t)k, sizeof *caps);
    if (!caps) {
        *got = -1;
        return 1;
    }
    for (size_t i = 0; i < l->n; i++) {
        const char *p = l->line[i];
        size_t len = l->len[i], st = 0;
        int f = 0;
        while (f < k) {
            const char *tab = f < k - 1 ? memchr(p + st, '\t', len - st) : NULL;
            size_t en = tab ? (size_t)(tab - p) : len;
            size_t fl = en - st;
            if (strip_fields)
                fl = bleu_rstrip_len(p + st, fl);
            if (lines_push(&fields[f], &caps[f], p + st, fl) < 0) {
                free(caps);
                *got = -1;
                return i + 1;
            }
            f++;
            if (!tab)
                break;
            st = en + 1;
        }
        if (f != k || (k == 1 && 0)) {
            free(caps);
            *got = f;
            return i + 1;
        }
    }
    free(caps);
    return 0;
}

/* Counts tab-separated fields of a line. */
static int count_fields(const char *p, size_t len)
{
    int f = 1;
    for (size_t i = 0; i < len; i++)
        f += p[i] == '\t';
    return f;
}

#define GO_ON (-1) /* the option parsers' "carry on": anything else is main's exit status */

/* Parses S as an integer in [LO, HI] as Python's int() reads an argument (strtol: leading blanks
 * and a sign allowed) into *OUT. Returns GO_ON, or the usage error's status. */
static int parse_int(const char *s, const char *what, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return nmt_usage_error("invalid %s '%s' (expected an integer from %d to %d)", what, s, lo, hi);
    *out = (int)v;
    return GO_ON;
}

/* Expands sacreBLEU's multi-value options (-i A B, -m bleu chrf) into repeated options so that
 * getopt_long_only can parse them. Returns a new argv (malloc'ed array, strings shared). */
static char **expand_args(int argc, char **argv, int *out_argc)
{
    char **v = nmt_malloc(((size_t)argc * 2 + 1) * sizeof *v);
    if (!v)
        return NULL;
    int k = 0;
    v[k++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        v[k++] = argv[i];
        if (!strcmp(a, "--"))
            break;
        int multi = !strcmp(a, "-i") || !strcmp(a, "--input") || !strcmp(a, "-m") || !strcmp(a, "--metrics");
        if (multi && i + 1 < argc) {
            v[k++] = argv[++i];
            while (i + 1 < argc && argv[i + 1][0] != '-') {
                v[k++] = argv[i][0] ? (char *)a : (char *)a; /* repeat the option */
                v[k++] = argv[++i];
            }
        }
    }
    for (int i = 1; i < argc; i++) /* copy what follows "--" */
        if (!strcmp(argv[i], "--")) {
            for (int j = i + 1; j < argc; j++)
                v[k++] = argv[j];
            break;
        }
    v[k] = NULL;
    *out_argc = k;
    return v;
}


/* --full: one JSON line with every value at full precision (score, BLEU counts/totals/
 * precisions/bp/ratio/lengths, chrF statistics, TER edits and reference length). */
static void print_full(const bleu_score *sc, const double *sum, int nstats, int kind)
{
    char num[64];
    bleu_pyfloat(sc->score, num, sizeof num);
    printf("{\"name\": \"%s\", \"score\": %s", sc->name, num);
    if (kind == BLEU_METRIC_BLEU) {
        const char *keys[3] = {"counts", "totals", "precisions"};
        const double *vals[3] = {sc->counts, sc->totals, sc->precisions};
        for (int q = 0; q < 3; q++) {
            printf(", \"%s\": [", keys[q]);
            for (int n = 0; n < sc->order; n++) {
                bleu_pyfloat(vals[q][n], num, sizeof num);
                if (q < 2)
                    printf("%s%.0f", n ? ", " : "", vals[q][n]);
                else
                    printf("%s%s", n ? ", " : "", num);
            }
            printf("]");
        }
        bleu_pyfloat(sc->bp, num, sizeof num);
        printf(", \"bp\": %s", num);
        bleu_pyfloat(sc->ratio, num, sizeof num);
        printf(", \"ratio\": %s, \"sys_len\": %lld, \"ref_len\": %lld", num, sc->sys_len, sc->ref_len);
    } else if (kind == BLEU_METRIC_CHRF) {
        printf(", \"stats\": [");
        for (int q = 0; q < nstats; q++)
            printf("%s%.0f", q ? ", " : "", sum[q]);
        printf("]");
    } else {
        bleu_pyfloat(sc->ref_length, num, sizeof num);
        printf(", \"num_edits\": %.0f, \"ref_length\": %s", sc->num_edits, num);
    }
    printf("}\n");
}

struct system {
    const char *name;
    struct text_lines l;
    double *rows[3]; /* per metric */
    bleu_score score[3];
    double p[3];
    double *sum[3]; /* summed statistics per metric */
    int own_name;
};

/* Statistics of lines [0, nlines) of one system summed by a worker thread with its own metric. */
typedef struct {
    const bleu_config *cfg;
    const struct text_lines *hyp, *refs;
    int nrefs, ns;
    size_t nlines;
    double sum[3 * BLEU_MAX_ORDER + 2];
    size_t failed_line; /* 1-based line of a failure, 0 if none */
    char err[256];
} half_job;

static void *half_run(void *arg)
{
    half_job *j = arg;
    bleu_metric *m = bleu_metric_new(j->cfg);
    const char **rp = nmt_malloc((size_t)j->nrefs * sizeof *rp);
    size_t *rl = nmt_malloc((size_t)j->nrefs * sizeof *rl);
    double row[3 * BLEU_MAX_ORDER + 2];
    memset(j->sum, 0, sizeof j->sum);
    if (!m || !rp || !rl) {
        j->failed_line = 1;
        snprintf(j->err, sizeof j->err, "%s", nmt_errmsg());
    }
    for (size_t i = 0; i < j->nlines && !j->failed_line; i++) {
        for (int r = 0; r < j->nrefs; r++) {
            rp[r] = j->refs[r].line[i];
            rl[r] = j->refs[r].len[i];
        }
        if (bleu_metric_segment(m, j->hyp->line[i], j->hyp->len[i], rp, rl, j->nrefs, row) < 0) {
            j->failed_line = i + 1;
            snprintf(j->err, sizeof j->err, "%s", nmt_errmsg());
            break;
        }
        for (int q = 0; q < j->ns; q++)
            j->sum[q] += row[q];
    }
    bleu_metric_free(m);
    free(rp);
    free(rl);
    return NULL;
}

static void print_or_fail(const char *s, int *st)
{
    if (!s) {
        nmt_error("%s", nmt_errmsg());
        *st = 1;
        return;
    }
    fputs(s, stdout);
    fputc('\n', stdout);
}

/* Box-drawing table like tabulate's fancy_grid: first column right-aligned, others centred.
 * CELLS is (rows, cols) of strings that may hold '\n'. Row 0 is the header. */
static void print_table(char ***cells, int rows, int cols)
{
    int width[8] = {0};
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            const char *s = cells[r][c];
            while (*s) {
                const char *nl = strchr(s, '\n');
                size_t len = nl ? (size_t)(nl - s) : strlen(s);
                int w = 0;
                for (size_t i = 0; i < len; i++)
                    w += ((unsigned char)s[i] & 0xC0) != 0x80;
                if (w > width[c])
                    width[c] = w;
                s += len + (nl != NULL);
            }
        }
    const char *edges[4][4] = {{"╒", "═", "╤", "╕"}, {"╞", "═", "╪", "╡"}, {"├", "─", "┼", "┤"}, {"╘", "═", "╧", "╛"}};
    for (int r = 0; r <= rows; r++) {
        int e = r == 0 ? 0 : r == 1 ? 1 : r == rows ? 3 : 2;
        fputs(edges[e][0], stdout);
        for (int c = 0; c < cols; c++) {
            for (int i = 0; i < width[c] + 2; i++)
                fputs(edges[e][1], stdout);
            fputs(c + 1 < cols ? edges[e][2] : edges[e][3], stdout);
        }
        fputc('\n', stdout);
        if (r == rows)
            break;
        int nlines = 1;
        for (int c = 0; c < cols; c++) {
            int k = 1;
            for (const char *s = cells[r][c]; *s; s++)
                k += *s == '\n';
            if (k > nlines)
                nlines = k;
        }
        for (int ln = 0; ln < nlines; ln++) {
            fputs("│", stdout);
            for (int c = 0; c < cols; c++) {
                const char *s = cells[r][c];
                for (int q = 0; q < ln && s; q++) {
                    s = strchr(s, '\n');
                    if (s)
                        s++;
                }
                size_t len = 0;
                int w = 0;
                if (s) {
                    const char *nl = strchr(s, '\n');
                    len = nl ? (size_t)(nl - s) : strlen(s);
                    for (size_t i = 0; i < len; i++)
                        w += ((unsigned char)s[i] & 0xC0) != 0x80;
                }
                int pad = width[c] - w, left = c == 0 ? pad : pad / 2;
                printf(" %*s%.*s%*s │", left, "", (int)len, s ? s : "", pad - left, "");
            }
            fputc('\n', stdout);
        }
    }
}

/* What the options ask for. */
struct opts {
    bleu_config cfg[3]; /* per metric, indexed by enum bleu_metric_kind */
    const char *inputs[64];
    int ninputs, use_metric[3], any_metric;
    int num_refs, sentence, ci, ci_n, pbs, pbs_n, json, width, score_only, is_short, full;
    int ignored; /* --force, --quiet, --no-color: accepted for compatibility */
    uint64_t max_line; /* --max-line-bytes */
    char **ref_files;
    int nref_files;
};

/* One run: options, references, systems and metrics. main keeps it in static storage, so what it
 * holds stays reachable until exit on every path. */
struct run {
    struct opts o;
    char **eargv;
    struct text_lines *reffile, *reflines, stdin_lines, *stdin_cols;
    int nrefs, nsys;
    struct system *sys;
    size_t nlines;
    const char **refp; /* the references of the line being scored */
    size_t *refl;
    bleu_metric *met[3];
    uint64_t seed;
    char seedlow[64]; /* the seed as the signature writes it */
};

/* The parsers of the options' arguments, with sacreBLEU's messages: 0, or -1 after the usage error. */
#define INT_PARSER(fn, what, lo, hi)                                                                             \
    static int fn(const char *opt, const char *arg, void *field)                                                \
    {                                                                                                            \
        return parse_int(arg, what, lo, hi, field) == GO_ON ? 0 : -1;                                            \
    }
INT_PARSER(parse_num_refs, "number of references", 1, 1000)
INT_PARSER(parse_resamples, "number of resamples", 1, 1000000)
INT_PARSER(parse_width, "width", 0, 100)
INT_PARSER(parse_max_order, "n-gram order", 1, BLEU_MAX_ORDER)
INT_PARSER(parse_char_order, "character order", 0, BLEU_MAX_ORDER)
INT_PARSER(parse_word_order, "word order", 0, BLEU_MAX_ORDER)
INT_PARSER(parse_beta, "beta", 0, 1000)

static int parse_smooth(const char *opt, const char *arg, void *field)
{
    static const char *names[] = {"exp", "floor", "add-k", "none"};
    static const int methods[] = {BLEU_SMOOTH_EXP, BLEU_SMOOTH_FLOOR, BLEU_SMOOTH_ADDK, BLEU_SMOOTH_NONE};
    for (int i = 0; i < 4; i++)
        if (!strcmp(arg, names[i])) {
            *(int *)field = methods[i];
            return 0;
        }
    return nmt_usage_error("unknown smoothing method '%s' (choose from exp, floor, add-k, none)", arg), -1;
}

static int parse_tokenizer(const char *opt, const char *arg, void *field)
{
    if ((*(int *)field = bleu_tokenizer_parse(arg)) < 0)
        return nmt_usage_error("unknown tokenizer '%s' (choose from 13a, intl, zh, char, none)", arg), -1;
    return 0;
}

static int parse_smooth_value(const char *opt, const char *arg, void *field)
{
    bleu_config *cfg = field;
    if (nmt_parse_double(arg, &cfg->smooth_value) < 0)
        return nmt_usage_error("invalid smoothing value '%s'", arg), -1;
    cfg->smooth_value_set = 1;
    return 0;
}

static int refuse_asian(const char *opt, const char *arg, void *field)
{
    return nmt_usage_error("--ter-asian-support is not supported"), -1;
}

/* -m M...: adds metric ARG ("bleu", "chrf", "ter") to the struct opts at FIELD. */
static int parse_metric(const char *opt, const char *arg, void *field)
{
    struct opts *o = field;
    static const char *names[] = {"bleu", "chrf", "ter"};
    for (int k = 0; k < 3; k++)
        if (!strcmp(arg, names[k])) {
            o->use_metric[k] = 1;
            o->any_metric++;
            return 0;
        }
    return nmt_usage_error("unknown metric '%s' (choose from bleu, chrf, ter)", arg), -1;
}

/* -i FILE...: adds a system to the struct opts at FIELD. */
static int parse_input(const char *opt, const char *arg, void *field)
{
    struct opts *o = field;
    if (o->ninputs == 64)
        return nmt_usage_error("too many input systems (at most 64)"), -1;
    o->inputs[o->ninputs++] = arg;
    return 0;
}

static int parse_format(const char *opt, const char *arg, void *field)
{
    if (strcmp(arg, "json") && strcmp(arg, "text"))
        return nmt_usage_error("unknown format '%s' (choose from json, text)", arg), -1;
    *(int *)field = !strcmp(arg, "json");
    return 0;
}

#define OFF(field) offsetof(struct opts, field)
/* sacreBLEU's options, under its names and short aliases (-tok, -nr), parsed as argparse does. */
static const struct opt_spec OPTIONS[] = {
    {OPTION(OT_CUSTOM, "input", 'i', "FILE...", 0, "hypothesis file(s) ('-' = stdin)"), .parse = parse_input},
    {OPTION(OT_CUSTOM, "num-refs", 0, "N", OFF(num_refs), "REF is one file of N tab-separated references a line"),
     .alias = "nr", .parse = parse_num_refs},
    {OPTION(OT_CUSTOM, "metrics", 'm', "M...", 0, "bleu, chrf, ter (default: bleu)"), .parse = parse_metric},
    {OPTION(OT_FLAG, "sentence-level", 0, NULL, OFF(sentence), "one score per line (one metric, one system)"),
     .alias = "sl"},
    {OPTION(OT_U64, "max-line-bytes", 0, "N", OFF(max_line),
            "longest input line accepted (default 1 GiB); a longer one is an error"),
     .imin = 1, .imax = SIZE_MAX / 2},
    {.type = OT_TEXT, .help = "BLEU:"},
    {OPTION(OT_CUSTOM, "tokenize", 0, "T", OFF(cfg[0].tokenize), "13a (default), intl, zh, char, none"),
     .alias = "tok", .parse = parse_tokenizer},
    {OPTION(OT_FLAG, "lowercase", 0, NULL, OFF(cfg[0].lowercase), "case-insensitive BLEU"), .alias = "lc"},
    {OPTION(OT_CUSTOM, "smooth-method", 's', "M", OFF(cfg[0].smooth), "exp (default), floor, add-k, none"),
     .parse = parse_smooth},
    {OPTION(OT_CUSTOM, "smooth-value", 0, "X", OFF(cfg[0]), "value for floor (0.1) and add-k (1)"), .alias = "sv",
     .parse = parse_smooth_value},
    {OPTION(OT_CUSTOM, "max-ngram-order", 0, "N", OFF(cfg[0].max_order),
            "highest n-gram order (default 4; not in the signature)"),
     .parse = parse_max_order},
    {OPTION(OT_FLAG, "force", 0, NULL, OFF(ignored), "accepted for compatibility (no effect)")},
    {.type = OT_TEXT, .help = "chrF:"},
    {OPTION(OT_CUSTOM, "chrf-char-order", 0, "N", OFF(cfg[1].char_order), "character n-gram order (default 6)"),
     .alias = "cc", .parse = parse_char_order},
    {OPTION(OT_CUSTOM, "chrf-word-order", 0, "N", OFF(cfg[1].word_order), "word n-gram order (default 0; 2 = chrF++)"),
     .alias = "cw", .parse = parse_word_order},
    {OPTION(OT_CUSTOM, "chrf-beta", 0, "N", OFF(cfg[1].beta), "recall weight (default 2)"), .parse = parse_beta},
    {OPTION(OT_FLAG, "chrf-whitespace", 0, NULL, OFF(cfg[1].whitespace), "keep whitespace in character n-grams")},
    {OPTION(OT_FLAG, "chrf-lowercase", 0, NULL, OFF(cfg[1].chrf_lowercase), "case-insensitive chrF")},
    {OPTION(OT_FLAG, "chrf-eps-smoothing", 0, NULL, OFF(cfg[1].eps_smoothing),
            "epsilon smoothing instead of effective order")},
    {.type = OT_TEXT, .help = "TER:"},
    {OPTION(OT_FLAG, "ter-case-sensitive", 0, NULL, OFF(cfg[2].case_sensitive), "do not lowercase")},
    {OPTION(OT_FLAG, "ter-no-punct", 0, NULL, OFF(cfg[2].no_punct), "remove punctuation")},
    {OPTION(OT_FLAG, "ter-normalized", 0, NULL, OFF(cfg[2].normalized),
            "Tercom's western normalisation and tokenization")},
    {OPTION(OT_CUSTOM, "ter-asian-support", 0, NULL, 0, NULL), .parse = refuse_asian},
    {.type = OT_TEXT, .help = "Statistics:"},
    {OPTION(OT_FLAG, "confidence", 0, NULL, OFF(ci), "bootstrap 95% confidence interval"), .alias = "ci"},
    {OPTION(OT_CUSTOM, "confidence-n", 0, "N", OFF(ci_n), "bootstrap resamples (default 1000)"), .alias = "cin",
     .parse = parse_resamples},
    {OPTION(OT_FLAG, "paired-bs", 0, NULL, OFF(pbs), "paired bootstrap test; the first -i system is the baseline"),
     .alias = "pbs"},
    {OPTION(OT_CUSTOM, "paired-bs-n", 0, "N", OFF(pbs_n), "paired bootstrap resamples (default 1000)"),
     .alias = "pbsn", .parse = parse_resamples},
    {.type = OT_TEXT, .help = "Output:"},
    {OPTION(OT_CUSTOM, "format", 'f', "F", OFF(json), "json (default) or text"), .parse = parse_format},
    {OPTION(OT_CUSTOM, "width", 'w', "N", OFF(width), "decimals of the score (default 1)"), .parse = parse_width},
    {OPTION(OT_FLAG, "score-only", 'b', NULL, OFF(score_only), "print the score only")},
    {OPTION(OT_FLAG, "short", 0, NULL, OFF(is_short), "short signature"), .alias = "sh"},
    {OPTION(OT_FLAG, "quiet", 'q', NULL, OFF(ignored), "accepted for compatibility")},
    {OPTION(OT_FLAG, "no-color", 0, NULL, OFF(ignored), "accepted for compatibility (no colours are used)"),
     .alias = "nc"},
    {OPTION(OT_FLAG, "full", 0, NULL, OFF(full), "one JSON line per score with every value at full precision")},
    {OPTION(OT_HELP, "help", 'h', NULL, 0, "this help")},
    {OPTION(OT_VERSION, "version", 'V', NULL, 0, "version")},
    {.type = OT_END}};

/* Parses the command line into R->o and checks the combination. Returns GO_ON, or main's exit
 * status. */
static int parse_args(struct run *r, int argc, char **argv)
{
    struct opts *o = &r->o;
    for (int k = 0; k < 3; k++)
        bleu_config_init(&o->cfg[k], k);
    o->num_refs = 1;
    o->ci_n = o->pbs_n = 1000;
    o->json = o->width = 1;
    o->max_line = LINES_DEFAULT_MAX;
    int eargc;
    if (!(r->eargv = expand_args(argc, argv, &eargc))) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    switch (opt_parse_with(OPTIONS, eargc, r->eargv, o, OPT_LONG_ONLY | OPT_OWN_ERRORS)) {
    case OPT_GOT_HELP:
        return opt_help_exit("Usage: nmt-bleu [OPTIONS] REF [REF...] [-i HYP [HYP...]]\n"
                             "Scores hypotheses against references with sacreBLEU " BLEU_SACREBLEU_VERSION
                             "'s BLEU, chrF/chrF++ and TER.\n"
                             "The hypothesis is read from stdin unless -i is given (stdin lines with tabs hold several\n"
                             "systems). Several HYP files after -i are several systems.\n"
                             "\n",
                             OPTIONS,
                             "Environment: SACREBLEU_SEED (default 12345) seeds the bootstrap.\n"
                             "The signature's version field is " BLEU_TOOL_VERSION ".\n");
    case OPT_GOT_VERSION:
        nmt_print_version();
        printf("signature version %s\n", BLEU_TOOL_VERSION);
        return nmt_close_stdout() < 0 ? NMT_EXIT_DATA : NMT_EXIT_OK;
    case OPT_USAGE: return NMT_EXIT_USAGE;
    }
    if (!o->any_metric)
        o->use_metric[0] = 1, o->any_metric = 1;
    o->nref_files = eargc - optind;
    o->ref_files = r->eargv + optind;
    if (o->nref_files == 0)
        return nmt_usage_error("no reference file given (give references before -i)");
    if (o->num_refs != 1 && o->nref_files > 1)
        return nmt_usage_error("--num-refs takes one file of tab-separated references, not several files");
    if (o->sentence && o->any_metric > 1)
        return nmt_usage_error("only one metric can be used in sentence-level mode");
    if (o->sentence && (o->ci || o->pbs))
        return nmt_usage_error("statistical tests are unavailable in sentence-level mode");
    if (o->sentence)
        o->cfg[0].effective_order = 1;
    return GO_ON;
}

/* Reads the reference files, splitting the one file of --num-refs N into its columns. Returns
 * 0, or main's exit status (the error printed). */
static int read_refs(struct run *r)
{
    const struct opts *o = &r->o;
    r->nrefs = o->num_refs > 1 ? o->num_refs : o->nref_files;
    r->reflines = nmt_calloc((size_t)r->nrefs, sizeof *r->reflines);
    r->reffile = nmt_calloc((size_t)o->nref_files, sizeof *r->reffile);
    if (!r->reflines || !r->reffile) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    for (int i = 0; i < o->nref_files; i++)
        if (read_lines(o->ref_files[i], o->max_line, &r->reffile[i]) < 0)
            return NMT_EXIT_DATA;
    if (o->num_refs == 1) {
        for (int i = 0; i < r->nrefs; i++)
            r->reflines[i] = r->reffile[i];
        return 0;
    }
    int got;
    size_t bad = split_tabs(&r->reffile[0], o->num_refs, r->reflines, &got, 0);
    if (bad) {
        if (got < 0)
            nmt_error("%s", nmt_errmsg());
        else
            nmt_error("'%s' line %zu: expected %d tab-separated references, found %d", o->ref_files[0], bad,
                      o->num_refs, got);
        return NMT_EXIT_DATA;
    }
    return 0;
}

/* Reads the systems from stdin: one, or one per tab-separated column, named as sacreBLEU names
 * them. Returns 0, or main's exit status. */
static int read_stdin_systems(struct run *r)
{
    if (read_lines("-", r->o.max_line, &r->stdin_lines) < 0)
        return NMT_EXIT_DATA;
    struct text_lines in = r->stdin_lines;
    int k = in.n ? count_fields(in.line[0], in.len[0]) : 1;
    if (!(r->sys = nmt_calloc((size_t)k, sizeof *r->sys))) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    r->nsys = k;
    if (k == 1) {
        r->sys[0].l = in;
        memset(&r->stdin_lines, 0, sizeof r->stdin_lines);
    } else {
        struct text_lines *cols = r->stdin_cols = nmt_calloc((size_t)k, sizeof *cols);
        int got;
        if (!cols) {
            nmt_error("%s", nmt_errmsg());
            return NMT_EXIT_DATA;
        }
        size_t bad = split_tabs(&in, k, cols, &got, 1);
        if (bad) {
            nmt_error("stdin line %zu: expected %d tab-separated systems as on line 1, found %d", bad, k, got);
            return NMT_EXIT_DATA;
        }
        for (int s = 0; s < k; s++)
            r->sys[s].l = cols[s];
    }
    for (int s = 0; s < r->nsys; s++) {
        char *nm = nmt_malloc(32);
        if (!nm) {
            nmt_error("%s", nmt_errmsg());
            return NMT_EXIT_DATA;
        }
        if (r->o.pbs)
            snprintf(nm, 32, s == 0 ? "Baseline" : "System %d", s);
        else
            snprintf(nm, 32, "System %d", s + 1);
        r->sys[s].name = nm;
        r->sys[s].own_name = 1;
    }
    return 0;
}

/* Reads the systems of the -i files (a repeated baseline is dropped under --paired-bs). Returns
 * 0, or main's exit status. */
static int read_file_systems(struct run *r)
{
    const struct opts *o = &r->o;
    if (!(r->sys = nmt_calloc((size_t)o->ninputs, sizeof *r->sys))) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    for (int s = 0; s < o->ninputs; s++) {
        int dup = 0;
        for (int q = 0; q < r->nsys; q++)
            if (!strcmp(o->inputs[s], o->inputs[q]))
                dup = 1;
        if (dup) {
            if (o->pbs && !strcmp(o->inputs[s], o->inputs[0]))
                continue; /* the baseline given again */
            nmt_error("'%s' already used to name a system", o->inputs[s]);
            return NMT_EXIT_DATA;
        }
        if (read_lines(o->inputs[s], o->max_line, &r->sys[r->nsys].l) < 0)
            return NMT_EXIT_DATA;
        r->sys[r->nsys++].name = o->inputs[s];
    }
    if (o->pbs) {
        char *nm = nmt_malloc(strlen(r->sys[0].name) + 16);
        if (!nm) {
            nmt_error("%s", nmt_errmsg());
            return NMT_EXIT_DATA;
        }
        sprintf(nm, "Baseline: %s", r->sys[0].name);
        r->sys[0].name = nm;
        r->sys[0].own_name = 1;
    }
    return 0;
}

/* Checks the systems against the mode and the references. Returns 0, or main's exit status. */
static int check_systems(struct run *r)
{
    const struct opts *o = &r->o;
    if (o->sentence && r->nsys > 1)
        return nmt_usage_error("only one system can be evaluated in sentence-level mode");
    if (o->pbs && r->nsys == 1)
        return nmt_usage_error("paired tests require several systems given to -i");
    if (r->nsys > 1 && o->ci)
        return nmt_usage_error("use paired tests (--paired-bs) for several systems");
    for (int s = 0; s < r->nsys; s++) {
        const char *hname = o->ninputs ? o->inputs[s] : "stdin";
        if (r->sys[s].l.n == 0) {
            nmt_error("hypothesis '%s' is empty", hname);
            return NMT_EXIT_DATA;
        }
        for (int i = 0; i < r->nrefs; i++)
            if (r->reflines[i].n != r->sys[s].l.n) {
                nmt_error("hypothesis '%s' has %zu lines but reference '%s'%s has %zu", hname, r->sys[s].l.n,
                          o->ref_files[o->num_refs > 1 ? 0 : i], o->num_refs > 1 ? " (a column)" : "",
                          r->reflines[i].n);
                return NMT_EXIT_DATA;
            }
    }
    r->nlines = r->sys[0].l.n;
    return 0;
}

/* Sets the bootstrap seed from SACREBLEU_SEED (default 12345; "none": time and process id). */
static void read_seed(struct run *r)
{
    const char *seedstr = getenv("SACREBLEU_SEED");
    if (!seedstr)
        seedstr = "12345";
    snprintf(r->seedlow, sizeof r->seedlow, "%s", seedstr);
    for (char *q = r->seedlow; *q; q++)
        if (*q >= 'A' && *q <= 'Z')
            *q = (char)(*q + 32);
    r->seed = !strcmp(r->seedlow, "none") ? (uint64_t)getpid() ^ (uint64_t)time(NULL) : strtoull(seedstr, NULL, 10);
}

/* Creates the metrics asked for (in sacreBLEU's order: BLEU, chrF, TER) and the reference
 * pointers of a line. Returns 0, or main's exit status. */
static int start_metrics(struct run *r)
{
    r->refp = nmt_malloc((size_t)r->nrefs * sizeof *r->refp);
    r->refl = nmt_malloc((size_t)r->nrefs * sizeof *r->refl);
    if (!r->refp || !r->refl) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    read_seed(r);
    for (int k = 0; k < 3; k++)
        if (r->o.use_metric[k] && !(r->met[k] = bleu_metric_new(&r->o.cfg[k]))) {
            nmt_error("%s", nmt_errmsg());
            return NMT_EXIT_DATA;
        }
    return 0;
}

/* Computes the statistics ROW of line I of system S with metric K; 0 or -1 (error set). */
static int segment_row(struct run *r, int s, int k, size_t i, double *row)
{
    for (int q = 0; q < r->nrefs; q++) {
        r->refp[q] = r->reflines[q].line[i];
        r->refl[q] = r->reflines[q].len[i];
    }
    return bleu_metric_segment(r->met[k], r->sys[s].l.line[i], r->sys[s].l.len[i], r->refp, r->refl, r->nrefs, row);
}

/* --sentence-level: one score line per segment. Sets *ST when a line cannot be formatted.
 * Returns 0, or main's exit status. */
static int score_sentences(struct run *r, int *st)
{
    const struct opts *o = &r->o;
    int k = o->use_metric[0] ? 0 : o->use_metric[1] ? 1 : 2;
    int ns = bleu_metric_nstats(r->met[k]);
    double *row = nmt_malloc((size_t)ns * sizeof *row);
    char sig[512];
    if (!row || bleu_signature(r->met[k], r->nrefs, o->is_short, 0, NULL, BLEU_TOOL_VERSION, sig, sizeof sig) < 0) {
        nmt_error("%s", row ? "metric signature too long" : nmt_errmsg());
        free(row);
        return NMT_EXIT_DATA;
    }
    for (size_t i = 0; i < r->nlines && !*st; i++) {
        if (segment_row(r, 0, k, i, row) < 0) {
            nmt_error("line %zu: %s", i + 1, nmt_errmsg());
            return NMT_EXIT_DATA;
        }
        bleu_score sc;
        bleu_metric_score(r->met[k], row, &sc);
        if (o->full) {
            print_full(&sc, row, ns, k);
            continue;
        }
        char *s = bleu_format(&sc, o->width, o->score_only, sig, 0);
        print_or_fail(s, st);
        free(s);
    }
    free(row);
    return 0;
}

/* Sums the statistics of system S with metric K into SUM (ROW as scratch) in two halves, the
 * first in a second thread: BLEU and chrF statistics are integer counts, so the halves summed
 * apart give the same sums. Returns 0, or main's exit status. */
static int sum_in_halves(struct run *r, int s, int k, double *row, double *sum)
{
    int ns = bleu_metric_nstats(r->met[k]);
    half_job job = {.cfg = &r->o.cfg[k], .hyp = &r->sys[s].l, .refs = r->reflines, .nrefs = r->nrefs,
                    .nlines = r->nlines / 2, .ns = ns};
    pthread_t th;
    int started = pthread_create(&th, NULL, half_run, &job) == 0;
    if (!started)
        half_run(&job);
    size_t bad = 0;
    char err[256] = "";
    for (size_t i = r->nlines / 2; i < r->nlines; i++) {
        if (segment_row(r, s, k, i, row) < 0) {
            bad = i + 1;
            snprintf(err, sizeof err, "%s", nmt_errmsg());
            break;
        }
        for (int j = 0; j < ns; j++)
            sum[j] += row[j];
    }
    if (started)
        pthread_join(th, NULL);
    if (job.failed_line || bad) { /* the first failing line is reported */
        nmt_error("line %zu: %s", job.failed_line ? job.failed_line : bad, job.failed_line ? job.err : err);
        return NMT_EXIT_DATA;
    }
    for (int j = 0; j < ns; j++)
        sum[j] += job.sum[j];
    return 0;
}

/* Scores system S with metric K over the corpus: its statistics rows (all kept for the
 * bootstrap, else summed as they come, in the same order), their sum and the score. Returns 0,
 * or main's exit status. */
static int score_system(struct run *r, int s, int k)
{
    struct system *sy = &r->sys[s];
    int ns = bleu_metric_nstats(r->met[k]);
    int keep = r->o.ci || r->o.pbs;
    size_t nlines = r->nlines, from = 0;
    sy->rows[k] = nmt_malloc((keep ? nlines : 1) * (size_t)ns * sizeof(double));
    double *sum = sy->sum[k] = nmt_calloc((size_t)ns, sizeof *sum);
    if (!sy->rows[k] || !sum) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    if (!keep && k != BLEU_METRIC_TER && nlines >= 4096) {
        if (sum_in_halves(r, s, k, sy->rows[k], sum))
            return NMT_EXIT_DATA;
        from = nlines;
    }
    for (size_t i = from; i < nlines; i++) {
        double *row = sy->rows[k] + (keep ? i * (size_t)ns : 0);
        if (segment_row(r, s, k, i, row) < 0) {
            nmt_error("line %zu: %s", i + 1, nmt_errmsg());
            return NMT_EXIT_DATA;
        }
        if (!keep)
            for (int j = 0; j < ns; j++)
                sum[j] += row[j];
    }
    if (keep)
        bleu_metric_sum(r->met[k], sy->rows[k], nlines, NULL, sum);
    bleu_metric_score(r->met[k], sum, &sy->score[k]);
    return 0;
}

/* Prints the formatted scores RES[0..N) of one system: a JSON list, one per line, or text lines
 * aligned on " = ". */
static void print_results(const struct opts *o, char **res, int n)
{
    if (o->json && n > 1 && !o->score_only) {
        fputs("[\n", stdout);
        for (int q = 0; q < n; q++)
            printf("%s%s", res[q], q + 1 < n ? ",\n" : "\n");
        fputs("]\n", stdout);
    } else if (n == 1 || o->score_only) {
        for (int q = 0; q < n; q++)
            printf("%s\n", res[q]);
    } else {
        int w = 0;
        for (int q = 0; q < n; q++) {
            const char *eq = strchr(res[q], '=');
            int l = eq ? (int)(eq - res[q]) - 1 : 0;
            if (l > w)
                w = l;
        }
        for (int q = 0; q < n; q++) {
            const char *eq = strchr(res[q], '=');
            int l = eq ? (int)(eq - res[q]) - 1 : 0;
            printf("%*s%s\n", w - l, "", res[q]);
        }
    }
}

/* One system: each metric's score (with the bootstrap interval under --confidence) with its
 * signature. Returns 0, or main's exit status. */
static int print_one_system(struct run *r)
{
    const struct opts *o = &r->o;
    char *res[3];
    int nres = 0;
    for (int k = 0; k < 3; k++) {
        if (!r->met[k])
            continue;
        if (o->ci && bleu_bootstrap(r->met[k], r->sys[0].rows[k], r->nlines, o->ci_n, r->seed, &r->sys[0].score[k],
                                    NULL) < 0) {
            nmt_error("%s", nmt_errmsg());
            return NMT_EXIT_DATA;
        }
        char sig[512];
        bleu_signature(r->met[k], r->nrefs, o->json ? 0 : o->is_short, o->ci ? o->ci_n : 0, r->seedlow,
                       BLEU_TOOL_VERSION, sig, sizeof sig);
        if (!(res[nres] = bleu_format(&r->sys[0].score[k], o->width, o->score_only, sig, o->json))) {
            nmt_error("%s", nmt_errmsg());
            return NMT_EXIT_DATA;
        }
        nres++;
    }
    print_results(o, res, nres);
    for (int q = 0; q < nres; q++)
        free(res[q]);
    return 0;
}

/* --paired-bs: the baseline's interval and every other system's interval and p-value. Returns 0,
 * or main's exit status. */
static int paired_bootstrap(struct run *r)
{
    struct system *sys = r->sys;
    int n = r->o.pbs_n;
    for (int k = 0; k < 3; k++) {
        if (!r->met[k])
            continue;
        if (bleu_bootstrap(r->met[k], sys[0].rows[k], r->nlines, n, r->seed, &sys[0].score[k], NULL) < 0) {
            nmt_error("%s", nmt_errmsg());
            return NMT_EXIT_DATA;
        }
        for (int s = 1; s < r->nsys; s++)
            if (bleu_paired_bs(r->met[k], sys[0].rows[k], sys[s].rows[k], r->nlines, n, r->seed, sys[0].score[k].score,
                               &sys[s].score[k], &sys[s].p[k]) < 0) {
                nmt_error("%s", nmt_errmsg());
                return NMT_EXIT_DATA;
            }
    }
    return 0;
}

/* Several systems as a JSON list (sacreBLEU's print_results_table with --format json). */
static void print_systems_json(const struct run *r)
{
    char num[64];
    printf("[\n");
    for (int s = 0; s < r->nsys; s++) {
        printf("    {\n        \"system\": \"%s\"", r->sys[s].name);
        for (int k = 0; k < 3; k++) {
            if (!r->met[k])
                continue;
            const bleu_score *sc = &r->sys[s].score[k];
            if (!r->o.pbs) {
                char *v = bleu_format(sc, r->o.width, 1, "", 0);
                printf(",\n        \"%s\": \"%s\"", sc->name, v ? v : "");
                free(v);
                continue;
            }
            printf(",\n        \"%s\": {\n", sc->name);
            bleu_pyfloat(sc->score, num, sizeof num);
            printf("            \"score\": %s,\n", num);
            if (s == 0)
                printf("            \"p_value\": null,\n");
            else {
                bleu_pyfloat(r->sys[s].p[k], num, sizeof num);
                printf("            \"p_value\": %s,\n", num);
            }
            bleu_pyfloat(sc->mean, num, sizeof num);
            printf("            \"mean\": %s,\n", num);
            bleu_pyfloat(sc->ci, num, sizeof num);
            printf("            \"ci\": %s\n        }", num);
        }
        printf("\n    }%s\n", s + 1 < r->nsys ? "," : "");
    }
    printf("]\n");
}

/* The explanation sacreBLEU prints under the table of a paired bootstrap test. */
static void print_pbs_note(int n, const char *baseline)
{
    char msg[128];
    int ml = snprintf(msg, sizeof msg, "Paired bootstrap resampling test with %d resampling trials", n);
    for (int i = 0; i < ml; i++)
        putchar('-');
    printf("\n%s\n", msg);
    for (int i = 0; i < ml; i++)
        putchar('-');
    printf("\n - Each system is pairwise compared to %s.\n"
           "   Actual system score / bootstrap estimated true mean / 95%% CI are provided for each metric.\n\n"
           " - Null hypothesis: the system and the baseline translations are essentially\n"
           "   generated by the same underlying process. For a given system and the baseline,\n"
           "   the p-value is roughly the probability of the absolute score difference (delta)\n"
           "   or higher occurring due to chance, under the assumption that the null hypothesis is correct.\n\n"
           " - Assuming a significance threshold of 0.05, the null hypothesis can be rejected\n"
           "   for p-values < 0.05 (marked with \"*\"). This means that the delta is unlikely to be attributed\n"
           "   to chance, hence the system is significantly \"different\" than the baseline.\n"
           "   Otherwise, the p-values are highlighted in red.\n\n"
           " - NOTE: Significance does not tell whether a system is \"better\" than the baseline but rather\n"
           "   emphasizes the \"difference\" of the systems in terms of the replicability of the delta.\n\n",
           baseline);
}

/* The text of table cell (ROW, metric K): the header (ROW 0) or a system's score. */
static void table_cell(const struct run *r, int row, int k, char *buf, size_t cap)
{
    const struct opts *o = &r->o;
    int w = o->width;
    const bleu_score *sc = &r->sys[row ? row - 1 : 0].score[k];
    if (row == 0)
        snprintf(buf, cap, "%s%s", sc->name, o->pbs ? " (μ ± 95% CI)" : "");
    else if (!o->pbs)
        snprintf(buf, cap, "%.*f", w, sc->score);
    else if (row == 1)
        snprintf(buf, cap, "%.*f (%.*f ± %.*f)", w, sc->score, w, sc->mean, w, sc->ci);
    else
        snprintf(buf, cap, "%.*f (%.*f ± %.*f)\n(p = %.4f)%s", w, sc->score, w, sc->mean, w, sc->ci,
                 r->sys[row - 1].p[k], r->sys[row - 1].p[k] > 0.05 ? "" : "*");
}

/* Several systems as a text table, the paired test's note and the signatures. Returns 0, or
 * main's exit status. */
static int print_systems_table(const struct run *r)
{
    int cols = 1, rows = r->nsys + 1;
    for (int k = 0; k < 3; k++)
        cols += r->met[k] != NULL;
    char ***cells = nmt_calloc((size_t)rows, sizeof *cells);
    if (!cells) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    for (int row = 0; row < rows; row++) {
        if (!(cells[row] = nmt_calloc((size_t)cols, sizeof **cells))) {
            nmt_error("%s", nmt_errmsg());
            return NMT_EXIT_DATA;
        }
        int c = 0;
        cells[row][c++] = strdup(row == 0 ? "System" : r->sys[row - 1].name);
        for (int k = 0; k < 3; k++) {
            if (!r->met[k])
                continue;
            char buf[256];
            table_cell(r, row, k, buf, sizeof buf);
            cells[row][c++] = strdup(buf);
        }
    }
    print_table(cells, rows, cols);
    printf("\n");
    if (r->o.pbs)
        print_pbs_note(r->o.pbs_n, r->sys[0].name);
    printf("-----------------\nMetric signatures\n-----------------\n");
    for (int k = 0; k < 3; k++) {
        if (!r->met[k])
            continue;
        char sig[512];
        bleu_signature(r->met[k], r->nrefs, r->o.is_short, r->o.pbs ? r->o.pbs_n : 0, r->seedlow, BLEU_TOOL_VERSION,
                       sig, sizeof sig);
        printf(" - %-10s %s\n", r->sys[0].score[k].name, sig);
    }
    for (int row = 0; row < rows; row++) {
        for (int c = 0; c < cols; c++)
            free(cells[row][c]);
        free(cells[row]);
    }
    free(cells);
    return 0;
}

/* Corpus mode: scores every system with every metric and prints the results. Returns 0, or
 * main's exit status. */
static int score_corpus(struct run *r)
{
    int rc;
    for (int s = 0; s < r->nsys; s++)
        for (int k = 0; k < 3; k++)
            if (r->met[k] && (rc = score_system(r, s, k)))
                return rc;
    if (r->nsys == 1 && r->o.full) {
        for (int k = 0; k < 3; k++)
            if (r->met[k])
                print_full(&r->sys[0].score[k], r->sys[0].sum[k], bleu_metric_nstats(r->met[k]), k);
        return 0;
    }
    if (r->nsys == 1)
        return print_one_system(r);
    if (r->o.pbs && (rc = paired_bootstrap(r)))
        return rc;
    if (r->o.json) {
        print_systems_json(r);
        return 0;
    }
    return print_systems_table(r);
}

/* Frees everything R holds. */
static void run_free(struct run *r)
{
    for (int k = 0; k < 3; k++)
        bleu_metric_free(r->met[k]);
    for (int s = 0; s < r->nsys; s++) {
        for (int k = 0; k < 3; k++) {
            free(r->sys[s].rows[k]);
            free(r->sys[s].sum[k]);
        }
        if (r->sys[s].own_name)
            free((char *)r->sys[s].name);
        lines_free(&r->sys[s].l);
    }
    free(r->sys);
    if (r->stdin_cols) {
        lines_free(&r->stdin_lines);
        free(r->stdin_cols);
    }
    for (int i = 0; i < r->o.nref_files; i++)
        lines_free(&r->reffile[i]);
    if (r->o.num_refs > 1)
        for (int i = 0; i < r->nrefs; i++) {
            free(r->reflines[i].line);
            free(r->reflines[i].len);
        }
    free(r->reflines);
    free(r->reffile);
    free(r->refp);
    free(r->refl);
    free(r->eargv);
}

int main(int argc, char **argv)
{
    nmt_start(argv);
    static struct run run; /* static: what it holds stays reachable on every early exit */
    int rc = parse_args(&run, argc, argv), st = 0;
    if (rc != GO_ON)
        return rc;
    int use_stdin = run.o.ninputs == 0 || (run.o.ninputs == 1 && !strcmp(run.o.inputs[0], "-"));
    if ((rc = read_refs(&run)) || (rc = use_stdin ? read_stdin_systems(&run) : read_file_systems(&run))
        || (rc = check_systems(&run)) || (rc = start_metrics(&run)))
        return rc;
    if ((rc = run.o.sentence ? score_sentences(&run, &st) : score_corpus(&run)))
        return rc;
    run_free(&run);
    if (nmt_close_stdout() < 0) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    return st ? NMT_EXIT_DATA : NMT_EXIT_OK;
}
