/* ids.c - random ids and the characters an id may hold. */
#include "core/ids.h"

#include <sodium.h>
#include <string.h>

static const char alphabet[] =
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

char *ids_make(char *buf, size_t cap, const char *prefix)
{
    size_t plen = strlen(prefix);
    if (sodium_init() < 0)
        return NULL;
    if (cap < plen + IDS_RANDOM_CHARS + 1 || plen + IDS_RANDOM_CHARS + 1 > IDS_MAX)
        return NULL;
    memcpy(buf, prefix, plen);
    for (size_t i = 0; i < IDS_RANDOM_CHARS; i++)
        buf[plen + i] = alphabet[randombytes_uniform(62)];
    buf[plen + IDS_RANDOM_CHARS] = '\0';
    return buf;
}

bool ids_valid(const char *id)
{
    if (!id || !id[0])
        return false;
    size_t n = 0;
    for (; id[n]; n++) {
        char c = id[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-';
        if (!ok || n + 1 >= IDS_MAX)
            return false;
    }
    return true;
}

bool ids_valid_name(const char *name, size_t cap)
{
    if (!name || !name[0] || name[0] == '.')
        return false;
    size_t n = 0;
    for (; name[n]; n++) {
        char c = name[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '_' || c == '.';
        if (!ok || n + 1 >= cap)
            return false;
    }
    return true;
}

char *ids_random_hex(char *buf, size_t cap, size_t nbytes)
{
    unsigned char raw[64];
    if (nbytes > sizeof raw || cap < 2 * nbytes + 1 || sodium_init() < 0)
        return NULL;
    randombytes_buf(raw, nbytes);
    sodium_bin2hex(buf, cap, raw, nbytes);
    sodium_memzero(raw, sizeof raw);
    return buf;
}
