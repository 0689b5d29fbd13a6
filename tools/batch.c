/* nmt-batch: token-budget batches with length bucketing and seeded shuffling (nmt-batch(1)).
 * Reads an ids stream, writes a batch stream; the work is done by libcommon/data/batcher.c. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/batcher.h"
#include "io/stream.h"
#include "cli/cli.h"
#include "cli/opt.h"

static void usage(void)
{
    printf("Usage: %s [OPTION]... [-i] [FILE]\n"
           "Reads an ids stream of source/target pairs (FILE, or stdin) and writes a batch stream of\n"
           "padded id matrices: pairs are bucketed by length inside a window, cut into batches within\n"
           "a token budget, and the batches shuffled with a seed. Lengths count the EOS of each row.\n"
           "\n"
           "  -i, --input FILE        read FILE ('-' for stdin)\n"
           "  -o, --output FILE       write FILE ('-' for stdout, the default; never a terminal)\n"
           "  -t, --max-tokens N      padded tokens of the larger side of a batch <= N (default 4096)\n"
           "      --max-sentences N   at most N pairs per batch (default: no limit)\n"
           "  -l, --max-len L         drop pairs with a side longer than L tokens (default: no limit\n"
           "                          besides --max-tokens)\n"
           "      --truncate          cut sides longer than the limit instead of dropping the pair\n"
           "  -r, --max-ratio R       drop pairs whose longer side is more than R times the shorter\n"
           "  -w, --window N          bucket and shuffle N pairs at a time (default 100000); memory\n"
           "                          grows with N, not with the input\n"
           "      --seed N            shuffling seed (default 1); epoch e uses N+e\n"
           "  -e, --epochs E          write E epochs, re-reading the input (needs a seekable input)\n"
           "      --shard K/N         write only batches j with j %% N == K (0 <= K < N)\n"
           "      --log FILE          also write the summary to FILE (.jsonl or .csv)\n"
           "  -h, --help              show this help and exit\n"
           "      --version           show the version and exit\n"
           "\n"
           "At the end, a summary line on stderr: pairs read, dropped, batches, tokens, padding.\n"
           "Exit status: 0 success, 1 bad input or failure, 2 usage error.\n",
           nmt_progname());
}

enum { OPT_TRUNCATE = 256, OPT_SEED, OPT_SHARD, OPT_LOG, OPT_VERSION };

static int parse_shard(const char *arg, struct batcher_opts *o)
{
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
    nmt_usage_error("invalid --shard '%s' (expected K/N with 0 <= K < N)", arg);
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

/* Parses the command line into A. Returns GO_ON, or main's exit status (usage errors, --help,
 * --version). */
static int parse_args(int argc, char **argv, struct args *a)
{
    static const struct option longopts[] = {
        {"input", required_argument, NULL, 'i'},      {"output", required_argument, NULL, 'o'},
        {"max-tokens", required_argument, NULL, 't'}, {"max-sentences", required_argument, NULL, 's'},
        {"max-len", required_argument, NULL, 'l'},    {"truncate", no_argument, NULL, OPT_TRUNCATE},
        {"max-ratio", required_argument, NULL, 'r'},  {"window", required_argument, NULL, 'w'},
        {"seed", required_argument, NULL, OPT_SEED},  {"epochs", required_argument, NULL, 'e'},
        {"shard", required_argument, NULL, OPT_SHARD}, {"log", required_argument, NULL, OPT_LOG},
        {"help", no_argument, NULL, 'h'},             {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0}};
    struct batcher_opts *o = &a->o;
    batcher_opts_init(o);
    a->in_path = a->out_path = a->log_path = NULL;
    a->epochs = 1;
    int c;
    while ((c = getopt_long(argc, argv, "i:o:t:l:r:w:e:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'i': a->in_path = optarg; break;
        case 'o': a->out_path = optarg; break;
        case 't':
            if (opt_u64("--max-tokens", optarg, 1, BATCHER_MAX_TOKENS, &o->max_tokens) < 0)
                return NMT_EXIT_USAGE;
            break;
        case 's':
            if (opt_u64("--max-sentences", optarg, 1, BATCHER_MAX_TOKENS, &o->max_sentences) < 0)
                return NMT_EXIT_USAGE;
            break;
        case 'l':
            if (opt_u64("--max-len", optarg, 1, BATCHER_MAX_TOKENS, &o->max_len) < 0)
                return NMT_EXIT_USAGE;
            break;
        case OPT_TRUNCATE: o->truncate = 1; break;
        case 'r':
            if (opt_double("--max-ratio", optarg, 1, INFINITY, 1, &o->max_ratio) < 0)
                return NMT_EXIT_USAGE;
            break;
        case 'w':
            if (opt_u64("--window", optarg, 1, BATCHER_MAX_WINDOW, &o->window) < 0)
                return NMT_EXIT_USAGE;
            break;
        case OPT_SEED:
            if (opt_u64("--seed", optarg, 0, UINT64_MAX, &o->seed) < 0)
                return NMT_EXIT_USAGE;
            break;
        case 'e':
            if (opt_u64("--epochs", optarg, 1, 1000000, &a->epochs) < 0)
                return NMT_EXIT_USAGE;
            break;
        case OPT_SHARD:
            if (parse_shard(optarg, o) < 0)
                return NMT_EXIT_USAGE;
            break;
        case OPT_LOG:
            a->log_path = optarg;
            if (!log_style(a->log_path))
                return nmt_usage_error("--log FILE must end in .jsonl or .csv: '%s'", a->log_path);
            break;
        case 'h': usage(); return nmt_close_stdout() < 0 ? NMT_EXIT_DATA : NMT_EXIT_OK;
        case OPT_VERSION: nmt_print_version(); return nmt_close_stdout() < 0 ? NMT_EXIT_DATA : NMT_EXIT_OK;
        default: return nmt_usage_hint();
        }
    }
    if (optind < argc) {
        if (a->in_path || argc - optind > 1)
            return nmt_usage_error("expected one input, got extra argument '%s'", argv[a->in_path ? optind : optind + 1]);
        a->in_path = argv[optind];
    }
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
