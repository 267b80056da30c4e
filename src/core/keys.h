/* keys.h - API keys and the worker token: making them and hashing them.
 *
 * An API key is "sk-alallo-" and 64 hex digits (32 random bytes from
 * libsodium). It is shown once, when made; the store keeps only its BLAKE2b
 * hash, so a stolen database does not hand out keys. Lookups go by hash;
 * secrets are compared in constant time.
 */
#ifndef ALALLO_CORE_KEYS_H
#define ALALLO_CORE_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#define KEYS_MAX 96      /* an API key or worker token, with its NUL */
#define KEYS_HASH_HEX 65 /* 32-byte hash as hex, with its NUL */

/* Writes a new random API key. Returns 0, or -1 (cap too small). */
int keys_new_api_key(char *out, size_t cap);

/* Writes a new random worker token (64 hex digits). Returns 0 or -1. */
int keys_new_token(char *out, size_t cap);

/* Writes the hex hash of `key` into out. Returns 0 or -1. */
int keys_hash(const char *key, char out[KEYS_HASH_HEX]);

/* True when a and b are the same secret; constant time in their content. */
bool keys_equal(const char *a, const char *b);

#endif
