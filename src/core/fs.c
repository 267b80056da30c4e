/* fs.c - see fs.h. */
#include "core/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/text.h"

#define WRITE_CHUNK ((size_t)1 << 30) /* one write() call at most */
#define COPY_BUF ((size_t)1 << 16)

int fs_mkdirs(const char *path, mode_t mode)
{
    char buf[FS_MAX_PATH];
    if (!text_copy(buf, sizeof buf, path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, mode) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(buf, mode) != 0 && errno != EEXIST ? -1 : 0;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

int fs_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    return nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

int fs_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len > WRITE_CHUNK ? WRITE_CHUNK : len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int fs_copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        int saved = errno;
        close(in);
        errno = saved;
        return -1;
    }
    char *buf = malloc(COPY_BUF);
    int rc = buf ? 0 : -1;
    while (rc == 0) {
        ssize_t n = read(in, buf, COPY_BUF);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -1 : 0;
            break;
        }
        rc = fs_write_all(out, buf, (size_t)n);
    }
    int saved = errno;
    free(buf);
    close(in);
    if (rc == 0 && fsync(out) != 0) {
        rc = -1;
        saved = errno;
    }
    if (close(out) != 0 && rc == 0) {
        rc = -1;
        saved = errno;
    }
    errno = saved;
    return rc;
}

int fs_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc == 0 ? 0 : -1;
}

int fs_sync_parent(const char *path)
{
    char dir[FS_MAX_PATH];
    if (!text_copy(dir, sizeof dir, path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    char *slash = strrchr(dir, '/');
    if (!slash)
        return fs_sync_dir(".");
    if (slash == dir)
        slash++; /* a file in "/" */
    *slash = '\0';
    return fs_sync_dir(dir);
}

int fs_write_durably(const char *path, const void *data, size_t len, mode_t mode)
{
    char tmp[FS_MAX_PATH];
    if (!text_printf(tmp, sizeof tmp, "%s.tmp", path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return -1;
    int rc = fchmod(fd, mode) == 0 && fs_write_all(fd, data, len) == 0 && fsync(fd) == 0 ? 0 : -1;
    int saved = errno;
    if (close(fd) != 0 && rc == 0) {
        rc = -1;
        saved = errno;
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = -1;
        saved = errno;
    }
    if (rc != 0) {
        unlink(tmp);
        errno = saved;
        return -1;
    }
    fs_sync_parent(path);
    return 0;
}

int fs_read_line(const char *path, char *out, size_t cap)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char *got = fgets(out, (int)cap, f);
    fclose(f);
    if (!got)
        return -1;
    out[strcspn(out, "\r\n")] = '\0';
    return out[0] ? 0 : -1;
}
