/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of the storage agent's address policy: internal ranges, mapped addresses, allowed networks,
 * and the kernel route lookup (on this host, and in a network namespace of its own for the routes only
 * an administrator can add). */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "address-policy.h"
#include "macro.h"
#include "netns.h"
#include "string-util.h"
#include "tests.h"

typedef union {
        struct sockaddr sa;
        struct sockaddr_in in;
        struct sockaddr_in6 in6;
} SockAddr;

static socklen_t sockaddr_of(const char *s, SockAddr *ret) {
        *ret = (SockAddr) {};
        if (inet_pton(AF_INET, s, &ret->in.sin_addr) == 1) {
                ret->in.sin_family = AF_INET;
                return sizeof(struct sockaddr_in);
        }
        ASSERT_EQ(inet_pton(AF_INET6, s, &ret->in6.sin6_addr), 1);
        ret->in6.sin6_family = AF_INET6;
        return sizeof(struct sockaddr_in6);
}

static bool internal(const char *s) {
        SockAddr a;
        socklen_t l = sockaddr_of(s, &a);
        return address_is_internal(&a.sa, l);
}

/* address_policy_check(): 1 permitted, 0 refused (*ret_route why), or the lookup's -errno. */
static int check(const AddressPolicy *p, const char *s, AddressRoute *ret_route) {
        SockAddr a;
        socklen_t l = sockaddr_of(s, &a);
        AddressRoute route = _ADDRESS_ROUTE_MAX; /* written only on refusal */
        int r = address_policy_check(p, &a.sa, l, &route);

        if (ret_route)
                *ret_route = route;
        return r;
}

static bool permits(const AddressPolicy *p, const char *s) {
        int r = check(p, s, NULL);

        ASSERT_TRUE(r >= 0);
        return r > 0;
}

static int route_of(const char *s) {
        SockAddr a;
        socklen_t l = sockaddr_of(s, &a);
        int r = address_route_lookup(&a.sa, l);

        if (r < 0 || r >= _ADDRESS_ROUTE_MAX)
                fprintf(stderr, "route lookup of %s: %d\n", s, r);
        return r;
}

#define ASSERT_ROUTE(addr, want)                                                            \
        do {                                                                                \
                int _r_ = route_of(addr);                                                   \
                if (_r_ != (want))                                                          \
                        fprintf(stderr, "%s: route %s, expected %s\n", (addr),              \
                                strna(address_route_to_string(_r_)),                        \
                                address_route_to_string(want));                             \
                ASSERT_EQ(_r_, (want));                                                     \
        } while (0)

static void test_internal(void) {
        static const char *const inside[] = {
                "0.0.0.0",
                "0.1.2.3",
                "10.0.0.1",
                "10.255.255.255",
                "100.64.0.1",
                "100.100.100.200",
                "127.0.0.1",
                "127.255.255.254",
                "169.254.169.254",
                "172.16.0.1",
                "172.31.255.255",
                "192.0.0.8",
                "192.168.1.1",
                "198.18.0.1",
                "224.0.0.1",
                "239.255.255.250",
                "240.0.0.1",
                "255.255.255.255",
                "::",
                "::1",
                "::127.0.0.1",
                "::ffff:127.0.0.1",
                "::ffff:10.1.2.3",
                "::ffff:169.254.169.254",
                "64:ff9b::7f00:1",
                "64:ff9b::a9fe:a9fe",
                "fc00::1",
                "fd00:ec2::254",
                "fdff::1",
                "fe80::1",
                "febf::1",
                "fec0::1",
                "ff02::1",
                "ff05::2",
        };
        static const char *const outside[] = {
                "1.1.1.1",         "8.8.8.8",        "9.255.255.255",    "11.0.0.0",
                "100.63.255.255",  "100.128.0.0",    "126.255.255.255",  "128.0.0.0",
                "169.253.255.255", "172.15.255.255", "172.32.0.0",       "192.167.255.255",
                "192.169.0.0",     "198.20.0.0",     "223.255.255.255",  "2001:4860:4860::8888",
                "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "fbff::1",
                "fe00::1",
        };

        for (size_t i = 0; i < ELEMENTSOF(inside); i++) {
                if (!internal(inside[i]))
                        fprintf(stderr, "not internal: %s\n", inside[i]);
                ASSERT_TRUE(internal(inside[i]));
        }
        for (size_t i = 0; i < ELEMENTSOF(outside); i++) {
                if (internal(outside[i]))
                        fprintf(stderr, "internal: %s\n", outside[i]);
                ASSERT_TRUE(!internal(outside[i]));
        }
        /* What can't be judged is internal. */
        struct sockaddr un = { .sa_family = AF_UNIX };
        ASSERT_TRUE(address_is_internal(&un, sizeof(un)));
        SockAddr a;
        (void) sockaddr_of("8.8.8.8", &a);
        ASSERT_TRUE(address_is_internal(&a.sa, sizeof(struct sockaddr_in) - 1));
}

static void test_policy(void) {
        AddressPolicy none = {}, p = {};
        char *bad = NULL;

        ASSERT_EQ(address_policy_parse("", &none, &bad), 0);
        ASSERT_EQ(none.n_allowed, 0);
        ASSERT_TRUE(!permits(&none, "127.0.0.1"));
        ASSERT_TRUE(!permits(&none, "::ffff:192.168.0.1"));
        /* Internal: refused before any route is looked up. */
        AddressRoute why;
        ASSERT_EQ(check(&none, "10.1.2.3", &why), 0);
        ASSERT_EQ(why, _ADDRESS_ROUTE_INVALID);
        ASSERT_EQ(check(NULL, "169.254.169.254", &why), 0);
        ASSERT_EQ(why, _ADDRESS_ROUTE_INVALID);

        ASSERT_EQ(address_policy_parse(" 127.0.0.1/32,10.1.0.0/16\tfd00::/8 ::1 192.168.7.7", &p, &bad), 0);
        ASSERT_EQ(p.n_allowed, 5);
        ASSERT_TRUE(permits(&p, "127.0.0.1"));
        ASSERT_TRUE(permits(&p, "::ffff:127.0.0.1")); /* mapped: judged as IPv4 */
        ASSERT_TRUE(!permits(&p, "127.0.0.2"));
        ASSERT_TRUE(permits(&p, "10.1.255.1"));
        ASSERT_TRUE(!permits(&p, "10.2.0.1"));
        ASSERT_TRUE(permits(&p, "fd12::1"));
        ASSERT_TRUE(!permits(&p, "fc00::1"));
        ASSERT_TRUE(permits(&p, "::1"));
        ASSERT_TRUE(permits(&p, "192.168.7.7"));
        ASSERT_TRUE(!permits(&p, "192.168.7.8"));
        address_policy_done(&p);
        address_policy_done(&p);

        ASSERT_EQ(address_policy_parse("0.0.0.0/0", &p, &bad), 0);
        ASSERT_TRUE(permits(&p, "127.0.0.1"));
        ASSERT_TRUE(!permits(&p, "::1"));
        /* The operator's word is taken over the route: this host's own public address too. */
        ASSERT_TRUE(permits(&p, "11.99.0.7"));
        address_policy_done(&p);

        static const char *const invalid[] = {
                "localhost",   "10.0.0.0/33", "::/129",     "10.0.0.0/",
                "10.0.0.0/-1", "10.0.0/8",    "1.2.3.4/8x", "127.0.0.1, nope"
        };
        for (size_t i = 0; i < ELEMENTSOF(invalid); i++) {
                bad = NULL;
                ASSERT_EQ(address_policy_parse(invalid[i], &p, &bad), -EINVAL);
                ASSERT_TRUE(bad != NULL);
                free(bad);
        }
}

/* This host: the loopback, its own addresses, broadcasts, and a public address. */
static void test_route_lookup(void) {
        struct ifaddrs *list;

        ASSERT_ROUTE("127.0.0.1", ADDRESS_ROUTE_LOCAL);
        ASSERT_ROUTE("127.0.0.2", ADDRESS_ROUTE_LOCAL);
        ASSERT_ROUTE("127.255.255.255", ADDRESS_ROUTE_NOT_UNICAST); /* the loopback's broadcast */
        ASSERT_ROUTE("::ffff:127.0.0.1", ADDRESS_ROUTE_LOCAL); /* sent as IPv4 */
        ASSERT_ROUTE("0.0.0.0", ADDRESS_ROUTE_LOCAL); /* connect() reaches local listeners */
        if (access("/proc/net/if_inet6", F_OK) >= 0) {
                ASSERT_ROUTE("::1", ADDRESS_ROUTE_LOCAL);
                ASSERT_ROUTE("2001:4860:4860::8888", ADDRESS_ROUTE_REMOTE);
        } else
                printf("# IPv6 is disabled on this host: the IPv6 lookups are not made\n");
        /* With a default route, a public address leaves through it; without one, it goes nowhere,
         * which is no refusal either: the connect() fails as for any unreachable server. */
        ASSERT_ROUTE("8.8.8.8", ADDRESS_ROUTE_REMOTE);

        /* Every address of every interface (a public one included: this VM's is 192.0.2.2, outside the
         * internal ranges) is this host, and so is each IPv4 broadcast address. */
        ASSERT_EQ(getifaddrs(&list), 0);
        for (struct ifaddrs *i = list; i; i = i->ifa_next) {
                char text[INET6_ADDRSTRLEN];

                if (!i->ifa_addr ||
                    (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6) ||
                    !(i->ifa_flags & IFF_UP))
                        continue;
                socklen_t l = i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                                : sizeof(struct sockaddr_in6);
                const void *bytes =
                        i->ifa_addr->sa_family == AF_INET
                                ? (const void *) &((struct sockaddr_in *) i->ifa_addr)->sin_addr
                                : (const void *) &((struct sockaddr_in6 *) i->ifa_addr)->sin6_addr;
                ASSERT_TRUE(inet_ntop(i->ifa_addr->sa_family, bytes, text, sizeof(text)) != NULL);
                ASSERT_ROUTE(text, ADDRESS_ROUTE_LOCAL);
                ASSERT_EQ(address_policy_check(NULL, i->ifa_addr, l, NULL), 0);
                /* A /31 or /32 has no broadcast address of its own (the kernel reports the address). */
                if (i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_BROADCAST) &&
                    i->ifa_broadaddr && i->ifa_netmask &&
                    ntohl(((struct sockaddr_in *) i->ifa_netmask)->sin_addr.s_addr) < 0xfffffffeU) {
                        ASSERT_TRUE(inet_ntop(AF_INET, &((struct sockaddr_in *) i->ifa_broadaddr)->sin_addr,
                                              text, sizeof(text)) != NULL);
                        ASSERT_ROUTE(text, ADDRESS_ROUTE_NOT_UNICAST);
                }
        }
        freeifaddrs(list);

        /* A public address is permitted whether or not a route leads to it now. */
        AddressPolicy none = {};
        AddressRoute why;
        ASSERT_EQ(check(&none, "8.8.8.8", &why), 1);
        /* NAT64: looked up as itself and as the IPv4 address inside. */
        if (access("/proc/net/if_inet6", F_OK) >= 0)
                ASSERT_EQ(check(&none, "64:ff9b::808:808", NULL), 1);

        /* Not a socket address of ours: no lookup at all. */
        struct sockaddr un = { .sa_family = AF_UNIX };
        ASSERT_EQ(address_route_lookup(&un, sizeof(un)), -EAFNOSUPPORT);
        ASSERT_EQ(address_policy_check(&none, &un, sizeof(un), &why), 0);
}

/* When the lookup itself fails, the answer is the error: never a verdict either way. */
static void test_route_lookup_failure(void) {
        pid_t pid = fork();

        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                /* No file descriptor left for the netlink socket. */
                struct rlimit rl = { 3, 3 };
                for (int fd = 3; fd < 1024; fd++)
                        (void) close(fd);
                ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
                ASSERT_EQ(route_of("8.8.8.8"), -EMFILE);
                ASSERT_EQ(check(NULL, "8.8.8.8", NULL), -EMFILE);
                ASSERT_EQ(check(NULL, "192.0.2.2", NULL), -EMFILE);
                /* Internal addresses and allowed networks need no lookup. */
                ASSERT_EQ(check(NULL, "127.0.0.1", NULL), 0);
                AddressPolicy p = {};
                ASSERT_EQ(address_policy_parse("11.0.0.0/8", &p, NULL), 0);
                ASSERT_EQ(check(&p, "11.1.2.3", NULL), 1);
                address_policy_done(&p);
                _exit(EXIT_SUCCESS);
        }
        int status;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static const char *ip_tool(void) {
        static const char *const paths[] = { "/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip" };

        for (size_t i = 0; i < ELEMENTSOF(paths); i++)
                if (access(paths[i], X_OK) >= 0)
                        return paths[i];
        return NULL;
}

static const char *ip_tool_path;

static void ip(const char *args) {
        _cleanup_free_ char *cmd = NULL;

        ASSERT_TRUE(asprintf(&cmd, "%s %s", ip_tool_path, args) > 0);
        if (system(cmd) != 0) {
                fprintf(stderr, "failed: %s\n", cmd);
                abort();
        }
}

static bool prefixes_have(const AddressPrefix *list, size_t n, int family, const void *bytes,
                          unsigned length) {
        for (size_t i = 0; i < n; i++)
                if (list[i].family == family && list[i].length == length &&
                    memcmp(list[i].bytes, bytes, family == AF_INET ? 4 : 16) == 0)
                        return true;
        return false;
}

/* What only an administrator can set up, in a network namespace of our own (a user namespace
 * makes it possible unprivileged): a prefix on the loopback, a local (AnyIP) route, and routes
 * that lead nowhere. None of these addresses is internal: only the route tells. */
static void namespace_checks(void) {
        ip("link set lo up");
        ip("addr add 11.99.0.1/24 dev lo");
        ip("route add local 11.98.0.0/24 dev lo");
        ip("route add 11.97.0.0/24 dev lo");
        ip("route add blackhole 11.1.0.0/16");
        ip("route add unreachable 11.2.0.0/16");
        ip("route add prohibit 11.3.0.0/16");

        ASSERT_ROUTE("11.99.0.1", ADDRESS_ROUTE_LOCAL);
        ASSERT_ROUTE("11.99.0.7", ADDRESS_ROUTE_LOCAL); /* inside the prefix on lo */
        ASSERT_ROUTE("11.98.0.5", ADDRESS_ROUTE_LOCAL); /* AnyIP */
        ASSERT_ROUTE("11.97.0.5", ADDRESS_ROUTE_LOCAL); /* unicast, out through the loopback */
        ASSERT_ROUTE("11.99.0.255", ADDRESS_ROUTE_NOT_UNICAST);
        ASSERT_ROUTE("11.1.0.1", ADDRESS_ROUTE_UNROUTABLE);
        ASSERT_ROUTE("11.2.0.1", ADDRESS_ROUTE_UNROUTABLE);
        ASSERT_ROUTE("11.3.0.1", ADDRESS_ROUTE_UNROUTABLE);
        ASSERT_ROUTE("8.8.8.8", ADDRESS_ROUTE_REMOTE); /* no route at all: not this host */
        ASSERT_ROUTE("::ffff:11.98.0.5", ADDRESS_ROUTE_LOCAL);

        AddressPolicy none = {}, allowed = {};
        AddressRoute why;
        ASSERT_EQ(check(&none, "11.99.0.7", &why), 0);
        ASSERT_EQ(why, ADDRESS_ROUTE_LOCAL);
        ASSERT_EQ(check(&none, "::ffff:11.98.0.5", &why), 0);
        ASSERT_EQ(why, ADDRESS_ROUTE_LOCAL);
        /* 64:ff9b::11.98.0.5: no IPv6 route, and the IPv4 address inside is this host's */
        ASSERT_EQ(check(&none, "64:ff9b::b62:5", &why), 0);
        ASSERT_EQ(why, ADDRESS_ROUTE_LOCAL);
        ASSERT_EQ(check(&none, "11.2.0.1", &why), 0);
        ASSERT_EQ(why, ADDRESS_ROUTE_UNROUTABLE);
        ASSERT_EQ(address_policy_parse("11.98.0.0/24", &allowed, NULL), 0);
        ASSERT_EQ(check(&allowed, "11.98.0.5", NULL), 1);
        ASSERT_EQ(check(&allowed, "11.99.0.7", NULL), 0);
        address_policy_done(&allowed);

        /* A NAT64 address whose IPv6 route leaves through a real interface is still refused
         * when the IPv4 address inside is this host's (a translator here would deliver it). */
        _cleanup_free_ char *dummy = NULL;
        ASSERT_TRUE(asprintf(&dummy, "%s link add sb0 type dummy 2>/dev/null", ip_tool_path) > 0);
        if (system(dummy) != 0) /* no dummy module: a veth pair does as well */
                ip("link add sb0 type veth peer name sb1");
        ip("link set sb0 up");
        ip("-6 addr add fd99::1/64 dev sb0 nodad");
        ip("-6 route add 64:ff9b::/96 via fd99::2 dev sb0");
        ASSERT_ROUTE("64:ff9b::b62:5", ADDRESS_ROUTE_REMOTE);
        ASSERT_EQ(check(&none, "64:ff9b::b62:5", &why), 0);
        ASSERT_EQ(why, ADDRESS_ROUTE_LOCAL);
        /* ... and allowed when the address inside is not (no route to it here: no refusal). */
        ASSERT_EQ(check(&none, "64:ff9b::808:808", &why), 1);

        /* What the routing tables deliver here, as a dify run's filter denies it: prefixes, not
         * addresses; nothing that leaves through a real interface or is not delivered at all. */
        static const uint8_t p99[4] = { 11, 99 }, p98[4] = { 11, 98 }, p97[4] = { 11, 97 },
                             p1[4] = { 11, 1 }, lo4[4] = { 127 }, a6[16] = { 0xfd, 0x99, [15] = 1 },
                             n6[16] = { 0xfd, 0x99 }, lo6[16] = { [15] = 1 };
        AddressPrefix *routes = NULL;
        size_t n = 0, before;
        /* The kernel installs an IPv6 address's local route from a work queue, a moment after
         * "ip addr add" returned: wait for it (at most 5 s) rather than race it. */
        for (unsigned i = 0;; i++) {
                ASSERT_EQ(host_route_prefixes(&routes, &n), 0);
                if (prefixes_have(routes, n, AF_INET6, a6, 128) || i >= 250)
                        break;
                routes = mfree(routes);
                n = 0;
                (void) usleep(20 * 1000);
        }
        ASSERT_TRUE(prefixes_have(routes, n, AF_INET, p99, 24));  /* the prefix on lo */
        ASSERT_TRUE(prefixes_have(routes, n, AF_INET, p98, 24));  /* local (AnyIP) */
        ASSERT_TRUE(prefixes_have(routes, n, AF_INET, p97, 24));  /* unicast out through lo */
        ASSERT_TRUE(prefixes_have(routes, n, AF_INET, lo4, 8));
        ASSERT_TRUE(prefixes_have(routes, n, AF_INET6, a6, 128)); /* sb0's address */
        ASSERT_TRUE(prefixes_have(routes, n, AF_INET6, lo6, 128));
        ASSERT_TRUE(!prefixes_have(routes, n, AF_INET6, n6, 64)); /* sb0's network: out there */
        ASSERT_TRUE(!prefixes_have(routes, n, AF_INET, p1, 16));  /* a blackhole delivers nothing */
        for (size_t i = 0; i < n; i++)
                for (size_t j = i + 1; j < n; j++)
                        ASSERT_TRUE(memcmp(&routes[i], &routes[j], sizeof(AddressPrefix)) != 0);
        before = n;
        ASSERT_EQ(host_route_prefixes(&routes, &n), 0);
        ASSERT_EQ(n, before);
        free(routes);
}

static void test_route_lookup_namespace(void) {
        ip_tool_path = ip_tool();
        if (!ip_tool_path) {
                printf("# SKIP test_route_lookup_namespace: no ip(8) to set up routes with\n");
                return;
        }
        if (netns_run(NULL, namespace_checks) == NETNS_UNAVAILABLE)
                printf("# SKIP test_route_lookup_namespace: no network namespace to be had\n");
}

/* The fixed ranges a dify run's network never reaches, whatever the routes (net-filter.c adds
 * those): appended to what the caller has, once each. */
static void test_host_address_prefixes(void) {
        static const uint8_t zero[16], loopback4[4] = { 127 }, lla4[4] = { 169, 254 },
                                       bcast[4] = { 255, 255, 255, 255 };
        static const uint8_t lla6[16] = { 0xfe, 0x80 };
        AddressPrefix *list = NULL;
        size_t n = 0, before;

        ASSERT_EQ(host_address_prefixes(&list, &n), 0);
        ASSERT_TRUE(prefixes_have(list, n, AF_INET, zero, 8));
        ASSERT_TRUE(prefixes_have(list, n, AF_INET, loopback4, 8));
        ASSERT_TRUE(prefixes_have(list, n, AF_INET, lla4, 16));
        ASSERT_TRUE(prefixes_have(list, n, AF_INET, bcast, 32));
        ASSERT_TRUE(prefixes_have(list, n, AF_INET6, zero, 127));
        ASSERT_TRUE(prefixes_have(list, n, AF_INET6, lla6, 10));
        for (size_t i = 0; i < n; i++)
                for (size_t j = i + 1; j < n; j++)
                        ASSERT_TRUE(memcmp(&list[i], &list[j], sizeof(AddressPrefix)) != 0);

        /* Appends to what the caller has. */
        before = n;
        ASSERT_EQ(host_address_prefixes(&list, &n), 0);
        ASSERT_EQ(n, 2 * before);
        ASSERT_EQ(memcmp(list, list + before, before * sizeof(AddressPrefix)), 0);
        free(list);
}

int main(void) {
        RUN(test_internal);
        RUN(test_policy);
        RUN(test_route_lookup);
        RUN(test_route_lookup_failure);
        RUN(test_route_lookup_namespace);
        RUN(test_host_address_prefixes);
        return 0;
}
