/* nmt-batch: token-budget batches with length bucketing and seeded shuffling (nmt-batch(1)).
 * Reads an ids stream, writes a batch stream; the work is done by libcommon/data/batcher.c. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/batcher.h"
#include "io/stream.h"
#include "cli/cli.h"
#include "cli/opt.h"

/* Parses --shard K/N into the struct batcher_opts at FIELD; 0, or -1 after a usage error. */
static int parse_shard(const char *opt, const char *arg, void *field)
{
    struct batcher_opts *o = field;
    const char *slash = strchr(arg, '/');
    char k[32];
    if (!slash || (size_t)(slash - arg) >= sizeof k)
        goto bad;
    memcpy(k, arg, (size_t)(slash - arg));
    k[slash - arg] = '\0';
    if (nmt_parse_u64(k, UINT32_MAX, &o->shard_k) < 0 || nmt_parse_u64(slash + 1, UINT32_MAX, &o->shard_n) < 0 ||
        o->shard_n < 1 || o->shard_k >= o->shard_n)
        goto bad;
    return 0;
bad:
    nmt_usage_error("invalid %s '%s' (expected K/N with 0 <= K < N)", opt, arg);
    return -1;
}

/* Returns 1 for .jsonl, 2 for .csv, 0 for anything else. */
static int log_style(const char *path)
{
    size_t n = strlen(path);
    if (n > 6 && strcmp(path + n - 6, ".jsonl") == 0)
        return 1;
    if (n > 4 && strcmp(path + n - 4, ".csv") == 0)
        return 2;
    return 0;
}

/* The command line: batching options, files and epochs. */
struct args {
    struct batcher_opts o;
    const char *in_path, *out_path, *log_path;
    uint64_t epochs;
};

#define GO_ON (-1) /* parse_args' "carry on": anything else is main's exit status */

#define OFF(field) offsetof(struct args, field)
/* The options; the batching defaults are batcher_opts_init's. */
static const struct opt_spec OPTIONS[] = {
    {OPTION(OT_STR, "input", 'i', "FILE", OFF(in_path), "read FILE ('-' for stdin)")},
    {OPTION(OT_STR, "output", 'o', "FILE", OFF(out_path),
            "write FILE ('-' for stdout, the default; never a terminal)")},
    {OPTION(OT_U64, "max-tokens", 't', "N", OFF(o.max_tokens),
            "padded tokens of the larger side of a batch <= N (default 4096)"),
     .imin = 1, .imax = BATCHER_MAX_TOKENS},
    {OPTION(OT_U64, "max-sentences", 0, "N", OFF(o.max_sentences), "at most N pairs per batch (default: no limit)"),
     .imin = 1, .imax = BATCHER_MAX_TOKENS},
    {OPTION(OT_U64, "max-len", 'l', "L", OFF(o.max_len),
            "drop pairs with a side longer than L tokens (default: no limit\n"
            "besides --max-tokens)"),
     .imin = 1, .imax = BATCHER_MAX_TOKENS},
    {OPTION(OT_FLAG, "truncate", 0, NULL, OFF(o.truncate),
            "cut sides longer than the limit instead of dropping the pair")},
    {OPTION(OT_DOUBLE, "max-ratio", 'r', "R", OFF(o.max_ratio),
            "drop pairs whose longer side is more than R times the shorter"),
     .flags = OF_MAX_OPEN, .dmin = 1, .dmax = INFINITY},
    {OPTION(OT_U64, "window", 'w', "N", OFF(o.window),
            "bucket and shuffle N pairs at a time (default 100000); memory\n"
            "grows with N, not with the input"),
     .imin = 1, .imax = BATCHER_MAX_WINDOW},
    {OPTION(OT_U64, "seed", 0, "N", OFF(o.seed), "shuffling seed (default 1); epoch e uses N+e"), .imin = 0,
     .imax = UINT64_MAX},
    {OPTION(OT_U64, "epochs", 'e', "E", OFF(epochs),
            "write E epochs, re-reading the input (needs a seekable input)"),
     .imin = 1, .imax = 1000000},
    {OPTION(OT_CUSTOM, "shard", 0, "K/N", OFF(o), "write only batches j with j % N == K (0 <= K < N)"),
     .parse = parse_shard},
    {OPTION(OT_STR, "log", 0, "FILE", OFF(log_path), "also write the summary to FILE (.jsonl or .csv)")},
    OPT_HELP_VERSION_END};

static const char USAGE_HEAD[] =
    "Usage: nmt-batch [OPTION]... [-i] [FILE]\n"
    "Reads an ids stream of source/target pairs (FILE, or stdin) and writes a batch stream of\n"
    "padded id matrices: pairs are bucketed by length inside a window, cut into batches within\n"
    "a token budget, and the batches shuffled with a seed. Lengths count the EOS of each row.\n"
    "\n";
static const char USAGE_TAIL[] =
    "\n"
    "At the end, a summary line on stderr: pairs read, dropped, batches, tokens, padding.\n"
    "Exit status: 0 success, 1 bad input or failure, 2 usage error.\n";

/* Parses the command line into A. Returns GO_ON, or main's exit status (usage errors, --help,
 * --version). */
static int parse_args(int argc, char **argv, struct args *a)
{
    *a = (struct args){.epochs = 1};
    batcher_opts_init(&a->o);
    int parsed = opt_parse_tool(OPTIONS, argc, argv, a, USAGE_HEAD, USAGE_TAIL);
    if (parsed != OPT_PROCEED)
        return parsed;
    if (a->log_path && !log_style(a->log_path))
        return nmt_usage_error("--log FILE must end in .jsonl or .csv: '%s'", a->log_path);
    if (optind < argc) {
        if (a->in_path || argc - optind > 1)
            return nmt_usage_error("expected one input, got extra argument '%s'", argv[a->in_path ? optind : optind + 1]);
        a->in_path = argv[optind];
    }
    struct batcher_opts *o = &a->o;
    if (batcher_opts_check(o) < 0)
        return nmt_usage_error("%s", nmt_errmsg());
    return GO_ON;
}

/* Writes the summary line of B to stderr, and to LOG (when not NULL) in the style of LOG_PATH. */
static void write_summary(const struct batcher *b, FILE *log, const char *log_path)
{
    char line[512];
    batcher_stats_format(batcher_stats(b), BATCHER_TEXT, line, sizeof line);
    fprintf(stderr, "%s: %s\n", nmt_progname(), line);
    if (!log)
        return;
    if (log_style(log_path) == 1) {
        batcher_stats_format(batcher_stats(b), BATCHER_JSON, line, sizeof line);
        fprintf(log, "%s\n", line);
    } else {
        batcher_stats_format(batcher_stats(b), BATCHER_CSV_HEADER, line, sizeof line);
        fprintf(log, "%s\n", line);
        batcher_stats_format(batcher_stats(b), BATCHER_CSV_ROW, line, sizeof line);
        fprintf(log, "%s\n", line);
    }
}

/* Writes EPOCHS passes over the input (re-read from IN_FD, which must then be seekable) through
 * B to W; *IN is the open reader, replaced on each pass. 0, or -1 with the error set. */
static int run_epochs(struct batcher *b, int in_fd, const char *in_name, struct rec_reader **in, uint64_t epochs,
                      struct rec_writer *w)
{
    int st;
    for (uint64_t e = 0; e < epochs; e++) {
        if (e > 0) {
            rec_reader_free(*in);
            *in = NULL;
            if (lseek(in_fd, 0, SEEK_SET) < 0)
                return nmt_seterr("cannot rewind %s: %s", in_name, strerror(errno));
            if (!(*in = rec_reader_open(in_fd, in_name, "ids", &st)))
                return -1;
        }
        if (batcher_epoch(b, e, *in, in_name, w) < 0)
            return -1;
    }
    return 0;
}

/* Batches the open input IN into the named output OUT (and the summary into LOG, if open). 0, or -1
 * with the error set; the outputs are committed only on success. */
static int batch_to(const struct args *a, int in_fd, struct rec_reader **in, struct out_file *out, struct out_file *log)
{
    const char *in_name = nmt_path_name(a->in_path, 0), *out_name = nmt_path_name(a->out_path, 1);
    struct batcher_kv kv;
    batcher_header_kv(&kv, &a->o, a->epochs, rec_header_get(rec_reader_header(*in), "vocab"));
    struct batcher *b = batcher_new(&a->o);
    struct rec_writer *w = b ? rec_writer_open(out->fd, out_name, "batch", "nmt-batch " NMT_VERSION, kv.kv, kv.nkv, NULL)
                             : NULL;
    int rc = w ? run_epochs(b, in_fd, in_name, in, a->epochs, w) : -1;
    if (w && rc < 0)
        rec_writer_abort(w);
    else if (w && rec_writer_close(w) < 0)
        rc = -1;
    FILE *lf = NULL;
    if (rc == 0 && log->mode) {
        lf = fdopen(log->fd, "w");
        if (!lf)
            rc = nmt_seterr("cannot write '%s': %s", a->log_path, strerror(errno));
    }
    if (rc == 0) {
        write_summary(b, lf, a->log_path);
        if (lf && (fflush(lf) != 0 || ferror(lf)))
            rc = nmt_seterr("cannot write '%s': %s", a->log_path, strerror(errno));
    }
    if (lf) {
        log->fd = dup(fileno(lf)); /* out_file closes its own descriptor */
        fclose(lf);
    }
    batcher_free(b);
    if (nmt_output_finish(out, rc == 0) < 0 || nmt_output_finish(log, rc == 0) < 0)
        rc = -1;
    return rc;
}

/* Opens the input, refuses outputs that are the input, opens the outputs. 0, -1 with the error set, or
 * -2 with the error set for a usage error. */
static int open_files(const struct args *a, int *in_fd, struct rec_reader **in, struct out_file *out,
                      struct out_file *log)
{
    const char *in_name = nmt_path_name(a->in_path, 0);
    int st;
    if ((*in_fd = nmt_open_in(a->in_path)) < 0)
        return -1;
    if (a->epochs > 1 && lseek(*in_fd, 0, SEEK_CUR) < 0)
        return nmt_seterr("--epochs %llu needs a seekable input; %s is not seekable (%s)",
                          (unsigned long long)a->epochs, in_name, strerror(errno)), -2;
    if (nmt_check_not_input(*in_fd, in_name, a->out_path) < 0 ||
        (a->log_path && nmt_check_not_input(*in_fd, in_name, a->log_path) < 0))
        return -1;
    if (!(*in = rec_reader_open(*in_fd, in_name, "ids", &st)))
        return -1;
    if (a->log_path && out_file_open(log, a->log_path) < 0)
        return -1;
    return nmt_output_open(out, a->out_path, 1);
}

int main(int argc, char **argv)
{
    nmt_start(argv);
    struct args args;
    int rc = parse_args(argc, argv, &args);
    if (rc != GO_ON)
        return rc;
    int in_fd = -1;
    struct rec_reader *in = NULL;
    struct out_file out = {.fd = -1}, log = {.fd = -1};
    int opened = open_files(&args, &in_fd, &in, &out, &log);
    rc = opened == 0 && batch_to(&args, in_fd, &in, &out, &log) == 0 ? NMT_EXIT_OK : NMT_EXIT_DATA;
    if (opened == -2) {
        rc = nmt_usage_error("%s", nmt_errmsg());
        nmt_output_finish(&log, 0);
    } else if (rc != NMT_EXIT_OK) {
        nmt_error("%s", nmt_errmsg());
        nmt_output_finish(&out, 0);
        nmt_output_finish(&log, 0);
    }
    rec_reader_free(in);
    if (in_fd > STDIN_FILENO)
        close(in_fd);
    if (nmt_close_stdout() < 0 && rc == NMT_EXIT_OK) {
        nmt_error("%s", nmt_errmsg());
        rc = NMT_EXIT_DATA;
    }
    return rc;
}
