/* nmt-cat: print, count or validate nmt record streams (see nmt-cat(1), nmt-stream(5)). */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/lines.h"
#include "io/stream.h"
#include "io/safetensors.h"
#include "nn/checkpoint.h"
#include "text/vocab.h"
#include "io/records.h"
#include "cli/cli.h"
#include "cli/opt.h"

enum mode { MODE_PRINT, MODE_HEADER, MODE_COUNT, MODE_CHECK };

struct cat_opts {
    int mode;                /* enum mode */
    int json;
    int quiet;
    const char *kind;
    uint64_t limit;          /* records to print per input; 0 = all */
    const char *outpath;     /* --output, or NULL */
};

struct cat_state {
    struct tok_record tok;
    struct ids_record ids;
    struct batch_record batch;
    struct hyp_record hyp;
};

#define OFF(field) offsetof(struct cat_opts, field)
static const struct opt_spec OPTIONS[] = {
    {OPTION(OT_FLAG, "json", 'j', NULL, OFF(json), "print JSON lines instead of text")},
    {OPTION(OT_SET, "header", 'H', NULL, OFF(mode), "print only the stream header"), .imin = MODE_HEADER},
    {OPTION(OT_SET, "count", 'c', NULL, OFF(mode), "print the number of records"), .imin = MODE_COUNT},
    {OPTION(OT_SET, "check", 'C', NULL, OFF(mode),
            "validate the whole stream (header, checksums, end marker); exit 0 if\n"
            "valid, else print one line saying why and exit 1"),
     .imin = MODE_CHECK},
    {OPTION(OT_STR, "kind", 'k', "KIND", OFF(kind), "require streams of this kind (tok, ids, batch, hyp, ...)")},
    {OPTION(OT_U64, "head", 'n', "N", OFF(limit), "print only the first N records of each input"), .imin = 1,
     .imax = UINT64_MAX},
    {OPTION(OT_STR, "output", 'o', "FILE", OFF(outpath), "write to FILE instead of stdout")},
    {OPTION(OT_FLAG, "quiet", 'q', NULL, OFF(quiet), "with --check, print nothing on failure either")},
    OPT_HELP_VERSION_END};

static const char USAGE_HEAD[] =
    "Usage: nmt-cat [OPTIONS] [FILE...]\n"
    "Print nmt record streams as text, one record per line (stdin when no FILE or FILE is -).\n"
    "\n";
static const char USAGE_TAIL[] =
    "\n"
    "Record kinds tok, ids, batch and hyp are decoded; other kinds are shown as hex.\n"
    "A vocabulary file (nmt-vocab(5)) is shown as it is (--header: its header; --count: its pieces;\n"
    "--check: that it loads). A checkpoint (nmt-checkpoint(5)) is shown as its metadata (model\n"
    "configuration, training state, vocabulary fingerprint) and a line per tensor: name, type,\n"
    "shape (--header: the metadata; --count: the tensors; --check: also every value finite).\n"
    "Exit status: 0 success, 1 invalid or unreadable stream, 2 usage error.\n";

static void put_ids(FILE *f, const uint32_t *ids, uint32_t n, int json)
{
    if (json)
        putc('[', f);
    for (uint32_t i = 0; i < n; i++) {
        if (i)
            putc(json ? ',' : ' ', f);
        fprintf(f, "%u", ids[i]);
    }
    if (json)
        putc(']', f);
}

static const char *side_name(unsigned s, unsigned nsides)
{
    return nsides == 1 ? "ids" : s == 0 ? "src" : "tgt";
}

/* Prints a tok record (tokens of each side) of D (LEN bytes) to F as text or JSON; 0, or -1. */
static int print_tok(FILE *f, struct cat_state *st, const unsigned char *d, size_t len, int json)
{
    if (tok_record_decode(&st->tok, d, len) < 0)
        return -1;
    struct tok_record *r = &st->tok;
    if (json) {
        fprintf(f, "{\"index\":%llu", (unsigned long long)r->index);
        for (unsigned s = 0; s < r->nsides; s++) {
            fprintf(f, ",\"%s\":[", r->nsides == 1 ? "tok" : s == 0 ? "src" : "tgt");
            for (uint32_t i = 0; i < r->side[s].ntok; i++) {
                if (i)
                    putc(',', f);
                nmt_json_string(f, r->side[s].tok[i], r->side[s].len[i]);
            }
            putc(']', f);
        }
        fputs("}\n", f);
    } else {
        fprintf(f, "%llu", (unsigned long long)r->index);
        for (unsigned s = 0; s < r->nsides; s++) {
            putc('\t', f);
            for (uint32_t i = 0; i < r->side[s].ntok; i++) {
                if (i)
                    putc(' ', f);
                nmt_put_token(f, r->side[s].tok[i], r->side[s].len[i]);
            }
        }
        putc('\n', f);
    }
    return 0;
}

/* Prints an ids record of D (LEN bytes) to F as text or JSON; 0, or -1. */
static int print_ids(FILE *f, struct cat_state *st, const unsigned char *d, size_t len, int json)
{
    if (ids_record_decode(&st->ids, d, len) < 0)
        return -1;
    struct ids_record *r = &st->ids;
    if (json) {
        fprintf(f, "{\"index\":%llu", (unsigned long long)r->index);
        for (unsigned s = 0; s < r->nsides; s++) {
            fprintf(f, ",\"%s\":", side_name(s, r->nsides));
            put_ids(f, r->ids[s], r->n[s], 1);
        }
        fputs("}\n", f);
    } else {
        fprintf(f, "%llu", (unsigned long long)r->index);
        for (unsigned s = 0; s < r->nsides; s++) {
            putc('\t', f);
            put_ids(f, r->ids[s], r->n[s], 0);
        }
        putc('\n', f);
    }
    return 0;
}

/* Prints the batch record of D (LEN bytes), its shape and rows (padding not shown), to F as text or JSON; 0, or -1. */
static int print_batch(FILE *f, struct cat_state *st, const unsigned char *d, size_t len, int json)
{
    if (batch_record_decode(&st->batch, d, len) < 0)
        return -1;
    struct batch_record *r = &st->batch;
    if (json) {
        fprintf(f, "{\"rows\":%u,\"src_cols\":%u,\"tgt_cols\":%u,\"index\":[", r->B, r->S, r->T);
        for (uint32_t b = 0; b < r->B; b++)
            fprintf(f, "%s%llu", b ? "," : "", (unsigned long long)r->index[b]);
        fputs("],\"src\":[", f);
        for (uint32_t b = 0; b < r->B; b++) {
            if (b)
                putc(',', f);
            put_ids(f, r->src + (size_t)b * r->S, r->src_len[b], 1);
        }
        fputs("],\"tgt\":[", f);
        for (uint32_t b = 0; b < r->B; b++) {
            if (b)
                putc(',', f);
            put_ids(f, r->tgt + (size_t)b * r->T, r->tgt_len[b], 1);
        }
        fputs("]}\n", f);
    } else {
        /* one line per batch: shape, then "index:src|tgt" for each row (padding not shown) */
        fprintf(f, "%ux%u+%u", r->B, r->S, r->T);
        for (uint32_t b = 0; b < r->B; b++) {
            fprintf(f, "\t%llu:", (unsigned long long)r->index[b]);
            put_ids(f, r->src + (size_t)b * r->S, r->src_len[b], 0);
            putc('|', f);
            put_ids(f, r->tgt + (size_t)b * r->T, r->tgt_len[b], 0);
        }
        putc('\n', f);
    }
    return 0;
}

/* Prints a hyp record (rank, score, ids) of D (LEN bytes) to F as text or JSON; 0, or -1. */
static int print_hyp(FILE *f, struct cat_state *st, const unsigned char *d, size_t len, int json)
{
    if (hyp_record_decode(&st->hyp, d, len) < 0)
        return -1;
    struct hyp_record *r = &st->hyp;
    if (json) {
        fprintf(f, "{\"index\":%llu,\"rank\":%u,\"score\":", (unsigned long long)r->index, r->rank);
        if (isfinite(r->score)) /* JSON has no NaN or infinity */
            fprintf(f, "%.9g,\"ids\":", (double)r->score);
        else
            fputs("null,\"ids\":", f);
        put_ids(f, r->ids, r->n, 1);
        if (r->aligned) {
            fputs(",\"alignment\":[", f);
            for (uint32_t k = 0; k < r->npairs; k++)
                fprintf(f, k ? ",[%u,%u]" : "[%u,%u]", r->pairs[2 * k], r->pairs[2 * k + 1]);
            putc(']', f);
        }
        fputs("}\n", f);
    } else {
        fprintf(f, "%llu\t%u\t%.9g\t", (unsigned long long)r->index, r->rank, (double)r->score);
        put_ids(f, r->ids, r->n, 0);
        if (r->aligned)
            putc('\t', f);
        for (uint32_t k = 0; k < r->npairs; k++)
            fprintf(f, k ? " %u-%u" : "%u-%u", r->pairs[2 * k], r->pairs[2 * k + 1]);
        putc('\n', f);
    }
    return 0;
}

static int print_record(FILE *f, struct cat_state *st, const char *kind, const unsigned char *d, size_t len, int json)
{
    if (strcmp(kind, "tok") == 0)
        return print_tok(f, st, d, len, json);
    if (strcmp(kind, "ids") == 0)
        return print_ids(f, st, d, len, json);
    if (strcmp(kind, "batch") == 0)
        return print_batch(f, st, d, len, json);
    if (strcmp(kind, "hyp") == 0)
        return print_hyp(f, st, d, len, json);
    if (json)
        fprintf(f, "{\"bytes\":%zu,\"hex\":\"", len);
    for (size_t i = 0; i < len; i++)
        fprintf(f, "%02x", d[i]);
    fputs(json ? "\"}\n" : "\n", f);
    return 0;
}

static void print_header(FILE *f, const struct rec_header *h, int json)
{
    if (json) {
        fprintf(f, "{\"kind\":\"%s\",\"version\":\"%u.%u\",%s\"producer\":", h->kind, h->major, h->minor,
                h->flags & REC_FLAG_ALIGN ? "\"flags\":\"alignment\"," : "");
        nmt_json_string(f, h->producer, strlen(h->producer));
        fputs(",\"provenance\":{", f);
        for (size_t i = 0; i < h->nkv; i++) {
            if (i)
                putc(',', f);
            nmt_json_string(f, h->kv[i].key, strlen(h->kv[i].key));
            putc(':', f);
            nmt_json_string(f, h->kv[i].value, strlen(h->kv[i].value));
        }
        fputs("}}\n", f);
        return;
    }
    fprintf(f, "kind\t%s\nversion\t%u.%u\n%sproducer\t%s\n", h->kind, h->major, h->minor,
            h->flags & REC_FLAG_ALIGN ? "flags\talignment\n" : "", h->producer);
    for (size_t i = 0; i < h->nkv; i++)
        fprintf(f, "%s\t%s\n", h->kv[i].key, h->kv[i].value);
}

/* ---- vocabularies and checkpoints, shown as well as streams ---- */

/* What the file at PATH is by its first bytes: 'v' a vocabulary, 'c' a checkpoint, 0 anything else
 * (a stream, or stdin, which is only read as a stream). */
static int file_kind(const char *path)
{
    unsigned char p[10];
    FILE *f = path && strcmp(path, "-") ? fopen(path, "rb") : NULL;
    size_t n = f ? fread(p, 1, sizeof p, f) : 0;
    if (f)
        fclose(f);
    if (n >= 10 && !memcmp(p, "nmt-vocab ", 10))
        return 'v';
    uint64_t hl = 0;
    for (int i = 7; n >= 10 && i >= 0; i--)
        hl = hl << 8 | p[i];
    return n >= 10 && hl < ((uint64_t)1 << 30) && p[8] == '{' && p[9] == '"' ? 'c' : 0;
}

/* Shows vocabulary PATH: the whole file, its header lines (before "pieces"), the number of pieces,
 * or only a check that it loads. 0, or 1 with the message printed unless quiet. */
static int cat_vocab(const char *path, const struct cat_opts *o, FILE *out, uint64_t *total)
{
    struct vocab *v = vocab_load(path);
    if (!v) {
        if (!o->quiet)
            nmt_error("%s", nmt_errmsg());
        return 1;
    }
    *total += v->n;
    vocab_free(v);
    if (o->mode == MODE_CHECK || o->mode == MODE_COUNT)
        return 0;
    struct line_reader r;
    if (line_reader_open(&r, path, 0) < 0)
        return nmt_error("%s", nmt_errmsg()), 1;
    char *line;
    size_t len;
    int rc;
    while ((rc = line_next(&r, &line, &len)) == 1) { /* the vocabulary loaded: every line ends in a newline */
        if (o->mode == MODE_HEADER && len == 6 && !memcmp(line, "pieces", 6))
            break;
        fwrite(line, 1, len, out);
        putc('\n', out);
    }
    line_reader_close(&r);
    if (rc < 0)
        return nmt_error("%s", nmt_errmsg()), 1;
    return 0;
}

/* Writes metadata KEY and VALUE as "KEY<tab>VALUE"; a value of several lines (nmt-train's
 * train.config) continues on lines that begin with a tab. */
static void put_meta_text(FILE *out, const char *key, const char *value)
{
    fprintf(out, "%s\t", key);
    for (const char *p = value; *p; p++) {
        putc(*p, out);
        if (*p == '\n' && p[1])
            putc('\t', out);
    }
    if (!*value || value[strlen(value) - 1] != '\n')
        putc('\n', out);
}

/* Shows checkpoint PATH: its metadata (configuration, training state, vocabulary fingerprint) and
 * each tensor's name, type and shape; the header alone is the metadata; a check also requires
 * every parameter to be finite. 0, or 1 with the message printed unless quiet. */
static int cat_checkpoint(const char *path, const struct cat_opts *o, FILE *out, uint64_t *total)
{
    struct st_file *f = st_read(path);
    if (!f || (o->mode == MODE_CHECK && checkpoint_check_finite(f, path) < 0)) {
        if (!o->quiet)
            nmt_error("%s", nmt_errmsg());
        st_free(f);
        return 1;
    }
    *total += f->nt;
    if (o->mode == MODE_PRINT || o->mode == MODE_HEADER) {
        fputs(o->json ? "{\"metadata\":{" : "", out);
        for (size_t i = 0; i < f->nmeta; i++) {
            if (!o->json) {
                put_meta_text(out, f->meta_key[i], f->meta_val[i]);
                continue;
            }
            fputs(i ? "," : "", out);
            nmt_json_string(out, f->meta_key[i], strlen(f->meta_key[i]));
            putc(':', out);
            nmt_json_string(out, f->meta_val[i], strlen(f->meta_val[i]));
        }
        fputs(o->json ? "}" : "", out);
    }
    if (o->mode == MODE_PRINT) {
        fputs(o->json ? ",\"tensors\":[" : "", out);
        for (size_t i = 0; i < f->nt; i++) {
            const struct st_tensor *t = &f->t[i];
            if (o->json) {
                fputs(i ? ",{\"name\":" : "{\"name\":", out);
                nmt_json_string(out, t->name, strlen(t->name));
                fprintf(out, ",\"dtype\":\"%s\",\"shape\":[", st_dtype_name(t->dtype));
            } else {
                fprintf(out, "tensor\t%s\t%s\t", t->name, st_dtype_name(t->dtype));
            }
            for (int d = 0; d < t->ndim; d++)
                fprintf(out, "%s%llu", d ? (o->json ? "," : "x") : "", (unsigned long long)t->shape[d]);
            fputs(o->json ? "]}" : "\n", out);
        }
        fputs(o->json ? "]" : "", out);
    }
    if (o->json && (o->mode == MODE_PRINT || o->mode == MODE_HEADER))
        fputs("}\n", out);
    st_free(f);
    return 0;
}

/* Processes one input; returns 0 or 1 (data error, message printed unless quiet). */
static int cat_one(const char *path, const struct cat_opts *o, FILE *out, struct cat_state *st, uint64_t *total)
{
    int what = o->kind ? 0 : file_kind(path);
    if (what == 'v')
        return cat_vocab(path, o, out, total);
    if (what == 'c')
        return cat_checkpoint(path, o, out, total);
    const char *name = nmt_path_name(path, 0);
    int fd = nmt_open_in(path);
    if (fd < 0) {
        if (!o->quiet)
            nmt_error("%s", nmt_errmsg());
        return 1;
    }
    int status;
    struct rec_reader *r = rec_reader_open(fd, name, o->kind, &status);
    int rc = 0;
    if (!r) {
        rc = 1;
        goto done;
    }
    const char *kind = rec_reader_header(r)->kind;
    if (o->mode == MODE_HEADER) {
        print_header(out, rec_reader_header(r), o->json);
        goto done;
    }
    const unsigned char *d;
    size_t len;
    uint64_t n = 0;
    while ((status = rec_read(r, &d, &len)) == REC_OK) {
        n++;
        if (o->mode == MODE_PRINT) {
            if (print_record(out, st, kind, d, len, o->json) < 0) {
                nmt_seterr("%s: record %llu (ending at byte %llu): %s", name, (unsigned long long)n,
                           (unsigned long long)rec_reader_offset(r), nmt_errmsg());
                rc = 1;
                goto done;
            }
            if (o->limit && n >= o->limit)
                goto done;
        } else if (o->mode == MODE_CHECK && (!strcmp(kind, "tok") || !strcmp(kind, "ids") ||
                                               !strcmp(kind, "batch") || !strcmp(kind, "hyp"))) {
            /* validate typed payloads too, without printing */
            int bad = !strcmp(kind, "tok")     ? tok_record_decode(&st->tok, d, len)
                      : !strcmp(kind, "ids")   ? ids_record_decode(&st->ids, d, len)
                      : !strcmp(kind, "batch") ? batch_record_decode(&st->batch, d, len)
                                               : hyp_record_decode(&st->hyp, d, len);
            if (bad < 0) {
                nmt_seterr("%s: record %llu: %s", name, (unsigned long long)n, nmt_errmsg());
                rc = 1;
                goto done;
            }
        }
    }
    if (status != REC_END)
        rc = 1;
    *total += n;
done:
    if (rc && !o->quiet)
        nmt_error("%s", nmt_errmsg());
    rec_reader_free(r);
    if (fd != 0)
        close(fd);
    return rc;
}

int main(int argc, char **argv)
{
    nmt_start(argv);
    struct cat_opts o = {0};
    int parsed = opt_parse_tool(OPTIONS, argc, argv, &o, USAGE_HEAD, USAGE_TAIL);
    if (parsed != OPT_PROCEED)
        return parsed;
    const char *outpath = o.outpath;
    if (outpath && strcmp(outpath, "-") != 0 && !freopen(outpath, "w", stdout)) {
        nmt_error("cannot open '%s' for writing: %s", outpath, strerror(errno));
        return NMT_EXIT_DATA;
    }
    static char obuf[1 << 16];
    setvbuf(stdout, obuf, _IOFBF, sizeof obuf);
    struct cat_state st = {0};
    uint64_t total = 0;
    int rc = 0;
    if (optind == argc)
        rc |= cat_one(NULL, &o, stdout, &st, &total);
    for (int i = optind; i < argc && !rc; i++)
        rc |= cat_one(argv[i], &o, stdout, &st, &total);
    if (o.mode == MODE_COUNT && !rc)
        printf("%llu\n", (unsigned long long)total);
    tok_record_free(&st.tok);
    ids_record_free(&st.ids);
    batch_record_free(&st.batch);
    hyp_record_free(&st.hyp);
    if (nmt_close_stdout() < 0) {
        nmt_error("%s", nmt_errmsg());
        return NMT_EXIT_DATA;
    }
    return rc ? NMT_EXIT_DATA : NMT_EXIT_OK;
}
