/* file.c: opening named inputs and outputs, writing whole buffers (see file.h). */
#include "io/file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
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
