/* nmt-bleu: BLEU, chrF/chrF++ and TER with sacreBLEU 2.6.0's numbers, options and output.
 * main parses options, reads the files and calls libcommon/eval/bleu.h. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/utf8.h"
#include "eval/bleu.h"
#include "cli/cli.h"

#define BLEU_TOOL_VERSION "nmt-bleu-" NMT_VERSION "+sacrebleu-" BLEU_SACREBLEU_VERSION

static void usage(void)
{
    printf("Usage: %s [OPTIONS] REF [REF...] [-i HYP [HYP...]]\n"
           "Scores hypotheses against references with sacreBLEU %s's BLEU, chrF/chrF++ and TER.\n"
           "The hypothesis is read from stdin unless -i is given (stdin lines with tabs hold several\n"
           "systems). Several HYP files after -i are several systems.\n"
           "\n"
           "  -i, --input FILE...         hypothesis file(s) ('-' = stdin)\n"
           "  -nr, --num-refs N           REF is one file of N tab-separated references a line\n"
           "  -m, --metrics M...          bleu, chrf, ter (default: bleu)\n"
           "  -sl, --sentence-level       one score per line (one metric, one system)\n"
           "BLEU:\n"
           "  -tok, --tokenize T          13a (default), intl, zh, char, none\n"
           "  -lc, --lowercase            case-insensitive BLEU\n"
           "  -s, --smooth-method M       exp (default), floor, add-k, none\n"
           "  -sv, --smooth-value X       value for floor (0.1) and add-k (1)\n"
           "  --max-ngram-order N         highest n-gram order (default 4; not in the signature)\n"
           "  --force                     accepted for compatibility (no effect)\n"
           "chrF:\n"
           "  -cc, --chrf-char-order N    character n-gram order (default 6)\n"
           "  -cw, --chrf-word-order N    word n-gram order (default 0; 2 = chrF++)\n"
           "  --chrf-beta N               recall weight (default 2)\n"
           "  --chrf-whitespace           keep whitespace in character n-grams\n"
           "  --chrf-lowercase            case-insensitive chrF\n"
           "  --chrf-eps-smoothing        epsilon smoothing instead of effective order\n"
           "TER:\n"
           "  --ter-case-sensitive        do not lowercase\n"
           "  --ter-no-punct              remove punctuation\n"
           "  --ter-normalized            Tercom's western normalisation and tokenization\n"
           "Statistics:\n"
           "  -ci, --confidence           bootstrap 95%% confidence interval\n"
           "  -cin, --confidence-n N      bootstrap resamples (default 1000)\n"
           "  -pbs, --paired-bs           paired bootstrap test; the first -i system is the baseline\n"
           "  -pbsn, --paired-bs-n N      paired bootstrap resamples (default 1000)\n"
           "Output:\n"
           "  -f, --format F              json (default) or text\n"
           "  -w, --width N               decimals of the score (default 1)\n"
           "  -b, --score-only            print the score only\n"
           "  -sh, --short                short signature\n"
           "  -q, --quiet                 accepted for compatibility\n"
           "  -nc, --no-color             accepted for compatibility (no colours are used)\n"
           "  --full                      one JSON line per score with every value at full precision\n"
           "  -h, --help                  this help\n"
           "  -V, --version               version\n"
           "Environment: SACREBLEU_SEED (default 12345) seeds the bootstrap.\n"
           "The signature's version field is %s.\n",
           nmt_progname(), BLEU_SACREBLEU_VERSION, BLEU_TOOL_VERSION);
}

typedef struct {
    char *data;       /* file content (malloc'ed, or mapped when map_len > 0) */
    size_t map_len;
    const char **line; /* rstripped lines (pointers into data) */
    size_t *len;
    size_t n;
} lines_t;

static void lines_free(lines_t *l)
{
    if (l->map_len)
        munmap(l->data, l->map_len);
    else
        free(l->data);
    free(l->line);
    free(l->len);
    memset(l, 0, sizeof *l);
}

static int lines_push(lines_t *l, size_t *cap, const char *p, size_t len)
{
    if (l->n == *cap) {
        size_t c = *cap ? *cap * 2 : 1024;
        const char **a = nmt_realloc(l->line, c * sizeof *a);
        if (!a)
            return -1;
        l->line = a;
        size_t *b = nmt_realloc(l->len, c * sizeof *b);
        if (!b)
            return -1;
        l->len = b;
        *cap = c;
    }
    l->line[l->n] = p;
    l->len[l->n++] = len;
    return 0;
}

/* Reads PATH ("-" = stdin) into lines split on '\n', each checked for UTF-8 and rstripped as
 * Python does. Prints the error and returns -1 on failure. */
static int read_lines(const char *path, lines_t *l)
{
    memset(l, 0, sizeof *l);
    const char *name = nmt_path_name(path, 0);
    int fd = nmt_open_in(path);
    if (fd < 0) {
        nmt_error("%s", nmt_errmsg());
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    struct stat sb;
    char *buf = NULL;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0) {
        /* a regular file is mapped (read-only, private), else read at once */
        void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (p != MAP_FAILED) {
            buf = p;
            n = (size_t)sb.st_size;
            l->map_len = n;
            goto have_data;
        }
        cap = (size_t)sb.st_size + 1; /* one read, no regrowth */
    }
    buf = nmt_malloc(cap);
    if (!buf) {
        nmt_error("%s", nmt_errmsg());
        goto fail_fd;
    }
    for (;;) {
        if (n == cap) {
            char *b = nmt_realloc(buf, cap * 2);
            if (!b) {
                nmt_error("%s", nmt_errmsg());
                free(buf);
                goto fail_fd;
            }
            buf = b;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            nmt_error("cannot read '%s': %s", name, strerror(errno));
            free(buf);
            goto fail_fd;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
have_data:
    if (fd != 0)
        close(fd);
    l->data = buf;
    size_t lcap = 0, st = 0;
    while (st < n) {
        const char *nl = memchr(buf + st, '\n', n - st);
        size_t en = nl ? (size_t)(nl - buf) : n;
        size_t bad;
        if (utf8_check(buf + st, en - st, &bad) < 0) {
            nmt_error("invalid UTF-8 in '%s' line %zu (byte offset %zu)", name, l->n + 1, st + bad);
            lines_free(l);
            return -1;
        }
        if (lines_push(l, &lcap, buf + st, bleu_rstrip_len(buf + st, en - st)) < 0) {
            nmt_error("%s", nmt_errmsg());
            lines_free(l);
            return -1;
        }
        st = en + 1;
    }
    return 0;
fail_fd:
    if (fd != 0)
        close(fd);
    return -1;
}

/* Splits each line of L on tabs into exactly K fields (after sacreBLEU: the line is rstripped,
 * split at most K-1 times). FIELDS[k] receives the k-th column. Returns the line number of a bad
 * line (1-based) and its field count in *GOT, or 0. */
static size_t split_tabs(const lines_t *l, int k, lines_t *fields, int *got, int strip_fields)
{
    size_t *caps = calloc((size_t)k, sizeof *caps);
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

static int parse_int(const char *s, const char *what, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return nmt_usage_error("invalid %s '%s' (expected an integer from %d to %d)", what, s, lo, hi), -1;
    *out = (int)v;
    return 0;
}

/* Expands sacreBLEU's multi-value options (-i A B, -m bleu chrf) into repeated options so that
 * getopt_long_only can parse them. Returns a new argv (malloc'ed array, strings shared). */
static char **expand_args(int argc, char **argv, int *out_argc)
{
    char **v = malloc(((size_t)argc * 2 + 1) * sizeof *v);
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

enum {
    OPT_MAXORDER = 1000, OPT_FORCE, OPT_BETA, OPT_WS, OPT_CLC, OPT_EPS, OPT_TCS, OPT_TNP, OPT_TNORM,
    OPT_TASIAN, OPT_NR, OPT_SL, OPT_TOK, OPT_LC, OPT_SV, OPT_CC, OPT_CW, OPT_CI, OPT_CIN, OPT_PBS,
    OPT_PBSN, OPT_SH, OPT_NC, OPT_FULL
};

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

typedef struct {
    const char *name;
    lines_t l;
    double *rows[3]; /* per metric */
    bleu_score score[3];
    double p[3];
    double *sum[3]; /* summed statistics per metric */
    int own_name;
} system_t;

/* Statistics of lines [0, nlines) of one system summed by a worker thread with its own metric. */
typedef struct {
    const bleu_config *cfg;
    const lines_t *hyp, *refs;
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
    const char **rp = malloc((size_t)j->nrefs * sizeof *rp);
    size_t *rl = malloc((size_t)j->nrefs * sizeof *rl);
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

/* Long-lived data of main, kept reachable until exit. */
static char **eargv;
static lines_t *reflines, *reffile, stdin_lines, *stdin_cols;
static system_t *sys;
static const char **refp;
static size_t *refl;
static bleu_metric *met[3];

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

int main(int argc, char **argv)
{
    nmt_set_progname(argv[0]);
    static const struct option opts[] = {
        {"input", required_argument, 0, 'i'}, {"num-refs", required_argument, 0, OPT_NR},
        {"nr", required_argument, 0, OPT_NR}, {"metrics", required_argument, 0, 'm'},
        {"sentence-level", no_argument, 0, OPT_SL}, {"sl", no_argument, 0, OPT_SL},
        {"tokenize", required_argument, 0, OPT_TOK}, {"tok", required_argument, 0, OPT_TOK},
        {"lowercase", no_argument, 0, OPT_LC}, {"lc", no_argument, 0, OPT_LC},
        {"smooth-method", required_argument, 0, 's'}, {"smooth-value", required_argument, 0, OPT_SV},
        {"sv", required_argument, 0, OPT_SV}, {"max-ngram-order", required_argument, 0, OPT_MAXORDER},
        {"force", no_argument, 0, OPT_FORCE}, {"chrf-char-order", required_argument, 0, OPT_CC},
        {"cc", required_argument, 0, OPT_CC}, {"chrf-word-order", required_argument, 0, OPT_CW},
        {"cw", required_argument, 0, OPT_CW}, {"chrf-beta", required_argument, 0, OPT_BETA},
        {"chrf-whitespace", no_argument, 0, OPT_WS}, {"chrf-lowercase", no_argument, 0, OPT_CLC},
        {"chrf-eps-smoothing", no_argument, 0, OPT_EPS}, {"ter-case-sensitive", no_argument, 0, OPT_TCS},
        {"ter-no-punct", no_argument, 0, OPT_TNP}, {"ter-normalized", no_argument, 0, OPT_TNORM},
        {"ter-asian-support", no_argument, 0, OPT_TASIAN}, {"confidence", no_argument, 0, OPT_CI},
        {"ci", no_argument, 0, OPT_CI}, {"confidence-n", required_argument, 0, OPT_CIN},
        {"cin", required_argument, 0, OPT_CIN}, {"paired-bs", no_argument, 0, OPT_PBS},
        {"pbs", no_argument, 0, OPT_PBS}, {"paired-bs-n", required_argument, 0, OPT_PBSN},
        {"pbsn", required_argument, 0, OPT_PBSN}, {"format", required_argument, 0, 'f'},
        {"width", required_argument, 0, 'w'}, {"score-only", no_argument, 0, 'b'},
        {"short", no_argument, 0, OPT_SH}, {"sh", no_argument, 0, OPT_SH},
        {"quiet", no_argument, 0, 'q'}, {"no-color", no_argument, 0, OPT_NC},
        {"nc", no_argument, 0, OPT_NC}, {"full", no_argument, 0, OPT_FULL}, {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'V'},
        {0, 0, 0, 0}};
    bleu_config cfg[3];
    for (int k = 0; k < 3; k++)
        bleu_config_init(&cfg[k], k);
    const char *inputs[64];
    int ninputs = 0, use_metric[3] = {0, 0, 0}, any_metric = 0;
    int num_refs = 1, sentence = 0, ci = 0, ci_n = 1000, pbs = 0, pbs_n = 1000, json = 1, width = 1;
    int score_only = 0, is_short = 0, full = 0;
    int eargc;
    eargv = expand_args(argc, argv, &eargc);
    if (!eargv) {
        nmt_error("out of memory");
        return NMT_EXIT_DATA;
    }
    int c;
    opterr = 0;
    while ((c = getopt_long_only(eargc, eargv, ":i:m:s:f:w:bqhV", opts, NULL)) != -1) {
        switch (c) {
        case 'i':
            if (ninputs == 64)
                return nmt_usage_error("too many input systems (at most 64)");
            inputs[ninputs++] = optarg;
            break;
        case 'm':
            if (!strcmp(optarg, "bleu"))
                use_metric[0] = 1;
            else if (!strcmp(optarg, "chrf"))
                use_metric[1] = 1;
            else if (!strcmp(optarg, "ter"))
                use_metric[2] = 1;
            else
                return nmt_usage_error("unknown metric '%s' (choose from bleu, chrf, ter)", optarg);
            any_metric++;
            break;
        case OPT_NR:
            if (parse_int(optarg, "number of references", 1, 1000, &num_refs) < 0)
                return NMT_EXIT_USAGE;
            break;
        case OPT_SL:
            sentence = 1;
            break;
        case OPT_TOK:
            if ((cfg[0].tokenize = bleu_tokenizer_parse(optarg)) < 0)
                return nmt_usage_error("unknown tokenizer '%s' (choose from 13a, intl, zh, char, none)", optarg);
            break;
        case OPT_LC:
            cfg[0].lowercase = 1;
            break;
        case 's':
            if (!strcmp(optarg, "exp"))
                cfg[0].smooth = BLEU_SMOOTH_EXP;
            else if (!strcmp(optarg, "floor"))
                cfg[0].smooth = BLEU_SMOOTH_FLOOR;
            else if (!strcmp(optarg, "add-k"))
                cfg[0].smooth = BLEU_SMOOTH_ADDK;
            else if (!strcmp(optarg, "none"))
                cfg[0].smooth = BLEU_SMOOTH_NONE;
            else
                return nmt_usage_error("unknown smoothing method '%s' (choose from exp, floor, add-k, none)", optarg);
            break;
        case OPT_SV:
            if (nmt_parse_double(optarg, &cfg[0].smooth_value) < 0)
                return nmt_usage_error("invalid smoothing value '%s'", optarg);
            cfg[0].smooth_value_set = 1;
            break;
        case OPT_MAXORDER:
            if (parse_int(optarg, "n-gram order", 1, BLEU_MAX_ORDER, &cfg[0].max_order) < 0)
                return NMT_EXIT_USAGE;
            break;
        case OPT_FORCE: case 'q': case OPT_NC:
            break;
        case OPT_CC:
            if (parse_int(optarg, "character order", 0, BLEU_MAX_ORDER, &cfg[1].char_order) < 0)
                return NMT_EXIT_USAGE;
            break;
        case OPT_CW:
            if (parse_int(optarg, "word order", 0, BLEU_MAX_ORDER, &cfg[1].word_order) < 0)
                return NMT_EXIT_USAGE;
            break;
        case OPT_BETA:
            if (parse_int(optarg, "beta", 0, 1000, &cfg[1].beta) < 0)
                return NMT_EXIT_USAGE;
            break;
        case OPT_WS:
            cfg[1].whitespace = 1;
            break;
        case OPT_CLC:
            cfg[1].chrf_lowercase = 1;
            break;
        case OPT_EPS:
            cfg[1].eps_smoothing = 1;
            break;
        case OPT_TCS:
            cfg[2].case_sensitive = 1;
            break;
        case OPT_TNP:
            cfg[2].no_punct = 1;
            break;
        case OPT_TNORM:
            cfg[2].normalized = 1;
            break;
        case OPT_TASIAN:
            return nmt_usage_error("--ter-asian-support is not supported");
        case OPT_CI:
            ci = 1;
            break;
        case OPT_CIN:
            if (parse_int(optarg, "number of resamples", 1, 1000000, &ci_n) < 0)
                return NMT_EXIT_USAGE;
            break;
        case OPT_PBS:
            pbs = 1;
            break;
        case OPT_PBSN:
            if (parse_int(optarg, "number of resamples", 1, 1000000, &pbs_n) < 0)
                return NMT_EXIT_USAGE;
            break;
        case 'f':
            if (!strcmp(optarg, "json"))
                json = 1;
            else if (!strcmp(optarg, "text"))
                json = 0;
            else
                return nmt_usage_error("unknown format '%s' (choose from json, text)", optarg);
            break;
        case 'w':
            if (parse_int(optarg, "width", 0, 100, &width) < 0)
                return NMT_EXIT_USAGE;
            break;
        case 'b':
            score_only = 1;
            break;
        case OPT_SH:
            is_short = 1;
            break;
        case OPT_FULL:
            full = 1;
            break;
        case 'h':
            usage();
            free(eargv);
            return nmt_close_stdout() < 0 ? NMT_EXIT_DATA : NMT_EXIT_OK;
        case 'V':
            nmt_print_version();
            printf("signature version %s\n", BLEU_TOOL_VERSION);
            free(eargv);
            return nmt_close_stdout() < 0 ? NMT_EXIT_DATA : NMT_EXIT_OK;
        case ':':
            return nmt_usage_error("option '%s' needs a value", eargv[optind - 1]);
        default:
            return nmt_usage_error("unknown option '%s'", eargv[optind - 1]);
        }
    }
    if (!any_metric)
        use_metric[0] = 1, any_metric = 1;
    int nref_files = eargc - optind;
    char **ref_files = eargv + optind;
    if (nref_files == 0)
        return nmt_usage_error("no reference file given (give references before -i)");
    if (num_refs != 1 && nref_files > 1)
        return nmt_usage_error("--num-refs takes one file of tab-separated references, not several files");
    if (sentence && any_metric > 1)
        return nmt_usage_error("only one metric can be used in sentence-level mode");
    if (sentence && (ci || pbs))
        return nmt_usage_error("statistical tests are unavailable in sentence-level mode");
    if (sentence)
        cfg[0].effective_order = 1;

    int st = 0;
    /* references */
    int nrefs = num_refs > 1 ? num_refs : nref_files;
    reflines = calloc((size_t)nrefs, sizeof *reflines);
    reffile = calloc((size_t)nref_files, sizeof *reffile);
    if (!reflines || !reffile) {
        nmt_error("out of memory");
        return NMT_EXIT_DATA;
    }
    for (int r = 0; r < nref_files; r++)
        if (read_lines(ref_files[r], &reffile[r]) < 0)
            return NMT_EXIT_DATA;
    if (num_refs > 1) {
        int got;
        size_t bad = split_tabs(&reffile[0], num_refs, reflines, &got, 0);
        if (bad) {
            if (got < 0)
                nmt_error("out of memory");
            else
                nmt_error("'%s' line %zu: expected %d tab-separated references, found %d", ref_files[0], bad, num_refs, got);
            return NMT_EXIT_DATA;
        }
    } else
        for (int r = 0; r < nrefs; r++)
            reflines[r] = reffile[r];
    /* systems */
    int nsys = 0;
    if (ninputs == 0 || (ninputs == 1 && !strcmp(inputs[0], "-"))) {
        lines_t in;
        if (read_lines("-", &stdin_lines) < 0)
            return NMT_EXIT_DATA;
        in = stdin_lines;
        int k = in.n ? count_fields(in.line[0], in.len[0]) : 1;
        sys = calloc((size_t)k, sizeof *sys);
        if (!sys) {
            nmt_error("out of memory");
            return NMT_EXIT_DATA;
        }
        nsys = k;
        if (k == 1) {
            sys[0].l = in;
            memset(&stdin_lines, 0, sizeof stdin_lines);
        }
        else {
            lines_t *cols = stdin_cols = calloc((size_t)k, sizeof *cols);
            int got;
            if (!cols) {
                nmt_error("out of memory");
                return NMT_EXIT_DATA;
            }
            size_t bad = split_tabs(&in, k, cols, &got, 1);
            if (bad) {
                nmt_error("stdin line %zu: expected %d tab-separated systems as on line 1, found %d", bad, k, got);
                return NMT_EXIT_DATA;
            }
            for (int s = 0; s < k; s++)
                sys[s].l = cols[s];
        }
        for (int s = 0; s < nsys; s++) {
            char *nm = malloc(32);
            if (!nm) {
                nmt_error("out of memory");
                return NMT_EXIT_DATA;
            }
            if (pbs)
                snprintf(nm, 32, s == 0 ? "Baseline" : "System %d", s);
            else
                snprintf(nm, 32, "System %d", s + 1);
            sys[s].name = nm;
            sys[s].own_name = 1;
        }
    } else {
        sys = calloc((size_t)ninputs, sizeof *sys);
        if (!sys) {
            nmt_error("out of memory");
            return NMT_EXIT_DATA;
        }
        for (int s = 0; s < ninputs; s++) {
            int dup = 0;
            for (int q = 0; q < nsys; q++)
                if (!strcmp(inputs[s], inputs[q]))
                    dup = 1;
            if (dup) {
                if (pbs && !strcmp(inputs[s], inputs[0]))
                    continue; /* the baseline given again */
                nmt_error("'%s' already used to name a system", inputs[s]);
                return NMT_EXIT_DATA;
            }
            if (read_lines(inputs[s], &sys[nsys].l) < 0)
                return NMT_EXIT_DATA;
            sys[nsys++].name = inputs[s];
        }
        if (pbs) {
            char *nm = malloc(strlen(sys[0].name) + 16);
            if (!nm) {
                nmt_error("out of memory");
                return NMT_EXIT_DATA;
            }
            sprintf(nm, "Baseline: %s", sys[0].name);
            sys[0].name = nm;
            sys[0].own_name = 1;
        }
    }
    if (sentence && nsys > 1)
        return nmt_usage_error("only one system can be evaluated in sentence-level mode");
    if (pbs && nsys == 1)
        return nmt_usage_error("paired tests require several systems given to -i");
    if (nsys > 1 && ci)
        return nmt_usage_error("use paired tests (--paired-bs) for several systems");
    for (int s = 0; s < nsys; s++) {
        const char *hname = ninputs ? inputs[s] : "stdin";
        if (sys[s].l.n == 0) {
            nmt_error("hypothesis '%s' is empty", hname);
            return NMT_EXIT_DATA;
        }
        for (int r = 0; r < nrefs; r++)
            if (reflines[r].n != sys[s].l.n) {
                nmt_error("hypothesis '%s' has %zu lines but reference '%s'%s has %zu", hname, sys[s].l.n,
                          ref_files[num_refs > 1 ? 0 : r], num_refs > 1 ? " (a column)" : "", reflines[r].n);
                return NMT_EXIT_DATA;
            }
    }
    size_t nlines = sys[0].l.n;
    refp = malloc((size_t)nrefs * sizeof *refp);
    refl = malloc((size_t)nrefs * sizeof *refl);
    if (!refp || !refl) {
        nmt_error("out of memory");
        return NMT_EXIT_DATA;
    }
    const char *seedstr = getenv("SACREBLEU_SEED");
    if (!seedstr)
        seedstr = "12345";
    char seedlow[64];
    snprintf(seedlow, sizeof seedlow, "%s", seedstr);
    for (char *q = seedlow; *q; q++)
        if (*q >= 'A' && *q <= 'Z')
            *q = (char)(*q + 32);
    uint64_t seed = !strcmp(seedlow, "none") ? (uint64_t)getpid() ^ (uint64_t)time(NULL) : strtoull(seedstr, NULL, 10);

    /* metrics in sacreBLEU's order: BLEU, CHRF, TER */
    for (int k = 0; k < 3; k++)
        if (use_metric[k] && !(met[k] = bleu_metric_new(&cfg[k]))) {
            nmt_error("%s", nmt_errmsg());
            return NMT_EXIT_DATA;
        }

    if (sentence) {
        int k = use_metric[0] ? 0 : use_metric[1] ? 1 : 2;
        int ns = bleu_metric_nstats(met[k]);
        double *row = malloc((size_t)ns * sizeof *row);
        char sig[512];
        if (!row || bleu_signature(met[k], nrefs, is_short, 0, NULL, BLEU_TOOL_VERSION, sig, sizeof sig) < 0) {
            nmt_error("out of memory");
            return NMT_EXIT_DATA;
        }
        for (size_t i = 0; i < nlines && !st; i++) {
            for (int r = 0; r < nrefs; r++) {
                refp[r] = reflines[r].line[i];
                refl[r] = reflines[r].len[i];
            }
            if (bleu_metric_segment(met[k], sys[0].l.line[i], sys[0].l.len[i], refp, refl, nrefs, row) < 0) {
                nmt_error("line %zu: %s", i + 1, nmt_errmsg());
                return NMT_EXIT_DATA;
            }
            bleu_score sc;
            bleu_metric_score(met[k], row, &sc);
            if (full) {
                print_full(&sc, row, ns, k);
                continue;
            }
            char *s = bleu_format(&sc, width, score_only, sig, 0);
            print_or_fail(s, &st);
            free(s);
        }
        free(row);
    } else {
        for (int s = 0; s < nsys; s++)
            for (int k = 0; k < 3; k++) {
                if (!met[k])
                    continue;
                int ns = bleu_metric_nstats(met[k]);
                /* rows are kept for the bootstrap; otherwise summed as they come (same order) */
                int keep = ci || pbs;
                sys[s].rows[k] = malloc((keep ? nlines : 1) * (size_t)ns * sizeof(double));
                double *sum = calloc((size_t)ns, sizeof *sum);
                if (!sys[s].rows[k] || !sum) {
                    nmt_error("out of memory");
                    return NMT_EXIT_DATA;
                }
                size_t from = 0;
                if (!keep && k != BLEU_METRIC_TER && nlines >= 4096) {
                    /* BLEU and chrF statistics are integer counts, so two halves summed apart
                     * give the same sums: the first half runs in a second thread */
                    half_job job = {.cfg = &cfg[k], .hyp = &sys[s].l, .refs = reflines, .nrefs = nrefs,
                                    .nlines = nlines / 2, .ns = ns};
                    pthread_t th;
                    int started = pthread_create(&th, NULL, half_run, &job) == 0;
                    if (!started)
                        half_run(&job);
                    double *row = sys[s].rows[k];
                    size_t bad = 0;
                    char err[256] = "";
                    for (size_t i = nlines / 2; i < nlines; i++) {
                        for (int r = 0; r < nrefs; r++) {
                            refp[r] = reflines[r].line[i];
                            refl[r] = reflines[r].len[i];
                        }
                        if (bleu_metric_segment(met[k], sys[s].l.line[i], sys[s].l.len[i], refp, refl, nrefs, row) < 0) {
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
                    from = nlines;
                }
                for (size_t i = from; i < nlines; i++) {
                    for (int r = 0; r < nrefs; r++) {
                        refp[r] = reflines[r].line[i];
                        refl[r] = reflines[r].len[i];
                    }
                    double *row = sys[s].rows[k] + (keep ? i * (size_t)ns : 0);
                    if (bleu_metric_segment(met[k], sys[s].l.line[i], sys[s].l.len[i], refp, refl, nrefs, row) < 0) {
                        nmt_error("line %zu: %s", i + 1, nmt_errmsg());
                        return NMT_EXIT_DATA;
                    }
                    if (!keep)
                        for (int j = 0; j < ns; j++)
                            sum[j] += row[j];
                }
                if (keep)
                    bleu_metric_sum(met[k], sys[s].rows[k], nlines, NULL, sum);
                bleu_metric_score(met[k], sum, &sys[s].score[k]);
                sys[s].sum[k] = sum;
            }
        if (nsys == 1 && full) {
            for (int k = 0; k < 3; k++)
                if (met[k])
                    print_full(&sys[0].score[k], sys[0].sum[k], bleu_metric_nstats(met[k]), k);
        } else if (nsys == 1) {
            char *res[3];
            int nres = 0;
            for (int k = 0; k < 3; k++) {
                if (!met[k])
                    continue;
                if (ci && bleu_bootstrap(met[k], sys[0].rows[k], nlines, ci_n, seed, &sys[0].score[k], NULL) < 0) {
                    nmt_error("%s", nmt_errmsg());
                    return NMT_EXIT_DATA;
                }
                char sig[512];
                bleu_signature(met[k], nrefs, json ? 0 : is_short, ci ? ci_n : 0, seedlow, BLEU_TOOL_VERSION, sig, sizeof sig);
                res[nres] = bleu_format(&sys[0].score[k], width, score_only, sig, json);
                if (!res[nres]) {
                    nmt_error("%s", nmt_errmsg());
                    return NMT_EXIT_DATA;
                }
                nres++;
            }
            if (json && nres > 1 && !score_only) {
                fputs("[\n", stdout);
                for (int q = 0; q < nres; q++)
                    printf("%s%s", res[q], q + 1 < nres ? ",\n" : "\n");
                fputs("]\n", stdout);
            } else if (nres == 1 || score_only) {
                for (int q = 0; q < nres; q++)
                    printf("%s\n", res[q]);
            } else { /* align on " = " */
                int w = 0;
                for (int q = 0; q < nres; q++) {
                    const char *eq = strchr(res[q], '=');
                    int l = eq ? (int)(eq - res[q]) - 1 : 0;
                    if (l > w)
                        w = l;
                }
                for (int q = 0; q < nres; q++) {
                    const char *eq = strchr(res[q], '=');
                    int l = eq ? (int)(eq - res[q]) - 1 : 0;
                    printf("%*s%s\n", w - l, "", res[q]);
                }
            }
            for (int q = 0; q < nres; q++)
                free(res[q]);
        } else {
            /* several systems: a table (text) or a JSON list, as sacreBLEU's print_results_table */
            if (pbs)
                for (int k = 0; k < 3; k++) {
                    if (!met[k])
                        continue;
                    if (bleu_bootstrap(met[k], sys[0].rows[k], nlines, pbs_n, seed, &sys[0].score[k], NULL) < 0) {
                        nmt_error("%s", nmt_errmsg());
                        return NMT_EXIT_DATA;
                    }
                    for (int s = 1; s < nsys; s++)
                        if (bleu_paired_bs(met[k], sys[0].rows[k], sys[s].rows[k], nlines, pbs_n, seed,
                                           sys[0].score[k].score, &sys[s].score[k], &sys[s].p[k]) < 0) {
                            nmt_error("%s", nmt_errmsg());
                            return NMT_EXIT_DATA;
                        }
                }
            if (json) {
                char num[64];
                printf("[\n");
                for (int s = 0; s < nsys; s++) {
                    printf("    {\n        \"system\": \"%s\"", sys[s].name);
                    for (int k = 0; k < 3; k++) {
                        if (!met[k])
                            continue;
                        bleu_score *sc = &sys[s].score[k];
                        if (!pbs) {
                            char *v = bleu_format(sc, width, 1, "", 0);
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
                            bleu_pyfloat(sys[s].p[k], num, sizeof num);
                            printf("            \"p_value\": %s,\n", num);
                        }
                        bleu_pyfloat(sc->mean, num, sizeof num);
                        printf("            \"mean\": %s,\n", num);
                        bleu_pyfloat(sc->ci, num, sizeof num);
                        printf("            \"ci\": %s\n        }", num);
                    }
                    printf("\n    }%s\n", s + 1 < nsys ? "," : "");
                }
                printf("]\n");
            } else {
                int cols = 1;
                for (int k = 0; k < 3; k++)
                    cols += met[k] != NULL;
                char ***cells = calloc((size_t)nsys + 1, sizeof *cells);
                if (!cells) {
                    nmt_error("out of memory");
                    return NMT_EXIT_DATA;
                }
                for (int r = 0; r <= nsys; r++) {
                    cells[r] = calloc((size_t)cols, sizeof **cells);
                    if (!cells[r]) {
                        nmt_error("out of memory");
                        return NMT_EXIT_DATA;
                    }
                    int c2 = 0;
                    cells[r][c2++] = strdup(r == 0 ? "System" : sys[r - 1].name);
                    for (int k = 0; k < 3; k++) {
                        if (!met[k])
                            continue;
                        char buf[256];
                        bleu_score *sc = &sys[r ? r - 1 : 0].score[k];
                        if (r == 0)
                            snprintf(buf, sizeof buf, "%s%s", sc->name, pbs ? " (μ ± 95% CI)" : "");
                        else if (!pbs)
                            snprintf(buf, sizeof buf, "%.*f", width, sc->score);
                        else if (r == 1)
                            snprintf(buf, sizeof buf, "%.*f (%.*f ± %.*f)", width, sc->score, width, sc->mean, width, sc->ci);
                        else
                            snprintf(buf, sizeof buf, "%.*f (%.*f ± %.*f)\n(p = %.4f)%s", width, sc->score, width,
                                     sc->mean, width, sc->ci, sys[r - 1].p[k], sys[r - 1].p[k] > 0.05 ? "" : "*");
                        cells[r][c2++] = strdup(buf);
                    }
                }
                print_table(cells, nsys + 1, cols);
                printf("\n");
                if (pbs) {
                    char msg[128];
                    int ml = snprintf(msg, sizeof msg, "Paired bootstrap resampling test with %d resampling trials", pbs_n);
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
                           sys[0].name);
                }
                printf("-----------------\nMetric signatures\n-----------------\n");
                for (int k = 0; k < 3; k++) {
                    if (!met[k])
                        continue;
                    char sig[512];
                    bleu_signature(met[k], nrefs, is_short, pbs ? pbs_n : 0, seedlow, BLEU_TOOL_VERSION, sig, sizeof sig);
                    printf(" - %-10s %s\n", sys[0].score[k].name, sig);
                }
                for (int r = 0; r <= nsys; r++) {
                    for (int c2 = 0; c2 < cols; c2++)
                        free(cells[r][c2]);
                    free(cells[r]);
                }
                free(cells);
            }
        }
    }
    for (int k = 0; k < 3; k++)
        bleu_metric_free(met[k]);
    for (int s = 0; s < nsys; s++) {
        for (int k = 0; k < 3; k++) {
            free(sys[s].rows[k]);
            free(sys[s].sum[k]);
        }
        if (sys[s].own_name)
            free((char *)sys[s].name);
        lines_free(&sys[s].l);
    }
    free(sys);
    if (stdin_cols) {
        lines_free(&stdin_lines);
        free(stdin_cols);
    }
    for (int r = 0; r < nref_files; r++)
        lines_free(&reffile[r]);
    if (num_refs > 1)
        for (int r = 0; r < nrefs; r++) {
            free(reflines[r].line);
            free(reflines[r].len);
        }
    free(reflines);
    free(reffile);
    free(refp);
    free(refl);
    free(eargv);
    if (nmt_close_stdout() < 0) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    return st ? NMT_EXIT_DATA : NMT_EXIT_OK;
}
