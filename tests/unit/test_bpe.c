/* test_bpe.c: BPE learning on a tiny corpus whose merges are checked by hand, determinism,
 * encoding (byte fallback, merges by rank), dropout, and the word cache. */
#include <stdlib.h>
#include <string.h>

#include "text/bpe.h"
#include "text/pretok.h"
#include "test.h"
#include "cli/cli.h"

static struct vocab *tiny(uint32_t size, uint64_t min_freq, double cov)
{
    struct bpe_counts c;
    bpe_counts_init(&c);
    bpe_counts_add(&c, "low", 3, 5);
    bpe_counts_add(&c, "lower", 5, 2);
    bpe_counts_add(&c, "newest", 6, 6);
    bpe_counts_add(&c, "widest", 6, 3);
    struct bpe_learn_opts o = {size, min_freq, cov, TEXT_NORM_NFKC};
    struct vocab *v = bpe_learn(&c, &o, NULL);
    bpe_counts_free(&c);
    return v;
}

static int piece_is(const struct vocab *v, uint32_t id, const char *s)
{
    uint32_t len;
    const char *p = vocab_piece(v, id, &len);
    return p && len == strlen(s) && memcmp(p, s, len) == 0;
}

static int encode(struct bpe_encoder *e, const char *w, uint32_t *out, uint32_t max)
{
    uint32_t *ids = NULL, n = 0, cap = 0;
    if (bpe_encode_word(e, w, strlen(w), &ids, &n, &cap) < 0)
        return -1;
    for (uint32_t i = 0; i < n && i < max; i++)
        out[i] = ids[i];
    free(ids);
    return (int)n;
}

int main(void)
{
    /* counts: e17 w16 s9 t9 l7 o7 n6 d3 i3 r2 -> char ids 260.. in that order (ties by code point) */
    struct vocab *v = tiny(1000, 2, 1.0);
    test_ok(v != NULL, "learn tiny corpus: %s", v ? "ok" : nmt_errmsg());
    if (!v)
        return test_done();
    const char *chars = "ewstlondir";
    int ok = 1;
    for (int i = 0; i < 10; i++) {
        char s[2] = {chars[i], 0};
        ok &= piece_is(v, 260 + (uint32_t)i, s) && v->kind[260 + i] == VOCAB_CHAR;
    }
    test_ok(ok, "char pieces ordered by count, ties by code point");
    /* hand-computed merges (highest pair count; ties: smaller left id, then smaller right id) */
    const char *merges[] = {"es", "est", "lo", "low", "ew", "new", "newest", "wi", "dest", "widest", "er", "lower"};
    int nm = (int)(sizeof merges / sizeof *merges);
    test_ok(v->n == 270u + (uint32_t)nm, "vocabulary stops when no pair is left: %u pieces", v->n);
    for (int i = 0; i < nm; i++)
        test_ok(piece_is(v, 270 + (uint32_t)i, merges[i]) && v->kind[270 + i] == VOCAB_MERGE, "merge %d is '%s'", i + 1,
                merges[i]);
    test_ok(v->left[270] == 260 && v->right[270] == 262, "merge 1 joins e (260) and s (262)");
    test_ok(v->left[276] == 275 && v->right[276] == 271, "merge 7 joins new and est");

    /* size limit and min-freq */
    struct vocab *v2 = tiny(274, 2, 1.0);
    test_ok(v2 && v2->n == 274 && piece_is(v2, 273, "low"), "size 274 stops after 4 merges");
    vocab_free(v2);
    v2 = tiny(1000, 4, 1.0);
    test_ok(v2 && v2->n == 277 && piece_is(v2, 276, "newest"), "min-freq 4 stops before the count-3 merges (%u)",
            v2 ? v2->n : 0);
    vocab_free(v2);
    /* character coverage: r (2 of 72 occurrences) falls out at coverage 0.95 */
    v2 = tiny(1000, 2, 0.95);
    test_ok(v2 && vocab_find(v2, "r", 1) < 0 && vocab_find(v2, "d", 1) >= 0, "coverage 0.95 drops the rarest char");
    vocab_free(v2);
    v2 = tiny(100, 2, 1.0);
    test_ok(!v2 && strstr(nmt_errmsg(), "size"), "size below 260 refused: %s", nmt_errmsg());

    /* determinism: the formatted file is identical across runs */
    struct nmt_buf f1 = {0}, f2 = {0};
    v2 = tiny(1000, 2, 1.0);
    test_ok(v2 && vocab_format(v, &f1) == 0 && vocab_format(v2, &f2) == 0 && f1.len == f2.len &&
                memcmp(f1.data, f2.data, f1.len) == 0,
            "same input, same vocabulary file");
    vocab_free(v2);
    nmt_buf_free(&f1);
    nmt_buf_free(&f2);

    /* encoding */
    struct bpe_encoder *e = bpe_encoder_new(v);
    uint32_t out[64];
    test_ok(encode(e, "lowest", out, 64) == 2 && out[0] == 273 && out[1] == 271, "lowest -> low est");
    test_ok(encode(e, "newest", out, 64) == 1 && out[0] == 276, "newest -> one piece");
    test_ok(encode(e, "newest", out, 64) == 1 && out[0] == 276, "newest again (cached)");
    int n = encode(e, "wéx", out, 64);
    test_ok(n == 4 && out[0] == 261 && out[1] == 4 + 0xC3 && out[2] == 4 + 0xA9 && out[3] == 4 + 'x',
            "unknown characters fall back to byte pieces (%d ids)", n);
    struct nmt_buf cat = {0};
    test_ok(vocab_concat(v, out, (size_t)n, &cat) == 0 && cat.len == 4 && memcmp(cat.data, "wéx", 4) == 0,
            "byte pieces decode to the original bytes");
    nmt_buf_free(&cat);
    test_ok(encode(e, "", out, 64) == 0, "empty word gives no ids");

    /* dropout: p=1 leaves characters; same seed and key give the same split */
    bpe_encoder_dropout(e, 1.0, 7);
    bpe_encoder_reseed(e, 0);
    test_ok(encode(e, "newest", out, 64) == 6, "dropout 1.0 leaves single characters");
    bpe_encoder_dropout(e, 0.5, 42);
    int differ = 0, same = 1;
    for (uint64_t k = 0; k < 20; k++) {
        uint32_t a[64], b[64];
        bpe_encoder_reseed(e, k);
        int na = encode(e, "newest", a, 64);
        bpe_encoder_reseed(e, k);
        int nb = encode(e, "newest", b, 64);
        same &= na == nb && memcmp(a, b, (size_t)na * 4) == 0;
        differ |= na != 1;
        struct nmt_buf t = {0};
        vocab_concat(v, a, (size_t)na, &t);
        same &= t.len == 6 && memcmp(t.data, "newest", 6) == 0;
        nmt_buf_free(&t);
    }
    test_ok(same, "dropout is reproducible per (seed, key) and keeps the text");
    test_ok(differ, "dropout 0.5 sometimes splits newest");
    bpe_encoder_free(e);

    /* learning on pre-tokenised text: the word boundary marker is a char like any other */
    struct bpe_counts c;
    bpe_counts_init(&c);
    struct pretok p = {0};
    const char *text = "the cat and the hat and the bat";
    pretok_run(&p, text, strlen(text));
    for (uint32_t i = 0; i < p.n; i++)
        bpe_counts_add(&c, (char *)p.text.data + p.off[i], p.len[i], 1);
    struct bpe_learn_opts o = {400, 2, 1.0, TEXT_NORM_NFKC};
    struct vocab *v3 = bpe_learn(&c, &o, NULL);
    test_ok(v3 && vocab_find(v3, "\xE2\x96\x81the", 6) >= 0 && vocab_find(v3, "\xE2\x96\x81" "and", 6) >= 0,
            "'▁the' and '▁and' learnt");
    vocab_free(v3);
    pretok_free(&p);
    bpe_counts_free(&c);
    vocab_free(v);
    return test_done();
}
