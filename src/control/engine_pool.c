/* engine_pool.c - a pool's declaration (--slurm-pool SPEC) and the
 * server-to-node path map (--cluster-data). See engine.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/engine.h"
#include "core/text.h"

#define SPEC_MAX 1024

static bool pool_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= 32)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return false;
    }
    return true;
}

/* "2G", "512M", "1048576": bytes, powers of 1024. */
static bool parse_size(const char *s, int64_t *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || !(v > 0))
        return false;
    double mult = 1;
    if (*end == 'K' || *end == 'k')
        mult = 1024.0, end++;
    else if (*end == 'M' || *end == 'm')
        mult = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g')
        mult = 1024.0 * 1024 * 1024, end++;
    else if (*end == 'T' || *end == 't')
        mult = 1024.0 * 1024 * 1024 * 1024, end++;
    if (*end || v * mult > 9e18)
        return false;
    *out = (int64_t)(v * mult);
    return true;
}

/* A value that goes onto a command line of the engine: printable, no
 * blanks, no quotes or shell characters. */
static bool plain_value(const char *v)
{
    for (const char *p = v; *p; p++)
        if (*p <= ' ' || *p > '~' || strchr("'\"`$\\;&|<>()", *p))
            return false;
    return true;
}

static int set_key(struct engine_pool *p, const char *k, const char *v, char *err, size_t errcap)
{
    long n;
    if (!plain_value(v) || !*v) {
        text_error(err, errcap, "pool: %s must be a plain non-empty value", k);
        return -1;
    }
    if (strcmp(k, "name") == 0) {
        if (!pool_name_ok(v)) {
            text_error(err, errcap, "pool: name must be 1 to 31 letters, digits, '-' or '_'");
            return -1;
        }
        text_copy(p->name, sizeof p->name, v);
    } else if (strcmp(k, "partition") == 0 || strcmp(k, "qos") == 0 ||
               strcmp(k, "account") == 0 || strcmp(k, "constraint") == 0 ||
               strcmp(k, "gres") == 0) {
        char *dst = strcmp(k, "partition") == 0 ? p->base.partition
                    : strcmp(k, "qos") == 0     ? p->base.qos
                    : strcmp(k, "account") == 0 ? p->base.account
                    : strcmp(k, "gres") == 0    ? p->base.gres
                                                : p->base.constraint;
        size_t cap = strcmp(k, "constraint") == 0 ? sizeof p->base.constraint
                                                  : sizeof p->base.partition;
        if (!text_copy(dst, cap, v)) {
            text_error(err, errcap, "pool: %s is too long", k);
            return -1;
        }
    } else if (strcmp(k, "cpus") == 0) {
        if (!text_parse_long(v, 1, 4096, &n)) {
            text_error(err, errcap, "pool: cpus must be from 1 to 4096");
            return -1;
        }
        p->cpus = (int)n;
    } else if (strcmp(k, "mem") == 0) {
        if (!parse_size(v, &p->mem_bytes) || p->mem_bytes < 64LL * 1024 * 1024) {
            text_error(err, errcap, "pool: mem must be a size of at least 64M, e.g. 2G");
            return -1;
        }
    } else if (strcmp(k, "class") == 0) {
        if (strcmp(v, "on-demand") != 0 && strcmp(v, "spot") != 0) {
            text_error(err, errcap, "pool: class must be on-demand or spot");
            return -1;
        }
        text_copy(p->class_, sizeof p->class_, v);
    } else if (strcmp(k, "price") == 0) {
        char *end = NULL;
        double d = strtod(v, &end);
        if (end && strcmp(end, "/h") == 0)
            end += 2;
        if (end == v || *end || !isfinite(d) || d < 0 || d > 1e6) {
            text_error(err, errcap, "pool: price must be an hourly price such as 0.80/h");
            return -1;
        }
        p->price_per_hour = d;
    } else if (strcmp(k, "slots") == 0) {
        if (!text_parse_long(v, 1, 64, &n)) {
            text_error(err, errcap, "pool: slots must be from 1 to 64");
            return -1;
        }
        p->slots = (int)n;
    } else if (strcmp(k, "time") == 0) {
        if (!text_parse_long(v, 1, 366L * 24 * 60, &n)) {
            text_error(err, errcap, "pool: time must be the partition's MaxTime in minutes");
            return -1;
        }
        p->max_time_min = n;
    } else if (strcmp(k, "lead") == 0) {
        if (!text_parse_long(v, 1, 3600, &n)) {
            text_error(err, errcap, "pool: lead must be from 1 to 3600 seconds");
            return -1;
        }
        p->lead_s = (int)n;
    } else {
        text_error(err, errcap, "pool: unknown key '%s'", k);
        return -1;
    }
    return 0;
}

int engine_pool_parse(const char *spec, struct engine_pool *p, char *err, size_t errcap)
{
    memset(p, 0, sizeof *p);
    text_copy(p->class_, sizeof p->class_, "on-demand");
    p->price_per_hour = 0.40;
    p->slots = 1;
    p->cpus = 1;
    p->mem_bytes = 2LL * 1024 * 1024 * 1024;
    p->lead_s = ENGINE_DEFAULT_LEAD_S;
    char buf[SPEC_MAX];
    if (!text_copy(buf, sizeof buf, spec)) {
        text_error(err, errcap, "pool: the declaration is too long");
        return -1;
    }
    char *save = NULL;
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) {
            text_error(err, errcap, "pool: expected key=value, got '%s'", kv);
            return -1;
        }
        *eq = '\0';
        if (set_key(p, kv, eq + 1, err, errcap))
            return -1;
    }
    if (!p->name[0]) {
        text_error(err, errcap, "pool: name= is required");
        return -1;
    }
    p->base.cpus = p->cpus;
    p->base.mem_mb = p->mem_bytes / (1024 * 1024);
    return 0;
}

bool engine_map_path(const struct engine_config *cfg, const char *path, char *out, size_t cap)
{
    size_t n = strlen(cfg->map_from);
    if (n > 0 && strncmp(path, cfg->map_from, n) == 0 && (path[n] == '/' || path[n] == '\0'))
        return text_printf(out, cap, "%s%s", cfg->map_to, path + n);
    return text_copy(out, cap, path);
}
