/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Address prefixes and policies: what the storage agent may connect to for a request's storage
 * block (docs/storage.md), and the addresses of this host that dify runs must not reach. */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "address-policy.h"
#include "macro.h"
#include "parse-util.h"
#include "string-table.h"
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

/* 64:ff9b::/96, the NAT64 well-known prefix. */
static const uint8_t nat64_prefix[12] = { 0x00, 0x64, 0xff, 0x9b };

static bool address_from_sockaddr(const struct sockaddr *sa, socklen_t len, Address *ret) {
        static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

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
                if (memcmp(b, mapped, 12) == 0 || memcmp(b, nat64_prefix, 12) == 0) {
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

static bool address_is_nat64(const struct sockaddr *sa) {
        return sa->sa_family == AF_INET6 && memcmp(((const struct sockaddr_in6 *) sa)->sin6_addr.s6_addr,
                                                   nat64_prefix, sizeof(nat64_prefix)) == 0;
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

/* One route lookup, one reply: the socket is ours alone and joins no multicast group, so what
 * arrives is the kernel's answer to our request (or nothing). */
#define ROUTE_REPLY_MAX 4096U
#define ROUTE_DUMP_BUFFER_SIZE (64U * 1024U)

typedef struct RouteAnswer {
        int error;                    /* the kernel's answer was an error: its errno (positive) */
        unsigned char type;           /* rtm_type */
        int oif;                      /* RTA_OIF, 0: none */
} RouteAnswer;

static int route_answer_parse(const uint8_t *buf, size_t n, uint32_t seq, RouteAnswer *ret) {
        const struct nlmsghdr *h = (const struct nlmsghdr *) buf;
        size_t left = n;

        for (; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
                if (h->nlmsg_seq != seq)
                        continue; /* not ours: never an answer */
                if (h->nlmsg_type == NLMSG_ERROR) {
                        const struct nlmsgerr *e = NLMSG_DATA(h);

                        /* An acknowledgement (0) is no answer to a route request. */
                        if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*e)) || e->error >= 0 || e->error == INT_MIN)
                                return -EBADMSG;
                        *ret = (RouteAnswer) { .error = -e->error };
                        return 1;
                }
                if (h->nlmsg_type != RTM_NEWROUTE || h->nlmsg_len < NLMSG_LENGTH(sizeof(struct rtmsg)))
                        return -EBADMSG;

                const struct rtmsg *rtm = NLMSG_DATA(h);
                RouteAnswer a = { .type = rtm->rtm_type };
                size_t attrs = h->nlmsg_len - NLMSG_LENGTH(sizeof(struct rtmsg));

                for (const struct rtattr *rta = RTM_RTA(rtm); RTA_OK(rta, attrs); rta = RTA_NEXT(rta, attrs))
                        if (rta->rta_type == RTA_OIF) {
                                if (RTA_PAYLOAD(rta) != sizeof(uint32_t))
                                        return -EBADMSG;
                                uint32_t oif;
                                memcpy(&oif, RTA_DATA(rta), sizeof(oif));
                                if (oif > INT_MAX)
                                        return -EBADMSG;
                                a.oif = (int) oif;
                        }
                *ret = a;
                return 1;
        }
        return 0;
}

/* Whether interface 'ifindex' is a loopback (IFF_LOOPBACK): what leaves through it comes back to
 * this host. The interface ioctls work on any socket, the netlink one included. */
static int interface_is_loopback(int fd, int ifindex) {
        struct ifreq ifr = { .ifr_ifindex = ifindex };

        if (ioctl(fd, SIOCGIFNAME, &ifr) < 0 || ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
                return -errno;
        return !!(ifr.ifr_flags & IFF_LOOPBACK);
}

/* Whether nexthop interface 'oif' of a route is a loopback. One that is gone is judged as one: the
 * caller then looks again (a dump), never less. */
static int route_oif_is_loopback(int fd, uint32_t oif) {
        int r;

        if (oif == 0 || oif > INT_MAX)
                return 0;
        r = interface_is_loopback(fd, (int) oif);
        return r == -ENODEV || r == -ENXIO ? 1 : r;
}

int route_message_host_prefix(int fd, const struct nlmsghdr *h, AddressPrefix *ret) {
        const struct rtmsg *rtm = NLMSG_DATA(h);
        AddressPrefix p = {};
        size_t attrs, size;
        bool host;
        int r;

        if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct rtmsg)))
                return -EBADMSG;
        if (rtm->rtm_family != AF_INET && rtm->rtm_family != AF_INET6)
                return 0;
        /* Cached clones of routes (IPv6 exceptions) lead where their route does. */
        if (rtm->rtm_flags & RTM_F_CLONED)
                return 0;
        switch (rtm->rtm_type) {
        case RTN_LOCAL:
        case RTN_BROADCAST:
        case RTN_ANYCAST:
        case RTN_MULTICAST:
                host = true;
                break;
        case RTN_UNICAST:
                host = false; /* unless it goes out through a loopback, below */
                break;
        default: /* blackhole, unreachable, prohibit, throw, nat: nothing is delivered */
                return 0;
        }
        size = rtm->rtm_family == AF_INET ? 4 : 16;
        if (rtm->rtm_dst_len > size * 8)
                return -EBADMSG;
        p = (AddressPrefix) { .family = rtm->rtm_family, .length = rtm->rtm_dst_len };
        attrs = h->nlmsg_len - NLMSG_LENGTH(sizeof(struct rtmsg));
        for (const struct rtattr *rta = RTM_RTA(rtm); RTA_OK(rta, attrs); rta = RTA_NEXT(rta, attrs)) {
                uint32_t oif;

                switch (rta->rta_type) {
                case RTA_DST:
                        if (RTA_PAYLOAD(rta) != size)
                                return -EBADMSG;
                        memcpy(p.bytes, RTA_DATA(rta), size);
                        break;
                case RTA_OIF:
                        if (RTA_PAYLOAD(rta) != sizeof(oif))
                                return -EBADMSG;
                        memcpy(&oif, RTA_DATA(rta), sizeof(oif));
                        r = host ? 0 : route_oif_is_loopback(fd, oif);
                        if (r < 0)
                                return r;
                        host = host || r > 0;
                        break;
                case RTA_MULTIPATH: {
                        const struct rtnexthop *nh = RTA_DATA(rta);
                        size_t left = RTA_PAYLOAD(rta);

                        while (!host && left >= sizeof(*nh) && nh->rtnh_len >= sizeof(*nh) &&
                               nh->rtnh_len <= left) {
                                r = route_oif_is_loopback(fd, (uint32_t) nh->rtnh_ifindex);
                                if (r < 0)
                                        return r;
                                host = r > 0;
                                if ((size_t) RTNH_ALIGN(nh->rtnh_len) >= left)
                                        break;
                                left -= RTNH_ALIGN(nh->rtnh_len);
                                nh = RTNH_NEXT(nh);
                        }
                        break;
                }
                default:
                        break;
                }
        }
        if (!host)
                return 0;
        /* The network, not a host inside it: one prefix, one entry. */
        for (unsigned i = p.length; i < size * 8; i++)
                p.bytes[i / 8] &= (uint8_t) ~(0x80U >> (i % 8));
        *ret = p;
        return 1;
}

/* A NETLINK_ROUTE socket of its own on which 'req' went to the kernel; each receive waits for
 * 'timeout' at most. */
static int netlink_route_request(const struct nlmsghdr *req, const struct timeval *timeout) {
        struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
        _cleanup_close_ int fd = -EBADF;

        fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
        if (fd < 0)
                return -errno;
        if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, timeout, sizeof(*timeout)) < 0)
                return -errno;
        if (sendto(fd, req, req->nlmsg_len, 0, (struct sockaddr *) &kernel, sizeof(kernel)) < 0)
                return -errno;
        return TAKE_FD(fd);
}

bool address_prefixes_contain(const AddressPrefix *list, size_t n, const AddressPrefix *p) {
        for (size_t i = 0; i < n; i++)
                if (list[i].family == p->family && list[i].length == p->length &&
                    memcmp(list[i].bytes, p->bytes, sizeof(p->bytes)) == 0)
                        return true;
        return false;
}

int address_prefixes_append(AddressPrefix **list, size_t *n, const AddressPrefix *p) {
        AddressPrefix *l;

        if (address_prefixes_contain(*list, *n, p))
                return 0;
        l = reallocarray(*list, *n + 1, sizeof(AddressPrefix));
        if (!l)
                return -ENOMEM;
        l[(*n)++] = *p;
        *list = l;
        return 1;
}

/* One datagram of a route dump: its routes to this host appended. 1 at the dump's end. */
static int route_dump_parse(int fd, const uint8_t *buf, size_t n, uint32_t seq, AddressPrefix **list,
                            size_t *n_list) {
        size_t left = n;

        for (const struct nlmsghdr *h = (const struct nlmsghdr *) buf; NLMSG_OK(h, left);
             h = NLMSG_NEXT(h, left)) {
                AddressPrefix p;
                int r;

                if (h->nlmsg_seq != seq)
                        continue;
                if (h->nlmsg_type == NLMSG_DONE)
                        return 1;
                if (h->nlmsg_type == NLMSG_ERROR) {
                        const struct nlmsgerr *e = NLMSG_DATA(h);

                        if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*e)) || e->error >= 0 || e->error == INT_MIN)
                                return -EBADMSG;
                        return e->error;
                }
                if (h->nlmsg_type != RTM_NEWROUTE)
                        continue;
                r = route_message_host_prefix(fd, h, &p);
                if (r > 0)
                        r = address_prefixes_append(list, n_list, &p);
                if (r < 0)
                        return r;
        }
        return 0;
}

int host_route_prefixes(AddressPrefix **list, size_t *n) {
        struct {
                struct nlmsghdr header;
                struct rtmsg rtm;
        } req = {
                .header = {
                        .nlmsg_len = NLMSG_LENGTH(sizeof(struct rtmsg)),
                        .nlmsg_type = RTM_GETROUTE,
                        .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP,
                        .nlmsg_seq = 1,
                },
                .rtm = { .rtm_family = AF_UNSPEC }, /* every family, every table */
        };
        struct timeval tv = { .tv_sec = HOST_ROUTE_DUMP_TIMEOUT_USEC / 1000000U };
        _cleanup_free_ uint8_t *buf = NULL;
        _cleanup_close_ int fd = -EBADF;
        int r = 0;

        assert(list);
        assert(n);

        buf = malloc(ROUTE_DUMP_BUFFER_SIZE);
        if (!buf)
                return -ENOMEM;
        fd = netlink_route_request(&req.header, &tv);
        if (fd < 0)
                return fd;
        while (r == 0) {
                ssize_t k = recv(fd, buf, ROUTE_DUMP_BUFFER_SIZE, MSG_TRUNC);

                if (k < 0)
                        r = errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
                else if ((size_t) k > ROUTE_DUMP_BUFFER_SIZE)
                        r = -EBADMSG; /* the kernel fills datagrams of its page size at most */
                else
                        r = route_dump_parse(fd, buf, (size_t) k, req.header.nlmsg_seq, list, n);
        }
        return r < 0 ? r : 0;
}

/* The route of one address (4 or 16 bytes), the way `ip route get` asks for it. */
static int route_lookup(int family, const uint8_t *bytes) {
        size_t size = family == AF_INET ? 4 : 16;
        struct {
                struct nlmsghdr header;
                struct rtmsg rtm;
                uint8_t attrs[RTA_SPACE(16)];
        } req = {
                .header = {
                        .nlmsg_len = NLMSG_LENGTH(sizeof(struct rtmsg)) + RTA_SPACE(size),
                        .nlmsg_type = RTM_GETROUTE,
                        .nlmsg_flags = NLM_F_REQUEST,
                        .nlmsg_seq = 1,
                },
                .rtm = { .rtm_family = (unsigned char) family, .rtm_dst_len = (unsigned char) (size * 8) },
        };
        struct rtattr *dst = (struct rtattr *) req.attrs;
        struct timeval tv = { .tv_usec = ADDRESS_ROUTE_TIMEOUT_USEC };
        struct sockaddr_nl from;
        _cleanup_close_ int fd = -EBADF;
        uint8_t buf[ROUTE_REPLY_MAX] __attribute__((aligned(NLMSG_ALIGNTO)));
        RouteAnswer answer = {};
        int r;

        dst->rta_type = RTA_DST;
        dst->rta_len = (unsigned short) RTA_LENGTH(size);
        memcpy(RTA_DATA(dst), bytes, size);

        fd = netlink_route_request(&req.header, &tv);
        if (fd < 0)
                return fd;
        /* A bounded number of datagrams, each within the timeout; anything else is a failure. */
        r = 0;
        for (unsigned i = 0; i < 4 && r == 0; i++) {
                socklen_t from_len = sizeof(from);
                ssize_t n = recvfrom(fd, buf, sizeof(buf), MSG_TRUNC, (struct sockaddr *) &from, &from_len);

                if (n < 0)
                        return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
                if ((size_t) n > sizeof(buf))
                        return -EBADMSG; /* truncated: a route answer is far smaller */
                if (from_len != sizeof(from) || from.nl_family != AF_NETLINK || from.nl_pid != 0)
                        continue; /* not the kernel's */
                r = route_answer_parse(buf, (size_t) n, req.header.nlmsg_seq, &answer);
                if (r < 0)
                        return r;
        }
        if (r == 0)
                return -ETIMEDOUT; /* nothing but others' datagrams */

        /* The kernel's own refusals: what it answers for a destination it would not send to.
         * EINVAL is a blackhole route's (our request itself is well-formed, see the unit test). */
        if (answer.error != 0) {
                /* No route at all (no default route, for a moment or for good) is no statement about
                 * the address: it is not this host, and the connect() fails as for any server that
                 * cannot be reached, a failure a retry may get past (502, an archive kept pending),
                 * never a refusal of the client's block. */
                if (answer.error == ENETUNREACH)
                        return ADDRESS_ROUTE_REMOTE;
                if (answer.error == EHOSTUNREACH || answer.error == EACCES || answer.error == EINVAL)
                        return ADDRESS_ROUTE_UNROUTABLE;
                return -answer.error;
        }
        switch (answer.type) {
        case RTN_LOCAL:
                return ADDRESS_ROUTE_LOCAL;
        case RTN_UNICAST:
                if (answer.oif <= 0)
                        return -EBADMSG; /* a unicast route leads through some interface */
                r = interface_is_loopback(fd, answer.oif);
                if (r < 0)
                        return r;
                return r > 0 ? ADDRESS_ROUTE_LOCAL : ADDRESS_ROUTE_REMOTE;
        case RTN_BLACKHOLE:
        case RTN_UNREACHABLE:
        case RTN_PROHIBIT:
        case RTN_THROW:
                return ADDRESS_ROUTE_UNROUTABLE;
        default: /* broadcast, multicast, anycast, nat, ... */
                return ADDRESS_ROUTE_NOT_UNICAST;
        }
}

int address_route_lookup(const struct sockaddr *sa, socklen_t len) {
        Address a;

        if (!address_from_sockaddr(sa, len, &a))
                return -EAFNOSUPPORT;
        /* An IPv4-mapped address is sent as IPv4: 'a' is that already. NAT64 ones are IPv6 on the wire. */
        if (sa->sa_family == AF_INET6 && a.family == AF_INET && address_is_nat64(sa))
                return route_lookup(AF_INET6, ((const struct sockaddr_in6 *) sa)->sin6_addr.s6_addr);
        return route_lookup(a.family, a.bytes);
}

static const char *const address_route_table[_ADDRESS_ROUTE_MAX] = {
        [ADDRESS_ROUTE_REMOTE] = "remote",
        [ADDRESS_ROUTE_LOCAL] = "local",
        [ADDRESS_ROUTE_NOT_UNICAST] = "not unicast",
        [ADDRESS_ROUTE_UNROUTABLE] = "unroutable",
};

DEFINE_STRING_TABLE_LOOKUP_TO_STRING(address_route, AddressRoute);

int address_policy_check(const AddressPolicy *p, const struct sockaddr *sa, socklen_t len,
                         AddressRoute *ret_route) {
        AddressRoute verdict = _ADDRESS_ROUTE_INVALID;
        Address a;
        int r;

        if (!address_from_sockaddr(sa, len, &a))
                goto refused;
        if (p && address_in(p->allowed, p->n_allowed, &a))
                return 1;
        if (address_in(internal_prefixes, ELEMENTSOF(internal_prefixes), &a))
                goto refused;
        r = address_route_lookup(sa, len);
        if (r < 0)
                return r;
        verdict = r;
        /* A NAT64 translator on this host would hand the IPv4 address inside to the host itself. */
        if (verdict == ADDRESS_ROUTE_REMOTE && address_is_nat64(sa)) {
                r = route_lookup(AF_INET, a.bytes);
                if (r < 0)
                        return r;
                verdict = r;
        }
        if (verdict == ADDRESS_ROUTE_REMOTE)
                return 1;
refused:
        if (ret_route)
                *ret_route = verdict;
        return 0;
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

int host_address_prefixes(AddressPrefix **list, size_t *n) {
        AddressPrefix *l;

        assert(list);
        assert(n);

        l = reallocarray(*list, *n + ELEMENTSOF(host_prefixes), sizeof(AddressPrefix));
        if (!l)
                return -ENOMEM;
        memcpy(l + *n, host_prefixes, sizeof(host_prefixes));
        *n += ELEMENTSOF(host_prefixes);
        *list = l;
        return 0;
}
