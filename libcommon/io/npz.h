/* npz.h: NumPy .npz archives (formats/marian.md): a zip file of .npy arrays, the format of Marian's
 * models. The reader takes stored (uncompressed) entries, checks each one's CRC-32, and parses the
 * .npy header of each (versions 1 to 3: 'descr' '<f4' float32 or '|i1' / '<i1' int8, C order, a
 * shape); compressed entries, encryption, zip64 and multi-disk archives are refused by name. Every
 * count, size and offset is bounded against the file before anything is allocated. The writer
 * writes what Marian writes: stored entries with their CRC-32, .npy version 1.0 headers. */
#ifndef NMT_NPZ_H
#define NMT_NPZ_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

#define NPZ_MAX_DIMS 8              /* most dimensions of an array */
#define NPZ_MAX_HEADER 65536        /* largest .npy header (the dictionary text) accepted */
#define NPZ_MAX_NAME 1024           /* longest entry name accepted */

enum npz_dtype { NPZ_F32 = 0, NPZ_I8 = 1 };

/* One array of an archive. */
struct npz_array {
    char *name;                 /* the entry's name without ".npy", NUL-terminated, owned */
    enum npz_dtype dtype;
    int ndim;                   /* 0 (a scalar) to NPZ_MAX_DIMS */
    uint64_t shape[NPZ_MAX_DIMS];
    uint64_t count;             /* elements: the product of the shape */
    void *data;                 /* (count) float32 or int8 elements in host order, owned (malloc'ed) */
};

/* An archive in memory: arrays in file order (or the order they were added). */
struct npz {
    struct npz_array *a;
    size_t n, cap;
};

/* Returns the size in bytes of one element of DT. */
size_t npz_dtype_size(enum npz_dtype dt);

/* Parses the .npz image DATA (LEN bytes, not kept); NAME names it in errors. Returns the archive,
 * or NULL with the error set ("NAME: byte N: what", "NAME: entry 'x.npy': what"). */
struct npz *npz_parse(const void *data, size_t len, const char *name);
/* Reads and parses the file PATH. Returns the archive, or NULL with the error set. */
struct npz *npz_load(const char *path);
/* Returns a new empty archive, or NULL (out of memory). */
struct npz *npz_new(void);
/* Frees Z; npz_free(NULL) is a no-op. */
void npz_free(struct npz *z);
/* Returns the array called NAME (without ".npy"), or NULL when absent. */
const struct npz_array *npz_find(const struct npz *z, const char *name);

/* Adds a copy of the array NAME of type DT and shape SHAPE[NDIM] whose COUNT elements are at DATA
 * (host order). Returns the new array (its data owned by Z), or NULL with the error set (a name
 * already present or too long, too many dimensions, memory). */
struct npz_array *npz_add(struct npz *z, const char *name, enum npz_dtype dt, int ndim, const uint64_t *shape,
                          const void *data);
/* Replaces OUT's content with Z as an .npz image; 0, or -1 with the error set (over 4 GiB or 65535
 * entries, which would need zip64; memory). */
int npz_format(const struct npz *z, struct nmt_buf *out);
/* Writes Z to PATH atomically (io/file.h out_file); 0, or -1 with the error set. */
int npz_save(const struct npz *z, const char *path);

/* Returns the CRC-32 (ISO-HDLC, as zip and zlib compute it) of LEN bytes at P, continuing from CRC
 * (start with 0). */
uint32_t npz_crc32(uint32_t crc, const void *p, size_t len);

#endif
