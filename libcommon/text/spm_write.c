/* spm_write.c: writing SentencePiece model files (see spm.h, formats/sentencepiece.md), unigram and word:
 * the protobuf wire format of sentencepiece_model.proto, the fields in number order and with the
 * values spm_train 0.1.97 writes for what nmt-vocab supports. */
#include "text/spm.h"

#include <string.h>

#include "base/util.h"

enum { WT_VARINT = 0, WT_LEN = 2, WT_I32 = 5 };

static int pb_put_varint(struct nmt_buf *o, uint64_t v)
{
    unsigned char b[10];
    size_t n = 0;
    do {
        b[n] = (unsigned char)(v & 0x7F);
        v >>= 7;
        if (v)
            b[n] |= 0x80;
        n++;
    } while (v);
    return nmt_buf_append(o, b, n);
}

static int pb_put_key(struct nmt_buf *o, uint32_t field, int wt)
{
    return pb_put_varint(o, (uint64_t)field << 3 | (uint64_t)wt);
}

static int pb_put_uint(struct nmt_buf *o, uint32_t field, uint64_t v)
{
    return pb_put_key(o, field, WT_VARINT) < 0 ? -1 : pb_put_varint(o, v);
}

static int pb_put_float(struct nmt_buf *o, uint32_t field, float f)
{
    uint32_t u;
    unsigned char b[4];
    memcpy(&u, &f, 4);
    nmt_put32(b, u);
    return pb_put_key(o, field, WT_I32) < 0 ? -1 : nmt_buf_append(o, b, 4);
}

static int pb_put_bytes(struct nmt_buf *o, uint32_t field, const void *p, size_t n)
{
    if (pb_put_key(o, field, WT_LEN) < 0 || pb_put_varint(o, n) < 0)
        return -1;
    return n ? nmt_buf_append(o, p, n) : 0;
}

static int pb_put_str(struct nmt_buf *o, uint32_t field, const char *s)
{
    return pb_put_bytes(o, field, s, strlen(s));
}

/* One SentencePiece message (TYPE 0: not written, as spm_train leaves normal pieces). */
static int put_piece(struct nmt_buf *o, struct nmt_buf *tmp, const char *s, size_t n, float score, int type)
{
    tmp->len = 0;
    if (pb_put_bytes(tmp, 1, s, n) < 0 || pb_put_float(tmp, 2, score) < 0 || (type && pb_put_uint(tmp, 3, (uint64_t)type) < 0))
        return -1;
    return pb_put_bytes(o, 1, tmp->data, tmp->len);
}

/* The TrainerSpec message: every field spm_train writes, in number order. */
static int put_trainer(struct nmt_buf *t, const struct spm_train_spec *s, uint32_t vocab_size)
{
    int rc = 0;
    for (size_t i = 0; i < s->ninput && rc == 0; i++)
        rc = pb_put_str(t, 1, s->input[i]);
    const uint64_t u[][2] = {{3, 1}, {4, vocab_size}, {6, 0}};
    rc = rc ? rc : pb_put_str(t, 2, s->model_prefix ? s->model_prefix : "");
    for (size_t i = 0; i < sizeof u / sizeof u[0] && rc == 0; i++)
        rc = pb_put_uint(t, (uint32_t)u[i][0], u[i][1]);
    rc = rc ? rc : pb_put_str(t, 7, "");
    rc = rc ? rc : pb_put_float(t, 10, s->character_coverage);
    rc = rc ? rc : pb_put_uint(t, 11, 0);
    rc = rc ? rc : pb_put_uint(t, 14, s->seed_size);
    rc = rc ? rc : pb_put_float(t, 15, s->shrinking);
    const uint64_t v[][2] = {{16, s->threads},     {17, s->sub_iterations}, {18, s->max_sentence_length},
                             {19, 1},              {20, s->max_piece_chars}, {21, 1},
                             {22, 1},              {23, 1},                  {24, 0},
                             {25, 0},              {26, 0},                  {32, 1},
                             {33, 1},              {34, 0},                  {35, 0}};
    for (size_t i = 0; i < sizeof v / sizeof v[0] && rc == 0; i++)
        rc = pb_put_uint(t, (uint32_t)v[i][0], v[i][1]);
    rc = rc ? rc : pb_put_str(t, 36, "");
    const uint64_t ids[][2] = {{40, 0}, {41, 1}, {42, 2}, {43, UINT64_MAX}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0] && rc == 0; i++)
        rc = pb_put_uint(t, (uint32_t)ids[i][0], ids[i][1]);
    const char *names[] = {" \xE2\x81\x87 ", "<unk>", "<s>", "</s>", "<pad>"};
    for (uint32_t i = 0; i < 5 && rc == 0; i++)
        rc = pb_put_str(t, 44 + i, names[i]);
    rc = rc ? rc : pb_put_uint(t, 49, 0);
    rc = rc ? rc : pb_put_uint(t, 50, 0);
    rc = rc ? rc : pb_put_float(t, 51, 0);
    rc = rc ? rc : pb_put_uint(t, 52, 0);
    return rc;
}

/* The NormalizerSpec message, with SPEC's character map. */
static int put_normalizer(struct nmt_buf *t, const struct spm_train_spec *spec)
{
    if (pb_put_str(t, 1, spec->normalization) < 0 || pb_put_bytes(t, 2, spec->charsmap, spec->ncharsmap) < 0 ||
        pb_put_uint(t, 3, 1) < 0 || pb_put_uint(t, 4, 1) < 0)
        return -1;
    return pb_put_str(t, 6, "");
}

int spm_write_unigram(struct nmt_buf *out, const struct strtab *pieces, const float *score,
                      const struct spm_train_spec *spec)
{
    struct nmt_buf tmp = {0};
    static const char *const meta[3] = {"<unk>", "<s>", "</s>"};
    int rc = 0;
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = put_piece(out, &tmp, meta[i], strlen(meta[i]), 0, i == 0 ? SPM_UNKNOWN : SPM_CONTROL);
    for (uint32_t i = 0; i < pieces->n && rc == 0; i++) {
        uint32_t n;
        const char *s = strtab_get(pieces, i, &n);
        rc = put_piece(out, &tmp, s, n, score[i], 0);
    }
    tmp.len = 0;
    rc = rc ? rc : put_trainer(&tmp, spec, pieces->n + 3);
    rc = rc ? rc : pb_put_bytes(out, 2, tmp.data, tmp.len);
    tmp.len = 0;
    rc = rc ? rc : put_normalizer(&tmp, spec);
    rc = rc ? rc : pb_put_bytes(out, 3, tmp.data, tmp.len);
    nmt_buf_free(&tmp);
    return rc;
}

int spm_format_word_model(const struct strtab *pieces, int64_t unk, int64_t eos, struct nmt_buf *out)
{
    struct nmt_buf t = {0};
    int rc = 0;
    out->len = 0;
    if (unk < 0 || unk >= (int64_t)pieces->n || eos >= (int64_t)pieces->n || eos == unk)
        return nmt_seterr("a word model needs an unknown piece, and an end of sentence apart from it");
    for (uint32_t i = 0; i < pieces->n && rc == 0; i++) {
        uint32_t n;
        const char *s = strtab_get(pieces, i, &n);
        rc = put_piece(out, &t, s, n, 0, i == unk ? SPM_UNKNOWN : i == eos ? SPM_CONTROL : 0);
    }
    t.len = 0; /* trainer_spec: model_type, unk, bos, eos and pad ids, unk_surface */
    const int64_t ids[][2] = {{3, SPM_WORD}, {40, unk}, {41, -1}, {42, eos}, {43, -1}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0] && rc == 0; i++)
        rc = pb_put_uint(&t, (uint32_t)ids[i][0], (uint64_t)ids[i][1]);
    rc = rc ? rc : pb_put_str(&t, 44, " <unk>");
    rc = rc ? rc : pb_put_bytes(out, 2, t.data, t.len);
    t.len = 0; /* normalizer_spec: no character map nor dummy prefix, extra spaces removed, spaces kept */
    rc = rc ? rc : pb_put_str(&t, 1, "identity");
    rc = rc ? rc : pb_put_uint(&t, 3, 0);
    rc = rc ? rc : pb_put_uint(&t, 4, 1);
    rc = rc ? rc : pb_put_uint(&t, 5, 0);
    rc = rc ? rc : pb_put_bytes(out, 3, t.data, t.len);
    nmt_buf_free(&t);
    return rc;
}
