/* lines.h: reading text one line at a time, telling the end of input from every failure: a read
 * error, memory exhausted by a long line, or a line over the caller's limit, each reported with
 * the input's name and the line number. */
#ifndef NMT_LINES_H
#define NMT_LINES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define LINES_DEFAULT_MAX ((size_t)1 << 30) /* 1 GiB: the default --max-line-bytes */

struct line_reader {
    FILE *f;
    const char *name;   /* "stdin" or the path, for messages */
    uint64_t line;      /* number of the line last read, 1-based (0 before the first) */
    size_t max;         /* longest line accepted, in bytes without the newline */
    char *buf;
    size_t cap;
    int own;            /* F was opened here and is closed by line_reader_close */
};

/* Opens PATH ("-" or NULL: stdin) for reading lines of at most MAX bytes (0: LINES_DEFAULT_MAX);
 * 0, or -1 with the error set. */
int line_reader_open(struct line_reader *r, const char *path, size_t max);
/* Reads the next line into *LINE (LEN bytes, without the newline; NUL-terminated, valid until the
 * next call). Returns 1 for a line, 0 at the end of input, -1 with the error set ("NAME: line N:
 * longer than MAX bytes (--max-line-bytes)", "NAME: line N: out of memory", "cannot read 'NAME': ..."). */
int line_next(struct line_reader *r, char **line, size_t *len);
/* The same on a caller's stream and buffer: reads line LINENO (1-based, for messages) of F, named
 * NAME, into *BUF (capacity *CAP, grown by getline) without its newline, at most MAX bytes.
 * Returns its length, LINES_END at the end of input, or LINES_ERROR with the error set. */
#define LINES_END (-1)
#define LINES_ERROR (-2)
long long lines_get(FILE *f, const char *name, uint64_t lineno, size_t max, char **buf, size_t *cap);
/* Closes the file if line_reader_open opened it and frees the buffer. */
void line_reader_close(struct line_reader *r);

#endif
