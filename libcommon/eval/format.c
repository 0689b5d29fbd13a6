/* format.c: sacreBLEU's signatures and its Score.format() output (text line, score alone, JSON),
 * with floats written as Python's repr() writes them. */
#include "eval/metric.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

int bleu_signature(const bleu_metric *m, int nrefs, int is_short, int bootstrap, const char *seed,
                   const char *version, char *buf, size_t cap)
{
    const bleu_config *c = &m->cfg;
    char tmp[512], nr[32], bs[32], v1[64];
    size_t k = 0;
#define ADD(longk, shortk, val) do { int w_ = snprintf(tmp + k, sizeof tmp - k, "%s%s:%s", k ? "|" : "", \
        is_short ? (shortk) : (longk), (val)); if (w_ < 0 || (size_t)w_ >= sizeof tmp - k) return -1; k += (size_t)w_; } while (0)
    if (nrefs < 0)
        snprintf(nr, sizeof nr, "var");
    else
        snprintf(nr, sizeof nr, "%d", nrefs);
    ADD("nrefs", "#", nr);
    if (bootstrap > 0) {
        snprintf(bs, sizeof bs, "%d", bootstrap);
        ADD("bs", "bs", bs);
        ADD("seed", "rs", seed);
    }
    if (c->kind == BLEU_METRIC_BLEU) {
        static const char *toks[] = {"13a", "intl", "zh", "char", "none"};
        static const char *sm[] = {"exp", "floor", "add-k", "none"};
        ADD("case", "c", c->lowercase ? "lc" : "mixed");
        ADD("eff", "e", c->effective_order ? "yes" : "no");
        ADD("tok", "tok", toks[c->tokenize]);
        if (c->smooth == BLEU_SMOOTH_FLOOR || c->smooth == BLEU_SMOOTH_ADDK) {
            double sv = c->smooth_value_set ? c->smooth_value : c->smooth == BLEU_SMOOTH_FLOOR ? 0.1 : 1;
            snprintf(v1, sizeof v1, "%s[%.2f]", sm[c->smooth], sv);
            ADD("smooth", "s", v1);
        } else
            ADD("smooth", "s", sm[c->smooth]);
    } else if (c->kind == BLEU_METRIC_CHRF) {
        char a[16], b[16];
        snprintf(a, sizeof a, "%d", c->char_order);
        snprintf(b, sizeof b, "%d", c->word_order);
        ADD("case", "c", c->chrf_lowercase ? "lc" : "mixed");
        ADD("eff", "e", c->eps_smoothing ? "no" : "yes");
        ADD("nc", "nc", a);
        ADD("nw", "nw", b);
        ADD("space", "s", c->whitespace ? "yes" : "no");
    } else {
        ADD("case", "c", c->case_sensitive ? "mixed" : "lc");
        ADD("tok", "t", "tercom");
        ADD("norm", "nr", c->normalized ? "yes" : "no");
        ADD("punct", "pn", c->no_punct ? "no" : "yes");
        ADD("asian", "as", c->asian_support ? "yes" : "no");
    }
    ADD("version", "v", version);
#undef ADD
    if (k + 1 > cap)
        return -1;
    memcpy(buf, tmp, k + 1);
    return (int)k;
}

void bleu_pyfloat(double x, char *buf, size_t cap)
{
    if (isnan(x)) {
        snprintf(buf, cap, "NaN");
        return;
    }
    if (isinf(x)) {
        snprintf(buf, cap, x > 0 ? "Infinity" : "-Infinity");
        return;
    }
    if (x == 0) {
        snprintf(buf, cap, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    char e[64];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x)
            break;
    }
    /* e = [-]d[.ddd]e[+-]XX */
    const char *s = e;
    int neg = 0;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    char dig[32];
    int nd = 0;
    while (*s && *s != 'e') {
        if (*s != '.')
            dig[nd++] = *s;
        s++;
    }
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    dig[nd] = 0;
    int ex = atoi(s + 1);
    char out[64];
    int k = 0;
    if (neg)
        out[k++] = '-';
    if (ex >= -4 && ex < 16) {
        if (ex < 0) {
            out[k++] = '0';
            out[k++] = '.';
            for (int i = -1; i > ex; i--)
                out[k++] = '0';
            for (int i = 0; i < nd; i++)
                out[k++] = dig[i];
        } else {
            for (int i = 0; i <= ex; i++)
                out[k++] = i < nd ? dig[i] : '0';
            out[k++] = '.';
            if (nd > ex + 1)
                for (int i = ex + 1; i < nd; i++)
                    out[k++] = dig[i];
            else
                out[k++] = '0';
        }
        out[k] = 0;
    } else {
        out[k++] = dig[0];
        if (nd > 1) {
            out[k++] = '.';
            for (int i = 1; i < nd; i++)
                out[k++] = dig[i];
        }
        snprintf(out + k, sizeof out - (size_t)k, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    }
    snprintf(buf, cap, "%s", out);
}

typedef struct {
    char *p;
    size_t n, cap;
    int err;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *b, const char *fmt, ...)
{
    if (b->err)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (w < 0) {
            b->err = 1;
            return;
        }
        if (b->p && b->n + (size_t)w < b->cap) {
            b->n += (size_t)w;
            return;
        }
        if (NMT_GROW(b->p, b->cap, b->n + (size_t)w + 1) < 0) {
            b->err = 1;
            return;
        }
    }
}

static void sb_json_str(sbuf *b, const char *s)
{
    sb_add(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            sb_add(b, "\\%c", c);
        else if (c == '\n')
            sb_add(b, "\\n");
        else if (c == '\t')
            sb_add(b, "\\t");
        else if (c == '\r')
            sb_add(b, "\\r");
        else if (c < 0x20)
            sb_add(b, "\\u%04x", c);
        else
            sb_add(b, "%c", c);
    }
    sb_add(b, "\"");
}

/* float(f"{x:.{w}f}") written as Python's repr */
static void rounded_repr(double x, int w, char *buf, size_t cap)
{
    char t[512];
    snprintf(t, sizeof t, "%.*f", w, x);
    bleu_pyfloat(strtod(t, NULL), buf, cap);
}

char *bleu_format(const bleu_score *s, int width, int score_only, const char *sig, int is_json)
{
    sbuf sc = {0}, verbose = {0}, out = {0};
    sb_add(&sc, "%.*f", width, s->score);
    int conf = s->mean > 0;
    if (conf)
        sb_add(&sc, " (μ = %.*f ± %.*f)", width, s->mean, width, s->ci);
    if (!strcmp(s->name, "BLEU")) {
        for (int n = 0; n < s->order; n++)
            sb_add(&verbose, "%s%.1f", n ? "/" : "", s->precisions[n]);
        sb_add(&verbose, " (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)", s->bp, s->ratio,
               s->sys_len, s->ref_len);
    }
    if (score_only) {
        free(verbose.p);
        if (sc.err) {
            free(sc.p);
            nmt_seterr("out of memory");
            return NULL;
        }
        return sc.p;
    }
    if (!is_json) {
        if (sig && *sig)
            sb_add(&out, "%s|%s = %s", s->name, sig, sc.p);
        else
            sb_add(&out, "%s = %s", s->name, sc.p);
        if (verbose.p)
            sb_add(&out, " %s", verbose.p);
    } else {
        char num[64];
        sb_add(&out, "{\n \"name\": ");
        sb_json_str(&out, s->name);
        rounded_repr(s->score, width, num, sizeof num);
        sb_add(&out, ",\n \"score\": %s,\n \"signature\": ", num);
        sb_json_str(&out, sig ? sig : "");
        if (conf) {
            rounded_repr(s->mean, width, num, sizeof num);
            sb_add(&out, ",\n \"confidence_mean\": %s", num);
            rounded_repr(s->ci, width, num, sizeof num);
            sb_add(&out, ",\n \"confidence_var\": %s", num);
            sb_add(&out, ",\n \"confidence\": \"μ = %.*f ± %.*f\"", width, s->mean, width, s->ci);
        }
        if (verbose.p) {
            sb_add(&out, ",\n \"verbose_score\": ");
            sb_json_str(&out, verbose.p);
        }
        /* every signature field as a string */
        const char *p = sig ? sig : "";
        while (*p) {
            const char *bar = strchr(p, '|');
            size_t len = bar ? (size_t)(bar - p) : strlen(p);
            const char *colon = memchr(p, ':', len);
            if (colon) {
                char key[128], val[256];
                snprintf(key, sizeof key, "%.*s", (int)(colon - p), p);
                snprintf(val, sizeof val, "%.*s", (int)(len - (size_t)(colon - p) - 1), colon + 1);
                sb_add(&out, ",\n ");
                sb_json_str(&out, key);
                sb_add(&out, ": ");
                sb_json_str(&out, val);
            }
            p += len;
            if (*p == '|')
                p++;
        }
        sb_add(&out, "\n}");
    }
    free(sc.p);
    free(verbose.p);
    if (out.err) {
        free(out.p);
        nmt_seterr("out of memory");
        return NULL;
    }
    return out.p;
}

/* ---- bootstrap ---- */
