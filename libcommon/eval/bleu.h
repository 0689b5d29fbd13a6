/* bleu.h: BLEU, chrF/chrF++ and TER computed exactly as sacreBLEU 2.6.0 computes them.
 *
 * Text follows Python 3 string semantics (through utf8proc): str.split()/rstrip() whitespace,
 * str.lower() with full case mapping (U+0130, final sigma), \p{P}/\p{S}/\p{N} for the intl
 * tokenizer. A metric turns one hypothesis line and its references into a row of sufficient
 * statistics (doubles); rows are summed over a corpus (or a bootstrap sample) and scored.
 * Library code never prints or exits; errors are negative returns with nmt_seterr() text. */
#ifndef NMT_BLEU_H
#define NMT_BLEU_H

#include <stddef.h>
#include <stdint.h>

#define BLEU_SACREBLEU_VERSION "2.6.0"
#define BLEU_MAX_ORDER 16 /* largest --max-ngram-order, --chrf-char-order + word order */

enum bleu_metric_kind { BLEU_METRIC_BLEU, BLEU_METRIC_CHRF, BLEU_METRIC_TER };
enum bleu_tokenizer { BLEU_TOK_13A, BLEU_TOK_INTL, BLEU_TOK_ZH, BLEU_TOK_CHAR, BLEU_TOK_NONE };
enum bleu_smooth { BLEU_SMOOTH_EXP, BLEU_SMOOTH_FLOOR, BLEU_SMOOTH_ADDK, BLEU_SMOOTH_NONE };

/* Options of all metrics; bleu_config_init() sets sacreBLEU's defaults. */
typedef struct {
    int kind;            /* enum bleu_metric_kind */
    /* BLEU */
    int tokenize;        /* enum bleu_tokenizer */
    int lowercase;
    int smooth;          /* enum bleu_smooth */
    double smooth_value; /* used when smooth_value_set, else the method's default */
    int smooth_value_set;
    int max_order;       /* 4 */
    int effective_order; /* sentence-level BLEU turns it on */
    /* chrF */
    int char_order, word_order, beta; /* 6, 0, 2 */
    int chrf_lowercase, whitespace, eps_smoothing;
    /* TER */
    int case_sensitive, no_punct, normalized, asian_support;
} bleu_config;

/* A score as sacreBLEU's Score objects carry it. */
typedef struct {
    char name[32];       /* "BLEU", "chrF2", "chrF2++", "TER" */
    double score;
    /* BLEU */
    int order;
    double counts[BLEU_MAX_ORDER], totals[BLEU_MAX_ORDER], precisions[BLEU_MAX_ORDER];
    double bp, ratio;
    long long sys_len, ref_len;
    /* TER */
    double num_edits, ref_length;
    /* bootstrap: mean and half-width of the 95% interval; mean < 0 when not computed */
    double mean, ci;
} bleu_score;

typedef struct bleu_metric bleu_metric;

/* Fills CFG with sacreBLEU's defaults for metric KIND. */
void bleu_config_init(bleu_config *cfg, int kind);

/* Creates a metric (copies CFG); NULL with the error set on bad options or no memory. */
bleu_metric *bleu_metric_new(const bleu_config *cfg);
/* Frees M; NULL is a no-op. */
void bleu_metric_free(bleu_metric *m);
/* Returns the number of doubles in one statistics row of M. */
int bleu_metric_nstats(const bleu_metric *m);
/* Computes the statistics row of one segment into OUT (nstats doubles). HYP/REFS are UTF-8
 * lines already rstripped as sacreBLEU's reader does (bleu_rstrip_len); they must be valid
 * UTF-8. Returns 0, or -1 with the error set (no memory). */
int bleu_metric_segment(bleu_metric *m, const char *hyp, size_t hyp_len, const char *const *refs,
                        const size_t *ref_lens, int nrefs, double *out);
/* Scores the summed statistics SUM (nstats doubles) into OUT. */
void bleu_metric_score(const bleu_metric *m, const double *sum, bleu_score *out);
/* Sums NROWS rows of ROWS (each nstats doubles) selected by IDX (NULL = all rows in order) into
 * SUM, in sacreBLEU's order (sequential, left to right). */
void bleu_metric_sum(const bleu_metric *m, const double *rows, size_t nrows, const size_t *idx,
                     double *sum);

/* Writes the signature ("nrefs:1|case:mixed|...|version:V") into BUF (size CAP). NREFS < 0
 * means "var". BOOTSTRAP > 0 adds bs:N and SEED (a string) rs/seed; VERSION is the value of the
 * version field. Returns the length, or -1 if CAP is too small. */
int bleu_signature(const bleu_metric *m, int nrefs, int is_short, int bootstrap, const char *seed,
                   const char *version, char *buf, size_t cap);
/* Formats S as sacreBLEU's Score.format(): the text line "NAME|SIG = SCORE VERBOSE", the score
 * alone (SCORE_ONLY) or the JSON object (IS_JSON), with WIDTH decimals. Returns a malloc'ed string
 * (no final newline), or NULL with the error set. */
char *bleu_format(const bleu_score *s, int width, int score_only, const char *sig, int is_json);

/* Bootstrap resampling (sacreBLEU's _bootstrap_resample + estimate_ci): NSAMPLES resamples of
 * the NROWS rows drawn with a generator seeded by SEED; stores mean and ci in OUT. SCORES, when
 * not NULL, receives the NSAMPLES resampled scores (in draw order). Returns 0 or -1 (no memory). */
int bleu_bootstrap(const bleu_metric *m, const double *rows, size_t nrows, int nsamples,
                   uint64_t seed, bleu_score *out, double *scores);
/* Paired bootstrap test of system SYS against baseline BASE (rows of the same metric and lines),
 * as sacreBLEU's _paired_bs_test: fills SYS_OUT's mean/ci and returns the p-value in *P.
 * Returns 0 or -1 (no memory). */
int bleu_paired_bs(const bleu_metric *m, const double *base_rows, const double *sys_rows,
                   size_t nrows, int nsamples, uint64_t seed, double base_score,
                   bleu_score *sys_out, double *p);

/* ---- Python-compatible text helpers (exposed for tests and the CLI) ---- */

/* Returns 1 if code point CP is whitespace for Python's str.isspace()/str.split(). */
int bleu_isspace(int32_t cp);
/* Returns the length of valid UTF-8 S[0..LEN) after Python's str.rstrip(). */
size_t bleu_rstrip_len(const char *s, size_t len);
/* Lowercases valid UTF-8 S as Python's str.lower(); returns a malloc'ed string with its length
 * in *OUT_LEN, or NULL with the error set. */
char *bleu_lower(const char *s, size_t len, size_t *out_len);
/* Tokenizes valid UTF-8 S with tokenizer TOK (after optional lowercasing, as BLEU does) and
 * returns the tokens joined by single spaces as a malloc'ed string, or NULL with the error set. */
char *bleu_tokenize(int tok, int lowercase, const char *s, size_t len, size_t *out_len);
/* Parses a tokenizer name ("13a", "intl", "zh", "char", "none"); returns it or -1. */
int bleu_tokenizer_parse(const char *name);

/* Formats X as Python's repr(float) into BUF (at least 32 bytes). */
void bleu_pyfloat(double x, char *buf, size_t cap);

#endif
