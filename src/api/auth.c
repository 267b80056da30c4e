/* auth.c - API keys, their hashes and bearer tokens. */
#include "api/auth.h"

#include <sodium.h>
#include <string.h>
#include <strings.h>

#include "core/ids.h"

#define KEY_PREFIX "sk-alallo-"

int auth_new_key(char *out, size_t cap)
{
    size_t plen = strlen(KEY_PREFIX);
    if (cap < plen + 65)
        return -1;
    memcpy(out, KEY_PREFIX, plen);
    return ids_random_hex(out + plen, cap - plen, 32) ? 0 : -1;
}

int auth_new_token(char *out, size_t cap)
{
    return ids_random_hex(out, cap, 32) ? 0 : -1;
}

int auth_key_hash(const char *key, char out[AUTH_HASH_HEX])
{
    unsigned char h[32];
    if (sodium_init() < 0)
        return -1;
    crypto_generichash(h, sizeof h, (const unsigned char *)key, strlen(key), NULL, 0);
    sodium_bin2hex(out, AUTH_HASH_HEX, h, sizeof h);
    return 0;
}

bool auth_bearer(const char *header, char *out, size_t cap)
{
    if (!header || strncasecmp(header, "Bearer ", 7) != 0)
        return false;
    const char *t = header + 7;
    while (*t == ' ')
        t++;
    size_t n = strlen(t);
    while (n && (t[n - 1] == ' ' || t[n - 1] == '\t'))
        n--;
    if (n == 0 || n >= cap)
        return false;
    memcpy(out, t, n);
    out[n] = '\0';
    return true;
}

bool auth_secret_equal(const char *a, const char *b)
{
    size_t n = strlen(a);
    if (n != strlen(b) || n == 0)
        return false;
    return sodium_memcmp(a, b, n) == 0;
}
