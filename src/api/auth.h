/* auth.h - API keys and the worker token.
 *
 * An API key is "sk-alallo-" and 64 hex digits (32 random bytes from
 * libsodium). It is shown once, when made; the store keeps only its BLAKE2b
 * hash, so a stolen database does not hand out keys. Lookups go by hash;
 * secrets are compared in constant time.
 */
#ifndef ALALLO_API_AUTH_H
#define ALALLO_API_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#define AUTH_KEY_MAX 96  /* an API key or worker token, with its NUL */
#define AUTH_HASH_HEX 65 /* 32-byte hash as hex, with its NUL */

/* Writes a new random API key. Returns 0, or -1 (cap too small). */
int auth_new_key(char *out, size_t cap);

/* Writes a new random worker token (64 hex digits). Returns 0 or -1. */
int auth_new_token(char *out, size_t cap);

/* Writes the hex hash of `key` into out. Returns 0 or -1. */
int auth_key_hash(const char *key, char out[AUTH_HASH_HEX]);

/* Copies the token of an "Authorization: Bearer TOKEN" header value into
 * out. Returns false when the header is missing, not Bearer, empty, or the
 * token does not fit. */
bool auth_bearer(const char *header, char *out, size_t cap);

/* True when a and b are the same secret; constant time in their content. */
bool auth_secret_equal(const char *a, const char *b);

#endif
