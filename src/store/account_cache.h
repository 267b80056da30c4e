/* account_cache.h - the accounts that API keys named lately, kept in
 * memory so that an authenticated request does not cost a query to the
 * store (on PostgreSQL a round trip to another process, the larger part of
 * a cheap request's time). Internal to src/store/: store.c consults it in
 * store_account_by_key_hash().
 *
 * Why it is safe: an account row never changes once created. store.h has
 * no function that deletes an account or changes its name or key; the
 * key's hash is its only way in. So a cached answer is the store's answer.
 * Two guards for what the interface does not forbid:
 * - only finds are kept, never "no such key": an account created by
 *   another process (`alallo accounts create`, another serve) works at
 *   once;
 * - an entry is forgotten ACCOUNT_CACHE_TTL_MS after it was read from the
 *   store, so that an account removed by hand in the database stops
 *   working within that time, and a future function that deletes or
 *   re-keys an account must call account_cache_forget() for its own
 *   process.
 *
 * A fixed table of ACCOUNT_CACHE_SLOTS entries, indexed by the hash itself
 * (a newer account replaces an older one in its slot); one mutex; no
 * allocation. Times are the caller's monotonic milliseconds, so that tests
 * need not wait. */
#ifndef ALALLO_STORE_ACCOUNT_CACHE_H
#define ALALLO_STORE_ACCOUNT_CACHE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/keys.h"
#include "store/store.h"

#define ACCOUNT_CACHE_SLOTS 256
#define ACCOUNT_CACHE_TTL_MS 10000

struct account_cache_entry {
    char key_hash[KEYS_HASH_HEX]; /* "" when the slot is empty */
    struct store_account account;
    int64_t until_ms; /* forgotten at this time */
};

struct account_cache {
    pthread_mutex_t mu; /* owns slots */
    struct account_cache_entry slots[ACCOUNT_CACHE_SLOTS];
};

void account_cache_init(struct account_cache *c);
void account_cache_destroy(struct account_cache *c);

/* Copies the account of key_hash into *out and returns true when it was
 * put less than ACCOUNT_CACHE_TTL_MS before now_ms; false otherwise (*out
 * untouched). */
bool account_cache_get(struct account_cache *c, const char *key_hash, int64_t now_ms,
                       struct store_account *out /* OUT */);

/* Remembers that key_hash is the key of *account, as read from the store
 * at now_ms. A hash that does not fit KEYS_HASH_HEX is not kept. */
void account_cache_put(struct account_cache *c, const char *key_hash,
                       const struct store_account *account, int64_t now_ms);

/* Forgets key_hash (if kept). */
void account_cache_forget(struct account_cache *c, const char *key_hash);

#endif
