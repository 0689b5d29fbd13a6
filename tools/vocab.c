/* nmt-vocab: learn a joint BPE vocabulary from tok streams (see nmt-vocab(1), nmt-vocab(5)). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text/bpe.h"
#include "io/stream.h"
#include "io/records.h"
#include "cli/cli.h"
#include "text/vocab.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: nmt-vocab [OPTIONS] [FILE...]\n"
            "Learn a BPE vocabulary from tok streams written by nmt-tokenize (stdin when no FILE or FILE is -).\n"
            "Both sides of pair records are counted (a joint vocabulary) unless --side is given.\n"
            "\n"
            "  -o, --output FILE            write the vocabulary to FILE (default stdout)\n"
            "  -s, --size N                 vocabulary size, counting the 4 special and 256 byte pieces\n"
            "                               (default 8000, at least 260)\n"
            "      --min-freq N             learn a merge only if its pair occurs N times or more (default 2)\n"
            "      --character-coverage F   keep the most frequent characters covering this fraction of all\n"
            "                               character occurrences (default 1.0); the rest use byte pieces\n"
            "      --side N                 count only side N (1 source, 2 target) of pair records\n"
            "      --verbose                print a summary of what was learnt on stderr\n"
            "  -h, --help                   show this help and exit\n"
            "      --version                show version information and exit\n"
            "\n"
            "Exit status: 0 success, 1 bad input or runtime failure, 2 usage error.\n");
}

/* Counts the words of one input; 0 or -1 with the error set. *NORM is set from the first header
 * and later inputs must agree. */
static int count_input(const char *path, struct bpe_counts *c, int side, const char **norm, char *normbuf,
                       uint64_t *records)
{
    const char *name = nmt_path_name(path, 0);
    int fd = nmt_open_in(path);
    if (fd < 0)
        return -1;
    int status, rc = 0;
    struct rec_reader *r = rec_reader_open(fd, name, "tok", &status);
    if (!r) {
        if (fd != 0)
            close(fd);
        return -1;
    }
    const char *hn = rec_header_get(rec_reader_header(r), "normalize");
    if (!hn)
        hn = "nfkc";
    if (text_norm_parse(hn) < 0) {
        rc = nmt_seterr("%s: unknown normalization '%s' in the stream header", name, hn);
    } else if (*norm && strcmp(*norm, hn) != 0) {
        rc = nmt_seterr("%s: normalization %s differs from the first input's %s", name, hn, *norm);
    } else if (!*norm) {
        snprintf(normbuf, 16, "%s", hn);
        *norm = normbuf;
    }
    struct tok_record t = {0};
    const unsigned char *d;
    size_t len;
    while (rc == 0 && (status = rec_read(r, &d, &len)) == REC_OK) {
        if (tok_record_decode(&t, d, len) < 0) {
            rc = nmt_seterr("%s: record %llu: %s", name, (unsigned long long)rec_reader_count(r), nmt_errmsg());
            break;
        }
        for (unsigned s = 0; s < t.nsides; s++) {
            if (side >= 0 && (unsigned)side != s)
                continue;
            for (uint32_t i = 0; i < t.side[s].ntok; i++) {
                size_t bad;
                if (utf8_check(t.side[s].tok[i], t.side[s].len[i], &bad) < 0) {
                    rc = nmt_seterr("%s: record %llu: token %u is not valid UTF-8", name,
                                    (unsigned long long)rec_reader_count(r), i + 1);
                    break;
                }
                if (bpe_counts_add(c, t.side[s].tok[i], t.side[s].len[i], 1) < 0) {
                    rc = -1;
                    break;
                }
            }
        }
        (*records)++;
    }
    if (rc == 0 && status != REC_END)
        rc = -1;
    tok_record_free(&t);
    rec_reader_free(r);
    if (fd != 0)
        close(fd);
    return rc;
}

int main(int argc, char **argv)
{
    nmt_start(argv);
    const char *out = NULL;
    uint64_t size = 8000, min_freq = 2, sidev = 0;
    double coverage = 1.0;
    int verbose = 0, side = -1;
    enum { OPT_MINFREQ = 256, OPT_COVERAGE, OPT_SIDE, OPT_VERSION };
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"size", required_argument, NULL, 's'},
        {"min-freq", required_argument, NULL, OPT_MINFREQ},
        {"character-coverage", required_argument, NULL, OPT_COVERAGE},
        {"side", required_argument, NULL, OPT_SIDE},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0}};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:s:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 's':
            if (nmt_parse_u64(optarg, VOCAB_MAX_SIZE, &size) < 0 || size < VOCAB_FIRST_CHAR)
                return nmt_usage_error("invalid --size '%s' (%u to %u)", optarg, VOCAB_FIRST_CHAR, VOCAB_MAX_SIZE);
            break;
        case OPT_MINFREQ:
            if (nmt_parse_u64(optarg, UINT32_MAX, &min_freq) < 0 || min_freq == 0)
                return nmt_usage_error("invalid --min-freq '%s' (a positive integer)", optarg);
            break;
        case OPT_COVERAGE:
            if (nmt_parse_double(optarg, &coverage) < 0 || !(coverage > 0 && coverage <= 1))
                return nmt_usage_error("invalid --character-coverage '%s' (above 0, at most 1)", optarg);
            break;
        case OPT_SIDE:
            if (nmt_parse_u64(optarg, 2, &sidev) < 0 || sidev == 0)
                return nmt_usage_error("invalid --side '%s' (1 or 2)", optarg);
            side = (int)sidev - 1;
            break;
        case 'v': verbose = 1; break;
        case 'h': usage(stdout); return nmt_close_stdout() == 0 ? 0 : 1;
        case OPT_VERSION: nmt_print_version(); return nmt_close_stdout() == 0 ? 0 : 1;
        case ':': return nmt_usage_error("option '%s' needs a value", argv[optind - 1]);
        default: return nmt_usage_error("invalid option '%s'", argv[optind - 1]);
        }
    }
    struct bpe_counts counts;
    bpe_counts_init(&counts);
    const char *norm = NULL;
    char normbuf[16];
    uint64_t records = 0;
    int rc = 0;
    if (optind == argc)
        rc = count_input(NULL, &counts, side, &norm, normbuf, &records);
    for (int i = optind; i < argc && rc == 0; i++)
        rc = count_input(argv[i], &counts, side, &norm, normbuf, &records);
    struct vocab *v = NULL;
    struct nmt_buf file = {0};
    if (rc == 0) {
        struct bpe_learn_opts lo = {(uint32_t)size, min_freq, coverage,
                                    norm ? (enum text_norm)text_norm_parse(norm) : TEXT_NORM_NFKC};
        struct bpe_learn_stats stats;
        v = bpe_learn(&counts, &lo, &stats);
        char optline[160];
        snprintf(optline, sizeof optline, "size=%llu min-freq=%llu character-coverage=%.17g%s",
                 (unsigned long long)size, (unsigned long long)min_freq, coverage,
                 side < 0 ? "" : side == 0 ? " side=1" : " side=2");
        if (!v || vocab_set_options(v, optline) < 0 || vocab_format(v, &file) < 0) {
            rc = -1;
        } else {
            if (verbose)
                fprintf(stderr,
                        "nmt-vocab: %u pieces (%u chars of %u seen, %u merges; last merge count %llu) from %llu "
                        "records, %u distinct words\n",
                        v->n, stats.nchar, stats.nchar_seen, stats.nmerge, (unsigned long long)stats.stop_count,
                        (unsigned long long)records, counts.words.n);
            if (v->n < size)
                nmt_warn("only %u pieces learnt (no pair left with count >= %llu); asked for %llu", v->n,
                         (unsigned long long)min_freq, (unsigned long long)size);
        }
    }
    bpe_counts_free(&counts);
    if (rc == 0) {
        struct out_file of = {.fd = -1}; /* a named vocabulary replaces the old one only when whole */
        if (nmt_output_open(&of, out, 0) < 0) {
            rc = -1;
        } else if (nmt_write_all(of.fd, file.data, file.len) < 0) {
            rc = nmt_seterr("cannot write '%s': %s", nmt_path_name(out, 1), nmt_errmsg());
            nmt_output_finish(&of, 0);
        } else if (nmt_output_finish(&of, 1) < 0) {
            rc = -1;
        }
    }
    if (rc < 0)
        nmt_error("%s", nmt_errmsg());
    nmt_buf_free(&file);
    vocab_free(v);
    if (nmt_close_stdout() < 0 && rc == 0) {
        nmt_error("%s", nmt_errmsg());
        rc = -1;
    }
    return rc < 0 ? NMT_EXIT_DATA : NMT_EXIT_OK;
}
