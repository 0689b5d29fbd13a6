/* yaml.c: the flat YAML subset of Marian's files (see yaml.h). The text is read a line at a time:
 * a line at indentation 0 holds "key: value" or "key:", the indented lines after a bare "key:" its
 * list; scalars are read by one function for keys, values and flow-list items. */
#include "text/yaml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strtab.h"
#include "base/utf8.h"
#include "base/util.h"

/* Where a scalar stands, which decides where a plain one ends. */
enum ctx { CTX_KEY, CTX_VALUE, CTX_FLOW };

/* The reader: the current line S[0..N) (no newline), position I, its number LINE. */
struct yp {
    const char *s;
    size_t n, i;
    uint32_t line;
    const char *name;
    struct nmt_buf tmp;        /* the scalar being read */
};

static int yp_err(const struct yp *p, const char *what)
{
    return nmt_seterr("%s: line %u: %s", p->name, p->line, what);
}

static void yp_ws(struct yp *p)
{
    while (p->i < p->n && p->s[p->i] == ' ')
        p->i++;
}

/* Whether the rest of the line is blank or a comment. */
static int yp_end(struct yp *p)
{
    yp_ws(p);
    return p->i >= p->n || p->s[p->i] == '#';
}

static int hexdigit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One escape after a backslash in a double-quoted scalar, appended to p->tmp. 0 or -1. */
static int yp_escape(struct yp *p)
{
    static const char simple[] = "a\ab\bt\tn\nv\vf\fr\re\x1b \040\"\"//\\\\";
    if (p->i >= p->n)
        return yp_err(p, "unterminated double-quoted scalar (multi-line scalars are not read)");
    char c = p->s[p->i++];
    for (size_t k = 0; simple[k]; k += 2)
        if (simple[k] == c)
            return nmt_buf_append(&p->tmp, &simple[k + 1], 1);
    int32_t cp = c == 'N' ? 0x85 : c == '_' ? 0xA0 : c == 'L' ? 0x2028 : c == 'P' ? 0x2029 : -1;
    int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (c == '0')
        return yp_err(p, "escape \\0 (a NUL byte) in a scalar is not read");
    if (cp < 0 && !digits)
        return yp_err(p, "unknown escape in a double-quoted scalar");
    if (digits) {
        uint32_t v = 0;
        for (int k = 0; k < digits; k++) {
            int h = p->i < p->n ? hexdigit(p->s[p->i]) : -1;
            if (h < 0)
                return yp_err(p, "bad hexadecimal escape in a double-quoted scalar");
            v = v * 16 + (uint32_t)h;
            p->i++;
        }
        if (v == 0 || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return yp_err(p, "escape of a NUL, a surrogate or beyond U+10FFFF");
        cp = (int32_t)v;
    }
    return utf8_put(&p->tmp, cp);
}

/* A quoted scalar (the quote at p->i) into p->tmp. 0 or -1. */
static int yp_quoted(struct yp *p)
{
    char q = p->s[p->i++];
    for (;;) {
        if (p->i >= p->n)
            return yp_err(p, "unterminated quoted scalar (multi-line scalars are not read)");
        char c = p->s[p->i++];
        if (c == q && q == '\'' && p->i < p->n && p->s[p->i] == '\'') {
            p->i++;
        } else if (c == q) {
            return 0;
        } else if (c == '\\' && q == '"') {
            if (yp_escape(p) < 0)
                return -1;
            continue;
        } else if ((unsigned char)c < 0x20 && c != '\t') {
            return yp_err(p, "control character in a quoted scalar");
        }
        if (nmt_buf_append(&p->tmp, &c, 1) < 0)
            return -1;
    }
}

/* A plain scalar in context CTX into p->tmp. 0 or -1. */
static int yp_plain(struct yp *p, enum ctx ctx)
{
    char c = p->s[p->i];
    if (strchr("|>", c))
        return yp_err(p, "block scalars ('|', '>') are not read");
    if (strchr("&*", c))
        return yp_err(p, "anchors and aliases are not read");
    if (c == '!')
        return yp_err(p, "tags are not read");
    if (c == '{')
        return yp_err(p, "flow mappings are not read");
    if (strchr("@`", c) || (ctx != CTX_VALUE && strchr("[]?,", c)))
        return yp_err(p, "a plain scalar starts with a reserved indicator");
    size_t start = p->i, end;
    for (; p->i < p->n; p->i++) {
        c = p->s[p->i];
        int next_blank = p->i + 1 >= p->n || p->s[p->i + 1] == ' ';
        if (c == ':' && next_blank && ctx == CTX_KEY)
            break;
        if (c == ':' && next_blank)
            return yp_err(p, "': ' inside a plain value (nested mappings are not read)");
        if (c == '#' && p->i > start && p->s[p->i - 1] == ' ')
            break;
        if (ctx == CTX_FLOW && (c == ',' || c == ']' || c == '[' || c == '{' || c == '}'))
            break;
        if ((unsigned char)c < 0x20 && c != '\t')
            return yp_err(p, "control character in a plain scalar");
    }
    for (end = p->i; end > start && (p->s[end - 1] == ' ' || p->s[end - 1] == '\t'); end--)
        ;
    return nmt_buf_append(&p->tmp, p->s + start, end - start);
}

/* A scalar in context CTX at p->i (after blanks), ended as CTX wants (a ':' for a key, the line's
 * end for a value, ',' or ']' for a flow item, left at p->i). Returns a malloc'ed copy, or NULL
 * with the error set. */
static char *yp_scalar(struct yp *p, enum ctx ctx)
{
    yp_ws(p);
    p->tmp.len = 0;
    int quoted = p->i < p->n && (p->s[p->i] == '"' || p->s[p->i] == '\'');
    if (p->i < p->n && (quoted ? yp_quoted(p) : yp_plain(p, ctx)) < 0)
        return NULL;
    yp_ws(p);
    if (ctx == CTX_KEY && (p->i >= p->n || p->s[p->i] != ':')) {
        yp_err(p, "expected 'key: value' (a mapping of scalars)");
        return NULL;
    }
    if (ctx == CTX_VALUE && !yp_end(p)) {
        yp_err(p, "unexpected text after a value");
        return NULL;
    }
    if (ctx == CTX_FLOW && (p->i >= p->n || (p->s[p->i] != ',' && p->s[p->i] != ']'))) {
        yp_err(p, "expected ',' or ']' in a flow list");
        return NULL;
    }
    if (p->tmp.len && memchr(p->tmp.data, 0, p->tmp.len)) {
        yp_err(p, "NUL byte in a scalar");
        return NULL;
    }
    char *s = nmt_malloc(p->tmp.len + 1);
    if (s) {
        if (p->tmp.len)
            memcpy(s, p->tmp.data, p->tmp.len);
        s[p->tmp.len] = 0;
    }
    return s;
}

/* Appends the scalar S (owned: freed on failure) to IT's list. 0 or -1. */
static int item_push(struct yaml_item *it, char *s)
{
    if (!s)
        return -1;
    if (NMT_GROW(it->list, it->list_cap, it->nlist + 1) < 0) {
        free(s);
        return -1;
    }
    it->list[it->nlist++] = s;
    return 0;
}

/* A flow list "[a, b]" at p->i into IT. 0 or -1. */
static int yp_flow(struct yp *p, struct yaml_item *it)
{
    it->is_list = 1;
    p->i++;
    yp_ws(p);
    if (p->i < p->n && p->s[p->i] == ']') {
        p->i++;
    } else {
        for (;;) {
            if (item_push(it, yp_scalar(p, CTX_FLOW)) < 0)
                return -1;
            if (p->s[p->i++] == ']')
                break;
        }
    }
    return yp_end(p) ? 0 : yp_err(p, "unexpected text after a flow list");
}

static void item_free(struct yaml_item *it)
{
    free(it->key);
    free(it->value);
    for (size_t k = 0; k < it->nlist; k++)
        free(it->list[k]);
    free(it->list);
}

void yaml_free(struct yaml_map *m)
{
    for (size_t i = 0; i < m->n; i++)
        item_free(&m->item[i]);
    free(m->item);
    memset(m, 0, sizeof *m);
}

const struct yaml_item *yaml_get(const struct yaml_map *m, const char *key)
{
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->item[i].key, key))
            return &m->item[i];
    return NULL;
}

/* Appends an empty item with KEY (owned: freed on failure). Returns it, or NULL. */
static struct yaml_item *map_push(struct yaml_map *m, char *key)
{
    if (!key || NMT_GROW(m->item, m->cap, m->n + 1) < 0) {
        free(key);
        return NULL;
    }
    struct yaml_item *it = &m->item[m->n++];
    memset(it, 0, sizeof *it);
    it->key = key;
    return it;
}

/* The line of an item at indentation 0 (the reader at its first byte) into M; *OPEN is set when it
 * ends in a bare "key:" that may start a list. KEYS holds the keys seen. 0 or -1. */
static int yp_item(struct yp *p, struct yaml_map *m, struct strtab *keys, int *open)
{
    if (p->s[p->i] == '-' && (p->i + 1 >= p->n || p->s[p->i + 1] == ' '))
        return yp_err(p, "a list item without a key (a top-level list, not a mapping)");
    char *key = yp_scalar(p, CTX_KEY);
    if (!key)
        return -1;
    int added;
    if (strtab_intern(keys, key, strlen(key), &added) < 0) {
        free(key);
        return -1;
    }
    if (!added) {
        free(key);
        return yp_err(p, "duplicate key");
    }
    struct yaml_item *it = map_push(m, key);
    if (!it)
        return -1;
    it->line = p->line;
    p->i++; /* the ':' */
    *open = 0;
    if (yp_end(p)) {
        *open = 1;
        return 0;
    }
    if (p->s[p->i] == '[')
        return yp_flow(p, it);
    return (it->value = yp_scalar(p, CTX_VALUE)) ? 0 : -1;
}

/* An indented line (or a "- item" line) after a bare "key:" (IT): a list item, or a flow list
 * when IT has no items yet. 0 or -1. */
static int yp_list_line(struct yp *p, struct yaml_item *it, int *open)
{
    if (p->s[p->i] == '[' && !it->is_list) {
        *open = 0;
        return yp_flow(p, it);
    }
    if (p->s[p->i] != '-' || (p->i + 1 < p->n && p->s[p->i + 1] != ' '))
        return yp_err(p, "indented text that is not a list item (nested mappings are not read)");
    p->i++;
    it->is_list = 1;
    if (yp_end(p))
        return item_push(it, nmt_strdup(""));
    if (p->s[p->i] == '-' || p->s[p->i] == '[')
        return yp_err(p, "nested lists are not read");
    return item_push(it, yp_scalar(p, CTX_VALUE));
}

/* Reads the lines of D (LEN bytes, valid UTF-8 without NUL) into M. 0 or -1. */
static int yp_lines(struct yp *p, const char *d, size_t len, struct yaml_map *m, struct strtab *keys)
{
    int open = 0, any = 0;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(d + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - d) : len;
        p->s = d + at;
        p->n = end - at - (end > at && d[end - 1] == '\r');
        p->i = 0;
        p->line++;
        at = end + 1;
        yp_ws(p);
        size_t indent = p->i;
        if (p->i < p->n && p->s[p->i] == '\t' && !yp_end(p))
            return yp_err(p, "tab in indentation");
        if (yp_end(p))
            continue;
        if (indent == 0 && p->n == 3 && (!memcmp(p->s, "---", 3) || !memcmp(p->s, "...", 3))) {
            if (p->s[0] == '.' || any)
                break;
            continue;
        }
        any = 1;
        int list_line = indent > 0 || (p->s[0] == '-' && (p->n == 1 || p->s[1] == ' '));
        if (open && list_line) {
            if (yp_list_line(p, &m->item[m->n - 1], &open) < 0)
                return -1;
            continue;
        }
        if (open && !m->item[m->n - 1].is_list && !(m->item[m->n - 1].value = nmt_strdup("")))
            return -1;
        if (indent > 0)
            return yp_err(p, "unexpected indentation (nested mappings are not read)");
        if (yp_item(p, m, keys, &open) < 0)
            return -1;
    }
    if (open && !m->item[m->n - 1].is_list && !(m->item[m->n - 1].value = nmt_strdup("")))
        return -1;
    return 0;
}

int yaml_parse(const char *data, size_t len, const char *name, struct yaml_map *m)
{
    memset(m, 0, sizeof *m);
    if (len > YAML_MAX_FILE)
        return nmt_seterr("%s: larger than %u bytes", name, YAML_MAX_FILE);
    while (len > 0 && data[len - 1] == 0)
        len--;
    const char *nul = len ? memchr(data, 0, len) : NULL;
    if (nul)
        return nmt_seterr("%s: byte %zu: NUL byte in YAML text", name, (size_t)(nul - data));
    size_t bad;
    if (utf8_check(data, len, &bad) < 0)
        return nmt_seterr("%s: byte %zu: invalid UTF-8", name, bad);
    if (len >= 3 && !memcmp(data, "\xEF\xBB\xBF", 3)) {
        data += 3;
        len -= 3;
    }
    struct yp p = {.name = name};
    struct strtab keys;
    strtab_init(&keys);
    int rc = yp_lines(&p, data, len, m, &keys);
    strtab_free(&keys);
    nmt_buf_free(&p.tmp);
    if (rc < 0)
        yaml_free(m);
    return rc;
}

int yaml_set(struct yaml_map *m, const char *key, const char *value)
{
    if (yaml_get(m, key))
        return nmt_seterr("YAML key '%s' set twice", key);
    struct yaml_item *it = map_push(m, nmt_strdup(key));
    if (!it)
        return -1;
    return (it->value = nmt_strdup(value)) ? 0 : -1;
}

int yaml_set_list(struct yaml_map *m, const char *key, const char *const *items, size_t n)
{
    if (yaml_get(m, key))
        return nmt_seterr("YAML key '%s' set twice", key);
    struct yaml_item *it = map_push(m, nmt_strdup(key));
    if (!it)
        return -1;
    it->is_list = 1;
    for (size_t k = 0; k < n; k++)
        if (item_push(it, nmt_strdup(items[k])) < 0)
            return -1;
    return 0;
}

/* Whether code point CP must be escaped in a double-quoted scalar (a control, a line break, the BOM). */
static int needs_escape(int32_t cp)
{
    return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 || cp == 0xFEFF;
}

/* Whether S (LEN bytes of valid UTF-8) reads back as itself when written plain, as a key or a value. */
static int plain_ok(const char *s, size_t len)
{
    static const char *const nulls[] = {"~", "null", "Null", "NULL"};
    if (len == 0 || strchr("-?:,[]{}#&*!|>'\"%@` \t", s[0]) || s[len - 1] == ' ')
        return 0;
    for (size_t k = 0; k < sizeof nulls / sizeof nulls[0]; k++)
        if (strlen(nulls[k]) == len && !memcmp(s, nulls[k], len))
            return 0;
    for (size_t i = 0; i < len;) {
        int32_t cp;
        int l = utf8_next((const unsigned char *)s + i, len - i, &cp);
        if (cp < 0 || needs_escape(cp) || strchr(",[]{}", (int)(cp < 128 ? cp : 'x')) ||
            (cp == ':' && (i + 1 >= len || s[i + 1] == ' ')) || (cp == '#' && s[i - 1] == ' '))
            return 0;
        i += (size_t)l;
    }
    return 1;
}

int yaml_put_scalar(struct nmt_buf *out, const char *s, size_t len)
{
    size_t bad;
    if (utf8_check(s, len, &bad) < 0)
        return nmt_seterr("scalar '%.*s' is not valid UTF-8 (byte %zu)", (int)(len < 40 ? len : 40), s, bad);
    if (plain_ok(s, len))
        return nmt_buf_append(out, s, len);
    if (nmt_buf_append(out, "\"", 1) < 0)
        return -1;
    for (size_t i = 0; i < len;) {
        int32_t cp;
        int l = utf8_next((const unsigned char *)s + i, len - i, &cp);
        char esc[12];
        int rc;
        if (cp == '"' || cp == '\\') {
            esc[0] = '\\';
            esc[1] = (char)cp;
            rc = nmt_buf_append(out, esc, 2);
        } else if (needs_escape(cp)) {
            rc = nmt_buf_append(out, esc, (size_t)snprintf(esc, sizeof esc, cp < 0x100 ? "\\x%02X" : "\\u%04X",
                                                           (unsigned)cp));
        } else {
            rc = nmt_buf_append(out, s + i, (size_t)l);
        }
        if (rc < 0)
            return -1;
        i += (size_t)l;
    }
    return nmt_buf_append(out, "\"", 1);
}

int yaml_format(const struct yaml_map *m, struct nmt_buf *out)
{
    for (size_t i = 0; i < m->n; i++) {
        const struct yaml_item *it = &m->item[i];
        if (yaml_put_scalar(out, it->key, strlen(it->key)) < 0 || nmt_buf_append(out, ":", 1) < 0)
            return -1;
        if (!it->is_list) {
            if (nmt_buf_append(out, " ", 1) < 0 || yaml_put_scalar(out, it->value, strlen(it->value)) < 0)
                return -1;
        } else if (it->nlist == 0 && nmt_buf_append(out, " []", 3) < 0) {
            return -1;
        }
        for (size_t k = 0; k < it->nlist; k++)
            if (nmt_buf_append(out, "\n  - ", 5) < 0 || yaml_put_scalar(out, it->list[k], strlen(it->list[k])) < 0)
                return -1;
        if (nmt_buf_append(out, "\n", 1) < 0)
            return -1;
    }
    return 0;
}
