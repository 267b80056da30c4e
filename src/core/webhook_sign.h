/* webhook_sign.h - Standard Webhooks signing, the scheme OpenAI signs its
 * webhooks with and its SDK verifies (client.webhooks.unwrap()).
 *
 * An endpoint's secret is "whsec_" and the base64 of 32 random bytes; the
 * HMAC key is those bytes (the base64 part decoded). A delivery carries
 *   webhook-id:        the message id (the same on every retry)
 *   webhook-timestamp: Unix seconds when this attempt was signed
 *   webhook-signature: "v1," and base64(HMAC-SHA256(key, id "." ts "." body))
 * Receivers refuse a timestamp far from their clock (the SDK: 5 minutes),
 * so each attempt is signed anew with the time it is sent.
 */
#ifndef ALALLO_CORE_WEBHOOK_SIGN_H
#define ALALLO_CORE_WEBHOOK_SIGN_H

#include <stddef.h>
#include <stdint.h>

#define WEBHOOK_SECRET_MAX 64    /* "whsec_" + 44 base64 characters, with NUL */
#define WEBHOOK_SIGNATURE_MAX 48 /* "v1," + 44 base64 characters, with NUL */

/* Writes a new random secret. 0, or -1 (cap too small). */
int webhook_new_secret(char *out, size_t cap);

/* Writes the webhook-signature value of one attempt. 0, or -1 when the
 * secret is not "whsec_" and base64 of 1 to 64 bytes. */
int webhook_sign(const char *secret, const char *msg_id, int64_t timestamp_s, const char *body,
                 size_t body_len, char out[WEBHOOK_SIGNATURE_MAX]);

#endif
