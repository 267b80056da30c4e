/* webhook_sign.c - Standard Webhooks signatures (webhook_sign.h). */
#include "core/webhook_sign.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#define PREFIX "whsec_"

int webhook_new_secret(char *out, size_t cap)
{
    unsigned char key[32];
    size_t need = strlen(PREFIX) + sodium_base64_ENCODED_LEN(sizeof key, sodium_base64_VARIANT_ORIGINAL);
    if (cap < need || sodium_init() < 0)
        return -1;
    randombytes_buf(key, sizeof key);
    memcpy(out, PREFIX, strlen(PREFIX));
    sodium_bin2base64(out + strlen(PREFIX), cap - strlen(PREFIX), key, sizeof key,
                      sodium_base64_VARIANT_ORIGINAL);
    sodium_memzero(key, sizeof key);
    return 0;
}

int webhook_sign(const char *secret, const char *msg_id, int64_t timestamp_s, const char *body,
                 size_t body_len, char out[WEBHOOK_SIGNATURE_MAX])
{
    unsigned char key[64], mac[crypto_auth_hmacsha256_BYTES];
    size_t key_len = 0;
    if (sodium_init() < 0 || strncmp(secret, PREFIX, strlen(PREFIX)) != 0)
        return -1;
    const char *b64 = secret + strlen(PREFIX);
    if (sodium_base642bin(key, sizeof key, b64, strlen(b64), NULL, &key_len, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0 ||
        key_len == 0)
        return -1;
    char ts[32];
    snprintf(ts, sizeof ts, "%" PRId64, timestamp_s);
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, key, key_len);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)msg_id, strlen(msg_id));
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)".", 1);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)ts, strlen(ts));
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)".", 1);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)body, body_len);
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_memzero(key, sizeof key);
    memcpy(out, "v1,", 3);
    sodium_bin2base64(out + 3, WEBHOOK_SIGNATURE_MAX - 3, mac, sizeof mac,
                      sodium_base64_VARIANT_ORIGINAL);
    return 0;
}
