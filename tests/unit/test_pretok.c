/* test_pretok.c: UTF-8 checks, normalisation, and the round trip detok(pieces(x)) == normalize(x)
 * on the adversarial fixture set, also through BPE ids with byte fallback and dropout. */
#include <stdlib.h>
#include <string.h>

#include "text/bpe.h"
#include "text/pretok.h"
#include "test.h"
#include "text/normalize.h"
#include "cli/cli.h"

/* Round trip of LINE under MODE through pieces and, when E is given, through ids. */
static int round_trip(const char *line, size_t len, enum text_norm mode, struct bpe_encoder *e, const struct vocab *v)
{
    struct nmt_buf norm = {0}, cat = {0}, back = {0};
    struct pretok p = {0};
    uint32_t *ids = NULL, n = 0, cap = 0;
    int ok = text_normalize(mode, line, len, &norm) == 0 && pretok_run(&p, (char *)norm.data, norm.len) == 0;
    for (uint32_t i = 0; ok && i < p.n; i++) {
        ok &= p.len[i] > 0;
        if (e)
            ok &= bpe_encode_word(e, (char *)p.text.data + p.off[i], p.len[i], &ids, &n, &cap) == 0;
    }
    if (ok && e)
        ok = vocab_concat(v, ids, n, &cat) == 0;
    else if (ok)
        ok = nmt_buf_append(&cat, p.text.data, p.text.len) == 0;
    ok = ok && pretok_detok((char *)cat.data, cat.len, &back) == 0 && back.len == norm.len &&
         (norm.len == 0 || memcmp(back.data, norm.data, norm.len) == 0);
    nmt_buf_free(&norm);
    nmt_buf_free(&cat);
    nmt_buf_free(&back);
    pretok_free(&p);
    free(ids);
    return ok;
}

int main(void)
{
    size_t bad = 0;
    test_ok(utf8_check("abc\xC3\xA9", 5, &bad) == 0, "valid UTF-8 accepted");
    test_ok(utf8_check("ab\xC3", 3, &bad) < 0 && bad == 2, "truncated sequence at byte 2");
    test_ok(utf8_check("a\xC0\xAF", 3, &bad) < 0 && bad == 1, "overlong rejected");
    test_ok(utf8_check("\xED\xA0\x80", 3, &bad) < 0 && bad == 0, "surrogate rejected");
    test_ok(utf8_check("\xF4\x90\x80\x80", 4, &bad) < 0, "code point past U+10FFFF rejected");
    test_ok(utf8_check("x\xFF", 2, &bad) < 0 && bad == 1, "0xFF rejected");

    struct nmt_buf b = {0};
    test_ok(text_normalize(TEXT_NORM_NFKC, "\xEF\xAC\x81 e\xCC\x81", 7, &b) == 0 && b.len == 5 &&
                memcmp(b.data, "fi \xC3\xA9", 5) == 0,
            "nfkc: ligature split, e + acute composed");
    test_ok(text_normalize(TEXT_NORM_NFKC_CF, "Stra\xC3\x9F" "E", 7, &b) == 0 && b.len == 7 &&
                memcmp(b.data, "strasse", 7) == 0,
            "nfkc_cf: case folded");
    test_ok(text_normalize(TEXT_NORM_NFKC_CF, "ABC", 3, &b) == 0 && b.len == 3 && memcmp(b.data, "abc", 3) == 0,
            "nfkc_cf: ASCII lower-cased");
    test_ok(text_normalize(TEXT_NORM_NONE, "\xEF\xAC\x81", 3, &b) == 0 && b.len == 3, "none: unchanged");
    test_ok(text_normalize(TEXT_NORM_NFKC, "a\0b\xC3\xA9", 5, &b) == 0 && b.len == 5 && b.data[1] == 0,
            "nfkc keeps a NUL byte");
    test_ok(text_norm_parse("nfkc") == TEXT_NORM_NFKC && text_norm_parse("NFKC") < 0, "mode names");

    struct pretok p = {0};
    const char *s = "Hello, world!  x\xE2\x96\x81y";
    test_ok(pretok_run(&p, s, strlen(s)) == 0, "pretok runs");
    const char *want[] = {"\xE2\x96\x81Hello", ",", "\xE2\x96\x81world", "!", "\xE2\x96\x81",
                          "\xE2\x96\x81x", "\xE2\x90\x9B\xE2\x96\x81", "y"};
    int ok = p.n == 8;
    for (uint32_t i = 0; ok && i < p.n; i++)
        ok = p.len[i] == strlen(want[i]) && memcmp(p.text.data + p.off[i], want[i], p.len[i]) == 0;
    test_ok(ok, "pieces: dummy prefix, spaces as markers, literal marker escaped (%u pieces)", p.n);
    test_ok(pretok_run(&p, "", 0) == 0 && p.n == 0, "empty line: no pieces");
    test_ok(pretok_run(&p, "a\xFF", 2) < 0, "invalid UTF-8 refused: %s", nmt_errmsg());
    test_ok(pretok_run(&p, "e\xCC\x81x", 4) == 0 && p.n == 1, "combining mark stays with its letter");
    {
        /* byte pieces a model put in an impossible order: each stray byte becomes U+FFFD */
        struct nmt_buf back = {0};
        const char *cat = "\xE2\x96\x81" "a" "\xC3" "\xE2\x96\x81" "\xA4" "\xC3\xA4" "\xE2\x90\x9B" "\xFF"
                          "\xF0\x9F";
        const char *fffd = "a" "\xEF\xBF\xBD" " " "\xEF\xBF\xBD" "\xC3\xA4" "\xEF\xBF\xBD" "\xEF\xBF\xBD"
                           "\xEF\xBF\xBD";
        test_ok(pretok_detok(cat, strlen(cat), &back) == 0 && back.len == strlen(fffd) &&
                    memcmp(back.data, fffd, back.len) == 0,
                "detok: invalid bytes (lone lead, lone continuation, escaped 0xFF, cut 4-byte) become U+FFFD");
        nmt_buf_free(&back);
    }
    pretok_free(&p);

    /* a small vocabulary from the fixture text itself, with few chars so byte fallback happens */
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/tok/adversarial.txt", test_srcdir());
    FILE *f = fopen(path, "rb");
    test_ok(f != NULL, "open %s", path);
    if (!f)
        return test_done();
    char *lines[256];
    size_t lens[256];
    int nl = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t r;
    while (nl < 256 && (r = getline(&line, &lcap, f)) >= 0) {
        if (r > 0 && line[r - 1] == '\n')
            r--;
        lines[nl] = malloc((size_t)r + 1);
        memcpy(lines[nl], line, (size_t)r);
        lens[nl++] = (size_t)r;
    }
    free(line);
    fclose(f);
    struct bpe_counts c;
    bpe_counts_init(&c);
    struct nmt_buf norm = {0};
    for (int i = 0; i < nl; i++) {
        text_normalize(TEXT_NORM_NFKC, lines[i], lens[i], &norm);
        pretok_run(&p, (char *)norm.data, norm.len);
        for (uint32_t k = 0; k < p.n; k++)
            bpe_counts_add(&c, (char *)p.text.data + p.off[k], p.len[k], 1);
    }
    pretok_free(&p);
    nmt_buf_free(&norm);
    struct bpe_learn_opts o = {400, 2, 0.9, TEXT_NORM_NFKC};
    struct vocab *v = bpe_learn(&c, &o, NULL);
    bpe_counts_free(&c);
    struct bpe_encoder *e = bpe_encoder_new(v);
    for (int mode = 0; mode < 3; mode++) {
        int all = 1, all_ids = 0, all_drop = 0;
        for (int i = 0; i < nl; i++)
            all &= round_trip(lines[i], lens[i], (enum text_norm)mode, NULL, NULL);
        all_ids = 1;
        for (int i = 0; i < nl; i++)
            all_ids &= round_trip(lines[i], lens[i], (enum text_norm)mode, e, v);
        bpe_encoder_dropout(e, 0.3, 5);
        all_drop = 1;
        for (int i = 0; i < nl; i++) {
            bpe_encoder_reseed(e, (uint64_t)i);
            all_drop &= round_trip(lines[i], lens[i], (enum text_norm)mode, e, v);
        }
        bpe_encoder_dropout(e, 0, 0);
        test_ok(all, "%s: %d adversarial lines round-trip through pieces", text_norm_name((enum text_norm)mode), nl);
        test_ok(all_ids, "%s: ... and through ids with byte fallback", text_norm_name((enum text_norm)mode));
        test_ok(all_drop, "%s: ... and through ids with dropout 0.3", text_norm_name((enum text_norm)mode));
    }
    test_ok(round_trip("a\0b \0", 5, TEXT_NORM_NFKC, e, v), "NUL bytes round-trip");
    for (int i = 0; i < nl; i++)
        free(lines[i]);
    bpe_encoder_free(e);
    vocab_free(v);
    nmt_buf_free(&b);
    return test_done();
}
