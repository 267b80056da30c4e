/* webhook_target.h - where a webhook may be sent: the rule against
 * server-side request forgery (docs/security.md, "Webhooks").
 *
 * An account's webhook URL must not reach the service itself or the
 * network behind it, so an address that is loopback, private, shared
 * (carrier-grade NAT), link-local (the cloud metadata address among
 * them), unspecified, multicast or reserved is refused, in whatever
 * spelling it comes: IPv4 in decimal, hex, octal or shortened forms, and
 * IPv4 inside IPv6 (mapped ::ffff:a.b.c.d, NAT64 64:ff9b::/96, 6to4
 * 2002::/16). An operator may allow internal ranges explicitly
 * (`serve --webhook-allow CIDR`): an address inside one of them is
 * allowed whatever its kind.
 *
 * The rule is applied twice: to the URL's host when the webhook is
 * registered (a literal address, or the name localhost), and to every
 * address a try connects to, after name resolution (webhook_delivery.c),
 * so a name that resolves to an internal address is refused too.
 */
#ifndef ALALLO_CONTROL_WEBHOOK_TARGET_H
#define ALALLO_CONTROL_WEBHOOK_TARGET_H

#include <stdbool.h>
#include <stddef.h>

#define WEBHOOK_ALLOW_MAX 16 /* --webhook-allow ranges at most */

/* An address range: family AF_INET (4 bytes of addr used) or AF_INET6. */
struct webhook_range {
    int family;
    unsigned char addr[16];
    int prefix; /* leading bits that must match */
};

/* The ranges an operator allowed. Zero-initialised: none. */
struct webhook_allow {
    int n;
    struct webhook_range r[WEBHOOK_ALLOW_MAX];
};

/* Parses "ADDR/BITS" or a bare ADDR (all bits), IPv4 dotted or IPv6.
 * 0, or -1 for anything else (a prefix past the family's bits, bits set
 * past the prefix are fine and ignored). */
int webhook_range_parse(const char *cidr, struct webhook_range *out /* OUT */);

/* Adds cidr to allow. 0, or -1 (unparsable or WEBHOOK_ALLOW_MAX reached). */
int webhook_allow_add(struct webhook_allow *allow, const char *cidr);

/* The kind of internal address addr is ("loopback", "private",
 * "link-local", ...), or NULL for a public one. family is AF_INET (addr
 * holds 4 bytes, network order) or AF_INET6 (16 bytes). */
const char *webhook_addr_kind(int family, const unsigned char *addr);

/* NULL when a webhook may connect to addr (public, or inside one of
 * allow's ranges; allow may be NULL); else its kind, as above. */
const char *webhook_addr_refused(const struct webhook_allow *allow, int family,
                                 const unsigned char *addr);

/* The registration check of url's host (url already known to be http://
 * or https:// with a host). true when refused, with the reason for the
 * user in why. A host name other than localhost passes: its addresses
 * are checked at each try. */
bool webhook_url_refused(const struct webhook_allow *allow, const char *url, char *why,
                         size_t whycap);

#endif
