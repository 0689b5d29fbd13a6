/* fuzz_yaml: libFuzzer target for the flat YAML reader (text/yaml.h) and Marian's vocabularies
 * (text/marian_vocab.h), .yml and plain text. Any input must parse or give an error, never a
 * crash, hang or unbounded allocation; what parses must write back to text that parses to the
 * same items (and the same pieces). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/marian_vocab.h"
#include "text/yaml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Whether maps A and B hold the same items. */
static int same_map(const struct yaml_map *a, const struct yaml_map *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++) {
        const struct yaml_item *x = &a->item[i], *y = &b->item[i];
        if (strcmp(x->key, y->key) || x->is_list != y->is_list || x->nlist != y->nlist ||
            (!x->is_list && strcmp(x->value, y->value)))
            return 0;
        for (size_t k = 0; k < x->nlist; k++)
            if (strcmp(x->list[k], y->list[k]))
                return 0;
    }
    return 1;
}

/* Writes V as .yml, reads it back and checks the pieces. */
static void vocab_again(const struct mvocab *v)
{
    struct nmt_buf f = {0};
    if (mvocab_format_yml(v, &f) == 0) {
        struct mvocab *w = mvocab_parse_yml((const char *)f.data, f.len, "again");
        if (!w || mvocab_size(w) != mvocab_size(v))
            abort();
        for (uint32_t id = 0; id < mvocab_size(v); id++) {
            uint32_t la, lb;
            const char *a = mvocab_piece(v, id, &la), *b = mvocab_piece(w, id, &lb);
            if (la != lb || memcmp(a, b, la))
                abort();
        }
        mvocab_free(w);
    }
    nmt_buf_free(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct yaml_map m;
    if (yaml_parse((const char *)data, size, "fuzz", &m) == 0) {
        struct nmt_buf f = {0};
        struct yaml_map r;
        if (yaml_format(&m, &f) == 0) {
            if (yaml_parse((const char *)f.data, f.len, "again", &r) < 0 || !same_map(&m, &r))
                abort();
            yaml_free(&r);
        }
        nmt_buf_free(&f);
        yaml_free(&m);
    }
    struct mvocab *v = mvocab_parse_yml((const char *)data, size, "fuzz");
    if (v)
        vocab_again(v);
    mvocab_free(v);
    v = mvocab_parse_txt((const char *)data, size, "fuzz");
    if (v)
        vocab_again(v);
    mvocab_free(v);
    return 0;
}
