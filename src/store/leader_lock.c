/* leader_lock.c - see leader_lock.h. The flock(2) lock of a data folder
 * here; PostgreSQL's advisory lock in leader_lock_pg.c. */
#include "store/leader_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "core/log.h"
#include "core/text.h"
#include "store/leader_lock_pg.h"

struct leader_lock {
    struct leader_lock_pg *pg; /* PostgreSQL; NULL for a data folder */
    char path[1024];           /* DATA/leader.lock */
    int fd;                    /* open on path; holds the flock when held */
    bool held;
};

static bool is_pg_url(const char *where)
{
    return strncmp(where, "postgresql://", 13) == 0 || strncmp(where, "postgres://", 11) == 0;
}

enum alallo_err leader_lock_open(const char *where, struct leader_lock **out, char *err,
                                 size_t errcap)
{
    *out = NULL;
    struct leader_lock *l = calloc(1, sizeof *l);
    if (!l) {
        snprintf(err, errcap, "out of memory");
        return ERR_NOMEM;
    }
    l->fd = -1;
    if (is_pg_url(where)) {
        enum alallo_err e = leader_lock_pg_open(where, &l->pg, err, errcap);
        if (e) {
            free(l);
            return e;
        }
        *out = l;
        return ERR_OK;
    }
    if (!text_printf(l->path, sizeof l->path, "%s/leader.lock", where)) {
        snprintf(err, errcap, "the data folder's path is too long");
        free(l);
        return ERR_INVALID;
    }
    l->fd = open(l->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (l->fd < 0) {
        snprintf(err, errcap, "cannot open %s: %s", l->path, strerror(errno));
        free(l);
        return ERR_IO;
    }
    *out = l;
    return ERR_OK;
}

/* Replaces the lock file's text with url and a newline (only its holder
 * writes it). */
static void write_url(struct leader_lock *l, const char *url)
{
    size_t n = strlen(url);
    if (ftruncate(l->fd, 0) != 0 || pwrite(l->fd, url, n, 0) != (ssize_t)n ||
        pwrite(l->fd, "\n", 1, (off_t)n) != 1)
        log_line("warn", "could not write the leader's URL into %s: %s", l->path,
                 strerror(errno));
}

enum leader_lock_state leader_lock_try(struct leader_lock *l, const char *my_url)
{
    if (l->pg)
        return leader_lock_pg_try(l->pg, my_url);
    if (l->held)
        return LEADER_LOCK_HELD; /* the kernel keeps it as long as l->fd is open */
    if (flock(l->fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR)
            log_line("warn", "flock %s: %s", l->path, strerror(errno));
        return LEADER_LOCK_STANDBY;
    }
    l->held = true;
    write_url(l, my_url);
    return LEADER_LOCK_HELD;
}

enum alallo_err leader_lock_url(struct leader_lock *l, char *out, size_t cap)
{
    if (l->pg)
        return leader_lock_pg_url(l->pg, out, cap);
    char buf[LEADER_URL_MAX + 2];
    ssize_t n = pread(l->fd, buf, sizeof buf - 1, 0);
    if (n < 0)
        return ERR_UNAVAILABLE;
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    if (!buf[0])
        return ERR_NOT_FOUND;
    return text_copy(out, cap, buf) ? ERR_OK : ERR_INVALID;
}

void leader_lock_close(struct leader_lock *l)
{
    if (!l)
        return;
    leader_lock_pg_close(l->pg);
    if (l->fd >= 0) {
        /* No leader now; the next one writes itself. */
        if (l->held && ftruncate(l->fd, 0) != 0)
            log_line("warn", "could not empty %s: %s", l->path, strerror(errno));
        close(l->fd); /* releases the flock */
    }
    free(l);
}
