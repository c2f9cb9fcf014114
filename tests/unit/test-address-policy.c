/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of the storage agent's address policy: internal ranges, mapped addresses, allowed networks. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "address-policy.h"
#include "macro.h"
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

static bool permits(const AddressPolicy *p, const char *s) {
        SockAddr a;
        socklen_t l = sockaddr_of(s, &a);
        return address_policy_permits(p, &a.sa, l);
}

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
        ASSERT_TRUE(permits(&none, "8.8.8.8"));
        ASSERT_TRUE(permits(NULL, "8.8.8.8"));

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

/* A public address of one of our interfaces is the host itself. */
static void test_own_addresses(void) {
        struct ifaddrs *list;
        AddressPolicy none = {};

        ASSERT_EQ(getifaddrs(&list), 0);
        for (struct ifaddrs *i = list; i; i = i->ifa_next) {
                if (!i->ifa_addr ||
                    (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
                        continue;
                socklen_t l = i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                                : sizeof(struct sockaddr_in6);
                ASSERT_TRUE(!address_policy_permits(&none, i->ifa_addr, l));
        }
        freeifaddrs(list);
}

static bool prefixes_have(const AddressPrefix *list, size_t n, int family, const void *bytes,
                          unsigned length) {
        for (size_t i = 0; i < n; i++)
                if (list[i].family == family && list[i].length == length &&
                    memcmp(list[i].bytes, bytes, family == AF_INET ? 4 : 16) == 0)
                        return true;
        return false;
}

/* What a dify run's scope denies: the fixed ranges and every interface address, once each. */
static void test_host_address_prefixes(void) {
        static const uint8_t zero[16], loopback4[4] = { 127 }, lla4[4] = { 169, 254 },
                                       bcast[4] = { 255, 255, 255, 255 };
        static const uint8_t lla6[16] = { 0xfe, 0x80 };
        AddressPrefix *list = NULL;
        struct ifaddrs *ifs;
        size_t n = 0;

        ASSERT_EQ(host_address_prefixes(&list, &n), 0);
        ASSERT_TRUE(prefixes_have(list, n, AF_INET, zero, 8));
        ASSERT_TRUE(prefixes_have(list, n, AF_INET, loopback4, 8));
        ASSERT_TRUE(prefixes_have(list, n, AF_INET, lla4, 16));
        ASSERT_TRUE(prefixes_have(list, n, AF_INET, bcast, 32));
        ASSERT_TRUE(prefixes_have(list, n, AF_INET6, zero, 127));
        ASSERT_TRUE(prefixes_have(list, n, AF_INET6, lla6, 10));

        ASSERT_EQ(getifaddrs(&ifs), 0);
        for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
                if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET)
                        ASSERT_TRUE(prefixes_have(list, n, AF_INET,
                                                  &((struct sockaddr_in *) i->ifa_addr)->sin_addr, 32));
                else if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET6)
                        ASSERT_TRUE(prefixes_have(list, n, AF_INET6,
                                                  &((struct sockaddr_in6 *) i->ifa_addr)->sin6_addr, 128));
        }
        freeifaddrs(ifs);
        for (size_t i = 0; i < n; i++)
                for (size_t j = i + 1; j < n; j++)
                        ASSERT_TRUE(memcmp(&list[i], &list[j], sizeof(AddressPrefix)) != 0);

        /* Appends to what the caller has. */
        size_t before = n;
        ASSERT_EQ(host_address_prefixes(&list, &n), 0);
        ASSERT_EQ(n, before);
        free(list);
}

int main(void) {
        RUN(test_internal);
        RUN(test_policy);
        RUN(test_own_addresses);
        RUN(test_host_address_prefixes);
        return 0;
}
