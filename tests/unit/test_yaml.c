/* test_yaml.c: the flat YAML of Marian's files (text/yaml.h) and Marian's vocabularies
 * (text/marian_vocab.h): the model.yml and vocab.yml Marian wrote (tests/fixtures/marian), quoting
 * and escapes both ways, and hostile texts (every prefix, nested mappings, duplicates, bad ids)
 * refused with the line, never a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "io/file.h"
#include "io/npz.h"
#include "test.h"
#include "text/marian_vocab.h"
#include "text/spm.h"
#include "text/yaml.h"

/* Parses TEXT; returns the error, or "" when it parsed (the map then freed). */
static const char *yerr(const char *text)
{
    struct yaml_map m;
    if (yaml_parse(text, strlen(text), "t.yml", &m) < 0)
        return nmt_errmsg();
    yaml_free(&m);
    return "";
}

static void test_model_yml(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/marian/pre.npz", test_srcdir());
    struct npz *z = npz_load(path);
    const struct npz_array *y = z ? npz_find(z, "special:model.yml") : NULL;
    struct yaml_map m = {0};
    test_ok(y && yaml_parse(y->data, y->count, "model.yml", &m) == 0, "Marian's model.yml parses (%s)",
            y ? nmt_errmsg() : "no entry");
    const struct yaml_item *it = yaml_get(&m, "transformer-postprocess-top");
    test_ok(it && !it->is_list && !strcmp(it->value, "n"), "a plain value");
    it = yaml_get(&m, "lemma-dependency");
    test_ok(it && !it->is_list && !strcmp(it->value, ""), "a quoted empty value");
    it = yaml_get(&m, "dim-vocabs");
    test_ok(it && it->is_list && it->nlist == 2 && !strcmp(it->list[1], "256"), "a block list");
    it = yaml_get(&m, "input-types");
    test_ok(it && it->is_list && it->nlist == 0, "an empty flow list on the next line");
    it = yaml_get(&m, "version");
    test_ok(it && !strncmp(it->value, "v1.12.43 ", 9) && it->value[strlen(it->value) - 1] == '0',
            "a plain value with spaces and colons, its trailing padding dropped");
    struct nmt_buf f = {0};
    struct yaml_map r = {0};
    int same = yaml_format(&m, &f) == 0 && yaml_parse((char *)f.data, f.len, "again", &r) == 0 && r.n == m.n;
    for (size_t i = 0; same && i < m.n; i++)
        same = !strcmp(r.item[i].key, m.item[i].key) && r.item[i].is_list == m.item[i].is_list &&
               r.item[i].nlist == m.item[i].nlist && (m.item[i].is_list || !strcmp(r.item[i].value, m.item[i].value));
    test_ok(same, "written and read back, the same %zu items", m.n);
    nmt_buf_free(&f);
    yaml_free(&r);
    yaml_free(&m);
    npz_free(z);
}

static void test_scalars(void)
{
    const char *text = "# a comment\n---\n\"a\\\"b\": \"\\x41\\u00e9\\t\\\\\"\n'it''s': 'x # y'\nk: v # c\n"
                       "l:\n- one\n- \"two, three\"\n-\nf: [a, 'b', \"c\"]\ne:\n";
    struct yaml_map m;
    int ok = yaml_parse(text, strlen(text), "t.yml", &m) == 0;
    test_ok(ok && m.n == 6, "quoted keys, escapes, comments, lists (%s)", ok ? "" : nmt_errmsg());
    if (!ok)
        return;
    test_ok(!strcmp(m.item[0].key, "a\"b") && !strcmp(m.item[0].value, "A\xC3\xA9\t\\"), "double-quoted escapes");
    test_ok(!strcmp(m.item[1].key, "it's") && !strcmp(m.item[1].value, "x # y"), "single quotes");
    test_ok(!strcmp(m.item[2].value, "v"), "a comment after a plain value");
    test_ok(m.item[3].nlist == 3 && !strcmp(m.item[3].list[1], "two, three") && !strcmp(m.item[3].list[2], ""),
            "a block list at indentation 0, a quoted and an empty item");
    test_ok(m.item[4].nlist == 3 && !strcmp(m.item[4].list[2], "c"), "a flow list");
    test_ok(!m.item[5].is_list && !strcmp(m.item[5].value, ""), "a bare key at the end is the empty scalar");
    yaml_free(&m);
    const char *odd[] = {"", "plain", "</s>", "<unk>", "a b", " lead", "trail ", "-", "- x", "?", ":", "a:b", "a: b",
                         "#", "a #b", "a#b", "~", "null", "true", "[x]", "x,y", "'", "\"", "\\", "\t", "\x7f",
                         "\xC2\x85", "\xE2\x80\xA8", "\xEF\xBB\xBF" "x", "\xE2\x96\x81" "der", "@@", "&quot;", "!x",
                         "|", ">", "{", "%x", "`", "*"};
    int all = 1;
    for (size_t k = 0; k < sizeof odd / sizeof odd[0]; k++) {
        struct nmt_buf b = {0};
        struct yaml_map r;
        yaml_put_scalar(&b, odd[k], strlen(odd[k]));
        nmt_buf_append(&b, ": ", 2);
        yaml_put_scalar(&b, odd[k], strlen(odd[k]));
        int good = yaml_parse((char *)b.data, b.len, "odd", &r) == 0 && r.n == 1 && !strcmp(r.item[0].key, odd[k]) &&
                   !strcmp(r.item[0].value, odd[k]);
        if (!good)
            printf("# '%s' written as %.*s: %s\n", odd[k], (int)b.len, b.data, nmt_errmsg());
        all &= good;
        if (good)
            yaml_free(&r);
        nmt_buf_free(&b);
    }
    test_ok(all, "awkward scalars written as keys and values read back the same");
}

static void test_hostile_yaml(void)
{
    test_ok(strstr(yerr("a: 1\nb:\n  c: 2\n"), "line 3") != NULL, "a nested mapping is refused with its line (%s)",
            yerr("a: 1\nb:\n  c: 2\n"));
    test_ok(strstr(yerr("a: 1\na: 2\n"), "line 2: duplicate key") != NULL, "a duplicate key is refused");
    test_ok(strstr(yerr("a: |\n  x\n"), "block scalars") != NULL, "a block scalar is refused by name");
    test_ok(strstr(yerr("a: &x 1\n"), "anchors") != NULL, "an anchor is refused by name");
    test_ok(strstr(yerr("a: !!int 1\n"), "tags") != NULL, "a tag is refused by name");
    test_ok(strstr(yerr("{a: 1}\n"), "flow mappings") != NULL || strstr(yerr("{a: 1}\n"), "indicator") != NULL,
            "a flow mapping is refused (%s)", yerr("{a: 1}\n"));
    test_ok(strstr(yerr("a: \"x\n"), "unterminated") != NULL, "an unterminated quote is refused");
    test_ok(strstr(yerr("a: \"\\0\"\n"), "NUL") != NULL, "an escaped NUL is refused");
    test_ok(strstr(yerr("a: \"\\uD800\"\n"), "surrogate") != NULL, "an escaped surrogate is refused");
    test_ok(strstr(yerr("a: b: c\n"), "nested") != NULL, "'a: b: c' is refused");
    test_ok(strstr(yerr("- a\n- b\n"), "without a key") != NULL, "a top-level list is refused");
    test_ok(strstr(yerr("a: 1\n\tb: 2\n"), "tab") != NULL, "a tab in indentation is refused");
    test_ok(strstr(yerr("a: \xff\n"), "byte 3: invalid UTF-8") != NULL, "invalid UTF-8 is refused with its byte");
    test_ok(strstr(yerr("a: 1\0b: 2\n"), "") != NULL && *yerr("a: 1\0\0\0") == 0, "trailing NULs are padding");
    test_ok(strstr(yerr("key without colon\n"), "expected 'key: value'") != NULL, "a line without ':' is refused");
    test_ok(strstr(yerr("a: [x, [y]]\n"), "line 1") != NULL, "a nested flow list is refused");
    test_ok(strstr(yerr("a:\n  - x\n  - - y\n"), "nested lists") != NULL, "a nested block list is refused");
    const char *text = "a: 1\nb:\n  - \"x\\u00e9\"\n  - 'y'\nc: [p, q]\nd: \"e\\\"\"\n";
    int all = 1;
    for (size_t n = 0; n <= strlen(text); n++) {
        struct yaml_map m;
        if (yaml_parse(text, n, "cut", &m) == 0)
            yaml_free(&m);
        else
            all &= strncmp(nmt_errmsg(), "cut: line ", 10) == 0;
    }
    test_ok(all, "every prefix parses or gives an error with its line");
}

static void test_vocab(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/marian/vocab.yml", test_srcdir());
    struct mvocab *v = mvocab_load(path);
    uint32_t len;
    test_ok(v && mvocab_size(v) == 256, "Marian's vocab.yml is read: 256 pieces (%s)", v ? "" : nmt_errmsg());
    if (!v)
        return;
    test_ok(mvocab_find(v, "</s>", 4) == 0 && mvocab_find(v, "<unk>", 5) == 1 && mvocab_find(v, ",", 1) == 6 &&
                mvocab_find(v, "&quot;", 6) == 156, "ids as Marian gave them, quoted keys unquoted");
    const char *p = mvocab_piece(v, 7, &len);
    test_ok(p && len == 5 && !memcmp(p, "einem", 5) && !mvocab_piece(v, 256, &len), "mvocab_piece");
    struct nmt_buf f = {0}, g = {0};
    nmt_read_whole(path, 1 << 20, &g);
    test_ok(mvocab_format_yml(v, &f) == 0 && f.len == g.len + 1 && !memcmp(f.data, g.data, g.len),
            "written again as Marian wrote it (with a final newline)");
    nmt_buf_free(&f);
    nmt_buf_free(&g);
    mvocab_free(v);
    struct mvocab *t = mvocab_parse_txt("</s>\r\n<unk>\na\"b\n\xE2\x96\x81x", 20, "v.txt");
    test_ok(t && mvocab_size(t) == 4 && mvocab_find(t, "a\"b", 3) == 2 && mvocab_find(t, "\xE2\x96\x81x", 4) == 3,
            "a plain text vocabulary: a piece a line, CR dropped, no final newline needed");
    if (t && mvocab_format_yml(t, &f) == 0) {
        struct mvocab *u = mvocab_parse_yml((char *)f.data, f.len, "t.yml");
        test_ok(u && mvocab_size(u) == 4 && mvocab_find(u, "a\"b", 3) == 2, "as .yml and back");
        mvocab_free(u);
    }
    nmt_buf_free(&f);
    mvocab_free(t);
    const struct { const char *text, *err; } bad[] = {
        {"a\n\nb\n", "v.txt: line 2: empty line"},
        {"a\nb\na\n", "v.txt: line 3: piece 'a' appears twice"},
        {"a\n\xff\n", "v.txt: line 2: piece '\xff' is not valid UTF-8"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        struct mvocab *w = mvocab_parse_txt(bad[k].text, strlen(bad[k].text), "v.txt");
        test_ok(!w && !strncmp(nmt_errmsg(), bad[k].err, strlen(bad[k].err)), "text: %s", nmt_errmsg());
        mvocab_free(w);
    }
    const struct { const char *text, *err; } ybad[] = {
        {"a: 0\nb: 2\n", "v.yml: line 2: the value of 'b' is not an id below 2"},
        {"a: 0\nb: 0\n", "v.yml: line 2: id 0 given twice (also at line 1)"},
        {"a: 0\nb: x\n", "v.yml: line 2: the value of 'b' is not an id"},
        {"a: 0\nb: 99999999999999999999\n", "v.yml: line 2: the value of 'b' is not an id"},
        {"a: 0\nb:\n  - 1\n", "v.yml: line 2: the value of 'b' is not an id"},
        {"a: 0\n\"\": 1\n", "v.yml: line 2: empty piece"},
        {"a: 0\n\"x\\ny\": 1\n", "v.yml: line 2: a piece holds a NUL or a line break"}};
    for (size_t k = 0; k < sizeof ybad / sizeof ybad[0]; k++) {
        struct mvocab *w = mvocab_parse_yml(ybad[k].text, strlen(ybad[k].text), "v.yml");
        test_ok(!w && !strncmp(nmt_errmsg(), ybad[k].err, strlen(ybad[k].err)), "yml: %s", nmt_errmsg());
        mvocab_free(w);
    }
}

/* Marian's vocabulary as an nmt vocabulary (a word model) and back. */
static void test_word_model(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/marian/vocab.yml", test_srcdir());
    struct mvocab *mv = mvocab_load(path);
    struct vocab *v = mv ? mvocab_to_vocab(mv) : NULL;
    test_ok(v && v->spm && v->n == 258, "vocab.yml as an nmt vocabulary: 256 pieces and <pad>, <s> (%s)",
            v ? "" : nmt_errmsg());
    if (!v) {
        mvocab_free(mv);
        return;
    }
    test_ok(v->spm->to_nmt[0] == NMT_EOS && v->spm->to_nmt[1] == NMT_UNK && v->spm->to_nmt[5] == 7,
            "Marian's </s> and <unk> are nmt's, piece k is nmt id k + 2");
    struct spm_encoder e;
    spm_encoder_init(&e, v->spm);
    uint32_t *ids = NULL, n = 0, cap = 0;
    const char *line = "  ein mann  hemdchen xyz . einem", *first = "xyz ein";
    int rc = spm_encode(&e, line, strlen(line), &ids, &n, &cap);
    test_ok(rc == 0 && n == 6 && ids[0] == 7 && ids[1] == 17 && ids[2] == NMT_UNK && ids[3] == NMT_UNK &&
                ids[4] == 4 && ids[5] == 9, "each word is its piece, each unknown word one <unk>");
    struct nmt_buf out = {0};
    const char *want = "ein mann <unk> <unk> . einem";
    int dec = rc == 0 && spm_decode(v->spm, ids, n, &out) == 0;
    test_ok(dec && out.len == strlen(want) && !memcmp(out.data, want, out.len), "decoded with spaces between the "
            "words: '%.*s'", dec ? (int)out.len : 0, dec ? (const char *)out.data : "");
    out.len = 0;
    dec = spm_encode(&e, first, strlen(first), &ids, &n, &cap) == 0 && spm_decode(v->spm, ids, n, &out) == 0;
    test_ok(dec && n == 2 && ids[0] == NMT_UNK, "an unknown first word: '%.*s'", dec ? (int)out.len : 0,
            dec ? (const char *)out.data : "");
    nmt_buf_free(&out);
    free(ids);
    spm_encoder_free(&e);
    struct mvocab *back = mvocab_from_vocab(v);
    struct nmt_buf a = {0}, b = {0};
    test_ok(back && mvocab_format_yml(back, &a) == 0 && mvocab_format_yml(mv, &b) == 0 && a.len == b.len &&
                !memcmp(a.data, b.data, a.len), "and back to the same Marian vocabulary");
    nmt_buf_free(&a);
    nmt_buf_free(&b);
    mvocab_free(back);
    vocab_free(v);
    struct mvocab *t = mvocab_parse_txt("a\nb\n<unk>\n", 10, "v.txt");
    test_ok(t && !mvocab_to_vocab(t) && strstr(nmt_errmsg(), "lacks '</s>'"), "a vocabulary without </s> is refused");
    mvocab_free(t);
    mvocab_free(mv);
}

int main(void)
{
    test_model_yml();
    test_scalars();
    test_hostile_yaml();
    test_vocab();
    test_word_model();
    return test_done();
}
