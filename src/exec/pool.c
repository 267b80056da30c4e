/* pool.c - a pool's declaration parsed, and its slots (pool.h). */
#include "exec/pool.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/ids.h"
#include "core/text.h"

static const char *const keys[] = {"name",  "partition", "gres",  "gpu_mem", "cpus",
                                   "mem",   "class",     "price", "slots",   "qos",
                                   "account", "constraint"};
#define NKEYS (sizeof keys / sizeof keys[0])
#define KNOWN                                                                                  \
    "name, partition, gres, gpu_mem, cpus, mem, class, price, slots, qos, account, constraint"

/* A Slurm name (partition, QOS, account): what Slurm itself accepts in
 * these, and nothing a command line could misread. */
static bool slurm_name(const char *v, size_t cap)
{
    size_t n = strlen(v);
    if (n == 0 || n >= cap || v[0] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)v[i]) && !strchr("._-", v[i]))
            return false;
    return true;
}

/* A size as Slurm's --mem reads it: a number of MiB, or with K, M, G or T. */
static bool parse_mem_mb(const char *v, int64_t *mb)
{
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || !isdigit((unsigned char)v[0]) || !(x > 0))
        return false;
    double scale = 1;
    switch (*end) {
    case 'K': case 'k': scale = 1.0 / 1024; end++; break;
    case 'M': case 'm': end++; break;
    case 'G': case 'g': scale = 1024; end++; break;
    case 'T': case 't': scale = 1024.0 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i')
        end++;
    if (*end == 'B')
        end++;
    double v_mb = ceil(x * scale);
    if (*end != '\0' || v_mb < 1 || v_mb > 1e12)
        return false;
    *mb = (int64_t)v_mb;
    return true;
}

/* gres=gpu:N or gpu:TYPE:N. */
static bool parse_gres(const char *v, struct exec_pool *p)
{
    if (strncmp(v, "gpu:", 4) != 0 || strlen(v) >= sizeof p->gres)
        return false;
    const char *rest = v + 4;
    const char *colon = strchr(rest, ':');
    const char *count = rest;
    char type[sizeof p->gpu_type] = "";
    if (colon) {
        size_t n = (size_t)(colon - rest);
        if (n == 0 || n >= sizeof type)
            return false;
        memcpy(type, rest, n);
        type[n] = '\0';
        if (!slurm_name(type, sizeof type))
            return false;
        count = colon + 1;
    }
    long gpus;
    if (!text_parse_long(count, 1, 64, &gpus))
        return false;
    text_copy(p->gres, sizeof p->gres, v);
    text_copy(p->gpu_type, sizeof p->gpu_type, type);
    p->gpus = (int)gpus;
    return true;
}

static bool parse_price(const char *v, double *out)
{
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || !isdigit((unsigned char)v[0]) || !(x >= 0) || x > 1e6)
        return false;
    if (strcmp(end, "/h") != 0 && *end != '\0')
        return false;
    *out = x;
    return true;
}

static enum alallo_err apply(struct exec_pool *p, const char *k, const char *v, char *err,
                             size_t errcap)
{
    long n;
    if (strcmp(k, "name") == 0) {
        if (!ids_valid_name(v, sizeof p->name))
            goto bad_name;
        text_copy(p->name, sizeof p->name, v);
    } else if (strcmp(k, "partition") == 0) {
        if (!slurm_name(v, sizeof p->partition))
            goto bad_slurm;
        text_copy(p->partition, sizeof p->partition, v);
    } else if (strcmp(k, "qos") == 0) {
        if (!slurm_name(v, sizeof p->qos))
            goto bad_slurm;
        text_copy(p->qos, sizeof p->qos, v);
    } else if (strcmp(k, "account") == 0) {
        if (!slurm_name(v, sizeof p->account))
            goto bad_slurm;
        text_copy(p->account, sizeof p->account, v);
    } else if (strcmp(k, "constraint") == 0) {
        /* Slurm's feature expressions: names joined by & | , [ ] * and digits. */
        if (strlen(v) >= sizeof p->constraint || v[0] == '-' ||
            strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-&|[]*") !=
                strlen(v)) {
            text_error(err, errcap, "constraint=%.80s: expected Slurm features such as a100&ib",
                       v);
            return ERR_INVALID;
        }
        text_copy(p->constraint, sizeof p->constraint, v);
    } else if (strcmp(k, "gres") == 0) {
        if (!parse_gres(v, p)) {
            text_error(err, errcap, "gres=%.80s: expected gpu:N or gpu:TYPE:N (N from 1 to 64)",
                       v);
            return ERR_INVALID;
        }
    } else if (strcmp(k, "cpus") == 0) {
        if (!text_parse_long(v, 1, 4096, &n)) {
            text_error(err, errcap, "cpus=%.80s: expected a whole number from 1 to 4096", v);
            return ERR_INVALID;
        }
        p->cpus = (int)n;
    } else if (strcmp(k, "gpu_mem") == 0) {
        if (!parse_mem_mb(v, &p->gpu_mem_mb) || p->gpu_mem_mb < 1024) {
            text_error(err, errcap, "gpu_mem=%.80s: expected the memory of one GPU, at least "
                                    "1G, such as 80G", v);
            return ERR_INVALID;
        }
    } else if (strcmp(k, "mem") == 0) {
        if (!parse_mem_mb(v, &p->mem_mb)) {
            text_error(err, errcap, "mem=%.80s: expected a memory size such as 64G or 500M "
                                    "(a bare number is MiB, as in Slurm)", v);
            return ERR_INVALID;
        }
    } else if (strcmp(k, "class") == 0) {
        if (strcmp(v, "on-demand") == 0)
            p->class_ = EXEC_POOL_ON_DEMAND;
        else if (strcmp(v, "spot") == 0)
            p->class_ = EXEC_POOL_SPOT;
        else {
            text_error(err, errcap, "class=%.80s: expected on-demand or spot", v);
            return ERR_INVALID;
        }
    } else if (strcmp(k, "price") == 0) {
        if (!parse_price(v, &p->price_per_hour)) {
            text_error(err, errcap, "price=%.80s: expected a price per slot-hour such as 2.10/h",
                       v);
            return ERR_INVALID;
        }
    } else if (strcmp(k, "slots") == 0) {
        if (!text_parse_long(v, 1, EXEC_POOL_SLOTS_MAX, &n)) {
            text_error(err, errcap, "slots=%.80s: expected a whole number from 1 to %d", v,
                       EXEC_POOL_SLOTS_MAX);
            return ERR_INVALID;
        }
        p->slots = (int)n;
    }
    return ERR_OK;
bad_name:
    text_error(err, errcap, "name=%.80s: use 1 to 63 letters, digits, '.', '-' or '_'", v);
    return ERR_INVALID;
bad_slurm:
    text_error(err, errcap, "%s=%.80s: expected a Slurm name (letters, digits, '.', '-', '_')", k,
               v);
    return ERR_INVALID;
}

enum alallo_err exec_pool_parse(const char *spec, struct exec_pool *p, char *err, size_t errcap)
{
    memset(p, 0, sizeof *p);
    p->cpus = 1;
    if (!spec || !*spec) {
        text_error(err, errcap, "empty pool; expected name=…,partition=…,mem=…,class=…,price=…");
        return ERR_INVALID;
    }
    if (strlen(spec) >= EXEC_POOL_SPEC_MAX) {
        text_error(err, errcap, "pool too long (at most %d characters)", EXEC_POOL_SPEC_MAX - 1);
        return ERR_INVALID;
    }
    char buf[EXEC_POOL_SPEC_MAX];
    text_copy(buf, sizeof buf, spec);
    bool seen[NKEYS] = {false};
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq || eq == item) {
            text_error(err, errcap, "'%.80s': expected key=value", item);
            return ERR_INVALID;
        }
        *eq = '\0';
        const char *k = item, *v = eq + 1;
        size_t ki = 0;
        while (ki < NKEYS && strcmp(keys[ki], k) != 0)
            ki++;
        if (ki == NKEYS) {
            text_error(err, errcap, "unknown key '%.40s' (known: %s)", k, KNOWN);
            return ERR_INVALID;
        }
        if (seen[ki]) {
            text_error(err, errcap, "%s= given twice", k);
            return ERR_INVALID;
        }
        seen[ki] = true;
        if (!*v) {
            text_error(err, errcap, "%s= has no value", k);
            return ERR_INVALID;
        }
        enum alallo_err e = apply(p, k, v, err, errcap);
        if (e)
            return e;
    }
    static const char *const required[] = {"name", "partition", "mem", "class", "price"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        size_t ki = 0;
        while (strcmp(keys[ki], required[i]) != 0)
            ki++;
        if (!seen[ki]) {
            text_error(err, errcap, "pool %.64s: %s= is missing (required: name, partition, mem, "
                                    "class, price)", p->name[0] ? p->name : "", required[i]);
            return ERR_INVALID;
        }
    }
    if (p->gpu_mem_mb > 0 && p->gpus == 0) {
        text_error(err, errcap, "pool %.64s: gpu_mem= needs gres= (such as gres=gpu:h100:1)",
                   p->name);
        return ERR_INVALID;
    }
    return ERR_OK;
}

int exec_pool_default_slots(const struct exec_pool *p, const struct exec_capacity *c)
{
    long slots = EXEC_POOL_SLOTS_MAX;
    if (p->gpus > 0) {
        if (c->max_gpus_per_node < p->gpus)
            return 0;
        slots = c->gpus / p->gpus < slots ? c->gpus / p->gpus : slots;
    }
    if (p->cpus > 0 && c->cpus / p->cpus < slots)
        slots = c->cpus / p->cpus;
    if (p->mem_mb > 0 && c->mem_mb / p->mem_mb < slots)
        slots = (long)(c->mem_mb / p->mem_mb);
    return slots < 0 ? 0 : (int)slots;
}

void exec_pool_fill_submit(const struct exec_pool *p, struct exec_submit *s)
{
    text_copy(s->partition, sizeof s->partition, p->partition);
    text_copy(s->qos, sizeof s->qos, p->qos);
    text_copy(s->account, sizeof s->account, p->account);
    text_copy(s->constraint, sizeof s->constraint, p->constraint);
    text_copy(s->gres, sizeof s->gres, p->gres);
    s->cpus = p->cpus;
    s->mem_mb = p->mem_mb;
}

const char *exec_pool_class_name(enum exec_pool_class c)
{
    return c == EXEC_POOL_SPOT ? "spot" : "on-demand";
}
