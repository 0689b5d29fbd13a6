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
/* Refuses to write OUT_PATH when it is the file open as input on IN_FD (same device and inode):
 * 0 when they differ (or OUT_PATH is "-", NULL or does not exist yet), -1 with the error set
 * ("'OUT' is the input file 'IN': refusing to overwrite it"). */
int nmt_check_not_input(int in_fd, const char *in_name, const char *out_path);

/* A named output written atomically: the bytes go to a temporary file beside PATH
 * (".NAME.tmpXXXXXX" in PATH's directory), which replaces PATH only on out_file_commit, so a
 * failed or interrupted write never leaves a partial PATH nor destroys the previous one. */
struct out_file {
    int fd;          /* write here */
    char *path;      /* the destination */
    char *tmp;       /* the temporary file, NULL once committed or aborted */
};
/* Creates the temporary file for PATH; 0, or -1 with the error set ("cannot write 'PATH': ...")
 * and F left empty. */
int out_file_open(struct out_file *f, const char *path);
/* Makes the temporary file mode 0644, syncs it, closes it and renames it over PATH (then syncs the
 * directory, best effort); 0, or -1 with the error set and the temporary file removed. */
int out_file_commit(struct out_file *f);
/* Closes and removes the temporary file, keeping whatever PATH held; out_file_abort on an empty or
 * committed F only frees it. */
void out_file_abort(struct out_file *f);

/* Opens a named output the way every tool does: PATH "-" or NULL is stdout (refused when BINARY
 * and stdout is a terminal), anything else an out_file. 0, or -1 with the error set. */
int nmt_output_open(struct out_file *f, const char *path, int binary);
/* Ends an output of nmt_output_open: with KEEP, commits a named one (stdout is left open for the
 * tool's checked close); without, aborts it, leaving the previous file in place. 0, or -1 with the
 * error set (the commit failed). */
int nmt_output_finish(struct out_file *f, int keep);

/* Writes all LEN bytes to FD, retrying short writes and EINTR; 0 or -1 with the error set. */
int nmt_write_all(int fd, const void *buf, size_t len);

#endif
