/* test_webhook_sign.c - Standard Webhooks signatures: the specification's
 * published test vector (which the openai SDK's verifier, like every
 * Standard Webhooks library, accepts), fresh secrets, and bad secrets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <sodium.h>
#include <string.h>

#include "core/webhook_sign.h"

static void published_vector(void **state)
{
    (void)state;
    const char *body = "{\"test\": 2432232314}";
    char sig[WEBHOOK_SIGNATURE_MAX];
    assert_int_equal(webhook_sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                                  "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, strlen(body),
                                  sig),
                     0);
    assert_string_equal(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    /* another timestamp, id or body is another signature */
    char other[WEBHOOK_SIGNATURE_MAX];
    assert_int_equal(webhook_sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                                  "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265331, body, strlen(body),
                                  other),
                     0);
    assert_string_not_equal(sig, other);
}

static void fresh_secrets(void **state)
{
    (void)state;
    char a[WEBHOOK_SECRET_MAX], b[WEBHOOK_SECRET_MAX];
    assert_int_equal(webhook_new_secret(a, sizeof a), 0);
    assert_int_equal(webhook_new_secret(b, sizeof b), 0);
    assert_string_not_equal(a, b);
    assert_int_equal(strncmp(a, "whsec_", 6), 0);
    assert_int_equal(strlen(a), 6 + 44);
    unsigned char key[64];
    size_t n = 0;
    assert_int_equal(sodium_base642bin(key, sizeof key, a + 6, strlen(a + 6), NULL, &n, NULL,
                                       sodium_base64_VARIANT_ORIGINAL),
                     0);
    assert_int_equal(n, 32);
    char sig[WEBHOOK_SIGNATURE_MAX];
    assert_int_equal(webhook_sign(a, "evt_1", 1, "{}", 2, sig), 0);
    assert_int_equal(strlen(sig), 3 + 44);
    assert_int_equal(webhook_new_secret(a, 20), -1);
}

static void bad_secrets(void **state)
{
    (void)state;
    char sig[WEBHOOK_SIGNATURE_MAX];
    assert_int_equal(webhook_sign("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "m", 1, "", 0, sig), -1);
    assert_int_equal(webhook_sign("whsec_", "m", 1, "", 0, sig), -1);
    assert_int_equal(webhook_sign("whsec_not base64!", "m", 1, "", 0, sig), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(published_vector),
        cmocka_unit_test(fresh_secrets),
        cmocka_unit_test(bad_secrets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
