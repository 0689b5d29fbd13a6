/* bleu.c: sacreBLEU's BLEU: a segment's statistics (hypothesis length, closest reference length,
 * clipped n-gram matches and totals per order) and the corpus score. Tokens get segment-wide ids
 * (13a straight from the UTF-8 bytes); n-grams are counted as packed numbers when their ids fit
 * in 64 bits, else as id sequences. */
#include "eval/metric.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* Returns the segment-wide id of the byte token P[0..LEN) (a new one, m->next_id, when unseen). */
static inline int32_t intern_bytes(bleu_metric *m, const char *p, uint32_t len)
{
    struct ngram_ent *e = ngram_get_str(&m->intern, ngram_bytes_hash(p, len), p, len, 1);
    if (e->c == 0) {
        e->c = 1;
        e->a = m->next_id++;
    }
    return e->a;
}

/* ---- BLEU ---- */

static int bleu_side_tokens(bleu_metric *m, struct metric_side *sd, const char *s, size_t len)
{
    bleu_cps *t;
    if (metric_side_text(sd, s, len, m->cfg.lowercase, &t) < 0)
        return -1;
    t->n = bleu_cps_rstrip(t->p, t->n);
    if (bleu_tok_apply(m->cfg.tokenize, t, &sd->txt, &m->tw) < 0)
        return -1;
    return bleu_split(sd->txt.p, sd->txt.n, &sd->toks);
}

/* Counts the n-grams (orders 1..N) of the references and matches the hypothesis against them
 * (sacreBLEU: clipped counts, the maximum count over the references). IDS[r] are the token ids
 * (1..2^BITS-1) of side r, LEN[r] their number. Packed keys: BITS * N <= 64. */
static int bleu_match_packed(bleu_metric *m, int32_t *const *ids, const size_t *len, int nrefs, int N,
                             int bits, double *correct)
{
    size_t refwant = 0;
    for (int r = 1; r <= nrefs; r++)
        refwant += len[r] * (size_t)N;
    if (ngram_reset(&m->grams, refwant) < 0)
        return -1;
    for (int r = 1; r <= nrefs; r++) {
        const int32_t *id = ids[r];
        size_t rl = len[r];
        for (size_t i = 0; i < rl; i++) {
            uint64_t key = 0;
            size_t top = i + (size_t)N <= rl ? i + (size_t)N : rl;
            for (size_t j = i; j < top; j++) {
                key = (key << bits) | (uint64_t)id[j];
                struct ngram_ent *e = ngram_get(&m->grams, key, 1);
                if (e->c != r) {
                    e->c = r;
                    e->a = 0;
                }
                if (++e->a > e->b)
                    e->b = e->a;
            }
        }
    }
    const int32_t *id = ids[0];
    size_t hl = len[0];
    for (size_t i = 0; i < hl; i++) {
        uint64_t key = 0;
        size_t top = i + (size_t)N <= hl ? i + (size_t)N : hl;
        for (size_t j = i; j < top; j++) {
            key = (key << bits) | (uint64_t)id[j];
            struct ngram_ent *e = ngram_get(&m->grams, key, 0);
            if (!e)
                break; /* a longer n-gram with this prefix cannot be in the references */
            if (++e->d <= e->b)
                correct[j - i] += 1;
        }
    }
    return 0;
}

/* The same with keys compared as id sequences (any number of distinct tokens). */
static int bleu_match_seq(bleu_metric *m, int32_t *const *ids, const size_t *len, int nrefs, int N,
                          double *correct)
{
    size_t refwant = 0;
    for (int r = 1; r <= nrefs; r++)
        refwant += len[r] * (size_t)N;
    if (ngram_reset(&m->grams, refwant) < 0)
        return -1;
    for (int r = 1; r <= nrefs; r++) {
        const int32_t *id = ids[r];
        size_t rl = len[r];
        for (size_t i = 0; i < rl; i++) {
            uint64_t h = NGRAM_SEQ_SEED;
            for (int n = 1; n <= N && i + (size_t)n <= rl; n++) {
                h = ngram_mix(h, id[i + (size_t)n - 1]);
                struct ngram_ent *e = ngram_get_str(&m->grams, ngram_final(h, (uint32_t)n), id + i, (uint32_t)n * sizeof *id, 1);
                if (e->c != r) {
                    e->c = r;
                    e->a = 0;
                }
                if (++e->a > e->b)
                    e->b = e->a;
            }
        }
    }
    const int32_t *id = ids[0];
    size_t hl = len[0];
    for (size_t i = 0; i < hl; i++) {
        uint64_t h = NGRAM_SEQ_SEED;
        for (int n = 1; n <= N && i + (size_t)n <= hl; n++) {
            h = ngram_mix(h, id[i + (size_t)n - 1]);
            struct ngram_ent *e = ngram_get_str(&m->grams, ngram_final(h, (uint32_t)n), id + i, (uint32_t)n * sizeof *id, 0);
            if (!e)
                break;
            if (++e->d <= e->b)
                correct[n - 1] += 1;
        }
    }
    return 0;
}

int bleu_segment(bleu_metric *m, const char *hyp, size_t hyp_len, const char *const *refs,
                      const size_t *ref_lens, int nrefs, double *out)
{
    int N = m->cfg.max_order;
    size_t want = 0, *len = m->slen;
    int32_t **ids = m->sids;
    if (m->cfg.tokenize == BLEU_TOK_13A) { /* tokens straight from the bytes, ids 1..K */
        for (int r = 0; r <= nrefs; r++) {
            struct metric_side *sd = &m->sides[r];
            if (bleu_tok13a_bytes(r ? refs[r - 1] : hyp, r ? ref_lens[r - 1] : hyp_len, m->cfg.lowercase, &sd->bt) < 0)
                return -1;
            len[r] = sd->bt.n;
            want += sd->bt.n;
        }
        if (ngram_reset(&m->intern, want) < 0)
            return -1;
        m->next_id = 1;
        for (int r = 0; r <= nrefs; r++) {
            struct metric_side *sd = &m->sides[r];
            if (metric_side_reserve(sd, len[r]) < 0)
                return -1;
            for (size_t i = 0; i < len[r]; i++)
                sd->ids[i] = intern_bytes(m, sd->bt.p[i], sd->bt.len[i]);
            ids[r] = sd->ids;
        }
    } else {
        for (int r = 0; r <= nrefs; r++) {
            struct metric_side *sd = &m->sides[r];
            if (bleu_side_tokens(m, sd, r ? refs[r - 1] : hyp, r ? ref_lens[r - 1] : hyp_len) < 0)
                return -1;
            len[r] = sd->toks.n;
            want += sd->toks.n;
        }
        if (ngram_reset(&m->intern, want) < 0)
            return -1;
        m->next_id = 1;
        for (int r = 0; r <= nrefs; r++) {
            struct metric_side *sd = &m->sides[r];
            if (metric_side_ids(&m->intern, &m->next_id, sd, sd->txt.p, sd->toks.start, sd->toks.len, sd->toks.n) < 0)
                return -1;
            ids[r] = sd->ids;
        }
    }
    size_t hl = len[0];
    /* closest reference length, ties to the shorter */
    long long best_diff = -1, best_len = -1;
    for (int r = 1; r <= nrefs; r++) {
        long long rl = (long long)len[r];
        long long diff = llabs((long long)hl - rl);
        if (best_diff == -1 || diff < best_diff) {
            best_diff = diff;
            best_len = rl;
        } else if (diff == best_diff && rl < best_len)
            best_len = rl;
    }
    double *correct = out + 2, *total = out + 2 + N;
    for (int n = 0; n < N; n++) {
        correct[n] = 0;
        total[n] = hl >= (size_t)n + 1 ? (double)(hl - (size_t)n) : 0;
    }
    int bits = ngram_bit_width((uint32_t)(m->next_id - 1));
    if (bits * N <= 64 ? bleu_match_packed(m, ids, len, nrefs, N, bits, correct) < 0
                       : bleu_match_seq(m, ids, len, nrefs, N, correct) < 0)
        return -1;
    out[0] = (double)hl;
    out[1] = (double)best_len;
    return 0;
}

static double my_log(double x) { return x == 0.0 ? -9999999999.0 : log(x); }

void bleu_score_stats(const bleu_config *cfg, const double *st, bleu_score *o)
{
    int N = cfg->max_order;
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "BLEU");
    o->order = N;
    o->mean = o->ci = -1;
    long long sys_len = (long long)st[0], ref_len = (long long)st[1];
    o->sys_len = sys_len;
    o->ref_len = ref_len;
    o->ratio = ref_len ? (double)sys_len / (double)ref_len : 0;
    double sv = cfg->smooth_value;
    if (!cfg->smooth_value_set)
        sv = cfg->smooth == BLEU_SMOOTH_FLOOR ? 0.1 : 1;
    double bp = 1.0;
    if (sys_len < ref_len)
        bp = sys_len > 0 ? exp(1 - (double)ref_len / (double)sys_len) : 0.0;
    o->bp = bp;
    int any = 0;
    for (int n = 0; n < N; n++) {
        o->counts[n] = st[2 + n];
        o->totals[n] = st[2 + N + n];
        o->precisions[n] = 0.0;
        if (st[2 + n] != 0)
            any = 1;
    }
    if (!any) {
        o->score = 0.0;
        return;
    }
    double smooth_mteval = 1.0;
    int eff = N;
    for (int n = 1; n <= N; n++) {
        double c = o->counts[n - 1], t = o->totals[n - 1];
        if (cfg->smooth == BLEU_SMOOTH_ADDK && n > 1) {
            c += sv;
            t += sv;
        }
        if (t == 0)
            break;
        if (cfg->effective_order)
            eff = n;
        if (c == 0) {
            if (cfg->smooth == BLEU_SMOOTH_EXP) {
                smooth_mteval *= 2;
                o->precisions[n - 1] = 100. / (smooth_mteval * t);
            } else if (cfg->smooth == BLEU_SMOOTH_FLOOR)
                o->precisions[n - 1] = 100. * sv / t;
        } else
            o->precisions[n - 1] = 100. * c / t;
    }
    double sum = 0;
    for (int n = 0; n < eff; n++)
        sum += my_log(o->precisions[n]);
    o->score = bp * exp(sum / eff);
}

/* ---- chrF ---- */
