/* sample.h: decoding by sampling (back-translation): each of N samples of a sentence draws every
 * token from the model's distribution (an ensemble's: the mean of the members' probabilities, as in
 * search.h) given its own previous tokens, until EOS or the length limit of search.h.
 *
 * A draw takes the distribution at temperature T (p^(1/T), renormalised; T = 0: the most probable
 * token, ties by lower id), keeps its K most probable tokens (top-k; ties by lower id), then the
 * smallest set of most probable tokens whose mass reaches P of what is left (nucleus, top-p), and
 * draws among them in proportion. The uniform number of a draw comes from a counter-based
 * generator keyed by (seed, sentence key, sample number, step): a sentence's samples depend only
 * on the seed, its key (nmt-decode: its line number), the models and the options, never on its
 * batch, its neighbours or the number of jobs; sample j is the same whatever the number of samples.
 *
 * Results are search results (search.h): N hypotheses per sentence in sample order (not sorted),
 * each scored as beam search scores (the model's log-probability, not the tempered or truncated
 * one, over the length penalty), with each token's log-probability. */
#ifndef NMT_SAMPLE_H
#define NMT_SAMPLE_H

#include <stdint.h>

#include "nn/infer.h"
#include "nn/search.h"

struct sample_opts {
    int samples;               /* N >= 1 per sentence */
    double temperature;        /* T >= 0 */
    int top_k;                 /* K >= 0 (0: no limit) */
    double top_p;              /* 0 < P <= 1 (1: no limit) */
    uint64_t seed;
};

/* A candidate token of a draw: its weight and id. */
struct sample_cand {
    double w;
    int32_t id;
};

/* Returns the uniform number in [0, 1) of draw (SEED, KEY, SAMPLE, STEP). */
double sample_uniform(uint64_t seed, uint64_t key, uint32_t sample, uint32_t step);

/* Draws a token from the V log-probabilities LP (-infinity: impossible) under O's temperature, top-k
 * and top-p, with U uniform in [0, 1); C (V) is scratch. Returns the token's id, or -1 when no token
 * is possible. */
int sample_draw(const struct sample_opts *o, const double *lp, int V, double u, struct sample_cand *c);

/* Samples O->samples translations of each of B sentences (SRC[b], LEN[b] ids without EOS, KEY[b] the
 * sentence's key) with the NIN models IN, length limit and penalty from SO (len_a, len_b, alpha),
 * into OUT[0..B) (each freed with search_result_free); with PRE (not NULL) every sample of sentence
 * b starts with its prefix (search.h), the draws following it. search_reserve with SO's beam set to
 * O->samples reserves its memory. Returns 0, or -1 with the error set (as search_batch_prefix's
 * for a prefix). */
int sample_batch(struct infer *const *in, int nin, const struct search_opts *so, const struct sample_opts *o, int B,
                 const uint32_t *const *src, const int *len, const uint64_t *key, const struct search_prefix *pre,
                 struct search_result *out);

#endif
