/* file.h: named inputs and outputs ("-" is stdin or stdout) and whole-buffer writes. */
#ifndef NMT_FILE_H
#define NMT_FILE_H

#include <stddef.h>

/* Opens PATH for reading ("-" or NULL = stdin); returns an fd or -1 with the error set. */
int nmt_open_in(const char *path);
/* Opens PATH for writing ("-" or NULL = stdout, refused when BINARY and stdout is a terminal);
 * returns an fd or -1 with the error set. */
int nmt_open_out(const char *path, int binary);
/* Returns a printable name for PATH: "stdin"/"stdout" for "-" or NULL, else PATH. */
const char *nmt_path_name(const char *path, int output);
/* Writes all LEN bytes to FD, retrying short writes and EINTR; 0 or -1 with the error set. */
int nmt_write_all(int fd, const void *buf, size_t len);

#endif
