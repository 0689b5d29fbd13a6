/* tokenizer.c: text to ids and back (see tokenizer.h). */
#include "text/tokenizer.h"

#include <string.h>

int tokenizer_init(struct tokenizer *t, const struct vocab *v, enum text_norm norm)
{
    memset(t, 0, sizeof *t);
    t->v = v;
    t->norm = v ? v->normalize : norm;
    if (v && v->spm) {
        spm_encoder_init(&t->spm, v->spm);
        return 0;
    }
    if (v && !(t->enc = bpe_encoder_new(v)))
        return -1;
    return 0;
}

void tokenizer_free(struct tokenizer *t)
{
    bpe_encoder_free(t->enc);
    spm_encoder_free(&t->spm);
    pretok_free(&t->pt);
    nmt_buf_free(&t->norm_buf);
    nmt_buf_free(&t->cat);
    nmt_buf_free(&t->text);
    memset(t, 0, sizeof *t);
}

void tokenizer_dropout(struct tokenizer *t, double p, uint64_t seed)
{
    if (t->enc)
        bpe_encoder_dropout(t->enc, p, seed);
}

void tokenizer_reseed(struct tokenizer *t, uint64_t key)
{
    if (t->enc)
        bpe_encoder_reseed(t->enc, key);
}

int tokenizer_pieces(struct tokenizer *t, const char *s, size_t len)
{
    if (text_normalize(t->norm, s, len, &t->norm_buf) < 0 ||
        pretok_run(&t->pt, (const char *)t->norm_buf.data, t->norm_buf.len) < 0)
        return TOKENIZER_EBADTEXT;
    return 0;
}

int tokenizer_encode(struct tokenizer *t, const char *s, size_t len, uint32_t **ids, uint32_t *n, uint32_t *cap)
{
    if (t->v->spm)
        return spm_encode(&t->spm, s, len, ids, n, cap);
    int rc = tokenizer_pieces(t, s, len);
    if (rc < 0)
        return rc;
    *n = 0;
    for (uint32_t i = 0; i < t->pt.n; i++)
        if (bpe_encode_word(t->enc, (const char *)t->pt.text.data + t->pt.off[i], t->pt.len[i], ids, n, cap) < 0)
            return -1;
    return 0;
}

int tokenizer_decode(struct tokenizer *t, const uint32_t *ids, size_t n)
{
    t->cat.len = 0;
    if (t->v->spm) {
        t->text.len = 0;
        return spm_decode(t->v->spm, ids, n, &t->text);
    }
    if (vocab_concat(t->v, ids, n, &t->cat) < 0 || pretok_detok((const char *)t->cat.data, t->cat.len, &t->text) < 0)
        return -1;
    return 0;
}

/* Updates *ESC, whether an escape '␛' is pending ("␛c" is the literal c, pretok.h), over the
 * LEN bytes of text S. */
static void track_escape(const char *s, size_t len, int *esc)
{
    size_t el = strlen(PRETOK_ESC);
    for (size_t i = 0; i < len;) {
        size_t cl = 1;
        while (i + cl < len && ((unsigned char)s[i + cl] & 0xC0) == 0x80)
            cl++;
        *esc = *esc ? 0 : cl == el && !memcmp(s + i, PRETOK_ESC, el);
        i += cl;
    }
}

uint32_t tokenizer_word_index(const struct vocab *v, const uint32_t *ids, size_t n, uint32_t *word)
{
    uint32_t words = 0;
    int esc = 0;
    size_t sl = strlen(PRETOK_SPACE);
    for (size_t i = 0; i < n; i++) {
        uint32_t len = 0;
        const char *t = ids[i] < v->n && v->kind[ids[i]] >= VOCAB_CHAR ? vocab_piece(v, ids[i], &len) : NULL;
        int starts = t && !esc && len >= sl && !memcmp(t, PRETOK_SPACE, sl);
        if (i == 0 || starts)
            words++;
        word[i] = words - 1;
        if (t)
            track_escape(t, len, &esc);
        else
            esc = 0;
    }
    return words;
}
