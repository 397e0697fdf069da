/* file.c -- files kiln reads because a model or engine names them, and
 * files it writes: only regular files, never a blocking open, and writes
 * through a short temporary name in the target's folder and a rename. */
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *kiln__file_type_name(unsigned mode) {
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "not a regular file";
    }
}

kiln_status kiln__open_regular(const char *path, const char *what, int *fd_out, int64_t *size_out) {
    *fd_out = -1;
    struct stat st;
    /* stat first: opening a FIFO blocks until a writer comes, and opening
     * some devices has effects of its own */
    if (stat(path, &st) != 0)
        return KILN_FAIL(KILN_ERR_IO, "%s: cannot open %s: %s", path, what, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return KILN_FAIL(KILN_ERR_IO, "%s: the %s is %s, not a regular file", path, what,
                         kiln__file_type_name((unsigned)st.st_mode));
    /* O_NONBLOCK: should the path become a FIFO between the stat and the
     * open, the open still returns, and the fstat below refuses it */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return KILN_FAIL(KILN_ERR_IO, "%s: cannot open %s: %s", path, what, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return KILN_FAIL(KILN_ERR_IO, "%s: the %s is %s, not a regular file", path, what,
                         kiln__file_type_name((unsigned)st.st_mode));
    }
    *fd_out = fd;
    if (size_out) *size_out = (int64_t)st.st_size;
    return KILN_OK;
}

bool kiln__same_file(const struct stat *a, const struct stat *b) {
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

kiln_status kiln__check_write_target(const char *path, const char *what) {
    struct stat st;
    if (stat(path, &st) != 0) return KILN_OK; /* absent (or a dangling link): created */
    if (!S_ISREG(st.st_mode))
        return KILN_FAIL(KILN_ERR_IO,
                         "%s: '%s' exists and is %s; kiln replaces only regular files",
                         what, path, kiln__file_type_name((unsigned)st.st_mode));
    return KILN_OK;
}

/* Flushes the folder holding `path` so that a rename into it is durable.
 * Best effort: some file systems refuse fsync on folders. */
static void sync_parent(const char *path) {
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, sizeof dir, ".");
    } else if (slash == path) {
        snprintf(dir, sizeof dir, "/");
    } else {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof dir) return;
        memcpy(dir, path, n);
        dir[n] = 0;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

static kiln_status write_all(int fd, const unsigned char *p, size_t n, const char *tmp) {
    while (n > 0) {
        size_t chunk = n < (1u << 30) ? n : (1u << 30);
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return KILN_FAIL(KILN_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
        }
        if (w == 0) return KILN_FAIL(KILN_ERR_IO, "cannot write '%s': no progress", tmp);
        p += w;
        n -= (size_t)w;
    }
    return KILN_OK;
}

kiln_status kiln__write_file_atomic(const char *path, const void *data, size_t size,
                                    const char *what) {
    KILN_TRY(kiln__check_write_target(path, what));
    /* "<folder>/.kiln-<16 hex>.tmp": short, so that a target name near the
     * file system's limit (255 bytes) still has a temporary name; in the
     * target's folder, so that the rename is atomic */
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
    size_t cap = dlen + 32;
    char *tmp = kiln__malloc(cap);
    if (!tmp) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
    memcpy(tmp, path, dlen);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed = (uint64_t)getpid() << 32 ^ (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 20 ^
                    (uint64_t)(uintptr_t)&ts;
    int fd = -1, open_err = EEXIST;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        uint64_t r = kiln__fnv1a(&seed, sizeof seed, KILN_FNV_SEED + (uint64_t)attempt);
        snprintf(tmp + dlen, cap - dlen, ".kiln-%016llx.tmp", (unsigned long long)r);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666); /* umask applies */
        open_err = errno;
        if (fd < 0 && open_err != EEXIST) break;
    }
    if (fd < 0) {
        kiln_status st = KILN_FAIL(KILN_ERR_IO, "%s: cannot create a temporary file '%s' for '%s': %s",
                                   what, tmp, path, strerror(open_err));
        kiln__free(tmp);
        return st;
    }
    kiln_status st = write_all(fd, data, size, tmp);
    if (st == KILN_OK && fsync(fd) != 0)
        st = KILN_FAIL(KILN_ERR_IO, "cannot flush '%s': %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == KILN_OK)
        st = KILN_FAIL(KILN_ERR_IO, "cannot close '%s': %s", tmp, strerror(errno));
    /* checked again just before the rename, which would replace a device
     * or FIFO made at the path in the meantime */
    if (st == KILN_OK) st = kiln__check_write_target(path, what);
    if (st == KILN_OK && rename(tmp, path) != 0)
        st = KILN_FAIL(KILN_ERR_IO, "%s: cannot rename '%s' to '%s': %s", what, tmp, path,
                       strerror(errno));
    if (st != KILN_OK) {
        unlink(tmp);
        kiln__free(tmp);
        return st;
    }
    kiln__free(tmp);
    sync_parent(path);
    return KILN_OK;
}

void kiln__mapping_release(const void *map, size_t map_size, const void *p, size_t n) {
    long pg = sysconf(_SC_PAGESIZE);
    if (!map || pg <= 0 || !p || !n) return;
    uintptr_t lo = (uintptr_t)map, hi = lo + map_size, a = (uintptr_t)p, b = a + n;
    if (a < lo || b > hi || b < a) return;
    uintptr_t mask = (uintptr_t)pg - 1;
    a = (a + mask) & ~mask; /* whole pages only: neighbours may still be in use */
    b &= ~mask;
    if (b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED);
}
