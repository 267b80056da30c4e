/* wlog.c - a worker's own log file: one write() per line. */
#include "worker/wlog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int wlog_open(struct wlog *log, const char *path, const char *name)
{
    snprintf(log->name, sizeof log->name, "%s", name ? name : "worker");
    struct stat st;
    char old[1100];
    if (stat(path, &st) == 0 && st.st_size > WLOG_ROTATE_BYTES &&
        snprintf(old, sizeof old, "%s.1", path) < (int)sizeof old)
        rename(path, old);
    log->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    return log->fd < 0 ? -1 : 0;
}

void wlog_printf(struct wlog *log, const char *fmt, ...)
{
    char line[2200];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    size_t n = strftime(line, 32, "%Y-%m-%dT%H:%M:%SZ ", &tm);
    int m = snprintf(line + n, sizeof line - n, "%s: ", log ? log->name : "worker");
    if (m > 0)
        n += (size_t)m;
    va_list ap;
    va_start(ap, fmt);
    m = vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
    va_end(ap);
    if (m > 0)
        n += (size_t)m < sizeof line - n - 1 ? (size_t)m : sizeof line - n - 2;
    line[n++] = '\n';
    int fd = log && log->fd >= 0 ? log->fd : STDERR_FILENO;
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, line + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
}

void wlog_close(struct wlog *log)
{
    if (log && log->fd >= 0) {
        close(log->fd);
        log->fd = -1;
    }
}
