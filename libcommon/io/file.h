/* file.h: named inputs and outputs ("-" is stdin or stdout) and whole-buffer writes. */
#ifndef NMT_FILE_H
#define NMT_FILE_H

#include <stddef.h>

#include "base/buf.h"

/* Opens PATH for reading ("-" or NULL = stdin); returns an fd or -1 with the error set. */
int nmt_open_in(const char *path);
/* Opens PATH for writing ("-" or NULL = stdout, refused when BINARY and stdout is a terminal);
 * returns an fd or -1 with the error set. */
int nmt_open_out(const char *path, int binary);
/* Returns a printable name for PATH: "stdin"/"stdout" for "-" or NULL, else PATH. */
const char *nmt_path_name(const char *path, int output);
/* Refuses to write OUT_PATH when it is the file open as input on IN_FD (same device and inode):
 * 0 when they differ (or OUT_PATH is "-", NULL or does not exist yet), -1 with the error set
 * ("'OUT' is the input file 'IN': refusing to overwrite it"). */
int nmt_check_not_input(int in_fd, const char *in_name, const char *out_path);

/* A named output written atomically: the bytes go to a temporary file beside PATH
 * (".NAME.tmpXXXXXX" in PATH's directory), which replaces PATH only on out_file_commit, so a
 * failed or interrupted write never leaves a partial PATH nor destroys the previous one. A PATH
 * that exists and is not a regular file (a device, a pipe: /dev/null, /dev/stdout, >(cmd)) is
 * written directly. Zero-initialise (fd -1) before use, so that finishing an unopened one is a no-op. */
struct out_file {
    int fd;          /* write here */
    int mode;        /* 0 none, 1 stdout, 2 written directly, 3 temporary file */
    char *path;      /* the destination (modes 2 and 3) */
    char *tmp;       /* the temporary file (mode 3) */
};
/* Opens PATH for writing as above; 0, or -1 with the error set ("cannot open 'PATH' for writing:
 * ...") and F left empty. */
int out_file_open(struct out_file *f, const char *path);
/* Finishes F: a temporary file is made mode 0644, synced, closed and renamed over PATH (then the
 * directory is synced, best effort); a direct one is closed. 0, or -1 with the error set and the
 * temporary file removed. */
int out_file_commit(struct out_file *f);
/* Closes F and removes its temporary file, keeping whatever PATH held; no-op on an empty F. */
void out_file_abort(struct out_file *f);
/* Opens a named output the way every tool does: PATH "-" or NULL is stdout (refused when BINARY
 * and stdout is a terminal; left open for the tool's checked close), anything else an out_file.
 * 0, or -1 with the error set. */
int nmt_output_open(struct out_file *f, const char *path, int binary);
/* Ends an output of nmt_output_open: with KEEP, commits it; without, aborts it. 0, or -1 with the
 * error set (the commit failed). */
int nmt_output_finish(struct out_file *f, int keep);

/* Takes the advisory lock of the output PATH for this process: the file ".NAME.lock" beside it,
 * locked with flock and holding the pid. Returns its descriptor (keep it open while writing PATH),
 * or -1 with the error set ("'PATH' is being written by process PID"). */
int out_lock(const char *path);
/* Releases a lock of out_lock: removes the lock file and closes FD. */
void out_unlock(const char *path, int fd);
/* Removes the temporary files a killed writer of PATH left beside it (".NAME.tmpXXXXXX"); returns
 * how many were removed. Call it holding PATH's lock. */
int out_remove_stale(const char *path);

/* Writes all LEN bytes to FD, retrying short writes and EINTR; 0 or -1 with the error set. */
int nmt_write_all(int fd, const void *buf, size_t len);

/* Reads the whole input PATH ("-" or NULL: stdin) into OUT (its content replaced), refusing one
 * larger than MAX bytes. 0, or -1 with the error set ("cannot read 'PATH': ...", "'PATH' is larger
 * than MAX bytes"). */
int nmt_read_whole(const char *path, size_t max, struct nmt_buf *out);
/* Writes LEN bytes at DATA as the named output PATH, atomically (out_file_open ... commit). 0, or
 * -1 with the error set and PATH left as it was. */
int nmt_write_whole(const char *path, const void *data, size_t len);

#endif
