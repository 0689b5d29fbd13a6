/* request.c: nmt-serve's request bodies and answers, through Jansson. */
#include "serve/request.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "base/util.h"

void serve_request_free(struct serve_request *r)
{
    for (size_t i = 0; r->text && i < r->n; i++)
        free(r->text[i]);
    free(r->text);
    free(r->len);
    memset(r, 0, sizeof *r);
}

/* Reads the integer field KEY of OBJ into *OUT (left as is when absent), within [1, MAX] (LIMIT:
 * the option setting MAX, or NULL). 0, or SERVE_BAD_REQUEST with the error set. */
static int get_int(json_t *obj, const char *key, int max, const char *limit, int *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return nmt_seterr("'%s' must be an integer", key), SERVE_BAD_REQUEST;
    json_int_t x = json_integer_value(v);
    if (x < 1 || x > max) {
        if (limit)
            nmt_seterr("'%s' must be from 1 to %d (%s)", key, max, limit);
        else
            nmt_seterr("'%s' must be from 1 to %d", key, max);
        return SERVE_BAD_REQUEST;
    }
    *out = (int)x;
    return 0;
}

/* Reads the boolean field KEY of OBJ into *OUT (left as is when absent). 0, or SERVE_BAD_REQUEST. */
static int get_bool(json_t *obj, const char *key, int *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return nmt_seterr("'%s' must be true or false", key), SERVE_BAD_REQUEST;
    *out = json_is_true(v);
    return 0;
}

/* Copies the sentences of array A into R within LIM. 0, or a status with the error set. */
static int get_text(json_t *a, const struct serve_limits *lim, struct serve_request *r)
{
    if (!json_is_array(a))
        return nmt_seterr("'text' must be an array of strings"), SERVE_BAD_REQUEST;
    size_t n = json_array_size(a);
    if (n > lim->max_sentences)
        return nmt_seterr("%zu sentences exceed the limit of %zu (--max-request-sentences)", n, lim->max_sentences),
               SERVE_TOO_LARGE;
    r->text = calloc(n ? n : 1, sizeof *r->text);
    r->len = calloc(n ? n : 1, sizeof *r->len);
    if (!r->text || !r->len)
        return nmt_seterr("out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(a, i);
        if (!json_is_string(s))
            return nmt_seterr("'text'[%zu] must be a string", i), SERVE_BAD_REQUEST;
        size_t len = json_string_length(s);
        if (len > lim->max_line_bytes)
            return nmt_seterr("'text'[%zu] has %zu bytes, over the limit of %zu (--max-line-bytes)", i, len,
                              lim->max_line_bytes),
                   SERVE_TOO_LARGE;
        if (!(r->text[i] = malloc(len + 1)))
            return nmt_seterr("out of memory");
        memcpy(r->text[i], json_string_value(s), len);
        r->text[i][len] = 0;
        r->len[i] = len;
        r->n = i + 1;
    }
    return 0;
}

/* Checks the fields of object O into R. 0, or a status with the error set. */
static int get_fields(json_t *o, const struct serve_limits *lim, struct serve_request *r)
{
    static const char *const known[] = {"text", "beam", "nbest", "scores", "alignment"};
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        size_t k = 0;
        while (k < sizeof known / sizeof *known && strcmp(key, known[k]))
            k++;
        if (k == sizeof known / sizeof *known)
            return nmt_seterr("unknown field '%.64s' (known: text, beam, nbest, scores, alignment)", key),
                   SERVE_BAD_REQUEST;
    }
    int align = 0, rc;
    r->beam = lim->beam;
    r->nbest = lim->nbest;
    if ((rc = get_int(o, "beam", lim->max_beam, "--max-beam", &r->beam)) ||
        (rc = get_int(o, "nbest", 256, NULL, &r->nbest)) ||
        (rc = get_bool(o, "scores", &r->scores)) || (rc = get_bool(o, "alignment", &align)))
        return rc;
    if (align)
        return nmt_seterr("'alignment' is not available: the models give no word alignments"), SERVE_BAD_REQUEST;
    if (r->nbest > r->beam)
        return nmt_seterr("'nbest' %d exceeds 'beam' %d", r->nbest, r->beam), SERVE_BAD_REQUEST;
    json_t *t = json_object_get(o, "text");
    if (!t)
        return nmt_seterr("the field 'text' (an array of strings) is missing"), SERVE_BAD_REQUEST;
    return get_text(t, lim, r);
}

int serve_request_parse(const char *body, size_t len, const struct serve_limits *lim, struct serve_request *r)
{
    memset(r, 0, sizeof *r);
    size_t bad;
    if (utf8_check(body, len, &bad) < 0)
        return nmt_seterr("the request body is not valid UTF-8 (byte %zu)", bad + 1), SERVE_BAD_REQUEST;
    json_error_t e;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &e);
    if (!o)
        return nmt_seterr("malformed JSON at line %d, column %d: %s", e.line, e.column, e.text), SERVE_BAD_REQUEST;
    int rc = SERVE_BAD_REQUEST;
    if (json_is_object(o))
        rc = get_fields(o, lim, r);
    else
        nmt_seterr("the request must be a JSON object with a 'text' array");
    json_decref(o);
    return rc;
}

/* Dumps J (consumed) into OUT. 0, or -1 with the error set. */
static int dump(json_t *j, struct nmt_buf *out)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s)
        return nmt_seterr("cannot write the answer (out of memory or invalid UTF-8)");
    out->len = 0;
    int rc = nmt_buf_append(out, s, strlen(s)) < 0 || nmt_buf_append(out, "\n", 1) < 0 ? -1 : 0;
    free(s);
    return rc;
}

/* Returns a new JSON string of the text of H (NULL: empty) through TOK, or NULL with the error set. */
static json_t *hyp_text(const struct search_hyp *h, struct tokenizer *tok)
{
    tok->text.len = 0;
    if (h && tokenizer_decode(tok, h->ids, h->n) < 0)
        return NULL;
    json_t *s = json_stringn(tok->text.len ? (const char *)tok->text.data : "", tok->text.len);
    if (!s)
        nmt_seterr("a translation is not valid UTF-8");
    return s;
}

/* Returns {"text": ..., "score": ...} of H (NULL: empty), or NULL with the error set. */
static json_t *hyp_object(const struct search_hyp *h, struct tokenizer *tok)
{
    json_t *s = hyp_text(h, tok);
    json_t *o = s ? json_object() : NULL;
    if (!o || json_object_set_new(o, "text", s) < 0 ||
        json_object_set_new(o, "score", json_real(h ? (double)h->score : 0.0)) < 0) {
        json_decref(o ? o : s);
        nmt_seterr("out of memory");
        return NULL;
    }
    return o;
}

/* Returns the answer's entry for result RES, or NULL with the error set. */
static json_t *entry(const struct serve_request *r, const struct search_result *res, struct tokenizer *tok)
{
    const struct search_hyp *best = res->nhyp ? &res->hyp[0] : NULL;
    if (r->nbest == 1 && !r->scores)
        return hyp_text(best, tok);
    json_t *o = hyp_object(best, tok);
    if (!o || r->nbest == 1)
        return o;
    json_t *list = json_array();
    if (!list || json_object_set_new(o, "nbest", list) < 0) {
        json_decref(o);
        return NULL;
    }
    for (int k = 0; k < (res->nhyp ? res->nhyp : 1); k++)
        if (json_array_append_new(list, hyp_object(res->nhyp ? &res->hyp[k] : NULL, tok)) < 0) {
            json_decref(o);
            return NULL;
        }
    return o;
}

int serve_answer(const struct serve_request *r, const struct search_result *res, struct tokenizer *tok,
                 struct nmt_buf *out)
{
    json_t *root = json_object(), *list = json_array();
    if (!root || !list || json_object_set_new(root, "translations", list) < 0) {
        json_decref(root);
        return nmt_seterr("out of memory");
    }
    for (size_t i = 0; i < r->n; i++)
        if (json_array_append_new(list, entry(r, &res[i], tok)) < 0) {
            json_decref(root);
            return -1;
        }
    return dump(root, out);
}

int serve_error_json(const char *msg, struct nmt_buf *out)
{
    char safe[512];
    size_t bad;
    if (utf8_check(msg, strlen(msg), &bad) < 0) { /* a name cut inside a character: ASCII only */
        size_t i = 0;
        for (; msg[i] && i + 1 < sizeof safe; i++)
            safe[i] = (unsigned char)msg[i] < 0x80 ? msg[i] : '?';
        safe[i] = 0;
        msg = safe;
    }
    json_t *o = json_object();
    if (!o || json_object_set_new(o, "error", json_string(msg)) < 0) {
        json_decref(o);
        return nmt_seterr("out of memory");
    }
    return dump(o, out);
}

/* ---- the client's side ---- */

int serve_request_write(char *const *text, const size_t *len, size_t n, int beam, int nbest, int scores,
                        struct nmt_buf *out)
{
    json_t *root = json_object(), *list = json_array();
    if (!root || !list || json_object_set_new(root, "text", list) < 0) {
        json_decref(root);
        return nmt_seterr("out of memory");
    }
    for (size_t i = 0; i < n; i++)
        if (json_array_append_new(list, json_stringn(text[i], len[i])) < 0) {
            json_decref(root);
            return nmt_seterr("sentence %zu of the request: not valid UTF-8, or out of memory", i + 1);
        }
    if ((beam && json_object_set_new(root, "beam", json_integer(beam)) < 0) ||
        (nbest && json_object_set_new(root, "nbest", json_integer(nbest)) < 0) ||
        (scores && json_object_set_new(root, "scores", json_true()) < 0)) {
        json_decref(root);
        return nmt_seterr("out of memory");
    }
    return dump(root, out);
}

/* Appends to OUT the line PREFIX, SCORE TAB (when SCORE is given), TEXT of hypothesis H (a string,
 * or an object with "text" and "score"). 0, or -1 with the error set. */
static int read_hyp(json_t *h, const char *prefix, struct nmt_buf *out)
{
    json_t *t = json_is_string(h) ? h : json_object_get(h, "text");
    json_t *sc = json_is_object(h) ? json_object_get(h, "score") : NULL;
    if (!json_is_string(t) || (json_is_object(h) && !json_is_number(sc)))
        return nmt_seterr("the answer's translations are neither strings nor {\"text\", \"score\"} objects");
    char num[64] = "";
    if (sc)
        snprintf(num, sizeof num, "%.6f\t", json_number_value(sc));
    if (nmt_buf_append(out, prefix, strlen(prefix)) < 0 || nmt_buf_append(out, num, strlen(num)) < 0 ||
        nmt_buf_append(out, json_string_value(t), json_string_length(t)) < 0 || nmt_buf_append(out, "\n", 1) < 0)
        return nmt_seterr("out of memory");
    return 0;
}

/* Appends the lines of entry E of the answer, for input line LINE, to OUT. 0, or -1 with the error set. */
static int read_entry(json_t *e, uint64_t line, struct nmt_buf *out)
{
    json_t *nb = json_is_object(e) ? json_object_get(e, "nbest") : NULL;
    if (!nb)
        return read_hyp(e, "", out);
    if (!json_is_array(nb) || json_array_size(nb) == 0)
        return nmt_seterr("the answer's 'nbest' is not a list of hypotheses");
    for (size_t k = 0; k < json_array_size(nb); k++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "%llu\t%zu\t", (unsigned long long)line, k + 1);
        if (read_hyp(json_array_get(nb, k), prefix, out) < 0)
            return -1;
    }
    return 0;
}

int serve_answer_read(const char *body, size_t len, size_t n, uint64_t first, struct nmt_buf *out)
{
    json_error_t err;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return nmt_seterr("the answer is not JSON: %s at line %d, column %d", err.text, err.line, err.column);
    json_t *list = json_object_get(root, "translations");
    int rc = 0;
    if (!json_is_array(list))
        rc = nmt_seterr("the answer has no 'translations' list");
    else if (json_array_size(list) != n)
        rc = nmt_seterr("the answer has %zu translations for %zu sentences", json_array_size(list), n);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = read_entry(json_array_get(list, i), first + i, out);
    json_decref(root);
    return rc;
}

int serve_error_read(const char *body, size_t len, char *msg, size_t size)
{
    msg[0] = 0;
    json_t *root = json_loadb(body, len, 0, NULL);
    json_t *m = json_object_get(root, "error");
    int rc = json_is_string(m) ? 0 : -1;
    if (rc == 0)
        snprintf(msg, size, "%s", json_string_value(m));
    json_decref(root);
    return rc;
}
