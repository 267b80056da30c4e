/* account_cache.c - recently found accounts by key hash (account_cache.h). */
#include "store/account_cache.h"

#include <string.h>

void account_cache_init(struct account_cache *c)
{
    memset(c->slots, 0, sizeof c->slots);
    pthread_mutex_init(&c->mu, NULL);
}

void account_cache_destroy(struct account_cache *c) { pthread_mutex_destroy(&c->mu); }

/* The slot of a hash: FNV-1a of its text (a key hash is already uniform,
 * but the store accepts any text, so none of it is assumed). */
static struct account_cache_entry *slot_of(struct account_cache *c, const char *key_hash)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)key_hash; *p; p++)
        h = (h ^ *p) * 16777619u;
    return &c->slots[h % ACCOUNT_CACHE_SLOTS];
}

bool account_cache_get(struct account_cache *c, const char *key_hash, int64_t now_ms,
                       struct store_account *out)
{
    if (!key_hash[0] || strnlen(key_hash, KEYS_HASH_HEX) >= KEYS_HASH_HEX)
        return false;
    bool hit = false;
    pthread_mutex_lock(&c->mu);
    struct account_cache_entry *e = slot_of(c, key_hash);
    if (e->key_hash[0] && now_ms < e->until_ms && strcmp(e->key_hash, key_hash) == 0) {
        *out = e->account;
        hit = true;
    }
    pthread_mutex_unlock(&c->mu);
    return hit;
}

void account_cache_put(struct account_cache *c, const char *key_hash,
                       const struct store_account *account, int64_t now_ms)
{
    size_t n = strnlen(key_hash, KEYS_HASH_HEX);
    if (n == 0 || n >= KEYS_HASH_HEX)
        return;
    pthread_mutex_lock(&c->mu);
    struct account_cache_entry *e = slot_of(c, key_hash);
    memcpy(e->key_hash, key_hash, n + 1);
    e->account = *account;
    e->until_ms = now_ms + ACCOUNT_CACHE_TTL_MS;
    pthread_mutex_unlock(&c->mu);
}

void account_cache_forget(struct account_cache *c, const char *key_hash)
{
    if (strnlen(key_hash, KEYS_HASH_HEX) >= KEYS_HASH_HEX)
        return;
    pthread_mutex_lock(&c->mu);
    struct account_cache_entry *e = slot_of(c, key_hash);
    if (strcmp(e->key_hash, key_hash) == 0)
        memset(e, 0, sizeof *e);
    pthread_mutex_unlock(&c->mu);
}
