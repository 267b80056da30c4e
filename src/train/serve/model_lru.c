/* model_lru.c - loaded models bounded in bytes (see model_lru.h). */
#include "train/serve/model_lru.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/model/model.h"

struct model_lru {
    size_t max_bytes, bytes;
    unsigned long clock;
    struct lru_entry *head;
};

struct model_lru *model_lru_new(size_t max_bytes)
{
    struct model_lru *c = calloc(1, sizeof *c);
    if (c)
        c->max_bytes = max_bytes;
    return c;
}

static void entry_free(struct model_lru *c, struct lru_entry *e)
{
    for (struct lru_entry **p = &c->head; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            break;
        }
    c->bytes -= e->bytes;
    if (e->base)
        e->base->pins--;
    gen_close(e->gen);
    serve_adapter_free(e->ad);
    free(e);
}

void model_lru_free(struct model_lru *c)
{
    if (!c)
        return;
    /* adapters first: each pins its base */
    for (int pass = 0; pass < 2; pass++)
        for (struct lru_entry *e = c->head, *n; e; e = n) {
            n = e->next;
            if (pass == 1 || e->ad)
                entry_free(c, e);
        }
    free(c);
}

/* Unloads unpinned entries, least recently used first, until `need` more
 * bytes fit. True when they do. */
static bool make_room(struct model_lru *c, size_t need)
{
    while (c->bytes + need > c->max_bytes) {
        struct lru_entry *old = NULL;
        for (struct lru_entry *e = c->head; e; e = e->next)
            if (e->pins == 0 && (!old || e->used < old->used))
                old = e;
        if (!old)
            return false;
        entry_free(c, old);
    }
    return true;
}

static struct lru_entry *find(struct model_lru *c, const char *dir, const struct lru_entry *base,
                              bool four_bit)
{
    for (struct lru_entry *e = c->head; e; e = e->next)
        if (e->base == base && e->four_bit == four_bit && strcmp(e->dir, dir) == 0)
            return e;
    return NULL;
}

static struct lru_entry *pin(struct model_lru *c, struct lru_entry *e)
{
    e->pins++;
    e->used = ++c->clock;
    return e;
}

/* Adds a loaded entry of `bytes`, making room; frees what it holds and
 * returns NULL with *rc when it does not fit. */
static struct lru_entry *add(struct model_lru *c, struct lru_entry *e, int *rc, char *err,
                             size_t errcap)
{
    if (e->bytes > c->max_bytes) {
        snprintf(err, errcap, "the model needs %zu bytes; the engine keeps at most %zu",
                 e->bytes, c->max_bytes);
        *rc = MODEL_LRU_TOO_BIG;
    } else if (!make_room(c, e->bytes)) {
        snprintf(err, errcap, "the models in use fill the engine's memory");
        *rc = MODEL_LRU_FULL;
    } else {
        e->next = c->head;
        c->head = e;
        c->bytes += e->bytes;
        if (e->base)
            e->base->pins++;
        return pin(c, e);
    }
    gen_close(e->gen);
    serve_adapter_free(e->ad);
    free(e);
    return NULL;
}

/* A new entry for folder `dir`, nothing loaded yet; NULL with rc -1. */
static struct lru_entry *entry_new(const char *dir, int *rc, char *err, size_t errcap)
{
    struct lru_entry *e = calloc(1, sizeof *e);
    if (!e || strlen(dir) >= sizeof e->dir) {
        free(e);
        snprintf(err, errcap, e ? "the folder's path is too long" : "out of memory");
        *rc = -1;
        return NULL;
    }
    strcpy(e->dir, dir);
    return e;
}

struct lru_entry *model_lru_base(struct model_lru *c, const char *dir, bool four_bit, int *rc,
                                 char *err, size_t errcap)
{
    *rc = 0;
    struct lru_entry *e = find(c, dir, NULL, four_bit);
    if (e)
        return pin(c, e);
    e = entry_new(dir, rc, err, errcap);
    if (!e)
        return NULL;
    e->four_bit = four_bit;
    e->gen = gen_open_as(dir, NULL, four_bit, err, errcap);
    if (!e->gen) {
        free(e);
        *rc = -1;
        return NULL;
    }
    e->bytes = model_param_bytes(gen_model(e->gen));
    return add(c, e, rc, err, errcap);
}

struct lru_entry *model_lru_adapter(struct model_lru *c, struct lru_entry *base,
                                    const char *dir, int *rc, char *err, size_t errcap)
{
    *rc = 0;
    struct lru_entry *e = find(c, dir, base, false);
    if (e)
        return pin(c, e);
    e = entry_new(dir, rc, err, errcap);
    if (!e)
        return NULL;
    e->base = base;
    e->ad = serve_adapter_load(gen_model(base->gen), dir, err, errcap);
    if (!e->ad) {
        free(e);
        *rc = -1;
        return NULL;
    }
    e->bytes = e->ad->bytes;
    return add(c, e, rc, err, errcap);
}

void model_lru_release(struct model_lru *c, struct lru_entry *e)
{
    (void)c;
    if (e)
        e->pins--;
}

size_t model_lru_bytes(const struct model_lru *c)
{
    return c->bytes;
}

const struct lru_entry *model_lru_first(const struct model_lru *c)
{
    return c->head;
}

int model_lru_count(const struct model_lru *c)
{
    int n = 0;
    for (const struct lru_entry *e = c->head; e; e = e->next)
        n++;
    return n;
}
