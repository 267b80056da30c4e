/* test_webhook_target.c - the address rule of webhooks (webhook_target.h):
 * every internal range refused in every spelling, public addresses
 * allowed, the operator's ranges honoured, URLs judged by their host. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <string.h>

#include "control/webhook_target.h"

/* The kind of a literal address, through the same parser the resolver
 * uses for IPv4 (inet_aton: every numeric spelling) or inet_pton for IPv6. */
static const char *kind_of(const char *text)
{
    unsigned char a[16];
    struct in_addr v4;
    if (inet_pton(AF_INET6, text, a) == 1)
        return webhook_addr_kind(AF_INET6, a);
    assert_true(inet_aton(text, &v4));
    memcpy(a, &v4.s_addr, 4);
    return webhook_addr_kind(AF_INET, a);
}

static void internal_ranges_in_every_spelling(void **state)
{
    (void)state;
    static const struct {
        const char *addr, *kind;
    } cases[] = {
        {"127.0.0.1", "loopback"},
        {"127.255.255.254", "loopback"},
        {"2130706433", "loopback"},   /* decimal */
        {"0x7f000001", "loopback"},   /* hex */
        {"0177.0.0.1", "loopback"},   /* octal */
        {"017700000001", "loopback"}, /* octal, whole */
        {"0x7f.1", "loopback"},       /* hex, shortened */
        {"127.1", "loopback"},
        {"::1", "loopback"},
        {"::ffff:127.0.0.1", "loopback"}, /* IPv4-mapped */
        {"::ffff:7f00:1", "loopback"},
        {"64:ff9b::127.0.0.1", "loopback"}, /* NAT64 */
        {"2002:7f00:1::", "loopback"},      /* 6to4 */
        {"0.0.0.0", "unspecified"},
        {"0", "unspecified"},
        {"0.1.2.3", "unspecified"},
        {"::", "unspecified"},
        {"10.0.0.1", "private"},
        {"10.255.255.255", "private"},
        {"172.16.0.1", "private"},
        {"172.31.255.255", "private"},
        {"192.168.1.1", "private"},
        {"::ffff:192.168.1.1", "private"},
        {"100.64.0.1", "shared (carrier-grade NAT)"},
        {"100.127.255.255", "shared (carrier-grade NAT)"},
        {"169.254.169.254", "link-local"}, /* the cloud metadata address */
        {"0xa9fea9fe", "link-local"},
        {"::ffff:169.254.169.254", "link-local"},
        {"fe80::1", "link-local"},
        {"febf::1", "link-local"},
        {"fc00::1", "private (unique local)"},
        {"fd12:3456::1", "private (unique local)"},
        {"fec0::1", "private (site-local)"},
        {"224.0.0.1", "multicast"},
        {"239.255.255.250", "multicast"},
        {"ff02::1", "multicast"},
        {"255.255.255.255", "reserved"},
        {"240.0.0.1", "reserved"},
        {"192.0.2.1", "reserved"},
        {"198.18.0.1", "reserved"},
        {"2001:db8::1", "reserved"},
        {"::10.0.0.1", "reserved"},
        {"64:ff9b:1::1", "private"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *k = kind_of(cases[i].addr);
        if (!k || strcmp(k, cases[i].kind) != 0)
            fail_msg("%s: %s, not %s", cases[i].addr, k ? k : "public", cases[i].kind);
    }
}

static void public_addresses_are_allowed(void **state)
{
    (void)state;
    static const char *cases[] = {
        "1.1.1.1",         "8.8.8.8",        "93.184.216.34",     "100.63.255.255",
        "100.128.0.0",     "172.15.255.255", "172.32.0.0",        "169.253.255.255",
        "192.167.255.255", "11.0.0.1",       "126.255.255.255",   "128.0.0.1",
        "223.255.255.255", "2606:4700::1111", "2001:4860:4860::8888", "::ffff:8.8.8.8",
        "64:ff9b::8.8.8.8", "2002:808:808::",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (kind_of(cases[i]))
            fail_msg("%s refused as %s", cases[i], kind_of(cases[i]));
}

static void an_operator_allows_ranges(void **state)
{
    (void)state;
    struct webhook_allow allow = {0};
    unsigned char lo[4] = {127, 0, 0, 1}, ten[4] = {10, 1, 2, 3}, ten2[4] = {10, 2, 0, 1};
    unsigned char mapped[16] = {0};
    mapped[10] = mapped[11] = 0xff;
    memcpy(mapped + 12, lo, 4);
    assert_string_equal(webhook_addr_refused(NULL, AF_INET, lo), "loopback");
    assert_string_equal(webhook_addr_refused(&allow, AF_INET6, mapped), "loopback");
    assert_int_equal(webhook_allow_add(&allow, "127.0.0.0/8"), 0);
    assert_int_equal(webhook_allow_add(&allow, "10.1.0.0/16"), 0);
    assert_int_equal(webhook_allow_add(&allow, "fd00::/8"), 0);
    assert_null(webhook_addr_refused(&allow, AF_INET, lo));
    assert_null(webhook_addr_refused(&allow, AF_INET6, mapped)); /* mapped: as IPv4 */
    assert_null(webhook_addr_refused(&allow, AF_INET, ten));
    assert_string_equal(webhook_addr_refused(&allow, AF_INET, ten2), "private");
    unsigned char ula[16] = {0xfd, 0x12}, lo6[16] = {0};
    lo6[15] = 1;
    assert_null(webhook_addr_refused(&allow, AF_INET6, ula));
    assert_string_equal(webhook_addr_refused(&allow, AF_INET6, lo6), "loopback");

    struct webhook_range r;
    assert_int_equal(webhook_range_parse("192.168.0.0/16", &r), 0);
    assert_int_equal(r.prefix, 16);
    assert_int_equal(webhook_range_parse("::1", &r), 0);
    assert_int_equal(r.prefix, 128);
    assert_int_equal(webhook_range_parse("0.0.0.0/0", &r), 0);
    const char *bad[] = {"", "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/x", "::/129", "host/8",
                         "2130706433/8", "10.0.0.0/-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (webhook_range_parse(bad[i], &r) == 0)
            fail_msg("%s parsed", bad[i]);
    struct webhook_allow full = {0};
    for (int i = 0; i < WEBHOOK_ALLOW_MAX; i++)
        assert_int_equal(webhook_allow_add(&full, "10.0.0.0/8"), 0);
    assert_int_equal(webhook_allow_add(&full, "10.0.0.0/8"), -1);
}

static void urls_are_judged_by_their_host(void **state)
{
    (void)state;
    char why[300];
    static const char *refused[] = {
        "http://127.0.0.1:8080/v1/admin",  "http://localhost/",
        "http://LOCALHOST:9/x",            "http://api.localhost/",
        "http://2130706433/",              "http://0x7f000001:80/",
        "http://0177.0.0.1/",              "http://127.1/",
        "http://127.0.0.1./",              "http://user:pw@10.0.0.1/",
        "http://[::1]:8080/",              "http://[::ffff:127.0.0.1]/",
        "http://[fe80::1%25eth0]/",        "http://[fe80::1]/",
        "https://169.254.169.254/latest/meta-data/", "http://[fd00::1]/",
        "http://0/",                       "http://192.168.0.1?x=1",
        "http://example.com@127.0.0.1/",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        why[0] = '\0';
        if (!webhook_url_refused(NULL, refused[i], why, sizeof why))
            fail_msg("%s accepted", refused[i]);
        assert_non_null(strstr(why, "internal address"));
    }
    assert_true(webhook_url_refused(NULL, "http://[fe80::1]/", why, sizeof why));
    assert_non_null(strstr(why, "link-local"));
    static const char *allowed[] = {
        "https://hooks.example.com/alallo", "http://8.8.8.8/", "http://[2606:4700::1111]:443/",
        "http://127.0.0.1@example.com/",    "https://example.com:8443/a?b#c",
    };
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
        if (webhook_url_refused(NULL, allowed[i], why, sizeof why))
            fail_msg("%s refused: %s", allowed[i], why);
    struct webhook_allow allow = {0};
    assert_int_equal(webhook_allow_add(&allow, "127.0.0.0/8"), 0);
    assert_false(webhook_url_refused(&allow, "http://127.0.0.1:9/hook", why, sizeof why));
    assert_false(webhook_url_refused(&allow, "http://localhost:9/hook", why, sizeof why));
    assert_true(webhook_url_refused(&allow, "http://[::1]:9/hook", why, sizeof why));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(internal_ranges_in_every_spelling),
        cmocka_unit_test(public_addresses_are_allowed),
        cmocka_unit_test(an_operator_allows_ranges),
        cmocka_unit_test(urls_are_judged_by_their_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
