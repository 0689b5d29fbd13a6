/* search.h: greedy and beam search, and forced-decoding scores, over infer.h.
 *
 * Beam search keeps K hypotheses per sentence. Each step takes the 2K best extensions of the
 * sentence's K hypotheses (scores are summed log-probabilities; ties by hypothesis then token
 * order); an end-of-sentence extension among the first K is finished with the GNMT length penalty,
 * score = logprob / ((5 + n) / 6)^alpha where n counts the tokens with EOS; the K best others
 * continue. A sentence stops when it has K finished hypotheses, or at its length limit
 * floor(a * (source tokens with EOS) + b) (capped by the model's max_len), where every live
 * hypothesis ends with EOS. Finished sentences leave the batch. K = 1 is greedy decoding. Every
 * decision is made per sentence, so results do not depend on the rest of the batch. A sentence's
 * output may be forced to start with given tokens (search_batch_prefix), the search going on after them.
 * The same search runs on a stream (search_stream), where sentences join the batch under way as
 * others end, each at a step of its own. 
 *
 * Ensembles: every function takes NIN >= 1 models' inference states IN[0..NIN), on one vocabulary.
 * With NIN > 1 each step's distribution is the mean of the members' probabilities (their softmax
 * is taken on the host from each member's logits), and the length limit uses the smallest max_len. */
#ifndef NMT_SEARCH_H
#define NMT_SEARCH_H

#include <stdint.h>

#include "base/buf.h"

#include "nn/infer.h"

struct search_opts {
    int beam;                  /* K >= 1 */
    int nbest;                 /* hypotheses returned per sentence, 1 <= nbest <= beam */
    double alpha;              /* length penalty exponent (0: none) */
    double len_a, len_b;       /* maximum output length a * source + b tokens (with EOS) */
    int attention;             /* keep each hypothesis's attention (search_hyp.att) */
    int exhaustive;            /* beam search: every sentence searches on until K hypotheses have
                                * finished (or its length limit), rather than ending once no live
                                * hypothesis can outscore its n-best finished ones: the same
                                * results, more steps (the reference the early end is tested on) */
    int ranks_only;            /* the hypotheses' tokens are wanted, not their scores: greedy search
                                * of one model (beam 1) then ranks each step's tokens by their logits,
                                * sparing each row's log-sum-exp (the same tokens; score, logprob and
                                * lps of the results are then not log-probabilities) */
};

/* The defaults of every tool that searches (nmt-decode, nmt-serve, validation BLEU): greedy, one
 * hypothesis, alpha 0.6, at most source + 50 tokens. */
#define SEARCH_OPTS_DEFAULT {.beam = 1, .nbest = 1, .alpha = 0.6, .len_a = 1, .len_b = 50}

struct search_hyp {
    float score;               /* logprob / length penalty */
    double logprob;            /* summed log-probability, EOS included */
    uint32_t n;                /* tokens without EOS */
    uint32_t *ids;             /* (n), owned by the result */
    float *lps;                /* (n + 1) each token's log-probability, EOS last, owned by the result: they
                                * sum to logprob (in double, in order); an EOS forced at the length limit
                                * has 0 */
    uint32_t sn;               /* columns of att: the source's tokens with EOS (0: no att) */
    float *att;                /* (n + 1, sn) with search_opts.attention: the attention over the source
                                * tokens (EOS last) of the step that chose each token (EOS last): the last
                                * decoder layer's encoder-decoder attention averaged over its heads (and
                                * over an ensemble's members); NULL otherwise; owned by the result */
};

struct search_result {
    int nhyp;                  /* <= nbest, best first */
    struct search_hyp *hyp;
};

/* Appends R to B in a host-order encoding for the ranks of one job (nmt-decode under mpirun). 0 or -1. */
int search_result_pack(struct nmt_buf *b, const struct search_result *r);
/* Reads a result packed by search_result_pack from P (N bytes) at *OFF, advancing it, into R (freed
 * with search_result_free). 0, or -1 with the error set (truncated or malformed). */
int search_result_unpack(const unsigned char *p, size_t n, size_t *off, struct search_result *r);

/* Returns the length limit (tokens with EOS) of a source of SRCLEN tokens (without EOS). */
int search_max_len(const struct search_opts *o, int srclen, int model_max_len);
/* Returns the GNMT length penalty ((5 + N) / 6)^ALPHA of a hypothesis of N tokens with EOS. */
double search_length_penalty(double alpha, int n);
/* Checks that the NIN >= 1 models IN share one vocabulary; sets *MAX_LEN to their smallest max_len.
 * 0, or -1 with the error set. */
int search_models_check(struct infer *const *in, int nin, int *max_len);

/* Forced output prefixes of a batch of B sentences: sentence b's output starts with the N[b] ids
 * IDS[b] (output pieces: no PAD, BOS or EOS; N[b] = 0: no prefix). The forced tokens' log-probabilities
 * count in the hypotheses' scores as any others'; the length limit counts them too. */
struct search_prefix {
    const uint32_t *const *ids;
    const int *n;
};

/* Translates B sentences (SRC[b], LEN[b] ids without EOS) with the NIN models IN into OUT[0..B)
 * (each freed with search_result_free). Returns 0, or -1 with the error set. */
int search_batch(struct infer *const *in, int nin, const struct search_opts *o, int B, const uint32_t *const *src,
                 const int *len, struct search_result *out);
/* search_batch whose hypotheses of sentence b start with prefix PRE's (NULL: none, as search_batch):
 * the prefix's tokens are forced, the search continues after them. Returns 0, or -1 with the error set
 * (a prefix with EOS does not fit the sentence's length limit, an id that is not an output piece). */
int search_batch_prefix(struct infer *const *in, int nin, const struct search_opts *o, int B,
                        const uint32_t *const *src, const int *len, const struct search_prefix *pre,
                        struct search_result *out);
/* Checks sentence B's prefix of PRE (NULL: none) against V output pieces and the length limit MAX_LEN
 * (tokens with EOS). 0, or -1 with the error set. */
int search_prefix_check(const struct search_prefix *pre, int b, int V, int max_len);

/* Forced decoding: LP[b] receives log p(TGT[b] + EOS | SRC[b]) summed over the TLEN[b] + 1 target
 * tokens. Returns 0, or -1 with the error set (target longer than the model's max_len). */
int search_score(struct infer *const *in, int nin, int B, const uint32_t *const *src, const int *len,
                 const uint32_t *const *tgt, const int *tlen, double *lp);

/* Sentences for search_stream: given by, and their results handed back to, the caller. */
struct search_feed {
    /* Gives at most N more sentences: SRC[i], LEN[i] (ids without EOS, valid until the sentence's
     * result is put) and KEY[i], the caller's name for it. Returns their number (0: none is left), or
     * -1 with the error set. */
    int (*take)(void *arg, int n, const uint32_t **src, int *len, size_t *key);
    /* Takes sentence KEY's result R (the caller's to free with search_result_free). 0, or -1 with the
     * error set. */
    int (*put)(void *arg, size_t key, struct search_result *r);
    void *arg;
};

/* Whether search_stream can run O with the NIN models IN: a search without attention, on a backend
 * with attention_forward_rows, without a shortlist (infer_can_stream). */
int search_can_stream(struct infer *const *in, int nin, const struct search_opts *o);
/* The search O (greedy or beam) of the sentences F gives, none of more than SMAX ids, with the NIN
 * models IN, by continuous batching (infer_open_stream): at most W sentences live at once,
 * sentences taken in as others end (whenever a quarter of W, at least one, is free, so that the
 * encoder runs on several together), each result put as its sentence ends. Each result is
 * search_batch's, bit for bit. Returns 0, or -1 with the error set (search_can_stream false, a
 * sentence longer than SMAX, the feed's error). */
int search_stream(struct infer *const *in, int nin, const struct search_opts *o, int W, int smax,
                  const struct search_feed *f);

/* Reserves the decoding memory (infer_reserve) of the NIN models IN for search_batch with O on B
 * sentences of LEN[b] ids, or, with TLEN, for search_score on those pairs. 0, or -1 with the error set. */
int search_reserve(struct infer *const *in, int nin, const struct search_opts *o, int B, const int *len,
                   const int *tlen);

/* Frees R's hypotheses (not R). */
void search_result_free(struct search_result *r);

#endif
