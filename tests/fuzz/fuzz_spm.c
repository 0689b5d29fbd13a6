/* fuzz_spm: libFuzzer target for the SentencePiece model reader (text/spm.h) through the vocabulary
 * loader. Any input must load or give an error, never a crash, hang or unbounded allocation; a model
 * that loads must normalise, segment and decode a few lines (each twice: the second time through the
 * encoder's cache of words), every id it gives inside the vocabulary and the same as the search of
 * whole lines gives (spm_model.unigram_words off), and write back the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "text/vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct vocab *v = vocab_parse((const char *)data, size, "fuzz");
    if (!v)
        return 0;
    if (!v->spm)
        goto out;
    struct tokenizer t;
    if (tokenizer_init(&t, v, TEXT_NORM_NONE) == 0) {
        static const char *const text[] = {"  A man  in an orange hat. ", "x\xC3\xA9y \xEF\xAC\x81 \xE2\x91\xA0",
                                           "\xE6\xB1\x89\xE5\xAD\x97 abc", "\xFF\xFE bad", ""};
        uint32_t *ids = NULL, n = 0, cap = 0, *whole = NULL, nw = 0, capw = 0;
        int words = v->spm->unigram_words;
        struct spm_encoder e;
        spm_encoder_init(&e, v->spm);
        for (int i = 0; i < 10; i++) {
            const char *s = text[i % 5];
            if (tokenizer_encode(&t, s, strlen(s), &ids, &n, &cap) < 0)
                continue;
            for (uint32_t k = 0; k < n; k++)
                if (ids[k] >= v->n)
                    abort();
            v->spm->unigram_words = 0; /* the search of the whole line */
            int rc = spm_encode(&e, s, strlen(s), &whole, &nw, &capw);
            v->spm->unigram_words = words;
            if (rc < 0 || nw != n || (n && memcmp(whole, ids, n * sizeof *ids) != 0))
                abort();
            if (tokenizer_decode(&t, ids, n) < 0)
                abort();
        }
        spm_encoder_free(&e);
        free(ids);
        free(whole);
        tokenizer_free(&t);
    }
    struct nmt_buf f = {0};
    if (vocab_format(v, &f) < 0 || f.len != size || memcmp(f.data, data, size) != 0)
        abort();
    nmt_buf_free(&f);
out:
    vocab_free(v);
    return 0;
}
