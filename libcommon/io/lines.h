/* lines.h: the one reader of text input, one line at a time: plain lines, line-aligned pairs of
 * files, and tables (plain TSV, or CSV through libcsv). Every failure is told apart from the end of
 * input (a read error, memory exhausted by a long line, a line over the caller's limit, a malformed
 * CSV row) and reported with the input's name and the line number. */
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
/* The same on the open descriptor FD (0: stdin, read through stdin's stream), named NAME (kept,
 * not copied), which the reader owns from then on, even on failure. 0, or -1 with the error set. */
int line_reader_fdopen(struct line_reader *r, int fd, const char *name, size_t max);
/* Reads the next line into *LINE (LEN bytes, without the newline; NUL-terminated, valid until the
 * next call). Returns 1 for a line, 0 at the end of input (again on every later call), -1 with the
 * error set ("NAME: line N: longer than MAX bytes (--max-line-bytes)", "NAME: line N: out of
 * memory ...", "cannot read 'NAME': ..."). */
int line_next(struct line_reader *r, char **line, size_t *len);
/* Closes the file if the reader opened it (or was given it) and frees the buffer; a zeroed or
 * closed reader is a no-op. */
void line_reader_close(struct line_reader *r);

/* Reads the next line of both of two line-aligned files A and B, as line_next does. Returns 1 for
 * a pair, 0 when both end together, -1 with the error set, or LINES_UNPAIRED when one has a line
 * and the other has ended, with the error set to "LONGER: line N: no matching line in 'SHORTER',
 * which has M lines" (reading on reads the longer file's next line). */
#define LINES_UNPAIRED 2
int line_pair_next(struct line_reader *a, struct line_reader *b, char **la, size_t *na, char **lb, size_t *nb);

/* Tables: one row of fields at a time, each input line read as line_next reads it (so under the
 * same limit). Plain TSV splits a line at every tab, a quote being data; a CR before the newline is
 * dropped and blank lines are skipped. CSV is RFC 4180 (libcsv, strict): a quoted field may span
 * lines, blanks around fields are kept, blank lines are skipped. */
enum table_kind { TABLE_TSV, TABLE_CSV };

struct table_field {
    const char *text;   /* NUL-terminated (it may hold other NUL bytes), valid until the next call */
    size_t len;
};

struct csv_parser;
struct table_reader {
    struct line_reader lr;
    uint64_t line;          /* the line on which the row last returned ends (1-based) */
    uint64_t row;           /* rows returned so far */
    size_t n;               /* fields of the row */
    struct table_field *f;  /* (n) its fields */
    /* private */
    enum table_kind kind;
    unsigned char delim;
    struct csv_parser *p;
    size_t fcap, ocap;
    size_t *off;            /* (n) CSV: where each field starts in data */
    unsigned char *data;    /* CSV: the bytes of the fields of the row being read */
    size_t dlen, dcap;
    char *text;             /* CSV: the line being parsed, with its newline */
    size_t pos, end;        /* CSV: how far it is parsed, its length */
    int row_done, ended, failed;
};

/* Opens PATH ("-" or NULL: stdin) as a table of KIND, fields separated by DELIM under TABLE_CSV
 * (a tab under TABLE_TSV), lines of at most MAX bytes (0: LINES_DEFAULT_MAX). 0, or -1 with the
 * error set. */
int table_open(struct table_reader *t, const char *path, enum table_kind kind, unsigned char delim, size_t max);
/* Reads the next row into T->n and T->f. Returns 1 for a row, 0 at the end of input, -1 with the
 * error set (as line_next, or out of memory), or TABLE_MALFORMED for CSV that libcsv rejects, with
 * the error set to "NAME: line N: malformed CSV (...)": the row is dropped with the rest of its
 * line, and reading on starts afresh on the next line. */
#define TABLE_MALFORMED 2
int table_next(struct table_reader *t);
/* Closes the input and frees what the reader holds; a zeroed or closed reader is a no-op. */
void table_close(struct table_reader *t);

#endif
