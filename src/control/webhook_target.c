/* webhook_target.c - where a webhook may be sent (webhook_target.h). */
#include "control/webhook_target.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/text.h"

/* IPv4 ranges that are not the public Internet, and their kind. */
static const struct {
    uint32_t net;
    int bits;
    const char *kind;
} v4_internal[] = {
    {0x00000000u, 8, "unspecified"},         /* 0.0.0.0/8 "this network" */
    {0x0a000000u, 8, "private"},             /* 10.0.0.0/8 */
    {0x64400000u, 10, "shared (carrier-grade NAT)"}, /* 100.64.0.0/10 */
    {0x7f000000u, 8, "loopback"},            /* 127.0.0.0/8 */
    {0xa9fe0000u, 16, "link-local"},         /* 169.254.0.0/16, cloud metadata */
    {0xac100000u, 12, "private"},            /* 172.16.0.0/12 */
    {0xc0000000u, 24, "reserved"},           /* 192.0.0.0/24 protocol assignments */
    {0xc0000200u, 24, "reserved"},           /* 192.0.2.0/24 documentation */
    {0xc0a80000u, 16, "private"},            /* 192.168.0.0/16 */
    {0xc6120000u, 15, "reserved"},           /* 198.18.0.0/15 benchmarking */
    {0xc6336400u, 24, "reserved"},           /* 198.51.100.0/24 documentation */
    {0xcb007100u, 24, "reserved"},           /* 203.0.113.0/24 documentation */
    {0xe0000000u, 4, "multicast"},           /* 224.0.0.0/4 */
    {0xf0000000u, 4, "reserved"},            /* 240.0.0.0/4, broadcast included */
};

static const char *v4_kind(const unsigned char *a)
{
    uint32_t x = (uint32_t)a[0] << 24 | (uint32_t)a[1] << 16 | (uint32_t)a[2] << 8 | a[3];
    for (size_t i = 0; i < sizeof v4_internal / sizeof v4_internal[0]; i++) {
        uint32_t mask = 0xffffffffu << (32 - v4_internal[i].bits);
        if ((x & mask) == v4_internal[i].net)
            return v4_internal[i].kind;
    }
    return NULL;
}

static bool zeros(const unsigned char *a, int n)
{
    for (int i = 0; i < n; i++)
        if (a[i])
            return false;
    return true;
}

/* The IPv4 address an IPv4-mapped IPv6 address (::ffff:a.b.c.d) stands
 * for: the kernel connects to it as IPv4. NULL for any other. */
static const unsigned char *mapped_v4(const unsigned char *a)
{
    return zeros(a, 10) && a[10] == 0xff && a[11] == 0xff ? a + 12 : NULL;
}

static const char *v6_kind(const unsigned char *a)
{
    static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b};
    const unsigned char *v4 = mapped_v4(a);
    if (v4)
        return v4_kind(v4);
    if (zeros(a, 16))
        return "unspecified";
    if (zeros(a, 15) && a[15] == 1)
        return "loopback";
    if (zeros(a, 12))
        return "reserved"; /* ::a.b.c.d, the deprecated IPv4-compatible form */
    if (memcmp(a, nat64, 12) == 0)
        return v4_kind(a + 12); /* NAT64 translates to a + 12 */
    if (a[0] == 0x00 && a[1] == 0x64 && a[2] == 0xff && a[3] == 0x9b && a[4] == 0 && a[5] == 1)
        return "private"; /* 64:ff9b:1::/48, local-use NAT64 */
    if (a[0] == 0x01 && zeros(a + 1, 7))
        return "reserved"; /* 100::/64, discard */
    if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x0d && a[3] == 0xb8)
        return "reserved"; /* 2001:db8::/32, documentation */
    if (a[0] == 0x20 && a[1] == 0x02)
        return v4_kind(a + 2); /* 6to4: 2002:a.b.c.d::/48 */
    if ((a[0] & 0xfe) == 0xfc)
        return "private (unique local)"; /* fc00::/7 */
    if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
        return "link-local"; /* fe80::/10 */
    if (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0)
        return "private (site-local)"; /* fec0::/10, deprecated */
    if (a[0] == 0xff)
        return "multicast";
    return NULL;
}

const char *webhook_addr_kind(int family, const unsigned char *addr)
{
    return family == AF_INET ? v4_kind(addr) : family == AF_INET6 ? v6_kind(addr) : "reserved";
}

static bool in_range(const struct webhook_range *r, int family, const unsigned char *a)
{
    if (r->family != family)
        return false;
    int full = r->prefix / 8, rest = r->prefix % 8;
    if (memcmp(r->addr, a, (size_t)full) != 0)
        return false;
    if (!rest)
        return true;
    unsigned char mask = (unsigned char)(0xff << (8 - rest));
    return (r->addr[full] & mask) == (a[full] & mask);
}

const char *webhook_addr_refused(const struct webhook_allow *allow, int family,
                                 const unsigned char *addr)
{
    /* a mapped address is the IPv4 one, for the allowed ranges too */
    if (family == AF_INET6 && mapped_v4(addr)) {
        family = AF_INET;
        addr = mapped_v4(addr);
    }
    const char *kind = webhook_addr_kind(family, addr);
    if (!kind)
        return NULL;
    for (int i = 0; allow && i < allow->n; i++)
        if (in_range(&allow->r[i], family, addr))
            return NULL;
    return kind;
}

int webhook_range_parse(const char *cidr, struct webhook_range *out)
{
    char buf[INET6_ADDRSTRLEN + 8];
    if (!text_copy(buf, sizeof buf, cidr))
        return -1;
    memset(out, 0, sizeof *out);
    char *slash = strchr(buf, '/');
    if (slash)
        *slash = '\0';
    if (inet_pton(AF_INET, buf, out->addr) == 1)
        out->family = AF_INET;
    else if (inet_pton(AF_INET6, buf, out->addr) == 1)
        out->family = AF_INET6;
    else
        return -1;
    int bits = out->family == AF_INET ? 32 : 128;
    out->prefix = bits;
    if (slash) {
        char *end;
        long v = strtol(slash + 1, &end, 10);
        if (end == slash + 1 || *end || v < 0 || v > bits)
            return -1;
        out->prefix = (int)v;
    }
    return 0;
}

int webhook_allow_add(struct webhook_allow *allow, const char *cidr)
{
    if (allow->n >= WEBHOOK_ALLOW_MAX || webhook_range_parse(cidr, &allow->r[allow->n]) != 0)
        return -1;
    allow->n++;
    return 0;
}

/* The host of an http(s) URL into out: without user info, port, IPv6
 * brackets, zone or a trailing dot. false when it does not fit. */
static bool url_host(const char *url, char *out, size_t cap)
{
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    size_t n = strcspn(p, "/?#");
    const char *at = memrchr(p, '@', n);
    if (at) {
        n -= (size_t)(at + 1 - p);
        p = at + 1;
    }
    if (n && p[0] == '[') {
        const char *close = memchr(p, ']', n);
        if (!close)
            return false;
        p++;
        n = (size_t)(close - p);
        const char *zone = memchr(p, '%', n);
        if (zone)
            n = (size_t)(zone - p);
    } else {
        const char *colon = memchr(p, ':', n);
        if (colon)
            n = (size_t)(colon - p);
    }
    if (n && p[n - 1] == '.')
        n--;
    if (n >= cap)
        return false;
    memcpy(out, p, n);
    out[n] = '\0';
    return true;
}

bool webhook_url_refused(const struct webhook_allow *allow, const char *url, char *why,
                         size_t whycap)
{
    char host[256];
    unsigned char a[16];
    const char *kind = NULL;
    if (!url_host(url, host, sizeof host)) {
        text_copy(why, whycap, "url's host is not a host name or an address.");
        return true;
    }
    size_t n = strlen(host);
    struct in_addr v4;
    if (strcasecmp(host, "localhost") == 0 ||
        (n > 10 && strcasecmp(host + n - 10, ".localhost") == 0)) {
        static const unsigned char lo[4] = {127, 0, 0, 1};
        kind = webhook_addr_refused(allow, AF_INET, lo);
    } else if (inet_aton(host, &v4)) {
        /* every IPv4 spelling the resolver takes: 2130706433, 0x7f000001,
         * 0177.0.0.1, 127.1 */
        memcpy(a, &v4.s_addr, 4);
        kind = webhook_addr_refused(allow, AF_INET, a);
    } else if (inet_pton(AF_INET6, host, a) == 1) {
        kind = webhook_addr_refused(allow, AF_INET6, a);
    }
    if (!kind)
        return false;
    text_printf(why, whycap,
                "url's host is an internal address (%s); webhooks go only to public "
                "addresses (an operator may allow a range: serve --webhook-allow CIDR).",
                kind);
    return true;
}
