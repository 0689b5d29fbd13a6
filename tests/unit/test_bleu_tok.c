/* test_bleu_tok.c: the byte-level 13a tokenizer (bleu_tok13a_bytes) against the code-point
 * implementation (bleu_tokenize) on random text built from the characters the 13a rules care
 * about, and the n-gram counting fallbacks for segments with many distinct tokens/characters. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/utf8.h"
#include "eval/bleu.h"
#include "eval/tokenize.h"
#include "test.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* pieces: 13a symbols, '.', ',', '-', digits, letters, whitespace (ASCII and Unicode), entities,
 * "<skipped>", non-ASCII letters (with case), final sigma material */
static const char *pieces[] = {
    "a", "B", "z", "0", "5", "9", ".", ",", "-", "-", "'", " ", "  ", "\t", "\r", "\x1c", "\x0b",
    "(", ")", "\"", "&", "/", ":", "@", "[", "`", "{", "~", "$", "%", "<", ">", "=", "!", "?",
    "&quot;", "&amp;", "&lt;", "&gt;", "&amp;lt;", "<skipped>", "<skip", "ä", "Ä", "é", "ß",
    "\xc2\xa0", "\xc2\x85", "\xe2\x80\x83", "\xe2\x80\xa8", "\xe3\x80\x80", "\xe1\x9a\x80",
    "\xe2\x80\x8b", "\xc2\xa9", "\xe2\x82\xac", "Σ", "ΑΣ", "İ", "日本", "\xf0\x9f\x98\x80", "\x7f",
};

static char *join_btoks(const bleu_btoks *t, size_t *len)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++)
        n += t->len[i] + 1;
    char *s = malloc(n + 1);
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (i)
            s[k++] = ' ';
        memcpy(s + k, t->p[i], t->len[i]);
        k += t->len[i];
    }
    s[k] = 0;
    *len = k;
    return s;
}

static void check_13a(int quick)
{
    int rounds = quick ? 3000 : 60000, bad = 0;
    size_t np = sizeof pieces / sizeof pieces[0];
    bleu_btoks t = {0};
    char line[512];
    for (int r = 0; r < rounds; r++) {
        size_t len = 0, want = rnd() % 24;
        for (size_t i = 0; i < want; i++) {
            const char *p = pieces[rnd() % np];
            size_t pl = strlen(p);
            if (len + pl >= sizeof line)
                break;
            memcpy(line + len, p, pl);
            len += pl;
        }
        len = bleu_rstrip_len(line, len);
        int lc = (int)(rnd() & 1);
        size_t el, gl = 0;
        char *exp = bleu_tokenize(BLEU_TOK_13A, lc, line, len, &el);
        char *got = bleu_tok13a_bytes(line, len, lc, &t) == 0 ? join_btoks(&t, &gl) : NULL;
        if (!exp || !got || el != gl || memcmp(exp, got, el) != 0) {
            if (bad++ < 5)
                test_ok(0, "13a bytes == code points on '%.*s' (lc %d): '%s' vs '%s'", (int)len, line, lc,
                        exp ? exp : "(null)", got ? got : "(null)");
        }
        free(exp);
        free(got);
    }
    bleu_btoks_free(&t);
    test_ok(bad == 0, "13a on bytes matches the code-point tokenizer on %d random lines (%d differ)", rounds, bad);
}

/* Corpus statistics of one segment through the public API. */
static void segment(const bleu_config *cfg, const char *hyp, const char *ref, double *row)
{
    bleu_metric *m = bleu_metric_new(cfg);
    const char *refs[1] = {ref};
    size_t rl[1] = {strlen(ref)};
    test_ok(m && bleu_metric_segment(m, hyp, strlen(hyp), refs, rl, 1, row) == 0, "segment computed");
    bleu_metric_free(m);
}

/* Number of windows of N positions among 0..LEN-1 that hold no position i with i % 3 == 2. */
static size_t free_windows(size_t len, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i + n <= len; i++) {
        size_t j = 0;
        while (j < n && (i + j) % 3 != 2)
            j++;
        c += j == n;
    }
    return c;
}

/* Segments with more distinct tokens (BLEU) or characters (chrF) than packed n-gram keys hold
 * take the general counting path; the statistics must still be right. */
static void check_many_distinct(int quick)
{
    size_t nw = quick ? 20000 : 70000; /* > 65535 distinct tokens needs 17 bits: 4 x 17 > 64 */
    char *a = malloc(nw * 8 + 1), *b = malloc(nw * 8 + 1);
    size_t ka = 0, kb = 0;
    for (size_t i = 0; i < nw; i++) {
        ka += (size_t)sprintf(a + ka, "%s%zx", i ? " " : "", i);
        if (i % 3 == 2)
            kb += (size_t)sprintf(b + kb, "%sx", i ? " " : ""); /* not a reference token */
        else
            kb += (size_t)sprintf(b + kb, "%s%zx", i ? " " : "", i);
    }
    bleu_config cfg;
    bleu_config_init(&cfg, BLEU_METRIC_BLEU);
    double row[2 + 2 * 4];
    segment(&cfg, a, a, row);
    test_ok(row[0] == (double)nw && row[2] == (double)nw && row[5] == (double)nw - 3 && row[9] == row[5],
            "BLEU identical %zu distinct tokens: all n-grams match (%g %g %g)", nw, row[2], row[5], row[9]);
    segment(&cfg, b, a, row);
    test_ok(row[2] == (double)free_windows(nw, 1) && row[3] == (double)free_windows(nw, 2) && row[4] == 0,
            "BLEU every third of %zu tokens replaced: unigrams %g, bigrams %g, trigrams %g", nw, row[2], row[3], row[4]);
    /* chrF over 1200 distinct CJK characters (11 bits: 6 x 11 > 64) */
    size_t nc = 1200;
    struct nmt_buf cb = {0}, db = {0};
    for (size_t i = 0; i < nc; i++) {
        utf8_put(&cb, (int32_t)(0x4E00 + i));
        utf8_put(&db, i % 3 == 2 ? 'x' : (int32_t)(0x4E00 + i));
    }
    nmt_buf_append(&cb, "", 1);
    nmt_buf_append(&db, "", 1);
    char *c = (char *)cb.data, *d = (char *)db.data;
    bleu_config_init(&cfg, BLEU_METRIC_CHRF);
    double cr[3 * 6];
    segment(&cfg, c, c, cr);
    test_ok(cr[0] == (double)nc && cr[2] == (double)nc && cr[17] == (double)nc - 5,
            "chrF identical %zu distinct characters: all n-grams match", nc);
    segment(&cfg, d, c, cr);
    test_ok(cr[2] == (double)free_windows(nc, 1) && cr[5] == (double)free_windows(nc, 2) && cr[8] == 0,
            "chrF every third of %zu characters replaced: unigrams %g, bigrams %g, trigrams %g", nc, cr[2], cr[5],
            cr[8]);
    free(a);
    free(b);
    free(c);
    free(d);
}

int main(void)
{
    int quick = getenv("NMT_TEST_QUICK") != NULL;
    check_13a(quick);
    check_many_distinct(quick);
    return test_done();
}
