/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Address prefixes and policies: which addresses the storage agent may connect to for a storage
 * block that came with a request (not the host's own services or internal networks, unless the
 * operator allows them, docs/storage.md), and what leads to this host — fixed ranges and what the
 * routing tables deliver locally — which a dify run's network must not reach (docs/dify.md). */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <linux/netlink.h>

typedef struct AddressPrefix {
        int family;                   /* AF_INET or AF_INET6 */
        uint8_t bytes[16];
        unsigned length;              /* prefix length in bits */
} AddressPrefix;

typedef struct AddressPolicy {
        AddressPrefix *allowed;       /* SANDBOX_STORAGE_ALLOWED_NETWORKS */
        size_t n_allowed;
} AddressPolicy;

/* Whether 'p' (the same family, bytes and length) is in the list; appends it when not (1; 0 when it
 * was there already). */
bool address_prefixes_contain(const AddressPrefix *list, size_t n, const AddressPrefix *p);
int address_prefixes_append(AddressPrefix **list, size_t *n, const AddressPrefix *p);

/* "127.0.0.1/32 10.0.0.0/8, fd00::/8" (a bare address is a single host), separated by spaces or
 * commas. -EINVAL names the bad entry in *ret_bad (a static buffer's worth: malloc'd). */
int address_policy_parse(const char *networks, AddressPolicy *ret, char **ret_bad);
void address_policy_done(AddressPolicy *p);

/* Loopback, unspecified, link-local, private (RFC 1918, shared 100.64/10, ULA), multicast,
 * broadcast and reserved ranges; IPv4-mapped and NAT64 addresses are judged by the IPv4 address
 * they carry. */
bool address_is_internal(const struct sockaddr *sa, socklen_t len);

/* What the kernel's routing table says about sending to an address: the same lookup a connect()
 * makes (`ip route get`), so it knows everything the host answers for itself — its interface
 * addresses, a prefix added to the loopback, a `local` route (AnyIP) — not only a list of addresses. */
typedef enum AddressRoute {
        ADDRESS_ROUTE_REMOTE,         /* unicast, out through an interface other than the loopback */
        ADDRESS_ROUTE_LOCAL,          /* to this host: a local route, or out through the loopback */
        ADDRESS_ROUTE_NOT_UNICAST,    /* broadcast, multicast, anycast and the like */
        ADDRESS_ROUTE_UNROUTABLE,     /* a blackhole, unreachable or prohibit route, or no route at all */
        _ADDRESS_ROUTE_MAX,
        _ADDRESS_ROUTE_INVALID = -EINVAL,
} AddressRoute;

/* How long a route lookup may wait for the kernel's answer (which the kernel queues before the
 * request's sendmsg() even returns: this bounds only the pathological case). */
#define ADDRESS_ROUTE_TIMEOUT_USEC (50U * 1000U)

/* One RTM_GETROUTE request on a NETLINK_ROUTE socket of its own, synchronously: the route of 'sa'
 * (AF_INET or AF_INET6; an IPv4-mapped address is looked up as the IPv4 address, as the kernel
 * sends it). A negative errno when the lookup itself failed (no netlink socket, a timeout, a reply
 * that is not one): then nothing is known, which is never a verdict. */
int address_route_lookup(const struct sockaddr *sa, socklen_t len);
const char *address_route_to_string(AddressRoute r);

/* Whether 'sa' may be connected to: 1 when it is inside one of the allowed networks, or neither
 * internal nor routed anywhere but out through a real interface (ADDRESS_ROUTE_REMOTE); 0 when it
 * is refused (*ret_route, when given, says why: the route, or _ADDRESS_ROUTE_INVALID for an
 * internal address); a negative errno when the route lookup failed (the caller must not connect,
 * nor take it for a refusal). NAT64 addresses are looked up as themselves and as the IPv4 address
 * they carry: both must be remote. */
int address_policy_check(const AddressPolicy *p, const struct sockaddr *sa, socklen_t len,
                         AddressRoute *ret_route);

/* The ranges that always lead to this host itself (or its link), whatever the routing tables say:
 * the unspecified, loopback, link-local, multicast and limited-broadcast ones. Appended to *list
 * (n entries). */
int host_address_prefixes(AddressPrefix **list, size_t *n);

/* Whether a route (an RTM_NEWROUTE or RTM_DELROUTE message, of a dump or a notification) leads to
 * this host: 1 with its destination prefix in *ret when its type is local, broadcast, anycast or
 * multicast, or when it is a unicast route out through a loopback interface (an interface that is
 * gone counts as one); 0 when not (another family, another type, a cached clone); -EBADMSG for a
 * malformed message. 'fd' is any socket, for the interface ioctls. */
int route_message_host_prefix(int fd, const struct nlmsghdr *h, AddressPrefix *ret);

/* How long a dump of the routing tables may take, at most. */
#define HOST_ROUTE_DUMP_TIMEOUT_USEC (2U * 1000U * 1000U)

/* Every prefix the routing tables (all of them, both families) deliver to this host, by
 * route_message_host_prefix(): a dump on a NETLINK_ROUTE socket of its own, synchronously.
 * Appended to *list (n entries), once each. */
int host_route_prefixes(AddressPrefix **list, size_t *n);
