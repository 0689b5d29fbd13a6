/* safetensors.h: reading and writing safetensors files (model checkpoints, formats/checkpoint.md).
 *
 * Layout: u64le N | N bytes of JSON header | raw little-endian tensor data. The header is one JSON
 * object mapping tensor names to {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}
 * (offsets relative to the start of the data) plus an optional "__metadata__" object of
 * string-to-string pairs. The reader bounds everything (header size, nesting, name and string
 * lengths, shapes, offsets against the file) before allocating, so a hostile file yields an error,
 * never a crash. The writer writes atomically: a temporary file in the same directory, fsync,
 * rename over the target, fsync of the directory. */
#ifndef NMT_SAFETENSORS_H
#define NMT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_HEADER (64u << 20)  /* largest JSON header accepted: 64 MiB */
#define ST_MAX_DIMS 8              /* most dimensions a tensor may have */
#define ST_MAX_TENSORS 65536       /* most tensors in one file */

enum st_dtype { ST_F32, ST_F64, ST_F16, ST_BF16, ST_I64, ST_I32, ST_I16, ST_I8, ST_U64, ST_U32, ST_U16, ST_U8,
                ST_BOOL, ST_NDTYPES };

/* Returns the safetensors name of DT ("F32"), or "?" for an invalid value. */
const char *st_dtype_name(int dt);
/* Returns the size in bytes of one element of DT, or 0 for an invalid value. */
size_t st_dtype_size(int dt);

/* One tensor as found in a file (DATA points into the file's memory) or given to the writer. */
struct st_tensor {
    char *name;                /* NUL-terminated, owned by the file / copied by the writer */
    int dtype;                 /* enum st_dtype */
    int ndim;
    uint64_t shape[ST_MAX_DIMS];
    uint64_t nbytes;
    const void *data;          /* (nbytes) little-endian elements */
};

/* ---- reading ---- */
struct st_file {
    unsigned char *buf;        /* whole file, owned: read into memory, or mapped read-only (MAPPED) */
    size_t len;
    int mapped;                /* BUF is a private read-only mapping of the file (munmap, not free) */
    unsigned char *extra;      /* (extra_len) bytes a reader added (st_extra), owned, or NULL */
    size_t extra_len;
    struct st_tensor *t;       /* (nt) in header order */
    size_t nt;
    char **meta_key, **meta_val; /* (nmeta) __metadata__ pairs */
    size_t nmeta;
};

/* Parses a safetensors image of LEN bytes at BUF (not copied: BUF must outlive the result, and is
 * not freed by st_free unless OWN is non-zero). NAME names the input in messages. Returns a new
 * st_file, or NULL with nmt_errmsg() set ("x.ckpt: header: expected ':' at byte 37"). */
struct st_file *st_parse(unsigned char *buf, size_t len, int own, const char *name);
/* Reads and parses the file at PATH. Returns a new st_file, or NULL with the error set. A regular
 * file of a page or more is mapped read-only rather than read (its pages come from the page cache
 * as they are used, none copied): it must not shrink while the st_file lives (files written by
 * st_writer_write are replaced by rename, never shrunk), and its bytes are those of the file. */
struct st_file *st_read(const char *path);
/* st_read, but the tensors whose names start with SKIP (NULL: none) are neither read nor listed
 * (e.g. "optim." for a reader of the weights alone): their bytes never enter memory. */
struct st_file *st_read_skip(const char *path, const char *skip);
/* Frees F; st_free(NULL) is a no-op. */
void st_free(struct st_file *f);
/* Gives back the memory of the whole pages of the N bytes at P in F's image or its extra bytes (F
 * must own them, as st_read's do) with madvise(MADV_DONTNEED): for a reader done with tensors long
 * before F is freed (a checkpoint's weights once on the device). Those pages must not be read again
 * (they read as zeros, or as the file again where it is mapped); the rest of F is unchanged. 0, or
 * -1 with the error set (bytes not in memory F owns; with N 0 and P F's first tensor's data,
 * whether F owns its image). */
int st_discard(struct st_file *f, const void *p, size_t n);
/* Returns N bytes (uninitialised) owned by F, freed by st_free and given back by st_discard: room
 * for tensors a reader adds to F (the float32 values of int8 ones); F holds one such buffer. NULL
 * with the error set (out of memory, or F has one already). */
void *st_extra(struct st_file *f, size_t n);
/* Returns the tensor called NAME, or NULL when absent. */
const struct st_tensor *st_find(const struct st_file *f, const char *name);
/* Returns the __metadata__ value of KEY, or NULL when absent. */
const char *st_meta(const struct st_file *f, const char *key);
/* Copies tensor NAME, which must have dtype DT and exactly COUNT elements, into DST.
 * Returns 0, or -1 with the error naming the tensor and what differed. */
int st_get(const struct st_file *f, const char *name, int dt, void *dst, uint64_t count);

/* ---- writing ---- */
struct st_writer;

/* Returns a new empty writer, or NULL (out of memory). */
struct st_writer *st_writer_new(void);
/* Adds a metadata pair (both copied). 0 or -1. */
int st_writer_meta(struct st_writer *w, const char *key, const char *value);
/* Adds tensor NAME (copied) of type DT and shape SHAPE[NDIM] whose data is at DATA (NOT copied:
 * it must stay valid until st_writer_write). 0 or -1 (bad shape, duplicate name, out of memory). */
int st_writer_add(struct st_writer *w, const char *name, int dt, int ndim, const uint64_t *shape,
                  const void *data);
/* Like st_writer_add, but the data is produced while writing, in pieces: FILL(ARG, DST, OFFSET, N)
 * copies bytes [OFFSET, OFFSET+N) of the tensor into DST and returns 0, or -1 with the error set.
 * So a large tensor held elsewhere (device memory) is written without a whole host copy. */
int st_writer_add_fn(struct st_writer *w, const char *name, int dt, int ndim, const uint64_t *shape,
                     int (*fill)(void *arg, void *dst, uint64_t offset, size_t n), void *arg);
/* Writes the file atomically to PATH (temp file, fsync, rename, fsync dir). 0 or -1 with the error
 * set; on failure PATH is left untouched. */
int st_writer_write(struct st_writer *w, const char *path);
/* Frees W; st_writer_free(NULL) is a no-op. */
void st_writer_free(struct st_writer *w);

#endif
