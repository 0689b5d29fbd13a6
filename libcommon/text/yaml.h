/* yaml.h: the flat subset of YAML that Marian writes (formats/marian.md): a mapping of scalar keys
 * to scalars or to lists of scalars, as in its vocabularies (.yml: "piece: id") and in the
 * configuration stored in its models (special:model.yml). Scalars are plain, 'single-quoted' or
 * "double-quoted" with YAML's escapes; a list is "key:" followed by indented "- item" lines, or a
 * flow list "[a, b]" (on the key's line or the next). Comments, blank lines and a leading "---"
 * are skipped. Everything else (nested mappings, block scalars, anchors, tags, flow mappings,
 * duplicate keys) is refused with the line that holds it. */
#ifndef NMT_YAML_H
#define NMT_YAML_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

#define YAML_MAX_FILE (1u << 30)  /* largest text a reader accepts */

/* One key and its value: a scalar (IS_LIST 0: VALUE) or a list (IS_LIST 1: LIST of NLIST scalars,
 * VALUE NULL). A key with nothing after it and no items reads as the empty scalar. */
struct yaml_item {
    char *key;                 /* NUL-terminated UTF-8, owned (a NUL inside is refused) */
    char *value;
    int is_list;
    char **list;
    size_t nlist, list_cap;
    uint32_t line;             /* where it was read (1-based), 0 when set by yaml_set */
};

/* Items in the order read or set. Zero-initialise; free with yaml_free. */
struct yaml_map {
    struct yaml_item *item;
    size_t n, cap;
};

/* Parses the text DATA (LEN bytes; trailing NUL bytes, as Marian pads its model.yml, are ignored)
 * into M (emptied first); NAME names it in errors. 0, or -1 with the error set ("NAME: line N:
 * what", "NAME: byte N: invalid UTF-8"). */
int yaml_parse(const char *data, size_t len, const char *name, struct yaml_map *m);
/* Frees M's items and leaves it empty. */
void yaml_free(struct yaml_map *m);
/* Returns the item of KEY, or NULL when absent. */
const struct yaml_item *yaml_get(const struct yaml_map *m, const char *key);
/* Appends KEY: VALUE (both copied; KEY must be new). 0, or -1 with the error set. */
int yaml_set(struct yaml_map *m, const char *key, const char *value);
/* Appends KEY with the list ITEMS[0..N) (copied; KEY must be new). 0, or -1 with the error set. */
int yaml_set_list(struct yaml_map *m, const char *key, const char *const *items, size_t n);
/* Appends S (LEN bytes of UTF-8) to OUT as a YAML scalar: plain when that reads back the same,
 * else double-quoted with escapes. 0, or -1 (memory; invalid UTF-8) with the error set. */
int yaml_put_scalar(struct nmt_buf *out, const char *s, size_t len);
/* Appends M to OUT, one "key: value" line an item, lists as indented "- item" lines (an empty one
 * as "[]"). 0, or -1 with the error set. */
int yaml_format(const struct yaml_map *m, struct nmt_buf *out);

#endif
