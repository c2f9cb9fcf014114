/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Address prefixes and policies: what the storage agent may connect to for a request's storage
 * block (docs/storage.md), and the addresses of this host that dify runs must not reach. */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "address-policy.h"
#include "macro.h"
#include "parse-util.h"
#include "string-util.h"

/* An address reduced to what is compared: IPv4-mapped IPv6 addresses become IPv4. */
typedef struct Address {
        int family;
        uint8_t bytes[16];
} Address;

#define V4(a, b, c, d, len) { AF_INET, { a, b, c, d }, len }
#define V6(a, b, len) { AF_INET6, { a, b }, len }

static const AddressPrefix internal_prefixes[] = {
        V4(0, 0, 0, 0, 8),        /* "this network", 0.0.0.0 */
        V4(10, 0, 0, 0, 8),       /* RFC 1918 */
        V4(100, 64, 0, 0, 10),    /* shared address space (carrier NAT; cloud metadata 100.100.100.200) */
        V4(127, 0, 0, 0, 8),      /* loopback */
        V4(169, 254, 0, 0, 16),   /* link-local (cloud metadata 169.254.169.254) */
        V4(172, 16, 0, 0, 12),    /* RFC 1918 */
        V4(192, 0, 0, 0, 24),     /* IETF protocol assignments */
        V4(192, 168, 0, 0, 16),   /* RFC 1918 */
        V4(198, 18, 0, 0, 15),    /* benchmarking */
        V4(224, 0, 0, 0, 4),      /* multicast */
        V4(240, 0, 0, 0, 4),      /* reserved, broadcast */
        V6(0x00, 0x00, 96),       /* ::, ::1, IPv4-compatible (deprecated) */
        V6(0xfc, 0x00, 7),        /* unique local (fd00:ec2::254 included) */
        V6(0xfe, 0x80, 10),       /* link-local */
        V6(0xfe, 0xc0, 10),       /* site-local (deprecated) */
        V6(0xff, 0x00, 8),        /* multicast */
};

static bool address_from_sockaddr(const struct sockaddr *sa, socklen_t len, Address *ret) {
        static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
        static const uint8_t nat64[12] = { 0x00, 0x64, 0xff, 0x9b };

        if (!sa)
                return false;
        if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
                *ret = (Address) { .family = AF_INET };
                memcpy(ret->bytes, &((const struct sockaddr_in *) sa)->sin_addr, 4);
                return true;
        }
        if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
                const uint8_t *b = ((const struct sockaddr_in6 *) sa)->sin6_addr.s6_addr;

                /* Both carry an IPv4 address the packets end up at. */
                if (memcmp(b, mapped, 12) == 0 || memcmp(b, nat64, 12) == 0) {
                        *ret = (Address) { .family = AF_INET };
                        memcpy(ret->bytes, b + 12, 4);
                } else {
                        *ret = (Address) { .family = AF_INET6 };
                        memcpy(ret->bytes, b, 16);
                }
                return true;
        }
        return false;
}

static bool prefix_contains(const AddressPrefix *p, const Address *a) {
        unsigned full = p->length / 8, rest = p->length % 8;

        if (p->family != a->family)
                return false;
        if (memcmp(p->bytes, a->bytes, full) != 0)
                return false;
        if (rest == 0)
                return true;
        uint8_t mask = (uint8_t) (0xff << (8 - rest));
        return (p->bytes[full] & mask) == (a->bytes[full] & mask);
}

static bool address_in(const AddressPrefix *prefixes, size_t n, const Address *a) {
        for (size_t i = 0; i < n; i++)
                if (prefix_contains(&prefixes[i], a))
                        return true;
        return false;
}

bool address_is_internal(const struct sockaddr *sa, socklen_t len) {
        Address a;

        /* What we cannot judge, we do not connect to. */
        if (!address_from_sockaddr(sa, len, &a))
                return true;
        return address_in(internal_prefixes, ELEMENTSOF(internal_prefixes), &a);
}

/* A public address configured on one of our interfaces still reaches the host's own services. */
static bool address_is_ours(const Address *a) {
        struct ifaddrs *list, *i;
        bool found = false;

        /* When the interfaces cannot be listed, err on the safe side. */
        if (getifaddrs(&list) < 0)
                return true;
        for (i = list; i && !found; i = i->ifa_next) {
                Address b;

                if (!i->ifa_addr)
                        continue;
                if (!address_from_sockaddr(i->ifa_addr,
                                           i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                                             : sizeof(struct sockaddr_in6),
                                           &b))
                        continue;
                found = b.family == a->family &&
                        memcmp(b.bytes, a->bytes, a->family == AF_INET ? 4 : 16) == 0;
        }
        freeifaddrs(list);
        return found;
}

bool address_policy_permits(const AddressPolicy *p, const struct sockaddr *sa, socklen_t len) {
        Address a;

        if (!address_from_sockaddr(sa, len, &a))
                return false;
        if (p && address_in(p->allowed, p->n_allowed, &a))
                return true;
        return !address_in(internal_prefixes, ELEMENTSOF(internal_prefixes), &a) && !address_is_ours(&a);
}

static int prefix_parse(const char *s, AddressPrefix *ret) {
        _cleanup_free_ char *addr = NULL;
        const char *slash = strchr(s, '/');
        AddressPrefix p = {};
        unsigned max;

        addr = slash ? strndup(s, (size_t) (slash - s)) : strdup(s);
        if (!addr)
                return -ENOMEM;
        if (inet_pton(AF_INET, addr, p.bytes) == 1)
                p.family = AF_INET;
        else if (inet_pton(AF_INET6, addr, p.bytes) == 1)
                p.family = AF_INET6;
        else
                return -EINVAL;
        max = p.family == AF_INET ? 32 : 128;
        p.length = max;
        if (slash) {
                uint64_t l;

                if (safe_atou64(slash + 1, &l) < 0 || l > max)
                        return -EINVAL;
                p.length = (unsigned) l;
        }
        *ret = p;
        return 0;
}

int address_policy_parse(const char *networks, AddressPolicy *ret, char **ret_bad) {
        _cleanup_free_ char *list = NULL;
        AddressPolicy p = {};
        char *save = NULL;
        int r;

        list = strdup(strempty(networks));
        if (!list)
                return -ENOMEM;
        for (char *e = strtok_r(list, " ,\t", &save); e; e = strtok_r(NULL, " ,\t", &save)) {
                AddressPrefix *n = reallocarray(p.allowed, p.n_allowed + 1, sizeof(AddressPrefix));

                if (!n) {
                        address_policy_done(&p);
                        return -ENOMEM;
                }
                p.allowed = n;
                r = prefix_parse(e, &p.allowed[p.n_allowed]);
                if (r < 0) {
                        if (r == -EINVAL && ret_bad)
                                *ret_bad = strdup(e);
                        address_policy_done(&p);
                        return r;
                }
                p.n_allowed++;
        }
        *ret = p;
        return 0;
}

void address_policy_done(AddressPolicy *p) {
        if (!p)
                return;
        p->allowed = mfree(p->allowed);
        p->n_allowed = 0;
}

/* Whatever the interfaces hold, these always lead to the host itself (or its link). */
static const AddressPrefix host_prefixes[] = {
        V4(0, 0, 0, 0, 8),        /* "this host": connect() to 0.0.0.0 reaches a local listener */
        V4(127, 0, 0, 0, 8),      /* loopback */
        V4(169, 254, 0, 0, 16),   /* link-local */
        V4(224, 0, 0, 0, 4),      /* multicast */
        { AF_INET, { 255, 255, 255, 255 }, 32 }, /* limited broadcast */
        V6(0x00, 0x00, 127),      /* :: and ::1 */
        V6(0xfe, 0x80, 10),       /* link-local */
        V6(0xff, 0x00, 8),        /* multicast */
};

static int prefixes_append(AddressPrefix **list, size_t *n, const AddressPrefix *p) {
        AddressPrefix *l;

        for (size_t i = 0; i < *n; i++)
                if (memcmp(&(*list)[i], p, sizeof(*p)) == 0)
                        return 0;
        l = reallocarray(*list, *n + 1, sizeof(AddressPrefix));
        if (!l)
                return -ENOMEM;
        l[(*n)++] = *p;
        *list = l;
        return 0;
}

static int prefixes_append_sockaddr(AddressPrefix **list, size_t *n, const struct sockaddr *sa) {
        AddressPrefix p = {};

        if (!sa)
                return 0;
        if (sa->sa_family == AF_INET) {
                p = (AddressPrefix) { .family = AF_INET, .length = 32 };
                memcpy(p.bytes, &((const struct sockaddr_in *) sa)->sin_addr, 4);
        } else if (sa->sa_family == AF_INET6) {
                p = (AddressPrefix) { .family = AF_INET6, .length = 128 };
                memcpy(p.bytes, &((const struct sockaddr_in6 *) sa)->sin6_addr, 16);
        } else
                return 0;
        return prefixes_append(list, n, &p);
}

int host_address_prefixes(AddressPrefix **list, size_t *n) {
        struct ifaddrs *ifs;
        int r = 0;

        assert(list);
        assert(n);

        for (size_t i = 0; i < ELEMENTSOF(host_prefixes); i++) {
                r = prefixes_append(list, n, &host_prefixes[i]);
                if (r < 0)
                        return r;
        }
        if (getifaddrs(&ifs) < 0)
                return -errno;
        for (struct ifaddrs *i = ifs; i && r >= 0; i = i->ifa_next) {
                r = prefixes_append_sockaddr(list, n, i->ifa_addr);
                if (r >= 0 && i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
                    (i->ifa_flags & IFF_BROADCAST))
                        r = prefixes_append_sockaddr(list, n, i->ifa_broadaddr);
        }
        freeifaddrs(ifs);
        return r;
}
