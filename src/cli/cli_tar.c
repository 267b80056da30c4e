/* cli_tar.c - a small, strict ustar reader for folder exports. */
#include "cli/cli_tar.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* An octal field; -1 when it is not one. */
static long long octal(const unsigned char *p, size_t n)
{
    long long v = 0;
    size_t i = 0;
    while (i < n && p[i] == ' ')
        i++;
    bool any = false;
    for (; i < n && p[i] >= '0' && p[i] <= '7'; i++) {
        if (v > (1LL << 55))
            return -1;
        v = v * 8 + (p[i] - '0');
        any = true;
    }
    for (; i < n; i++)
        if (p[i] != ' ' && p[i] != '\0')
            return -1;
    return any ? v : -1;
}

static bool block_is_zero(const unsigned char *b)
{
    for (int i = 0; i < 512; i++)
        if (b[i])
            return false;
    return true;
}

/* A relative path of plain components: no leading '/', no empty, "." or
 * ".." component, so nothing lands outside the target folder. */
static bool safe_name(const char *name)
{
    if (!name[0] || name[0] == '/')
        return false;
    for (const char *p = name; *p;) {
        size_t n = strcspn(p, "/");
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        p += n;
        if (*p == '/' && *++p == '\0')
            return false;
    }
    return true;
}

static int mkdirs_under(const char *dir, const char *rel, bool last_too)
{
    char path[2048];
    if (snprintf(path, sizeof path, "%s/%s", dir, rel) >= (int)sizeof path)
        return -1;
    size_t base = strlen(dir) + 1;
    for (char *p = path + base; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(path, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    if (last_too && mkdir(path, 0755) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

int cli_untar(const char *tar_path, const char *dir, char *err, size_t errcap)
{
    FILE *in = fopen(tar_path, "rb");
    if (!in) {
        snprintf(err, errcap, "cannot open %s: %s", tar_path, strerror(errno));
        return -1;
    }
    if (mkdir(dir, 0755) != 0) {
        snprintf(err, errcap, "cannot create %s: %s", dir, strerror(errno));
        fclose(in);
        return -1;
    }
    unsigned char h[512];
    char *buf = malloc(1 << 20);
    int rc = -1, members = 0;
    if (!buf) {
        snprintf(err, errcap, "out of memory");
        goto out;
    }
    for (;;) {
        if (fread(h, 1, 512, in) != 512) {
            snprintf(err, errcap, "the archive is truncated");
            goto out;
        }
        if (block_is_zero(h)) {
            rc = 0; /* the end marker */
            break;
        }
        if (++members > CLI_TAR_MAX_MEMBERS) {
            snprintf(err, errcap, "the archive has too many members");
            goto out;
        }
        long long sum = octal(h + 148, 8), size = octal(h + 124, 12);
        long long check = 0;
        for (int i = 0; i < 512; i++)
            check += (i >= 148 && i < 156) ? ' ' : h[i];
        if (sum != check || memcmp(h + 257, "ustar", 5) != 0 || size < 0) {
            snprintf(err, errcap, "not a ustar archive (bad header %d)", members);
            goto out;
        }
        if (size > CLI_TAR_MAX_MEMBER) {
            snprintf(err, errcap, "an archive member is too large");
            goto out;
        }
        char name[260];
        char prefix[156], plain[101];
        memcpy(prefix, h + 345, 155);
        prefix[155] = '\0';
        memcpy(plain, h, 100);
        plain[100] = '\0';
        snprintf(name, sizeof name, "%s%s%s", prefix, prefix[0] ? "/" : "", plain);
        size_t nl = strlen(name);
        while (nl > 0 && name[nl - 1] == '/')
            name[--nl] = '\0'; /* folders may end with '/' */
        char type = (char)h[156];
        if (!safe_name(name)) {
            snprintf(err, errcap, "unsafe name in the archive: %.100s", name);
            goto out;
        }
        if (type == '5') {
            if (mkdirs_under(dir, name, true) != 0) {
                snprintf(err, errcap, "cannot create %s/%s: %s", dir, name, strerror(errno));
                goto out;
            }
            continue;
        }
        if (type != '0' && type != '\0') {
            snprintf(err, errcap, "unsupported entry in the archive: %.100s", name);
            goto out;
        }
        char path[2048];
        if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path ||
            mkdirs_under(dir, name, false) != 0) {
            snprintf(err, errcap, "cannot create the folders of %.100s", name);
            goto out;
        }
        FILE *f = fopen(path, "wbx"); /* never overwrite: names repeat only in bad archives */
        if (!f) {
            snprintf(err, errcap, "cannot create %.200s: %s", path, strerror(errno));
            goto out;
        }
        long long left = size;
        bool bad = false;
        while (left > 0 && !bad) {
            size_t want = left > (1 << 20) ? (1 << 20) : (size_t)left;
            size_t got = fread(buf, 1, want, in);
            if (got != want || fwrite(buf, 1, got, f) != got)
                bad = true;
            left -= (long long)got;
        }
        if (fclose(f) != 0)
            bad = true;
        if (bad) {
            snprintf(err, errcap, "the archive is truncated, or %.200s could not be written",
                     path);
            goto out;
        }
        long pad = (long)((512 - size % 512) % 512);
        if (pad && fseek(in, pad, SEEK_CUR) != 0) {
            snprintf(err, errcap, "the archive is truncated");
            goto out;
        }
    }
out:
    free(buf);
    fclose(in);
    return rc;
}
