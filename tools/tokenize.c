/* nmt-tokenize: raw text to token or id streams, and ids back to text (see nmt-tokenize(1)). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text/tokenizer.h"
#include "io/lines.h"
#include "io/stream.h"
#include "io/records.h"
#include "text/normalize.h"
#include "cli/cli.h"
#include "cli/opt.h"
#include "text/vocab.h"


enum { TEXT_OFF = 0, TEXT_PIECES = 1, TEXT_IDS = 2 };

struct opts {
    const char *in, *out, *src, *tgt, *vocab_path;
    int csv;
    int tsv;                   /* plain TSV: fields split at tabs, quotes are data */
    unsigned char delim;
    unsigned nfields;
    unsigned field[2];         /* 0-based columns */
    int norm;                  /* -1: not given */
    double dropout;
    uint64_t seed;
    uint64_t max_line;         /* --max-line-bytes */
    int text, decode, skip_bad, quiet;
    int delim_set, fields_set, dropout_set, seed_set; /* given on the command line */
};

struct state {
    const struct opts *o;
    enum text_norm norm;
    struct vocab *v;
    int encode;                /* text to ids (a vocabulary, not --decode) */
    struct tokenizer tk[2];    /* one per side: the pieces of both stay alive for the record */
    struct rec_writer *w;
    struct out_file out;       /* the output, written to a temporary file when named */
    FILE *tf;                  /* text output */
    struct nmt_buf rec;
    struct nmt_buf line;       /* a line of --text=ids */
    uint64_t *dec;             /* (ndec) --text=ids: the digits of each id and a space, their count in the last byte */
    uint32_t ndec;
    const char **tokp[2];
    uint32_t *tokl[2];
    size_t tokcap[2];
    uint32_t *ids[2], nids[2], capids[2];
    uint64_t written;
    uint64_t bad_utf8, bad_fields, bad_unpaired, bad_csv;
};

static int grow_tok(struct state *st, unsigned s, uint32_t n)
{
    if (NMT_GROW2(st->tokp[s], st->tokl[s], st->tokcap[s], n) < 0)
        return -1;
    return 0;
}

/* Writes the decimal digits of V at D; returns the end. */
static char *put_u32(char *d, uint32_t v)
{
    static const char pairs[201] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                   "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                   "8081828384858687888990919293949596979899";
    char tmp[10], *e = tmp + sizeof tmp, *p = e;
    while (v >= 100) {
        unsigned r = v % 100;
        v /= 100;
        p -= 2, memcpy(p, pairs + 2 * r, 2);
    }
    if (v >= 10)
        p -= 2, memcpy(p, pairs + 2 * v, 2);
    else
        *--p = (char)('0' + v);
    memcpy(d, p, (size_t)(e - p));
    return d + (e - p);
}

/* Prints the ids of the record's NSIDES sides as one line of text (space-separated decimal ids, a
 * tab between the sides), formatted in ST->line and written at once; an id below the vocabulary's
 * size (and 10^6) from ST->dec: its digits and a space in 8 bytes, their count in the last. 0, or
 * -1 with the error set. */
static int put_ids_line(struct state *st, unsigned nsides)
{
    if (!st->dec) {
        st->ndec = st->v->n < 1000000 ? st->v->n : 1000000;
        if (!(st->dec = nmt_malloc(((size_t)st->ndec + 1) * sizeof *st->dec)))
            return -1;
        for (uint32_t id = 0; id < st->ndec; id++) {
            char d[8] = {0};
            char *e = put_u32(d, id);
            *e++ = ' ';
            d[7] = (char)(e - d);
            memcpy(&st->dec[id], d, 8);
        }
    }
    size_t need = 1;
    for (unsigned s = 0; s < nsides; s++)
        need += 11 * (size_t)st->nids[s] + 8;
    st->line.len = 0;
    if (nmt_buf_reserve(&st->line, need) < 0)
        return -1;
    char *d = (char *)st->line.data;
    for (unsigned s = 0; s < nsides; s++) {
        const uint32_t *ids = st->ids[s];
        for (uint32_t i = 0; i < st->nids[s]; i++) {
            if (ids[i] < st->ndec) {
                memcpy(d, &st->dec[ids[i]], 8); /* the digits, the space, junk after them */
                d += (unsigned char)d[7];
            } else {
                d = put_u32(d, ids[i]);
                *d++ = ' ';
            }
        }
        if (st->nids[s])
            d--; /* the last space */
        *d++ = s + 1 < nsides ? '\t' : '\n';
    }
    size_t n = (size_t)(d - (char *)st->line.data);
    if (fwrite(st->line.data, 1, n, st->tf) != n || ferror(st->tf))
        return nmt_seterr("write failed: %s", strerror(errno));
    return 0;
}

/* Handles one record of NSIDES texts. Returns 0 (written), 1 (bad, message in nmt_errmsg) or -1 (fatal). */
static int process(struct state *st, uint64_t index, unsigned nsides, const char *const *text, const size_t *len,
                   unsigned *bad_side)
{
    for (unsigned s = 0; s < nsides; s++) {
        size_t bad;
        if (utf8_check(text[s], len[s], &bad) < 0) {
            *bad_side = s;
            st->bad_utf8++;
            nmt_seterr("invalid UTF-8 at byte %zu", bad + 1);
            return 1;
        }
    }
    for (unsigned s = 0; s < nsides; s++) {
        if (st->encode && st->o->dropout > 0)
            tokenizer_reseed(&st->tk[s], index * 2 + s);
        int rc = st->encode ? tokenizer_encode(&st->tk[s], text[s], len[s], &st->ids[s], &st->nids[s], &st->capids[s])
                            : tokenizer_pieces(&st->tk[s], text[s], len[s]);
        if (rc == TOKENIZER_EBADTEXT) {
            *bad_side = s;
            st->bad_utf8++;
            return 1;
        }
        if (rc < 0)
            return -1;
        struct pretok *p = &st->tk[s].pt;
        if (!st->encode) {
            if (grow_tok(st, s, p->n) < 0)
                return -1;
            for (uint32_t i = 0; i < p->n; i++) {
                st->tokp[s][i] = (const char *)p->text.data + p->off[i];
                st->tokl[s][i] = p->len[i];
            }
        }
    }
    if (st->tf && st->encode && st->o->text == TEXT_IDS) {
        if (put_ids_line(st, nsides) < 0)
            return -1;
    } else if (st->tf) {
        FILE *f = st->tf;
        for (unsigned s = 0; s < nsides; s++) {
            if (s)
                putc('\t', f);
            if (st->encode) {
                for (uint32_t i = 0; i < st->nids[s]; i++) {
                    if (i)
                        putc(' ', f);
                    uint32_t pl;
                    const char *piece = vocab_piece(st->v, st->ids[s][i], &pl);
                    nmt_put_token(f, piece, pl);
                }
            } else {
                for (uint32_t i = 0; i < st->tk[s].pt.n; i++) {
                    if (i)
                        putc(' ', f);
                    nmt_put_token(f, st->tokp[s][i], st->tokl[s][i]);
                }
            }
        }
        putc('\n', f);
        if (ferror(f))
            return nmt_seterr("write failed: %s", strerror(errno));
    } else {
        int rc;
        if (st->encode) {
            const uint32_t *idp[2] = {st->ids[0], st->ids[1]};
            rc = ids_record_encode(&st->rec, index, nsides, st->nids, idp);
        } else {
            uint32_t ntok[2] = {st->tk[0].pt.n, st->tk[1].pt.n};
            const char *const *tp[2] = {st->tokp[0], st->tokp[1]};
            const uint32_t *lp[2] = {st->tokl[0], st->tokl[1]};
            rc = tok_record_encode(&st->rec, index, nsides, ntok, tp, lp);
        }
        if (rc < 0 || rec_write(st->w, st->rec.data, st->rec.len) < 0)
            return -1;
        st->rec.len = 0;
    }
    st->written++;
    return 0;
}

/* Reports a bad record: fatal without --skip-bad (returns -1), else counted (returns 0). */
static int bad_record(struct state *st, const char *name, uint64_t line)
{
    if (!st->o->skip_bad) {
        nmt_seterr("%s: line %llu: %s", name, (unsigned long long)line, nmt_errmsg());
        return -1;
    }
    return 0;
}

/* ---- plain lines, line-aligned pairs and tables ---- */
static int run_lines(struct state *st, const char *path)
{
    struct line_reader r;
    if (line_reader_open(&r, path, st->o->max_line) < 0)
        return -1;
    int rc;
    char *line;
    size_t len;
    while ((rc = line_next(&r, &line, &len)) == 1) {
        const char *t[1] = {line};
        unsigned side;
        int p = process(st, r.line - 1, 1, t, &len, &side);
        if (p < 0 || (p == 1 && bad_record(st, r.name, r.line) < 0)) {
            rc = -1;
            break;
        }
    }
    line_reader_close(&r);
    return rc;
}

static int run_pairs(struct state *st)
{
    struct line_reader a, b;
    if (line_reader_open(&a, st->o->src, st->o->max_line) < 0)
        return -1;
    if (line_reader_open(&b, st->o->tgt, st->o->max_line) < 0) {
        line_reader_close(&a);
        return -1;
    }
    int rc;
    char *pa, *pb;
    size_t l[2];
    while ((rc = line_pair_next(&a, &b, &pa, &l[0], &pb, &l[1])) != 0) {
        if (rc == LINES_UNPAIRED && st->o->skip_bad) {
            st->bad_unpaired++;
            continue;
        }
        if (rc != 1) {
            rc = -1;
            break;
        }
        const char *t[2] = {pa, pb};
        unsigned side = 0;
        int p = process(st, a.line - 1, 2, t, l, &side);
        if (p < 0 || (p == 1 && bad_record(st, side ? b.name : a.name, a.line) < 0)) {
            rc = -1;
            break;
        }
    }
    line_reader_close(&a);
    line_reader_close(&b);
    return rc;
}

/* Handles row T of a table: 0 (written, or bad and skipped), or -1 with the error set. */
static int table_row(struct state *st, const struct table_reader *t)
{
    const struct opts *o = st->o;
    unsigned need = o->nfields > 1 && o->field[1] > o->field[0] ? o->field[1] : o->field[0];
    if (t->n <= need) {
        st->bad_fields++;
        nmt_seterr("row has %zu field%s, --fields needs column %u", t->n, t->n == 1 ? "" : "s", need + 1);
        return bad_record(st, t->lr.name, t->line);
    }
    const char *text[2];
    size_t len[2];
    for (unsigned k = 0; k < o->nfields; k++) {
        text[k] = t->f[o->field[k]].text;
        len[k] = t->f[o->field[k]].len;
    }
    unsigned side;
    int r = process(st, t->row - 1, o->nfields, text, len, &side);
    return r < 0 || (r == 1 && bad_record(st, t->lr.name, t->line) < 0) ? -1 : 0;
}

/* CSV, or plain TSV (fields split at tabs, quotes are data): one record a row. */
static int run_table(struct state *st, const char *path)
{
    struct table_reader t;
    if (table_open(&t, path, st->o->tsv ? TABLE_TSV : TABLE_CSV, st->o->delim, st->o->max_line) < 0)
        return -1;
    int rc;
    while ((rc = table_next(&t)) != 0) {
        if (rc == TABLE_MALFORMED) {
            st->bad_csv++;
            if (st->o->skip_bad)
                continue;
        }
        if (rc != 1 || table_row(st, &t) < 0) {
            rc = -1;
            break;
        }
    }
    table_close(&t);
    return rc;
}

/* ---- decoding ---- */
/* Writes the text of the N ids at IDS (a tab before it unless FIRST). 0, or -1 with the error set. */
static int emit_text(struct state *st, const uint32_t *ids, size_t n, int first)
{
    if (tokenizer_decode(&st->tk[0], ids, n) < 0)
        return -1;
    if (!first)
        putc('\t', st->tf);
    if (st->tk[0].text.len) /* an empty line has no buffer */
        fwrite(st->tk[0].text.data, 1, st->tk[0].text.len, st->tf);
    return 0;
}

static int decode_stream(struct state *st, const char *path)
{
    const char *name = nmt_path_name(path, 0);
    int fd = nmt_open_in(path);
    if (fd < 0)
        return -1;
    int status, rc = 0;
    struct rec_reader *r = rec_reader_open(fd, name, NULL, &status);
    if (!r) {
        if (fd != 0)
            close(fd);
        return -1;
    }
    const struct rec_header *h = rec_reader_header(r);
    int hyp = strcmp(h->kind, "hyp") == 0;
    char fp[17];
    vocab_fingerprint_hex(st->v, fp);
    const char *hv = rec_header_get(h, "vocab");
    if (!hyp && strcmp(h->kind, "ids") != 0) {
        rc = nmt_seterr("%s: expected an ids or hyp stream, got %s %u.%u", name, h->kind, h->major, h->minor);
    } else if (hv && strcmp(hv, fp) != 0) {
        rc = nmt_seterr("%s: vocab fingerprint %s differs from '%s' (%s)", name, hv, st->o->vocab_path, fp);
    } else {
        struct ids_record ir = {0};
        struct hyp_record hr = {0};
        const unsigned char *d;
        size_t len;
        while ((status = rec_read(r, &d, &len)) == REC_OK) {
            unsigned ns = 1;
            const uint32_t *idp[2];
            uint32_t n[2];
            if (hyp) {
                if (hyp_record_decode(&hr, d, len) < 0) {
                    rc = nmt_seterr("%s: record %llu: %s", name, (unsigned long long)rec_reader_count(r), nmt_errmsg());
                    break;
                }
                idp[0] = hr.ids;
                n[0] = hr.n;
            } else {
                if (ids_record_decode(&ir, d, len) < 0) {
                    rc = nmt_seterr("%s: record %llu: %s", name, (unsigned long long)rec_reader_count(r), nmt_errmsg());
                    break;
                }
                ns = ir.nsides;
                for (unsigned s = 0; s < ns; s++) {
                    idp[s] = ir.ids[s];
                    n[s] = ir.n[s];
                }
            }
            for (unsigned s = 0; s < ns && rc == 0; s++) {
                if (emit_text(st, idp[s], n[s], s == 0) < 0)
                    rc = -1;
            }
            if (rc < 0) {
                nmt_seterr("%s: record %llu: %s", name, (unsigned long long)rec_reader_count(r), nmt_errmsg());
                break;
            }
            putc('\n', st->tf);
            st->written++;
        }
        if (rc == 0 && status != REC_END)
            rc = -1;
        ids_record_free(&ir);
        hyp_record_free(&hr);
    }
    rec_reader_free(r);
    if (fd != 0)
        close(fd);
    return rc;
}

static int unescape_token(const char *s, size_t n, struct nmt_buf *b)
{
    b->len = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\' && i + 1 < n) {
            char e = s[++i];
            if (e == '\\')
                c = '\\';
            else if (e == 's')
                c = ' ';
            else if (e == 't')
                c = '\t';
            else if (e == 'n')
                c = '\n';
            else if (e == 'x' && i + 2 < n) {
                unsigned v;
                if (sscanf(s + i + 1, "%2x", &v) != 1)
                    return -1;
                c = (unsigned char)v;
                i += 2;
            } else
                return -1;
        }
        if (nmt_buf_append(b, &c, 1) < 0)
            return -1;
    }
    return 0;
}

/* Maps one text token (an id, or an escaped piece) to an id; -1 with the error set. */
static int64_t token_id(const struct vocab *v, const char *s, size_t n, int numeric, struct nmt_buf *tmp)
{
    if (numeric) {
        uint64_t id = 0;
        for (size_t i = 0; i < n; i++)
            id = id * 10 + (uint64_t)(s[i] - '0');
        if (n > 9 || id >= v->n)
            return nmt_seterr("id %.*s out of range (vocabulary has %u pieces)", (int)(n > 20 ? 20 : n), s, v->n);
        return (int64_t)id;
    }
    if (unescape_token(s, n, tmp) < 0)
        return nmt_seterr("bad escape in token '%.*s'", (int)(n > 40 ? 40 : n), s);
    int64_t id = vocab_find(v, (const char *)tmp->data, tmp->len);
    if (id >= 0)
        return id;
    for (uint32_t k = 0; k < VOCAB_FIRST_CHAR && !v->spm; k++) { /* (a model's specials are found above) */
        uint32_t pl;
        const char *p = vocab_piece(v, k, &pl);
        if (pl == tmp->len && memcmp(p, tmp->data, pl) == 0)
            return k;
    }
    return nmt_seterr("unknown piece '%.*s'", (int)(n > 40 ? 40 : n), s);
}

static int decode_text(struct state *st, const char *path)
{
    struct line_reader r;
    if (line_reader_open(&r, path, st->o->max_line) < 0)
        return -1;
    struct nmt_buf tmp = {0};
    uint32_t *ids = NULL;
    size_t cap = 0;
    int rc = 0;
    char *buf;
    size_t len;
    while (rc == 0 && (rc = line_next(&r, &buf, &len)) == 1) {
        rc = 0;
        int numeric = 1; /* a line of decimal numbers only is read as ids */
        for (size_t i = 0; i < len; i++)
            if (!(buf[i] >= '0' && buf[i] <= '9') && buf[i] != ' ' && buf[i] != '\t')
                numeric = 0;
        size_t i = 0;
        for (int side = 0; rc == 0; side++) {
            size_t end = i;
            while (end < len && buf[end] != '\t')
                end++;
            uint32_t n = 0;
            size_t j = i;
            while (j < end) {
                size_t k = j;
                while (k < end && buf[k] != ' ')
                    k++;
                if (k > j) {
                    int64_t id = token_id(st->v, buf + j, k - j, numeric, &tmp);
                    if (id < 0) {
                        rc = nmt_seterr("%s: line %llu: %s", r.name, (unsigned long long)r.line, nmt_errmsg());
                        break;
                    }
                    if (NMT_GROW(ids, cap, (size_t)n + 1) < 0) {
                        rc = -1;
                        break;
                    }
                    ids[n++] = (uint32_t)id;
                }
                j = k + 1;
            }
            if (rc == 0 && emit_text(st, ids, n, side == 0) < 0)
                rc = -1;
            if (end >= len)
                break;
            i = end + 1;
        }
        if (rc == 0) {
            putc('\n', st->tf);
            st->written++;
        }
    }
    free(ids);
    nmt_buf_free(&tmp);
    line_reader_close(&r);
    return rc;
}

/* Parses --fields LIST into the struct opts at FIELD; 0, or -1 after a usage error. */
static int parse_fields(const char *opt, const char *s, void *field)
{
    struct opts *o = field;
    uint64_t a, b;
    const char *comma = strchr(s, ',');
    char first[32];
    o->fields_set = 1;
    if (!comma) {
        if (nmt_parse_u64(s, 1000000, &a) < 0 || a == 0)
            goto bad;
        o->nfields = 1;
        o->field[0] = (unsigned)a - 1;
        return 0;
    }
    if ((size_t)(comma - s) >= sizeof first)
        goto bad;
    memcpy(first, s, (size_t)(comma - s));
    first[comma - s] = 0;
    if (nmt_parse_u64(first, 1000000, &a) < 0 || a == 0 || nmt_parse_u64(comma + 1, 1000000, &b) < 0 || b == 0 ||
        a == b)
        goto bad;
    o->nfields = 2;
    o->field[0] = (unsigned)a - 1;
    o->field[1] = (unsigned)b - 1;
    return 0;
bad:
    return nmt_usage_error("invalid %s '%s' (one column, or two different columns, from 1)", opt, s), -1;
}

/* --tsv: plain TSV, split at tabs. */
static int parse_tsv(const char *opt, const char *arg, void *field)
{
    struct opts *o = field;
    o->csv = o->tsv = 1;
    o->delim = '\t';
    o->delim_set = 1;
    return 0;
}

static int parse_delimiter(const char *opt, const char *arg, void *field)
{
    struct opts *o = field;
    if (strcmp(arg, "tab") == 0 || strcmp(arg, "\\t") == 0)
        o->delim = '\t';
    else if (strlen(arg) == 1 && arg[0] != '"' && arg[0] != '\n' && arg[0] != '\r')
        o->delim = (unsigned char)arg[0];
    else
        return nmt_usage_error("invalid %s '%s' (one character, or 'tab')", opt, arg), -1;
    o->delim_set = 1;
    return 0;
}

static int parse_normalize(const char *opt, const char *arg, void *field)
{
    if ((*(int *)field = text_norm_parse(arg)) < 0)
        return nmt_usage_error("invalid %s '%s' (none, nfkc or nfkc_cf)", opt, arg), -1;
    return 0;
}

static int parse_dropout(const char *opt, const char *arg, void *field)
{
    struct opts *o = field;
    if (nmt_parse_double(arg, &o->dropout) < 0 || o->dropout < 0 || o->dropout > 1)
        return nmt_usage_error("invalid %s '%s' (a probability, 0 to 1)", opt, arg), -1;
    o->dropout_set = 1;
    return 0;
}

static int parse_seed(const char *opt, const char *arg, void *field)
{
    struct opts *o = field;
    if (nmt_parse_u64(arg, UINT64_MAX, &o->seed) < 0)
        return nmt_usage_error("invalid %s '%s' (a non-negative integer)", opt, arg), -1;
    o->seed_set = 1;
    return 0;
}

/* --text[=pieces|ids] */
static int parse_text(const char *opt, const char *arg, void *field)
{
    int *text = field;
    if (!arg || strcmp(arg, "pieces") == 0)
        *text = TEXT_PIECES;
    else if (strcmp(arg, "ids") == 0)
        *text = TEXT_IDS;
    else
        return nmt_usage_error("invalid %s '%s' (pieces or ids)", opt, arg), -1;
    return 0;
}

#define OFF(field) offsetof(struct opts, field)
static const struct opt_spec OPTIONS[] = {
    {OPTION(OT_STR, "input", 'i', "FILE", OFF(in), "read FILE (default stdin; '-' is stdin)")},
    {OPTION(OT_STR, "output", 'o', "FILE", OFF(out), "write FILE (default stdout)")},
    {OPTION(OT_STR, "src", 0, "FILE", OFF(src), "source side of a line-aligned pair of files (with --tgt)")},
    {OPTION(OT_STR, "tgt", 0, "FILE", OFF(tgt), "target side of a line-aligned pair of files (with --src)")},
    {OPTION(OT_FLAG, "csv", 0, NULL, OFF(csv), "input is CSV (RFC 4180 quoting), one pair or sentence per row")},
    {OPTION(OT_CUSTOM, "tsv", 0, NULL, 0,
            "input is plain TSV: fields split at tabs, a quote is data (for RFC 4180\n"
            "quoting with tabs: --csv --delimiter tab)"),
     .parse = parse_tsv},
    {OPTION(OT_CUSTOM, "delimiter", 'd', "C", 0, "field delimiter for --csv: one character, or 'tab' (default ',')"),
     .parse = parse_delimiter},
    {OPTION(OT_CUSTOM, "fields", 'f', "LIST", 0,
            "columns to read, 1-based: one, or two as source,target (default 1,2)"),
     .parse = parse_fields},
    {OPTION(OT_CUSTOM, "normalize", 'N', "MODE", OFF(norm),
            "none, nfkc or nfkc_cf (default nfkc, or the vocabulary's)"),
     .parse = parse_normalize},
    {OPTION(OT_STR, "vocab", 'v', "FILE", OFF(vocab_path), "apply the vocabulary FILE (nmt-vocab's BPE, or a SentencePiece .model) and write an ids stream")},
    {OPTION(OT_CUSTOM, "dropout", 0, "P", 0,
            "BPE-dropout: skip each merge with probability P (0..1, needs --vocab)"),
     .parse = parse_dropout},
    {OPTION(OT_CUSTOM, "seed", 0, "S", 0, "seed of the dropout generator (default 1)"), .parse = parse_seed},
    {OPTION(OT_CUSTOM, "text", 0, "WHAT", OFF(text),
            "print space-separated text instead of a stream: tokens or pieces\n"
            "(WHAT=pieces, the default) or ids (WHAT=ids); sides split by a tab"),
     .flags = OF_OPTIONAL_ARG, .parse = parse_text},
    {OPTION(OT_FLAG, "decode", 'D', NULL, OFF(decode),
            "read an ids (or hyp) stream and print the text, one line per record;\n"
            "with --text, read text lines of ids or pieces instead")},
    {OPTION(OT_U64, "max-line-bytes", 0, "N", OFF(max_line),
            "longest input line accepted (default 1 GiB); a longer one is an error"),
     .imin = 1, .imax = SIZE_MAX / 2},
    {OPTION(OT_FLAG, "skip-bad", 0, NULL, OFF(skip_bad),
            "drop bad lines (invalid UTF-8, missing fields, unpaired lines) and\n"
            "report how many at the end, instead of failing")},
    {OPTION(OT_FLAG, "quiet", 'q', NULL, OFF(quiet), "do not report skipped lines")},
    OPT_HELP_VERSION_END};

static const char USAGE_HEAD[] =
    "Usage: nmt-tokenize [OPTIONS] [FILE]\n"
    "       nmt-tokenize --src FILE --tgt FILE [OPTIONS]\n"
    "       nmt-tokenize --decode --vocab V [OPTIONS] [FILE]\n"
    "Turn text (one sentence per line, CSV/TSV pairs, or two line-aligned files) into a tok stream\n"
    "(reversible pre-tokenisation), or with --vocab into an ids stream; --decode turns ids back to text.\n"
    "\n";

static const char USAGE_TAIL[] =
    "\nExit status: 0 success, 1 bad input or runtime failure, 2 usage error.\n";

enum { GO_ON = -1 };

/* Parses and checks the options into O: GO_ON, or the exit status (help, version, usage error). */
static int parse_args(int argc, char **argv, struct opts *o)
{
    int parsed = opt_parse_tool(OPTIONS, argc, argv, o, USAGE_HEAD, USAGE_TAIL);
    if (parsed != OPT_PROCEED)
        return parsed;
    int delim_set = o->delim_set, fields_set = o->fields_set, dropout_set = o->dropout_set, seed_set = o->seed_set;
    if (optind < argc) {
        if (o->in || optind + 1 < argc)
            return nmt_usage_error("give one input: FILE or -i FILE");
        o->in = argv[optind];
    }
    if (!!o->src != !!o->tgt)
        return nmt_usage_error("--src and --tgt go together");
    if (o->src && (o->in || o->csv))
        return nmt_usage_error("--src/--tgt cannot be combined with an input file or --csv");
    if ((delim_set || fields_set) && !o->csv)
        return nmt_usage_error("--delimiter and --fields need --csv or --tsv");
    if (o->decode && !o->vocab_path)
        return nmt_usage_error("--decode needs --vocab");
    if (o->decode && (o->src || o->csv || dropout_set || o->norm >= 0 || o->skip_bad))
        return nmt_usage_error("--decode reads one input and takes only --vocab, --text, -i and -o");
    if (o->decode && o->text == TEXT_IDS)
        return nmt_usage_error("--decode reads ids or pieces; use --text without a value");
    if ((dropout_set || seed_set) && !o->vocab_path)
        return nmt_usage_error("--dropout and --seed need --vocab");
    if (o->text == TEXT_IDS && !o->vocab_path)
        return nmt_usage_error("--text=ids needs --vocab");

    if (o->src && o->tgt && strcmp(o->src, "-") == 0 && strcmp(o->tgt, "-") == 0)
        return nmt_usage_error("--src - and --tgt - would read both sides from one stdin; give at least one file");
    return GO_ON;
}

/* Loads the vocabulary (if any) and makes the two sides' tokenizers: 0, or the exit status. */
static int setup(struct state *st, const struct opts *o)
{
    if (o->vocab_path) {
        st->v = vocab_load(o->vocab_path);
        if (!st->v) {
            nmt_error("%s", nmt_errmsg());
            return NMT_EXIT_DATA;
        }
        if (st->v->spm && (o->norm >= 0 || o->dropout > 0))
            return nmt_usage_error("%s with a SentencePiece model: it normalises and segments by its own rules",
                                   o->norm >= 0 ? "--normalize" : "--dropout");
        if (o->norm >= 0 && (enum text_norm)o->norm != st->v->normalize)
            return nmt_usage_error("--normalize %s differs from the vocabulary's %s", text_norm_name(o->norm),
                                   text_norm_name(st->v->normalize));
        st->norm = st->v->normalize;
        st->encode = !o->decode;
    } else {
        st->norm = o->norm >= 0 ? (enum text_norm)o->norm : TEXT_NORM_NFKC;
    }
    for (int s = 0; s < 2; s++) {
        if (tokenizer_init(&st->tk[s], st->v, st->norm) < 0) {
            nmt_error("%s", nmt_errmsg());
            return NMT_EXIT_DATA;
        }
        tokenizer_dropout(&st->tk[s], o->dropout, o->seed);
    }
    return 0;
}

/* Checks that every named input can be opened and none is the output (before any header is
 * written); 0, or -1 with the error set. */
static int check_inputs(const struct opts *o)
{
    const char *inputs[2] = {o->src ? o->src : o->in, o->tgt};
    for (int k = 0; k < 2; k++) {
        if (k == 1 && !inputs[k])
            continue;
        int fd = nmt_open_in(inputs[k]);
        if (fd < 0)
            return -1;
        int rc = nmt_check_not_input(fd, nmt_path_name(inputs[k], 0), o->out);
        if (fd != STDIN_FILENO)
            close(fd);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* Opens the output: text through a stdio stream, or a record stream with its provenance header.
 * 0, or -1 with the error set. */
static int open_output(struct state *st, const struct opts *o)
{
    int text_out = o->text || o->decode;
    if (nmt_output_open(&st->out, o->out, !text_out) < 0)
        return -1;
    const char *outname = nmt_path_name(o->out, 1);
    if (text_out) {
        st->tf = st->out.mode == 1 ? stdout : fdopen(dup(st->out.fd), "w");
        return st->tf ? 0 : nmt_seterr("cannot open '%s': %s", outname, strerror(errno));
    }
    char seedbuf[32], dropbuf[32], fp[17];
    struct rec_kv kv[5];
    size_t nkv = 0;
    kv[nkv++] = (struct rec_kv){"normalize", st->v && st->v->spm ? "sentencepiece" : (char *)text_norm_name(st->norm)};
    kv[nkv++] = (struct rec_kv){"pretok", "1"};
    if (st->v) {
        vocab_fingerprint_hex(st->v, fp);
        kv[nkv++] = (struct rec_kv){"vocab", fp};
        if (o->dropout > 0) {
            snprintf(dropbuf, sizeof dropbuf, "%g", o->dropout);
            snprintf(seedbuf, sizeof seedbuf, "%llu", (unsigned long long)o->seed);
            kv[nkv++] = (struct rec_kv){"dropout", dropbuf};
            kv[nkv++] = (struct rec_kv){"seed", seedbuf};
        }
    }
    st->w = rec_writer_open(st->out.fd, outname, st->v ? "ids" : "tok", "nmt-tokenize " NMT_VERSION, kv, nkv, NULL);
    return st->w ? 0 : -1;
}

/* Ends the output: the stream's trailer or the text's flush, then the named file's commit (only
 * when OK, else it is dropped). 0, or -1 with the error set. */
static int close_output(struct state *st, const struct opts *o, int ok)
{
    const char *outname = nmt_path_name(o->out, 1);
    int rc = 0;
    if (st->w) {
        if (!ok)
            rec_writer_abort(st->w);
        else if (rec_writer_close(st->w) < 0)
            rc = -1;
        st->w = NULL;
    } else if (st->tf && st->tf != stdout) {
        if ((ferror(st->tf) | fclose(st->tf)) != 0 && ok)
            rc = nmt_seterr("error writing '%s': %s", outname, strerror(errno));
    }
    st->tf = NULL;
    if (nmt_output_finish(&st->out, ok && rc == 0) < 0)
        rc = -1;
    return rc;
}

/* Runs the mode asked for; 0, or -1 with the error set. */
static int run(struct state *st, const struct opts *o)
{
    if (o->decode)
        return o->text ? decode_text(st, o->in) : decode_stream(st, o->in);
    if (o->src)
        return run_pairs(st);
    return o->csv ? run_table(st, o->in) : run_lines(st, o->in);
}

/* Warns about the bad lines --skip-bad dropped. */
static void report_skipped(const struct state *st)
{
    uint64_t skipped = st->bad_utf8 + st->bad_fields + st->bad_unpaired + st->bad_csv;
    if (skipped && !st->o->quiet)
        nmt_warn("skipped %llu bad line%s (invalid UTF-8: %llu, missing fields: %llu, unpaired: %llu, "
                 "malformed CSV: %llu); wrote %llu",
                 (unsigned long long)skipped, skipped == 1 ? "" : "s", (unsigned long long)st->bad_utf8,
                 (unsigned long long)st->bad_fields, (unsigned long long)st->bad_unpaired,
                 (unsigned long long)st->bad_csv, (unsigned long long)st->written);
}

int main(int argc, char **argv)
{
    nmt_start(argv);
    struct opts o = {.delim = ',', .nfields = 2, .field = {0, 1}, .norm = -1, .seed = 1, .max_line = LINES_DEFAULT_MAX};
    int rc = parse_args(argc, argv, &o);
    if (rc != GO_ON)
        return rc;
    struct state st = {.o = &o, .out = {.fd = -1}};
    rc = setup(&st, &o);
    if (rc == 0) {
        int ok = check_inputs(&o) == 0 && open_output(&st, &o) == 0 && run(&st, &o) == 0;
        if (st.tf)
            fflush(st.tf); /* what was printed comes before the message */
        if (!ok)
            nmt_error("%s", nmt_errmsg());
        if (close_output(&st, &o, ok) < 0 && ok) {
            nmt_error("%s", nmt_errmsg());
            ok = 0;
        }
        rc = ok ? NMT_EXIT_OK : NMT_EXIT_DATA;
        if (ok)
            report_skipped(&st);
    }
    if (nmt_close_stdout() < 0 && !rc) {
        nmt_error("%s", nmt_errmsg());
        rc = NMT_EXIT_DATA;
    }
    for (int s = 0; s < 2; s++) {
        tokenizer_free(&st.tk[s]);
        free(st.tokp[s]);
        free(st.tokl[s]);
        free(st.ids[s]);
    }
    nmt_buf_free(&st.rec);
    nmt_buf_free(&st.line);
    free(st.dec);
    vocab_free(st.v);
    return rc;
}
