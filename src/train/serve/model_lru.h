/* model_lru.h - the models the inference engine keeps loaded: base models
 * (and full fine-tunes, which are their own weights) and LoRA adapters of
 * them, bounded in bytes, the least recently used unloaded first.
 *
 * A model in use by a running sequence is pinned (model_lru_base and
 * model_lru_adapter pin what they return; model_lru_release unpins) and
 * never unloaded; an adapter pins its base while it is loaded. Loading one
 * that does not fit unloads unpinned ones, least recently used first; when
 * it still does not fit beside the pinned ones it is refused
 * (MODEL_LRU_FULL: the engine answers "busy", try again later), and one
 * that alone is larger than the bound is refused for good
 * (MODEL_LRU_TOO_BIG).
 *
 * Ownership: entries belong to the LRU; callers hold pins, not entries.
 */
#ifndef ALALLO_SERVE_MODEL_LRU_H
#define ALALLO_SERVE_MODEL_LRU_H

#include <stdbool.h>
#include <stddef.h>

#include "train/run/generate.h"
#include "train/serve/adapter.h"

#define MODEL_LRU_FULL (-2)
#define MODEL_LRU_TOO_BIG (-3)

struct lru_entry {
    char dir[1024];
    struct generator *gen;     /* a base: its weights and tokenizer */
    struct serve_adapter *ad;  /* an adapter, of `base` */
    struct lru_entry *base;
    bool four_bit; /* a base loaded as NF4 (generate.h's gen_open_as) */
    int pins;
    size_t bytes;
    unsigned long used; /* the LRU's clock at the last pin */
    struct lru_entry *next;
};

struct model_lru;

struct model_lru *model_lru_new(size_t max_bytes);
void model_lru_free(struct model_lru *c); /* every pin must be released */

/* The base model folder `dir`, loaded if it is not, pinned; with
 * four_bit its matrices as NF4 (the same folder in fp32 and in NF4 are two
 * entries). NULL with rc -1 (a reason: cannot load), MODEL_LRU_FULL or
 * MODEL_LRU_TOO_BIG. */
struct lru_entry *model_lru_base(struct model_lru *c, const char *dir, bool four_bit, int *rc,
                                 char *err, size_t errcap);

/* The adapter folder `dir` of the pinned base, loaded if it is not,
 * pinned; as model_lru_base. */
struct lru_entry *model_lru_adapter(struct model_lru *c, struct lru_entry *base,
                                    const char *dir, int *rc, char *err, size_t errcap);

void model_lru_release(struct model_lru *c, struct lru_entry *e); /* NULL is fine */

size_t model_lru_bytes(const struct model_lru *c);
/* The loaded entries, most recently loaded first (follow ->next); NULL
 * when none. */
const struct lru_entry *model_lru_first(const struct model_lru *c);
int model_lru_count(const struct model_lru *c);

#endif
