/* nmt-vocab: learn a joint BPE vocabulary from tok streams (see nmt-vocab(1), nmt-vocab(5)). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text/bpe.h"
#include "io/stream.h"
#include "io/records.h"
#include "cli/cli.h"
#include "cli/opt.h"
#include "text/vocab.h"

/* The command line. */
struct args {
    const char *out;
    uint64_t size, min_freq;
    double coverage;
    int side, verbose; /* side: 1 or 2, 0 for both */
};

#define OFF(field) offsetof(struct args, field)
static const struct opt_spec OPTIONS[] = {
    {OPTION(OT_STR, "output", 'o', "FILE", OFF(out), "write the vocabulary to FILE (default stdout)")},
    {OPTION(OT_U64, "size", 's', "N", OFF(size),
            "vocabulary size, counting the 4 special and 256 byte pieces\n"
            "(default 8000, at least 260)"),
     .imin = VOCAB_FIRST_CHAR, .imax = VOCAB_MAX_SIZE, .def.u = 8000},
    {OPTION(OT_U64, "min-freq", 0, "N", OFF(min_freq),
            "learn a merge only if its pair occurs N times or more (default 2)"),
     .imin = 1, .imax = UINT32_MAX, .def.u = 2},
    {OPTION(OT_DOUBLE, "character-coverage", 0, "F", OFF(coverage),
            "keep the most frequent characters covering this fraction of all\n"
            "character occurrences (default 1.0); the rest use byte pieces"),
     .flags = OF_MIN_OPEN, .dmin = 0, .dmax = 1, .def.d = 1.0},
    {OPTION(OT_INT, "side", 0, "N", OFF(side), "count only side N (1 source, 2 target) of pair records"), .imin = 1,
     .imax = 2},
    {OPTION(OT_FLAG, "verbose", 0, NULL, OFF(verbose), "print a summary of what was learnt on stderr")},
    OPT_HELP_VERSION_END};

static const char USAGE_HEAD[] =
    "Usage: nmt-vocab [OPTIONS] [FILE...]\n"
    "Learn a BPE vocabulary from tok streams written by nmt-tokenize (stdin when no FILE or FILE is -).\n"
    "Both sides of pair records are counted (a joint vocabulary) unless --side is given.\n"
    "\n";
static const char USAGE_TAIL[] =
    "\nExit status: 0 success, 1 bad input or runtime failure, 2 usage error.\n";

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
    struct args a = {0};
    opt_defaults(OPTIONS, &a);
    int parsed = opt_parse_tool(OPTIONS, argc, argv, &a, USAGE_HEAD, USAGE_TAIL);
    if (parsed != OPT_PROCEED)
        return parsed;
    const char *out = a.out;
    uint64_t size = a.size, min_freq = a.min_freq;
    double coverage = a.coverage;
    int verbose = a.verbose, side = a.side - 1;
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
        struct bpe_learn_opts lo = {.size = (uint32_t)size, .min_freq = min_freq, .char_coverage = coverage,
                                    .normalize = norm ? (enum text_norm)text_norm_parse(norm) : TEXT_NORM_NFKC};
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
