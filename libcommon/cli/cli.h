/* cli.h: what every tool shares and no library code uses: the program name and its messages on
 * stderr ("nmt-cat: cannot open 'x': No such file"), usage errors, --version text, the checked
 * close of stdout, and text output of tokens and JSON strings. */
#ifndef NMT_CLI_H
#define NMT_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "base/util.h"
#include "io/file.h"

/* Sets the program name used as the message prefix (basename of argv[0]). */
void nmt_set_progname(const char *argv0);
/* Sets the program name from ARGV[0] and points ARGV[0] at it, so that getopt's own messages
 * ("nmt-cat: invalid option -- 'Z'") carry the same prefix however the tool was started. */
void nmt_start(char **argv);
/* Returns the program name set by nmt_set_progname ("nmt" before). */
const char *nmt_progname(void);
/* Prints "PROG: message\n" on stderr. */
void nmt_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "PROG: warning: message\n" on stderr. */
void nmt_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "PROG VERSION" and the stream format version on stdout. */
void nmt_print_version(void);
/* Prints "PROG: MSG\nTry 'PROG --help' for more information.\n" on stderr; returns NMT_EXIT_USAGE. */
int nmt_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "Try 'PROG --help' for more information.\n" on stderr (after getopt's own message);
 * returns NMT_EXIT_USAGE. */
int nmt_usage_hint(void);
/* Flushes and closes stdout, reporting a failed write (disk full, closed pipe); 0 or -1. */
int nmt_close_stdout(void);
/* Writes S (N bytes) to F as a JSON string literal with quotes; invalid UTF-8 bytes become
 * U+FFFD. Returns 0, or -1 if the stream is in error. */
int nmt_json_string(FILE *f, const char *s, size_t n);
/* Writes token S (N bytes) to F for space-separated text: backslash, space, tab, newline and other
 * control bytes become \\ \s \t \n \xHH (the escapes of nmt-cat and nmt-tokenize --text). */
void nmt_put_token(FILE *f, const char *s, size_t n);

#endif
