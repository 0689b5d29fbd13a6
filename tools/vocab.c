/* nmt-vocab: learn a joint BPE vocabulary from tok streams, or a SentencePiece unigram model from text
 * (see nmt-vocab(1), nmt-vocab(5), formats/sentencepiece.md). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text/bpe.h"
#include "text/spm.h"
#include "text/unigram.h"
#include "io/file.h"
#include "io/lines.h"
#include "io/stream.h"
#include "io/records.h"
#include "cli/cli.h"
#include "cli/opt.h"
#include "text/vocab.h"

/* The command line. */
struct args {
    const char *out, *normalize;
    uint64_t size, min_freq;
    double coverage;
    int type, side, threads, verbose; /* type: TYPE_BPE, TYPE_UNIGRAM; side: 1 or 2, 0 for both */
};

enum { TYPE_BPE, TYPE_UNIGRAM };
static const char *const TYPES[] = {"bpe", "unigram", NULL};

#define OFF(field) offsetof(struct args, field)
static const struct opt_spec OPTIONS[] = {
    {OPTION(OT_STR, "output", 'o', "FILE", OFF(out), "write the vocabulary to FILE (default stdout)")},
    {OPTION(OT_CHOICE, "type", 0, "TYPE", OFF(type),
            "bpe (the default: nmt's BPE from tok streams) or unigram (a SentencePiece\n"
            "unigram .model from text lines, as spm_train --model_type unigram)"),
     .choices = TYPES, .def.i = TYPE_BPE},
    {OPTION(OT_U64, "size", 's', "N", OFF(size),
            "vocabulary size (default 8000): BPE counting its 4 special and 256 byte\n"
            "pieces (at least 260), unigram its <unk>, <s> and </s>"),
     .imin = 4, .imax = VOCAB_MAX_SIZE, .def.u = 8000},
    {OPTION(OT_U64, "min-freq", 0, "N", OFF(min_freq),
            "BPE: learn a merge only if its pair occurs N times or more (default 2)"),
     .flags = OF_ZERO_UNSET, .imin = 1, .imax = UINT32_MAX},
    {OPTION(OT_DOUBLE, "character-coverage", 0, "F", OFF(coverage),
            "keep the most frequent characters covering this fraction of all\n"
            "character occurrences (default 1.0); the rest use byte pieces (BPE)\n"
            "or are unknown (unigram)"),
     .flags = OF_MIN_OPEN, .dmin = 0, .dmax = 1, .def.d = 1.0},
    {OPTION(OT_INT, "side", 0, "N", OFF(side), "BPE: count only side N (1 source, 2 target) of pair records"),
     .imin = 1, .imax = 2},
    {OPTION(OT_STR, "normalize", 'N', "NAME", OFF(normalize),
            "unigram: the model's normalisation, as spm_train's: nmt_nfkc (the default),\n"
            "nfkc or identity (no character map)")},
    {OPTION(OT_INT, "threads", 0, "N", OFF(threads),
            "unigram: threads of the EM steps (default 1; the model is the same)"),
     .flags = OF_ZERO_UNSET, .imin = 1, .imax = 256},
    {OPTION(OT_FLAG, "verbose", 0, NULL, OFF(verbose), "print a summary of what was learnt on stderr")},
    OPT_HELP_VERSION_END};

static const char USAGE_HEAD[] =
    "Usage: nmt-vocab [OPTIONS] [FILE...]\n"
    "       nmt-vocab --type unigram [OPTIONS] [FILE...]\n"
    "Learn a BPE vocabulary from tok streams written by nmt-tokenize (stdin when no FILE or FILE is -).\n"
    "Both sides of pair records are counted (a joint vocabulary) unless --side is given.\n"
    "With --type unigram, learn a SentencePiece unigram model (.model) from text, one sentence a line.\n"
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

/* Learns the BPE vocabulary of the tok streams FILES (NFILE; stdin when none) into OUT. 0, or -1. */
static int learn_bpe(const struct args *a, int nfile, char **files, struct nmt_buf *out)
{
    uint64_t min_freq = a->min_freq ? a->min_freq : 2;
    int side = a->side - 1;
    struct bpe_counts counts;
    bpe_counts_init(&counts);
    const char *norm = NULL;
    char normbuf[16];
    uint64_t records = 0;
    int rc = nfile ? 0 : count_input(NULL, &counts, side, &norm, normbuf, &records);
    for (int i = 0; i < nfile && rc == 0; i++)
        rc = count_input(files[i], &counts, side, &norm, normbuf, &records);
    struct vocab *v = NULL;
    if (rc == 0) {
        struct bpe_learn_opts lo = {.size = (uint32_t)a->size, .min_freq = min_freq, .char_coverage = a->coverage,
                                    .normalize = norm ? (enum text_norm)text_norm_parse(norm) : TEXT_NORM_NFKC};
        struct bpe_learn_stats stats;
        v = bpe_learn(&counts, &lo, &stats);
        char optline[160];
        snprintf(optline, sizeof optline, "size=%llu min-freq=%llu character-coverage=%.17g%s",
                 (unsigned long long)a->size, (unsigned long long)min_freq, a->coverage,
                 side < 0 ? "" : side == 0 ? " side=1" : " side=2");
        if (!v || vocab_set_options(v, optline) < 0 || vocab_format(v, out) < 0) {
            rc = -1;
        } else {
            if (a->verbose)
                fprintf(stderr,
                        "nmt-vocab: %u pieces (%u chars of %u seen, %u merges; last merge count %llu) from %llu "
                        "records, %u distinct words\n",
                        v->n, stats.nchar, stats.nchar_seen, stats.nmerge, (unsigned long long)stats.stop_count,
                        (unsigned long long)records, counts.words.n);
            if (v->n < a->size)
                nmt_warn("only %u pieces learnt (no pair left with count >= %llu); asked for %llu", v->n,
                         (unsigned long long)min_freq, (unsigned long long)a->size);
        }
    }
    bpe_counts_free(&counts);
    vocab_free(v);
    return rc;
}

/* Reads the text lines of PATH (NULL: stdin) into L. 0, or -1 with the error set ("NAME: line N: ..."). */
static int read_sentences(struct unigram_learner *l, const char *path)
{
    struct line_reader r;
    if (line_reader_open(&r, path, 0) < 0)
        return -1;
    char *line;
    size_t len;
    int got;
    while ((got = line_next(&r, &line, &len)) == 1)
        if (unigram_add(l, line, len) < 0) {
            got = nmt_seterr("%s: line %llu: %s", r.name, (unsigned long long)r.line, nmt_errmsg());
            break;
        }
    line_reader_close(&r);
    return got < 0 ? -1 : 0;
}

static void show_progress(const char *line, void *arg)
{
    (void)arg;
    fprintf(stderr, "nmt-vocab: %s\n", line);
}

/* Learns a SentencePiece unigram model of the text lines of FILES (NFILE; stdin when none) into OUT,
 * the model file, checked by reading it back. 0, or -1. */
static int learn_unigram(const struct args *a, int nfile, char **files, struct nmt_buf *out)
{
    const char *norm = a->normalize ? a->normalize : "nmt_nfkc";
    struct nmt_buf map = {0};
    int rc = strcmp(norm, "identity") == 0 ? 0 : spm_charsmap_nfkc(&map, strcmp(norm, "nmt_nfkc") == 0);
    struct unigram_learner *l = rc ? NULL : unigram_new(map.data, map.len);
    rc = !l ? -1 : nfile ? 0 : read_sentences(l, NULL);
    for (int i = 0; i < nfile && rc == 0; i++)
        rc = read_sentences(l, strcmp(files[i], "-") == 0 ? NULL : files[i]);
    struct unigram_opts o = {.size = (uint32_t)a->size, .char_coverage = a->coverage,
                             .threads = a->threads ? (uint32_t)a->threads : 1,
                             .progress = a->verbose ? show_progress : NULL};
    struct unigram_stats st;
    struct strtab pieces;
    float *score = NULL;
    strtab_init(&pieces);
    rc = rc ? rc : unigram_learn(l, &o, &pieces, &score, &st);
    char prefix[4096] = "";
    if (a->out && strcmp(a->out, "-") != 0) {
        size_t n = strlen(a->out);
        n = n > 6 && strcmp(a->out + n - 6, ".model") == 0 ? n - 6 : n;
        snprintf(prefix, sizeof prefix, "%.*s", (int)n, a->out);
    }
    const char *stdin_name[] = {"-"};
    struct spm_train_spec spec = {.input = nfile ? (const char *const *)files : stdin_name,
                                  .ninput = nfile ? (size_t)nfile : 1, .model_prefix = prefix,
                                  .character_coverage = (float)a->coverage, .shrinking = (float)UNIGRAM_SHRINKING,
                                  .seed_size = UNIGRAM_SEED_SIZE, .threads = o.threads,
                                  .sub_iterations = UNIGRAM_SUB_ITERATIONS, .max_sentence_length = UNIGRAM_MAX_SENTENCE,
                                  .max_piece_chars = UNIGRAM_MAX_PIECE_CHARS, .normalization = norm,
                                  .charsmap = map.data, .ncharsmap = map.len};
    rc = rc ? rc : spm_write_unigram(out, &pieces, score, &spec);
    struct spm_model *check = rc ? NULL : spm_parse(out->data, out->len, "the model written");
    if (rc == 0 && !check)
        rc = -1;
    if (rc == 0 && (st.skipped_long || st.skipped_unk))
        nmt_warn("%llu lines longer than %u bytes and %llu holding U+2585 skipped, as spm_train does",
                 (unsigned long long)st.skipped_long, UNIGRAM_MAX_SENTENCE, (unsigned long long)st.skipped_unk);
    if (rc == 0 && pieces.n + 3 < a->size)
        nmt_warn("only %u pieces learnt (the text has no more); asked for %llu", pieces.n + 3,
                 (unsigned long long)a->size);
    if (rc == 0 && a->verbose)
        fprintf(stderr, "nmt-vocab: %u pieces (%u chars of %u seen) from %llu sentences, %u distinct words, %u seed "
                        "pieces, %u rounds\n",
                pieces.n + 3, st.nchar, st.nchar_seen, (unsigned long long)st.sentences, st.nwords, st.nseed,
                st.rounds);
    spm_free(check);
    strtab_free(&pieces);
    free(score);
    unigram_free(l);
    nmt_buf_free(&map);
    return rc;
}

/* Refuses the options that do not apply to the type asked for: 0, or NMT_EXIT_USAGE after saying why. */
static int check_options(const struct args *a)
{
    static const char *const spm_rules[] = {"nmt_nfkc_cf", "nfkc_cf", NULL};
    if (a->type == TYPE_BPE) {
        if (a->size < VOCAB_FIRST_CHAR)
            return nmt_usage_error("invalid --size '%llu' (a BPE vocabulary has at least %u pieces)",
                                   (unsigned long long)a->size, VOCAB_FIRST_CHAR);
        if (a->normalize)
            return nmt_usage_error("--normalize applies to --type unigram (BPE takes its inputs' normalisation)");
        if (a->threads)
            return nmt_usage_error("--threads applies to --type unigram");
        return 0;
    }
    if (a->min_freq)
        return nmt_usage_error("--min-freq applies to --type bpe");
    if (a->side)
        return nmt_usage_error("--side applies to --type bpe (unigram input is text)");
    if (a->normalize && strcmp(a->normalize, "identity") != 0 && strcmp(a->normalize, "nfkc") != 0 &&
        strcmp(a->normalize, "nmt_nfkc") != 0) {
        for (int i = 0; spm_rules[i]; i++)
            if (strcmp(a->normalize, spm_rules[i]) == 0)
                return nmt_usage_error("--normalize %s: nmt-vocab builds no case-folding character map "
                                       "(nmt_nfkc, nfkc or identity)", a->normalize);
        return nmt_usage_error("invalid --normalize '%s' (nmt_nfkc, nfkc or identity)", a->normalize);
    }
    return 0;
}

int main(int argc, char **argv)
{
    nmt_start(argv);
    struct args a = {0};
    opt_defaults(OPTIONS, &a);
    int parsed = opt_parse_tool(OPTIONS, argc, argv, &a, USAGE_HEAD, USAGE_TAIL);
    if (parsed != OPT_PROCEED)
        return parsed;
    int bad = check_options(&a);
    if (bad)
        return bad;
    struct nmt_buf file = {0};
    int rc = a.type == TYPE_UNIGRAM ? learn_unigram(&a, argc - optind, argv + optind, &file)
                                    : learn_bpe(&a, argc - optind, argv + optind, &file);
    if (rc == 0) {
        struct out_file of = {.fd = -1}; /* a named vocabulary replaces the old one only when whole */
        if (nmt_output_open(&of, a.out, a.type == TYPE_UNIGRAM) < 0) {
            rc = -1;
        } else if (nmt_write_all(of.fd, file.data, file.len) < 0) {
            rc = nmt_seterr("cannot write '%s': %s", nmt_path_name(a.out, 1), nmt_errmsg());
            nmt_output_finish(&of, 0);
        } else if (nmt_output_finish(&of, 1) < 0) {
            rc = -1;
        }
    }
    if (rc < 0)
        nmt_error("%s", nmt_errmsg());
    nmt_buf_free(&file);
    if (nmt_close_stdout() < 0 && rc == 0) {
        nmt_error("%s", nmt_errmsg());
        rc = -1;
    }
    return rc < 0 ? NMT_EXIT_DATA : NMT_EXIT_OK;
}
