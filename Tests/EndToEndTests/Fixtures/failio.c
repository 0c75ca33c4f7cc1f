/* An LD_PRELOAD shim for the I/O error tests: once armed (the file named by $FAILIO_ARM exists),
 * writes and syncs on files whose path contains $FAILIO_MATCH (ends with it, when $FAILIO_SUFFIX
 * is set: one folder, not what is inside) fail with EIO, as a failing disk would. Sockets, pipes
 * and other files are left alone.
 *   cc -shared -fPIC -o libfailio.so failio.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static int failing(int fd) {
    const char *match = getenv("FAILIO_MATCH"), *arm = getenv("FAILIO_ARM");
    if (match == NULL || arm == NULL || access(arm, F_OK) != 0) return 0;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    if (getenv("FAILIO_SUFFIX") != NULL) {
        size_t length = strlen(path), tail = strlen(match);
        return length >= tail && strcmp(path + length - tail, match) == 0;
    }
    return strstr(path, match) != NULL;
}

#define FAILING(ret, name, params, args)                        \
    ret name params {                                           \
        static ret(*real) params;                               \
        if (real == NULL) real = (ret(*) params)dlsym(RTLD_NEXT, #name); \
        if (failing(fd)) { errno = EIO; return -1; }            \
        return real args;                                       \
    }

FAILING(ssize_t, write, (int fd, const void *bytes, size_t count), (fd, bytes, count))
FAILING(ssize_t, pwrite, (int fd, const void *bytes, size_t count, off_t offset), (fd, bytes, count, offset))
FAILING(ssize_t, pwrite64, (int fd, const void *bytes, size_t count, off_t offset), (fd, bytes, count, offset))
FAILING(ssize_t, writev, (int fd, const struct iovec *vectors, int count), (fd, vectors, count))
FAILING(int, fsync, (int fd), (fd))
FAILING(int, fdatasync, (int fd), (fd))
