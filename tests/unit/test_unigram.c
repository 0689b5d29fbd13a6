/* test_unigram.c: unigram learning on a small corpus: the size asked for, every character kept, the
 * scores in order, the same pieces and scores on 1 and 3 threads and on a second run, the model file
 * written read back and segmenting every sentence into pieces that spell it, the errors, and what
 * never joins a piece. */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "text/spm.h"
#include "text/unigram.h"
#include "test.h"

static const char *const corpus[] = {
    "the cat sat on the mat",   "a dog sat on a log",      "the dog and the cat",   "cats and dogs",
    "two men are walking",      "a man is walking a dog",  "the women are talking", "a woman talks to a man",
    "  extra   spaces here  ", "Ünïcödé wörds äre hëre", "zwei Hunde laufen",     "ein Mann läuft mit dem Hund",
};
#define NCORPUS (sizeof corpus / sizeof corpus[0])

static struct unigram_learner *fill(int times)
{
    struct unigram_learner *l = unigram_new(NULL, 0);
    for (int t = 0; l && t < times; t++)
        for (size_t i = 0; i < NCORPUS; i++)
            if (unigram_add(l, corpus[i], strlen(corpus[i])) < 0)
                return unigram_free(l), NULL;
    return l;
}

static int learn(uint32_t size, uint32_t threads, struct strtab *pieces, float **score)
{
    struct unigram_learner *l = fill(3);
    struct unigram_opts o = {.size = size, .char_coverage = 1.0, .threads = threads};
    int rc = l ? unigram_learn(l, &o, pieces, score, NULL) : -1;
    unigram_free(l);
    return rc;
}

static int same(const struct strtab *a, const float *sa, const struct strtab *b, const float *sb)
{
    if (a->n != b->n)
        return 0;
    for (uint32_t i = 0; i < a->n; i++) {
        uint32_t la, lb;
        const char *pa = strtab_get(a, i, &la), *pb = strtab_get(b, i, &lb);
        if (la != lb || memcmp(pa, pb, la) != 0 || memcmp(&sa[i], &sb[i], sizeof *sa) != 0)
            return 0;
    }
    return 1;
}

static void check_model(const struct strtab *p, const float *score)
{
    struct spm_train_spec spec = {.character_coverage = 1, .shrinking = 0.75f, .seed_size = 1000000, .threads = 1,
                                  .sub_iterations = 2, .max_sentence_length = 4192, .max_piece_chars = 16,
                                  .normalization = "identity"};
    struct nmt_buf file = {0};
    test_ok(spm_write_unigram(&file, p, score, &spec) == 0, "the model is written");
    struct spm_model *m = spm_parse(file.data, file.len, "test.model");
    test_ok(m && m->n == p->n + 3 && m->unk == 0 && m->type == SPM_UNIGRAM, "it reads back: %u pieces, <unk> 0",
            m ? m->n : 0);
    int spelt = m != NULL;
    struct spm_encoder e;
    uint32_t *ids = NULL, n = 0, cap = 0;
    if (m)
        spm_encoder_init(&e, m);
    for (size_t i = 0; m && i < NCORPUS; i++) {
        struct nmt_buf got = {0};
        if (spm_encode(&e, corpus[i], strlen(corpus[i]), &ids, &n, &cap) < 0)
            spelt = 0;
        for (uint32_t k = 0; k < n && spelt; k++) {
            uint32_t len;
            const char *s = spm_piece(m, ids[k], &len);
            spelt = ids[k] != 3 && nmt_buf_append(&got, s, len) == 0;
        }
        spelt = spelt && spm_normalize(&e, corpus[i], strlen(corpus[i])) == 0 && got.len == e.norm.len &&
                memcmp(got.data, e.norm.data, got.len) == 0;
        nmt_buf_free(&got);
    }
    test_ok(spelt, "every sentence is segmented into known pieces that spell its normalised text");
    if (m)
        spm_encoder_free(&e);
    free(ids);
    spm_free(m);
    nmt_buf_free(&file);
}

int main(void)
{
    struct strtab p1, p2, p3;
    float *s1 = NULL, *s2 = NULL, *s3 = NULL;
    test_ok(learn(50, 1, &p1, &s1) == 0, "learns 50 pieces");
    test_ok(p1.n == 47, "47 normal pieces and the 3 specials (got %u)", p1.n);
    int ordered = 1;
    for (uint32_t i = 1; i < p1.n; i++)
        ordered &= s1[i - 1] >= s1[i] && s1[i] < 0;
    test_ok(ordered, "scores are log-probabilities, best first");
    int chars = 1;
    const char *must[] = {"\xE2\x96\x81", "t", "\xC3\x9C", "\xC3\xA4", "H", "k"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        chars &= strtab_find(&p1, must[i], strlen(must[i])) >= 0;
    test_ok(chars, "every character of the text is a piece (coverage 1)");
    test_ok(strtab_find(&p1, " ", 1) < 0 && strtab_find(&p1, "\xE2\x96\x81" "dog", 6) >= 0,
            "no space piece; a frequent word with its U+2581 is one");
    test_ok(learn(50, 3, &p2, &s2) == 0 && same(&p1, s1, &p2, s2), "3 threads learn the same pieces and scores");
    test_ok(learn(50, 1, &p3, &s3) == 0 && same(&p1, s1, &p3, s3), "a second run learns the same");
    check_model(&p1, s1);
    strtab_free(&p1), strtab_free(&p2), strtab_free(&p3);
    free(s1), free(s2), free(s3);

    test_ok(learn(20, 1, &p1, &s1) < 0 && strstr(nmt_errmsg(), "characters kept"), "a size below the characters: %s",
            nmt_errmsg());
    struct unigram_learner *l = unigram_new(NULL, 0);
    struct unigram_opts o = {.size = 100, .char_coverage = 1, .threads = 1};
    test_ok(l && unigram_learn(l, &o, &p1, &s1, NULL) < 0 && strstr(nmt_errmsg(), "no sentence"), "no sentence: %s",
            nmt_errmsg());
    test_ok(unigram_add(l, "a\0b", 3) < 0 && strstr(nmt_errmsg(), "NUL"), "a NUL byte is refused");
    test_ok(unigram_add(l, "   ", 3) == 0 && unigram_learn(l, &o, &p1, &s1, NULL) < 0, "blank lines are skipped");
    unigram_free(l);

    /* the specials' texts never join a piece; no piece mixes letters and punctuation (scripts) */
    l = unigram_new(NULL, 0);
    for (int t = 0; l && t < 20; t++) {
        unigram_add(l, "dogs. <s>cats</s> dogs.", 23);
        unigram_add(l, "the cat sat", 11);
    }
    o.size = 30;
    int clean = l && unigram_learn(l, &o, &p1, &s1, NULL) == 0;
    for (uint32_t i = 0; clean && i < p1.n; i++) {
        uint32_t len;
        const char *s = strtab_get(&p1, i, &len);
        clean = !memchr(s, '\t', len) && !memchr(s, '>', len) && !(len > 1 && memchr(s, '.', len));
    }
    test_ok(clean, "no piece holds a tab, '<s>' or '</s>', or a letter beside a full stop");
    strtab_free(&p1);
    free(s1);
    unigram_free(l);

    /* nmt_nfkc's character map: full-width letters, ligatures and circled digits become plain ones */
    struct nmt_buf map = {0};
    int built = spm_charsmap_nfkc(&map, 1);
    test_ok(built == 0 && map.len > 4 && nmt_le32(map.data) % 4 == 0 &&
                nmt_le32(map.data) < map.len - 4 && map.data[map.len - 1] == 0,
            "the nmt_nfkc map: a trie of units, then NUL-terminated strings (%zu bytes)", map.len);
    l = unigram_new(map.data, map.len);
    const char *odd = "\xEF\xBC\xA1\xEF\xAC\x80 \xE2\x91\xA0 Aff 1";
    for (int t = 0; l && t < 5; t++)
        unigram_add(l, odd, strlen(odd));
    o.size = 10;
    int plain = l && unigram_learn(l, &o, &p1, &s1, NULL) == 0 && strtab_find(&p1, "A", 1) >= 0 &&
                strtab_find(&p1, "\xEF\xBC\xA1", 3) < 0 && strtab_find(&p1, "\xE2\x91\xA0", 3) < 0;
    test_ok(plain, "learnt through the map: A and 1 are pieces, their full-width and circled forms not");
    strtab_free(&p1);
    free(s1);
    unigram_free(l);
    nmt_buf_free(&map);
    return test_done();
}
