/* keys.c - see keys.h. */
#include "core/keys.h"

#include <sodium.h>
#include <string.h>

#include "core/ids.h"

#define KEY_PREFIX "sk-alallo-"

int keys_new_api_key(char *out, size_t cap)
{
    size_t plen = strlen(KEY_PREFIX);
    if (cap < plen + 65)
        return -1;
    memcpy(out, KEY_PREFIX, plen);
    return ids_random_hex(out + plen, cap - plen, 32) ? 0 : -1;
}

int keys_new_token(char *out, size_t cap)
{
    return ids_random_hex(out, cap, 32) ? 0 : -1;
}

int keys_hash(const char *key, char out[KEYS_HASH_HEX])
{
    unsigned char h[32];
    if (sodium_init() < 0)
        return -1;
    crypto_generichash(h, sizeof h, (const unsigned char *)key, strlen(key), NULL, 0);
    sodium_bin2hex(out, KEYS_HASH_HEX, h, sizeof h);
    return 0;
}

bool keys_equal(const char *a, const char *b)
{
    size_t n = strlen(a);
    if (n != strlen(b) || n == 0)
        return false;
    return sodium_memcmp(a, b, n) == 0;
}
