/* ter.c: sacreBLEU's TER (its lib_ter: a beam edit distance with Tercom's shift heuristics): a
 * segment's statistics (fewest edits over the references, average reference length) and the
 * corpus score. */
#include "eval/metric.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

void ter_work_free(struct ter_work *w)
{
    free(w->cost);
    free(w->op);
    free(w->lo);
    free(w->hi);
    free(w->cached);
    free(w->wa);
    free(w->wb);
    free(w->wc);
    free(w->trace);
    free(w->align);
    free(w->herr);
    free(w->rerr);
    memset(w, 0, sizeof *w);
}

/* ---- TER (sacreBLEU's lib_ter: beam edit distance, Tercom shift heuristics) ---- */

#define TER_MAX_SHIFT_SIZE 10
#define TER_MAX_SHIFT_DIST 50
#define TER_BEAM_WIDTH 25
#define TER_MAX_SHIFT_CANDIDATES 1000
#define TER_INF (1 << 28)

static int ter_alloc(struct ter_work *tw, size_t nh, size_t nr)
{
    size_t cells = (nh + 1) * (nr + 1);
    if (cells > tw->mat_cap) {
        free(tw->cost);
        free(tw->op);
        tw->cost = nmt_malloc(cells * sizeof *tw->cost);
        tw->op = nmt_malloc(cells);
        if (!tw->cost || !tw->op) {
            tw->mat_cap = 0;
            return -1;
        }
        tw->mat_cap = cells;
    }
    size_t w = (nh > nr ? nh : nr) + 2;
    if (w > tw->w_cap) {
        void *p[10];
        p[0] = nmt_realloc(tw->lo, w * sizeof(int));
        if (p[0]) tw->lo = p[0];
        p[1] = nmt_realloc(tw->hi, w * sizeof(int));
        if (p[1]) tw->hi = p[1];
        p[2] = nmt_realloc(tw->cached, w * sizeof(int32_t));
        if (p[2]) tw->cached = p[2];
        p[3] = nmt_realloc(tw->wa, w * sizeof(int32_t));
        if (p[3]) tw->wa = p[3];
        p[4] = nmt_realloc(tw->wb, w * sizeof(int32_t));
        if (p[4]) tw->wb = p[4];
        p[5] = nmt_realloc(tw->wc, w * sizeof(int32_t));
        if (p[5]) tw->wc = p[5];
        p[6] = nmt_realloc(tw->trace, 2 * w + 1);
        if (p[6]) tw->trace = p[6];
        p[7] = nmt_realloc(tw->align, w * sizeof(int));
        if (p[7]) tw->align = p[7];
        p[8] = nmt_realloc(tw->herr, w * sizeof(int));
        if (p[8]) tw->herr = p[8];
        p[9] = nmt_realloc(tw->rerr, w * sizeof(int));
        if (p[9]) tw->rerr = p[9];
        for (int i = 0; i < 10; i++)
            if (!p[i])
                return -1;
        tw->w_cap = w;
    }
    tw->cached_rows = 0;
    return 0;
}

/* Beam edit distance of hypothesis H (NH words) to reference R (NR words); rows whose prefix is
 * unchanged since the last call are reused (as sacreBLEU's cache does). Writes the trace of
 * operations (' ', 's', 'i', 'd') to tw->trace when TRACE. Returns the distance or -1. */
static int ter_ed(struct ter_work *tw, const int32_t *H, size_t nh, const int32_t *R, size_t nr, int want_trace)
{
    size_t W = nr + 1;
    int32_t *cost = tw->cost;
    char *op = tw->op;
    if (tw->cached_rows == 0) {
        for (size_t j = 0; j <= nr; j++) {
            cost[j] = (int32_t)j;
            op[j] = 'i';
        }
        tw->lo[0] = 0;
        tw->hi[0] = (int)W;
        tw->cached_rows = 1;
    }
    size_t start = 1;
    while (start < tw->cached_rows && tw->cached[start - 1] == H[start - 1])
        start++;
    double ratio = nh ? (double)nr / (double)nh : 1;
    int beam = TER_BEAM_WIDTH;
    if (TER_BEAM_WIDTH < ratio / 2)
        beam = (int)ceil(ratio / 2 + TER_BEAM_WIDTH);
    for (size_t i = start; i <= nh; i++) {
        long pd = (long)floor((double)i * ratio);
        long min_j = pd - beam > 0 ? pd - beam : 0;
        long max_j = pd + beam < (long)W ? pd + beam : (long)W;
        if (i == nh)
            max_j = (long)W;
        int32_t *row = cost + i * W, *prev = cost + (i - 1) * W;
        char *orow = op + i * W;
        int plo = tw->lo[i - 1], phi = tw->hi[i - 1];
        tw->lo[i] = (int)min_j;
        tw->hi[i] = (int)(max_j > min_j ? max_j : min_j);
        int32_t w = H[i - 1];
        for (long j = min_j; j < max_j; j++) {
            int32_t best = TER_INF;
            char bop = 'x';
            int32_t up = (j >= plo && j < phi) ? prev[j] : TER_INF;
            if (j == 0) {
                best = up + 1;
                bop = 'd';
            } else {
                int32_t diag = (j - 1 >= plo && j - 1 < phi) ? prev[j - 1] : TER_INF;
                int32_t left = (j - 1 >= min_j) ? row[j - 1] : TER_INF;
                int32_t cs = diag + (w == R[j - 1] ? 0 : 1);
                if (best > cs) {
                    best = cs;
                    bop = w == R[j - 1] ? ' ' : 's';
                }
                if (best > up + 1) {
                    best = up + 1;
                    bop = 'd';
                }
                if (best > left + 1) {
                    best = left + 1;
                    bop = 'i';
                }
            }
            row[j] = best;
            orow[j] = bop;
        }
        tw->cached[i - 1] = w;
    }
    tw->cached_rows = nh + 1;
    int32_t dist = (nr >= (size_t)tw->lo[nh] && nr < (size_t)tw->hi[nh]) ? cost[nh * W + nr] : TER_INF;
    if (want_trace) {
        size_t i = nh, j = nr, k = nh + nr + 1;
        char *tr = tw->trace; /* written backwards from the end, then moved */
        size_t cap = k;
        while (i > 0 || j > 0) {
            char o = (j >= (size_t)tw->lo[i] && j < (size_t)tw->hi[i]) ? op[i * W + j] : 'x';
            if (o == 'x')
                return nmt_seterr("TER: edit distance beam lost the alignment");
            tr[--k] = o;
            if (o == 's' || o == ' ') {
                i--;
                j--;
            } else if (o == 'i')
                j--;
            else
                i--;
        }
        memmove(tr, tr + k, cap - k);
        tr[cap - k] = 0;
    }
    return dist;
}

/* Python slice-based shift (sacreBLEU _perform_shift) of WORDS (N) into OUT. */
static void ter_perform_shift(const int32_t *w, size_t n, size_t start, size_t len, size_t target, int32_t *out)
{
    size_t k = 0;
#define COPY(a, b) do { size_t a_ = (a) < n ? (a) : n, b_ = (b) < n ? (b) : n; \
        for (size_t q = a_; q < b_; q++) out[k++] = w[q]; } while (0)
    if (target < start) {
        COPY(0, target);
        COPY(start, start + len);
        COPY(target, start);
        COPY(start + len, n);
    } else if (target > start + len) {
        COPY(0, start);
        COPY(start + len, target);
        COPY(start, start + len);
        COPY(target, n);
    } else {
        COPY(0, start);
        COPY(start + len, len + target);
        COPY(start, start + len);
        COPY(len + target, n);
    }
#undef COPY
}

/* One round of sacreBLEU's _shift. Returns 0 with *DELTA, the best shifted words in tw->wb (when
 * *DELTA > 0) and *CHECKED updated, or -1. */
static int ter_shift(struct ter_work *tw, const int32_t *H, size_t nh, const int32_t *R, size_t nr,
                     int *delta, int *checked)
{
    int pre = ter_ed(tw, H, nh, R, nr, 1);
    if (pre < 0)
        return -1;
    /* alignment from the flipped trace */
    int ph = -1, pr = -1;
    size_t nherr = 0, nrerr = 0;
    for (const char *t = tw->trace; *t; t++) {
        char o = *t == 'i' ? 'd' : *t == 'd' ? 'i' : *t;
        if (o == ' ' || o == 's') {
            ph++;
            pr++;
            tw->align[pr] = ph;
            tw->herr[nherr++] = o == 's';
            tw->rerr[nrerr++] = o == 's';
        } else if (o == 'i') {
            ph++;
            tw->herr[nherr++] = 1;
        } else {
            pr++;
            tw->align[pr] = ph;
            tw->rerr[nrerr++] = 1;
        }
    }
    int have = 0, b_score = 0, b_len = 0;
    long b_sh = 0, b_idx = 0;
    int32_t *cand = tw->wc;
    for (size_t sh = 0; sh < nh; sh++) {
        for (size_t sr = 0; sr < nr; sr++) {
            if (labs((long)sr - (long)sh) > TER_MAX_SHIFT_DIST)
                continue;
            size_t len = 0;
            int stop = 0;
            while (H[sh + len] == R[sr + len] && len < TER_MAX_SHIFT_SIZE) {
                len++;
                int hs = 0, rs = 0;
                for (size_t q = 0; q < len; q++) {
                    hs += tw->herr[sh + q];
                    rs += tw->rerr[sr + q];
                }
                int skip = hs == 0 || rs == 0
                           || ((long)sh <= tw->align[sr] && tw->align[sr] < (long)(sh + len));
                if (!skip) {
                    long prev_idx = -1;
                    for (long off = -1; off < (long)len; off++) {
                        long idx;
                        if ((long)sr + off == -1)
                            idx = 0;
                        else
                            idx = tw->align[(long)sr + off] + 1;
                        if (idx == prev_idx)
                            continue;
                        prev_idx = idx;
                        ter_perform_shift(H, nh, sh, len, (size_t)idx, cand);
                        int d = ter_ed(tw, cand, nh, R, nr, 0);
                        int sc = pre - d;
                        (*checked)++;
                        int better = !have || sc > b_score
                                     || (sc == b_score && ((int)len > b_len
                                     || ((int)len == b_len && (-(long)sh > -b_sh
                                     || (-(long)sh == -b_sh && -idx > -b_idx)))));
                        if (better) {
                            have = 1;
                            b_score = sc;
                            b_len = (int)len;
                            b_sh = (long)sh;
                            b_idx = idx;
                            memcpy(tw->wb, cand, nh * sizeof *cand);
                        }
                    }
                    if (*checked >= TER_MAX_SHIFT_CANDIDATES) {
                        stop = 1;
                        break;
                    }
                }
                if (nh == sh + len || nr == sr + len)
                    break;
            }
            if (stop) {
                *delta = have ? b_score : 0;
                return 0;
            }
        }
    }
    *delta = have ? b_score : 0;
    return 0;
}

static int ter_pair(struct ter_work *tw, const int32_t *hyp, size_t nh, const int32_t *ref, size_t nr, int *edits)
{
    if (nr == 0) {
        *edits = (int)nh;
        return 0;
    }
    if (ter_alloc(tw, nh, nr) < 0)
        return -1;
    if (nh)
        memcpy(tw->wa, hyp, nh * sizeof *hyp);
    int shifts = 0, checked = 0;
    for (;;) {
        int delta;
        if (ter_shift(tw, tw->wa, nh, ref, nr, &delta, &checked) < 0)
            return -1;
        if (checked >= TER_MAX_SHIFT_CANDIDATES || delta <= 0)
            break;
        shifts++;
        int32_t *t = tw->wa;
        tw->wa = tw->wb;
        tw->wb = t;
    }
    int d = ter_ed(tw, tw->wa, nh, ref, nr, 0);
    *edits = shifts + d;
    return 0;
}

static int ter_side(bleu_metric *m, struct metric_side *sd, const char *s, size_t len)
{
    bleu_cps *t;
    if (metric_side_text(sd, s, len, !m->cfg.case_sensitive, &t) < 0)
        return -1;
    t->n = bleu_cps_rstrip(t->p, t->n);
    if (m->cfg.normalized) {
        if (bleu_tok_ter_norm(t, &sd->txt, &m->tw) < 0)
            return -1;
        t = &sd->txt;
    }
    if (m->cfg.no_punct) {
        size_t k = 0;
        for (size_t i = 0; i < t->n; i++) {
            int32_t c = t->p[i];
            if (!(c == '.' || c == ',' || c == '?' || c == ':' || c == ';' || c == '!' || c == '"'
                  || c == '(' || c == ')'))
                t->p[k++] = c;
        }
        t->n = k;
    }
    if (t != &sd->txt) {
        sd->txt.n = 0;
        if (bleu_cps_reserve(&sd->txt, t->n + 1) < 0)
            return -1;
        memcpy(sd->txt.p, t->p, t->n * sizeof *t->p);
        sd->txt.n = t->n;
    }
    return bleu_split(sd->txt.p, sd->txt.n, &sd->toks);
}

int ter_segment(bleu_metric *m, const char *hyp, size_t hyp_len, const char *const *refs,
                     const size_t *ref_lens, int nrefs, double *out)
{
    size_t want = 0;
    for (int r = 0; r <= nrefs; r++) {
        struct metric_side *sd = &m->sides[r];
        if (ter_side(m, sd, r ? refs[r - 1] : hyp, r ? ref_lens[r - 1] : hyp_len) < 0)
            return -1;
        want += sd->toks.n;
    }
    if (ngram_reset(&m->intern, want) < 0)
        return -1;
    m->next_id = 0;
    for (int r = 0; r <= nrefs; r++) {
        struct metric_side *sd = &m->sides[r];
        if (metric_side_ids(&m->intern, &m->next_id, sd, sd->txt.p, sd->toks.start, sd->toks.len, sd->toks.n) < 0)
            return -1;
    }
    double ref_lengths = 0;
    long long best = (long long)1e16;
    for (int r = 1; r <= nrefs; r++) {
        int e;
        if (ter_pair(&m->ter, m->sides[0].ids, m->sides[0].toks.n, m->sides[r].ids, m->sides[r].toks.n, &e) < 0)
            return -1;
        ref_lengths += (double)m->sides[r].toks.n;
        if (e < best)
            best = e;
    }
    out[0] = (double)best;
    out[1] = ref_lengths / nrefs;
    return 0;
}

void ter_score_stats(const double *sum, bleu_score *o)
{
    memset(o, 0, sizeof *o);
    o->mean = o->ci = -1;
    snprintf(o->name, sizeof o->name, "TER");
    double edits = sum[0], len = sum[1], s;
    if (len > 0)
        s = edits / len;
    else if (edits > 0)
        s = 1.0;
    else
        s = 0.0;
    o->score = 100 * s;
    o->num_edits = edits;
    o->ref_length = len;
}
