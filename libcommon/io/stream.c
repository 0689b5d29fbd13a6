/* rec.c: record stream writer and reader (see rec.h and formats/stream.md). */
#include "io/stream.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "base/utf8.h"
#include "base/util.h"
#include "io/file.h"

#define REC_WINDOW_LOG_MAX 23          /* readers refuse chunks whose window exceeds 8 MiB */
#define REC_MAX_VALUE 4096             /* longest provenance value / producer string */
#define REC_MAX_KEY 64
#define REC_IN_CHUNK (128u << 10)      /* read() size */
#define REC_OUT_FLUSH (256u << 10)     /* writer hands compressed bytes to the fd at this size */

const char *rec_status_name(int status)
{
    switch (status) {
    case REC_OK: return "record";
    case REC_END: return "end";
    case REC_ETRUNC: return "truncated";
    case REC_ECORRUPT: return "corrupt";
    case REC_EIO: return "i/o error";
    case REC_EVERSION: return "unsupported version";
    case REC_EKIND: return "unexpected kind";
    case REC_EMAGIC: return "not an nmt stream";
    case REC_ENOMEM: return "out of memory";
    case REC_EUSAGE: return "invalid use";
    case REC_EMIXED: return "mixed streams";
    default: return "unknown status";
    }
}

const char *rec_header_get(const struct rec_header *h, const char *key)
{
    for (size_t i = 0; i < h->nkv; i++)
        if (strcmp(h->kv[i].key, key) == 0)
            return h->kv[i].value;
    return NULL;
}

static void header_clear(struct rec_header *h)
{
    free(h->producer);
    for (size_t i = 0; i < h->nkv; i++) {
        free(h->kv[i].key);
        free(h->kv[i].value);
    }
    free(h->kv);
    memset(h, 0, sizeof *h);
}

static int valid_kind(const char *k)
{
    size_t n = strlen(k);
    if (n < 1 || n > REC_MAX_KIND)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((k[i] >= 'a' && k[i] <= 'z') || (k[i] >= '0' && k[i] <= '9') || k[i] == '_'))
            return 0;
    return 1;
}

static int valid_key(const char *k, size_t n)
{
    if (n < 1 || n > REC_MAX_KEY)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((k[i] >= 'a' && k[i] <= 'z') || (k[i] >= '0' && k[i] <= '9') || k[i] == '_' || k[i] == '-' ||
              k[i] == '.'))
            return 0;
    return 1;
}

static int valid_value(const char *v, size_t n)
{
    if (n > REC_MAX_VALUE)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (v[i] == '\0' || v[i] == '\n')
            return 0;
    return 1;
}

static uint32_t frame_check(const unsigned char *p, size_t n)
{
    return (uint32_t)nmt_fnv1a(NMT_FNV_INIT, p, n);
}

/* ======================================================================== writer */

struct rec_writer {
    int fd;
    char *name;
    ZSTD_CCtx *cctx;
    struct {
        unsigned char *p;
        size_t len, cap;
    } out;                        /* compressed bytes not yet written */
    size_t chunk_bound;
    struct {
        unsigned char *p;
        size_t len, cap;
    } chunk;                      /* uncompressed records of the open chunk */
    uint64_t count, chunks;
    int failed;
};

static int out_reserve(struct rec_writer *w, size_t n)
{
    return NMT_GROW(w->out.p, w->out.cap, w->out.len + n) < 0 ? REC_ENOMEM : 0;
}

static int out_drain(struct rec_writer *w)
{
    if (w->out.len == 0)
        return 0;
    if (nmt_write_all(w->fd, w->out.p, w->out.len) < 0) {
        w->failed = 1;
        nmt_seterr("%s: %s", w->name, nmt_errmsg());
        return REC_EIO;
    }
    w->out.len = 0;
    return 0;
}

/* Compresses the open chunk as one zstd frame into the output buffer. */
static int compress_chunk(struct rec_writer *w)
{
    size_t bound = ZSTD_compressBound(w->chunk.len);
    if (out_reserve(w, bound) < 0)
        return REC_ENOMEM;
    size_t r = ZSTD_compress2(w->cctx, w->out.p + w->out.len, w->out.cap - w->out.len, w->chunk.p, w->chunk.len);
    if (ZSTD_isError(r)) {
        w->failed = 1;
        nmt_seterr("%s: compression failed: %s", w->name, ZSTD_getErrorName(r));
        return REC_EIO;
    }
    w->out.len += r;
    return 0;
}

static int put_skippable(struct rec_writer *w, uint32_t magic, const unsigned char *payload, size_t n)
{
    unsigned char hdr[8];
    nmt_put32(hdr, magic);
    nmt_put32(hdr + 4, (uint32_t)n);
    if (out_reserve(w, n + 8) < 0)
        return REC_ENOMEM;
    memcpy(w->out.p + w->out.len, hdr, 8);
    memcpy(w->out.p + w->out.len + 8, payload, n);
    w->out.len += n + 8;
    return 0;
}

struct rec_writer *rec_writer_open(int fd, const char *name, const char *kind, const char *producer,
                                   const struct rec_kv *kv, size_t nkv, const struct rec_writer_opts *opts)
{
    if (!valid_kind(kind)) {
        nmt_seterr("invalid stream kind '%s'", kind);
        return NULL;
    }
    if (nkv > REC_MAX_KV || strlen(producer) > REC_MAX_VALUE) {
        nmt_seterr("stream header too large");
        return NULL;
    }
    struct nmt_hdrbuf {
        unsigned char *p;
        size_t len;
    } hb = {0};
    size_t need = 4 + 4 + 4 + 1 + strlen(kind) + 2 + strlen(producer) + 2 + 4;
    for (size_t i = 0; i < nkv; i++) {
        size_t kl = strlen(kv[i].key), vl = strlen(kv[i].value);
        if (!valid_key(kv[i].key, kl) || !valid_value(kv[i].value, vl)) {
            nmt_seterr("invalid provenance entry '%s'", kv[i].key);
            return NULL;
        }
        need += 4 + kl + vl;
    }
    if (need > REC_MAX_HEADER) {
        nmt_seterr("stream header of %zu bytes exceeds %u", need, REC_MAX_HEADER);
        return NULL;
    }
    struct rec_writer *w = nmt_calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->fd = fd;
    w->name = nmt_strdup(name ? name : "output");
    w->cctx = ZSTD_createCCtx();
    hb.p = nmt_malloc(need);
    if (!w->name || !w->cctx || !hb.p) {
        if (w->name && w->cctx)
            nmt_seterr("out of memory");
        free(hb.p);
        rec_writer_abort(w);
        return NULL;
    }
    int level = opts && opts->level ? opts->level : 1;
    w->chunk_bound = opts && opts->chunk_bound ? opts->chunk_bound : REC_CHUNK_BOUND;
    ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1);
    ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_windowLog, 20);

    unsigned char *p = hb.p;
    memcpy(p, REC_HEADER_TAG, 4);
    nmt_put16(p + 4, REC_MAJOR);
    nmt_put16(p + 6, REC_MINOR);
    nmt_put32(p + 8, opts ? opts->flags : 0);
    p += 12;
    *p++ = (unsigned char)strlen(kind);
    memcpy(p, kind, strlen(kind));
    p += strlen(kind);
    nmt_put16(p, (uint16_t)strlen(producer));
    memcpy(p + 2, producer, strlen(producer));
    p += 2 + strlen(producer);
    nmt_put16(p, (uint16_t)nkv);
    p += 2;
    for (size_t i = 0; i < nkv; i++) {
        size_t kl = strlen(kv[i].key), vl = strlen(kv[i].value);
        nmt_put16(p, (uint16_t)kl);
        memcpy(p + 2, kv[i].key, kl);
        p += 2 + kl;
        nmt_put16(p, (uint16_t)vl);
        memcpy(p + 2, kv[i].value, vl);
        p += 2 + vl;
    }
    nmt_put32(p, frame_check(hb.p, (size_t)(p - hb.p)));
    p += 4;
    int rc = put_skippable(w, REC_MAGIC_HEADER, hb.p, (size_t)(p - hb.p));
    free(hb.p);
    if (rc < 0 || out_drain(w) < 0) {
        rec_writer_abort(w);
        return NULL;
    }
    return w;
}

static int end_chunk(struct rec_writer *w)
{
    if (w->chunk.len == 0)
        return 0;
    int rc = compress_chunk(w);
    if (rc < 0)
        return rc;
    w->chunk.len = 0;
    w->chunks++;
    return 0;
}

int rec_write(struct rec_writer *w, const void *data, size_t len)
{
    if (w->failed)
        return REC_EIO;
    if (len > REC_MAX_RECORD) {
        nmt_seterr("%s: record of %zu bytes exceeds the limit of %u", w->name, len, REC_MAX_RECORD);
        return REC_EUSAGE;
    }
    if (NMT_GROW(w->chunk.p, w->chunk.cap, w->chunk.len + len + 4) < 0)
        return REC_ENOMEM;
    nmt_put32(w->chunk.p + w->chunk.len, (uint32_t)len);
    if (len)
        memcpy(w->chunk.p + w->chunk.len + 4, data, len);
    w->chunk.len += 4 + len;
    w->count++;
    int rc;
    if (w->chunk.len >= w->chunk_bound && (rc = end_chunk(w)) < 0)
        return rc;
    if (w->out.len >= REC_OUT_FLUSH)
        return out_drain(w);
    if (w->chunk.cap > 2 * w->chunk_bound + 4096 && w->chunk.len == 0) { /* give back a huge record's buffer */
        free(w->chunk.p);
        w->chunk.p = NULL;
        w->chunk.cap = 0;
    }
    return 0;
}

int rec_flush(struct rec_writer *w)
{
    if (w->failed)
        return REC_EIO;
    int rc = end_chunk(w);
    if (rc < 0)
        return rc;
    return out_drain(w);
}

int rec_writer_close(struct rec_writer *w)
{
    if (!w)
        return 0;
    int rc = w->failed ? REC_EIO : end_chunk(w);
    if (rc == 0) {
        unsigned char t[28];
        memcpy(t, REC_TRAILER_TAG, 4);
        nmt_put32(t + 4, 0);
        nmt_put64(t + 8, w->count);
        nmt_put64(t + 16, w->chunks);
        nmt_put32(t + 24, frame_check(t, 24));
        rc = put_skippable(w, REC_MAGIC_TRAILER, t, sizeof t);
    }
    if (rc == 0)
        rc = out_drain(w);
    rec_writer_abort(w);
    return rc;
}

void rec_writer_abort(struct rec_writer *w)
{
    if (!w)
        return;
    ZSTD_freeCCtx(w->cctx);
    free(w->out.p);
    free(w->chunk.p);
    free(w->name);
    free(w);
}

uint64_t rec_writer_count(const struct rec_writer *w) { return w->count; }

/* ======================================================================== reader */

enum { ST_START, ST_BODY, ST_FRAME, ST_AFTER_TRAILER, ST_DONE, ST_FAILED };

struct rec_reader {
    int fd;
    char *name;
    unsigned char *in;            /* buffered input: bytes [in_pos, in_len) not yet consumed */
    size_t in_pos, in_len, in_cap;
    uint64_t in_base;             /* stream offset of in[0] */
    int eof;
    ZSTD_DCtx *dctx;
    unsigned char *ob;            /* decompressed bytes of the current chunk: [ob_pos, ob_len) */
    size_t ob_pos, ob_len, ob_cap;
    int state;
    int fail_status;
    uint64_t frame_offset;        /* where the current chunk began */
    uint64_t count, stream_records, stream_chunks, streams;
    char expect[REC_MAX_KIND + 1];
    struct rec_header header;     /* the first stream's header */
};

static uint64_t in_offset(const struct rec_reader *r) { return r->in_base + r->in_pos; }

static int fail(struct rec_reader *r, int status, uint64_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(struct rec_reader *r, int status, uint64_t off, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    nmt_seterr("%s: %s at byte %llu: %s", r->name, rec_status_name(status), (unsigned long long)off, msg);
    r->state = ST_FAILED;
    r->fail_status = status;
    return status;
}

/* Makes at least NEED bytes available after in_pos unless input ends first; returns the number
 * available (may be less at end of input) or REC_EIO/REC_ENOMEM. */
static long long fill(struct rec_reader *r, size_t need)
{
    while (r->in_len - r->in_pos < need && !r->eof) {
        if (r->in_pos > 0 && (r->in_pos == r->in_len || r->in_cap - r->in_len < REC_IN_CHUNK)) {
            memmove(r->in, r->in + r->in_pos, r->in_len - r->in_pos);
            r->in_len -= r->in_pos;
            r->in_base += r->in_pos;
            r->in_pos = 0;
        }
        size_t want = need > REC_IN_CHUNK ? need : REC_IN_CHUNK;
        if (NMT_GROW(r->in, r->in_cap, r->in_len + want) < 0)
            return REC_ENOMEM;
        ssize_t n = read(r->fd, r->in + r->in_len, r->in_cap - r->in_len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return fail(r, REC_EIO, in_offset(r), "read failed: %s", strerror(errno));
        }
        if (n == 0)
            r->eof = 1;
        r->in_len += (size_t)n;
    }
    size_t avail = r->in_len - r->in_pos;
    return (long long)(avail < need ? avail : need);
}

/* Parses a header frame payload P of N bytes at stream offset OFF into H. */
static int parse_header(struct rec_reader *r, const unsigned char *p, size_t n, uint64_t off, struct rec_header *h)
{
    const unsigned char *end = p + n;
    if (n < 4 + 8 + 1 + 2 + 2 + 4 || memcmp(p, REC_HEADER_TAG, 4) != 0)
        return fail(r, REC_ECORRUPT, off, "malformed stream header");
    if (frame_check(p, n - 4) != nmt_le32(end - 4))
        return fail(r, REC_ECORRUPT, off, "stream header checksum mismatch");
    end -= 4;
    h->major = nmt_le16(p + 4);
    h->minor = nmt_le16(p + 6);
    if (h->major != REC_MAJOR)
        return fail(r, REC_EVERSION, off, "stream format version %u.%u is not supported (this reader reads %d.x)",
                    h->major, h->minor, REC_MAJOR);
    h->flags = nmt_le32(p + 8);
    if (h->flags & ~REC_FLAGS_KNOWN)
        return fail(r, REC_ECORRUPT, off, "reserved header flags are set");
    p += 12;
    size_t kl = *p++;
    if (kl < 1 || kl > REC_MAX_KIND || kl > (size_t)(end - p))
        return fail(r, REC_ECORRUPT, off, "malformed stream kind");
    memcpy(h->kind, p, kl);
    h->kind[kl] = '\0';
    if (!valid_kind(h->kind))
        return fail(r, REC_ECORRUPT, off, "malformed stream kind");
    p += kl;
    if (end - p < 2)
        return fail(r, REC_ECORRUPT, off, "malformed stream header");
    size_t pl = nmt_le16(p);
    p += 2;
    if (pl > (size_t)(end - p) || !valid_value((const char *)p, pl))
        return fail(r, REC_ECORRUPT, off, "malformed producer field");
    h->producer = nmt_malloc(pl + 1);
    if (!h->producer)
        return REC_ENOMEM;
    memcpy(h->producer, p, pl);
    h->producer[pl] = '\0';
    p += pl;
    if (end - p < 2)
        return fail(r, REC_ECORRUPT, off, "malformed stream header");
    size_t nkv = nmt_le16(p);
    p += 2;
    if (nkv > REC_MAX_KV)
        return fail(r, REC_ECORRUPT, off, "%zu provenance entries (limit %d)", nkv, REC_MAX_KV);
    h->kv = nmt_calloc(nkv ? nkv : 1, sizeof *h->kv);
    if (!h->kv)
        return REC_ENOMEM;
    for (size_t i = 0; i < nkv; i++) {
        size_t len[2];
        char *s[2];
        for (int j = 0; j < 2; j++) {
            if (end - p < 2) {
                if (j)
                    free(s[0]);
                return fail(r, REC_ECORRUPT, off, "malformed provenance entry");
            }
            len[j] = nmt_le16(p);
            p += 2;
            if (len[j] > (size_t)(end - p) ||
                !(j == 0 ? valid_key((const char *)p, len[j]) : valid_value((const char *)p, len[j]))) {
                if (j)
                    free(s[0]);
                return fail(r, REC_ECORRUPT, off, "malformed provenance entry");
            }
            s[j] = nmt_malloc(len[j] + 1);
            if (!s[j]) {
                if (j)
                    free(s[0]);
                return REC_ENOMEM;
            }
            memcpy(s[j], p, len[j]);
            s[j][len[j]] = '\0';
            p += len[j];
        }
        h->kv[i].key = s[0];
        h->kv[i].value = s[1];
        h->nkv++;
    }
    if (p != end)
        return fail(r, REC_ECORRUPT, off, "%zu unexpected bytes in stream header", (size_t)(end - p));
    return 0;
}

/* Names the common wrong inputs by their first N bytes at P, with what to do instead; "" when
 * they look like nothing known. */
static const char *wrong_input_hint(const unsigned char *p, size_t n)
{
    unsigned char magic[4];
    nmt_put32(magic, REC_MAGIC_HEADER);
    if (memcmp(p, magic, n < 4 ? n : 4) == 0)
        return ""; /* the start of a stream header */
    if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b)
        return ": this is gzip-compressed data; decompress it first (zcat FILE | ...)";
    if (n >= 4 && nmt_le32(p) == REC_MAGIC_ZSTD)
        return ": this is zstd-compressed data without an nmt stream header (not written by an nmt tool)";
    if (n >= 10 && memcmp(p, "nmt-vocab ", 10) == 0)
        return ": this is a vocabulary file (nmt-vocab(5)); give it with --vocab";
    if (n >= 10 && nmt_le64(p) < ((uint64_t)1 << 30) && p[8] == '{' && p[9] == '"')
        return ": this is a checkpoint (safetensors); give it with -m";
    size_t bad;
    size_t k = n < 256 ? n : 256;
    while (k > 0 && k > n - 4 && (p[k - 1] & 0xC0) == 0x80)
        k--; /* do not judge a character cut by the end of what was read */
    if (k > 0 && (p[k - 1] & 0x80))
        k--;
    int text = k > 0 && utf8_check((const char *)p, k, &bad) == 0;
    for (size_t i = 0; text && i < k; i++)
        text = p[i] >= 0x20 || p[i] == '\n' || p[i] == '\t' || p[i] == '\r';
    if (text)
        return ": this is plain text; make a stream of it with nmt-tokenize (with --vocab V for ids)";
    return "";
}

/* Checks that header H, of a stream concatenated at offset OFF, agrees with the first stream's
 * (major version and REC_ORIGIN_KEYS); 0 or REC_EMIXED. */
static int check_same_origin(struct rec_reader *r, const struct rec_header *h, uint64_t off)
{
    if (h->major != r->header.major)
        return fail(r, REC_EMIXED, off, "a %s %u.%u stream follows a %s %u.%u stream", h->kind, h->major, h->minor,
                    r->header.kind, r->header.major, r->header.minor);
    static const char *const keys[] = REC_ORIGIN_KEYS;
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const char *a = rec_header_get(&r->header, keys[i]), *b = rec_header_get(h, keys[i]);
        if ((a || b) && (!a || !b || strcmp(a, b) != 0))
            return fail(r, REC_EMIXED, off, "a stream with %s=%s follows one with %s=%s (concatenated streams must "
                        "share it)", keys[i], b ? b : "(none)", keys[i], a ? a : "(none)");
    }
    return 0;
}

/* The input ended (no byte) at OFF between frames: REC_END after an end marker, else an error. */
static int input_ended(struct rec_reader *r, uint64_t off)
{
    if (r->state == ST_AFTER_TRAILER) {
        r->state = ST_DONE;
        return REC_END;
    }
    if (r->state == ST_START && off == 0)
        return fail(r, REC_ETRUNC, off, "empty input (no stream header)");
    return fail(r, REC_ETRUNC, off, "input ends without the stream's end marker");
}

/* A zstd data chunk starts at OFF: checks its place and frame header, readies the decoder; 1 or an
 * error. */
static int begin_chunk(struct rec_reader *r, uint64_t off)
{
    if (r->state != ST_BODY)
        return fail(r, REC_ECORRUPT, off, "data chunk outside a stream (no header before it)");
    long long g = fill(r, 5);
    if (g < 0)
        return (int)g;
    if (g < 5)
        return fail(r, REC_ETRUNC, off, "input ends inside a chunk");
    unsigned char fhd = r->in[r->in_pos + 4];
    if (!(fhd & 0x04))
        return fail(r, REC_ECORRUPT, off, "chunk has no content checksum");
    ZSTD_DCtx_reset(r->dctx, ZSTD_reset_session_only);
    r->frame_offset = off;
    r->state = ST_FRAME;
    return 1;
}

/* Checks a following stream's header H (at OFF) against the expected kind and the first stream. */
static int check_stream_header(struct rec_reader *r, const struct rec_header *h, uint64_t off)
{
    if (r->expect[0] && strcmp(h->kind, r->expect) != 0)
        return fail(r, REC_EKIND, off, "expected a %s stream, got %s %u.%u", r->expect, h->kind, h->major, h->minor);
    if (r->streams > 0 && strcmp(h->kind, r->header.kind) != 0)
        return fail(r, REC_EKIND, off, "a stream of kind %s follows one of kind %s", h->kind, r->header.kind);
    if (r->streams > 0)
        return check_same_origin(r, h, off);
    return 0;
}

/* The stream header frame of SIZE bytes at OFF: parsed, checked, consumed; 0 or an error. */
static int read_stream_header(struct rec_reader *r, uint64_t off, uint32_t size)
{
    if (r->state == ST_BODY)
        return fail(r, REC_ECORRUPT, off, "stream header inside a stream (missing end marker)");
    if (size > REC_MAX_HEADER)
        return fail(r, REC_ECORRUPT, off, "stream header of %u bytes exceeds %u", size, REC_MAX_HEADER);
    long long g = fill(r, 8 + (size_t)size);
    if (g < 0)
        return (int)g;
    if (g < 8 + (long long)size)
        return fail(r, REC_ETRUNC, off, "input ends inside the stream header");
    struct rec_header h = {0};
    int rc = parse_header(r, r->in + r->in_pos + 8, size, off, &h);
    if (rc == 0)
        rc = check_stream_header(r, &h, off);
    if (rc < 0) {
        header_clear(&h);
        return rc;
    }
    if (r->streams == 0)
        r->header = h;
    else
        header_clear(&h);
    r->streams++;
    r->stream_records = r->stream_chunks = 0;
    r->in_pos += 8 + (size_t)size;
    r->state = ST_BODY;
    return 0;
}

/* The end marker frame of SIZE bytes at OFF: checksum and counts checked, consumed; 0 or an error. */
static int read_end_marker(struct rec_reader *r, uint64_t off, uint32_t size)
{
    if (r->state != ST_BODY)
        return fail(r, REC_ECORRUPT, off, "end marker without a stream header");
    if (size != 28)
        return fail(r, REC_ECORRUPT, off, "end marker of %u bytes (expected 28)", size);
    long long g = fill(r, 8 + 28);
    if (g < 0)
        return (int)g;
    if (g < 36)
        return fail(r, REC_ETRUNC, off, "input ends inside the end marker");
    const unsigned char *t = r->in + r->in_pos + 8;
    if (memcmp(t, REC_TRAILER_TAG, 4) != 0 || frame_check(t, 24) != nmt_le32(t + 24))
        return fail(r, REC_ECORRUPT, off, "end marker checksum mismatch");
    if (nmt_le32(t + 4) != 0)
        return fail(r, REC_ECORRUPT, off, "reserved end marker flags are set");
    if (nmt_le64(t + 8) != r->stream_records || nmt_le64(t + 16) != r->stream_chunks)
        return fail(r, REC_ECORRUPT, off, "end marker counts %llu records in %llu chunks, stream had %llu in %llu",
                    (unsigned long long)nmt_le64(t + 8), (unsigned long long)nmt_le64(t + 16),
                    (unsigned long long)r->stream_records, (unsigned long long)r->stream_chunks);
    r->in_pos += 36;
    r->state = ST_AFTER_TRAILER;
    return 0;
}

/* Another skippable frame of SIZE bytes: skipped without being stored; 0 or an error. */
static int skip_frame(struct rec_reader *r, uint32_t size)
{
    if (r->state == ST_START)
        return fail(r, REC_EMAGIC, in_offset(r), "input starts with a skippable frame that is not an nmt header");
    uint64_t left = size;
    r->in_pos += 8;
    while (left > 0) {
        long long g = fill(r, 1);
        if (g < 0)
            return (int)g;
        if (g == 0)
            return fail(r, REC_ETRUNC, in_offset(r), "input ends inside a skippable frame");
        size_t avail = r->in_len - r->in_pos;
        size_t take = avail < left ? avail : (size_t)left;
        r->in_pos += take;
        left -= take;
    }
    return 0;
}

/* Reads frames until the next data chunk: 1 when one starts, REC_END after the last stream's end
 * marker, or an error. Headers, end markers and other skippable frames are handled on the way. */
static int next_frame(struct rec_reader *r)
{
    for (;;) {
        uint64_t off = in_offset(r);
        long long got = fill(r, 8);
        if (got < 0)
            return (int)got;
        if (got == 0)
            return input_ended(r, off);
        const unsigned char *p = r->in + r->in_pos;
        uint32_t magic = got >= 4 ? nmt_le32(p) : 0;
        if (got >= 4 && magic == REC_MAGIC_ZSTD)
            return begin_chunk(r, off);
        if (got < 8) {
            if (r->state == ST_START && off == 0 && got >= 4 && (magic & 0xFFFFFFF0U) != 0x184D2A50U)
                return fail(r, REC_EMAGIC, off, "bad magic 0x%08x", magic);
            return fail(r, REC_ETRUNC, off, "input ends inside a frame header");
        }
        uint32_t size = nmt_le32(p + 4);
        if ((magic & 0xFFFFFFF0U) != 0x184D2A50U) {
            if (off == 0)
                return fail(r, REC_EMAGIC, off, "bad magic 0x%08x", magic);
            return fail(r, REC_ECORRUPT, off, "bad frame magic 0x%08x", magic);
        }
        int rc;
        if (magic == REC_MAGIC_HEADER)
            rc = read_stream_header(r, off, size);
        else if (magic == REC_MAGIC_TRAILER)
            rc = read_end_marker(r, off, size);
        else
            rc = skip_frame(r, size);
        if (rc < 0)
            return rc;
    }
}

struct rec_reader *rec_reader_open(int fd, const char *name, const char *expect_kind, int *status)
{
    int dummy;
    if (!status)
        status = &dummy;
    struct rec_reader *r = nmt_calloc(1, sizeof *r);
    if (!r) {
        *status = REC_ENOMEM;
        return NULL;
    }
    r->fd = fd;
    r->name = nmt_strdup(name ? name : "input");
    r->dctx = ZSTD_createDCtx();
    if (!r->name || !r->dctx) {
        nmt_seterr("out of memory");
        *status = REC_ENOMEM;
        rec_reader_free(r);
        return NULL;
    }
    ZSTD_DCtx_setParameter(r->dctx, ZSTD_d_windowLogMax, REC_WINDOW_LOG_MAX);
    if (expect_kind) {
        snprintf(r->expect, sizeof r->expect, "%s", expect_kind);
    }
    r->state = ST_START;
    /* read up to the first header (a header is followed by a chunk, trailer or more) */
    uint64_t off = 0;
    long long got = fill(r, 8);
    if (got >= 0 && got < 8) {
        const char *hint = wrong_input_hint(r->in, (size_t)got);
        *status = got == 0 ? fail(r, REC_ETRUNC, off, "empty input (no stream header)")
                  : *hint ? fail(r, REC_EMAGIC, off, "not a stream header%s", hint)
                  : (got >= 4 && (nmt_le32(r->in) & 0xFFFFFFF0U) != 0x184D2A50U)
                      ? fail(r, REC_EMAGIC, off, "bad magic 0x%08x%s", nmt_le32(r->in), wrong_input_hint(r->in, (size_t)got))
                      : fail(r, REC_ETRUNC, off, "input ends inside the stream header");
        rec_reader_free(r);
        return NULL;
    }
    if (got < 0) {
        *status = (int)got;
        rec_reader_free(r);
        return NULL;
    }
    uint32_t magic = nmt_le32(r->in);
    if (magic != REC_MAGIC_HEADER) {
        *status = fail(r, REC_EMAGIC, 0, "bad magic 0x%08x%s", magic, wrong_input_hint(r->in, r->in_len));
        rec_reader_free(r);
        return NULL;
    }
    /* parse exactly the header frame; next_frame() stops before the first chunk */
    uint32_t size = nmt_le32(r->in + 4);
    if (size > REC_MAX_HEADER) {
        *status = fail(r, REC_ECORRUPT, 0, "stream header of %u bytes exceeds %u", size, REC_MAX_HEADER);
        rec_reader_free(r);
        return NULL;
    }
    got = fill(r, 8 + (size_t)size);
    int rc = got < 0 ? (int)got : got < 8 + (long long)size ? fail(r, REC_ETRUNC, 0, "input ends inside the stream header") : 0;
    if (rc == 0)
        rc = parse_header(r, r->in + 8, size, 0, &r->header);
    if (rc == 0 && r->expect[0] && strcmp(r->header.kind, r->expect) != 0)
        rc = fail(r, REC_EKIND, 0, "expected a %s stream, got %s %u.%u", r->expect, r->header.kind, r->header.major,
                  r->header.minor);
    if (rc < 0) {
        *status = rc;
        rec_reader_free(r);
        return NULL;
    }
    r->in_pos = 8 + (size_t)size;
    r->streams = 1;
    r->state = ST_BODY;
    *status = REC_OK;
    return r;
}

const struct rec_header *rec_reader_header(const struct rec_reader *r) { return &r->header; }
uint64_t rec_reader_count(const struct rec_reader *r) { return r->count; }
uint64_t rec_reader_streams(const struct rec_reader *r) { return r->streams; }
uint64_t rec_reader_offset(const struct rec_reader *r) { return in_offset(r); }

int rec_read(struct rec_reader *r, const unsigned char **data, size_t *len)
{
    if (r->state == ST_FAILED)
        return r->fail_status;
    if (r->state == ST_DONE)
        return REC_END;
    for (;;) {
        /* a whole record already decompressed? */
        size_t have = r->ob_len - r->ob_pos;
        if (have >= 4) {
            uint32_t n = nmt_le32(r->ob + r->ob_pos);
            if (n > REC_MAX_RECORD)
                return fail(r, REC_ECORRUPT, r->frame_offset, "record length %u exceeds the limit of %u", n, REC_MAX_RECORD);
            if (have - 4 >= n) {
                *data = r->ob + r->ob_pos + 4;
                *len = n;
                r->ob_pos += 4 + (size_t)n;
                r->count++;
                r->stream_records++;
                return REC_OK;
            }
        }
        if (r->state != ST_FRAME) {
            r->ob_pos = r->ob_len = 0;
            int rc = next_frame(r);
            if (rc != 1)
                return rc;
            continue;
        }
        /* decompress more of the chunk */
        if (r->ob_pos > 0) {
            memmove(r->ob, r->ob + r->ob_pos, have);
            r->ob_len = have;
            r->ob_pos = 0;
        }
        if (r->ob_cap - r->ob_len < 4096) {
            size_t cap = r->ob_cap ? r->ob_cap * 2 : 256 * 1024;
            if (cap > (size_t)REC_MAX_RECORD + 8 + 4096)
                cap = (size_t)REC_MAX_RECORD + 8 + 4096;
            if (cap <= r->ob_cap)
                return fail(r, REC_ECORRUPT, r->frame_offset, "record exceeds the limit of %u bytes", REC_MAX_RECORD);
            unsigned char *p = nmt_realloc(r->ob, cap);
            if (!p)
                return REC_ENOMEM;
            r->ob = p;
            r->ob_cap = cap;
        }
        if (r->in_pos == r->in_len) {
            long long g = fill(r, 1);
            if (g < 0)
                return (int)g;
            if (g == 0)
                return fail(r, REC_ETRUNC, in_offset(r), "input ends inside a chunk");
        }
        ZSTD_inBuffer in = {r->in + r->in_pos, r->in_len - r->in_pos, 0};
        ZSTD_outBuffer out = {r->ob + r->ob_len, r->ob_cap - r->ob_len, 0};
        size_t ret = ZSTD_decompressStream(r->dctx, &out, &in);
        r->in_pos += in.pos;
        r->ob_len += out.pos;
        if (ZSTD_isError(ret)) {
            if (ZSTD_getErrorCode(ret) == ZSTD_error_checksum_wrong)
                return fail(r, REC_ECORRUPT, r->frame_offset, "chunk checksum mismatch");
            return fail(r, REC_ECORRUPT, r->frame_offset, "bad chunk: %s", ZSTD_getErrorName(ret));
        }
        if (ret == 0) {
            /* chunk complete: it must hold whole records only */
            r->stream_chunks++;
            size_t pos = r->ob_pos;
            while (r->ob_len - pos >= 4) {
                uint32_t n = nmt_le32(r->ob + pos);
                if (n > r->ob_len - pos - 4)
                    break;
                pos += 4 + (size_t)n;
            }
            if (pos != r->ob_len)
                return fail(r, REC_ECORRUPT, r->frame_offset, "chunk ends inside a record");
            r->state = ST_BODY; /* its records are served from ob before the next frame is read */
            continue;
        }
        if (out.pos == 0 && in.pos == 0 && r->eof && r->in_pos == r->in_len)
            return fail(r, REC_ETRUNC, in_offset(r), "input ends inside a chunk");
    }
}

void rec_reader_free(struct rec_reader *r)
{
    if (!r)
        return;
    ZSTD_freeDCtx(r->dctx);
    header_clear(&r->header);
    free(r->in);
    free(r->ob);
    free(r->name);
    free(r);
}
