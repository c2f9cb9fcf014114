/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Address prefixes and policies: which addresses the storage agent may connect to for a storage
 * block that came with a request (not the host's own services or internal networks, unless the
 * operator allows them, docs/storage.md), and the addresses of this host, which a dify run's
 * network must not reach (docs/dify.md). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct AddressPrefix {
        int family;                   /* AF_INET or AF_INET6 */
        uint8_t bytes[16];
        unsigned length;              /* prefix length in bits */
} AddressPrefix;

typedef struct AddressPolicy {
        AddressPrefix *allowed;       /* SANDBOX_STORAGE_ALLOWED_NETWORKS */
        size_t n_allowed;
} AddressPolicy;

/* "127.0.0.1/32 10.0.0.0/8, fd00::/8" (a bare address is a single host), separated by spaces or
 * commas. -EINVAL names the bad entry in *ret_bad (a static buffer's worth: malloc'd). */
int address_policy_parse(const char *networks, AddressPolicy *ret, char **ret_bad);
void address_policy_done(AddressPolicy *p);

/* Loopback, unspecified, link-local, private (RFC 1918, shared 100.64/10, ULA), multicast,
 * broadcast and reserved ranges; IPv4-mapped and NAT64 addresses are judged by the IPv4 address
 * they carry. */
bool address_is_internal(const struct sockaddr *sa, socklen_t len);

/* Whether 'sa' may be connected to: not internal and not one of this host's own addresses,
 * unless inside one of the allowed networks. */
bool address_policy_permits(const AddressPolicy *p, const struct sockaddr *sa, socklen_t len);

/* Every address through which a packet reaches this host itself: the unspecified, loopback,
 * link-local, multicast and limited-broadcast ranges, then each address (a /32 or /128) and IPv4
 * broadcast address configured on an interface now. Appended to *list (n entries). */
int host_address_prefixes(AddressPrefix **list, size_t *n);
