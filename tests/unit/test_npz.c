/* test_npz.c: .npz archives (io/npz.h): write and read back, the golden Marian models of
 * tests/fixtures/marian, and hostile archives (every prefix, flipped bytes, compressed entries,
 * zip64 and multi-disk markers, bad .npy headers, huge counts) refused by name, never a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "io/npz.h"
#include "test.h"

/* A small archive: a float32 matrix, a float32 vector and an int8 text. */
static struct npz *sample(void)
{
    struct npz *z = npz_new();
    float w[6] = {1, -2, 3.5f, 4, 5, 6e-7f}, b[3] = {0.25f, 0, -1};
    const char text[] = "type: transformer\n";
    uint64_t s23[2] = {2, 3}, s3[1] = {3}, st[1] = {sizeof text};
    npz_add(z, "encoder_l1_self_Wq", NPZ_F32, 2, s23, w);
    npz_add(z, "encoder_l1_self_bq", NPZ_F32, 1, s3, b);
    npz_add(z, "special:model.yml", NPZ_I8, 1, st, text);
    return z;
}

/* Parses the LEN bytes at D; returns the error text, or "" when it parsed. */
static const char *parse_err(const void *d, size_t len)
{
    struct npz *z = npz_parse(d, len, "t.npz");
    if (z) {
        npz_free(z);
        return "";
    }
    return nmt_errmsg();
}

/* Parses a copy of F with the byte at OFF set to V (or, with OFF past the end, unchanged). */
static const char *poke(const struct nmt_buf *f, size_t off, unsigned char v)
{
    unsigned char *c = malloc(f->len);
    memcpy(c, f->data, f->len);
    if (off < f->len)
        c[off] = v;
    const char *e = parse_err(c, f->len);
    free(c);
    return e;
}

/* Offset of the first occurrence of S (LEN bytes) in F, or F->len. */
static size_t find(const struct nmt_buf *f, const void *s, size_t len)
{
    const unsigned char *at = memmem(f->data, f->len, s, len);
    return at ? (size_t)(at - f->data) : f->len;
}

static void test_round_trip(void)
{
    struct npz *z = sample();
    struct nmt_buf f = {0};
    test_ok(z && z->n == 3 && npz_format(z, &f) == 0, "a sample archive is formatted");
    struct npz *r = npz_parse(f.data, f.len, "t.npz");
    test_ok(r && r->n == 3, "and parses back (%s)", r ? "" : nmt_errmsg());
    const struct npz_array *a = r ? npz_find(r, "encoder_l1_self_Wq") : NULL;
    test_ok(a && a->dtype == NPZ_F32 && a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3 && a->count == 6 &&
                !memcmp(a->data, z->a[0].data, 24), "a matrix comes back with its shape and values");
    a = r ? npz_find(r, "special:model.yml") : NULL;
    test_ok(a && a->dtype == NPZ_I8 && a->ndim == 1 && !strcmp(a->data, "type: transformer\n"), "int8 text too");
    test_ok(r && !npz_find(r, "absent"), "npz_find of an absent name is NULL");
    test_ok(npz_add(z, "encoder_l1_self_bq", NPZ_F32, 0, NULL, NULL) == NULL && strstr(nmt_errmsg(), "twice"),
            "a name added twice is refused (%s)", nmt_errmsg());
    test_ok(find(&f, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 58) < f.len &&
                find(&f, "'shape': (3,), }", 16) < f.len, "headers are written as numpy writes them");
    int aligned = 1;
    for (size_t at = 0; (at = find(&f, "\x93NUMPY", 6)) < f.len;) {
        aligned &= (10 + nmt_le16(f.data + at + 8)) % 64 == 0;
        f.data[at] = 0;
    }
    test_ok(aligned, "each .npy header is padded to 64 bytes");
    npz_free(r);
    npz_free(z);
    nmt_buf_free(&f);
}

static void test_golden(void)
{
    const char *names[] = {"post", "pre"};
    for (int k = 0; k < 2; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tests/fixtures/marian/%s.npz", test_srcdir(), names[k]);
        struct npz *z = npz_load(path);
        test_ok(z != NULL, "Marian's %s.npz is read (%s)", names[k], z ? "" : nmt_errmsg());
        if (!z)
            continue;
        const struct npz_array *w = npz_find(z, k == 0 ? "Wemb" : "decoder_Wemb");
        const struct npz_array *y = npz_find(z, "special:model.yml");
        const struct npz_array *b = npz_find(z, "decoder_ff_logit_out_b");
        test_ok(w && w->dtype == NPZ_F32 && w->ndim == 2 && w->shape[0] == 256 && w->shape[1] == 32,
                "%s: its embedding is float32 (256, 32)", names[k]);
        test_ok(b && b->ndim == 2 && b->shape[0] == 1 && b->shape[1] == 256, "%s: output bias (1, 256)", names[k]);
        test_ok(y && y->dtype == NPZ_I8 && y->count > 100 && memmem(y->data, y->count, "type: transformer", 17),
                "%s: special:model.yml is int8 YAML text", names[k]);
        struct nmt_buf f = {0};
        struct npz *r = NULL;
        if (npz_format(z, &f) == 0)
            r = npz_parse(f.data, f.len, "again");
        int same = r && r->n == z->n;
        for (size_t i = 0; same && i < z->n; i++)
            same = !strcmp(r->a[i].name, z->a[i].name) && r->a[i].count == z->a[i].count &&
                   !memcmp(r->a[i].data, z->a[i].data, z->a[i].count * npz_dtype_size(z->a[i].dtype));
        test_ok(same, "%s: written again and read back, the same %zu arrays", names[k], z->n);
        npz_free(r);
        nmt_buf_free(&f);
        npz_free(z);
    }
}

static void test_hostile(void)
{
    struct npz *z = sample();
    struct nmt_buf f = {0};
    npz_format(z, &f);
    npz_free(z);
    int all = 1;
    for (size_t n = 0; n < f.len; n++)
        all &= *parse_err(f.data, n) != 0;
    test_ok(all, "every proper prefix of an archive is refused");
    int named = 1;
    for (size_t off = 0; off < f.len; off++) {
        const char *e = poke(&f, off, f.data[off] ^ 0x41);
        named &= *e == 0 || strncmp(e, "t.npz", 5) == 0;
    }
    test_ok(named, "a byte flipped anywhere parses or gives an error naming the file");
    size_t data = find(&f, "\x93NUMPY", 6) + 70;
    test_ok(strstr(poke(&f, data, 0x55), "CRC-32 mismatch") != NULL, "a data byte changed: CRC-32 mismatch");
    size_t cd = find(&f, "PK\x01\x02", 4);
    test_ok(strstr(poke(&f, cd + 10, 8), "compressed (method 8") != NULL, "a deflated entry is refused by name (%s)",
            poke(&f, cd + 10, 8));
    test_ok(strstr(poke(&f, cd + 8, 1), "encrypted") != NULL, "an encrypted entry is refused by name");
    size_t e = find(&f, "PK\x05\x06", 4);
    test_ok(strstr(poke(&f, e + 4, 1), "multi-disk") != NULL, "a multi-disk archive is refused by name");
    unsigned char *c = malloc(f.len);
    memcpy(c, f.data, f.len);
    c[e + 9] = c[e + 11] = 0x7F;
    test_ok(strstr(parse_err(c, f.len), "entries cannot fit") != NULL, "a huge entry count is refused");
    memset(c + e + 8, 0xFF, 4);
    test_ok(strstr(parse_err(c, f.len), "zip64") != NULL, "zip64 counts are refused by name");
    free(c);
    size_t sh = find(&f, "(2, 3)", 6);
    test_ok(strstr(poke(&f, sh + 1, '9'), "CRC-32") != NULL, "a changed shape fails the CRC first");
    nmt_buf_free(&f);
}

/* Parses an archive of one entry whose .npy header dictionary is DICT, followed by BODY bytes (its
 * CRC right); returns the error text, or "" when it parsed. */
static const char *npy_err(const char *dict, size_t body)
{
    struct nmt_buf npy = {0};
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    nmt_put16(pre + 8, (uint16_t)strlen(dict));
    nmt_buf_append(&npy, pre, 10);
    nmt_buf_append(&npy, dict, strlen(dict));
    for (size_t k = 0; k < body; k++)
        nmt_buf_append(&npy, "\1", 1);
    /* the zip structure around it, by hand: one stored entry 'x.npy' */
    struct nmt_buf g = {0};
    unsigned char lh[30] = {'P', 'K', 3, 4, 20};
    nmt_put32(lh + 14, npz_crc32(0, npy.data, npy.len));
    nmt_put32(lh + 18, (uint32_t)npy.len);
    nmt_put32(lh + 22, (uint32_t)npy.len);
    nmt_put16(lh + 26, 5);
    nmt_buf_append(&g, lh, 30);
    nmt_buf_append(&g, "x.npy", 5);
    nmt_buf_append(&g, npy.data, npy.len);
    size_t cdoff = g.len;
    unsigned char ch[46] = {'P', 'K', 1, 2, 20, 0, 20};
    memcpy(ch + 16, lh + 14, 12);
    nmt_put16(ch + 28, 5);
    nmt_buf_append(&g, ch, 46);
    nmt_buf_append(&g, "x.npy", 5);
    unsigned char eo[22] = {'P', 'K', 5, 6};
    nmt_put16(eo + 8, 1);
    nmt_put16(eo + 10, 1);
    nmt_put32(eo + 12, 51);
    nmt_put32(eo + 16, (uint32_t)cdoff);
    nmt_buf_append(&g, eo, 22);
    static char msg[512];
    snprintf(msg, sizeof msg, "%s", parse_err(g.data, g.len));
    nmt_buf_free(&g);
    nmt_buf_free(&npy);
    return msg;
}

static void test_npy_headers(void)
{
    test_ok(*npy_err("{'descr': '|i1', 'fortran_order': False, 'shape': (2, 2), }\n", 4) == 0,
            "a hand-made archive parses (%s)", npy_err("{'descr': '|i1', 'fortran_order': False, 'shape': (2, 2), }\n", 4));
    test_ok(strstr(npy_err("{'descr': '|i1', 'fortran_order': False, 'shape': (2, 2), }\n", 3), "data bytes") != NULL,
            "a body shorter than the shape is refused");
    test_ok(strstr(npy_err("{'descr': '|i1', 'fortran_order': False, 'shape': (2, 2), }\n", 5), "data bytes") != NULL,
            "a body longer than the shape is refused");
    test_ok(strstr(npy_err("{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000000000, 100000), }", 4),
                   "data bytes") != NULL, "a huge shape is refused without allocating");
    test_ok(strstr(npy_err("{'descr': '|i1', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 1),
                   "more than 8") != NULL, "nine dimensions are refused");
    test_ok(strstr(npy_err("{'descr': '|i1', 'fortran_order': False, 'shape': (4,), 'x': 1}", 4), "unknown key") != NULL,
            "an unknown key is refused");
    test_ok(strstr(npy_err("{'descr': '|i1', 'shape': (4,), }", 4), "lacks 'fortran_order'") != NULL,
            "a missing key is named");
    test_ok(strstr(npy_err("{'descr': '|i1', 'fortran_order': False, 'shape': (4,", 4), "expected") != NULL,
            "a cut dictionary is refused");
    test_ok(strstr(npy_err("{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }", 4), "'|u1'") != NULL,
            "uint8 is refused by name");
    test_ok(strstr(npy_err("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", 8), "'<f8'") != NULL,
            "float64 is refused by name");
    test_ok(strstr(npy_err("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", 4), "'>f4'") != NULL,
            "big-endian float32 is refused by name");
    test_ok(strstr(npy_err("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", 4), "fortran_order") != NULL,
            "Fortran order is refused");
    test_ok(*npy_err("{'descr': '|i1', 'fortran_order': False, 'shape': (), }", 1) == 0, "a scalar parses");
}

int main(void)
{
    test_ok(npz_crc32(0, "123456789", 9) == 0xCBF43926u, "CRC-32 of the check string");
    test_round_trip();
    test_golden();
    test_hostile();
    test_npy_headers();
    return test_done();
}
