/* file.c: opening named inputs and outputs, writing whole buffers (see file.h). */
#include "io/file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

const char *nmt_path_name(const char *path, int output)
{
    if (!path || strcmp(path, "-") == 0)
        return output ? "stdout" : "stdin";
    return path;
}

int nmt_open_in(const char *path)
{
    if (!path || strcmp(path, "-") == 0)
        return STDIN_FILENO;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return nmt_seterr("cannot open '%s': %s", path, strerror(errno));
    return fd;
}

int nmt_open_out(const char *path, int binary)
{
    if (!path || strcmp(path, "-") == 0) {
        if (binary && isatty(STDOUT_FILENO))
            return nmt_seterr("refusing to write binary data to a terminal (use -o FILE or a pipe)");
        return STDOUT_FILENO;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        return nmt_seterr("cannot open '%s' for writing: %s", path, strerror(errno));
    return fd;
}

int nmt_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return nmt_seterr("write failed: %s", strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int nmt_check_not_input(int in_fd, const char *in_name, const char *out_path)
{
    struct stat a, b;
    if (!out_path || strcmp(out_path, "-") == 0 || stat(out_path, &b) < 0 || fstat(in_fd, &a) < 0)
        return 0;
    if (a.st_dev == b.st_dev && a.st_ino == b.st_ino && S_ISREG(b.st_mode))
        return nmt_seterr("'%s' is the input file '%s': refusing to overwrite it", out_path, in_name);
    return 0;
}

/* The directory of PATH, malloc'ed; NULL when out of memory. */
static char *dir_of(const char *path)
{
    char *d = nmt_strdup(path);
    if (!d)
        return NULL;
    char *dir = nmt_strdup(dirname(d));
    free(d);
    return dir;
}

int out_file_open(struct out_file *f, const char *path)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        if ((f->fd = open(path, O_WRONLY | O_CLOEXEC)) < 0)
            return nmt_seterr("cannot open '%s' for writing: %s", path, strerror(errno));
        if (!(f->path = nmt_strdup(path))) {
            out_file_abort(f);
            return -1;
        }
        f->mode = 2;
        return 0;
    }
    char *base = nmt_strdup(path), *dir = dir_of(path);
    size_t n = strlen(path) + 32;
    char *tmp = nmt_malloc(n);
    f->path = nmt_strdup(path);
    int rc = -1;
    if (f->path && base && dir && tmp) {
        snprintf(tmp, n, "%s/.%s.tmpXXXXXX", dir, basename(base));
        f->fd = mkostemp(tmp, O_CLOEXEC);
        if (f->fd >= 0) {
            f->tmp = tmp;
            tmp = NULL;
            f->mode = 3;
            rc = 0;
        } else {
            nmt_seterr("cannot open '%s' for writing: %s", path, strerror(errno));
        }
    }
    free(tmp);
    free(base);
    free(dir);
    if (rc < 0) {
        free(f->path);
        f->path = NULL;
    }
    return rc;
}

int out_file_commit(struct out_file *f)
{
    if (f->mode == 1 || f->mode == 0) {
        f->mode = 0;
        return 0;
    }
    const char *what = NULL;
    if (f->mode == 3 && (fchmod(f->fd, 0644) < 0 || fsync(f->fd) < 0))
        what = "";
    if (close(f->fd) < 0 && !what)
        what = "";
    f->fd = -1;
    if (!what && f->mode == 3 && rename(f->tmp, f->path) < 0)
        what = "rename: ";
    if (what) {
        nmt_seterr("cannot write '%s': %s%s", f->path, what, strerror(errno));
        out_file_abort(f);
        return -1;
    }
    if (f->mode == 3) {
        char *dir = dir_of(f->path);
        int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        if (dfd >= 0) {
            fsync(dfd); /* best effort: some file systems refuse fsync on directories */
            close(dfd);
        }
        free(dir);
    }
    free(f->tmp);
    free(f->path);
    f->tmp = f->path = NULL;
    f->mode = 0;
    return 0;
}

void out_file_abort(struct out_file *f)
{
    if (f->fd >= 0 && f->mode >= 2)
        close(f->fd);
    f->fd = -1;
    if (f->tmp)
        unlink(f->tmp);
    free(f->tmp);
    free(f->path);
    f->tmp = f->path = NULL;
    f->mode = 0;
}

int nmt_output_open(struct out_file *f, const char *path, int binary)
{
    if (!path || strcmp(path, "-") == 0) {
        memset(f, 0, sizeof *f);
        f->fd = nmt_open_out(path, binary);
        if (f->fd < 0)
            return -1;
        f->mode = 1;
        return 0;
    }
    return out_file_open(f, path);
}

int nmt_output_finish(struct out_file *f, int keep)
{
    if (keep)
        return out_file_commit(f);
    out_file_abort(f);
    return 0;
}

/* PATH's directory and ".NAME" + SUFFIX in it (malloc'ed, NULL when out of memory). */
static char *beside(const char *path, const char *suffix)
{
    char *dir = dir_of(path), *b = nmt_strdup(path);
    size_t n = strlen(path) + strlen(suffix) + 8;
    char *out = dir && b ? nmt_malloc(n) : NULL;
    if (out)
        snprintf(out, n, "%s/.%s%s", dir, basename(b), suffix);
    free(dir);
    free(b);
    return out;
}

int out_lock(const char *path)
{
    char *lock = beside(path, ".lock");
    if (!lock)
        return -1;
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        nmt_seterr("cannot lock '%s': %s: %s", path, lock, strerror(errno));
    } else if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        nmt_seterr("'%s' is being written by another process (pid %s, holding %s): wait for it, or choose another "
                   "output", path, *pid ? pid : "unknown", lock);
        close(fd);
        fd = -1;
    } else {
        char pid[32];
        int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
            nmt_seterr("cannot lock '%s': %s: %s", path, lock, strerror(errno));
            close(fd);
            fd = -1;
        }
    }
    free(lock);
    return fd;
}

void out_unlock(const char *path, int fd)
{
    if (fd < 0)
        return;
    char *lock = beside(path, ".lock");
    if (lock)
        unlink(lock);
    free(lock);
    close(fd);
}

int out_remove_stale(const char *path)
{
    char *prefix = beside(path, ".tmp"), *dir = dir_of(path);
    int removed = 0;
    DIR *d = prefix && dir ? opendir(dir) : NULL;
    const char *want = prefix ? strrchr(prefix, '/') + 1 : NULL;
    for (struct dirent *e; d && (e = readdir(d));) {
        /* ".NAME.tmp" and the 6 characters mkstemp put there */
        if (strncmp(e->d_name, want, strlen(want)) == 0 && strlen(e->d_name) == strlen(want) + 6) {
            size_t n = strlen(dir) + strlen(e->d_name) + 2;
            char *f = nmt_malloc(n);
            if (f) {
                snprintf(f, n, "%s/%s", dir, e->d_name);
                removed += unlink(f) == 0;
                free(f);
            }
        }
    }
    if (d)
        closedir(d);
    free(prefix);
    free(dir);
    return removed;
}

int nmt_read_whole(const char *path, size_t max, struct nmt_buf *out)
{
    out->len = 0;
    int fd = nmt_open_in(path);
    if (fd < 0)
        return -1;
    const char *name = nmt_path_name(path, 0);
    int rc = 0;
    for (;;) {
        if (out->len > max) {
            rc = nmt_seterr("'%s' is larger than %zu bytes", name, max);
            break;
        }
        if (nmt_buf_reserve(out, 65536) < 0) {
            rc = -1;
            break;
        }
        ssize_t n = read(fd, out->data + out->len, out->cap - out->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = nmt_seterr("cannot read '%s': %s", name, strerror(errno));
            break;
        }
        if (n == 0)
            break;
        out->len += (size_t)n;
    }
    if (fd != STDIN_FILENO)
        close(fd);
    return rc;
}

int nmt_write_whole(const char *path, const void *data, size_t len)
{
    struct out_file f;
    if (out_file_open(&f, path) < 0)
        return -1;
    if (nmt_write_all(f.fd, data, len) < 0) {
        nmt_seterr("cannot write '%s': %s", path, strerror(errno));
        out_file_abort(&f);
        return -1;
    }
    return out_file_commit(&f);
}
