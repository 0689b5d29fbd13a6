/* test_vocab.c: vocabulary file writing and loading: round trip, fingerprint, and hostile or
 * truncated files (every prefix, edited lines) giving an error with a line number, never a crash. */
#include <stdlib.h>
#include <string.h>

#include "text/bpe.h"
#include "test.h"
#include "cli/cli.h"
#include "text/tokenizer.h"
#include "text/vocab.h"

static struct vocab *sample(void)
{
    struct bpe_counts c;
    bpe_counts_init(&c);
    bpe_counts_add(&c, "\xE2\x96\x81low", 7, 5);
    bpe_counts_add(&c, "\xE2\x96\x81lower", 9, 2);
    bpe_counts_add(&c, "\xE2\x96\x81newest", 10, 6);
    bpe_counts_add(&c, "a\tb\\c", 5, 3); /* a tab and a backslash in pieces: escaped in the file */
    struct bpe_learn_opts o = {1000, 2, 1.0, TEXT_NORM_NFKC};
    struct vocab *v = bpe_learn(&c, &o, NULL);
    vocab_set_options(v, "size=1000 min-freq=2");
    bpe_counts_free(&c);
    return v;
}

/* Parses TEXT after replacing the first occurrence of FROM by TO; returns the error or "" if it loaded. */
static const char *edit(const struct nmt_buf *file, const char *from, const char *to)
{
    static char msg[512];
    const char *s = (const char *)file->data;
    const char *at = memmem(s, file->len, from, strlen(from));
    if (!at)
        return "(pattern not found)";
    size_t pre = (size_t)(at - s), fl = strlen(from), tl = strlen(to);
    size_t len = file->len - fl + tl;
    char *t = malloc(len);
    memcpy(t, s, pre);
    memcpy(t + pre, to, tl);
    memcpy(t + pre + tl, at + fl, file->len - pre - fl);
    struct vocab *v = vocab_parse(t, len, "v.vocab");
    free(t);
    snprintf(msg, sizeof msg, "%s", v ? "" : nmt_errmsg());
    vocab_free(v);
    return msg;
}

/* Word numbers of piece sequences (tokenizer_word_index): a piece that begins with an unescaped '▁'
 * starts a word; "␛▁" is a literal '▁', "␛␛" a literal '␛'. */
static void test_word_index(void)
{
    struct vocab *v = vocab_new(TEXT_NORM_NFKC);
    int64_t sp = vocab_add_char(v, 0x2581), esc = vocab_add_char(v, 0x241B), a = vocab_add_char(v, 'a');
    int64_t b = vocab_add_char(v, 'b'), spa = vocab_add_merge(v, (uint32_t)sp, (uint32_t)a);
    test_ok(v && sp >= 0 && esc >= 0 && a >= 0 && b >= 0 && spa >= 0, "vocabulary of the word tests");
    const struct {
        const char *what;
        int n;
        uint32_t ids[8], want[8], words;
    } cases[] = {
        {"▁a ▁a b", 3, {(uint32_t)spa, (uint32_t)spa, (uint32_t)b}, {0, 1, 1}, 2},
        {"a ▁ b: the first piece starts a word", 3, {(uint32_t)a, (uint32_t)sp, (uint32_t)b}, {0, 1, 1}, 2},
        {"▁a ␛ ▁ b ▁a: an escaped ▁", 5, {(uint32_t)spa, (uint32_t)esc, (uint32_t)sp, (uint32_t)b, (uint32_t)spa},
         {0, 0, 0, 0, 1}, 2},
        {"▁ ␛ ␛ ▁a: a literal ␛ then a word", 4, {(uint32_t)sp, (uint32_t)esc, (uint32_t)esc, (uint32_t)spa},
         {0, 0, 0, 1}, 2},
        {"<0x41> ▁a <unk> ▁a, 9999", 5, {4 + 0x41, (uint32_t)spa, NMT_UNK, (uint32_t)spa, 9999}, {0, 1, 1, 2, 2}, 3},
        {"nothing", 0, {0}, {0}, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        uint32_t got[8] = {0};
        uint32_t words = tokenizer_word_index(v, cases[c].ids, (size_t)cases[c].n, got);
        test_ok(words == cases[c].words && !memcmp(got, cases[c].want, sizeof got), "word index: %s (%u words)",
                cases[c].what, words);
    }
    vocab_free(v);
}

int main(void)
{
    test_word_index();
    struct vocab *v = sample();
    struct nmt_buf f = {0};
    test_ok(v && vocab_format(v, &f) == 0, "format");
    struct vocab *w = vocab_parse((char *)f.data, f.len, "v.vocab");
    test_ok(w != NULL, "parse what was written: %s", w ? "ok" : nmt_errmsg());
    if (!w)
        return test_done();
    struct nmt_buf g = {0};
    test_ok(vocab_format(w, &g) == 0 && g.len == f.len && memcmp(g.data, f.data, f.len) == 0,
            "written again byte for byte");
    test_ok(vocab_fingerprint(v) == vocab_fingerprint(w), "same fingerprint");
    test_ok(w->normalize == TEXT_NORM_NFKC && w->options && strcmp(w->options, "size=1000 min-freq=2") == 0,
            "header fields kept");
    test_ok(memmem(f.data, f.len, "a\\tb", 4) != NULL || memmem(f.data, f.len, "\\t", 2) != NULL,
            "tab escaped in the file");
    test_ok(vocab_find(w, "a\tb\\c", 5) >= 0, "escaped piece loaded back");
    struct vocab *u1 = vocab_new(TEXT_NORM_NFKC_CF), *u2 = vocab_new(TEXT_NORM_NFKC);
    test_ok(vocab_fingerprint(u1) != vocab_fingerprint(u2), "fingerprint covers normalize");
    vocab_free(u1);
    vocab_free(u2);
    vocab_free(w);
    nmt_buf_free(&g);

    /* every strict prefix fails cleanly */
    int all = 1;
    for (size_t n = 0; n < f.len; n++) {
        struct vocab *t = vocab_parse((char *)f.data, n, "v.vocab");
        all &= t == NULL && strncmp(nmt_errmsg(), "v.vocab: ", 9) == 0;
        vocab_free(t);
    }
    test_ok(all, "all %zu strict prefixes refused with a named error", f.len);

    /* edited and hostile files */
    const char *m;
    m = edit(&f, "nmt-vocab 1.0", "nmt-vocab 2.0");
    test_ok(strstr(m, "line 1: unsupported vocabulary version 2.0") != NULL, "major version: %s", m);
    m = edit(&f, "nmt-vocab 1.0", "hello");
    test_ok(strstr(m, "line 1: not an nmt vocabulary") != NULL, "magic: %s", m);
    m = edit(&f, "size ", "size 99999");
    test_ok(strstr(m, "line 3: bad size") != NULL, "size too large: %s", m);
    m = edit(&f, "normalize nfkc", "normalize nfd");
    test_ok(strstr(m, "unknown normalization") != NULL, "bad normalize: %s", m);
    m = edit(&f, "fingerprint ", "fingerprint 0");
    test_ok(strstr(m, "bad fingerprint") != NULL, "fingerprint length: %s", m);
    m = edit(&f, "\xE2\x96\x81" "lo\t", "\xE2\x96\x81" "LO\t");
    test_ok(strstr(m, "not the concatenation") != NULL, "merge text edited: %s", m);
    m = edit(&f, "5\tbyte\t<0x01>", "5\tbyte\t<0x02>");
    test_ok(strstr(m, "line ") && strstr(m, "piece 5 must be byte '<0x01>'"), "byte piece edited: %s", m);
    m = edit(&f, "0\tspecial\t<pad>", "0\tspecial\t<s>");
    test_ok(strstr(m, "piece 0 must be special '<pad>'") != NULL, "special edited: %s", m);
    m = edit(&f, "260\tchar\t", "261\tchar\t");
    test_ok(strstr(m, "piece id 261 out of order (expected 260)") != NULL, "ids out of order: %s", m);
    m = edit(&f, "260\tchar\t", "260\tword\t");
    test_ok(strstr(m, "unknown piece kind 'word'") != NULL, "bad kind: %s", m);
    m = edit(&f, "\tchar\t", "\tchar\tzz");
    test_ok(strstr(m, "one valid UTF-8 character") != NULL, "char with two characters: %s", m);
    m = edit(&f, "\tchar\t", "\tchar\t\\q");
    test_ok(strstr(m, "bad escape") != NULL, "bad escape: %s", m);
    m = edit(&f, "end\n", "end\nmore\n");
    test_ok(strstr(m, "unexpected data after 'end'") != NULL, "trailing data: %s", m);
    m = edit(&f, "\tmerge\t", "\tchar\t");
    test_ok(*m != 0, "merge turned into char refused: %s", m);
    m = edit(&f, "\xE2\x96\x81" "l\t", "\xE2\x96\x81" "l\t999999\t1\tx\t");
    test_ok(strstr(m, "line ") != NULL, "merge with junk fields: %s", m);
    m = edit(&f, "pieces\n", "");
    test_ok(strstr(m, "line 7: expected 'key value'") != NULL, "no pieces line: %s", m);
    m = edit(&f, "fingerprint ", "fingerprint_ ");
    test_ok(strstr(m, "no 'fingerprint' line") != NULL, "no fingerprint: %s", m);
    /* content change caught by the fingerprint: swap two char pieces' order-independent fields */
    m = edit(&f, "# ", "#x ");
    test_ok(*m == 0, "comment lines are free: %s", *m ? m : "loaded");
    m = edit(&f, "size ", "size_ ");
    test_ok(strstr(m, "no 'size' line") != NULL, "no size: %s", m);
    const char zeros[8] = {0};
    struct vocab *t = vocab_parse(zeros, sizeof zeros, "zeros");
    test_ok(!t && strstr(nmt_errmsg(), "zeros"), "binary junk: %s", nmt_errmsg());
    t = vocab_parse("", 0, "empty");
    test_ok(!t && strstr(nmt_errmsg(), "empty file"), "empty file: %s", nmt_errmsg());
    t = vocab_load("/nonexistent/v.vocab");
    test_ok(!t && strstr(nmt_errmsg(), "cannot open '/nonexistent/v.vocab'"), "missing file: %s", nmt_errmsg());
    nmt_buf_free(&f);
    vocab_free(v);
    return test_done();
}
