/* fuzz_vocab: libFuzzer target for the vocabulary file loader. Any input must load or give an
 * error, never a crash, hang or unbounded allocation; a file that loads must encode, decode and
 * write back to something that loads again with the same fingerprint. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/bpe.h"
#include "text/pretok.h"
#include "text/vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct vocab *v = vocab_parse((const char *)data, size, "fuzz");
    if (!v)
        return 0;
    struct bpe_encoder *e = bpe_encoder_new(v);
    if (e) {
        static const char *const text[] = {"\xE2\x96\x81" "the", "lower", "\xE2\x96\x81" "a\tb", "x\xC3\xA9y"};
        uint32_t *ids = NULL, n = 0, cap = 0;
        for (int i = 0; i < 4; i++)
            bpe_encode_word(e, text[i], strlen(text[i]), &ids, &n, &cap);
        struct nmt_buf cat = {0}, out = {0};
        if (vocab_concat(v, ids, n, &cat) == 0)
            pretok_detok((const char *)cat.data, cat.len, &out);
        nmt_buf_free(&cat);
        nmt_buf_free(&out);
        free(ids);
        bpe_encoder_free(e);
    }
    struct nmt_buf f = {0};
    if (vocab_format(v, &f) == 0) {
        struct vocab *w = vocab_parse((const char *)f.data, f.len, "again");
        if (!w || vocab_fingerprint(w) != vocab_fingerprint(v))
            abort();
        vocab_free(w);
    }
    nmt_buf_free(&f);
    vocab_free(v);
    return 0;
}
