/* vocab.c: vocabularies and the vocabulary file format (see vocab.h, formats/vocab.md). */
#include "text/vocab.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "io/file.h"

static const char *const special_text[4] = {"<pad>", "<s>", "</s>", "<unk>"};
static const char *const kind_name[4] = {"special", "byte", "char", "merge"};

struct vocab *vocab_new(enum text_norm normalize)
{
    struct vocab *v = nmt_calloc(1, sizeof *v);
    if (!v)
        return NULL;
    strtab_init(&v->text);
    v->normalize = normalize;
    v->cap = 1024;
    v->kind = nmt_malloc(v->cap);
    v->left = nmt_calloc(v->cap, sizeof *v->left);
    v->right = nmt_calloc(v->cap, sizeof *v->right);
    if (!v->kind || !v->left || !v->right) {
        vocab_free(v);
        return NULL;
    }
    for (unsigned b = 0; b < 256; b++)
        snprintf(v->byte_text[b], sizeof v->byte_text[b], "<0x%02X>", b);
    for (uint32_t i = 0; i < VOCAB_FIRST_CHAR; i++)
        v->kind[i] = i < VOCAB_FIRST_BYTE ? VOCAB_SPECIAL : VOCAB_BYTE;
    v->n = VOCAB_FIRST_CHAR;
    return v;
}

void vocab_free(struct vocab *v)
{
    if (!v)
        return;
    spm_free(v->spm);
    free(v->kind);
    free(v->left);
    free(v->right);
    strtab_free(&v->text);
    free(v->options);
    free(v);
}

int vocab_set_options(struct vocab *v, const char *options)
{
    char *o = nmt_strdup(options ? options : "");
    if (!o)
        return -1;
    free(v->options);
    v->options = o;
    return 0;
}

static int grow(struct vocab *v)
{
    if (v->n < v->cap)
        return 0;
    if (v->n >= VOCAB_MAX_SIZE)
        return nmt_seterr("vocabulary too large (more than %u pieces)", VOCAB_MAX_SIZE);
    uint32_t cap = v->cap * 2;
    uint8_t *k = nmt_realloc(v->kind, cap);
    if (!k)
        return -1;
    v->kind = k;
    uint32_t *l = nmt_realloc(v->left, cap * sizeof *l);
    if (!l)
        return -1;
    v->left = l;
    uint32_t *r = nmt_realloc(v->right, cap * sizeof *r);
    if (!r)
        return -1;
    v->right = r;
    v->cap = cap;
    return 0;
}

static int64_t add_text(struct vocab *v, const char *s, size_t len, int kind, uint32_t left, uint32_t right)
{
    if (grow(v) < 0)
        return -1;
    int added;
    int64_t k = strtab_intern(&v->text, s, len, &added);
    if (k < 0)
        return -1;
    if (!added)
        return nmt_seterr("piece already in the vocabulary (id %u)", (unsigned)(VOCAB_FIRST_CHAR + k));
    uint32_t id = v->n++;
    v->kind[id] = (uint8_t)kind;
    v->left[id] = left;
    v->right[id] = right;
    return id;
}

int64_t vocab_add_char(struct vocab *v, int32_t cp)
{
    if (cp < 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return nmt_seterr("invalid code point U+%04X", (unsigned)cp);
    if (v->n > VOCAB_FIRST_CHAR && v->kind[v->n - 1] == VOCAB_MERGE)
        return nmt_seterr("character pieces must precede merge pieces");
    struct nmt_buf b = {0};
    if (utf8_put(&b, cp) < 0)
        return -1;
    int64_t id = add_text(v, (const char *)b.data, b.len, VOCAB_CHAR, 0, 0);
    nmt_buf_free(&b);
    return id;
}

int64_t vocab_add_merge(struct vocab *v, uint32_t left, uint32_t right)
{
    if (left >= v->n || right >= v->n || v->kind[left] < VOCAB_CHAR || v->kind[right] < VOCAB_CHAR)
        return nmt_seterr("merge parents must be char or merge pieces below the new id");
    uint32_t ll, rl;
    const char *ls = strtab_get(&v->text, left - VOCAB_FIRST_CHAR, &ll);
    const char *rs = strtab_get(&v->text, right - VOCAB_FIRST_CHAR, &rl);
    char stackbuf[256];
    char *buf = (size_t)ll + rl <= sizeof stackbuf ? stackbuf : nmt_malloc((size_t)ll + rl);
    if (!buf)
        return -1;
    memcpy(buf, ls, ll);
    memcpy(buf + ll, rs, rl); /* ls/rs may move once add_text grows the arena: copy first */
    int64_t id = add_text(v, buf, (size_t)ll + rl, VOCAB_MERGE, left, right);
    if (buf != stackbuf)
        free(buf);
    return id;
}

int64_t vocab_find(const struct vocab *v, const char *s, size_t len)
{
    if (v->spm)
        return spm_find(v->spm, s, len);
    int64_t k = strtab_find(&v->text, s, len);
    return k < 0 ? -1 : k + VOCAB_FIRST_CHAR;
}

const char *vocab_piece(const struct vocab *v, uint32_t id, uint32_t *len)
{
    if (v->spm)
        return spm_piece(v->spm, id, len);
    if (id >= v->n)
        return NULL;
    if (id < VOCAB_FIRST_BYTE) {
        *len = (uint32_t)strlen(special_text[id]);
        return special_text[id];
    }
    if (id < VOCAB_FIRST_CHAR) {
        *len = 6;
        return v->byte_text[id - VOCAB_FIRST_BYTE];
    }
    return strtab_get(&v->text, id - VOCAB_FIRST_CHAR, len);
}

int vocab_concat(const struct vocab *v, const uint32_t *ids, size_t n, struct nmt_buf *out)
{
    if (v->spm)
        return spm_decode(v->spm, ids, n, out);
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (id >= v->n)
            return nmt_seterr("id %u out of range (vocabulary has %u pieces)", id, v->n);
        int rc = 0;
        if (id == NMT_UNK)
            rc = nmt_buf_append(out, "\xE2\x81\x87", 3);
        else if (id < VOCAB_FIRST_BYTE)
            continue;
        else if (id < VOCAB_FIRST_CHAR) {
            unsigned char b = (unsigned char)(id - VOCAB_FIRST_BYTE);
            rc = nmt_buf_append(out, &b, 1);
        } else {
            uint32_t len;
            const char *s = strtab_get(&v->text, id - VOCAB_FIRST_CHAR, &len);
            rc = nmt_buf_append(out, s, len);
        }
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* ---- file format ---- */

static int putf(struct nmt_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int putf(struct nmt_buf *b, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line)
        return nmt_seterr("header line too long");
    return nmt_buf_append(b, line, (size_t)n);
}

/* Escapes a piece text: backslash, space and control bytes become \\ \t \n \r \xHH. */
static int escape(struct nmt_buf *b, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[5];
        size_t n;
        if (c == '\\') {
            memcpy(e, "\\\\", 2); n = 2;
        } else if (c == '\t') {
            memcpy(e, "\\t", 2); n = 2;
        } else if (c == '\n') {
            memcpy(e, "\\n", 2); n = 2;
        } else if (c == '\r') {
            memcpy(e, "\\r", 2); n = 2;
        } else if (c <= 0x20 || c == 0x7F) {
            snprintf(e, sizeof e, "\\x%02X", c); n = 4;
        } else {
            e[0] = (char)c; n = 1;
        }
        if (nmt_buf_append(b, e, n) < 0)
            return -1;
    }
    return 0;
}

/* The canonical content: "normalize NAME\n" and the pieces section, "pieces\n" to "end\n". */
static int format_body(const struct vocab *v, struct nmt_buf *b)
{
    if (putf(b, "normalize %s\npieces\n", text_norm_name(v->normalize)) < 0)
        return -1;
    for (uint32_t id = 0; id < v->n; id++) {
        uint32_t len;
        const char *s = vocab_piece(v, id, &len);
        if (putf(b, "%u\t%s\t", id, kind_name[v->kind[id]]) < 0 || escape(b, s, len) < 0)
            return -1;
        if (v->kind[id] == VOCAB_MERGE && putf(b, "\t%u\t%u", v->left[id], v->right[id]) < 0)
            return -1;
        if (nmt_buf_append(b, "\n", 1) < 0)
            return -1;
    }
    return nmt_buf_append(b, "end\n", 4);
}

uint64_t vocab_fingerprint(const struct vocab *v)
{
    if (v->spm) /* the model file, set apart from every text vocabulary by its first bytes */
        return nmt_fnv1a(NMT_FNV_INIT, v->spm->bytes, v->spm->nbytes);
    struct nmt_buf b = {0};
    uint64_t h = 0;
    if (format_body(v, &b) == 0)
        h = nmt_fnv1a(NMT_FNV_INIT, b.data, b.len);
    nmt_buf_free(&b);
    return h;
}

void vocab_fingerprint_hex(const struct vocab *v, char hex[17])
{
    snprintf(hex, 17, "%016llx", (unsigned long long)vocab_fingerprint(v));
}

int vocab_format(const struct vocab *v, struct nmt_buf *out)
{
    struct nmt_buf body = {0};
    out->len = 0;
    if (v->spm)
        return nmt_buf_append(out, v->spm->bytes, v->spm->nbytes);
    if (format_body(v, &body) < 0) {
        nmt_buf_free(&body);
        return -1;
    }
    uint32_t count[4] = {0};
    for (uint32_t id = 0; id < v->n; id++)
        count[v->kind[id]]++;
    int rc = putf(out, "nmt-vocab %d.%d\n# %u pieces: %u special, %u byte, %u char, %u merge (formats/vocab.md)\n"
                       "size %u\n", VOCAB_MAJOR, VOCAB_MINOR, v->n, count[0], count[1], count[2], count[3], v->n);
    if (rc == 0 && v->options && *v->options) {
        rc = nmt_buf_append(out, "options ", 8);
        for (const char *q = v->options; rc == 0 && *q; q++) /* one line: control bytes become '?' */
            rc = nmt_buf_append(out, (unsigned char)*q < 0x20 || *q == 0x7F ? "?" : q, 1);
        if (rc == 0)
            rc = nmt_buf_append(out, "\n", 1);
    }
    if (rc == 0)
        rc = putf(out, "fingerprint %016llx\n",
                  (unsigned long long)nmt_fnv1a(NMT_FNV_INIT, body.data, body.len));
    if (rc == 0)
        rc = nmt_buf_append(out, body.data, body.len);
    nmt_buf_free(&body);
    return rc;
}

/* ---- parser ---- */

struct parser {
    const char *data;
    size_t len, pos;
    unsigned long line;
    const char *name;
    const char *cur;           /* current line, without its newline */
    size_t curlen;
};

static int perr(struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(struct parser *p, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return nmt_seterr("%s: line %lu: %s", p->name, p->line, msg);
}

/* Reads the next line; 1 when there is one, 0 at the end, -1 when the last line has no newline. */
static int next_line(struct parser *p)
{
    if (p->pos >= p->len)
        return 0;
    p->line++;
    const char *s = p->data + p->pos;
    const char *nl = memchr(s, '\n', p->len - p->pos);
    if (!nl)
        return perr(p, "truncated: last line has no newline");
    p->cur = s;
    p->curlen = (size_t)(nl - s);
    p->pos += p->curlen + 1;
    return 1;
}

static int line_is(const struct parser *p, const char *s)
{
    return p->curlen == strlen(s) && memcmp(p->cur, s, p->curlen) == 0;
}

/* Parses a decimal u32 at *S (up to END) that is followed by a tab or END; advances *S past it. */
static int parse_u32(const char **s, const char *end, uint32_t *out)
{
    const char *q = *s;
    uint64_t v = 0;
    if (q >= end || *q < '0' || *q > '9' || (*q == '0' && q + 1 < end && q[1] >= '0' && q[1] <= '9'))
        return -1;
    while (q < end && *q >= '0' && *q <= '9') {
        v = v * 10 + (uint64_t)(*q - '0');
        if (v > UINT32_MAX)
            return -1;
        q++;
    }
    if (q < end && *q != '\t')
        return -1;
    *s = q;
    *out = (uint32_t)v;
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1; /* the writer uses upper case only: canonical form */
}

/* Unescapes field S..END into B; -1 on a bad or non-canonical escape. */
static int unescape(struct nmt_buf *b, const char *s, const char *end)
{
    b->len = 0;
    for (const char *q = s; q < end; q++) {
        unsigned char c = (unsigned char)*q;
        if (c == '\\') {
            if (++q >= end)
                return -1;
            if (*q == '\\')
                c = '\\';
            else if (*q == 't')
                c = '\t';
            else if (*q == 'n')
                c = '\n';
            else if (*q == 'r')
                c = '\r';
            else if (*q == 'x' && end - q >= 3 && hexval(q[1]) >= 0 && hexval(q[2]) >= 0) {
                c = (unsigned char)(hexval(q[1]) * 16 + hexval(q[2]));
                if ((c > 0x20 && c != 0x7F) || c == '\t' || c == '\n' || c == '\r')
                    return -1;
                q += 2;
            } else
                return -1;
        } else if (c <= 0x20 || c == 0x7F) {
            return -1;
        }
        if (nmt_buf_append(b, &c, 1) < 0)
            return -1;
    }
    return 0;
}

static int parse_header(struct parser *p, struct vocab *v, uint32_t *size, uint64_t *fp, int *have_fp)
{
    int rc = next_line(p);
    if (rc <= 0)
        return rc < 0 ? -1 : nmt_seterr("%s: empty file, not a vocabulary", p->name);
    unsigned major, minor;
    char tail;
    char first[32];
    size_t n = p->curlen < sizeof first - 1 ? p->curlen : sizeof first - 1;
    memcpy(first, p->cur, n);
    first[n] = 0;
    if (p->curlen >= sizeof first || sscanf(first, "nmt-vocab %u.%u%c", &major, &minor, &tail) != 2)
        return perr(p, "not an nmt vocabulary (expected 'nmt-vocab %d.%d')", VOCAB_MAJOR, VOCAB_MINOR);
    if (major != VOCAB_MAJOR)
        return perr(p, "unsupported vocabulary version %u.%u (this reader: %d.x)", major, minor, VOCAB_MAJOR);
    int have_size = 0, have_norm = 0;
    for (;;) {
        rc = next_line(p);
        if (rc < 0)
            return -1;
        if (rc == 0)
            return nmt_seterr("%s: truncated: no 'pieces' section", p->name);
        if (p->curlen && p->cur[0] == '#')
            continue;
        if (line_is(p, "pieces"))
            break;
        const char *sp = memchr(p->cur, ' ', p->curlen);
        if (!sp)
            return perr(p, "expected 'key value' in the header");
        size_t klen = (size_t)(sp - p->cur), vlen = p->curlen - klen - 1;
        const char *val = sp + 1;
        char vb[64];
        if (klen == 4 && memcmp(p->cur, "size", 4) == 0) {
            const char *q = val;
            if (parse_u32(&q, val + vlen, size) < 0 || q != val + vlen || *size > VOCAB_MAX_SIZE ||
                *size < VOCAB_FIRST_CHAR)
                return perr(p, "bad size (expected %u..%u)", VOCAB_FIRST_CHAR, VOCAB_MAX_SIZE);
            have_size = 1;
        } else if (klen == 9 && memcmp(p->cur, "normalize", 9) == 0) {
            int m = -1;
            if (vlen < sizeof vb) {
                memcpy(vb, val, vlen);
                vb[vlen] = 0;
                m = text_norm_parse(vb);
            }
            if (m < 0)
                return perr(p, "unknown normalization (expected none, nfkc or nfkc_cf)");
            v->normalize = (enum text_norm)m;
            have_norm = 1;
        } else if (klen == 11 && memcmp(p->cur, "fingerprint", 11) == 0) {
            uint64_t h = 0;
            if (vlen != 16)
                return perr(p, "bad fingerprint (expected 16 hex digits)");
            for (size_t i = 0; i < 16; i++) {
                char c = val[i];
                int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
                if (d < 0)
                    return perr(p, "bad fingerprint (expected 16 hex digits)");
                h = h << 4 | (uint64_t)d;
            }
            *fp = h;
            *have_fp = 1;
        } else if (klen == 7 && memcmp(p->cur, "options", 7) == 0) {
            struct nmt_buf b = {0};
            int bad = nmt_buf_append(&b, val, vlen) < 0 || nmt_buf_append(&b, "", 1) < 0;
            for (size_t i = 0; !bad && i < vlen; i++)
                bad = (unsigned char)val[i] < 0x20 || val[i] == 0x7F;
            if (bad || vocab_set_options(v, (char *)b.data) < 0) {
                nmt_buf_free(&b);
                return perr(p, "bad options line (control characters)");
            }
            nmt_buf_free(&b);
        }
        /* other keys: ignored, so that later minor versions can add fields */
    }
    if (!have_size)
        return perr(p, "header has no 'size' line");
    if (!have_norm)
        return perr(p, "header has no 'normalize' line");
    return 0;
}

/* The id and kind fields of a piece line (P's current line) that must hold piece ID: *KIND set and
 * *Q at the piece text; 0, or -1 with the error set. */
static int parse_piece_head(struct parser *p, uint32_t id, const char **q, int *kind)
{
    const char *end = p->cur + p->curlen;
    uint32_t got;
    *q = p->cur;
    if (parse_u32(q, end, &got) < 0 || *q == end)
        return perr(p, "expected 'id<TAB>kind<TAB>piece'");
    if (got != id)
        return perr(p, "piece id %u out of order (expected %u)", got, id);
    (*q)++;
    const char *tab = memchr(*q, '\t', (size_t)(end - *q));
    if (!tab)
        return perr(p, "expected 'id<TAB>kind<TAB>piece'");
    *kind = -1;
    for (int k = 0; k < 4; k++)
        if ((size_t)(tab - *q) == strlen(kind_name[k]) && memcmp(*q, kind_name[k], (size_t)(tab - *q)) == 0)
            *kind = k;
    if (*kind < 0)
        return perr(p, "unknown piece kind '%.*s'", (int)(tab - *q < 20 ? tab - *q : 20), *q);
    *q = tab + 1;
    return 0;
}

/* A merge piece ID of text B whose fields after the text start at Q: its parents checked and the
 * merge added to V; 0, or -1 with the error set. */
static int add_merge_piece(struct parser *p, struct vocab *v, uint32_t id, const struct nmt_buf *b, const char *q)
{
    const char *end = p->cur + p->curlen;
    uint32_t l, r;
    if (q == end || (q++, parse_u32(&q, end, &l) < 0) || q == end || (q++, parse_u32(&q, end, &r) < 0) ||
        q != end)
        return perr(p, "merge piece needs 'id<TAB>merge<TAB>piece<TAB>left<TAB>right'");
    if (l >= id || r >= id || v->kind[l] < VOCAB_CHAR || v->kind[r] < VOCAB_CHAR)
        return perr(p, "merge parents must be char or merge pieces with smaller ids");
    uint32_t ll, rl;
    const char *ls = vocab_piece(v, l, &ll), *rs = vocab_piece(v, r, &rl);
    if ((size_t)ll + rl != b->len || memcmp(b->data, ls, ll) != 0 || memcmp(b->data + ll, rs, rl) != 0)
        return perr(p, "merge piece text is not the concatenation of pieces %u and %u", l, r);
    if (vocab_add_merge(v, l, r) < 0)
        return perr(p, "%s", nmt_errmsg());
    return 0;
}

/* Piece ID from P's current line into V (B: room for its text); 0, or -1 with the error set. */
static int parse_piece(struct parser *p, struct vocab *v, uint32_t id, struct nmt_buf *b)
{
    const char *q, *end = p->cur + p->curlen;
    int kind;
    if (parse_piece_head(p, id, &q, &kind) < 0)
        return -1;
    const char *fend = memchr(q, '\t', (size_t)(end - q));
    if (!fend)
        fend = end;
    if (unescape(b, q, fend) < 0)
        return perr(p, "bad escape in piece text");
    int want = id < VOCAB_FIRST_BYTE ? VOCAB_SPECIAL : id < VOCAB_FIRST_CHAR ? VOCAB_BYTE : -1;
    if (want >= 0) {
        uint32_t len;
        const char *s = vocab_piece(v, id, &len);
        if (kind != want || b->len != len || memcmp(b->data, s, len) != 0 || fend != end)
            return perr(p, "piece %u must be %s '%s'", id, kind_name[want], s);
        return 0;
    }
    if (kind == VOCAB_MERGE)
        return add_merge_piece(p, v, id, b, fend);
    if (kind != VOCAB_CHAR)
        return perr(p, "%s piece not allowed at id %u", kind_name[kind], id);
    int32_t cp = -1;
    if (b->len == 0 || fend != end || utf8_next(b->data, b->len, &cp) != (int)b->len || cp < 0)
        return perr(p, "char piece must be one valid UTF-8 character");
    if (vocab_add_char(v, cp) < 0)
        return perr(p, "%s", nmt_errmsg());
    return 0;
}

static int parse_pieces(struct parser *p, struct vocab *v, uint32_t size)
{
    struct nmt_buf b = {0};
    int rc = -1;
    for (uint32_t id = 0;; id++) {
        int r = next_line(p);
        if (r < 0)
            goto out;
        if (r == 0) {
            nmt_seterr("%s: truncated after %u pieces (no 'end' line)", p->name, id);
            goto out;
        }
        if (line_is(p, "end")) {
            if (id != size) {
                perr(p, "%u pieces, but the header says size %u", id, size);
                goto out;
            }
            break;
        }
        if (id >= size) {
            perr(p, "more pieces than the header's size %u", size);
            goto out;
        }
        if (parse_piece(p, v, id, &b) < 0)
            goto out;
    }
    if (p->pos != p->len) {
        p->line++;
        perr(p, "unexpected data after 'end'");
        goto out;
    }
    rc = 0;
out:
    nmt_buf_free(&b);
    return rc;
}

/* A vocabulary of the SentencePiece model in DATA (LEN bytes): NULL with the error set. */
static struct vocab *spm_vocab(const char *data, size_t len, const char *name)
{
    struct vocab *v = nmt_calloc(1, sizeof *v);
    if (!v)
        return NULL;
    strtab_init(&v->text);
    v->normalize = TEXT_NORM_NONE;
    if (!(v->spm = spm_parse(data, len, name))) {
        vocab_free(v);
        return NULL;
    }
    v->n = v->spm->n_nmt;
    return v;
}

struct vocab *vocab_parse(const char *data, size_t len, const char *name)
{
    if (spm_sniff(data, len))
        return spm_vocab(data, len, name);
    struct parser p = {data, len, 0, 0, name, NULL, 0};
    struct vocab *v = vocab_new(TEXT_NORM_NFKC);
    if (!v)
        return NULL;
    uint32_t size = 0;
    uint64_t fp = 0;
    int have_fp = 0;
    if (parse_header(&p, v, &size, &fp, &have_fp) < 0 || parse_pieces(&p, v, size) < 0) {
        vocab_free(v);
        return NULL;
    }
    if (!have_fp) {
        nmt_seterr("%s: header has no 'fingerprint' line", name);
        vocab_free(v);
        return NULL;
    }
    uint64_t h = vocab_fingerprint(v);
    if (h != fp) {
        nmt_seterr("%s: fingerprint mismatch: header says %016llx, content gives %016llx (file edited or corrupt)",
                   name, (unsigned long long)fp, (unsigned long long)h);
        vocab_free(v);
        return NULL;
    }
    return v;
}

struct vocab *vocab_load(const char *path)
{
    int fd = nmt_open_in(path);
    if (fd < 0)
        return NULL;
    const char *name = nmt_path_name(path, 0);
    struct nmt_buf b = {0};
    struct vocab *v = NULL;
    for (;;) {
        if (nmt_buf_reserve(&b, 65536) < 0)
            goto out;
        ssize_t n = read(fd, b.data + b.len, b.cap - b.len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            nmt_seterr("cannot read '%s': %s", name, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        b.len += (size_t)n;
        if (b.len - (size_t)n < 10 && b.len >= 10 && memcmp(b.data, "nmt-vocab ", 10) != 0 && !spm_sniff(b.data, b.len)) {
            nmt_seterr("%s: line 1: not an nmt vocabulary (expected 'nmt-vocab %d.%d'; nothing more was read)", name,
                       VOCAB_MAJOR, VOCAB_MINOR);
            goto out;
        }
        if (b.len > VOCAB_MAX_FILE) {
            nmt_seterr("%s: larger than %u bytes, not a vocabulary", name, VOCAB_MAX_FILE);
            goto out;
        }
    }
    v = vocab_parse((const char *)b.data, b.len, name);
out:
    if (fd != 0)
        close(fd);
    nmt_buf_free(&b);
    return v;
}
