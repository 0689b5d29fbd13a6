/* npz.c: NumPy .npz archives (see npz.h and formats/marian.md). The zip structure is read from
 * its end: the end-of-central-directory record, then each central directory entry and the local
 * header it points to; the stored bytes of an entry are a .npy file, whose header is a Python
 * dictionary literal read by a small parser of the three keys numpy writes. */
#include "io/npz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "io/file.h"

#define ZIP_EOCD 0x06054b50u      /* end of central directory */
#define ZIP_CENTRAL 0x02014b50u   /* central directory entry */
#define ZIP_LOCAL 0x04034b50u     /* local file header */
#define ZIP_EOCD_LEN 22
#define ZIP_CENTRAL_LEN 46
#define ZIP_LOCAL_LEN 30
#define NPZ_MAX_FILE ((size_t)UINT32_MAX) /* an archive without zip64 */

size_t npz_dtype_size(enum npz_dtype dt) { return dt == NPZ_F32 ? 4 : 1; }

uint32_t npz_crc32(uint32_t crc, const void *p, size_t len)
{
    static uint32_t table[256];
    static int ready; /* the table is the same whichever thread fills it */
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    const unsigned char *b = p;
    crc = ~crc;
    for (size_t i = 0; i < len; i++)
        crc = table[(crc ^ b[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

struct npz *npz_new(void) { return nmt_calloc(1, sizeof(struct npz)); }

void npz_free(struct npz *z)
{
    if (!z)
        return;
    for (size_t i = 0; i < z->n; i++) {
        free(z->a[i].name);
        free(z->a[i].data);
    }
    free(z->a);
    free(z);
}

const struct npz_array *npz_find(const struct npz *z, const char *name)
{
    for (size_t i = 0; i < z->n; i++)
        if (!strcmp(z->a[i].name, name))
            return &z->a[i];
    return NULL;
}

/* Element count of SHAPE[NDIM] into *COUNT, refusing a product whose bytes (ELSIZE each) overflow
 * MAX. 0 or -1 (no error set). */
static int shape_count(const uint64_t *shape, int ndim, size_t elsize, uint64_t max, uint64_t *count)
{
    uint64_t c = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] != 0 && c > max / shape[d])
            return -1;
        c *= shape[d];
    }
    if (c > max / elsize)
        return -1;
    *count = c;
    return 0;
}

struct npz_array *npz_add(struct npz *z, const char *name, enum npz_dtype dt, int ndim, const uint64_t *shape,
                          const void *data)
{
    if (strlen(name) + 4 > NPZ_MAX_NAME) {
        nmt_seterr("array name '%.40s...' too long", name);
        return NULL;
    }
    if (npz_find(z, name)) {
        nmt_seterr("array '%s' added twice", name);
        return NULL;
    }
    if (ndim < 0 || ndim > NPZ_MAX_DIMS) {
        nmt_seterr("array '%s': %d dimensions (at most %d)", name, ndim, NPZ_MAX_DIMS);
        return NULL;
    }
    uint64_t count;
    if (shape_count(shape, ndim, npz_dtype_size(dt), NPZ_MAX_FILE, &count) < 0) {
        nmt_seterr("array '%s' too large for an archive without zip64", name);
        return NULL;
    }
    if (NMT_GROW(z->a, z->cap, z->n + 1) < 0)
        return NULL;
    struct npz_array *a = &z->a[z->n];
    memset(a, 0, sizeof *a);
    size_t nbytes = (size_t)count * npz_dtype_size(dt);
    a->name = nmt_strdup(name);
    a->data = nmt_malloc(nbytes ? nbytes : 1);
    if (!a->name || !a->data) {
        free(a->name);
        free(a->data);
        return NULL;
    }
    if (nbytes)
        memcpy(a->data, data, nbytes);
    a->dtype = dt;
    a->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        a->shape[d] = shape[d];
    a->count = count;
    z->n++;
    return a;
}

/* ---- .npy headers ---- */

/* The cursor of a header dictionary: text T[0..N), position I; ENTRY and NAME for errors. */
struct hp {
    const char *t;
    size_t n, i;
    const char *name, *entry;
};

static int hp_err(const struct hp *p, const char *what)
{
    return nmt_seterr("%s: entry '%s': .npy header: %s at character %zu", p->name, p->entry, what, p->i);
}

static void hp_ws(struct hp *p)
{
    while (p->i < p->n && (p->t[p->i] == ' ' || p->t[p->i] == '\t'))
        p->i++;
}

/* Consumes C after blanks; 0, or -1 with the error set naming WHAT was expected. */
static int hp_expect(struct hp *p, char c)
{
    hp_ws(p);
    if (p->i >= p->n || p->t[p->i] != c) {
        char what[32];
        snprintf(what, sizeof what, "expected '%c'", c);
        return hp_err(p, what);
    }
    p->i++;
    return 0;
}

/* A quoted string ('...' or "...", no escapes) into OUT (CAP bytes). 0 or -1. */
static int hp_string(struct hp *p, char *out, size_t cap)
{
    hp_ws(p);
    if (p->i >= p->n || (p->t[p->i] != '\'' && p->t[p->i] != '"'))
        return hp_err(p, "expected a quoted string");
    char q = p->t[p->i++];
    size_t k = 0;
    while (p->i < p->n && p->t[p->i] != q) {
        if (p->t[p->i] == '\\' || k + 1 >= cap)
            return hp_err(p, "unexpected string");
        out[k++] = p->t[p->i++];
    }
    if (p->i >= p->n)
        return hp_err(p, "unterminated string");
    p->i++;
    out[k] = 0;
    return 0;
}

/* The shape tuple "(a, b,)" into A. 0 or -1. */
static int hp_shape(struct hp *p, struct npz_array *a)
{
    if (hp_expect(p, '(') < 0)
        return -1;
    a->ndim = 0;
    for (;;) {
        hp_ws(p);
        if (p->i < p->n && p->t[p->i] == ')') {
            p->i++;
            return 0;
        }
        if (a->ndim == NPZ_MAX_DIMS)
            return hp_err(p, "more than 8 dimensions");
        uint64_t v = 0;
        size_t start = p->i;
        while (p->i < p->n && p->t[p->i] >= '0' && p->t[p->i] <= '9' && p->i - start < 18)
            v = v * 10 + (uint64_t)(p->t[p->i++] - '0');
        if (p->i == start || (p->i < p->n && p->t[p->i] >= '0' && p->t[p->i] <= '9'))
            return hp_err(p, "expected a dimension (a number below 10^18)");
        a->shape[a->ndim++] = v;
        hp_ws(p);
        if (p->i < p->n && p->t[p->i] == ',')
            p->i++;
        else if (p->i >= p->n || p->t[p->i] != ')')
            return hp_err(p, "expected ',' or ')' in the shape");
    }
}

/* One "'key': value" pair into A; *SEEN gets bit 1 descr, 2 fortran_order, 4 shape. 0 or -1. */
static int hp_pair(struct hp *p, struct npz_array *a, int *seen)
{
    char key[32], val[32];
    if (hp_string(p, key, sizeof key) < 0 || hp_expect(p, ':') < 0)
        return -1;
    int bit = !strcmp(key, "descr") ? 1 : !strcmp(key, "fortran_order") ? 2 : !strcmp(key, "shape") ? 4 : 0;
    if (!bit)
        return hp_err(p, "unknown key (not descr, fortran_order or shape)");
    if (*seen & bit)
        return hp_err(p, "key given twice");
    *seen |= bit;
    if (bit == 4)
        return hp_shape(p, a);
    if (bit == 2) {
        hp_ws(p);
        if (p->n - p->i >= 5 && !memcmp(p->t + p->i, "False", 5)) {
            p->i += 5;
            return 0;
        }
        return hp_err(p, "fortran_order is not False (only C order is read)");
    }
    if (hp_string(p, val, sizeof val) < 0)
        return -1;
    if (!strcmp(val, "<f4"))
        a->dtype = NPZ_F32;
    else if (!strcmp(val, "|i1") || !strcmp(val, "<i1"))
        a->dtype = NPZ_I8;
    else {
        nmt_seterr("%s: entry '%s': data type '%s' is not read (only '<f4' float32 and '|i1' int8)", p->name,
                   p->entry, val);
        return -1;
    }
    return 0;
}

/* Parses the .npy file D (LEN bytes) of entry ENTRY into A (name set by the caller): its data
 * copied. 0, or -1 with the error set. */
static int npy_parse(const unsigned char *d, size_t len, struct npz_array *a, const char *name, const char *entry)
{
    if (len < 10 || memcmp(d, "\x93NUMPY", 6) != 0)
        return nmt_seterr("%s: entry '%s': not a .npy file (no \\x93NUMPY magic)", name, entry);
    int major = d[6];
    if (major < 1 || major > 3)
        return nmt_seterr("%s: entry '%s': .npy version %d.%d is not read (1 to 3)", name, entry, major, d[7]);
    size_t pre = major == 1 ? 10 : 12;
    if (len < pre)
        return nmt_seterr("%s: entry '%s': truncated .npy header", name, entry);
    size_t hlen = major == 1 ? nmt_le16(d + 8) : nmt_le32(d + 8);
    if (hlen > NPZ_MAX_HEADER || hlen > len - pre)
        return nmt_seterr("%s: entry '%s': .npy header of %zu bytes runs past the entry (%zu bytes)", name, entry,
                          hlen, len);
    struct hp p = {(const char *)d + pre, hlen, 0, name, entry};
    int seen = 0;
    if (hp_expect(&p, '{') < 0)
        return -1;
    for (;;) {
        hp_ws(&p);
        if (p.i < p.n && p.t[p.i] == '}')
            break;
        if (hp_pair(&p, a, &seen) < 0)
            return -1;
        hp_ws(&p);
        if (p.i < p.n && p.t[p.i] == ',')
            p.i++;
        else if (p.i >= p.n || p.t[p.i] != '}')
            return hp_err(&p, "expected ',' or '}'");
    }
    p.i++;
    while (p.i < p.n && (p.t[p.i] == ' ' || p.t[p.i] == '\n' || p.t[p.i] == '\0'))
        p.i++;
    if (p.i != p.n)
        return hp_err(&p, "unexpected text after the dictionary");
    if (seen != 7)
        return nmt_seterr("%s: entry '%s': .npy header lacks %s", name, entry,
                          !(seen & 1) ? "'descr'" : !(seen & 2) ? "'fortran_order'" : "'shape'");
    size_t body = len - pre - hlen, es = npz_dtype_size(a->dtype);
    if (shape_count(a->shape, a->ndim, es, body, &a->count) < 0 || a->count * es != body)
        return nmt_seterr("%s: entry '%s': %zu data bytes, not what the shape and data type need", name, entry,
                          body);
    if (!(a->data = nmt_malloc(body ? body : 1)))
        return -1;
    memcpy(a->data, d + pre + hlen, body);
    return 0;
}

/* ---- the zip structure ---- */

/* Finds the end-of-central-directory record of D (LEN bytes): its offset in *EOCD. 0, or -1 with
 * the error set. */
static int find_eocd(const unsigned char *d, size_t len, const char *name, size_t *eocd)
{
    if (len < ZIP_EOCD_LEN)
        return nmt_seterr("%s: %zu bytes, too short for a zip archive", name, len);
    size_t lo = len - ZIP_EOCD_LEN > 65535 ? len - ZIP_EOCD_LEN - 65535 : 0;
    for (size_t i = len - ZIP_EOCD_LEN + 1; i-- > lo;)
        if (nmt_le32(d + i) == ZIP_EOCD && i + ZIP_EOCD_LEN + nmt_le16(d + i + 20) == len) {
            *eocd = i;
            return 0;
        }
    return nmt_seterr("%s: no zip end-of-central-directory record (not an .npz archive, or truncated)", name);
}

/* The central directory of D: its entry count, offset and size, checked. 0 or -1. */
static int read_eocd(const unsigned char *d, size_t len, const char *name, size_t *n, size_t *cd, size_t *cdlen)
{
    size_t e = 0;
    if (find_eocd(d, len, name, &e) < 0)
        return -1;
    const unsigned char *r = d + e;
    if (e >= 20 && nmt_le32(d + e - 20) == 0x07064b50u)
        return nmt_seterr("%s: byte %zu: a zip64 archive (not read)", name, e - 20);
    if (nmt_le16(r + 4) != 0 || nmt_le16(r + 6) != 0 || nmt_le16(r + 8) != nmt_le16(r + 10))
        return nmt_seterr("%s: byte %zu: a multi-disk zip archive (not read)", name, e);
    *n = nmt_le16(r + 10);
    *cdlen = nmt_le32(r + 12);
    *cd = nmt_le32(r + 16);
    if (*n == 0xFFFF || *cdlen == 0xFFFFFFFFu || *cd == 0xFFFFFFFFu)
        return nmt_seterr("%s: byte %zu: a zip64 archive (not read)", name, e);
    if (*cd > e || *cdlen > e - *cd)
        return nmt_seterr("%s: byte %zu: the central directory (%zu bytes at byte %zu) runs past its end record",
                          name, e, *cdlen, *cd);
    if (*n > *cdlen / ZIP_CENTRAL_LEN)
        return nmt_seterr("%s: byte %zu: %zu entries cannot fit in a central directory of %zu bytes", name, e,
                          *n, *cdlen);
    return 0;
}

/* The entry of the central directory record at D + *AT (END: the directory's end): its name
 * (without ".npy") in ENTRY (NPZ_MAX_NAME bytes), its stored bytes in *DATA and *DLEN, checked
 * against their CRC-32; *AT moves past the record. 0, or -1 with the error set. */
static int read_entry(const unsigned char *d, size_t cd, size_t *at, size_t end, const char *name, char *entry,
                      const unsigned char **data, size_t *dlen)
{
    size_t c = *at;
    if (end - c < ZIP_CENTRAL_LEN || nmt_le32(d + c) != ZIP_CENTRAL)
        return nmt_seterr("%s: byte %zu: expected a central directory entry", name, c);
    const unsigned char *r = d + c;
    size_t nlen = nmt_le16(r + 28), rec = ZIP_CENTRAL_LEN + nlen + nmt_le16(r + 30) + nmt_le16(r + 32);
    if (rec > end - c)
        return nmt_seterr("%s: byte %zu: central directory entry runs past the directory", name, c);
    if (nlen == 0 || nlen >= NPZ_MAX_NAME || memchr(r + ZIP_CENTRAL_LEN, 0, nlen))
        return nmt_seterr("%s: byte %zu: entry name empty, too long or holding a NUL byte", name, c);
    memcpy(entry, r + ZIP_CENTRAL_LEN, nlen);
    entry[nlen] = 0;
    *at = c + rec;
    uint32_t crc = nmt_le32(r + 16);
    size_t size = nmt_le32(r + 20), off = nmt_le32(r + 42);
    if (nmt_le16(r + 8) & 1)
        return nmt_seterr("%s: entry '%s': encrypted (not read)", name, entry);
    if (nmt_le16(r + 10) != 0)
        return nmt_seterr("%s: entry '%s': compressed (method %u; only stored entries are read: numpy.savez, not "
                          "savez_compressed)", name, entry, nmt_le16(r + 10));
    if (size == 0xFFFFFFFFu || off == 0xFFFFFFFFu || nmt_le32(r + 24) == 0xFFFFFFFFu)
        return nmt_seterr("%s: entry '%s': zip64 sizes (not read)", name, entry);
    if (size != nmt_le32(r + 24))
        return nmt_seterr("%s: entry '%s': stored entry whose sizes differ", name, entry);
    if (off > cd || cd - off < ZIP_LOCAL_LEN || nmt_le32(d + off) != ZIP_LOCAL)
        return nmt_seterr("%s: entry '%s': no local header at byte %zu", name, entry, off);
    size_t lname = nmt_le16(d + off + 26), start = off + ZIP_LOCAL_LEN + lname + nmt_le16(d + off + 28);
    if (lname != nlen || start > cd || memcmp(d + off + ZIP_LOCAL_LEN, entry, nlen) != 0)
        return nmt_seterr("%s: entry '%s': local header at byte %zu does not match the directory", name, entry,
                          off);
    if (size > cd - start)
        return nmt_seterr("%s: entry '%s': %zu bytes at byte %zu run past the entries' end (truncated?)", name,
                          entry, size, start);
    if (npz_crc32(0, d + start, size) != crc)
        return nmt_seterr("%s: entry '%s': CRC-32 mismatch (corrupt data at bytes %zu..%zu)", name, entry, start,
                          start + size);
    *data = d + start;
    *dlen = size;
    return 0;
}

/* Reads the entries of the archive D into Z. 0 or -1. */
static int read_entries(struct npz *z, const unsigned char *d, size_t n, size_t cd, size_t cdlen, const char *name)
{
    char entry[NPZ_MAX_NAME];
    size_t at = cd;
    for (size_t k = 0; k < n; k++) {
        const unsigned char *data = NULL;
        size_t dlen = 0, elen;
        if (read_entry(d, cd, &at, cd + cdlen, name, entry, &data, &dlen) < 0)
            return -1;
        elen = strlen(entry);
        if (elen < 5 || strcmp(entry + elen - 4, ".npy") != 0)
            return nmt_seterr("%s: entry '%s': not a .npy file (name without .npy)", name, entry);
        entry[elen - 4] = 0;
        if (npz_find(z, entry))
            return nmt_seterr("%s: entry '%s.npy' appears twice", name, entry);
        if (NMT_GROW(z->a, z->cap, z->n + 1) < 0)
            return -1;
        struct npz_array *a = &z->a[z->n];
        memset(a, 0, sizeof *a);
        if (!(a->name = nmt_strdup(entry)))
            return -1;
        z->n++;
        entry[elen - 4] = '.';
        if (npy_parse(data, dlen, a, name, entry) < 0)
            return -1;
    }
    return 0;
}

struct npz *npz_parse(const void *data, size_t len, const char *name)
{
    size_t n = 0, cd = 0, cdlen = 0;
    if (len > NPZ_MAX_FILE) {
        nmt_seterr("%s: larger than 4 GiB (a zip64 archive, not read)", name);
        return NULL;
    }
    if (read_eocd(data, len, name, &n, &cd, &cdlen) < 0)
        return NULL;
    struct npz *z = npz_new();
    if (z && read_entries(z, data, n, cd, cdlen, name) < 0) {
        npz_free(z);
        return NULL;
    }
    return z;
}

struct npz *npz_load(const char *path)
{
    struct nmt_buf b = {0};
    struct npz *z = NULL;
    if (nmt_read_whole(path, NPZ_MAX_FILE, &b) == 0)
        z = npz_parse(b.data, b.len, nmt_path_name(path, 0));
    nmt_buf_free(&b);
    return z;
}

/* ---- writing ---- */

/* Appends the .npy version 1.0 header of A to OUT, padded with spaces and a newline to a multiple
 * of 64 bytes as numpy pads it. 0 or -1. */
static int put_npy_header(struct nmt_buf *out, const struct npz_array *a)
{
    char dict[64 + 24 * NPZ_MAX_DIMS];
    int k = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     a->dtype == NPZ_F32 ? "<f4" : "|i1");
    for (int d = 0; d < a->ndim; d++)
        k += snprintf(dict + k, sizeof dict - (size_t)k, "%s%llu", d ? ", " : "", (unsigned long long)a->shape[d]);
    k += snprintf(dict + k, sizeof dict - (size_t)k, "%s), }", a->ndim == 1 ? "," : "");
    size_t total = (10 + (size_t)k + 1 + 63) / 64 * 64, hlen = total - 10;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    nmt_put16(pre + 8, (uint16_t)hlen);
    if (nmt_buf_append(out, pre, 10) < 0 || nmt_buf_append(out, dict, (size_t)k) < 0 ||
        nmt_buf_reserve(out, hlen - (size_t)k) < 0)
        return -1;
    memset(out->data + out->len, ' ', hlen - (size_t)k - 1);
    out->data[out->len + hlen - (size_t)k - 1] = '\n';
    out->len += hlen - (size_t)k;
    return 0;
}

/* Appends the zip header fields shared by the local and central records of an entry. */
static int put_common(struct nmt_buf *b, uint32_t crc, uint32_t size, size_t nlen)
{
    unsigned char h[26] = {20, 0}; /* version needed 2.0, flags 0, stored, time and date 0 */
    nmt_put32(h + 10, crc);
    nmt_put32(h + 14, size);
    nmt_put32(h + 18, size);
    nmt_put16(h + 22, (uint16_t)nlen);
    return nmt_buf_append(b, h, sizeof h);
}

/* Appends entry A (local header, .npy) to OUT and its central record to CD. 0 or -1. */
static int put_entry(struct nmt_buf *out, struct nmt_buf *cd, const struct npz_array *a)
{
    char fname[NPZ_MAX_NAME + 8];
    size_t nlen = (size_t)snprintf(fname, sizeof fname, "%s.npy", a->name), off = out->len;
    struct nmt_buf npy = {0};
    size_t body = (size_t)a->count * npz_dtype_size(a->dtype);
    int rc = put_npy_header(&npy, a);
    if (rc == 0 && npy.len + body + off + 2 * (ZIP_LOCAL_LEN + nlen) > NPZ_MAX_FILE)
        rc = nmt_seterr("array '%s' ends past 4 GiB: the archive would need zip64", a->name);
    if (rc < 0) {
        nmt_buf_free(&npy);
        return -1;
    }
    uint32_t crc = npz_crc32(npz_crc32(0, npy.data, npy.len), a->data, body), size = (uint32_t)(npy.len + body);
    unsigned char lsig[4], csig[6] = {0, 0, 20, 0}, tail[14] = {0};
    nmt_put32(lsig, ZIP_LOCAL);
    nmt_put32(csig, ZIP_CENTRAL);
    nmt_put32(tail + 10, (uint32_t)off); /* comment 0, disk 0, attributes 0, local header offset */
    rc = nmt_buf_append(out, lsig, 4) | put_common(out, crc, size, nlen) |
         nmt_buf_append(out, fname, nlen) | nmt_buf_append(out, npy.data, npy.len) |
         nmt_buf_append(out, a->data, body) | nmt_buf_append(cd, csig, 6) | put_common(cd, crc, size, nlen) |
         nmt_buf_append(cd, tail, sizeof tail) | nmt_buf_append(cd, fname, nlen);
    nmt_buf_free(&npy);
    return rc ? -1 : 0;
}

int npz_format(const struct npz *z, struct nmt_buf *out)
{
    out->len = 0;
    if (z->n > 0xFFFE)
        return nmt_seterr("%zu arrays: the archive would need zip64 (at most 65534)", z->n);
    struct nmt_buf cd = {0};
    for (size_t i = 0; i < z->n; i++)
        if (put_entry(out, &cd, &z->a[i]) < 0) {
            nmt_buf_free(&cd);
            return -1;
        }
    int rc = -1;
    if (out->len + cd.len + ZIP_EOCD_LEN > NPZ_MAX_FILE) {
        nmt_seterr("the archive would be over 4 GiB (zip64, not written)");
    } else {
        unsigned char e[ZIP_EOCD_LEN] = {0};
        nmt_put32(e, ZIP_EOCD);
        nmt_put16(e + 8, (uint16_t)z->n);
        nmt_put16(e + 10, (uint16_t)z->n);
        nmt_put32(e + 12, (uint32_t)cd.len);
        nmt_put32(e + 16, (uint32_t)out->len);
        if (nmt_buf_append(out, cd.data, cd.len) == 0 && nmt_buf_append(out, e, sizeof e) == 0)
            rc = 0;
    }
    nmt_buf_free(&cd);
    return rc;
}

int npz_save(const struct npz *z, const char *path)
{
    struct nmt_buf b = {0};
    int rc = npz_format(z, &b);
    if (rc == 0)
        rc = nmt_write_whole(path, b.data, b.len);
    nmt_buf_free(&b);
    return rc;
}
