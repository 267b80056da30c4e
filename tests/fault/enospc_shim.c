/* enospc_shim.c - an LD_PRELOAD library that makes a disk look full, for the
 * fault test of a checkpoint written onto a full disk
 * (tests/integration/fault_disk_full.test.mjs).
 *
 * Environment:
 *   ALALLO_FAULT_DIR    a folder (absolute path); only files under it fail
 *   ALALLO_FAULT_AFTER  renames into that folder that succeed first (a
 *                       checkpoint is complete once it is renamed into
 *                       place, so 1 lets exactly the first checkpoint through)
 *   ALALLO_FAULT_MARK   a file that gets one line each time a fault is
 *                       injected, so the test can prove the fault happened
 *
 * The disk "fills up" at the first new folder made under the folder after
 * that many renames (the next checkpoint's temporary folder, which is still
 * made): from then on write(), pwrite() and fsync() on a descriptor whose
 * file is under the folder, and rename() or mkdir() of a path under it, fail
 * with ENOSPC. Arming at a mkdir rather than at the rename lets the first
 * checkpoint finish cleanly (its folder and parent fsyncs included), and
 * makes the failure land inside the next checkpoint's writes, where a real
 * full disk would hit. Everything else passes through. Without
 * ALALLO_FAULT_DIR the shim changes nothing, so the worker that loads it
 * (and every trainer it starts, which inherits LD_PRELOAD) runs normally
 * elsewhere. Each process counts its own renames.
 *
 * This is test code: it lives in tests/fault/, is built by the test with
 * `cc -shared -fPIC`, and is never linked into alallo.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static atomic_int renames_done;
static atomic_int full; /* the disk is full from now on */

static const char *fault_dir(void)
{
    const char *d = getenv("ALALLO_FAULT_DIR");
    return d && d[0] == '/' ? d : NULL;
}

static int allowed_renames(void)
{
    const char *a = getenv("ALALLO_FAULT_AFTER");
    return a ? atoi(a) : 0;
}

static int under(const char *path)
{
    const char *d = fault_dir();
    if (!d || !path)
        return 0;
    size_t n = strlen(d);
    return strncmp(path, d, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

static int fd_under(int fd)
{
    char link[64], target[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0)
        return 0;
    target[n] = '\0';
    return under(target);
}

static int armed(void)
{
    return atomic_load(&full);
}

/* Notes an injected fault in ALALLO_FAULT_MARK (best effort, raw syscalls
 * through the real functions so that the note itself is never faulted). */
static void mark(const char *what, const char *path)
{
    const char *m = getenv("ALALLO_FAULT_MARK");
    if (!m)
        return;
    int fd = open(m, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    char line[PATH_MAX + 64];
    int len = snprintf(line, sizeof line, "%d %s %s\n", (int)getpid(), what, path ? path : "-");
    ssize_t (*real_write)(int, const void *, size_t) =
        (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    if (len > 0 && real_write)
        (void)real_write(fd, line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1);
    close(fd);
}

ssize_t write(int fd, const void *buf, size_t count)
{
    static ssize_t (*real)(int, const void *, size_t);
    if (!real)
        real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    if (armed() && fd_under(fd)) {
        mark("write", NULL);
        errno = ENOSPC;
        return -1;
    }
    return real(fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t off)
{
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real)
        real = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    if (armed() && fd_under(fd)) {
        mark("pwrite", NULL);
        errno = ENOSPC;
        return -1;
    }
    return real(fd, buf, count, off);
}

int fsync(int fd)
{
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    if (armed() && fd_under(fd)) {
        mark("fsync", NULL);
        errno = ENOSPC;
        return -1;
    }
    return real(fd);
}

int rename(const char *from, const char *to)
{
    static int (*real)(const char *, const char *);
    if (!real)
        real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    if (armed() && (under(from) || under(to))) {
        mark("rename", to);
        errno = ENOSPC;
        return -1;
    }
    int rc = real(from, to);
    if (rc == 0 && under(to))
        atomic_fetch_add(&renames_done, 1);
    return rc;
}

int mkdir(const char *path, mode_t mode)
{
    static int (*real)(const char *, mode_t);
    if (!real)
        real = (int (*)(const char *, mode_t))dlsym(RTLD_NEXT, "mkdir");
    if (armed() && under(path)) {
        /* An existing folder is not a new allocation: answer as the kernel
         * would, so that mkdir -p of existing parents still works. */
        struct stat st;
        if (stat(path, &st) == 0) {
            errno = EEXIST;
            return -1;
        }
        mark("mkdir", path);
        errno = ENOSPC;
        return -1;
    }
    int rc = real(path, mode);
    if (rc == 0 && under(path) && atomic_load(&renames_done) >= allowed_renames())
        atomic_store(&full, 1);
    return rc;
}
