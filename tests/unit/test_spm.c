/* test_spm.c: the fast paths of SentencePiece encoding against the plain ones they stand for. A
 * unigram model's search word by word through the encoder's cache (replayed steps, or the exact best
 * path where the float margins allow) gives the ids of the search of the whole line (the same model
 * with spm_model.unigram_words off), on random models whose scores tie or nearly tie, over lines
 * long enough for the float sums to round, with words past the cache's longest, and with the cache
 * started afresh every few words; the normaliser's ASCII runs give what its character-by-character
 * path (every byte's plain kind off) gives, with the nfkc and nmt_nfkc maps and without one (nmt's
 * nmt_nfkc map has rules that start with some ASCII letters: no 8-byte runs with it). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "text/spm.h"
#include "test.h"

#define SP "\xE2\x96\x81" /* U+2581 */

static uint64_t state = 0x9E3779B97F4A7C15ULL;

/* A pseudo-random number below N (splitmix64). */
static uint32_t rnd(uint32_t n)
{
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return (uint32_t)((z ^ (z >> 31)) % n);
}

static const char *const letters[] = {"a", "b", "c", "\xC3\xA4"}; /* a b c ä */

/* Appends a random letter to B. */
static void put_letter(struct nmt_buf *b)
{
    const char *l = letters[rnd(4)];
    nmt_buf_append(b, l, strlen(l));
}

/* A unigram model of every letter and U+2581, and PIECES random others (U+2581 only at their
 * start), scores from a few values (ties) some nudged by an ulp or two (near ties); the model file
 * in OUT. */
static void random_model(struct nmt_buf *out, int pieces)
{
    static const float base[] = {-1.0f, -2.0f, -3.0f, -1.5f, -0.5f, -7.25f};
    struct strtab p;
    strtab_init(&p);
    float score[256];
    struct nmt_buf b = {0};
    for (int i = 0; i < 5; i++)
        strtab_intern(&p, i < 4 ? letters[i] : SP, strlen(i < 4 ? letters[i] : SP), NULL);
    while (p.n < (uint32_t)pieces + 5 && p.n < 256) {
        b.len = 0;
        if (rnd(2))
            nmt_buf_append(&b, SP, 3);
        for (uint32_t k = 0, n = 1 + rnd(4); k < n; k++)
            put_letter(&b);
        strtab_intern(&p, b.data, b.len, NULL);
    }
    for (uint32_t i = 0; i < p.n; i++) {
        score[i] = base[rnd(6)];
        for (uint32_t k = rnd(4); k == 1 || k == 2; k = 0) /* an ulp or two up or down */
            for (uint32_t u = 0; u < k; u++)
                score[i] = nextafterf(score[i], rnd(2) ? 0.0f : -100.0f);
    }
    struct spm_train_spec spec = {.character_coverage = 1, .shrinking = 0.75f, .seed_size = 1000, .threads = 1,
                                  .sub_iterations = 2, .max_sentence_length = 4192, .max_piece_chars = 16,
                                  .normalization = "identity"};
    out->len = 0;
    spm_write_unigram(out, &p, score, &spec);
    strtab_free(&p);
    nmt_buf_free(&b);
}

/* A random line of WORDS words from a vocabulary of a few dozen (repeated: the cache serves them),
 * some runs of spaces, now and then a word longer than the cache's longest. */
static void random_line(struct nmt_buf *b, int words)
{
    b->len = 0;
    for (int w = 0; w < words; w++) {
        nmt_buf_append(b, " ", 1 + (rnd(8) == 0));
        uint32_t word = rnd(40); /* the word: one of 40 */
        uint64_t keep = state;
        state = 1000 + word;
        for (uint32_t k = 0, n = 1 + rnd(9); k < n; k++)
            put_letter(b);
        state = keep;
        if (rnd(200) == 0)
            for (int k = 0; k < 300; k++)
                put_letter(b);
    }
}

/* Whether encoders A (cached) and B (whole lines) give the same ids for LINES random lines. */
static int same_ids(struct spm_encoder *a, struct spm_encoder *b, int lines, int *words_seen)
{
    struct nmt_buf line = {0};
    uint32_t *ia = NULL, *ib = NULL, na, nb, ca = 0, cb = 0;
    int same = 1;
    for (int i = 0; i < lines && same; i++) {
        random_line(&line, 1 + (int)rnd(i % 3 == 0 ? 400 : 30));
        same = spm_encode(a, (const char *)line.data, line.len, &ia, &na, &ca) == 0 &&
               spm_encode(b, (const char *)line.data, line.len, &ib, &nb, &cb) == 0 && na == nb &&
               memcmp(ia, ib, na * sizeof *ia) == 0;
        if (!same)
            printf("# differs: %.*s\n", (int)(line.len < 200 ? line.len : 200), (const char *)line.data);
    }
    *words_seen = (int)a->nwords;
    free(ia), free(ib);
    nmt_buf_free(&line);
    return same;
}

static void check_unigram_words(void)
{
    struct nmt_buf file = {0};
    int ok = 1, cached = 1, models = 0, words = 0, nmodels = getenv("NMT_TEST_QUICK") ? 12 : 40; /* (valgrind) */
    for (int k = 0; k < nmodels && ok; k++) {
        random_model(&file, 10 + (int)rnd(120));
        struct spm_model *m = spm_parse(file.data, file.len, "random.model");
        struct spm_model *whole = spm_parse(file.data, file.len, "random.model");
        if (!m || !whole) {
            ok = 0;
            spm_free(m), spm_free(whole);
            break;
        }
        cached &= m->unigram_words;
        whole->unigram_words = 0;
        struct spm_encoder a, b;
        spm_encoder_init(&a, m);
        spm_encoder_init(&b, whole);
        if (k % 4 == 3) /* start afresh often */
            a.words_max = 1 + rnd(20), a.units_max = 2000 + rnd(20000);
        int seen;
        ok = same_ids(&a, &b, 60, &seen);
        words += seen;
        models++;
        spm_encoder_free(&a), spm_encoder_free(&b);
        spm_free(m), spm_free(whole);
    }
    test_ok(ok && cached && words > 0,
            "word by word through the cache, the ids of the whole line's search (%d random models, ties and near "
            "ties, %d words cached at the end)", models, words);

    /* a piece with U+2581 inside, or ending with its first bytes, keeps the search whole */
    static const char *const spans[] = {"a" SP "b", "a\xE2\x96", "a\xE2"};
    for (int i = 0; i < 3; i++) {
        struct strtab p;
        strtab_init(&p);
        float score[3] = {-1, -2, -3};
        strtab_intern(&p, "a", 1, NULL), strtab_intern(&p, SP, 3, NULL);
        strtab_intern(&p, spans[i], strlen(spans[i]), NULL);
        struct spm_train_spec spec = {.character_coverage = 1, .normalization = "identity"};
        file.len = 0;
        spm_write_unigram(&file, &p, score, &spec);
        struct spm_model *m = spm_parse(file.data, file.len, "span.model");
        test_ok(m && !m->unigram_words, "a piece spanning a word's start (%d) turns the cache off", i);
        spm_free(m);
        strtab_free(&p);
    }
    nmt_buf_free(&file);
}

/* Random text for the normaliser: ASCII letters, punctuation, spaces and tabs, controls, DEL, and
 * characters its maps rewrite (combining marks after ASCII, full-width letters, ligatures). */
static void random_text(struct nmt_buf *b)
{
    static const char *const odd[] = {"\xCC\x81", "\xCC\xB8", "\xEF\xBC\xA1", "\xEF\xAC\x81", "\xC3\xA9", "\t", "\x01",
                                      "\x7F", " ", "  ", "\xE2\x80\x83", "\xE3\x80\x80", SP, "\xE2\x91\xA0"};
    b->len = 0;
    for (uint32_t k = 0, n = rnd(80); k < n; k++) {
        if (rnd(4) == 0) {
            const char *o = odd[rnd(sizeof odd / sizeof *odd)];
            nmt_buf_append(b, o, strlen(o));
        } else {
            char c = (char)(0x21 + rnd(0x5E));
            nmt_buf_append(b, &c, 1);
        }
    }
}

static void check_normalize(void)
{
    for (int map = 0; map < 3; map++) {
        struct nmt_buf cm = {0}, file = {0}, text = {0};
        if (map < 2)
            spm_charsmap_nfkc(&cm, map);
        struct strtab p;
        strtab_init(&p);
        float score = -1;
        strtab_intern(&p, "a", 1, NULL);
        struct spm_train_spec spec = {.character_coverage = 1, .normalization = map == 0 ? "nfkc" : map == 1 ? "nmt_nfkc" : "identity",
                                      .charsmap = cm.data, .ncharsmap = cm.len};
        spm_write_unigram(&file, &p, &score, &spec);
        struct spm_model *m = spm_parse(file.data, file.len, "norm.model");
        int same = m != NULL, graph = 0;
        if (m) {
            struct spm_encoder fast, slow;
            spm_encoder_init(&fast, m);
            spm_encoder_init(&slow, m);
            graph = fast.graph_plain;
            memset(slow.plain, 0, sizeof slow.plain);
            slow.graph_plain = 0;
            for (int i = 0, n = getenv("NMT_TEST_QUICK") ? 1000 : 3000; i < n && same; i++) {
                random_text(&text);
                same = spm_normalize(&fast, (const char *)text.data, text.len) == 0 &&
                       spm_normalize(&slow, (const char *)text.data, text.len) == 0 && fast.norm.len == slow.norm.len &&
                       memcmp(fast.norm.data, slow.norm.data, fast.norm.len) == 0;
            }
            spm_encoder_free(&fast), spm_encoder_free(&slow);
        }
        test_ok(same && (graph || map == 1), "%s: the ASCII runs normalise as character by character%s",
                spec.normalization, graph ? " (8 bytes at a time where they can)" : "");
        spm_free(m);
        strtab_free(&p);
        nmt_buf_free(&cm), nmt_buf_free(&file), nmt_buf_free(&text);
    }
}

int main(void)
{
    check_unigram_words();
    check_normalize();
    return test_done();
}
