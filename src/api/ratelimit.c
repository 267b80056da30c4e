/* ratelimit.c - per-key token buckets in fixed, sharded arrays.
 *
 * A shard is a small array searched linearly: with at most
 * RATELIMIT_MAX_KEYS / RATELIMIT_SHARDS slots, and the key's hash compared
 * before its bytes, that is cheaper than keeping a hash table's deletions
 * right, and it never allocates after ratelimit_new(). */
#include "api/ratelimit.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"

struct bucket {
    uint64_t hash;
    double tokens; /* as of `last` */
    double last;   /* seconds, the caller's clock */
    bool used;
    char key[RATELIMIT_KEY_MAX + 1];
};

struct shard {
    pthread_mutex_t mu;
    size_t used; /* slots in use */
    struct bucket *slots;
};

struct ratelimit {
    double rate, burst;
    size_t per_shard;
    struct shard shards[RATELIMIT_SHARDS];
};

/* FNV-1a: spreads account ids over shards; not a defence against anyone,
 * since callers cannot choose their account ids. */
static uint64_t hash_key(const char *key, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)key[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

struct ratelimit *ratelimit_new(double rate, double burst, size_t max_keys)
{
    /* `!(x > 0)` also refuses NaN. */
    if (!(rate > 0) || !(burst >= 1) || max_keys == 0 || max_keys > RATELIMIT_MAX_KEYS)
        return NULL;
    struct ratelimit *rl = calloc(1, sizeof *rl);
    if (!rl)
        return NULL;
    rl->rate = rate;
    rl->burst = burst;
    rl->per_shard = (max_keys + RATELIMIT_SHARDS - 1) / RATELIMIT_SHARDS;
    int i = 0;
    for (; i < RATELIMIT_SHARDS; i++) {
        struct shard *s = &rl->shards[i];
        s->slots = calloc(rl->per_shard, sizeof *s->slots);
        if (!s->slots || pthread_mutex_init(&s->mu, NULL) != 0) {
            free(s->slots);
            break;
        }
    }
    if (i < RATELIMIT_SHARDS) {
        while (i-- > 0) {
            pthread_mutex_destroy(&rl->shards[i].mu);
            free(rl->shards[i].slots);
        }
        free(rl);
        return NULL;
    }
    return rl;
}

void ratelimit_free(struct ratelimit *rl)
{
    if (!rl)
        return;
    for (int i = 0; i < RATELIMIT_SHARDS; i++) {
        pthread_mutex_destroy(&rl->shards[i].mu);
        free(rl->shards[i].slots);
    }
    free(rl);
}

/* The bucket's tokens at `now`, refilled since its last use and capped. */
static double refilled(const struct ratelimit *rl, const struct bucket *b, double now)
{
    double dt = now > b->last ? now - b->last : 0.0;
    double t = b->tokens + dt * rl->rate;
    return t < rl->burst ? t : rl->burst;
}

/* The slot for a key that has none: a free one, else one that has refilled
 * to a full bucket (indistinguishable from a new one), else the one idle
 * longest. Called with the shard's mutex held. */
static struct bucket *slot_for_new(const struct ratelimit *rl, struct shard *s, double now)
{
    struct bucket *idle = NULL;
    for (size_t i = 0; i < rl->per_shard; i++) {
        struct bucket *b = &s->slots[i];
        if (!b->used) {
            s->used++;
            return b;
        }
        if (refilled(rl, b, now) >= rl->burst)
            return b;
        if (!idle || b->last < idle->last)
            idle = b;
    }
    return idle;
}

bool ratelimit_take(struct ratelimit *rl, const char *key, double now_s, double *retry_after_s)
{
    if (retry_after_s)
        *retry_after_s = 0.0;
    size_t len = key ? strnlen(key, RATELIMIT_KEY_MAX + 1) : 0;
    if (!rl || len == 0 || len > RATELIMIT_KEY_MAX)
        return false;
    uint64_t h = hash_key(key, len);
    struct shard *s = &rl->shards[h % RATELIMIT_SHARDS];
    pthread_mutex_lock(&s->mu);
    struct bucket *b = NULL;
    for (size_t i = 0; i < rl->per_shard && !b; i++) {
        struct bucket *c = &s->slots[i];
        if (c->used && c->hash == h && memcmp(c->key, key, len + 1) == 0)
            b = c;
    }
    if (!b) {
        b = slot_for_new(rl, s, now_s);
        b->used = true;
        b->hash = h;
        memcpy(b->key, key, len + 1);
        b->tokens = rl->burst;
        b->last = now_s;
    }
    double tokens = refilled(rl, b, now_s);
    if (now_s > b->last)
        b->last = now_s;
    bool ok = tokens >= 1.0;
    if (ok)
        tokens -= 1.0;
    else if (retry_after_s)
        *retry_after_s = (1.0 - tokens) / rl->rate;
    b->tokens = tokens;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

size_t ratelimit_size(struct ratelimit *rl)
{
    size_t n = 0;
    if (!rl)
        return 0;
    for (int i = 0; i < RATELIMIT_SHARDS; i++) {
        pthread_mutex_lock(&rl->shards[i].mu);
        n += rl->shards[i].used;
        pthread_mutex_unlock(&rl->shards[i].mu);
    }
    return n;
}

double ratelimit_now(void)
{
    return clock_mono_s();
}
