/* checkpoint.c - atomic checkpoint folders (see checkpoint.h). */
#include "train/formats/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"

#define MAGIC "ALALLOCK"
#define HASH_SEED 0x616c616c6c6f636bULL
/* Bytes per write/read call: large enough for disk speed, bounded memory. */
#define IO_CHUNK (8u << 20)
#define MAX_CKPTS 4096

static uint64_t mix_word(uint64_t h, uint64_t w)
{
    /* Multiply-xorshift per 8-byte word: several GB/s, and every bit of
     * every word reaches the state; enough to catch torn or flipped data. */
    h ^= w;
    h *= 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 29);
}

void ckpt_hasher_init(struct ckpt_hasher *s)
{
    memset(s, 0, sizeof *s);
    s->h = HASH_SEED;
}

void ckpt_hasher_add(struct ckpt_hasher *s, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    s->len += len;
    while (len && s->npend) {
        s->pend[s->npend++] = *p++;
        len--;
        if (s->npend == 8) {
            uint64_t w;
            memcpy(&w, s->pend, 8);
            s->h = mix_word(s->h, w);
            s->npend = 0;
        }
    }
    for (; len >= 8; len -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        s->h = mix_word(s->h, w);
    }
    /* Here len < 8, and npend is 0 unless len is: the rest waits for the
     * next word. One copy, not a byte loop, so that gcc 12 at -O3 does not
     * see an int counter that could overflow (aggressive-loop-optimizations). */
    memcpy(s->pend + s->npend, p, len);
    s->npend += (int)len;
}

uint64_t ckpt_hasher_final(const struct ckpt_hasher *s)
{
    /* The tail is zero-padded and the length mixed in, so that a file cut
     * at a word boundary never hashes like a shorter one. */
    unsigned char last[8] = {0};
    memcpy(last, s->pend, (size_t)s->npend);
    uint64_t w;
    memcpy(&w, last, 8);
    return mix_word(mix_word(s->h, w), s->len);
}

uint64_t ckpt_hash(const void *buf, size_t len)
{
    struct ckpt_hasher s;
    ckpt_hasher_init(&s);
    ckpt_hasher_add(&s, buf, len);
    return ckpt_hasher_final(&s);
}

static void put_u64(unsigned char *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

/* state.bin header: magic, version, then 12 u64 fields. */
#define HEADER_BYTES (8 + 8 + 12 * 8)

struct out_file {
    int fd;
    uint64_t size, hash;
    struct ckpt_hasher hs;
};

static int out_write(struct out_file *f, const void *buf, size_t len)
{
    ckpt_hasher_add(&f->hs, buf, len);
    f->size += len;
    const char *p = buf;
    while (len) {
        size_t k = len < IO_CHUNK ? len : IO_CHUNK;
        ssize_t w = write(f->fd, p, k);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static int out_open(struct out_file *f, const char *dir, const char *name)
{
    char path[CKPT_MAX_PATH + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    f->size = 0;
    ckpt_hasher_init(&f->hs);
    return f->fd < 0 ? -1 : 0;
}

static int out_close(struct out_file *f)
{
    f->hash = ckpt_hasher_final(&f->hs);
    int rc = fsync(f->fd);
    if (close(f->fd) != 0)
        rc = -1;
    f->fd = -1;
    return rc;
}

static int write_state(const char *dir, const struct ckpt *c, struct out_file *f)
{
    if (out_open(f, dir, "state.bin"))
        return -1;
    unsigned char h[HEADER_BYTES];
    memcpy(h, MAGIC, 8);
    put_u64(h + 8, CKPT_VERSION);
    uint64_t fields[12] = {c->step, c->opt_t, c->epoch, c->cursor, c->rng.s[0], c->rng.s[1],
                           c->rng.s[2], c->rng.s[3], 0, (uint64_t)c->n, c->m ? 1 : 0, 0};
    memcpy(&fields[8], &c->train_loss, 8);
    for (int i = 0; i < 12; i++)
        put_u64(h + 16 + 8 * i, fields[i]);
    int rc = out_write(f, h, sizeof h);
    /* fp32 arrays are written as the machine holds them: the trainer runs
     * on little-endian machines only (checked at build by the format). */
    if (!rc)
        rc = out_write(f, c->params, c->n * sizeof(float));
    if (!rc && c->m)
        rc = out_write(f, c->m, c->n * sizeof(float));
    if (!rc && c->v)
        rc = out_write(f, c->v, c->n * sizeof(float));
    if (out_close(f))
        rc = -1;
    return rc;
}

int ckpt_write(const char *root, const struct ckpt *c, char *path_out, size_t pathcap,
               char *err, size_t errcap)
{
    char tmp[CKPT_MAX_PATH], fin[CKPT_MAX_PATH], old[CKPT_MAX_PATH];
    if (strlen(root) > CKPT_MAX_PATH - 64) {
        snprintf(err, errcap, "checkpoint: folder path too long");
        return -1;
    }
    snprintf(tmp, sizeof tmp, "%s/.tmp-step-%08" PRIu64 "-%ld", root, c->step, (long)getpid());
    snprintf(fin, sizeof fin, "%s/step-%08" PRIu64, root, c->step);
    snprintf(old, sizeof old, "%s/.old-step-%08" PRIu64 "-%ld", root, c->step, (long)getpid());
    if (fs_mkdirs(root, 0755) || fs_remove_tree(tmp) || mkdir(tmp, 0755)) {
        snprintf(err, errcap, "checkpoint: cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    struct out_file st = {.fd = -1}, meta = {.fd = -1}, done = {.fd = -1};
    const char *mj = c->meta_json ? c->meta_json : "{}";
    char line[512];
    int n;
    if (write_state(tmp, c, &st))
        goto io;
    if (out_open(&meta, tmp, "meta.json") || out_write(&meta, mj, strlen(mj)) ||
        out_close(&meta))
        goto io;
    n = snprintf(line, sizeof line,
                 "alallo-checkpoint %d\nstate.bin %" PRIu64 " %016" PRIx64
                 "\nmeta.json %" PRIu64 " %016" PRIx64 "\n",
                 CKPT_VERSION, st.size, st.hash, meta.size, meta.hash);
    if (out_open(&done, tmp, "COMPLETE") || out_write(&done, line, (size_t)n) ||
        out_close(&done) || fs_sync_dir(tmp))
        goto io;
    /* A checkpoint of the same step from an earlier attempt is replaced. */
    struct stat sb;
    int had_old = stat(fin, &sb) == 0;
    if (had_old && rename(fin, old) != 0)
        goto io;
    if (rename(tmp, fin) != 0 || fs_sync_dir(root) != 0)
        goto io;
    if (had_old)
        fs_remove_tree(old);
    snprintf(path_out, pathcap, "%s", fin);
    return 0;
io:
    snprintf(err, errcap, "checkpoint: writing %s failed: %s", tmp, strerror(errno));
    if (st.fd >= 0)
        close(st.fd);
    if (meta.fd >= 0)
        close(meta.fd);
    if (done.fd >= 0)
        close(done.fd);
    fs_remove_tree(tmp);
    return -1;
}

/* Size and checksum of a file, read in chunks. */
static int file_hash(const char *path, uint64_t *size, uint64_t *hash)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    unsigned char *buf = malloc(IO_CHUNK);
    if (!buf) {
        close(fd);
        return -1;
    }
    struct ckpt_hasher hs;
    ckpt_hasher_init(&hs);
    for (;;) {
        ssize_t r = read(fd, buf, IO_CHUNK);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(buf);
            close(fd);
            return -1;
        }
        if (r == 0)
            break;
        ckpt_hasher_add(&hs, buf, (size_t)r);
    }
    free(buf);
    close(fd);
    *size = hs.len;
    *hash = ckpt_hasher_final(&hs);
    return 0;
}

int ckpt_verify(const char *dir, char *err, size_t errcap)
{
    char path[CKPT_MAX_PATH + 64];
    snprintf(path, sizeof path, "%s/COMPLETE", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errcap, "%s: no COMPLETE marker", dir);
        return -1;
    }
    char line[256];
    int version = 0, files = 0, rc = 0;
    if (!fgets(line, sizeof line, f) || sscanf(line, "alallo-checkpoint %d", &version) != 1 ||
        version != CKPT_VERSION) {
        snprintf(err, errcap, "%s: COMPLETE marker unreadable", dir);
        fclose(f);
        return -1;
    }
    while (fgets(line, sizeof line, f)) {
        char name[64];
        uint64_t want_size, want_hash, size, hash;
        if (sscanf(line, "%63s %" SCNu64 " %" SCNx64, name, &want_size, &want_hash) != 3 ||
            strchr(name, '/')) {
            snprintf(err, errcap, "%s: COMPLETE marker unreadable", dir);
            rc = -1;
            break;
        }
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (file_hash(path, &size, &hash) || size != want_size || hash != want_hash) {
            snprintf(err, errcap, "%s: %s does not match its checksum", dir, name);
            rc = -1;
            break;
        }
        files++;
    }
    fclose(f);
    if (rc == 0 && files < 2) {
        snprintf(err, errcap, "%s: COMPLETE marker lists too few files", dir);
        rc = -1;
    }
    return rc;
}

static int parse_step_name(const char *name, uint64_t *step)
{
    if (strncmp(name, "step-", 5) != 0 || strlen(name) != 13)
        return -1;
    uint64_t v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *step = v;
    return 0;
}

static int cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Steps of the step-NNNNNNNN folders under root, newest first. */
static int list_steps(const char *root, uint64_t *steps, int cap)
{
    DIR *d = opendir(root);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < cap) {
        uint64_t s;
        if (parse_step_name(e->d_name, &s) == 0)
            steps[n++] = s;
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof *steps, cmp_desc);
    return n;
}

int ckpt_latest(const char *root, char *path_out, size_t pathcap, uint64_t *step, char *err,
                size_t errcap)
{
    return ckpt_latest_at_most(root, UINT64_MAX, path_out, pathcap, step, err, errcap);
}

int ckpt_latest_at_most(const char *root, uint64_t max_step, char *path_out, size_t pathcap,
                        uint64_t *step, char *err, size_t errcap)
{
    uint64_t *steps = malloc(MAX_CKPTS * sizeof *steps);
    if (!steps) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    int n = list_steps(root, steps, MAX_CKPTS);
    if (n < 0) {
        snprintf(err, errcap, "checkpoint: cannot read %s: %s", root, strerror(errno));
        free(steps);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char dir[CKPT_MAX_PATH + 32], why[CKPT_MAX_PATH + 128];
        if (steps[i] > max_step)
            continue;
        snprintf(dir, sizeof dir, "%s/step-%08" PRIu64, root, steps[i]);
        if (ckpt_verify(dir, why, sizeof why) == 0) {
            snprintf(path_out, pathcap, "%s", dir);
            *step = steps[i];
            free(steps);
            return 1;
        }
        fprintf(stderr, "alallo train: skipping checkpoint: %s\n", why);
    }
    free(steps);
    return 0;
}

static int read_exact(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len) {
        ssize_t r = read(fd, p, len < IO_CHUNK ? len : IO_CHUNK);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

int ckpt_read(const char *dir, struct ckpt *c, char *err, size_t errcap)
{
    memset(c, 0, sizeof *c);
    char path[CKPT_MAX_PATH + 64];
    snprintf(path, sizeof path, "%s/state.bin", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    unsigned char h[HEADER_BYTES];
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || read_exact(fd, h, sizeof h) != 0 ||
        memcmp(h, MAGIC, 8) != 0 || get_u64(h + 8) != CKPT_VERSION) {
        snprintf(err, errcap, "%s: state.bin is not an alallo checkpoint", dir);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    uint64_t f[12];
    for (int i = 0; i < 12; i++)
        f[i] = get_u64(h + 16 + 8 * i);
    c->step = f[0];
    c->opt_t = f[1];
    c->epoch = f[2];
    c->cursor = f[3];
    for (int i = 0; i < 4; i++)
        c->rng.s[i] = f[4 + i];
    memcpy(&c->train_loss, &f[8], 8);
    c->n = (size_t)f[9];
    int moments = f[10] != 0;
    uint64_t want = HEADER_BYTES + (uint64_t)c->n * 4 * (moments ? 3 : 1);
    if ((uint64_t)sb.st_size != want) {
        snprintf(err, errcap, "%s: state.bin has the wrong size", dir);
        close(fd);
        return -1;
    }
    c->params = malloc(c->n * sizeof(float) + 1);
    if (moments) {
        c->m = malloc(c->n * sizeof(float) + 1);
        c->v = malloc(c->n * sizeof(float) + 1);
    }
    if (!c->params || (moments && (!c->m || !c->v)) ||
        read_exact(fd, c->params, c->n * sizeof(float)) ||
        (moments && (read_exact(fd, c->m, c->n * sizeof(float)) ||
                     read_exact(fd, c->v, c->n * sizeof(float))))) {
        snprintf(err, errcap, "%s: cannot read state.bin", dir);
        close(fd);
        ckpt_release(c);
        return -1;
    }
    close(fd);
    snprintf(path, sizeof path, "%s/meta.json", dir);
    FILE *mf = fopen(path, "rb");
    if (mf) {
        c->meta_json = calloc(1, 1 << 20);
        if (c->meta_json)
            (void)!fread(c->meta_json, 1, (1 << 20) - 1, mf);
        fclose(mf);
    }
    if (!c->meta_json) {
        snprintf(err, errcap, "%s: cannot read meta.json", dir);
        ckpt_release(c);
        return -1;
    }
    return 0;
}

void ckpt_release(struct ckpt *c)
{
    free(c->params);
    free(c->m);
    free(c->v);
    free(c->meta_json);
    c->params = c->m = c->v = NULL;
    c->meta_json = NULL;
}

/* The step folders under root above `step`, removed (ckpt_drop_after) or
 * only reported (ckpt_note_after). */
static int after_step(const char *root, uint64_t step, bool remove)
{
    uint64_t *steps = malloc(MAX_CKPTS * sizeof *steps);
    if (!steps)
        return 0;
    int n = list_steps(root, steps, MAX_CKPTS), count = 0;
    for (int i = 0; i < n && steps[i] > step; i++) {
        char path[CKPT_MAX_PATH + 32];
        snprintf(path, sizeof path, "%s/step-%08" PRIu64, root, steps[i]);
        fprintf(stderr, "alallo train: %s step-%08" PRIu64
                " (newer than the checkpoint at step %" PRIu64 " to resume from)\n",
                remove ? "removing" : "ignoring", steps[i], step);
        if (!remove || fs_remove_tree(path) == 0)
            count++;
    }
    free(steps);
    return count;
}

int ckpt_drop_after(const char *root, uint64_t step)
{
    return after_step(root, step, true);
}

int ckpt_note_after(const char *root, uint64_t step)
{
    return after_step(root, step, false);
}

int ckpt_prune(const char *root, int keep, uint64_t hold)
{
    int deleted = 0;
    DIR *d = opendir(root);
    if (!d)
        return 0;
    struct dirent *e;
    char path[CKPT_MAX_PATH + 300];
    /* Leftovers of attempts that died while writing. The pid in the name
     * keeps a live writer's folder apart; only other pids' are removed. */
    char mine[64];
    snprintf(mine, sizeof mine, "-%ld", (long)getpid());
    while ((e = readdir(d))) {
        int leftover = strncmp(e->d_name, ".tmp-step-", 10) == 0 ||
                       strncmp(e->d_name, ".old-step-", 10) == 0;
        size_t len = strlen(e->d_name), ml = strlen(mine);
        int ours = len > ml && strcmp(e->d_name + len - ml, mine) == 0;
        if (leftover && !ours) {
            snprintf(path, sizeof path, "%s/%s", root, e->d_name);
            if (fs_remove_tree(path) == 0)
                deleted++;
        }
    }
    closedir(d);
    uint64_t *steps = malloc(MAX_CKPTS * sizeof *steps);
    if (!steps)
        return deleted;
    int n = list_steps(root, steps, MAX_CKPTS);
    int kept = 0;
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/step-%08" PRIu64, root, steps[i]);
        char why[sizeof path + 16];
        /* Only complete ones count toward `keep`, so a torn newest folder
         * never pushes out the last good checkpoint. */
        snprintf(why, sizeof why, "%s/COMPLETE", path);
        struct stat sb;
        int complete = stat(why, &sb) == 0;
        if (complete && kept < keep) {
            kept++;
            continue;
        }
        if (hold && steps[i] == hold)
            continue;
        if (complete && fs_remove_tree(path) == 0)
            deleted++;
    }
    free(steps);
    return deleted;
}
