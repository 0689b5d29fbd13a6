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
           "  -s, --max-sentences N   at most N pairs per batch (default: no limit)\n"
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
    while ((c = getopt_long(argc, argv, "i:o:t:s:l:r:w:e:h", longopts, NULL)) != -1) {
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
        default: return nmt_usage_error("unknown option");
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

int main(int argc, char **argv)
{
    nmt_set_progname(argv[0]);
    struct args args;
    int rc = parse_args(argc, argv, &args);
    if (rc != GO_ON)
        return rc;
    const struct batcher_opts o = args.o;
    const char *in_path = args.in_path, *out_path = args.out_path, *log_path = args.log_path;
    uint64_t epochs = args.epochs;
    const char *in_name = nmt_path_name(in_path, 0), *out_name = nmt_path_name(out_path, 1);

    int in_fd = nmt_open_in(in_path);
    if (in_fd < 0) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    if (epochs > 1 && lseek(in_fd, 0, SEEK_CUR) < 0) {
        nmt_usage_error("--epochs %llu needs a seekable input; %s is not seekable (%s)",
                        (unsigned long long)epochs, in_name, strerror(errno));
        return NMT_EXIT_USAGE;
    }
    int st;
    struct rec_reader *in = rec_reader_open(in_fd, in_name, "ids", &st);
    if (!in) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    FILE *log = NULL;
    if (log_path && !(log = fopen(log_path, "w"))) {
        nmt_error("cannot open '%s' for writing: %s", log_path, strerror(errno));
        rec_reader_free(in);
        return NMT_EXIT_DATA;
    }
    int out_fd = nmt_open_out(out_path, 1);
    if (out_fd < 0) {
        nmt_error("%s", nmt_errmsg());
        rec_reader_free(in);
        if (log)
            fclose(log);
        return NMT_EXIT_DATA;
    }
    struct batcher_kv kv;
    batcher_header_kv(&kv, &o, epochs, rec_header_get(rec_reader_header(in), "vocab"));
    struct batcher *b = batcher_new(&o);
    struct rec_writer *w = b ? rec_writer_open(out_fd, out_name, "batch", "nmt-batch " NMT_VERSION, kv.kv, kv.nkv, NULL)
                             : NULL;
    rc = NMT_EXIT_OK;
    if (!w) {
        nmt_error("%s", nmt_errmsg());
        rc = NMT_EXIT_DATA;
    }
    for (uint64_t e = 0; rc == NMT_EXIT_OK && e < epochs; e++) {
        if (e > 0) {
            rec_reader_free(in);
            in = NULL;
            if (lseek(in_fd, 0, SEEK_SET) < 0) {
                nmt_error("cannot rewind %s: %s", in_name, strerror(errno));
                rc = NMT_EXIT_DATA;
                break;
            }
            if (!(in = rec_reader_open(in_fd, in_name, "ids", &st))) {
                nmt_error("%s", nmt_errmsg());
                rc = NMT_EXIT_DATA;
                break;
            }
        }
        if (batcher_epoch(b, e, in, in_name, w) < 0) {
            nmt_error("%s", nmt_errmsg());
            rc = NMT_EXIT_DATA;
        }
    }
    rec_reader_free(in);
    if (in_fd != STDIN_FILENO)
        close(in_fd);
    if (w) {
        if (rc != NMT_EXIT_OK) {
            rec_writer_abort(w);
        } else if (rec_writer_close(w) < 0) {
            nmt_error("%s", nmt_errmsg());
            rc = NMT_EXIT_DATA;
        }
    }
    if (out_fd != STDOUT_FILENO && close(out_fd) < 0 && rc == NMT_EXIT_OK) {
        nmt_error("cannot close '%s': %s", out_name, strerror(errno));
        rc = NMT_EXIT_DATA;
    }
    if (rc == NMT_EXIT_OK)
        write_summary(b, log, log_path);
    if (log && (ferror(log) | fclose(log)) && rc == NMT_EXIT_OK) {
        nmt_error("cannot write '%s': %s", log_path, strerror(errno));
        rc = NMT_EXIT_DATA;
    }
    batcher_free(b);
    if (nmt_close_stdout() < 0 && rc == NMT_EXIT_OK) {
        nmt_error("%s", nmt_errmsg());
        rc = NMT_EXIT_DATA;
    }
    return rc;
}
